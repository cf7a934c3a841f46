"""Statistical quality of the orders, judged against numpy's shuffle.

One small battery of tests, each giving a p-value under the hypothesis "this is
a uniformly random permutation", runs on ``numpy.random.Generator.permutation``
and on our kinds, with the same code and the same threshold. numpy passing is
part of the test: if numpy failed, the battery (not our order) would be wrong.

Lags that are powers of two get their own pair tests: a Feistel network works
on the bits of the position, so that is where a weak one shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest

import epochplan as ep

Ids = npt.NDArray[np.int64]
N = 10**6
SEEDS = (0, 1, 2, 3)
ALPHA = 1e-4  # reject below this p-value (per test)


# ---------------------------------------------------------------- p-values


def gamma_q(a: float, x: float) -> float:
    """The regularized upper incomplete gamma function Q(a, x)."""
    if x <= 0:
        return 1.0
    log_prefix = -x + a * math.log(x) - math.lgamma(a)
    if x < a + 1:  # series for P(a, x)
        term = total = 1.0 / a
        k = a
        while abs(term) > abs(total) * 1e-15:
            k += 1
            term *= x / k
            total += term
        return max(0.0, 1.0 - total * math.exp(log_prefix))
    # Continued fraction for Q(a, x) (modified Lentz).
    b = x + 1 - a
    c = 1e300
    d = 1 / b
    h = d
    for i in range(1, 10_000):
        an = -i * (i - a)
        b += 2
        d = an * d + b
        d = d if abs(d) > 1e-300 else 1e-300
        c = b + an / c
        c = c if abs(c) > 1e-300 else 1e-300
        d = 1 / d
        h *= d * c
        if abs(d * c - 1) < 1e-15:
            break
    return math.exp(log_prefix) * h


def chi2_sf(statistic: float, df: int) -> float:
    return gamma_q(df / 2, statistic / 2)


def normal_two_sided(z: float) -> float:
    return math.erfc(abs(z) / math.sqrt(2))


def poisson_sf(k: int, mean: float) -> float:
    """P(X >= k) for X ~ Poisson(mean)."""
    below = sum(math.exp(-mean + i * math.log(mean) - math.lgamma(i + 1)) for i in range(k))
    return max(0.0, 1.0 - below)


def goodness_of_fit(observed: npt.NDArray[np.int64], probs: list[float]) -> float:
    expected = np.asarray(probs) * observed.sum()
    return chi2_sf(float(((observed - expected) ** 2 / expected).sum()), len(probs) - 1)


def independence(rows: Ids, cols: Ids, nrows: int, ncols: int) -> float:
    """Chi-square test of independence of two categorical variables."""
    table = np.bincount(rows * ncols + cols, minlength=nrows * ncols).reshape(nrows, ncols)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    statistic = float(((table - expected) ** 2 / expected).sum())
    return chi2_sf(statistic, (nrows - 1) * (ncols - 1))


def correlation_z(a: Ids, b: Ids) -> float:
    """Pearson correlation scaled to N(0, 1) under independence."""
    a = a - a.mean()
    b = b - b.mean()
    r = float(a @ b) / math.sqrt(float(a @ a) * float(b @ b))
    return r * math.sqrt(len(a) - 1)


# ---------------------------------------------------------------- the battery


def single_order_tests(p: Ids) -> dict[str, float]:
    """p-values of one order against "uniformly random permutation"."""
    n = len(p)
    pos = np.arange(n, dtype=np.int64)
    out = {"correlation(position, id)": normal_two_sided(correlation_z(pos, p))}
    out["grid(position, id) 32x32"] = independence(pos * 32 // n, p * 32 // n, 32, 32)
    for k in (2, 3, 10, 64, 1000):
        out[f"id mod {k} in 100 slices"] = independence(pos * 100 // n, p % k, 100, k)
    # Ascents: Eulerian numbers, mean (n - 1) / 2, variance (n + 1) / 12.
    ascents = int(np.count_nonzero(p[1:] > p[:-1]))
    out["ascents"] = normal_two_sided((ascents - (n - 1) / 2) / math.sqrt((n + 1) / 12))
    # Length of the ascending run at the start of disjoint blocks of 8:
    # P(length >= k) = 1 / k!, classes 1..5 and 6+.
    blocks = p[: n // 8 * 8].reshape(-1, 8)
    rising = np.cumprod(blocks[:, 1:] > blocks[:, :-1], axis=1).sum(axis=1) + 1
    observed = np.bincount(np.minimum(rising, 6), minlength=7)[1:]
    probs = [1 / math.factorial(k) - 1 / math.factorial(k + 1) for k in range(1, 6)]
    out["run lengths in blocks of 8"] = goodness_of_fit(observed, [*probs, 1 - sum(probs)])
    out["fixed points"] = poisson_sf(int(np.count_nonzero(p == pos)), 1.0)
    # Displacement (id - position) mod n: each of the n values is hit a
    # Poisson(1) number of times.
    hits = np.bincount((p - pos) % n, minlength=n)
    observed = np.bincount(np.minimum(hits, 5), minlength=6)
    probs = [math.exp(-1) / math.factorial(k) for k in range(5)]
    out["displacement counts"] = goodness_of_fit(observed, [*probs, 1 - sum(probs)])
    # Pairs (p[i], p[i + lag]) on disjoint pairs of positions.
    for lag in (1, 2, 1024, 4096):
        first = np.arange(n - lag)
        first = first[(first // lag) % 2 == 0]
        out[f"pairs at lag {lag}"] = independence(
            p[first] * 16 // n, p[first + lag] * 16 // n, 16, 16
        )
    return out


def pair_of_orders_tests(p: Ids, q: Ids, what: str) -> dict[str, float]:
    """p-values of "p and q are independent uniformly random permutations"."""
    n = len(p)
    agree = int(np.count_nonzero(p == q))  # fixed points of q^-1 . p
    return {
        f"{what}: correlation": normal_two_sided(correlation_z(p, q)),
        f"{what}: agreements": poisson_sf(agree, 1.0),
        f"{what}: grid 16x16": independence(p * 16 // n, q * 16 // n, 16, 16),
    }


def failures(pvalues: dict[str, float]) -> dict[str, float]:
    return {name: pv for name, pv in pvalues.items() if not pv > ALPHA}


Generator = Callable[[int, int, int], Ids]


def numpy_order(n: int, seed: int, epoch: int) -> Ids:
    return np.random.default_rng([seed, epoch]).permutation(n)


def cipher_order(n: int, seed: int, epoch: int) -> Ids:
    return np.asarray(ep.Permutation(n, seed=seed, epoch=epoch))


def uniform_order(n: int, seed: int, epoch: int) -> Ids:
    return ep.permutation(n, seed=seed, epoch=epoch, kind="uniform")


GENERATORS: dict[str, Generator] = {
    "numpy": numpy_order,
    "cipher": cipher_order,
    "uniform": uniform_order,
}


def battery_params() -> list[object]:
    return [
        pytest.param(name, seed, id=f"{name}-seed{seed}") for name in GENERATORS for seed in SEEDS
    ]


@pytest.mark.parametrize(("name", "seed"), battery_params())
def test_battery(name: str, seed: int) -> None:
    gen = GENERATORS[name]
    p = gen(N, seed, 0)
    pvalues = single_order_tests(p)
    pvalues |= pair_of_orders_tests(p, gen(N, seed, 1), "next epoch")
    pvalues |= pair_of_orders_tests(p, gen(N, seed + 1, 0), "next seed")
    assert not failures(pvalues), failures(pvalues)


@pytest.mark.parametrize("name", ["cipher", "uniform"])
def test_seed_and_epoch_do_not_commute(name: str) -> None:
    gen = GENERATORS[name]
    p, q = gen(N, 0, 1), gen(N, 1, 0)
    pvalues = pair_of_orders_tests(p, q, "(seed=0, epoch=1) vs (seed=1, epoch=0)")
    assert not failures(pvalues), failures(pvalues)
    big = 2**64 - 1
    pvalues = pair_of_orders_tests(gen(N, big, big), gen(N, big, big - 1), "largest keys")
    assert not failures(pvalues), failures(pvalues)


def test_battery_rejects_a_structured_order() -> None:
    """The battery has power: a lightly structured order fails it."""
    rng = np.random.default_rng(5)
    # Shuffle inside blocks of 1000 only: locally random, globally ordered.
    local = (np.arange(N) // 1000 * 1000 + rng.permutation(N) % 1000).astype(np.int64)
    assert "correlation(position, id)" in failures(single_order_tests(local))
    # An affine order a*i + b mod n: passes many tests, not the pairs.
    affine = (np.arange(N, dtype=np.int64) * 386_471 + 12_345) % N
    assert any(name.startswith("pairs") for name in failures(single_order_tests(affine)))
    # Two orders that share their last 90%.
    p = numpy_order(N, 0, 0)
    q = p.copy()
    q[: N // 10] = rng.permutation(q[: N // 10])
    assert failures(pair_of_orders_tests(p, q, "related"))


# ---------------------------------------------------------------- chunked

CHUNK, WINDOW = 16, 4  # windows of 64 samples


def numpy_chunked(n: int, seed: int, epoch: int) -> Ids:
    """A reference chunked order from numpy: chunks shuffled, then samples
    shuffled inside each window of WINDOW chunks."""
    rng = np.random.default_rng([seed, epoch])
    chunks = rng.permutation(n // CHUNK)
    ids = (chunks[:, None] * CHUNK + np.arange(CHUNK)).reshape(-1, CHUNK * WINDOW)
    return rng.permuted(ids, axis=1).reshape(-1)


def ours_chunked(n: int, seed: int, epoch: int) -> Ids:
    p = ep.Permutation(n, seed=seed, epoch=epoch, kind=ep.Chunked(CHUNK, WINDOW))
    return np.asarray(p)


def chunk_level(p: Ids) -> Ids:
    """The chunks in the order they first appear inside each window: a
    permutation of the chunks, itself uniformly random for a good order."""
    windows = (p // CHUNK).reshape(-1, CHUNK * WINDOW)
    first = np.argsort(windows, axis=1, kind="stable")[:, ::CHUNK]  # one per chunk
    order = np.argsort(first, axis=1)
    chunks = np.take_along_axis(windows, np.take_along_axis(first, order, axis=1), axis=1)
    return chunks.reshape(-1)


def window_tests(p: Ids) -> dict[str, float]:
    """Inside windows: the local order of each window's ids is uniform."""
    size = CHUNK * WINDOW
    windows = p.reshape(-1, size)
    local = np.argsort(np.argsort(windows, axis=1), axis=1)  # ranks 0..size-1
    count = len(windows)
    slot = np.broadcast_to(np.arange(size), local.shape)
    out = {
        "window: grid(slot, rank) 8x8": independence(
            (slot * 8 // size).ravel(), (local * 8 // size).ravel(), 8, 8
        )
    }
    ascents = int(np.count_nonzero(local[:, 1:] > local[:, :-1]))
    mean, var = count * (size - 1) / 2, count * (size + 1) / 12
    out["window: ascents"] = normal_two_sided((ascents - mean) / math.sqrt(var))
    fixed = int(np.count_nonzero(local == slot))
    out["window: fixed points"] = normal_two_sided((fixed - count) / math.sqrt(count))
    return out


@pytest.mark.parametrize("name", ["numpy", "chunked"])
@pytest.mark.parametrize("seed", [0, 1])
def test_chunked_battery(name: str, seed: int) -> None:
    gen = numpy_chunked if name == "numpy" else ours_chunked
    n = N - N % (CHUNK * WINDOW)  # whole windows (numpy's reference needs them)
    p = gen(n, seed, 0)
    assert np.array_equal(np.sort(p), np.arange(n))
    chunks = chunk_level(p)
    assert np.array_equal(np.sort(chunks), np.arange(n // CHUNK))
    pvalues = {f"chunks: {k}": v for k, v in single_order_tests(chunks).items()}
    pvalues |= pair_of_orders_tests(chunks, chunk_level(gen(n, seed, 1)), "chunks, next epoch")
    pvalues |= window_tests(p)
    assert not failures(pvalues), failures(pvalues)
