"""``epochplan bench`` on the user's own job: their world size, global
batch, kind, lengths or space file, ours beside torch's where it computes the
same thing, one rank's share and the whole job's."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np


def bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochplan.cli", "bench", "--repeats", "1", "-q", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )


def rows(stdout: str) -> list[list[str]]:
    """The job's rows as (operation, implementation, N, speed-up): the table
    writes N in the operation's cell and the peak memory in the
    implementation's."""
    table = [[c.strip() for c in line.split("|")[1:-1]] for line in stdout.splitlines()
             if line.startswith("| your job")]  # fmt: skip
    return [
        [op, re.sub(r" \(peak [\d,]+ MB\)$", "", impl), op.rsplit("N=", 1)[1], speed_up]
        for op, impl, _median, _range, speed_up in table
    ]


def test_a_world_size_and_batch_of_ones_own_with_torch_beside(tmp_path: Path) -> None:
    res = bench("--world-size", "16", "--global-batch-size", "1024", "--sizes", "2e4")
    assert res.returncode == 0, res.stderr
    table = rows(res.stdout)
    names = {r[1] for r in table}
    assert names == {
        "**epochplan (one rank)**",
        "**epochplan (all 16 ranks)**",
        "torch DistributedSampler (one rank)",
        "torch DistributedSampler (all 16 ranks)",
    }
    assert all("W=16, G=1024" in r[0] and r[2] == "20,000" for r in table)
    assert "vs torch" in " ".join(r[3] for r in table)
    assert "for W=16, G=1024, kind=cipher" in res.stdout


def test_a_lengths_file_makes_a_token_plan_of_its_length(tmp_path: Path) -> None:
    lengths = tmp_path / "lengths.npy"
    np.save(lengths, np.random.default_rng(0).integers(1, 4000, 30_000).astype(np.int32))
    res = bench("--world-size", "4", "--lengths", str(lengths), "--max-tokens", "8192")
    assert res.returncode == 0, res.stderr
    table = rows(res.stdout)
    assert len(table) == 2 and all(r[2] == "30,000" and "max_tokens=8192" in r[0] for r in table)


def test_a_space_file_sets_n_and_bad_flags_are_usage_errors(tmp_path: Path) -> None:
    space = tmp_path / "space.json"
    space.write_text(json.dumps({"ranges": [[0, 7000], [9000, 10000]], "num_samples": 20000}))
    res = bench("--space", str(space), "--world-size", "3")
    assert res.returncode == 0, res.stderr
    assert {r[2] for r in rows(res.stdout)} == {"8,000"}
    for args, word in (
        (["--max-tokens", "10"], "--max-tokens needs --lengths"),
        (["--world-size", "2", "--lengths", str(space)], "--lengths and --max-tokens go"),
        (["--lengths", str(space), "--max-tokens", "9"], "--lengths"),
    ):
        res = bench(*args)
        assert res.returncode == 2 and word in res.stderr, res.stderr
