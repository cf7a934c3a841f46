"""A rank file's path and a manifest edit, shared by the plan-file and
PlanSampler tests."""

from __future__ import annotations

import json
from pathlib import Path

from epochplan.planfile import MANIFEST


def rank_file(d: Path, epoch: int, rank: int) -> Path:
    return d / f"epoch-{epoch:04d}" / f"rank-{rank:05d}.npy"


def edit_manifest(d: Path, change: dict[str, object]) -> None:
    m = json.loads((d / MANIFEST).read_text())
    m.update(change)
    (d / MANIFEST).write_text(json.dumps(m))
