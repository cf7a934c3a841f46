"""Argument checks of the Python layer, with the messages of the native
bindings: one place that turns an object into a range-checked integer or a
bool."""

from __future__ import annotations

import operator

import numpy as np

_LIMITS = {2**63 - 1: "2**63 - 1", 2**64 - 1: "2**64 - 1"}


def limit_label(hi: int) -> str:
    """An upper bound as messages write it (``2**63 - 1`` for int64's)."""
    return _LIMITS.get(hi, str(hi))


def size_label(n: float) -> str:
    """A number of bytes for a message: ``512 B``, ``4.1 MB``, ``8.0 GB``."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def int_label(number: int) -> str:
    """An int for a message: its digits, or its size when Python would refuse
    to print it (over 4,300 digits) or it would swamp the message."""
    if number.bit_length() <= 128:
        return str(number)
    return f"{'a negative' if number < 0 else 'an'} int of {number.bit_length()} bits"


def is_bool(value: object) -> bool:
    """Python's, numpy's or torch's bools (a torch bool tensor has
    ``__index__``): flags, not numbers."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return str(getattr(value, "dtype", "")) in ("bool", "torch.bool")


def int_arg(value: object, name: str, lo: int | None = None, hi: int | None = None) -> int:
    """``value`` as an int: anything with ``__index__`` (Python and numpy
    integers, 0-d arrays and tensors) but bools. TypeError naming ``name`` for other objects,
    ValueError for values outside ``[lo, hi]`` (a missing bound is open)."""
    # torch gives one-element tensors of any shape __index__: only 0-d counts.
    if is_bool(value) or not hasattr(value, "__index__") or getattr(value, "ndim", 0) != 0:
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    try:
        number = operator.index(value)
    except TypeError:
        # e.g. a float or multi-element array, whose __index__ refuses.
        raise TypeError(f"{name} must be an int, got {type(value).__name__}") from None
    if (lo is not None and number < lo) or (hi is not None and number > hi):
        if hi is None:
            raise ValueError(f"{name} must be an int >= {lo}, got {int_label(number)}")
        raise ValueError(
            f"{name} must be an int in [{lo}, {limit_label(hi)}], got {int_label(number)}"
        )
    return number


def bool_arg(value: object, name: str) -> bool:
    """``value`` as a bool: Python's or numpy's. TypeError naming ``name``
    otherwise (ints and None included: a misplaced argument, not a flag)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__}")
    return bool(value)
