"""DDP training with epochplan's ElasticBatchSampler: exact, equal-step, weighted, elastic.

Runs on CPU with gloo (NCCL on GPUs):

    torchrun --nproc-per-node 3 examples/ddp_train.py
    # simulate a preemption after 5 steps, then resume on another number of ranks:
    torchrun --nproc-per-node 3 examples/ddp_train.py --stop-after-steps 5 --checkpoint ck.pt
    torchrun --nproc-per-node 2 examples/ddp_train.py --resume ck.pt

Every optimizer step sees the same global batch of G samples whatever the number
of ranks, every rank runs the same number of micro-batches (no hang, no Join),
and the loss rule below makes the update the mean gradient over the step's
samples. The model is float64 so runs on different numbers of ranks can be
compared to ~1e-12.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from epochplan import PlanSpec
from epochplan.audit import ConsumptionLog
from epochplan.torch import ElasticBatchSampler


class Regression(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A synthetic regression data set: y = x . (1, 2, ..., d) + 0.5 + noise."""

    def __init__(self, num_samples: int, dim: int = 8) -> None:
        g = torch.Generator().manual_seed(0)
        self.x = torch.randn(num_samples, dim, generator=g, dtype=torch.float64)
        w = torch.arange(1.0, dim + 1, dtype=torch.float64)
        noise = 0.1 * torch.randn(num_samples, generator=g, dtype=torch.float64)
        self.y = self.x @ w + 0.5 + noise

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[i], self.y[i]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=1001)
    parser.add_argument("--global-batch-size", type=int, default=64)
    parser.add_argument("--micro-batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="where --stop-after-steps saves")
    parser.add_argument("--stop-after-steps", type=int, help="save and exit after this step count")
    parser.add_argument("--resume", help="a checkpoint to resume from (any number of ranks)")
    parser.add_argument(
        "--consumption-log", help="a directory for each rank's log of what it trained on"
    )
    args = parser.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else None
    if device is not None:
        torch.cuda.set_device(device)  # NCCL's collectives run on this rank's GPU
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    dataset = Regression(args.num_samples)
    model = torch.nn.Linear(dataset.x.shape[1], 1, dtype=torch.float64, device=device)
    with torch.no_grad():  # the same start on every run, whatever the number of ranks
        model.weight.zero_()
        model.bias.zero_()
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)

    # Rank and world size come from torch.distributed. The spec is the plan of
    # every epoch: N samples, G the global batch (samples per optimizer step over
    # all ranks); b is the most samples per micro-batch.
    spec = PlanSpec(len(dataset), args.global_batch_size, seed=args.seed)
    sampler = ElasticBatchSampler(spec, args.micro_batch_size)
    # The sampler runs in this process, collate in the workers: the weights travel
    # inside the sampler's index lists, wrap_dataset and collate() unpack them
    # into a WeightedBatch(data, sample_weight, indices, step, step_end).
    loader = DataLoader(
        sampler.wrap_dataset(dataset),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
        num_workers=args.num_workers,
        # Fork the workers once, not every epoch (the batch sampler stays in this
        # process, so set_epoch still reaches it).
        persistent_workers=args.num_workers > 0,
    )

    start_epoch = 0
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        # The sampler state has no world size in it: it loads on any number of ranks
        # and continues with the next step of the saved epoch.
        sampler.load_state_dict(ckpt["sampler"])
        start_epoch = sampler.epoch

    # What this rank trains on, for `epochplan audit` (one file a process;
    # a commit with each checkpoint marks what a resume keeps).
    log = None
    if args.consumption_log:
        log = ConsumptionLog.for_sampler(args.consumption_log, sampler)
    steps_done = 0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a no-op for the epoch a resumed state is in
        # For the check below; on the device, as NCCL reduces only GPU tensors.
        counts = torch.zeros(args.num_samples, dtype=torch.int64, device=device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        steps = 0
        for batch in loader:
            x, y = batch.data
            w = batch.sample_weight
            if device is not None:
                x, y, w = x.to(device), y.to(device), w.to(device)
            # Gradient accumulation: DDP synchronises only on a step's last micro-batch.
            sync = contextlib.nullcontext() if batch.step_end else ddp.no_sync()
            with sync:
                per_sample_loss = (ddp(x).squeeze(1) - y) ** 2
                # The one change to a training loop: weights W / n_t (0 for the
                # fillers that keep micro-batch counts equal), summed, not averaged.
                loss = (w * per_sample_loss).sum()
                loss.backward()
            loss_sum += loss.detach()
            if log is not None:
                log.record_batch(epoch, batch)
            counts[batch.indices[batch.sample_weight > 0].to(counts.device)] += 1
            if batch.step_end:
                optimizer.step()
                optimizer.zero_grad()
                steps += 1
                steps_done += 1
                if args.stop_after_steps is not None and steps_done == args.stop_after_steps:
                    # Save after an optimizer step: the state resumes with the next step.
                    # (With workers the sampler runs ahead of this loop, so ask for the
                    # state at this step explicitly.)
                    if log is not None:
                        log.commit(sampler.state_dict_at_step(batch.step + 1))
                    if rank == 0 and args.checkpoint:
                        torch.save(
                            {
                                "model": model.state_dict(),
                                "optimizer": optimizer.state_dict(),
                                "sampler": sampler.state_dict_at_step(batch.step + 1),
                            },
                            args.checkpoint,
                        )
                        print(f"saved {args.checkpoint} after step {batch.step}", flush=True)
                    dist.barrier()
                    dist.destroy_process_group()
                    return
        # Sum over ranks: every sample of the epoch seen exactly once, and the
        # epoch's loss (sum over steps of the step's mean loss, times W, over W).
        dist.all_reduce(counts)
        dist.all_reduce(loss_sum)
        if rank == 0:
            first = args.resume and epoch == start_epoch
            once = bool((counts == 1).all()) if not first else bool((counts <= 1).all())
            print(
                f"epoch {epoch}: {world} ranks, {steps} steps, {int(counts.sum())} samples, "
                f"each once: {once}, mean step loss {float(loss_sum) / world / max(steps, 1):.6f}",
                flush=True,
            )
    if log is not None:
        log.commit(sampler.state_dict_at_step(sampler.plan.num_steps))
    if rank == 0:
        # Every digit, for comparing runs on different numbers of ranks.
        weights = " ".join(repr(v) for v in model.weight.reshape(-1).tolist())
        print(f"final weight {weights} bias {model.bias.item()!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
