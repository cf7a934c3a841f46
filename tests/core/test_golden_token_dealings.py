"""Golden vectors of token plans' dealings (DESIGN.md section 8): each step
dealt balanced by cost, cut into micro-batches under the caps by either
packing ("sorted" runs or "first_fit" decreasing), filled and weighted.

Two lines a plan: "packing cost N G W b max_tokens cursor seed epoch
sha256[:32] digest[:16]" (the sha256 of every rank's micro-batches of the
steps ``plan_steps`` picks, ids as little-endian int64 then weights as
little-endian float64; the spec's digest; b or max_tokens 0 for None; cost
"tokens" or "quadratic", (1.0, 0.001)), then the ids of rank 0's first
micro-batch. The lengths are ``lengths(N)``, plain integer arithmetic.

THESE VECTORS ARE FROZEN: a change to any line is a breaking change that
needs a new table, never an edit of this one. ``python -m
tests.core.test_golden_token_dealings`` (from the repository's root) prints
the table the installed build produces.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from tests.core.test_golden import plan_steps
from tests.core.test_golden_spaces import entry_rows, read_table

TABLE = Path(__file__).parents[1] / "golden" / "token_dealings_v1.txt"
# The table's sha256: regenerating it from a changed build must not pass
# unnoticed.
FROZEN = "3dc872fd8a50770fcf1717fd78c9ce3898e7fe8303d9d7c496b06cdb38e83e8c"

COSTS = {"tokens": "tokens", "quadratic": (1.0, 0.001)}

# packing cost N G W b max_tokens cursor seed epoch: both packings under a
# token cap, a sample cap and both; fillers (W > samples a step), a short
# last step, a resumed cursor, W = 1 and quadratic costs.
GRID = [
    (packing, *entry)
    for packing in ("sorted", "first_fit")
    for entry in [
        ("tokens", 1000, 64, 4, 0, 4096, 0, 0, 0),
        ("tokens", 1000, 64, 3, 6, 8192, 128, 1, 2),
        ("tokens", 1000, 100, 1, 0, 5000, 0, 2, 1),
        ("tokens", 37, 16, 7, 0, 3100, 0, 3, 0),
        ("tokens", 500, 50, 5, 4, 0, 0, 4, 0),
        ("quadratic", 2000, 256, 8, 0, 16384, 256, 5, 3),
    ]
]


def lengths(n: int) -> np.ndarray:
    """1 to 3,000 tokens a sample, with runs of equal lengths."""
    i = np.arange(n, dtype=np.uint64)
    mixed = (i * np.uint64(2654435761)) % np.uint64(2**32)
    return ((mixed >> np.uint64(7)) % np.uint64(3000) + np.uint64(1)).astype(np.int64)


def digest(entry: tuple) -> tuple[str, str, list[int]]:
    packing, cost, n, g, w, b, max_tokens, cursor, seed, epoch = entry
    tokens = ep.Tokens(lengths(n), cost=COSTS[cost], packing=packing)
    spec = ep.PlanSpec(n, g, seed=seed, tokens=tokens)
    plan = spec.plan(epoch).at_step(cursor // g)
    caps = {"micro_batch_size": b or None, "max_tokens": max_tokens or None}
    h = hashlib.sha256()
    head: list[int] = []
    for step in plan_steps(plan):
        for rank in range(w):
            for ids, weights in plan.step_micro_batches(step, rank, w, **caps):
                h.update(ids.astype("<i8").tobytes())
                h.update(weights.astype("<f8").tobytes())
                if not head:
                    head = ids[:8].tolist()
    return h.hexdigest()[:32], spec.digest()[:16], head


def render() -> str:
    rows = [
        "# Golden vectors of token plans' dealings, both packings. FROZEN: a",
        "# plan that changes any line needs a new table, never an edit of this",
        "# one. Read by tests/core/test_golden_token_dealings.py.",
    ]
    return "\n".join(rows + entry_rows(GRID, digest)) + "\n"


def test_table_is_the_frozen_one() -> None:
    text = TABLE.read_bytes()
    assert hashlib.sha256(text).hexdigest() == FROZEN, "token_dealings_v1.txt was edited"


def test_table_covers_the_grid() -> None:
    assert sorted(read_table(TABLE), key=str) == sorted(GRID, key=str)


@pytest.mark.parametrize("entry", GRID, ids=lambda e: "-".join(map(str, e)))
def test_golden_token_dealing(entry: tuple) -> None:
    assert digest(entry) == read_table(TABLE)[entry]


def test_the_packings_differ_only_in_their_cuts() -> None:
    """The same steps, shares and weights: each rank's real samples and
    their weights are the same under either packing."""
    for entry in GRID[: len(GRID) // 2]:
        _, cost, n, g, w, b, max_tokens, _, seed, epoch = entry
        caps = {"micro_batch_size": b or None, "max_tokens": max_tokens or None}
        plans = [
            ep.PlanSpec(
                n, g, seed=seed, tokens=ep.Tokens(lengths(n), cost=COSTS[cost], packing=p)
            ).plan(epoch)
            for p in ("sorted", "first_fit")
        ]
        for step in plan_steps(plans[0]):
            for rank in range(w):
                real = [
                    sorted(
                        (int(i), float(x))
                        for ids, weights in p.step_micro_batches(step, rank, w, **caps)
                        for i, x in zip(ids, weights, strict=True)
                        if x > 0
                    )
                    for p in plans
                ]
                assert real[0] == real[1]


if __name__ == "__main__":
    print(render(), end="")
