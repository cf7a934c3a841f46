"""Sharding a rank's stream over DataLoader workers without changing its order."""

from __future__ import annotations

import itertools
import sys
from collections.abc import Iterable, Iterator
from typing import TypeVar

from epochplan._args import int_arg

T = TypeVar("T")


def _current_worker() -> tuple[int, int]:
    # torch is never imported here; if it is loaded, ask it which worker we are.
    data = sys.modules.get("torch.utils.data")
    info = data.get_worker_info() if data is not None else None
    if info is None:
        return 0, 1
    return int(info.id), int(info.num_workers)


def worker_shard(
    items: Iterable[T], worker_id: int | None = None, num_workers: int | None = None
) -> Iterator[T]:
    """The items of one DataLoader worker: items ``worker_id, worker_id + K, ...``.

    A DataLoader over an ``IterableDataset`` with ``batch_size=None`` and ``K``
    workers takes one item from each worker in turn, so when every worker yields
    its round-robin share of a rank's micro-batches, the main process receives
    them in exactly the plan's order: no duplicate, no loss. Without arguments
    the worker is read from ``torch.utils.data.get_worker_info()`` (one worker
    outside a DataLoader).

    Examples:
        >>> list(worker_shard(range(7), worker_id=1, num_workers=3))
        [1, 4]
    """
    if worker_id is None and num_workers is None:
        worker_id, num_workers = _current_worker()
    if worker_id is None or num_workers is None:
        raise ValueError("worker_id and num_workers must be given together")
    num_workers = int_arg(num_workers, "num_workers", 1, sys.maxsize)
    worker_id = int_arg(worker_id, "worker_id", 0, num_workers - 1)
    try:
        it = iter(items)
    except TypeError:
        raise TypeError(f"items must be iterable, got {type(items).__name__}") from None
    return itertools.islice(it, worker_id, None, num_workers)
