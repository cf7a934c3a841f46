"""One process of tests/frameworks/test_frameworks_accelerate.py, run under torchrun as
`_accelerate_worker.py OUT_DIR NAME [CHECKPOINT]` (1 to 3 processes, gloo on CPU).

First it hands accelerate's own `Accelerator.prepare` a loader of an
ElasticBatchSampler and one of a DistributedSampler, and records the error
each iteration raises (accelerate would shard them a second time). Then it
trains a float64 linear model (SGD with momentum) for EPOCHS epochs on a
loader prepared by `epochplan.accelerate.prepare_data_loader`, with DDP
through `accelerator.prepare(model, optimizer)`, gradient accumulation with
`accelerator.no_sync` and `loss = (w * per_sample_loss).sum()`, the epoch
set through the prepared loader's `set_epoch`, and the plan's position
registered for accelerate's checkpoints as a PlanState. NAME "stop" saves
the state (`accelerator.save_state`) after STOP steps and stops; with
CHECKPOINT it first loads one (`accelerator.load_state`). Each process
writes the sample ids of every micro-batch (real samples only), the batch
types and its final parameters to OUT_DIR/NAME-<rank>.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader, TensorDataset

import epochplan.accelerate
import epochplan.torch as et
from epochplan import PlanSpec
from epochplan.torch.dcp import PlanState
from tests._support.torchrun import exit_without_finalization

N, G, B, SEED, EPOCHS, DIM, LR = 45, 8, 3, 5, 2, 4, 0.05  # 6 steps an epoch
STOP = 8  # the "stop" run saves its state after 8 steps: step 1 of epoch 1


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, DIM, generator=gen, dtype=torch.float64)
    y = x @ torch.arange(1.0, DIM + 1, dtype=torch.float64) + 0.1 * torch.randn(
        N, generator=gen, dtype=torch.float64
    )
    return TensorDataset(x, y)


def refused(accelerator: Accelerator, loader: DataLoader[Any]) -> str:
    prepared = accelerator.prepare(loader)
    try:
        for _ in prepared:
            pass
    except RuntimeError as e:
        return str(e)
    return "not refused"


def main(out: Path, name: str, checkpoint: str | None) -> None:
    accelerator = Accelerator(cpu=True)
    rank = accelerator.process_index
    data = dataset()
    elastic = et.ElasticBatchSampler(PlanSpec(len(data), G, seed=SEED), B)
    result: dict[str, Any] = {
        "refused_elastic": refused(
            accelerator,
            DataLoader(
                elastic.wrap_dataset(data), batch_sampler=elastic, collate_fn=elastic.collate()
            ),
        ),
        "refused_distributed": refused(
            accelerator, DataLoader(data, sampler=et.DistributedSampler(data), batch_size=B)
        ),
    }

    sampler = et.ElasticBatchSampler(PlanSpec(len(data), G, seed=SEED), B)
    loader = DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
    )
    loader = epochplan.accelerate.prepare_data_loader(loader, accelerator)
    model = torch.nn.Linear(DIM, 1, dtype=torch.float64)
    with torch.no_grad():
        model.weight.copy_(torch.linspace(-1.0, 1.0, DIM, dtype=torch.float64))
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    model, optimizer = accelerator.prepare(model, optimizer)
    # The loader is kept as it is by a later prepare.
    assert accelerator.prepare(loader) is loader
    # The plan's position in accelerate's checkpoints (save_state / load_state).
    position = PlanState(sampler)
    accelerator.register_for_checkpointing(position)
    if checkpoint is not None:
        accelerator.load_state(checkpoint)
    seen: list[list[int]] = []
    types = set()
    done = 0
    for epoch in range(sampler.epoch, EPOCHS):
        loader.set_epoch(epoch)  # keeps a loaded position in its epoch
        for batch in loader:
            types.add(type(batch).__name__)
            x, y = batch.data
            per_sample = (model(x).squeeze(-1) - y) ** 2
            loss = (batch.sample_weight * per_sample).sum()
            if batch.step_end:
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                position.step_done(batch.step)
            else:
                with accelerator.no_sync(model):
                    accelerator.backward(loss)
            real = batch.indices[batch.sample_weight > 0].tolist()
            seen.append([epoch, batch.step, *real])
            done += batch.step_end
            if name == "stop" and done == STOP:
                accelerator.save_state(str(out / "checkpoint"))
                break
        if name == "stop" and done == STOP:
            break
    result["seen"] = seen
    result["types"] = sorted(types)
    result["params"] = [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]
    (out / f"{name}-{rank}.json").write_text(json.dumps(result))
    # save_state has no barrier: no rank leaves while another still saves.
    accelerator.wait_for_everyone()
    accelerator.end_training()
    exit_without_finalization()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
