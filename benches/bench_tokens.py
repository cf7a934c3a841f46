"""Benchmark: token plans' per-step dealing against verl's, and one rank's
whole epoch of micro-batches from memory-mapped lengths.

    python benches/bench_tokens.py                       # both parts
    python benches/bench_tokens.py --part dealing        # or --part epoch
    python benches/bench_tokens.py --tiny --json out.json  # the test's sizes
    python benches/bench_tokens.py --results tokens.json   # rows and context

``--results FILE`` writes the rows of every table printed and the run's
context (machine, command, load) for ``benches/render_performance.py``.

**Dealing** (``--part dealing``): for each length distribution, global batch
size G and world size W, the same steps' samples are dealt by both sides,
each side in its own fresh subprocess:

- epochplan: ``plan.step_micro_batches(step, rank, W, max_tokens=CAP)`` on an
  ``EpochPlan(..., tokens=Tokens(lengths))``. One call reads the step's lengths, balances
  the whole step over all W ranks and cuts that rank's micro-batches: it is
  what each rank of a trainer runs per step, with no collective. "per rank"
  is the median call; "all ranks" the sum of the W calls (one process doing
  every rank's work, each call redoing the step's balance).
- verl: what its trainer runs per step. The driver balances the step over
  the W data-parallel ranks with ``get_seqlen_balanced_partitions(lengths, W,
  equal_size=True)`` (its ``_balance_batch``; verl passes a workload
  ``24576 L + L^2`` there, nearly proportional to L at these lengths: the
  lengths are passed here, the cost epochplan balances); then each rank cuts
  its share with ``rearrange_micro_batches(batch, max_token_len=CAP)``. "per
  rank" is the balance plus the median rank's cut; "all ranks" the balance
  plus every rank's cut. Without a process group verl skips the all-reduce
  that makes the micro-batch counts equal: its counts are reported as they
  come, and the all-reduce (one more collective per step) is not timed.

verl is loaded from ``verl/utils/seqlen_balancing.py`` by file path, so its
package ``__init__`` and dependencies stay out: ``pip install --no-deps
verl==0.9.1`` (it needs torch). That file imports three verl names the two
functions timed here do not need for a single process: ``DataProto`` (used
by other functions), ``tensordict_utils.index_select_tensor_dict`` (slices
the batch's tensors by each micro-batch's indices; the stand-in returns the
indices, so the copy of tensors is not timed) and ``device.get_device_name``
(only used with a process group). Stand-ins for them are registered while
the file loads and removed after. The batch handed to
``rearrange_micro_batches`` is a jagged nested ``input_ids`` tensor, the
cheapest input it reads lengths from. W > G is shown for epochplan only
(verl asserts at least one sample per rank).

Reported per step (medians over ``--steps`` steps): times; the largest rank's
tokens over the mean; padding waste, the sum over micro-batches of (longest
sample x samples - tokens) over the real tokens (epochplan's zero-weight
fillers count as waste); the largest micro-batch in tokens against the cap;
micro-batches per rank, fewest and most.

**Epoch** (``--part epoch``): one rank (3 of W = 8) iterates
``plan.micro_batches(3, 8, max_tokens=CAP)`` over an ``np.memmap`` of int32
lengths, G = 1024, each case in a fresh subprocess: N = 10^6 for the whole
epoch; N = 10^9 (a 4 GB file written under ``--dir`` first, skipped with the
reason when the disk or memory is short) for ``--big-steps`` steps, the
epoch's time extrapolated from them, or the whole epoch with ``--big-full``
(then also a row after ``--big-steps``); and N = 10^9 from a cold page cache
for ``--cold-steps`` steps. Warm: the file is in the page cache (it was just
written). Cold: its pages are written back and dropped from the cache first
(``fsync``, ``posix_fadvise(DONTNEED)``) and the map is advised ``MADV_RANDOM``, so
every length read is one 4 KiB page read from disk: what a rank pays per
step when the lengths are not cached. The ``micro_batches`` call, which reads
every length once (the check for samples over the cap), is timed with the
iterator. Peak RSS is the child's ``ru_maxrss``;
it counts the file's pages mapped by the reads (one page per length read, or
a whole large folio when the kernel caches the file in those), which are
page cache, shared and reclaimable. The anonymous RSS (``RssAnon``) is the
memory the process itself holds.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from peer_files import find_verl, load_verl

from epochplan._system import available_memory
from epochplan.bench.results import Tables

GIB = 1 << 30
MIB = 1 << 20
DISTRIBUTIONS = ("lognormal", "bimodal", "uniform")

# Full sizes, and the test's tiny ones.
FULL = {"max_len": 8192, "cap": 16384, "gs": (256, 1024, 8192), "ws": (8, 64, 512)}
TINY = {"max_len": 64, "cap": 128, "gs": (16, 64), "ws": (2, 8, 32)}


def sample_lengths(dist: str, n: int, max_len: int, seed: int) -> np.ndarray[Any, Any]:
    """``n`` int32 lengths in ``[1, max_len]``: lognormal (median max_len / 20,
    a long tail), bimodal (80% short around max_len / 25, 20% long around
    max_len / 2) or uniform."""
    rng = np.random.default_rng(seed)
    if dist == "lognormal":
        values = rng.lognormal(np.log(max_len / 20), 1.0, n)
    elif dist == "bimodal":
        long = rng.random(n) < 0.2
        values = np.where(
            long,
            rng.normal(max_len / 2, max_len / 8, n),
            rng.normal(max_len / 25, max_len / 80, n),
        )
    elif dist == "uniform":
        values = rng.integers(1, max_len + 1, n)
    else:
        raise ValueError(f"unknown distribution {dist!r}")
    return np.clip(np.rint(values), 1, max_len).astype(np.int32)


def loadavg() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load average {one:.2f}, {five:.2f}, {fifteen:.2f}"


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def summarise(
    lengths: np.ndarray[Any, Any], ranks: list[list[list[int]]], real: list[list[list[bool]]]
) -> dict[str, float]:
    """Balance and padding of one step: ``ranks[r][m]`` the sample ids of rank
    r's micro-batch m, ``real[r][m][k]`` whether its k-th sample counts."""
    loads, waste, tokens, largest_mb = [], 0, 0, 0
    for batches, flags in zip(ranks, real, strict=True):
        load = 0
        for ids, counts in zip(batches, flags, strict=True):
            lens = lengths[np.asarray(ids, dtype=np.int64)].astype(np.int64)
            real_tokens = int(lens[np.asarray(counts, dtype=bool)].sum())
            load += real_tokens
            waste += int(lens.max()) * len(lens) - real_tokens
            largest_mb = max(largest_mb, int(lens.sum()))
        loads.append(load)
        tokens += load
    counts = [len(b) for b in ranks]
    return {
        "max_over_mean": max(loads) / (tokens / len(ranks)),
        "spread": max(loads) - min(loads),
        "waste": waste / tokens,
        "largest_mb": largest_mb,
        "mb_min": min(counts),
        "mb_max": max(counts),
    }


