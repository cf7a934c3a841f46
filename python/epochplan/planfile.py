"""Offline plans: every rank's sample ids of some epochs, written once as files.

A plan directory holds a JSON manifest and, per epoch, one int64 ``.npy`` file
per rank with exactly ``EpochPlan(...).rank_indices(rank, world_size)``::

    DIR/manifest.json
    DIR/epoch-0000/rank-00000.npy
    DIR/epoch-0000/rank-00001.npy
    ...

Files are written in Rust in bounded memory (independent of the number of
samples, except for ``kind="uniform"``, whose whole permutation is held in
memory: about 16 bytes per sample while it is built), checksummed with BLAKE3
as they are written, and published atomically: everything goes into a hidden
sibling directory, the manifest last, which is then renamed into place. An
interrupted write never leaves a directory at ``DIR``.

Example:
    >>> from epochplan.planfile import write_plan, open_plan
    >>> d = write_plan("plan", 10**6, 4096, 8, epochs=range(2))  # doctest: +SKIP
    >>> ids = open_plan("plan").rank_ids(epoch=1, rank=3)  # memory-mapped  # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import json
import os
import secrets
import shutil
import stat
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from epochplan import _native
from epochplan._args import bool_arg, int_arg, limit_label, size_label
from epochplan._native import FORMAT_VERSION, EpochPlan

__all__ = [
    "MANIFEST",
    "PLAN_FILE_FORMAT",
    "PLAN_FILE_VERSION",
    "PlanDirectory",
    "PlanError",
    "open_plan",
    "verify_plan",
    "write_plan",
]

#: The manifest's file name inside a plan directory.
MANIFEST = "manifest.json"
#: The manifest's ``format`` field.
PLAN_FILE_FORMAT = "epochplan-plan"
#: The layout version of plan directories this release writes and reads.
PLAN_FILE_VERSION = 1
#: The most files (world_size x epochs) one plan directory may hold.
MAX_FILES = 1 << 20

_KINDS = ("cipher", "uniform", "chunked", "identity")
_PARTIAL = ".partial-"
#: The largest seed or epoch.
_MAX_U64 = 2**64 - 1

#: ``progress(done, total)``: samples (or bytes, when verifying) so far.
Progress = Callable[[int, int], None]


class PlanError(ValueError):
    """A plan directory that is missing, incomplete, corrupt or of another
    format, or a request it cannot serve. The message names the file."""


def rank_file_name(epoch: int, rank: int) -> str:
    """The path of a rank file inside a plan directory."""
    return f"epoch-{epoch:04d}/rank-{rank:05d}.npy"


def _path(value: Any, name: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    raw = os.fspath(value)
    if raw in ("", b""):
        # Path("") is the current directory: an empty string is a mistake.
        raise PlanError(f"{name} must be a path, got an empty string")
    if ("\0" if isinstance(raw, str) else b"\0") in raw:
        raise PlanError(f"{name} must be a path without NUL characters, got {raw!r}")
    path = Path(value)
    try:
        # The files are opened by the Rust core, which takes UTF-8 paths.
        str(path).encode()
    except UnicodeEncodeError:
        raise PlanError(f"{name} must be valid UTF-8, got {str(path)!r}") from None
    return path


def _absolute(path: Path) -> Path:
    """``path`` made absolute as the system resolves it (``link/..`` is the
    link target's parent, not the link's folder), its last component kept
    as it is (a link there is refused, never followed, by writes). Plan
    directories are kept absolute: a later ``os.chdir`` must not move them."""
    if path.name in ("", ".", ".."):
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


def _progress(value: Any) -> Progress | None:
    if value is not None and not callable(value):
        raise TypeError(f"progress must be callable or None, got {type(value).__name__}")
    return value  # type: ignore[no-any-return]


def _plan_params(
    num_samples: int,
    global_batch_size: int,
    seed: int,
    kind: str,
    chunk_size: int | None,
    preload_nchunks: int | None,
    drop_last: bool,
) -> dict[str, Any]:
    return {
        "num_samples": num_samples,
        "global_batch_size": global_batch_size,
        "seed": seed,
        "kind": kind,
        "chunk_size": chunk_size,
        "preload_nchunks": preload_nchunks,
        "drop_last": drop_last,
    }


def _checked_params(params: dict[str, Any]) -> dict[str, Any]:
    """A plan's parameters checked with the library's own messages, without
    building a uniform order (a full permutation, slow at large N), with the
    defaults the plan used filled in (``preload_nchunks`` of a chunked plan):
    the manifest records what the files hold, whatever later defaults are."""
    kind = params["kind"]
    chunked = params["chunk_size"] is not None or params["preload_nchunks"] is not None
    if kind == "uniform" and chunked:
        raise ValueError(
            "chunk_size and preload_nchunks apply to kind='chunked' only, not kind=\"uniform\""
        )
    plan = EpochPlan(
        params["num_samples"],
        params["global_batch_size"],
        seed=params["seed"],
        kind="identity" if kind == "uniform" else kind,
        chunk_size=params["chunk_size"],
        preload_nchunks=params["preload_nchunks"],
        drop_last=params["drop_last"],
    )
    return {**params, "chunk_size": plan.chunk_size, "preload_nchunks": plan.preload_nchunks}


def _sizes_plan(params: dict[str, Any]) -> EpochPlan:
    """A plan with the same steps and shares (cheap even for kind='uniform')."""
    return EpochPlan(
        params["num_samples"],
        params["global_batch_size"],
        drop_last=params["drop_last"],
        kind="identity",
    )


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale_partials(out: Path) -> None:
    """Removes hidden partial siblings of ``out`` left by killed writers."""
    prefix = f".{out.name}{_PARTIAL}"
    with contextlib.suppress(OSError):
        for entry in out.parent.iterdir():
            if not entry.name.startswith(prefix):
                continue
            pid = entry.name[len(prefix) :].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


# A manifest lists at most MAX_FILES files in a few hundred bytes each.
_MAX_MANIFEST_BYTES = 1 << 30


def _read_manifest(path: Path) -> Any:
    """The manifest's JSON. OSError if it is not a regular file of at most
    _MAX_MANIFEST_BYTES (a FIFO would block the read, a link to /dev/zero
    never end), ValueError if it is not JSON."""
    # Non-blocking, so that opening a FIFO returns at once.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        if st.st_size > _MAX_MANIFEST_BYTES:
            raise OSError(errno.EFBIG, f"larger than {size_label(_MAX_MANIFEST_BYTES)}")
        data = f.read()
    return json.loads(data.decode())


def _why_not_replaceable(path: Path) -> str | None:
    """None for an empty directory or a plan directory holding nothing but its
    manifest and the files it lists; else why ``path`` must not be replaced
    (replacing removes everything in it: never a link, other data, or a
    user's files kept beside a plan)."""
    if path.is_symlink() or not path.is_dir():
        return "is not a plan directory"
    if not any(path.iterdir()):
        return None
    try:
        manifest = _read_manifest(path / MANIFEST)
    except (OSError, ValueError, RecursionError):
        manifest = None
    is_plan = isinstance(manifest, dict) and manifest.get("format") == PLAN_FILE_FORMAT
    files = manifest.get("files") if is_plan else None
    if not isinstance(files, list):
        return "is not a plan directory"
    listed = {MANIFEST} | {str(f.get("path")) for f in files if isinstance(f, dict)}
    folders = {str(Path(name).parent) for name in listed} - {"."}
    for entry in path.rglob("*"):
        name = entry.relative_to(path).as_posix()
        plan_entry = name in folders if entry.is_dir() else name in listed
        if entry.is_symlink() or not plan_entry:
            return f"holds {name}, which is not part of its plan"
    return None


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _files_bytes(counts: list[int], num_epochs: int, block: int = 1) -> int:
    """The bytes of a plan's files: one per rank (of ``counts`` ids) per epoch,
    each rounded up to whole blocks of ``block`` bytes (what it takes on disk)."""
    return sum(-(-_native.npy_file_size(c) // block) * block for c in counts) * num_epochs


def _is_empty_dir(path: Path) -> bool:
    """A directory itself (not a link to one) with nothing in it."""
    try:
        return path.is_dir() and not path.is_symlink() and not any(path.iterdir())
    except OSError:
        return False


def _prepare_output(
    out: Path, force: bool, params: dict[str, Any], world_size: int, num_epochs: int
) -> tuple[EpochPlan, list[int], int, Path]:
    """Checks that ``out`` may be written, the disk and, for kind='uniform',
    the memory. Returns a plan of the same sizes, each rank's id count, the
    bytes of all files and a fresh partial directory."""
    # An empty directory holds nothing to lose: it is written into without force.
    if (out.exists() or out.is_symlink()) and not _is_empty_dir(out):
        # Only a plan directory may be replaced, so force is offered for it alone.
        why = _why_not_replaceable(out)
        if why is not None:
            raise PlanError(f"{out} exists and {why}; refusing to replace it")
        if not force:
            raise PlanError(f"{out} already exists (use force=True, or --force, to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_partials(out)

    sizes = _sizes_plan(params)
    counts = [sizes.rank_size(r, world_size) for r in range(world_size)]
    total_bytes = _files_bytes(counts, num_epochs)
    fs = os.statvfs(out.parent)
    # Small files take whole blocks: thousands of them take far more than their bytes.
    need = _files_bytes(counts, num_epochs, fs.f_frsize or 1)
    free = fs.f_bavail * fs.f_frsize
    if need > free:
        raise PlanError(
            f"{out}: the plan needs {size_label(need)} of disk, "
            f"only {size_label(free)} is free on {out.parent.resolve()}"
        )
    if params["kind"] == "uniform":
        need, avail = 16 * params["num_samples"], _available_memory()
        if avail is not None and need > avail:
            raise PlanError(
                f"kind='uniform' holds the whole permutation in memory: about "
                f"{size_label(need)} needed, {size_label(avail)} available "
                "(use kind='cipher', or --kind cipher)"
            )
    tmp = out.parent / f".{out.name}{_PARTIAL}{os.getpid()}-{secrets.token_hex(4)}"
    tmp.mkdir()
    return sizes, counts, total_bytes, tmp


def write_plan(
    out: str | os.PathLike[str],
    num_samples: int,
    global_batch_size: int,
    world_size: int,
    *,
    seed: int = 0,
    epochs: Iterable[int] = (0,),
    kind: str = "cipher",
    chunk_size: int | None = None,
    preload_nchunks: int | None = None,
    drop_last: bool = False,
    force: bool = False,
    progress: Progress | None = None,
) -> PlanDirectory:
    """Writes the plan of ``epochs`` for ``world_size`` ranks to directory ``out``.

    Args:
        out: the plan directory to create (its parents are created too, and
            removed again if the write fails).
        num_samples, global_batch_size, seed, kind, chunk_size,
            preload_nchunks, drop_last: as for :class:`epochplan.EpochPlan`.
        world_size: the number of ranks (one file per rank and epoch).
        epochs: the epochs to write (distinct ints).
        force: replace ``out`` if it is an existing plan directory (an empty
            directory is written into without it).
        progress: called about ten times a second as
            ``progress(samples_written, samples_total)``; an exception raised
            by it (or a KeyboardInterrupt) stops the write and is re-raised.

    Returns:
        The new plan directory.

    Raises:
        PlanError: ``out`` exists (without ``force``), the disk is too small,
            or a file cannot be written. ValueError, TypeError: bad arguments.

    Example:
        >>> d = write_plan("plan", 10**6, 4096, 8, epochs=range(2))  # doctest: +SKIP
    """
    num_samples = int_arg(num_samples, "num_samples", 0, _native.MAX_SAMPLES)
    global_batch_size = int_arg(global_batch_size, "global_batch_size", 1, _native.MAX_SAMPLES)
    world_size = int_arg(world_size, "world_size", 1, MAX_FILES)
    seed = int_arg(seed, "seed", 0, _MAX_U64)
    if (
        isinstance(epochs, (int, np.integer, str, bytes, Mapping))
        or not isinstance(epochs, Iterable)
        or getattr(epochs, "ndim", 1) == 0
    ):
        raise TypeError("epochs must be a sequence of ints, e.g. range(3) or (0,)")
    # Absolute, so that "." or "dir/.." name the directory itself and its
    # hidden siblings land beside it.
    out = _absolute(_path(out, "out"))
    if not out.name:
        raise PlanError(f"out must name a directory below the root, got {str(out)!r}")
    progress = _progress(progress)
    epoch_list = [int_arg(e, "epochs[]", 0, _MAX_U64) for e in epochs]
    if not epoch_list:
        raise ValueError("epochs must not be empty")
    if len(set(epoch_list)) != len(epoch_list):
        raise ValueError(f"epochs must be distinct, got {epoch_list}")
    if world_size * len(epoch_list) > MAX_FILES:
        raise ValueError(
            f"world_size * len(epochs) must be at most {MAX_FILES} files, "
            f"got {world_size} * {len(epoch_list)}"
        )
    drop_last = bool_arg(drop_last, "drop_last")
    force = bool_arg(force, "force")  # a truthy string would replace a plan
    # Plain ints for the manifest (numpy ints are not JSON).
    if chunk_size is not None:
        chunk_size = int_arg(chunk_size, "chunk_size", 1, _native.MAX_SAMPLES)
    if preload_nchunks is not None:
        preload_nchunks = int_arg(preload_nchunks, "preload_nchunks", 1, _native.MAX_SAMPLES)
    params = _plan_params(
        num_samples, global_batch_size, seed, kind, chunk_size, preload_nchunks, drop_last
    )
    params = _checked_params(params)

    # Parents created for `out` go again if the write fails (when still empty).
    new_parents = [p for p in out.parents if not p.exists()]
    try:
        _write_new_plan(out, force, params, world_size, epoch_list, progress)
    except BaseException:
        for parent in new_parents:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    return open_plan(out)


def _write_new_plan(
    out: Path,
    force: bool,
    params: dict[str, Any],
    world_size: int,
    epoch_list: list[int],
    progress: Progress | None,
) -> None:
    """The writing part of :func:`write_plan`, on checked arguments: the files
    in a partial directory, then published as ``out``, or nothing left."""
    try:
        sizes, counts, total_bytes, tmp = _prepare_output(
            out, force, params, world_size, len(epoch_list)
        )
    except OSError as e:
        raise PlanError(f"{out}: cannot write there: {e.strerror or e}") from None
    total = sum(counts) * len(epoch_list)
    try:
        files: list[dict[str, Any]] = []
        for i, epoch in enumerate(epoch_list):
            names = [rank_file_name(epoch, r) for r in range(world_size)]
            (tmp / Path(names[0]).parent).mkdir()
            base = i * sum(counts)
            report = None
            if progress is not None:
                cb = progress

                def report(done: int, base: int = base, cb: Progress = cb) -> None:
                    cb(base + done, total)

            try:
                infos = _native.write_epoch_files(
                    [str(tmp / n) for n in names],
                    world_size,
                    {**params, "epoch": epoch},
                    progress=report,
                )
            except ValueError as e:
                raise PlanError(str(e).replace(str(tmp), str(out))) from None
            for rank, (name, (count, nbytes, digest)) in enumerate(zip(names, infos, strict=True)):
                files.append(
                    {
                        "epoch": epoch,
                        "rank": rank,
                        "path": name,
                        "count": count,
                        "bytes": nbytes,
                        "blake3": digest,
                    }
                )
            _fsync_dir(tmp / Path(names[0]).parent)
        manifest = {
            "format": PLAN_FILE_FORMAT,
            "plan_file_version": PLAN_FILE_VERSION,
            "format_version": FORMAT_VERSION,
            "created_by": f"epochplan {_version()}",
            **params,
            "world_size": world_size,
            "epochs": epoch_list,
            "num_steps": sizes.num_steps,
            "dtype": "<i8",
            "checksum": "blake3",
            "total_bytes": total_bytes,
            "files": files,
        }
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest, f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        _fsync_dir(tmp)
        _publish(tmp, out, force)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        where = out
        if e.filename is not None:
            with contextlib.suppress(ValueError):
                where = out / Path(e.filename).relative_to(tmp)
        raise PlanError(f"{where}: cannot write: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _version() -> str:
    from epochplan import __version__

    return __version__


def _publish(tmp: Path, out: Path, force: bool) -> None:
    """Renames the finished ``tmp`` to ``out``.

    Without ``force``, ``out`` did not exist when the write began: whatever
    appeared there since is kept (a rename replaces at most an empty
    directory) and the write fails. With ``force``, an existing ``out`` is
    checked replaceable again and swapped with ``tmp`` in one step, so that
    ``out`` always holds a whole plan, old or new; the old one, now under
    the partial name, is removed. Where the system cannot swap, the old plan
    is moved aside under a hidden partial name (so an interruption leaves it
    for the next write to remove as stale), replaced, then removed; if the
    replacement fails, it is moved back."""
    if not force:
        try:
            os.rename(tmp, out)
        except OSError as e:
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise
            hint = ""
            if _why_not_replaceable(out) is None:
                hint = " (use force=True, or --force, to replace it)"
            raise PlanError(
                f"{out} appeared while the plan was written ({e.strerror or e}); "
                f"not replacing it{hint}"
            ) from None
        _fsync_dir(out.parent)
        return
    trash = None
    if out.exists() or out.is_symlink():
        why = _why_not_replaceable(out)
        if why is not None:
            raise PlanError(f"{out} exists and {why}; refusing to replace it")
        if _exchange(tmp, out):
            _fsync_dir(out.parent)
            shutil.rmtree(tmp, ignore_errors=True)
            return
        trash = out.parent / f".{out.name}{_PARTIAL}{os.getpid()}-old-{secrets.token_hex(4)}"
        out.rename(trash)
    try:
        tmp.rename(out)
    except BaseException:
        if trash is not None:
            trash.rename(out)
        raise
    _fsync_dir(out.parent)
    if trash is not None:
        shutil.rmtree(trash, ignore_errors=True)


# Linux's renameat2(2): its directory argument for paths relative to the
# working directory, and its flag that swaps two existing paths.
_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


@functools.cache
def _renameat2() -> Any:
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


def _exchange(a: Path, b: Path) -> bool:
    """Swaps the existing paths ``a`` and ``b`` atomically. False, with
    nothing changed, where the system or the filesystem cannot; OSError when
    it can but the swap fails."""
    renameat2 = _renameat2()
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), os.fsdecode(b))


def _field(manifest: dict[str, Any], key: str, kind: type | tuple[type, ...], where: Path) -> Any:
    if key not in manifest:
        raise PlanError(f"{where}: the manifest has no {key!r}")
    value = manifest[key]
    if isinstance(value, bool) and kind is not bool:
        raise PlanError(f"{where}: manifest {key!r} has the wrong type (bool)")
    if not isinstance(value, kind):
        raise PlanError(f"{where}: manifest {key!r} has the wrong type ({type(value).__name__})")
    return value


@dataclass(frozen=True)
class PlanDirectory:
    """An opened plan directory (see :func:`open_plan`).

    Example:
        >>> d = open_plan("plan")  # doctest: +SKIP
        >>> d.world_size, d.epochs  # doctest: +SKIP
        (8, [0, 1])
        >>> ids = d.rank_ids(0, 3)  # doctest: +SKIP
    """

    path: Path
    manifest: dict[str, Any] = field(repr=False)

    @property
    def num_samples(self) -> int:
        """Samples per epoch."""
        return int(self.manifest["num_samples"])

    @property
    def global_batch_size(self) -> int:
        """Samples per step over all ranks."""
        return int(self.manifest["global_batch_size"])

    @property
    def world_size(self) -> int:
        """Ranks the plan was written for."""
        return int(self.manifest["world_size"])

    @property
    def seed(self) -> int:
        """The seed of the orders."""
        return int(self.manifest["seed"])

    @property
    def kind(self) -> str:
        """The kind of order."""
        return str(self.manifest["kind"])

    @property
    def chunk_size(self) -> int | None:
        """Samples per chunk (kind='chunked'), else None."""
        value = self.manifest.get("chunk_size")
        return None if value is None else int(value)

    @property
    def preload_nchunks(self) -> int | None:
        """Chunks per shuffle window (kind='chunked'), else None."""
        value = self.manifest.get("preload_nchunks")
        return None if value is None else int(value)

    @property
    def epochs(self) -> list[int]:
        """The epochs in the plan."""
        return [int(e) for e in self.manifest["epochs"]]

    @property
    def drop_last(self) -> bool:
        """Whether the short last step is dropped."""
        return bool(self.manifest["drop_last"])

    def plan(self, epoch: int) -> EpochPlan:
        """The :class:`epochplan.EpochPlan` of ``epoch`` (which must be in the plan)."""
        self._epoch_index(epoch)
        return EpochPlan(
            self.num_samples,
            self.global_batch_size,
            seed=self.seed,
            epoch=epoch,
            kind=self.kind,
            chunk_size=self.chunk_size,
            preload_nchunks=self.preload_nchunks,
            drop_last=self.drop_last,
        )

    def _epoch_index(self, epoch: int) -> int:
        """Where ``epoch`` is in the plan's epochs; PlanError if it is not."""
        epoch = int_arg(epoch, "epoch")
        epochs = self.epochs
        if epoch not in epochs:
            raise PlanError(f"{self.path}: epoch {epoch} is not in the plan (epochs {epochs})")
        return epochs.index(epoch)

    def check_world_size(self, world_size: int) -> None:
        """Raises PlanError unless the plan was written for ``world_size`` ranks."""
        world_size = int_arg(world_size, "world_size", 1, MAX_FILES)
        if world_size != self.world_size:
            raise PlanError(
                f"{self.path}: the plan was written for world_size={self.world_size}, "
                f"not {world_size}; write a plan for {world_size} ranks"
            )

    def file_entry(self, epoch: int, rank: int) -> dict[str, Any]:
        """The manifest's entry of one rank file."""
        epoch_index = self._epoch_index(epoch)
        rank = int_arg(rank, "rank")
        if not 0 <= rank < self.world_size:
            raise PlanError(
                f"{self.path}: rank must be in [0, {self.world_size - 1}] for this plan, got {rank}"
            )
        index = epoch_index * self.world_size + rank
        entry: dict[str, Any] = self.manifest["files"][index]
        return entry

    def _checked_file(
        self, epoch: int, rank: int, world_size: int | None
    ) -> tuple[Path, dict[str, Any]]:
        """A rank file's path and manifest entry, after checking the file's
        header, size and checksum (which reads the file once)."""
        if world_size is not None:
            self.check_world_size(world_size)
        entry = self.file_entry(epoch, rank)
        path = self.path / entry["path"]
        try:
            _native.check_plan_file(str(path), entry["count"], entry["bytes"], entry["blake3"])
        except (ValueError, OSError) as e:
            raise PlanError(str(e)) from None
        return path, entry

    def rank_ids(
        self, epoch: int, rank: int, *, world_size: int | None = None
    ) -> npt.NDArray[np.int64]:
        """Rank ``rank``'s sample ids of ``epoch``: a read-only memory map of
        its file, after checking the file's header, size and checksum (which
        reads the file once). ``world_size``, when given, must match the plan.

        As with any memory map, the file must not be cut short while the map
        is in use: the process would be killed (SIGBUS) on reading past the
        new end. :class:`~epochplan.torch.PlanSampler` reads its ids through
        the file instead, and raises :class:`PlanError` then.
        """
        path, entry = self._checked_file(epoch, rank, world_size)
        try:
            ids = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, OSError) as e:
            raise PlanError(str(e)) from None
        if ids.dtype != np.dtype("<i8") or ids.shape != (entry["count"],):
            raise PlanError(
                f"{path}: holds {ids.dtype} {ids.shape}, expected int64 ({entry['count']},)"
            )
        result: npt.NDArray[np.int64] = ids
        return result

    def __repr__(self) -> str:
        return (
            f"PlanDirectory({str(self.path)!r}, num_samples={self.num_samples}, "
            f"global_batch_size={self.global_batch_size}, world_size={self.world_size}, "
            f"seed={self.seed}, kind={self.kind!r}, epochs={self.epochs}, "
            f"drop_last={self.drop_last})"
        )


class _RankFile:
    """A checked rank file (see :meth:`PlanDirectory._checked_file`), open
    for reading its ids a range at a time. Reads go through the open file, not
    a memory map, so a file cut short after the check gives a PlanError rather
    than a SIGBUS or zeros; a plan replaced by ``write_plan(force=True)`` swaps
    directories, and this file keeps reading the ids it checked."""

    def __init__(self, path: Path, entry: dict[str, Any]) -> None:
        self.path = path
        self.count: int = entry["count"]
        self._header_bytes: int = entry["bytes"] - 8 * self.count
        try:
            self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - held for reads
        except OSError as e:
            raise PlanError(f"{path}: cannot open: {e.strerror or e}") from None

    def read(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """Ids ``[start, stop)`` of the file (``0 <= start <= stop <= count``)."""
        ids = np.empty(stop - start, dtype="<i8")
        view = ids.data.cast("B")
        try:
            self._file.seek(self._header_bytes + 8 * start)
            done = 0
            while done < len(view):
                got = self._file.readinto(view[done:])
                if not got:
                    raise PlanError(
                        f"{self.path}: ends before id {start + done // 8} of {self.count}: "
                        "the file was cut short after it was checked"
                    )
                done += got
        except OSError as e:
            raise PlanError(f"{self.path}: cannot read: {e.strerror or e}") from None
        ids.flags.writeable = False
        return ids

    def close(self) -> None:
        self._file.close()


def open_plan(path: str | os.PathLike[str], *, world_size: int | None = None) -> PlanDirectory:
    """Opens a plan directory: reads and checks its manifest, and that every
    rank file exists with its recorded size (checksums are checked when a
    file is read, or all at once by :func:`verify_plan`).

    Raises:
        PlanError: no such directory, no or a bad manifest, another format
            version, a missing or resized file, or (when ``world_size`` is
            given) a plan written for another world size.
    """
    root = _absolute(_path(path, "path"))
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise PlanError(f"{root}: {what}")
    mpath = root / MANIFEST
    try:
        manifest = _read_manifest(mpath)
    except FileNotFoundError:
        raise PlanError(
            f"{mpath}: missing (not a plan directory, or an unfinished write)"
        ) from None
    except (OSError, ValueError, RecursionError) as e:
        raise PlanError(f"{mpath}: cannot read the manifest: {e}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != PLAN_FILE_FORMAT:
        raise PlanError(f"{mpath}: not an epochplan plan manifest")
    version = manifest.get("plan_file_version")
    # type() too: JSON's 1.0 and true equal 1 in Python.
    if type(version) is not int or version != PLAN_FILE_VERSION:
        raise PlanError(
            f"{mpath}: plan_file_version is {version!r}; this release reads "
            f"version {PLAN_FILE_VERSION}"
        )
    fmt = manifest.get("format_version")
    if type(fmt) is not int or fmt != FORMAT_VERSION:
        raise PlanError(
            f"{mpath}: format_version is {fmt!r}; this release computes "
            f"format_version {FORMAT_VERSION}"
        )
    d = PlanDirectory(root, manifest)
    _check_manifest(d, mpath)
    if world_size is not None:
        d.check_world_size(world_size)
    return d


def _check_manifest(d: PlanDirectory, mpath: Path) -> None:
    m = d.manifest
    for key in ("num_samples", "global_batch_size", "world_size", "seed"):
        _field(m, key, int, mpath)
    for key in ("chunk_size", "preload_nchunks"):
        if m.get(key) is not None:
            _field(m, key, int, mpath)
    # The files are read as little-endian int64 and checked with BLAKE3,
    # whatever a manifest says: it must say so.
    for key, value in (("dtype", "<i8"), ("checksum", "blake3")):
        if m.get(key) != value:
            raise PlanError(f"{mpath}: manifest {key!r} is {m.get(key)!r}, expected {value!r}")
    kind = _field(m, "kind", str, mpath)
    if kind not in _KINDS:
        raise PlanError(f"{mpath}: unknown kind {kind!r}")
    _field(m, "drop_last", bool, mpath)
    epochs = _field(m, "epochs", list, mpath)
    if not epochs or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
        raise PlanError(f"{mpath}: 'epochs' must be a non-empty list of ints")
    if not all(0 <= e <= _MAX_U64 for e in epochs):
        raise PlanError(f"{mpath}: 'epochs' must lie in [0, {limit_label(_MAX_U64)}]")
    if len(set(epochs)) != len(epochs):
        raise PlanError(f"{mpath}: 'epochs' has duplicates")
    files = _field(m, "files", list, mpath)
    w = d.world_size
    if w < 1 or len(files) != w * len(epochs):
        raise PlanError(
            f"{mpath}: lists {len(files)} files, expected {len(epochs)} epochs x {w} ranks"
        )
    params = _plan_params(
        d.num_samples,
        d.global_batch_size,
        d.seed,
        kind,
        d.chunk_size,
        d.preload_nchunks,
        d.drop_last,
    )
    try:
        _checked_params(params)
    except (ValueError, TypeError, OverflowError) as e:
        raise PlanError(f"{mpath}: bad plan parameters: {e}") from None
    sizes = _sizes_plan(params)
    if type(m.get("num_steps")) is not int or m.get("num_steps") != sizes.num_steps:
        raise PlanError(
            f"{mpath}: num_steps is {m.get('num_steps')!r}, the parameters give {sizes.num_steps}"
        )
    counts = [sizes.rank_size(r, w) for r in range(w)]
    total_bytes = _files_bytes(counts, len(epochs))
    if type(m.get("total_bytes")) is not int or m.get("total_bytes") != total_bytes:
        raise PlanError(
            f"{mpath}: total_bytes is {m.get('total_bytes')!r}, the files take {total_bytes}"
        )
    for i, entry in enumerate(files):
        epoch, rank = epochs[i // w], i % w
        name = rank_file_name(epoch, rank)
        if not isinstance(entry, dict):
            raise PlanError(f"{mpath}: files[{i}] is not an object")
        want = {
            "epoch": epoch,
            "rank": rank,
            "path": name,
            "count": counts[rank],
            "bytes": _native.npy_file_size(counts[rank]),
        }
        for key, value in want.items():
            # The exact type too: 38.0 equals 38 but is no count.
            if type(entry.get(key)) is not type(value) or entry.get(key) != value:
                raise PlanError(
                    f"{mpath}: files[{i}] {key!r} is {entry.get(key)!r}, expected {value!r}"
                )
        digest = entry.get("blake3")
        if not (isinstance(digest, str) and len(digest) == 64):
            raise PlanError(f"{mpath}: files[{i}] has no valid 'blake3' checksum")
        fpath = d.path / name
        try:
            size = fpath.stat().st_size
        except OSError:
            raise PlanError(f"{fpath}: missing rank file") from None
        if size != want["bytes"]:
            raise PlanError(
                f"{fpath}: has {size} bytes, the manifest says {want['bytes']} "
                "(truncated or altered)"
            )


def _check_verify_memory(
    path: Path, num_samples: int, global_batch_size: int, kind: str, drop_last: bool
) -> None:
    """Raises PlanError if :func:`verify_plan` of such a plan would not fit in
    the memory available now."""
    avail = _available_memory()
    need, what = num_samples // 8, "a bitmap of N/8"
    if kind == "uniform" and drop_last and num_samples % global_batch_size:
        need, what = need + 16 * num_samples, "a bitmap of N/8 and the uniform permutation"
    if avail is not None and need > avail:
        raise PlanError(
            f"{path}: verifying needs {what} = {size_label(need)} of memory, "
            f"{size_label(avail)} is available"
        )


def verify_plan(path: str | os.PathLike[str], *, progress: Progress | None = None) -> None:
    """Checks a plan directory completely, streaming through its files:
    the manifest, every file's header, size and checksum, every file's length
    (the plan's share of its rank, so every rank has the same steps), every
    id against the plan (recomputed a chunk at a time), and exact coverage
    per epoch (every id in [0, N) at most once, and exactly the ids of the
    epoch's steps: all N, or with drop_last those of the full steps).

    Memory: a bitmap of N/8 bytes, plus a few 8 MiB buffers. For
    kind='uniform' the permutation itself is built only when drop_last drops
    a short last step (about 16 bytes per sample, as when it was written);
    otherwise its ids are not compared with the plan, only counted.

    Args:
        progress: called as ``progress(bytes_read, bytes_total)``.

    Raises:
        PlanError: naming the file and its first violation.
    """
    progress = _progress(progress)
    d = open_plan(path)
    _check_verify_memory(d.path, d.num_samples, d.global_batch_size, d.kind, d.drop_last)
    files: Sequence[dict[str, Any]] = d.manifest["files"]
    w = d.world_size
    total = sum(int(f["bytes"]) for f in files)
    params = _plan_params(
        d.num_samples,
        d.global_batch_size,
        d.seed,
        d.kind,
        d.chunk_size,
        d.preload_nchunks,
        d.drop_last,
    )
    for i, epoch in enumerate(d.epochs):
        entries = files[i * w : (i + 1) * w]
        base = sum(int(f["bytes"]) for f in files[: i * w])
        report = None
        if progress is not None:
            cb = progress

            def report(done: int, base: int = base, cb: Progress = cb) -> None:
                cb(base + done, total)

        try:
            _native.verify_epoch_files(
                [str(d.path / f["path"]) for f in entries],
                [int(f["count"]) for f in entries],
                [int(f["bytes"]) for f in entries],
                [str(f["blake3"]) for f in entries],
                w,
                {**params, "epoch": epoch},
                progress=report,
            )
        except (ValueError, OSError) as e:
            msg = str(e)
            if not msg.startswith(str(d.path)):
                msg = f"{d.path / Path(rank_file_name(epoch, 0)).parent}: {msg}"
            raise PlanError(msg) from None
