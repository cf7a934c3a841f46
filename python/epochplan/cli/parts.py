"""Plans written in parts: ``epochplan plan --write-part I/N`` (or ``auto``:
from the launcher's environment) and ``epochplan merge OUT PART...``."""

from __future__ import annotations

import argparse
import time
from typing import Any

from epochplan._args import size_label
from epochplan.cli.arguments import Help, UsageError, path
from epochplan.cli.progress import progress_bar, rate_text, show_progress
from epochplan.planfile import Part, PlanSpec, merge_plan, verify_part, write_plan_part

MERGE_HELP = """\
Assemble a plan directory from the directories of all its parts (written by
`epochplan plan --write-part I/N`, by any number of processes), each given
once. The parts must be parts 0 to N-1 of one plan: a part missing, given
twice, of another plan or incomplete is refused, naming it. The result is
byte for byte the plan one process writes (the same rank files, manifest and
checksum); files are hard-linked from the parts (copied across
filesystems). Verify it with `epochplan verify OUT`.

examples:
  epochplan merge plan/ parts/p*
"""


def add_part_argument(p: argparse.ArgumentParser) -> None:
    """Adds ``--write-part`` to ``epochplan plan``."""
    p.add_argument(
        "--write-part",
        default=None,
        metavar="I/N",
        help="write part I of N of the plan into --out (auto: from SLURM_ARRAY_TASK_ID and "
        "SLURM_ARRAY_TASK_COUNT, or RANK and WORLD_SIZE; {part} in --out is the part's "
        "index); then epochplan merge",
    )


def part_from_args(args: argparse.Namespace) -> Part | None:
    """The part ``--write-part`` asks for, checked against the other flags."""
    if args.write_part is None:
        return None
    try:
        part = Part.from_environment() if args.write_part == "auto" else Part.parse(args.write_part)
    except ValueError as e:
        raise UsageError(f"--write-part: {e}") from None
    if args.out is None:
        raise UsageError("--write-part needs --out DIR: the part's directory")
    # `--out parts/part-{part}`: one command line for every process.
    args.out = type(args.out)(str(args.out).replace("{part}", str(part.index)))
    return part


def run_part(args: argparse.Namespace, part: Part, spec: PlanSpec, epochs: range) -> int:
    """Writes and checks one part."""
    say = (lambda _msg: None) if args.quiet else print
    t0 = time.perf_counter()
    with progress_bar("writing", "B", show_progress(args), scale=8) as bar:
        out = write_plan_part(
            args.out,
            spec,
            args.world_size,
            part,
            epochs=epochs,
            micro_batch_size=args.micro_batch_size,
            max_tokens=args.max_tokens,
            progress=bar,
        )
    took = time.perf_counter() - t0
    nbytes = sum(f.stat().st_size for f in out.rglob("*.npy"))
    say(
        f"part {part.index} of {part.count}: {size_label(nbytes)} in {took:.1f} s "
        f"({rate_text(nbytes / 8 / max(took, 1e-9))} ids/s) -> {out}"
    )
    if not args.no_verify:
        if verify_part(out):
            say("verified: checksums ok, every id as planned")
        else:
            say("verified: checksums ok (the lengths file is not readable: ids not dealt again)")
    return 0


def add_merge_parser(sub: Any) -> None:
    p = sub.add_parser(
        "merge", help="assemble a plan from its parts", description=MERGE_HELP, formatter_class=Help
    )
    p.add_argument("out", type=path, metavar="OUT", help="the plan directory to create")
    p.add_argument("parts", type=path, nargs="+", metavar="PART", help="every part's directory")
    p.add_argument("--force", action="store_true", help="replace OUT if it is a plan directory")
    p.add_argument("-q", "--quiet", action="store_true", help="print nothing")
    p.set_defaults(run=run_merge)


def run_merge(args: argparse.Namespace) -> int:
    t0 = time.perf_counter()
    d = merge_plan(args.out, args.parts, force=args.force)
    if not args.quiet:
        print(
            f"merged {len(args.parts)} parts into {d.path} in {time.perf_counter() - t0:.1f} s: "
            f"N={d.num_samples:,} W={d.world_size} epochs={d.epochs} "
            f"({len(d.manifest['files'])} rank files)"
        )
    return 0
