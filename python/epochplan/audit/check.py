"""The exactly-once audit of a run's consumption logs.

Over every log of a directory (every process of every run, resumed on any
world size), the audit keeps each process's records up to its last commit
(the checkpoint a resume starts from), and checks, epoch by epoch, that the
samples consumed are exactly the samples planned: none twice (a bitmap of
the epoch's positions, N/8 bytes an epoch), none missing from the steps the run covered,
and each in the step its plan puts it in. Every violation is named: the
sample, where it was planned and where it was seen.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._native import EpochPlan, Mixture, MixtureEpoch, Selection
from epochplan._space_spec import store_size
from epochplan.audit.log import gather_log_ids, log_headers, scan_log

__all__ = ["AuditReport", "Sighting", "Violation", "audit"]

_PLACEMENT_KEYS = ("epoch", "cursor")


@dataclass(frozen=True)
class Sighting:
    """Where a sample was consumed: the log file, epoch, step and rank."""

    file: str
    epoch: int
    step: int
    rank: int


@dataclass(frozen=True)
class Violation:
    """A sample consumed twice (``"duplicate"``), never (``"missing"``) or in
    another step than planned (``"misplaced"``); ``planned_step`` is -1 for
    a sample its epoch does not hold."""

    kind: str
    sample: int
    epoch: int
    planned_step: int
    seen: tuple[Sighting, ...] = ()


@dataclass
class AuditReport:
    """What :func:`audit` found. ``ok`` when nothing was consumed twice,
    missed or misplaced."""

    files: int
    start: tuple[int, int]
    end: tuple[int, int]
    expected: int = 0
    consumed: int = 0
    rolled_back: int = 0
    duplicates: int = 0
    missing: int = 0
    misplaced: int = 0
    violations: list[Violation] = field(default_factory=list)
    torn: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not (self.duplicates or self.missing or self.misplaced)

    def summary(self) -> str:
        """A few lines for people: the range covered, the counts, the first
        violations."""
        (e0, s0), (e1, s1) = self.start, self.end
        lines = [
            f"{self.files} logs, epoch {e0} step {s0} to epoch {e1} step {s1}: "
            f"{self.consumed:,} samples consumed of {self.expected:,} planned "
            f"({self.rolled_back:,} rolled back by resumes)",
            f"duplicates {self.duplicates:,}, missing {self.missing:,}, "
            f"misplaced {self.misplaced:,}: " + ("exactly once" if self.ok else "VIOLATED"),
        ]
        lines += [f"torn: {t}" for t in self.torn]
        for v in self.violations[:20]:
            seen = "; ".join(
                f"epoch {s.epoch} step {s.step} rank {s.rank} ({Path(s.file).name})" for s in v.seen
            )
            lines.append(
                f"{v.kind}: sample {v.sample} of epoch {v.epoch}, planned in step "
                f"{v.planned_step}" + (f", seen in {seen}" if seen else "")
            )
        return "\n".join(lines)


@dataclass
class _Log:
    path: Path
    header: dict[str, Any]
    #: Every record, as the arrays of :func:`~epochplan.audit.log.scan_log`.
    records: dict[str, Any]
    commit: tuple[int, int] | None = None
    commit_offset: int = -1


def audit(
    directory: str | os.PathLike[str],
    *,
    space: Selection | Mixture | None = None,
    lengths: Any = None,
    loss_tokens: Any = None,
    limit: int = 100,
) -> AuditReport:
    """Audits the consumption logs of ``directory`` (see
    :class:`~epochplan.audit.ConsumptionLog`): every sample of every step the
    run covered consumed exactly once, in its planned step.

    Args:
        directory: the logs of every process of the run (``*.eplog``).
        space: the plan's index space, as the plan had it (a state holds
            only its digest).
        lengths, loss_tokens: a token plan's arrays, as the plan had them.
        limit: the most violations of each kind listed (all are counted).

    A plan over a :class:`~epochplan.Mixture` may hold a sample more than
    once an epoch (a source taken in more than one pass): its steps are
    compared as multisets, each step's ids consumed against its ids
    planned, a batch of steps at a time (memory: the ids of those steps);
    every other plan's with a bitmap of its positions (N/8 bytes an epoch).

    Raises:
        ValueError: no logs, logs of different plans, or a corrupt record
            (a torn last record is reported, not raised).
        TypeError: a plan over a mixture audited without its ``space``.
    """
    logs, torn = _scan(Path(directory))
    plans = _Plans(logs, space, lengths, loss_tokens)
    starts = [plans.position_of(log.header["plan"]) for log in logs]
    commits = [log.commit for log in logs if log.commit is not None]
    start = min(starts)
    end = max(commits) if commits else start
    report = AuditReport(len(logs), start, end, torn=torn)
    if plans.mixture:
        _tally_by_step(plans, logs, start, end, report, limit)
        return report
    tally = _Tally(plans, report, limit)
    for log in logs:
        report.rolled_back += _rolled_back(log)
        for batch in _kept_batches(log, tally.BATCH_IDS):
            tally.consume(log, batch)
    duplicates = tally.duplicates
    _find_missing(plans, tally, start, end, report, limit)
    if duplicates:
        _describe_duplicates(plans, logs, duplicates, report)
    return report


def _scan(directory: Path) -> tuple[list[_Log], list[str]]:
    """Every log's header and last commit, and the torn records."""
    paths = sorted(directory.glob("*.eplog"))
    if not paths:
        raise ValueError(f"{directory}: no consumption logs (*.eplog)")
    logs, torn = [], []
    for path in paths:
        records = scan_log(path)
        if records["torn"] is not None:
            torn.append(f"{path}: {records['torn']}")
        kinds = records["kinds"]
        if len(kinds) == 0:
            # Killed before its header was written: it holds nothing.
            if records["torn"] is None:
                torn.append(f"{path}: a log without its header (nothing recorded)")
            continue
        if kinds[0] != ord("H"):
            raise ValueError(f"{path}: the first record is not the log's header")
        # The header from the scan's records: the log is not read again.
        log = _Log(path, log_headers(path, records)[0], records)
        commits = np.flatnonzero(kinds == ord("C"))
        if len(commits):
            last = commits[-1]
            log.commit = (int(records["epochs"][last]), int(records["steps"][last]))
            log.commit_offset = int(records["offsets"][last])
        logs.append(log)
    if not logs:
        raise ValueError(f"{directory}: no consumption log holds its header: {torn[0]}")
    return logs, torn


