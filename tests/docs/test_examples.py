"""The examples in examples/ run as a user runs them, and their checks hold.

Each example checks its own claim (exact coverage, row groups read once, the
same global steps on 8 and 7 ranks, ...), prints it and exits 1 when it fails;
these tests run them as subprocesses and assert on both.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def run(cmd: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Runs an example in `tmp_path` (its working directory and TMPDIR): exit code, stdout."""
    full_env = {**os.environ, "TMPDIR": str(tmp_path), **(env or {})}
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=full_env,
        timeout=300,
    )
    if proc.returncode not in (0, 1) or "Traceback" in proc.stderr:
        pytest.fail(f"{cmd} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}")
    return proc.returncode, proc.stdout


def run_python(example: str, *args: str, tmp_path: Path) -> tuple[int, str]:
    return run([sys.executable, str(EXAMPLES / example), *args], tmp_path)


def leftovers(tmp_path: Path) -> list[Path]:
    """What an example left in its TMPDIR (each promises to remove its temporary files)."""
    return sorted(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("stop_after", "resume_step", "replayed"),
    [
        (8, 4, 0),  # saved at a step boundary: resumes with the next step
        (9, 4, 9),  # saved in the middle of step 4: step 4 is replayed whole
    ],
)
def test_stateful_dataloader_resumes_on_fewer_ranks_with_each_sample_once(
    tmp_path: Path, stop_after: int, resume_step: int, replayed: int
) -> None:
    pytest.importorskip("torchdata.stateful_dataloader")
    code, out = run_python(
        "stateful_dataloader.py", "--stop-after", str(stop_after), tmp_path=tmp_path
    )
    assert code == 0, out
    assert (
        f"saved: 3 ranks, {stop_after} micro-batches each, 4 steps done, {replayed} samples" in out
    )
    assert re.search(rf"resumed: 2 ranks at step {resume_step}, 3 steps, 8 micro-batches each", out)
    assert "epoch 0: 7 steps, each step once: True, 103 of 103 samples, each once: True" in out
    assert leftovers(tmp_path) == []


def test_stateful_dataloader_resumes_on_more_ranks_without_workers(tmp_path: Path) -> None:
    pytest.importorskip("torchdata.stateful_dataloader")
    args = ["--world-size", "2", "--resume-world-size", "5", "--stop-after", "7"]
    args += ["--num-samples", "250", "--global-batch-size", "24", "--num-workers", "0"]
    code, out = run_python("stateful_dataloader.py", *args, tmp_path=tmp_path)
    assert code == 0, out
    assert "epoch 0: 11 steps, each step once: True, 250 of 250 samples, each once: True" in out


def test_stateful_dataloader_check_fails_with_a_larger_snapshot_interval(tmp_path: Path) -> None:
    # The README's warning, and proof that the example's check can fail: with
    # snapshot_every_n_steps=2 the loader restores an older snapshot, then skips
    # the batches handed out since, so samples of the replayed step are lost.
    pytest.importorskip("torchdata.stateful_dataloader")
    code, out = run_python(
        "stateful_dataloader.py", "--stop-after", "5", "--snapshot-every", "2", tmp_path=tmp_path
    )
    assert code == 1, out
    assert "each once: False" in out


@pytest.mark.parametrize(
    ("rows", "chunk", "preload", "batch", "world", "epochs"),
    [
        (2400, 100, 4, 64, 3, 2),  # the defaults: steps cross windows, two in memory
        (3000, 60, 3, 200, 4, 1),  # a step spans up to three windows
    ],
)
def test_chunked_parquet_reads_each_row_group_once_and_covers_every_row(
    tmp_path: Path, rows: int, chunk: int, preload: int, batch: int, world: int, epochs: int
) -> None:
    pytest.importorskip("pyarrow")
    args = [f"--num-rows={rows}", f"--chunk-size={chunk}", f"--preload-nchunks={preload}"]
    args += [f"--batch-size={batch}", f"--world-size={world}", f"--epochs={epochs}"]
    code, out = run_python("chunked_parquet.py", *args, tmp_path=tmp_path)
    assert code == 0, out
    row_groups = rows // chunk
    assert f"wrote data.parquet: {rows} rows, {row_groups} row groups of {chunk}" in out
    ranks = re.findall(
        r"epoch (\d+) rank (\d+): \d+ micro-batches, (\d+) row group reads, "
        r"each row group once: (\w+), right rows: (\w+), at most (\d+) row groups in memory",
        out,
    )
    assert [(int(e), int(r)) for e, r, *_ in ranks] == [
        (e, r) for e in range(epochs) for r in range(world)
    ]
    # A step's windows and no more: ceil(batch / window) + 1 windows of `preload` row groups.
    window = chunk * preload
    most = preload * (-(-batch // window) + 1)
    for _, _, reads, once, right, resident in ranks:
        assert (int(reads), once, right) == (row_groups, "True", "True")
        assert int(resident) <= most < row_groups
    epoch_lines = re.findall(
        r"epoch (\d+): (\d+) ranks, (\d+) of (\d+) rows, each once: (\w+)", out
    )
    assert epoch_lines == [
        (str(e), str(world), str(rows), str(rows), "True") for e in range(epochs)
    ]
    assert leftovers(tmp_path) == []


def test_offline_plan_script_writes_verifies_and_trains_exactly(tmp_path: Path) -> None:
    # The script calls `epochplan` and `python`: the ones of this interpreter.
    bin_dir = str(Path(sys.executable).parent)
    env = {"PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHON": sys.executable}
    env |= {"N": "3001", "G": "128", "W": "3", "B": "16", "EPOCHS": "2"}
    code, out = run(["bash", str(EXAMPLES / "offline_plan.sh")], tmp_path, env)
    assert code == 0, out
    assert "./manifest.json" in out and "./epoch-0001/rank-00002.npy" in out
    assert re.search(r": ok \(6 files, .*N=3,001, W=3, epochs=\[0, 1\]; every id compared\)", out)
    epochs = re.findall(
        r"epoch (\d): 3 ranks, (\d+) steps, (\d+) of 3001 samples, each once: (\w+), "
        r"mean step loss ([\d.]+)",
        out,
    )
    assert [e[:4] for e in epochs] == [("0", "24", "3001", "True"), ("1", "24", "3001", "True")]
    assert float(epochs[1][4]) < float(epochs[0][4]) / 10  # it trains
    assert "trained from" in out
    assert leftovers(tmp_path) == []  # the trap removed the plan's temporary directory


def test_migrate_from_streaming_matches_streaming_and_is_elastic(tmp_path: Path) -> None:
    code, out = run_python("migrate_from_streaming.py", "--num-samples", "5003", tmp_path=tmp_path)
    assert code == 0, out
    assert out.count("last rank's part alone the same: True") == 2
    if importlib.util.find_spec("streaming") is not None:
        assert out.count("equal to Streaming's: True") == 3
    else:
        assert "mosaicml-streaming is not installed" in out
    assert "equal to Streaming's: False" not in out
    assert re.search(
        r"EpochPlan, global batch 60: 84 steps, same global steps on 8 and 7 ranks: True, "
        r"each sample once: True, equal micro-batch counts on 7 ranks: True",
        out,
    )
    assert "resumed on 7 ranks: 81 steps left, the same as on 8 ranks: True" in out
