"""The index-space options of ``epochplan plan``: ``--space SPACE.json`` (a
space file) and the shortcut ``--split 0.9,0.1 --part 0 [--split-seed S]``
over a store of ``-n`` samples."""

from __future__ import annotations

import argparse
from typing import Any

from epochplan._native import Mixture, Selection
from epochplan._space_spec import load_space, split_space, store_size
from epochplan.cli.arguments import UsageError, path, samples, seed_or_epoch

__all__ = ["add_space_arguments", "describe_space", "space_from_args"]


def _split(text: str) -> list[int] | list[float]:
    """``0.9,0.1`` (fractions) or ``900,100`` (sizes)."""
    parts = [p.strip() for p in text.split(",")]
    try:
        if all(p.isdigit() for p in parts):
            return [int(p) for p in parts]
        return [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated fractions or sizes (like 0.9,0.1), got {text[:40]!r}"
        ) from None


def add_space_arguments(p: argparse.ArgumentParser) -> None:
    """Adds ``--space``, ``--split``, ``--part`` and ``--split-seed``."""
    g = p.add_argument_group(
        "index spaces", "plan over part of a store or a mixture (the files then hold store ids)"
    )
    g.add_argument(
        "--space",
        type=path,
        default=None,
        metavar="SPACE.json",
        help="a space file (see the space-file reference); -n may be left out",
    )
    g.add_argument(
        "--split",
        type=_split,
        default=None,
        metavar="F,F,...",
        help="random_split(N, fractions or sizes) of a store of -n samples",
    )
    g.add_argument(
        "--part",
        type=samples,
        default=None,
        metavar="K",
        help="the part of --split to plan (0 for the first)",
    )
    g.add_argument(
        "--split-seed",
        type=seed_or_epoch,
        default=None,
        metavar="S",
        help="the split's seed (default 0), apart from --seed",
    )


def space_from_args(args: argparse.Namespace) -> Selection | Mixture | None:
    """The space the options give (None for ``range(N)``); UsageError,
    naming the flag, for options that do not go together."""
    if args.split is None:
        for flag, value in (("--part", args.part), ("--split-seed", args.split_seed)):
            if value is not None:
                raise UsageError(f"{flag} needs --split")
    if args.space is not None:
        if args.split is not None:
            raise UsageError("--space and --split are two ways to give the space: give one")
        try:
            space = load_space(args.space)
        except (ValueError, TypeError, OverflowError) as e:
            raise UsageError(f"--space {args.space}: {e}") from None
        store = store_size(space, len(space))
        if args.num_samples is not None and args.num_samples != store:
            raise UsageError(
                f"-n/--num-samples is {args.num_samples:,} but the space file's store has "
                f"{store:,} samples (leave -n out with --space)"
            )
        return space
    if args.split is None:
        return None
    if args.num_samples is None:
        raise UsageError("--split needs -n/--num-samples: the size of the store it splits")
    if args.part is None:
        raise UsageError(f"--split needs --part K: which of its {len(args.split)} parts to plan")
    if not args.part < len(args.split):
        raise UsageError(
            f"--part must be in [0, {len(args.split) - 1}] for --split with "
            f"{len(args.split)} parts, got {args.part}"
        )
    seed = 0 if args.split_seed is None else args.split_seed
    try:
        return split_space(args.num_samples, args.split, args.part, seed)
    except (ValueError, TypeError, OverflowError) as e:
        raise UsageError(f"--split: {e}") from None


def describe_space(space: Any) -> str:
    """A few words of a summary line: what the plan's ids are."""
    if isinstance(space, Selection):
        return f"a {space.form} selection of {len(space):,} of {space.num_samples:,} ids"
    if isinstance(space, Mixture):
        return f"a mixture of {len(space.sizes)} sources, quotas {space.quotas}"
    return f"range({space:,})"
