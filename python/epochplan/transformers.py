"""HF Trainer: :class:`PlanTrainer`, a ``transformers.Trainer`` trained on an
:class:`~epochplan.torch.ElasticBatchSampler`'s plan.

The one-line change: ``Trainer(...)`` becomes ``PlanTrainer(...,
global_batch_size=G)``. What Trainer would otherwise do to the sampler, and
what the class does instead (see docs/guides/frameworks.md):

* Trainer's ``accelerator.prepare`` shards the loader a second time (half
  the samples lost on 2 processes): the loader is prepared by
  :func:`epochplan.accelerate.prepare_data_loader`, unsharded, and
  ``set_epoch`` reaches the sampler every epoch.
* Trainer's gradient accumulation cuts the epoch into groups of
  ``gradient_accumulation_steps`` batches and scales the loss by their count
  or by ``num_items_in_batch``: here one Trainer batch is one step of the
  plan (this rank's micro-batches of it, of ``per_device_train_batch_size``
  samples each, and at most ``max_tokens`` tokens), and :meth:`training_step`
  accumulates them with the plan's weights, ``loss = (w *
  per_sample_loss).sum()``, synchronising gradients on the last one. So
  ``gradient_accumulation_steps`` must be 1: the plan's micro-batches are
  the accumulation, the same global batch on any number of processes.
* Trainer resumes mid-epoch by skipping batches (``skip_first_batches``,
  which loses and repeats samples with a sampler of its own order): every
  checkpoint holds the sampler's state (``epochplan_sampler.json``), and
  ``resume_from_checkpoint`` restores it, on any number of processes, with
  no batch skipped (``ignore_data_skip`` is set).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import transformers
from torch.utils.data import DataLoader
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, TrainOutput, get_last_checkpoint

from epochplan._native import PlanSpec, Tokens
from epochplan.accelerate import prepare_data_loader
from epochplan.torch import ElasticBatchSampler, WeightedBatch

__all__ = ["SAMPLER_STATE_NAME", "PlanTrainer"]

#: The file of a Trainer checkpoint that holds the sampler's state.
SAMPLER_STATE_NAME = "epochplan_sampler.json"

_IGNORE = -100  # the label of a token outside the loss (transformers' convention)


def _position(state: dict[str, Any], global_batch_size: int, num_steps: int) -> tuple[int, int]:
    """Where a sampler state resumes, as ``(epoch, step)``; the end of an
    epoch is the next one's start."""
    step = -(-int(state["cursor"]) // global_batch_size)
    epoch = int(state["epoch"])
    return (epoch + 1, 0) if step >= num_steps else (epoch, step)


class _StepLoader:
    """Trainer's view of the plan: one item per optimizer step, the list of
    this rank's micro-batches of it (:class:`WeightedBatch`)."""

    def __init__(self, loader: DataLoader[Any], sampler: ElasticBatchSampler, dataset: Any):
        self.loader = loader
        self.sampler = sampler
        self.dataset = dataset  # read by Trainer.num_examples
        self.last_step: int | None = None  # the last step handed to Trainer

    def __len__(self) -> int:
        # The whole epoch's steps, whatever the world size: Trainer's
        # global_step // len is then the epoch on any number of processes.
        return self.sampler.plan.num_steps

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.sampler.epoch:
            self.last_step = None
        set_epoch = getattr(self.loader, "set_epoch", self.sampler.set_epoch)
        set_epoch(epoch)

    def __iter__(self) -> Iterator[list[WeightedBatch]]:
        step: list[WeightedBatch] = []
        for batch in self.loader:
            step.append(batch)
            if batch.step_end:
                self.last_step = batch.step
                yield step
                step = []

    def state_dict(self) -> dict[str, Any]:
        """The state that resumes after the last step handed out (the
        sampler itself may run ahead: DataLoader workers prefetch)."""
        if self.last_step is None:
            return self.sampler.state_dict()
        return self.sampler.state_dict_at_step(self.last_step + 1)


class PlanTrainer(transformers.Trainer):  # type: ignore[misc,unused-ignore]
    """A ``transformers.Trainer`` whose training data follow an epoch plan.

    Takes Trainer's arguments and these keywords:

    Args:
        global_batch_size: samples per optimizer step over all processes (G),
            the same whatever the number of processes. Each process's
            micro-batches hold at most ``args.per_device_train_batch_size``
            samples; the plan's seed is ``args.data_seed`` (else ``args.seed``).
        tokens: a token plan's :class:`~epochplan.Tokens` (weights ``W /
            T_t`` on each sample's summed token losses; see the token plans
            guide); its loss tokens (default: the lengths) are checked
            against the labels of every micro-batch.
        max_tokens: the most tokens per micro-batch (token plans).

    The loss of a micro-batch is ``(sample_weight * per_sample_loss).sum()``
    with :meth:`per_sample_loss` (cross-entropy of a causal LM's shifted
    labels, or of a classifier's labels; override it for other models).

    Examples:
        >>> trainer = PlanTrainer(model, args, train_dataset=dataset,  # doctest: +SKIP
        ...                       data_collator=collator, global_batch_size=64)
        >>> trainer.train(resume_from_checkpoint=True)  # doctest: +SKIP
    """

    def __init__(
        self,
        *args: Any,
        global_batch_size: int,
        tokens: Tokens | None = None,
        max_tokens: int | None = None,
        **kwargs: Any,
    ) -> None:
        # Checked before Trainer sets the accelerator up (Trainer's default
        # arguments accumulate over 1 batch).
        training_args = kwargs.get("args", args[1] if len(args) > 1 else None)
        accumulation = getattr(training_args, "gradient_accumulation_steps", 1)
        if accumulation != 1:
            raise ValueError(
                f"PlanTrainer needs gradient_accumulation_steps=1, got {accumulation}: each "
                "Trainer batch is a whole step of the plan (global_batch_size samples over all "
                "processes), accumulated over micro-batches of per_device_train_batch_size "
                "samples"
            )
        super().__init__(*args, **kwargs)
        self.global_batch_size = global_batch_size
        self.tokens = tokens
        self.max_tokens = max_tokens
        # Resuming restores the sampler: no batch is skipped.
        self.args.ignore_data_skip = True
        self._resume_from: str | None = None
        self._steps: _StepLoader | None = None

    # -- data ------------------------------------------------------------------

    def make_sampler(self, dataset: Any) -> ElasticBatchSampler:
        """The sampler of this process (rank and world size from ``args``)."""
        args = self.args
        spec = PlanSpec(
            len(dataset),
            self.global_batch_size,
            seed=args.seed if args.data_seed is None else args.data_seed,
            tokens=self.tokens,
        )
        return ElasticBatchSampler(
            spec,
            args.per_device_train_batch_size,
            max_tokens=self.max_tokens,
            rank=args.process_index,
            num_replicas=args.world_size,
        )

    def get_train_dataloader(self) -> Any:
        if self.train_dataset is None:
            raise ValueError("Trainer: training requires a train_dataset.")
        dataset, collator = self.train_dataset, self.data_collator
        # As Trainer does: a datasets.Dataset loses its unused columns, any
        # other dataset's collator drops them (an instance of datasets.Dataset
        # means the module is imported).
        datasets = sys.modules.get("datasets")
        if datasets is not None and isinstance(dataset, datasets.Dataset):
            dataset = self._remove_unused_columns(dataset, description="training")
        else:
            collator = self._get_collator_with_removed_columns(collator, "training")
        sampler = self.make_sampler(dataset)
        args = self.args
        extra: dict[str, Any] = {}
        if args.dataloader_num_workers > 0:
            extra["prefetch_factor"] = args.dataloader_prefetch_factor
            extra["persistent_workers"] = args.dataloader_persistent_workers
        loader = DataLoader(
            sampler.wrap_dataset(dataset),
            batch_sampler=sampler,
            collate_fn=sampler.collate(collator, dtype=torch.float64),
            num_workers=args.dataloader_num_workers,
            pin_memory=args.dataloader_pin_memory,
            **extra,
        )
        steps = _StepLoader(prepare_data_loader(loader, self.accelerator), sampler, dataset)
        if self._resume_from is not None:
            self._restore(steps, self._resume_from)
        self._steps = steps
        return steps

    def _restore(self, steps: _StepLoader, checkpoint: str) -> None:
        """Positions the sampler where ``checkpoint`` stopped: its saved state,
        which must agree with Trainer's own step count."""
        with open(os.path.join(checkpoint, transformers.trainer.TRAINER_STATE_NAME)) as f:
            global_step = int(json.load(f)["global_step"])
        num_steps = steps.sampler.plan.num_steps
        epoch, step = divmod(global_step, num_steps) if num_steps else (0, 0)
        path = os.path.join(checkpoint, SAMPLER_STATE_NAME)
        if os.path.exists(path):
            with open(path) as f:
                state = json.load(f)
            # A state saved at the end of an epoch is the next epoch's start.
            saved = _position(state, steps.sampler.global_batch_size, num_steps)
            if saved != (epoch, step):
                raise ValueError(
                    f"{path} resumes epoch {saved[0]} at step {saved[1]} but Trainer's "
                    f"global_step {global_step} is epoch {epoch}, step {step} of "
                    f"{num_steps}: was the checkpoint written with another "
                    "global_batch_size or dataset?"
                )
            if state["epoch"] == epoch:
                steps.sampler.load_state_dict(state)
                return
        # The plan does not depend on the world size: the step count alone
        # says where to resume (a checkpoint written without the state).
        steps.sampler.set_epoch(epoch)
        steps.sampler.load_state_dict(steps.sampler.state_dict_at_step(step))

    def train(
        self,
        resume_from_checkpoint: str | bool | None = None,
        trial: Any = None,
        ignore_keys_for_eval: list[str] | None = None,
    ) -> TrainOutput:
        checkpoint: str | None = None
        if resume_from_checkpoint is True:
            checkpoint = get_last_checkpoint(self.args.output_dir)  # type: ignore[no-untyped-call,unused-ignore]
            if checkpoint is None:
                raise ValueError(
                    f"No valid checkpoint found in output directory ({self.args.output_dir})"
                )
        elif isinstance(resume_from_checkpoint, str):
            checkpoint = resume_from_checkpoint
        self._resume_from = checkpoint
        resume_from_checkpoint = checkpoint
        try:
            out: TrainOutput = super().train(
                resume_from_checkpoint=resume_from_checkpoint,
                trial=trial,
                ignore_keys_for_eval=ignore_keys_for_eval,
            )
            return out
        finally:
            self._resume_from = None

    def _save_checkpoint(self, model: Any, trial: Any) -> None:
        super()._save_checkpoint(model, trial)
        if self._steps is None or not self.args.should_save:
            return
        folder = f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}"
        path = os.path.join(self._get_output_dir(trial=trial), folder, SAMPLER_STATE_NAME)
        state = {
            k: (v.item() if isinstance(v, np.generic) else v)
            for k, v in self._steps.state_dict().items()
        }
        with open(path, "w") as f:
            json.dump(state, f)

    # -- loss ------------------------------------------------------------------

    def training_step(
        self, model: torch.nn.Module, inputs: Any, num_items_in_batch: Any = None
    ) -> torch.Tensor:
        """One optimizer step's backward passes: this rank's micro-batches
        of the step, gradients synchronised on the last one."""
        if self.accelerator.gradient_accumulation_steps != 1:
            raise ValueError("PlanTrainer needs the accelerator's gradient_accumulation_steps=1")
        model.train()
        optimizer_train = getattr(self.optimizer, "train", None)
        if callable(optimizer_train):
            optimizer_train()
        total = torch.zeros((), dtype=torch.float64, device=self.args.device)
        last = len(inputs) - 1
        for m, batch in enumerate(inputs):
            batch = batch.to(self.args.device)
            sync = contextlib.nullcontext() if m == last else self.accelerator.no_sync(model)
            with sync:
                with self.compute_loss_context_manager():
                    loss = self.weighted_loss(model, batch)
                self.accelerator.backward(loss)
            total += loss.detach()
        return total.to(torch.float32)

    def weighted_loss(self, model: torch.nn.Module, batch: WeightedBatch) -> torch.Tensor:
        """``(sample_weight * per_sample_loss).sum()`` of one micro-batch."""
        inputs = dict(batch.data)
        labels = inputs.pop("labels")
        outputs = model(**inputs)
        logits = outputs["logits"] if isinstance(outputs, dict) else outputs[0]
        per_sample = self.per_sample_loss(logits, labels, batch)
        return (batch.sample_weight.to(per_sample.dtype) * per_sample).sum()

    def per_sample_loss(
        self, logits: torch.Tensor, labels: torch.Tensor, batch: WeightedBatch
    ) -> torch.Tensor:
        """Each sample's loss, as the plan weighs it.

        A causal LM (3-d logits): the cross-entropy of the labels shifted by
        one, summed over each sample's loss tokens for a token plan (their
        count is checked against ``loss_tokens``), averaged over them for a
        sample plan. A classifier (2-d logits): the cross-entropy of each
        sample's label.
        """
        if logits.dim() == 2:
            return torch.nn.functional.cross_entropy(logits, labels, reduction="none")
        logits, labels = logits[:, :-1], labels[:, 1:]
        tokens = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            labels.reshape(-1),
            reduction="none",
            ignore_index=_IGNORE,
        ).view(labels.shape)
        counts = (labels != _IGNORE).sum(dim=1)
        plan = self._steps.sampler.plan if self._steps is not None else None
        if plan is not None and plan.loss_normalization == "tokens":
            expected = plan.loss_tokens if plan.loss_tokens is not None else plan.lengths
            want = torch.as_tensor(np.asarray(expected)[batch.indices.cpu().numpy()])
            if not torch.equal(counts.cpu(), want.to(counts.dtype)):
                raise ValueError(
                    "the labels of samples "
                    f"{batch.indices.tolist()} count {counts.tolist()} loss tokens but the "
                    f"plan's loss_tokens are {want.tolist()}: the token weights would not "
                    "be exact (loss_tokens must count the labels other than -100 after the "
                    "shift by one)"
                )
            return tokens.sum(dim=1)
        return tokens.sum(dim=1) / counts.clamp(min=1)
