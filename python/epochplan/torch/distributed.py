"""A drop-in for ``torch.utils.data.DistributedSampler`` in O(N/W) memory, and
its exact variant without padding or dropping (for evaluation).

Rank ``r`` gets positions ``r, r + W, ...`` of the epoch's order, computed
lazily in chunks from a :class:`~epochplan.Permutation`: the first index comes
at once and nothing of size N is built.

Both classes are subclasses of torch's ``DistributedSampler``, so the
``isinstance`` checks of training loops and frameworks hold (Lightning keeps
the sampler instead of sharding the data a second time), but none of torch's
code runs: its ``__init__`` (float sizes, ``torch.distributed`` as the only
rank source) and its ``__iter__`` (a list of all N indices on every rank) are
replaced, and every attribute torch users read is set here.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sized
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
from torch.utils.data import distributed as torch_distributed

from epochplan._args import int_arg
from epochplan._native import Permutation, Selection
from epochplan.torch._resume import keeps_set_epoch
from epochplan.torch._wrappers import check_iteration
from epochplan.torch.rank import RankProvider, resolve_rank

__all__ = ["DistributedSampler", "ExactDistributedSampler"]

# Lazy iteration: the first chunk is small (fast first index), later ones larger.
_FIRST_CHUNK = 1024
_MAX_CHUNK = 1 << 16
_U64 = 1 << 64


def _seed_arg(value: object, name: str) -> int:
    # torch accepts any int as a seed; the order is keyed by its value mod 2**64.
    return int_arg(value, name) % _U64


class _ChunkProgress:
    """Counts the items a lazy, chunked iteration has handed out."""

    def __init__(self, done: int = 0) -> None:
        self.done = done
        # The chunk being handed out: where it starts, its ids and their iterator.
        self.live: tuple[int, list[int], Iterator[int]] | None = None
        # Set by cut(): whether the iteration was interrupted, and with ids left.
        self.interrupted = False
        self.cut_short = False
        # What an assignment to the sampler's `yielded` added to the count.
        self.shift = 0

    def yielded(self) -> int:
        if self.live is None:
            return self.done + self.shift
        base, ids, it = self.live
        # A list iterator knows how many items it still holds.
        return base + len(ids) - operator.length_hint(it) + self.shift

    def cut(self) -> None:
        """Ends the chunk being handed out: its iterator stops at its next
        item. Records the interruption, and whether any ids were left; the
        count stays what it was."""
        self.interrupted = True
        if self.live is not None:
            _, ids, it = self.live
            self.cut_short |= operator.length_hint(it) > 0
            self.done, self.live = self.yielded() - self.shift, None
            ids.clear()


class _StridedSampler(torch_distributed.DistributedSampler[int]):
    """Rank ``r`` gets positions ``r, r + W, ...`` of the epoch's order, lazily.

    A torch ``DistributedSampler`` for ``isinstance``, whose methods are all
    replaced: torch's ``__init__`` is not called, its ``__iter__`` never runs.
    """

    # The key of torchdata's StatefulDistributedSampler state (its class has the
    # same constant, which code written for it may read).
    _YIELDED: ClassVar[str] = "yielded"

    dataset: Sized  # type: ignore[assignment]  # torch annotates Dataset; any sized works
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
        selection: Selection | None = None,
    ) -> None:
        # torch's __init__ is not called: it sizes with floats (wrong past 2**53)
        # and knows no rank source but torch.distributed; every attribute it
        # sets is set here or in the subclass.
        if not isinstance(dataset, Sized):
            raise TypeError(
                f"dataset must be a sized dataset (with len()), got {type(dataset).__name__}"
            )
        rank, num_replicas = resolve_rank(rank, num_replicas, rank_fn=rank_fn)
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.shuffle = shuffle
        self.seed = seed  # checked, and the order's key set, by the property
        self._n = len(dataset)
        if selection is not None:
            if not isinstance(selection, Selection):
                raise TypeError(
                    f"selection must be an epochplan.Selection, got {type(selection).__name__}"
                )
            if selection.num_samples != self._n:
                raise ValueError(
                    f"selection must be of the dataset's {self._n} samples, got a selection "
                    f"of a store of {selection.num_samples}"
                )
            self._n = len(selection)
        self.selection = selection
        self._resume: int | None = None
        # Whether _resume came from a torchdata state, which has no epoch: then it
        # is the position in whichever epoch is set next (see load_state_dict).
        self._resume_any_epoch = False
        self._progress = _ChunkProgress()
        self._epoch_set = False  # see keeps_set_epoch
        self._finished = False  # an iteration ran to the epoch's end (see check_iteration)

    @property
    def seed(self) -> int:
        """The seed, as torch takes it: any int (the order is keyed by its
        value mod 2**64); checked when set, and the next epoch's order is
        keyed by it."""
        return self._seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._key = _seed_arg(value, "seed")
        self._seed = operator.index(value)

    @property
    def yielded(self) -> int:
        """Indices the current (or last) iteration has handed out, counted from
        the epoch's start: torchdata's ``StatefulDistributedSampler.yielded``.

        Assigning it changes the count that :meth:`state_dict` saves, not the
        indices served (as in torchdata); a loaded position not yet used
        (:attr:`next_yielded`) is saved before it.
        """
        return self._progress.yielded()

    @yielded.setter
    def yielded(self, value: int) -> None:
        value = int_arg(value, "yielded")
        if not 0 <= value <= self.num_samples:
            raise ValueError(f"yielded must be in [0, {self.num_samples}], got {value}")
        self._progress.shift += value - self._progress.yielded()

    @property
    def next_yielded(self) -> int | None:
        """The loaded position the next iteration starts at (it skips that many
        indices), or None: torchdata's ``StatefulDistributedSampler.next_yielded``."""
        return self._resume

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
            if not self._resume_any_epoch:
                self._resume = None
            self._progress = _ChunkProgress()
        self._epoch_set = True
        self._finished = False

    def _interrupt(self) -> None:
        # The running iteration, if any, stops at its next item (see _generate).
        self._progress.cut()
        self._finished = False

    def _order(self) -> Permutation:
        space = self._n if self.selection is None else self.selection
        if not self.shuffle:
            return Permutation(space, kind="identity")
        return Permutation(space, seed=self._key, epoch=self.epoch % _U64)

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
        # Only a shuffled order changes with the epoch (evaluation passes repeat it).
        check_iteration(self, self.epoch, self._finished and self.shuffle)
        self._finished = False
        first, self._resume, self._resume_any_epoch = (self._resume or 0), None, False
        progress = self._progress = _ChunkProgress(first)
        count = self.num_samples
        if first >= count:
            self._finished = True
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
        self._finished = True

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
        """Restores :meth:`state_dict`, or a state of torchdata's
        ``StatefulDistributedSampler`` (``{"yielded": k}``, same world size);
        the next iteration skips the yielded indices (an iteration still running
        raises RuntimeError at its next item)."""
        if not isinstance(state_dict, dict):
            raise TypeError(f"state_dict must be a dict, got {type(state_dict).__name__}")
        if state_dict.keys() == {"yielded"}:
            self._load_torchdata_state(state_dict)
            return
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
        yielded = self._yielded_arg(state_dict["yielded"])
        _seed_arg(state_dict["seed"], "state_dict['seed']")
        _seed_arg(state_dict["epoch"], "state_dict['epoch']")
        self._interrupt()
        self._resume_any_epoch = False
        self.seed = state_dict["seed"]
        epoch = operator.index(state_dict["epoch"])
        if keeps_set_epoch(self._epoch_set, self.epoch, epoch, yielded == self.num_samples):
            self._resume, self._progress = None, _ChunkProgress()
            return
        self.set_epoch(epoch)
        self._resume, self._epoch_set = yielded, False

    def _yielded_arg(self, value: object) -> int:
        yielded = int_arg(value, "state_dict['yielded']")
        if not 0 <= yielded <= self.num_samples:
            raise ValueError(
                f"state_dict['yielded'] must be in [0, {self.num_samples}], got {yielded}"
            )
        return yielded

    def _load_torchdata_state(self, state_dict: dict[str, Any]) -> None:
        """``{"yielded": k}`` of torchdata's sampler, which saves neither the
        epoch nor the seed: this sampler's seed, and the epoch set for the next
        iteration, whether ``set_epoch`` comes before the load (as in
        ``StatefulDataLoader``, which loads at ``iter()``) or after it.

        A finished epoch's state (k = ``num_samples``) loaded after
        ``set_epoch`` is taken as the end of the epoch before it: the set epoch
        starts from its beginning (torchdata's own sampler serves an empty epoch
        then, meta-pytorch/data#1513).
        """
        yielded = self._yielded_arg(state_dict["yielded"])
        self._interrupt()
        if yielded == self.num_samples and self._epoch_set:
            self._resume, self._resume_any_epoch = None, False
            self._progress = _ChunkProgress()
            return
        # A finished state without set_epoch ends the sampler's current epoch.
        self._resume, self._resume_any_epoch = yielded, yielded < self.num_samples
        self._epoch_set = False


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
        selection: an :class:`~epochplan.Selection` of the dataset's ids (a
            split, some classes): the sampler shares out those ids alone, and
            ``num_samples``/``total_size`` count them (keyword only).
        rank_fn: a ``() -> (rank, world_size)`` callable, the last fallback.

    A subclass of torch's ``DistributedSampler`` (``isinstance`` holds), and a
    drop-in for torchdata's ``StatefulDistributedSampler`` too:
    ``state_dict()`` / ``load_state_dict()`` save ``{"epoch", "seed",
    "yielded", "num_replicas"}`` and also load torchdata's ``{"yielded": k}``;
    the next iteration after a load skips the yielded indices (same world size:
    another is a ValueError). ``yielded`` and ``next_yielded`` mean what they
    mean in torchdata. See the guide ``docs/guides/migrate-torch.md``.

    Examples:
        >>> data = range(10)
        >>> sampler = DistributedSampler(data, num_replicas=3, rank=1, shuffle=False)
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
        selection: Selection | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, rank_fn, selection)
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

    Examples:
        >>> def share(r):
        ...     return list(ExactDistributedSampler(range(5), 2, r, shuffle=False))
        >>> [share(0), share(1)]
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
        selection: Selection | None = None,
    ) -> None:
        super().__init__(dataset, num_replicas, rank, shuffle, seed, rank_fn, selection)
        self.drop_last = False
        n, w, r = self._n, self.num_replicas, self.rank
        self.num_samples = (n - r + w - 1) // w if r < n else 0
        self.total_size = n

    def __repr__(self) -> str:
        return (
            f"ExactDistributedSampler(dataset_len={self._n}, num_replicas={self.num_replicas}, "
            f"rank={self.rank}, shuffle={self.shuffle}, seed={self.seed}, epoch={self.epoch})"
        )
