"""Grain entry points (JAX): :class:`EpochPlanSampler` for ``grain.DataLoader``
and :func:`map_dataset` for ``grain.MapDataset`` pipelines.

This is the only module of the package that imports grain. Both give each
shard (JAX process) its share of one :class:`~epochplan.EpochPlan`: exact,
equal-step, elastic. Shard ``r`` of ``W`` reads the slots of its stream in
order, ``slots_per_step = ceil(G / W)`` slots a step, every step, on every
shard (batches keep one shape, so a jitted step compiles once): its share of
the step's samples (positions ``r, r + W, ...`` of the step), then
zero-weight copies of its last sample (of the step's first sample when its
share is empty) up to ``slots_per_step``. A real sample of step ``t`` weighs
``W / n_t``; the loss rule is that of the guide (docs/guides/jax.md).

Grain's ``DataLoader`` reads shard ``r``'s ``k``-th record at global index
``k * W + r``; :class:`EpochPlanSampler` maps that index to the slot, so
Grain's own sharding hands each shard exactly its share.
"""

from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from grain import MapDataset, RecordMetadata
from grain.sharding import ShardOptions

from epochplan._args import int_arg
from epochplan._kinds import KIND_FIELDS, plan_fields
from epochplan._native import EpochPlan, MixtureEpoch

__all__ = ["EpochPlanSampler", "Slot", "map_dataset"]

# Steps kept per process: a shard's records are read in order, so a few steps
# (the current one of each worker of each shard served) suffice.
_CACHED_STEPS = 16


class Slot(NamedTuple):
    """One slot of a shard's stream: which record, its loss weight (0 for a
    zero-weight copy), and the epoch and step it belongs to."""

    record_key: int
    weight: float
    epoch: int
    step: int


