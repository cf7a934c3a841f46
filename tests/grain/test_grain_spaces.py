"""epochplan.grain over index spaces and token plans: every epoch over the
plan's space, token plans refused up front, and Grain's checkpoint check
comparing the space (a checkpoint of another space is refused)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import epochplan as ep

grain = pytest.importorskip("grain")
eg = pytest.importorskip("epochplan.grain")
from grain.sharding import ShardOptions  # noqa: E402

G = 8


def spaces() -> list[Any]:
    return [
        ep.Selection.from_ranges([(60, 300)], 400),
        ep.random_split(500, [0.5, 0.5], seed=2)[1],
        ep.Mixture([30, 50], weights=[1, 1], num_samples=36, seed=4),
        ep.Mixture([ep.Selection.from_ranges([(0, 40)], 100)], quotas=[25]),
    ]


@pytest.mark.parametrize("space", spaces(), ids=lambda s: type(s).__name__)
@pytest.mark.parametrize("world", [1, 3])
def test_every_epoch_of_a_space_is_the_plan_of_that_epoch(space: Any, world: int) -> None:
    # Each epoch's real records are the plan of that epoch over the same
    # space (a mixture's epochs continuing its sources' passes), on every
    # shard: the second epoch used to fail to build.
    num_epochs = 3
    first = ep.EpochPlan(space, G, seed=5)
    for r in range(world):
        sampler = eg.EpochPlanSampler(first, ShardOptions(r, world), num_epochs=num_epochs)
        slots = [sampler.slot(k * world + r) for k in range(len(sampler) // world)]
        for e in range(num_epochs):
            want = ep.EpochPlan(space, G, seed=5, epoch=e).rank_indices(r, world).tolist()
            got = [s.record_key for s in slots if s.epoch == e and s.weight > 0]
            assert got == want, (e, r)


def test_the_map_dataset_serves_later_epochs_of_a_mixture() -> None:
    mixture = ep.Mixture([30, 50], weights=[2, 1], num_samples=24, seed=1)
    ds = eg.map_dataset(ep.EpochPlan(mixture, G), ShardOptions(0, 1), num_epochs=4)
    real = [s["record_key"] for s in ds if s["weight"] > 0]
    want = [k for e in range(4) for k in ep.EpochPlan(mixture, G, epoch=e).rank_indices(0, 1)]
    assert real == want


def test_a_token_plan_is_refused_with_the_reason() -> None:
    lengths = np.arange(1, 41, dtype=np.int32)
    plan = ep.EpochPlan(40, G, tokens=ep.Tokens(lengths))
    for make in (eg.EpochPlanSampler, eg.map_dataset):
        with pytest.raises(ValueError, match=r"^plan must be a plan without lengths: a token plan"):
            make(plan, ShardOptions(0, 2))


def loader(sampler: Any, data: list[int]) -> Any:
    return grain.DataLoader(
        data_source=data,
        sampler=sampler,
        shard_options=sampler.shard_options,
        worker_count=0,
        operations=[grain.transforms.Batch(sampler.slots_per_step)],
    )


def test_a_checkpoint_of_another_space_is_refused() -> None:
    # Two selections of the same size and parameters: their ids differ,
    # and so does what the checkpoint check compares.
    data = list(range(400))
    shard = ShardOptions(0, 2)
    a = ep.EpochPlan(ep.Selection.from_ranges([(0, 240)], 400), G, seed=3)
    b = ep.EpochPlan(ep.Selection.from_ranges([(60, 300)], 400), G, seed=3)
    it = iter(loader(eg.EpochPlanSampler(a, shard), data))
    for _ in range(3):
        next(it)
    state = it.get_state()
    again = iter(loader(eg.EpochPlanSampler(a, shard), data))
    again.set_state(state)  # the same space: restored
    assert next(again).tolist() == next(it).tolist()
    other = iter(loader(eg.EpochPlanSampler(b, shard), data))
    with pytest.raises(ValueError, match="sampler"):
        other.set_state(state)
    assert "space=selection blake3:" in repr(eg.EpochPlanSampler(a, shard))
    assert repr(eg.EpochPlanSampler(a, shard)) != repr(eg.EpochPlanSampler(b, shard))
