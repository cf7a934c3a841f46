"""Verifying a token plan's directory: besides every file's checksum and
exact coverage, per step and rank, every micro-batch within the caps
(fillers included), the same micro-batch count on every rank, the balance
bound, and the stored lengths against the lengths file when it is reachable
(then also every id against the dealing recomputed from it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan.planfile.errors import PlanError
from epochplan.planfile.reader import PlanDirectory
from epochplan.planfile.space import store_size
from epochplan.planfile.tokens import STEP_COLUMNS, ArraySource, TokenFile, TokenInfo

__all__ = ["lengths_unreachable", "verify_token_plan"]

Ids = npt.NDArray[np.int64]
# Steps recomputed per call into the native dealer.
_BATCH_SAMPLES = 1 << 18


def _open_source(source: ArraySource, num_samples: int) -> Any:
    """The array a source names, memory-mapped; OSError or ValueError when
    it cannot be read as recorded."""
    if source.path is None or source.dtype is None or source.offset is None:
        raise ValueError("the plan was written from an array in memory: no file is recorded")
    return np.memmap(
        source.path, dtype=np.dtype(source.dtype), mode="r", offset=source.offset,
        shape=(num_samples,),
    )  # fmt: skip


def lengths_unreachable(d: PlanDirectory) -> str | None:
    """Why a token plan's lengths (or loss tokens) file cannot be read as the
    manifest records it, or None when it can."""
    info = d.tokens
    if info is None:
        return "the plan has no lengths"
    for source in (info.lengths, info.loss_tokens):
        if source is None:
            continue
        try:
            _open_source(source, store_size(d.space, d.num_samples))
        except (OSError, ValueError) as e:
            return f"{source.path or 'lengths'}: {e}"
    return None


def _mapped(d: PlanDirectory, entry: TokenFile) -> Ids:
    """A token file's values, checked (header, size, checksum) and mapped."""
    path = d.path / entry.path
    _native.check_plan_file(str(path), entry.count, entry.bytes, entry.blake3)
    return _native.map_ids(str(path), entry.bytes - 8 * entry.count, entry.count)


def _costs(info: TokenInfo, lengths: Ids) -> npt.NDArray[Any]:
    if isinstance(info.cost, str):
        return lengths.astype(object) if len(lengths) and lengths.max() > 2**52 else lengths
    a, b = info.cost
    values = lengths.astype(np.float64)
    return a * values + b * (values * values)


