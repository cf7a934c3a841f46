"""Splitting positions (or an array) over ranks without padding."""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan._args import int_arg


def split(
    num_samples_or_array: int | npt.ArrayLike,
    rank: int,
    world_size: int,
    mode: str = "strided",
) -> npt.NDArray[Any]:
    """One rank's share, without padding or dropping.

    With an int ``n``, returns the rank's positions in ``range(n)``; with an
    array, the rank's elements of it (a view). ``mode="strided"`` gives rank
    ``r`` positions ``r, r + W, ...``; ``mode="contiguous"`` one block, the first
    ``n % W`` ranks one longer. Ranks differ by at most one element.

    Examples:
        >>> split(10, 1, 3)  # rank 1 of 3
        array([1, 4, 7])
    """
    x = num_samples_or_array
    if isinstance(x, (bool, np.bool_, float, str)):
        raise TypeError(f"num_samples_or_array must be an int or an array, got {type(x).__name__}")
    index_only = hasattr(type(x), "__index__") and not hasattr(x, "__len__")
    if isinstance(x, (int, np.integer)) or getattr(x, "ndim", None) == 0 or index_only:
        # An int, a 0-d integer array or tensor, or any object that is an int
        # through __index__ alone (as every int argument).
        n = int_arg(x, "num_samples_or_array", 0, _native.MAX_SAMPLES)
        return _share(range(n), rank, world_size, mode)
    if isinstance(x, range):
        # The share of a range is a range: only it is built.
        return _share(x, rank, world_size, mode)
    try:
        array = np.asarray(x)
    except MemoryError:
        raise OverflowError("num_samples_or_array is too large to hold as an array") from None
    except (ValueError, TypeError, RuntimeError) as e:
        # RuntimeError: torch's, for a tensor numpy cannot read (one that
        # requires grad, a nested or a meta tensor): a TypeError here.
        kind = TypeError if isinstance(e, RuntimeError) else type(e)
        raise kind(f"num_samples_or_array must be an int or an array: {e}") from None
    if array.ndim == 0:
        raise TypeError(f"num_samples_or_array must be an int or an array, got {type(x).__name__}")
    start, stop, step = _native.split_range(len(array), rank, world_size, mode)
    return array[start:stop:step]


def _share(positions: range, rank: int, world_size: int, mode: str) -> npt.NDArray[np.int64]:
    """The rank's share of a range, as int64."""
    try:
        length = len(positions)
    except OverflowError:
        raise OverflowError(
            "num_samples_or_array must hold at most 2**63 - 1 samples, got a longer range"
        ) from None
    # The whole range, so that every rank agrees on whether it fits.
    ends = (positions[0], positions[-1]) if positions else (0, 0)
    if min(ends) < -(2**63) or max(ends) >= 2**63:
        raise OverflowError("num_samples_or_array's values must fit int64, got a range beyond")
    start, stop, step = _native.split_range(length, rank, world_size, mode)
    share = positions[start:stop:step]
    too_large = OverflowError(
        f"cannot allocate {len(share)} int64 values for the rank's share of "
        f"num_samples_or_array (of {len(positions)}): not enough memory"
    )
    try:
        ids = np.arange(share.start, share.stop, share.step, dtype=np.int64)
    except (MemoryError, ValueError):
        # numpy's errors for an output the machine cannot hold (or address);
        # the library's error names the argument.
        raise too_large from None
    if len(ids) != len(share):
        # numpy's length overflows near 2**63 and gives an empty array.
        raise too_large
    return ids
