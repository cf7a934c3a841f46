"""The training script of tests/frameworks/test_lightning.py; run as `_lightning_worker.py OUT_DIR`.

A real ``lightning`` Trainer on CPU, 2 processes, strategy "ddp" over gloo,
the default ``use_distributed_sampler=True``, and epochplan's
``DistributedSampler`` in the training DataLoader (built in the
``train_dataloader`` hook, after the process group exists, so the sampler
takes its rank and world size from it). Lightning starts the second process
by running this script again. Each rank writes the sample ids its
``training_step`` saw, per epoch, and whether the DataLoader Lightning
trained from still holds our sampler, to OUT_DIR/rank-<rank>.json.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from lightning.pytorch.strategies import DDPStrategy
from torch.utils.data import DataLoader, Dataset

import epochplan.torch as et

N, BATCH, EPOCHS, SEED = 96, 4, 2, 17


class Numbered(Dataset[tuple[int, torch.Tensor]]):
    """Sample i is (i, a feature), so a batch shows which ids were served."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[int, torch.Tensor]:
        return i, torch.tensor([float(i) / N])


class Model(LightningModule):
    def __init__(self, out_dir: str) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.out_dir = out_dir
        self.seen: dict[int, list[int]] = {}
        self.sampler: et.DistributedSampler | None = None

    def train_dataloader(self) -> DataLoader[Any]:
        self.sampler = et.DistributedSampler(Numbered(), seed=SEED)
        return DataLoader(Numbered(), batch_size=BATCH, sampler=self.sampler)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        ids, x = batch
        self.seen.setdefault(self.current_epoch, []).extend(ids.tolist())
        loss: torch.Tensor = (self.layer(x) ** 2).mean()
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def on_train_end(self) -> None:
        loader = self.trainer.train_dataloader
        assert self.sampler is not None
        report = {
            "rank": self.global_rank,
            "world_size": self.trainer.world_size,
            "backend": torch.distributed.get_backend(),
            "kept_our_sampler": getattr(loader, "sampler", None) is self.sampler,
            "sampler_type": type(getattr(loader, "sampler", None)).__name__,
            "sampler_rank": [self.sampler.rank, self.sampler.num_replicas],
            "sampler_epoch": self.sampler.epoch,
            "seen": {str(k): v for k, v in self.seen.items()},
        }
        with open(os.path.join(self.out_dir, f"rank-{self.global_rank}.json"), "w") as f:
            json.dump(report, f)


def main(out_dir: str) -> None:
    trainer = Trainer(
        accelerator="cpu",
        devices=2,
        strategy=DDPStrategy(process_group_backend="gloo"),
        max_epochs=EPOCHS,
        use_distributed_sampler=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(Model(out_dir))


if __name__ == "__main__":
    main(sys.argv[1])
