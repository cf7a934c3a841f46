"""Runs a script under torchrun (torch.distributed.run) for the tests, and
ends every process it started if it hangs; `exit_without_finalization` is
the clean end of the ranks those scripts start."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

#: The repository's root (see `_env`).
ROOT = Path(__file__).resolve().parents[2]


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


# gloo's threads can end a rank in std::terminate while Python tears the
# process down (see exit_without_finalization): a run that failed that way,
# and only that way, is run once more.
TEARDOWN_ABORT = "terminate called without an active exception"


def exit_without_finalization() -> None:
    """Ends a rank whose results are written and whose group is destroyed,
    skipping the interpreter's finalization. DDP keeps the gloo group alive
    past ``destroy_process_group``, and gloo's threads can abort a process
    that Python is tearing down (pytorch/pytorch#179291 describes how): in
    CI ranks died so ("terminate called without an active exception") after
    their results were written, once with a barrier before the teardown.
    Only a clean end gets here: an exception still fails the run."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def torchrun(script: Path, nproc: int, *args: str, cwd: Path, timeout: float = 300) -> str:
    """The standard output of `script` run on `nproc` local ranks."""
    returncode, stdout, stderr = _run(script, nproc, args, cwd, timeout)
    if returncode != 0 and TEARDOWN_ABORT in stderr:
        returncode, stdout, stderr = _run(script, nproc, args, cwd, timeout)
    assert returncode == 0, stdout[-3000:] + stderr[-3000:]
    return stdout


def _run(
    script: Path, nproc: int, args: tuple[str, ...], cwd: Path, timeout: float
) -> tuple[int, str, str]:
    # --standalone: the rendezvous store binds a free port itself (a port
    # picked here could be taken by another process before torchrun binds it).
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc-per-node", str(nproc), str(script), *args]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=cwd, env=_env()
    )
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        # torchrun starts each rank in a session of its own: end every descendant.
        for pid in [*descendants(proc.pid), proc.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail(f"torchrun hung for more than {timeout:.0f} s")
    return proc.returncode, stdout, stderr


def _env() -> dict[str, str]:
    """The ranks' environment: the repository's root first on PYTHONPATH, so
    that a script run by path imports `tests._support` as the tests do (and
    not another distribution's top-level `tests`, which verl installs)."""
    paths = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
