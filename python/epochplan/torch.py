"""Samplers for ``torch.utils.data.DataLoader`` built on epochplan's orders and plans.

This is the only module of the package that imports torch.

* :class:`DistributedSampler`: a drop-in for ``torch.utils.data.DistributedSampler``
  (same arguments, attributes, counts, padding and dropping), whose shuffled order
  comes from a :class:`~epochplan.Permutation`: a rank computes only its own share,
  lazily, in chunks; nothing of size N is built.
* :class:`ExactDistributedSampler`: no padding, no dropping (for evaluation).
* :class:`ElasticBatchSampler`: micro-batches of an :class:`~epochplan.EpochPlan`,
  the same count on every rank, with loss weights; resumable on any world size.
* :class:`ChunkSampler`: the same for chunked storage (kind ``"chunked"``).
* :class:`PlanSampler`: the same micro-batches read from a plan directory
  written offline (:mod:`epochplan.planfile`).

Rank and world size come from :func:`resolve_rank`: explicit arguments, else
``torch.distributed`` (if initialised), else the ``RANK`` / ``WORLD_SIZE``
environment variables, else a rank provider (``rank_fn=`` or
:func:`set_rank_provider`, e.g. for JAX).
"""

from __future__ import annotations

import operator
import os
import re
from collections.abc import Callable, Iterator, Sequence, Sized
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, Sampler, default_collate

from epochplan._args import bool_arg, int_arg, int_label, is_bool
from epochplan._native import MAX_SAMPLES as _MAX_SAMPLES
from epochplan._native import EpochPlan, Permutation

if TYPE_CHECKING:
    from epochplan._plan_sampler import PlanSampler

__all__ = [
    "ChunkSampler",
    "DistributedSampler",
    "ElasticBatchSampler",
    "ExactDistributedSampler",
    "PlanSampler",
    "RankProvider",
    "WeightedBatch",
    "WeightedCollate",
    "WeightedDataset",
    "WeightedIndices",
    "resolve_rank",
    "set_rank_provider",
]

#: A callable returning ``(rank, world_size)``, e.g.
#: ``lambda: (jax.process_index(), jax.process_count())``.
RankProvider = Callable[[], tuple[int, int]]

_rank_provider: RankProvider | None = None

# Lazy iteration: the first chunk is small (fast first index), later ones larger.
_FIRST_CHUNK = 1024
_MAX_CHUNK = 1 << 16
_U64 = 1 << 64


def set_rank_provider(fn: RankProvider | None) -> None:
    """Sets (or, with None, clears) the process-wide fallback rank provider.

    Used by every sampler of this module when neither arguments, nor
    ``torch.distributed``, nor ``RANK`` / ``WORLD_SIZE`` give the rank.

    Example:
        >>> set_rank_provider(lambda: (jax.process_index(), jax.process_count()))
        ... # doctest: +SKIP
    """
    global _rank_provider
    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be callable or None, got {type(fn).__name__}")
    _rank_provider = fn


def _env_int(name: str) -> int:
    raw = os.environ[name]
    # ASCII digits only: int() also takes "1_0" (as 10) and other scripts' digits.
    if re.fullmatch(r"\s*[-+]?[0-9]+\s*", raw) is None:
        raise ValueError(f"the environment variable {name} must be an int, got {raw!r}")
    return int(raw)


