"""Reading files a user names (space specs, manifests, ``.npy`` arrays)
without being stalled by them: only regular files are read, checked on the
open descriptor before any read, so that a FIFO cannot block, a device
(``/dev/zero``) cannot be read without end and a file swapped after a check
is still the one checked."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any, BinaryIO

import numpy as np
import numpy.typing as npt

from epochplan._args import size_label

__all__ = ["map_npy", "open_regular", "read_regular"]


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """``path`` open for reading; OSError (``EINVAL``, "not a regular file")
    for a FIFO, a device, a socket or a directory. The open does not block:
    it is non-blocking, which a regular file ignores."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; OSError
    (``EFBIG``) for a larger one, before anything is read."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise OSError(
                errno.EFBIG,
                f"larger than {size_label(max_bytes)} ({size_label(size)})",
                os.fspath(path),
            )
        # What the file holds (a buffer of its size, not of the cap); one
        # byte more shows a file that grew past the cap since.
        data = f.read(min(size, max_bytes) + 1)
        if len(data) > max_bytes:
            raise OSError(errno.EFBIG, f"larger than {size_label(max_bytes)}", os.fspath(path))
        return data


def map_npy(path: str | os.PathLike[str]) -> tuple[npt.NDArray[Any], int]:
    """The array of a ``.npy`` file, memory-mapped read-only (an array of a
    large store is not read whole), and the offset of its values in the
    file. ValueError for a file that is not a ``.npy`` array without
    objects; OSError as :func:`open_regular`."""
    with open_regular(path) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise ValueError(f"the .npy format version {version} is not supported")
        if dtype.hasobject:
            raise ValueError("the array holds Python objects, which are not read")
        offset = f.tell()
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        size = os.fstat(f.fileno()).st_size
        if offset + count * dtype.itemsize > size:
            raise ValueError(
                f"the header says {count} values of {dtype.itemsize} bytes, but the file "
                f"holds {size - offset} bytes after it"
            )
        if count == 0:
            return np.empty(shape, dtype=dtype), offset  # nothing to map
        # The map holds its own reference to the file: closing f is fine.
        order: Any = "F" if fortran else "C"
        mapped = np.memmap(
            f,
            dtype=dtype,
            mode="r",
            offset=offset,
            shape=shape,
            order=order,
        )
        # Mapped through a descriptor, the map names no file: it records its
        # path, as np.load(path, mmap_mode="r") does (a plan file's manifest
        # records where its lengths are read from).
        mapped.filename = os.path.abspath(path)
        return mapped, offset
