"""Argument checks of the Python layer: the native bindings' own checks (one
place turns an object into a range-checked int or a bool, for Rust and Python
alike), and the labels messages write numbers and sizes with."""

from __future__ import annotations

import numpy as np

from epochplan._native import _check_bool as bool_arg
from epochplan._native import _check_int as int_arg

__all__ = ["bool_arg", "int_arg", "int_label", "is_bool", "limit_label", "size_label"]

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
