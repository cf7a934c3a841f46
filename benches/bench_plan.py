"""One rank's share of a large epoch plan: time and peak memory.

    python benches/bench_plan.py [--num-samples 1000000000] [--world-size 8]

Each case runs in a fresh subprocess so its peak RSS is its own. The output
itself (N / W int64 ids) is part of the peak; nothing of size N is allocated.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = """
import json, resource, time
import epochplan as ep
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
plan = ep.EpochPlan({n}, {g}, seed=0, epoch=0)
t = time.perf_counter()
ids = plan.rank_indices({rank}, {w})
dt = time.perf_counter() - t
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({{"seconds": dt, "peak_mb": peak / 1024, "delta_mb": (peak - base) / 1024,
                  "output_mb": ids.nbytes / 2**20, "len": len(ids)}}))
"""


def run(n: int, g: int, w: int, rank: int) -> dict[str, float]:
    code = CASE.format(n=n, g=g, w=w, rank=rank)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--num-samples", type=int, default=10**9)
    parser.add_argument("--global-batch-size", type=int, default=4096)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    runs = [
        run(args.num_samples, args.global_batch_size, args.world_size, 3)
        for _ in range(args.repeats)
    ]
    best = sorted(runs, key=lambda r: r["seconds"])[len(runs) // 2]
    print("| case | median time (s) | peak RSS (MB) | output (MB) |")
    print("|---|---:|---:|---:|")
    print(
        f"| EpochPlan(N={args.num_samples:.0e}, G={args.global_batch_size})"
        f".rank_indices(3, {args.world_size}) | {best['seconds']:.2f} | {best['peak_mb']:.0f} "
        f"| {best['output_mb']:.0f} |"
    )


if __name__ == "__main__":
    main()