def deal_epochplan(plan: Any, step: int, w: int, cap: int) -> tuple[list[float], Any, Any]:
    """Every rank's micro-batches of one step: the call times, ids, real flags."""
    times, ranks, real = [], [], []
    for r in range(w):
        start = time.perf_counter()
        batches = plan.step_micro_batches(step, r, w, max_tokens=cap)
        times.append(time.perf_counter() - start)
        ranks.append([ids.tolist() for ids, _ in batches])
        real.append([(weights > 0).tolist() for _, weights in batches])
    return times, ranks, real


def deal_verl(
    verl: Any, lengths: np.ndarray[Any, Any], ids: np.ndarray[Any, Any], w: int, cap: int
) -> tuple[float, list[float], Any, Any]:
    """verl's balance of one step over W ranks, then every rank's micro-batches:
    the balance's time, the cuts' times, ids, real flags."""
    import torch

    seq = lengths[ids].tolist()
    start = time.perf_counter()
    parts = verl.get_seqlen_balanced_partitions(seq, w, equal_size=True)
    balance = time.perf_counter() - start
    times, ranks, real = [], [], []
    for part in parts:
        share = [seq[i] for i in part]
        offsets = torch.tensor(np.concatenate([[0], np.cumsum(share)]))
        values = torch.zeros(int(offsets[-1]), dtype=torch.uint8)
        batch = {"input_ids": torch.nested.nested_tensor_from_jagged(values, offsets)}
        start = time.perf_counter()
        _, micro = verl.rearrange_micro_batches(batch, max_token_len=cap)
        times.append(time.perf_counter() - start)
        ranks.append([[int(ids[part[i]]) for i in mb] for mb in micro])
        real.append([[True] * len(mb) for mb in micro])
    return balance, times, ranks, real


