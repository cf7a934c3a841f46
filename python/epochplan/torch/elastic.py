"""Equal-step, weighted micro-batches of an epoch plan for
``DataLoader(batch_sampler=...)``: :class:`ElasticBatchSampler`, and
:class:`ChunkSampler` for chunked storage."""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Iterator, Sized
from typing import Any, Generic, ParamSpec, TypeVar, overload

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Sampler

from epochplan._args import int_arg, is_bool
from epochplan._kinds import KIND_FIELDS, plan_fields
from epochplan._native import (
    MAX_SAMPLES,
    Chunked,
    EpochPlan,
    MixtureEpoch,
    PlanSpec,
    Selection,
)
from epochplan._oversize import OversizeReport, apply_oversize, report_of
from epochplan._types import MicroBatch
from epochplan.torch._resume import keeps_set_epoch
from epochplan.torch._wrappers import check_iteration
from epochplan.torch.collate import WeightedCollate, WeightedDataset, WeightedIndices
from epochplan.torch.rank import RankProvider, resolve_rank

__all__ = ["ChunkSampler", "ElasticBatchSampler"]

T = TypeVar("T")


class _SpecField(Generic[T]):
    """An attribute of a sampler that is a field of its :class:`PlanSpec`:
    the parameters travel as one value; setting one replaces the spec, the
    new value checked at once (the next epoch's plan is made of it)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, objtype: type | None = None) -> _SpecField[T]: ...
    @overload
    def __get__(self, obj: ElasticBatchSampler, objtype: type | None = None) -> T: ...
    def __get__(
        self, obj: ElasticBatchSampler | None, objtype: type | None = None
    ) -> T | _SpecField[T]:
        if obj is None:
            return self
        value: T = getattr(obj._spec, self.name)
        return value

    def __set__(self, obj: ElasticBatchSampler, value: T) -> None:
        changes: dict[str, Any] = {self.name: value}
        obj._spec = obj._spec.replace(**changes)


def _num_samples_of(value: object, name: str) -> int:
    """N from a dataset (its length) or an int. An array or a tensor is a
    dataset even when it could stand for an int (``torch.tensor([7])`` holds
    one sample, not seven); only a 0-d one, which has no length, is an int."""
    if is_bool(value):
        raise TypeError(f"{name} must be an int or a sized dataset, got {type(value).__name__}")
    n = None
    if isinstance(value, Sized):
        try:
            n = len(value)
        except TypeError:
            pass  # a 0-d array or tensor: no length
        except (OverflowError, ValueError) as e:
            raise ValueError(
                f"{name} must hold [0, 2**63 - 1] samples, but its len() failed: {e}"
            ) from None
    if n is None:
        try:
            n = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                f"{name} must be an int or a sized dataset, got {type(value).__name__}"
            ) from None
    if not 0 <= n <= MAX_SAMPLES:
        raise ValueError(f"{name} must hold [0, 2**63 - 1] samples, got {n}")
    return n


# torch's DataLoader and BatchSampler names, and what this sampler takes instead.
_TORCH_NAMES = {
    "batch_size": "the spec's global_batch_size (samples per optimizer step over all "
    "ranks) and micro_batch_size= (the most samples per micro-batch on a rank)",
    "shuffle": "the spec kind='identity' for the dataset's own order (every other kind shuffles)",
    "sampler": "spec= (PlanSpec(len(dataset), global_batch_size, ...), or an index space "
    "in place of the length)",
}
# The plan's parameters, which travel in the spec.
_SPEC_NAMES = {
    "seed": "PlanSpec(..., seed=)",
    "kind": "PlanSpec(..., kind=)",
    "drop_last": "PlanSpec(..., drop_last=)",
    "global_batch_size": "PlanSpec(num_samples, global_batch_size)",
    "chunk_size": "PlanSpec(..., kind=Chunked(chunk_size, preload_nchunks))",
    "preload_nchunks": "PlanSpec(..., kind=Chunked(chunk_size, preload_nchunks))",
    "lengths": "PlanSpec(..., tokens=Tokens(lengths, ...))",
    "loss_tokens": "PlanSpec(..., tokens=Tokens(lengths, loss_tokens))",
    "cost": "PlanSpec(..., tokens=Tokens(lengths, cost=))",
    "loss_normalization": "PlanSpec(..., tokens=Tokens(lengths, loss_normalization=))",
    "oversize": "PlanSpec(..., tokens=Tokens(lengths, oversize=))",
}

P = ParamSpec("P")


def _refuse_torch_names(init: Callable[P, None]) -> Callable[P, None]:
    """``__init__`` with a pointer to this sampler's argument for the torch
    names users bring from ``DataLoader`` (``batch_size=``), instead of
    Python's bare "unexpected keyword argument"."""

    @functools.wraps(init)
    def checked(*args: P.args, **kwargs: P.kwargs) -> None:
        owner = type(args[0]).__name__ if args else "ElasticBatchSampler"
        for name, instead in _TORCH_NAMES.items():
            if name in kwargs:
                raise TypeError(f"{owner}() takes no {name}=: give {instead}")
        for name, instead in _SPEC_NAMES.items():
            if name in kwargs:
                raise TypeError(
                    f"{owner}() takes no {name}=: the plan's parameters travel in its "
                    f"spec: give {instead}"
                )
        init(*args, **kwargs)

    return checked


