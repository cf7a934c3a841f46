"""Splitting positions (or an array) over ranks without padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from epochplan import _native


def split(
    num_samples_or_array: int | npt.ArrayLike,
    world_size: int,
    rank: int,
    mode: str = "strided",
) -> npt.NDArray[Any]:
    """One rank's share, without padding or dropping.

    With an int ``n``, returns the rank's positions in ``range(n)``; with an
    array, the rank's elements of it (a view). ``mode="strided"`` gives rank
    ``r`` positions ``r, r + W, ...``; ``mode="contiguous"`` one block, the first
    ``n % W`` ranks one longer. Ranks differ by at most one element.

    Example:
        >>> split(10, 3, 1)
        array([1, 4, 7])
    """
    if isinstance(num_samples_or_array, (int, np.integer)) and not isinstance(
        num_samples_or_array, bool
    ):
        n = int(num_samples_or_array)
        start, stop, step = _native.split_range(n, world_size, rank, mode)
        try:
            return np.arange(start, stop, step, dtype=np.int64)
        except (MemoryError, ValueError):
            # numpy's errors for an output the machine cannot hold (or
            # address); the library's error names the argument.
            count = len(range(start, stop, step))
            raise OverflowError(
                f"cannot allocate {count} int64 values for the rank's share of "
                f"num_samples_or_array={n}: not enough memory"
            ) from None
    if isinstance(num_samples_or_array, (bool, float, str)):
        raise TypeError(
            "num_samples_or_array must be an int or an array, "
            f"got {type(num_samples_or_array).__name__}"
        )
    array = np.asarray(num_samples_or_array)
    if array.ndim == 0:
        raise TypeError("num_samples_or_array must be an int or a 1-d or larger array")
    start, stop, step = _native.split_range(len(array), world_size, rank, mode)
    return array[start:stop:step]
