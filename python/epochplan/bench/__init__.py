"""``epochplan bench``: our implementations against the installed peers.

Every case runs in a fresh Python subprocess, ``--repeats`` times. Time is the
median wall time of the call alone; memory is the peak RSS the call adds: the
high-water mark is reset after imports and setup (``/proc/self/clear_refs``),
and the RSS at that point is subtracted from the mark after the call (where
the reset is not possible, the high-water mark of ``resource.getrusage``
stands in, which can hide a few MB). The speed-up of each of our rows is
against the fastest peer measured in the same group at the same size, named
in the row. A case whose estimated memory does not fit in the available
memory, or whose library is not installed, is skipped with the reason
printed. Writes a Markdown table and (with matplotlib) a log-log plot of time
against N.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from epochplan._system import available_memory
from epochplan.bench.cases import CASES, Case

_TEMPLATE = """
import gc, json, os, resource, sys, time
{imports}
def _status(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
def _peak_since():
    # The high-water mark, reset now; the RSS it is measured from.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return lambda: _status("VmHWM"), _status("VmRSS")
    except OSError:
        rss = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        return rss, rss()
n = {n}
{setup}
if "epochplan" in sys.modules:
    # epochplan loads its names on first use: load them now, before the
    # clock starts, as the peers' imports are.
    for _name in sys.modules["epochplan"].__all__:
        getattr(sys.modules["epochplan"], _name)
if os.access("/proc/self/clear_refs", os.W_OK):
    # As much memory as the call may take (at most 4 GiB), touched and freed
    # before the clock starts, so that the call's fresh pages are pages the
    # host backs now (a virtual machine may hand memory left free for a few
    # seconds back to its host, and its next first touch then costs several
    # times more); only where the peak can be reset after it.
    import numpy
    _warm = numpy.ones({warm_bytes} // 8, dtype=numpy.int64)
    del _warm
gc.collect()
_peak, _base = _peak_since()
_t = time.perf_counter()
_result = {call}
_dt = time.perf_counter() - _t
print(json.dumps({{"seconds": _dt, "peak": _peak() - _base}}))
"""


@dataclass
class Result:
    """The measurements of one case at one size."""

    case: Case
    n: int
    seconds: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    skip: str = ""

    @property
    def median(self) -> float:
        return statistics.median(self.seconds)

    @property
    def peak(self) -> int:
        return max(self.peaks)


def _importable(spec: str) -> str:
    """Empty when ``module[:attribute]`` imports (``find:module``: is
    installed, without importing it), else the reason."""
    if spec.startswith("find:"):
        module = spec[5:]
        found = importlib.util.find_spec(module) is not None
        return "" if found else f"{module} is not installed"
    module, _, attr = spec.partition(":")
    code = f"import {module}" + (f"; {module}.{attr}" if attr else "")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
        )
    except subprocess.TimeoutExpired:
        return f"importing {module} timed out"
    if proc.returncode == 0:
        return ""
    last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
    return f"{spec.replace(':', '.')} is not available ({last[:80]})"


def run_case(case: Case, n: int, timeout: float) -> dict[str, Any]:
    """Runs one case once in a fresh subprocess; returns its JSON line."""
    warm_bytes = int(min(max(64 << 20, case.bytes_per_sample * n), 4 << 30))
    code = _TEMPLATE.format(
        imports=case.imports, n=n, setup=case.setup, call=case.call, warm_bytes=warm_bytes
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"skip": f"timed out after {timeout:.0f} s"}
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return {"skip": f"failed: {last[:100]}"}
    out: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def run(
    sizes: list[int],
    repeats: int,
    timeout: float,
    log: Any = sys.stderr,
    cases: list[Case] | None = None,
) -> list[Result]:
    """Runs every case at every size; prints a line per case to ``log``."""
    missing: dict[str, str] = {}
    results: list[Result] = []
    avail = available_memory()
    for case in CASES if cases is None else cases:
        for spec in case.needs:
            if spec not in missing:
                missing[spec] = _importable(spec)
        for n in sizes:
            res = Result(case, n)
            results.append(res)
            reasons = [missing[s] for s in case.needs if missing[s]]
            need = case.bytes_per_sample * n
            if reasons:
                res.skip = reasons[0]
            elif avail is not None and need > 0.8 * avail:
                res.skip = f"needs about {need / 1e9:.1f} GB, {avail / 1e9:.1f} GB available"
            for _ in range(repeats):
                if res.skip:
                    break
                out = run_case(case, n, timeout)
                if "skip" in out:
                    res.skip = str(out["skip"])
                    break
                res.seconds.append(float(out["seconds"]))
                res.peaks.append(int(out["peak"]))
            if res.skip:
                print(f"skip {case.group} | {case.name} | N={n:.0e}: {res.skip}", file=log)
            else:
                print(
                    f"{case.group} | {case.name} | N={n:.0e}: {res.median:.4f} s, "
                    f"{res.peak / 1e6:.0f} MB",
                    file=log,
                )
    return results


def _reference(results: list[Result], res: Result) -> Result | None:
    """The fastest peer measured for the same group and size."""
    peers = [
        r
        for r in results
        if r.case.group == res.case.group and r.n == res.n and not r.case.ours and not r.skip
    ]
    return min(peers, key=lambda r: r.median, default=None)


def size_text(n: int) -> str:
    exp = len(str(n)) - 1
    return f"10^{exp}" if n == 10**exp else f"{n:,}"


#: A word of a case's name longer than this gets a line-break opportunity
#: (``<wbr>``) after each dot and opening bracket that a letter follows, so
#: that the tables fit the width of the docs page (at 1280 px, the five
#: columns share about 690 px).
_LONG_WORD = 28


def _label(res: Result, peak: str = "") -> str:
    """The implementation cell: the case's name (bold for ours), its note and
    ``peak``."""
    words = [
        re.sub(r"([.(])(?=[A-Za-z_])", r"\1<wbr>", w) if len(w) > _LONG_WORD else w
        for w in res.case.name.split(" ")
    ]
    name = " ".join(words)
    name = f"**{name}**" if res.case.ours else name
    extra = "; ".join(x for x in (res.case.note, peak) if x)
    return f"{name} ({extra})" if extra else name


def _peer(name: str) -> str:
    """A peer's short name: its first word, without its arguments."""
    return re.split(r"[ (]", name, maxsplit=1)[0]


def table(results: list[Result], repeats: int) -> str:
    """The Markdown table of the results (a case skipped at every size for
    the same reason is one row). Beside each median, the range of the runs;
    beside a speed-up, its range from the peer's fastest run over our
    slowest to the peer's slowest over our fastest; the peak memory with the
    implementation. Five columns, so that it fits the docs page."""
    lines = [
        f"| operation, N | implementation (peak memory) | median time (s, {repeats} runs) "
        "| range (s) "
        "| speed-up vs the fastest peer (range) |",
        "|---|---|---:|---:|---:|",
    ]
    done: set[tuple[str, str]] = set()
    for res in results:
        name = _label(res)
        same = [r for r in results if r.case is res.case]
        if len({r.skip for r in same}) == 1 and res.skip:
            if (res.case.group, res.case.name) not in done:
                done.add((res.case.group, res.case.name))
                lines.append(f"| {res.case.group}, all N | {name} | skipped: {res.skip} | | |")
            continue
        where = f"{res.case.group}, N={size_text(res.n)}"
        if res.skip:
            lines.append(f"| {where} | {name} | skipped: {res.skip} | | |")
            continue
        ref = _reference(results, res)
        ratio = ""
        if ref is not None and res.case.ours:
            low, high = min(ref.seconds) / max(res.seconds), max(ref.seconds) / min(res.seconds)
            ratio = (
                f"{ref.median / res.median:.1f}x vs {_peer(ref.case.name)} "
                f"({low:.1f} to {high:.1f})"
            )
        spread = f"{min(res.seconds):.4f} to {max(res.seconds):.4f}"
        name = _label(res, f"peak {res.peak / 1e6:.0f} MB")
        lines.append(f"| {where} | {name} | {res.median:.4f} | {spread} | {ratio} |")
    return "\n".join(lines) + "\n"


def plot(results: list[Result], path: Path) -> str:
    """Draws time against N (log-log), one panel per operation; returns a
    message (why it was not drawn, or where it went)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib)"
    groups = list(dict.fromkeys(r.case.group for r in results))
    cols = 3
    rows = (len(groups) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(12, 3.2 * rows), squeeze=False)
    for ax, group in zip(axes.flat, groups, strict=False):
        names = list(dict.fromkeys(r.case.name for r in results if r.case.group == group))
        for name in names:
            pts = [
                (r.n, r.median)
                for r in results
                if r.case.group == group and r.case.name == name and not r.skip
            ]
            if not pts:
                continue
            ours = any(r.case.ours for r in results if r.case.name == name)
            xs, ys = zip(*pts, strict=True)
            ax.loglog(xs, ys, marker="o", linestyle="-" if ours else "--", label=name)
        ax.set_title(group, fontsize=9)
        ax.set_xlabel("N", fontsize=8)
        ax.set_ylabel("seconds", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(groups) :]:
        ax.axis("off")
    fig.suptitle("epochplan (solid) vs peers (dashed): median time, log-log", fontsize=10)
    fig.tight_layout()
    try:
        replace_with(path, "--plot", lambda tmp: fig.savefig(tmp, dpi=70))
    finally:
        plt.close(fig)
    return f"wrote {path}"


def _temporary_beside(path: Path) -> Path:
    # The suffix is kept: matplotlib picks the image format from it.
    return path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")


def check_writable(flag: str, path: Path) -> None:
    """ValueError naming ``flag`` unless ``path`` can be written: a new or
    regular file in a directory where a file can be created."""
    if path.is_dir():
        raise ValueError(f"{flag} {path} is a directory; give a file name")
    if not path.parent.is_dir():
        raise ValueError(f"{flag} {path}: directory {path.parent} does not exist")
    if path.exists() and not path.is_file():
        raise ValueError(f"{flag} {path} is not a regular file")
    tmp = _temporary_beside(path)
    try:
        tmp.touch()
        tmp.unlink()
    except OSError as e:
        raise ValueError(f"{flag} {path}: cannot write there ({e.strerror or e})") from None


def replace_with(path: Path, flag: str, write: Callable[[Path], object]) -> None:
    """Calls ``write(tmp)`` for a temporary file beside ``path``, then renames
    it to ``path``: the file is complete or left as it was."""
    tmp = _temporary_beside(path)
    try:
        write(tmp)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise OSError(f"{flag} {path}: cannot write ({e.strerror or e})") from None
