"""Verifying a whole plan directory against the plan it claims to hold."""

from __future__ import annotations

import os
from pathlib import Path

import epochplan._native as _native
from epochplan._args import size_label
from epochplan._native import PlanSpec, Selection
from epochplan._system import available_memory
from epochplan.planfile._checks import Progress, path_arg, progress_arg
from epochplan.planfile.errors import PlanError
from epochplan.planfile.parts import is_part, verify_part
from epochplan.planfile.reader import open_plan
from epochplan.planfile.space import store_size
from epochplan.planfile.tokens.verify import verify_token_plan

__all__ = ["check_verify_memory", "uniform_fits", "verify_plan"]


def _bitmap_bytes(spec: PlanSpec) -> int:
    """The coverage bitmap's bytes: one bit per id of the store (none for a
    mixture, whose ids repeat and are each compared with the plan's)."""
    if spec.space is not None and not isinstance(spec.space, Selection):
        return 0
    return store_size(spec.space, spec.num_samples) // 8


def uniform_fits(spec: PlanSpec) -> bool:
    """Whether a uniform plan's permutation (about 16 bytes a sample while it
    is built) fits beside verification's bitmap in the memory available now."""
    avail = available_memory()
    return avail is None or 16 * spec.num_samples + _bitmap_bytes(spec) <= avail


def check_verify_memory(path: Path, spec: PlanSpec) -> None:
    """Raises PlanError if :func:`verify_plan` of such a plan would not fit in
    the memory available now."""
    avail = available_memory()
    need, what = _bitmap_bytes(spec), "a bitmap of N/8"
    # A mixture's order is always built: its ids are compared one by one.
    built = spec.space is not None and not isinstance(spec.space, Selection)
    built |= spec.drop_last and spec.num_samples % spec.global_batch_size != 0
    if spec.kind == "uniform" and built:
        need, what = need + 16 * spec.num_samples, "a bitmap of N/8 and the uniform permutation"
    if avail is not None and need > avail:
        raise PlanError(
            f"{path}: verifying needs {what} = {size_label(need)} of memory, "
            f"{size_label(avail)} is available"
        )


def verify_plan(path: str | os.PathLike[str], *, progress: Progress | None = None) -> bool:
    """Checks a plan directory completely, streaming through its files:
    the manifest, every file's header, size and checksum, every file's length
    (the plan's share of its rank, so every rank has the same steps), every
    id against the plan (recomputed a chunk at a time), and exact coverage
    per epoch (every id in [0, N) at most once, and exactly the ids of the
    epoch's steps: all N, or with drop_last those of the full steps).

    A plan over an index space is checked against the plan over its space:
    every id of a selection is one of its ids, at most once (compared with
    the plan but for a uniform order that is not built), and every id of a
    mixture is compared with the plan's (its ids repeat: that proves
    coverage with their multiplicities).

    Memory: a bitmap of N/8 bytes (N the store's size; none for a mixture),
    plus a few 8 MiB buffers. For
    kind='uniform' the permutation itself is built (about 16 bytes per
    sample, as when it was written) when it fits in the memory available, or
    when drop_last drops a short last step; otherwise the ids are counted
    (each once, all present), not compared with the plan.

    Args:
        path: the plan directory.
        progress: called as ``progress(bytes_read, bytes_total)``.

    A token plan (written with lengths) is checked step by step instead:
    its files' checksums, the step offsets, exact coverage of every step,
    every micro-batch within the caps (fillers included), the same
    micro-batch count on every rank, the step table (``T_t``, ``M``, the
    filler), the balance bound (the spread of the ranks' costs at most the
    step's largest single cost) and, when the lengths file recorded in the
    manifest is reachable, the stored lengths against its values, its
    digest, and every id against the dealing recomputed from it.

    Returns:
        True when every id was compared with the recomputed plan; False when
        a uniform plan's ids could only be counted, or when a token plan's
        lengths file is not reachable
        (:func:`~epochplan.planfile.tokens.verify.lengths_unreachable` says
        why).

    Raises:
        PlanError: naming the file and its first violation.
    """
    progress = progress_arg(progress)
    if is_part(path_arg(path, "path")):
        verify_part(path, progress=progress)
        return True
    d = open_plan(path)
    check_verify_memory(d.path, d.spec)
    if d.tokens is not None:
        return verify_token_plan(d, progress)
    files = d.parsed.files
    total = sum(f.bytes for f in files)
    compare = d.kind != "uniform" or uniform_fits(d.spec)
    compared = True
    base = 0
    for i, epoch in enumerate(d.epochs):
        entries = d.parsed.epoch_files(i)
        report = None
        if progress is not None:
            cb = progress

            def report(done: int, base: int = base, cb: Progress = cb) -> None:
                cb(base + done, total)

        compared &= _native.verify_epoch_files(
            [str(d.path / f.path) for f in entries],
            [f.count for f in entries],
            [f.bytes for f in entries],
            [f.blake3 for f in entries],
            d.world_size,
            d.spec.plan(epoch),
            progress=report,
            compare_ids=compare,
        )
        base += sum(f.bytes for f in entries)
    return compared
