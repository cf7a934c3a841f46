"""A small plan directory, a rank file's path and a manifest edit, shared by
the plan-file and PlanSampler tests."""

from __future__ import annotations

import json
from pathlib import Path

from epochplan import PlanSpec
from epochplan.planfile import MANIFEST, write_plan


def rank_file(d: Path, epoch: int, rank: int) -> Path:
    return d / f"epoch-{epoch:04d}" / f"rank-{rank:05d}.npy"


def edit_manifest(d: Path, change: dict[str, object]) -> None:
    m = json.loads((d / MANIFEST).read_text())
    m.update(change)
    (d / MANIFEST).write_text(json.dumps(m))


def write_small_plan(out: Path) -> Path:
    """Writes a plan of 40,000 samples in steps of 1,000 on 4 ranks, epochs 0
    and 1, to `out`, and returns `out`."""
    write_plan(out, PlanSpec(40_000, 1000), 4, epochs=(0, 1))
    return out