def resolve_rank(
    num_replicas: int | None = None,
    rank: int | None = None,
    *,
    rank_fn: RankProvider | None = None,
) -> tuple[int, int]:
    """Resolves ``(rank, num_replicas)`` for a sampler.

    Each value not given explicitly comes from the first source that applies:
    ``torch.distributed`` if it is initialised; else the ``RANK`` and
    ``WORLD_SIZE`` environment variables (each needed one must be set); else ``rank_fn``
    or the provider of :func:`set_rank_provider`, which returns
    ``(rank, world_size)``.

    Raises:
        ValueError: no source applies, or the rank is not in
            ``[0, num_replicas - 1]``.
        TypeError: a value is not an int.

    Example:
        >>> resolve_rank(4, 1)
        (1, 4)
    """
    if rank_fn is not None and not callable(rank_fn):
        raise TypeError(f"rank_fn must be callable or None, got {type(rank_fn).__name__}")
    if num_replicas is not None:
        num_replicas = int_arg(num_replicas, "num_replicas")
    if rank is not None:
        rank = int_arg(rank, "rank")
    source = "arguments"
    if num_replicas is None or rank is None:
        found = _implicit_rank(rank_fn, need_rank=rank is None, need_world=num_replicas is None)
        if found is None:
            missing = " and ".join(
                n for n, v in (("num_replicas", num_replicas), ("rank", rank)) if v is None
            )
            raise ValueError(
                f"{missing} not given and no source defines them: torch.distributed is not "
                "initialised, RANK and WORLD_SIZE are not set and no rank provider was set "
                "(pass num_replicas= and rank=, rank_fn=, or call "
                "epochplan.torch.set_rank_provider)"
            )
        source, (found_rank, found_world) = found
        num_replicas = found_world if num_replicas is None else num_replicas
        rank = found_rank if rank is None else rank
    where = "" if source == "arguments" else f" (from {source})"
    if not 1 <= num_replicas <= _MAX_SAMPLES:
        raise ValueError(
            f"num_replicas must be in [1, 2**63 - 1], got {int_label(num_replicas)}{where}"
        )
    # torch's message (a drop-in).
    if rank >= num_replicas or rank < 0:
        raise ValueError(
            f"Invalid rank {int_label(rank)}, rank should be in the interval "
            f"[0, {num_replicas - 1}]{where}"
        )
    return rank, num_replicas


def _implicit_rank(
    rank_fn: RankProvider | None, *, need_rank: bool, need_world: bool
) -> tuple[str, tuple[int, int]] | None:
    """The first source of the rank and world size that applies. From the
    environment, only the variables of the values needed are read (a value
    not needed comes back as 0)."""
    if dist.is_available() and dist.is_initialized():
        return "torch.distributed", (dist.get_rank(), dist.get_world_size())
    needed = [name for name, need in (("RANK", need_rank), ("WORLD_SIZE", need_world)) if need]
    present = [name for name in ("RANK", "WORLD_SIZE") if name in os.environ]
    if present:
        absent = [name for name in needed if name not in present]
        if absent:
            raise ValueError(
                f"the environment variable {present[0]} is set but {absent[0]} is not; set "
                "both or pass num_replicas= and rank="
            )
        return f"the {' and '.join(needed)} environment variable{'s' * (len(needed) > 1)}", (
            _env_int("RANK") if need_rank else 0,
            _env_int("WORLD_SIZE") if need_world else 0,
        )
    fn = rank_fn if rank_fn is not None else _rank_provider
    if fn is None:
        return None
    got = fn()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TypeError(f"the rank provider must return (rank, world_size), got {got!r}")
    return "the rank provider", (
        int_arg(got[0], "the provider's rank"),
        int_arg(got[1], "the provider's world_size"),
    )


def _seed_arg(value: object, name: str) -> int:
    # torch accepts any int as a seed; the order is keyed by its value mod 2**64.
    return int_arg(value, name) % _U64


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
    if not 0 <= n <= _MAX_SAMPLES:
        raise ValueError(f"{name} must hold [0, 2**63 - 1] samples, got {n}")
    return n


class _ChunkProgress:
    """Counts the items a lazy, chunked iteration has handed out."""

    def __init__(self, done: int = 0) -> None:
        self.done = done
        # The chunk being handed out: where it starts, its ids and their iterator.
        self.live: tuple[int, list[int], Iterator[int]] | None = None
        # Set by cut(): whether the iteration was interrupted, and with ids left.
        self.interrupted = False
        self.cut_short = False

    def yielded(self) -> int:
        if self.live is None:
            return self.done
        base, ids, it = self.live
        # A list iterator knows how many items it still holds.
        return base + len(ids) - operator.length_hint(it)

    def cut(self) -> None:
        """Ends the chunk being handed out: its iterator stops at its next
        item. Records the interruption, and whether any ids were left."""
        self.interrupted = True
        if self.live is not None:
            _, ids, it = self.live
            self.cut_short |= operator.length_hint(it) > 0
            ids.clear()


