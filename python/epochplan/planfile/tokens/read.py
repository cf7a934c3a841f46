"""One rank's view of a token plan's epoch: its ids, their lengths and its
micro-batches, read from its own files and the epoch's step table alone,
each sequentially, never from the global lengths (see
:mod:`epochplan.planfile.tokens`)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._types import MicroBatch
from epochplan.planfile.errors import PlanError
from epochplan.planfile.manifest.tokens import STEP_COLUMNS, TokenInfo
from epochplan.planfile.reader import PlanDirectory, RankFile

__all__ = ["StepRow", "TokenRankReader", "cut_micro_batches", "step_weight"]

#: One row of an epoch's step table: ``(T_t, M, filler id, filler length)``.
StepRow = tuple[int, int, int, int]


def step_weight(info: TokenInfo, row: StepRow, step_size: int, world_size: int) -> float:
    """The weight of every real sample of a step: ``W / T_t`` (0 when
    ``T_t = 0``) or ``W / n_t`` with ``loss_normalization="samples"``. Each
    integer is rounded to a float once, then divided, as the plan does."""
    total = row[0] if info.loss_normalization == "tokens" else step_size
    return 0.0 if total == 0 else float(world_size) / float(total)


def cut_micro_batches(
    info: TokenInfo,
    ids: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    row: StepRow,
    weight: float,
    where: str,
) -> list[MicroBatch]:
    """A rank's ``M`` micro-batches of a step from its stored share: its
    real ones (cut from its own lengths under the plan's caps), then the
    weight-0 fillers. PlanError, naming ``where``, when the share needs more
    micro-batches than the step's ``M``."""
    micro_batches, filler = row[1], row[2]
    ends, _runs = _native.token_cuts(lengths, micro_batches, info.micro_batch_size, info.max_tokens)
    if len(ends) > micro_batches:
        raise PlanError(
            f"{where}: needs {len(ends)} micro-batches under the caps, the step table says "
            f"{micro_batches}"
        )
    batches: list[MicroBatch] = []
    start = 0
    for end in ends.tolist():
        batches.append((ids[start:end], np.full(end - start, weight)))
        start = end
    for _ in range(micro_batches - len(batches)):
        batches.append((np.array([filler], dtype=np.int64), np.zeros(1)))
    return batches


class TokenRankReader:
    """Rank ``rank``'s files of a token plan's ``epoch``, checked (header,
    size, checksum) when opened and read a step at a time: its ids, their
    lengths, the step offsets and the epoch's step table."""

    def __init__(self, d: PlanDirectory, epoch: int, rank: int) -> None:
        info = d.tokens
        if info is None:
            raise PlanError(f"{d.path}: the plan has no lengths (its spec has no tokens)")
        self.info = info
        self.where = f"{d.path} (epoch {epoch}, rank {rank})"
        self._files: list[RankFile] = []
        try:
            self._ids = self._keep(d.open_rank_file(epoch, rank))
            self._offsets = self._keep(d.open_token_file(epoch, rank, "offsets"))
            self._lengths = self._keep(d.open_token_file(epoch, rank, "lengths"))
            self._table = self._keep(d.open_token_file(epoch, None, "steps"))
        except BaseException:
            self.close()
            raise

    def _keep(self, file: RankFile) -> RankFile:
        self._files.append(file)
        return file

    def row(self, step: int) -> StepRow:
        """Step ``step``'s row of the step table."""
        width = len(STEP_COLUMNS)
        t, m, filler, filler_length = self._table.read(width * step, width * (step + 1)).tolist()
        return t, m, filler, filler_length

    def micro_batch_counts(self) -> npt.NDArray[np.int64]:
        """Every step's micro-batch count ``M`` (one read of the step table)."""
        table = self._table.read(0, self._table.count)
        counts: npt.NDArray[np.int64] = table.reshape(-1, len(STEP_COLUMNS))[:, 1]
        return counts

    def step(self, step: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """This rank's ids of ``step`` (in dealing order) and their lengths."""
        start, stop = self._offsets.read(step, step + 2).tolist()
        if not 0 <= start <= stop <= self._ids.count:
            raise PlanError(
                f"{self._offsets.path}: step {step} spans [{start}, {stop}), outside the rank "
                f"file's {self._ids.count} ids"
            )
        return self._ids.read(start, stop), self._lengths.read(start, stop)

    def close(self) -> None:
        """Closes the files."""
        for file in self._files:
            file.close()
        self._files = []
