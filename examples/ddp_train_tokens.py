"""Token-weighted DDP training with epochplan: variable-length sequences, capped
micro-batches, ranks balanced by tokens, the exact mean token loss, elastic resume.

Runs on CPU with gloo (NCCL on GPUs):

    torchrun --nproc-per-node 3 examples/ddp_train_tokens.py
    # simulate a preemption after 5 steps, then resume on another number of ranks:
    torchrun --nproc-per-node 3 examples/ddp_train_tokens.py --stop-after-steps 5 --checkpoint ck.pt
    torchrun --nproc-per-node 2 examples/ddp_train_tokens.py --resume ck.pt

What it shows: a small causal model (an embedding and a linear head predicting
the next token) over synthetic sequences whose lengths come from a lognormal.
Given the lengths, ``ElasticBatchSampler`` keeps the same G samples in every
optimizer step whatever the number of ranks, deals them to ranks balanced by
tokens, cuts each rank's share into micro-batches of at most ``--max-tokens``
tokens (similar lengths together, little padding), gives every rank the same
number of micro-batches (no hang, no Join), and weighs each sample by
``W / T_t`` (``T_t``: the step's loss tokens over all ranks). Summing each
sample's per-token losses and weighting them so makes DDP's update exactly the
mean token loss of the step, as one device with the whole global batch computes
it, with no all-reduce of token counts. The model is float64 so runs on
different numbers of ranks agree to ~1e-12. Rank 0 checks at the end of each
epoch that every sample was consumed exactly once, across a stop and a resume.
"""

from __future__ import annotations

import argparse
import contextlib
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F  # noqa: N812
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

from epochplan import PlanSpec, Tokens
from epochplan.torch import ElasticBatchSampler

BOS = 0  # the token the model sees before a sequence's first token


class Sequences(Dataset[torch.Tensor]):
    """Synthetic token sequences, all in one flat array (as a tokenised corpus on disk).

    Lengths come from a fixed-seed lognormal; tokens mostly follow
    ``next = (3 * token + 1) % vocab``, with 10 % random ones, so a bigram
    model has something to learn.
    """

    def __init__(self, num_samples: int, vocab: int, max_len: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        raw = np.rint(rng.lognormal(mean=3.0, sigma=0.7, size=num_samples))
        self.lengths = np.clip(raw, 1, max_len).astype(np.int32)  # tokens per sample
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths, dtype=np.int64)])
        tokens = np.empty(int(self.offsets[-1]), dtype=np.int64)
        noise = rng.integers(1, vocab, tokens.size)
        follow = rng.random(tokens.size) < 0.9
        for i in range(num_samples):
            start, end = self.offsets[i], self.offsets[i + 1]
            tokens[start] = noise[start]
            for j in range(start + 1, end):
                nxt = (3 * tokens[j - 1] + 1) % vocab
                tokens[j] = max(nxt, 1) if follow[j] else noise[j]
        self.tokens = tokens

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i: int) -> torch.Tensor:
        return torch.from_numpy(self.tokens[self.offsets[i] : self.offsets[i + 1]])


