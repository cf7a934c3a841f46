"""``epochplan verify``: check a plan directory completely."""

from __future__ import annotations

import argparse
import time
from typing import Any

from epochplan._args import size_label
from epochplan.cli.arguments import Help, path
from epochplan.cli.progress import progress_bar, show_progress
from epochplan.cli.space import describe_space
from epochplan.planfile import open_plan, verify_part, verify_plan
from epochplan.planfile.parts import is_part
from epochplan.planfile.tokens.verify import lengths_unreachable

VERIFY_HELP = """\
Check a plan directory completely: the manifest, every file's header, size and
BLAKE3 checksum, equal steps (each rank file holds the plan's share of its
rank), every id against the plan (recomputed; for kind uniform only when a
dropped step needs the permutation) and exact coverage (every id of [0, N)
exactly once per epoch; for a plan written with --drop-last, exactly the
full steps' ids, none of the dropped step's).
A token plan (written with --lengths) is checked step by step: coverage,
every micro-batch within --max-tokens and --micro-batch-size (fillers
included), the same micro-batch count on every rank, the balance bound (the
spread of the ranks' costs at most the step's largest single cost) and, when
the lengths file recorded in the manifest is reachable, the stored lengths
against it and every id against the dealing it gives (otherwise it says so).
A plan over an index space (written with --space or --split) is checked
against the plan over the space its directory stores (its files' checksums
and its digest first): every id of a selection is one of its ids, at most
once, and every id of a mixture is compared with the plan's, which proves
coverage of exactly the space's ids with their multiplicities.
Streams through the files with a bitmap of N/8 bytes (kind uniform with a
dropped step also builds the permutation, about 16 bytes per sample). Exit
status 0 when everything holds; otherwise one line naming the file and its
first violation, exit status 1. A part of a plan written in parts
(`epochplan plan --write-part`) is checked alone: its files' checksums and
every id against the plan (coverage is checked on the merged plan).

examples:
  epochplan verify plan/
  epochplan verify --quiet plan/ && echo ok
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "verify", help="check a plan directory", description=VERIFY_HELP, formatter_class=Help
    )
    p.add_argument("dir", type=path, metavar="DIR", help="the plan directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing when it is valid")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    if is_part(args.dir):
        # One part of a plan written in parts: its files, each id as planned.
        with progress_bar("verifying", "B", show_progress(args)) as bar:
            dealt = verify_part(args.dir, progress=bar)
        if not args.quiet:
            how = "every id as planned" if dealt else "checksums only: lengths file not readable"
            print(f"{args.dir}: part ok ({how}) in {time.perf_counter() - t0:.1f} s")
        return 0
    with progress_bar("verifying", "B", show_progress(args)) as bar:
        compared = verify_plan(args.dir, progress=bar)
    d = open_plan(args.dir)
    if not args.quiet:
        ids = "every id compared" if compared else "ids counted, not compared: the uniform "
        ids += "" if compared else "permutation does not fit in memory"
        if d.tokens is not None:
            ids = "caps, micro-batch counts and balance checked; "
            why = lengths_unreachable(d)
            ids += (
                "lengths and every id compared with the lengths file"
                if why is None
                else f"the lengths file was not compared (not reachable: {why})"
            )
        files = len(d.manifest["files"]) + len(d.manifest.get("token_files", []))
        over = ""
        if d.space is not None:
            files += len(d.manifest["space"]["files"])
            over = f", over {describe_space(d.space)}"
        print(
            f"{args.dir}: ok ({files} files, "
            f"{size_label(int(d.manifest['total_bytes']))}, N={d.num_samples:,}{over}, "
            f"W={d.world_size}, epochs={d.epochs}; {ids}) in {time.perf_counter() - t0:.1f} s"
        )
    return 0
