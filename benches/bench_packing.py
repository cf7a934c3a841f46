"""Benchmark: packed micro-batches side by side, epochplan against axolotl's
``MultipackBatchSampler`` and verl's per-step dealing.

    pip install '.[bench]' && pip install --no-deps axolotl==0.19.0 verl==0.9.1 && pip install numba
    python benches/bench_packing.py                 # N = 10^7, W = 8, cap 16384
    python benches/bench_packing.py --tiny --json out.json
    python benches/bench_packing.py --results packing.json  # rows and context

Lengths: ``--n`` int32 lognormal lengths (median 819 = 16384 / 20, sigma 1,
no upper clip: about 0.13% are longer than the cap), the same array for
every side. Each side packs the whole epoch for W = 8 ranks under a cap of
16384 tokens per micro-batch:

- epochplan: ``ElasticBatchSampler(PlanSpec(N, G=1024, tokens=Tokens(lengths,
  oversize="truncate", packing=P)), None, max_tokens=16384)``: the samples over the cap are
  found at construction and cut to it; every rank's micro-batches of every step
  (``plan.micro_batches(rank, 8, max_tokens=16384)``), once for each packing P
  ("sorted", the default, and "first_fit").
- axolotl 0.19.0: ``MultipackBatchSampler`` (its file loaded by path, with
  stand-ins for its logger and its ``reduce_and_broadcast``) on each rank's
  ``DistributedSampler`` shard (shuffled, seed 0), ``batch_size=1`` bin per
  batch, ``bin_size=200`` (its default), ``group_size=100_000``, one process;
  the lengths as given. Its trainer truncates every rank to the smallest
  rank's batch count (``gather_len_batches``): the samples past it are
  dropped, and counted here.
- verl 0.9.1 (``seqlen_balancing.py`` by path, as ``bench_tokens.py`` loads
  it): per step, the driver's ``get_seqlen_balanced_partitions(lengths, 8,
  equal_size=True)`` over the same global batches as epochplan's, then each
  rank's ``rearrange_micro_batches(max_token_len=16384)``; the first
  ``--verl-steps`` steps (its dealing takes seconds a step at this size).

Reported: packing efficiency (real tokens over micro-batches x cap; fillers
and padding are waste), samples dropped, micro-batches over the cap,
whether every rank has the same number of micro-batches in every step, and
the time to pack. Then first fit's efficiency and the bound of equal steps
for G in {1024, 4096, 16384, 65536} on the same lengths (``steps``). Then, at
``--w-n`` samples, whether the global batches
(each step's set of samples, over all ranks) are identical for W in {1, 2,
3, 7, 8, 64}; then one rank's epoch (rank 3 of 8) at ``--big`` samples.
``--results FILE`` writes each part's rows and the run's context (machine,
command, load) for ``benches/render_performance.py``.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import json
import os
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np

from epochplan.bench.results import Tables

CAP = 16384
G = 1024
WORLDS = (1, 2, 3, 7, 8, 64)
STEP_SIZES = (1024, 4096, 16384, 65536)
AXOLOTL_PIN = "axolotl==0.19.0"


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def lognormal_lengths(n: int, seed: int = 0) -> np.ndarray[Any, Any]:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(np.log(CAP / 20), 1.0, n)
    return np.maximum(np.rint(values), 1).astype(np.int32)


def load_axolotl() -> tuple[Any, str]:
    """axolotl's ``utils/samplers/multipack.py`` loaded by path (its package
    ``__init__`` and dependencies stay out), or None and the reason."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        info = f"axolotl {version('axolotl')}"
    except PackageNotFoundError:
        return None, f"axolotl is not installed (pip install --no-deps {AXOLOTL_PIN})"
    if importlib.util.find_spec("numba") is None:
        return None, f"{info} needs numba (pip install numba)"
    spec = importlib.machinery.PathFinder.find_spec("axolotl")
    if spec is None or not spec.submodule_search_locations:
        return None, "axolotl is installed but its package directory was not found"
    path = Path(next(iter(spec.submodule_search_locations))) / "utils/samplers/multipack.py"
    names = ("axolotl", "axolotl.utils", "axolotl.utils.distributed", "axolotl.utils.logging")
    stubs = {name: types.ModuleType(name) for name in names}
    # One process: the "collective" returns this rank's own value.
    stubs["axolotl.utils.distributed"].reduce_and_broadcast = (  # type: ignore[attr-defined]
        lambda fn, reduce: reduce([fn()])
    )
    import logging

    stubs["axolotl.utils.logging"].get_logger = logging.getLogger  # type: ignore[attr-defined]
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peer_files import load_with_stubs

    module = load_with_stubs(path, "_axolotl_multipack", stubs)
    return module, info


