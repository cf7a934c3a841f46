"""One rank's share of a plan over an index space, against a plain plan and torch.

    python benches/bench_spaces.py [--sizes 10000000 100000000 1000000000]
        [--world-size 8] [--global-batch-size 4096] [--repeats 3] [--json FILE]
        [--results FILE]

For a store of N samples, every space selects 0.9 N of them: ranges
``[0, 0.4 N) + [0.5 N, N)``, a mask (``i % 10 != 3``), the same ids as an
int64 index array, part 0 of ``random_split(N, [0.9, 0.1])``, and a mixture
of three concatenated sources of 0.6 N, 0.3 N and 0.1 N samples with quotas
0.5 N, 0.3 N and 0.1 N. Each is timed as ``EpochPlan(space, G).rank_indices(0,
W)`` against the plain ``EpochPlan(0.9 N, G)`` of the same number of
samples. The peer is what torch users write for a distributed run over part
of a store: ``DistributedSampler(Subset(range(N), ids), num_replicas=W,
rank=0)`` iterated fully, each index mapped through the subset's ids
(``SubsetRandomSampler`` has no distributed form); the ids are an int64
numpy array, the lightest form torch accepts. Streaming's way to mix sources
is the epoch of a ``StreamingDataset`` over three streams with ``choose``
set to the quotas, in its defaults (``random`` batching, balanced sampling,
py1e, the relaxed partition, one canonical node; shards of 10,000 samples):
``generate_work_random_batching``, which resamples the streams, partitions
and shuffles the whole epoch on every node, then rank 0's part of it (its
files are loaded by path: ``epochplan.bench.streaming_peer``).

Every case runs in fresh processes (``--repeats`` of them; the median is
reported), each taking the best of ``--calls`` calls after the space is
built; the peers, which take seconds, make one call a process.
Memory is the growth of the process's peak RSS during the calls beyond the
output itself (the space is built before). At 10^9 only ranges and random
split parts and the mixture (of sizes) run: the other spaces need O(N)
arrays to be built, torch's sampler a list of N Python ints and Streaming's
epoch several int64 arrays of N (a skip line says so). Prints a Markdown
table; ``--results FILE`` writes its rows and the run's context (machine,
command, load) for ``benches/render_performance.py``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from epochplan.bench.results import Tables

CASE = """
import json, resource, time
import numpy as np
import epochplan as ep
kind, n, g, w, calls = {kind!r}, {n}, {g}, {w}, {calls}
sel = n - n // 10  # 0.9 N, exactly the count of every space below
if kind == "plain":
    space = sel
