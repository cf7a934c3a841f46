"""Token plans written in parts: each part deals the epochs it holds a rank
of and writes its ranks' files (the step table with rank 0's); the merged
directory is byte for byte the one-process plan (manifest included), with
loss tokens, cut samples and over a space; a part is verified alone, dealt
again from its lengths file; parts of other caps are refused; the command
line writes them from a (simulated) Slurm array and four torchrun processes,
and Ray tasks through the API."""

from __future__ import annotations

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

from .test_planfile_parts import cli, same_directories, torchrun_parts_are_the_plan

N = 12_000


@pytest.fixture
def lengths_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(5)
    path = tmp_path / "lengths.npy"
    np.save(path, rng.integers(1, 700, N).astype(np.int32))
    return path


def specs(lengths_file: Path) -> dict[str, tuple[PlanSpec, dict[str, Any]]]:
    lengths = np.load(lengths_file, mmap_mode="r")
    # Files, so that a part is dealt again from them when it is verified.
    np.save(lengths_file.with_name("loss.npy"), np.maximum(np.asarray(lengths) - 1, 0))
    loss = np.load(lengths_file.with_name("loss.npy"), mmap_mode="r")
    mask = ep.Selection.from_mask(np.arange(N) % 4 != 1)
    return {
        "plain": (PlanSpec(N, 512, seed=1, tokens=ep.Tokens(lengths)), {"max_tokens": 4096}),
        "loss-tokens": (
            PlanSpec(N, 300, seed=2, tokens=ep.Tokens(lengths, loss)),
            {"max_tokens": 4096, "micro_batch_size": 9},
        ),
        "truncated": (
            PlanSpec(N, 512, seed=3, tokens=ep.Tokens(lengths, oversize="truncate")),
            {"max_tokens": 500},
        ),
        "space": (PlanSpec(mask, 256, seed=4, tokens=ep.Tokens(lengths)), {"max_tokens": 2048}),
    }


@pytest.mark.parametrize("name", ["plain", "loss-tokens", "truncated", "space"])
@pytest.mark.parametrize("num_parts", [1, 2, 4, 7])
def test_merged_token_parts_are_the_one_process_plan_byte_for_byte(
    tmp_path: Path, lengths_file: Path, name: str, num_parts: int
) -> None:
    spec, caps = specs(lengths_file)[name]
    # 3 ranks x 2 epochs = 6 places: 4 parts split an epoch, 7 leave one empty.
    one = write_plan(tmp_path / "one", spec, 3, epochs=(0, 5), **caps)
    parts = [
        write_plan_part(tmp_path / f"p{i}", spec, 3, Part(i, num_parts), epochs=(0, 5), **caps)
        for i in range(num_parts)
    ]
    for p in parts:
        assert verify_part(p)
    merged = merge_plan(tmp_path / "merged", list(reversed(parts)))
    same_directories(one.path, merged.path)
    verify_plan(merged.path)


def test_a_token_part_is_verified_alone(tmp_path: Path, lengths_file: Path) -> None:
    spec, caps = specs(lengths_file)["plain"]
    part = write_plan_part(tmp_path / "p", spec, 3, Part(1, 2), epochs=(0, 5), **caps)
    token_file = next((part / "epoch-0005").glob("*.lengths.npy"))
    raw = bytearray(token_file.read_bytes())
    raw[-5] ^= 0x01
    token_file.write_bytes(bytes(raw))
    with pytest.raises(PlanError, match="checksum"):
        verify_part(part)
    token_file.write_bytes(bytes(raw[:-5]) + bytes([raw[-5] ^ 0x01]) + bytes(raw[-4:]))
    assert verify_part(part)
    # Other lengths in the file the part records: not the plan's.
    original = np.load(lengths_file)
    np.save(lengths_file, original + 1)
    with pytest.raises(PlanError, match="digests"):
        verify_part(part)
    # No lengths file: the checksums alone, and it says so.
    lengths_file.unlink()
    assert verify_part(part) is False


def test_token_parts_of_other_caps_are_refused(tmp_path: Path, lengths_file: Path) -> None:
    spec, caps = specs(lengths_file)["plain"]
    first = write_plan_part(tmp_path / "a", spec, 3, Part(0, 2), **caps)
    other = write_plan_part(tmp_path / "b", spec, 3, Part(1, 2), max_tokens=8192)
    with pytest.raises(PlanError, match="a part of another plan: its 'tokens'"):
        merge_plan(tmp_path / "merged", [first, other])
    plain = write_plan_part(tmp_path / "c", PlanSpec(N, 512, seed=1), 3, Part(1, 2))
    with pytest.raises(PlanError, match="a part of another plan"):
        merge_plan(tmp_path / "merged", [first, plain])


def test_a_slurm_array_writes_a_token_plan_on_the_command_line(
    tmp_path: Path, lengths_file: Path
) -> None:
    plan = ["plan", "-n", str(N), "-g", "512", "-w", "4", "--epochs", "2", "-q",
            "--lengths", str(lengths_file), "--max-tokens", "4096"]  # fmt: skip
    for task in range(3):
        env = {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "3"}
        cli(*plan, "--write-part", "auto", "--out", "parts/p{part}", env=env, cwd=tmp_path)
    parts = sorted(str(p) for p in (tmp_path / "parts").iterdir())
    cli("verify", parts[2])
    cli("merge", str(tmp_path / "merged"), *parts)
    cli(*plan, "--out", str(tmp_path / "one"))
    same_directories(tmp_path / "one", tmp_path / "merged")


def test_ray_tasks_write_a_token_plans_parts(tmp_path: Path, lengths_file: Path) -> None:
    ray = pytest.importorskip("ray")
    spec, caps = specs(lengths_file)["loss-tokens"]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:

        @ray.remote
        def write(index: int) -> str:
            part = Part(index, 4)
            return str(
                write_plan_part(tmp_path / f"p{index}", spec, 4, part, epochs=(0, 1), **caps)
            )

        parts = ray.get([write.remote(i) for i in range(4)])
    finally:
        ray.shutdown()
    merged = merge_plan(tmp_path / "merged", parts)
    one = write_plan(tmp_path / "one", spec, 4, epochs=(0, 1), **caps)
    same_directories(one.path, merged.path)


def test_torchrun_processes_write_a_token_plans_parts(tmp_path: Path, lengths_file: Path) -> None:
    plan = ["plan", "-n", str(N), "-g", "512", "-w", "4", "--epochs", "2", "-q",
            "--lengths", str(lengths_file), "--max-tokens", "4096"]  # fmt: skip
    torchrun_parts_are_the_plan(plan, tmp_path)
