"""torchdata.nodes entry point: :class:`SamplerWrapper`, a ``BaseNode`` over
an epochplan sampler that keeps the epoch across resets and resumes.

This is the only module of the package that imports torchdata. It is a
submodule: ``import epochplan.torch`` does not import it. See the guide
(docs/guides/torchdata-nodes.md) for a whole pipeline.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

from torchdata.nodes import BaseNode

__all__ = ["SamplerWrapper"]

T = TypeVar("T")


@runtime_checkable
class _EpochplanSampler(Protocol):
    """What the wrapper needs of a sampler: iteration, ``set_epoch`` and
    torchdata's Stateful protocol (every epochplan sampler has them)."""

    def __iter__(self) -> Iterator[Any]: ...

    def set_epoch(self, epoch: int) -> None: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state_dict: dict[str, Any]) -> None: ...


def _next_epoch(epoch: int) -> int:
    return epoch + 1


class SamplerWrapper(BaseNode[T], Generic[T]):  # type: ignore[misc]  # torchdata is untyped
    """A ``torchdata.nodes`` source node over an epochplan sampler.

    The same arguments, state keys (``"_num_yielded"``, ``"_epoch"``,
    ``"_sampler"``) and epoch rule as ``torchdata.nodes.SamplerWrapper``: a
    ``reset()`` without a state after items were taken starts the next epoch
    (``epoch_updater(epoch)``, by default ``epoch + 1``) and calls the
    sampler's ``set_epoch``. Unlike torchdata's, the epoch survives a resume:
    after ``reset(state)`` the next ``reset()`` moves on from the saved epoch,
    also when the state was saved at the epoch's end (torchdata's wrapper
    replays that epoch, meta-pytorch/data#1513).

    The items are the sampler's: :class:`~epochplan.torch.WeightedIndices`
    micro-batches (ids with ``.weights``, ``.step``, ``.step_end``) from
    :class:`~epochplan.torch.ElasticBatchSampler`,
    :class:`~epochplan.torch.ChunkSampler` or
    :class:`~epochplan.torch.PlanSampler`, or sample ids from
    :class:`~epochplan.torch.DistributedSampler` and
    :class:`~epochplan.torch.ExactDistributedSampler`. The ``"_sampler"``
    entry of the state is the sampler's ``state_dict()``: an elastic
    sampler's state resumes on any world size (at the start of the step the
    save fell in, see :class:`~epochplan.torch.ElasticBatchSampler`), a
    strided sampler's on the same world size. ``"_num_yielded"`` counts the
    items taken this epoch before the save (on the world size that saved).

    Args:
        sampler: an epochplan sampler (anything with ``set_epoch``,
            ``state_dict`` and ``load_state_dict``).
        initial_epoch: the epoch of the first iteration.
        epoch_updater: the next epoch from the current one (default ``+ 1``).

    Examples:
        >>> from torchdata.nodes import Loader
        >>> from epochplan.torch import ElasticBatchSampler
        >>> sampler = ElasticBatchSampler(10, 4, 2, num_replicas=2, rank=0)
        >>> loader = Loader(SamplerWrapper(sampler))
        >>> [batch.step for batch in loader]
        [0, 1, 2]
    """

    NUM_YIELDED_KEY = "_num_yielded"
    EPOCH_KEY = "_epoch"
    SAMPLER_KEY = "_sampler"

    def __init__(
        self,
        sampler: Any,
        initial_epoch: int = 0,
        epoch_updater: Callable[[int], int] | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(sampler, _EpochplanSampler):
            raise TypeError(
                "sampler must have set_epoch(), state_dict() and load_state_dict() "
                f"(an epochplan sampler), got {type(sampler).__name__}"
            )
        self.sampler = sampler
        self.epoch = initial_epoch
        self.epoch_updater = epoch_updater or _next_epoch
        self._num_yielded = 0
        self._started = False
        self._it: Iterator[T] | None = None

    def reset(self, initial_state: dict[str, Any] | None = None) -> None:
        """Starts the next epoch (no state) or resumes ``initial_state``."""
        super().reset(initial_state)
        self._it = None
        if initial_state is not None:
            epoch = initial_state[self.EPOCH_KEY]
            # Sets the saved epoch first: a sampler then resumes the state as
            # saved, whatever set_epoch it was given before.
            self.sampler.set_epoch(epoch)
            self.sampler.load_state_dict(initial_state[self.SAMPLER_KEY])
            self.epoch = epoch
            self._num_yielded = initial_state[self.NUM_YIELDED_KEY]
            # Items of the saved epoch were taken: the next reset() moves on.
            self._started = self._num_yielded > 0
        else:
            if self._started:
                self.epoch = self.epoch_updater(self.epoch)
            self.sampler.set_epoch(self.epoch)
            self._num_yielded = 0
            self._started = False
        self._it = iter(self.sampler)

    def next(self) -> T:
        """The sampler's next item."""
        if self._it is None:  # pragma: no cover - BaseNode resets first
            raise RuntimeError("reset() must be called before next()")
        item = next(self._it)
        self._started = True
        self._num_yielded += 1
        return item

    def get_state(self) -> dict[str, Any]:
        """``{"_num_yielded", "_epoch", "_sampler"}``: resumes after the last item."""
        return {
            self.NUM_YIELDED_KEY: self._num_yielded,
            self.EPOCH_KEY: self.epoch,
            self.SAMPLER_KEY: self.sampler.state_dict(),
        }

    def __repr__(self) -> str:
        return f"SamplerWrapper({self.sampler!r}, epoch={self.epoch})"
