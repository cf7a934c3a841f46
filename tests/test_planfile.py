"""Plan directories: written exactly, verified completely, never half-valid."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from _manifest_flips import assert_every_manifest_byte_refused

import epochplan as ep
from epochplan import _native
from epochplan._native import _testing
from epochplan.planfile import (
    MANIFEST,
    PlanError,
    PlanSpec,
    manifest_checksum,
    open_plan,
    publish,
    reader,
    verify,
    verify_plan,
    write,
    write_plan,
)

CASES = [
    # (N, G, W, kind, chunk parameters, drop_last)
    (0, 3, 2, "cipher", {}, False),
    (1, 5, 3, "cipher", {}, False),
    (1000, 64, 3, "cipher", {}, False),
    (1001, 64, 8, "uniform", {}, True),
    (5000, 100, 7, "chunked", {"chunk_size": 37, "preload_nchunks": 4}, False),
    (777, 50, 4, "identity", {}, True),
    (70_000, 1000, 2, "cipher", {}, True),
]


def rank_file(d: Path, epoch: int, rank: int) -> Path:
    return d / f"epoch-{epoch:04d}" / f"rank-{rank:05d}.npy"


@pytest.mark.parametrize(("n", "g", "w", "kind", "chunks", "drop_last"), CASES)
def test_files_hold_the_rank_indices(
    tmp_path: Path, n: int, g: int, w: int, kind: str, chunks: dict[str, int], drop_last: bool
) -> None:
    out = tmp_path / "plan"
    d = write_plan(out, n, g, w, seed=5, epochs=[2, 0], kind=kind, drop_last=drop_last, **chunks)
    assert d.epochs == [2, 0]
    assert (d.num_samples, d.global_batch_size, d.world_size, d.seed, d.kind, d.drop_last) == (
        n,
        g,
        w,
        5,
        kind,
        drop_last,
    )
    verify_plan(out)
    for epoch in (0, 2):
        plan = ep.EpochPlan(n, g, seed=5, epoch=epoch, kind=kind, drop_last=drop_last, **chunks)
        seen = []
        for rank in range(w):
            want = plan.rank_indices(rank, w)
            got = d.rank_ids(epoch, rank)
            np.testing.assert_array_equal(got, want)
            assert got.dtype == np.int64 and not got.flags.writeable
            # Plain numpy reads the same file, memory-mapped.
            np.testing.assert_array_equal(np.load(rank_file(out, epoch, rank), mmap_mode="r"), want)
            seen.append(want)
        ids = np.sort(np.concatenate(seen))
        full = (n // g) * g if drop_last else n
        assert len(ids) == full and len(np.unique(ids)) == full
        assert d.plan(epoch).state_dict() == plan.state_dict()
    assert [p.name for p in tmp_path.iterdir()] == ["plan"]


def test_header_is_numpys_own() -> None:
    for count in (0, 1, 12345, 10**10):
        buf = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            buf, {"descr": "<i8", "fortran_order": False, "shape": (count,)}
        )
        assert _native.npy_header(count) == buf.getvalue()


def test_manifest_records_parameters_sizes_and_checksums(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", 10_000, 128, 3, seed=9, epochs=range(1, 3))
    m = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert m["format"] == "epochplan-plan" and m["plan_file_version"] == 2
    assert m["manifest_checksum"] == manifest_checksum(m)
    assert m["format_version"] == ep.FORMAT_VERSION
    assert (m["num_samples"], m["global_batch_size"], m["world_size"], m["seed"]) == (
        10_000,
        128,
        3,
        9,
    )
    assert m["epochs"] == [1, 2] and m["kind"] == "cipher" and m["drop_last"] is False
    assert len(m["files"]) == 6
    for f in m["files"]:
        data = (d.path / f["path"]).read_bytes()
        assert len(data) == f["bytes"]
        assert _testing.file_checksum(d.path / f["path"]) == f["blake3"]
        assert f["count"] == ep.EpochPlan(10_000, 128).rank_size(f["rank"], 3)
    assert m["total_bytes"] == sum(f["bytes"] for f in m["files"])


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    write_plan(
        tmp_path / "p", 3_000_000, 100, 2, epochs=(0, 1), progress=lambda a, b: calls.append((a, b))
    )
    assert calls[-1] == (6_000_000, 6_000_000)
    done = [a for a, _ in calls]
    assert done == sorted(done)
    # Verifying counts bytes, the files' headers included.
    checked: list[tuple[int, int]] = []
    verify_plan(tmp_path / "p", progress=lambda a, b: checked.append((a, b)))
    total = sum(f.stat().st_size for f in (tmp_path / "p").rglob("*.npy"))
    assert checked[-1] == (total, total)
    done = [a for a, _ in checked]
    assert done == sorted(done)


def test_existing_output_needs_force(tmp_path: Path) -> None:
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)
    with pytest.raises(PlanError, match="already exists"):
        write_plan(out, 100, 10, 2)
    d = write_plan(out, 50, 10, 3, force=True)
    assert d.world_size == 3
    verify_plan(out)
    other = tmp_path / "notaplan"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(other, 100, 10, 2, force=True)
    assert (other / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notaplan", "p"]
    # An empty directory made beforehand (mkdir out) is written into without force;
    # a link to one is not.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_plan(empty, 100, 10, 2).world_size == 2
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(PlanError, match="not a plan directory; refusing"):
        write_plan(tmp_path / "link", 100, 10, 2)
    # Force is offered only where it would replace: for a plan directory.
    (tmp_path / "file").write_text("precious")
    with pytest.raises(PlanError, match="not a plan directory; refusing") as error:
        write_plan(tmp_path / "file", 100, 10, 2)
    assert "force" not in str(error.value)
    with pytest.raises(PlanError, match=r"already exists \(use force=True"):
        write_plan(out, 100, 10, 2)


def test_force_keeps_a_plan_directory_holding_other_files(tmp_path: Path) -> None:
    # Replacing removes everything inside: a user's file or folder kept in a
    # plan directory makes it no longer replaceable.
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2, epochs=range(2))
    for extra in ("my_checkpoint.pt", "data/shard0", "epoch-0000/notes.txt", "epoch-0009/x"):
        path = out / extra
        path.parent.mkdir(exist_ok=True)
        path.write_text("precious")
        with pytest.raises(PlanError, match=f"holds {extra.split('/')[0]}.*not part of its plan"):
            write_plan(out, 100, 10, 3, force=True)
        assert path.read_text() == "precious"
        assert open_plan(out).world_size == 2
        path.unlink()
        if path.parent != out and not any(path.parent.iterdir()):
            path.parent.rmdir()
    # A link inside is not the plan's either, even in place of a listed file or folder.
    (out / "link").symlink_to(out / MANIFEST)
    with pytest.raises(PlanError, match="holds link"):
        write_plan(out, 100, 10, 3, force=True)
    (out / "link").unlink()
    for listed in ("epoch-0001/rank-00001.npy", "epoch-0001"):
        (out / listed).rename(tmp_path / "moved")
        (out / listed).symlink_to(tmp_path / "moved")
        with pytest.raises(PlanError, match=f"holds {listed}, which is not part of its plan"):
            write_plan(out, 100, 10, 3, force=True)
        (out / listed).unlink()
        (tmp_path / "moved").rename(out / listed)
    verify_plan(out)
    assert write_plan(out, 100, 10, 3, force=True).world_size == 3


def test_what_appears_during_a_write_is_kept(tmp_path: Path) -> None:
    # Without force, `out` did not exist when the write began: a directory
    # made there since (another writer, a user) is never replaced.
    out = tmp_path / "p"

    def make_out(done: int, total: int) -> None:
        if not out.exists():
            out.mkdir()
            (out / "notes.txt").write_text("precious")

    with pytest.raises(PlanError, match="appeared while the plan was written") as error:
        write_plan(out, 10_000, 64, 4, epochs=range(2), progress=make_out)
    assert "force" not in str(error.value)  # force would not replace it either
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    # With force, what appeared is checked again before it is replaced.
    (out / "notes.txt").unlink()
    out.rmdir()
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(out, 10_000, 64, 4, epochs=range(2), force=True, progress=make_out)
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_on_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)
    monkeypatch.chdir(out)
    d = write_plan(".", 60, 10, 3, force=True)
    assert d.path == out and d.world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_swaps_the_plans_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the system swaps two paths atomically, the old plan is never
    # moved aside: NAME holds a whole plan, old or new, at every moment.
    if publish.renameat2() is None:
        pytest.skip("no renameat2 here")
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)

    def no_rename(self: Path, target: str | os.PathLike[str]) -> Path:
        raise AssertionError(f"renamed {self} to {target}")

    monkeypatch.setattr(Path, "rename", no_rename)
    d = write_plan(out, 60, 10, 3, force=True)
    monkeypatch.undo()
    assert d.world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_without_an_atomic_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish, "exchange", lambda a, b: False)
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)
    assert write_plan(out, 60, 10, 3, force=True).world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


@pytest.mark.parametrize("swap", [True, False])
def test_failed_replacement_keeps_the_old_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: bool
) -> None:
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)
    rename = Path.rename

    def failing_exchange(a: Path, b: Path) -> bool:
        if not swap:
            return False
        raise OSError(16, "Device or resource busy", str(b))

    def failing_rename(self: Path, target: str | os.PathLike[str]) -> Path:
        if "-old-" not in self.name and Path(target) == out:
            raise OSError(16, "Device or resource busy")
        return rename(self, target)

    monkeypatch.setattr(publish, "exchange", failing_exchange)
    monkeypatch.setattr(Path, "rename", failing_rename)
    with pytest.raises(PlanError, match="cannot write: Device or resource busy"):
        write_plan(out, 60, 10, 3, force=True)
    monkeypatch.undo()
    assert open_plan(out).world_size == 2
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_failed_manifest_write_is_a_plan_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(27, "File too large")

    monkeypatch.setattr(json, "dump", full_disk)
    with pytest.raises(PlanError, match=r"p: cannot write: File too large"):
        write_plan(tmp_path / "p", 100, 10, 2)
    assert list(tmp_path.iterdir()) == []


def test_paths_must_be_utf8(tmp_path: Path) -> None:
    out = Path(os.fsdecode(bytes(tmp_path) + b"/p\xff"))
    with pytest.raises(PlanError, match="out must be valid UTF-8"):
        write_plan(out, 100, 10, 2)
    with pytest.raises(PlanError, match="path must be valid UTF-8"):
        open_plan(out)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"num_samples": -1}, ValueError),
        ({"global_batch_size": 0}, ValueError),
        ({"world_size": 0}, ValueError),
        ({"num_samples": 1.5}, TypeError),
        ({"epochs": ()}, ValueError),
        ({"epochs": 3}, TypeError),
        ({"kind": "nope"}, ValueError),
        ({"kind": "chunked"}, ValueError),
        ({"chunk_size": 4}, ValueError),
        ({"drop_last": 1}, TypeError),
        ({"drop_last": None}, TypeError),
        ({"force": "no"}, TypeError),  # truthy: it would replace a plan
        ({"force": 1}, TypeError),
        ({"out": "a\0b"}, PlanError),
        ({"epochs": None}, TypeError),
        ({"epochs": "01"}, TypeError),
        ({"epochs": b"01"}, TypeError),
        ({"epochs": {0: 1}}, TypeError),
        ({"epochs": np.array(0)}, TypeError),
        ({"progress": 5}, TypeError),
        ({"kind": "chunked", "chunk_size": 2.5}, TypeError),
        ({"kind": "uniform", "chunk_size": 4}, ValueError),
        ({"num_samples": 10**18}, PlanError),  # more than the disk
    ],
)
def test_bad_arguments(tmp_path: Path, kwargs: dict[str, object], error: type) -> None:
    args: dict[str, object] = {
        "out": tmp_path / "p",
        "num_samples": 100,
        "global_batch_size": 10,
        "world_size": 2,
    }
    args.update(kwargs)
    with pytest.raises(error):
        write_plan(**args)  # type: ignore[arg-type]
    assert not (tmp_path / "p").exists()
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------- corruption


@pytest.fixture
def plan_dir(tmp_path: Path) -> Path:
    out = tmp_path / "plan"
    write_plan(out, 40_000, 1000, 4, epochs=(0, 1))
    return out


def _edit_manifest(d: Path, change: dict[str, object]) -> None:
    m = json.loads((d / MANIFEST).read_text())
    m.update(change)
    (d / MANIFEST).write_text(json.dumps(m))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # Values that pass every check of their own: only the checksum sees them.
        ({"seed": 4}, "seed"),
        ({"kind": "uniform"}, "kind"),
        ({"created_by": "someone else"}, "created_by"),
        ({"extra": 1}, "a new key"),
    ],
)
def test_an_edited_manifest_is_refused(
    plan_dir: Path, change: dict[str, object], field: str
) -> None:
    _edit_manifest(plan_dir, change)
    with pytest.raises(PlanError, match="manifest_checksum does not match"):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match="manifest_checksum does not match"):
        verify_plan(plan_dir)


def test_every_byte_of_a_manifest_is_authenticated(tmp_path: Path) -> None:
    # One bit flipped at each byte of a small plan's manifest: all four
    # readers refuse every one with a PlanError naming the manifest.
    pt = pytest.importorskip("epochplan.torch")
    out = tmp_path / "p"
    write_plan(out, 40, 8, 2, seed=5, epochs=(0, 1))
    readers = {
        "open_plan": lambda: open_plan(out),
        "rank_ids": lambda: open_plan(out).rank_ids(0, 1),
        "PlanSampler": lambda: pt.PlanSampler(out, micro_batch_size=2, rank=0, num_replicas=2),
        "verify_plan": lambda: verify_plan(out),
    }
    assert_every_manifest_byte_refused(out, readers)


def _all_fail(d: Path, match: str, epoch: int = 0, rank: int = 1) -> None:
    """verify_plan, and open_plan + rank_ids, each raise PlanError(match)."""
    with pytest.raises(PlanError, match=match):
        verify_plan(d)
    with pytest.raises(PlanError, match=match):
        open_plan(d).rank_ids(epoch, rank)


def test_truncated_file(plan_dir: Path) -> None:
    f = rank_file(plan_dir, 1, 2)
    f.write_bytes(f.read_bytes()[:-8])
    _all_fail(plan_dir, r"rank-00002\.npy: has \d+ bytes, the manifest says", epoch=1, rank=2)


def test_grown_file(plan_dir: Path) -> None:
    # Bytes beyond the ids are outside the checksum: open_plan refuses the size itself.
    f = rank_file(plan_dir, 1, 2)
    f.write_bytes(f.read_bytes() + bytes(8))
    match = r"rank-00002\.npy: has \d+ bytes, the manifest says"
    with pytest.raises(PlanError, match=match):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match=match):
        verify_plan(plan_dir)


@pytest.mark.parametrize("where", ["data", "header"])
def test_flipped_byte(plan_dir: Path, where: str) -> None:
    f = rank_file(plan_dir, 0, 1)
    data = bytearray(f.read_bytes())
    data[len(data) - 5 if where == "data" else 40] ^= 0x10
    f.write_bytes(bytes(data))
    match = "checksum mismatch" if where == "data" else r"rank-00001\.npy: has (shape|dtype|a )"
    _all_fail(plan_dir, match)


def test_sparse_rank_file_is_refused_before_any_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file of the right size that was never written (a hole) is refused by
    # its allocated blocks, before a checksum reads it.
    monkeypatch.setattr(reader, "is_local_filesystem", lambda path: True)
    out = tmp_path / "p"
    write_plan(out, 400_000, 1000, 2)
    f = rank_file(out, 0, 1)
    size = f.stat().st_size
    f.unlink()
    with open(f, "wb") as sparse:
        sparse.truncate(size)
    if f.stat().st_blocks * 512 * 8 >= size:  # pragma: no cover - depends on the filesystem
        raise AssertionError("this filesystem wrote the hole's blocks")
    for read in (lambda: open_plan(out), lambda: verify_plan(out)):
        with pytest.raises(
            PlanError, match=r"rank-00001\.npy: has \d+ bytes but only \d+ allocated"
        ):
            read()


@pytest.mark.parametrize("what", ["manifest", "epoch directory", "rank file"])
def test_links_out_of_the_plan_directory_are_refused(tmp_path: Path, what: str) -> None:
    # A copy of the plan's own files elsewhere, linked in: every reader refuses
    # the link rather than follow it (it could lead to another plan's files).
    out, elsewhere = tmp_path / "p", tmp_path / "elsewhere"
    write_plan(out, 1000, 100, 2)
    shutil.copytree(out, elsewhere)
    target = {
        "manifest": Path(MANIFEST),
        "epoch directory": Path("epoch-0000"),
        "rank file": Path("epoch-0000/rank-00001.npy"),
    }[what]
    if (out / target).is_dir():
        shutil.rmtree(out / target)
    else:
        (out / target).unlink()
    (out / target).symlink_to(elsewhere / target)
    for read in (lambda: open_plan(out), lambda: verify_plan(out)):
        with pytest.raises(PlanError, match=rf"{target.name}: is a link"):
            read()


def test_missing_rank_file(plan_dir: Path) -> None:
    rank_file(plan_dir, 0, 3).unlink()
    with pytest.raises(PlanError, match=r"rank-00003\.npy: missing rank file"):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match="missing rank file"):
        verify_plan(plan_dir)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"plan_file_version": 1}, "plan_file_version is 1; this release reads version 2"),
        ({"format_version": 999}, "format_version is 999"),
        ({"format_version": 1.0}, "format_version is 1.0"),
        ({"plan_file_version": True}, "plan_file_version is True"),
        ({"dtype": ">i8"}, "manifest 'dtype' is '>i8', expected '<i8'"),
        ({"checksum": "sha256"}, "manifest 'checksum' is 'sha256', expected 'blake3'"),
        ({"format": "other"}, "not an epochplan plan manifest"),
        ({"num_samples": 40_001}, "bad|expected|num_steps"),
        ({"world_size": 5}, "lists 8 files, expected 2 epochs x 5 ranks"),
        ({"epochs": [0, 0]}, "duplicates"),
        ({"epochs": [-1, 1]}, r"'epochs' must lie in \[0, 2\*\*64 - 1\]"),
        ({"kind": "fancy"}, "unknown kind"),
        ({"seed": -1}, "bad plan parameters: seed must be an int in"),
        ({"seed": 2**64}, "bad plan parameters: seed must be an int in"),
        ({"num_steps": 40.0}, "num_steps is 40.0"),
        ({"total_bytes": 1}, r"total_bytes is 1, the files take \d+"),
        ({"total_bytes": None}, "total_bytes is None"),
        ({"chunk_size": 4.7}, "'chunk_size' has the wrong type"),
        ({"preload_nchunks": True}, "'preload_nchunks' has the wrong type"),
        ({"chunk_size": "abc"}, "'chunk_size' has the wrong type"),
        ({"chunk_size": 4}, "bad plan parameters: chunk_size"),
    ],
)
def test_bad_manifest(plan_dir: Path, change: dict[str, object], match: str) -> None:
    _edit_manifest(plan_dir, change)
    with pytest.raises(PlanError, match=match):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match=match):
        verify_plan(plan_dir)


@pytest.mark.parametrize(
    ("key", "edit", "match"),
    [
        # 38.0 == 38 in Python: each entry's numbers must be ints, not just equal.
        ("count", float, r"files\[0\] 'count' is \d+\.0, expected \d+"),
        ("bytes", float, r"files\[0\] 'bytes' is \d+\.0, expected \d+"),
        ("blake3", lambda _: "abc", r"files\[0\] has no valid 'blake3' checksum"),
        ("blake3", lambda _: None, r"files\[0\] has no valid 'blake3' checksum"),
        ("blake3", lambda _: 7, r"files\[0\] has no valid 'blake3' checksum"),
    ],
)
def test_bad_file_entry_in_the_manifest(
    plan_dir: Path, key: str, edit: Callable[[object], object], match: str
) -> None:
    m = json.loads((plan_dir / MANIFEST).read_text())
    m["files"][0][key] = edit(m["files"][0][key])
    (plan_dir / MANIFEST).write_text(json.dumps(m))
    with pytest.raises(PlanError, match=rf"manifest\.json: {match}"):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match=rf"manifest\.json: {match}"):
        verify_plan(plan_dir)


def test_chunk_parameter_ranges_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"chunk_size must be an int in \[1, 2\*\*63 - 1\], got 0"):
        write_plan(tmp_path / "p", 100, 10, 2, kind="chunked", chunk_size=0)


def test_paths_and_callbacks_are_checked_first(plan_dir: Path) -> None:
    with pytest.raises(TypeError, match="out must be a path"):
        write_plan(None, 10, 2, 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a path"):
        open_plan(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a path"):
        verify_plan(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be callable"):
        verify_plan(plan_dir, progress=5)  # type: ignore[arg-type]


def test_numpy_scalars_as_plan_arguments(tmp_path: Path) -> None:
    d = write_plan(
        tmp_path / "p",
        np.int64(100),
        np.int64(10),
        np.int64(2),
        kind="chunked",
        chunk_size=np.int64(4),
        preload_nchunks=np.uint8(2),
        drop_last=np.True_,
    )
    assert d.manifest["chunk_size"] == 4 and type(d.manifest["chunk_size"]) is int
    assert d.drop_last is True
    verify_plan(d.path)


def test_missing_or_broken_manifest(plan_dir: Path, tmp_path: Path) -> None:
    (plan_dir / MANIFEST).write_text("{not json")
    with pytest.raises(PlanError, match="cannot read the manifest"):
        open_plan(plan_dir)
    # Neither a FIFO (opening it would wait for a writer) nor an endless
    # device is read.
    (plan_dir / MANIFEST).unlink()
    os.mkfifo(plan_dir / MANIFEST)
    with pytest.raises(PlanError, match="not a regular file"):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(plan_dir, 100, 10, 2, force=True)
    (plan_dir / MANIFEST).unlink()
    (plan_dir / MANIFEST).symlink_to("/dev/zero")  # refused as a link, before any read
    with pytest.raises(PlanError, match="is a link"):
        verify_plan(plan_dir)
    (plan_dir / MANIFEST).unlink()
    with pytest.raises(PlanError, match="missing"):
        verify_plan(plan_dir)
    with pytest.raises(PlanError, match="does not exist"):
        open_plan(tmp_path / "nowhere")


def test_world_size_epoch_and_rank_must_match(plan_dir: Path) -> None:
    with pytest.raises(PlanError, match="written for world_size=4, not 3"):
        open_plan(plan_dir, world_size=3)
    with pytest.raises(ValueError, match=r"world_size must be an int in \[1, "):
        open_plan(plan_dir, world_size=0)
    d = open_plan(plan_dir, world_size=4)
    with pytest.raises(PlanError, match="written for world_size=4, not 8"):
        d.rank_ids(0, 1, world_size=8)
    with pytest.raises(PlanError, match="epoch 7 is not in the plan"):
        d.rank_ids(7, 0)
    with pytest.raises(PlanError, match=r"rank must be in \[0, 3\]"):
        d.rank_ids(0, 4)
    with pytest.raises(TypeError, match="world_size must be an int, got str"):
        d.rank_ids(0, 1, world_size="4")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"world_size must be an int in \[1, "):
        d.rank_ids(0, 1, world_size=0)
    assert len(d.rank_ids(0, 1, world_size=np.int64(4))) == 10_000
    assert len(d.rank_ids(np.array(1), np.array(2), world_size=np.array(4))) == 10_000


def _rewrite_ids(d: Path, epoch: int, rank: int, edit: object) -> None:
    """Changes a file's ids and updates the manifest's checksum, so only the
    plan invariants can catch it."""
    f = rank_file(d, epoch, rank)
    ids = np.load(f).copy()
    edit(ids)  # type: ignore[operator]
    f.write_bytes(_native.npy_header(len(ids)) + ids.astype("<i8").tobytes())
    m = json.loads((d / MANIFEST).read_text())
    entry = next(e for e in m["files"] if e["epoch"] == epoch and e["rank"] == rank)
    entry["blake3"] = _testing.file_checksum(f)
    m["manifest_checksum"] = manifest_checksum(m)  # sealed again, as a writer would
    (d / MANIFEST).write_text(json.dumps(m))
    open_plan(d).rank_ids(epoch, rank)  # the checksum is consistent again


def test_duplicate_id_is_caught_where_it_was_written(plan_dir: Path) -> None:
    other = np.load(rank_file(plan_dir, 1, 0))

    def dup(ids: np.ndarray) -> None:
        ids[9000] = other[5]

    _rewrite_ids(plan_dir, 1, 3, dup)
    with pytest.raises(
        PlanError,
        match=rf"epoch-0001/rank-00003\.npy: id {other[5]} at index 9000 differs from the plan's",
    ):
        verify_plan(plan_dir)


def test_reordered_ids_are_caught(plan_dir: Path) -> None:
    # Swaps keep every id once (coverage holds) but move samples to another
    # rank or another step: the files no longer hold the plan.
    first = np.load(rank_file(plan_dir, 0, 1))

    def swap_within(ids: np.ndarray) -> None:
        ids[5000], ids[7500] = ids[7500], ids[5000]

    _rewrite_ids(plan_dir, 0, 0, swap_within)
    with pytest.raises(
        PlanError, match=r"epoch-0000/rank-00000\.npy: id \d+ at index 5000 differs"
    ):
        verify_plan(plan_dir)
    _rewrite_ids(plan_dir, 0, 0, swap_within)  # swapped back
    verify_plan(plan_dir)
    zero = np.load(rank_file(plan_dir, 0, 0))

    def take_from(source: np.ndarray) -> Callable[[np.ndarray], None]:
        def edit(ids: np.ndarray) -> None:
            ids[9000] = source[9000]

        return edit

    _rewrite_ids(plan_dir, 0, 0, take_from(first))
    _rewrite_ids(plan_dir, 0, 1, take_from(zero))
    with pytest.raises(
        PlanError, match=r"epoch-0000/rank-00000\.npy: id \d+ at index 9000 differs"
    ):
        verify_plan(plan_dir)


def test_duplicate_id_is_caught_by_the_bitmap_when_the_order_is_not_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # kind="uniform" without a dropped step, and no room for its permutation:
    # it is not rebuilt, the ids are checked for coverage only.
    monkeypatch.setattr(verify, "uniform_fits", lambda spec: False)
    d = write_plan(tmp_path / "u", 20_000, 1000, 2, kind="uniform").path
    other = np.load(rank_file(d, 0, 0))

    def dup(ids: np.ndarray) -> None:
        ids[9000] = other[5]

    _rewrite_ids(d, 0, 1, dup)
    with pytest.raises(PlanError, match=rf"rank-0000[01]\.npy: id {other[5]} .*second time"):
        verify_plan(d)


@pytest.mark.parametrize("room", [True, False])
def test_uniform_plans_are_compared_where_memory_allows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, room: bool
) -> None:
    # Two ids swapped inside a rank file (checksums sealed again) keep the
    # coverage: only a comparison with the recomputed permutation sees them.
    # It is built when it fits in memory; otherwise the ids are counted, and
    # verify_plan says so.
    monkeypatch.setattr(verify, "uniform_fits", lambda spec: room)
    d = write_plan(tmp_path / "u", 20_000, 1000, 2, kind="uniform").path
    assert verify_plan(d) is room

    def swap(ids: np.ndarray) -> None:
        ids[[10, 20]] = ids[[20, 10]]

    _rewrite_ids(d, 0, 1, swap)
    if room:
        with pytest.raises(PlanError, match=r"rank-00001\.npy"):
            verify_plan(d)
    else:
        assert verify_plan(d) is False


def test_out_of_range_and_altered_ids(plan_dir: Path) -> None:
    def big(ids: np.ndarray) -> None:
        ids[9999] = 40_000

    _rewrite_ids(plan_dir, 0, 2, big)
    with pytest.raises(PlanError, match=r"rank-00002\.npy: id 40000 at index 9999 is outside"):
        verify_plan(plan_dir)


@pytest.mark.parametrize("kind", ["cipher", "uniform"])
def test_dropped_id_in_place_of_a_kept_one(tmp_path: Path, kind: str) -> None:
    # 20,000 samples in steps of 3,000: the last 2,000 are dropped. Putting one
    # of them in place of a kept id keeps every id distinct and the count
    # right; only the membership check sees it.
    d = tmp_path / "plan"
    write_plan(d, 20_000, 3000, 2, epochs=(0,), kind=kind, drop_last=True)
    order = np.asarray(ep.permutation(20_000, seed=0, epoch=0, kind=kind))
    dropped = int(order[-1])

    def swap_in(ids: np.ndarray) -> None:
        ids[5000] = dropped

    _rewrite_ids(d, 0, 0, swap_in)
    with pytest.raises(
        PlanError, match=rf"rank-00000\.npy: id {dropped} at index 5000 is not in the epoch's steps"
    ):
        verify_plan(d)


def test_altered_prefix_differs_from_the_plan(plan_dir: Path) -> None:
    def swap(ids: np.ndarray) -> None:
        ids[[3, 4]] = ids[[4, 3]]

    _rewrite_ids(plan_dir, 0, 1, swap)
    with pytest.raises(
        PlanError, match=r"rank-00001\.npy: id \d+ at index 3 differs from the plan"
    ):
        verify_plan(plan_dir)


# ------------------------------------------------------------- atomicity


def test_keyboard_interrupt_leaves_nothing(tmp_path: Path) -> None:
    calls = 0

    def progress(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_plan(tmp_path / "p", 50_000_000, 1000, 2, progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_error_in_progress_propagates(tmp_path: Path) -> None:
    def progress(done: int, total: int) -> None:
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        write_plan(tmp_path / "p", 50_000_000, 1000, 2, progress=progress)
    assert list(tmp_path.iterdir()) == []


def _start_writer(out: Path) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        from epochplan.planfile import write_plan
        write_plan({str(out)!r}, 60_000_000, 1000, 2, epochs=(0, 1))
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], text=True)


def _wait_for_partial(parent: Path, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in parent.iterdir():
            if ".partial-" in p.name:
                files = list(p.rglob("*.npy"))
                if files and files[0].stat().st_size > 1 << 20:
                    return p
        time.sleep(0.02)
    raise AssertionError("the writer did not start")


def test_sigkill_mid_write_leaves_nothing_valid(tmp_path: Path) -> None:
    out = tmp_path / "p"
    proc = _start_writer(out)
    partial = _wait_for_partial(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    with pytest.raises(PlanError):
        open_plan(out)
    with pytest.raises(PlanError, match="missing"):
        verify_plan(partial)
    # The next write to the same place removes the dead writer's leftovers.
    write_plan(out, 1000, 10, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    verify_plan(out)


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated by SIGTERM"),
        (signal.SIGHUP, 129, "terminated by SIGHUP"),
    ],
)
@pytest.mark.parametrize("demo", [False, True])
def test_signal_mid_write_cleans_up(
    tmp_path: Path, sig: signal.Signals, code: int, message: str, demo: bool
) -> None:
    # With --out, the partial directory goes; without (the demo), the
    # temporary directory made for the plan goes too.
    out = [] if demo else ["--out", str(tmp_path / "p")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", "plan", "-n", "6e7", "-w", "2", *out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        # A test run started in the background (`pytest &`) ignores SIGINT, and
        # one under nohup SIGHUP, and so would the writer: it gets the default
        # dispositions back.
        preexec_fn=_default_signals,
    )
    if demo:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("epochplan-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        _wait_for_partial(next(tmp_path.glob("epochplan-*")))
    else:
        _wait_for_partial(tmp_path)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert stderr.strip() == f"epochplan plan: {message}"
    assert list(tmp_path.iterdir()) == []


def test_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    # Under nohup SIGHUP is ignored: the write goes on to the end.
    out = tmp_path / "p"
    args = ["plan", "-n", "6e7", "-w", "2", "--no-verify", "-q", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    _wait_for_partial(tmp_path)
    assert proc.poll() is None  # still writing when the signal comes
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    verify_plan(out)


# ---------------------------------------------------------- resources


def _peak_rss_of_write(tmp_path: Path, n: int) -> int:
    out = tmp_path / f"p{n}"
    code = textwrap.dedent(
        f"""
        import resource
        from epochplan.planfile import write_plan
        import epochplan
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        write_plan({str(out)!r}, {n}, 4096, 1)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    size = sum(f.stat().st_size for f in out.rglob("*.npy"))
    assert size > 8 * n
    return int(res.stdout.strip()) * 1024


