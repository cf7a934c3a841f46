"""Writing a token plan's files: each epoch written by the native writer
(every step dealt once, on every core, a batch of steps at a time), the rank
files of ids in the balanced dealing's order and, beside them, the token
files a rank reads alone (see :mod:`epochplan.planfile.tokens`)."""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import epochplan._native as _native
from epochplan._files import map_npy
from epochplan._native import PlanSpec
from epochplan.planfile._checks import path_arg
from epochplan.planfile.manifest import FileEntry, rank_file_name
from epochplan.planfile.manifest.tokens import STEP_COLUMNS, TokenFile, TokenInfo, token_file_name

__all__ = ["array_source", "token_plan_bytes", "write_token_epoch"]

_HEADER_BYTES = len(_native.npy_header(0))


def array_source(value: Any, name: str) -> tuple[Any, str | None, str | None, int | None]:
    """``value`` (a path to a ``.npy`` file, or an array) as an array, with
    the file it is read from when there is one: its path (as given, made
    absolute), dtype and the offset of its values. A path is memory-mapped;
    an ``np.memmap`` of a whole file (not a view of one) records its file;
    any other array records none."""
    if isinstance(value, (str, os.PathLike)):
        path = Path(os.path.abspath(path_arg(value, name)))
        try:
            array, offset = map_npy(path)
        except OSError as e:
            raise type(e)(e.errno, f"{name}: cannot read {str(path)!r}: {e.strerror}") from None
        except ValueError as e:
            raise ValueError(f"{name}: {str(path)!r} is not a .npy file of integers: {e}") from None
        return array, str(path), array.dtype.str, offset
    if isinstance(value, np.memmap) and isinstance(value.base, mmap.mmap) and value.filename:
        path = Path(os.path.abspath(value.filename))
        return value, str(path), value.dtype.str, int(value.offset)
    return value, None, None, None


def token_plan_bytes(
    spec: PlanSpec, world_size: int, num_epochs: int, info: TokenInfo, block: int = 1
) -> int:
    """About the disk a token plan takes (each file rounded up to whole
    blocks): its ids, lengths (and loss tokens), offsets and step tables."""
    layout = spec.layout
    steps = layout.num_steps
    samples = min(steps * layout.global_batch_size, layout.num_samples)
    roles = ["ids", *(r for r in info.roles if r != "offsets")]
    itemsizes = [np.dtype(info.dtype(r)).itemsize for r in roles]
    data = sum(size * samples + world_size * (_HEADER_BYTES + block) for size in itemsizes)
    offsets = world_size * (8 * (steps + 1) + _HEADER_BYTES + block)
    table = 8 * len(STEP_COLUMNS) * steps + _HEADER_BYTES + block
    return (data + offsets + table) * num_epochs


def write_token_epoch(
    tmp: Path,
    epoch: int,
    world_size: int,
    dealer: _native.TokenDealer,
    roles: tuple[str, ...],
    report: Callable[[int], None] | None,
    ranks: list[int] | None = None,
) -> tuple[list[FileEntry], list[TokenFile]]:
    """Writes one epoch of a token plan into ``tmp`` with the native writer
    (every core, memory independent of the plan's size): per rank its ids in
    dealing order and its token files of ``roles``, and the epoch's step
    table. With ``ranks`` (a part's), those ranks' files only, and the step
    table with rank 0's. ``report(samples)`` is called as samples are
    written (every sample of the epoch is dealt, whichever ranks are
    written). For a whole plan (``ranks`` None), lengths memory-mapped from
    a file are staged in the epoch's order in an unlinked scratch file in
    ``tmp`` (8 bytes a sample while the epoch is written), so that the
    process maps none of their pages for long. A part reads them by id:
    every part deals the whole epoch, and the processes of a node share
    the file's page cache, where staging would write 8 bytes a sample per
    part to the plan's (often shared) storage."""
    whole = ranks is None
    ranks = list(range(world_size)) if ranks is None else ranks
    has_table = bool(ranks) and ranks[0] == 0

    def paths(role: str) -> list[str]:
        return [str(tmp / token_file_name(epoch, r, role)) for r in ranks]

    ids, token = dealer.write_files(
        [str(tmp / rank_file_name(epoch, r)) for r in ranks],
        paths("offsets"),
        paths("lengths"),
        paths("loss_tokens") if "loss_tokens" in roles else None,
        str(tmp / token_file_name(epoch, None, "steps")) if has_table else None,
        ranks=ranks,
        progress=report,
        scratch=str(tmp) if whole else None,
    )
    rank_files = [
        FileEntry(epoch, r, rank_file_name(epoch, r), count, nbytes, digest)
        for r, (count, nbytes, digest) in zip(ranks, ids, strict=True)
    ]
    table: list[tuple[int | None, str]] = [(None, "steps")] if has_table else []
    names = table + [(r, role) for r in ranks for role in roles]
    token_files = [
        TokenFile(epoch, r, role, token_file_name(epoch, r, role), count, nbytes, digest)
        for (r, role), (count, nbytes, digest) in zip(names, token, strict=True)
    ]
    return rank_files, token_files
