"""What the machine has to give, read where the system tells it."""

from __future__ import annotations

import os


def available_memory() -> int | None:
    """Bytes of memory available now (``MemAvailable`` of ``/proc/meminfo``),
    or None where the system does not say."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


# Filesystems local to this machine's kernel: a lock any process holds is
# seen by every other, and the allocated blocks a file reports are its own.
# On others (NFS, SMB, FUSE, cluster filesystems) neither holds everywhere.
_LOCAL_FILESYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "zfs", "f2fs", "overlay", "ramfs", "jfs"}
)


def filesystem_type(path: str | os.PathLike[str]) -> str | None:
    """The type of the filesystem holding ``path`` (from /proc/self/mounts:
    the mount point that is its longest prefix), or None where unknown."""
    try:
        with open("/proc/self/mounts") as f:
            mounts = [line.split() for line in f]
    except OSError:
        return None
    target, best, kind = os.path.realpath(path), -1, None
    for fields in mounts:
        if len(fields) < 3:
            continue
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) > best:
            best, kind = len(point), fields[2]
    return kind


def is_local_filesystem(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` is on a filesystem known to be local (see above)."""
    return filesystem_type(path) in _LOCAL_FILESYSTEMS
