"""Permutation and permutation(): bijection, random access at every scale,
numpy-compatible indexing, uniformity of kind="uniform", keys, determinism
across thread counts, pickling, and split()."""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep

MAX = 2**63 - 1
CHUNKED: dict[str, Any] = {"kind": ep.Chunked(64, 4)}
KINDS: dict[str, dict[str, Any]] = {
    "cipher": {"kind": "cipher"},
    "uniform": {"kind": "uniform"},
    "chunked": CHUNKED,
    "identity": {"kind": "identity"},
}


def chi2_sf(statistic: float, df: int) -> float:
    """Survival function of chi-square(df) (Wilson-Hilferty; accurate to a few
    percent of the p-value for df >= 10, enough for a 1e-4 threshold)."""
    z = ((statistic / df) ** (1 / 3) - (1 - 2 / (9 * df))) / math.sqrt(2 / (9 * df))
    return 0.5 * math.erfc(z / math.sqrt(2))


def sha(ids: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(ids, dtype="<i8").tobytes()).hexdigest()


# ---------------------------------------------------------------- bijection


SIZES = sorted(
    {0, 1, 2, 3, 5, 10, 100, 1000} | {2**k + d for k in range(2, 17) for d in (-1, 0, 1)}
)


@pytest.mark.parametrize("kind", KINDS)
def test_every_kind_is_a_bijection(kind: str) -> None:
    for n in SIZES:
        for seed in (0, 2**64 - 1):
            ids = np.asarray(ep.Permutation(n, seed=seed, **KINDS[kind]))
            assert ids.dtype == np.int64
            assert np.array_equal(np.sort(ids), np.arange(n)), (kind, n, seed)


@pytest.mark.parametrize("kind", KINDS)
def test_permutation_function_matches_the_class(kind: str) -> None:
    for n in (0, 7, 70_000, 300_001):
        expected = np.asarray(ep.Permutation(n, seed=3, epoch=4, **KINDS[kind]))
        assert np.array_equal(ep.permutation(n, seed=3, epoch=4, **KINDS[kind]), expected)
    assert np.array_equal(ep.permutation(1000), ep.permutation(1000, kind="uniform"))
    assert ep.Permutation(1000).kind == "cipher"


# ---------------------------------------------------------------- random access


@pytest.mark.parametrize("kind", ["cipher", "chunked", "identity"])
def test_random_access_at_the_largest_size(kind: str) -> None:
    p = ep.Permutation(MAX, seed=11, **KINDS[kind])
    assert len(p) == MAX
    ends = [p[0], p[1], p[2**62], p[MAX - 2], p[-1]]
    assert all(isinstance(x, int) and 0 <= x < MAX for x in ends)
    assert len(set(ends)) == 5
    assert p[-1] == p[MAX - 1] and p[-(2**62)] == p[MAX - 2**62]
    tail = p[MAX - 1000 :]
    assert tail.shape == (1000,) and tail.dtype == np.int64
    assert tail[-1] == ends[-1] and len(set(tail.tolist())) == 1000
    assert np.array_equal(p[-1000:], tail)
    assert np.array_equal(p[: MAX - 4 : -1], [p[-1], p[-2], p[-3]])
    assert np.array_equal(p[MAX - 1 :: -(2**61)], [p[MAX - 1 - k * 2**61] for k in range(4)])
    positions = np.array([[0, MAX - 1], [2**62, -1]], dtype=np.int64)
    taken = p.take(positions)
    assert taken.shape == (2, 2)
    assert taken.tolist() == [[p[0], p[-1]], [p[2**62], p[-1]]]
    assert p.take(np.array([MAX - 1], dtype=np.uint64)).tolist() == [p[-1]]
    if kind == "identity":
        assert ends == [0, 1, 2**62, MAX - 2, MAX - 1]


def test_membership_is_the_range_and_takes_no_scan() -> None:
    p = ep.Permutation(10**15)  # a scan would take days
    assert 0 in p and 10**15 - 1 in p and np.int64(7) in p and 3.0 in p
    assert -1 not in p and 10**15 not in p and 2.5 not in p and "1" not in p
    small = ep.Permutation(7, seed=3)
    assert [i for i in range(-2, 10) if i in small] == sorted(small[:].tolist())


