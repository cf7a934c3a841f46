"""benches/bench_floor.py at a small N: it runs, and its table holds.

No time is checked (no timing assertions in the suite); what is: the floor
row and every row asked for are timed in as many fresh processes as asked,
each row has its multiple of the floor, a row with a peer has the peer's
ratio, and a missing peer is named rather than failing the run.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "bench_floor.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=240
    )


def test_rows_are_timed_against_the_floor_and_their_peers() -> None:
    proc = _run("--n", "1000000", "--processes", "2", "--rows", "Permutation[:] 1,py1s/64")
    assert proc.returncode == 0, proc.stderr
    assert "2 processes a row" in proc.stdout
    rows = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0] not in ("row", "---"):
            rows[cells[0]] = cells
    streaming = importlib.util.find_spec("streaming") is not None
    want = {"floor", "epochplan.Permutation[:] 1 thread", "py1s/64 epochplan"}
    if streaming:
        want.add("py1s/64 streaming")
    assert set(rows) == want
    for name, (_, median, spread, floor, ratio) in rows.items():
        assert re.fullmatch(r"\d+\.\d{3} s", median), name
        assert re.fullmatch(r"\d+\.\d{3} to \d+\.\d{3} s", spread), name
        assert float(floor) > 0, name
        if name == "py1s/64 epochplan" and streaming:
            assert re.fullmatch(r"\d+\.\dx \(\d+\.\d to \d+\.\d\)", ratio), ratio
        elif name != "py1s/64 epochplan":
            assert ratio == "", name
    assert rows["floor"][3] == "1.00"
    if not streaming:
        assert "| py1s/64 streaming | not installed |" in proc.stdout


def test_a_size_streaming_cannot_shard_is_refused() -> None:
    proc = _run("--n", "12345", "--processes", "1")
    assert proc.returncode != 0
    assert "--n must be a positive multiple of 10,000" in proc.stderr
