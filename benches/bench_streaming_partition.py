"""Benchmark: epochplan's get_partitions against MosaicML Streaming's, same run.

Run ``python benches/bench_streaming_partition.py`` (``--help`` for options).
Every (case, implementation) runs in its own subprocess, so its peak RSS is
its own: the subprocess records its resident set after imports, runs the call
``--repeats`` times (dropping the result in between) and reports the times and
its peak RSS (``ru_maxrss``) minus that baseline. The first repeat also pays
for the first touch of fresh memory, which on a virtual machine can cost
seconds; the median of the repeats is the steady state.

Prints a Markdown table: implementation, median and best wall-clock seconds,
the speed-up over Streaming (median over median), median CPU seconds (user +
system, all threads: a check on a shared, loaded machine), peak RSS delta,
and that peak as a multiple of the output array. Cases that would not fit in the memory
available now are skipped with the reason.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "compat"))

GIB = 1 << 30

# A multi-node job: 8 nodes x 8 ranks, 8 workers per rank, per-rank batch 32
# (global batch 2048). Streaming's default canonical node count is 64 per
# physical node with its py1* shuffles (512 here), else the node count (8).
NODES, RANKS, WORKERS, BATCH = 8, 8, 8, 32


@dataclass(frozen=True)
class Case:
    name: str
    num_samples: int
    canonical: int
    part: bool  # one rank's part (node 3, rank 5) instead of the whole array

    def args(self) -> tuple[Any, ...]:
        return ("orig", self.num_samples, self.canonical, NODES, RANKS, WORKERS, BATCH)

    def output_bytes(self) -> int:
        world = NODES * RANKS
        per_rank = -(-self.num_samples // world)
        per_worker_round = WORKERS * BATCH
        elements = -(-per_rank // per_worker_round) * per_worker_round
        return 8 * elements * (1 if self.part else world)


CASES = [
    Case("N = 10^8, 8 canonical nodes", 10**8, 8, part=False),
    Case("N = 10^8, 512 canonical nodes", 10**8, 512, part=False),
    Case("N = 5*10^8, 8 canonical nodes", 5 * 10**8, 8, part=False),
    Case("N = 5*10^8, 512 canonical nodes", 5 * 10**8, 512, part=False),
    Case("one rank's part of N = 10^9, 512 canonical nodes", 10**9, 512, part=True),
]

# Peak memory per output byte, to decide what fits (Streaming builds a few
# full-size temporaries; the one-rank part of Streaming is the whole array).
NEED = {"epochplan": 1.1, "streaming": 2.6}


def mem_available() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _streaming_reference() -> tuple[Any, str]:
    """Streaming's ``get_partitions``, loaded from its files as the tests load
    it, and its version; ``None`` and the reason when it is not installed."""
    from importlib.metadata import version

    import pytest
    from streaming_ref import load_partition

    try:
        ref = load_partition().get_partitions
    except pytest.skip.Exception as missing:
        return None, str(missing)
    return ref, f"mosaicml-streaming {version('mosaicml-streaming')}"


def child(impl: str, case_index: int, repeats: int) -> None:
    """Runs one (implementation, case) and prints a JSON line."""
    import numpy as np

    case = CASES[case_index]
    if impl == "epochplan":
        from epochplan.compat.streaming import get_partition_part, get_partitions

        if case.part:

            def call() -> np.ndarray[Any, Any]:
                return get_partition_part(*case.args(), node=3, rank=5)
        else:

            def call() -> np.ndarray[Any, Any]:
                return get_partitions(*case.args())
    else:
        ref, info = _streaming_reference()
        if ref is None:
            raise SystemExit(info)

        if case.part:

            def call() -> np.ndarray[Any, Any]:
                return np.ascontiguousarray(ref(*case.args())[3, 5])
        else:

            def call() -> np.ndarray[Any, Any]:
                return np.asarray(ref(*case.args()))

    def cpu() -> float:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return usage.ru_utime + usage.ru_stime

    baseline = rss_bytes()
    times, cpus = [], []
    nbytes = 0
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), cpu()
        out = call()
        times.append(time.perf_counter() - start)
        cpus.append(cpu() - start_cpu)
        nbytes = out.nbytes
        del out
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"times": times, "cpus": cpus, "peak": peak - baseline, "nbytes": nbytes}))


def run_child(impl: str, case_index: int, repeats: int) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, __file__, "--child", impl, str(case_index), "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--cases",
        default=",".join(str(i) for i in range(len(CASES))),
        help="comma-separated case indices: "
        + "; ".join(f"{i}: {c.name}" for i, c in enumerate(CASES)),
    )
    parser.add_argument("--child", nargs=2, metavar=("IMPL", "CASE"), help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        child(opts.child[0], int(opts.child[1]), opts.repeats)
        return

    get_partitions_ref, ref_info = _streaming_reference()

    import epochplan

    print(f"epochplan {epochplan.__version__}, {epochplan.get_num_threads()} threads")
    print(f"Streaming: {ref_info}")
    print(
        f'get_partitions("orig", N, canonical nodes, num_physical_nodes={NODES}, '
        f"ranks_per_node={RANKS}, workers_per_rank={WORKERS}, batch_size={BATCH}); "
        f"median of {opts.repeats} repeats (Streaming's part: 1, it builds the whole "
        "plan), each implementation in its own process"
    )
    print()
    print(
        "| case | implementation | median s | min s | vs Streaming | CPU s "
        "| peak RSS delta | peak / output |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for index in (int(i) for i in opts.cases.split(",")):
        case = CASES[index]
        rows: list[tuple[str, dict[str, Any] | None, str]] = []
        for impl in ("epochplan", "streaming"):
            if impl == "streaming" and get_partitions_ref is None:
                rows.append((impl, None, "skipped: " + ref_info))
                continue
            full = case.output_bytes() * (NODES * RANKS if case.part else 1)
            need = NEED[impl] * (case.output_bytes() if impl == "epochplan" else full)
            if need > mem_available():
                rows.append(
                    (
                        impl,
                        None,
                        f"skipped: needs about {need / GIB:.1f} GiB, "
                        f"{mem_available() / GIB:.1f} GiB available",
                    )
                )
                continue
            repeats = 1 if impl == "streaming" and case.part else opts.repeats
            rows.append((impl, run_child(impl, index, repeats), ""))
        medians = {impl: statistics.median(r["times"]) for impl, r, _ in rows if r and "times" in r}
        for impl, result, why in rows:
            if result is None or "times" not in result:
                reason = why or (result or {}).get("error", "failed")
                print(f"| {case.name} | {impl} | - | - | - | - | - | {reason} |")
                continue
            median = medians[impl]
            ratio = (
                f"{medians['streaming'] / median:.1f}x faster"
                if "streaming" in medians and impl == "epochplan"
                else "1.0x"
                if impl == "streaming"
                else "-"
            )
            peak = result["peak"]
            print(
                f"| {case.name} | {impl} | {median:.3f} | {min(result['times']):.3f} | "
                f"{ratio} | {statistics.median(result['cpus']):.3f} | {peak / GIB:.2f} GiB | "
                f"{peak / result['nbytes']:.2f}x |"
            )


if __name__ == "__main__":
    main()
