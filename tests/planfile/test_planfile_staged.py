"""Token plans written from a memory-mapped lengths file of at least 2^20
samples stage its values in the epoch's order (one pass in id order, an
unlinked scratch file) instead of reading each step's lengths by id: the
files are byte for byte those written from the same values in memory, for
every order kind that has an inverse, with loss tokens and a cut to
``max_length``; nothing is left beside the plan; verification, which deals
every step again from the stored values and ties them to the lengths file
by an order-free sum, passes, and names a stored value that differs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan._native import _testing
from epochplan.planfile import PlanError, verify_plan, write_plan
from epochplan.planfile.manifest import MANIFEST, manifest_checksum

# Above the staging threshold (2^20 samples), and steps (G) that do not
# divide the staging's buckets (2^20 positions).
N, G, W, CAP = (1 << 20) + 4321, 1000, 3, 40_000


def mapped(tmp_path: Path, values: np.ndarray, name: str) -> np.ndarray:
    path = tmp_path / f"{name}.npy"
    np.save(path, values)
    return np.load(path, mmap_mode="r")


def epoch_files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((d / "epoch-0000").iterdir())}


@pytest.mark.parametrize(
    "kind", ["cipher", ep.Chunked(chunk_size=4096, preload_nchunks=2), "identity"]
)
def test_a_mapped_lengths_file_gives_the_plan_of_the_same_values_in_memory(
    tmp_path: Path, kind: str | ep.Chunked
) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.integers(1, 30_000, N).astype(np.int32)
    loss = (lengths // 2).astype(np.int32)

    def spec(source: np.ndarray, loss_source: np.ndarray) -> ep.PlanSpec:
        tokens = ep.Tokens(source, loss_source, max_length=25_000, oversize="truncate")
        return ep.PlanSpec(N, G, seed=9, kind=kind, tokens=tokens)

    # A mapped file is what the writer stages; an array in memory is read
    # by id, as before.
    assert _testing.file_mapped(mapped(tmp_path, lengths, "probe"))
    assert not _testing.file_mapped(lengths)
    in_memory = write_plan(tmp_path / "memory", spec(lengths, loss), W, max_tokens=CAP)
    staged = write_plan(
        tmp_path / "mapped",
        spec(mapped(tmp_path, lengths, "lengths"), mapped(tmp_path, loss, "loss")),
        W,
        max_tokens=CAP,
    )
    assert epoch_files(staged.path) == epoch_files(in_memory.path)
    # The scratch file was unlinked: nothing but the plan's own files.
    assert not [p for p in staged.path.rglob("*") if p.name.startswith(".epochplan")]
    assert verify_plan(staged.path) is True


def test_a_plan_that_drops_its_short_last_step_verifies(tmp_path: Path) -> None:
    # The epoch holds fewer ids than the file: the sums leave the others out.
    lengths = np.random.default_rng(4).integers(1, 3000, N).astype(np.int32)
    spec = ep.PlanSpec(N, G, drop_last=True, tokens=ep.Tokens(mapped(tmp_path, lengths, "lengths")))
    assert spec.plan(0).num_steps * G < N
    d = write_plan(tmp_path / "p", spec, W, epochs=(0, 1), max_tokens=CAP).path
    assert verify_plan(d) is True


def test_verify_names_a_stored_length_that_is_not_the_file_s(tmp_path: Path) -> None:
    lengths = np.random.default_rng(5).integers(1, 3000, N).astype(np.int32)
    d = write_plan(
        tmp_path / "p",
        ep.PlanSpec(N, G, tokens=ep.Tokens(mapped(tmp_path, lengths, "lengths"))),
        W,
        max_tokens=CAP,
    ).path
    # One stored length of the last step changed by one, the step's table
    # row and the manifest sealed again: only the lengths file can tell.
    name = "epoch-0000/rank-00001.lengths.npy"
    stored = np.load(d / name).copy()
    ids = np.load(d / "epoch-0000/rank-00001.npy")
    stored[-1] += 1
    np.save(d / name, stored)
    table = np.load(d / "epoch-0000/steps.npy").copy()
    table[-4] += 1
    np.save(d / "epoch-0000/steps.npy", table)
    m = json.loads((d / MANIFEST).read_text())
    for entry in m["token_files"]:
        if entry["path"] in (name, "epoch-0000/steps.npy"):
            entry["blake3"] = _testing.file_checksum(d / entry["path"])
    m["manifest_checksum"] = manifest_checksum(m)
    (d / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(
        PlanError,
        match=rf"rank 1: the stored lengths of sample {ids[-1]} is {stored[-1]}, "
        rf"the lengths file has {lengths[ids[-1]]}",
    ):
        verify_plan(d)
