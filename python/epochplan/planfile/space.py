"""A plan's index space in its directory: the manifest's ``space`` section.

A plan over a :class:`~epochplan.Selection` or :class:`~epochplan.Mixture`
(plan-file version 4) records its space so that a reader rebuilds exactly
that space from the directory alone: a spec in the
:doc:`space-file </reference/space-files>` format whose paths point inside
the directory, the space's digest (as a plan's state records it) and the
files the spec reads, each with its size and BLAKE3 checksum::

    space/mask.npy                  a selection's mask (1-d bool)
    space/indices.npy               a selection's ids (1-d int64, in its order)
    space/source-KKKKK.mask.npy     the same for a mixture's source K

Ranges, random-split parts and a mixture's sizes, quotas and seed are held
inline. :class:`SpaceInfo` is the section, parsed and checked once by
:meth:`SpaceInfo.parse`; :meth:`SpaceInfo.build` rebuilds the space, its
files' checksums checked first and the rebuilt space's digest last.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._native import Mixture, Selection
from epochplan._space_spec import space_from_spec, store_size
from epochplan.planfile.errors import PlanError, plan_os_error

__all__ = [
    "SPACE_DIR",
    "SPACE_PLAN_FILE_VERSION",
    "SpaceFile",
    "SpaceInfo",
    "space_bytes",
    "space_digest",
    "store_size",
    "write_space",
]

#: The plan-file version of a directory holding a plan over an index space,
#: with or without lengths (a reader of versions 2 and 3 would take its ids
#: for ids of ``range(num_samples)``).
SPACE_PLAN_FILE_VERSION = 4
#: The folder of a plan directory that holds its space's files.
SPACE_DIR = "space"

_FILE_NAME = re.compile(r"space/[a-z0-9-]+(?:\.[a-z]+)?\.npy")
_DIGEST = re.compile(r"blake3:[0-9a-f]{64}")
_HEX = re.compile(r"[0-9a-f]{64}")
# A .npy header takes 128 bytes for any 1-d shape a store can have.
_HEADER_ALLOWANCE = 128


def space_digest(space: Selection | Mixture) -> str:
    """The space's digest, as the state of a plan over it records it (a
    mixture's of its first epoch, the epoch a plan file's space starts at)."""
    if isinstance(space, Selection):
        return space.digest()
    return space.epoch(0).digest()


@dataclass(frozen=True)
class SpaceFile:
    """One file of the space as the manifest lists it."""

    path: str
    bytes: int
    blake3: str


@dataclass(frozen=True)
class SpaceInfo:
    """The manifest's ``space`` section (see the module docs)."""

    #: The space-file spec; its paths are relative to the plan directory.
    spec: dict[str, Any]
    #: ``"blake3:"`` and 64 hex digits, as a plan's state records it.
    digest: str
    files: tuple[SpaceFile, ...]

    def section(self) -> dict[str, Any]:
        """The ``space`` field of the manifest."""
        return {
            "spec": self.spec,
            "digest": self.digest,
            "files": [asdict(f) for f in self.files],
        }

    @classmethod
    def parse(cls, value: Any, where: Path) -> SpaceInfo:
        """Checks a version-4 manifest's ``space``: its fields, every file's
        name (inside ``space/``), size and checksum, and that the spec reads
        exactly the files listed, each once. The spec's own forms are checked
        when the space is built."""
        if not isinstance(value, dict) or set(value) != {"spec", "digest", "files"}:
            raise PlanError(f"{where}: 'space' must be an object with 'spec', 'digest' and 'files'")
        spec, digest, files = value["spec"], value["digest"], value["files"]
        if not isinstance(spec, dict):
            raise PlanError(f"{where}: space['spec'] is not an object")
        if not (isinstance(digest, str) and _DIGEST.fullmatch(digest)):
            raise PlanError(f"{where}: space['digest'] is {digest!r}, not 'blake3:' and 64 hex")
        if not isinstance(files, list):
            raise PlanError(f"{where}: space['files'] is not a list")
        entries = []
        for i, entry in enumerate(files):
            if not isinstance(entry, dict) or set(entry) != {"path", "bytes", "blake3"}:
                raise PlanError(
                    f"{where}: space['files'][{i}] must be an object with 'path', 'bytes' "
                    "and 'blake3'"
                )
            path, size, checksum = entry["path"], entry["bytes"], entry["blake3"]
            if not (isinstance(path, str) and _FILE_NAME.fullmatch(path)):
                raise PlanError(
                    f"{where}: space['files'][{i}] 'path' is {path!r}, not a .npy file "
                    f"of {SPACE_DIR}/"
                )
            if type(size) is not int or size < 0:
                raise PlanError(f"{where}: space['files'][{i}] 'bytes' is {size!r}")
            if not (isinstance(checksum, str) and _HEX.fullmatch(checksum)):
                raise PlanError(f"{where}: space['files'][{i}] has no valid 'blake3' checksum")
            entries.append(SpaceFile(path, size, checksum))
        listed = sorted(f.path for f in entries)
        read = sorted(_spec_paths(spec))
        if listed != read:
            raise PlanError(
                f"{where}: space['spec'] reads the files {read}, space['files'] lists {listed}"
            )
        return cls(spec, digest, tuple(entries))

    def build(self, root: Path, where: Path) -> Selection | Mixture:
        """The space, rebuilt from the plan directory ``root``: each file's
        checksum checked, then the spec read, then the space's digest
        compared with the manifest's. PlanError naming the file or
        ``where`` (the manifest)."""
        for entry in self.files:
            path = root / entry.path
            try:
                checksum = _native.file_checksum(path)
            except OSError as e:
                raise plan_os_error(f"{path}: cannot read: {e.strerror or e}", e) from None
            if checksum != entry.blake3:
                raise PlanError(
                    f"{path}: its checksum is not the manifest's (the file was altered "
                    "after the plan was written)"
                )
        try:
            space = space_from_spec(self.spec, root, "space['spec']")
        except (ValueError, TypeError, OverflowError) as e:
            raise PlanError(f"{where}: cannot build the plan's space: {e}") from None
        digest = space_digest(space)
        if digest != self.digest:
            raise PlanError(
                f"{where}: the space built from space['spec'] has digest {digest}, the "
                f"manifest records {self.digest}: its files or spec changed after the plan "
                "was written"
            )
        return space


