"""Checkpoint a torchdata StatefulDataLoader mid-epoch and resume on another number of ranks.

What it shows: ``epochplan.torch.ElasticBatchSampler`` inside torchdata's
``StatefulDataLoader`` (workers included). Save ``loader.state_dict()`` in the
middle of an epoch, build new loaders on another world size, load the state
and finish the epoch: every sample of the epoch is in exactly one optimizer
step. Ranks are simulated in one process (one sampler and one loader per
rank, stepped in lockstep, as DDP steps them); in a real job each rank builds
its own loader from ``torch.distributed`` and loads the saved state.

How to run it (needs torch and torchdata: ``pip install 'epochplan[examples]'``):

    python examples/stateful_dataloader.py
    python examples/stateful_dataloader.py --world-size 4 --resume-world-size 3 --stop-after 10
    # what the first rule below prevents: prints "each once: False" and exits 1
    python examples/stateful_dataloader.py --snapshot-every 2 --stop-after 5

Two rules make the resume exact (docs/guides/resuming.md explains them):

- Keep the loader's default ``snapshot_every_n_steps=1``: the loader then
  restores the sampler's state of the last batch it handed out. With a larger
  interval it restores an older snapshot and skips the batches handed out
  since, which can drop or repeat samples.
- The sampler's state is a step boundary. Saved after a step's last
  micro-batch, it resumes with the next step; saved in the middle of a step,
  it resumes at that step's start and the step is replayed whole. The
  checkpoint then holds the model of the last optimizer step (the partial
  gradients are lost), so each sample still counts in exactly one update.

The state has no world size in it: every rank's loader state carries the same
plan state, so each new rank loads the one rank 0 saved. The script prints one
line per phase and ``each once: True`` when every sample of the epoch was in
exactly one completed step; it exits 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from epochplan import PlanSpec
from epochplan.torch import ElasticBatchSampler, WeightedBatch


class Numbers(Dataset[torch.Tensor]):
    """A map-style data set whose sample ``i`` is ``[i, i ** 2]`` (float64)."""

    def __init__(self, num_samples: int) -> None:
        self.num_samples = num_samples

    def __len__(self) -> int:
        return self.num_samples

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.tensor([i, i * i], dtype=torch.float64)


def make_loaders(
    dataset: Numbers, world_size: int, args: argparse.Namespace
) -> list[StatefulDataLoader]:
    """One loader per rank of a world of ``world_size`` ranks, as each rank builds its own."""
    loaders = []
    spec = PlanSpec(len(dataset), args.global_batch_size, seed=args.seed)
    for rank in range(world_size):
        sampler = ElasticBatchSampler(
            spec,
            args.micro_batch_size,
            rank=rank,
            num_replicas=world_size,  # in a real job: from torch.distributed
        )
        sampler.set_epoch(args.epoch)
        loaders.append(
            StatefulDataLoader(
                sampler.wrap_dataset(dataset),
                batch_sampler=sampler,
                collate_fn=sampler.collate(dtype=torch.float64),
                num_workers=args.num_workers,
                # 1 is the default, spelled out: see the module docs.
                snapshot_every_n_steps=args.snapshot_every,
            )
        )
    return loaders


class StepLedger:
    """Counts each sample once its optimizer step is complete on every rank."""

    def __init__(self, num_samples: int) -> None:
        self.counts = torch.zeros(num_samples, dtype=torch.int64)
        self.pending: list[torch.Tensor] = []  # ids of the step in progress
        self.steps: list[int] = []  # completed steps, in order

    def add(self, batches: Sequence[WeightedBatch]) -> None:
        """One micro-batch of every rank (the same step and step_end on all)."""
        (step,) = {b.step for b in batches}
        (step_end,) = {b.step_end for b in batches}
        for b in batches:
            # The data is the sample's own id: the loader served the rows the sampler chose.
            assert torch.equal(b.data[:, 0], b.indices.to(torch.float64))
            self.pending.append(b.indices[b.sample_weight > 0])  # fillers weigh 0
        if step_end:  # optimizer.step() here: the step's samples are now in the model
            for ids in self.pending:
                self.counts[ids] += 1
            self.pending.clear()
            self.steps.append(step)

    def interrupt(self) -> int:
        """A checkpoint: a step in progress is lost (and replayed after the resume).

        Returns the number of that step's samples already seen (0 at a step boundary).
        """
        lost = sum(len(ids) for ids in self.pending)
        self.pending.clear()
        return lost


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=103)
    parser.add_argument("--global-batch-size", type=int, default=16)
    parser.add_argument("--micro-batch-size", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=3, help="ranks before the checkpoint")
    parser.add_argument("--resume-world-size", type=int, default=2, help="ranks after it")
    parser.add_argument(
        "--stop-after", type=int, default=8, help="micro-batches per rank before the checkpoint"
    )
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument(
        "--snapshot-every", type=int, default=1, help="the loader's snapshot_every_n_steps"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--epoch", type=int, default=0)
    args = parser.parse_args(argv)

    dataset = Numbers(args.num_samples)
    ledger = StepLedger(args.num_samples)

    # Phase 1: train on --world-size ranks, checkpoint after --stop-after micro-batches.
    loaders = make_loaders(dataset, args.world_size, args)
    iters = [iter(loader) for loader in loaders]
    for _ in range(args.stop_after):
        ledger.add([next(it) for it in iters])
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = Path(tmp) / "loader-rank0.pt"
        # Every rank may save its own; the plan state in them is the same.
        torch.save(loaders[0].state_dict(), checkpoint)
        lost = ledger.interrupt()
        print(
            f"saved: {args.world_size} ranks, {args.stop_after} micro-batches each, "
            f"{len(ledger.steps)} steps done, {lost} samples of a step in progress to replay",
            flush=True,
        )
        del iters, loaders  # the job is preempted: its loaders and workers are gone

        # Phase 2: new loaders on --resume-world-size ranks, each loading that state.
        state: dict[str, Any] = torch.load(checkpoint, weights_only=False)
        loaders = make_loaders(dataset, args.resume_world_size, args)
        for loader in loaders:
            loader.load_state_dict(state)
    steps_before = len(ledger.steps)
    first_step, micro_batches = None, 0
    for batches in zip(*loaders, strict=True):  # equal micro-batch counts on every rank
        first_step = batches[0].step if first_step is None else first_step
        ledger.add(batches)
        micro_batches += 1
    print(
        f"resumed: {args.resume_world_size} ranks at step {first_step}, "
        f"{len(ledger.steps) - steps_before} steps, {micro_batches} micro-batches each",
        flush=True,
    )

    num_steps = -(-args.num_samples // args.global_batch_size)
    steps_ok = ledger.steps == list(range(num_steps))
    once = bool((ledger.counts == 1).all())
    print(
        f"epoch {args.epoch}: {len(ledger.steps)} steps, each step once: {steps_ok}, "
        f"{int(ledger.counts.sum())} of {args.num_samples} samples, each once: {once}",
        flush=True,
    )
    return 0 if steps_ok and once else 1


if __name__ == "__main__":
    sys.exit(main())
