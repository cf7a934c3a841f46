"""Streaming's shuffles: epochplan's Rust port against mosaicml-streaming.

Run ``python benches/bench_streaming_shuffle.py`` (``--help`` for options).
Each (implementation, algorithm) runs in a fresh subprocess, so its peak RSS
delta (peak resident memory during the calls minus resident memory before
them) is its own. Prints a Markdown table (ratio: Streaming's median time over
this row's; CPU time: user + system time of all threads during the calls);
outputs are checked identical.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def _reset_peak() -> bool:
    """Resets the peak RSS counter (Linux 4.0+); False if not possible."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def child(impl: str, algo: str, shards: int, shard_size: int, ncn: int, repeats: int) -> None:
    import numpy as np

    if impl == "streaming":
        sys.path.insert(0, str(HERE.parent / "tests" / "compat"))
        from streaming_ref import load_shuffle

        fn = load_shuffle().get_shuffle
    else:
        from epochplan.compat.streaming import get_shuffle as fn

    sizes = np.full(shards, shard_size, dtype=np.int64)
    times = []
    cpu = []
    digest = ""
    base = _rss_kib("VmRSS")
    peak = 0
    for r in range(repeats):
        _reset_peak()
        before = _rss_kib("VmRSS")
        c0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        ids = fn(algo, sizes, ncn, 17, r + 1, 1 << 18)
        times.append(time.perf_counter() - t0)
        c1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu.append(c1.ru_utime + c1.ru_stime - c0.ru_utime - c0.ru_stime)
        peak = max(peak, _rss_kib("VmHWM") - before)
        if r == 0:
            digest = hashlib.sha256(np.ascontiguousarray(ids, dtype=np.int64).tobytes()).hexdigest()
        del ids
    result = {"times": times, "cpu": cpu, "peak_kib": peak, "base_kib": base, "digest": digest}
    print(json.dumps(result))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--shards", type=int, default=10_000)
    p.add_argument("--shard-size", type=int, default=10_000)
    p.add_argument("--canonical-nodes", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--algos", default="py1s,py1e")
    p.add_argument("--child", nargs=2, metavar=("IMPL", "ALGO"), help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        child(a.child[0], a.child[1], a.shards, a.shard_size, a.canonical_nodes, a.repeats)
        return

    n = a.shards * a.shard_size
    print(
        f"{a.shards} shards x {a.shard_size} samples = {n:,} samples, "
        f"num_canonical_nodes={a.canonical_nodes}, block_size=2**18, "
        f"median of {a.repeats}, {os.cpu_count()} CPUs\n"
    )
    print("| algo | implementation | time (median) | ratio | CPU time (median) | peak RSS delta |")
    print("|---|---|---:|---:|---:|---:|")
    for algo in a.algos.split(","):
        results = {}
        for impl in ("streaming", "epochplan"):
            cmd = [
                sys.executable,
                __file__,
                "--child",
                impl,
                algo,
                f"--shards={a.shards}",
                f"--shard-size={a.shard_size}",
                f"--canonical-nodes={a.canonical_nodes}",
                f"--repeats={a.repeats}",
            ]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            results[impl] = json.loads(out.strip().splitlines()[-1])
        ref = statistics.median(results["streaming"]["times"])
        same = results["streaming"]["digest"] == results["epochplan"]["digest"]
        for impl in ("streaming", "epochplan"):
            r = results[impl]
            med = statistics.median(r["times"])
            cpu = statistics.median(r["cpu"])
            label = "mosaicml-streaming 0.13.0" if impl == "streaming" else "epochplan (Rust)"
            print(
                f"| {algo} | {label} | {med:.3f} s | {ref / med:.1f}x | {cpu:.3f} s | "
                f"{r['peak_kib'] / 1024:,.0f} MiB |"
            )
        if not same:
            print(f"| {algo} | OUTPUTS DIFFER | | | | |")


if __name__ == "__main__":
    main()
