"""``epochplan megatron-cache``: write a megatron-core index cache offline."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from epochplan.cli.arguments import Help, UsageError, count, positive

MEGATRON_CACHE_HELP = """\
Write the index cache megatron-core 0.16.1 builds before training (each
GPTDataset's document, sample and shuffle indices, each BlendedDataset's
dataset and dataset sample indices, under Megatron's own file names and md5
of the unique description), from the .bin/.idx prefixes and the same
arguments as the training run. Point the run's --data-cache-path at the
directory: Megatron loads every index and builds none, byte-identical to
what it would have built.

--data-path takes Megatron-LM's form: prefixes, or weight-prefix pairs.
--tokenizer-identifiers is the tokenizer's unique_identifiers as JSON (or
@file), as Megatron writes it in its description.txt files.

examples:
  epochplan megatron-cache --data-path 0.3 web 0.7 code --split 969,30,1 \\
      --train-samples 1e6 --valid-samples 1e4 --test-samples 100 \\
      --seq-length 4096 --seed 1234 --data-cache-path cache/ \\
      --tokenizer-identifiers '{"class": "my.Tokenizer"}'
"""


def _samples(text: str) -> int | None:
    """A sample count (``1e6``, ``10**6``, ...) or ``none``."""
    return None if text.lower() == "none" else count(text)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "megatron-cache",
        help="write a megatron-core index cache offline",
        description=MEGATRON_CACHE_HELP,
        formatter_class=Help,
    )
    p.add_argument("--data-path", nargs="+", metavar="ARG", help="the blend")
    p.add_argument("--split", default=None, help="train,valid,test weights (default 969, 30, 1)")
    for name in ("train", "valid", "test"):
        p.add_argument(
            f"--{name}-data-path",
            nargs="+",
            metavar="ARG",
            help=f"the {name} split's own blend (instead of --data-path and --split)",
        )
    for name in ("train", "valid", "test"):
        p.add_argument(
            f"--{name}-samples", type=_samples, default=None, metavar="N", help="samples (or none)"
        )
    p.add_argument("--seq-length", type=positive, required=True, metavar="S")
    p.add_argument("--seed", type=count, default=1234, help="random_seed (default 1234)")
    p.add_argument("--data-cache-path", type=Path, required=True, metavar="DIR")
    p.add_argument("--tokenizer-identifiers", required=True, metavar="JSON")
    p.add_argument("--mid-level-dataset-surplus", type=float, default=0.005, metavar="F")
    p.add_argument(
        "--no-extra-token", action="store_true", help="add_extra_token_to_sequence=False"
    )
    p.add_argument(
        "--keep-last-partial-validation-sequence",
        action="store_true",
        help="drop_last_partial_validation_sequence=False",
    )
    p.set_defaults(run=run)


def _blend(args: list[str]) -> tuple[list[str], list[float] | None]:
    """Megatron-LM's ``get_blend_from_list``: an even list of numbers and
    prefixes is weighted, anything else is prefixes only."""
    if len(args) % 2 == 0:
        try:
            weights = [float(w) for w in args[0::2]]
        except ValueError:
            return [a.strip() for a in args], None
        return [a.strip() for a in args[1::2]], weights
    return [a.strip() for a in args], None


def _tokenizer(text: str) -> dict[str, Any]:
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--tokenizer-identifiers must be JSON: {e}") from None
    if not isinstance(value, dict):
        raise UsageError("--tokenizer-identifiers must be a JSON object")
    return value


def run(args: argparse.Namespace) -> int:
    from epochplan.compat.megatron.cache import write_cache

    t0 = time.perf_counter()
    per_split = [args.train_data_path, args.valid_data_path, args.test_data_path]
    if any(per_split):
        if args.data_path or args.split:
            raise UsageError("--train/valid/test-data-path exclude --data-path and --split")
        blend, split, blend_per_split = None, None, [p and _blend(p) for p in per_split]
    elif args.data_path:
        blend, split, blend_per_split = _blend(args.data_path), args.split or "969, 30, 1", None
    else:
        raise UsageError("give --data-path, or --train-data-path and the others")
    written = write_cache(
        args.data_cache_path,
        blend,
        split,
        [args.train_samples, args.valid_samples, args.test_samples],
        sequence_length=args.seq_length,
        random_seed=args.seed,
        tokenizer=_tokenizer(args.tokenizer_identifiers),
        mid_level_dataset_surplus=args.mid_level_dataset_surplus,
        add_extra_token_to_sequence=not args.no_extra_token,
        drop_last_partial_validation_sequence=not args.keep_last_partial_validation_sequence,
        blend_per_split=blend_per_split,
    )
    seconds = time.perf_counter() - t0
    print(f"wrote {len(written)} datasets' indices to {args.data_cache_path} in {seconds:.2f} s")
    return 0