def pad_and_mask(sequences: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Inputs (BOS, then the sequence but its last token), targets (the
    sequence) and a loss mask, padded to the longest sequence of the batch.
    Every token of a sample is a target, so its loss tokens are its length."""
    width = max(len(s) for s in sequences)
    targets = torch.zeros(len(sequences), width, dtype=torch.int64)
    mask = torch.zeros(len(sequences), width, dtype=torch.bool)
    for row, s in enumerate(sequences):
        targets[row, : len(s)] = s
        mask[row, : len(s)] = True
    inputs = torch.cat([torch.full((len(sequences), 1), BOS), targets[:, :-1]], dim=1)
    return inputs, targets, mask


class BigramModel(torch.nn.Module):
    """A tiny causal model: each position predicts the next token from its own."""

    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim, dtype=torch.float64)
        self.head = torch.nn.Linear(dim, vocab, dtype=torch.float64)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(tokens))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=600)
    parser.add_argument("--global-batch-size", type=int, default=48)
    parser.add_argument("--max-tokens", type=int, default=256, help="tokens per micro-batch")
    parser.add_argument("--max-len", type=int, default=200, help="the longest sequence")
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--num-workers", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--checkpoint", help="where --stop-after-steps saves")
    parser.add_argument("--stop-after-steps", type=int, help="save and exit after this step count")
    parser.add_argument("--resume", help="a checkpoint to resume from (any number of ranks)")
    args = parser.parse_args()

    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT.
    use_cuda = torch.cuda.is_available()
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if use_cuda else None
    if device is not None:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if use_cuda else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    dataset = Sequences(args.num_samples, args.vocab, args.max_len)
    torch.manual_seed(0)  # the same start on every run, whatever the number of ranks
    model = BigramModel(args.vocab, args.dim).to(device)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=args.lr)

    # A token plan: the same G samples per step on any number of ranks, dealt
    # by tokens, micro-batches of at most max_tokens tokens (micro_batch_size=None:
    # no cap on their sample count), weights W / T_t. Give Tokens(lengths,
    # loss_tokens) when fewer tokens than the length count in a sample's loss
    # (default: the lengths).
    spec = PlanSpec(
        len(dataset),
        args.global_batch_size,
        seed=args.seed,
        tokens=Tokens(dataset.lengths),
    )
    sampler = ElasticBatchSampler(spec, None, max_tokens=args.max_tokens)
    # The weights travel inside the sampler's index lists to the workers:
    # wrap_dataset and collate() hand them back as a WeightedBatch.
    loader = DataLoader(
        sampler.wrap_dataset(dataset),
        batch_sampler=sampler,
        collate_fn=sampler.collate(pad_and_mask, dtype=torch.float64),
        num_workers=args.num_workers,
        persistent_workers=args.num_workers > 0,
    )

    start_epoch = 0
    seen_before = None  # samples of the resumed epoch consumed before the stop
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        # No world size in the state: it loads on any number of ranks, and it
        # refuses other lengths (it holds their digest).
        sampler.load_state_dict(ckpt["sampler"])
        start_epoch = sampler.epoch
        seen_before = ckpt["seen"]

    steps_done = 0
    for epoch in range(start_epoch, args.epochs):
        sampler.set_epoch(epoch)  # a no-op for the epoch a resumed state is in
        # For the checks below: each sample's count, summed over ranks at the end.
        counts = torch.zeros(args.num_samples, dtype=torch.int64, device=device)
        if seen_before is not None and epoch == start_epoch and rank == 0:
            counts += seen_before.to(counts.device)
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        largest = torch.zeros((), dtype=torch.int64, device=device)  # tokens in a micro-batch
        steps = 0
        for batch in loader:
            inputs, targets, mask = batch.data
            w = batch.sample_weight
            if device is not None:
                inputs, targets, mask, w = (t.to(device) for t in (inputs, targets, mask, w))
            # Gradient accumulation: DDP synchronises only on a step's last micro-batch.
            sync = contextlib.nullcontext() if batch.step_end else ddp.no_sync()
            with sync:
                logits = ddp(inputs)
                # The token-weighted loss: per-token losses, masked, summed per
                # sample, weighted by W / T_t (0 for fillers) and summed.
                token_loss = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")
                per_sample = (token_loss * mask).sum(dim=1)
                loss = (w * per_sample).sum()
                loss.backward()
            loss_sum += loss.detach()
            largest = torch.maximum(largest, mask.sum().to(largest.device))
            counts[batch.indices[batch.sample_weight > 0].to(counts.device)] += 1
            if not batch.step_end:
                continue
            optimizer.step()
            optimizer.zero_grad()
            steps += 1
            steps_done += 1
            if args.stop_after_steps is not None and steps_done == args.stop_after_steps:
                # Save after an optimizer step. The DataLoader's workers run the
                # sampler ahead of this loop: ask for the state at the next step.
                dist.all_reduce(counts)
                if rank == 0 and args.checkpoint:
                    torch.save(
                        {
                            "model": model.state_dict(),
                            "optimizer": optimizer.state_dict(),
                            "sampler": sampler.state_dict_at_step(batch.step + 1),
                            "seen": counts.cpu(),
                        },
                        args.checkpoint,
                    )
                    print(f"saved {args.checkpoint} after step {batch.step}", flush=True)
                dist.barrier()
                dist.destroy_process_group()
                return
        # Sum over ranks: every sample of the epoch consumed exactly once (over
        # a stop and a resume), and the step's mean token loss averaged over the
        # steps (the ranks' losses of a step sum to W times its mean token loss).
        dist.all_reduce(counts)
        dist.all_reduce(loss_sum)
        dist.all_reduce(largest, op=dist.ReduceOp.MAX)
        if rank == 0:
            once = bool((counts == 1).all())
            print(
                f"epoch {epoch}: {world} ranks, {steps} steps, {int(counts.sum())} of "
                f"{args.num_samples} samples, each exactly once: {once}, "
                f"largest micro-batch {int(largest)} tokens (cap {args.max_tokens}), "
                f"mean token loss {float(loss_sum) / world / max(steps, 1):.6f}",
                flush=True,
            )
    if rank == 0:
        # Every digit, for comparing runs on different numbers of ranks.
        flat = torch.cat([p.detach().reshape(-1).cpu() for p in model.parameters()])
        probe = torch.arange(1, flat.numel() + 1, dtype=torch.float64).sin()
        print(f"final params {float(flat.sum())!r} {float((flat * probe).sum())!r}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
