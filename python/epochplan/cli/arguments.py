"""Argument types and the parser of the ``epochplan`` command: numbers written
as ``1e9`` or ``10**9``, paths, ranges, and one-line usage errors."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

import epochplan._native as _native
from epochplan._args import limit_label
from epochplan._files import map_npy

__all__ = [
    "MAX_I64",
    "MAX_U64",
    "Help",
    "Parser",
    "UsageError",
    "check_npy_file",
    "count",
    "in_range",
    "path",
    "positive",
    "samples",
    "seed_or_epoch",
]


class Parser(argparse.ArgumentParser):
    """Reports a usage mistake in one line (no usage dump), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


class Help(argparse.RawDescriptionHelpFormatter):
    pass


_NUMBER = re.compile(r"^\s*(\d[\d_]*)(?:\.(\d*))?\s*(?:(?:\*\*|\^)\s*(\d+)|[eE]\+?(\d+))?\s*$")


MAX_I64 = _native.MAX_SAMPLES
MAX_U64 = _native.MAX_SEED


class UsageError(ValueError):
    """A combination of arguments that cannot work (exit status 2)."""


def count(text: str) -> int:
    """A non-negative integer, also written as ``1e9``, ``1.5e6``, ``10**9``,
    ``10^9`` or ``1_000`` (a decimal point only where the value is whole)."""
    m = _NUMBER.match(text)
    if m is None:
        raise argparse.ArgumentTypeError(
            f"expected a non-negative integer (like 1000, 1e9), got {text[:40]!r}"
        )
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    fraction = (m.group(2) or "").rstrip("0")
    digits = (m.group(1).replace("_", "") + fraction).lstrip("0") or "0"
    if len(digits) > 40:
        # Far beyond any limit; also keeps huge numbers out of messages.
        raise argparse.ArgumentTypeError(f"{shown} is too large")
    base = int(digits)
    power, exponent = m.group(3), m.group(4)
    if power is not None and fraction:
        raise argparse.ArgumentTypeError(f"expected a whole number as the base, got {shown}")
    # A long exponent is read only after its length is checked (int() refuses
    # over 4,300 digits).
    exp_digits = (power or exponent or "0").lstrip("0") or "0"
    exp = int(exp_digits) if len(exp_digits) <= 3 else 1000
    if exp > (64 if power is not None else 20 + len(fraction)):
        raise argparse.ArgumentTypeError(f"{shown} is too large")
    if power is not None:
        return int(base**exp)
    if exp < len(fraction):
        raise argparse.ArgumentTypeError(f"expected a whole number, got {shown}")
    return int(base * 10 ** (exp - len(fraction)))


def path(text: str) -> Path:
    """A path; an empty one is refused (``Path("")`` is the current directory)."""
    if not text:
        raise argparse.ArgumentTypeError(
            "expected a path, got an empty string (use . for the current directory)"
        )
    return Path(text)


def check_npy_file(flag: str, file: Path) -> None:
    """A file argument that must be a readable ``.npy`` array: a UsageError
    naming the flag (exit status 2, as for every argument) when it is not."""
    try:
        map_npy(file)
    except OSError as e:
        raise UsageError(f"{flag} {file}: cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise UsageError(f"{flag} {file}: not a .npy array: {e}") from None


def in_range(lo: int, hi: int) -> Callable[[str], int]:
    """An argument type: an integer in ``[lo, hi]`` (see :func:`count`)."""
    top = limit_label(hi)

    def parse(text: str) -> int:
        value = count(text)
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be in [{lo}, {top}], got {text!r}")
        return value

    return parse


#: Sample counts and sizes (int64), and seeds and epochs (uint64).
samples = in_range(0, MAX_I64)
positive = in_range(1, MAX_I64)
seed_or_epoch = in_range(0, MAX_U64)
