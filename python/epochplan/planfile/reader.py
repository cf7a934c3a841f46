"""Reading a plan directory: :func:`open_plan`, :class:`PlanDirectory` and
:class:`RankFile`, each rank file checked (header, size, checksum) before its
ids are used."""

from __future__ import annotations

import dataclasses
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._args import int_arg
from epochplan._kinds import plan_fields
from epochplan._native import EpochPlan, Mixture, MixtureEpoch, PlanSpec, Selection
from epochplan._system import is_local_filesystem
from epochplan.planfile._checks import absolute, path_arg
from epochplan.planfile.errors import PlanError, plan_os_error
from epochplan.planfile.manifest import MANIFEST, MAX_FILES, FileEntry, Manifest
from epochplan.planfile.manifest.tokens import TokenFile, TokenInfo
from epochplan.planfile.space import SPACE_DIR

__all__ = ["PlanDirectory", "RankFile", "open_plan"]

# Files smaller than this are not checked for holes: a filesystem may keep
# small files inline or in shared blocks.
_SPARSE_MIN = 1 << 20


@dataclass(frozen=True)
class PlanDirectory:
    """An opened plan directory (see :func:`open_plan`).

    ``manifest`` is the manifest's JSON as read; ``parsed`` the same, checked
    (a :class:`~epochplan.planfile.Manifest`).

    Examples:
        >>> d = open_plan("plan")  # doctest: +SKIP
        >>> d.world_size, d.epochs  # doctest: +SKIP
        (8, [0, 1])
        >>> ids = d.rank_ids(0, 3)  # doctest: +SKIP
    """

    path: Path
    manifest: dict[str, Any] = field(repr=False)
    parsed: Manifest = field(repr=False)

    @property
    def spec(self) -> PlanSpec:
        """The parameters that decide the plan's ids."""
        return self.parsed.spec

    @property
    def num_samples(self) -> int:
        """Samples per epoch (the length of the space, for a plan over one)."""
        return self.spec.num_samples

    @property
    def space(self) -> Selection | Mixture | None:
        """The index space the plan permutes, rebuilt from the directory
        (None for ``range(num_samples)``): the rank files hold its ids.

        An index array's ids (``space/indices.npy``) are read through a
        memory map of the file, checked against its checksum when the plan
        was opened: as with :meth:`rank_ids`, the file must not be cut short
        while the space is in use (the process would be killed by SIGBUS).
        :class:`~epochplan.torch.PlanSampler` does not read it."""
        space = self.spec.space
        assert not isinstance(space, MixtureEpoch)  # write_plan stores no epoch
        return space

    @property
    def global_batch_size(self) -> int:
        """Samples per step over all ranks."""
        return self.spec.global_batch_size

    @property
    def world_size(self) -> int:
        """Ranks the plan was written for."""
        return self.parsed.world_size

    @property
    def seed(self) -> int:
        """The seed of the orders."""
        return self.spec.seed

    @property
    def kind(self) -> str:
        """The kind of order."""
        return str(plan_fields(self.spec)["kind"])

    @property
    def chunk_size(self) -> int | None:
        """Samples per chunk (kind='chunked'), else None."""
        return plan_fields(self.spec)["chunk_size"]  # type: ignore[no-any-return]

    @property
    def preload_nchunks(self) -> int | None:
        """Chunks per shuffle window (kind='chunked'), else None."""
        return plan_fields(self.spec)["preload_nchunks"]  # type: ignore[no-any-return]

    @property
    def epochs(self) -> list[int]:
        """The epochs in the plan."""
        return list(self.parsed.epochs)

    @property
    def drop_last(self) -> bool:
        """Whether the short last step is dropped."""
        return self.spec.drop_last

    @property
    def tokens(self) -> TokenInfo | None:
        """A token plan's lengths, models, caps and token files (None for a
        plan without lengths)."""
        return self.parsed.tokens

    def open_token_file(self, epoch: int, rank: int | None, role: str) -> RankFile:
        """A token file of ``epoch`` (``rank`` None for its ``steps.npy``;
        ``role`` one of ``"offsets"``, ``"lengths"``, ``"loss_tokens"``),
        checked (header, size, checksum), open for reading a range at a time."""
        tokens = self.tokens
        if tokens is None:
            raise PlanError(f"{self.path}: the plan has no lengths (its spec has no tokens)")
        if rank is not None:
            self._file_index(epoch, rank)
        entry = tokens.file(self.epoch_index(epoch), self.world_size, rank, role)
        path = self.path / entry.path
        dtype = tokens.dtype(role)
        _native.check_plan_file(str(path), entry.count, entry.bytes, entry.blake3, dtype=dtype)
        return RankFile(path, entry, dtype)

    def plan(self, epoch: int) -> EpochPlan:
        """The :class:`epochplan.EpochPlan` of ``epoch`` (which must be in the
        plan), over the plan's space."""
        self.epoch_index(epoch)
        return self.spec.plan(epoch)

    def epoch_index(self, epoch: int) -> int:
        """Where ``epoch`` is in the plan's epochs; PlanError if it is not."""
        epoch = int_arg(epoch, "epoch")
        epochs = self.parsed.epochs
        if epoch not in epochs:
            raise PlanError(
                f"{self.path}: epoch {epoch} is not in the plan (epochs {list(epochs)})"
            )
        return epochs.index(epoch)

    def check_world_size(self, world_size: int) -> None:
        """Raises PlanError unless the plan was written for ``world_size`` ranks."""
        world_size = int_arg(world_size, "world_size", 1, MAX_FILES)
        if world_size != self.world_size:
            raise PlanError(
                f"{self.path}: the plan was written for world_size={self.world_size}, "
                f"not {world_size}; write a plan for {world_size} ranks"
            )

    def file_entry(self, epoch: int, rank: int) -> dict[str, Any]:
        """The manifest's entry of one rank file."""
        entry: dict[str, Any] = self.manifest["files"][self._file_index(epoch, rank)]
        return entry

    def _file_index(self, epoch: int, rank: int) -> int:
        epoch_index = self.epoch_index(epoch)
        rank = int_arg(rank, "rank")
        if not 0 <= rank < self.world_size:
            raise PlanError(
                f"{self.path}: rank must be in [0, {self.world_size - 1}] for this plan, got {rank}"
            )
        return epoch_index * self.world_size + rank

    def checked_file(self, epoch: int, rank: int, world_size: int | None = None) -> FileEntry:
        """A rank file's manifest entry, after checking the file's header,
        size and checksum (which reads the file once). ``world_size``, when
        given, must match the plan."""
        if world_size is not None:
            self.check_world_size(world_size)
        entry = self.parsed.files[self._file_index(epoch, rank)]
        path = self.path / entry.path
        _native.check_plan_file(str(path), entry.count, entry.bytes, entry.blake3)
        return entry

    def open_rank_file(self, epoch: int, rank: int, world_size: int | None = None) -> RankFile:
        """Rank ``rank``'s file of ``epoch``, checked, open for reading its ids
        a range at a time (see :class:`RankFile`)."""
        entry = self.checked_file(epoch, rank, world_size)
        return RankFile(self.path / entry.path, entry)

    def rank_ids(
        self, epoch: int, rank: int, *, world_size: int | None = None
    ) -> npt.NDArray[np.int64]:
        """Rank ``rank``'s sample ids of ``epoch``: a read-only memory map of
        its file, after checking the file's header, size and checksum (which
        reads the file once). ``world_size``, when given, must match the plan.

        The map holds no file descriptor (the file is closed once mapped), so
        any number of rank files can be mapped at once. As with any memory
        map, the file must not be cut short while the map is in use: the
        process would be killed (SIGBUS) on reading past the new end.
        :class:`~epochplan.torch.PlanSampler` reads its ids through a
        :class:`RankFile` instead, and raises :class:`PlanError` then.
        """
        entry = self.checked_file(epoch, rank, world_size)
        # The header was checked with the file: the ids follow it.
        header = entry.bytes - 8 * entry.count
        return _native.map_ids(str(self.path / entry.path), header, entry.count)

    def __repr__(self) -> str:
        return (
            f"PlanDirectory({str(self.path)!r}, num_samples={self.num_samples}, "
            f"global_batch_size={self.global_batch_size}, world_size={self.world_size}, "
            f"seed={self.seed}, kind={self.kind!r}, epochs={self.epochs}, "
            f"drop_last={self.drop_last}"
            + ("" if self.space is None else f", space={self.space!r}")
            + ")"
        )


