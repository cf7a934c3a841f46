"""Token plans under real DDP (gloo, CPU, float64): a per-token loss over
variable-length sequences (padding and a loss mask), gradient accumulation
with no_sync, weights W / T_t: after every step the parameters equal those of
one device that takes the whole global batch and the mean over its loss
tokens, to 1e-12, for W = 1, 2, 3, 4. Then through a DataLoader with two
workers (wrap_dataset and collate, padding in the workers), stopped after a
step on W = 3 and resumed from the sampler's state on W = 2: every sample
once, and the same parameters after every step."""

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
from epochplan import PlanSpec, Tokens  # noqa: E402
from epochplan.torch import ElasticBatchSampler  # noqa: E402
from tests._support.torchrun import exit_without_finalization  # noqa: E402

N, G, DIM, MAX_TOKENS, LR = 40, 12, 3, 20, 0.1
LENGTHS = np.random.default_rng(5).integers(1, 11, N).astype(np.int32)
LOSS_TOKENS = (LENGTHS - 1).astype(np.int32)  # each token predicts the next
TOKENS = np.random.default_rng(6).standard_normal((N, int(LENGTHS.max()), DIM))


def init_params() -> torch.Tensor:
    return torch.tensor(np.random.default_rng(7).standard_normal((DIM, DIM)), dtype=torch.float64)


class Sequences(torch.utils.data.Dataset):
    """Sample i: its LENGTHS[i] token vectors and its count of loss tokens."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor(TOKENS[i, : LENGTHS[i]], dtype=torch.float64), int(LOSS_TOKENS[i])


def pad(samples: list[tuple[torch.Tensor, int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The sequences padded with zeros to the longest, and the loss mask over
    the positions that predict a next token."""
    width = max(len(x) for x, _ in samples)
    x = torch.zeros(len(samples), width, DIM, dtype=torch.float64)
    mask = torch.zeros(len(samples), width - 1, dtype=torch.float64)
    for row, (seq, loss_tokens) in enumerate(samples):
        x[row, : len(seq)] = seq
        mask[row, :loss_tokens] = 1.0
    return x, mask


def padded_token_losses(
    predict: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Each sample's per-token squared errors summed over its loss tokens."""
    errors = ((predict(x[:, :-1]) - x[:, 1:]) ** 2).sum(-1)
    return (errors * mask).sum(-1)


def summed_token_losses(
    predict: Callable[[torch.Tensor], torch.Tensor], ids: list[int]
) -> torch.Tensor:
    """Each sample's per-token squared errors summed over its loss tokens,
    on a padded batch with a loss mask."""
    return padded_token_losses(predict, *pad([Sequences()[i] for i in ids]))


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
            PlanSpec(N, G, tokens=Tokens(LENGTHS, LOSS_TOKENS)),
            None,
            max_tokens=MAX_TOKENS,
            rank=rank,
            num_replicas=world,
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
        dist.barrier()  # every rank is done with the group before any tears it down
    finally:
        dist.destroy_process_group()
    exit_without_finalization()


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


STOP = 2  # the W = 3 run stops after this many of the epoch's 4 steps


def loader_worker(rank: int, world: int, port: int, out: str, stop: int | None) -> None:
    """One rank through a DataLoader with two workers: stops after `stop`
    steps (rank 0 saves the sampler's state and the model), or resumes from
    what was saved when `stop` is None."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model = torch.nn.Linear(DIM, DIM, bias=False, dtype=torch.float64)
        with torch.no_grad():
            model.weight.copy_(init_params())
        sampler = ElasticBatchSampler(
            PlanSpec(len(Sequences()), G, tokens=Tokens(LENGTHS, LOSS_TOKENS)),
            None,
            max_tokens=MAX_TOKENS,
            rank=rank,
            num_replicas=world,
        )
        if stop is None:
            ckpt = torch.load(Path(out, "ck.pt"), weights_only=False)
            model.load_state_dict(ckpt["model"])
            sampler.load_state_dict(ckpt["sampler"])
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        loader = torch.utils.data.DataLoader(
            sampler.wrap_dataset(Sequences()),
            batch_sampler=sampler,
            collate_fn=sampler.collate(pad, dtype=torch.float64),
            num_workers=2,
            # A rank started by mp.spawn defaults to spawning its workers too,
            # each importing torch again (seconds); fork them, as under torchrun.
            multiprocessing_context="fork",
        )
        history, consumed = [], []
        for batch in loader:
            x, mask = batch.data
            loss = (batch.sample_weight * padded_token_losses(ddp, x, mask)).sum()
            consumed += batch.indices[batch.sample_weight > 0].tolist()
            if not batch.step_end:
                with ddp.no_sync():
                    loss.backward()
                continue
            loss.backward()
            opt.step()
            opt.zero_grad()
            history.append(model.weight.detach().flatten().tolist())
            if stop is not None and batch.step + 1 == stop:
                # The workers run the sampler ahead: the state at the next step.
                if rank == 0:
                    state = {"model": model.state_dict()}
                    state["sampler"] = sampler.state_dict_at_step(batch.step + 1)
                    torch.save(state, Path(out, "ck.pt"))
                break
        dist.barrier()  # the checkpoint is written before any rank leaves
        Path(out, f"loader-{world}-{rank}.json").write_text(json.dumps([history, consumed]))
    finally:
        dist.destroy_process_group()
    exit_without_finalization()


def test_token_ddp_through_workers_stopped_on_3_ranks_resumes_on_2(tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    out = str(tmp_path)
    mp.spawn(loader_worker, args=(3, free_port(), out, STOP), nprocs=3, join=True)
    mp.spawn(loader_worker, args=(2, free_port(), out, None), nprocs=2, join=True)
    expected = np.array(reference())
    consumed = []
    for world, steps in ((3, expected[:STOP]), (2, expected[STOP:])):
        for rank in range(world):
            history, ids = json.loads((tmp_path / f"loader-{world}-{rank}.json").read_text())
            assert np.shape(history) == steps.shape
            np.testing.assert_allclose(history, steps, rtol=0, atol=1e-12)
            consumed += ids
    # Every sample of the epoch once over the stop and the resume.
    assert sorted(consumed) == list(range(N))
    # The W = 1 run's parameters (test above) are the reference's to 1e-12.
    assert np.abs(expected[-1] - expected[STOP - 1]).max() > 1e-3
