"""benches/bench_tokens.py at tiny sizes: it runs, and what it reports holds.

The timings are not checked (no timing assertions in the suite); the
invariants of what both sides dealt are: epochplan's micro-batches never
above the token cap, the same count on every rank, the balance bound, and a
rank's whole epoch from a memory-mapped file covering that rank's samples.
verl's side runs when verl is installed (``pip install --no-deps
verl==0.9.1``; it is loaded by file path and needs torch) and is skipped
with the reason otherwise.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epochplan as ep

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "bench_tokens.py"
EPOCH_N, EPOCH_G, BIG_N, BIG_STEPS, COLD_STEPS = 10_000, 64, 50_000, 100, 20


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path, str]:
    where = tmp_path_factory.mktemp("bench_tokens")
    out = where / "report.json"
    args = ["--tiny", "--dists", "lognormal", "--steps", "2", "--dir", str(where)]
    args += ["--epoch-n", str(EPOCH_N), "--epoch-g", str(EPOCH_G), "--big-n", str(BIG_N)]
    args += ["--big-steps", str(BIG_STEPS), "--cold-steps", str(COLD_STEPS)]
    args += ["--keep", "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text()), where, proc.stdout


def test_epochplan_micro_batches_stay_under_the_cap_equal_and_balanced(
    report: tuple[dict[str, Any], Path, str],
) -> None:
    rows = [r for r in report[0]["dealing"] if r["impl"] == "epochplan"]
    # One distribution, G in {16, 64}, W in {2, 8, 32} (W > G included).
    assert len(rows) == 2 * 3
    for row in rows:
        assert 0 < row["largest_mb"] <= row["cap"], row
        assert row["mb_rank_gap"] == 0, row
        assert row["spread_over_longest"] <= 1, row
        assert row["max_over_mean"] >= 1 and row["waste"] >= 0, row
        assert row["per_rank_s"] > 0 and row["all_ranks_s"] >= row["per_rank_s"], row
    assert "| lognormal | 16 | 32 |" in report[2]


def test_one_ranks_epoch_from_a_memmap_covers_its_samples(
    report: tuple[dict[str, Any], Path, str],
) -> None:
    whole, part, cold = report[0]["epoch"]
    assert whole["N"] == EPOCH_N and whole["steps"] == whole["num_steps"] == -(-EPOCH_N // EPOCH_G)
    assert part["N"] == BIG_N and part["steps"] == BIG_STEPS < part["num_steps"]
    assert cold["N"] == BIG_N and cold["cold"] and cold["steps"] == COLD_STEPS
    for row in (whole, part, cold):
        assert 0 < row["largest_mb"] <= row["cap"], row
        assert row["peak"] > 0 and row["micro_batches"] >= row["steps"], row
        assert row["RssAnon"] > 0 and row["RssFile"] > 0, row
    lengths = np.memmap(report[1] / f"lengths-{EPOCH_N}.int32", dtype=np.int32, mode="r")
    plan = ep.EpochPlan(EPOCH_N, EPOCH_G, seed=0, tokens=ep.Tokens(lengths))
    assert whole["samples"] == len(plan.rank_indices(3, 8))


def test_verl_deals_the_same_steps_where_it_can(
    report: tuple[dict[str, Any], Path, str],
) -> None:
    if importlib.util.find_spec("verl") is None or importlib.util.find_spec("torch") is None:
        pytest.skip("verl (pip install --no-deps verl==0.9.1) and torch are needed")
    rows = [r for r in report[0]["dealing"] if r["impl"] == "verl"]
    assert len(rows) == 2 * 3
    for row in rows:
        if row["W"] > row["G"]:
            assert row["skipped"] == "verl needs W <= G"
            continue
        assert row["per_rank_s"] > 0 and row["largest_mb"] > 0 and row["max_over_mean"] >= 1
        assert row["mb_min"] >= 1
    assert "| lognormal | 64 | 8 |" in report[2] and "verl needs W <= G" in report[2]
