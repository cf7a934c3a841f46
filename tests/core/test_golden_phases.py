"""Golden vectors of plans over mixtures whose phases start inside an epoch
(DESIGN.md section 11): an epoch cut into segments, each its own interleave
of its phase's quotas apportioned to it, the sources' passes running on.

The lines are those of ``test_golden_spaces`` (two a plan: "space kind G W
b cursor seed epoch sha256[:32] digest[:16]", then the ids of rank 0's
first micro-batch), over the mixtures named in ``SPACES``.

THESE VECTORS ARE FROZEN, like ``spaces_v1.txt``: a change to any line is a
breaking change that needs a new table, never an edit of this one.
``python -m tests.core.test_golden_phases`` (from the repository's root)
prints the table the installed build produces.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable
from pathlib import Path

import pytest

import epochplan as ep
from tests.core.test_golden import micro_batch_digest
from tests.core.test_golden_spaces import entry_rows, read_table

TABLE = Path(__file__).parents[1] / "golden" / "phases_v1.txt"
# The table's sha256: regenerating it from a changed build must not pass
# unnoticed.
FROZEN = "203f5c27831a2b7f778e542abd80c04b6c4e83f624dba40b2e2b6b72860785b6"

G = 4096
SPACES: dict[str, Callable[[], ep.Mixture]] = {
    # Phases inside epochs 0 and 3 (after 3 and 6 steps of 16), one at epoch 2.
    "inside": lambda: ep.Mixture(
        [300, 200, 50],
        quotas=[60, 40, 20],
        seed=4,
        phases=[((0, 48), [20, 40, 60]), (2, [40, 40, 40]), ((3, 96), [120, 0, 0])],
    ),
    # 1:1, then 9:1 from step 2 of epoch 1.
    "weights": lambda: ep.Mixture(
        [10**6, 10**5], weights=[1, 1], num_samples=5 * G, seed=2, phases=[((1, 2 * G), [9, 1])]
    ),
}

# space kind G W b cursor seed epoch
GRID = [
    ("inside", "identity", 16, 3, 4, 0, 1, 0),
    ("inside", "identity", 16, 4, 2, 32, 1, 3),
    ("inside", "identity", 24, 5, 3, 0, 2, 2),
    ("inside", "identity", 16, 2, 8, 64, 0, 1),
    ("weights", "identity", G, 8, 128, 0, 2, 1),
    ("weights", "identity", G, 7, 100, G, 2, 3),
]


@functools.cache
def space(name: str) -> ep.Mixture:
    return SPACES[name]()


def digest(entry: tuple) -> tuple[str, str, list[int]]:
    name, kind, g, w, b, cursor, seed, epoch = entry
    plan = ep.EpochPlan(space(name), g, seed=seed, epoch=epoch, kind=kind, cursor=cursor)
    h, head = micro_batch_digest(plan, w, b)
    space_digest = plan.state_dict()["space"]["digest"].removeprefix("blake3:")[:16]
    return h, space_digest, head


def render() -> str:
    rows = [
        "# Golden vectors of plans over mixtures whose phases start inside an",
        "# epoch. FROZEN: a plan that changes any line needs a new table, never",
        "# an edit of this one. Read by tests/core/test_golden_phases.py.",
    ]
    return "\n".join(rows + entry_rows(GRID, digest)) + "\n"


def test_table_is_the_frozen_one() -> None:
    assert hashlib.sha256(TABLE.read_bytes()).hexdigest() == FROZEN, "phases_v1.txt was edited"


def test_table_covers_the_grid() -> None:
    assert sorted(read_table(TABLE), key=str) == sorted(GRID, key=str)


@pytest.mark.parametrize("entry", GRID, ids=lambda e: "-".join(map(str, e)))
def test_golden_phased_plan(entry: tuple) -> None:
    assert digest(entry) == read_table(TABLE)[entry]


if __name__ == "__main__":
    print(render(), end="")
