"""Token plans packed first fit (``Tokens(packing="first_fit")``) in plan
files, samplers and the command line: the directory's version and manifest,
the reader's micro-batches against the in-memory sampler's, states that
load across both, and verification that deals the steps again."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan.planfile import MANIFEST, PlanError, manifest_checksum, open_plan, verify_plan
from epochplan.planfile import write_plan as write

N, G, W, CAP = 3000, 256, 3, 4096


def lengths() -> np.ndarray:
    # int64: its files keep version 6 (int32 lengths give version 7, see
    # test_planfile_narrow.py).
    return np.random.default_rng(7).integers(1, 2500, N).astype(np.int64)


def spec(packing: str, values: np.ndarray | None = None) -> ep.PlanSpec:
    tokens = ep.Tokens(lengths() if values is None else values, packing=packing)
    return ep.PlanSpec(N, G, seed=3, tokens=tokens)


def batches(sampler) -> list[tuple[list[int], list[float]]]:
    return [(list(b), b.weights.tolist()) for b in sampler]


def test_a_packed_plan_directory_reads_as_the_in_memory_sampler(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    path = tmp_path / "lengths.npy"
    np.save(path, lengths())
    values = np.load(path, mmap_mode="r")
    d = write(tmp_path / "p", spec("first_fit", values), W, epochs=(0, 1), max_tokens=CAP)
    assert d.manifest["plan_file_version"] == 6
    assert d.tokens is not None and d.tokens.packing == "first_fit"
    assert d.manifest["tokens"]["packing"] == "first_fit"
    verify_plan(d.path)
    for rank in range(W):
        stored = pt.PlanSampler(d.path, rank=rank, num_replicas=W, epoch=1)
        ref = pt.ElasticBatchSampler(
            spec("first_fit", values), max_tokens=CAP, rank=rank, num_replicas=W
        )
        ref.set_epoch(1)
        assert batches(stored) == batches(ref)
    # A state of either loads into the other and resumes the same batches.
    stored = pt.PlanSampler(d.path, rank=1, num_replicas=W, epoch=0)
    it = iter(stored)
    for _ in range(5):
        next(it)
    state = stored.state_dict()
    assert state["packing"] == "first_fit"
    ref = pt.ElasticBatchSampler(spec("first_fit", values), max_tokens=CAP, rank=1, num_replicas=W)
    ref.load_state_dict(state)
    resumed = pt.PlanSampler(d.path, rank=1, num_replicas=W)
    resumed.load_state_dict(ref.state_dict())
    assert batches(resumed) == batches(ref)
    # A sampler of the default packing refuses the packed state.
    plain = pt.ElasticBatchSampler(spec("sorted", values), max_tokens=CAP, rank=1, num_replicas=W)
    with pytest.raises(ValueError, match="packing"):
        plain.load_state_dict(state)


def test_packed_and_sorted_directories_hold_the_same_ids_in_other_orders(tmp_path: Path) -> None:
    packed = write(tmp_path / "a", spec("first_fit"), W, max_tokens=CAP)
    plain = write(tmp_path / "b", spec("sorted"), W, max_tokens=CAP)
    assert plain.manifest["plan_file_version"] == 3 and "packing" not in plain.manifest["tokens"]
    for rank in range(W):
        a, b = packed.rank_ids(0, rank), plain.rank_ids(0, rank)
        assert sorted(a.tolist()) == sorted(b.tolist())
    assert any(packed.rank_ids(0, r).tolist() != plain.rank_ids(0, r).tolist() for r in range(W))


def test_verify_deals_again_with_the_recorded_packing(tmp_path: Path) -> None:
    path = tmp_path / "lengths.npy"
    np.save(path, lengths())
    values = np.load(path, mmap_mode="r")
    d = write(tmp_path / "p", spec("first_fit", values), W, max_tokens=CAP)
    manifest_path = d.path / MANIFEST
    m = json.loads(manifest_path.read_text())
    # The same files said to be sorted: refused by version, then by dealing.
    del m["tokens"]["packing"]
    m["manifest_checksum"] = manifest_checksum(m)
    manifest_path.write_text(json.dumps(m))
    with pytest.raises(PlanError, match="packing"):
        verify_plan(d.path)
    m["plan_file_version"] = 3
    m["manifest_checksum"] = manifest_checksum(m)
    manifest_path.write_text(json.dumps(m))
    with pytest.raises(PlanError, match="differs from the one the lengths give"):
        verify_plan(d.path)


def test_cli_writes_a_packed_plan_and_refuses_packing_without_lengths(tmp_path: Path) -> None:
    path = tmp_path / "lengths.npy"
    np.save(path, lengths())
    cli = [sys.executable, "-m", "epochplan.cli", "plan", "-n", str(N), "-g", str(G)]
    out = tmp_path / "p"
    args = ["-w", "3", "--out", str(out), "--lengths", str(path), "--max-tokens", str(CAP)]
    done = subprocess.run(
        [*cli, *args, "--packing", "first_fit"], capture_output=True, text=True, check=True
    )
    assert "every id as planned" in done.stdout
    assert open_plan(out).manifest["tokens"]["packing"] == "first_fit"
    bad = subprocess.run(
        [*cli, "--packing", "first_fit", "--out", str(tmp_path / "q")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--packing needs --lengths" in bad.stderr
