"""accelerate keeps the guarantees: its own `prepare` is refused loudly, and a
loader prepared by `epochplan.accelerate.prepare_data_loader`, with the
plan's position in accelerate's checkpoints (`register_for_checkpointing`
of a PlanState), trains every sample once per epoch, reshuffled; a run on 2
processes saved mid-epoch 2 (`save_state`) resumes (`load_state`) on 1 and
on 3 processes with the next step, to the parameters of a one-process run
(real processes under torchrun, gloo on CPU; the worker is
tests/frameworks/_accelerate_worker.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("accelerate")

from tests._support.torchrun import torchrun
from tests.frameworks._accelerate_worker import EPOCHS, STOP, N

WORKER = Path(__file__).with_name("_accelerate_worker.py")
Runs = dict[str, list[dict[str, Any]]]
# name: (processes, loads the checkpoint of "stop")
RUNS = {"ref": (1, False), "stop": (2, False), "to1": (1, True), "to3": (3, True)}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    out = tmp_path_factory.mktemp("accelerate")
    for name, (world, resumes) in RUNS.items():
        checkpoint = [str(out / "checkpoint")] if resumes else []
        torchrun(WORKER, world, str(out), name, *checkpoint, cwd=out)
    return {
        name: [json.loads((out / f"{name}-{r}.json").read_text()) for r in range(world)]
        for name, (world, _) in RUNS.items()
    }


def steps_of(*runs: list[dict[str, Any]]) -> dict[tuple[int, int], list[int]]:
    """(epoch, step) -> the sorted real sample ids of that step over all ranks."""
    steps: dict[tuple[int, int], list[int]] = {}
    for ranks in runs:
        for result in ranks:
            for epoch, step, *ids in result["seen"]:
                steps.setdefault((epoch, step), []).extend(ids)
    return {key: sorted(ids) for key, ids in steps.items()}


@pytest.mark.parametrize("kind", ["elastic", "distributed"])
def test_accelerates_own_prepare_is_refused_naming_the_fix(runs: Runs, kind: str) -> None:
    for result in runs["stop"]:
        message = result[f"refused_{kind}"]
        assert "accelerate's BatchSamplerShard" in message
        assert "epochplan.accelerate.prepare_data_loader(loader, accelerator)" in message


def test_one_process_is_not_sharded_so_nothing_is_refused(runs: Runs) -> None:
    assert runs["ref"][0]["refused_elastic"] == "not refused"


def test_the_one_process_run_trains_each_sample_once_per_epoch_reshuffled(runs: Runs) -> None:
    steps = steps_of(runs["ref"])
    for epoch in range(EPOCHS):
        ids = [i for (e, _), step in steps.items() if e == epoch for i in step]
        assert Counter(ids) == Counter(range(N))
    assert steps[(0, 0)] != steps[(1, 0)]


@pytest.mark.parametrize("resumed", ["to1", "to3"])
def test_a_resume_on_another_number_of_processes_goes_on_with_the_next_step(
    runs: Runs, resumed: str
) -> None:
    before, after = steps_of(runs["stop"]), steps_of(runs[resumed])
    assert len(before) == STOP and max(before) == (1, 1)
    assert min(after) == (1, 2)  # nothing replayed, nothing skipped
    assert {**before, **after} == steps_of(runs["ref"])


@pytest.mark.parametrize("resumed", ["to1", "to3"])
def test_a_resume_ends_with_the_parameters_of_one_process(runs: Runs, resumed: str) -> None:
    reference = np.array(runs["ref"][0]["params"])
    for result in runs[resumed]:
        np.testing.assert_allclose(result["params"], reference, rtol=0, atol=1e-12)


def test_batches_stay_weighted_batches_through_the_device_move(runs: Runs) -> None:
    assert all(r["types"] == ["WeightedBatch"] for name in RUNS for r in runs[name])
