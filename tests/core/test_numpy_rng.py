"""The Rust port of numpy's default_rng (SeedSequence + PCG64 + Generator)
against numpy itself, draw for draw."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from epochplan._native import _testing

SEEDS = [
    0,
    1,
    2,
    12345,
    2**31 - 1,
    2**32 - 1,
    2**32,
    2**32 + 1,
    2**63 - 1,
    2**64 - 1,
    2**64,
    2**96 + 5,
    2**128 - 1,
]
seeds = st.integers(min_value=0, max_value=2**128 - 1)


@pytest.mark.parametrize("seed", SEEDS)
def test_seed_sequence_pool_and_state(seed: int) -> None:
    ss = np.random.SeedSequence(seed)
    assert _testing._np_seed_pool(seed) == [int(x) for x in ss.pool]
    for n in (1, 2, 3, 4, 5, 8, 9):
        assert _testing._np_generate_state(seed, n) == [int(x) for x in ss.generate_state(n)]


@settings(max_examples=200, deadline=None)
@given(seed=seeds)
def test_pcg64_seeding(seed: int) -> None:
    state = np.random.PCG64(seed).state["state"]
    assert _testing._np_pcg64_state(seed) == (state["state"], state["inc"])


def _numpy_run(seed: int, ops: list[tuple[Any, ...]]) -> list[np.ndarray]:
    g = np.random.default_rng(seed)
    out: list[np.ndarray] = []
    for op in ops:
        name = op[0]
        if name == "raw":
            out.append(g.bit_generator.random_raw(op[1]))
        elif name == "u32":
            out.append(g.integers(0, 2**32, size=op[1], dtype=np.uint32))
        elif name == "random":
            out.append(g.random(op[1]))
        elif name == "integers":
            out.append(g.integers(op[1], op[2], size=op[3]))
        elif name == "uniform":
            out.append(g.uniform(op[1], op[2], size=op[3]))
        elif name == "permutation":
            out.append(g.permutation(op[1]))
        else:
            raise AssertionError(name)
    return out


def _assert_same_run(seed: int, ops: list[tuple[Any, ...]]) -> None:
    ours = _testing._np_run(seed, ops)
    ref = _numpy_run(seed, ops)
    assert len(ours) == len(ref)
    for op, a, b in zip(ops, ours, ref, strict=True):
        assert a.dtype == b.dtype, op
        np.testing.assert_array_equal(a, b, err_msg=str(op))


@pytest.mark.parametrize("seed", SEEDS[:10])
def test_raw_u32_and_double_draws_interleaved(seed: int) -> None:
    # A 32-bit draw keeps half of a 64-bit draw; 64-bit draws and doubles do
    # not touch that half.
    ops = [
        ("u32", 1),
        ("raw", 2),
        ("u32", 2),
        ("random", 3),
        ("u32", 3),
        ("raw", 1),
        ("u32", 1),
        ("random", 1),
        ("u32", 5),
    ]
    _assert_same_run(seed, ops)


# Ranges high - low: 1 (no draw), small, powers of two and their neighbours,
# the 32-bit limits (Lemire on 32-bit draws, a raw 32-bit draw at 2**32, Lemire
# on 64-bit draws above) and the full int64 range (a raw 64-bit draw).
BOUNDS = [
    (0, 1),
    (5, 6),
    (0, 2),
    (0, 3),
    (0, 10),
    (-7, 7),
    (0, 2**8),
    (0, 2**16 + 1),
    (0, 2**31),
    (0, 2**32 - 1),
    (0, 2**32),
    (0, 2**32 + 1),
    (-(2**31), 2**31),
    (0, 2**33 - 1),
    (0, 2**40),
    (3, 2**62 + 3),
    (0, 2**63 - 1),
    (0, 2**63),
    (-(2**63), 0),
    (-(2**63), 2**63),
    (-(2**62), 2**62 + 12345),
    (196608, 327680),
]


@pytest.mark.parametrize(("low", "high"), BOUNDS)
def test_integers_int64(low: int, high: int) -> None:
    for seed in (0, 1, 99, 2**64 - 1):
        _assert_same_run(seed, [("integers", low, high, 1), ("integers", low, high, 257)])
        # Interleaved with split 32-bit draws.
        _assert_same_run(seed, [("u32", 1), ("integers", low, high, 3), ("u32", 3)])


@settings(max_examples=150, deadline=None)
@given(
    seed=seeds,
    low=st.integers(-(2**63), 2**63 - 1),
    width=st.one_of(
        st.integers(1, 2**33),
        st.integers(1, 2**64),
        st.sampled_from([1, 2, 2**32 - 1, 2**32, 2**32 + 1, 2**63, 2**64]),
    ),
    n=st.integers(0, 40),
)
def test_integers_property(seed: int, low: int, width: int, n: int) -> None:
    high = min(low + width, 2**63)
    if high <= low:
        return
    _assert_same_run(seed, [("integers", low, high, n), ("u32", 1), ("integers", low, high, n)])


@pytest.mark.parametrize(
    ("low", "high"),
    [(0.0, 1.0), (-3.5, 2.25), (-131072.0, 0.0), (-0.0, 0.0), (0.0, 0.0), (-1e300, 1e300), (5, 7)],
)
def test_uniform(low: float, high: float) -> None:
    for seed in (0, 3, 2**40):
        _assert_same_run(seed, [("uniform", low, high, 100), ("u32", 1), ("uniform", low, high, 3)])


@settings(max_examples=100, deadline=None)
@given(seed=seeds, low=st.floats(-1e9, 1e9), width=st.floats(0, 1e9), n=st.integers(0, 50))
def test_uniform_property(seed: int, low: float, width: float, n: int) -> None:
    _assert_same_run(seed, [("uniform", low, low + width, n), ("random", 2)])


@pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 100, 1000, 2**16 + 3, 300_000])
def test_permutation_and_shuffle(n: int) -> None:
    for seed in (0, 1, 2**33):
        _assert_same_run(seed, [("permutation", n), ("u32", 3), ("permutation", n // 2 + 1)])
        # shuffle of a list (the untyped path Streaming uses on span lists)
        # draws exactly like shuffle of an array.
        items = list(range(n))
        np.random.default_rng(seed).shuffle(items)
        assert _testing._np_run(seed, [("permutation", n)])[0].tolist() == items


@settings(max_examples=60, deadline=None)
@given(
    seed=seeds,
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("raw"), st.integers(0, 5)),
            st.tuples(st.just("u32"), st.integers(0, 5)),
            st.tuples(st.just("random"), st.integers(0, 5)),
            st.tuples(st.just("permutation"), st.integers(0, 70)),
            st.tuples(
                st.just("integers"), st.integers(0, 10), st.integers(11, 2**34), st.integers(0, 4)
            ),
            st.tuples(st.just("uniform"), st.floats(-100, 0), st.floats(0, 100), st.integers(0, 4)),
        ),
        max_size=12,
    ),
)
def test_random_sequences_of_calls(seed: int, ops: list[tuple[Any, ...]]) -> None:
    _assert_same_run(seed, ops)


def test_hooks_reject_bad_input() -> None:
    with pytest.raises(ValueError):
        _testing._np_seed_pool(-1)
    with pytest.raises(ValueError):
        _testing._np_run(0, [("integers", 3, 3, 1)])
    with pytest.raises(ValueError):
        _testing._np_run(0, [("nope", 1)])