def load_verl() -> tuple[Any, str]:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from peer_files import load_verl as load

    return load()  # type: ignore[no-any-return]


def ours_epoch(
    lengths: np.ndarray[Any, Any],
    w: int,
    ranks: range | None = None,
    packing: str = "sorted",
    global_batch_size: int = G,
) -> dict[str, Any]:
    """epochplan's micro-batches of every rank (or ``ranks``) for one epoch."""
    from epochplan import PlanSpec, Tokens
    from epochplan.torch import ElasticBatchSampler

    start = time.perf_counter()
    tokens = Tokens(lengths, oversize="truncate", packing=packing)
    spec = PlanSpec(len(lengths), global_batch_size, tokens=tokens)
    sampler = ElasticBatchSampler(spec, None, max_tokens=CAP, rank=0, num_replicas=w)
    plan, report = sampler.plan, sampler.oversize_report
    built = time.perf_counter() - start
    cut = np.minimum(lengths, CAP)
    counts: list[list[int]] = []
    real_tokens = micro = over = 0
    steps: list[list[np.ndarray[Any, Any]]] = [[] for _ in range(plan.num_steps)]
    for rank in ranks if ranks is not None else range(w):
        per_step = []
        for step, batches in enumerate(plan.micro_batches(rank, w, max_tokens=CAP)):
            per_step.append(len(batches))
            for ids, weights in batches:
                micro += 1
                tokens = cut[ids]
                over += int(tokens.sum() > CAP)
                real = ids[weights > 0]
                real_tokens += int(cut[real].sum())
                steps[step].append(real)
        counts.append(per_step)
    elapsed = time.perf_counter() - start
    seen = np.concatenate([np.concatenate(s) for s in steps if s]) if plan.num_steps else []
    # The most any packer can fill while keeping these steps and giving every
    # rank the same count: a step of T tokens needs ceil(T / cap) rows, and
    # every rank takes the count of the rank that needs most.
    step_totals = [int(cut[np.concatenate(s)].sum()) for s in steps if s]
    least_rows = sum(ceil_div(ceil_div(t, CAP), w) * w for t in step_totals)
    return {
        "seconds": elapsed,
        "construction_seconds": built,
        "efficiency": real_tokens / (micro * CAP),
        "step_bound": sum(step_totals) / (least_rows * CAP) if least_rows else 1.0,
        "micro_batches": micro,
        "dropped": len(lengths) - len(np.unique(seen)),
        "repeated": len(seen) - len(np.unique(seen)),
        "truncated": report.count if report is not None else 0,
        "over_cap": over,
        "equal_counts": all(c == counts[0] for c in counts),
        "global_batches": [np.sort(np.concatenate(s)) for s in steps],
    }


