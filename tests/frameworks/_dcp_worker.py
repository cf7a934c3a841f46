"""One rank of tests/frameworks/test_frameworks_dcp.py, run under torchrun as
`_dcp_worker.py OUT_DIR save|load` (gloo on CPU).

`ref` (1 rank): the whole run. `save` (3 ranks): trains a float64 linear model with DDP on an
ElasticBatchSampler through a DataLoader with 2 workers (the sampler runs
ahead of the loop), reports each finished step to a PlanState, and after
step STOP - 1 saves the model, the optimizer and the PlanState with
torch.distributed.checkpoint, then stops. `load` (2 ranks): loads that
checkpoint into a fresh model, optimizer and sampler of its own world size,
and trains to the end of epoch 1. Each rank writes the real sample ids of
every micro-batch (with epoch and step) and its parameters to
OUT_DIR/<mode>-<rank>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

import epochplan.torch as et
from epochplan import PlanSpec
from epochplan.torch.dcp import PlanState
from tests._support.torchrun import exit_without_finalization

N, G, B, SEED, EPOCHS, DIM, LR, STOP = 50, 8, 2, 3, 2, 3, 0.05, 4  # 7 steps an epoch


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, DIM, generator=gen, dtype=torch.float64)
    y = x.sum(dim=1) + 0.1 * torch.randn(N, generator=gen, dtype=torch.float64)
    return TensorDataset(x, y)


def main(out: Path, mode: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    data = dataset()
    sampler = et.ElasticBatchSampler(PlanSpec(len(data), G, seed=SEED), B)
    loader = DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
        num_workers=2,
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(DIM, 1, dtype=torch.float64))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    state = PlanState(sampler)
    checkpoint = str(out / "checkpoint")
    first_epoch = 0
    if mode == "load":
        model_state, optim_state = get_state_dict(model, optimizer)
        to_load = {"model": model_state, "optim": optim_state, "data": state}
        dcp.load(to_load, checkpoint_id=checkpoint)
        set_state_dict(
            model, optimizer, model_state_dict=to_load["model"], optim_state_dict=to_load["optim"]
        )
        first_epoch = sampler.epoch
    seen: list[list[int]] = []
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)  # keeps a loaded position in its epoch
        for batch in loader:
            x, y = batch.data
            loss = (batch.sample_weight * (model(x).squeeze(-1) - y) ** 2).sum()
            if batch.step_end:
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                state.step_done(batch.step)
            else:
                with model.no_sync():
                    loss.backward()
            seen.append([epoch, batch.step, *batch.indices[batch.sample_weight > 0].tolist()])
            if mode == "save" and batch.step_end and batch.step == STOP - 1:
                model_state, optim_state = get_state_dict(model, optimizer)
                to_save = {"model": model_state, "optim": optim_state, "data": state}
                dcp.save(to_save, checkpoint_id=checkpoint)
                break
        if mode == "save":
            break
    params = [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]
    (out / f"{mode}-{rank}.json").write_text(json.dumps({"seen": seen, "params": params}))
    dist.barrier()  # every rank is done with the group before any tears it down
    dist.destroy_process_group()
    exit_without_finalization()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2])
