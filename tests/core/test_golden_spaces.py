"""Golden vectors of plans over index spaces (DESIGN.md section 7).

Per entry, two lines: "space kind G W b cursor seed epoch sha256[:32]
digest[:16]" (sha256 of every rank's micro-batches of the steps
``test_golden.plan_steps`` picks, ids as little-endian int64 then weights as
little-endian float64; ``digest`` the space's digest as a state records it),
then the ids of rank 0's first micro-batch (at most 8; "-": none). The
spaces are named in ``SPACES``.

THESE VECTORS ARE FROZEN, like ``v1.txt`` and ``plan_v1.txt``: a plan over a
space that changes any line is a breaking change that needs a new table,
never an edit of this one. ``python -m tests.core.test_golden_spaces`` (from the
repository's root) prints the table the installed build produces.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from tests.core.test_golden import micro_batch_digest

TABLE = Path(__file__).parents[1] / "golden" / "spaces_v1.txt"
# The table's sha256: regenerating it from a changed build must not pass
# unnoticed.
FROZEN = "69a27079a8f38200cb9d0dcb0972fdcc5d1ca514fcf7b83b535c6fbd7b0d0b69"

# Every form of selection, random-split parts up to 10**12, and mixtures of
# sizes and of selections (quotas below, at and above the sources' sizes).
SPACES: dict[str, Callable[[], ep.Selection | ep.Mixture]] = {
    "ranges": lambda: ep.Selection.from_ranges([(3, 40), (57, 58), (70, 100)], 100),
    "ranges-2**40": lambda: ep.Selection.from_ranges([(0, 10**6), (2**40 - 10**6, 2**40)], 2**40),
    "mask": lambda: ep.Selection.from_mask(np.arange(1000) * 7919 % 13 < 5),
    "indices": lambda: ep.Selection.from_indices(np.arange(999, -1, -3, dtype=np.int64), 1000),
    "split-0": lambda: ep.random_split(1000, [0.8, 0.2], seed=5)[0],
    "split-1": lambda: ep.random_split(1000, [0.8, 0.2], seed=5)[1],
    "split-10**12": lambda: ep.random_split(10**12, [0.9, 0.1], seed=2**64 - 1)[1],
    "mix-sizes": lambda: ep.Mixture([100, 40, 7], quotas=[50, 40, 30], seed=3),
    "mix-weights": lambda: ep.Mixture(
        [10**9, 10**6], weights=[0.7, 0.3], num_samples=10**7, seed=1
    ),
    "mix-classes": lambda: ep.Mixture(
        [ep.Selection.from_mask(np.arange(500) % 4 == k) for k in range(4)],
        quotas=[100, 100, 100, 100],
        seed=9,
    ),
}

# space kind G W b cursor seed epoch
GRID = [
    ("ranges", "cipher", 8, 3, 2, 0, 0, 0),
    ("ranges", "identity", 16, 5, 4, 16, 1, 0),
    ("ranges", "uniform", 10, 4, 3, 0, 2, 1),
    ("ranges", "chunked", 12, 3, 2, 0, 1, 2),
    ("ranges-2**40", "cipher", 4096, 7, 100, 0, 3, 4),
    ("mask", "cipher", 32, 4, 5, 0, 7, 1),
    ("mask", "chunked", 32, 3, 4, 64, 0, 0),
    ("indices", "cipher", 25, 6, 2, 0, 2**64 - 1, 3),
    ("split-0", "cipher", 64, 8, 8, 128, 1, 1),
    ("split-1", "uniform", 30, 4, 5, 0, 0, 2),
    ("split-10**12", "cipher", 4096, 16, 64, 0, 4, 0),
    ("mix-sizes", "identity", 16, 3, 4, 0, 1, 0),
    ("mix-sizes", "identity", 16, 4, 2, 32, 1, 5),
    ("mix-weights", "identity", 4096, 8, 128, 0, 2, 1),
    ("mix-classes", "identity", 64, 8, 4, 0, 3, 2),
]
CHUNKED = ep.Chunked(4, 3)


@functools.cache
def space(name: str) -> ep.Selection | ep.Mixture:
    return SPACES[name]()


def entry_plan(entry: tuple) -> ep.EpochPlan:
    name, kind, g, _w, _b, cursor, seed, epoch = entry
    order = CHUNKED if kind == "chunked" else kind
    return ep.EpochPlan(space(name), g, seed=seed, epoch=epoch, kind=order, cursor=cursor)


def digest(entry: tuple) -> tuple[str, str, list[int]]:
    _name, _kind, _g, w, b, *_ = entry
    plan = entry_plan(entry)
    h, head = micro_batch_digest(plan, w, b)
    space_digest = plan.state_dict()["space"]["digest"].removeprefix("blake3:")[:16]
    return h, space_digest, head


def render() -> str:
    # The frozen header names this file by its path of the time, before the
    # tests had folders.
    rows = [
        "# Golden vectors of plans over index spaces. FROZEN: a plan that changes",
        "# any line needs a new table, never an edit of this one. Read by",
        "# tests/test_golden_spaces.py, which names the spaces.",
        *("# " + line for line in __doc__.splitlines()[2:8]),
    ]
    return "\n".join(rows + entry_rows(GRID, digest)) + "\n"


def entry_rows(grid: list[tuple], digest: Callable[[tuple], tuple]) -> list[str]:
    """The two lines of each entry of ``grid``."""
    rows = []
    for entry in grid:
        h, d, head = digest(entry)
        rows.append(" ".join(map(str, entry)) + f" {h} {d}")
        rows.append("  " + (" ".join(map(str, head)) or "-"))
    return rows


def table() -> dict[tuple, tuple[str, str, list[int]]]:
    return read_table(TABLE)


def read_table(path: Path) -> dict[tuple, tuple[str, str, list[int]]]:
    """A table of these lines: each entry's digests and ids."""
    lines = [line.split() for line in path.read_text().splitlines() if not line.startswith("#")]
    out = {}
    for i in range(0, len(lines), 2):
        name, kind, *numbers, h, d = lines[i]
        key = (name, kind, *map(int, numbers))
        out[key] = (h, d, [int(x) for x in lines[i + 1] if x != "-"])
    return out


def test_table_is_the_frozen_one() -> None:
    assert hashlib.sha256(TABLE.read_bytes()).hexdigest() == FROZEN, "spaces_v1.txt was edited"


def test_table_covers_the_grid() -> None:
    assert sorted(table(), key=str) == sorted(GRID, key=str)


@pytest.mark.parametrize("entry", GRID, ids=lambda e: "-".join(map(str, e)))
def test_golden_space_plan(entry: tuple) -> None:
    assert digest(entry) == table()[entry]


if __name__ == "__main__":
    print(render(), end="")