def dealing_child(
    impl: str, dist: str, gs: list[int], ws: list[int], steps: int, sizes: str
) -> None:
    """Deals ``steps`` steps for each (G, W) with one implementation; prints JSON."""
    import epochplan as ep

    size = TINY if sizes == "tiny" else FULL
    max_len, cap = int(size["max_len"]), int(size["cap"])  # type: ignore[call-overload]
    verl = None
    if impl == "verl":
        verl, info = load_verl()
        if verl is None:
            raise SystemExit(info)
    rows = []
    for g in gs:
        lengths = sample_lengths(dist, g * steps, max_len, seed=g)
        plan = ep.EpochPlan(len(lengths), g, seed=1, tokens=ep.Tokens(lengths))
        step_ids = [np.sort(plan.step_indices(t, 0, 1)) for t in range(steps)]
        for w in ws:
            row: dict[str, Any] = {"impl": impl, "dist": dist, "G": g, "W": w, "cap": cap}
            if impl == "verl" and w > g:
                row["skipped"] = "verl needs W <= G"
                rows.append(row)
                continue
            per_rank, all_ranks, stats = [], [], []
            for t in range(steps):
                if verl is None:
                    times, ranks, real = deal_epochplan(plan, t, w, cap)
                    balance = 0.0
                else:
                    balance, times, ranks, real = deal_verl(verl, lengths, step_ids[t], w, cap)
                per_rank.append(balance + statistics.median(times))
                all_ranks.append(balance + sum(times))
                stats.append(summarise(lengths, ranks, real))
            row["per_rank_s"] = statistics.median(per_rank)
            row["all_ranks_s"] = statistics.median(all_ranks)
            row["max_over_mean"] = statistics.median(s["max_over_mean"] for s in stats)
            row["waste"] = statistics.median(s["waste"] for s in stats)
            row["largest_mb"] = max(s["largest_mb"] for s in stats)
            row["mb_min"] = min(s["mb_min"] for s in stats)
            row["mb_max"] = max(s["mb_max"] for s in stats)
            row["mb_rank_gap"] = max(s["mb_max"] - s["mb_min"] for s in stats)
            row["spread_over_longest"] = max(
                s["spread"] / int(lengths[i].max()) for s, i in zip(stats, step_ids, strict=True)
            )
            rows.append(row)
    print(json.dumps(rows))


def proc_status() -> dict[str, int]:
    """VmRSS, RssAnon and RssFile of this process, in bytes."""
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) * 1024
    return out