def axolotl_epoch(
    axolotl: Any, lengths: np.ndarray[Any, Any], w: int, ranks: range | None = None
) -> dict[str, Any]:
    """axolotl's bins of every rank (or ``ranks``), each on its shard."""
    from torch.utils.data import DistributedSampler

    os.environ["WORLD_SIZE"] = str(w)
    per_rank, seconds = [], []
    for rank in ranks if ranks is not None else range(w):
        shard = DistributedSampler(range(len(lengths)), num_replicas=w, rank=rank, seed=0)
        start = time.perf_counter()
        sampler = axolotl.MultipackBatchSampler(
            shard, batch_size=1, batch_max_len=CAP, lengths=lengths, bin_size=200,
            group_size=100_000, num_processes=1, drop_last=True,
        )  # fmt: skip
        batches = sampler.generate_batches(set_stats=True)
        seconds.append(time.perf_counter() - start)
        per_rank.append([[int(i) for b in batch for i in b] for batch in batches])
    shortest = min(len(b) for b in per_rank)
    trained = [b[:shortest] for b in per_rank]  # its trainer's truncation to the minimum
    flat = [i for rank in trained for batch in rank for i in batch]
    bins = [batch for rank in trained for batch in rank]
    real = int(lengths[flat].sum()) if flat else 0
    all_ranks = ranks is None
    return {
        "seconds": sum(seconds),
        "seconds_per_rank": max(seconds),
        "efficiency": real / (len(bins) * CAP) if bins else 0.0,
        "micro_batches": len(bins),
        "batches_per_rank": (shortest, max(len(b) for b in per_rank)),
        "dropped": len(lengths) - len(set(flat)) if all_ranks else None,
        "repeated": len(flat) - len(set(flat)),
        "over_cap": sum(int(lengths[b].sum() > CAP) for b in bins),
        "global_batches": [
            np.sort(np.array([i for rank in trained for i in rank[t]], dtype=np.int64))
            for t in range(shortest)
        ],
    }


def verl_steps(verl: Any, lengths: np.ndarray[Any, Any], w: int, num_steps: int) -> dict[str, Any]:
    """verl's balance and micro-batches of epochplan's first steps' global batches."""
    import torch

    import epochplan as ep

    plan = ep.EpochPlan(len(lengths), G, tokens=ep.Tokens(lengths))
    real = micro = over = unequal = 0
    start = time.perf_counter()
    for step in range(min(num_steps, plan.num_steps)):
        ids = plan.step_indices(step, 0, 1)
        seq = lengths[ids].tolist()
        parts = verl.get_seqlen_balanced_partitions(seq, w, equal_size=True)
        counts = []
        for part in parts:
            share = [seq[i] for i in part]
            offsets = torch.tensor(np.concatenate([[0], np.cumsum(share)]))
            values = torch.zeros(int(offsets[-1]), dtype=torch.uint8)
            batch = {"input_ids": torch.nested.nested_tensor_from_jagged(values, offsets)}
            _, cut = verl.rearrange_micro_batches(batch, max_token_len=CAP)
            counts.append(len(cut))
            for mb in cut:
                tokens = sum(share[i] for i in mb)
                micro += 1
                over += int(tokens > CAP)
                real += tokens
        unequal += int(len(set(counts)) > 1)
    steps = min(num_steps, plan.num_steps)
    return {
        "steps": steps,
        "seconds_per_step": (time.perf_counter() - start) / max(steps, 1),
        "efficiency": real / (micro * CAP) if micro else 0.0,
        "micro_batches": micro,
        "over_cap": over,
        "unequal_steps": unequal,
    }


def same_batches(a: list[np.ndarray[Any, Any]], b: list[np.ndarray[Any, Any]]) -> int:
    """How many steps hold the same set of samples in ``a`` and ``b``."""
    return sum(int(np.array_equal(x, y)) for x, y in zip(a, b, strict=False))


def one_rank_seconds(
    lengths: np.ndarray[Any, Any], packing: str, global_batch_size: int = G
) -> tuple[float, float]:
    """epochplan's construction (with the oversize scan) and rank 3 of 8's
    whole epoch of micro-batches, nothing else done with them."""
    from epochplan import PlanSpec, Tokens
    from epochplan.torch import ElasticBatchSampler

    start = time.perf_counter()
    spec = PlanSpec(len(lengths), global_batch_size, tokens=Tokens(lengths, packing=packing))
    sampler = ElasticBatchSampler(spec, None, max_tokens=CAP, rank=3, num_replicas=8)
    built = time.perf_counter() - start
    for _ in sampler.plan.micro_batches(3, 8, max_tokens=CAP):
        pass
    return built, time.perf_counter() - start


