"""benches/bench_token_files.py at a tiny size: it runs, and both paths
serve rank 0 the same samples (the script asserts it); timings are not
checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benches" / "bench_token_files.py"


def test_both_paths_run_and_agree(tmp_path: Path) -> None:
    args = ["--sizes", "5000", "--global-batch-size", "64", "--world-size", "4"]
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split() for line in proc.stdout.splitlines() if line.split()[:1] == ["5000"]]
    assert [r[1:3] for r in rows] == [["by", "id"], ["plan", "file"]]
    assert int(rows[1][-2]) == 0 and int(rows[1][-1]) > 0  # no global lengths read