elif kind == "ranges":
    space = ep.Selection.from_ranges([(0, 4 * n // 10), (5 * n // 10, n)], n)
    sel = len(space)
elif kind == "mask" or kind == "indices":
    mask = np.ones(n, dtype=bool)
    mask[3::10] = False
    space = ep.Selection.from_mask(mask) if kind == "mask" else ep.Selection.from_indices(
        np.flatnonzero(mask).astype(np.int64), n)
    del mask
    sel = len(space)
elif kind == "split":
    space = ep.random_split(n, [0.9, 0.1], seed=1)[0]
    sel = len(space)
elif kind == "mixture" or kind == "streaming":
    sizes = [6 * n // 10, 3 * n // 10, n - 9 * n // 10]
    quotas = [5 * n // 10, 3 * n // 10, n - 9 * n // 10]
    sel = sum(quotas)
    if kind == "mixture":
        space = ep.Mixture(sizes, quotas=quotas, seed=1)
    else:
        from epochplan.bench.streaming_peer import streaming_mixture_epoch
        epoch = streaming_mixture_epoch(sizes, quotas, ranks=w, batch_size=g // w)
if kind == "plain":
    plan = ep.EpochPlan(sel, g, seed=1)
elif kind == "torch":
    import torch.utils.data as tud
    ids = np.flatnonzero(np.arange(n) % 10 != 3).astype(np.int64)
    sel = len(ids)
elif kind != "streaming":
    plan = ep.EpochPlan(space, g, seed=1)
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
best, out = float("inf"), None
for _ in range(calls):
    out = None
    t = time.perf_counter()
    if kind == "torch":
        subset = tud.Subset(range(n), ids)
        sampler = tud.DistributedSampler(subset, num_replicas=w, rank=0, shuffle=True, seed=1)
        out = [subset.indices[i] for i in sampler]
    elif kind == "streaming":
        # Every node builds the whole epoch; rank 0 keeps its part.
        out = epoch()[0, 0].ravel()
        out = out[out != -1]
    else:
        out = plan.rank_indices(0, w)
    best = min(best, time.perf_counter() - t)
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
output_mb = len(out) * 8 / 2**20
print(json.dumps({{"seconds": best, "len": len(out), "selected": sel, "output_mb": output_mb,
                  "extra_mb": (peak - base) / 1024 - output_mb}}))
"""

SPACES = ["plain", "ranges", "mask", "indices", "split", "mixture", "torch", "streaming"]
PEERS = {"torch", "streaming"}
# Spaces that need no O(N) array to be built.
LARGE_OK = {"plain", "ranges", "split", "mixture"}


def run(kind: str, n: int, g: int, w: int, calls: int) -> dict[str, float]:
    calls = 1 if kind in PEERS else calls
    code = CASE.format(kind=kind, n=n, g=g, w=w, calls=calls)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def median_run(kind: str, n: int, g: int, w: int, repeats: int, calls: int) -> dict[str, float]:
    runs = [run(kind, n, g, w, calls) for _ in range(repeats)]
    runs.sort(key=lambda r: r["seconds"])
    row = dict(runs[len(runs) // 2])
    row["extra_mb"] = max(r["extra_mb"] for r in runs)
    return row


def row_line(n: int, kind: str, r: dict[str, Any]) -> str:
    ratio = f"{r['ratio']:.2f}x" if "ratio" in r else "-"
    return (
        f"| {n:.0e} | {kind} | {r['selected']:.2e} | {r['seconds']:.3g} | {ratio} "
        f"| {r['output_mb']:.0f} | {max(r['extra_mb'], 0):.0f} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10**7, 10**8, 10**9])
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--global-batch-size", type=int, default=4096)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=3, help="calls per process (the best is kept)")
    parser.add_argument("--spaces", nargs="+", default=SPACES, choices=SPACES)
    parser.add_argument(
        "--large-n",
        type=int,
        default=10**9,
        help="from this N on, run only the spaces built without O(N) arrays",
    )
    parser.add_argument("--json", help="also write the rows to this file")
    parser.add_argument(
        "--results", type=Path, help="write the table's rows and the run's context (JSON)"
    )
    args = parser.parse_args()
    g, w = args.global_batch_size, args.world_size
    results = Tables(args.results, __file__, sys.argv[1:])
    results.parameters = {
        "world_size": w,
        "global_batch_size": g,
        "repeats": args.repeats,
        "calls": args.calls,
        "large_n": args.large_n,
    }
    print(
        f"One rank's share (rank 0 of {w}, G = {g}), median of {args.repeats} processes, "
        f"best of {args.calls} calls each\n\n"
        "| N | space | samples | time (s) | ratio to plain | output (MB) "
        "| peak RSS growth beyond output (MB) |\n"
        "|---|---|---:|---:|---:|---:|---:|",
        flush=True,
    )
    rows: list[dict[str, Any]] = []
    kinds = ["plain", *(k for k in args.spaces if k != "plain")]
    for n in args.sizes:
        plain: dict[str, Any] | None = None
        skipped = []
        for kind in kinds:
            if n >= args.large_n and kind not in LARGE_OK:
                skipped.append(kind)
                continue
            r: dict[str, Any] = median_run(kind, n, g, w, args.repeats, args.calls)
            if kind == "plain":
                plain = r
            else:
                assert plain is not None
                # torch pads every rank to ceil(n / W) and Streaming's partition
                # rounds to its batches; a plan deals steps.
                slack = g if kind in PEERS else 0
                assert abs(r["len"] - plain["len"]) <= slack, (kind, r["len"], plain["len"])
                r["ratio"] = r["seconds"] / plain["seconds"]
            r.update(n=n, space=kind)
            rows.append(r)
            results.add("spaces", {"n": n, "space": kind, "ratio": None, **r})
            print(row_line(n, kind, r), flush=True)
        if skipped:
            why = (
                "building them takes O(N) arrays (N bytes to 8 N, N Python ints for torch, "
                "several arrays of 8 N bytes for Streaming)"
            )
            print(f"| {n:.0e} | skipped: {', '.join(skipped)} | | | | | {why} |", flush=True)
            results.add("spaces", {"n": n, "skipped": skipped, "reason": why})
    results.save()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"world_size": w, "global_batch_size": g, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
