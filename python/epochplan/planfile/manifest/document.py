"""The manifest of a plan directory: what the files hold, parsed and checked once.

A :class:`~epochplan.PlanSpec` is the parameters that decide a plan's ids
(one value); a :class:`Manifest` is the spec plus what a directory
holds of it: the world size, the epochs and one :class:`FileEntry` per rank
file. :meth:`Manifest.parse` checks every field against the spec (counts,
sizes, paths, step count), so a reader trusts a ``Manifest`` it was given.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import epochplan._native as _native
from epochplan._args import limit_label
from epochplan._files import read_regular
from epochplan._kinds import kind_value, plan_fields
from epochplan._native import FORMAT_VERSION, PlanSpec
from epochplan.planfile.errors import PlanError, plan_os_error
from epochplan.planfile.manifest.tokens import (
    CUT_PLAN_FILE_VERSION,
    NARROW_PLAN_FILE_VERSION,
    PACKED_PLAN_FILE_VERSION,
    TOKEN_PLAN_FILE_VERSION,
    TokenInfo,
)
from epochplan.planfile.space import SPACE_PLAN_FILE_VERSION, SpaceInfo

__all__ = [
    "MANIFEST",
    "MAX_FILES",
    "PLAN_FILE_FORMAT",
    "PLAN_FILE_VERSION",
    "FileEntry",
    "Manifest",
    "manifest_checksum",
    "rank_file_name",
]

#: The manifest's file name inside a plan directory.
MANIFEST = "manifest.json"
#: The manifest's ``format`` field.
PLAN_FILE_FORMAT = "epochplan-plan"
#: The layout version of plan directories this release writes and reads
#: (2: the manifest carries a checksum of its own content). A token plan's
#: directory has version 3 (``TOKEN_PLAN_FILE_VERSION``): a version-2 reader
#: would serve its ids with the strided micro-batches and weights. A plan over
#: an index space, with or without lengths, has version 4
#: (``SPACE_PLAN_FILE_VERSION``): an older reader would take its ids for ids
#: of ``range(num_samples)``. A token plan whose samples are cut has version 5
#: (``CUT_PLAN_FILE_VERSION``), one packed first fit version 6
#: (``PACKED_PLAN_FILE_VERSION``), one whose lengths files are narrower than
#: int64 version 7 (``NARROW_PLAN_FILE_VERSION``).
PLAN_FILE_VERSION = 2
#: The most files (world_size x epochs) one plan directory may hold.
MAX_FILES = 1 << 20

# A manifest lists at most MAX_FILES files in a few hundred bytes each.
_MAX_MANIFEST_BYTES = 1 << 30


def manifest_checksum(manifest: Mapping[str, Any]) -> str:
    """The checksum that authenticates a manifest: BLAKE2b-256 of its canonical
    JSON (sorted keys, no spaces), every field but ``manifest_checksum`` itself
    included. The rank files' checksums are fields, so the parameters, the
    epochs and every file's ids are bound together: a reader refuses a
    manifest changed in any byte."""
    body = {key: value for key, value in manifest.items() if key != "manifest_checksum"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return "blake2b-256:" + hashlib.blake2b(text.encode(), digest_size=32).hexdigest()


#: A part of a plan written in parts holds this instead of the manifest.
PART_FILE = "part.json"
PART_FORMAT = "epochplan-plan-part"


def part_places(num_files: int, part: tuple[int, int] | None) -> list[int]:
    """The places (epoch-major indices) of the rank files a part writes:
    part ``i`` of ``n`` takes the ``i``-th of ``n`` contiguous runs of equal
    length (plus or minus one); every file without a part."""
    if part is None:
        return list(range(num_files))
    i, n = part
    return list(range(i * num_files // n, (i + 1) * num_files // n))


def part_document(manifest: dict[str, Any], part: tuple[int, int]) -> dict[str, Any]:
    """What ``part.json`` holds: the part's index and count and the plan's
    manifest listing the part's files (``total_bytes`` is the whole plan's)."""
    return {"format": PART_FORMAT, "part": part[0], "num_parts": part[1], "manifest": manifest}


def rank_file_name(epoch: int, rank: int) -> str:
    """The path of a rank file inside a plan directory."""
    return f"epoch-{epoch:04d}/rank-{rank:05d}.npy"


def files_bytes(counts: list[int], num_epochs: int, block: int = 1) -> int:
    """The bytes of a plan's files: one per rank (of ``counts`` ids) per epoch,
    each rounded up to whole blocks of ``block`` bytes (what it takes on disk)."""
    return sum(-(-_native.npy_file_size(c) // block) * block for c in counts) * num_epochs


@dataclass(frozen=True)
class FileEntry:
    """One rank file as the manifest lists it."""

    epoch: int
    rank: int
    path: str
    count: int
    bytes: int
    blake3: str


@dataclass(frozen=True)
class Manifest:
    """A plan directory's manifest, parsed and checked (see :meth:`parse`)."""

    spec: PlanSpec
    world_size: int
    epochs: tuple[int, ...]
    num_steps: int
    total_bytes: int
    files: tuple[FileEntry, ...]
    #: A token plan's lengths, models, caps and token files; None otherwise.
    tokens: TokenInfo | None = None
    #: A plan's index space as recorded (its spec, digest and files); None
    #: for a plan over ``range(num_samples)``. ``spec.space`` is None until
    #: :func:`~epochplan.planfile.open_plan` builds the space from it.
    space: SpaceInfo | None = None

    @property
    def version(self) -> int:
        """The plan-file version of such a directory."""
        if self.tokens is not None and self.tokens.narrow:
            return NARROW_PLAN_FILE_VERSION
        if self.tokens is not None and self.tokens.packing != "sorted":
            return PACKED_PLAN_FILE_VERSION
        if self.tokens is not None and self.tokens.max_length is not None:
            return CUT_PLAN_FILE_VERSION
        if self.space is not None:
            return SPACE_PLAN_FILE_VERSION
        return PLAN_FILE_VERSION if self.tokens is None else TOKEN_PLAN_FILE_VERSION

    def epoch_files(self, epoch_index: int) -> tuple[FileEntry, ...]:
        """The rank files of the ``epoch_index``-th epoch, by rank."""
        w = self.world_size
        return self.files[epoch_index * w : (epoch_index + 1) * w]

    def to_json(self, created_by: str) -> dict[str, Any]:
        """The manifest as written to ``manifest.json``, sealed with its
        :func:`manifest_checksum`."""
        manifest = {
            "format": PLAN_FILE_FORMAT,
            "plan_file_version": self.version,
            "format_version": FORMAT_VERSION,
            "created_by": created_by,
            **plan_fields(self.spec),
            "world_size": self.world_size,
            "epochs": list(self.epochs),
            "num_steps": self.num_steps,
            "dtype": "<i8",
            "checksum": "blake3",
            "total_bytes": self.total_bytes,
            "files": [asdict(f) for f in self.files],
        }
        if self.tokens is not None:
            manifest["tokens"] = self.tokens.section()
            manifest["token_files"] = self.tokens.file_list()
        if self.space is not None:
            manifest["space"] = self.space.section()
        manifest["manifest_checksum"] = manifest_checksum(manifest)
        return manifest

    @classmethod
    def read(cls, path: Path) -> tuple[Manifest, dict[str, Any]]:
        """The manifest at ``path``, parsed, and its JSON as read."""
        try:
            raw = read_json(path)
        except FileNotFoundError as e:
            raise plan_os_error(
                f"{path}: missing (not a plan directory, or an unfinished write)", e
            ) from None
        except OSError as e:
            raise plan_os_error(f"{path}: cannot read the manifest: {e.strerror or e}", e) from None
        except (ValueError, RecursionError) as e:
            raise PlanError(f"{path}: cannot read the manifest: {e}") from None
        return cls.parse(raw, path), raw

    @classmethod
    def parse(cls, m: Any, where: Path, *, part: bool = False) -> Manifest:
        """Checks a manifest's JSON: its format and versions, every field's
        type, the spec (with the library's own checks), and every file entry
        against what the spec gives (count, size, path). PlanError names the
        field. A ``part`` manifest (of a plan written in parts) lists some of
        the plan's rank files, each at most once, in order."""
        if not isinstance(m, dict) or m.get("format") != PLAN_FILE_FORMAT:
            raise PlanError(f"{where}: not an epochplan plan manifest")
        version = m.get("plan_file_version")
        versions = (
            PLAN_FILE_VERSION,
            TOKEN_PLAN_FILE_VERSION,
            SPACE_PLAN_FILE_VERSION,
            CUT_PLAN_FILE_VERSION,
            PACKED_PLAN_FILE_VERSION,
            NARROW_PLAN_FILE_VERSION,
        )
        # type() too: JSON's 1.0 and true equal 1 in Python.
        if type(version) is not int or version not in versions:
            raise PlanError(
                f"{where}: plan_file_version is {version!r}; this release reads "
                f"version {PLAN_FILE_VERSION}, {TOKEN_PLAN_FILE_VERSION} for token plans, "
                f"{SPACE_PLAN_FILE_VERSION} for plans over an index space and "
                f"{CUT_PLAN_FILE_VERSION} for token plans whose samples are cut, "
                f"{PACKED_PLAN_FILE_VERSION} for token plans packed first fit and "
                f"{NARROW_PLAN_FILE_VERSION} for token plans whose lengths files are narrower "
                "than int64"
            )
        # Versions 5 to 7 are token plans, over a space or not.
        cut = version in (CUT_PLAN_FILE_VERSION, PACKED_PLAN_FILE_VERSION, NARROW_PLAN_FILE_VERSION)
        # A cut, packed or narrow plan says whether it is over a space by its 'space'.
        has_space = version == SPACE_PLAN_FILE_VERSION or (cut and "space" in m)
        # A plan over a space says whether it has lengths by its 'tokens'.
        has_tokens = version == TOKEN_PLAN_FILE_VERSION or cut or (has_space and "tokens" in m)
        if not has_tokens and ("tokens" in m or "token_files" in m):
            raise PlanError(
                f"{where}: a version-{version} manifest without 'tokens' holds no token "
                f"files (token plans have version {TOKEN_PLAN_FILE_VERSION}, or "
                f"{SPACE_PLAN_FILE_VERSION} with 'tokens' over an index space)"
            )
        if has_space != ("space" in m):
            raise PlanError(
                f"{where}: a version-{version} manifest "
                + ("needs a 'space'" if has_space else "holds no 'space'")
                + f" (plans over an index space have version {SPACE_PLAN_FILE_VERSION})"
            )
        space = SpaceInfo.parse(m["space"], where) if has_space else None
        fmt = m.get("format_version")
        if type(fmt) is not int or fmt != FORMAT_VERSION:
            raise PlanError(
                f"{where}: format_version is {fmt!r}; this release computes "
                f"format_version {FORMAT_VERSION}"
            )
        for key in ("num_samples", "global_batch_size", "world_size", "seed"):
            _field(m, key, int, where)
        for key in ("chunk_size", "preload_nchunks"):
            if m.get(key) is not None:
                _field(m, key, int, where)
        # The files are read as little-endian int64 and checked with BLAKE3,
        # whatever a manifest says: it must say so.
        for key, value in (("dtype", "<i8"), ("checksum", "blake3")):
            if m.get(key) != value:
                raise PlanError(f"{where}: manifest {key!r} is {m.get(key)!r}, expected {value!r}")
        kind = _field(m, "kind", str, where)
        if kind not in _native.KINDS:
            raise PlanError(f"{where}: unknown kind {kind!r}")
        _field(m, "drop_last", bool, where)
        epochs = _field(m, "epochs", list, where)
        if not epochs or not all(isinstance(e, int) and not isinstance(e, bool) for e in epochs):
            raise PlanError(f"{where}: 'epochs' must be a non-empty list of ints")
        if not all(0 <= e <= _native.MAX_SEED for e in epochs):
            raise PlanError(f"{where}: 'epochs' must lie in [0, {limit_label(_native.MAX_SEED)}]")
        if len(set(epochs)) != len(epochs):
            raise PlanError(f"{where}: 'epochs' has duplicates")
        files = _field(m, "files", list, where)
        w = m["world_size"]
        if w < 1 or (len(files) != w * len(epochs) and not part):
            raise PlanError(
                f"{where}: lists {len(files)} files, expected {len(epochs)} epochs x {w} ranks"
            )
        # Each entry's place among the plan's files: all of them in order, or
        # (a part) its own, in increasing order.
        places = list(range(len(files)))
        if part:
            places = [_place(f, epochs, w, i, where) for i, f in enumerate(files)]
            if places != sorted(set(places)):
                raise PlanError(f"{where}: the files of a part must be distinct and in order")
        try:
            spec = PlanSpec(
                m["num_samples"],
                m["global_batch_size"],
                seed=m["seed"],
                kind=kind_value(kind, m.get("chunk_size"), m.get("preload_nchunks")),
                drop_last=m["drop_last"],
            )
        except (ValueError, TypeError, OverflowError) as e:
            raise PlanError(f"{where}: bad plan parameters: {e}") from None
        num_steps = spec.layout.num_steps
        if type(m.get("num_steps")) is not int or m.get("num_steps") != num_steps:
            raise PlanError(
                f"{where}: num_steps is {m.get('num_steps')!r}, the parameters give {num_steps}"
            )
        counts = spec.rank_counts(w)
        if has_tokens:
            counts = _token_counts(files, counts, epochs, places, where)
        entries = []
        for i, entry in enumerate(files):
            epoch, rank = epochs[places[i] // w], places[i] % w
            if not isinstance(entry, dict):
                raise PlanError(f"{where}: files[{i}] is not an object")
            count = counts[i] if has_tokens else counts[rank]
            want = {
                "epoch": epoch,
                "rank": rank,
                "path": rank_file_name(epoch, rank),
                "count": count,
                "bytes": _native.npy_file_size(count),
            }
            for key, value in want.items():
                # The exact type too: 38.0 equals 38 but is no count.
                if type(entry.get(key)) is not type(value) or entry.get(key) != value:
                    raise PlanError(
                        f"{where}: files[{i}] {key!r} is {entry.get(key)!r}, expected {value!r}"
                    )
            digest = entry.get("blake3")
            if not (isinstance(digest, str) and len(digest) == 64):
                raise PlanError(f"{where}: files[{i}] has no valid 'blake3' checksum")
            entries.append(FileEntry(**want, blake3=digest))
        tokens = None
        if has_tokens:
            tokens = TokenInfo.parse(m, where, epochs, w, num_steps, counts, version, places)
            total_bytes = sum(f.bytes for f in entries) + sum(f.bytes for f in tokens.files)
        else:
            total_bytes = files_bytes(counts, len(epochs))
        if space is not None:
            total_bytes += sum(f.bytes for f in space.files)
        if type(m.get("total_bytes")) is not int or m.get("total_bytes") != total_bytes:
            raise PlanError(
                f"{where}: total_bytes is {m.get('total_bytes')!r}, the files take {total_bytes}"
            )
        # Last: every field above has a message of its own for a value that
        # cannot be; this catches any change to a value that can.
        if m.get("manifest_checksum") != manifest_checksum(m):
            raise PlanError(
                f"{where}: manifest_checksum does not match the manifest's content: it was "
                "changed after the plan was written (write the plan again)"
            )
        return cls(spec, w, tuple(epochs), num_steps, total_bytes, tuple(entries), tokens, space)


def _place(entry: Any, epochs: list[int], w: int, i: int, where: Path) -> int:
    """The index among a plan's rank files (epoch-major) of a part's entry."""
    epoch, rank = (entry.get("epoch"), entry.get("rank")) if isinstance(entry, dict) else (0, -1)
    if type(rank) is not int or not 0 <= rank < w or type(epoch) is not int or epoch not in epochs:
        raise PlanError(f"{where}: files[{i}] names no rank file of the plan")
    return epochs.index(epoch) * w + rank


def _token_counts(
    files: list[Any], strided: list[int], epochs: list[int], places: list[int], where: Path
) -> list[int]:
    """The rank files' counts of a token plan, file by file: each an int in
    [0, N], and an epoch's summing to the samples of its steps (a balanced
    dealing gives ranks other counts than the strided one, the same total)
    when the files (at ``places``: a part's may hold part of an epoch) hold
    the whole epoch."""
    counts: list[int] = []
    for i, entry in enumerate(files):
        count = entry.get("count") if isinstance(entry, dict) else None
        if type(count) is not int or not 0 <= count <= _native.MAX_SAMPLES:
            raise PlanError(f"{where}: files[{i}] 'count' is {count!r}, not an int >= 0")
        counts.append(count)
    w, total = len(strided), sum(strided)
    for e, epoch in enumerate(epochs):
        mine = [i for i, place in enumerate(places) if place // w == e]
        got = sum(counts[i] for i in mine)
        if len(mine) == w and got != total:
            raise PlanError(
                f"{where}: the rank files of epoch {epoch} hold {got} ids, its steps {total}"
            )
    return counts


def _field(
    manifest: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: Path
) -> Any:
    if key not in manifest:
        raise PlanError(f"{where}: the manifest has no {key!r}")
    value = manifest[key]
    if isinstance(value, bool) and kind is not bool:
        raise PlanError(f"{where}: manifest {key!r} has the wrong type (bool)")
    if not isinstance(value, kind):
        raise PlanError(f"{where}: manifest {key!r} has the wrong type ({type(value).__name__})")
    return value


def read_json(path: Path) -> Any:
    """The manifest's JSON. OSError if it is not a regular file of at most
    1 GiB (a FIFO would block the read, a link to /dev/zero never end),
    ValueError if it is not JSON."""
    return json.loads(read_regular(path, _MAX_MANIFEST_BYTES).decode())
