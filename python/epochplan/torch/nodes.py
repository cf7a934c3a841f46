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

from epochplan._args import int_arg

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
        >>> from epochplan import PlanSpec
        >>> from epochplan.torch import ElasticBatchSampler
        >>> sampler = ElasticBatchSampler(PlanSpec(10, 4), 2, rank=0, num_replicas=2)
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
            epoch, num_yielded, sampler_state = self._checked_state(initial_state)
            # Sets the saved epoch first: a sampler then resumes the state as
            # saved, whatever set_epoch it was given before.
            self.sampler.set_epoch(epoch)
            self.sampler.load_state_dict(sampler_state)
            self.epoch = epoch
            self._num_yielded = num_yielded
            # Items of the saved epoch were taken: the next reset() moves on.
            self._started = self._num_yielded > 0
        else:
            if self._started:
                self.epoch = self.epoch_updater(self.epoch)
            self.sampler.set_epoch(self.epoch)
            self._num_yielded = 0
            self._started = False
        self._it = iter(self.sampler)

    def _checked_state(self, state: Any) -> tuple[int, int, dict[str, Any]]:
        """``(epoch, num_yielded, sampler state)`` of a state :meth:`get_state`
        gave; ValueError or TypeError naming the key for anything else."""
        keys = (self.NUM_YIELDED_KEY, self.EPOCH_KEY, self.SAMPLER_KEY)
        if not isinstance(state, dict):
            raise TypeError(f"initial_state must be a dict, got {type(state).__name__}")
        missing = [k for k in keys if k not in state]
        unknown = sorted(map(str, state.keys() - set(keys)))
        if missing or unknown:
            what = f"is missing the keys {missing}" if missing else f"has unknown keys {unknown}"
            raise ValueError(
                f"initial_state {what}: a SamplerWrapper state holds exactly {list(keys)}"
            )
        epoch = int_arg(state[self.EPOCH_KEY], f"initial_state[{self.EPOCH_KEY!r}]", 0)
        num_yielded = int_arg(
            state[self.NUM_YIELDED_KEY], f"initial_state[{self.NUM_YIELDED_KEY!r}]", 0
        )
        sampler_state = state[self.SAMPLER_KEY]
        if not isinstance(sampler_state, dict):
            raise TypeError(
                f"initial_state[{self.SAMPLER_KEY!r}] must be the sampler's state_dict(), "
                f"got {type(sampler_state).__name__}"
            )
        # The sampler's state names its epoch too: two epochs in one state
        # would resume one and skip or repeat the others.
        saved = sampler_state.get("epoch")
        if saved is not None and saved != epoch:
            raise ValueError(
                f"initial_state[{self.EPOCH_KEY!r}] is {epoch} but the sampler's state, "
                f"initial_state[{self.SAMPLER_KEY!r}]['epoch'], is {saved!r}: the state "
                "was altered or put together from two states"
            )
        return epoch, num_yielded, sampler_state

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
