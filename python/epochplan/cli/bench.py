"""``epochplan bench``: the comparison runner of :mod:`epochplan.bench`, its
report written to a file or printed."""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from epochplan.bench import check_writable, plot, replace_with, size_text, table
from epochplan.bench import run as run_cases
from epochplan.bench.cases import CASES
from epochplan.cli.arguments import Help, path, positive

BENCH_HELP = """\
Time our implementations against every installed peer, side by side: numpy
and torch permutations, torch's DistributedSampler, MosaicML Streaming's
get_partitions and get_shuffle (py1s, py1e). Each case runs in a fresh
subprocess; the table has medians, speed-ups over the peer and peak memory.

examples:
  epochplan bench
  epochplan bench --sizes 1e6 1e7 --repeats 5 --out report.md --plot report.png
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
        "--filter",
        default=None,
        metavar="TEXT",
        help="only the cases whose operation or implementation contains TEXT",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no per-case lines")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Runs the benchmark for parsed ``args``."""
    # Checked before the run, so that it is not lost to a bad path at the end.
    for flag, file in (("--out", args.out), ("--plot", args.plot)):
        if file is not None:
            check_writable(flag, file)
    t0 = time.perf_counter()
    log = open(os.devnull, "w") if args.quiet else sys.stderr  # noqa: SIM115
    try:
        cases = [
            c
            for c in CASES
            if args.filter is None or args.filter.lower() in f"{c.group} {c.name}".lower()
        ]
        if not cases:
            raise ValueError(f"--filter {args.filter!r} matches no case")
        results = run_cases(sorted(set(args.sizes)), args.repeats, float(args.timeout), log, cases)
    finally:
        if args.quiet:
            log.close()
    md = table(results, args.repeats)
    cpu = os.cpu_count()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    md += (
        f"\n{cpu} CPUs; `epochplan bench --sizes {' '.join(size_text(n) for n in args.sizes)} "
        f"--repeats {args.repeats}`; {time.perf_counter() - t0:.0f} s in all; load average "
        f"{load} at the end.\n"
    )
    if args.out is not None:
        replace_with(args.out, "--out", lambda tmp: tmp.write_text(md))
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        print(md)
    if args.plot is not None:
        print(plot(results, args.plot), file=sys.stderr)
    return 0
