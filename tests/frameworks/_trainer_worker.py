"""One process of tests/frameworks/test_frameworks_transformers.py, run under torchrun as
`_trainer_worker.py OUT_DIR NAME [--tokens] [--stop-after S] [--resume CKPT]
[--then-tokens NAME2]`
(gloo on CPU, HF_HUB_OFFLINE=1: the model is built from a config).

A float64 tiny GPT-2 (random weights, seed 0) learns N random token
sequences for EPOCHS epochs with `epochplan.transformers.PlanTrainer` (SGD,
constant learning rate, a checkpoint every step). `--tokens` trains on a
token plan (lengths, loss tokens, a token cap); `--stop-after S` stops
after step S; `--resume CKPT` resumes from a checkpoint; `--then-tokens
NAME2` then trains a token plan in the same processes (one start for both
one-process references). Each process writes
the real sample ids of every micro-batch it trained on, with the epoch and
step, and the final parameters, to OUT_DIR/NAME-<rank>.json.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)

import epochplan.torch as et
from epochplan import Tokens
from epochplan.torch import WeightedBatch
from epochplan.transformers import PlanTrainer
from tests._support.torchrun import exit_without_finalization

N, G, B, EPOCHS, VOCAB, MAX_TOKENS = 22, 8, 2, 2, 32, 16


def lengths() -> np.ndarray:
    return np.random.default_rng(1).integers(3, 9, size=N)


class Sequences(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __init__(self) -> None:
        gen = torch.Generator().manual_seed(2)
        self.items = [torch.randint(0, VOCAB, (int(n),), generator=gen) for n in lengths()]

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.items[i], "labels": self.items[i]}


def collate(samples: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    width = max(len(s["input_ids"]) for s in samples)
    ids = torch.zeros(len(samples), width, dtype=torch.int64)
    labels = torch.full((len(samples), width), -100, dtype=torch.int64)
    mask = torch.zeros(len(samples), width, dtype=torch.int64)
    for row, s in enumerate(samples):
        n = len(s["input_ids"])
        ids[row, :n], labels[row, :n], mask[row, :n] = s["input_ids"], s["labels"], 1
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def model() -> GPT2LMHeadModel:
    # GPT-2: learned positions, so the float64 model computes in float64
    # throughout (Llama's rotary embedding is computed in float32).
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=32,
        n_embd=16,
        n_layer=1,
        n_head=2,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
    )
    return GPT2LMHeadModel(config).to(torch.float64)


class Recorded(PlanTrainer):
    """Records what each micro-batch trained on."""

    seen: list[list[int]]

    def training_step(self, model: Any, inputs: list[WeightedBatch], *args: Any) -> Any:
        epoch = self._steps.sampler.epoch if self._steps is not None else -1
        for batch in inputs:
            real = batch.indices[batch.sample_weight > 0].tolist()
            self.seen.append([epoch, batch.step, *real])
        return super().training_step(model, inputs, *args)


def plain_trainer_refused(args: TrainingArguments) -> str:
    """What happens to a plain Trainer whose sampler is epochplan's
    DistributedSampler: Trainer's accelerator.prepare shards it again."""

    class Plain(Trainer):
        def _get_train_sampler(self, train_dataset: Any = None) -> Any:
            return et.DistributedSampler(Sequences(), seed=7)

    loader = Plain(model(), args, train_dataset=Sequences(), data_collator=collate)
    try:
        for _ in loader.get_train_dataloader():
            pass
    except RuntimeError as e:
        return str(e)
    return "not refused"


class StopAfter(TrainerCallback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if state.global_step == self.step:
            control.should_training_stop = True
        return control


def run(out: Path, name: str, tokens: bool, stop_after: int | None, resume: str | None) -> None:
    # The stopped run loads with a DataLoader worker, which runs the sampler
    # ahead of Trainer: its checkpoints must still hold the step Trainer reached.
    args = TrainingArguments(
        dataloader_num_workers=1 if stop_after else 0,
        output_dir=str(out / name),
        per_device_train_batch_size=B,
        num_train_epochs=EPOCHS,
        learning_rate=0.5,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        save_strategy="steps",
        save_steps=1,
        logging_steps=1,
        report_to=[],
        use_cpu=True,
        ddp_backend="gloo",
        seed=0,
        data_seed=7,
        disable_tqdm=True,
    )
    token_args: dict[str, Any] = {}
    if tokens:
        token_args = {"tokens": Tokens(lengths(), lengths() - 1), "max_tokens": MAX_TOKENS}
    trainer = Recorded(
        model(),
        args,
        train_dataset=Sequences(),
        data_collator=collate,
        global_batch_size=G,
        callbacks=[StopAfter(stop_after)] if stop_after else [],
        **token_args,
    )
    trainer.seen = []
    trainer.train(resume_from_checkpoint=resume)
    rank = args.process_index
    params = [float(v) for p in trainer.model.parameters() for v in p.detach().reshape(-1)]
    result = {"seen": trainer.seen, "params": params, "global_step": trainer.state.global_step}
    if stop_after:
        result["plain"] = plain_trainer_refused(args)
    (out / f"{name}-{rank}.json").write_text(json.dumps(result))


def main() -> None:
    cli = argparse.ArgumentParser()
    cli.add_argument("out", type=Path)
    cli.add_argument("name")
    cli.add_argument("--tokens", action="store_true")
    cli.add_argument("--stop-after", type=int)
    cli.add_argument("--resume")
    cli.add_argument("--then-tokens", help="then a token plan's run of this name")
    opts = cli.parse_args()
    run(opts.out, opts.name, opts.tokens, opts.stop_after, opts.resume)
    if opts.then_tokens:
        run(opts.out, opts.then_tokens, True, None, None)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()  # every rank is done before any tears down
        torch.distributed.destroy_process_group()
    exit_without_finalization()


if __name__ == "__main__":
    main()
