"""One rank's epoch of token micro-batches: the in-memory plan reading a
memory-mapped lengths file by id, against a token plan file read in order.

An ``EpochPlan(..., tokens=Tokens(lengths))`` reads each step's G lengths by id: every
rank reads every length of the epoch once, scattered over the file. A token
plan written offline (``write_plan(out, PlanSpec(..., tokens=Tokens(lengths)),
W, max_tokens=...)``) stores each rank's
lengths beside its ids, in plan order, and one step table per epoch, so a
rank reads only its own files, front to back. Both are timed with the
lengths file's pages dropped from the page cache first
(``posix_fadvise(DONTNEED)``, as when the file sits on shared storage and a
rank has not read it yet) and again warm; the bytes each path reads are
counted from the files' sizes and the pages the ids touch. ``--results
FILE`` writes the rows and the run's context (machine, command, load) for
``benches/render_performance.py``.

    python benches/bench_token_files.py --sizes 1e6 1e7 --world-size 8
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import epochplan as ep
from epochplan.bench.results import Tables
from epochplan.planfile import write_plan
from epochplan.planfile.manifest import rank_file_name
from epochplan.torch import PlanSampler

PAGE = 4096


def drop_cache(path: Path) -> None:
    """Evicts the file's pages from the page cache (written back first)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def drop_dir(directory: Path) -> None:
    for f in directory.rglob("*"):
        if f.is_file():
            drop_cache(f)


def in_memory_epoch(lengths_path: Path, n: int, g: int, w: int, cap: int) -> tuple[float, int]:
    lengths = np.load(lengths_path, mmap_mode="r")
    start = time.perf_counter()
    plan = ep.EpochPlan(n, g, seed=1, tokens=ep.Tokens(lengths))
    count = 0
    for step in plan.micro_batches(0, w, max_tokens=cap):
        count += sum(len(ids) for ids, _ in step)
    return time.perf_counter() - start, count


def file_epoch(plan_dir: Path, w: int) -> tuple[float, int]:
    start = time.perf_counter()
    sampler = PlanSampler(plan_dir, num_replicas=w, rank=0)
    count = sum(int((np.asarray(mb.weights) > 0).sum()) for mb in sampler)
    return time.perf_counter() - start, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", type=float, default=[1e6, 1e7])
    parser.add_argument("--global-batch-size", type=int, default=1024)
    parser.add_argument("--world-size", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=16384)
    parser.add_argument("--dir", type=Path, default=None, help="where the files go (a disk)")
    parser.add_argument(
        "--results", type=Path, help="write the table's rows and the run's context (JSON)"
    )
    args = parser.parse_args()
    g, w, cap = args.global_batch_size, args.world_size, args.max_tokens
    results = Tables(args.results, __file__, sys.argv[1:])
    results.parameters = {"global_batch_size": g, "world_size": w, "max_tokens": cap}
    print(f"G={g} W={w} max_tokens={cap}; one rank's epoch; lengths int32, lognormal")
    print(
        f"{'N':>12} {'path':>10} {'cold s':>8} {'warm s':>8} "
        f"{'lengths bytes read by rank 0':>30} {'plan files bytes':>17}"
    )
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        root = Path(d)
        for size in args.sizes:
            n = int(size)
            rng = np.random.default_rng(0)
            lengths = np.clip(rng.lognormal(6.0, 1.0, n), 1, cap).astype(np.int32)
            lengths_path = root / f"lengths-{n}.npy"
            np.save(lengths_path, lengths)
            plan_dir = root / f"plan-{n}"
            mapped = np.load(lengths_path, mmap_mode="r")  # the manifest records the file
            spec = ep.PlanSpec(n, g, seed=1, tokens=ep.Tokens(mapped))
            write_plan(plan_dir, spec, w, max_tokens=cap)
            # Rank 0's files (its ids, lengths and step offsets) and the step table.
            stem = Path(rank_file_name(0, 0)).name.split(".")[0] + "."
            rank_bytes = sum(
                f.stat().st_size
                for f in plan_dir.rglob("*")
                if f.is_file() and (f.name.startswith(stem) or f.name.startswith("steps"))
            )
            # Every rank reads each step's G lengths by id: the pages they fall in.
            pages = len(np.unique(np.arange(n) * 4 // PAGE))
            drop_cache(lengths_path)
            cold, count = in_memory_epoch(lengths_path, n, g, w, cap)
            warm, _ = in_memory_epoch(lengths_path, n, g, w, cap)
            print(f"{n:>12} {'by id':>10} {cold:>8.3f} {warm:>8.3f} {pages * PAGE:>30} {'-':>17}")
            results.add(
                "paths",
                {"n": n, "path": "by id", "cold_s": cold, "warm_s": warm,
                 "lengths_bytes": pages * PAGE, "plan_bytes": None},
            )  # fmt: skip
            drop_dir(plan_dir)
            cold_f, count_f = file_epoch(plan_dir, w)
            warm_f, _ = file_epoch(plan_dir, w)
            assert count_f == count, (count_f, count)
            print(
                f"{n:>12} {'plan file':>10} {cold_f:>8.3f} {warm_f:>8.3f} {0:>30} {rank_bytes:>17}"
            )
            results.add(
                "paths",
                {"n": n, "path": "plan file", "cold_s": cold_f, "warm_s": warm_f,
                 "lengths_bytes": 0, "plan_bytes": rank_bytes},
            )  # fmt: skip
    results.save()


if __name__ == "__main__":
    main()