class _ShardLayout:
    """Slot arithmetic for ``num_epochs`` epochs of a plan over ``world_size``
    shards, from the plan's cursor on (shared by the sampler and the dataset)."""

    def __init__(self, plan: EpochPlan, world_size: int, num_epochs: int | None) -> None:
        if not isinstance(plan, EpochPlan):
            raise TypeError(f"plan must be an epochplan.EpochPlan, got {type(plan).__name__}")
        if plan.tokens is not None:
            # A token plan deals each step by tokens: a shard's share is not
            # the fixed ceil(G / W) slots that Grain's index arithmetic needs.
            raise ValueError(
                "plan must be a plan without lengths: a token plan deals its steps by tokens, "
                "so shards hold different numbers of samples a step, which Grain's fixed "
                "slots cannot carry (build the plan without tokens=, or feed the token "
                "plan's micro_batches(rank, world_size, ...) to your own loader)"
            )
        if num_epochs is not None:
            num_epochs = int_arg(num_epochs, "num_epochs", 1)
        self.plan = plan
        self.world_size = world_size
        self.num_epochs = num_epochs
        self.slots_per_step = -(-plan.global_batch_size // world_size)
        self._state = plan.state_dict()
        self._start = plan.start_step * self.slots_per_step  # slots before the cursor
        self._epoch_slots = plan.num_steps * self.slots_per_step
        if num_epochs is None:
            self.shard_length = sys.maxsize // world_size if self._epoch_slots else 0
        else:
            self.shard_length = num_epochs * self._epoch_slots - self._start
        self._plans: OrderedDict[int, EpochPlan] = OrderedDict()
        self._steps: OrderedDict[
            tuple[int, int, int], tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]
        ] = OrderedDict()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        # Sent to Grain's worker processes: caches and the lock stay behind.
        return {"plan": self.plan, "world_size": self.world_size, "num_epochs": self.num_epochs}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["plan"], state["world_size"], state["num_epochs"])  # type: ignore[misc]

    def locate(self, k: int) -> tuple[int, int, int]:
        """(epoch, step, slot in step) of a shard's ``k``-th slot."""
        if not 0 <= k < self.shard_length:
            raise IndexError(f"index must be in [0, {self.shard_length}), got {k}")
        e, j = divmod(k + self._start, self._epoch_slots)
        t, i = divmod(j, self.slots_per_step)
        return self.plan.epoch + e, t, i

    def _plan_of(self, epoch: int) -> EpochPlan:
        plan = self._plans.get(epoch)
        if plan is None:
            plan = self.plan if epoch == self.plan.epoch else self._later_plan(epoch)
            self._plans[epoch] = plan
            if len(self._plans) > 2:
                self._plans.popitem(last=False)
        return plan

    def _later_plan(self, epoch: int) -> EpochPlan:
        """The plan of a later epoch, from step 0, over the same space: a
        selection as it is, a mixture's epoch continuing each source's passes
        from where the previous epoch left them (as the samplers do)."""
        p = self.plan
        if isinstance(p.space, MixtureEpoch):
            space = p.space
            for e in range(p.epoch + 1, epoch + 1):
                space = space.mixture.epoch(e, space.consumed_after)
            return p.spec.replace(num_samples=space).plan(epoch)
        return p.spec.plan(epoch)

    def step_slots(
        self, epoch: int, step: int, shard: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
        """A shard's ``slots_per_step`` record keys and weights of a step."""
        key = (epoch, step, shard)
        with self._lock:
            found = self._steps.get(key)
            if found is not None:
                self._steps.move_to_end(key)
                return found
            plan, w, s = self._plan_of(epoch), self.world_size, self.slots_per_step
            ids = plan.step_indices(step, shard, w)
            # One micro-batch of at most `s` samples: the share, or a filler.
            ((keys, weights),) = plan.split_step(step, shard, w, s, ids)
            if len(keys) < s:
                pad = s - len(keys)
                keys = np.concatenate([keys, np.full(pad, keys[-1], dtype=np.int64)])
                weights = np.concatenate([weights, np.zeros(pad, dtype=np.float64)])
            keys.flags.writeable = weights.flags.writeable = False
            self._steps[key] = (keys, weights)
            if len(self._steps) > _CACHED_STEPS:
                self._steps.popitem(last=False)
            return keys, weights

    def slot(self, shard: int, k: int) -> Slot:
        epoch, step, i = self.locate(k)
        keys, weights = self.step_slots(epoch, step, shard)
        return Slot(int(keys[i]), float(weights[i]), epoch, step)

    def params(self) -> str:
        p = self.plan
        fields = plan_fields(p.spec)
        extra = "".join(f", {k}={fields[k]}" for k in KIND_FIELDS if fields[k] is not None)
        # Grain's checkpoints are matched by the sampler's repr: it names
        # everything the records depend on, the space's digest included.
        space = self._state.get("space")
        if space is not None:
            extra += f", space={space['kind']} {space['digest']}"
            if "consumed" in space:
                extra += f" from {space['consumed']}"
        return (
            f"num_records={p.num_samples}, global_batch_size={p.global_batch_size}, "
            f"seed={p.seed}, epoch={p.epoch}, kind={p.kind!r}{extra}, "
            f"drop_last={p.drop_last}, cursor={p.cursor}, num_epochs={self.num_epochs}"
        )


def _shard_options_arg(shard_options: object) -> ShardOptions:
    if not isinstance(shard_options, ShardOptions):
        raise TypeError(
            "shard_options must be a grain.sharding.ShardOptions (e.g. ShardByJaxProcess()), "
            f"got {type(shard_options).__name__}"
        )
    return shard_options


class EpochPlanSampler:
    """A ``grain.DataLoader`` sampler serving an :class:`~epochplan.EpochPlan`.

    Give the loader the same ``shard_options`` (or none: the loader then takes
    the sampler's). Shard ``shard_index`` of ``shard_count`` (the rank and
    world size) reads ``slots_per_step`` records a step: batch them with
    ``grain.transforms.Batch(sampler.slots_per_step)`` and batch ``i`` of the
    loader is one optimizer step, whose loss weights are
    :meth:`batch_weights` ``(shard_index, i)``. The record keys are sample ids
    (the data source is indexed with them); ``drop_remainder`` is not used,
    as every shard has the same number of records.

    Epochs: ``num_epochs`` of them (``None``: without end), from the plan's
    epoch and cursor on (a plan built with ``cursor=`` starts at its step:
    the elastic resume on another shard count). Within one shard count,
    Grain's iterator ``get_state()`` / ``set_state()`` resume exactly; the
    checkpoint holds ``repr(sampler)``, which names the plan and the shards.

    ``RecordMetadata.rng`` is keyed by ``(seed, epoch, record_key)``: a
    sample's random augmentation does not depend on the shard count.

    Args:
        plan: the plan of the first epoch (its seed, sizes, kind and cursor).
        shard_options: Grain's ``ShardOptions``; ``shard_count`` is the world size.
        num_epochs: epochs to serve; ``None`` repeats without end.

    Examples:
        >>> import epochplan as ep
        >>> from grain.sharding import ShardOptions
        >>> plan = ep.EpochPlan(10, 4, seed=0)
        >>> shards = ShardOptions(shard_index=0, shard_count=3)
        >>> sampler = EpochPlanSampler(plan, shards)
        >>> len(sampler), sampler.slots_per_step
        (18, 2)
        >>> sampler[0].record_key == int(plan.step_indices(0, 0, 3)[0])
        True
    """

    def __init__(
        self,
        plan: EpochPlan,
        shard_options: ShardOptions,
        *,
        num_epochs: int | None = 1,
    ) -> None:
        self.shard_options = _shard_options_arg(shard_options)
        # Read by grain.DataLoader when it is given no shard_options.
        self._shard_options = self.shard_options
        self._layout = _ShardLayout(plan, self.shard_options.shard_count, num_epochs)

    @property
    def plan(self) -> EpochPlan:
        """The plan of the first epoch."""
        return self._layout.plan

    @property
    def num_epochs(self) -> int | None:
        return self._layout.num_epochs

    @property
    def slots_per_step(self) -> int:
        """Records per shard per step: ``ceil(global_batch_size / shard_count)``."""
        return self._layout.slots_per_step

    def __len__(self) -> int:
        """Global indices: ``shard_count`` times a shard's records."""
        return self._layout.shard_length * self._layout.world_size

    def slot(self, index: int) -> Slot:
        """The slot at a global index (``k * shard_count + shard_index``)."""
        index = int_arg(index, "index")
        if not 0 <= index < len(self):
            raise IndexError(f"index must be in [0, {len(self)}), got {index}")
        k, shard = divmod(index, self._layout.world_size)
        return self._layout.slot(shard, k)

    def __getitem__(self, index: int) -> RecordMetadata:
        """Grain's sampler protocol: the record at a global index."""
        s = self.slot(index)
        seq = np.random.SeedSequence([self.plan.seed, s.epoch, s.record_key])
        rng = np.random.Generator(np.random.Philox(seq))
        return RecordMetadata(index=index, record_key=s.record_key, rng=rng)

    def batch_weights(self, shard_index: int, batch_index: int) -> npt.NDArray[np.float64]:
        """Loss weights of a shard's batch ``batch_index`` (its step counted from
        the sampler's start), ``slots_per_step`` of them."""
        shard_index = int_arg(shard_index, "shard_index", 0, self._layout.world_size - 1)
        batch_index = int_arg(batch_index, "batch_index", 0)
        s = self.slots_per_step
        epoch, step, _ = self._layout.locate(batch_index * s)
        return self._layout.step_slots(epoch, step, shard_index)[1]

    def __repr__(self) -> str:
        return f"EpochPlanSampler({self._layout.params()}, shard_options={self.shard_options!r})"


class _ShardSlots:
    """A shard's slots as a random-access source (``len``, ``[k]``)."""

    def __init__(self, layout: _ShardLayout, shard_index: int) -> None:
        self._layout = layout
        self._shard = shard_index

    def __len__(self) -> int:
        return self._layout.shard_length

    def __getitem__(self, k: int) -> dict[str, Any]:
        return self._layout.slot(self._shard, int_arg(k, "index"))._asdict()

    def __repr__(self) -> str:
        return (
            f"epochplan.grain.map_dataset({self._layout.params()}, "
            f"shard {self._shard} of {self._layout.world_size})"
        )


def map_dataset(
    plan: EpochPlan,
    shard_options: ShardOptions,
    *,
    num_epochs: int | None = 1,
) -> MapDataset[dict[str, Any]]:
    """A ``grain.MapDataset`` of this shard's slots, in plan order.

    Each element is a dict ``{"record_key", "weight", "epoch", "step"}``
    (see :class:`Slot`); ``slots_per_step = ceil(global_batch_size /
    shard_count)`` consecutive elements make one step, on every shard. Map
    the record keys to data with ``.map(...)``, batch with
    ``.batch(slots_per_step)``; ``to_iter_dataset()`` gives an iterator with
    Grain's ``get_state()`` / ``set_state()``. Do not ``shuffle`` or
    ``repeat`` it: the order and the epochs are the plan's.

    Args:
        plan: the plan of the first epoch (its seed, sizes, kind and cursor).
        shard_options: this shard's ``ShardOptions`` (rank and world size).
        num_epochs: epochs to serve; ``None`` repeats without end.

    Examples:
        >>> import epochplan as ep
        >>> from grain.sharding import ShardOptions
        >>> shards = ShardOptions(shard_index=2, shard_count=3)
        >>> ds = map_dataset(ep.EpochPlan(10, 4), shards)
        >>> len(ds), [s["weight"] for s in ds][-2:]
        (6, [0.0, 0.0])
    """
    shard_options = _shard_options_arg(shard_options)
    layout = _ShardLayout(plan, shard_options.shard_count, num_epochs)
    return MapDataset.source(_ShardSlots(layout, shard_options.shard_index))
