"""The memory floor and what stands on it: one run, fresh processes.

Run ``python benches/bench_floor.py`` (``--help`` for options). Each row is
one call in a fresh process (the call alone is timed, as a user meets it:
fresh pages included), repeated in ``--processes`` processes; rows are
interleaved round by round so that a slow minute of the machine touches every
row alike. Prints a Markdown table of medians and ranges, and each ratio
against its peer and against the floor: ``np.arange(N)`` in a fresh process,
which writes as many int64 into fresh memory as every row here returns.

Rows whose peer is missing (torch, mosaicml-streaming) are left out and the
table says so.

``--profile`` instead samples each row's call (the call alone: ``perf``
starts disabled and the child enables it around the call) with Linux
``perf record`` (from Debian's ``linux-perf``; a software clock, as virtual
machines often have no hardware counters) and prints, per row, the share
of the kernel clearing fresh pages and the symbols with the most samples.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# Streaming's shuffles over 10,000 shards (of 10,000 samples at N = 10^8;
# block size 2^18); its partition as a multi-node job (8 nodes x 8 ranks x 8
# workers, batch 32).
SHARDS = 10_000
NODES, RANKS, WORKERS, BATCH = 8, 8, 8, 32


def _call(row: str, n: int) -> Callable[[], Any]:
    """The call a row times, with its imports and inputs made beforehand."""
    import numpy as np

    if row == "floor":
        return lambda: np.arange(n, dtype=np.int64)
    if row == "numpy.permutation":
        rng = np.random.default_rng(0)
        return lambda: rng.permutation(n)
    if row == "torch.randperm":
        import torch

        return lambda: torch.randperm(n)
    if row.startswith("epochplan."):
        import epochplan as ep

        if row.endswith("1 thread"):
            ep.set_num_threads(1)
        if row.startswith("epochplan.Permutation"):
            perm = ep.Permutation(n, seed=3)
            return lambda: perm[:]
        if row == "epochplan.permutation uniform":
            permutation = ep.permutation  # loaded on first use: load it now
            return lambda: permutation(n, kind="uniform", seed=3)
    algo, _, impl = row.partition(" ")
    if algo.startswith(("py1s", "py1e")):
        name, ncn = algo.split("/")
        sizes = np.full(SHARDS, n // SHARDS, dtype=np.int64)
        if impl == "streaming":
            sys.path.insert(0, str(HERE.parent / "tests" / "compat"))
            from streaming_ref import load_shuffle

            shuffle = load_shuffle().get_shuffle
        else:
            from epochplan.compat.streaming import get_shuffle as shuffle
        return lambda: shuffle(name, sizes, int(ncn), 17, 1, 1 << 18)
    if algo == "get_partitions/8":
        args = ("orig", n, 8, NODES, RANKS, WORKERS, BATCH)
        if impl == "streaming":
            sys.path.insert(0, str(HERE.parent / "tests" / "compat"))
            from streaming_ref import load_partition

            part = load_partition().get_partitions
        else:
            from epochplan.compat.streaming import get_partitions as part
        return lambda: part(*args)
    raise SystemExit(f"unknown row {row!r}")


def _perf_control(command: str) -> None:
    """Tells a ``perf record --control`` parent to enable or disable
    sampling, and waits for its acknowledgement."""
    fifos = os.environ.get("BENCH_FLOOR_PERF_FIFOS")
    if fifos:
        ctl, ack = fifos.split(",")
        with open(ctl, "w") as f:
            f.write(command + "\n")
        with open(ack) as f:
            f.readline()


def _warm_memory(nbytes: int) -> None:
    """Touches and frees `nbytes` of memory, so that the call's fresh pages
    are pages the hypervisor backs now.

    This virtual machine hands memory that stays free for a few seconds back
    to its host, and the next first touch of it then costs up to ten times
    more (a process that follows a slow import, such as torch's, pays it for
    all of its pages). Warming every row alike measures the code against the
    same floor instead of the host's timing.
    """
    import numpy as np

    buffer = np.ones(nbytes // 8, dtype=np.int64)
    del buffer


def child(row: str, n: int) -> None:
    call = _call(row, n)
    _warm_memory(min(max(64 << 20, 40 * n), 4 << 30))
    _perf_control("enable")
    start = time.perf_counter()
    out = call()
    seconds = time.perf_counter() - start
    _perf_control("disable")
    del out
    print(json.dumps({"seconds": seconds}))


# Kernel symbols that clear fresh pages (4 KiB and huge pages).
CLEARING = ("clear_page", "clear_huge_page", "folio_zero_user", "clear_subpage")


def profile(rows: list[str], n: int, top: int) -> None:
    """Prints, for each row, where one call's samples fall."""
    import shutil
    import tempfile

    if shutil.which("perf") is None:
        raise SystemExit("--profile needs perf (Debian: apt-get install linux-perf)")
    print(f"N = {n:,}; perf record -F 4000 of the call alone; self time by symbol\n")
    for row in rows:
        with tempfile.TemporaryDirectory() as tmp:
            ctl, ack, data = (os.path.join(tmp, name) for name in ("ctl", "ack", "perf.data"))
            os.mkfifo(ctl)
            os.mkfifo(ack)
            cmd = [
                "perf", "record", "-F", "4000", "-D", "-1", "-o", data,
                f"--control=fifo:{ctl},{ack}", "--",
                sys.executable, __file__, "--child", row, "--n", str(n),
            ]  # fmt: skip
            env = dict(os.environ, BENCH_FLOOR_PERF_FIFOS=f"{ctl},{ack}")
            out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
            seconds = json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
            report = subprocess.run(
                ["perf", "report", "-i", data, "--stdio", "--no-children", "--sort", "symbol"],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
        shares = []
        for line in report.splitlines():
            parts = line.split()
            if len(parts) >= 3 and parts[0].endswith("%") and parts[1] in ("[k]", "[.]"):
                shares.append((float(parts[0][:-1]), parts[1], " ".join(parts[2:])))
        kernel = [(p, name) for p, kind, name in shares if kind == "[k]"]
        clearing = sum(p for p, name in kernel if name.startswith(CLEARING))
        print(
            f"### {row}: {seconds:.3f} s; kernel {sum(p for p, _ in kernel):.0f}%, "
            f"of which clearing pages {clearing:.0f}%"
        )
        for p, kind, name in shares[:top]:
            print(f"    {p:5.1f}%  {kind} {name[:90]}")
        print()


# (row, its peer or None); the floor is every row's second reference.
ROWS: list[tuple[str, str | None]] = [
    ("floor", None),
    ("epochplan.Permutation[:]", None),
    ("epochplan.Permutation[:] 1 thread", None),
    ("numpy.permutation", None),
    ("torch.randperm", None),
    ("epochplan.permutation uniform", "numpy.permutation"),
    ("py1s/64 streaming", None),
    ("py1s/64 epochplan", "py1s/64 streaming"),
    ("py1s/1 streaming", None),
    ("py1s/1 epochplan", "py1s/1 streaming"),
    ("py1e/64 streaming", None),
    ("py1e/64 epochplan", "py1e/64 streaming"),
    ("py1e/1 streaming", None),
    ("py1e/1 epochplan", "py1e/1 streaming"),
    ("get_partitions/8 streaming", None),
    ("get_partitions/8 epochplan", "get_partitions/8 streaming"),
]


def _available(row: str) -> bool:
    import importlib.util

    if row == "torch.randperm":
        return importlib.util.find_spec("torch") is not None
    if row.endswith("streaming"):
        return importlib.util.find_spec("streaming") is not None
    return True


def _loadavg() -> float:
    return os.getloadavg()[0]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=float, default=1e8, help="samples (default 1e8)")
    p.add_argument("--processes", type=int, default=5, help="fresh processes per row")
    p.add_argument("--rows", default="", help="comma-separated substrings to keep")
    p.add_argument("--profile", action="store_true", help="perf profiles instead of times")
    p.add_argument("--top", type=int, default=6, help="symbols per profile")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    n = int(a.n)
    if a.child:
        child(a.child, n)
        return
    if n <= 0 or n % SHARDS:
        raise SystemExit(f"--n must be a positive multiple of {SHARDS:,} (the shard count)")
    keep = [s for s in a.rows.split(",") if s]
    rows = [r for r in ROWS if r[0] == "floor" or not keep or any(k in r[0] for k in keep)]
    missing = [r for r, _ in rows if not _available(r)]
    rows = [r for r in rows if r[0] not in missing]
    if a.profile:
        profile([r for r, _ in rows], n, a.top)
        return
    times: dict[str, list[float]] = {r: [] for r, _ in rows}
    loads = [_loadavg()]
    for _ in range(a.processes):
        for row, _peer in rows:
            cmd = [sys.executable, __file__, "--child", row, "--n", str(n)]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            times[row].append(json.loads(out.strip().splitlines()[-1])["seconds"])
        loads.append(_loadavg())

    floor = statistics.median(times["floor"])
    print(
        f"N = {n:,}, one call per fresh process, {a.processes} processes a row, "
        f"{os.cpu_count()} CPUs, load {min(loads):.1f} to {max(loads):.1f}\n"
    )
    print("| row | median | range | x floor | peer / row (range) |")
    print("|---|---:|---:|---:|---:|")
    for row, peer in rows:
        t = times[row]
        med = statistics.median(t)
        ratio = ""
        if peer is not None and peer in times:
            theirs = times[peer]
            low, high = min(theirs) / max(t), max(theirs) / min(t)
            ratio = f"{statistics.median(theirs) / med:.1f}x ({low:.1f} to {high:.1f})"
        spread = f"{min(t):.3f} to {max(t):.3f} s"
        print(f"| {row} | {med:.3f} s | {spread} | {med / floor:.2f} | {ratio} |")
    for row in missing:
        print(f"| {row} | not installed | | | |")


if __name__ == "__main__":
    main()
