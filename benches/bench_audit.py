"""The exactly-once audit's speed: ids certified per second.

Writes the consumption logs of one epoch of a plan of N samples dealt to W
ranks (one record per rank per step, as ``ConsumptionLog`` writes them),
then times ``epochplan.audit.audit`` over them (placement check, duplicate
bitmap and missing scan included), and ``EpochPlan.locate`` over N ids.

    python benches/bench_audit.py --num-samples 100000000 --world-size 8
"""

from __future__ import annotations

import argparse
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

import epochplan as ep
from epochplan.audit import ConsumptionLog, audit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=10**7)
    parser.add_argument("--global-batch-size", type=int, default=4096)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--dir", default=None, help="where the logs go (default: a temp dir)")
    args = parser.parse_args()
    n, g, w = args.num_samples, args.global_batch_size, args.world_size
    root = Path(args.dir or tempfile.mkdtemp(prefix="epochplan-audit-"))
    plan = ep.EpochPlan(n, g, seed=1)
    t0 = time.perf_counter()
    for rank in range(w):
        with ConsumptionLog(root, plan.state_dict(), rank=rank, world_size=w) as log:
            ids = plan.rank_indices(rank, w)
            share = -(-g // w)  # a rank's ids a step (the last step's may be fewer)
            for step in range(plan.num_steps):
                log.record(0, step, ids[step * share : (step + 1) * share])
            log.commit(plan.at_step(plan.num_steps).state_dict())
    written = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = audit(root)
    took = time.perf_counter() - t0
    assert report.ok and report.consumed == n, report.summary()
    t0 = time.perf_counter()
    plan.locate(np.arange(n), w, 8)
    located = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"N = {n:,}, G = {g}, W = {w}: logs written in {written:.2f} s")
    print(
        f"audit: {took:.2f} s, {n / took / 1e6:.1f} M ids/s (peak RSS of the process {peak:.0f} MB)"
    )
    print(f"locate of every id: {located:.2f} s, {n / located / 1e6:.1f} M ids/s")
    if args.dir is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
