"""MosaicML Streaming's ``get_partitions``, element for element, computed in Rust.

Streaming deals each epoch's samples to physical nodes, ranks, DataLoader
workers and batches with a chain of numpy reshapes over the whole epoch. Here
each output element is computed from its index, in parallel, straight into the
returned array; :func:`get_partition_part` computes one rank's part alone.

Inputs, outputs, exceptions and warnings are Streaming's (0.13): the same
int64 array, including its ``-1`` padding and repeated samples; where
Streaming raises, the same exception type, its message first (our account in
terms of the arguments follows), in Streaming's order of checks; Streaming's
``KeyError(algo)`` for an unknown ``algo`` (the allowed names in a note); and
the same ``UserWarning`` texts. Streaming's "rounding ``drop_first`` down"
message is logged at WARNING level on the ``epochplan.compat.streaming``
logger. As with Streaming, warnings and log messages come out even when other
arguments are then rejected.

The one difference: arguments on which Streaming fails by accident
(``ZeroDivisionError``) or slices from the end raise ``TypeError`` or
``ValueError`` naming the argument: non-integers and negative values first,
a zero count where Streaming would first divide by it (after Streaming's own
checks, before any warning). See docs/guides/migrate-streaming.md.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

import epochplan._native as _native

__all__ = ["get_partition_part", "get_partitions"]


def get_partitions(
    algo: str,
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int = 0,
    initial_physical_nodes: int | None = None,
) -> npt.NDArray[np.int64]:
    """Streaming's partition of an epoch's samples over nodes, ranks and workers.

    A drop-in for ``streaming.base.partition.get_partitions``: the identical
    array, computed per element in Rust on all cores, with the output array
    as the only large allocation.

    Args:
        algo: ``"orig"`` (canonical and physical node counts must divide one
            another) or ``"relaxed"`` (also resumes on other node counts,
            given ``initial_physical_nodes``).
        num_samples: Dataset size.
        num_canonical_nodes: Node count the sample order is defined for.
        num_physical_nodes: Nodes of this run.
        ranks_per_node: Ranks (devices) per node.
        workers_per_rank: DataLoader workers per rank.
        batch_size: Per-rank batch size.
        drop_first: Samples of the epoch already seen, skipped.
        initial_physical_nodes: Nodes at the start of training
            (``"relaxed"``; ignored by ``"orig"``).

    Returns:
        int64 array of shape (physical nodes, ranks per node, workers per
        rank, batches per worker, batch size): the sample ids each worker
        loads, in order, ``-1`` for padding.

    Raises:
        KeyError: ``algo`` is neither ``"orig"`` nor ``"relaxed"``.
        ValueError: Streaming rejects the combination (node counts that do
            not divide one another, ``drop_first`` past the epoch, a global
            batch size the initial world size does not divide), or an
            argument is out of range.
        OverflowError: The partition would have more than 2**63 - 1 elements.
        MemoryError: The partition does not fit in memory.

    Examples:
        >>> ids = get_partitions("orig", 10, 2, 2, 1, 1, 2)
        >>> ids.shape
        (2, 1, 1, 3, 2)
        >>> ids[1, 0, 0].tolist()
        [[5, 6], [7, 8], [9, -1]]
    """
    return _native.streaming_partitions(
        algo,
        num_samples,
        num_canonical_nodes,
        num_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        batch_size,
        drop_first,
        initial_physical_nodes,
    )


def get_partition_part(
    algo: str,
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int = 0,
    initial_physical_nodes: int | None = None,
    *,
    node: int,
    rank: int,
) -> npt.NDArray[np.int64]:
    """One rank's part of :func:`get_partitions`, without computing the rest.

    Equal to ``get_partitions(...)[node, rank]``, in time and memory
    proportional to the part: what one rank of a large job needs. Warnings
    and errors are those of :func:`get_partitions` for the same arguments.

    Args:
        algo: As for :func:`get_partitions`.
        num_samples: As for :func:`get_partitions`.
        num_canonical_nodes: As for :func:`get_partitions`.
        num_physical_nodes: As for :func:`get_partitions`.
        ranks_per_node: As for :func:`get_partitions`.
        workers_per_rank: As for :func:`get_partitions`.
        batch_size: As for :func:`get_partitions`.
        drop_first: As for :func:`get_partitions`.
        initial_physical_nodes: As for :func:`get_partitions`.
        node: The physical node, in ``[0, num_physical_nodes)``.
        rank: The rank within the node, in ``[0, ranks_per_node)``.

    Returns:
        int64 array of shape (workers per rank, batches per worker,
        batch size).

    Raises:
        IndexError: ``node`` or ``rank`` is out of range.
        KeyError, ValueError, OverflowError, MemoryError: As for
            :func:`get_partitions`.

    Examples:
        >>> get_partition_part("orig", 10, 2, 2, 1, 1, 2, node=1, rank=0).tolist()
        [[[5, 6], [7, 8], [9, -1]]]
    """
    return _native.streaming_partition_part(
        algo,
        num_samples,
        num_canonical_nodes,
        num_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        batch_size,
        drop_first,
        initial_physical_nodes,
        node=node,
        rank=rank,
    )
