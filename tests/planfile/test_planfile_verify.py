"""Plan directories read back: every edited, cut, flipped or linked byte refused by name."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan import _native
from epochplan._native import _testing
from epochplan.planfile import (
    MANIFEST,
    PlanError,
    PlanSpec,
    manifest_checksum,
    open_plan,
    reader,
    verify,
    verify_plan,
    write_plan,
)
from tests._support.plan_dirs import edit_manifest, rank_file
from tests.planfile._manifest_flips import assert_every_manifest_byte_refused


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
    edit_manifest(plan_dir, change)
    with pytest.raises(PlanError, match="manifest_checksum does not match"):
        open_plan(plan_dir)
    with pytest.raises(PlanError, match="manifest_checksum does not match"):
        verify_plan(plan_dir)


def test_every_byte_of_a_manifest_is_authenticated(tmp_path: Path) -> None:
    # One bit flipped at each byte of a small plan's manifest: all four
    # readers refuse every one with a PlanError naming the manifest.
    pt = pytest.importorskip("epochplan.torch")
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(40, 8, seed=5), 2, epochs=(0, 1))
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
    write_plan(out, ep.PlanSpec(400_000, 1000), 2)
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
    write_plan(out, ep.PlanSpec(1000, 100), 2)
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
    edit_manifest(plan_dir, change)
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
        write_plan(plan_dir, ep.PlanSpec(100, 10), 2, force=True)
    (plan_dir / MANIFEST).unlink()
    (plan_dir / MANIFEST).symlink_to("/dev/zero")  # refused as a link, before any read
    with pytest.raises(PlanError, match="is a link"):
        verify_plan(plan_dir)
    (plan_dir / MANIFEST).unlink()
    with pytest.raises(PlanError, match="missing"):
        verify_plan(plan_dir)
    with pytest.raises(PlanError, match="does not exist"):
        open_plan(tmp_path / "nowhere")


def test_deeply_nested_manifest(plan_dir: Path) -> None:
    (plan_dir / MANIFEST).write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(PlanError, match="cannot read the manifest"):
        open_plan(plan_dir)


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
    d = write_plan(tmp_path / "u", ep.PlanSpec(20_000, 1000, kind="uniform"), 2).path
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
    d = write_plan(tmp_path / "u", ep.PlanSpec(20_000, 1000, kind="uniform"), 2).path
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
    write_plan(d, ep.PlanSpec(20_000, 3000, kind=kind, drop_last=True), 2, epochs=(0,))
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


def test_verifying_needs_the_permutation_only_when_steps_leave_ids_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A bitmap of N/8 = 12.5 MB; with drop_last and N % G, the uniform
    # permutation too (1.6 GB at N = 10^8).
    monkeypatch.setattr(verify, "available_memory", lambda: 10**9)

    def check(path: Path, n: int, g: int, kind: str, drop_last: bool) -> None:
        verify.check_verify_memory(path, PlanSpec(n, g, seed=0, kind=kind, drop_last=drop_last))

    check(tmp_path, 10**8, 1000, "uniform", True)
    check(tmp_path, 10**8 + 1, 1000, "uniform", False)
    check(tmp_path, 10**8 + 1, 1000, "cipher", True)
    with pytest.raises(PlanError, match="a bitmap of N/8 and the uniform permutation"):
        check(tmp_path, 10**8 + 1, 1000, "uniform", True)
    with pytest.raises(PlanError, match="a bitmap of N/8 = "):
        check(tmp_path, 10**10, 1000, "cipher", False)
