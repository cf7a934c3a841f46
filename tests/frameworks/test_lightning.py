"""A real Lightning run (CPU, 2 processes, DDP over gloo, the default
use_distributed_sampler=True) with epochplan's DistributedSampler: Lightning
keeps it, as it keeps any torch DistributedSampler, and every sample is seen
exactly once over the ranks in each epoch (no second sharding). See
tests/frameworks/_lightning_worker.py for the training script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import pytest

import epochplan.torch as et
from tests.frameworks import _lightning_worker as worker

TIMEOUT = 180  # seconds; a hang fails the test


@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    pytest.importorskip("lightning")
    out = tmp_path_factory.mktemp("lightning")
    env = dict(os.environ, OMP_NUM_THREADS="1", MASTER_ADDR="127.0.0.1", PYTHONWARNINGS="ignore")
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "MASTER_PORT"):
        env.pop(name, None)
    with open(out / "log.txt", "w") as log:
        proc = subprocess.Popen(
            [sys.executable, worker.__file__, str(out)], env=env, stdout=log, stderr=log
        )
        try:
            proc.wait(timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the Lightning run took more than {TIMEOUT} s")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, (out / "log.txt").read_text()[-5000:]
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(2)]


def test_lightning_keeps_our_sampler(ranks: list[dict[str, Any]]) -> None:
    for r, report in enumerate(ranks):
        assert (report["rank"], report["world_size"], report["backend"]) == (r, 2, "gloo")
        assert report["kept_our_sampler"], report["sampler_type"]
        assert report["sampler_type"] == "DistributedSampler"
        assert report["sampler_rank"] == [r, 2]
        assert report["sampler_epoch"] == worker.EPOCHS - 1  # Lightning called set_epoch


def test_every_sample_is_seen_once_per_epoch_over_the_ranks(ranks: list[dict[str, Any]]) -> None:
    for epoch in range(worker.EPOCHS):
        shares = [report["seen"][str(epoch)] for report in ranks]
        # Sharded once: each rank has half the data, not a quarter.
        assert [len(s) for s in shares] == [worker.N // 2] * 2
        assert sorted(shares[0] + shares[1]) == list(range(worker.N))
        # In our order: rank r serves positions r, r + 2, ... of the epoch's order.
        for r, share in enumerate(shares):
            expected = et.DistributedSampler(range(worker.N), 2, r, seed=worker.SEED)
            expected.set_epoch(epoch)
            assert share == list(expected)
    assert ranks[0]["seen"]["0"] != ranks[0]["seen"]["1"]  # reshuffled per epoch
