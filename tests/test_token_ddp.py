"""Token plans under real DDP (gloo, CPU, float64): a per-token loss over
variable-length sequences (padding and a loss mask), gradient accumulation
with no_sync, weights W / T_t: after every step the parameters equal those of
one device that takes the whole global batch and the mean over its loss
tokens, to 1e-12, for W = 1, 2, 3, 4."""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import epochplan as ep  # noqa: E402
from epochplan.torch import ElasticBatchSampler  # noqa: E402

N, G, DIM, MAX_TOKENS, LR = 40, 12, 3, 20, 0.1
LENGTHS = np.random.default_rng(5).integers(1, 11, N).astype(np.int32)
LOSS_TOKENS = (LENGTHS - 1).astype(np.int32)  # each token predicts the next
TOKENS = np.random.default_rng(6).standard_normal((N, int(LENGTHS.max()), DIM))


def init_params() -> torch.Tensor:
    return torch.tensor(np.random.default_rng(7).standard_normal((DIM, DIM)), dtype=torch.float64)


def summed_token_losses(
    predict: Callable[[torch.Tensor], torch.Tensor], ids: list[int]
) -> torch.Tensor:
    """Each sample's per-token squared errors summed over its loss tokens,
    on a padded batch with a loss mask."""
    width = int(LENGTHS[ids].max())
    x = torch.tensor(TOKENS[ids, :width], dtype=torch.float64)
    mask = torch.tensor(
        np.arange(width - 1)[None, :] < LOSS_TOKENS[ids][:, None], dtype=torch.float64
    )
    errors = ((predict(x[:, :-1]) - x[:, 1:]) ** 2).sum(-1)
    return (errors * mask).sum(-1)


def worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = torch.nn.Linear(DIM, DIM, bias=False, dtype=torch.float64)
        with torch.no_grad():
            model.weight.copy_(init_params())
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        sampler = ElasticBatchSampler(
            N,
            G,
            None,
            num_replicas=world,
            rank=rank,
            lengths=LENGTHS,
            loss_tokens=LOSS_TOKENS,
            max_tokens=MAX_TOKENS,
        )
        history = []
        for batch in sampler:
            weights = torch.tensor(batch.weights, dtype=torch.float64)
            # The token-weighted loss: weights times each sample's summed token loss.
            ids = list(batch)
            if batch.step_end:
                (weights * summed_token_losses(ddp, ids)).sum().backward()
                opt.step()
                opt.zero_grad()
                history.append(model.weight.detach().flatten().tolist())
            else:
                with ddp.no_sync():
                    (weights * summed_token_losses(ddp, ids)).sum().backward()
        Path(out, f"{world}-{rank}.json").write_text(json.dumps(history))
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def reference() -> list[list[float]]:
    """One device, the whole global batch, the mean over its loss tokens."""
    weight = init_params().requires_grad_(True)

    def predict(x: torch.Tensor) -> torch.Tensor:
        return x @ weight.T

    plan = ep.EpochPlan(N, G)
    history = []
    for step in range(plan.num_steps):
        ids = plan.step_indices(step, 0, 1).tolist()
        loss = summed_token_losses(predict, ids).sum() / LOSS_TOKENS[ids].sum()
        loss.backward()
        with torch.no_grad():
            weight -= LR * weight.grad
            weight.grad = None
        history.append(weight.detach().flatten().tolist())
    return history


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_token_weighted_ddp_steps_equal_one_device_with_the_whole_batch(
    world: int, tmp_path: Path
) -> None:
    import torch.multiprocessing as mp

    mp.spawn(worker, args=(world, free_port(), str(tmp_path)), nprocs=world, join=True)
    expected = np.array(reference())
    assert len(expected) == 4
    for rank in range(world):
        got = np.array(json.loads((tmp_path / f"{world}-{rank}.json").read_text()))
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)
    # The run moved the parameters: the comparison is not of untouched values.
    assert np.abs(expected[-1] - init_params().flatten().numpy()).max() > 1e-3
