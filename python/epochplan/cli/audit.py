"""``epochplan audit``: certify from the consumption logs that a run trained
on every sample exactly once."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from epochplan._native import Mixture, Selection
from epochplan._space_spec import load_space
from epochplan.audit import audit
from epochplan.cli.arguments import Help, UsageError, check_npy_file, path, positive

AUDIT_HELP = """\
Read the consumption logs a run wrote (epochplan.audit.ConsumptionLog: one
file a process, every process of every resume, on any world size) and
certify that every sample of every step from the run's start to its last
commit was trained on exactly once, in the step its plan puts it in. Each
process's records after its last commit (steps a resume replayed) are left
out; a torn last record (a crash while writing) is reported and not read.
Memory: a bitmap of the store, N/8 bytes an epoch (a plan over a mixture,
which may hold a sample more than once an epoch: its steps compared as
multisets, a batch of steps at a time). Exit status 0 when the
run is exactly once; otherwise the counts and the first violations (the
sample, the step it was planned in, where it was seen), exit status 1.

examples:
  epochplan audit logs/
  epochplan audit logs/ --space train.json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "audit", help="certify a run's consumption logs", description=AUDIT_HELP,
        formatter_class=Help,
    )  # fmt: skip
    p.add_argument("dir", type=path, metavar="DIR", help="the directory of the logs")
    p.add_argument("--space", type=path, default=None, metavar="SPACE.json",
                   help="the plan's space file, for a plan over a space")  # fmt: skip
    p.add_argument("--lengths", type=path, default=None, metavar="FILE",
                   help="a token plan's lengths (.npy)")  # fmt: skip
    p.add_argument("--loss-tokens", type=path, default=None, metavar="FILE",
                   help="a token plan's loss tokens (.npy)")  # fmt: skip
    p.add_argument("--limit", type=positive, default=20, metavar="K",
                   help="violations of each kind listed (all are counted)")  # fmt: skip
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    space: Selection | Mixture | None = None
    if args.space is not None:
        try:
            space = load_space(args.space)
        except (ValueError, TypeError, OverflowError) as e:
            raise UsageError(f"--space {args.space}: {e}") from None
    arrays: dict[str, Any] = {}
    for flag, key in (("--lengths", "lengths"), ("--loss-tokens", "loss_tokens")):
        given = getattr(args, key)
        if given is not None:
            check_npy_file(flag, given)
            arrays[key] = np.load(given, mmap_mode="r")
    report = audit(args.dir, space=space, limit=args.limit, **arrays)
    print(report.summary())
    return 0 if report.ok else 1
