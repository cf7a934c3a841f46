"""Golden vectors: the frozen order format (DESIGN.md section 3).

Every entry pins, for one (kind, num_samples, seed, epoch), the first 32 hex
digits of the sha256 of the little-endian int64 bytes of the first
``min(num_samples, 4096)`` ids (the whole array for ``kind="uniform"``), and the
first 8 ids. The table is ``tests/golden/v1.txt``, read by this file and by
``rust/core/tests/golden.rs``.

THESE VECTORS ARE FROZEN (format_version 1). An order that changes any of them
is a breaking change: it needs a new, selectable format_version with its own
table, never an edit of this one. ``python tests/test_golden.py`` prints the
table the installed build produces.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep

FORMAT_VERSION = 1
PREFIX = 4096
CHUNKED = {"chunk_size": 64, "preload_nchunks": 4}
SIZES = (0, 1, 2, 3, 10, 1000, 2**20 + 1, 10**9, 2**63 - 1)
SEEDS = (0, 1, 2**64 - 1)
EPOCHS = (0, 7)
KINDS = ("cipher", "uniform", "chunked", "identity")
UNIFORM_MAX = 2**20 + 1

# kind num_samples seed epoch sha256[:32]
#   first 4 ids
#   next 4 ids (fewer when num_samples < 8)
GOLDEN_V1 = (Path(__file__).parent / "golden" / "v1.txt").read_text()


def grid() -> list[tuple[str, int, int, int]]:
    return [
        (kind, n, seed, epoch)
        for kind in KINDS
        for n in SIZES
        for seed in SEEDS
        for epoch in EPOCHS
        if kind != "uniform" or n <= UNIFORM_MAX
    ]


def ids_of(kind: str, n: int, seed: int, epoch: int) -> np.ndarray:
    if kind == "uniform":
        return ep.permutation(n, seed=seed, epoch=epoch, kind="uniform")
    extra = CHUNKED if kind == "chunked" else {}
    p = ep.Permutation(n, seed=seed, epoch=epoch, kind=kind, **extra)
    return p[: min(n, PREFIX)]


def digest(ids: np.ndarray) -> str:
    return hashlib.sha256(ids.astype("<i8").tobytes()).hexdigest()[:32]


def parse(table: str) -> dict[tuple[str, int, int, int], tuple[str, list[int]]]:
    lines = [line.split() for line in table.strip().splitlines() if not line.startswith("#")]
    out = {}
    for i in range(0, len(lines), 3):
        kind, n, seed, epoch, h = lines[i]
        first = [int(x) for x in lines[i + 1] + lines[i + 2] if x != "-"]
        out[(kind, int(n), int(seed), int(epoch))] = (h, first)
    return out


def render() -> str:
    rows = []
    for kind, n, seed, epoch in grid():
        ids = ids_of(kind, n, seed, epoch)
        first = [str(x) for x in ids[:8]]
        rows.append(f"{kind} {n} {seed} {epoch} {digest(ids)}")
        rows.append("  " + (" ".join(first[:4]) or "-"))
        rows.append("  " + (" ".join(first[4:]) or "-"))
    return "\n".join(rows)


@functools.cache
def table() -> dict[tuple[str, int, int, int], tuple[str, list[int]]]:
    return parse(GOLDEN_V1)


def test_format_version_is_1() -> None:
    assert ep.FORMAT_VERSION == FORMAT_VERSION


def test_table_covers_the_grid() -> None:
    assert sorted(table()) == sorted(grid())


@pytest.mark.parametrize("key", grid(), ids=lambda k: "-".join(map(str, k)))
def test_golden_vector(key: tuple[str, int, int, int]) -> None:
    ids = ids_of(*key)
    expected_hash, expected_first = table()[key]
    assert ids.dtype == np.int64
    assert ids[:8].tolist() == expected_first
    assert digest(ids) == expected_hash


def test_identity_ignores_seed_and_epoch() -> None:
    for n in SIZES:
        entries = [table()[("identity", n, s, e)] for s in SEEDS for e in EPOCHS]
        assert all(entry == entries[0] for entry in entries)
        assert entries[0][1] == list(range(min(n, 8)))


if __name__ == "__main__":
    print(render())
