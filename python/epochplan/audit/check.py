"""The exactly-once audit of a run's consumption logs.

Over every log of a directory (every process of every run, resumed on any
world size), the audit keeps each process's records up to its last commit
(the checkpoint a resume starts from), and checks, epoch by epoch, that the
samples consumed are exactly the samples planned: none twice (a bitmap of
the store, N/8 bytes an epoch), none missing from the steps the run covered,
and each in the step its plan puts it in. Every violation is named: the
sample, where it was planned and where it was seen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._native import EpochPlan, Mixture, Selection
from epochplan.audit.log import LogRecord, read_log

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
    commit: tuple[int, int] | None = None
    commit_offset: int = -1


def audit(
    directory: str | os.PathLike[str],
    *,
    space: Selection | None = None,
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

    Raises:
        ValueError: no logs, logs of different plans, a corrupt record (a
            torn last record is reported, not raised), or a plan over a
            mixture (which may show a sample more than once an epoch).
    """
    logs, torn = _scan(Path(directory))
    plans = _Plans(logs, space, lengths, loss_tokens)
    starts = [plans.position_of(log.header["plan"]) for log in logs]
    commits = [log.commit for log in logs if log.commit is not None]
    start = min(starts)
    end = max(commits) if commits else start
    report = AuditReport(len(logs), start, end, torn=torn)
    tally = _Tally(plans, report, limit)
    for log in logs:
        pending: list[LogRecord] = []
        pending_ids = 0
        for record in _records(log, ids=True):
            assert record.ids is not None
            if log.commit is None or (record.epoch, record.step) >= log.commit:
                report.rolled_back += len(record.ids)
                continue
            if pending and (pending[0].epoch != record.epoch or pending_ids >= tally.BATCH_IDS):
                tally.consume(log, pending)
                pending, pending_ids = [], 0
            pending.append(record)
            pending_ids += len(record.ids)
        if pending:
            tally.consume(log, pending)
    bitmaps, duplicates = tally.bitmaps, tally.duplicates
    _find_missing(plans, bitmaps, start, end, report, limit)
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
        log: _Log | None = None
        for record in read_log(path, ids=False):
            if isinstance(record, str):
                torn.append(record)
                break
            if log is None:
                if record.kind != "H" or record.header is None:
                    raise ValueError(f"{path}: the first record is not the log's header")
                log = _Log(path, record.header)
            elif record.kind == "C":
                log.commit, log.commit_offset = (record.epoch, record.step), record.offset
        if log is None:
            # Killed before its header was written: it holds nothing.
            if not torn or not torn[-1].startswith(str(path)):
                torn.append(f"{path}: a log without its header (nothing recorded)")
            continue
        logs.append(log)
    if not logs:
        raise ValueError(f"{directory}: no consumption log holds its header: {torn[0]}")
    return logs, torn


def _records(log: _Log, ids: bool) -> Iterator[LogRecord]:
    """A log's step records before its last commit."""
    for record in read_log(log.path, ids=ids):
        if isinstance(record, str) or record.offset > log.commit_offset >= 0:
            return
        if record.kind == "B":
            yield record