class RankFile:
    """A checked rank file (see :meth:`PlanDirectory.open_rank_file`), open
    for reading its ids a range at a time (or a token file, its values of
    ``dtype``, read as int64). Reads go through the open file, not
    a memory map, so a file cut short after the check gives a PlanError rather
    than a SIGBUS or zeros; a plan replaced by ``write_plan(force=True)`` swaps
    directories, and this file keeps reading the ids it checked."""

    def __init__(self, path: Path, entry: FileEntry | TokenFile, dtype: str = "<i8") -> None:
        self.path = path
        self.count = entry.count
        self._dtype = np.dtype(dtype)
        self._header_bytes = entry.bytes - self._dtype.itemsize * self.count
        try:
            self._file = open(path, "rb", buffering=0)  # noqa: SIM115 - held for reads
        except OSError as e:
            raise plan_os_error(f"{path}: cannot open: {e.strerror or e}", e) from None

    def read(self, start: int, stop: int) -> npt.NDArray[np.int64]:
        """Ids ``[start, stop)`` of the file (``0 <= start <= stop <= count``)."""
        size = self._dtype.itemsize
        values = np.empty(stop - start, dtype=self._dtype)
        view = values.data.cast("B")
        try:
            self._file.seek(self._header_bytes + size * start)
            done = 0
            while done < len(view):
                got = self._file.readinto(view[done:])
                if not got:
                    raise PlanError(
                        f"{self.path}: ends before value {start + done // size} of "
                        f"{self.count}: the file was cut short after it was checked"
                    )
                done += got
        except OSError as e:
            raise plan_os_error(f"{self.path}: cannot read: {e.strerror or e}", e) from None
        ids = values if size == 8 else values.astype("<i8")
        ids.flags.writeable = False
        return ids

    def close(self) -> None:
        """Closes the file."""
        self._file.close()

    def __repr__(self) -> str:
        return f"RankFile({str(self.path)!r}, count={self.count})"


