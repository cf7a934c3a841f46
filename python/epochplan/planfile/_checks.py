"""Arguments only Python knows: paths and progress callbacks."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from epochplan.planfile.errors import PlanError

#: ``progress(done, total)``: samples (or bytes, when verifying) so far.
Progress = Callable[[int, int], None]


def path_arg(value: Any, name: str) -> Path:
    """``value`` as a path the Rust core can open; PlanError naming ``name``
    for an empty path, a NUL character or a name that is not UTF-8."""
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path (str or os.PathLike), got {type(value).__name__}")
    raw = os.fspath(value)
    if raw in ("", b""):
        # Path("") is the current directory: an empty string is a mistake.
        raise PlanError(f"{name} must be a path, got an empty string")
    if ("\0" if isinstance(raw, str) else b"\0") in raw:
        raise PlanError(f"{name} must be a path without NUL characters, got {raw!r}")
    path = Path(value)
    try:
        # The files are opened by the Rust core, which takes UTF-8 paths.
        str(path).encode()
    except UnicodeEncodeError:
        raise PlanError(f"{name} must be valid UTF-8, got {str(path)!r}") from None
    return path


def absolute(path: Path) -> Path:
    """``path`` made absolute as the system resolves it (``link/..`` is the
    link target's parent, not the link's folder), its last component kept
    as it is (a link there is refused, never followed, by writes). Plan
    directories are kept absolute: a later ``os.chdir`` must not move them."""
    if path.name in ("", ".", ".."):
        return Path(os.path.realpath(path))
    return Path(os.path.realpath(path.parent)) / path.name


def progress_arg(value: Any) -> Progress | None:
    """A progress callback or None."""
    if value is not None and not callable(value):
        raise TypeError(f"progress must be callable or None, got {type(value).__name__}")
    return value  # type: ignore[no-any-return]
