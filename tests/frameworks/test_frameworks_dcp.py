"""torch.distributed.checkpoint keeps the guarantees with
`epochplan.torch.dcp.PlanState`: a checkpoint saved mid-epoch on 3 ranks
(DataLoader workers prefetching) loads on 2, which go on with the next step:
every sample once per epoch, the global batches and the parameters of a
one-process run (real processes under torchrun, gloo on CPU; the worker is
tests/frameworks/_dcp_worker.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests._support.torchrun import torchrun
from tests.frameworks._dcp_worker import EPOCHS, STOP, N

WORKER = Path(__file__).with_name("_dcp_worker.py")
Runs = dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    out = tmp_path_factory.mktemp("dcp")
    modes = {"save": 3, "load": 2, "ref": 1}
    for mode, world in modes.items():
        torchrun(WORKER, world, str(out), mode, cwd=out)
    return {
        mode: [json.loads((out / f"{mode}-{r}.json").read_text()) for r in range(world)]
        for mode, world in modes.items()
    }


def steps_of(ranks: list[dict[str, Any]]) -> dict[tuple[int, int], list[int]]:
    steps: dict[tuple[int, int], list[int]] = {}
    for result in ranks:
        for epoch, step, *ids in result["seen"]:
            steps.setdefault((epoch, step), []).extend(ids)
    return {key: sorted(ids) for key, ids in steps.items()}


def test_three_ranks_save_two_ranks_resume_with_the_next_step(runs: Runs) -> None:
    before, after = steps_of(runs["save"]), steps_of(runs["load"])
    assert sorted(before) == [(0, s) for s in range(STOP)]
    assert min(after) == (0, STOP)  # nothing replayed, nothing skipped
    together = {**before, **after}
    assert together == steps_of(runs["ref"])
    for epoch in range(EPOCHS):
        ids = [i for (e, _), step in together.items() if e == epoch for i in step]
        assert Counter(ids) == Counter(range(N))


def test_the_resumed_run_ends_with_the_parameters_of_one_process(runs: Runs) -> None:
    reference = np.array(runs["ref"][0]["params"])
    for result in runs["load"]:
        np.testing.assert_allclose(result["params"], reference, rtol=0, atol=1e-12)
