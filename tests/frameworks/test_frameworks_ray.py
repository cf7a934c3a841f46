"""Ray Train keeps the guarantees with `epochplan.ray.prepare_data_loader`, and
its own `prepare_data_loader` fails loudly naming the fix: a TorchTrainer
with 2 CPU workers on a local Ray trains every sample once per epoch,
reshuffled, to the parameters of a one-process run (the training function
is tests/frameworks/_ray_worker.py). Collected only where Ray is installed (the `ray`
extra): Ray is not in the `test` extra, for CI's time."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")

import epochplan.torch as et  # noqa: E402
from tests.frameworks import _ray_worker as worker  # noqa: E402


class _Loader:
    """The one-process reference's loader, with the set_epoch of the Ray one."""

    def __init__(self) -> None:
        self.sampler = worker.sampler(num_replicas=1, rank=0)
        self.loader = worker.loader_of(self.sampler)

    def set_epoch(self, epoch: int) -> None:
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Any:
        return iter(self.loader)


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer

    out = tmp_path_factory.mktemp("ray")
    # The workers import the training function's module from the repository's
    # tests package.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]
    )
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        TorchTrainer(
            worker.train_loop,
            train_loop_config={"out": str(out)},
            scaling_config=ScalingConfig(num_workers=2, use_gpu=False),
            run_config=RunConfig(storage_path=str(out / "store")),
        ).fit()
    finally:
        ray.shutdown()
    ranks = [json.loads((out / f"2-{r}.json").read_text()) for r in range(2)]
    reference = worker.train(_Loader(), worker.new_model(), distributed=False)
    return {"ranks": ranks, "ref": reference}


def steps_of(*results: dict[str, Any]) -> dict[tuple[int, int], list[int]]:
    steps: dict[tuple[int, int], list[int]] = {}
    for result in results:
        for epoch, step, *ids in result["seen"]:
            steps.setdefault((epoch, step), []).extend(ids)
    return {key: sorted(ids) for key, ids in steps.items()}


def test_rays_defaults_fail_loudly_naming_the_fix(results: dict[str, Any]) -> None:
    for rank in results["ranks"]:
        assert "a framework probably replaced the batch sampler" in rank["defaults"]
        assert "epochplan.ray.prepare_data_loader(loader)" in rank["defaults"]
        assert "Ray Train's prepare_data_loader(move_to_device=True)" in rank["device_move"]
        assert "epochplan.ray.prepare_data_loader(loader)" in rank["device_move"]


def test_two_workers_train_each_sample_once_per_epoch_reshuffled(results: dict[str, Any]) -> None:
    steps = steps_of(*results["ranks"])
    assert steps == steps_of(results["ref"])
    for epoch in range(worker.EPOCHS):
        ids = [i for (e, _), step in steps.items() if e == epoch for i in step]
        assert Counter(ids) == Counter(range(worker.N))
    assert steps[(0, 0)] != steps[(1, 0)]


def test_two_workers_end_with_the_parameters_of_one_process(results: dict[str, Any]) -> None:
    for rank in results["ranks"]:
        assert rank["types"] == [et.WeightedBatch.__name__]
        np.testing.assert_allclose(rank["params"], results["ref"]["params"], rtol=0, atol=1e-12)