def _step_records(log: _Log) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.bool_]]:
    """The indices of a log's step records before its last commit, and which
    of them the run kept (those before the position the commit resumes at;
    a log without a commit kept none)."""
    records = log.records
    chosen = records["kinds"] == ord("B")
    if log.commit_offset >= 0:
        chosen &= records["offsets"] < log.commit_offset
    index = np.flatnonzero(chosen)
    if log.commit is None:
        return index, np.zeros(len(index), dtype=bool)
    epochs, steps = records["epochs"][index], records["steps"][index]
    (epoch, step) = log.commit
    return index, (epochs < epoch) | ((epochs == epoch) & (steps < step))


def _rolled_back(log: _Log) -> int:
    """The ids a log recorded that a resume rolled back."""
    index, kept = _step_records(log)
    return int(log.records["id_counts"][index[~kept]].sum())


@dataclass
class _Batch:
    """Ids of a log's kept records of one epoch: record ``k`` holds the next
    ``counts[k]`` ids, consumed in step ``steps[k]``."""

    epoch: int
    ids: npt.NDArray[np.int64]
    steps: npt.NDArray[np.int64]
    counts: npt.NDArray[np.uint64]

    @functools.cached_property
    def _ends(self) -> npt.NDArray[np.uint64]:
        """Where each record's ids end."""
        return np.cumsum(self.counts)

    def step_of(self, i: int) -> int:
        """The step ``ids[i]`` was consumed in."""
        return int(self.steps[int(np.searchsorted(self._ends, i, side="right"))])


