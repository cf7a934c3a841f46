"""torch.distributed.checkpoint: the sampler's state as a DCP ``Stateful``.

torchtitan saves one data-loader state per data-parallel rank and refuses
to load it on another data-parallel degree. An epoch plan's state has no
world size in it (the same on every rank), so :class:`PlanState` saves it
once, under one key, and any number of ranks loads it::

    state = PlanState(sampler)
    dcp.save({"model": model.state_dict(), "data": state}, checkpoint_id=path)
    ...
    dcp.load({"model": model.state_dict(), "data": state}, checkpoint_id=path)

Which step it records: the sampler runs ahead of the training loop when
DataLoader workers prefetch, so the loop reports each finished step with
:meth:`PlanState.step_done` (``batch.step`` of a micro-batch with
``step_end``), and the state resumes after the last one reported. Without
reports it is the sampler's own :meth:`~ElasticBatchSampler.state_dict`.
See docs/guides/frameworks.md.
"""

from __future__ import annotations

import json
from typing import Any

from epochplan._args import int_arg
from epochplan.torch.elastic import ElasticBatchSampler

__all__ = ["PlanState"]

_KEY = "epochplan_plan_state"


class PlanState:
    """A ``torch.distributed.checkpoint`` ``Stateful`` for an
    :class:`ElasticBatchSampler` (or :class:`ChunkSampler`, :class:`PlanSampler`).

    The state is one JSON string under one key, identical on every rank: DCP
    stores it once, and a checkpoint saved on W ranks loads on any W'.

    Args:
        sampler: the sampler whose plan position is saved and restored.

    Examples:
        >>> import epochplan as ep
        >>> import epochplan.torch as et
        >>> spec = ep.PlanSpec(10, 4)
        >>> sampler = et.ElasticBatchSampler(spec, 2, rank=0, num_replicas=2)
        >>> state = PlanState(sampler)
        >>> state.step_done(0)
        >>> on_one = et.ElasticBatchSampler(spec, 4, rank=0, num_replicas=1)
        >>> other = PlanState(on_one)
        >>> other.load_state_dict(state.state_dict())
        >>> [b.step for b in other.sampler]
        [1, 2]
    """

    def __init__(self, sampler: ElasticBatchSampler) -> None:
        if not isinstance(sampler, ElasticBatchSampler):
            raise TypeError(
                f"sampler must be an epochplan ElasticBatchSampler, got {type(sampler).__name__}"
            )
        self.sampler = sampler
        self._done: tuple[int, int] | None = None  # (epoch, step) last reported

    def step_done(self, step: int) -> None:
        """Reports that the optimizer step ``step`` of the sampler's current
        epoch is done: the state resumes with the step after it."""
        self._done = (self.sampler.epoch, int_arg(step, "step"))

    def state_dict(self) -> dict[str, Any]:
        done = self._done
        if done is not None and done[0] == self.sampler.epoch:
            state = self.sampler.state_dict_at_step(done[1] + 1)
        else:
            state = self.sampler.state_dict()
        return {_KEY: json.dumps(state, sort_keys=True)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if _KEY not in state_dict:
            raise ValueError(
                f"state_dict has no {_KEY!r}: not a state saved by PlanState "
                f"(keys: {sorted(map(str, state_dict))})"
            )
        self.sampler.load_state_dict(json.loads(state_dict[_KEY]))
        self._done = None

    def __repr__(self) -> str:
        return f"PlanState({self.sampler!r})"
