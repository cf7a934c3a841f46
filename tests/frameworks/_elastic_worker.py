"""The worker of tests/frameworks/test_frameworks_elastic.py, started by torchrun's
elastic agents as `_elastic_worker.py OUT_DIR` (gloo on CPU).

At every start (the first, and each restart after the rendezvous changed)
it loads OUT_DIR/checkpoint.pt if there is one: the model, the optimizer,
the sampler's state and the history of the steps committed so far. After
each optimizer step the ranks gather the step's sample ids and rank 0
writes the checkpoint (atomically: a temporary file renamed), which is what
a restart resumes from. After step PAUSE_AT of the first world size it
writes OUT_DIR/paused and waits for OUT_DIR/go (the test kills an agent in
between). At the end rank 0 writes the history and the parameters to
OUT_DIR/result.json.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset

from epochplan import PlanSpec
from epochplan.torch import ElasticBatchSampler

N, G, B, SEED, EPOCHS, DIM, LR = 61, 6, 2, 4, 2, 3, 0.05  # 11 steps an epoch
PAUSE_AT = 8  # global steps done when the first world size pauses


def dataset() -> TensorDataset:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(N, DIM, generator=gen, dtype=torch.float64)
    y = x.sum(dim=1) + 0.1 * torch.randn(N, generator=gen, dtype=torch.float64)
    return TensorDataset(x, y)


def main(out: Path) -> None:
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    data = dataset()
    sampler = ElasticBatchSampler(PlanSpec(len(data), G, seed=SEED), B)
    loader = DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
    )
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(DIM, 1, dtype=torch.float64))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    path = out / "checkpoint.pt"
    history: list[list[int]] = []  # [epoch, step, world size, *sorted ids] per committed step
    first_epoch = 0
    if path.exists():  # every worker start reloads the last committed step
        ckpt = torch.load(path, weights_only=False)
        model.module.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        sampler.load_state_dict(ckpt["sampler"])
        history, first_epoch = ckpt["history"], sampler.epoch
    for epoch in range(first_epoch, EPOCHS):
        sampler.set_epoch(epoch)  # keeps a loaded position in its epoch
        mine: list[int] = []
        for batch in loader:
            x, y = batch.data
            loss = (batch.sample_weight * (model(x).squeeze(-1) - y) ** 2).sum()
            mine += batch.indices[batch.sample_weight > 0].tolist()
            if not batch.step_end:
                with model.no_sync():
                    loss.backward()
                continue
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            gathered: list[list[int]] = [[] for _ in range(world)]
            dist.all_gather_object(gathered, mine)
            mine = []
            history.append([epoch, batch.step, world, *sorted(i for ids in gathered for i in ids)])
            if rank == 0:
                ckpt = {
                    "model": model.module.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    # Resumes with the next step (also what a loader whose
                    # workers prefetch must save: not the sampler's own position).
                    "sampler": sampler.state_dict_at_step(batch.step + 1),
                    "history": history,
                }
                torch.save(ckpt, out / "checkpoint.tmp")
                os.replace(out / "checkpoint.tmp", path)
            dist.barrier()
            first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
            if len(history) == PAUSE_AT and first_start and world > 1:
                (out / f"paused-{rank}").touch()
                while not (out / "go").exists():
                    time.sleep(0.05)
    if rank == 0:
        params = [float(v) for p in model.parameters() for v in p.detach().reshape(-1)]
        result = {"history": history, "params": params}
        (out / "result.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