def _kept_batches(log: _Log, batch_ids: int) -> Iterator[_Batch]:
    """The kept records' ids and steps, one epoch at a time, in batches of
    about ``batch_ids`` ids (each a read of the log by the core)."""
    index, kept = _step_records(log)
    index = index[kept]
    if len(index) == 0:
        return
    records = log.records
    epochs = records["epochs"][index].astype(np.int64)
    counts = records["id_counts"][index]  # uint64, as the core reads them
    ends = np.cumsum(counts.astype(np.int64))
    batch = (ends - counts.astype(np.int64)) // batch_ids
    cuts = np.flatnonzero((epochs[1:] != epochs[:-1]) | (batch[1:] != batch[:-1])) + 1
    for start, end in zip(np.r_[0, cuts], np.r_[cuts, len(index)], strict=True):
        chosen = index[start:end]
        ids = gather_log_ids(log.path, records["id_offsets"][chosen], counts[start:end])
        steps = records["steps"][chosen].astype(np.int64)
        yield _Batch(int(epochs[start]), ids, steps, counts[start:end])


def _common(state: dict[str, Any]) -> dict[str, Any]:
    """What every log of one run shares of its plan's state: all but the
    position, and for a mixture its sources' passes (which each epoch
    continues)."""
    common = {k: v for k, v in state.items() if k not in _PLACEMENT_KEYS}
    if isinstance(common.get("space"), dict) and "consumed" in common["space"]:
        common["space"] = {k: v for k, v in common["space"].items() if k != "consumed"}
    return common


