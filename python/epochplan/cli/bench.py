"""``epochplan bench``: the comparison runner of :mod:`epochplan.bench`, its
report written to a file or printed."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from epochplan._files import map_npy
from epochplan._native import KINDS
from epochplan._space_spec import load_space, store_size
from epochplan.bench import check_writable, plot, replace_with, table
from epochplan.bench import run as run_cases
from epochplan.bench.cases import CASES
from epochplan.bench.job import Job, job_cases
from epochplan.bench.results import load, save, start
from epochplan.cli.arguments import Help, UsageError, check_npy_file, path, positive

BENCH_HELP = """\
Time our implementations against every installed peer, side by side: numpy
and torch permutations, torch's DistributedSampler, MosaicML Streaming's
get_partitions and get_shuffle (py1s, py1e). Each case runs in a fresh
subprocess; the table has medians, speed-ups over the peer and peak memory.

Your own job: --world-size, --global-batch-size, --kind, --lengths FILE with
--max-tokens, or --space FILE time its partitioning (one rank's share and
every rank's), torch's DistributedSampler beside it where it computes the
same thing; N is the file's length, else --sizes.

examples:
  epochplan bench
  epochplan bench --sizes 1e6 1e7 --repeats 5 --out report.md --plot report.png
  epochplan bench --results results.json
  epochplan bench --from-results results.json --out report.md --plot report.png
  epochplan bench --world-size 64 --global-batch-size 1024 --sizes 1e8
  epochplan bench --world-size 8 --lengths lengths.npy --max-tokens 16384
"""


def add_parser(sub: Any) -> None:
    """Adds the ``bench`` sub-command to ``sub``."""
    p = sub.add_parser(
        "bench",
        help="compare against the installed peers",
        description=BENCH_HELP,
        formatter_class=Help,
    )
    p.add_argument(
        "--sizes",
        type=positive,
        nargs="+",
        default=[10**6, 10**7, 10**8],
        metavar="N",
        help="sample counts (default 1e6 1e7 1e8)",
    )
    p.add_argument(
        "--repeats",
        type=positive,
        default=3,
        metavar="R",
        help="runs per case, each in a fresh process (default 3)",
    )
    p.add_argument(
        "--timeout", type=positive, default=600, metavar="SECONDS", help="per run (default 600)"
    )
    p.add_argument(
        "--out",
        type=path,
        default=None,
        metavar="FILE",
        help="write the Markdown table here (default: print it)",
    )
    p.add_argument(
        "--plot",
        type=path,
        default=None,
        metavar="FILE",
        help="write a log-log plot of time against N (PNG)",
    )
    p.add_argument(
        "--results",
        type=path,
        default=None,
        metavar="FILE",
        help="write every measurement and the run's context here (JSON)",
    )
    p.add_argument(
        "--from-results",
        type=path,
        default=None,
        metavar="FILE",
        help="run nothing: the table and plot of a --results file",
    )
    p.add_argument(
        "--filter",
        default=None,
        metavar="TEXT",
        help="only the cases whose operation or implementation contains TEXT",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no per-case lines")
    g = p.add_argument_group(
        "your job", "time your own job's partitioning instead of the fixed cases"
    )
    g.add_argument("--world-size", type=positive, default=None, metavar="W", help="ranks")
    g.add_argument(
        "--global-batch-size", type=positive, default=None, metavar="G", help="samples a step"
    )
    g.add_argument("--kind", default=None, choices=KINDS, help="the order (default cipher)")
    g.add_argument("--lengths", type=path, default=None, metavar="FILE",
                   help="tokens per sample (.npy): a token plan; N is its length")  # fmt: skip
    g.add_argument("--max-tokens", type=positive, default=None, metavar="T",
                   help="tokens per micro-batch (with --lengths)")  # fmt: skip
    g.add_argument("--space", type=path, default=None, metavar="SPACE.json",
                   help="a space file; N is its length")  # fmt: skip
    p.set_defaults(run=run)


def _job(args: argparse.Namespace) -> tuple[Job | None, list[int]]:
    """The user's job, when any of its flags is given, and its sizes."""
    flags = (args.world_size, args.global_batch_size, args.kind, args.lengths, args.space)
    if all(f is None for f in flags):
        if args.max_tokens is not None:
            raise UsageError("--max-tokens needs --lengths")
        return None, sorted(set(args.sizes))
    if (args.lengths is None) != (args.max_tokens is None):
        raise UsageError("--lengths and --max-tokens go together")
    job = Job(
        args.world_size or 8,
        args.global_batch_size or 4096,
        args.kind or "cipher",
        args.lengths,
        args.max_tokens,
        args.space,
    )
    sizes = sorted(set(args.sizes))
    n = None
    if args.space is not None:
        try:
            space = load_space(args.space)
        except (ValueError, TypeError, OverflowError) as e:
            raise UsageError(f"--space {args.space}: {e}") from None
        n = len(space)
    if args.lengths is not None:
        check_npy_file("--lengths", args.lengths)
        length = len(map_npy(args.lengths)[0])
        # Lengths are per store id: a space's store, or the plan's N.
        if n is None:
            n = length
        elif length != store_size(space, n):
            raise UsageError("--lengths must hold one value per id of --space's store")
    return job, sizes if n is None else [n]


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark for parsed ``args``."""
    # Checked before the run, so that it is not lost to a bad path at the end.
    for flag, file in (("--out", args.out), ("--plot", args.plot), ("--results", args.results)):
        if file is not None:
            check_writable(flag, file)
    if args.from_results is not None:
        if args.results is not None:
            raise UsageError("--results and --from-results exclude each other")
        try:
            context, results = load(args.from_results)
        except ValueError as e:
            raise UsageError(str(e)) from None
    else:
        context = start(args.argv)
        t0 = time.perf_counter()
        job, results = _measure(args)
        context.job = "" if job is None else job.describe()
        context.seconds = round(time.perf_counter() - t0, 1)
        context.load_end = [round(x, 2) for x in os.getloadavg()]
        if args.results is not None:
            save(args.results, context, results)
            print(f"wrote {args.results}", file=sys.stderr)
    repeats = max((len(r.seconds) for r in results), default=0)
    md = table(results, repeats) + f"\n{context.describe()}.\n"
    if args.out is not None:
        replace_with(args.out, "--out", lambda tmp: tmp.write_text(md))
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(md)
    if args.plot is not None:
        print(plot(results, args.plot), file=sys.stderr)
    return 0


def _measure(args: argparse.Namespace) -> tuple[Job | None, list[Any]]:
    """The user's job, if any, and every selected case at every size (the
    Results)."""
    log = open(os.devnull, "w") if args.quiet else sys.stderr  # noqa: SIM115
    try:
        job, sizes = _job(args)
        cases = [
            c
            for c in (CASES if job is None else job_cases(job))
            if args.filter is None or args.filter.lower() in f"{c.group} {c.name}".lower()
        ]
        if not cases:
            raise ValueError(f"--filter {args.filter!r} matches no case")
        return job, run_cases(sizes, args.repeats, float(args.timeout), log, cases)
    finally:
        if args.quiet:
            log.close()
