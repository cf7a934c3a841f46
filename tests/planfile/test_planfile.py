"""Plan directories written: exactly the plan's ids, a sealed manifest, replaced only by force."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan import _native
from epochplan._native import _testing
from epochplan.planfile import (
    MANIFEST,
    PlanError,
    manifest_checksum,
    open_plan,
    publish,
    verify_plan,
    write,
    write_plan,
)
from tests._support.plan_dirs import rank_file

CASES = [
    # (N, G, W, kind, the chunked order's value, drop_last)
    (0, 3, 2, "cipher", None, False),
    (1, 5, 3, "cipher", None, False),
    (1000, 64, 3, "cipher", None, False),
    (1001, 64, 8, "uniform", None, True),
    (5000, 100, 7, "chunked", ep.Chunked(37, 4), False),
    (777, 50, 4, "identity", None, True),
    (70_000, 1000, 2, "cipher", None, True),
]


@pytest.mark.parametrize(("n", "g", "w", "kind", "chunks", "drop_last"), CASES)
def test_files_hold_the_rank_indices(
    tmp_path: Path, n: int, g: int, w: int, kind: str, chunks: ep.Chunked | None, drop_last: bool
) -> None:
    out = tmp_path / "plan"
    order = chunks or kind
    spec = ep.PlanSpec(n, g, seed=5, kind=order, drop_last=drop_last)
    d = write_plan(out, spec, w, epochs=[2, 0])
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
        plan = ep.EpochPlan(n, g, seed=5, epoch=epoch, kind=order, drop_last=drop_last)
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
    d = write_plan(tmp_path / "p", ep.PlanSpec(10_000, 128, seed=9), 3, epochs=range(1, 3))
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


def test_manifest_records_the_defaults_the_plan_used(tmp_path: Path) -> None:
    # A chunked plan's preload_nchunks defaults to 1: the manifest says 1, so
    # the files keep their meaning whatever a later default is.
    d = write_plan(tmp_path / "p", ep.PlanSpec(1000, 10, kind=ep.Chunked(10)), 2)
    manifest = json.loads((tmp_path / "p" / MANIFEST).read_text())
    assert (manifest["chunk_size"], manifest["preload_nchunks"]) == (10, 1)
    assert d.plan(0).preload_nchunks == 1


def test_progress_reaches_the_total(tmp_path: Path) -> None:
    calls: list[tuple[int, int]] = []
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(3_000_000, 100),
        2,
        epochs=(0, 1),
        progress=lambda a, b: calls.append((a, b)),
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
    write_plan(out, ep.PlanSpec(100, 10), 2)
    with pytest.raises(PlanError, match="already exists"):
        write_plan(out, ep.PlanSpec(100, 10), 2)
    d = write_plan(out, ep.PlanSpec(50, 10), 3, force=True)
    assert d.world_size == 3
    verify_plan(out)
    other = tmp_path / "notaplan"
    other.mkdir()
    (other / "keep.txt").write_text("precious")
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(other, ep.PlanSpec(100, 10), 2, force=True)
    assert (other / "keep.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notaplan", "p"]
    # An empty directory made beforehand (mkdir out) is written into without force;
    # a link to one is not.
    empty = tmp_path / "empty"
    empty.mkdir()
    assert write_plan(empty, ep.PlanSpec(100, 10), 2).world_size == 2
    (tmp_path / "target").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "target")
    with pytest.raises(PlanError, match="not a plan directory; refusing"):
        write_plan(tmp_path / "link", ep.PlanSpec(100, 10), 2)
    # Force is offered only where it would replace: for a plan directory.
    (tmp_path / "file").write_text("precious")
    with pytest.raises(PlanError, match="not a plan directory; refusing") as error:
        write_plan(tmp_path / "file", ep.PlanSpec(100, 10), 2)
    assert "force" not in str(error.value)
    with pytest.raises(PlanError, match=r"already exists \(use force=True"):
        write_plan(out, ep.PlanSpec(100, 10), 2)


def test_force_keeps_a_plan_directory_holding_other_files(tmp_path: Path) -> None:
    # Replacing removes everything inside: a user's file or folder kept in a
    # plan directory makes it no longer replaceable.
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2, epochs=range(2))
    for extra in ("my_checkpoint.pt", "data/shard0", "epoch-0000/notes.txt", "epoch-0009/x"):
        path = out / extra
        path.parent.mkdir(exist_ok=True)
        path.write_text("precious")
        with pytest.raises(PlanError, match=f"holds {extra.split('/')[0]}.*not part of its plan"):
            write_plan(out, ep.PlanSpec(100, 10), 3, force=True)
        assert path.read_text() == "precious"
        assert open_plan(out).world_size == 2
        path.unlink()
        if path.parent != out and not any(path.parent.iterdir()):
            path.parent.rmdir()
    # A link inside is not the plan's either, even in place of a listed file or folder.
    (out / "link").symlink_to(out / MANIFEST)
    with pytest.raises(PlanError, match="holds link"):
        write_plan(out, ep.PlanSpec(100, 10), 3, force=True)
    (out / "link").unlink()
    for listed in ("epoch-0001/rank-00001.npy", "epoch-0001"):
        (out / listed).rename(tmp_path / "moved")
        (out / listed).symlink_to(tmp_path / "moved")
        with pytest.raises(PlanError, match=f"holds {listed}, which is not part of its plan"):
            write_plan(out, ep.PlanSpec(100, 10), 3, force=True)
        (out / listed).unlink()
        (tmp_path / "moved").rename(out / listed)
    verify_plan(out)
    assert write_plan(out, ep.PlanSpec(100, 10), 3, force=True).world_size == 3


def test_what_appears_during_a_write_is_kept(tmp_path: Path) -> None:
    # Without force, `out` did not exist when the write began: a directory
    # made there since (another writer, a user) is never replaced.
    out = tmp_path / "p"

    def make_out(done: int, total: int) -> None:
        if not out.exists():
            out.mkdir()
            (out / "notes.txt").write_text("precious")

    with pytest.raises(PlanError, match="appeared while the plan was written") as error:
        write_plan(out, ep.PlanSpec(10_000, 64), 4, epochs=range(2), progress=make_out)
    assert "force" not in str(error.value)  # force would not replace it either
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    # With force, what appeared is checked again before it is replaced.
    (out / "notes.txt").unlink()
    out.rmdir()
    with pytest.raises(PlanError, match="not a plan directory"):
        write_plan(out, ep.PlanSpec(10_000, 64), 4, epochs=range(2), force=True, progress=make_out)
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_on_the_current_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2)
    monkeypatch.chdir(out)
    d = write_plan(".", ep.PlanSpec(60, 10), 3, force=True)
    assert d.path == out and d.world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_swaps_the_plans_in_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Where the system swaps two paths atomically, the old plan is never
    # moved aside: NAME holds a whole plan, old or new, at every moment.
    if publish.renameat2() is None:
        pytest.skip("no renameat2 here")
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2)

    def no_rename(self: Path, target: str | os.PathLike[str]) -> Path:
        raise AssertionError(f"renamed {self} to {target}")

    monkeypatch.setattr(Path, "rename", no_rename)
    d = write_plan(out, ep.PlanSpec(60, 10), 3, force=True)
    monkeypatch.undo()
    assert d.world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


def test_force_without_an_atomic_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(publish, "exchange", lambda a, b: False)
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2)
    assert write_plan(out, ep.PlanSpec(60, 10), 3, force=True).world_size == 3
    verify_plan(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]


@pytest.mark.parametrize("swap", [True, False])
def test_failed_replacement_keeps_the_old_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: bool
) -> None:
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2)
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
        write_plan(out, ep.PlanSpec(60, 10), 3, force=True)
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
        write_plan(tmp_path / "p", ep.PlanSpec(100, 10), 2)
    assert list(tmp_path.iterdir()) == []


def test_paths_must_be_utf8(tmp_path: Path) -> None:
    out = Path(os.fsdecode(bytes(tmp_path) + b"/p\xff"))
    with pytest.raises(PlanError, match="out must be valid UTF-8"):
        write_plan(out, ep.PlanSpec(100, 10), 2)
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
        ({"kind": ep.Chunked}, TypeError),
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
        ({"chunked": (2.5,)}, TypeError),
        ({"chunked": (4, 0)}, ValueError),
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
        # The plan's parameters travel in the spec, checked when it is made.
        if "chunked" in args:
            args["kind"] = ep.Chunked(*args.pop("chunked"))  # type: ignore[misc]
        spec = {k: args.pop(k) for k in ("seed", "kind", "drop_last") if k in args}
        args["spec"] = ep.PlanSpec(args.pop("num_samples"), args.pop("global_batch_size"), **spec)
        write_plan(**args)  # type: ignore[arg-type]
    assert not (tmp_path / "p").exists()
    assert list(tmp_path.iterdir()) == []


def test_a_plan_is_written_from_its_spec(tmp_path: Path) -> None:
    # The old flat form (out, N, G, W) names the argument that replaced it.
    with pytest.raises(TypeError, match="spec must be a PlanSpec"):
        write_plan(tmp_path / "p", 100, 10)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        write_plan(tmp_path / "p", 100, 10, 2)  # type: ignore[call-arg]
    assert list(tmp_path.iterdir()) == []
    spec = ep.PlanSpec(100, 10, seed=4, kind=ep.Chunked(5, 2), drop_last=True)
    d = write_plan(tmp_path / "p", spec, 3, epochs=(0, 2))
    assert (d.num_samples, d.global_batch_size, d.seed, d.drop_last) == (100, 10, 4, True)
    for epoch in (0, 2):
        plan = spec.plan(epoch)
        assert d.plan(epoch) == plan
        for rank in range(3):
            assert d.rank_ids(epoch, rank).tolist() == plan.rank(rank, 3).indices().tolist()


def test_chunk_parameter_ranges_are_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"chunk_size must be an int in \[1, 2\*\*63 - 1\], got 0"):
        write_plan(tmp_path / "p", ep.PlanSpec(100, 10, kind=ep.Chunked(0)), 2)


def test_paths_and_callbacks_are_checked_first(plan_dir: Path) -> None:
    with pytest.raises(TypeError, match="out must be a path"):
        write_plan(None, ep.PlanSpec(10, 2), 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a path"):
        open_plan(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="path must be a path"):
        verify_plan(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress must be callable"):
        verify_plan(plan_dir, progress=5)  # type: ignore[arg-type]


def test_numpy_scalars_as_plan_arguments(tmp_path: Path) -> None:
    d = write_plan(
        tmp_path / "p",
        ep.PlanSpec(
            np.int64(100),
            np.int64(10),
            kind=ep.Chunked(np.int64(4), np.uint8(2)),
            drop_last=np.True_,
        ),
        np.int64(2),
    )
    assert d.manifest["chunk_size"] == 4 and type(d.manifest["chunk_size"]) is int
    assert d.drop_last is True
    verify_plan(d.path)


def test_plan_paths_are_absolute_and_resolved_like_the_system(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `link/..` is the link target's parent to the system, not the link's
    # folder; and an opened plan keeps working after a chdir.
    (tmp_path / "deep" / "a" / "b").mkdir(parents=True)
    (tmp_path / "lnk").symlink_to(tmp_path / "deep" / "a" / "b")
    monkeypatch.chdir(tmp_path)
    write_plan("lnk/../p", ep.PlanSpec(100, 10), 2, epochs=range(2))
    assert (tmp_path / "deep" / "a" / "p" / MANIFEST).is_file()
    assert not (tmp_path / "p").exists()
    d = open_plan("lnk/../p")
    assert d.path == tmp_path / "deep" / "a" / "p"
    monkeypatch.chdir(tmp_path / "deep")
    assert len(d.rank_ids(1, 0)) == 50
    verify_plan(d.path)


def test_unwritable_output_is_a_plan_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    for out in (blocker / "plan", tmp_path / ("x" * 300)):
        with pytest.raises(PlanError, match="cannot write there"):
            write_plan(out, ep.PlanSpec(100, 8), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


def test_huge_plan_is_refused_for_disk(tmp_path: Path) -> None:
    assert _native.npy_file_size(2**61) == 2**64 + 128
    with pytest.raises(PlanError, match="of disk"):
        write_plan(tmp_path / "big", ep.PlanSpec(2**62, 8), 1)


def test_disk_need_counts_whole_blocks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,000 rank files of a 128-byte header each: 128 kB of bytes, 4 MB of blocks.
    fs = os.statvfs(tmp_path)
    small = type("FakeStatvfs", (), {"f_frsize": 4096, "f_bavail": 100})
    monkeypatch.setattr(os, "statvfs", lambda path: small if path == tmp_path else fs)
    with pytest.raises(PlanError, match=r"needs 4\.1 MB of disk, only 409\.6 KB is free"):
        write_plan(tmp_path / "p", ep.PlanSpec(10, 10), 1000)
    assert list(tmp_path.iterdir()) == []


def test_uniform_plans_need_the_permutation_in_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write, "available_memory", lambda: 100_000)
    with pytest.raises(PlanError, match=r"kind='uniform' holds the whole permutation in memory"):
        write_plan(tmp_path / "p", ep.PlanSpec(10_000, 100, kind="uniform"), 2)
    assert list(tmp_path.iterdir()) == []
    # The cipher order is computed a chunk at a time.
    write_plan(tmp_path / "p", ep.PlanSpec(10_000, 100), 2)


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
        write_plan(tmp_path / "p", ep.PlanSpec(100, 10), 2)
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
    write_plan(tmp_path / "p", ep.PlanSpec(100, 10), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == [dead.name, "p"]


def test_published_plans_hold_no_lock_file(tmp_path: Path) -> None:
    out = tmp_path / "p"
    write_plan(out, ep.PlanSpec(100, 10), 2)
    write_plan(out, ep.PlanSpec(60, 10), 3, force=True)
    assert not (out / publish.LOCK).exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
