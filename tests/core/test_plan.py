"""Epoch plans: exact, equal-step, weighted, elastic, resumable (DESIGN.md section 4)."""

from __future__ import annotations

import json
import pickle
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep

KINDS = [
    {"kind": "cipher"},
    {"kind": "identity"},
    {"kind": "uniform"},
    {"kind": ep.Chunked(3, 2)},
]


def all_ranks(plan: ep.EpochPlan, world: int, micro: int) -> list[list[list[ep.MicroBatch]]]:
    """Per rank, per step, the list of (indices, weights) micro-batches."""
    return [list(plan.micro_batches(r, world, micro)) for r in range(world)]


def reference_step(
    step_ids: list[int], rank: int, world: int, micro: int
) -> list[tuple[list[int], list[float]]]:
    """One rank's micro-batches of a step, from the step's ids in position order,
    as DESIGN.md section 4 and the README state them: rank r deals positions
    r, r + W, ...; M = max(1, ceil(ceil(n_t / W) / b)) micro-batches per rank;
    the share is cut into M parts whose sizes differ by at most one, the larger
    first; a part with no sample holds one zero-weight filler, a copy of the
    rank's last sample of the step, or of the step's sample at position
    rank mod n_t when the rank has none; real samples weigh W / n_t."""
    n_t = len(step_ids)
    share = step_ids[rank::world]
    most = -(-n_t // world)  # the largest share
    m = max(1, -(-most // micro))
    base, extra = divmod(len(share), m)
    filler = share[-1] if share else step_ids[rank % n_t]
    out, start = [], 0
    for part in range(m):
        size = base + (part < extra)
        if size:
            out.append((share[start : start + size], [world / n_t] * size))
        else:
            out.append(([filler], [0.0]))
        start += size
    return out


def check_plan(plan: ep.EpochPlan, world: int, micro: int) -> None:
    """Asserts every invariant of one plan on one world size."""
    n, g = plan.num_samples, plan.global_batch_size
    ranks = all_ranks(plan, world, micro)
    steps = range(plan.start_step, plan.num_steps)
    # The plan is the reference model of its rules, micro-batch for micro-batch.
    order = np.asarray(ep.Permutation(n, seed=plan.seed, epoch=plan.epoch, **kind_of(plan)))
    for r, per_rank in enumerate(ranks):
        for t, step in enumerate(steps):
            step_ids = order[step * g : step * g + plan.step_size(step)].tolist()
            got = [(ids.tolist(), weights.tolist()) for ids, weights in per_rank[t]]
            assert got == reference_step(step_ids, r, world, micro)
    # Equal steps, equal micro-batch counts per step, never empty, never above b.
    for per_rank in ranks:
        assert len(per_rank) == len(steps)
        for t, step in enumerate(steps):
            assert (
                len(per_rank[t]) == len(ranks[0][t]) == plan.num_micro_batches(step, world, micro)
            )
            for ids, weights in per_rank[t]:
                assert 1 <= len(ids) <= micro
                assert ids.dtype == np.int64 and weights.dtype == np.float64
                assert len(ids) == len(weights)
    assert plan.total_micro_batches(world, micro) == sum(len(s) for s in ranks[0])
    seen = []
    full_order = np.asarray(ep.Permutation(n, seed=plan.seed, epoch=plan.epoch, **kind_of(plan)))
    for t, step in enumerate(steps):
        n_t = plan.step_size(step)
        real, fillers = [], 0
        for per_rank in ranks:
            for ids, weights in per_rank[t]:
                is_real = weights > 0
                fillers += int((~is_real).sum())
                # A filler is a zero-weight copy of a real sample of its step.
                step_ids = full_order[step * g : step * g + n_t]
                assert np.isin(ids[~is_real], step_ids).all()
                # Real samples weigh W / n_t, fillers exactly 0.
                assert np.all(weights[is_real] == world / n_t)
                assert np.all(weights[~is_real] == 0.0)
                real.extend(ids[is_real].tolist())
        # Elastic: the step's samples are exactly positions [tG, tG + n_t) of the order.
        assert sorted(real) == sorted(full_order[step * g : step * g + n_t].tolist())
        seen.extend(real)
        # A filler only where a rank has fewer real samples than micro-batches,
        # one in each micro-batch it cannot fill.
        m = plan.num_micro_batches(step, world, micro)
        shares = [len(plan.step_indices(step, r, world)) for r in range(world)]
        assert fillers == sum(max(0, m - share) for share in shares)
    # Exact: every sample of the remaining steps once.
    expected = full_order[plan.cursor : plan.cursor + sum(plan.step_size(s) for s in steps)]
    assert sorted(seen) == sorted(expected.tolist())
    assert len(seen) == len(set(seen))
    # rank_indices is the rank's real samples in step order.
    for r, per_rank in enumerate(ranks):
        flat = [i for step in per_rank for ids, w in step for i in ids[w > 0].tolist()]
        assert plan.rank_indices(r, world).tolist() == flat
        assert plan.rank_size(r, world) == len(flat)
        for t, step in enumerate(steps):
            step_ids = [i for ids, w in per_rank[t] for i in ids[w > 0].tolist()]
            assert plan.step_indices(step, r, world).tolist() == step_ids


def kind_of(plan: ep.EpochPlan) -> dict[str, object]:
    if plan.kind == "chunked":
        return {"kind": ep.Chunked(plan.chunk_size, plan.preload_nchunks)}
    return {"kind": plan.kind}


@settings(max_examples=400, deadline=None)
@given(
    n=st.integers(0, 300),
    g=st.integers(1, 70),
    world=st.integers(1, 17),
    micro=st.integers(1, 9),
    drop_last=st.booleans(),
    kind=st.sampled_from(KINDS),
    seed=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_plan_properties(
    n: int,
    g: int,
    world: int,
    micro: int,
    drop_last: bool,
    kind: dict[str, object],
    seed: int,
    data: st.DataObject,
) -> None:
    full = ep.EpochPlan(n, g, seed=seed, drop_last=drop_last, **kind)  # type: ignore[arg-type]
    step = data.draw(st.integers(0, full.num_steps))
    plan = full.at_step(step)
    assert plan.cursor == min(step * g, n)
    check_plan(plan, world, micro)


@pytest.mark.parametrize(
    ("n", "g", "world", "micro"),
    [(1, 1, 1, 1), (1, 5, 4, 2), (7, 3, 8, 1), (13, 13, 2, 4), (97, 10, 3, 3), (101, 25, 7, 2)],
)
def test_edge_cases(n: int, g: int, world: int, micro: int) -> None:
    # N < W, N < G, G < W, N = 1, prime N, N % G == 1, W not dividing G.
    check_plan(ep.EpochPlan(n, g, seed=3), world, micro)


def test_drop_last_covers_exactly_the_full_steps() -> None:
    plan = ep.EpochPlan(103, 10, seed=1, drop_last=True)
    assert plan.num_steps == 10
    order = np.asarray(ep.Permutation(103, seed=1))
    ids = np.concatenate([plan.rank_indices(r, 3) for r in range(3)])
    assert sorted(ids.tolist()) == sorted(order[:100].tolist())


def test_strided_field_case_has_equal_micro_batch_counts() -> None:
    # A strided split of N=9 over W=2 with b=4 gives 2 micro-batches against 1.
    strided = [len(range(r, 9, 2)) for r in range(2)]
    assert [-(-c // 4) for c in strided] == [2, 1]
    plan = ep.EpochPlan(9, 9)
    counts = [sum(len(step) for step in plan.micro_batches(r, 2, 4)) for r in range(2)]
    assert counts == [2, 2]


@pytest.mark.parametrize("world", [1, 2, 4, 8])
def test_field_step_count(world: int) -> None:
    plan = ep.EpochPlan(8_474_566, 640, seed=11)
    assert plan.num_steps == 13_242
    assert plan.total_micro_batches(world, 640 // world) == 13_242
    sizes = [plan.rank_size(r, world) for r in range(world)]
    assert sum(sizes) == 8_474_566 and max(sizes) - min(sizes) <= 1


@pytest.mark.parametrize("world", range(1, 18))
def test_elastic_step_sets(world: int) -> None:
    plan = ep.EpochPlan(1000, 64, seed=5, epoch=2)
    for step in range(plan.num_steps):
        got = np.concatenate([plan.step_indices(step, r, world) for r in range(world)])
        want = np.concatenate([plan.step_indices(step, 0, 1)])
        assert sorted(got.tolist()) == sorted(want.tolist())


@settings(max_examples=120, deadline=None)
@given(
    n=st.integers(1, 400),
    g=st.integers(1, 50),
    w1=st.integers(1, 9),
    w2=st.integers(1, 9),
    kinds=st.sampled_from(
        [
            {"kind": "cipher"},
            {"kind": "uniform"},
            {"kind": ep.Chunked(7, 3)},
            {"kind": "identity"},
        ]
    ),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**64 - 1),
    data=st.data(),
)
def test_resume_at_another_world_size(
    n: int,
    g: int,
    w1: int,
    w2: int,
    kinds: dict[str, Any],
    drop_last: bool,
    seed: int,
    data: st.DataObject,
) -> None:
    plan = ep.EpochPlan(n, g, seed=seed, epoch=3, drop_last=drop_last, **kinds)
    stop = data.draw(st.integers(0, plan.num_steps))
    consumed = [i for r in range(w1) for s in range(stop) for i in plan.step_indices(s, r, w1)]
    state = json.loads(json.dumps(plan.at_step(stop).state_dict()))
    resumed = ep.EpochPlan.from_state_dict(state)
    assert resumed.start_step == stop
    rest = np.concatenate([resumed.rank_indices(r, w2) for r in range(w2)]).tolist()
    # Every sample of the epoch's steps once: all N, or the full steps with drop_last.
    epoch = [i for s in range(plan.num_steps) for i in plan.step_indices(s, 0, 1)]
    assert len(epoch) == len(set(epoch)) == (plan.num_steps * g if drop_last else n)
    assert sorted(consumed + rest) == sorted(epoch)
    # The remaining steps are exactly those of the uninterrupted plan.
    for s in range(stop, plan.num_steps):
        got = [i for r in range(w2) for i in resumed.step_indices(s, r, w2)]
        assert sorted(got) == sorted(plan.step_indices(s, 0, 1).tolist())


def test_weighted_loss_gives_the_mean_gradient_for_any_world_size() -> None:
    # A linear model, squared loss: grad_i = (x_i . theta - y_i) x_i. Each rank
    # accumulates sum(w * grad) over its micro-batches; DDP averages over W.
    rng = np.random.default_rng(0)
    n, g, dim = 103, 16, 5
    x, y = rng.normal(size=(n, dim)), rng.normal(size=n)
    theta = rng.normal(size=dim)

    def grads(ids: np.ndarray) -> np.ndarray:
        return (x[ids] @ theta - y[ids])[:, None] * x[ids]

    plan = ep.EpochPlan(n, g, seed=4)
    for world, micro in [(1, 16), (2, 3), (3, 1), (5, 2), (16, 4), (17, 1)]:
        per_rank = all_ranks(plan, world, micro)
        for t in range(plan.num_steps):
            ddp = (
                sum(
                    sum((w[:, None] * grads(ids)).sum(axis=0) for ids, w in per_rank[r][t])
                    for r in range(world)
                )
                / world
            )
            step_ids = plan.step_indices(t, 0, 1)
            np.testing.assert_allclose(ddp, grads(step_ids).mean(axis=0), rtol=1e-12, atol=1e-12)


def test_state_dict_is_constant_size_and_checked() -> None:
    plan = ep.EpochPlan(10**12, 4096, seed=2**64 - 1, epoch=3)
    state = plan.at_step(7).state_dict()
    assert len(json.dumps(state)) < 300
    assert ep.EpochPlan.from_state_dict(state).cursor == 7 * 4096
    with pytest.raises(ValueError, match="format_version"):
        ep.EpochPlan.from_state_dict({**state, "format_version": 99})
    with pytest.raises(ValueError, match="unknown key"):
        ep.EpochPlan.from_state_dict({**state, "world_size": 8})
    with pytest.raises(ValueError, match="missing"):
        ep.EpochPlan.from_state_dict({k: v for k, v in state.items() if k != "cursor"})
    with pytest.raises(ValueError, match="cursor"):
        ep.EpochPlan.from_state_dict({**state, "cursor": 5})
    with pytest.raises(TypeError, match="state"):
        ep.EpochPlan.from_state_dict([1, 2])  # type: ignore[arg-type]


def test_pickle_round_trip() -> None:
    plan = ep.EpochPlan(1000, 7, seed=3, kind=ep.Chunked(10, 3))
    again = pickle.loads(pickle.dumps(plan.at_step(5)))
    assert again.state_dict() == plan.at_step(5).state_dict()
    assert np.array_equal(again.rank_indices(1, 3), plan.at_step(5).rank_indices(1, 3))


@pytest.mark.parametrize(
    ("kwargs", "exc", "name"),
    [
        ({"num_samples": -1, "global_batch_size": 2}, ValueError, "num_samples"),
        ({"num_samples": 10, "global_batch_size": 0}, ValueError, "global_batch_size"),
        ({"num_samples": 10, "global_batch_size": 2.0}, TypeError, "global_batch_size"),
        ({"num_samples": 10, "global_batch_size": 2, "drop_last": 1}, TypeError, "drop_last"),
        ({"num_samples": 10, "global_batch_size": 4, "cursor": 3}, ValueError, "cursor"),
        ({"num_samples": 10, "global_batch_size": 4, "kind": "nope"}, ValueError, "kind"),
        ({"num_samples": 10, "global_batch_size": 4, "kind": "chunked"}, ValueError, "Chunked"),
    ],
)
def test_bad_arguments(kwargs: dict[str, object], exc: type[Exception], name: str) -> None:
    with pytest.raises(exc, match=name):
        ep.EpochPlan(**kwargs)  # type: ignore[arg-type]


def test_bad_method_arguments() -> None:
    plan = ep.EpochPlan(10, 4)
    with pytest.raises(ValueError, match="rank"):
        plan.rank_indices(2, 2)
    with pytest.raises(ValueError, match="world_size"):
        plan.rank_indices(0, 0)
    with pytest.raises(IndexError, match="step"):
        plan.step_indices(3, 0, 1)
    with pytest.raises(ValueError, match="micro_batch_size"):
        plan.micro_batches(0, 1, 0)
    # Any int step outside the plan is an IndexError naming the range; the
    # epoch's end is a step for at_step and rank_step_offset.
    steps = [
        lambda s: plan.step_indices(s, 0, 1),
        plan.step_size,
        lambda s: plan.num_micro_batches(s, 1, 1),
        lambda s: plan.step_micro_batches(s, 0, 1, 1),
        lambda s: plan.split_step(s, 0, 1, 1, []),
    ]
    ends = [plan.at_step, lambda s: plan.rank_step_offset(s, 0, 1)]
    for call in steps + ends:
        for step in (-1, 4, 2**63, 2**64, -(2**70)):
            with pytest.raises(IndexError, match=r"step must be in \[0, 3[\])]"):
                call(step)
        with pytest.raises(TypeError, match="step must be an int"):
            call(1.0)
    for call in steps:
        with pytest.raises(IndexError, match=r"step must be in \[0, 3\), got 3"):
            call(3)
    for call in ends:
        call(3)


def test_worker_shard_preserves_plan_order() -> None:
    items = list(range(23))
    for workers in range(1, 6):
        shards = [list(ep.worker_shard(items, w, workers)) for w in range(workers)]
        # Round-robin over workers, as a DataLoader fetches, restores the order.
        merged = [shards[i % workers][i // workers] for i in range(len(items))]
        assert merged == items
    assert list(ep.worker_shard(items)) == items
    with pytest.raises(ValueError, match="worker_id"):
        list(ep.worker_shard(items, 3, 3))
    with pytest.raises(ValueError, match="num_workers"):
        list(ep.worker_shard(items, 0, 0))
    with pytest.raises(ValueError, match=r"num_workers must be an int in \[1, 2\*\*63 - 1\]"):
        list(ep.worker_shard(items, 1, 2**70))
    with pytest.raises(TypeError, match="items must be iterable, got int"):
        ep.worker_shard(5, 0, 1)  # type: ignore[call-overload]


def test_split_step_and_offsets_rebuild_micro_batches_from_stored_ids() -> None:
    plan = ep.EpochPlan(1001, 64, seed=8)
    for world, micro in [(1, 64), (3, 5), (7, 1)]:
        for rank in range(world):
            stored = plan.rank_indices(rank, world)
            for step, expected in enumerate(plan.micro_batches(rank, world, micro)):
                lo = plan.rank_step_offset(step, rank, world)
                hi = plan.rank_step_offset(step + 1, rank, world)
                got = plan.split_step(step, rank, world, micro, stored[lo:hi])
                assert len(got) == len(expected)
                for (a, wa), (b, wb) in zip(got, expected, strict=True):
                    assert np.array_equal(a, b) and np.array_equal(wa, wb)
    with pytest.raises(ValueError, match="ids"):
        plan.split_step(0, 0, 2, 4, np.arange(3))


def test_a_step_that_fails_is_not_skipped() -> None:
    # The first step is too large to hold (2**40 ids): the error is raised,
    # and the iterator stays on that step instead of moving past it.
    plan = ep.EpochPlan(2**40 + 5, 2**40)
    steps = plan.micro_batches(0, 1, 1)
    for _ in range(2):
        with pytest.raises(OverflowError, match="cannot allocate"):
            next(steps)
        assert len(steps) == 2


def test_one_rank_of_a_huge_plan_is_its_share() -> None:
    # One rank's share of 10^12 samples over 10^6 ranks: 10^6 ids, computed alone.
    plan = ep.EpochPlan(10**12, 10**6, seed=3)
    ids = plan.rank_indices(3, 10**6)
    assert len(ids) == plan.rank_size(3, 10**6) == 10**6
    # One id per rank per step: rank 3 holds positions 3, 3 + G, 3 + 2G, ...
    np.testing.assert_array_equal(ids, ep.Permutation(10**12, seed=3)[3 :: 10**6])


@pytest.mark.parametrize(
    ("g", "w", "drop_last"),
    [(10**6, 7, False), (10**6, 7, True), (3, 2, True), (2**62, 3, False), (12345, 5, True)],
)
def test_rank_sizes_add_up_at_the_largest_n(g: int, w: int, drop_last: bool) -> None:
    plan = ep.EpochPlan(2**63 - 1, g, drop_last=drop_last)
    sizes = [plan.rank_size(r, w) for r in range(w)]
    assert sum(sizes) == (plan.num_steps * g if drop_last else 2**63 - 1)
    assert max(sizes) - min(sizes) <= plan.num_steps  # at most one more a step
    for r in range(w):
        assert plan.rank_step_offset(plan.num_steps, r, w) == sizes[r]
        assert plan.rank_step_offset(1, r, w) == len(range(r, plan.step_size(0), w))
