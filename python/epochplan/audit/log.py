"""The consumption log: what one process actually trained on, appended as it
goes, in a file the audit reads (:func:`epochplan.audit.audit`).

One file a process, ``<directory>/<run>-rank<r>.eplog``: 8 bytes of magic,
then records, each ``u32 length | u32 crc32 | payload`` (little-endian):

- ``H`` + JSON: the plan's state where the process starts (epoch, cursor),
  its rank and world size;
- ``B`` + ``u64 epoch | u64 step | u32 count | count int64 ids``: a step's
  real samples on this rank (fillers, of weight 0, are not logged);
- ``C`` + ``u64 epoch | u64 step``: a commit, written when a checkpoint is
  saved with the position it resumes at. Records after a process's last
  commit, and those of the step a mid-step checkpoint replays, were rolled
  back by the resume: the audit leaves them out.

Each record is one ``write`` to a file opened for appending; a crash can
leave only a torn last record, which its length or checksum shows, and the
audit reports it and reads nothing of it.
"""

from __future__ import annotations

import json
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native

__all__ = ["MAGIC", "ConsumptionLog", "LogRecord", "gather_log_ids", "read_log", "scan_log"]

MAGIC = b"EPLOG01\n"
_FRAME = struct.Struct("<II")
_BATCH = struct.Struct("<QQI")
_COMMIT = struct.Struct("<QQ")


