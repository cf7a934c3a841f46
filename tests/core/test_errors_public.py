"""The typed errors are public (epochplan.errors), and a plan file's I/O
failure is the same class with the same fields whichever layer (the Rust
core or Python) met it."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

import epochplan._native as _native
from epochplan import PlanSpec, errors
from epochplan.planfile import PlanError, open_plan, write_plan
from epochplan.planfile import write as planfile_write
from epochplan.planfile.reader import RankFile


def test_the_error_classes_are_public_and_the_native_ones() -> None:
    assert errors.PlanError is _native.PlanError is PlanError
    for name, base in [
        ("PlanFileNotFoundError", FileNotFoundError),
        ("PlanPermissionError", PermissionError),
        ("PlanFileExistsError", FileExistsError),
        ("PlanOSError", OSError),
    ]:
        cls = getattr(errors, name)
        assert cls is getattr(_native, name)
        assert issubclass(cls, errors.PlanError) and issubclass(cls, base)
        assert name in errors.__all__


def test_a_missing_rank_file_is_a_file_not_found_error_from_python_too(tmp_path: Path) -> None:
    write_plan(tmp_path / "p", PlanSpec(100, 10), 2)
    d = open_plan(tmp_path / "p")
    rank_file = d.path / d.parsed.files[1].path
    rank_file.unlink()
    # Python opens it here (RankFile), the core in verify: the same class.
    with pytest.raises(errors.PlanFileNotFoundError) as info:
        RankFile(rank_file, d.parsed.files[1])
    err = info.value
    assert (err.errno, err.filename) == (errno.ENOENT, str(rank_file))
    assert isinstance(err, FileNotFoundError) and str(err).startswith(f"{rank_file}: ")


def test_a_missing_manifest_is_a_file_not_found_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(errors.PlanFileNotFoundError, match="missing") as info:
        open_plan(tmp_path / "empty")
    assert info.value.errno == errno.ENOENT
    assert info.value.filename == str(tmp_path / "empty" / "manifest.json")


def test_plan_os_error_keeps_the_kind_and_fields() -> None:
    cases = [
        (errno.ENOENT, errors.PlanFileNotFoundError),
        (errno.EACCES, errors.PlanPermissionError),
        (errno.EPERM, errors.PlanPermissionError),
        (errno.EEXIST, errors.PlanFileExistsError),
        (errno.ENOSPC, errors.PlanOSError),
    ]
    for code, cls in cases:
        err = errors.plan_os_error("f: cannot write", OSError(code, os.strerror(code), "f"))
        assert type(err) is cls and err.errno == code and err.filename == "f"
        assert str(err) == "f: cannot write" and err.strerror == os.strerror(code)
    moved = errors.plan_os_error("out: x", OSError(errno.EIO, "I/O", "/tmp/partial"), "out")
    assert moved.filename == "out"


def test_a_lock_that_cannot_be_taken_surfaces_as_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Taking the writer's lock fails: the user sees that failure (typed,
    # with its errno), not an UnboundLocalError, and nothing is left behind.
    def refuse(directory: Path) -> None:
        raise PermissionError(errno.EACCES, "Permission denied", str(directory / ".lock"))

    monkeypatch.setattr(planfile_write, "WriterLock", refuse)
    with pytest.raises(errors.PlanPermissionError) as info:
        write_plan(tmp_path / "p", PlanSpec(100, 10), 2)
    assert info.value.errno == errno.EACCES
    assert str(info.value).startswith(f"{tmp_path / 'p'}: cannot write there: ")
    assert sorted(os.listdir(tmp_path)) == []
