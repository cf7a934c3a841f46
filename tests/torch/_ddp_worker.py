"""One rank of the DDP tests (tests/torch/test_torch_ddp.py); run as `_ddp_worker.py OUT_DIR`
with RANK and WORLD_SIZE set, four processes in all. They meet through a file
in OUT_DIR (no port to pick, so none to lose to another process).

The four processes form gloo sub-groups of W = 1, 2, 3 and 4 ranks and train the
same float64 linear model with DistributedDataParallel for one epoch of N samples,
fed by an ElasticBatchSampler through a DataLoader with 0 workers and through
torchdata's StatefulDataLoader with 2, with gradient accumulation (no_sync on all
but a step's last micro-batch) and loss = (w * per_sample_loss).sum(). The W = 3
run with workers saves its loader state one micro-batch into step 6 (after the
optimizer step of step 5); a W = 2 run then resumes from it. One more run, on 4
ranks and FILLER_N samples, has a zero-weight filler. Each rank writes what it
saw and its parameters after every step to OUT_DIR/<run>-<rank>.json; the test
checks them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from datetime import timedelta
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

import epochplan.torch as et
from epochplan import PlanSpec

N, G, B, SEED, EPOCH, DIM, LR = 1001, 64, 8, 11, 2, 5, 0.1
SAVE_AFTER_STEP = 5
# With N the last step's 41 samples fill every rank's micro-batches. With
# FILLER_N it holds 963 - 15 * 64 = 3: on 4 ranks one rank's only micro-batch
# of it is a zero-weight filler, which DDP must still synchronise.
FILLER_N = 963
# name: (world size, DataLoader workers, samples); workers mean StatefulDataLoader.
RUNS = {
    **{f"w{w}-{k}": (w, k, N) for w in (1, 2, 3, 4) for k in (0, 2)},
    "filler": (4, 0, FILLER_N),
}


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, DIM))
    y = x @ np.arange(1.0, DIM + 1) + 0.5 + 0.1 * rng.standard_normal(n)
    return x, y


def init_params() -> dict[str, torch.Tensor]:
    return {
        "weight": torch.linspace(-1.0, 1.0, DIM, dtype=torch.float64).reshape(1, DIM),
        "bias": torch.zeros(1, dtype=torch.float64),
    }


class Regression(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        x, y = make_data(n)
        self.x, self.y = torch.from_numpy(x), torch.from_numpy(y)

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def flat(model: torch.nn.Module) -> list[float]:
    return [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]


def train(
    world: int,
    group: Any,
    num_workers: int,
    n: int,
    start: dict[str, Any] | None = None,
    save: bool = False,
) -> dict[str, Any]:
    rank = dist.get_rank(group)
    model = torch.nn.Linear(DIM, 1, dtype=torch.float64)
    params = start["params"] if start else init_params()
    with torch.no_grad():
        model.weight.copy_(torch.as_tensor(params["weight"], dtype=torch.float64))
        model.bias.copy_(torch.as_tensor(params["bias"], dtype=torch.float64))
    ddp = DistributedDataParallel(model, process_group=group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=LR)
    sampler = et.ElasticBatchSampler(PlanSpec(n, G, seed=SEED), B, rank=rank, num_replicas=world)
    sampler.set_epoch(EPOCH)
    loader_cls = StatefulDataLoader if num_workers else DataLoader
    loader = loader_cls(
        sampler.wrap_dataset(Regression(n)),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
        num_workers=num_workers,
    )
    if start:
        loader.load_state_dict(start["loader"])
    out: dict[str, Any] = {"params": {}, "ids": [], "micro_batches": 0, "fillers": 0}
    for batch in loader:
        x, y = batch.data
        # Accumulate locally; synchronise gradients only on the step's last micro-batch.
        sync = contextlib.nullcontext() if batch.step_end else ddp.no_sync()
        with sync:
            per_sample = (ddp(x).squeeze(1) - y) ** 2
            (batch.sample_weight * per_sample).sum().backward()
        out["micro_batches"] += 1
        w = batch.sample_weight.tolist()
        out["fillers"] += sum(1 for wi in w if wi == 0)
        out["ids"] += [
            [batch.step, i] for i, wi in zip(batch.indices.tolist(), w, strict=True) if wi > 0
        ]
        if batch.step_end:
            optimizer.step()
            optimizer.zero_grad()
            out["params"][batch.step] = flat(model)
        elif save and batch.step == SAVE_AFTER_STEP + 1 and "saved" not in out:
            # One micro-batch into step 6: the model is still that of step 5, and the
            # loader's state points at the start of step 6.
            out["saved"] = {
                "loader": loader.state_dict(),
                "params": {"weight": model.weight.tolist(), "bias": model.bias.tolist()},
            }
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, out["ids"], group=group)
    out["gathered_ids"] = [pair for ids in gathered for pair in ids]
    return out


def main(out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(out_dir, "store"),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(seconds=120),
    )
    rank, world = dist.get_rank(), dist.get_world_size()
    # Implicit rank resolution: the default process group comes before the
    # environment variables (made to disagree here).
    os.environ["RANK"], os.environ["WORLD_SIZE"] = "0", "1"
    implicit = et.DistributedSampler(range(N))
    assert (implicit.rank, implicit.num_replicas) == (rank, world)
    assert et.resolve_rank() == (rank, world)
    groups = {w: dist.new_group(list(range(w))) for w in (1, 2, 3, 4)}
    for name, (w, workers, n) in RUNS.items():
        if rank < w:
            result = train(w, groups[w], workers, n, save=name == "w3-2")
            if name == "w3-2" and rank == 0:
                with open(os.path.join(out_dir, "w3-state.json"), "w") as f:
                    json.dump(result["saved"], f)
            with open(os.path.join(out_dir, f"{name}-{rank}.json"), "w") as f:
                json.dump(result, f)
        dist.barrier()
    # Resume the W = 3 run's state on W = 2 (a different micro-batch count per step).
    if rank < 2:
        with open(os.path.join(out_dir, "w3-state.json")) as f:
            start = json.load(f)
        result = train(2, groups[2], 2, N, start=start)
        with open(os.path.join(out_dir, f"resume-{rank}.json"), "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
