"""The library's exceptions beyond Python's own.

Every bad argument raises ``TypeError``, ``ValueError``, ``IndexError`` or
``OverflowError`` naming the argument (see the errors reference). Plan files
add :class:`PlanError` (a ``ValueError``: a plan directory that is missing,
incomplete, corrupt or of another format, or a request it cannot serve; the
message names the file). A plan file the system fails to open, read or
write raises a subclass that is also the ``OSError`` of the failure's kind,
with ``errno``, ``strerror`` and ``filename`` set, whichever layer (the
Rust core or Python) met the failure:

- :class:`PlanFileNotFoundError` (a ``FileNotFoundError``),
- :class:`PlanPermissionError` (a ``PermissionError``),
- :class:`PlanFileExistsError` (a ``FileExistsError``),
- :class:`PlanOSError` (any other ``OSError``).

Examples:
    >>> import errno
    >>> from epochplan.errors import PlanError, plan_os_error
    >>> path = "plan/manifest.json"
    >>> cause = FileNotFoundError(errno.ENOENT, "No such file", path)
    >>> err = plan_os_error(f"{path}: cannot read", cause)
    >>> isinstance(err, PlanError), isinstance(err, FileNotFoundError)
    (True, True)
    >>> err.filename
    'plan/manifest.json'
"""

from __future__ import annotations

import errno as _errno

from epochplan._native import (
    PlanError,
    PlanFileExistsError,
    PlanFileNotFoundError,
    PlanOSError,
    PlanPermissionError,
)

__all__ = [
    "PlanError",
    "PlanFileExistsError",
    "PlanFileNotFoundError",
    "PlanOSError",
    "PlanPermissionError",
    "plan_os_error",
]

# The OSError kinds as Python derives them from errno (PEP 3151).
_BY_ERRNO: dict[int, type[PlanError]] = {
    _errno.ENOENT: PlanFileNotFoundError,
    _errno.EACCES: PlanPermissionError,
    _errno.EPERM: PlanPermissionError,
    _errno.EEXIST: PlanFileExistsError,
}


def plan_os_error(message: str, error: OSError, filename: object = None) -> PlanError:
    """The plan-file error of an I/O failure: the class of ``error``'s kind,
    its ``errno``, ``strerror`` and ``filename`` (or ``filename``, where the
    file is known by another name, as a file written in a partial directory
    by the name it is published under), and ``message`` (which names the
    file) as its text, as the Rust core raises them."""
    cls = _BY_ERRNO.get(error.errno or 0, PlanOSError)
    err = cls(message)
    # The OSError fields, which the one-argument constructor leaves as None.
    err.errno = error.errno  # type: ignore[attr-defined]
    err.strerror = error.strerror  # type: ignore[attr-defined]
    shown = error.filename if filename is None else str(filename)
    err.filename = shown  # type: ignore[attr-defined]
    return err