def _weighted(step: int, batches: list[MicroBatch]) -> list[WeightedIndices]:
    """A step's micro-batches as the samplers yield them."""
    last = len(batches) - 1
    return [
        WeightedIndices(ids.tolist(), weights, step, m == last)
        for m, (ids, weights) in enumerate(batches)
    ]


class ElasticBatchSampler(Sampler[WeightedIndices]):
    """Equal-step, weighted micro-batches of an :class:`~epochplan.EpochPlan`.

    For ``DataLoader(batch_sampler=...)``. The contract:

    - Step ``t`` holds positions ``[t*G, min((t+1)*G, N))`` of the epoch's
      order, whatever the world size W; rank ``r`` gets the step's positions
      ``r, r + W, ...`` (token plans: balanced by cost), cut into the same
      number of micro-batches on every rank, zero-weight fillers where a
      rank runs short: DDP never hangs. Every sample has a non-zero weight
      exactly once an epoch; nothing is padded or dropped but by
      ``drop_last``.
    - Each item is a :class:`WeightedIndices` (ids with ``.weights``,
      ``.step``, ``.step_end``). The loss rule: per micro-batch, ``loss =
      (weights * per_sample_loss).sum()`` (token plans: each sample's
      per-token losses summed), step the optimizer after ``step_end``: the
      update is the mean gradient (token mean) over the step's samples, for
      any W and micro-batch size. Through a DataLoader, use
      :meth:`wrap_dataset` and :meth:`collate` (a :class:`WeightedBatch`
      a micro-batch, for any ``num_workers``).
    - ``state_dict()`` / ``load_state_dict()`` (torchdata's Stateful
      protocol) hold the plan's state, which has no world size in it: a
      state saved on W ranks resumes on any W', at the start of the step it
      was saved in. With workers prefetching, save
      :meth:`state_dict_at_step` ``(batch.step + 1)`` after an optimizer
      step. ``set_epoch(e)`` starts a new epoch at step 0.
    - A :class:`~epochplan.Selection` or :class:`~epochplan.Mixture` given
      instead of the dataset: the sampler yields the store's own ids.
    - Subclasses serving precomputed plans override :meth:`_build_plan`,
      :meth:`_step_ids` and :meth:`_split_step`.

    The guides say why and how: DDP with torch (docs/guides/ddp.md),
    resuming (docs/guides/resuming.md, with ``StatefulDataLoader``), token
    plans (docs/concepts/token-plans.md), index spaces
    (docs/concepts/index-spaces.md) and training frameworks
    (docs/guides/frameworks.md).

    Args:
        spec: the plan's parameters (a :class:`~epochplan.PlanSpec`: N or an
            index space, the global batch size G, seed, kind, drop_last and
            a token plan's :class:`~epochplan.Tokens`); epoch ``e`` is
            ``spec.plan(e)``.
        micro_batch_size: the most samples per micro-batch on a rank (b);
            may be None for a token plan with ``max_tokens``.
        max_tokens: the most tokens per micro-batch (token plans). A sample
            longer is found at construction, in one pass over the lengths,
            and handled by the tokens' ``oversize`` policy (``"error"``
            names how many and the first ids; ``oversize_report`` says
            which were truncated or skipped).
        rank: this process's rank; default: see :func:`resolve_rank`.
        num_replicas: the world size; default: see :func:`resolve_rank`.
        rank_fn: a ``() -> (rank, world_size)`` callable, the last fallback.

    Examples:
        >>> sampler = ElasticBatchSampler(PlanSpec(9, 9), 4, rank=1, num_replicas=2)
        >>> [len(mb) for mb in sampler], len(sampler)
        ([2, 2], 2)
        >>> loader = torch.utils.data.DataLoader(  # doctest: +SKIP
        ...     sampler.wrap_dataset(dataset), batch_sampler=sampler,
        ...     collate_fn=sampler.collate(), num_workers=2)
        >>> for batch in loader:  # doctest: +SKIP
        ...     x, y = batch.data
        ...     loss = (batch.sample_weight * loss_fn(model(x), y)).sum()
    """

    # The plan's parameters, read and set as attributes of the sampler.
    num_samples: _SpecField[int] = _SpecField()
    global_batch_size: _SpecField[int] = _SpecField()
    seed: _SpecField[int] = _SpecField()
    kind: _SpecField[str | Chunked] = _SpecField()
    drop_last: _SpecField[bool] = _SpecField()
    #: The samples longer than ``max_tokens`` and what was done with them
    #: (None without lengths and a token cap).
    oversize_report: OversizeReport | None = None

    @_refuse_torch_names
    def __init__(
        self,
        spec: PlanSpec,
        micro_batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
        rank: int | None = None,
        num_replicas: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        if not isinstance(spec, PlanSpec):
            raise TypeError(
                "spec must be a PlanSpec (PlanSpec(len(dataset), global_batch_size, "
                f"seed=...)), got {type(spec).__name__}"
            )
        if isinstance(spec.space, MixtureEpoch):
            raise TypeError(
                "spec must be over the Mixture, not one of its epochs: the sampler plans "
                "epoch e over mixture.epoch(e)"
            )
        max_tokens = None if max_tokens is None else int_arg(max_tokens, "max_tokens")
        # Samples over the cap, found before the first batch (one pass).
        spec, report = apply_oversize(spec, max_tokens)
        self._start(spec, micro_batch_size, rank, num_replicas, rank_fn, max_tokens=max_tokens)
        if report is None and spec.tokens is not None and self.max_tokens is not None:
            report = report_of(self._plan, self.max_tokens)
        self.oversize_report = report

    @property
    def spec(self) -> PlanSpec:
        """The plan's parameters: epoch ``e``'s plan is ``spec.plan(e)``."""
        return self._spec

    def _start(
        self,
        spec: PlanSpec,
        micro_batch_size: int | None,
        rank: int | None,
        num_replicas: int | None,
        rank_fn: RankProvider | None,
        *,
        max_tokens: int | None = None,
    ) -> None:
        """Sets the sampler up for the plans of ``spec`` (a subclass that
        brings its own spec calls this instead of ``__init__``)."""
        self._spec = spec
        tokens = spec.tokens
        if tokens is None or micro_batch_size is not None:
            micro_batch_size = int_arg(micro_batch_size, "micro_batch_size", 1, MAX_SAMPLES)
        self.micro_batch_size = micro_batch_size
        self.max_tokens = max_tokens
        self.rank, self.num_replicas = resolve_rank(rank, num_replicas, rank_fn=rank_fn)
        self.epoch = 0
        self._resume: int | None = None
        self._next_step = 0
        self._epoch_set = False  # see keeps_set_epoch
        self._finished = False  # an iteration ran to the epoch's end (see check_iteration)
        self._plan = self._build_plan(0)
        if tokens is not None or max_tokens is not None:
            # The caps are checked by the plan (and step 0 against them).
            if self._plan.num_steps:
                self._plan.num_micro_batches(
                    0, self.num_replicas, self.micro_batch_size, max_tokens=self.max_tokens
                )
            else:
                self._plan.total_micro_batches(
                    self.num_replicas, self.micro_batch_size, max_tokens=self.max_tokens
                )

    # -- the hooks a subclass may override -------------------------------------

    def _build_plan(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch`` (cursor 0); called at construction, by
        :meth:`set_epoch` and by :meth:`load_state_dict`."""
        return self._spec.plan(epoch)

    def _step_ids(self, step: int) -> npt.NDArray[np.int64]:
        """This rank's real sample ids of ``step``, in dealing order (what
        ``self.plan.step_indices(step, rank, num_replicas)`` gives)."""
        return self._plan.step_indices(step, self.rank, self.num_replicas)

    @property
    def plan(self) -> EpochPlan:
        """The current epoch's plan (from step 0)."""
        return self._plan

    def _split_step(self, step: int, ids: npt.NDArray[np.int64]) -> list[MicroBatch]:
        """``ids`` (this rank's real samples of ``step``) cut into the step's
        micro-batches with their weights and fillers."""
        w, b = self.num_replicas, self.micro_batch_size
        if self.max_tokens is None:
            return self._plan.split_step(step, self.rank, w, b, ids)
        return self._plan.split_step(step, self.rank, w, b, ids, max_tokens=self.max_tokens)

    # --------------------------------------------------------------------------

    def _steps(self, first: int) -> Iterator[list[MicroBatch]]:
        """This rank's micro-batches of each step from ``first`` on: the
        plan's own iterator, which makes the next steps on the thread pool
        while the loop consumes one (a subclass that reads its ids
        elsewhere cuts them step by step)."""
        plan = self._plan.at_step(first)
        w, b = self.num_replicas, self.micro_batch_size
        if self.max_tokens is None:
            return iter(plan.micro_batches(self.rank, w, b))
        return iter(plan.micro_batches(self.rank, w, b, max_tokens=self.max_tokens))

    def step_batches(self, step: int) -> list[WeightedIndices]:
        """This rank's micro-batches of ``step``, as the iteration yields
        them (``plan.rank(rank, num_replicas).step_micro_batches(step, b)``
        gives the same as (indices, weights) pairs)."""
        return _weighted(step, self._split_step(step, self._step_ids(step)))

    def __iter__(self) -> Iterator[WeightedIndices]:
        # A DataLoader calls iter() more than once before it takes the first batch, so
        # a loaded position is consumed at the first next(), not here.
        self._next_step = self._resume or 0
        return self._generate()

    def _generate(self) -> Iterator[WeightedIndices]:
        check_iteration(self, self.epoch, self._finished and self.kind != "identity")
        first, self._resume = (self._resume or 0), None
        self._next_step = first
        plan = self._plan
        for step, batches in enumerate(self._steps(first), start=first):
            for batch in _weighted(step, batches):
                # The epoch's batches and the progress a state records belong to
                # one plan: a set_epoch or load_state_dict in the middle would mix
                # two epochs (and a state saved then would skip the new one).
                if self._plan is not plan:
                    raise RuntimeError(
                        "set_epoch() or load_state_dict() was called while an iteration "
                        "of this sampler was running; start a new iteration after it"
                    )
                # Where a resume would start if this is the last batch consumed.
                self._next_step = step + 1 if batch.step_end else step
                yield batch
        self._finished = self._plan is plan

    def __len__(self) -> int:
        """Micro-batches the next iteration yields (the same on every rank)."""
        plan = self._plan
        first = self._resume or 0
        if first >= plan.num_steps:
            return 0
        if self._spec.tokens is not None:
            # Counts differ by step: counted from the lengths of every step left.
            return plan.at_step(first).total_micro_batches(
                self.num_replicas, self.micro_batch_size, max_tokens=self.max_tokens
            )
        total = plan.total_micro_batches(self.num_replicas, self.micro_batch_size)
        if first == 0:
            return total
        # Steps before `first` are full steps: all have the same count.
        return total - first * plan.num_micro_batches(0, self.num_replicas, self.micro_batch_size)

    def set_epoch(self, epoch: int) -> None:
        """Starts ``epoch`` at step 0 (a no-op if it is the current epoch)."""
        epoch = int_arg(epoch, "epoch")
        if epoch != self.epoch:
            self._plan = self._build_plan(epoch)
            self.epoch = epoch
            self._resume, self._next_step = None, 0
        self._epoch_set = True
        self._finished = False

    def state_dict_at_step(self, step: int) -> dict[str, Any]:
        """The state that resumes this epoch at ``step`` (0 to ``plan.num_steps``)."""
        step = int_arg(step, "step")
        plan = self._plan
        if not 0 <= step <= plan.num_steps:
            raise IndexError(f"step must be in [0, {plan.num_steps}], got {step}")
        state = plan.state_dict()
        state["cursor"] = min(step * plan.global_batch_size, plan.num_samples)
        return state

    def state_dict(self) -> dict[str, Any]:
        """The plan's state at the step a resume starts with (see the class docs)."""
        step = self._resume if self._resume is not None else self._next_step
        return self.state_dict_at_step(step)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores a state saved on any world size: the next iteration starts at
        its step. The sample count, global batch size, kind, chunk_size,
        preload_nchunks and drop_last must match this sampler's; the seed and
        epoch are taken from the state."""
        if isinstance(state_dict, dict) and "yielded" in state_dict:
            # A strided sampler's state counts indices yielded on one world size.
            raise ValueError(
                "state_dict is a DistributedSampler's state (it counts the indices one rank "
                f"yielded), not an {type(self).__name__}'s: load it into the sampler that "
                "saved it; this sampler resumes from its own state_dict(), the plan's state"
            )
        try:
            tokens = self._spec.tokens
            saved = EpochPlan.from_state_dict(
                state_dict,
                space=self._spec.space,
                lengths=None if tokens is None else tokens.lengths,
                loss_tokens=None if tokens is None else tokens.loss_tokens,
            )
        except (TypeError, ValueError, OverflowError) as e:
            raise type(e)(f"state_dict: {e}") from None
        mine = self._plan
        theirs, ours = plan_fields(saved.spec), plan_fields(mine.spec)
        for key in ("num_samples", "global_batch_size", "kind", *KIND_FIELDS, "drop_last"):
            if theirs[key] != ours[key]:
                raise ValueError(
                    f"state_dict[{key!r}] is {theirs[key]!r} but this sampler has "
                    f"{key}={ours[key]!r}"
                )
        if tokens is not None:
            # How the steps are dealt and weighed: a state of other models would
            # resume other micro-batches than this sampler's epochs deal.
            for key in ("cost", "loss_normalization", "max_length", "packing"):
                theirs, ours = getattr(saved.spec.tokens, key), getattr(tokens, key)
                if theirs != ours:
                    raise ValueError(
                        f"state_dict[{key!r}] is {theirs!r} but this sampler's tokens have "
                        f"{key}={ours!r}"
                    )
        keep = keeps_set_epoch(self._epoch_set, self.epoch, saved.epoch, not saved.remaining_steps)
        epoch, step = (self.epoch, 0) if keep else (saved.epoch, saved.start_step)
        # The plan is built under the saved seed; nothing changes if that fails.
        seed, self.seed = self.seed, saved.seed
        try:
            if not keep and type(self)._build_plan is ElasticBatchSampler._build_plan:
                # The saved plan is this epoch's: its order (a table of N ids for
                # "uniform") is not built a second time.
                plan = saved.at_step(0)
            else:
                plan = self._build_plan(epoch)
        except BaseException:
            self.seed = seed
            raise
        self.epoch = epoch
        self._plan = plan
        self._resume = self._next_step = step
        self._epoch_set = keep
        self._finished = False

    @staticmethod
    def wrap_dataset(dataset: Any) -> WeightedDataset:
        """The dataset for ``DataLoader(...)`` so weights reach :meth:`collate`."""
        return WeightedDataset(dataset)

    @staticmethod
    def collate(
        collate_fn: Callable[[list[Any]], Any] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> WeightedCollate:
        """A ``collate_fn`` yielding :class:`WeightedBatch` (see :class:`WeightedCollate`)."""
        return WeightedCollate(collate_fn, dtype)

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(spec={self._spec!r}, "
            f"micro_batch_size={self.micro_batch_size}, max_tokens={self.max_tokens}, "
            f"rank={self.rank}, num_replicas={self.num_replicas}, epoch={self.epoch})"
        )


class ChunkSampler(ElasticBatchSampler):
    """Batches for chunked storage (zarr chunks, parquet row groups, shards).

    An :class:`ElasticBatchSampler` over the ``"chunked"`` order: the chunks
    (``chunk_size`` consecutive sample ids) are visited in a keyed random order,
    and the samples of each window of ``preload_nchunks`` consecutive chunks (in
    that order) are shuffled among themselves. Reading positions in order
    touches at most ``preload_nchunks`` chunks per window, so a loader can
    preload one window and serve it from memory. Windows are consecutive runs
    of positions; when ``chunk_size`` does not divide N, the short last chunk
    shortens its window, and later windows start ``chunk_size - N % chunk_size``
    positions before the multiples of ``chunk_size * preload_nchunks``.
    Distributed, exact, elastic and resumable like :class:`ElasticBatchSampler`
    (same items, state and weights).

    ``global_batch_size`` samples a step over all ranks, so the global
    batches do not depend on the world size; each rank gets one micro-batch
    of at most ``ceil(global_batch_size / num_replicas)`` samples per step
    (for smaller ones, ``ElasticBatchSampler(PlanSpec(n, G,
    kind=Chunked(...)), micro_batch_size)``). On one process this is the
    usual per-loader batch size.

    Examples:
        >>> sampler = ChunkSampler(100, 8, Chunked(10, preload_nchunks=2),
        ...                        rank=0, num_replicas=1)
        >>> len(sampler), len(next(iter(sampler)))
        (13, 8)
    """

    def __init__(
        self,
        num_samples: Sized | int | Selection,
        global_batch_size: int,
        chunked: Chunked,
        *,
        seed: int = 0,
        drop_last: bool = False,
        rank: int | None = None,
        num_replicas: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        # A selection goes on to the plan: its chunks are chunks of the store.
        space = num_samples if isinstance(num_samples, Selection) else None
        n = _num_samples_of(num_samples, "num_samples")
        if not isinstance(chunked, Chunked):
            raise TypeError(
                "chunked must be a Chunked (Chunked(chunk_size, preload_nchunks)), got "
                f"{type(chunked).__name__}"
            )
        spec = PlanSpec(
            n if space is None else space,
            global_batch_size,
            seed=seed,
            kind=chunked,
            drop_last=drop_last,
        )
        rank, num_replicas = resolve_rank(rank, num_replicas, rank_fn=rank_fn)
        micro_batch_size = -(-spec.global_batch_size // num_replicas)
        super().__init__(spec, micro_batch_size, rank=rank, num_replicas=num_replicas)