def _keeps_set_epoch(epoch_set: bool, epoch: int, saved_epoch: int, saved_finished: bool) -> bool:
    """Whether a loaded state leaves the sampler on the epoch ``set_epoch`` chose.

    torchdata's ``StatefulDataLoader`` loads the sampler's state at the next
    ``iter()``, after the loop's ``set_epoch`` for that iteration. A state saved
    at the end of an epoch has nothing of it left to resume: taking its epoch
    then would undo ``set_epoch(next_epoch)`` and train on nothing (or on the
    finished epoch's order again). So a finished state of another epoch, loaded
    after ``set_epoch``, keeps the set epoch at its start; any other state is
    resumed as saved.
    """
    return epoch_set and saved_finished and saved_epoch != epoch


class _StridedSampler(Sampler[int]):
    """Rank ``r`` gets positions ``r, r + W, ...`` of the epoch's order, lazily."""

    total_size: int
    num_samples: int

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None,
        rank: int | None,
        shuffle: bool,
        seed: int,
        rank_fn: RankProvider | None,
    ) -> None:
        if not isinstance(dataset, Sized):
            raise TypeError(
                f"dataset must be a sized dataset (with len()), got {type(dataset).__name__}"
            )
        rank, num_replicas = resolve_rank(num_replicas, rank, rank_fn=rank_fn)
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed
        self._n = len(dataset)
        self._key = _seed_arg(seed, "seed")
        self._resume: int | None = None
        self._progress = _ChunkProgress()
        self._epoch_set = False  # see _keeps_set_epoch

    def __len__(self) -> int:
        """Indices the next iteration yields: ``num_samples``, less a loaded
        position's."""
        return self.num_samples - (self._resume or 0)

    def set_epoch(self, epoch: int) -> None:
        """Sets the epoch: a different ``(seed, epoch)`` gives an unrelated order.
        Another epoch starts at its first index (an iteration still running
        then raises RuntimeError at its next item); the current one is left as
        it is (so a loaded position survives the loop's ``set_epoch`` call)."""
        _seed_arg(epoch, "epoch")
        epoch = operator.index(epoch)
        if epoch != self.epoch:
            self._interrupt()
            self.epoch = epoch
            self._resume, self._progress = None, _ChunkProgress()
        self._epoch_set = True

    def _interrupt(self) -> None:
        # The running iteration, if any, stops at its next item (see _generate).
        self._progress.cut()

    def _order(self) -> Permutation:
        if not self.shuffle:
            return Permutation(self._n, kind="identity")
        return Permutation(self._n, seed=self._key, epoch=self.epoch % _U64)

    def _chunk(self, order: Permutation, first: int, size: int) -> list[int]:
        """Sample ids of the rank's items ``first .. first + size - 1``."""
        n, w = self._n, self.num_replicas
        start = self.rank + first * w
        real = 0 if start >= n else min(size, (n - start + w - 1) // w)
        parts: list[npt.NDArray[np.int64]] = []
        if real:
            parts.append(np.asarray(order[start : start + (real - 1) * w + 1 : w]))
        if real < size:
            # Padding (torch's rule): position p >= N repeats the order's position
            # p mod N. Counted from N (p - N < W), as p itself may pass 2**63 - 1.
            past = start + real * w - n
            pad = (past + np.arange(size - real, dtype=np.int64) * w) % n
            parts.append(order.take(pad))
        ids = parts[0] if len(parts) == 1 else np.concatenate(parts)
        out: list[int] = ids.tolist()
        return out

    def __iter__(self) -> Iterator[int]:
        # A DataLoader calls iter() more than once before it takes the first index, so
        # a loaded position is consumed at the first next(), not here.
        self._progress = _ChunkProgress(self._resume or 0)
        return self._generate()

    def _generate(self) -> Iterator[int]:
        first, self._resume = (self._resume or 0), None
        progress = self._progress = _ChunkProgress(first)
        count = self.num_samples
        if first >= count:
            return
        order = self._order()
        size = _FIRST_CHUNK
        while first < count:
            size = min(size, count - first)
            ids = self._chunk(order, first, size)
            it = iter(ids)
            progress.live = (first, ids, it)
            yield from it
            # A set_epoch or load_state_dict in the middle cut the chunk short
            # (no check on every item): going on would serve the old epoch while
            # the state records the new one, and a checkpoint saved then would
            # skip what was served. An iteration with nothing left just ends.
            if progress.interrupted and (progress.cut_short or first + size < count):
                raise RuntimeError(
                    "set_epoch() or load_state_dict() was called while an iteration "
                    "of this sampler was running; start a new iteration after it"
                )
            first += size
            size = min(size * 4, _MAX_CHUNK)
        progress.live, progress.done = None, count

    def state_dict(self) -> dict[str, Any]:
        """``{"epoch", "seed", "yielded", "num_replicas"}``: resumes this rank on
        the same world size."""
        yielded = self._resume if self._resume is not None else self._progress.yielded()
        return {
            "epoch": self.epoch,
            "seed": self.seed,
            "yielded": yielded,
            "num_replicas": self.num_replicas,
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores :meth:`state_dict`; the next iteration skips the yielded
        indices (an iteration still running raises RuntimeError at its next item)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        missing = {"epoch", "seed", "yielded"} - state_dict.keys()
        if missing:
            raise ValueError(f"state_dict is missing the keys {sorted(missing)}")
        unknown = state_dict.keys() - {"epoch", "seed", "yielded", "num_replicas"}
        if unknown:
            raise ValueError(
                f"state_dict has unknown keys {sorted(map(str, unknown))} "
                "(not a state of this sampler)"
            )
        # A rank's strided position means nothing at another world size (optional:
        # states saved without it load as before).
        if "num_replicas" in state_dict:
            saved = int_arg(state_dict["num_replicas"], "state_dict['num_replicas']")
            if saved != self.num_replicas:
                raise ValueError(
                    f"state_dict['num_replicas'] is {saved} but this sampler has "
                    f"num_replicas={self.num_replicas}: this state resumes on the same world "
                    "size only (ElasticBatchSampler resumes on any)"
                )
        yielded = int_arg(state_dict["yielded"], "state_dict['yielded']")
        if not 0 <= yielded <= self.num_samples:
            raise ValueError(
                f"state_dict['yielded'] must be in [0, {self.num_samples}], got {yielded}"
            )
        key = _seed_arg(state_dict["seed"], "state_dict['seed']")
        _seed_arg(state_dict["epoch"], "state_dict['epoch']")
        self._interrupt()
        self.seed = operator.index(state_dict["seed"])
        self._key = key
        epoch = operator.index(state_dict["epoch"])
        if _keeps_set_epoch(self._epoch_set, self.epoch, epoch, yielded == self.num_samples):
            self._resume, self._progress = None, _ChunkProgress()
            return
        self.set_epoch(epoch)
        self._resume, self._epoch_set = yielded, False


class DistributedSampler(_StridedSampler):
    """A drop-in for ``torch.utils.data.DistributedSampler`` in O(N/W) memory.

    Same arguments, attributes (``num_samples``, ``total_size``, ``epoch`` ...),
    per-rank counts, padding (the order's beginning is repeated until
    ``total_size``, also when that is more than N) and dropping
    (``drop_last=True`` drops the tail so every rank has ``num_samples``).
    With ``shuffle=False`` the indices are exactly torch's. With
    ``shuffle=True`` the order is a :class:`~epochplan.Permutation` keyed by a
    hash of ``(seed, epoch)`` (torch's ``seed + epoch`` makes seed 0, epoch 1
    equal seed 1, epoch 0), and a rank computes only its own positions
    ``rank, rank + num_replicas, ...``, lazily in chunks: the first index comes
    at once and nothing of size N is built.

    Args:
        dataset: anything with ``len()``.
        num_replicas: the world size; default: see :func:`resolve_rank`.
        rank: this process's rank; default: see :func:`resolve_rank`.
        shuffle: shuffle the indices (default True).
        seed: the shuffle's seed, the same on every rank.
        drop_last: drop the tail instead of padding.
        rank_fn: a ``() -> (rank, world_size)`` callable, the last fallback.

    ``state_dict()`` / ``load_state_dict()`` (torchdata's Stateful protocol)
    save ``{"epoch", "seed", "yielded", "num_replicas"}``; the next iteration
    after a load skips the yielded indices (same world size: another is a
    ValueError).

    Example:
        >>> sampler = DistributedSampler(range(10), num_replicas=3, rank=1, shuffle=False)
        >>> list(sampler)
        [1, 4, 7, 0]
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = False,
        *,
        rank_fn: RankProvider | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, rank_fn)
        self.drop_last = drop_last
        n, w = self._n, self.num_replicas
        if drop_last and n % w != 0:
            # torch: ceil((N - W) / W), which is 0 for N < W.
            self.num_samples = max(0, -((w - n) // w))
        else:
            self.num_samples = -(-n // w)
        self.total_size = self.num_samples * w

    def __repr__(self) -> str:
        return (
            f"DistributedSampler(dataset_len={self._n}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, "
            f"drop_last={self.drop_last}, epoch={self.epoch})"
        )


class ExactDistributedSampler(_StridedSampler):
    """Every sample exactly once over all ranks: no padding, no dropping.

    Rank ``r`` gets positions ``r, r + W, ...`` of the epoch's order, so ranks
    differ by at most one sample (for evaluation, where padding would count
    samples twice). Same arguments as :class:`DistributedSampler` without
    ``drop_last``; ``total_size`` is N.

    Example:
        >>> [list(ExactDistributedSampler(range(5), 2, r, shuffle=False)) for r in (0, 1)]
        [[0, 2, 4], [1, 3]]
    """

    def __init__(
        self,
        dataset: Sized,
        num_replicas: int | None = None,
        rank: int | None = None,
        shuffle: bool = True,
        seed: int = 0,
        *,
        rank_fn: RankProvider | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, rank_fn)
        self.drop_last = False
        n, w, r = self._n, self.num_replicas, self.rank
        self.num_samples = (n - r + w - 1) // w if r < n else 0
        self.total_size = n

    def __repr__(self) -> str:
        return (
            f"ExactDistributedSampler(dataset_len={self._n}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch})"
        )


class WeightedIndices(list[int]):
    """One micro-batch as :class:`ElasticBatchSampler` yields it.

    A list of sample ids (so any dataset can be indexed with it) that also
    carries the loss ``weights`` (float64, ``W / n_t`` for a real sample of
    step ``step``, 0 for a zero-weight filler), the ``step`` and ``step_end``
    (True on the step's last micro-batch: call ``optimizer.step()`` after it).
    It pickles with its attributes, so it reaches DataLoader workers intact.
    """

    weights: npt.NDArray[np.float64]
    step: int
    step_end: bool

    def __init__(
        self,
        ids: Sequence[int],
        weights: npt.ArrayLike,
        step: int,
        step_end: bool,
    ) -> None:
        super().__init__(ids)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.step = step
        self.step_end = step_end

    def __reduce__(self) -> tuple[Any, ...]:
        return (WeightedIndices, (list(self), self.weights, self.step, self.step_end))

    def __repr__(self) -> str:
        return (
            f"WeightedIndices({list(self)!r}, weights={self.weights.tolist()!r}, "
            f"step={self.step}, step_end={self.step_end})"
        )


class _WeightedSamples(list[Any]):
    """The samples of one micro-batch and the :class:`WeightedIndices` they came from.

    A dataset whose ``__getitems__`` returns something other than a list (a
    ready batch) keeps it in ``batch``, handed to the collate function as is.
    """

    def __init__(self, samples: Any, indices: WeightedIndices) -> None:
        is_list = isinstance(samples, list)
        super().__init__(samples if is_list else ())
        self.indices = indices
        self.batch = None if is_list else samples

    def collate_input(self) -> Any:
        return list(self) if self.batch is None else self.batch


class WeightedDataset(Dataset[Any]):
    """Wraps a map-style dataset so a micro-batch's weights reach the collate function.

    Indexing is unchanged; fetching a :class:`WeightedIndices` batch (in a
    DataLoader worker or in the main process) returns the samples together with
    the batch's weights, step and step end, which :class:`WeightedCollate`
    turns into a :class:`WeightedBatch`. The wrapped dataset's own
    ``__getitems__`` is used when it has one.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        ids = list(indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(ids) if getitems else [self.dataset[i] for i in ids]
        if isinstance(indices, WeightedIndices):
            return _WeightedSamples(samples, indices)
        return samples

    def __repr__(self) -> str:
        return f"WeightedDataset({self.dataset!r})"


class WeightedBatch(NamedTuple):
    """A collated micro-batch with its loss weights.

    Attributes:
        data: the samples collated by the wrapped collate function.
        sample_weight: one loss weight per sample (0 for fillers).
        indices: the sample ids (int64 tensor).
        step: the optimizer step this micro-batch belongs to.
        step_end: True on the step's last micro-batch.
    """

    data: Any
    sample_weight: torch.Tensor
    indices: torch.Tensor
    step: int
    step_end: bool


class WeightedCollate:
    """A collate function producing :class:`WeightedBatch` (picklable, for workers).

    Args:
        collate_fn: collates the samples (default: torch's ``default_collate``).
        dtype: the dtype of ``sample_weight`` (default float32; use the loss's dtype).
    """

    def __init__(
        self,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.dtype = dtype

    def __call__(self, samples: list[Any]) -> WeightedBatch:
        if not isinstance(samples, _WeightedSamples):
            raise TypeError(
                "WeightedCollate got samples without weights: give the DataLoader "
                "ElasticBatchSampler.wrap_dataset(dataset) and batch_sampler=<an "
                "ElasticBatchSampler>"
            )
        batch = samples.indices
        return WeightedBatch(
            data=self.collate_fn(samples.collate_input()),
            sample_weight=torch.as_tensor(batch.weights, dtype=self.dtype),
            indices=torch.tensor(list(batch), dtype=torch.int64),
            step=batch.step,
            step_end=batch.step_end,
        )

    def __repr__(self) -> str:
        return f"WeightedCollate({self.collate_fn!r}, dtype={self.dtype})"


class ElasticBatchSampler(Sampler[WeightedIndices]):
    """Equal-step, weighted micro-batches of an :class:`~epochplan.EpochPlan`.

    For ``DataLoader(batch_sampler=...)``. Step ``t`` holds positions
    ``[t*G, min((t+1)*G, N))`` of the epoch's order (``G = global_batch_size``),
    whatever the world size; rank ``r`` gets the step's positions ``r, r + W, ...``, cut
    into the same number of micro-batches (at most ``micro_batch_size`` each) on
    every rank, with zero-weight fillers where a rank runs short: DDP never hangs
    and needs no ``Join``. Every sample has a non-zero weight exactly once an
    epoch; nothing is padded or dropped (unless ``drop_last`` drops the short
    last step).

    Each item is a :class:`WeightedIndices`: a list of sample ids with
    ``.weights``, ``.step`` and ``.step_end``. The loss rule: per micro-batch,
    ``loss = (weights * per_sample_loss).sum()``; backward accumulates; step the
    optimizer after the micro-batch with ``step_end``; DDP's average over ranks
    then makes the update the mean gradient over the step's samples, for any
    world size and micro-batch size.

    Weights through a DataLoader: the sampler runs in the main process and
    collate in the workers, so the weights travel inside the yielded
    :class:`WeightedIndices`. Wrap the dataset with :meth:`wrap_dataset` and use
    :meth:`collate` as ``collate_fn``; each batch is then a
    :class:`WeightedBatch` ``(data, sample_weight, indices, step, step_end)``,
    for any ``num_workers``.

    Resuming: ``state_dict()`` / ``load_state_dict()`` follow torchdata's
    Stateful protocol (works inside ``StatefulDataLoader``, which saves the
    state at the batch it hands out; keep its ``snapshot_every_n_steps=1``,
    the default: with a larger interval it restores an older snapshot and
    skips the batches handed out since, which assumes a resume at the exact
    batch, not at the step's start). The state is the plan's state
    (``EpochPlan.state_dict()``: constant size, no world size in it), so a
    state saved on W ranks loads on any W'. The cursor is always a step
    boundary: after the last micro-batch of step ``t`` it points at step
    ``t + 1``; saved mid-step, it points at the start of the current step,
    whose micro-batches are then all replayed. A checkpoint saved mid-step
    holds the model of the last optimizer step (the partial step's gradients
    are lost), so replaying the whole step keeps every sample in exactly one
    optimizer update. With a plain ``DataLoader`` and ``num_workers > 0`` the
    sampler runs ahead of the training loop (prefetching); save
    ``state_dict_at_step(batch.step + 1)`` after an optimizer step instead.
    ``load_state_dict`` also restores the epoch and seed; the next iteration
    starts at the saved step, later ones at step 0. ``set_epoch(e)`` with a
    new epoch starts that epoch at step 0 (the same epoch keeps a loaded
    cursor).

    Subclassing: the plan comes from :meth:`_build_plan` and one step's ids
    from :meth:`_step_ids`; a subclass serving precomputed plans (e.g. from
    files) overrides those two only. The micro-batches are always cut with
    ``plan.split_step(step, rank, W, micro_batch_size, ids)``.

    Args:
        data_source_or_num_samples: the dataset (anything with ``len()``) or N.
        global_batch_size: samples per optimizer step over all ranks (G).
        micro_batch_size: the most samples per micro-batch on a rank (b).
        num_replicas: the world size; default: see :func:`resolve_rank`.
        rank: this process's rank; default: see :func:`resolve_rank`.
        seed: the order's seed, the same on every rank.
        kind: the order: ``"cipher"`` (default), ``"uniform"``, ``"chunked"``,
            ``"identity"``.
        drop_last: drop the short last step.
        chunk_size: samples per chunk (``kind="chunked"``).
        preload_nchunks: chunks per shuffle window (``kind="chunked"``; 1 when not
            given).
        rank_fn: a ``() -> (rank, world_size)`` callable, the last fallback.

    Example:
        >>> sampler = ElasticBatchSampler(9, 9, 4, num_replicas=2, rank=1, seed=0)
        >>> [len(mb) for mb in sampler], len(sampler)
        ([2, 2], 2)
        >>> loader = torch.utils.data.DataLoader(  # doctest: +SKIP
        ...     sampler.wrap_dataset(dataset), batch_sampler=sampler,
        ...     collate_fn=sampler.collate(), num_workers=2)
        >>> for batch in loader:  # doctest: +SKIP
        ...     x, y = batch.data
        ...     loss = (batch.sample_weight * loss_fn(model(x), y)).sum()
    """

    def __init__(
        self,
        data_source_or_num_samples: Sized | int,
        global_batch_size: int,
        micro_batch_size: int,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        kind: str = "cipher",
        drop_last: bool = False,
        chunk_size: int | None = None,
        preload_nchunks: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        self.num_samples = _num_samples_of(data_source_or_num_samples, "data_source_or_num_samples")
        self.micro_batch_size = int_arg(micro_batch_size, "micro_batch_size", 1, _MAX_SAMPLES)
        self.rank, self.num_replicas = resolve_rank(num_replicas, rank, rank_fn=rank_fn)
        self.global_batch_size = global_batch_size
        self.seed = seed
        self.kind = kind
        self.drop_last = bool_arg(drop_last, "drop_last")
        self.chunk_size = chunk_size
        self.preload_nchunks = preload_nchunks
        self.epoch = 0
        self._resume: int | None = None
        self._next_step = 0
        self._epoch_set = False  # see _keeps_set_epoch
        self._plan = self._build_plan(0)

    # -- the two hooks a subclass may override ---------------------------------

    def _build_plan(self, epoch: int) -> EpochPlan:
        """The plan of ``epoch`` (cursor 0); called at construction, by
        :meth:`set_epoch` and by :meth:`load_state_dict`."""
        return EpochPlan(
            self.num_samples,
            self.global_batch_size,
            seed=self.seed,
            epoch=epoch,
            kind=self.kind,
            drop_last=self.drop_last,
            chunk_size=self.chunk_size,
            preload_nchunks=self.preload_nchunks,
        )

    def _step_ids(self, step: int) -> npt.NDArray[np.int64]:
        """This rank's real sample ids of ``step``, in dealing order (what
        ``self.plan.step_indices(step, rank, num_replicas)`` gives)."""
        return self._plan.step_indices(step, self.rank, self.num_replicas)

    # --------------------------------------------------------------------------

    @property
    def plan(self) -> EpochPlan:
        """The current epoch's plan (from step 0)."""
        return self._plan

    def step_micro_batches(self, step: int) -> list[WeightedIndices]:
        """This rank's micro-batches of ``step``."""
        plan, w, b = self._plan, self.num_replicas, self.micro_batch_size
        batches = plan.split_step(step, self.rank, w, b, self._step_ids(step))
        last = len(batches) - 1
        return [
            WeightedIndices(ids.tolist(), weights, step, m == last)
            for m, (ids, weights) in enumerate(batches)
        ]

    def __iter__(self) -> Iterator[WeightedIndices]:
        # A DataLoader calls iter() more than once before it takes the first batch, so
        # a loaded position is consumed at the first next(), not here.
        self._next_step = self._resume or 0
        return self._generate()

    def _generate(self) -> Iterator[WeightedIndices]:
        first, self._resume = (self._resume or 0), None
        self._next_step = first
        plan = self._plan
        for step in range(first, plan.num_steps):
            for batch in self.step_micro_batches(step):
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

    def __len__(self) -> int:
        """Micro-batches the next iteration yields (the same on every rank)."""
        plan = self._plan
        total = plan.total_micro_batches(self.num_replicas, self.micro_batch_size)
        first = self._resume or 0
        if first >= plan.num_steps:
            return 0
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
        try:
            saved = EpochPlan.from_state_dict(state_dict)
        except (TypeError, ValueError, OverflowError) as e:
            raise type(e)(f"state_dict: {e}") from None
        mine = self._plan
        for key in ("num_samples", "global_batch_size", "kind", "chunk_size", "preload_nchunks"):
            if getattr(saved, key) != getattr(mine, key):
                raise ValueError(
                    f"state_dict[{key!r}] is {getattr(saved, key)!r} but this sampler has "
                    f"{key}={getattr(mine, key)!r}"
                )
        if saved.drop_last != mine.drop_last:
            raise ValueError(
                f"state_dict['drop_last'] is {saved.drop_last} but this sampler has "
                f"drop_last={mine.drop_last}"
            )
        keep = _keeps_set_epoch(self._epoch_set, self.epoch, saved.epoch, not saved.remaining_steps)
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
        extra = ""
        if self.kind == "chunked":
            extra = f", chunk_size={self.chunk_size}, preload_nchunks={self.preload_nchunks}"
        return (
            f"{type(self).__name__}(num_samples={self.num_samples}, "
            f"global_batch_size={self.global_batch_size}, "
            f"micro_batch_size={self.micro_batch_size}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, seed={self.seed}, kind={self.kind!r}{extra}, "
            f"drop_last={self.drop_last}, epoch={self.epoch})"
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

    ``batch_size`` is the global batch size (samples per step over all ranks),
    so the global batches do not depend on the world size; by default each rank
    gets one micro-batch of at most ``ceil(batch_size / num_replicas)`` samples
    per step (``micro_batch_size=`` splits it further). On one process this is
    the usual per-loader batch size.

    Example:
        >>> sampler = ChunkSampler(100, chunk_size=10, preload_nchunks=2, batch_size=8,
        ...                        num_replicas=1, rank=0)
        >>> len(sampler), len(next(iter(sampler)))
        (13, 8)
    """

    def __init__(
        self,
        num_samples: Sized | int,
        chunk_size: int,
        preload_nchunks: int,
        batch_size: int,
        *,
        num_replicas: int | None = None,
        rank: int | None = None,
        seed: int = 0,
        drop_last: bool = False,
        micro_batch_size: int | None = None,
        rank_fn: RankProvider | None = None,
    ) -> None:
        # Checked here so that messages name this class's arguments.
        num_samples = _num_samples_of(num_samples, "num_samples")
        batch_size = int_arg(batch_size, "batch_size", 1, _MAX_SAMPLES)
        # Required here (None would fall back to ElasticBatchSampler's default).
        chunk_size = int_arg(chunk_size, "chunk_size", 1, _MAX_SAMPLES)
        preload_nchunks = int_arg(preload_nchunks, "preload_nchunks", 1, _MAX_SAMPLES)
        rank, num_replicas = resolve_rank(num_replicas, rank, rank_fn=rank_fn)
        if micro_batch_size is None:
            micro_batch_size = -(-batch_size // num_replicas)
        super().__init__(
            num_samples,
            batch_size,
            micro_batch_size,
            num_replicas=num_replicas,
            rank=rank,
            seed=seed,
            kind="chunked",
            drop_last=drop_last,
            chunk_size=chunk_size,
            preload_nchunks=preload_nchunks,
        )
        self.batch_size = batch_size

    def __repr__(self) -> str:
        return (
            f"ChunkSampler(num_samples={self.num_samples}, chunk_size={self.chunk_size}, "
            f"preload_nchunks={self.preload_nchunks}, batch_size={self.batch_size}, "
            f"num_replicas={self.num_replicas}, rank={self.rank}, seed={self.seed}, "
            f"drop_last={self.drop_last}, micro_batch_size={self.micro_batch_size}, "
            f"epoch={self.epoch})"
        )


def __getattr__(name: str) -> Any:
    # PlanSampler subclasses ElasticBatchSampler, so its module imports this
    # one: it is loaded on first use, whichever of the two is imported first.
    if name == "PlanSampler":
        from epochplan._plan_sampler import PlanSampler

        return PlanSampler
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