def epoch_child(
    path: str, n: int, g: int, w: int, rank: int, steps: int, cap: int, cold: int, check: int
) -> None:
    """One rank's micro-batches over ``steps`` steps (0: all) of a memmapped
    int32 lengths file, noting time and RSS after ``check`` steps; prints
    JSON. ``cold``: the file's pages are dropped from the page cache first
    and the map is advised MADV_RANDOM (no read-ahead): every length read
    then costs a read of one 4 KiB page."""
    import mmap

    import epochplan as ep

    if cold:
        fd = os.open(path, os.O_RDONLY)
        # Written back first: the page cache keeps dirty pages on DONTNEED
        # (a file just written would then be read from memory).
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
    base = rss_bytes()
    lengths = np.memmap(path, dtype=np.int32, mode="r", shape=(n,))
    if cold:
        lengths._mmap.madvise(mmap.MADV_RANDOM)  # type: ignore[attr-defined]
    start = time.perf_counter()
    plan = ep.EpochPlan(n, g, seed=0, tokens=ep.Tokens(lengths))
    setup = time.perf_counter() - start
    total = plan.num_steps if steps == 0 else min(steps, plan.num_steps)
    micro, samples, done, largest = 0, 0, 0, 0
    checkpoint: dict[str, Any] = {}
    # The call (which reads every length once, for samples over the cap) and
    # the iterator's own work are timed, not the checks of what it yields.
    start = time.perf_counter()
    steps_iter = iter(plan.micro_batches(rank, w, max_tokens=cap))
    first_call = seconds = time.perf_counter() - start
    while done < total:
        start = time.perf_counter()
        batches = next(steps_iter)
        seconds += time.perf_counter() - start
        micro += len(batches)
        for ids, weights in batches:
            samples += int((weights > 0).sum())
            largest = max(largest, int(lengths[ids].sum()))
        done += 1
        if done == check and done < total:
            checkpoint = {
                "steps": done,
                "seconds": seconds,
                "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                **proc_status(),
            }
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    result = {
        "setup_s": setup,
        "first_call_s": first_call,
        "seconds": seconds,
        "steps": done,
        "num_steps": plan.num_steps,
        "micro_batches": micro,
        "samples": samples,
        "largest_mb": largest,
        "peak": peak,
        "base": base,
        **proc_status(),
        "checkpoint": checkpoint,
    }
    print(json.dumps(result))


