"""What the machine has to give, read where the system tells it."""

from __future__ import annotations


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