@pytest.mark.parametrize(
    ("chunk_size", "preload_nchunks"),
    [(3, MAX), (2**40, 2**40), (2**62, MAX), (MAX, MAX), (1, 2**62), (10**18, 2**62)],
)
def test_chunked_layouts_wider_than_the_data(chunk_size: int, preload_nchunks: int) -> None:
    layout = {"kind": ep.Chunked(chunk_size, preload_nchunks)}
    p = ep.Permutation(MAX, seed=2, **layout)
    ids = np.concatenate([p[:1000], p[-1000:], p.take([2**62, 2**61 + 5])])
    assert ids.min() >= 0 and len(set(ids.tolist())) == len(ids)
    for n in (1, 10, 1000):
        assert np.array_equal(np.sort(np.asarray(ep.Permutation(n, **layout))), np.arange(n))


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 300),
    start=st.none() | st.integers(-400, 400),
    stop=st.none() | st.integers(-400, 400),
    step=st.none() | st.integers(-7, 7).filter(bool),
    kind=st.sampled_from(list(KINDS)),
)
def test_slices_match_numpy(
    n: int, start: int | None, stop: int | None, step: int | None, kind: str
) -> None:
    p = ep.Permutation(n, seed=n, **KINDS[kind])
    full = np.asarray(p)
    key = slice(start, stop, step)
    assert np.array_equal(p[key], full[key])
    assert p[key].dtype == np.int64
    for i in (start, stop):
        if i is not None and -n <= i < n:
            assert p[i] == full[i]


@settings(max_examples=100, deadline=None)
@given(
    n=st.integers(1, 500),
    data=st.data(),
    kind=st.sampled_from(list(KINDS)),
    dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint64"]),
)
def test_take_matches_numpy(n: int, data: st.DataObject, kind: str, dtype: str) -> None:
    p = ep.Permutation(n, seed=1, **KINDS[kind])
    full = np.asarray(p)
    info = np.iinfo(dtype)
    lo, hi = max(-n, int(info.min)), min(n - 1, int(info.max))
    shape = data.draw(st.lists(st.integers(0, 4), max_size=3))
    count = int(np.prod(shape)) if shape else 1
    values = data.draw(st.lists(st.integers(lo, hi), min_size=count, max_size=count))
    positions = np.array(values, dtype=dtype).reshape(shape)
    assert np.array_equal(p.take(positions), full.take(positions.astype(np.int64)))
    assert p.take(positions).shape == positions.shape
    assert p.take(values).tolist() == full[values].tolist()


# ---------------------------------------------------------------- uniformity


def order_counts(n: int, orders: list[np.ndarray]) -> np.ndarray:
    index = {perm: i for i, perm in enumerate(itertools.permutations(range(n)))}
    counts = np.zeros(len(index), dtype=np.int64)
    for ids in orders:
        counts[index[tuple(ids.tolist())]] += 1
    return counts


@pytest.mark.parametrize("vary", ["seed", "epoch"])
def test_uniform_hits_every_order_of_5_equally(vary: str) -> None:
    draws = 120 * 60
    if vary == "seed":
        orders = [ep.permutation(5, seed=s, kind="uniform") for s in range(draws)]
    else:
        orders = [ep.permutation(5, seed=7, epoch=e, kind="uniform") for e in range(draws)]
    counts = order_counts(5, orders)
    assert np.all(counts > 0)
    expected = draws / 120
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf(statistic, 119) > 1e-4, counts


@pytest.mark.parametrize("n", [5, 6])
def test_cipher_orders_of_a_small_domain_over_seeds(n: int) -> None:
    """A keyed pseudo-random permutation should make every order about
    equally likely over keys, as kind="uniform" does."""
    orders = math.factorial(n)
    draws = orders * 50
    counts = order_counts(n, [ep.Permutation(n, seed=s)[:] for s in range(draws)])
    expected = draws / orders
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf(statistic, orders - 1) > 1e-4, (counts.min(), counts.max())


