"""Writing a token plan's files: each epoch dealt a range of steps at a time
(every step once per group of ranks), the rank files of ids in the balanced
dealing's order and, beside them, the token files a rank reads alone (see
:mod:`epochplan.planfile.tokens`)."""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._files import map_npy
from epochplan._spec import PlanSpec
from epochplan.planfile._checks import path_arg
from epochplan.planfile.manifest import FileEntry, rank_file_name
from epochplan.planfile.tokens import STEP_COLUMNS, TokenFile, token_file_name

__all__ = ["array_source", "token_plan_bytes", "write_token_epoch"]

# Ranks whose files are open at once (each dealt step serves them all).
_RANK_GROUP = 64
# Samples dealt per call into the native dealer.
_BATCH_SAMPLES = 1 << 18
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
    spec: PlanSpec, world_size: int, num_epochs: int, has_loss: bool, block: int = 1
) -> int:
    """About the disk a token plan takes (each file rounded up to whole
    blocks): its ids, lengths (and loss tokens), offsets and step tables."""
    samples = sum(spec.rank_counts(world_size))
    steps = spec.layout().num_steps
    per_rank_files = 3 if has_loss else 2
    data = per_rank_files * (8 * samples + world_size * (_HEADER_BYTES + block))
    offsets = world_size * (8 * (steps + 1) + _HEADER_BYTES + block)
    table = 8 * len(STEP_COLUMNS) * steps + _HEADER_BYTES + block
    return (data + offsets + table) * num_epochs


class _NpyWriter:
    """A new 1-d little-endian int64 ``.npy`` file written in pieces; its
    header (always the same size) is written again with the count at the end."""

    def __init__(self, path: Path, stack: contextlib.ExitStack) -> None:
        self.path = path
        self.count = 0
        self._file: IO[bytes] = stack.enter_context(open(path, "xb"))  # noqa: SIM115 - closed by finish or the stack
        self._file.write(_native.npy_header(0))

    def write(self, values: npt.NDArray[Any]) -> None:
        self._file.write(np.ascontiguousarray(values, dtype="<i8").tobytes())
        self.count += len(values)

    def finish(self) -> tuple[int, int, str]:
        """Completes the file; its ``(count, bytes, blake3)``."""
        header = _native.npy_header(self.count)
        if len(header) != _HEADER_BYTES:  # pragma: no cover - a 1-d header never grows
            raise RuntimeError(f"{self.path}: the .npy header changed size")
        self._file.seek(0)
        self._file.write(header)
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        return self.count, _native.npy_file_size(self.count), _native.file_checksum(self.path)


def write_token_epoch(
    tmp: Path,
    epoch: int,
    spec: PlanSpec,
    world_size: int,
    dealer: _native.TokenDealer,
    roles: tuple[str, ...],
    report: Callable[[int], None] | None,
) -> tuple[list[FileEntry], list[TokenFile]]:
    """Writes one epoch of a token plan into ``tmp``: per rank its ids in
    dealing order and its token files of ``roles``, and the epoch's step
    table. ``report(samples)`` is called as samples are written."""
    steps = spec.layout().num_steps
    per_call = max(1, _BATCH_SAMPLES // spec.global_batch_size)
    rank_files: list[FileEntry] = []
    token_files: list[TokenFile] = []
    table_entry: TokenFile | None = None
    done = 0
    for first in range(0, world_size, _RANK_GROUP):
        ranks = range(first, min(world_size, first + _RANK_GROUP))
        with contextlib.ExitStack() as stack:
            ids_out = [_NpyWriter(tmp / rank_file_name(epoch, r), stack) for r in ranks]
            role_out = {
                role: [_NpyWriter(tmp / token_file_name(epoch, r, role), stack) for r in ranks]
                for role in roles
            }
            table_out = None
            if first == 0:
                table_out = _NpyWriter(tmp / token_file_name(epoch, None, "steps"), stack)
            totals = np.zeros(len(ranks), dtype=np.int64)
            for out in role_out["offsets"]:
                out.write(np.zeros(1, dtype=np.int64))
            for start in range(0, steps, per_call):
                stop = min(steps, start + per_call)
                ids, lengths, losses, counts, table = dealer.steps(
                    start, stop, ranks.start, ranks.stop
                )
                if table_out is not None:
                    table_out.write(table.ravel())
                ends = totals + np.cumsum(counts, axis=0)
                for k in range(len(ranks)):
                    ids_out[k].write(ids[k])
                    role_out["offsets"][k].write(ends[:, k])
                    role_out["lengths"][k].write(lengths[k])
                    if losses is not None:
                        role_out["loss_tokens"][k].write(losses[k])
                    done += len(ids[k])
                if len(ends):
                    totals = ends[-1]
                if report is not None:
                    report(done)
            for k, r in enumerate(ranks):
                count, nbytes, digest = ids_out[k].finish()
                rank_files.append(
                    FileEntry(epoch, r, rank_file_name(epoch, r), count, nbytes, digest)
                )
                for role in roles:
                    count, nbytes, digest = role_out[role][k].finish()
                    name = token_file_name(epoch, r, role)
                    token_files.append(TokenFile(epoch, r, role, name, count, nbytes, digest))
            if table_out is not None:
                count, nbytes, digest = table_out.finish()
                name = token_file_name(epoch, None, "steps")
                table_entry = TokenFile(epoch, None, "steps", name, count, nbytes, digest)
    if table_entry is None:  # pragma: no cover - world_size >= 1
        raise RuntimeError("no rank group wrote the step table")
    return rank_files, [table_entry, *token_files]
