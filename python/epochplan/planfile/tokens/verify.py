"""Verifying a token plan's directory in the core, an epoch at a time (see
``planfile::verify_token_files``): besides every file's checksum and exact
coverage, per step and rank, every micro-batch within the caps (fillers
included), the same micro-batch count on every rank, the balance bound, and
the stored lengths against the lengths file when it is reachable (then also
the file's digest and every id against the dealing recomputed from it)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

import epochplan._native as _native
from epochplan._native import MixtureEpoch, PlanSpec, Tokens
from epochplan.planfile.errors import PlanError
from epochplan.planfile.manifest import FileEntry, Manifest
from epochplan.planfile.manifest.tokens import ArraySource, TokenFile, TokenInfo
from epochplan.planfile.reader import PlanDirectory
from epochplan.planfile.space import store_size
from epochplan.planfile.tokens.write import write_token_epoch

__all__ = ["lengths_unreachable", "verify_token_part", "verify_token_plan"]


def _open_source(source: ArraySource, num_samples: int) -> Any:
    """The array a source names, memory-mapped; OSError or ValueError when
    it cannot be read as recorded."""
    if source.path is None or source.dtype is None or source.offset is None:
        raise ValueError("the plan was written from an array in memory: no file is recorded")
    return np.memmap(
        source.path, dtype=np.dtype(source.dtype), mode="r", offset=source.offset,
        shape=(num_samples,),
    )  # fmt: skip


def lengths_unreachable(d: PlanDirectory) -> str | None:
    """Why a token plan's lengths (or loss tokens) file cannot be read as the
    manifest records it, or None when it can."""
    info = d.tokens
    if info is None:
        return "the plan has no lengths"
    for source in (info.lengths, info.loss_tokens):
        if source is None:
            continue
        try:
            _open_source(source, store_size(d.space, d.num_samples))
        except (OSError, ValueError) as e:
            return f"{source.path or 'lengths'}: {e}"
    return None


def _listed(d: PlanDirectory, entry: TokenFile | FileEntry) -> tuple[str, int, int, str]:
    return (str(d.path / entry.path), entry.count, entry.bytes, entry.blake3)


def _token_spec(d: PlanDirectory, file_lengths: Any, file_loss: Any) -> PlanSpec:
    """The directory's spec with the lengths files as its tokens."""
    assert d.tokens is not None
    return _with_tokens(d.spec, d.tokens, file_lengths, file_loss)


def _with_tokens(spec: PlanSpec, info: TokenInfo, file_lengths: Any, file_loss: Any) -> PlanSpec:
    """``spec`` with the lengths files as the tokens ``info`` records."""
    cost = info.cost if isinstance(info.cost, str) else (info.cost[0], info.cost[1])
    tokens = Tokens(
        file_lengths,
        file_loss,
        cost=cost,
        loss_normalization=info.loss_normalization,
        max_length=info.max_length,
        packing=info.packing,
    )
    return spec.replace(tokens=tokens)


def _check_digests(root: Path, info: TokenInfo, plan: Any) -> None:
    """The digests of the lengths files ``plan`` reads are the ones ``info``
    recorded when the plan was written."""
    loss_digest = None if info.loss_tokens is None else info.loss_tokens.digest
    recorded = (info.lengths.digest, loss_digest)
    state = plan.state_dict()
    digests = (state["lengths_digest"], state["loss_tokens_digest"])
    if digests != recorded:
        raise PlanError(
            f"{root}: the lengths files' digests {digests} are not the manifest's "
            f"{recorded}: the files changed since the plan was written"
        )


