"""``epochplan plan``: write (and verify) a plan directory; with no arguments,
a demo of 10^9 samples in a temporary directory."""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from epochplan._args import limit_label, size_label
from epochplan._files import map_npy
from epochplan._kinds import kind_value
from epochplan._native import KINDS, Mixture, PlanSpec, Selection, Tokens
from epochplan.cli.arguments import (
    MAX_U64,
    Help,
    UsageError,
    check_npy_file,
    path,
    positive,
    samples,
    seed_or_epoch,
)
from epochplan.cli.parts import add_part_argument, part_from_args, run_part
from epochplan.cli.progress import peak_rss_bytes, progress_bar, rate_text, show_progress
from epochplan.cli.space import add_space_arguments, describe_space, space_from_args
from epochplan.planfile import MAX_FILES, PlanError, verify_plan, write_plan
from epochplan.planfile.verify import check_verify_memory

PLAN_HELP = """\
Write every rank's sample ids of one or more epochs to a plan directory:
manifest.json plus epoch-EEEE/rank-RRRRR.npy (int64, numpy.load(...,
mmap_mode="r")). Written in bounded memory on all cores, checksummed,
published atomically, then verified (unless --no-verify).

Without --out, the plan goes to a temporary directory that is removed at the
end (unless --keep): `epochplan plan` alone is a demo that writes and verifies
a plan of 10^9 samples for 8 ranks and prints a summary.

examples:
  epochplan plan
  epochplan plan --num-samples 1e8 --global-batch-size 1024 --world-size 8 --out plan/
  epochplan plan -n 8474566 -g 640 -w 7 --epoch 0 --epochs 3 --seed 42 --out plan/ --force
  epochplan plan -n 1e6 -g 256 -w 4 --kind chunked --chunk-size 1000 --preload-nchunks 8 --out p/
  epochplan plan -n 1e6 -g 256 -w 4 --lengths lengths.npy --max-tokens 8192 --out p/
  epochplan plan -n 1e6 -g 256 -w 4 --split 0.9,0.1 --part 0 --split-seed 3 --out train/
  epochplan plan -g 256 -w 4 --space space.json --out p/

Token plans (--lengths, a .npy file of tokens per sample): the rank files hold
the balanced dealing, and beside them each rank's lengths, step offsets and
the epoch's step table, so that PlanSampler cuts its micro-batches from its
own files alone. The manifest records the lengths file's path and digest.

Index spaces (--space, a space file; or --split with --part over a store of
-n samples): the plan permutes the space's ids, and the rank files hold store
ids. The space is stored in the plan directory (masks and id arrays beside
the rank files), so readers and verify need nothing else.
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "plan",
        help="write a plan directory (a demo with no arguments)",
        description=PLAN_HELP,
        formatter_class=Help,
    )
    p.add_argument(
        "-n",
        "--num-samples",
        type=samples,
        default=None,
        metavar="N",
        help="samples per epoch (default 10^9); with --split, the store's size",
    )
    p.add_argument(
        "-g",
        "--global-batch-size",
        type=positive,
        default=4096,
        metavar="G",
        help="samples per step over all ranks (default 4096)",
    )
    p.add_argument(
        "-w",
        "--world-size",
        type=positive,
        default=8,
        metavar="W",
        help="ranks, one file each per epoch (default 8)",
    )
    p.add_argument(
        "-o",
        "--out",
        type=path,
        default=None,
        metavar="DIR",
        help="the plan directory to create (default: a temporary one)",
    )
    p.add_argument("--seed", type=seed_or_epoch, default=0, metavar="S", help="default 0")
    p.add_argument(
        "--epoch", type=seed_or_epoch, default=0, metavar="E", help="first epoch (default 0)"
    )
    p.add_argument(
        "--epochs",
        type=positive,
        default=1,
        metavar="K",
        help="number of epochs from --epoch on (default 1)",
    )
    p.add_argument(
        "--kind",
        default="cipher",
        choices=KINDS,
        help="order kind (default cipher; uniform holds ~16 bytes per sample in memory)",
    )
    p.add_argument(
        "--chunk-size",
        type=positive,
        default=None,
        metavar="C",
        help="samples per chunk (kind chunked)",
    )
    p.add_argument(
        "--preload-nchunks",
        type=positive,
        default=None,
        metavar="P",
        help="chunks per shuffle window (kind chunked; default 1)",
    )
    p.add_argument("--drop-last", action="store_true", help="drop the short last step")
    p.add_argument(
        "--lengths", type=path, default=None, metavar="FILE", help="tokens per sample (.npy)"
    )
    p.add_argument(
        "--loss-tokens",
        type=path,
        default=None,
        metavar="FILE",
        help="tokens per sample that count in the loss (.npy; default: the lengths)",
    )
    p.add_argument(
        "--max-tokens", type=positive, default=None, metavar="T", help="tokens per micro-batch"
    )
    p.add_argument(
        "--micro-batch-size",
        type=positive,
        default=None,
        metavar="B",
        help="samples per micro-batch (token plans)",
    )
    p.add_argument(
        "--oversize",
        choices=("error", "truncate", "skip"),
        default=None,
        help="a sample longer than --max-tokens: refuse the plan (default), cut it to the "
        "cap, or leave it out",
    )
    p.add_argument(
        "--packing",
        choices=("sorted", "first_fit"),
        default=None,
        help="how a rank's share is cut into micro-batches: runs of similar lengths "
        "(default, for padded batches) or first-fit decreasing (fuller packed rows)",
    )
    p.add_argument(
        "--force", action="store_true", help="replace DIR if it is an existing plan directory"
    )
    p.add_argument(
        "--keep", action="store_true", help="keep the temporary plan directory (without --out)"
    )
    p.add_argument("--no-verify", action="store_true", help="skip verifying after writing")
    p.add_argument("-q", "--quiet", action="store_true", help="no progress bar, no summary")
    add_space_arguments(p)
    add_part_argument(p)
    p.set_defaults(run=run)


# What verification says of a uniform plan whose permutation it could not build.
_COUNTED = "once per epoch (counted, not compared: the uniform permutation does not fit in memory)"


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _spec(
    args: argparse.Namespace, num_samples: int, space: Selection | Mixture | None
) -> PlanSpec:
    """The plan's parameters, built once from the flags (checked files: the
    lengths memory-mapped, so that the manifest records their file)."""
    tokens = None
    if args.lengths is not None:
        loss = None if args.loss_tokens is None else map_npy(args.loss_tokens)[0]
        tokens = Tokens(
            map_npy(args.lengths)[0],
            loss,
            oversize=args.oversize or "error",
            packing=args.packing or "sorted",
        )
    return PlanSpec(
        num_samples if space is None else space,
        args.global_batch_size,
        seed=args.seed,
        kind=kind_value(args.kind, args.chunk_size, args.preload_nchunks),
        drop_last=args.drop_last,
        tokens=tokens,
    )


def run(args: argparse.Namespace) -> int:
    if args.kind == "chunked" and args.chunk_size is None:
        raise UsageError("--kind chunked needs --chunk-size")
    if args.kind != "chunked" and (args.chunk_size, args.preload_nchunks) != (None, None):
        raise UsageError("--chunk-size and --preload-nchunks apply to --kind chunked only")
    if args.lengths is None:
        for flag, value in (
            ("--loss-tokens", args.loss_tokens),
            ("--max-tokens", args.max_tokens),
            ("--micro-batch-size", args.micro_batch_size),
            ("--oversize", args.oversize),
            ("--packing", args.packing),
        ):
            if value is not None:
                raise UsageError(f"{flag} needs --lengths")
    elif args.max_tokens is None and args.micro_batch_size is None:
        raise UsageError("--lengths needs --max-tokens, --micro-batch-size or both")
    for flag, given in (("--lengths", args.lengths), ("--loss-tokens", args.loss_tokens)):
        if given is not None:
            check_npy_file(flag, given)
    if args.world_size * args.epochs > MAX_FILES:
        raise UsageError(
            f"--world-size * --epochs must be at most {MAX_FILES} files, "
            f"got {args.world_size} * {args.epochs}"
        )
    if args.epoch + args.epochs - 1 > MAX_U64:
        raise UsageError(
            f"the last epoch (--epoch + --epochs - 1) must be at most {limit_label(MAX_U64)}, "
            f"got {args.epoch} + {args.epochs} - 1"
        )
    space = space_from_args(args)
    num_samples = args.num_samples if args.num_samples is not None else 10**9
    if space is not None:
        num_samples = len(space)
    part = part_from_args(args)
    spec = _spec(args, num_samples, space)
    if part is not None:
        return run_part(args, part, spec, range(args.epoch, args.epoch + args.epochs))
    temp_root = None
    out = args.out
    if out is None:
        temp_root = Path(tempfile.mkdtemp(prefix="epochplan-"))
        out = temp_root / "plan"
    show = show_progress(args)
    say = (lambda _msg: None) if args.quiet else print
    epochs = range(args.epoch, args.epoch + args.epochs)
    try:
        if not args.no_verify:
            # Known before writing: no plan is written that cannot be verified.
            try:
                check_verify_memory(Path(out), spec)
            except PlanError as e:
                raise PlanError(f"{e} (--no-verify writes the plan without verifying it)") from None
        t0 = time.perf_counter()
        with progress_bar("writing", "B", show, scale=8) as bar:
            d = write_plan(
                out,
                spec,
                args.world_size,
                epochs=epochs,
                micro_batch_size=args.micro_batch_size,
                max_tokens=args.max_tokens,
                force=args.force,
                progress=bar,
            )
        t_write = time.perf_counter() - t0
        # The spec maps the lengths file, which verification maps again from
        # the manifest: two maps of one file count its pages twice in the
        # resident memory.
        del spec
        files = len(d.manifest["files"]) + len(d.manifest.get("token_files", []))
        files += len(d.manifest.get("space", {}).get("files", []))
        nbytes = int(d.manifest["total_bytes"])
        ids = sum(int(f["count"]) for f in d.manifest["files"])
        say(
            f"plan: N={num_samples:,} G={args.global_batch_size} W={args.world_size} "
            f"epochs={list(epochs)} kind={d.kind} seed={args.seed} -> {out}"
        )
        if space is not None:
            say(f"space: {describe_space(space)}, stored in the plan directory")
        say(
            f"wrote {files} files, {size_label(nbytes)} in {t_write:.1f} s "
            f"({rate_text(ids / max(t_write, 1e-9))} ids/s, "
            f"{size_label(nbytes / max(t_write, 1e-9))}/s)"
        )
        if not args.no_verify:
            t1 = time.perf_counter()
            with progress_bar("verifying", "B", show) as bar:
                compared = verify_plan(d.path, progress=bar)
            t_verify = time.perf_counter() - t1
            every_id = "as planned and once per epoch" if compared else _COUNTED
            if d.space is not None:
                every_id = _space_coverage(d.space, compared)
            if d.tokens is not None:
                every_id = "once per epoch, the caps, equal micro-batch counts and the balance " + (
                    "bound; every id as planned"
                    if compared
                    else "bound (the lengths file was not compared: it is not reachable)"
                )
            say(
                f"verified in {t_verify:.1f} s: checksums ok, every id {every_id}, "
                f"equal steps ({d.manifest['num_steps']:,} per rank)"
            )
        say(
            f"disk: {size_label(_dir_bytes(d.path))}, "
            f"peak memory (RSS): {size_label(peak_rss_bytes())}"
        )
        if temp_root is not None:
            if args.keep:
                say(f"kept {out}")
            else:
                say(f"removed {out} (use --keep or --out DIR to keep a plan)")
    finally:
        if temp_root is not None and not args.keep:
            shutil.rmtree(temp_root, ignore_errors=True)
    return 0


def _space_coverage(space: Any, compared: bool) -> str:
    """What verification says of a plan over an index space."""
    if not isinstance(space, Selection):
        return "as planned: the mixture's ids with their multiplicities"
    if compared:
        return "as planned and once per epoch, exactly the space's ids"
    return "a member of the space and at most once per epoch (not compared: see verify --help)"
