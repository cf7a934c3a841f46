"""MosaicML Streaming's partitioner and shuffles, bit for bit, computed in Rust.

Swap ``streaming.base.partition.get_partitions`` for
``epochplan.compat.streaming.get_partitions`` (and likewise ``get_shuffle``)
and get the identical sample order.
"""

from epochplan.compat._partition import get_partition_part, get_partitions
from epochplan.compat._shuffle import get_shuffle

__all__ = ["get_partition_part", "get_partitions", "get_shuffle"]