def verify_token_plan(d: PlanDirectory, progress: Callable[[int, int], None] | None) -> bool:
    """Verifies a token plan's directory (see the module docs). Returns
    whether the stored lengths were compared with the lengths file (False
    when it is not reachable: :func:`lengths_unreachable` says why)."""
    info = d.tokens
    assert info is not None
    total = d.parsed.total_bytes
    reachable = lengths_unreachable(d) is None
    spec = d.spec
    if reachable:
        store = store_size(d.space, d.num_samples)
        file_lengths = _open_source(info.lengths, store)
        file_loss = None
        if info.loss_tokens is not None:
            file_loss = _open_source(info.loss_tokens, store)
        spec = _token_spec(d, file_lengths, file_loss)
    done = 0
    w = d.world_size
    for epoch in d.epochs:
        index = d.epoch_index(epoch)

        def listed(role: str, index: int = index) -> list[tuple[str, int, int, str]]:
            return [_listed(d, info.file(index, w, r, role)) for r in range(w)]

        plan = spec.plan(epoch)
        dealing = _native.verify_token_epoch(
            plan,
            w,
            [_listed(d, f) for f in d.parsed.epoch_files(index)],
            listed("offsets"),
            listed("lengths"),
            listed("loss_tokens") if info.loss_tokens is not None else None,
            _listed(d, info.file(index, w, None, "steps")),
            directory=str(d.path),
            file_dtypes=(info.dtype("lengths"), info.dtype("loss_tokens")),
            cost=info.cost,
            loss_normalization=info.loss_normalization,
            micro_batch_size=info.micro_batch_size,
            max_tokens=info.max_tokens,
        )
        if reachable and epoch == d.epochs[0]:
            _check_digests(d.path, info, plan)
        if dealing is not None:
            raise dealing
        done += sum(f.bytes for f in d.parsed.epoch_files(index))
        done += sum(f.bytes for f in info.files if f.epoch == epoch)
        if progress is not None:
            progress(done, total)
    return reachable


def verify_token_part(
    root: Path, parsed: Manifest, spec: PlanSpec, progress: Callable[[int, int], None] | None
) -> bool:
    """Verifies the part of a token plan at ``root`` (its manifest
    ``parsed``; ``spec`` over the part's space): every file's size and
    checksum, then, when the lengths file is reachable, every file against
    the part's ranks dealt again from it (written beside the part and
    compared by checksum). Coverage, the balance and the equal counts are
    the merged plan's to check. Returns whether the lengths were reachable."""
    info = parsed.tokens
    assert info is not None
    listed: list[FileEntry | TokenFile] = [*parsed.files, *info.files]
    total = 2 * sum(f.bytes for f in listed)
    done = 0
    for f in listed:
        path = root / f.path
        size = path.stat().st_size if path.is_file() else None
        if size != f.bytes:
            raise PlanError(f"{path}: has {size} bytes, the part lists {f.bytes}")
        if _native.file_checksum(path) != f.blake3:
            raise PlanError(f"{path}: its checksum is not the one the part lists")
        done += f.bytes
        if progress is not None:
            progress(done, total)
    space = spec.space
    assert not isinstance(space, MixtureEpoch)  # a directory stores the mixture
    store = store_size(space, spec.num_samples)
    try:
        file_lengths = _open_source(info.lengths, store)
        file_loss = None if info.loss_tokens is None else _open_source(info.loss_tokens, store)
    except (OSError, ValueError):
        return False
    spec = _with_tokens(spec, info, file_lengths, file_loss)
    _check_digests(root, info, spec.plan(parsed.epochs[0]))
    w = parsed.world_size
    kwargs = {"micro_batch_size": info.micro_batch_size, "max_tokens": info.max_tokens}
    with tempfile.TemporaryDirectory(prefix=".verify-", dir=root) as scratch:
        for epoch in parsed.epochs:
            ranks = [f.rank for f in parsed.files if f.epoch == epoch]
            if not ranks:
                continue
            dealer = _native.TokenDealer(spec.plan(epoch), w, **kwargs)
            (Path(scratch) / f"epoch-{epoch:04d}").mkdir()
            rank_files, token_files = write_token_epoch(
                Path(scratch), epoch, w, dealer, info.roles, None, ranks
            )
            mine: list[FileEntry | TokenFile] = [f for f in parsed.files if f.epoch == epoch]
            mine += [f for f in info.files if f.epoch == epoch]
            dealt: list[FileEntry | TokenFile] = [*rank_files, *token_files]
            for want, got in zip(mine, dealt, strict=True):
                if (want.path, want.blake3) != (got.path, got.blake3):
                    raise PlanError(
                        f"{root / want.path}: not the plan's file (dealt again from "
                        f"{info.lengths.path}, its checksum differs)"
                    )
            done += sum(f.bytes for f in mine)
            if progress is not None:
                progress(done, total)
            shutil.rmtree(Path(scratch) / f"epoch-{epoch:04d}")
    return True