def _spec_paths(spec: Any) -> Iterator[str]:
    """The file names a spec reads (the ``mask`` and ``indices`` values,
    in a mixture's sources too); values of other types are left to the
    spec's own checks."""
    if not isinstance(spec, Mapping):
        return
    for key in ("mask", "indices"):
        if isinstance(spec.get(key), str):
            yield spec[key]
    sources = spec.get("mixture")
    if isinstance(sources, list):
        for source in sources:
            yield from _spec_paths(source)


def space_bytes(space: Selection | Mixture | None, block: int = 1) -> int:
    """The disk the space's files take (each rounded up to whole blocks of
    ``block`` bytes)."""
    if space is None:
        return 0
    sels = [space] if isinstance(space, Selection) else space.sources
    total = 0
    for sel in sels:
        if not isinstance(sel, Selection):
            continue
        item = {"mask": 1, "indices": 8}.get(sel.form)
        if item is not None:
            count = sel.num_samples if item == 1 else len(sel)
            total += -(-(_HEADER_ALLOWANCE + item * count) // block) * block
    return total


def write_space(space: Selection | Mixture, tmp: Path) -> SpaceInfo:
    """Writes the space's files into ``tmp/space/`` (a new plan directory's
    partial) and returns its section of the manifest."""
    files: list[SpaceFile] = []
    if isinstance(space, Selection):
        spec = _selection_spec(space, tmp, "", files)
    else:
        sources = space.sources
        spec = {
            "mixture": (
                [
                    _selection_spec(s, tmp, f"source-{k:05d}.", files)
                    for k, s in enumerate(sources)
                    if isinstance(s, Selection)
                ]
                if sources and isinstance(sources[0], Selection)
                else list(space.sizes)
            ),
            "quotas": list(space.quotas),
            "seed": space.seed,
        }
        if len(space.phases) > 1:  # a schedule: each later phase's quotas
            spec["phases"] = [
                [list(start) if isinstance(start, tuple) else start, list(quotas)]
                for start, quotas in space.phases[1:]
            ]
    return SpaceInfo(spec, space_digest(space), tuple(files))


def _selection_spec(
    sel: Selection, tmp: Path, prefix: str, files: list[SpaceFile]
) -> dict[str, Any]:
    """A selection's spec, its array (if any) written as ``space/PREFIXform.npy``."""
    n = sel.num_samples
    if sel.form == "ranges":
        return {"ranges": [[a, b] for a, b in sel.ranges or []], "num_samples": n}
    if sel.form == "split":
        part = sel.split_part
        if part is None:  # pragma: no cover - a split's part is always known
            raise RuntimeError("a random-split selection without its part")
        seed, start, length = part
        rest = n - start - length
        if start == 0:
            return {"split": [length, rest], "part": 0, "num_samples": n, "seed": seed}
        return {"split": [start, length, rest], "part": 1, "num_samples": n, "seed": seed}
    if sel.form == "mask":
        name = f"{SPACE_DIR}/{prefix}mask.npy"
        files.append(_save(tmp, name, sel.to_mask()))
        return {"mask": name}
    if sel.form == "indices":
        name = f"{SPACE_DIR}/{prefix}indices.npy"
        files.append(_save(tmp, name, np.asarray(sel, dtype="<i8")))
        return {"indices": name, "num_samples": n}
    raise TypeError(f"a selection of form {sel.form!r} cannot be stored in a plan directory")


def _save(tmp: Path, name: str, array: npt.NDArray[Any]) -> SpaceFile:
    """Writes a new ``.npy`` file, durably; its entry."""
    path = tmp / name
    path.parent.mkdir(exist_ok=True)
    with open(path, "xb") as f:
        np.lib.format.write_array(f, np.ascontiguousarray(array), allow_pickle=False)
        f.flush()
        os.fsync(f.fileno())
    return SpaceFile(name, path.stat().st_size, _native.file_checksum(path))
