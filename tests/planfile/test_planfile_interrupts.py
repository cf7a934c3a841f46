"""Plan writes stopped, killed or signalled leave nothing; memory and descriptors stay bounded."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from epochplan import PlanSpec
from epochplan.planfile import MANIFEST, PlanError, open_plan, verify_plan, write_plan


def test_keyboard_interrupt_leaves_nothing(tmp_path: Path) -> None:
    calls = 0

    def progress(done: int, total: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_plan(tmp_path / "p", PlanSpec(50_000_000, 1000), 2, progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_error_in_progress_propagates(tmp_path: Path) -> None:
    def progress(done: int, total: int) -> None:
        raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        write_plan(tmp_path / "p", PlanSpec(50_000_000, 1000), 2, progress=progress)
    assert list(tmp_path.iterdir()) == []


def test_failed_write_removes_the_parents_it_created(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "keep").write_text("x")

    def stop(done: int, total: int) -> None:
        raise KeyboardInterrupt

    for out in (tmp_path / "a" / "b" / "c" / "plan", tmp_path / "d" / "plan"):
        with pytest.raises(KeyboardInterrupt):
            write_plan(out, PlanSpec(1000, 10), 2, progress=stop)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "keep"]
    # Parents that exist stay, as does a plan written into new ones.
    write_plan(tmp_path / "a" / "e" / "plan", PlanSpec(10, 10), 1)
    assert (tmp_path / "a" / "e" / "plan" / MANIFEST).is_file()


def _start_writer(out: Path) -> subprocess.Popen[str]:
    code = textwrap.dedent(
        f"""
        from epochplan import PlanSpec
        from epochplan.planfile import write_plan
        write_plan({str(out)!r}, PlanSpec(60_000_000, 1000), 2, epochs=(0, 1))
        """
    )
    return subprocess.Popen([sys.executable, "-c", code], text=True)


def _wait_for_partial(parent: Path, timeout: float = 60) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in parent.iterdir():
            if ".partial-" in p.name:
                files = list(p.rglob("*.npy"))
                if files and files[0].stat().st_size > 1 << 20:
                    return p
        time.sleep(0.02)
    raise AssertionError("the writer did not start")


def test_sigkill_mid_write_leaves_nothing_valid(tmp_path: Path) -> None:
    out = tmp_path / "p"
    proc = _start_writer(out)
    partial = _wait_for_partial(tmp_path)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not out.exists()
    with pytest.raises(PlanError):
        open_plan(out)
    with pytest.raises(PlanError, match="missing"):
        verify_plan(partial)
    # The next write to the same place removes the dead writer's leftovers.
    write_plan(out, PlanSpec(1000, 10), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p"]
    verify_plan(out)


def _default_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.mark.parametrize(
    ("sig", "code", "message"),
    [
        (signal.SIGINT, 130, "interrupted"),
        (signal.SIGTERM, 143, "terminated by SIGTERM"),
        (signal.SIGHUP, 129, "terminated by SIGHUP"),
    ],
)
@pytest.mark.parametrize("demo", [False, True])
def test_signal_mid_write_cleans_up(
    tmp_path: Path, sig: signal.Signals, code: int, message: str, demo: bool
) -> None:
    # With --out, the partial directory goes; without (the demo), the
    # temporary directory made for the plan goes too.
    out = [] if demo else ["--out", str(tmp_path / "p")]
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", "plan", "-n", "6e7", "-w", "2", *out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        # A test run started in the background (`pytest &`) ignores SIGINT, and
        # one under nohup SIGHUP, and so would the writer: it gets the default
        # dispositions back.
        preexec_fn=_default_signals,
    )
    if demo:
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob("epochplan-*")) and time.monotonic() < deadline:
            time.sleep(0.02)
        _wait_for_partial(next(tmp_path.glob("epochplan-*")))
    else:
        _wait_for_partial(tmp_path)
    proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code
    assert stderr.strip() == f"epochplan plan: {message}"
    assert list(tmp_path.iterdir()) == []


def test_ignored_sighup_stays_ignored(tmp_path: Path) -> None:
    # Under nohup SIGHUP is ignored: the write goes on to the end.
    out = tmp_path / "p"
    args = ["plan", "-n", "6e7", "-w", "2", "--no-verify", "-q", "--out", str(out)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "epochplan.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    _wait_for_partial(tmp_path)
    assert proc.poll() is None  # still writing when the signal comes
    proc.send_signal(signal.SIGHUP)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    verify_plan(out)


# ---------------------------------------------------------- resources


def _peak_rss_of_write(tmp_path: Path, n: int) -> int:
    out = tmp_path / f"p{n}"
    code = textwrap.dedent(
        f"""
        import resource
        from epochplan.planfile import write_plan
        import epochplan
        base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        write_plan({str(out)!r}, epochplan.PlanSpec({n}, 4096), 1)
        print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base)
        """
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    size = sum(f.stat().st_size for f in out.rglob("*.npy"))
    assert size > 8 * n
    return int(res.stdout.strip()) * 1024


def test_memory_does_not_grow_with_n(tmp_path: Path) -> None:
    small = _peak_rss_of_write(tmp_path, 1_000_000)
    large = _peak_rss_of_write(tmp_path, 40_000_000)  # a 320 MB file
    # Buffers are a few 8 MiB chunks either way; the file is 40x larger.
    assert large < 80 * 2**20, large
    assert large - small < 32 * 2**20, (small, large)


def test_gil_is_released_while_writing(tmp_path: Path) -> None:
    ticks = 0
    stop = threading.Event()

    def count() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1

    seen: list[int] = []
    t = threading.Thread(target=count)
    t.start()
    try:
        write_plan(
            tmp_path / "p", PlanSpec(20_000_000, 1000), 2, progress=lambda a, b: seen.append(ticks)
        )
    finally:
        stop.set()
        t.join()
    assert len(seen) >= 2
    # The counting thread kept running between progress calls.
    assert seen[-1] - seen[0] > 10_000, seen


def test_files_load_in_a_forked_worker(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", PlanSpec(10_000, 100), 2)
    want = d.rank_ids(0, 1).sum()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        ok = open_plan(d.path).rank_ids(0, 1).sum() == want
        verify_plan(d.path)
        os._exit(0 if ok else 1)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0


def test_mapped_rank_files_hold_no_descriptor_and_errors_name_their_file(tmp_path: Path) -> None:
    # numpy's memory maps keep a descriptor each, and rank_ids ran into the
    # open-file limit with "[Errno 24] Too many open files" and no path; its
    # maps now hold none. At the limit itself, the error names the file.
    write_plan(tmp_path / "p", PlanSpec(2000, 100), 64)
    script = f"""
import os, resource
from epochplan.planfile import PlanError, open_plan
d = open_plan({str(tmp_path / "p")!r})
open_now = len(os.listdir("/proc/self/fd"))
hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
resource.setrlimit(resource.RLIMIT_NOFILE, (open_now + 20, hard))
maps = [d.rank_ids(0, rank) for rank in range(64)]
print(sum(len(m) for m in maps), len(os.listdir("/proc/self/fd")) - open_now)
spare = []
try:
    while True:  # every descriptor taken
        spare.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    d.rank_ids(0, 0)
except PlanError as e:
    print(e)
"""
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-2000:]
    counted, error = res.stdout.splitlines()
    ids, new_descriptors = map(int, counted.split())
    assert ids == 2000 and new_descriptors <= 1
    named = r"epoch-0000/rank-00000\.npy: .*[Tt]oo many open files"
    assert re.search(named, error), error