class _Epoch:
    """One epoch's files, mapped, and the checks of one step."""

    def __init__(self, d: PlanDirectory, epoch: int) -> None:
        info = d.tokens
        assert info is not None
        self.d, self.info, self.epoch = d, info, epoch
        index, w = d.epoch_index(epoch), d.world_size
        self.where = f"{d.path}: epoch {epoch}"
        self.ids = [d.rank_ids(epoch, r) for r in range(w)]
        self.lengths = [_mapped(d, info.file(index, w, r, "lengths")) for r in range(w)]
        self.loss = None
        if info.loss_tokens is not None:
            self.loss = [_mapped(d, info.file(index, w, r, "loss_tokens")) for r in range(w)]
        self.offsets = [_mapped(d, info.file(index, w, r, "offsets")) for r in range(w)]
        self.table = _mapped(d, info.file(index, w, None, "steps")).reshape(-1, len(STEP_COLUMNS))
        for r, offsets in enumerate(self.offsets):
            ok = offsets[0] == 0 and offsets[-1] == len(self.ids[r])
            if not ok or np.any(np.diff(offsets) < 0):
                raise PlanError(
                    f"{self.where}, rank {r}: the step offsets are not an increasing cut of "
                    f"the rank file's {len(self.ids[r])} ids"
                )
        self.plain = d.plan(epoch)

    def share(self, step: int, rank: int) -> tuple[Ids, Ids, Ids]:
        a, b = int(self.offsets[rank][step]), int(self.offsets[rank][step + 1])
        loss = self.lengths if self.loss is None else self.loss
        return self.ids[rank][a:b], self.lengths[rank][a:b], loss[rank][a:b]

    def check_step(self, step: int) -> None:
        info, w = self.info, self.d.world_size
        at = f"{self.where}, step {step}"
        t, m, filler, filler_length = (int(x) for x in self.table[step])
        shares = [self.share(step, r) for r in range(w)]
        ids = np.concatenate([s[0] for s in shares])
        lengths = np.concatenate([s[1] for s in shares])
        if not np.array_equal(np.sort(ids), np.sort(self.plain.step_indices(step, 0, 1))):
            raise PlanError(f"{at}: the ranks' ids are not exactly the step's samples")
        if np.any(lengths < 0):
            raise PlanError(f"{at}: a stored length is negative")
        loss_total = sum(int(s[2].astype(object).sum()) for s in shares)
        if loss_total != t:
            raise PlanError(
                f"{at}: the step table says T_t = {t}, the stored loss tokens {loss_total}"
            )
        shortest = int(lengths.min())
        where_filler = np.flatnonzero(ids == filler)
        if filler_length != shortest or not (
            len(where_filler) and lengths[where_filler[0]] == filler_length
        ):
            raise PlanError(
                f"{at}: the filler is sample {filler} of length {filler_length}, not one of the "
                f"step's shortest samples (length {shortest})"
            )
        b, cap = info.micro_batch_size, info.max_tokens
        if cap is not None and filler_length > cap:
            raise PlanError(f"{at}: the filler holds {filler_length} tokens, over max_tokens {cap}")
        runs_max = 0
        for r, (_, share_lengths, _) in enumerate(shares):
            ends, runs = _native.token_cuts(share_lengths, max(m, 1), b, cap)
            runs_max = max(runs_max, runs)
            start = 0
            for k, end in enumerate(ends.tolist()):
                tokens, count = int(share_lengths[start:end].astype(object).sum()), end - start
                if (cap is not None and tokens > cap) or (b is not None and count > b):
                    raise PlanError(
                        f"{at}, rank {r}: micro-batch {k} holds {count} samples and {tokens} "
                        f"tokens, over the caps (micro_batch_size={b}, max_tokens={cap})"
                    )
                start = end
            if len(ends) > m:
                raise PlanError(
                    f"{at}, rank {r}: has {len(ends)} micro-batches, the other ranks {m}: "
                    "every rank must have the same count"
                )
        if m != max(runs_max, 1):
            raise PlanError(
                f"{at}: the step table says {m} micro-batches, the step's shares make "
                f"{max(runs_max, 1)}"
            )
        loads = [_costs(info, s[1]).sum() for s in shares]
        largest = max((_costs(info, s[1]).max() for s in shares if len(s[1])), default=0)
        spread = max(loads) - min(loads)
        slack = 0 if info.cost == "tokens" else 1e-9 * max(loads)
        if spread > largest + slack:
            raise PlanError(
                f"{at}: the ranks' costs spread by {spread}, more than the step's largest "
                f"single cost {largest} (the balance bound)"
            )

    def compare(self, step: int, file_lengths: Any, file_loss: Any) -> None:
        at = f"{self.where}, step {step}"
        for r in range(self.d.world_size):
            ids, lengths, loss = self.share(step, r)
            for name, stored, values in (
                ("lengths", lengths, file_lengths),
                ("loss_tokens", loss if self.loss is not None else None, file_loss),
            ):
                if stored is None or values is None:
                    continue
                actual = np.asarray(values[ids]).astype(np.int64)
                bad = np.flatnonzero(actual != stored)
                if len(bad):
                    i = int(bad[0])
                    raise PlanError(
                        f"{at}, rank {r}: the stored {name} of sample {int(ids[i])} is "
                        f"{int(stored[i])}, the {name} file has {int(actual[i])}"
                    )

    def compare_dealing(self, dealer: _native.TokenDealer) -> None:
        steps, w = len(self.table), self.d.world_size
        per_call = max(1, _BATCH_SAMPLES // self.d.global_batch_size)
        for start in range(0, steps, per_call):
            stop = min(steps, start + per_call)
            ids, _, _, _, table = dealer.steps(start, stop, 0, w)
            if not np.array_equal(table, self.table[start:stop]):
                raise PlanError(
                    f"{self.where}: the step table of steps [{start}, {stop}) differs from the "
                    "one the lengths give"
                )
            for r in range(w):
                a, b = int(self.offsets[r][start]), int(self.offsets[r][stop])
                if not np.array_equal(ids[r], self.ids[r][a:b]):
                    raise PlanError(
                        f"{self.where}, rank {r}: the ids of steps [{start}, {stop}) are not "
                        "the balanced dealing of the lengths"
                    )


def verify_token_plan(d: PlanDirectory, progress: Callable[[int, int], None] | None) -> bool:
    """Verifies a token plan's directory (see the module docs). Returns
    whether the stored lengths were compared with the lengths file (False
    when it is not reachable: :func:`lengths_unreachable` says why)."""
    info = d.tokens
    assert info is not None
    total = d.parsed.total_bytes
    reachable = lengths_unreachable(d) is None
    file_lengths = file_loss = None
    if reachable:
        store = store_size(d.space, d.num_samples)
        file_lengths = _open_source(info.lengths, store)
        if info.loss_tokens is not None:
            file_loss = _open_source(info.loss_tokens, store)
    done = 0
    for epoch in d.epochs:
        e = _Epoch(d, epoch)
        for step in range(len(e.table)):
            e.check_step(step)
            if reachable:
                e.compare(step, file_lengths, file_loss)
        if reachable:
            dealer = _native.TokenDealer(
                {**d.spec.as_dict(), "epoch": epoch},
                d.world_size,
                file_lengths,
                file_loss,
                info.cost,
                info.loss_normalization,
                micro_batch_size=info.micro_batch_size,
                max_tokens=info.max_tokens,
                space=d.space,
            )
            loss_digest = None if info.loss_tokens is None else info.loss_tokens.digest
            recorded = (info.lengths.digest, loss_digest)
            digests = dealer.digests() if epoch == d.epochs[0] else recorded
            if digests != recorded:
                raise PlanError(
                    f"{d.path}: the lengths files' digests {digests} are not the manifest's "
                    f"{recorded}: the files changed since the plan was written"
                )
            e.compare_dealing(dealer)
        index = d.epoch_index(epoch)
        done += sum(f.bytes for f in d.parsed.epoch_files(index))
        done += sum(f.bytes for f in info.files if f.epoch == epoch)
        if progress is not None:
            progress(done, total)
    return reachable