@pytest.mark.parametrize("n", [65, 100, 129])
def test_cipher_pairs_just_above_the_table_are_uniform_over_seeds(n: int) -> None:
    """Above 64 samples the order is the Feistel network: the ids at two
    positions, over seeds, are about uniform over the n * (n - 1) pairs."""
    draws = n * (n - 1) * 8
    pairs = np.array([ep.Permutation(n, seed=s)[[0, n - 1]] for s in range(draws)])
    cells = pairs[:, 0] * n + pairs[:, 1]
    counts = np.bincount(cells, minlength=n * n).reshape(n, n)
    assert np.trace(counts) == 0  # never the same id twice
    counts = counts[~np.eye(n, dtype=bool)]
    expected = draws / (n * (n - 1))
    statistic = float(((counts - expected) ** 2 / expected).sum())
    assert chi2_sf(statistic, n * (n - 1) - 1) > 1e-4, (counts.min(), counts.max())


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(65, 2**63 - 1),
    seed=st.integers(0, 2**64 - 1),
    kind=st.sampled_from(["cipher", "chunked"]),
    data=st.data(),
)
def test_distinct_positions_give_distinct_ids_at_any_size(
    n: int, seed: int, kind: str, data: st.DataObject
) -> None:
    """Bijection at sizes no test can enumerate: distinct positions (random,
    and the ends of the range) give distinct ids in range, alike one by one
    and as an array."""
    order = ep.Chunked(1000, 3) if kind == "chunked" else kind
    p = ep.Permutation(n, seed=seed, kind=order)
    positions = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=40))
    positions = sorted(positions | {0, n - 1, n // 2})
    ids = p.take(np.array(positions, dtype=np.int64))
    assert len(set(ids.tolist())) == len(positions)
    assert ((ids >= 0) & (ids < n)).all()
    assert ids.tolist() == [p[i] for i in positions]


def test_uniform_large_path_positions_are_uniform() -> None:
    """N > 65,536 takes the scatter shuffle: where chosen elements land, over
    seeds, is uniform (and so is the joint law of two of them)."""
    n, draws, bins = 65_537 * 2 + 3, 1200, 12
    ids = np.array([0, 1, n // 2, 65_536, n - 1])
    where = np.empty((draws, len(ids)), dtype=np.int64)
    for s in range(draws):
        inverse = np.empty(n, dtype=np.int64)
        inverse[ep.permutation(n, seed=s, kind="uniform")] = np.arange(n)
        where[s] = inverse[ids]
    cells = where * bins // n
    expected = np.bincount(np.arange(n) * bins // n, minlength=bins) / n * draws
    for j in range(len(ids)):
        counts = np.bincount(cells[:, j], minlength=bins)
        statistic = float(((counts - expected) ** 2 / expected).sum())
        assert chi2_sf(statistic, bins - 1) > 1e-4, (ids[j], counts)
    # Element 0 and element n-1 land independently (3x3 table).
    a, b = where[:, 0] * 3 // n, where[:, -1] * 3 // n
    table = np.bincount(a * 3 + b, minlength=9).reshape(3, 3)
    expected2 = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / draws
    assert chi2_sf(float(((table - expected2) ** 2 / expected2).sum()), 4) > 1e-4


# ---------------------------------------------------------------- keys


@pytest.mark.parametrize("kind", ["cipher", "uniform", "chunked"])
def test_keys_cover_the_whole_range(kind: str) -> None:
    n = 10_000
    orders = {
        (s, e): sha(ep.permutation(n, seed=s, epoch=e, **KINDS[kind]))
        for s in (0, 1, 2**63, 2**64 - 1)
        for e in (0, 1, 2**63, 2**64 - 1)
    }
    assert len(set(orders.values())) == len(orders)
    assert orders[(0, 1)] != orders[(1, 0)]
    a = ep.permutation(n, seed=0, epoch=1, **KINDS[kind])
    b = ep.permutation(n, seed=1, epoch=0, **KINDS[kind])
    # Unrelated orders agree in about one position (Poisson(1)).
    assert np.count_nonzero(a == b) < 10
    assert abs(np.corrcoef(a, b)[0, 1]) < 5 / math.sqrt(n)
    assert np.array_equal(
        ep.permutation(n, seed=np.uint64(2**64 - 1)), ep.permutation(n, seed=2**64 - 1)
    )


def test_epochs_and_seeds_give_new_orders() -> None:
    first = np.asarray(ep.Permutation(1000))
    assert np.array_equal(first, np.asarray(ep.Permutation(1000, seed=0, epoch=0)))
    others = [np.asarray(ep.Permutation(1000, seed=s, epoch=e)) for s in range(3) for e in range(3)]
    assert len({sha(o) for o in others}) == 9


# ---------------------------------------------------------------- determinism


def fingerprint() -> str:
    """Outputs of every parallel path: orders, a rank's share of a plan of each
    kind, and the checksums of a plan directory (which is verified too)."""
    from epochplan.planfile import verify_plan, write_plan

    parts = [
        ep.permutation(3_000_017, seed=5, kind="uniform"),
        ep.Permutation(10**9, seed=5)[3::997],
        ep.Permutation(10**9, seed=5, **CHUNKED)[:700_001],
        ep.Permutation(10**6, seed=5).take(np.arange(10**6)[::-1].reshape(1000, 1000)),
    ]
    for kinds in [{"kind": "cipher"}, {"kind": "uniform"}, CHUNKED, {"kind": "identity"}]:
        plan = ep.EpochPlan(3_000_017, 4096, seed=5, epoch=2, **kinds)
        parts.append(plan.rank_indices(1, 3))
    with tempfile.TemporaryDirectory() as tmp:
        d = write_plan(
            os.path.join(tmp, "p"), ep.PlanSpec(3_000_017, 4096, seed=5), 2, epochs=(0, 1)
        )
        verify_plan(d.path)
        checksums = " ".join(f["blake3"] for f in d.manifest["files"])
    return "".join(sha(x) for x in parts) + hashlib.sha256(checksums.encode()).hexdigest()


def pool_threads() -> int:
    """The worker threads of this process's pool (named epochplan-<i>)."""
    comms = Path("/proc/self/task").glob("*/comm")
    return sum(comm.read_text().startswith("epochplan-") for comm in comms)


@pytest.mark.usefixtures("restore_threads")
def test_same_output_for_any_thread_count() -> None:
    ep.set_num_threads(1)
    assert ep.get_num_threads() == 1
    one = fingerprint()
    ep.set_num_threads(2)
    assert ep.get_num_threads() == 2
    two = fingerprint()
    assert pool_threads() >= 2  # the work did run on a pool of two
    ep.set_num_threads(3)
    assert fingerprint() == two == one


def test_same_output_for_any_epochplan_num_threads() -> None:
    # This file imported by path: another distribution may install a
    # top-level package named `tests` (verl does), which would shadow ours.
    code = (
        "import sys; sys.path.insert(0, 'tests/core');"
        "import test_permutation as t, epochplan as ep;"
        "print(ep.get_num_threads(), t.fingerprint())"
    )
    root = Path(__file__).resolve().parents[2]
    outputs = []
    for threads in ("1", "2"):
        env = {**os.environ, "EPOCHPLAN_NUM_THREADS": threads}
        out = subprocess.run(
            [sys.executable, "-c", code],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.split()
        assert out[0] == threads
        outputs.append(out[1])
    assert outputs[0] == outputs[1] == fingerprint()


def test_epochplan_num_threads_is_capped() -> None:
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "100000"}
    code = "import epochplan as ep; print(ep.get_num_threads())"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "1024"


# ---------------------------------------------------------------- pickling


@pytest.mark.parametrize("kind", KINDS)
def test_permutation_pickles(kind: str) -> None:
    p = ep.Permutation(10_000, seed=2**64 - 1, epoch=9, **KINDS[kind])
    q = pickle.loads(pickle.dumps(p))
    assert repr(q) == repr(p)
    assert (q.num_samples, q.seed, q.epoch, q.kind) == (10_000, 2**64 - 1, 9, kind)
    assert (q.chunk_size, q.preload_nchunks) == (p.chunk_size, p.preload_nchunks)
    assert np.array_equal(np.asarray(q), np.asarray(p))


def test_repr() -> None:
    assert (
        repr(ep.Permutation(10, seed=1, epoch=2))
        == "Permutation(num_samples=10, seed=1, epoch=2, kind='cipher')"
    )
    assert repr(ep.Permutation(10, **CHUNKED)).endswith(
        "kind=Chunked(chunk_size=64, preload_nchunks=4))"
    )


# ---------------------------------------------------------------- split


@pytest.mark.parametrize("mode", ["strided", "contiguous"])
def test_split_covers_every_position_once(mode: str) -> None:
    for n in range(0, 40):
        for world in range(1, 9):
            shares = [ep.split(n, r, world, mode) for r in range(world)]
            assert all(s.dtype == np.int64 for s in shares)
            assert np.array_equal(np.sort(np.concatenate(shares)), np.arange(n))
            sizes = [len(s) for s in shares]
            assert max(sizes) - min(sizes) <= 1
            assert sizes == sorted(sizes, reverse=True)
            for r, s in enumerate(shares):
                if mode == "strided":
                    assert np.array_equal(s, np.arange(r, n, world))
                else:
                    assert np.all(np.diff(s) == 1)


def test_split_of_an_array_is_the_same_share() -> None:
    ids = np.asarray(ep.Permutation(1001, seed=4))
    for mode in ("strided", "contiguous"):
        for r in range(7):
            share = ep.split(ids, r, 7, mode)
            assert np.array_equal(share, ids[ep.split(1001, r, 7, mode)])
    assert ep.split([5, 6, 7], 1, 2).tolist() == [6]
    assert ep.split(np.int64(10), 1, 3).tolist() == [1, 4, 7]
    big = ep.split(10**15, 10**14 - 1, 10**14)
    assert big.tolist() == [(k + 1) * 10**14 - 1 for k in range(10)]


@pytest.mark.parametrize(("world", "rank"), [(2, 2), (2, -1), (4, 10), (1, 1)])
def test_split_rejects_bad_ranks_like_torch(world: int, rank: int) -> None:
    torch_data = pytest.importorskip("torch.utils.data")
    with pytest.raises(ValueError) as torch_error:
        torch_data.DistributedSampler(range(10), num_replicas=world, rank=rank)
    with pytest.raises(ValueError) as ours:
        ep.split(10, rank, world)
    assert str(ours.value) == str(torch_error.value)


def test_split_rejects_world_size_zero() -> None:
    with pytest.raises(ValueError, match="world_size"):
        ep.split(10, 0, 0)


@pytest.mark.parametrize("n", [2**63 - 1, 2**63 - 2, 2**62 + 5])
def test_split_of_a_share_too_large_to_hold_is_an_error(n: int) -> None:
    # numpy's arange gives an empty array near 2**63: never a silent empty share.
    with pytest.raises(OverflowError, match="cannot allocate"):
        ep.split(n, 0, 1)


@pytest.mark.parametrize(("chunk_size", "window"), [(64, 4), (1000, 3), (7, 13), (10, 2)])
def test_chunked_windows_are_whole_chunks_at_the_largest_n(chunk_size: int, window: int) -> None:
    # Beyond exhaustive checks: a window is a run of positions holding exactly
    # the ids of its chunks, each once, which makes the order a bijection there.
    # Its start is j * chunk_size * window, less the short chunk's deficit
    # after the window holding it (see the README).
    n = 2**63 - 1
    p = ep.Permutation(n, seed=11, kind=ep.Chunked(chunk_size, window))
    width = chunk_size * window
    deficit = -n % chunk_size
    rng = np.random.default_rng(0)
    for j in [0, 1, *rng.integers(2, n // width - 1, size=30).tolist(), n // width - 1]:
        whole = []
        for start in {j * width, max(j * width - deficit, 0)}:
            ids = p[start : start + width]
            chunks = np.unique(ids // chunk_size)
            ranges = [np.arange(c * chunk_size, min((c + 1) * chunk_size, n)) for c in chunks]
            if len(chunks) <= window and np.array_equal(np.sort(ids), np.concatenate(ranges)):
                whole.append(start)
        assert whole, f"window {j}: no start gives whole chunks"


def test_take_of_a_view_larger_than_memory_is_an_overflow_error() -> None:
    # A broadcast view holds one value; copying its 10**12 positions cannot.
    p = ep.Permutation(10)
    with pytest.raises(OverflowError, match="positions is too large"):
        p.take(np.broadcast_to(np.int64(1), (10**12,)))
    np.testing.assert_array_equal(
        p.take(np.broadcast_to(np.int64(1), (3, 2))), np.full((3, 2), p[1])
    )


def test_chunked_windows_far_apart_are_shuffled_apart() -> None:
    # Chunks of 2, one chunk a window: each window keeps or swaps its pair by
    # its own key. Windows 2^32 apart must not share keys (a key index cut to
    # 32 bits would make the 64 pairs below agree).
    p = ep.Permutation(2**34, seed=0, kind=ep.Chunked(2, 1))
    near = np.arange(64, dtype=np.int64) * 2
    far = near + 2 * 2**32

    def swapped(first: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        return p.take(first) > p.take(first + 1)

    assert (swapped(near) != swapped(far)).any()
