"""accelerate keeps the guarantees: its own `prepare` is refused loudly, and
`epochplan.accelerate.prepare_data_loader` trains every sample once per epoch,
reshuffled, with the same parameters on 2 processes as on 1 (real processes,
gloo on CPU; the worker is tests/_accelerate_worker.py)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("accelerate")

from _accelerate_worker import EPOCHS, N
from _torchrun import torchrun

WORKER = Path(__file__).with_name("_accelerate_worker.py")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[int, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("accelerate")
    for world in (1, 2):
        torchrun(WORKER, world, str(out), cwd=out)
    return {w: [json.loads((out / f"{w}-{r}.json").read_text()) for r in range(w)] for w in (1, 2)}


def steps_of(ranks: list[dict[str, Any]]) -> dict[tuple[int, int], list[int]]:
    """(epoch, step) -> the sorted real sample ids of that step over all ranks."""
    steps: dict[tuple[int, int], list[int]] = {}
    for result in ranks:
        for epoch, step, *ids in result["seen"]:
            steps.setdefault((epoch, step), []).extend(ids)
    return {key: sorted(ids) for key, ids in steps.items()}


@pytest.mark.parametrize("kind", ["elastic", "distributed"])
def test_accelerates_own_prepare_is_refused_naming_the_fix(
    runs: dict[int, list[dict[str, Any]]], kind: str
) -> None:
    for result in runs[2]:
        message = result[f"refused_{kind}"]
        assert "accelerate's BatchSamplerShard" in message
        assert "epochplan.accelerate.prepare_data_loader(loader, accelerator)" in message


def test_one_process_is_not_sharded_so_nothing_is_refused(
    runs: dict[int, list[dict[str, Any]]],
) -> None:
    assert runs[1][0]["refused_elastic"] == "not refused"


def test_every_sample_once_per_epoch_on_two_processes(
    runs: dict[int, list[dict[str, Any]]],
) -> None:
    steps = steps_of(runs[2])
    for epoch in range(EPOCHS):
        ids = [i for (e, _), step in steps.items() if e == epoch for i in step]
        assert Counter(ids) == Counter(range(N))


def test_the_global_batches_are_those_of_one_process_and_reshuffled(
    runs: dict[int, list[dict[str, Any]]],
) -> None:
    two, one = steps_of(runs[2]), steps_of(runs[1])
    assert two == one
    assert [two[(0, s)] for s in range(3)] != [two[(1, s)] for s in range(3)]


def test_parameters_equal_the_one_process_run(runs: dict[int, list[dict[str, Any]]]) -> None:
    reference = np.array(runs[1][0]["params"])
    for result in runs[2]:
        np.testing.assert_allclose(result["params"], reference, rtol=0, atol=1e-12)


def test_batches_stay_weighted_batches_through_the_device_move(
    runs: dict[int, list[dict[str, Any]]],
) -> None:
    assert all(result["types"] == ["WeightedBatch"] for result in runs[2])
