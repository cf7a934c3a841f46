"""HF Trainer keeps the guarantees with `epochplan.transformers.PlanTrainer`:
every sample once per epoch, epochs reshuffled, the global batches and the
parameters of a one-process run, and a resume mid-epoch 2 from a Trainer
checkpoint written on 2 processes, continued on 1 and on 3, exactly once
(real processes under torchrun, gloo on CPU, a float64 tiny GPT-2 built from
a config; the worker is tests/frameworks/_trainer_worker.py)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from epochplan.transformers import SAMPLER_STATE_NAME
from tests._support.torchrun import torchrun
from tests.frameworks._trainer_worker import EPOCHS, N

WORKER = Path(__file__).with_name("_trainer_worker.py")
STOP = 4  # of 3 steps an epoch: step 1 of the second epoch

Runs = dict[str, list[dict[str, Any]]]

# name: (processes, arguments)
RUNS: dict[str, tuple[int, list[str]]] = {
    "ref": (1, ["--then-tokens", "tokens-ref"]),
    "stop": (2, ["--stop-after", str(STOP)]),
    "to1": (1, ["--resume", f"stop/checkpoint-{STOP}"]),
    "to3": (3, ["--resume", f"stop/checkpoint-{STOP}"]),
    "tokens": (2, ["--tokens"]),
}


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("trainer")


@pytest.fixture(scope="module")
def runs(out: Path) -> Runs:
    os.environ["HF_HUB_OFFLINE"] = "1"
    for name, (world, args) in RUNS.items():
        args = [str(out / a) if a.startswith("stop/") else a for a in args]
        torchrun(WORKER, world, str(out), name, *args, cwd=out)
    worlds = {**{name: world for name, (world, _) in RUNS.items()}, "tokens-ref": 1}
    return {
        name: [json.loads((out / f"{name}-{r}.json").read_text()) for r in range(world)]
        for name, world in worlds.items()
    }


def steps_of(*runs: list[dict[str, Any]]) -> dict[tuple[int, int], list[int]]:
    """(epoch, step) -> the sorted real sample ids of that step over all ranks."""
    steps: dict[tuple[int, int], list[int]] = {}
    for ranks in runs:
        for result in ranks:
            for epoch, step, *ids in result["seen"]:
                steps.setdefault((epoch, step), []).extend(ids)
    return {key: sorted(ids) for key, ids in steps.items()}


def assert_each_sample_once_per_epoch(steps: dict[tuple[int, int], list[int]]) -> None:
    for epoch in range(EPOCHS):
        ids = [i for (e, _), step in steps.items() if e == epoch for i in step]
        assert Counter(ids) == Counter(range(N)), f"epoch {epoch}"


def max_diff(ranks: list[dict[str, Any]], reference: list[dict[str, Any]]) -> float:
    ref = np.array(reference[0]["params"])
    return max(float(np.abs(np.array(r["params"]) - ref).max()) for r in ranks)


def test_a_token_plan_on_two_processes_trains_each_sample_once_reshuffled(runs: Runs) -> None:
    steps = steps_of(runs["tokens"])
    assert_each_sample_once_per_epoch(steps)
    assert steps == steps_of(runs["tokens-ref"])
    assert [steps[(0, s)] for s in range(3)] != [steps[(1, s)] for s in range(3)]


def test_a_token_plan_on_two_processes_ends_with_the_parameters_of_one(runs: Runs) -> None:
    assert max_diff(runs["tokens"], runs["tokens-ref"]) <= 1e-12


def test_two_processes_step_by_step_equal_one(runs: Runs, out: Path) -> None:
    from safetensors.torch import load_file

    for step in range(1, STOP + 1):
        two = load_file(out / "stop" / f"checkpoint-{step}" / "model.safetensors")
        one = load_file(out / "ref" / f"checkpoint-{step}" / "model.safetensors")
        assert max(float((two[k] - one[k]).abs().max()) for k in one) <= 1e-12


def test_a_plain_trainer_sharding_the_sampler_again_is_refused(runs: Runs) -> None:
    for result in runs["stop"]:
        assert "accelerate's BatchSamplerShard" in result["plain"]
        assert "epochplan.transformers.PlanTrainer" in result["plain"]


def test_every_checkpoint_holds_the_samplers_state(runs: Runs, out: Path) -> None:
    for step in range(1, STOP + 1):
        state = json.loads((out / "stop" / f"checkpoint-{step}" / SAMPLER_STATE_NAME).read_text())
        # 3 steps of 8 samples an epoch (22 samples): after the last step of
        # an epoch the state is that epoch's end.
        epoch, at = divmod(step - 1, 3)
        assert (state["epoch"], state["cursor"]) == (epoch, min((at + 1) * 8, N))


@pytest.mark.parametrize("resumed", ["to1", "to3"])
def test_a_resume_on_another_number_of_processes_trains_each_sample_once(
    runs: Runs, resumed: str
) -> None:
    before, after = steps_of(runs["stop"]), steps_of(runs[resumed])
    assert set(before) == {(0, 0), (0, 1), (0, 2), (1, 0)}
    assert steps_of(runs["ref"])[(0, 0)] != steps_of(runs["ref"])[(1, 0)]  # reshuffled
    assert set(after) == {(1, 1), (1, 2)}  # no batch skipped, none replayed
    assert {**before, **after} == steps_of(runs["ref"])
    assert_each_sample_once_per_epoch({**before, **after})
    assert all(r["global_step"] == 2 * 3 for r in runs[resumed])


@pytest.mark.parametrize("resumed", ["to1", "to3"])
def test_a_resume_ends_with_the_parameters_of_one_process(runs: Runs, resumed: str) -> None:
    assert max_diff(runs[resumed], runs["ref"]) <= 1e-12
