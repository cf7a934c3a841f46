"""benches/bench_token_plans.py at a tiny size: both plans are written and
verified in their own processes and reported side by side; timings are not
checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "bench_token_plans.py"


def test_plain_and_token_plans_run_side_by_side(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--sizes", "20000", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["20000"]]
    assert [r[1] for r in rows] == ["plain", "token"]
    assert rows[0][-2:] == ["1.00x", "1.00x"]
    assert all(float(r[5]) > 0 for r in rows)  # a peak RSS was read for each
    assert list(tmp_path.iterdir()) == []  # every output deleted
