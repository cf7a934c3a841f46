"""Atomic publication of a plan directory.

A plan is written into a hidden sibling ``.NAME.partial-PID-...`` and renamed
into place once complete, so ``NAME`` never holds part of a plan. Replacing a
plan swaps the two directories in one step (Linux's ``renameat2`` with
``RENAME_EXCHANGE``) where the system can, and otherwise moves the old plan
aside first.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import re
import secrets
import shutil
import sys
from pathlib import Path
from typing import Any

from epochplan._system import is_local_filesystem
from epochplan.planfile.errors import PlanError
from epochplan.planfile.manifest import MANIFEST, PLAN_FILE_FORMAT, read_json

__all__ = [
    "LOCK",
    "WriterLock",
    "exchange",
    "fsync_dir",
    "is_empty_dir",
    "new_partial",
    "publish",
    "remove_stale_partials",
    "why_not_replaceable",
]

_PARTIAL = ".partial-"
# What a partial's name holds after ".NAME.partial-": the writer's pid, "old-"
# for a replaced plan on its way out, and 8 hex digits of its own.
_PARTIAL_TAIL = re.compile(r"[0-9]+-(?:old-)?[0-9a-f]{8}")
#: The file inside a partial directory that its writer holds locked while alive.
LOCK = ".writer.lock"


def new_partial(out: Path, tag: str = "") -> Path:
    """A fresh hidden sibling name of ``out`` for a write in progress."""
    return out.parent / f".{out.name}{_PARTIAL}{os.getpid()}-{tag}{secrets.token_hex(4)}"


class WriterLock:
    """The lock a writer holds on its partial directory while it is alive.

    ``fcntl.flock`` on :data:`LOCK` inside the directory: the kernel releases
    it when the writer dies, however it dies, so a partial whose lock can be
    taken is abandoned. :meth:`release` removes the file before the directory
    is published (a plan directory holds only its manifest and rank files);
    from then on the partial is never taken for abandoned.
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / LOCK
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.release()
            raise

    def release(self) -> None:
        """Removes the lock file and lets the lock go (at most once)."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()
        os.close(self._fd)
        self._fd = None


def _abandoned(partial: Path) -> bool:
    """Whether ``partial`` was left by a writer that is gone: its lock file
    exists and nobody holds its lock. A partial without a lock file (an
    older writer's, or one being published) is never taken for abandoned."""
    try:
        fd = os.open(partial / LOCK, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False  # held: its writer is alive, on this host or another
    finally:
        os.close(fd)
    return True


def remove_stale_partials(out: Path) -> None:
    """Removes hidden partial siblings of ``out`` that writers which died
    left behind: only directories named as our partials are, whose writer's
    lock is free, on a filesystem whose locks every writer shares."""
    if not is_local_filesystem(out.parent):
        return
    prefix = f".{out.name}{_PARTIAL}"
    with contextlib.suppress(OSError):
        for entry in out.parent.iterdir():
            tail = entry.name[len(prefix) :]
            if not entry.name.startswith(prefix) or not _PARTIAL_TAIL.fullmatch(tail):
                continue
            if entry.is_dir() and not entry.is_symlink() and _abandoned(entry):
                shutil.rmtree(entry, ignore_errors=True)


def fsync_dir(path: Path) -> None:
    """Makes a directory's entries durable (where the system allows)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def why_not_replaceable(path: Path) -> str | None:
    """None for an empty directory or a plan directory holding nothing but its
    manifest and the files it lists; else why ``path`` must not be replaced
    (replacing removes everything in it: never a link, other data, or a
    user's files kept beside a plan)."""
    if path.is_symlink() or not path.is_dir():
        return "is not a plan directory"
    if not any(path.iterdir()):
        return None
    try:
        manifest = read_json(path / MANIFEST)
    except (OSError, ValueError, RecursionError):
        manifest = None
    is_plan = isinstance(manifest, dict) and manifest.get("format") == PLAN_FILE_FORMAT
    files = manifest.get("files") if is_plan else None
    if not isinstance(files, list):
        return "is not a plan directory"
    space = manifest.get("space")
    space_files = space.get("files") if isinstance(space, dict) else None
    for more in (manifest.get("token_files"), space_files):
        if isinstance(more, list):
            files = files + more
    listed = {MANIFEST} | {str(f.get("path")) for f in files if isinstance(f, dict)}
    folders = {str(Path(name).parent) for name in listed} - {"."}
    for entry in path.rglob("*"):
        name = entry.relative_to(path).as_posix()
        plan_entry = name in folders if entry.is_dir() else name in listed
        if entry.is_symlink() or not plan_entry:
            return f"holds {name}, which is not part of its plan"
    return None


def is_empty_dir(path: Path) -> bool:
    """A directory itself (not a link to one) with nothing in it."""
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def publish(tmp: Path, lock: WriterLock, out: Path, force: bool) -> None:
    """Renames the finished ``tmp`` to ``out``; ``lock`` is the writer's lock
    of ``tmp``, released first (its file must not be published).

    Without ``force``, ``out`` did not exist when the write began: whatever
    appeared there since is kept (a rename replaces at most an empty
    directory) and the write fails. With ``force``, an existing ``out`` is
    checked replaceable again and swapped with ``tmp`` in one step, so that
    ``out`` always holds a whole plan, old or new; the old one, now under
    the partial name, is removed. Where the system cannot swap, the old plan
    is moved aside under a hidden partial name (so an interruption leaves it
    for the next write to remove as stale), replaced, then removed; if the
    replacement fails, it is moved back."""
    lock.release()
    fsync_dir(tmp)
    if not force:
        try:
            os.rename(tmp, out)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            hint = ""
            if why_not_replaceable(out) is None:
                hint = " (use force=True, or --force, to replace it)"
            raise PlanError(
                f"{out} appeared while the plan was written ({e.strerror or e}); "
                f"not replacing it{hint}"
            ) from None
        fsync_dir(out.parent)
        return
    trash = None
    if out.exists() or out.is_symlink():
        why = why_not_replaceable(out)
        if why is not None:
            raise PlanError(f"{out} exists and {why}; refusing to replace it")
        if exchange(tmp, out):
            fsync_dir(out.parent)
            _remove_locked(tmp)
            return
        trash = new_partial(out, "old-")
        out.rename(trash)
    try:
        tmp.rename(out)
    except BaseException:
        if trash is not None:
            trash.rename(out)
        raise
    fsync_dir(out.parent)
    if trash is not None:
        _remove_locked(trash)


def _remove_locked(old: Path) -> None:
    """Removes a replaced plan now under a partial name, locked as a writer's
    partial first, so that an interruption leaves it for the next writer to
    remove (unless it falls before the lock is taken)."""
    with contextlib.suppress(OSError):
        lock = WriterLock(old)
        shutil.rmtree(old, ignore_errors=True)
        lock.release()


# Linux's renameat2(2): its directory argument for paths relative to the
# working directory, and its flag that swaps two existing paths.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def renameat2() -> Any:
    """libc's ``renameat2``, or None where there is none (not Linux, or a C
    library older than glibc 2.28)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return None
    function.argtypes = [
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_int,
        ctypes.c_char_p,
        ctypes.c_uint,
    ]
    function.restype = ctypes.c_int
    return function


def exchange(a: Path, b: Path) -> bool:
    """Swaps the existing paths ``a`` and ``b`` atomically. False, with
    nothing changed, where the system or the filesystem cannot; OSError when
    it can but the swap fails."""
    function = renameat2()
    if function is None:
        return False
    if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fsdecode(b))