class ConsumptionLog:
    """Appends what this process trains on to a consumption log.

    Give it the sampler (anything with ``plan``, ``epoch``, ``rank`` and
    ``num_replicas``, as :class:`~epochplan.torch.ElasticBatchSampler` has)
    or the plan's state, rank and world size; call :meth:`record` with each
    micro-batch after its backward pass, and :meth:`commit` with the
    sampler's state each time a checkpoint is saved (and once at the end).

    Examples:
        >>> import tempfile, epochplan as ep
        >>> from epochplan.audit import ConsumptionLog, audit
        >>> logs = tempfile.mkdtemp()
        >>> plan = ep.EpochPlan(10, 4)
        >>> log = ConsumptionLog(logs, plan.state_dict(), rank=0, world_size=1)
        >>> for step in range(plan.num_steps):
        ...     log.record(0, step, plan.step_indices(step, 0, 1))
        >>> log.commit(plan.at_step(plan.num_steps).state_dict())
        >>> audit(logs).ok
        True
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        plan_state: dict[str, Any],
        *,
        rank: int,
        world_size: int,
    ) -> None:
        if not isinstance(plan_state, dict):
            raise TypeError(
                f"plan_state must be a plan's state_dict(), got {type(plan_state).__name__}"
            )
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in [0, {world_size - 1}], got {rank}")
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{time.time_ns()}-{os.getpid()}-rank{rank:05d}.eplog"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._pending: tuple[int, int, list[npt.NDArray[np.int64]]] | None = None
        os.write(self._fd, MAGIC)
        header = {"format": 1, "plan": plan_state, "rank": rank, "world_size": world_size}
        self._append(b"H" + json.dumps(header).encode())

    @classmethod
    def for_sampler(cls, directory: str | os.PathLike[str], sampler: Any) -> ConsumptionLog:
        """The log of a sampler's rank, from the sampler's current state."""
        return cls(
            directory, sampler.state_dict(), rank=sampler.rank, world_size=sampler.num_replicas
        )

    def record(self, epoch: int, step: int, sample_ids: Any, weights: Any = None) -> None:
        """Records samples trained on in ``step`` of ``epoch`` (those of
        weight 0, fillers, are left out). A step's records are written as one
        when the next step starts or at :meth:`commit`."""
        ids = np.asarray(sample_ids, dtype=np.int64).reshape(-1)
        if weights is not None:
            ids = ids[np.asarray(weights).reshape(-1) != 0]
        if self._pending is not None and self._pending[:2] != (epoch, step):
            self._flush()
        if self._pending is None:
            self._pending = (epoch, step, [])
        self._pending[2].append(ids.copy())

    def record_batch(self, epoch: int, batch: Any) -> None:
        """Records a :class:`~epochplan.torch.WeightedBatch` (``indices``,
        ``sample_weight``) or a :class:`~epochplan.torch.WeightedIndices`
        (the ids, ``weights``) of ``epoch``."""
        if hasattr(batch, "indices") and hasattr(batch, "sample_weight"):
            self.record(epoch, batch.step, batch.indices, batch.sample_weight)
        else:
            self.record(epoch, batch.step, list(batch), batch.weights)

    def commit(self, state: dict[str, Any]) -> None:
        """Marks everything recorded before the position ``state`` resumes
        at (a sampler's or plan's ``state_dict()``, saved with a checkpoint)
        as kept; made durable (``fsync``)."""
        epoch = int(state["epoch"])
        step = -(-int(state["cursor"]) // int(state["global_batch_size"]))
        self._flush()
        self._append(b"C" + _COMMIT.pack(epoch, step))
        os.fsync(self._fd)

    def close(self) -> None:
        """Closes the file (what was not committed stays uncommitted)."""
        if self._fd >= 0:
            self._flush()
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ConsumptionLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _flush(self) -> None:
        if self._pending is None:
            return
        epoch, step, parts = self._pending
        self._pending = None
        ids = np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
        self._append(b"B" + _BATCH.pack(epoch, step, len(ids)) + ids.astype("<i8").tobytes())

    def _append(self, payload: bytes) -> None:
        # One write: with O_APPEND, a record is never interleaved, and a
        # crash can only cut the file's last record short.
        frame = _FRAME.pack(len(payload), zlib.crc32(payload))
        os.write(self._fd, frame + payload)

    def __repr__(self) -> str:
        return f"ConsumptionLog({str(self.path)!r})"


class LogRecord:
    """One record read back: ``kind`` ``"H"``, ``"B"`` or ``"C"``."""

    __slots__ = ("epoch", "header", "ids", "kind", "offset", "step")

    def __init__(self, kind: str, offset: int) -> None:
        self.kind = kind
        self.offset = offset
        self.epoch = self.step = -1
        self.ids: npt.NDArray[np.int64] | None = None
        self.header: dict[str, Any] | None = None


def read_log(path: Path, *, ids: bool = True) -> Iterator[LogRecord | str]:
    """The records of a log file; a torn last record yields a message (str)
    instead, and nothing after it. ValueError naming the file for a record
    that is corrupt anywhere else, or a file that is not a log."""
    records = scan_log(path)
    headers = log_headers(path, records)
    for i, kind in enumerate(records["kinds"].tolist()):
        record = LogRecord(chr(kind), int(records["offsets"][i]))
        if kind == ord("H"):
            record.header = headers[i]
        else:
            record.epoch, record.step = int(records["epochs"][i]), int(records["steps"][i])
            if kind == ord("B") and ids:
                record.ids = gather_log_ids(
                    path, records["id_offsets"][i : i + 1], records["id_counts"][i : i + 1]
                )
        yield record
    if records["torn"] is not None:
        yield f"{path}: {records['torn']}"


def log_headers(path: Path, records: dict[str, Any]) -> dict[int, dict[str, Any]]:
    """The JSON of each header record of a scanned log, by record index
    (only the bytes up to the last header are read again)."""
    where = np.flatnonzero(records["kinds"] == ord("H")).tolist()
    if not where:
        return {}
    with open(path, "rb") as f:
        data = f.read(int(records["header_ranges"][where, 1].max()))
    headers = {}
    for i in where:
        start, end = records["header_ranges"][i].tolist()
        try:
            headers[i] = json.loads(data[start:end])
        except ValueError as e:
            offset = int(records["offsets"][i])
            raise ValueError(f"{path}: the record at byte {offset} is malformed: {e}") from None
    return headers


def scan_log(path: Path) -> dict[str, Any]:
    """Every record of a log file, as arrays (see ``_native.scan_log``)."""
    return _native.scan_log(os.fspath(path))


def gather_log_ids(path: Path, id_offsets: Any, id_counts: Any) -> npt.NDArray[np.int64]:
    """The ids of the log's step records at ``id_offsets``, one after another."""
    return _native.gather_log_ids(os.fspath(path), id_offsets, id_counts)
