"""pytest-benchmark suite of the permutation core, with numpy and torch as
peers in the same run. Run with::

    python -m pytest benches/bench_permutation.py --benchmark-only

Sizes are moderate (10**7) so a run takes about a minute; the full-size
side-by-side comparison is ``benches/compare_permutation.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import epochplan as ep

N = 10**7


def run(benchmark: Any, fn: Callable[[], object]) -> object:
    return benchmark.pedantic(fn, rounds=5, iterations=1, warmup_rounds=1)


@pytest.fixture
def one_thread() -> Iterator[None]:
    ep.set_num_threads(1)
    yield
    ep.set_num_threads(0)


@pytest.mark.benchmark(group="uniform shuffle 1e7")
def test_uniform_epochplan(benchmark: Any) -> None:
    out = run(benchmark, lambda: ep.permutation(N, kind="uniform"))
    assert len(out) == N  # type: ignore[arg-type]


@pytest.mark.benchmark(group="uniform shuffle 1e7")
def test_uniform_numpy(benchmark: Any) -> None:
    run(benchmark, lambda: np.random.default_rng(0).permutation(N))


@pytest.mark.benchmark(group="uniform shuffle 1e7")
def test_uniform_torch(benchmark: Any) -> None:
    torch = pytest.importorskip("torch")
    run(benchmark, lambda: torch.randperm(N))


@pytest.mark.benchmark(group="cipher 1e7")
def test_cipher_all_threads(benchmark: Any) -> None:
    p = ep.Permutation(N)
    run(benchmark, lambda: p[:])


@pytest.mark.benchmark(group="cipher 1e7")
@pytest.mark.usefixtures("one_thread")
def test_cipher_one_thread(benchmark: Any) -> None:
    p = ep.Permutation(N)
    run(benchmark, lambda: p[:])


@pytest.mark.benchmark(group="cipher 1e7")
def test_chunked(benchmark: Any) -> None:
    p = ep.Permutation(N, kind=ep.Chunked(64, preload_nchunks=4))
    run(benchmark, lambda: p[:])


@pytest.mark.benchmark(group="rank share of 1e9")
def test_share_of_1e9(benchmark: Any) -> None:
    p = ep.Permutation(10**9)
    out = run(benchmark, lambda: p[3::80])  # 12.5M ids, 1 rank of 80
    assert len(out) == 12_500_000  # type: ignore[arg-type]


@pytest.mark.benchmark(group="random access")
def test_take_random_positions(benchmark: Any) -> None:
    p = ep.Permutation(2**63 - 1)
    positions = np.random.default_rng(0).integers(0, 2**63 - 1, size=10**6)
    run(benchmark, lambda: p.take(positions))


@pytest.mark.benchmark(group="random access")
def test_scalar_index(benchmark: Any) -> None:
    p = ep.Permutation(2**63 - 1)
    run(benchmark, lambda: [p[i] for i in range(0, 10**4 * 7919, 7919)])
