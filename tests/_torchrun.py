"""Runs an example under torchrun (torch.distributed.run) for the example
tests, and ends every process it started if it hangs."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


def descendants(pid: int) -> list[int]:
    """The processes below `pid` (children first found, grandchildren after)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def torchrun(script: Path, nproc: int, *args: str, cwd: Path, timeout: float = 300) -> str:
    """The standard output of `script` run on `nproc` local ranks."""
    # --standalone: the rendezvous store binds a free port itself (a port
    # picked here could be taken by another process before torchrun binds it).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc-per-node", str(nproc), str(script), *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own: end every descendant.
        for pid in [*descendants(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"torchrun hung for more than {timeout:.0f} s")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    return stdout
