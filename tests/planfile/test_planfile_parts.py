"""Plans written in parts by independent processes and merged: the merged
directory is byte for byte the one-process plan, for every kind and space;
torchrun's processes, Ray tasks and a (simulated) Slurm array each write
their part; a merge of missing, duplicated, foreign or incomplete parts is
refused naming the part; one part is verified alone."""

from __future__ import annotations

import filecmp
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epochplan as ep
from epochplan.planfile import (
    Part,
    PlanError,
    PlanSpec,
    merge_plan,
    verify_part,
    verify_plan,
    write_plan,
    write_plan_part,
)


def same_directories(a: Path, b: Path) -> None:
    """The same files with the same bytes (manifest, rank files, space)."""
    files_a = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    files_b = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    assert files_a == files_b
    for rel in files_a:
        assert filecmp.cmp(a / rel, b / rel, shallow=False), rel


CASES: list[tuple[str, Any, dict[str, Any]]] = [
    ("cipher", 10_007, {}),
    ("chunked", 10_007, {"kind": ep.Chunked(100, 3)}),
    ("uniform-drop-last", 10_007, {"kind": "uniform", "drop_last": True}),
    ("mask", ep.Selection.from_mask(np.arange(20_000) % 3 == 1), {}),
    ("indices", ep.Selection.from_indices(np.arange(9_000)[::-1].copy(), 20_000), {}),
    ("mixture", ep.Mixture([3_000, 5_000], weights=[2, 1], num_samples=6_000, seed=3), {}),
]


@pytest.mark.parametrize(("name", "space", "kind"), CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("num_parts", [1, 3, 7, 20])
def test_merged_parts_are_the_one_process_plan_byte_for_byte(
    tmp_path: Path, name: str, space: Any, kind: dict[str, Any], num_parts: int
) -> None:
    # 3 ranks x 2 epochs = 6 files: with 7 or 20 parts some parts are empty.
    spec = PlanSpec(space, 512, seed=2, **kind)
    one = write_plan(tmp_path / "one", spec, 3, epochs=(4, 9))
    parts = [
        write_plan_part(tmp_path / f"p{i}", spec, 3, Part(i, num_parts), epochs=(4, 9))
        for i in range(num_parts)
    ]
    for p in parts:
        verify_part(p)
    merged = merge_plan(tmp_path / "merged", reversed(parts))  # any order
    same_directories(one.path, merged.path)
    verify_plan(merged.path)


@pytest.fixture
def parts(tmp_path: Path) -> list[Path]:
    spec = PlanSpec(5_000, 256, seed=1)
    return [write_plan_part(tmp_path / f"p{i}", spec, 4, Part(i, 3)) for i in range(3)]


def test_bad_sets_of_parts_are_refused_naming_the_part(tmp_path: Path, parts: list[Path]) -> None:
    with pytest.raises(PlanError, match=r"parts \[1\] of 3 are missing"):
        merge_plan(tmp_path / "m", [parts[0], parts[2]])
    with pytest.raises(PlanError, match=rf"{parts[0]}: part 0 of 3 is given twice"):
        merge_plan(tmp_path / "m", [*parts, parts[0]])
    foreign = write_plan_part(tmp_path / "f", PlanSpec(5_000, 256, seed=2), 4, Part(1, 3))
    with pytest.raises(PlanError, match=rf"{foreign}: a part of another plan: its 'seed' is 2"):
        merge_plan(tmp_path / "m", [parts[0], foreign, parts[2]])
    other = write_plan_part(tmp_path / "o", PlanSpec(5_000, 256, seed=1), 4, Part(1, 4))
    with pytest.raises(PlanError, match=rf"{other}: part 1 of 4, but .* a part of 3"):
        merge_plan(tmp_path / "m", [parts[0], other, parts[2]])
    with pytest.raises(PlanError, match=r"part\.json: cannot read the part"):
        merge_plan(tmp_path / "m", [parts[0], tmp_path, parts[2]])
    # A part whose file was cut short after it was written.
    victim = next((parts[1] / "epoch-0000").iterdir())
    with open(victim, "r+b") as f:
        f.truncate(victim.stat().st_size - 8)
    with pytest.raises(PlanError, match=rf"{victim}: has .* its part lists"):
        merge_plan(tmp_path / "m", parts)
    with pytest.raises(PlanError, match=str(victim)):
        verify_part(parts[1])
    assert not (tmp_path / "m").exists()


def test_a_part_with_an_altered_id_fails_its_verification(parts: list[Path]) -> None:
    victim = next((parts[2] / "epoch-0000").iterdir())
    raw = bytearray(victim.read_bytes())
    raw[-3] ^= 0x01
    victim.write_bytes(bytes(raw))
    with pytest.raises(PlanError, match=str(victim)):
        verify_plan(parts[2])  # verify_plan takes a part directory too


def test_the_part_comes_from_the_launchers_environment() -> None:
    assert Part.from_environment({"RANK": "3", "WORLD_SIZE": "4"}) == Part(3, 4)
    slurm = {"SLURM_ARRAY_TASK_ID": "12", "SLURM_ARRAY_TASK_MIN": "10"}
    assert Part.from_environment({**slurm, "SLURM_ARRAY_TASK_COUNT": "5", "RANK": "0",
                                  "WORLD_SIZE": "1"}) == Part(2, 5)  # fmt: skip
    with pytest.raises(ValueError, match="no part in the environment"):
        Part.from_environment({})
    with pytest.raises(ValueError, match=r"RANK/WORLD_SIZE do not name a part: index must be"):
        Part.from_environment({"RANK": "4", "WORLD_SIZE": "4"})
    assert Part.parse("2/8") == Part(2, 8)
    with pytest.raises(ValueError, match="written I/N"):
        Part.parse("2-8")


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        cwd=cwd,
        timeout=300,
    )
    assert res.returncode == 0, res.stderr
    return res.stdout