def megatron_blend_counts(weights: list[float], size: int) -> list[int]:
    """Each dataset's samples in a blend of ``size`` by megatron-core's rule
    (``helpers.cpp``, ``build_blending_indices``): sample ``i`` goes to the
    dataset with the largest ``weights[d] * (i + 1) - current[d]``, the
    first on ties; weights normalised to sum to 1."""
    w = np.asarray(weights, dtype=np.float64) / sum(weights)
    current = np.zeros(len(w), dtype=np.int64)
    for i in range(size):
        current[int(np.argmax(w * (i + 1) - current))] += 1
    return current.tolist()


def shown_counts(seen: list[np.ndarray[Any, Any]], sizes: list[int]) -> dict[str, int]:
    """Samples lost (shown fewer than floor(c / n) times, c the source's
    samples shown) and repeated (more than ceil(c / n)), over the sources."""
    lost = repeated = 0
    for ids, n in zip(seen, sizes, strict=True):
        counts = np.bincount(ids, minlength=n)
        c = int(counts.sum())
        lost += int((counts < c // n).sum())
        repeated += int((counts > -(-c // n)).sum())
    return {"lost": lost, "repeated": repeated}


def schedule_part(sizes: list[int], epoch_len: int) -> dict[str, Any]:
    """Three phases (1:1, then 2:1, then 1:3, two epochs each) over two
    sources: epochplan's phased Mixture against a rebuild of Megatron's blend
    at each weight change (each dataset's sequence restarts from its first
    sample: the same seed, a new blend)."""
    import epochplan as ep

    weights = [[1, 1], [2, 1], [1, 3]]
    mix = ep.Mixture(
        sizes, weights=weights[0], num_samples=epoch_len, seed=7,
        phases=[(2, weights[1]), (4, weights[2])],
    )  # fmt: skip
    ours: list[list[np.ndarray[Any, Any]]] = [[], []]
    offsets = [0, sizes[0]]
    for e in range(6):
        epoch = mix.epoch(e)
        ids, src = np.asarray(epoch), epoch.sources(np.arange(len(epoch)))
        for k in range(2):
            ours[k].append(ids[src == k] - offsets[k])
    # Megatron: per phase, a new blend of 2 epochs' samples; each dataset's
    # samples are its own shuffled sequence from the start (keyed passes, as
    # a dataset's index of several epochs is).
    theirs: list[list[np.ndarray[Any, Any]]] = [[], []]
    for w in weights:
        counts = megatron_blend_counts(w, 2 * epoch_len)
        for k in range(2):
            sequence = np.asarray(ep.Mixture([sizes[k]], seed=7).epoch(0))
            passes = -(-counts[k] // sizes[k])
            run = (
                np.concatenate(
                    [np.asarray(ep.Mixture([sizes[k]], seed=7).epoch(p)) for p in range(passes)]
                )
                if passes > 1
                else sequence
            )
            theirs[k].append(run[: counts[k]])
    flat_ours = [np.concatenate(x) for x in ours]
    flat_theirs = [np.concatenate(x) for x in theirs]
    return {
        "sizes": sizes,
        "epoch_len": epoch_len,
        "shown": [len(x) for x in flat_ours],
        "epochplan": shown_counts(flat_ours, sizes),
        "megatron_rebuild": shown_counts(flat_theirs, sizes),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=float, default=1e7)
    parser.add_argument("--w-n", type=float, default=1e6, help="N of the W comparison")
    parser.add_argument("--big", type=float, default=1e8, help="N of one rank's epoch")
    parser.add_argument("--verl-steps", type=int, default=200)
    parser.add_argument(
        "--part",
        choices=("all", "packing", "steps", "worlds", "one-rank", "schedule"),
        default="all",
    )
    parser.add_argument("--tiny", action="store_true", help="small sizes (the test's)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--results", type=Path, help="write each part's rows and the run's context (JSON)"
    )
    opts = parser.parse_args()
    results = Tables(opts.results, __file__, sys.argv[1:])
    if opts.tiny:
        opts.n, opts.w_n, opts.big, opts.verl_steps = 2e5, 5e4, 4e5, 5
    n, w_n, big = int(opts.n), int(opts.w_n), int(opts.big)
    every = {"packing", "steps", "worlds", "one-rank", "schedule"}
    parts = {opts.part} if opts.part != "all" else every
    peers = bool(parts - {"schedule", "steps"})  # those two need neither
    axolotl, axolotl_info = load_axolotl() if peers else (None, "not needed")
    verl, verl_info = load_verl() if peers else (None, "not needed")
    report: dict[str, Any] = {"n": n, "cap": CAP, "G": G, "axolotl": axolotl_info}
    report["verl"] = verl_info
    report["load_average_start"] = os.getloadavg()
    if axolotl is not None:  # numba compiles on first use: not timed
        axolotl_epoch(axolotl, lognormal_lengths(1000, 9), 2)
    if "packing" in parts:
        packing_part(axolotl, verl, n, opts.verl_steps, report)
    if "steps" in parts:
        report["steps"] = steps_part(n, tiny=opts.tiny)
    if "worlds" in parts:
        worlds_part(axolotl, w_n, report)
    if "one-rank" in parts:
        huge = np.minimum(lognormal_lengths(big, 2), CAP)
        built, seconds = one_rank_seconds(huge, "sorted")
        report["one_rank"] = {"n": big, "epochplan_seconds": seconds, "construction": built}
        report["one_rank"]["first_fit_seconds"] = one_rank_seconds(huge, "first_fit")[1]
        largest = STEP_SIZES[-1]
        report["one_rank"]["largest_global_batch_size"] = largest
        report["one_rank"]["first_fit_largest_seconds"] = one_rank_seconds(
            huge, "first_fit", largest
        )[1]
        if axolotl is not None:
            theirs = axolotl_epoch(axolotl, huge, 8, ranks=range(3, 4))
            report["one_rank"]["axolotl_seconds"] = theirs["seconds"]
        print("one rank", report["one_rank"], flush=True)
    if "schedule" in parts:
        scale = 10 if opts.tiny else 1
        report["schedule"] = schedule_part([10**6 // scale, 10**6 // scale], 500_000 // scale)
        print("schedule", report["schedule"], flush=True)
    report["load_average_end"] = os.getloadavg()
    if opts.json is not None:
        opts.json.write_text(json.dumps(report, indent=1, default=str))
    results.parameters = {
        "n": n, "w_n": w_n, "big": big, "cap": CAP, "global_batch_size": G,
        "verl_steps": opts.verl_steps, "axolotl": axolotl_info, "verl": verl_info,
    }  # fmt: skip
    add_tables(report, results)
    results.save()


def add_tables(report: dict[str, Any], results: Tables) -> None:
    """The rows of each part the run measured (its report's), as tables."""
    if "epochplan" in report:
        sides = (
            ("epochplan", report["epochplan"], ""),
            ("epochplan_first_fit", report["epochplan_first_fit"], ""),
            ("epochplan_first_fit_large", report["epochplan_first_fit_large"], ""),
            ("axolotl", report.get("axolotl_run"), report["axolotl"]),
            ("verl", report.get("verl_run"), report["verl"]),
        )
        for side, run, missing in sides:
            row = {"side": side, **run} if run is not None else {"side": side, "skipped": missing}
            results.add("packing", {"over_cap_samples": report["over_cap_samples"], **row})
    if "worlds" in report:
        worlds = dict(report["worlds"])
        w_n = worlds.pop("n")
        uncut = report.get("axolotl_raw_over_cap")
        for w, row in worlds.items():
            out: dict[str, Any] = {"n": w_n, "W": int(w)}
            out["epochplan_same"], out["epochplan_steps"], out["reference_steps"] = row["epochplan"]
            if "axolotl" in row:
                same, steps, reference = row["axolotl"]
                out.update(axolotl_same=same, axolotl_steps=steps, axolotl_reference=reference)
                out["axolotl_dropped"] = row["axolotl_dropped"]
            results.add("worlds", out)
        if uncut is not None:
            results.add("uncut", {"n": w_n, "axolotl_bins_over_cap": uncut[0],
                                  "samples_over_cap": uncut[1]})  # fmt: skip
    for row in report.get("steps", []):
        results.add("steps", row)
    if "one_rank" in report:
        results.add("one_rank", dict(report["one_rank"]))
    if "schedule" in report:
        schedule = report["schedule"]
        for side in ("epochplan", "megatron_rebuild"):
            results.add(
                "schedule",
                {"side": side, "sizes": schedule["sizes"], "epoch_len": schedule["epoch_len"],
                 **schedule[side]},
            )  # fmt: skip


def packing_part(
    axolotl: Any, verl: Any, n: int, num_verl_steps: int, report: dict[str, Any]
) -> None:
    lengths = lognormal_lengths(n)
    report["over_cap_samples"] = int((lengths > CAP).sum())
    print(f"N={n:,} W=8 cap={CAP}: {report['over_cap_samples']} samples over the cap")
    sides = (
        ("epochplan", "sorted", G),
        ("epochplan_first_fit", "first_fit", G),
        ("epochplan_first_fit_large", "first_fit", STEP_SIZES[-1]),
    )
    for key, packing, g in sides:
        mine = ours_epoch(lengths, 8, packing=packing, global_batch_size=g)
        mine["global_batch_size"] = g
        mine.pop("global_batches")
        report[key] = mine
        print(key, mine, flush=True)
    # The others take the lengths cut to the cap (verl asserts on a longer
    # one; axolotl packs it alone in a bin over the cap, counted in worlds).
    cut = np.minimum(lengths, CAP)
    if axolotl is not None:
        theirs = axolotl_epoch(axolotl, cut, 8)
        theirs.pop("global_batches")
        report["axolotl_run"] = theirs
        print("axolotl", theirs, flush=True)
    if verl is not None:
        report["verl_run"] = verl_steps(verl, cut, 8, num_verl_steps)
        print("verl", report["verl_run"], flush=True)


def steps_part(n: int, tiny: bool) -> list[dict[str, Any]]:
    """First fit's efficiency and the bound of equal steps, by global batch
    size: a step of more samples ends fewer rows partly filled per token."""
    lengths = np.minimum(lognormal_lengths(n), CAP)
    rows = []
    for g in STEP_SIZES[:2] if tiny else STEP_SIZES:
        mine = ours_epoch(lengths, 8, packing="first_fit", global_batch_size=g)
        steps = len(mine["global_batches"])
        row = {"n": n, "W": 8, "global_batch_size": g, "steps": steps}
        row["tokens_per_step"] = int(lengths.sum()) / steps
        row.update({k: mine[k] for k in ("efficiency", "step_bound", "micro_batches")})
        row.update({k: mine[k] for k in ("dropped", "repeated", "over_cap", "equal_counts")})
        rows.append(row)
        print("steps", row, flush=True)
    return rows


def worlds_part(axolotl: Any, w_n: int, report: dict[str, Any]) -> None:
    """The same global batches for every W? (lengths cut to the cap)"""
    raw_small = lognormal_lengths(w_n, 1)
    if axolotl is not None:
        raw = axolotl_epoch(axolotl, raw_small, 8)
        report["axolotl_raw_over_cap"] = [raw["over_cap"], int((raw_small > CAP).sum())]
        print("axolotl on uncut lengths: bins over the cap", report["axolotl_raw_over_cap"])
    small = np.minimum(raw_small, CAP)
    worlds: dict[str, Any] = {}
    ref_ours = ref_theirs = None
    for w in WORLDS:
        row: dict[str, Any] = {}
        ours = ours_epoch(small, w)["global_batches"]
        ref_ours = ours if ref_ours is None else ref_ours
        row["epochplan"] = [same_batches(ours, ref_ours), len(ours), len(ref_ours)]
        if axolotl is not None:
            theirs = axolotl_epoch(axolotl, small, w)
            batches = theirs["global_batches"]
            ref_theirs = batches if ref_theirs is None else ref_theirs
            row["axolotl"] = [same_batches(batches, ref_theirs), len(batches), len(ref_theirs)]
            row["axolotl_dropped"] = theirs["dropped"]
        worlds[str(w)] = row
        print(f"W={w}", row, flush=True)
    report["worlds"] = {"n": w_n, **worlds}


if __name__ == "__main__":
    main()
