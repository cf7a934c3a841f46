"""The training function of tests/frameworks/test_frameworks_ray.py (Ray Train,
TorchTrainer with 2 CPU workers on a local Ray), and the same loop on one
process for the reference.

`train_loop(config)` first records what Ray Train's own
`prepare_data_loader` does to a loader of an ElasticBatchSampler (with its
defaults, and with add_dist_sampler=False) when iterated, then trains a
float64 linear model with DDP for EPOCHS epochs on a loader prepared by
`epochplan.ray.prepare_data_loader`, and writes the sample ids of every
micro-batch, the batch types and the parameters to
config["out"]/<world size>-<rank>.json.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

import epochplan.torch as et
from epochplan import PlanSpec

N, G, B, SEED, EPOCHS, DIM, LR = 37, 8, 3, 9, 2, 3, 0.05


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, DIM, generator=gen, dtype=torch.float64)
    y = x.sum(dim=1) + 0.1 * torch.randn(N, generator=gen, dtype=torch.float64)
    return TensorDataset(x, y)


def sampler(**kwargs: int) -> et.ElasticBatchSampler:
    return et.ElasticBatchSampler(PlanSpec(N, G, seed=SEED), B, **kwargs)


def loader_of(sampler: et.ElasticBatchSampler) -> DataLoader[Any]:
    return DataLoader(
        sampler.wrap_dataset(dataset()),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
    )


def error_of(loader: Any) -> str:
    try:
        for _ in loader:
            pass
    except (RuntimeError, TypeError) as e:
        return str(e)
    return "no error"


def train(loader: Any, model: torch.nn.Module, distributed: bool) -> dict[str, Any]:
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    seen, types = [], set()
    for epoch in range(EPOCHS):
        loader.set_epoch(epoch)
        for batch in loader:
            types.add(type(batch).__name__)
            x, y = batch.data
            loss = (batch.sample_weight * (model(x).squeeze(-1) - y) ** 2).sum()
            if batch.step_end or not distributed:
                loss.backward()
            else:
                with model.no_sync():  # type: ignore[operator]
                    loss.backward()
            if batch.step_end:
                optimizer.step()
                optimizer.zero_grad()
            seen.append([epoch, batch.step, *batch.indices[batch.sample_weight > 0].tolist()])
    params = [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]
    return {"seen": seen, "types": sorted(types), "params": params}


def new_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(DIM, 1, dtype=torch.float64)


def train_loop(config: dict[str, Any]) -> None:
    import ray.train.torch

    import epochplan.ray

    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict[str, Any] = {
        "defaults": error_of(ray.train.torch.prepare_data_loader(loader_of(sampler()))),
        "device_move": error_of(
            ray.train.torch.prepare_data_loader(loader_of(sampler()), add_dist_sampler=False)
        ),
    }
    loader = epochplan.ray.prepare_data_loader(loader_of(sampler()))
    model = ray.train.torch.prepare_model(new_model())
    result.update(train(loader, model, distributed=True))
    Path(config["out"], f"{world}-{rank}.json").write_text(json.dumps(result))
