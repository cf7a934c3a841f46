"""Token plans whose lengths files keep their source's integer type
(plan-file version 7): an int32, int16, uint16 or uint8 lengths file gives
lengths files of that type, every other file byte for byte the plan of the
same values in int64 (version 3), the samplers' batches equal, verified with
and without the lengths file; cut and packed plans keep both records; a
manifest that misstates the types is refused."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epochplan as ep
from epochplan.planfile import PlanError, open_plan, verify_plan, write_plan
from epochplan.planfile.manifest import MANIFEST, manifest_checksum
from epochplan.planfile.tokens import NARROW_PLAN_FILE_VERSION, TOKEN_PLAN_FILE_VERSION

N, G, W, CAP = 3000, 96, 3, 900


def mapped(tmp_path: Path, values: np.ndarray, name: str) -> np.ndarray:
    path = tmp_path / f"{name}.npy"
    np.save(path, values)
    return np.load(path, mmap_mode="r")


def values() -> np.ndarray:
    return np.random.default_rng(11).integers(1, 250, N)


def reseal(d: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    m = json.loads((d / MANIFEST).read_text())
    edit(m)
    m["manifest_checksum"] = manifest_checksum(m)
    (d / MANIFEST).write_text(json.dumps(m))


def batches(d: Path, rank: int) -> list[tuple[list[int], list[float]]]:
    pt = pytest.importorskip("epochplan.torch")
    sampler = pt.PlanSampler(d, rank=rank, num_replicas=W)
    return [(list(b), b.weights.tolist()) for b in sampler]


@pytest.mark.parametrize("dtype", ["<i4", "<i2", "<u2", "|u1"])
def test_a_narrow_lengths_file_is_stored_in_its_type_and_the_rest_is_unchanged(
    tmp_path: Path, dtype: str
) -> None:
    wide = write_plan(
        tmp_path / "wide",
        ep.PlanSpec(N, G, seed=4, tokens=ep.Tokens(mapped(tmp_path, values(), "wide"))),
        W,
        epochs=(0, 1),
        max_tokens=CAP,
    )
    source = mapped(tmp_path, values().astype(dtype), "narrow")
    d = write_plan(
        tmp_path / "narrow",
        ep.PlanSpec(N, G, seed=4, tokens=ep.Tokens(source)),
        W,
        epochs=(0, 1),
        max_tokens=CAP,
    )
    assert wide.manifest["plan_file_version"] == TOKEN_PLAN_FILE_VERSION
    assert d.manifest["plan_file_version"] == NARROW_PLAN_FILE_VERSION
    assert d.manifest["tokens"]["file_dtypes"] == {"lengths": dtype}
    assert "file_dtypes" not in wide.manifest["tokens"]
    itemsize = np.dtype(dtype).itemsize
    for f in d.manifest["token_files"]:
        a, b = d.path / f["path"], wide.path / f["path"]
        if f["role"] == "lengths":
            stored = np.load(a)
            assert stored.dtype == np.dtype(dtype)
            assert stored.tolist() == np.load(b).tolist()
            assert a.stat().st_size == b.stat().st_size - (8 - itemsize) * f["count"]
        else:
            assert a.read_bytes() == b.read_bytes()
    for f in d.manifest["files"]:
        assert (d.path / f["path"]).read_bytes() == (wide.path / f["path"]).read_bytes()
    assert d.manifest["total_bytes"] < wide.manifest["total_bytes"]
    assert verify_plan(d.path) is True
    for rank in range(W):
        assert batches(d.path, rank) == batches(wide.path, rank)
    # Without the lengths file: every stored rule checked from the files alone.
    (tmp_path / "narrow.npy").rename(tmp_path / "moved.npy")
    assert verify_plan(d.path) is False


def test_loss_tokens_keep_their_own_type(tmp_path: Path) -> None:
    lengths = values()
    loss = mapped(tmp_path, np.maximum(lengths - 1, 0).astype(np.uint16), "loss")
    tokens = ep.Tokens(mapped(tmp_path, lengths, "lengths"), loss)
    d = write_plan(tmp_path / "p", ep.PlanSpec(N, G, seed=2, tokens=tokens), W, max_tokens=CAP)
    assert d.manifest["plan_file_version"] == NARROW_PLAN_FILE_VERSION
    assert d.manifest["tokens"]["file_dtypes"] == {"lengths": "<i8", "loss_tokens": "<u2"}
    stored = np.load(d.path / "epoch-0000/rank-00001.loss_tokens.npy")
    assert stored.dtype == np.uint16
    assert stored.tolist() == np.asarray(loss)[d.rank_ids(0, 1)].tolist()
    assert verify_plan(d.path) is True


def test_a_cut_and_packed_plan_keeps_both_records_in_version_7(tmp_path: Path) -> None:
    lengths = values().astype(np.int32)
    lengths[::97] = 2000  # over the cap: cut to it
    tokens = ep.Tokens(
        mapped(tmp_path, lengths, "lengths"), oversize="truncate", packing="first_fit"
    )
    d = write_plan(tmp_path / "p", ep.PlanSpec(N, G, seed=9, tokens=tokens), W, max_tokens=CAP)
    assert d.manifest["plan_file_version"] == NARROW_PLAN_FILE_VERSION
    t = d.manifest["tokens"]
    assert (t["max_length"], t["packing"]) == (CAP, "first_fit")
    assert t["file_dtypes"] == {"lengths": "<i4"}
    stored = np.load(d.path / "epoch-0000/rank-00000.lengths.npy")
    assert stored.dtype == np.int32 and stored.max() == CAP
    assert verify_plan(d.path) is True
    pt = pytest.importorskip("epochplan.torch")
    for rank in range(W):
        memory = pt.ElasticBatchSampler(
            ep.PlanSpec(N, G, seed=9, tokens=tokens), rank=rank, num_replicas=W, max_tokens=CAP
        )
        assert batches(d.path, rank) == [(list(b), b.weights.tolist()) for b in memory]


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda m: m["tokens"].pop("file_dtypes"), r"tokens\['file_dtypes'\] is None"),
        (
            lambda m: m["tokens"].update(file_dtypes={"lengths": "<i8"}),
            "one narrower than '<i8'",
        ),
        (
            lambda m: m["tokens"].update(file_dtypes={"lengths": "<f4"}),
            r"tokens\['file_dtypes'\] is",
        ),
        (
            lambda m: m["tokens"].update(file_dtypes={"lengths": "<i4", "loss_tokens": "<i4"}),
            "expected the types of lengths",
        ),
        (lambda m: m["tokens"].update(file_dtypes={"lengths": "<u2"}), "'bytes' is"),
        (lambda m: m.update(plan_file_version=TOKEN_PLAN_FILE_VERSION), "plan_file_version 7"),
        (
            # An older version's reading: int64 files, which these are not.
            lambda m: (
                m.update(plan_file_version=TOKEN_PLAN_FILE_VERSION),
                m["tokens"].pop("file_dtypes"),
            ),
            "'bytes' is",
        ),
    ],
)
def test_a_manifest_that_misstates_the_types_is_refused(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], match: str
) -> None:
    source = mapped(tmp_path, values().astype(np.int32), "lengths")
    spec = ep.PlanSpec(N, G, seed=1, tokens=ep.Tokens(source))
    d = write_plan(tmp_path / "p", spec, W, max_tokens=CAP).path
    reseal(d, edit)
    with pytest.raises(PlanError, match=match):
        open_plan(d)


def test_types_in_a_wide_plan_and_a_header_of_another_type_are_refused(tmp_path: Path) -> None:
    wide = ep.PlanSpec(N, G, seed=1, tokens=ep.Tokens(mapped(tmp_path, values(), "wide")))
    d = write_plan(tmp_path / "wide", wide, W, max_tokens=CAP).path
    reseal(d, lambda m: m["tokens"].update(file_dtypes={"lengths": "<i4"}))
    with pytest.raises(PlanError, match="plan_file_version 7"):
        open_plan(d)
    # An int16 file whose manifest says uint16: the same size, another header.
    narrow = ep.PlanSpec(
        N, G, seed=1, tokens=ep.Tokens(mapped(tmp_path, values().astype("<i2"), "narrow"))
    )
    d = write_plan(tmp_path / "narrow", narrow, W, max_tokens=CAP).path
    reseal(d, lambda m: m["tokens"].update(file_dtypes={"lengths": "<u2"}))
    with pytest.raises(PlanError, match="has dtype '<i2', expected '<u2'"):
        verify_plan(d)
    with pytest.raises(PlanError, match="has dtype '<i2', expected '<u2'"):
        open_plan(d).open_token_file(0, 1, "lengths")
