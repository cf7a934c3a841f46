"""Plans written in parts by independent processes, then merged.

Every rank file of a plan is a pure function of the plan's parameters, so
``n`` processes (a Slurm array, torchrun's ranks, Ray tasks) can each write
part ``i`` of ``n``: a directory holding the ``i``-th of ``n`` contiguous
runs of the plan's rank files (epoch-major) and ``part.json`` (the plan's
manifest listing that part's files). :func:`merge_plan` checks that the parts
are exactly parts ``0 .. n-1`` of one plan and assembles the plan directory,
byte for byte the one :func:`~epochplan.planfile.write_plan` writes in one
process (the same files, the same manifest and checksum); rank files are
hard-linked from the parts where they share a filesystem, copied otherwise.
A part is published atomically: a crashed writer leaves no part, and the
merge names the part that is missing. :func:`verify_part` checks one part's
files (each id against the plan), so verification parallelises the same way.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import epochplan._native as _native
from epochplan._args import int_arg
from epochplan._native import PlanSpec
from epochplan.planfile._checks import Progress, absolute, path_arg, progress_arg
from epochplan.planfile.errors import PlanError, plan_os_error
from epochplan.planfile.manifest import (
    MANIFEST,
    PART_FILE,
    PART_FORMAT,
    Manifest,
    manifest_checksum,
    read_json,
)
from epochplan.planfile.publish import WriterLock, fsync_dir, new_partial, publish
from epochplan.planfile.reader import PlanDirectory, open_plan
from epochplan.planfile.space import SPACE_DIR
from epochplan.planfile.tokens.verify import verify_token_part
from epochplan.planfile.write import (
    _write_new_plan,
    apply_oversize_cap,
    checked_files,
    stored_space,
    token_args,
)

__all__ = ["Part", "is_part", "merge_plan", "verify_part", "write_plan_part"]


@dataclass(frozen=True)
class Part:
    """Part ``index`` of ``count`` (``0 <= index < count``).

    Examples:
        >>> Part.parse("2/8"), Part.from_environment({"SLURM_ARRAY_TASK_ID": "4",
        ...     "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "4"})
        (Part(index=2, count=8), Part(index=3, count=4))
    """

    index: int
    count: int

    def __post_init__(self) -> None:
        int_arg(self.count, "count", 1, 1 << 20)
        int_arg(self.index, "index", 0, self.count - 1)

    @classmethod
    def parse(cls, text: str) -> Part:
        """``"I/N"``."""
        index, sep, count = text.partition("/")
        if not sep or not index.strip().isdigit() or not count.strip().isdigit():
            raise ValueError(f"a part is written I/N (like 0/4), got {text!r}")
        return cls(int(index), int(count))

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Part:
        """The part a launcher gives this process: a Slurm array task
        (``SLURM_ARRAY_TASK_ID`` less ``SLURM_ARRAY_TASK_MIN``, of
        ``SLURM_ARRAY_TASK_COUNT``), else torchrun's or any launcher's
        ``RANK`` of ``WORLD_SIZE``."""
        env = os.environ if environ is None else environ
        for index_key, count_key in (
            ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT"),
            ("RANK", "WORLD_SIZE"),
        ):
            if index_key in env and count_key in env:
                try:
                    index = int(env[index_key]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0")) * (
                        index_key.startswith("SLURM")
                    )
                    return cls(index, int(env[count_key]))
                except ValueError as e:
                    raise ValueError(f"{index_key}/{count_key} do not name a part: {e}") from None
        raise ValueError(
            "no part in the environment: set SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT "
            "(a Slurm array) or RANK and WORLD_SIZE (torchrun), or give the part"
        )


def write_plan_part(
    out: str | os.PathLike[str],
    spec: PlanSpec,
    world_size: int,
    part: Part,
    *,
    epochs: Iterable[int] = (0,),
    micro_batch_size: int | None = None,
    max_tokens: int | None = None,
    progress: Progress | None = None,
) -> Path:
    """Writes part ``part`` of the plan of ``spec`` for ``world_size`` ranks
    (its rank files of ``epochs`` and ``part.json``) to the new directory
    ``out``; returns ``out``. The arguments are
    :func:`~epochplan.planfile.write_plan`'s. A token plan's part holds its
    ranks' token files too, and each epoch's step table goes with the part
    that holds the epoch's rank 0; a part deals every step of each epoch it
    holds a rank of (the dealing balances a step over all ranks), so a
    token plan splits best into parts of whole epochs.

    Examples:
        >>> spec = PlanSpec(10**4, 64, seed=1)  # doctest: +SKIP
        >>> write_plan_part("parts/p0", spec, 8, Part(0, 4))  # doctest: +SKIP
    """
    out = absolute(path_arg(out, "out"))
    if not isinstance(spec, PlanSpec):
        raise TypeError(
            "spec must be a PlanSpec (PlanSpec(num_samples, global_batch_size, ...)), got "
            f"{type(spec).__name__}"
        )
    stored_space(spec)
    if not isinstance(part, Part):
        raise TypeError(f"part must be a Part (Part(index, count)), got {type(part).__name__}")
    world_size, epoch_list = checked_files(world_size, epochs)
    progress = progress_arg(progress)
    spec = apply_oversize_cap(spec, max_tokens)
    tokens = token_args(spec, world_size, micro_batch_size, max_tokens)
    new_parents = [p for p in out.parents if not p.exists()]
    try:
        _write_new_plan(
            out, False, spec, world_size, epoch_list, progress, tokens, (part.index, part.count)
        )
    except BaseException:
        for parent in new_parents:  # deepest first
            with contextlib.suppress(OSError):
                parent.rmdir()
        raise
    return out


@dataclass(frozen=True)
class _ReadPart:
    path: Path
    index: int
    count: int
    manifest: dict[str, Any]


def _read_part(path: Path) -> _ReadPart:
    where = path / PART_FILE
    try:
        doc = read_json(where)
    except OSError as e:
        raise plan_os_error(f"{where}: cannot read the part: {e.strerror or e}", e) from None
    except (ValueError, RecursionError) as e:
        raise PlanError(f"{where}: not a part of a plan: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != PART_FORMAT:
        raise PlanError(f"{where}: not a part of an epochplan plan")
    index, count, manifest = doc.get("part"), doc.get("num_parts"), doc.get("manifest")
    if type(count) is not int or type(index) is not int or not 0 <= index < count:
        raise PlanError(f"{where}: 'part' and 'num_parts' must be ints with 0 <= part < num_parts")
    if not isinstance(manifest, dict):
        raise PlanError(f"{where}: 'manifest' is not an object")
    # The part's manifest is sealed as a plan's is: a record changed in any
    # byte (a file's checksum, say) is refused before it is merged.
    if manifest.get("manifest_checksum") != manifest_checksum(manifest):
        raise PlanError(
            f"{where}: its manifest_checksum does not match its content: the part was "
            "changed after it was written (write it again)"
        )
    return _ReadPart(path, index, count, manifest)


#: What differs from part to part of one plan: its files, and so their
#: bytes and the manifest's checksum.
_PART_FIELDS = ("files", "token_files", "total_bytes", "manifest_checksum")


def _plan_fields(manifest: dict[str, Any]) -> dict[str, Any]:
    """What every part of one plan has the same: all but its files."""
    return {k: v for k, v in manifest.items() if k not in _PART_FIELDS}


def merge_plan(
    out: str | os.PathLike[str], parts: Iterable[str | os.PathLike[str]], *, force: bool = False
) -> PlanDirectory:
    """Assembles the plan directory ``out`` from the directories of all its
    parts, each given once; returns it opened. The result is byte for byte
    the plan written by one process.

    Raises:
        PlanError: a part missing, given twice, of another plan (other
            parameters, another number of parts) or incomplete, naming it;
            ``out`` existing without ``force``.
    """
    out = absolute(path_arg(out, "out"))
    read = [_read_part(absolute(path_arg(p, "parts[]"))) for p in parts]
    if not read:
        raise PlanError("parts must name at least one part directory")
    first = read[0]
    fields = _plan_fields(first.manifest)
    by_index: dict[int, _ReadPart] = {}
    for p in read:
        if p.count != first.count:
            raise PlanError(
                f"{p.path}: part {p.index} of {p.count}, but {first.path} is a part of "
                f"{first.count}"
            )
        other = _plan_fields(p.manifest)
        if other != fields:
            absent = object()
            key = next(
                k
                for k in sorted(set(other) | set(fields))
                if other.get(k, absent) != fields.get(k, absent)
            )
            raise PlanError(
                f"{p.path}: a part of another plan: its {key!r} is "
                f"{other.get(key, 'missing')!r}, {first.path}'s {fields.get(key, 'missing')!r}"
            )
        if p.index in by_index:
            raise PlanError(
                f"{p.path}: part {p.index} of {p.count} is given twice "
                f"(also {by_index[p.index].path})"
            )
        by_index[p.index] = p
    missing = [i for i in range(first.count) if i not in by_index]
    if missing:
        raise PlanError(
            f"parts {missing} of {first.count} are missing (given: {sorted(by_index)}); "
            "write each missing part again"
        )
    ordered = [by_index[i] for i in range(first.count)]
    document = dict(first.manifest)
    document["files"] = [f for p in ordered for f in p.manifest.get("files", [])]
    listed = list(document["files"])
    if "token_files" in document:
        document["token_files"] = [f for p in ordered for f in p.manifest["token_files"]]
        listed += document["token_files"]
    space_files = document.get("space", {}).get("files", []) if "space" in document else []
    document["total_bytes"] = sum(
        f.get("bytes", 0) for f in listed + list(space_files) if isinstance(f, dict)
    )
    del document["manifest_checksum"]
    document["manifest_checksum"] = manifest_checksum(document)
    # The assembled manifest passes every check of a whole plan's (each part
    # complete, every file listed once, in order).
    try:
        Manifest.parse(document, out / MANIFEST)
    except PlanError as e:
        raise PlanError(f"the parts do not make a whole plan: {e}") from None
    for p in ordered:
        for f in _listed_files(p.manifest):
            size = _size(p.path / f["path"])
            if size != f["bytes"]:
                raise PlanError(
                    f"{p.path / f['path']}: has {size} bytes, its part lists {f['bytes']} "
                    "(the part is incomplete or altered)"
                )
    _assemble(out, force, ordered, document)
    return open_plan(out)


def _listed_files(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """A (checked) part's files: its rank files and token files."""
    return [*manifest["files"], *manifest.get("token_files", [])]


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError as e:
        raise plan_os_error(f"{path}: missing: {e.strerror or e}", e) from None


def _assemble(out: Path, force: bool, parts: list[_ReadPart], document: dict[str, Any]) -> None:
    """Links (or copies) the parts' files into a partial directory, writes the
    manifest and publishes it as ``out``."""
    if out.exists() and not force:
        raise PlanError(f"{out} already exists (use force=True, or --force, to replace it)")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = new_partial(out, "merge-")
    tmp.mkdir()
    try:
        lock = WriterLock(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        for p in parts:
            for f in _listed_files(p.manifest):
                _link(p.path / f["path"], tmp / f["path"])
        space = parts[0].path / SPACE_DIR
        if space.is_dir():
            for item in sorted(space.rglob("*")):
                if item.is_file():
                    _link(item, tmp / item.relative_to(parts[0].path))
        with open(tmp / MANIFEST, "w") as fh:
            # As write_plan writes it: the same JSON, the same bytes.
            json.dump(document, fh, indent=1)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        for d in {tmp, *(q.parent for q in tmp.rglob("*") if q.is_file())}:
            fsync_dir(d)
        publish(tmp, lock, out, force)
    except OSError as e:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        raise plan_os_error(f"{out}: cannot merge there: {e.strerror or e}", e, out) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        lock.release()
        raise


def _link(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError as e:
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(source, target)


def is_part(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is a part directory (``part.json``, no manifest)."""
    root = Path(path)
    return (root / PART_FILE).is_file() and not (root / MANIFEST).exists()


def verify_part(path: str | os.PathLike[str], *, progress: Progress | None = None) -> bool:
    """Checks one part of a plan: its ``part.json``, and each of its rank
    files' header, size, checksum and every id against the plan. Coverage
    (every sample once an epoch) is the merged plan's to check
    (:func:`~epochplan.planfile.verify_plan`). A token plan's part: every
    file's size and checksum, and, when its lengths file can be read as the
    part records it, every file against its ranks dealt again.

    Returns:
        Whether every id was checked against the plan (False only for a
        token plan's part whose lengths file cannot be read).

    Raises:
        PlanError: naming the file and its first violation.
    """
    progress = progress_arg(progress)
    p = _read_part(absolute(path_arg(path, "path")))
    where = p.path / PART_FILE
    parsed = Manifest.parse(p.manifest, where, part=True)
    spec = parsed.spec
    if parsed.space is not None:
        spec = spec.replace(num_samples=parsed.space.build(p.path, where))
    if parsed.tokens is not None:
        return verify_token_part(p.path, parsed, spec, progress)
    total = sum(f.bytes for f in parsed.files)
    base = 0
    for epoch in parsed.epochs:
        entries = [f for f in parsed.files if f.epoch == epoch]
        if not entries:
            continue
        report = None
        if progress is not None:
            cb = progress

            def report(done: int, base: int = base, cb: Progress = cb) -> None:
                cb(base + done, total)

        _native.verify_epoch_files(
            [str(p.path / f.path) for f in entries],
            [f.count for f in entries],
            [f.bytes for f in entries],
            [f.blake3 for f in entries],
            parsed.world_size,
            spec.plan(epoch),
            progress=report,
            ranks=[f.rank for f in entries],
        )
        base += sum(f.bytes for f in entries)
    return True
