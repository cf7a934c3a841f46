"""epochplan.grain: Grain's sampler protocol and a MapDataset, on CPU (no JAX)."""

from __future__ import annotations

import doctest
import json
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest

import epochplan as ep

grain = pytest.importorskip("grain")
eg = pytest.importorskip("epochplan.grain")
from grain.sharding import ShardOptions  # noqa: E402

N, G = 103, 12  # 9 steps, the last one short; 12 is not a multiple of 5 or 7


def loader(sampler: Any, shard: ShardOptions, workers: int = 0) -> Any:
    """A DataLoader whose records are their own keys, one batch a step."""
    return grain.DataLoader(
        data_source=list(range(N)),
        sampler=sampler,
        shard_options=shard,
        worker_count=workers,
        operations=[grain.transforms.Batch(sampler.slots_per_step)],
    )


def shard_batches(plan: ep.EpochPlan, world: int, num_epochs: int = 1) -> list[list[Any]]:
    """Per shard: its batches as (record keys, weights), through grain.DataLoader."""
    out = []
    for r in range(world):
        shard = ShardOptions(shard_index=r, shard_count=world)
        sampler = eg.EpochPlanSampler(plan, shard, num_epochs=num_epochs)
        batches = [b.tolist() for b in loader(sampler, shard)]
        weights = [sampler.batch_weights(r, i).tolist() for i in range(len(batches))]
        out.append(list(zip(batches, weights, strict=True)))
    return out


def real_keys(batch: tuple[list[int], list[float]]) -> list[int]:
    return [k for k, w in zip(*batch, strict=True) if w > 0]