def _refuse_link(path: Path) -> None:
    if path.is_symlink():
        raise PlanError(f"{path}: is a link; a plan directory holds its own files")


def _check_present(fpath: Path, size: int, blocks_are_real: bool, role: str = "rank file") -> None:
    """A plan file exists, is a regular file of ``size`` bytes and is not sparse."""
    try:
        st = fpath.lstat()
    except OSError:
        raise PlanError(f"{fpath}: missing {role}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
        raise PlanError(f"{fpath}: is {what}; a plan directory holds its own {role}s")
    if st.st_size != size:
        raise PlanError(
            f"{fpath}: has {st.st_size} bytes, the manifest says {size} (truncated or altered)"
        )
    # A written file has its blocks; compression takes at most half of
    # int64 ids, while a sparse file (a size set, nothing written) has none.
    allocated = st.st_blocks * 512
    if blocks_are_real and st.st_size >= _SPARSE_MIN and allocated * 8 < st.st_size:
        raise PlanError(
            f"{fpath}: has {st.st_size} bytes but only {allocated} allocated on disk: "
            "a sparse file, whose ids were never written"
        )


def open_plan(path: str | os.PathLike[str], *, world_size: int | None = None) -> PlanDirectory:
    """Opens a plan directory: reads and checks its manifest, and that every
    rank file exists with its recorded size (checksums are checked when a
    file is read, or all at once by :func:`verify_plan`). A plan over an
    index space has its space rebuilt (:attr:`PlanDirectory.space`): the
    space's files are checked against their checksums, and the space built
    from them against the manifest's digest.

    Raises:
        PlanError: no such directory, no or a bad manifest, another format
            version, a missing or resized file, a space that is not the one
            recorded, or (when ``world_size`` is given) a plan written for
            another world size.
    """
    root = absolute(path_arg(path, "path"))
    if not root.is_dir():
        what = "is not a directory" if root.exists() else "does not exist"
        raise PlanError(f"{root}: {what}")
    # A plan directory holds its own files: a link (which may lead anywhere,
    # another plan's files included) is refused, not followed.
    _refuse_link(root / MANIFEST)
    parsed, raw = Manifest.read(root / MANIFEST)
    folders = {Path(entry.path).parent for entry in parsed.files}
    if parsed.space is not None:
        folders.add(Path(SPACE_DIR))
    for folder in sorted(folders):
        _refuse_link(root / folder)
    # Cheap before expensive: each file's size and allocated blocks now, its
    # checksum (a full read) when it is used.
    blocks_are_real = is_local_filesystem(root)
    token_files = () if parsed.tokens is None else parsed.tokens.files
    for entry in parsed.files:
        _check_present(root / entry.path, entry.bytes, blocks_are_real)
    for token_file in token_files:
        _check_present(root / token_file.path, token_file.bytes, blocks_are_real)
    if parsed.space is not None:
        parsed = _with_space(root, parsed, blocks_are_real)
    d = PlanDirectory(root, raw, parsed)
    if world_size is not None:
        d.check_world_size(world_size)
    return d


def _with_space(root: Path, parsed: Manifest, blocks_are_real: bool) -> Manifest:
    """The manifest with its spec over the space it records, rebuilt from
    the directory and checked: the space's files, its digest, and the
    plan's parameters over it."""
    info = parsed.space
    assert info is not None
    for entry in info.files:
        _check_present(root / entry.path, entry.bytes, blocks_are_real, "space file")
    where = root / MANIFEST
    space = info.build(root, where)
    spec = parsed.spec
    try:
        checked = spec.replace(num_samples=space)
    except (ValueError, TypeError, OverflowError) as e:
        raise PlanError(f"{where}: bad plan parameters over the plan's space: {e}") from None
    if checked.num_samples != spec.num_samples:
        raise PlanError(
            f"{where}: num_samples is {spec.num_samples}, the plan's space holds "
            f"{checked.num_samples}"
        )
    return dataclasses.replace(parsed, spec=checked)