def test_memory_does_not_grow_with_n(tmp_path: Path) -> None:
    small = _peak_rss_of_write(tmp_path, 1_000_000)
    large = _peak_rss_of_write(tmp_path, 40_000_000)  # a 320 MB file
    # Buffers are a few 8 MiB chunks either way; the file is 40x larger.
    assert large < 80 * 2**20, large
    assert large - small < 32 * 2**20, (small, large)


def test_gil_is_released_while_writing(tmp_path: Path) -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    seen: list[int] = []
    t = threading.Thread(target=count)
    t.start()
    try:
        write_plan(tmp_path / "p", 20_000_000, 1000, 2, progress=lambda a, b: seen.append(ticks))
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 2
    # The counting thread kept running between progress calls.
    assert seen[-1] - seen[0] > 10_000, seen


def test_files_load_in_a_forked_worker(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", 10_000, 100, 2)
    want = d.rank_ids(0, 1).sum()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = open_plan(d.path).rank_ids(0, 1).sum() == want
        verify_plan(d.path)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


# ---------------------------------------------------------- PlanSampler


@pytest.mark.parametrize(
    ("n", "g", "w", "b", "kind", "drop_last"),
    [
        (1000, 64, 3, 5, "cipher", False),
        (1001, 100, 8, 4, "uniform", True),
        (50, 40, 8, 1, "chunked", False),
    ],
)
def test_plan_sampler_matches_elastic_batch_sampler(
    tmp_path: Path, n: int, g: int, w: int, b: int, kind: str, drop_last: bool
) -> None:
    pt = pytest.importorskip("epochplan.torch")
    chunks = {"chunk_size": 7, "preload_nchunks": 2} if kind == "chunked" else {}
    d = write_plan(
        tmp_path / "p", n, g, w, seed=4, epochs=(1, 2), kind=kind, drop_last=drop_last, **chunks
    )
    for rank in range(w):
        mine = pt.PlanSampler(d.path, micro_batch_size=b, rank=rank, num_replicas=w)
        theirs = pt.ElasticBatchSampler(
            n, g, b, num_replicas=w, rank=rank, seed=4, kind=kind, drop_last=drop_last, **chunks
        )
        assert mine.epoch == 1
        for epoch in (1, 2):
            mine.set_epoch(epoch)
            theirs.set_epoch(epoch)
            got, want = list(mine), list(theirs)
            assert len(mine) == len(theirs) == len(got) == len(want)
            for x, y in zip(got, want, strict=True):
                assert list(x) == list(y)
                np.testing.assert_array_equal(x.weights, y.weights)
                assert (x.step, x.step_end) == (y.step, y.step_end)


def test_plan_sampler_reads_steps_from_the_file(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", 1000, 64, 3)
    s = pt.PlanSampler(d.path, micro_batch_size=8, rank=1, num_replicas=3)
    for step in (0, 2, s.plan.num_steps - 1):
        ids = s._step_ids(step)
        assert not ids.flags.writeable
        np.testing.assert_array_equal(ids, s.plan.step_indices(step, 1, 3))


@pytest.mark.parametrize("keep", [200, 4096])
def test_plan_sampler_on_a_file_cut_short_raises(tmp_path: Path, keep: int) -> None:
    # A rank file truncated in place after the sampler checked it (a copy over
    # it, say): a memory map would kill the process with SIGBUS past the last
    # page, or read zeros within it. Run in a subprocess so a crash shows.
    pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", 20_000, 100, 1)
    code = f"""
import os
import re
from epochplan.planfile import PlanError
from epochplan.torch import PlanSampler
s = PlanSampler({str(d.path)!r}, micro_batch_size=10, num_replicas=1, rank=0)
os.truncate({str(rank_file(d.path, 0, 0))!r}, {keep})
try:
    for batch in s:
        pass
except PlanError as e:
    print("PlanError", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PlanError") and "cut short after it was checked" in out.stdout


def test_plan_sampler_resumes_like_elastic_batch_sampler(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", 5000, 128, 4, seed=1, epochs=(0, 1))
    s = pt.PlanSampler(d.path, micro_batch_size=16, rank=2, num_replicas=4, epoch=1)
    it = iter(s)
    for _ in range(7):
        next(it)
    state = s.state_dict()
    ref = pt.ElasticBatchSampler(5000, 128, 16, num_replicas=4, rank=2, seed=1)
    ref.set_epoch(1)
    assert state == ref.state_dict_at_step(state["cursor"] // 128)
    resumed = pt.PlanSampler(d.path, micro_batch_size=16, rank=2, num_replicas=4)
    resumed.load_state_dict(state)
    ref.load_state_dict(state)
    assert [list(x) for x in resumed] == [list(x) for x in ref]
    # A state of an epoch that is not in the plan cannot load, nor one of another seed.
    other = dict(state, epoch=5)
    with pytest.raises(PlanError, match="epoch 5 is not in the plan"):
        resumed.load_state_dict(other)
    with pytest.raises(PlanError, match="the plan has seed 1, not 4"):
        resumed.load_state_dict(dict(state, seed=4))
    # A refused state changes nothing: the next iteration is epoch 1 from step 0.
    assert resumed.seed == 1 and resumed.epoch == 1
    ref.set_epoch(0)
    ref.set_epoch(1)
    assert [list(x) for x in resumed] == [list(x) for x in ref]


def test_plan_sampler_rejects_what_it_cannot_serve(plan_dir: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    with pytest.raises(PlanError, match="written for world_size=4, not 3"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=3)
    with pytest.raises(PlanError, match="epoch 9 is not in the plan"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=4, epoch=9)
    s = pt.PlanSampler(plan_dir, micro_batch_size=4, rank=1, num_replicas=4)
    with pytest.raises(PlanError, match="epoch 3 is not in the plan"):
        s.set_epoch(3)
    f = rank_file(plan_dir, 1, 1)
    data = bytearray(f.read_bytes())
    data[-9] ^= 4
    f.write_bytes(bytes(data))
    with pytest.raises(PlanError, match="checksum mismatch"):
        s.set_epoch(1)
    f.write_bytes(bytes(data[:-8]))
    with pytest.raises(PlanError, match="the manifest says"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=1, num_replicas=4, epoch=1)
    rank_file(plan_dir, 0, 2).unlink()
    with pytest.raises(PlanError, match="missing rank file"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=2, num_replicas=4)
    _edit_manifest(plan_dir, {"plan_file_version": 7})
    with pytest.raises(PlanError, match="plan_file_version is 7"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=4)


def test_plan_sampler_of_a_uniform_plan_serves_its_files(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", 3000, 96, 3, seed=4, kind="uniform", drop_last=True)
    s = pt.PlanSampler(d.path, micro_batch_size=10, rank=2, num_replicas=3)
    ref = pt.ElasticBatchSampler(
        3000, 96, 10, num_replicas=3, rank=2, seed=4, kind="uniform", drop_last=True
    )
    assert [(list(x), x.weights.tolist()) for x in s] == [
        (list(x), x.weights.tolist()) for x in ref
    ]
    assert s.plan.kind == "uniform" and len(s) == len(ref)
    # States say "uniform" and pass between the two samplers.
    state = s.state_dict_at_step(7)
    assert state == ref.state_dict_at_step(7)
    ref.load_state_dict(state)
    s.load_state_dict(ref.state_dict_at_step(9))
    assert [list(x) for x in s] == [list(x) for x in ref if x.step >= 9]
    with pytest.raises(
        ValueError, match="state_dict\\['kind'\\] is 'identity' but this sampler has kind='uniform'"
    ):
        s.load_state_dict(dict(state, kind="identity"))


def test_plan_sampler_of_a_uniform_plan_holds_no_permutation(tmp_path: Path) -> None:
    # 2 * 10^7 samples: the permutation would be 160 MB on every rank.
    write_plan(tmp_path / "p", 2 * 10**7, 4096, 8, kind="uniform")
    code = (
        "import resource, sys; from epochplan.torch import PlanSampler;"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "s = PlanSampler(sys.argv[1], micro_batch_size=512, rank=3, num_replicas=8);"
        "s.load_state_dict(s.state_dict_at_step(100)); next(iter(s));"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "p")],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    assert int(out.stdout) < 50 * 10**6, out.stdout


def test_plan_sampler_pickles_without_its_memory_map(tmp_path: Path) -> None:
    import pickle

    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", 1000, 64, 2, epochs=(3, 4))
    s = pt.PlanSampler(d.path, micro_batch_size=8, rank=1, num_replicas=2)
    for epoch in (3, 4):
        s.set_epoch(epoch)
        blob = pickle.dumps(s)
        assert len(blob) < 4096
        assert [list(x) for x in pickle.loads(blob)] == [list(x) for x in s]
    ref = pt.ElasticBatchSampler(1000, 64, 8, num_replicas=2, rank=1)
    ref.set_epoch(4)
    assert [list(x) for x in pickle.loads(blob)] == [list(x) for x in ref]


def test_unwritable_output_is_a_plan_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker / "plan", tmp_path / ("x" * 300)):
        with pytest.raises(PlanError, match="cannot write there"):
            write_plan(out, 100, 8, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_huge_plan_is_refused_for_disk(tmp_path: Path) -> None:
    assert _native.npy_file_size(2**61) == 2**64 + 128
    with pytest.raises(PlanError, match="of disk"):
        write_plan(tmp_path / "big", 2**62, 8, 1)


def test_disk_need_counts_whole_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 rank files of a 128-byte header each: 128 kB of bytes, 4 MB of blocks.
    fs = os.statvfs(tmp_path)
    small = type("FakeStatvfs", (), {"f_frsize": 4096, "f_bavail": 100})
    monkeypatch.setattr(os, "statvfs", lambda path: small if path == tmp_path else fs)
    with pytest.raises(PlanError, match=r"needs 4\.1 MB of disk, only 409\.6 KB is free"):
        write_plan(tmp_path / "p", 10, 10, 1000)
    assert list(tmp_path.iterdir()) == []


def test_uniform_plans_need_the_permutation_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write, "available_memory", lambda: 100_000)
    with pytest.raises(PlanError, match=r"kind='uniform' holds the whole permutation in memory"):
        write_plan(tmp_path / "p", 10_000, 100, 2, kind="uniform")
    assert list(tmp_path.iterdir()) == []
    # The cipher order is computed a chunk at a time.
    write_plan(tmp_path / "p", 10_000, 100, 2)


def test_verifying_needs_the_permutation_only_when_steps_leave_ids_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bitmap of N/8 = 12.5 MB; with drop_last and N % G, the uniform
    # permutation too (1.6 GB at N = 10^8).
    monkeypatch.setattr(verify, "available_memory", lambda: 10**9)

    def check(path: Path, n: int, g: int, kind: str, drop_last: bool) -> None:
        verify.check_verify_memory(path, PlanSpec(n, g, 0, kind, None, None, drop_last))

    check(tmp_path, 10**8, 1000, "uniform", True)
    check(tmp_path, 10**8 + 1, 1000, "uniform", False)
    check(tmp_path, 10**8 + 1, 1000, "cipher", True)
    with pytest.raises(PlanError, match="a bitmap of N/8 and the uniform permutation"):
        check(tmp_path, 10**8 + 1, 1000, "uniform", True)
    with pytest.raises(PlanError, match="a bitmap of N/8 = "):
        check(tmp_path, 10**10, 1000, "cipher", False)


def test_partials_of_live_writers_are_kept(tmp_path: Path) -> None:
    # Only a partial whose writer's lock is free is removed, whatever pid its
    # name holds: a writer in another pid namespace (a container) or on
    # another host may have any pid, and one that died here may have a live
    # one. A pid no process has: past the kernel's pid_max.
    gone = 2**22 + 1
    dead = tmp_path / f".p.partial-{gone}-0000abcd"
    dead_old = tmp_path / f".p.partial-{os.getpid()}-old-0000abce"
    live = tmp_path / f".p.partial-{gone}-0000abcf"
    unlocked = tmp_path / f".p.partial-{gone}-0000abd0"  # no lock file: kept
    other = tmp_path / f".p.partial-{gone}-notours"  # not the shape of ours
    for partial in (dead, dead_old, live, unlocked, other):
        partial.mkdir()
        (partial / "x").write_text("in progress")
    for partial in (dead, dead_old, live, other):
        (partial / publish.LOCK).write_text("")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys; fd = os.open(sys.argv[1], os.O_RDWR); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); sys.stdin.read()",
            str(live / publish.LOCK),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        write_plan(tmp_path / "p", 100, 10, 2)
    finally:
        holder.communicate("")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [live.name, unlocked.name, other.name, "p"]
    )


def test_no_partial_is_removed_where_locks_may_not_be_shared(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # On NFS, SMB or FUSE a writer on another host may hold a lock this
    # kernel cannot see: nothing is removed there.
    dead = tmp_path / f".p.partial-{2**22 + 1}-0000abcd"
    dead.mkdir()
    (dead / publish.LOCK).write_text("")
    monkeypatch.setattr(publish, "is_local_filesystem", lambda path: False)
    write_plan(tmp_path / "p", 100, 10, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [dead.name, "p"]


def test_published_plans_hold_no_lock_file(tmp_path: Path) -> None:
    out = tmp_path / "p"
    write_plan(out, 100, 10, 2)
    write_plan(out, 60, 10, 3, force=True)
    assert not (out / publish.LOCK).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_failed_write_removes_the_parents_it_created(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep").write_text("x")

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    for out in (tmp_path / "a" / "b" / "c" / "plan", tmp_path / "d" / "plan"):
        with pytest.raises(KeyboardInterrupt):
            write_plan(out, 1000, 10, 2, progress=stop)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "keep"]
    # Parents that exist stay, as does a plan written into new ones.
    write_plan(tmp_path / "a" / "e" / "plan", 10, 10, 1)
    assert (tmp_path / "a" / "e" / "plan" / MANIFEST).is_file()


def test_deeply_nested_manifest(plan_dir: Path) -> None:
    (plan_dir / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanError, match="cannot read the manifest"):
        open_plan(plan_dir)


def test_manifest_records_the_defaults_the_plan_used(tmp_path: Path) -> None:
    # A chunked plan's preload_nchunks defaults to 1: the manifest says 1, so
    # the files keep their meaning whatever a later default is.
    d = write_plan(tmp_path / "p", 1000, 10, 2, kind="chunked", chunk_size=10)
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert (manifest["chunk_size"], manifest["preload_nchunks"]) == (10, 1)
    assert d.plan(0).preload_nchunks == 1


def test_plan_paths_are_absolute_and_resolved_like_the_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `link/..` is the link target's parent to the system, not the link's
    # folder; and an opened plan keeps working after a chdir.
    (tmp_path / "deep" / "a" / "b").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "deep" / "a" / "b")
    monkeypatch.chdir(tmp_path)
    write_plan("lnk/../p", 100, 10, 2, epochs=range(2))
    assert (tmp_path / "deep" / "a" / "p" / MANIFEST).is_file()
    assert not (tmp_path / "p").exists()
    d = open_plan("lnk/../p")
    assert d.path == tmp_path / "deep" / "a" / "p"
    monkeypatch.chdir(tmp_path / "deep")
    assert len(d.rank_ids(1, 0)) == 50
    verify_plan(d.path)


def test_mapped_rank_files_hold_no_descriptor_and_errors_name_their_file(tmp_path: Path) -> None:
    # numpy's memory maps keep a descriptor each, and rank_ids ran into the
    # open-file limit with "[Errno 24] Too many open files" and no path; its
    # maps now hold none. At the limit itself, the error names the file.
    write_plan(tmp_path / "p", 2000, 100, 64)
    script = f"""
import os, resource
from epochplan.planfile import PlanError, open_plan
d = open_plan({str(tmp_path / "p")!r})
open_now = len(os.listdir("/proc/self/fd"))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 20, hard))
maps = [d.rank_ids(0, rank) for rank in range(64)]
print(sum(len(m) for m in maps), len(os.listdir("/proc/self/fd")) - open_now)
spare = []
try:
    while True:  # every descriptor taken
        spare.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    d.rank_ids(0, 0)
except PlanError as e:
    print(e)
"""
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    counted, error = res.stdout.splitlines()
    ids, new_descriptors = map(int, counted.split())
    assert ids == 2000 and new_descriptors <= 1
    named = r"epoch-0000/rank-00000\.npy: .*[Tt]oo many open files"
    assert re.search(named, error), error