@pytest.mark.parametrize("world", [1, 2, 3, 5, 7, 13])
def test_every_record_has_a_weight_once_an_epoch_and_shards_have_equal_counts(world: int) -> None:
    plan = ep.EpochPlan(N, G, seed=3)
    shards = shard_batches(plan, world)
    assert len({len(s) for s in shards}) == 1 and len(shards[0]) == plan.num_steps
    seen = Counter(k for s in shards for b in s for k in real_keys(b))
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}
    for t in range(plan.num_steps):
        # Every shard the same batch size; the weights of a step sum to W over the shards.
        assert {len(s[t][0]) for s in shards} == {-(-G // world)}
        total = sum(sum(s[t][1]) for s in shards)
        assert total == pytest.approx(world)


def test_two_and_three_shards_see_the_same_global_steps() -> None:
    plan = ep.EpochPlan(N, G, seed=5)
    steps = {}
    for world in (2, 3):
        shards = shard_batches(plan, world, num_epochs=2)
        steps[world] = [
            sorted(k for s in shards for k in real_keys(s[t])) for t in range(len(shards[0]))
        ]
    assert steps[2] == steps[3]
    one = [sorted(plan.step_indices(t, 0, 1).tolist()) for t in range(plan.num_steps)]
    assert steps[2][: plan.num_steps] == one
    assert steps[2][plan.num_steps :] != one  # the second epoch is another order


def test_epochs_follow_each_other_with_their_own_orders() -> None:
    plan = ep.EpochPlan(N, G, seed=5)
    shard = ShardOptions(shard_index=0, shard_count=1)
    sampler = eg.EpochPlanSampler(plan, shard, num_epochs=3)
    # Every step has G slots, the short last one too (zero-weight copies).
    assert len(sampler) == 3 * plan.num_steps * G
    slots = [sampler.slot(i) for i in range(len(sampler))]
    assert [s.record_key for s in slots] == [sampler[i].record_key for i in range(len(sampler))]
    for e in range(3):
        keys = [s.record_key for s in slots if s.epoch == e and s.weight > 0]
        assert keys == ep.EpochPlan(N, G, seed=5, epoch=e).rank_indices(0, 1).tolist()
    with pytest.raises(IndexError, match="index must be in"):
        sampler[len(sampler)]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_checkpoint_restores_mid_epoch(workers: int) -> None:
    plan = ep.EpochPlan(N, G, seed=1)
    shard = ShardOptions(shard_index=1, shard_count=3)
    sampler = eg.EpochPlanSampler(plan, shard, num_epochs=2)
    full = [b.tolist() for b in loader(sampler, shard, workers)]
    it = iter(loader(sampler, shard, workers))
    head = [next(it).tolist() for _ in range(5)]
    state = it.get_state()
    json.loads(state)  # Grain's checkpoint format
    fresh = iter(loader(eg.EpochPlanSampler(plan, shard, num_epochs=2), shard, workers))
    fresh.set_state(state)
    assert head + [b.tolist() for b in fresh] == full


def test_a_plan_with_a_cursor_resumes_on_another_shard_count() -> None:
    plan = ep.EpochPlan(N, G, seed=9)
    done = [k for s in shard_batches(plan, 2) for b in s[:4] for k in real_keys(b)]
    rest = [k for s in shard_batches(plan.at_step(4), 3) for b in s for k in real_keys(b)]
    assert sorted(done + rest) == list(range(N))


def test_the_map_dataset_gives_each_shard_its_share_and_restores() -> None:
    plan = ep.EpochPlan(N, G, seed=2)
    world = 3
    per_shard = []
    for r in range(world):
        ds = eg.map_dataset(plan, ShardOptions(shard_index=r, shard_count=world))
        ds = ds.map(lambda s: (s["record_key"] + 1000, s["weight"], s["step"]))
        per_shard.append(list(ds))
        assert len(ds) == plan.num_steps * -(-G // world)
    real = sorted(k - 1000 for s in per_shard for k, w, _ in s if w > 0)
    assert real == list(range(N))
    # The same slots as the sampler's, shard by shard.
    sampler = eg.EpochPlanSampler(plan, ShardOptions(shard_index=0, shard_count=world))
    assert [k - 1000 for k, _, _ in per_shard[1]] == [
        sampler[i * world + 1].record_key for i in range(len(per_shard[1]))
    ]
    batched = eg.map_dataset(plan, ShardOptions(shard_index=1, shard_count=world)).batch(
        -(-G // world)
    )
    it = batched.to_iter_dataset().__iter__()
    head = [next(it) for _ in range(3)]
    state = it.get_state()
    rest = batched.to_iter_dataset().__iter__()
    rest.set_state(state)
    keys = [b["record_key"].tolist() for b in [*head, *rest]]
    assert keys == [b["record_key"].tolist() for b in batched]


def test_the_random_generator_of_a_record_does_not_depend_on_the_shard_count() -> None:
    plan = ep.EpochPlan(N, G, seed=4)
    draws: list[dict[int, float]] = []
    for world in (2, 3):
        sampler = eg.EpochPlanSampler(plan, ShardOptions(shard_index=0, shard_count=world))
        draws.append({})
        for i in range(len(sampler)):
            meta = sampler[i]
            assert meta.index == i and meta.rng is not None
            draws[-1][meta.record_key] = float(meta.rng.random())
    assert draws[0] == draws[1]


def test_bad_arguments_name_themselves() -> None:
    plan = ep.EpochPlan(N, G)
    with pytest.raises(TypeError, match="shard_options must be"):
        eg.EpochPlanSampler(plan, (0, 2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="plan must be"):
        eg.EpochPlanSampler(N, ShardOptions(0, 2))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_epochs"):
        eg.map_dataset(plan, ShardOptions(0, 2), num_epochs=0)
    assert "global_batch_size=12" in repr(eg.EpochPlanSampler(plan, ShardOptions(0, 2)))


def test_an_endless_sampler_and_an_empty_plan() -> None:
    endless = eg.EpochPlanSampler(ep.EpochPlan(N, G), ShardOptions(0, 2), num_epochs=None)
    assert len(endless) > 10**15 and endless[10**12].record_key in range(N)
    assert len(eg.EpochPlanSampler(ep.EpochPlan(0, G), ShardOptions(0, 2))) == 0


def test_docstring_examples_run() -> None:
    result = doctest.testmod(eg, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_import_epochplan_does_not_import_grain() -> None:
    code = "import sys, epochplan, epochplan.torch; print('grain' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
