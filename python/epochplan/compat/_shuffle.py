"""Streaming's get_shuffle (to be written)."""

from typing import Any


def get_shuffle(*args: Any, **kwargs: Any) -> Any:
    raise NotImplementedError