def run(args: list[str]) -> Any:
    proc = subprocess.run(
        [sys.executable, __file__, *args], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def speedup(ratio: float) -> str:
    return f"{ratio:.0f}x" if ratio >= 9.5 else f"{ratio:.2g}x"


#: What the balance table reports of each side of a dealing case.
BALANCE_KEYS = ("max_over_mean", "waste", "largest_mb", "mb_min", "mb_max", "mb_rank_gap")


def dealing_row(mine: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """One row's cells: epochplan's result for a (distribution, G, W), verl's
    (or why it was skipped)."""
    has = "per_rank_s" in other
    cells = [mine["dist"], str(mine["G"]), str(mine["W"])]
    for key in ("per_rank_s", "all_ranks_s"):
        cells.append(f"{mine[key] * 1e3:.3g}")
        cells.append(f"{other[key] * 1e3:.3g}" if has else "-")
        cells.append(speedup(other[key] / mine[key]) if has else "-")
    for key, fmt in (("max_over_mean", "{:.3f}"), ("waste", "{:.3f}")):
        cells.append(fmt.format(mine[key]))
        cells.append(fmt.format(other[key]) if has else "-")
    cells.append(str(mine["largest_mb"]))
    cells.append(str(other["largest_mb"]) if has else "-")
    for r in (mine, other):
        if "mb_min" not in r:
            cells.append(r["skipped"])
            continue
        gap = f"; ranks differ by up to {r['mb_rank_gap']}" if r["mb_rank_gap"] else ""
        cells.append(f"{r['mb_min']}-{r['mb_max']}{gap}")
    return cells


def dealing(opts: argparse.Namespace, report: dict[str, Any], results: Tables) -> None:
    size = TINY if opts.tiny else FULL
    gs = opts.gs or ",".join(str(g) for g in size["gs"])
    ws = opts.ws or ",".join(str(w) for w in size["ws"])
    verl, verl_info = find_verl()
    results.parameters.update(
        cap=size["cap"], max_len=size["max_len"], steps=opts.steps, verl=verl_info
    )
    print(
        f"Per-step dealing: epochplan against {verl_info}; max_tokens = {size['cap']}, "
        f"lengths in [1, {size['max_len']}]; median of {opts.steps} steps; {loadavg()}"
    )
    table = []  # one row of cells per case, split in two tables at the end
    rows = report.setdefault("dealing", [])
    sizes = "tiny" if opts.tiny else "full"
    for dist in opts.dists.split(","):
        common = [dist, gs, ws, str(opts.steps), sizes]
        ours = run(["--child-dealing", "epochplan", *common])
        if isinstance(ours, dict):
            raise SystemExit(f"epochplan failed: {ours['error']}")
        theirs = run(["--child-dealing", "verl", *common]) if verl else {"error": verl_info}
        if isinstance(theirs, dict):
            theirs = [{"skipped": theirs["error"]} for _ in ours]
        rows.extend(ours)
        rows.extend(t for t in theirs if "impl" in t)
        for mine, other in zip(ours, theirs, strict=True):
            table.append(dealing_row(mine, other))
            case = {"lengths": mine["dist"], "G": mine["G"], "W": mine["W"]}
            for name, keys in (
                ("dealing_time", ("per_rank_s", "all_ranks_s")),
                ("dealing_balance", BALANCE_KEYS),
            ):
                sides = {
                    side: {k: r[k] for k in keys}
                    if "per_rank_s" in r
                    else {"skipped": r["skipped"]}
                    for side, r in (("epochplan", mine), ("verl", other))
                }
                results.add(name, {**case, **sides})
    # Two tables, so that no row is too wide to read: the times, then the balance.
    print()
    print("Time a step:")
    print()
    print(
        "| lengths | G | W | per rank: epochplan ms | verl ms | ratio "
        "| all ranks: epochplan ms | verl ms | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for cells in table:
        print("| " + " | ".join(cells[:9]) + " |")
    print()
    print(
        "Balance and micro-batches (max / mean: the largest rank's tokens over the mean; "
        "waste: the padding waste; largest: the largest micro-batch in tokens, cap "
        f"{size['cap']}; per rank: micro-batches per rank):"
    )
    print()
    print(
        "| lengths | G | W | max / mean: epochplan | verl | waste: epochplan | verl "
        "| largest: epochplan | verl | per rank: epochplan | verl |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|")
    for cells in table:
        print("| " + " | ".join(cells[:3] + cells[9:]) + " |")
    print()
    print(f"({loadavg()} at the end)")


def write_lengths(path: Path, n: int, max_len: int) -> str | None:
    """Writes ``n`` lognormal int32 lengths to ``path`` unless it holds them;
    the reason when the disk or memory is short."""
    need = 4 * n
    if path.exists() and path.stat().st_size == need:
        return None
    free = shutil.disk_usage(path.parent).free
    if free < need + GIB:
        return f"the file needs {need / GIB:.1f} GiB, {free / GIB:.1f} GiB free under {path.parent}"
    if (available_memory() or 0) < 2 * GIB:
        return f"{(available_memory() or 0) / GIB:.1f} GiB of memory available"
    start = time.perf_counter()
    with open(path, "wb") as f:
        for offset in range(0, n, 10**7):
            size = min(10**7, n - offset)
            sample_lengths("lognormal", size, max_len, seed=offset).tofile(f)
    print(f"(wrote {path}, {need / MIB:.0f} MiB, in {time.perf_counter() - start:.0f} s)")
    return None


def epoch_row(n: int, cache: str, r: dict[str, Any], num_steps: int, cap: int) -> str:
    per_step = r["seconds"] / r["steps"]
    if r["steps"] == num_steps:
        whole = f"{r['seconds']:.3f}"
    else:
        whole = f"~{per_step * num_steps:.0f} (extrapolated)"
    return (
        f"| {n:.0e} | {cache} | {r['steps']} / {num_steps} | {r['seconds']:.3f} "
        f"| {per_step * 1e3:.3f} | {whole} | {r['peak'] / MIB:.0f} | {r['RssAnon'] / MIB:.0f} "
        f"| {r['RssFile'] / MIB:.0f} |"
    )


def epoch(opts: argparse.Namespace, report: dict[str, Any], results: Tables) -> None:
    directory = Path(opts.dir)
    directory.mkdir(parents=True, exist_ok=True)
    size = TINY if opts.tiny else FULL
    g, w, rank, cap = opts.epoch_g, 8, 3, int(size["cap"])  # type: ignore[call-overload]
    print()
    print(
        f"One rank's epoch: EpochPlan(N, {g}, tokens=Tokens(np.memmap(int32 file)))"
        ".micro_batches"
        f"({rank}, {w}, max_tokens={cap}), each case in a fresh process; {loadavg()}"
    )
    print()
    print(
        "| N | page cache | steps run / epoch | time (s) | ms a step | epoch (s) "
        "| peak RSS (MiB) | anon. RSS, end (MiB) | file pages, end (MiB) |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    rows = report.setdefault("epoch", [])
    cases = [
        (opts.epoch_n, 0, 0),
        (opts.big_n, 0 if opts.big_full else opts.big_steps, 0),
        (opts.big_n, opts.cold_steps, 1),
    ]
    written: set[Path] = set()
    for n, steps, cold in cases:
        if cold and not opts.cold_steps:
            continue
        path = directory / f"lengths-{n}.int32"
        if not path.exists():
            written.add(path)
        why = write_lengths(path, n, int(size["max_len"]))  # type: ignore[call-overload]
        if why:
            print(f"| {n:.0e} | skipped: {why} ||||||||")
            rows.append({"N": n, "skipped": why})
            results.add("epoch", {"n": n, "skipped": why})
            continue
        check = opts.big_steps if n == opts.big_n and not cold else 0
        args = [str(x) for x in (path, n, g, w, rank, steps, cap, cold, check)]
        result = run(["--child-epoch", *args])
        if "error" in result:
            raise SystemExit(f"epoch N={n} failed: {result['error']}")
        cache = "cold, MADV_RANDOM" if cold else "warm"
        parts = [result["checkpoint"], result] if result["checkpoint"] else [result]
        for part in parts:
            print(epoch_row(n, cache, part, result["num_steps"], cap))
            row = {k: part[k] for k in ("steps", "seconds", "peak", "RssAnon", "RssFile")}
            # The call's one read of every length, in each row's seconds.
            row["first_call_s"] = result["first_call_s"]
            results.add(
                "epoch",
                {"n": n, "cache": cache, "num_steps": result["num_steps"], "cap": cap, **row},
            )
        rows.append({"N": n, "cap": cap, "cold": bool(cold), **result})
    if not opts.keep:
        for path in written:
            path.unlink()
    print()
    print(f"(every micro-batch at most {cap} tokens: largest seen ", end="")
    print(f"{max((r.get('largest_mb', 0) for r in rows), default=0)}; {loadavg()} at the end)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("dealing", "epoch", "both"), default="both")
    parser.add_argument("--tiny", action="store_true", help="the test's sizes (seconds)")
    parser.add_argument("--steps", type=int, default=3, help="steps dealt per case")
    parser.add_argument("--dists", default=",".join(DISTRIBUTIONS))
    parser.add_argument("--gs", help="global batch sizes, comma-separated")
    parser.add_argument("--ws", help="world sizes, comma-separated")
    parser.add_argument("--epoch-n", type=int, default=10**6)
    parser.add_argument("--epoch-g", type=int, default=1024)
    parser.add_argument("--big-n", type=int, default=10**9)
    parser.add_argument("--big-steps", type=int, default=2000)
    parser.add_argument("--big-full", action="store_true", help="the 10^9 rank's whole epoch")
    parser.add_argument(
        "--cold-steps", type=int, default=200, help="steps from a cold page cache (0: none)"
    )
    parser.add_argument("--dir", default="/tmp/epochplan-bench-tokens")
    parser.add_argument("--keep", action="store_true", help="keep the lengths files written")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument(
        "--results", type=Path, help="write the tables' rows and the run's context (JSON)"
    )
    parser.add_argument("--child-dealing", nargs=6, help=argparse.SUPPRESS)
    parser.add_argument("--child-epoch", nargs=9, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child_dealing:
        impl, dist, gs, ws, steps, sizes = opts.child_dealing
        split = [[int(x) for x in v.split(",")] for v in (gs, ws)]
        dealing_child(impl, dist, split[0], split[1], int(steps), sizes)
        return
    if opts.child_epoch:
        path, *numbers = opts.child_epoch
        epoch_child(path, *(int(x) for x in numbers))
        return
    import epochplan

    results = Tables(opts.results, __file__, sys.argv[1:])
    print(f"epochplan {epochplan.__version__}, {os.cpu_count()} CPUs, {loadavg()}")
    report: dict[str, Any] = {}
    if opts.part in ("dealing", "both"):
        dealing(opts, report, results)
    if opts.part in ("epoch", "both"):
        results.parameters.update(epoch_g=opts.epoch_g, world_size=8, rank=3)
        epoch(opts, report, results)
    results.save()
    if opts.json:
        Path(opts.json).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
