"""Writing a plan directory: checks before any disk work, the rank files
streamed from Rust in bounded memory, the manifest last, then publication."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import epochplan._native as _native
from epochplan._args import bool_arg, int_arg, size_label
from epochplan._native import Mixture, MixtureEpoch, PlanLayout, PlanSpec, Selection
from epochplan._oversize import apply_oversize
from epochplan._system import available_memory
from epochplan._version import __version__
from epochplan.planfile._checks import Progress, absolute, path_arg, progress_arg
from epochplan.planfile.errors import PlanError, plan_os_error
from epochplan.planfile.manifest import (
    MANIFEST,
    MAX_FILES,
    PART_FILE,
    FileEntry,
    Manifest,
    files_bytes,
    part_document,
    part_places,
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
from epochplan.planfile.space import SPACE_DIR, SpaceInfo, space_bytes, write_space
from epochplan.planfile.tokens import ArraySource, TokenFile, TokenInfo
from epochplan.planfile.tokens.write import array_source, token_plan_bytes, write_token_epoch

__all__ = ["write_plan"]


def write_plan(
    out: str | os.PathLike[str],
    spec: PlanSpec,
    world_size: int,
    *,
    epochs: Iterable[int] = (0,),
    micro_batch_size: int | None = None,
    max_tokens: int | None = None,
    force: bool = False,
    progress: Progress | None = None,
) -> PlanDirectory:
    """Writes the plan of ``epochs`` for ``world_size`` ranks to directory ``out``.

    Args:
        out: the plan directory to create (its parents are created too, and
            removed again if the write fails).
        spec: the plan's parameters (a :class:`~epochplan.PlanSpec`; epoch
            ``e``'s files hold ``spec.plan(e)``). A space is stored in the
            directory (its masks and id arrays beside the rank files) and
            rebuilt by :func:`open_plan`; the files then hold store ids. A
            token plan's rank files hold the balanced dealing, with the
            token files beside them (see the plan-file reference); an
            ``np.memmap`` of lengths (``np.load(path, mmap_mode="r")``)
            records its file, which ``verify_plan`` reads again.
        world_size: the number of ranks (one file per rank and epoch).
        epochs: the epochs to write (distinct ints).
        micro_batch_size: the most samples per micro-batch (token plans).
        max_tokens: the most tokens per micro-batch (token plans; with
            micro_batch_size, either may be None, not both). A longer sample
            is found before anything is written (one pass over the lengths)
            and handled by the tokens' ``oversize`` policy: ``"error"``
            names how many and the first ids, ``"skip"`` leaves them out
            (the directory's space is the space less those ids) and
            ``"truncate"`` cuts them to the cap (the files hold the cut
            lengths, in a directory of plan-file version 5).
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
        >>> spec = PlanSpec(10**6, 4096)  # doctest: +SKIP
        >>> d = write_plan("plan", spec, 8, epochs=range(2))  # doctest: +SKIP
    """
    # Absolute, so that "." or "dir/.." name the directory itself and its
    # hidden siblings land beside it.
    out = absolute(path_arg(out, "out"))
    if not out.name:
        raise PlanError(f"out must name a directory below the root, got {str(out)!r}")
    progress = progress_arg(progress)
    if not isinstance(spec, PlanSpec):
        raise TypeError(
            "spec must be a PlanSpec (PlanSpec(num_samples, global_batch_size, ...)), got "
            f"{type(spec).__name__}"
        )
    stored_space(spec)
    world_size, epoch_list = checked_files(world_size, epochs)
    force = bool_arg(force, "force")  # a truthy string would replace a plan
    spec = apply_oversize_cap(spec, max_tokens)
    tokens = token_args(spec, world_size, micro_batch_size, max_tokens)

    # Parents created for `out` go again if the write fails (when still empty).
    new_parents = [p for p in out.parents if not p.exists()]
    try:
        _write_new_plan(out, force, spec, world_size, epoch_list, progress, tokens)
    except BaseException:
        for parent in new_parents:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    return open_plan(out)


def stored_space(spec: PlanSpec) -> Selection | Mixture | None:
    """The space a plan directory stores of ``spec``: its Selection or
    Mixture (a Mixture's epoch is refused: each epoch's plan is planned over
    the mixture's own epoch)."""
    space = spec.space
    if isinstance(space, MixtureEpoch):
        raise TypeError(
            "spec must be over the Mixture, not one of its epochs: the plan of epoch e is "
            "planned over mixture.epoch(e)"
        )
    return space


def apply_oversize_cap(spec: PlanSpec, max_tokens: Any) -> PlanSpec:
    """The spec that carries out its tokens' ``oversize`` policy for
    ``max_tokens``: its space less the samples over the cap (``"skip"``),
    or its tokens cut to the cap (``"truncate"``)."""
    if max_tokens is not None:
        max_tokens = int_arg(max_tokens, "max_tokens", 1)
    return apply_oversize(spec, max_tokens)[0]


@dataclass(frozen=True)
class _TokenArgs:
    """A token plan's checked caps (the dealer's keyword arguments) and the
    manifest's record of its arrays and models."""

    kwargs: dict[str, Any]
    info: TokenInfo

    def dealer(self, spec: PlanSpec, epoch: int, world_size: int) -> _native.TokenDealer:
        return _native.TokenDealer(spec.plan(epoch), world_size, **self.kwargs)


def token_args(
    spec: PlanSpec, world_size: int, micro_batch_size: Any, max_tokens: Any
) -> _TokenArgs | None:
    """The token arguments checked before any disk work (every value read
    once for the digests, which finds a negative one), or None for a plan
    without tokens."""
    tokens = spec.tokens
    if tokens is None:
        for name, value in (("micro_batch_size", micro_batch_size), ("max_tokens", max_tokens)):
            if value is not None:
                raise ValueError(
                    f"{name} needs lengths: give the spec tokens=Tokens(lengths, ...) for a "
                    "token plan"
                )
        return None
    _, path, dtype, offset = array_source(tokens.lengths, "lengths")
    loss_source: tuple[Any, ...] | None = None
    if tokens.loss_tokens is not None:
        _, *rest = array_source(tokens.loss_tokens, "loss_tokens")
        loss_source = tuple(rest)
    # The caps are checked by the dealer, with the plan's messages: every
    # sample over the cap too, before any disk work (one pass over the
    # lengths in id order names how many and the first ids; no step is
    # read, which would map pages of a lengths file all over it).
    plan = spec.plan(0)
    _native.TokenDealer(plan, world_size, micro_batch_size=micro_batch_size, max_tokens=max_tokens)
    state = plan.state_dict()  # the arrays' digests, read once
    digest, loss_digest = state["lengths_digest"], state["loss_tokens_digest"]
    kwargs = {"micro_batch_size": micro_batch_size, "max_tokens": max_tokens}
    # The types the lengths and loss tokens files hold (their sources').
    lengths_file_dtype, loss_file_dtype = _native.token_file_dtypes(plan)
    loss_record = None
    if loss_digest is not None and loss_source is not None:
        loss_path, loss_dtype, loss_offset = loss_source
        loss_record = ArraySource(loss_path, loss_dtype, loss_offset, loss_digest)
    info = TokenInfo(
        ArraySource(path, dtype, offset, digest),
        loss_record,
        tokens.cost,
        tokens.loss_normalization,
        None if micro_batch_size is None else int(micro_batch_size),
        None if max_tokens is None else int(max_tokens),
        (),
        tokens.max_length,
        tokens.packing,
        (lengths_file_dtype, loss_file_dtype or "<i8"),
    )
    return _TokenArgs(kwargs, info)


def checked_files(world_size: Any, epochs: Any) -> tuple[int, list[int]]:
    """The world size and the list of epochs of a plan directory's files."""
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
    return world_size, epoch_list


def _prepare_output(
    out: Path, force: bool, spec: PlanSpec, need_bytes: Callable[[int], int]
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
    need = need_bytes(fs.f_frsize or 1)
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
        # No lock was taken: only the fresh directory is left to remove.
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return tmp, lock


def _write_new_plan(
    out: Path,
    force: bool,
    spec: PlanSpec,
    world_size: int,
    epoch_list: list[int],
    progress: Progress | None,
    tokens: _TokenArgs | None,
    part: tuple[int, int] | None = None,
) -> None:
    """The writing part of :func:`write_plan`, on checked arguments: the files
    in a partial directory, then published as ``out``, or nothing left. With
    ``part`` (index, count; see :mod:`epochplan.planfile.parts`), only that
    part's rank files, and ``part.json`` in place of the manifest."""
    stored = stored_space(spec)
    # Each rank's ids an epoch (a token plan's differ by rank, not in sum:
    # its progress and disk counts use the strided shares' sum).
    strided = PlanLayout(spec.num_samples, spec.global_batch_size, drop_last=spec.drop_last)
    counts = [strided.rank_size(r, world_size) for r in range(world_size)]
    epochs = len(epoch_list)
    mine = part_places(world_size * epochs, part)
    if tokens is None:

        def need(block: int) -> int:
            written = [counts[k % world_size] for k in mine]
            return files_bytes(written, 1, block) + space_bytes(stored, block)
    else:

        def need(block: int) -> int:
            assert tokens is not None
            plan_bytes = token_plan_bytes(spec, world_size, epochs, tokens.info, block)
            # A part's share of the plan's files (about: ranks' counts differ).
            share = -(-plan_bytes * len(mine) // (world_size * epochs))
            return share + space_bytes(stored, block)

    try:
        tmp, lock = _prepare_output(out, force, spec, need)
    except OSError as e:
        raise plan_os_error(f"{out}: cannot write there: {e.strerror or e}", e, out) from None
    try:
        files: list[FileEntry] = []
        token_files: list[TokenFile] = []
        space: SpaceInfo | None = None
        if stored is not None:
            # First: a plan over a space the directory cannot rebuild is not written.
            space = write_space(stored, tmp)
            fsync_dir(tmp / SPACE_DIR)
            fsync_dir(tmp)
        done = 0
        total = sum(counts[k % world_size] for k in mine)
        for i, epoch in enumerate(epoch_list):
            ranks = [k - i * world_size for k in mine if k // world_size == i]
            if not ranks:
                continue
            names = [rank_file_name(epoch, r) for r in ranks]
            (tmp / Path(names[0]).parent).mkdir()
            base = done
            done += sum(counts[r] for r in ranks)
            report = None
            if progress is not None:
                cb = progress

                def report(done: int, base: int = base, cb: Progress = cb) -> None:
                    cb(base + done, total)

            if tokens is not None:
                written = write_token_epoch(
                    tmp,
                    epoch,
                    world_size,
                    tokens.dealer(spec, epoch, world_size),
                    tokens.info.roles,
                    report,
                    ranks if part is not None else None,
                )
                files += written[0]
                token_files += written[1]
                fsync_dir(tmp / Path(names[0]).parent)
                continue
            infos = _native.write_epoch_files(
                [str(tmp / n) for n in names],
                world_size,
                spec.plan(epoch),
                progress=report,
                # Errors name the files where they are published, not tmp.
                display_paths=[str(out / n) for n in names],
                ranks=ranks,
            )
            for rank, name, (count, nbytes, digest) in zip(ranks, names, infos, strict=True):
                files.append(FileEntry(epoch, rank, name, count, nbytes, digest))
            fsync_dir(tmp / Path(names[0]).parent)
        info = None
        total_bytes = files_bytes(counts, len(epoch_list))
        if tokens is not None:
            info = dataclasses.replace(tokens.info, files=tuple(token_files))
            total_bytes = sum(f.bytes for f in files) + sum(f.bytes for f in token_files)
        if space is not None:
            total_bytes += sum(f.bytes for f in space.files)
        manifest = Manifest(
            spec,
            world_size,
            tuple(epoch_list),
            spec.layout.num_steps,
            total_bytes,
            tuple(files),
            info,
            space,
        )
        document = manifest.to_json(f"epochplan {__version__}")
        if part is not None:
            document = part_document(document, part)
        with open(tmp / (MANIFEST if part is None else PART_FILE), "w") as f:
            json.dump(document, f, indent=1)
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
        raise plan_os_error(f"{where}: cannot write: {e.strerror or e}", e, where) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        raise
