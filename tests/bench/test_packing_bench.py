"""benches/bench_packing.py runs (its schedule and steps parts, at the tiny
sizes): a phased Mixture loses and repeats no sample over three phases,
where the simulation of Megatron's rebuild on each weight change loses and
repeats some; the blending rule it simulates gives exact shares; first fit
stays under the bound of equal steps and fills more with larger steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def run_part(part: str, tmp_path: Path) -> Any:
    """The report of one part of the benchmark at the tiny sizes."""
    out = tmp_path / "r.json"
    bench = ROOT / "benches" / "bench_packing.py"
    cmd = [sys.executable, str(bench), "--tiny", "--part", part, "--json", str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return json.loads(out.read_text())[part]


def test_the_schedule_part_runs_and_compares(tmp_path: Path) -> None:
    result = run_part("schedule", tmp_path)
    assert result["epochplan"] == {"lost": 0, "repeated": 0}
    assert result["megatron_rebuild"]["lost"] > 0
    assert result["megatron_rebuild"]["repeated"] > 0
    # 2 epochs of each phase: 1:1, 2:1, 1:3 of the epoch's length.
    n = result["epoch_len"]
    assert sum(result["shown"]) == 6 * n


def test_the_simulated_blend_gives_megatrons_shares() -> None:
    sys.path.insert(0, str(ROOT / "benches"))
    from bench_packing import megatron_blend_counts

    assert megatron_blend_counts([2, 1], 9) == [6, 3]
    assert megatron_blend_counts([1, 3], 10) in ([3, 7], [2, 8])
    assert sum(megatron_blend_counts([0.2, 0.3, 0.5], 101)) == 101


def test_the_steps_part_fills_more_with_larger_steps(tmp_path: Path) -> None:
    rows = run_part("steps", tmp_path)
    assert [r["global_batch_size"] for r in rows] == [1024, 4096]
    for r in rows:
        assert r["dropped"] == r["repeated"] == r["over_cap"] == 0 and r["equal_counts"]
        assert 0 < r["efficiency"] <= r["step_bound"] <= 1
    assert rows[1]["step_bound"] > rows[0]["step_bound"]
    assert rows[1]["efficiency"] > rows[0]["efficiency"]
