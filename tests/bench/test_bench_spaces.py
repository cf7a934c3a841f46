"""benches/bench_spaces.py at tiny sizes: it runs, and what it reports holds.

The timings are not checked (no timing assertions in the suite); what is:
every space yields a rank's share of the plain plan's length (torch's
padded share and Streaming's batches within one step), every row has a positive time and a ratio
to the plain plan of its N, and from ``--large-n`` on only the spaces built
without O(N) arrays run, with a line naming the skipped ones.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "bench_spaces.py"
SPACES = ["plain", "ranges", "mask", "indices", "split", "mixture"]


def test_every_space_is_timed_against_the_plain_plan_and_large_sizes_skip_arrays(
    tmp_path: Path,
) -> None:
    has_torch = importlib.util.find_spec("torch") is not None
    # Streaming's batching module imports torch.
    has_streaming = has_torch and importlib.util.find_spec("streaming") is not None
    spaces = SPACES + ["torch"] * has_torch + ["streaming"] * has_streaming
    out = tmp_path / "spaces.json"
    args = ["--sizes", "20000", "50001", "--repeats", "1", "--calls", "1"]
    args += ["--large-n", "50000", "--spaces", *spaces, "--json", str(out)]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(out.read_text())["rows"]
    small = {r["space"]: r for r in rows if r["n"] == 20000}
    large = {r["space"]: r for r in rows if r["n"] == 50001}
    assert sorted(small) == sorted(spaces)
    assert sorted(large) == ["mixture", "plain", "ranges", "split"]
    for by_space, n in ((small, 20000), (large, 50001)):
        plain = by_space["plain"]
        # 0.9 N samples, a rank's share of them (8 ranks).
        assert plain["selected"] == n - n // 10
        assert abs(plain["len"] - plain["selected"] / 8) <= 4096
        for space, r in by_space.items():
            assert r["seconds"] > 0, r
            assert r["selected"] == plain["selected"], r
            if space != "plain":
                assert r["ratio"] == r["seconds"] / plain["seconds"], r
            if space in ("torch", "streaming"):
                assert abs(r["len"] - plain["len"]) <= 4096, r
            else:
                assert r["len"] == plain["len"], r
    skipped = [line for line in proc.stdout.splitlines() if "skipped:" in line]
    assert len(skipped) == 1 and "5e+04" in skipped[0], proc.stdout
    assert all(s in skipped[0] for s in ("mask", "indices")), skipped
    assert "| 2e+04 | mask |" in proc.stdout