class _Plans:
    """The run's plan, epoch by epoch, from the logs' headers."""

    def __init__(self, logs: list[_Log], space: Any, lengths: Any, loss_tokens: Any) -> None:
        states = [log.header["plan"] for log in logs]
        for log, state in zip(logs[1:], states[1:], strict=True):
            if _common(state) != _common(states[0]):
                raise ValueError(
                    f"{log.path} and {logs[0].path} log different plans: "
                    "audit the logs of one run (one plan) at a time"
                )
        # The earliest state: a mixture's later epochs continue its passes.
        self._state = min(states, key=lambda st: (int(st["epoch"]), int(st["cursor"])))
        self.mixture = isinstance(self._state.get("space"), dict) and (
            self._state["space"].get("kind") == "mixture"
        )
        if self.mixture and not isinstance(space, Mixture):
            raise TypeError("space must be the plan's Mixture: the logs are of a plan over one")
        self._args = {"space": space, "lengths": lengths, "loss_tokens": loss_tokens}
        self._plans: dict[int, EpochPlan] = {}
        plan = self.of(int(self._state["epoch"]))
        self.global_batch_size = plan.global_batch_size
        self.store_size = store_size(space, plan.num_samples)

    def of(self, epoch: int) -> EpochPlan:
        plan = self._plans.get(epoch)
        if plan is None:
            first = int(self._state["epoch"])
            if not self.mixture or epoch == first:
                state = {**self._state, "epoch": epoch, "cursor": 0}
                plan = EpochPlan.from_state_dict(state, **self._args)
            else:
                # Each epoch continues the sources' passes where the one
                # before left them, as the samplers do.
                before = self.of(epoch - 1)
                assert isinstance(before.space, MixtureEpoch)
                space = before.space.mixture.epoch(epoch, before.space.consumed_after)
                plan = EpochPlan(
                    space, before.global_batch_size, seed=before.seed, epoch=epoch,
                    drop_last=before.drop_last,
                )  # fmt: skip
            self._plans[epoch] = plan
        return plan

    def position_of(self, state: dict[str, Any]) -> tuple[int, int]:
        """(epoch, step) a state resumes at."""
        return int(state["epoch"]), -(-int(state["cursor"]) // int(state["global_batch_size"]))


class _Tally:
    """The consumed ids marked epoch by epoch, a batch of records at a time
    (each call into the core takes about a million ids)."""

    BATCH_IDS = 1 << 20

    def __init__(self, plans: _Plans, report: AuditReport, limit: int) -> None:
        self.plans = plans
        self.report = report
        self.limit = limit
        self.bitmaps: dict[int, npt.NDArray[np.uint64]] = {}
        self.duplicates: dict[tuple[int, int], None] = {}
        self._misplaced_listed = 0

    def consume(self, log: _Log, batch: _Batch) -> None:
        """Marks a batch's ids (of one epoch, from one log) and checks that
        each is in its planned step."""
        rank, report = int(log.header["rank"]), self.report
        epoch, ids = batch.epoch, batch.ids
        report.consumed += len(ids)
        plan = self.plans.of(epoch)
        bitmap = self.bitmaps.get(epoch)
        if bitmap is None:
            bitmap = self.bitmaps[epoch] = _position_bitmap(plan)
        repeated, wrong, planned = _native.consume_ids(plan, bitmap, ids, batch.steps, batch.counts)
        report.duplicates += len(repeated)
        for i in repeated[: max(0, self.limit - len(self.duplicates))]:
            self.duplicates[(epoch, int(ids[i]))] = None
        report.misplaced += len(wrong)
        listed = max(0, self.limit - self._misplaced_listed)
        for i, step in zip(wrong[:listed].tolist(), planned[:listed].tolist(), strict=True):
            seen = Sighting(str(log.path), epoch, batch.step_of(i), rank)
            report.violations.append(Violation("misplaced", int(ids[i]), epoch, step, (seen,)))
            self._misplaced_listed += 1


def _position_bitmap(plan: EpochPlan) -> npt.NDArray[np.uint64]:
    """A clear bitmap of ``plan``'s epoch, one bit a position."""
    return np.zeros(-(-plan.num_samples // 64), dtype=np.uint64)


def _find_missing(
    plans: _Plans,
    tally: _Tally,
    start: tuple[int, int],
    end: tuple[int, int],
    report: AuditReport,
    limit: int,
) -> None:
    """Every sample of the steps from ``start`` to ``end`` not consumed."""
    for epoch in range(start[0], end[0] + 1):
        plan = plans.of(epoch)
        first = start[1] if epoch == start[0] else 0
        last = end[1] if epoch == end[0] else plan.num_steps
        bitmap = tally.bitmaps.get(epoch)
        if bitmap is None:
            bitmap = _position_bitmap(plan)
        g = plans.global_batch_size
        start_at, end_at = first * g, min(last * g, plan.num_samples)
        report.expected += max(0, end_at - start_at)
        absent = _native.unmarked_ids(plan, bitmap, start_at, max(start_at, end_at))
        report.missing += len(absent)
        listed = sum(v.kind == "missing" for v in report.violations)
        if listed < limit and len(absent):
            shown = absent[: limit - listed]
            steps = plan.positions_of(shown) // g
            for sample, step in zip(shown.tolist(), steps.tolist(), strict=True):
                report.violations.append(Violation("missing", sample, epoch, step))


def _describe_duplicates(
    plans: _Plans, logs: list[_Log], duplicates: dict[tuple[int, int], None], report: AuditReport
) -> None:
    """Every sighting of the listed duplicates, and where they were planned."""
    seen: dict[tuple[int, int], list[Sighting]] = {key: [] for key in duplicates}
    samples: dict[int, npt.NDArray[np.int64]] = {}
    for epoch, sample in duplicates:
        samples[epoch] = np.append(samples.get(epoch, np.empty(0, np.int64)), sample)
    for log in logs:
        rank = int(log.header["rank"])
        for batch in _kept_batches(log, _Tally.BATCH_IDS):
            epoch, ids = batch.epoch, batch.ids
            if epoch not in samples:
                continue
            for i in np.flatnonzero(np.isin(ids, samples[epoch])).tolist():
                sighting = Sighting(str(log.path), epoch, batch.step_of(i), rank)
                seen[(epoch, int(ids[i]))].append(sighting)
    for (epoch, sample), sightings in seen.items():
        position = int(plans.of(epoch).positions_of(np.array([sample]))[0])
        step = -1 if position < 0 else position // plans.global_batch_size
        report.violations.append(Violation("duplicate", sample, epoch, step, tuple(sightings)))


def _tally_by_step(
    plans: _Plans,
    logs: list[_Log],
    start: tuple[int, int],
    end: tuple[int, int],
    report: AuditReport,
    limit: int,
) -> None:
    """Each step's ids consumed against its ids planned, as multisets (a
    mixture may plan a sample more than once an epoch), a batch of steps at
    a time; each sample's excess and shortfall over the epoch are then
    counted as :func:`_classify` says."""
    g = plans.global_batch_size
    records = []  # per kept record: epoch, step, log, first id's byte, ids
    for number, log in enumerate(logs):
        report.rolled_back += _rolled_back(log)
        index, kept = _step_records(log)
        index, r = index[kept], log.records
        columns = [r["epochs"][index], r["steps"][index], np.full(len(index), number)]
        columns += [r["id_offsets"][index], r["id_counts"][index]]
        records.append(np.stack([c.astype(np.int64) for c in columns], axis=1))
    table = np.concatenate(records)
    table = table[np.lexsort((table[:, 2], table[:, 1], table[:, 0]))]
    listed: dict[str, int] = {"duplicate": 0, "missing": 0, "misplaced": 0}

    def note(kind: str, sample: int, epoch: int, step: int, seen: tuple[Sighting, ...]) -> None:
        if listed[kind] < limit:
            report.violations.append(Violation(kind, sample, epoch, step, seen))
            listed[kind] += 1

    for epoch in range(start[0], end[0] + 1):
        plan = plans.of(epoch)
        unmarked = _position_bitmap(plan)  # an epoch's, not a batch's
        first = start[1] if epoch == start[0] else 0
        last = end[1] if epoch == end[0] else plan.num_steps
        mine = table[table[:, 0] == epoch]
        excess: dict[int, list[tuple[int, int, bool, tuple[Sighting, ...]]]] = {}
        short: dict[int, list[tuple[int, int]]] = {}
        lo = min([first, *mine[:1, 1].tolist()])
        hi = max([last, *(mine[-1:, 1] + 1).tolist()])
        span = max(1, _Tally.BATCH_IDS // g)
        for s0 in range(lo, hi, span):
            s1 = min(s0 + span, hi)
            a, b = max(s0, first), min(s1, last)
            planned = _planned_ids(plan, unmarked, a * g, min(b * g, plan.num_samples))
            planned_steps = (np.arange(len(planned)) + a * g) // g
            chosen = mine[(mine[:, 1] >= s0) & (mine[:, 1] < s1)]
            ids, steps, owners = _consumed(logs, chosen)
            report.expected += len(planned)
            report.consumed += len(ids)
            _compare(plans, epoch, s0, planned, planned_steps, ids, steps, owners, logs,
                     excess, short)  # fmt: skip
        for sample in sorted({*excess, *short}):
            _classify(plan, epoch, sample, excess.get(sample, []), short.get(sample, []),
                      report, note)  # fmt: skip


def _classify(
    plan: EpochPlan,
    epoch: int,
    sample: int,
    excess: list[tuple[int, int, bool, tuple[Sighting, ...]]],
    short: list[tuple[int, int]],
    report: AuditReport,
    note: Any,
) -> None:
    """Counts one sample's excess and shortfall over an epoch's steps as the
    bitmap audit does: consumed more often than planned, the surplus is
    duplicated; less often, the gap is missing; consumed in a step that
    does not plan it, or in excess in one step and short in another, it is
    misplaced."""
    more = sum(count for _, count, _, _ in excess)
    unplanned = sum(count for _, count, off_plan, _ in excess if off_plan)
    fewer = sum(gap for _, gap in short)
    seen = tuple(s for *_, sightings in excess for s in sightings)
    g = plan.global_batch_size
    if short:
        planned_step = short[0][0]
    else:
        position = int(plan.positions_of(np.array([sample]))[0])
        planned_step = -1 if position < 0 else position // g
    misplaced = max(unplanned, min(more, fewer))
    if misplaced:
        report.misplaced += misplaced
        note("misplaced", sample, epoch, planned_step, seen)
    if more > fewer:
        report.duplicates += more - fewer
        note("duplicate", sample, epoch, planned_step, seen)
    if fewer > more:
        report.missing += fewer - more
        for step, _ in short:
            note("missing", sample, epoch, step, ())


def _planned_ids(
    plan: EpochPlan, unmarked: npt.NDArray[np.uint64], start: int, end: int
) -> npt.NDArray[np.int64]:
    """The ids at positions ``[start, end)`` of ``plan``'s epoch (every id
    is unmarked in the empty bitmap ``unmarked``)."""
    if start >= end:
        return np.empty(0, dtype=np.int64)
    return _native.unmarked_ids(plan, unmarked, start, end)


def _consumed(
    logs: list[_Log], records: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The ids of ``records`` (rows of epoch, step, log, byte, count), their
    steps and the number of the log that holds each."""
    ids, steps, owners = [], [], []
    for number in np.unique(records[:, 2]).tolist():
        rows = records[records[:, 2] == number]
        counts = rows[:, 4]
        at, n = rows[:, 3].astype(np.uint64), counts.astype(np.uint64)
        got = gather_log_ids(logs[number].path, at, n)
        ids.append(got)
        steps.append(np.repeat(rows[:, 1], counts))
        owners.append(np.full(len(got), number))
    if not ids:
        nothing = np.empty(0, np.int64)
        return nothing, nothing, nothing
    return np.concatenate(ids), np.concatenate(steps), np.concatenate(owners)


def _compare(
    plans: _Plans,
    epoch: int,
    s0: int,
    planned: npt.NDArray[np.int64],
    planned_steps: npt.NDArray[np.int64],
    ids: npt.NDArray[np.int64],
    steps: npt.NDArray[np.int64],
    owners: npt.NDArray[np.int64],
    logs: list[_Log],
    excess: dict[int, list[tuple[int, int, bool, tuple[Sighting, ...]]]],
    short: dict[int, list[tuple[int, int]]],
) -> None:
    """Adds to ``excess`` and ``short`` the (step, sample) pairs of a batch
    of steps consumed more often, or less often, than planned."""
    store = plans.store_size
    planned_keys = (planned_steps - s0) * store + planned
    consumed_keys = (steps - s0) * store + ids
    keys = np.union1d(planned_keys, consumed_keys)
    wanted = np.bincount(np.searchsorted(keys, planned_keys), minlength=len(keys))
    balance = np.bincount(np.searchsorted(keys, consumed_keys), minlength=len(keys)) - wanted
    off = balance != 0
    for key, diff, plan_count in zip(
        keys[off].tolist(), balance[off].tolist(), wanted[off].tolist(), strict=True
    ):
        step, sample = s0 + key // store, key % store
        if diff > 0:
            at = np.flatnonzero(consumed_keys == key)
            seen = tuple(
                Sighting(str(logs[o].path), epoch, step, int(logs[o].header["rank"]))
                for o in owners[at].tolist()
            )
            excess.setdefault(sample, []).append((step, diff, plan_count == 0, seen))
        else:
            short.setdefault(sample, []).append((step, -diff))
