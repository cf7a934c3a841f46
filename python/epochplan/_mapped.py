"""Memory-mapped arrays travel by reference in pickles.

A token plan's lengths are usually ``np.load(path, mmap_mode="r")`` of a
file of 10^8 or 10^9 values. Pickled as numpy pickles a ``np.memmap``, the
values themselves would be copied into every pickle (a spec sent to Ray
tasks, to DataLoader workers under spawn), and the copy would no longer
name its file, which a plan directory records. So ``Tokens`` and
``PlanSpec`` values pickle a map of a whole file as :class:`MappedFile`
(path, dtype, offset, shape) and map the file again where they are
unpickled (:func:`call_mapped`); any other array is pickled as it is.
"""

from __future__ import annotations

import mmap
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MappedFile", "by_reference", "call_mapped"]


@dataclass(frozen=True)
class MappedFile:
    """A read-only map of a whole file's values, by reference."""

    path: str
    dtype: str
    offset: int
    shape: tuple[int, ...]

    def open(self) -> np.memmap[Any, Any]:
        return np.memmap(
            self.path, dtype=np.dtype(self.dtype), mode="r", offset=self.offset, shape=self.shape
        )


def by_reference(value: Any) -> Any:
    """``value`` as a :class:`MappedFile` when it is a read-only ``np.memmap``
    of a whole file (not a view of one), else ``value``."""
    if (
        isinstance(value, np.memmap)
        and isinstance(value.base, mmap.mmap)
        and value.filename
        and value.mode == "r"
    ):
        return MappedFile(str(value.filename), value.dtype.str, int(value.offset), value.shape)
    return value


def call_mapped(make: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``make(*args, **kwargs)``, each :class:`MappedFile` among the keywords
    mapped again: how a pickle made by :func:`by_reference` is loaded."""
    opened = {k: v.open() if isinstance(v, MappedFile) else v for k, v in kwargs.items()}
    return make(*args, **opened)
