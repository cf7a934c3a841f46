"""EpochPlan.locate and positions_of: every sample found where the plan
deals it (step, rank, micro-batch), for every kind, space and token plan,
without building the epoch; ids the epoch does not hold are -1."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep


def dealt(
    plan: ep.EpochPlan, world: int, b: int | None, max_tokens: int | None = None
) -> dict[int, tuple[int, int, int]]:
    """Where every real sample is, read from the plan's own micro-batches."""
    out: dict[int, tuple[int, int, int]] = {}
    for step in range(plan.num_steps):
        for rank in range(world):
            batches = plan.step_micro_batches(step, rank, world, b, max_tokens=max_tokens)
            for m, (ids, weights) in enumerate(batches):
                for i, w in zip(ids.tolist(), weights.tolist(), strict=True):
                    if w > 0:
                        assert i not in out
                        out[i] = (step, rank, m)
    return out


def check(
    plan: ep.EpochPlan, store: int, world: int, b: int | None, max_tokens: int | None = None
) -> None:
    ids = np.arange(store)
    pos, steps, ranks, mbs = plan.locate(ids, world, b, max_tokens=max_tokens)
    where = dealt(plan, world, b, max_tokens)
    for i in range(store):
        if i in where:
            assert (steps[i], ranks[i], mbs[i]) == where[i], i
            assert plan.step_indices(steps[i], ranks[i], world).tolist().count(i) == 1
        else:
            assert pos[i] == steps[i] == ranks[i] == mbs[i] == -1, i
    np.testing.assert_array_equal(plan.positions_of(ids), pos)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 300),
    g=st.integers(1, 40),
    world=st.integers(1, 9),
    b=st.integers(1, 6),
    kind=st.sampled_from(["cipher", "uniform", "identity", "chunked"]),
    drop_last=st.booleans(),
    seed=st.integers(0, 2**64 - 1),
)
def test_every_sample_is_located_where_it_is_dealt(
    n: int, g: int, world: int, b: int, kind: str, drop_last: bool, seed: int
) -> None:
    order: Any = ep.Chunked(7, 2) if kind == "chunked" else kind
    plan = ep.EpochPlan(n, g, seed=seed, kind=order, drop_last=drop_last)
    check(plan, n, world, b)


@pytest.mark.parametrize(
    "space",
    [
        ep.Selection.from_ranges([(3, 40), (70, 150)], 200),
        ep.Selection.from_mask(np.arange(200) % 3 == 0),
        ep.Selection.from_indices(np.array([(i * 37) % 200 for i in range(90)]), 200),
        ep.random_split(200, [0.3, 0.7], seed=5)[1],
        ep.Mixture([60, 90], weights=[2, 1], num_samples=80, seed=3),
    ],
    ids=["ranges", "mask", "indices", "split", "mixture"],
)
def test_a_space_locates_its_ids_and_refuses_none(space: Any) -> None:
    store = 200 if isinstance(space, ep.Selection) else 150
    check(ep.EpochPlan(space, 16, seed=4), store, 3, 2)


def test_a_token_plan_is_located_through_its_dealing() -> None:
    lengths = np.random.default_rng(1).integers(1, 200, 500).astype(np.int32)
    plan = ep.EpochPlan(500, 64, seed=2, tokens=ep.Tokens(lengths))
    check(plan, 500, 4, None, max_tokens=600)
    check(plan, 500, 3, 5, max_tokens=None)


def test_shapes_and_errors() -> None:
    plan = ep.EpochPlan(10, 4)
    pos, step, rank, _ = plan.locate(3, 2, 1)
    assert pos.shape == step.shape == () and 0 <= int(rank) < 2
    assert plan.locate([[1, 2], [3, 4]], 2, 1)[0].shape == (2, 2)
    with pytest.raises(
        ValueError, match=r"sample_ids\[1\] must be a sample id in \[0, 10\), got 10"
    ):
        plan.locate([1, 10], 2, 1)
    with pytest.raises(ValueError, match=r"world_size must be an int in \[1, "):
        plan.locate([1], 0, 1)
    with pytest.raises(TypeError, match="sample_ids must be an array of integers"):
        plan.positions_of([1.5])


def test_misaligned_arrays_are_taken_as_any_other() -> None:
    # np.frombuffer at an odd offset: int64 values not aligned to 8 bytes.
    raw = np.frombuffer(b"x" + np.arange(10, dtype="<i8").tobytes(), "<i8", offset=1)
    assert not raw.flags.aligned
    perm = ep.Permutation(20, seed=1)
    np.testing.assert_array_equal(perm.take(raw), perm.take(raw.copy()))
    plan = ep.EpochPlan(20, 4)
    np.testing.assert_array_equal(plan.positions_of(raw), plan.positions_of(raw.copy()))


def test_a_mixture_locates_repeated_ids_in_any_order() -> None:
    # A mixture is searched by reading its epoch forwards: every copy of an
    # id gets the id's position, whatever the order of the query.
    plan = ep.EpochPlan(ep.Mixture([60, 90], weights=[2, 1], num_samples=80, seed=3), 16, seed=4)
    each = plan.positions_of(np.arange(150))
    query = np.random.default_rng(2).integers(0, 150, size=600)
    np.testing.assert_array_equal(plan.positions_of(query), each[query])
