"""``PlanSampler``: an :class:`~epochplan.torch.ElasticBatchSampler` served from
a plan directory (see :mod:`epochplan.planfile`)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

from epochplan._native import EpochPlan
from epochplan._types import MicroBatch
from epochplan.planfile import PlanDirectory, PlanError, RankFile, open_plan
from epochplan.planfile.tokens.read import TokenRankReader, cut_micro_batches, step_weight
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

    Token plans (written with ``tokens=``): the micro-batches, caps and
    weights are those of ``spec.plan(epoch).micro_batches(rank,
    W, micro_batch_size, max_tokens=...)`` for the caps the plan was written
    with, cut from the rank's own files (its ids, their lengths, its step
    offsets) and the epoch's step table, read sequentially: the global
    lengths are never read. ``micro_batch_size`` may then be left out (it is
    the plan's) and must otherwise equal it. The state carries the lengths'
    digests, as the in-memory plan's does.

    Index spaces (a plan written over a :class:`~epochplan.Selection` or
    :class:`~epochplan.Mixture`): the ids are the store's, those of the plan
    over the space the directory records (:attr:`PlanDirectory.space`); the
    state is that plan's, with the space's digest, and ``load_state_dict``
    refuses a state of another space (or of a mixture's epoch continued
    from other counts than the files').

    Args:
        plan_dir: a plan directory (path or :class:`PlanDirectory`).
        micro_batch_size: the most samples per micro-batch on a rank (a
            token plan's own by default).
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
        micro_batch_size: int | None = None,
        rank: int | None = None,
        num_replicas: int | None = None,
        epoch: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        d = plan_dir if isinstance(plan_dir, PlanDirectory) else open_plan(plan_dir)
        self.plan_dir = d
        self._file: RankFile | None = None
        self._reader: TokenRankReader | None = None
        self._step_cache: tuple[int, npt.NDArray[np.int64]] | None = None
        self._first_epoch = d.epochs[0] if epoch is None else epoch
        d.epoch_index(self._first_epoch)
        tokens = d.tokens
        if tokens is not None:
            if micro_batch_size is not None and micro_batch_size != tokens.micro_batch_size:
                raise PlanError(
                    f"{d.path}: the plan was written for micro_batch_size="
                    f"{tokens.micro_batch_size}, not {micro_batch_size}"
                )
            # The base class checks an int; the plan's caps replace it below.
            micro_batch_size = tokens.micro_batch_size or 1
        self._start(d.spec, micro_batch_size, rank, num_replicas, rank_fn)
        if tokens is not None:
            self.micro_batch_size = tokens.micro_batch_size
            self.max_tokens = tokens.max_tokens
        self.epoch = self._first_epoch

    def _build_plan(self, epoch: int) -> EpochPlan:
        d = self.plan_dir
        if self._file is None:  # called by the base class's constructor
            epoch = self._first_epoch
        if self.seed != d.seed:
            raise PlanError(f"{d.path}: the plan has seed {d.seed}, not {self.seed}")
        self._open_file(epoch)
        return d.plan(epoch)

    def _steps(self, first: int) -> Iterator[list[MicroBatch]]:
        # The ids come from the plan's files: read and cut step by step.
        for step in range(first, self._plan.num_steps):
            yield self._split_step(step, self._step_ids(step))

    def _split_step(self, step: int, ids: npt.NDArray[np.int64]) -> list[MicroBatch]:
        if self._reader is not None:
            return self._token_split(step, ids)
        if self.kind != "uniform":
            return super()._split_step(step, ids)
        # A uniform order is N ids on every rank: it is not built for a
        # weight-0 filler; the id at the layout's filler position stands in.
        w, b = self.num_replicas, self.micro_batch_size
        if b is None:  # plan files hold no lengths: _start required it
            raise ValueError("micro_batch_size must be an int, got None")
        return self._plan.layout.split_step(step, self.rank, w, b, ids)

    def _token_split(self, step: int, ids: npt.NDArray[np.int64]) -> list[MicroBatch]:
        reader = self._reader
        if reader is None or self._step_cache is None or self._step_cache[0] != step:
            ids, lengths = self._token_step(step)
        else:
            lengths = self._step_cache[1]
        assert reader is not None
        row = reader.row(step)
        weight = step_weight(reader.info, row, self._plan.step_size(step), self.num_replicas)
        return cut_micro_batches(
            reader.info, ids, lengths, row, weight, f"{reader.where}, step {step}"
        )

    def _token_step(self, step: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        if self._reader is None:  # pragma: no cover - set by _open_file
            raise PlanError(f"{self.plan_dir.path}: no epoch loaded")
        ids, lengths = self._reader.step(step)
        self._step_cache = (step, lengths)
        return ids, lengths

    def _open_file(self, epoch: int) -> None:
        d = self.plan_dir
        if d.tokens is not None:
            d.check_world_size(self.num_replicas)
            reader = TokenRankReader(d, epoch, self.rank)
            if self._reader is not None:
                self._reader.close()
            self._reader, self._step_cache = reader, None
            self._file = reader._ids
            return
        opened = d.open_rank_file(epoch, self.rank, self.num_replicas)
        if self._file is not None:
            self._file.close()
        self._file = opened

    def _step_ids(self, step: int) -> npt.NDArray[np.int64]:
        if self._reader is not None:
            return self._token_step(step)[0]
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

    def __len__(self) -> int:
        if self._reader is None:
            return super().__len__()
        first = self._resume or 0
        return int(self._reader.micro_batch_counts()[first:].sum())

    def state_dict_at_step(self, step: int) -> dict[str, Any]:
        state = super().state_dict_at_step(step)
        tokens = self.plan_dir.tokens
        if tokens is not None:
            state.update(_token_state(tokens))
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._check_consumed(state_dict)
        tokens = self.plan_dir.tokens
        if tokens is not None and isinstance(state_dict, dict):
            state_dict = dict(state_dict)
            for key, mine in _token_state(tokens).items():
                if key not in state_dict:
                    raise ValueError(
                        f"state_dict has no {key!r}: it is the state of a plan without lengths, "
                        "and this plan has them"
                    )
                saved = state_dict.pop(key)
                if isinstance(saved, list):
                    saved = tuple(saved)
                if saved != mine:
                    raise ValueError(
                        f"state_dict[{key!r}] is {saved!r} but the plan directory has {mine!r}"
                    )
        super().load_state_dict(state_dict)

    def _check_consumed(self, state_dict: Any) -> None:
        """A mixture's state names where each source's sequence continues;
        the files hold each epoch from its default counts, so a state of
        other counts (a curriculum's) is refused rather than served
        another plan's ids. Every other field is checked by the base class."""
        d = self.plan_dir
        space = state_dict.get("space") if isinstance(state_dict, dict) else None
        epoch = state_dict.get("epoch") if isinstance(state_dict, dict) else None
        if not isinstance(space, dict) or "consumed" not in space or epoch not in d.epochs:
            return
        saved = space["consumed"]
        mine = d.plan(epoch).state_dict().get("space") or {}
        if isinstance(saved, (list, tuple)) and list(saved) != mine.get("consumed", list(saved)):
            raise ValueError(
                f"state_dict['space']['consumed'] is {saved!r} but the plan directory holds "
                f"epoch {epoch} from {mine['consumed']!r}"
            )

    def __getstate__(self) -> dict[str, Any]:
        # Open files are not pickled: the file is checked and opened again
        # when unpickled.
        state = self.__dict__.copy()
        state["_file"] = None
        state["_reader"] = None
        state["_step_cache"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._open_file(self.epoch)


def _token_state(tokens: Any) -> dict[str, Any]:
    """What a token plan's state adds to a plan's: as ``EpochPlan.state_dict``
    records it."""
    loss = tokens.loss_tokens
    state = {
        "cost": tokens.cost,
        "loss_normalization": tokens.loss_normalization,
        "lengths_digest": tokens.lengths.digest,
        "loss_tokens_digest": None if loss is None else loss.digest,
    }
    if tokens.max_length is not None:
        state["max_length"] = tokens.max_length
    if tokens.packing != "sorted":
        state["packing"] = tokens.packing
    return state
