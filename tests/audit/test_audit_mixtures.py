"""The audit of a plan over a Mixture, which holds a sample more than once
an epoch when a source is taken in more than one pass: each step's ids are
compared as multisets, so a clean run resumed on another world size is
certified, and a replayed, a skipped or a swapped step is found, counted as
the bitmap audit counts it (duplicate, missing, misplaced)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan.audit import ConsumptionLog, audit
from epochplan.cli import main

# Two sources of 50 and 30 samples, 200 an epoch at weights 2 : 1: every
# sample comes back in later passes of its source within one epoch.
MIXTURE = ep.Mixture([50, 30], weights=[2, 1], num_samples=200, seed=3)
G = 16


def plan_of(epoch: int) -> ep.EpochPlan:
    """The samplers' plan of `epoch`: each epoch continues the passes."""
    plan = ep.EpochPlan(MIXTURE, G, seed=4)
    for e in range(1, epoch + 1):
        plan = ep.EpochPlan(MIXTURE.epoch(e, plan.space.consumed_after), G, seed=4, epoch=e)
    return plan


def run(logs: Path, world: int, epoch: int, steps: range, commit_at: int, edit=None) -> None:
    """Logs of `world` ranks consuming `steps` of `epoch`, committed at step
    `commit_at`; `edit(epoch, step, rank, ids)` may change what a rank
    consumed (None: nothing)."""
    plan = plan_of(epoch)
    start = plan.at_step(steps.start)
    for rank in range(world):
        with ConsumptionLog(logs, start.state_dict(), rank=rank, world_size=world) as log:
            for step in steps:
                ids = plan.step_indices(step, rank, world)
                ids = ids if edit is None else edit(epoch, step, rank, ids)
                if ids is not None:
                    log.record(epoch, step, ids)
            log.commit(plan.at_step(commit_at).state_dict())


def whole_run(logs: Path, edit=None) -> None:
    """Epoch 0 on 3 ranks to step 7, then on 2 ranks to the end of epoch 1."""
    steps = plan_of(0).num_steps
    run(logs, 3, 0, range(0, 9), 7, edit)  # steps 7 and 8 rolled back by the resume
    run(logs, 2, 0, range(7, steps), steps, edit)
    run(logs, 2, 1, range(0, plan_of(1).num_steps), plan_of(1).num_steps, edit)


def test_the_epochs_hold_repeats_and_a_clean_resumed_run_is_certified(tmp_path: Path) -> None:
    ids = np.concatenate([plan_of(0).step_indices(s, 0, 1) for s in range(plan_of(0).num_steps)])
    assert len(ids) == 200 and len(np.unique(ids)) == 80
    whole_run(tmp_path)
    report = audit(tmp_path, space=MIXTURE)
    assert report.ok, report.summary()
    assert report.expected == report.consumed == 400
    assert report.rolled_back == 2 * G
    assert (report.start, report.end) == ((0, 0), (1, plan_of(1).num_steps))


def test_a_replayed_step_is_duplicated_and_a_skipped_one_missing(tmp_path: Path) -> None:
    plan = plan_of(0)
    skipped = plan.step_indices(4, 0, 3)  # on 3 ranks, before the resume
    # A step of the 2-rank run sharing no sample with the skipped share (else
    # the replay would make up for the skip: one sample misplaced).
    apart = [s for s in range(7, plan.num_steps)
             if not set(plan.step_indices(s, 1, 2).tolist()) & set(skipped.tolist())]  # fmt: skip
    step = apart[0]
    replayed = plan.step_indices(step, 1, 2)

    def edit(epoch: int, at: int, rank: int, ids: np.ndarray) -> np.ndarray | None:
        if epoch == 0 and (at, rank, len(ids)) == (step, 1, len(replayed)):
            return np.concatenate([ids, ids])
        if epoch == 0 and at == 4 and rank == 0 and len(ids) == len(skipped):
            return None
        return ids

    whole_run(tmp_path, edit)
    report = audit(tmp_path, space=MIXTURE)
    assert report.duplicates == len(replayed)
    assert report.missing == len(skipped)
    assert report.misplaced == 0 and not report.ok
    missing = [v for v in report.violations if v.kind == "missing"]
    assert {v.sample for v in missing} == set(skipped.tolist())
    assert {(v.epoch, v.planned_step) for v in missing} == {(0, 4)}
    dups = [v for v in report.violations if v.kind == "duplicate"]
    assert sorted(v.sample for v in dups) == sorted(set(replayed.tolist()))
    assert all(s.step == step and s.rank == 1 and s.epoch == 0 for v in dups for s in v.seen)


def test_a_swap_between_steps_is_misplaced_not_lost(tmp_path: Path) -> None:
    plan = plan_of(0)
    a, b = plan.step_indices(2, 0, 1), plan.step_indices(5, 0, 1)
    # Two samples that step 5 plans and step 2 does not (a mixture may hold
    # the same sample in both steps).
    x = next(int(i) for i in a if i not in set(b.tolist()))
    y = next(int(i) for i in b if i not in set(a.tolist()))

    def edit(epoch: int, step: int, rank: int, ids: np.ndarray) -> np.ndarray:
        ids = ids.copy()
        if step in (2, 5):
            ids[ids == (x if step == 2 else y)] = -7  # marked, then swapped
            ids[ids == -7] = y if step == 2 else x
        return ids

    run(tmp_path, 1, 0, range(plan.num_steps), plan.num_steps, edit)
    report = audit(tmp_path, space=MIXTURE)
    assert (report.misplaced, report.duplicates, report.missing) == (2, 0, 0)
    seen = {(v.sample, v.planned_step, v.seen[0].step) for v in report.violations}
    assert {(y, 5, 2), (x, 2, 5)} <= seen


def test_the_logs_of_a_mixture_need_the_mixture(tmp_path: Path) -> None:
    whole_run(tmp_path)
    with pytest.raises(TypeError, match="space must be the plan's Mixture"):
        audit(tmp_path)


def test_the_command_line_audits_a_mixture_from_its_space_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    logs = tmp_path / "logs"
    whole_run(logs)
    spec = tmp_path / "mix.json"
    spec.write_text(
        json.dumps({"mixture": [50, 30], "weights": [2, 1], "num_samples": 200, "seed": 3})
    )
    assert main(["audit", str(logs), "--space", str(spec)]) == 0
    assert "exactly once" in capsys.readouterr().out
