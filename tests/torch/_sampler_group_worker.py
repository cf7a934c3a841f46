"""One rank of tests/torch/test_torch_dropin.py's process-group check; run as
`_sampler_group_worker.py OUT_DIR` with RANK and WORLD_SIZE set.

The samplers take the rank and world size from the default gloo process group
(no arguments), as torch's DistributedSampler does in a DDP job. Each rank
writes its samplers' sizes, indices and the sizes all_gather collected from
every rank to OUT_DIR/rank-<rank>.json; the test checks them.
"""

from __future__ import annotations

import json
import os
import sys
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

import epochplan.torch as et


def sizes_everywhere(count: int) -> list[int]:
    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, torch.tensor([count], dtype=torch.int64))
    return [int(t.item()) for t in gathered]


def describe(sampler: et.DistributedSampler) -> dict[str, Any]:
    indices = list(sampler)
    return {
        "rank": sampler.rank,
        "num_replicas": sampler.num_replicas,
        "num_samples": sampler.num_samples,
        "total_size": sampler.total_size,
        "indices": indices,
        "everyone": sizes_everywhere(len(indices)),
    }


def main(out_dir: str) -> None:
    dist.init_process_group(
        "gloo",
        init_method="file://" + os.path.join(out_dir, "store"),
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
        timeout=timedelta(seconds=60),
    )
    world = dist.get_world_size()
    # torch's sizes: a dataset a little past a multiple of W, and a tiny one
    # with fewer samples than ranks.
    sizes = {"casual": 100 + world + 1, "tiny": max(world // 2 - 1, 1)}
    out: dict[str, Any] = {}
    for name, n in sizes.items():
        for drop_last in (True, False):
            out[f"{name}-drop{int(drop_last)}"] = {
                "n": n,
                **describe(et.DistributedSampler(list(range(n)), drop_last=drop_last)),
            }
    with open(os.path.join(out_dir, f"rank-{dist.get_rank()}.json"), "w") as f:
        json.dump(out, f)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