class _Plans:
    """The run's plan, epoch by epoch, from the logs' headers."""

    def __init__(self, logs: list[_Log], space: Any, lengths: Any, loss_tokens: Any) -> None:
        first = logs[0].header["plan"]
        common = {k: v for k, v in first.items() if k not in _PLACEMENT_KEYS}
        for log in logs[1:]:
            other = {k: v for k, v in log.header["plan"].items() if k not in _PLACEMENT_KEYS}
            if other != common:
                raise ValueError(
                    f"{log.path} and {logs[0].path} log different plans: "
                    "audit the logs of one run (one plan) at a time"
                )
        if isinstance(first.get("space"), dict) and first["space"].get("kind") == "mixture":
            raise ValueError(
                "the audit does not take a plan over a Mixture yet: a mixture may show a "
                "sample more than once an epoch, which a bitmap cannot count"
            )
        if isinstance(space, Mixture):
            raise TypeError("space must be the plan's Selection (a Mixture is not audited yet)")
        self._state = first
        self._args = {"space": space, "lengths": lengths, "loss_tokens": loss_tokens}
        self._plans: dict[int, EpochPlan] = {}
        plan = self.of(int(first["epoch"]))
        self.global_batch_size = plan.global_batch_size
        self.store_size = (
            plan.space.num_samples if isinstance(plan.space, Selection) else plan.num_samples
        )

    def of(self, epoch: int) -> EpochPlan:
        plan = self._plans.get(epoch)
        if plan is None:
            state = {**self._state, "epoch": epoch, "cursor": 0}
            plan = self._plans[epoch] = EpochPlan.from_state_dict(state, **self._args)
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

    def consume(self, log: _Log, records: list[LogRecord]) -> None:
        """Marks the ids of ``records`` (one epoch, from one log) and checks
        that each is in its planned step."""
        epoch, rank, report = records[0].epoch, int(log.header["rank"]), self.report
        ids = np.concatenate([r.ids for r in records if r.ids is not None])
        steps = np.repeat(
            [r.step for r in records], [len(r.ids) for r in records if r.ids is not None]
        )
        report.consumed += len(ids)
        bitmap = self.bitmaps.get(epoch)
        if bitmap is None:
            words = -(-self.plans.store_size // 64)
            bitmap = self.bitmaps[epoch] = np.zeros(words, dtype=np.uint64)
        repeated = _native.mark_ids(bitmap, ids)
        report.duplicates += len(repeated)
        for i in repeated[: max(0, self.limit - len(self.duplicates))]:
            self.duplicates[(epoch, int(ids[i]))] = None
        positions = self.plans.of(epoch).positions_of(ids)
        planned = np.where(positions < 0, -1, positions // self.plans.global_batch_size)
        wrong = np.flatnonzero(planned != steps)
        report.misplaced += len(wrong)
        for i in wrong[: max(0, self.limit - self._misplaced_listed)]:
            seen = Sighting(str(log.path), epoch, int(steps[i]), rank)
            report.violations.append(
                Violation("misplaced", int(ids[i]), epoch, int(planned[i]), (seen,))
            )
            self._misplaced_listed += 1


def _find_missing(
    plans: _Plans,
    bitmaps: dict[int, npt.NDArray[np.uint64]],
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
        bitmap = bitmaps.get(epoch, np.zeros(-(-plans.store_size // 64), dtype=np.uint64))
        listed = sum(v.kind == "missing" for v in report.violations)
        for step in range(first, last):
            ids = plan.step_indices(step, 0, 1)
            report.expected += len(ids)
            held = (bitmap[ids >> 6] >> (ids & 63).astype(np.uint64)) & np.uint64(1)
            absent = ids[held == 0]
            report.missing += len(absent)
            for sample in absent[: max(0, limit - listed)]:
                report.violations.append(Violation("missing", int(sample), epoch, step))
                listed += 1


def _describe_duplicates(
    plans: _Plans, logs: list[_Log], duplicates: dict[tuple[int, int], None], report: AuditReport
) -> None:
    """Every sighting of the listed duplicates, and where they were planned."""
    seen: dict[tuple[int, int], list[Sighting]] = {key: [] for key in duplicates}
    for log in logs:
        if log.commit is None:
            continue
        rank = int(log.header["rank"])
        for record in _records(log, ids=True):
            assert record.ids is not None
            if (record.epoch, record.step) >= log.commit:
                continue
            for sample in record.ids.tolist():
                sightings = seen.get((record.epoch, sample))
                if sightings is not None:
                    sightings.append(Sighting(str(log.path), record.epoch, record.step, rank))
    for (epoch, sample), sightings in seen.items():
        position = int(plans.of(epoch).positions_of(np.array([sample]))[0])
        step = -1 if position < 0 else position // plans.global_batch_size
        report.violations.append(Violation("duplicate", sample, epoch, step, tuple(sightings)))
