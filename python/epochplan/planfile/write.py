"""Writing a plan directory: checks before any disk work, the rank files
streamed from Rust in bounded memory, the manifest last, then publication."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

import epochplan._native as _native
from epochplan._args import bool_arg, int_arg, size_label
from epochplan._system import available_memory
from epochplan._version import __version__
from epochplan.planfile._checks import Progress, absolute, path_arg, progress_arg
from epochplan.planfile.errors import PlanError
from epochplan.planfile.manifest import (
    MANIFEST,
    MAX_FILES,
    FileEntry,
    Manifest,
    PlanSpec,
    files_bytes,
    rank_file_name,
)
from epochplan.planfile.publish import (
    WriterLock,
    fsync_dir,
    is_empty_dir,
    new_partial,
    publish,
    remove_stale_partials,
    why_not_replaceable,
)
from epochplan.planfile.reader import PlanDirectory, open_plan

__all__ = ["write_plan"]


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
        num_samples: samples per epoch, as for :class:`epochplan.EpochPlan`.
        global_batch_size: samples per step over all ranks.
        seed: the orders' seed.
        kind: the kind of order (``"uniform"`` holds its permutation in memory).
        chunk_size: samples per chunk (``kind="chunked"``).
        preload_nchunks: chunks per shuffle window (``kind="chunked"``).
        drop_last: drop the short last step.
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

    Examples:
        >>> d = write_plan("plan", 10**6, 4096, 8, epochs=range(2))  # doctest: +SKIP
    """
    # Absolute, so that "." or "dir/.." name the directory itself and its
    # hidden siblings land beside it.
    out = absolute(path_arg(out, "out"))
    if not out.name:
        raise PlanError(f"out must name a directory below the root, got {str(out)!r}")
    progress = progress_arg(progress)
    # The plan's own arguments are checked by the plan (the values it returns
    # are plain ints, as JSON needs); what only a plan directory has is
    # checked here.
    spec = PlanSpec.checked(
        num_samples,
        global_batch_size,
        seed=seed,
        kind=kind,
        chunk_size=chunk_size,
        preload_nchunks=preload_nchunks,
        drop_last=drop_last,
    )
    world_size = int_arg(world_size, "world_size", 1, MAX_FILES)
    if (
        isinstance(epochs, (int, np.integer, str, bytes, Mapping))
        or not isinstance(epochs, Iterable)
        or getattr(epochs, "ndim", 1) == 0
    ):
        raise TypeError("epochs must be a sequence of ints, e.g. range(3) or (0,)")
    epoch_list = [int_arg(e, "epochs[]", 0, _native.MAX_SEED) for e in epochs]
    if not epoch_list:
        raise ValueError("epochs must not be empty")
    if len(set(epoch_list)) != len(epoch_list):
        raise ValueError(f"epochs must be distinct, got {epoch_list}")
    if world_size * len(epoch_list) > MAX_FILES:
        raise ValueError(
            f"world_size * len(epochs) must be at most {MAX_FILES} files, "
            f"got {world_size} * {len(epoch_list)}"
        )
    force = bool_arg(force, "force")  # a truthy string would replace a plan

    # Parents created for `out` go again if the write fails (when still empty).
    new_parents = [p for p in out.parents if not p.exists()]
    try:
        _write_new_plan(out, force, spec, world_size, epoch_list, progress)
    except BaseException:
        for parent in new_parents:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    return open_plan(out)


def _prepare_output(
    out: Path, force: bool, spec: PlanSpec, counts: list[int], num_epochs: int
) -> tuple[Path, WriterLock]:
    """Checks that ``out`` may be written, the disk and, for kind='uniform',
    the memory. Returns a fresh partial directory and the lock this writer
    holds on it while alive (see :func:`remove_stale_partials`)."""
    # An empty directory holds nothing to lose: it is written into without force.
    if (out.exists() or out.is_symlink()) and not is_empty_dir(out):
        # Only a plan directory may be replaced, so force is offered for it alone.
        why = why_not_replaceable(out)
        if why is not None:
            raise PlanError(f"{out} exists and {why}; refusing to replace it")
        if not force:
            raise PlanError(f"{out} already exists (use force=True, or --force, to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_partials(out)

    fs = os.statvfs(out.parent)
    # Small files take whole blocks: thousands of them take far more than their bytes.
    need = files_bytes(counts, num_epochs, fs.f_frsize or 1)
    free = fs.f_bavail * fs.f_frsize
    if need > free:
        raise PlanError(
            f"{out}: the plan needs {size_label(need)} of disk, "
            f"only {size_label(free)} is free on {out.parent.resolve()}"
        )
    if spec.kind == "uniform":
        need, avail = 16 * spec.num_samples, available_memory()
        if avail is not None and need > avail:
            raise PlanError(
                f"kind='uniform' holds the whole permutation in memory: about "
                f"{size_label(need)} needed, {size_label(avail)} available "
                "(use kind='cipher', or --kind cipher)"
            )
    tmp = new_partial(out)
    tmp.mkdir()
    try:
        lock = WriterLock(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        raise
    return tmp, lock


def _write_new_plan(
    out: Path,
    force: bool,
    spec: PlanSpec,
    world_size: int,
    epoch_list: list[int],
    progress: Progress | None,
) -> None:
    """The writing part of :func:`write_plan`, on checked arguments: the files
    in a partial directory, then published as ``out``, or nothing left."""
    counts = spec.rank_counts(world_size)
    try:
        tmp, lock = _prepare_output(out, force, spec, counts, len(epoch_list))
    except OSError as e:
        raise PlanError(f"{out}: cannot write there: {e.strerror or e}") from None
    total = sum(counts) * len(epoch_list)
    try:
        files: list[FileEntry] = []
        for i, epoch in enumerate(epoch_list):
            names = [rank_file_name(epoch, r) for r in range(world_size)]
            (tmp / Path(names[0]).parent).mkdir()
            base = i * sum(counts)
            report = None
            if progress is not None:
                cb = progress

                def report(done: int, base: int = base, cb: Progress = cb) -> None:
                    cb(base + done, total)

            infos = _native.write_epoch_files(
                [str(tmp / n) for n in names],
                world_size,
                {**spec.as_dict(), "epoch": epoch},
                progress=report,
                # Errors name the files where they are published, not tmp.
                display_paths=[str(out / n) for n in names],
            )
            for rank, (name, (count, nbytes, digest)) in enumerate(zip(names, infos, strict=True)):
                files.append(FileEntry(epoch, rank, name, count, nbytes, digest))
            fsync_dir(tmp / Path(names[0]).parent)
        manifest = Manifest(
            spec,
            world_size,
            tuple(epoch_list),
            spec.layout().num_steps,
            files_bytes(counts, len(epoch_list)),
            tuple(files),
        )
        with open(tmp / MANIFEST, "w") as f:
            json.dump(manifest.to_json(f"epochplan {__version__}"), f, indent=1)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(tmp)
        publish(tmp, lock, out, force)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        where = out
        if e.filename is not None:
            with contextlib.suppress(ValueError):
                where = out / Path(e.filename).relative_to(tmp)
        raise PlanError(f"{where}: cannot write: {e.strerror or e}") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        raise
