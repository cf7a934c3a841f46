"""torch's DistributedSampler against epochplan.torch.DistributedSampler (shuffle=True).

    python benches/bench_torch_sampler.py [--sizes 10000000 100000000] [--world-size 8]

For each N, one rank (rank 0 of W) builds the sampler, takes its first index
(time to first index, construction included), then iterates its whole share
(one epoch of indices). Each case runs in a fresh subprocess; peak memory is
the process's peak RSS minus its RSS after the imports. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

CASE = """
import json, resource, time
import torch
import torch.utils.data.distributed as torch_dist
import epochplan.torch as et
cls = {{"torch": torch_dist.DistributedSampler, "epochplan": et.DistributedSampler}}[{impl!r}]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
sampler = cls(range({n}), num_replicas={w}, rank=0, shuffle=True, seed=0)
sampler.set_epoch(1)
it = iter(sampler)
first = next(it)
t_first = time.perf_counter() - t0
count = 1
for _ in it:
    count += 1
t_epoch = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
assert count == len(sampler)
mb = (peak - base) / 1024
print(json.dumps({{"first": t_first, "epoch": t_epoch, "mb": mb, "count": count}}))
"""


def run(impl: str, n: int, w: int) -> dict[str, float]:
    code = CASE.format(impl=impl, n=n, w=w)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**7, 10**8])
    parser.add_argument("--world-size", type=int, default=8)
    args = parser.parse_args()
    print(
        "| N | W | sampler | first index (s) | one epoch (s) | peak memory (MB) |\n"
        "|---|---|---|---:|---:|---:|"
    )
    for n in args.sizes:
        t = run("torch", n, args.world_size)
        e = run("epochplan", n, args.world_size)
        assert t["count"] == e["count"]
        for name, r in (("torch", t), ("epochplan", e)):
            print(
                f"| {n:.0e} | {args.world_size} | {name} | {r['first']:.4f} | {r['epoch']:.2f} "
                f"| {r['mb']:.0f} |"
            )
        print(
            f"| {n:.0e} | {args.world_size} | **torch / epochplan** "
            f"| **{t['first'] / e['first']:.0f}x** | **{t['epoch'] / e['epoch']:.1f}x** "
            f"| **{t['mb'] / max(e['mb'], 1):.0f}x** |",
            flush=True,
        )


if __name__ == "__main__":
    main()
