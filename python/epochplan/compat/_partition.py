"""Streaming's get_partitions (to be written)."""

from typing import Any


def get_partitions(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError


def get_partition_part(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError
