"""Golden vectors: the frozen order format (DESIGN.md section 3).

Every entry pins, for one (kind, num_samples, seed, epoch), the first 32 hex
digits of the sha256 of the little-endian int64 bytes of the first
``min(num_samples, 4096)`` ids (the whole array for ``kind="uniform"``), and the
first 8 ids. The table is ``tests/golden/v1.txt``, read by this file and by
``rust/core/tests/golden.rs``.

THESE VECTORS ARE FROZEN (format_version 1). An order that changes any of them
is a breaking change: it needs a new, selectable format_version with its own
table, never an edit of this one. ``python tests/core/test_golden.py`` prints the
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
CHUNKED = ep.Chunked(64, 4)
SIZES = (0, 1, 2, 3, 10, 1000, 2**20 + 1, 10**9, 2**63 - 1)
SEEDS = (0, 1, 2**64 - 1)
EPOCHS = (0, 7)
KINDS = ("cipher", "uniform", "chunked", "identity")
UNIFORM_MAX = 2**20 + 1

# kind num_samples seed epoch sha256[:32]
#   first 4 ids
#   next 4 ids (fewer when num_samples < 8)
GOLDEN_V1 = (Path(__file__).parents[1] / "golden" / "v1.txt").read_text()

# The sha256 of each frozen table: regenerating a table from a changed build
# (``python tests/core/test_golden.py > tests/golden/v1.txt``) must not pass
# unnoticed. rust/core/tests/golden.rs pins v1.txt's too. The tables' headers
# name this file by its path of the time, before the tests had folders.
FROZEN = {
    "v1.txt": "f0a2a5052f76f9cec0f1c62d1ce9cd71ce32530f6947b1471e6447832afb9ec6",
    "plan_v1.txt": "02be783e421a777fbd37b60fafd3e5d4637aff6d72fc80a944ad8d9028f492f5",
}


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_tables_are_the_frozen_ones(name: str) -> None:
    data = (Path(__file__).parents[1] / "golden" / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == FROZEN[name], f"{name} was edited"


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
    order = CHUNKED if kind == "chunked" else kind
    p = ep.Permutation(n, seed=seed, epoch=epoch, kind=order)
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


# Plans: how steps are dealt to ranks, cut into micro-batches and filled is
# part of the frozen format too (a changed plan silently changes every plan
# file, sampler and resume). Per entry, two lines: "kind num_samples
# global_batch_size world_size micro_batch_size drop_last cursor seed epoch
# sha256[:32]" (sha256 of every rank's micro-batches, ids as little-endian
# int64 then weights as little-endian float64, of the steps in `plan_steps`),
# then the ids of rank 0's first micro-batch (at most 8).
GOLDEN_PLAN_V1 = (Path(__file__).parents[1] / "golden" / "plan_v1.txt").read_text()
TOP = 2**64 - 1
# kind N G W b drop_last cursor seed epoch: fillers (N < W, n_t < W * M),
# N % G != 0 with and without drop_last, resumed cursors, W = 1, G < W,
# every kind, and sizes up to 2**63 - 1 (a few steps of them).
PLAN_GRID = [
    ("cipher", 0, 4, 3, 2, False, 0, 0, 0),
    ("cipher", 1, 4, 3, 2, False, 0, 0, 0),
    ("cipher", 9, 9, 2, 4, False, 0, 0, 0),
    ("cipher", 23, 7, 3, 2, False, 0, 1, 0),
    ("cipher", 23, 7, 3, 2, True, 7, 1, 3),
    ("cipher", 23, 2, 5, 1, False, 4, 0, 0),
    ("cipher", 100, 16, 5, 3, False, 32, 7, 2),
    ("cipher", 1001, 64, 7, 5, True, 128, TOP, 1),
    ("cipher", 1000, 1000, 1, 1000, False, 0, 0, 0),
    ("identity", 50, 8, 3, 2, False, 0, 0, 0),
    ("uniform", 1000, 50, 4, 7, False, 100, 3, 5),
    ("chunked", 5000, 256, 6, 16, False, 0, 2, 1),
    ("cipher", 10**9, 4096, 7, 100, False, 0, 0, 0),
    ("chunked", 10**9, 4096, 8, 512, True, 4096 * 1000, 1, 2),
    ("cipher", 2**63 - 1, 4096, 7, 100, False, 0, TOP, 7),
]


def golden_plan(kind: str, n: int, g: int, seed: int, epoch: int, drop_last: bool, cursor: int):
    order = CHUNKED if kind == "chunked" else kind
    return ep.EpochPlan(
        n, g, seed=seed, epoch=epoch, kind=order, drop_last=drop_last, cursor=cursor
    )


def plan_steps(plan: ep.EpochPlan) -> list[int]:
    """Every step of a short plan; the first two, a middle and the last of a long one."""
    first, end = plan.start_step, plan.num_steps
    if end - first <= 64:
        return list(range(first, end))
    return sorted({first, first + 1, (first + end) // 2, end - 1})


def micro_batch_digest(plan: ep.EpochPlan, w: int, b: int) -> tuple[str, list[int]]:
    """The sha256[:32] of every rank's micro-batches of the steps
    ``plan_steps`` picks, and the ids of rank 0's first one (at most 8)."""
    h = hashlib.sha256()
    head: list[int] = []
    for step in plan_steps(plan):
        for rank in range(w):
            for ids, weights in plan.step_micro_batches(step, rank, w, b):
                h.update(ids.astype("<i8").tobytes())
                h.update(weights.astype("<f8").tobytes())
                if not head:
                    head = ids[:8].tolist()
    return h.hexdigest()[:32], head


def plan_digest(entry: tuple) -> tuple[str, list[int]]:
    kind, n, g, w, b, drop_last, cursor, seed, epoch = entry
    return micro_batch_digest(golden_plan(kind, n, g, seed, epoch, drop_last, cursor), w, b)


def render_plans() -> str:
    rows = []
    for entry in PLAN_GRID:
        h, head = plan_digest(entry)
        rows.append(" ".join(str(int(x) if isinstance(x, bool) else x) for x in entry) + f" {h}")
        rows.append("  " + (" ".join(map(str, head)) or "-"))
    return "\n".join(rows)


def plan_table() -> dict[tuple, tuple[str, list[int]]]:
    lines = [line.split() for line in GOLDEN_PLAN_V1.strip().splitlines() if line[0] != "#"]
    out = {}
    for i in range(0, len(lines), 2):
        kind, *numbers, h = lines[i]
        n, g, w, b, drop_last, cursor, seed, epoch = map(int, numbers)
        key = (kind, n, g, w, b, bool(drop_last), cursor, seed, epoch)
        out[key] = (h, [int(x) for x in lines[i + 1] if x != "-"])
    return out


def test_plan_table_covers_the_grid() -> None:
    assert sorted(plan_table(), key=str) == sorted(PLAN_GRID, key=str)


@pytest.mark.parametrize("entry", PLAN_GRID, ids=lambda e: "-".join(map(str, e)))
def test_golden_plan(entry: tuple) -> None:
    assert plan_digest(entry) == plan_table()[entry]


if __name__ == "__main__":
    import sys

    print(render_plans() if sys.argv[1:] == ["plans"] else render())
