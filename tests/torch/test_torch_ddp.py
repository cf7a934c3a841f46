"""Real DDP runs (gloo, CPU) with ElasticBatchSampler: exactness, no hang, W-independence,
elastic resume. See tests/torch/_ddp_worker.py for the training loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import epochplan as ep
from tests.torch import _ddp_worker as worker

TIMEOUT = 420  # seconds for the whole group; a hang fails the test


def launch(script: list[str], world: int, out_dir: Path, extra_env: dict[str, str]) -> None:
    procs = []
    for rank in range(world):
        env = dict(
            os.environ,
            RANK=str(rank),
            WORLD_SIZE=str(world),
            OMP_NUM_THREADS="1",
            **extra_env,
        )
        log = open(out_dir / f"log-{rank}.txt", "w")  # noqa: SIM115
        procs.append((subprocess.Popen(script, env=env, stdout=log, stderr=log), log))
    try:
        for proc, _ in procs:
            proc.wait(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the process group hung for more than {TIMEOUT} s")
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    logs = "\n".join((out_dir / f"log-{r}.txt").read_text()[-3000:] for r in range(world))
    assert all(proc.returncode == 0 for proc, _ in procs), logs


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path_factory.mktemp("ddp")
    launch([sys.executable, worker.__file__, str(out)], 4, out, {})
    worlds = {name: world for name, (world, _, _) in worker.RUNS.items()}
    return {
        name: [json.loads((out / f"{name}-{r}.json").read_text()) for r in range(world)]
        for name, world in {**worlds, "resume": 2}.items()
    }


def reference(n: int) -> dict[int, list[float]]:
    """Plain full-batch SGD over each step's samples (positions [tG, (t+1)G) of the order)."""
    x, y = (torch.from_numpy(a) for a in worker.make_data(n))
    order = torch.from_numpy(np.asarray(ep.Permutation(n, seed=worker.SEED, epoch=worker.EPOCH)))
    p = worker.init_params()
    weight, bias = p["weight"].clone().requires_grad_(), p["bias"].clone().requires_grad_()
    out = {}
    for step in range(-(-n // worker.G)):
        ids = order[step * worker.G : (step + 1) * worker.G]
        loss = ((x[ids] @ weight.T).squeeze(1) + bias - y[ids]).pow(2).mean()
        gw, gb = torch.autograd.grad(loss, [weight, bias])
        with torch.no_grad():
            weight -= worker.LR * gw
            bias -= worker.LR * gb
        out[step] = weight.detach().reshape(-1).tolist() + bias.detach().tolist()
    return out


def params(run: list[dict[str, Any]]) -> dict[int, np.ndarray]:
    first = {int(k): np.array(v) for k, v in run[0]["params"].items()}
    for other in run[1:]:  # every rank holds the same model
        assert {int(k): v for k, v in other["params"].items()}.keys() == first.keys()
        for k, v in other["params"].items():
            assert np.array_equal(np.array(v), first[int(k)])
    return first


@pytest.mark.parametrize("name", list(worker.RUNS))
def test_each_sample_once_and_same_parameters_as_one_rank(
    runs: dict[str, list[dict[str, Any]]], name: str
) -> None:
    run = runs[name]
    n = worker.RUNS[name][2]
    steps = -(-n // worker.G)
    # The all-gathered real sample ids are range(n), each exactly once.
    gathered = [i for _, i in run[0]["gathered_ids"]]
    assert sorted(gathered) == list(range(n))
    assert sorted(i for r in run for _, i in r["ids"]) == list(range(n))
    # Every rank ran the same number of micro-batches (no Join needed), in
    # the filler run one of them a zero-weight filler.
    assert len({r["micro_batches"] for r in run}) == 1
    assert (sum(r["fillers"] for r in run) > 0) == (name == "filler")
    # After every step the parameters equal the single-rank run's (with and
    # without DataLoader workers), and plain SGD's.
    mine, ref = params(run), reference(n)
    ones = [params(runs[f"w1-{k}"]) for k in (0, 2)] if n == worker.N else []
    assert sorted(mine) == list(range(steps))
    for step in range(steps):
        for one in ones:
            np.testing.assert_allclose(mine[step], one[step], rtol=0, atol=1e-12)
        np.testing.assert_allclose(mine[step], ref[step], rtol=0, atol=1e-12)
    # The model really moved: the check is not vacuous.
    assert np.abs(mine[steps - 1] - mine[0]).max() > 0.1


def test_resume_on_two_ranks_from_three(runs: dict[str, list[dict[str, Any]]]) -> None:
    save = worker.SAVE_AFTER_STEP
    before = [(s, i) for s, i in runs["w3-2"][0]["gathered_ids"] if s <= save]
    after = runs["resume"][0]["gathered_ids"]
    # The W = 3 run stopped one micro-batch into step save + 1; the resume starts there.
    assert min(s for s, _ in after) == save + 1
    ids = [i for _, i in before + after]
    assert sorted(ids) == list(range(worker.N))
    resumed, one = params(runs["resume"]), params(runs["w1-0"])
    steps = -(-worker.N // worker.G)
    assert sorted(resumed) == list(range(save + 1, steps))
    for step in resumed:
        np.testing.assert_allclose(resumed[step], one[step], rtol=0, atol=1e-12)
