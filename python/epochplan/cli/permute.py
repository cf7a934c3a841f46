"""``epochplan permute``: one permutation, timed and summarised."""

from __future__ import annotations

import argparse
import hashlib
import time
from typing import Any

import numpy as np

import epochplan as ep
from epochplan._args import size_label
from epochplan._system import available_memory
from epochplan.cli.arguments import Help, samples, seed_or_epoch
from epochplan.cli.progress import peak_rss_bytes, rate_text

PERMUTE_HELP = """\
Compute one permutation and print a short summary: time, throughput, peak
memory, the first ids and a checksum (BLAKE2b of the int64 ids, which is the
same on every machine and thread count).

examples:
  epochplan permute
  epochplan permute --num-samples 1e9 --kind cipher --seed 3 --epoch 1
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "permute",
        help="compute one permutation and summarise it",
        description=PERMUTE_HELP,
        formatter_class=Help,
    )
    p.add_argument(
        "-n", "--num-samples", type=samples, default=10**8, metavar="N", help="default 10^8"
    )
    p.add_argument("--seed", type=seed_or_epoch, default=0, metavar="S")
    p.add_argument("--epoch", type=seed_or_epoch, default=0, metavar="E")
    p.add_argument(
        "--kind",
        default="uniform",
        choices=("uniform", "cipher", "identity"),
        help="default uniform",
    )
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    n = args.num_samples
    avail = available_memory()
    need = (16 if args.kind == "uniform" else 8) * n
    if avail is not None and need > avail:
        raise ValueError(
            f"--num-samples {n:,} needs about {size_label(need)} of memory, "
            f"{size_label(avail)} is available"
        )
    base = peak_rss_bytes()
    t0 = time.perf_counter()
    ids = ep.permutation(n, seed=args.seed, epoch=args.epoch, kind=args.kind)
    dt = time.perf_counter() - t0
    peak = peak_rss_bytes()
    digest = hashlib.blake2b(np.ascontiguousarray(ids, dtype="<i8").data, digest_size=16)
    first = ", ".join(str(int(x)) for x in ids[:8])
    print(
        f"permutation({n:,}, seed={args.seed}, epoch={args.epoch}, kind={args.kind!r}): "
        f"{dt:.2f} s, {rate_text(n / max(dt, 1e-9))} ids/s, {ep.get_num_threads()} threads"
    )
    print(
        f"peak memory (RSS): {size_label(peak)} ({size_label(peak - base)} for the call, "
        f"output {size_label(ids.nbytes)})"
    )
    print(f"first ids: [{first}{', ...' if n > 8 else ''}]")
    print(f"blake2b-128 of the int64 ids: {digest.hexdigest()}")
    return 0
