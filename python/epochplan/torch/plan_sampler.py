"""``PlanSampler``: an :class:`~epochplan.torch.ElasticBatchSampler` served from
a plan directory (see :mod:`epochplan.planfile`)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import numpy.typing as npt

from epochplan._native import EpochPlan
from epochplan._types import MicroBatch
from epochplan.planfile import PlanDirectory, PlanError, RankFile, open_plan
from epochplan.torch.elastic import ElasticBatchSampler
from epochplan.torch.rank import RankProvider


class PlanSampler(ElasticBatchSampler):
    """Equal-step, weighted micro-batches read from a plan directory.

    The same items, weights, step boundaries and ``state_dict`` /
    ``load_state_dict`` as :class:`~epochplan.torch.ElasticBatchSampler` for the
    plan's parameters, but each rank's ids come from its file of the epoch,
    checked once per epoch (header, size, checksum) and read a step at a time
    (not memory-mapped: a file cut short after the check raises
    :class:`PlanError` rather than killing the process). The world size must be the one the
    plan was written for, and every epoch used must be in the plan; otherwise,
    and for a missing, truncated or altered file, :class:`PlanError` is raised.

    The step layout and the zero-weight fillers come from the plan's
    :class:`~epochplan.EpochPlan`, which holds no ids for any kind: a
    ``"uniform"`` plan builds its permutation only when asked for ids, and
    this sampler never asks (its ids are in the files; a filler of an empty
    share is then the id at the layout's filler position, with weight 0).

    Args:
        plan_dir: a plan directory (path or :class:`PlanDirectory`).
        micro_batch_size: the most samples per micro-batch on a rank.
        rank, num_replicas, rank_fn: as for ``ElasticBatchSampler``.
        epoch: the first epoch to serve (default: the plan's first).

    Examples:
        >>> sampler = PlanSampler("plan/", micro_batch_size=32)  # doctest: +SKIP
        >>> for epoch in sampler.plan_dir.epochs:  # doctest: +SKIP
        ...     sampler.set_epoch(epoch)
        ...     for batch in sampler: ...
    """

    def __init__(
        self,
        plan_dir: str | os.PathLike[str] | PlanDirectory,
        *,
        micro_batch_size: int,
        rank: int | None = None,
        num_replicas: int | None = None,
        epoch: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        d = plan_dir if isinstance(plan_dir, PlanDirectory) else open_plan(plan_dir)
        self.plan_dir = d
        self._file: RankFile | None = None
        self._first_epoch = d.epochs[0] if epoch is None else epoch
        d.epoch_index(self._first_epoch)
        self._start(d.spec, micro_batch_size, num_replicas, rank, rank_fn)
        self.epoch = self._first_epoch

    def _build_plan(self, epoch: int) -> EpochPlan:
        d = self.plan_dir
        if self._file is None:  # called by the base class's constructor
            epoch = self._first_epoch
        if self.seed != d.seed:
            raise PlanError(f"{d.path}: the plan has seed {d.seed}, not {self.seed}")
        self._open_file(epoch)
        return d.plan(epoch)

    def _split_step(self, step: int, ids: npt.NDArray[np.int64]) -> list[MicroBatch]:
        if self.kind != "uniform":
            return super()._split_step(step, ids)
        # A uniform order is N ids on every rank: it is not built for a
        # weight-0 filler; the id at the layout's filler position stands in.
        w, b = self.num_replicas, self.micro_batch_size
        if b is None:  # plan files hold no lengths: _start required it
            raise ValueError("micro_batch_size must be an int, got None")
        return self._plan.layout.split_step(step, self.rank, w, b, ids)

    def _open_file(self, epoch: int) -> None:
        opened = self.plan_dir.open_rank_file(epoch, self.rank, self.num_replicas)
        if self._file is not None:
            self._file.close()
        self._file = opened

    def _step_ids(self, step: int) -> npt.NDArray[np.int64]:
        plan, r, w = self._plan, self.rank, self.num_replicas
        if self._file is None:  # pragma: no cover - set by the constructor
            raise PlanError(f"{self.plan_dir.path}: no epoch loaded")
        start = plan.rank_step_offset(step, r, w)
        return self._file.read(start, plan.rank_step_offset(step + 1, r, w))

    def __repr__(self) -> str:
        return (
            f"PlanSampler({str(self.plan_dir.path)!r}, micro_batch_size={self.micro_batch_size}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, epoch={self.epoch})"
        )

    def __getstate__(self) -> dict[str, Any]:
        # Open files are not pickled: the file is checked and opened again
        # when unpickled.
        state = self.__dict__.copy()
        state["_file"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open_file(self.epoch)