PLAN = ["plan", "-n", "20000", "-g", "1024", "-w", "5", "--epochs", "2", "--seed", "4", "-q"]


def test_a_simulated_slurm_array_writes_and_merges_on_the_command_line(tmp_path: Path) -> None:
    # What `sbatch --array=1-4` runs four times, with Slurm's variables.
    for task in range(1, 5):
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_MIN": "1",
               "SLURM_ARRAY_TASK_COUNT": "4"}  # fmt: skip
        cli(*PLAN, "--write-part", "auto", "--out", "parts/part-{part}", env=env, cwd=tmp_path)
    parts = sorted(str(p) for p in (tmp_path / "parts").iterdir())
    assert [Path(p).name for p in parts] == ["part-0", "part-1", "part-2", "part-3"]
    cli("verify", parts[1])
    cli("merge", str(tmp_path / "merged"), *parts)
    cli(*PLAN, "--out", str(tmp_path / "one"))
    same_directories(tmp_path / "one", tmp_path / "merged")


def torchrun_parts_are_the_plan(plan: list[str], tmp_path: Path) -> None:
    """Four processes of one torchrun job write ``plan``'s parts, each RANK
    of WORLD_SIZE a part; merged, they are the one-process plan."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
           "--nproc-per-node", "4", "--no-python", sys.executable, "-m", "epochplan.cli",
           *plan, "--write-part", "auto", "--out", str(tmp_path / "parts" / "p{part}")]  # fmt: skip
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    parts = sorted((tmp_path / "parts").iterdir())
    assert len(parts) == 4
    merged = merge_plan(tmp_path / "merged", parts)
    cli(*plan, "--out", str(tmp_path / "one"))
    same_directories(tmp_path / "one", merged.path)


def test_torchrun_processes_write_the_parts(tmp_path: Path) -> None:
    torchrun_parts_are_the_plan(PLAN, tmp_path)


def test_ray_tasks_write_the_parts(tmp_path: Path) -> None:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        spec = PlanSpec(30_000, 1024, seed=6, kind=ep.Chunked(300))

        @ray.remote
        def write(index: int) -> str:
            out = write_plan_part(tmp_path / f"p{index}", spec, 4, Part(index, 6), epochs=(0, 1))
            return str(out)

        parts = ray.get([write.remote(i) for i in range(6)])
    finally:
        ray.shutdown()
    merged = merge_plan(tmp_path / "merged", parts)
    one = write_plan(tmp_path / "one", spec, 4, epochs=(0, 1))
    same_directories(one.path, merged.path)
