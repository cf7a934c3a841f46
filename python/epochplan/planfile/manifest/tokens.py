"""A token plan's part of the manifest: where its lengths are, their digests,
the models and caps it was dealt under, and its token files (laid out as
:mod:`epochplan.planfile.tokens` describes), below the token plans' writer,
reader and verifier. :class:`TokenInfo` is that
part, parsed and checked once by :meth:`TokenInfo.parse`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import epochplan._native as _native
from epochplan.planfile.errors import PlanError

__all__ = [
    "CUT_PLAN_FILE_VERSION",
    "NARROW_PLAN_FILE_VERSION",
    "PACKED_PLAN_FILE_VERSION",
    "STEP_COLUMNS",
    "TOKEN_PLAN_FILE_VERSION",
    "ArraySource",
    "TokenFile",
    "TokenInfo",
    "token_file_name",
]

#: The plan-file version of a directory holding a token plan (a reader of
#: version 2 would serve its ids with the strided micro-batches and weights).
TOKEN_PLAN_FILE_VERSION = 3
#: The plan-file version of a token plan whose samples are cut to a
#: ``max_length`` (``oversize="truncate"``), over an index space or not: its
#: files hold the cut lengths, which an older reader would compare with the
#: uncut lengths file.
CUT_PLAN_FILE_VERSION = 5
#: The plan-file version of a token plan packed first fit
#: (``Tokens(packing="first_fit")``), cut or not, over an index space or not:
#: its ids files hold each share in its bins' order. An older reader would
#: still cut the same micro-batches, but its state would resume the plan
#: with the default packing.
PACKED_PLAN_FILE_VERSION = 6
#: The plan-file version of a token plan whose lengths (or loss tokens)
#: files keep their source's integer type of at most 32 bits (an int32
#: lengths file gives int32 lengths files, half the bytes), packed or not,
#: cut or not, over an index space or not; its manifest's ``tokens`` names
#: the types under ``file_dtypes``. An older reader would read them as int64.
NARROW_PLAN_FILE_VERSION = 7
#: The columns of ``steps.npy``, row-major: the step's loss tokens ``T_t``,
#: its micro-batch count ``M`` (every rank's), the filler's id and length.
STEP_COLUMNS = ("step_tokens", "micro_batches", "filler_id", "filler_length")
# The roles of a token file, in the order the manifest lists them.
_RANK_ROLES = ("offsets", "lengths", "loss_tokens")


def token_file_name(epoch: int, rank: int | None, role: str) -> str:
    """The path of a token file inside a plan directory (``rank`` None for
    the epoch's ``steps.npy``)."""
    if rank is None:
        return f"epoch-{epoch:04d}/steps.npy"
    return f"epoch-{epoch:04d}/rank-{rank:05d}.{role}.npy"


@dataclass(frozen=True)
class ArraySource:
    """Where an array of lengths (or loss tokens) was read from: its file
    (absolute; None for an array given in memory), its dtype and the offset
    of its values in the file, and its digest (as a plan's state records it)."""

    path: str | None
    dtype: str | None
    offset: int | None
    digest: str

    @classmethod
    def parse(cls, value: Any, key: str, where: Path) -> ArraySource:
        if not isinstance(value, dict):
            raise PlanError(f"{where}: tokens[{key!r}] is not an object")
        path, dtype, offset = value.get("path"), value.get("dtype"), value.get("offset")
        digest = value.get("digest")
        if not (isinstance(digest, str) and digest.startswith("blake3:") and len(digest) == 71):
            raise PlanError(f"{where}: tokens[{key!r}] has no valid 'digest'")
        if path is None:
            if dtype is not None or offset is not None:
                raise PlanError(f"{where}: tokens[{key!r}] has a dtype or offset but no path")
        elif not (
            isinstance(path, str)
            and Path(path).is_absolute()
            and isinstance(dtype, str)
            and type(offset) is int
            and offset >= 0
        ):
            raise PlanError(
                f"{where}: tokens[{key!r}] must hold an absolute 'path', a 'dtype' and an 'offset'"
            )
        return cls(path, dtype, offset, digest)


@dataclass(frozen=True)
class TokenFile:
    """One token file as the manifest lists it (``rank`` None for ``steps``)."""

    epoch: int
    rank: int | None
    role: str
    path: str
    count: int
    bytes: int
    blake3: str


@dataclass(frozen=True)
class TokenInfo:
    """A token plan's part of the manifest (see the module docs)."""

    lengths: ArraySource
    loss_tokens: ArraySource | None
    cost: str | tuple[float, float]
    loss_normalization: str
    micro_batch_size: int | None
    max_tokens: int | None
    files: tuple[TokenFile, ...]
    #: Samples longer are stored cut to it (``oversize="truncate"``), or None.
    max_length: int | None = None
    #: How each share was cut into micro-batches: "sorted" or "first_fit".
    packing: str = "sorted"
    #: The integer types (``.npy`` descriptors) of the lengths files and of
    #: the loss tokens files.
    file_dtypes: tuple[str, str] = ("<i8", "<i8")

    @property
    def narrow(self) -> bool:
        """Whether a lengths or loss tokens file holds another type than int64
        (:data:`NARROW_PLAN_FILE_VERSION`)."""
        return self.dtype("lengths") != "<i8" or (
            self.loss_tokens is not None and self.dtype("loss_tokens") != "<i8"
        )

    def dtype(self, role: str) -> str:
        """The integer type (``.npy`` descriptor) of the token files of ``role``."""
        if role == "lengths":
            return self.file_dtypes[0]
        return self.file_dtypes[1] if role == "loss_tokens" else "<i8"

    @property
    def roles(self) -> tuple[str, ...]:
        """The roles of each rank's token files."""
        return _RANK_ROLES if self.loss_tokens is not None else _RANK_ROLES[:2]

    def file(self, epoch_index: int, world_size: int, rank: int | None, role: str) -> TokenFile:
        """The entry of a token file of the ``epoch_index``-th epoch."""
        per_epoch = 1 + world_size * len(self.roles)
        base = epoch_index * per_epoch
        if rank is None:
            return self.files[base]
        return self.files[base + 1 + rank * len(self.roles) + self.roles.index(role)]

    def section(self) -> dict[str, Any]:
        """The ``tokens`` field of the manifest."""
        return {
            "lengths": asdict(self.lengths),
            "loss_tokens": None if self.loss_tokens is None else asdict(self.loss_tokens),
            "cost": self.cost if isinstance(self.cost, str) else list(self.cost),
            "loss_normalization": self.loss_normalization,
            "micro_batch_size": self.micro_batch_size,
            "max_tokens": self.max_tokens,
        } | (
            ({} if self.max_length is None else {"max_length": self.max_length})
            | ({} if self.packing == "sorted" else {"packing": self.packing})
            | ({"file_dtypes": self._file_dtypes()} if self.narrow else {})
        )

    def _file_dtypes(self) -> dict[str, str]:
        return {role: self.dtype(role) for role in self.roles if role != "offsets"}

    def file_list(self) -> list[dict[str, Any]]:
        """The ``token_files`` field of the manifest."""
        return [asdict(f) for f in self.files]

    @classmethod
    def parse(
        cls,
        m: Mapping[str, Any],
        where: Path,
        epochs: Sequence[int],
        world_size: int,
        num_steps: int,
        rank_counts: Sequence[int],
        version: int = TOKEN_PLAN_FILE_VERSION,
        places: Sequence[int] | None = None,
    ) -> TokenInfo:
        """Checks a token plan's ``tokens`` and ``token_files`` against the
        epochs, the world size, the step count and the rank files' counts
        (``rank_counts``, one per rank file); ``version``: the manifest's
        (``CUT_PLAN_FILE_VERSION``: its tokens hold a ``max_length``;
        ``PACKED_PLAN_FILE_VERSION``: a ``packing`` and maybe a
        ``max_length``); ``places``: the rank files' places (epoch-major) when they are a
        part's, whose token files are those of its ranks, with an epoch's
        step table where the part holds the epoch's rank 0."""
        t = m.get("tokens")
        if not isinstance(t, dict):
            raise PlanError(f"{where}: a token plan's manifest needs a 'tokens' object")
        lengths = ArraySource.parse(t.get("lengths"), "lengths", where)
        loss = None
        if t.get("loss_tokens") is not None:
            loss = ArraySource.parse(t.get("loss_tokens"), "loss_tokens", where)
        cost: Any = t.get("cost")
        if cost != "tokens":
            ok = (
                isinstance(cost, list)
                and len(cost) == 2
                and all(type(x) in (int, float) and math.isfinite(x) and x >= 0 for x in cost)
                and any(x > 0 for x in cost)
            )
            if not ok:
                raise PlanError(f"{where}: tokens['cost'] is {cost!r}, not 'tokens' or [a, b]")
            cost = (float(cost[0]), float(cost[1]))
        if t.get("loss_normalization") not in ("tokens", "samples"):
            raise PlanError(
                f"{where}: tokens['loss_normalization'] is {t.get('loss_normalization')!r}"
            )
        caps = []
        for key in ("micro_batch_size", "max_tokens"):
            value = t.get(key)
            if value is not None and not (type(value) is int and 1 <= value <= _native.MAX_SAMPLES):
                raise PlanError(f"{where}: tokens[{key!r}] is {value!r}, not None or an int >= 1")
            caps.append(value)
        if caps == [None, None]:
            raise PlanError(f"{where}: tokens has neither 'micro_batch_size' nor 'max_tokens'")
        max_length = t.get("max_length")
        narrow = version == NARROW_PLAN_FILE_VERSION
        packed = version == PACKED_PLAN_FILE_VERSION
        if (version == CUT_PLAN_FILE_VERSION) != (max_length is not None) and not (
            packed or narrow
        ):
            raise PlanError(
                f"{where}: tokens['max_length'] is {max_length!r}: plans whose samples are cut "
                f"(and they alone) hold one, with plan_file_version {CUT_PLAN_FILE_VERSION} "
                f"(or {PACKED_PLAN_FILE_VERSION} when packed first fit, "
                f"{NARROW_PLAN_FILE_VERSION} when their lengths files are narrower than int64)"
            )
        packing = t.get("packing", "sorted")
        first_fit = packing == "first_fit"
        if (
            (packed and not first_fit)
            or (first_fit and not (packed or narrow))
            or (packing not in ("sorted", "first_fit"))
        ):
            raise PlanError(
                f"{where}: tokens['packing'] is {t.get('packing')!r}: plans packed first fit "
                f"(and they alone) hold 'first_fit', with plan_file_version "
                f"{PACKED_PLAN_FILE_VERSION} (or {NARROW_PLAN_FILE_VERSION})"
            )
        if max_length is not None and not (
            type(max_length) is int and 1 <= max_length <= _native.MAX_SAMPLES
        ):
            raise PlanError(f"{where}: tokens['max_length'] is {max_length!r}, not an int >= 1")
        norm = t["loss_normalization"]
        dtypes = _parse_file_dtypes(t, narrow, loss is not None, where)
        info = cls(lengths, loss, cost, norm, caps[0], caps[1], (), max_length, packing, dtypes)
        files = m.get("token_files")
        if not isinstance(files, list):
            raise PlanError(f"{where}: a token plan's manifest needs a 'token_files' list")
        want: list[tuple[int, int | None, str, int]] = []
        if places is None:
            places = range(len(epochs) * world_size)
        for place, count in zip(places, rank_counts, strict=True):
            epoch, rank = epochs[place // world_size], place % world_size
            if rank == 0:
                want.append((epoch, None, "steps", len(STEP_COLUMNS) * num_steps))
            for role in info.roles:
                want.append((epoch, rank, role, num_steps + 1 if role == "offsets" else count))
        if len(files) != len(want):
            raise PlanError(f"{where}: lists {len(files)} token files, expected {len(want)}")
        entries = []
        for k, (entry, (epoch, which, role, size)) in enumerate(zip(files, want, strict=True)):
            if not isinstance(entry, dict):
                raise PlanError(f"{where}: token_files[{k}] is not an object")
            expected = {
                "epoch": epoch,
                "rank": which,
                "role": role,
                "path": token_file_name(epoch, which, role),
                "count": size,
                "bytes": _native.npy_file_size(size, info.dtype(role)),
            }
            for key, value in expected.items():
                if type(entry.get(key)) is not type(value) or entry.get(key) != value:
                    raise PlanError(
                        f"{where}: token_files[{k}] {key!r} is {entry.get(key)!r}, "
                        f"expected {value!r}"
                    )
            digest = entry.get("blake3")
            if not (isinstance(digest, str) and len(digest) == 64):
                raise PlanError(f"{where}: token_files[{k}] has no valid 'blake3' checksum")
            entries.append(TokenFile(**expected, blake3=digest))  # type: ignore[arg-type]
        return dataclasses.replace(info, files=tuple(entries))


def _parse_file_dtypes(
    t: Mapping[str, Any], narrow: bool, has_loss: bool, where: Path
) -> tuple[str, str]:
    """The lengths' and loss tokens' file types a ``tokens`` section names:
    int64 unless the version is :data:`NARROW_PLAN_FILE_VERSION`, whose
    ``file_dtypes`` names each role's and one narrower than int64."""
    value = t.get("file_dtypes")
    if not narrow:
        if value is not None:
            raise PlanError(
                f"{where}: tokens['file_dtypes'] is {value!r}: plans whose lengths files are "
                f"narrower than int64 (and they alone) hold one, with plan_file_version "
                f"{NARROW_PLAN_FILE_VERSION}"
            )
        return "<i8", "<i8"
    roles = ["lengths", "loss_tokens"] if has_loss else ["lengths"]
    ok = (
        isinstance(value, dict)
        and sorted(value) == sorted(roles)
        and all(_is_file_dtype(value[r]) for r in roles)
        and any(value[r] != "<i8" for r in roles)
    )
    if not ok:
        raise PlanError(
            f"{where}: tokens['file_dtypes'] is {value!r}, expected the types of "
            f"{' and '.join(roles)} ('<i8', '<i4', '<i2', '|i1', '<u4', '<u2' or '|u1'), "
            "one narrower than '<i8'"
        )
    assert isinstance(value, dict)
    return value["lengths"], value.get("loss_tokens", "<i8")


def _is_file_dtype(value: Any) -> bool:
    """Whether ``value`` names a type a plan file may hold (the core's list)."""
    try:
        _native.npy_file_size(0, value)
    except (ValueError, TypeError):
        return False
    return True
