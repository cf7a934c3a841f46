"""The guards against silent loss, in one process: a WeightedBatch keeps its
type and attributes through the device moves of torch (`.to`), accelerate
(`send_to_device`) and Lightning (`move_data_to_device`); a sampler driven by
a foreign wrapper that shards it again raises naming it; a second pass over
an epoch without set_epoch warns; the collate's error names the frameworks
that replace batch samplers."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest
import torch
from torch.utils.data import DataLoader, Sampler

import epochplan.torch as et
from epochplan import PlanSpec


class Pair(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


def a_batch() -> et.WeightedBatch:
    sampler = et.ElasticBatchSampler(PlanSpec(6, 6), 3, rank=0, num_replicas=1)
    data = [
        {"x": torch.tensor([float(i)]), "pair": Pair(torch.tensor(i), torch.tensor(-i))}
        for i in range(6)
    ]
    loader = DataLoader(
        sampler.wrap_dataset(data),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
    )
    return next(iter(loader))


def assert_same(moved: Any, batch: et.WeightedBatch) -> None:
    assert type(moved) is et.WeightedBatch
    assert (moved.step, moved.step_end) == (batch.step, batch.step_end)
    assert torch.equal(moved.sample_weight, batch.sample_weight)
    assert torch.equal(moved.indices, batch.indices)
    assert type(moved.data) is dict and type(moved.data["pair"]) is Pair
    assert torch.equal(moved.data["pair"].y, batch.data["pair"].y)


def test_a_weighted_batch_survives_torchs_to() -> None:
    batch = a_batch()
    assert_same(batch.to(torch.device("cpu")), batch)
    assert_same(batch.to("cpu", non_blocking=True), batch)
    with pytest.raises(TypeError, match="takes a device, got the dtype"):
        batch.to(torch.float16)


def test_a_weighted_batch_survives_accelerates_send_to_device() -> None:
    send_to_device = pytest.importorskip("accelerate.utils").send_to_device
    batch = a_batch()
    assert_same(send_to_device(batch, torch.device("cpu")), batch)
    assert_same(send_to_device([batch], "cpu")[0], batch)


def test_a_weighted_batch_survives_lightnings_move_data_to_device() -> None:
    apply_func = pytest.importorskip("lightning.fabric.utilities.apply_func")
    batch = a_batch()
    assert_same(apply_func.move_data_to_device(batch, torch.device("cpu")), batch)


class Resharding(Sampler[list[int]]):
    """A foreign wrapper that keeps every second batch of the sampler it wraps."""

    def __init__(self, batch_sampler: Any) -> None:
        self.batch_sampler = batch_sampler
        self.num_processes, self.process_index = 2, 0

    def __iter__(self) -> Iterator[list[int]]:
        for i, batch in enumerate(self.batch_sampler):
            if i % 2 == self.process_index:
                yield batch


def test_a_foreign_wrapper_that_shards_again_is_refused_naming_it() -> None:
    sampler = et.ElasticBatchSampler(PlanSpec(8, 4), 2, rank=0, num_replicas=2)
    with pytest.raises(RuntimeError, match=r"Resharding \(with num_processes=2\) shards"):
        list(Resharding(sampler))
    strided = et.DistributedSampler(range(8), num_replicas=2, rank=0)
    batches = torch.utils.data.BatchSampler(strided, 2, drop_last=False)
    with pytest.raises(RuntimeError, match="a second time"):
        list(Resharding(batches))


def test_an_own_loop_holding_the_sampler_is_not_a_wrapper() -> None:
    class Loop:
        def __init__(self) -> None:
            self.sampler = et.ElasticBatchSampler(PlanSpec(8, 4), 2, rank=0, num_replicas=2)
            self.world_size = 2

        def run(self) -> int:
            return sum(len(b) for b in self.sampler)

    assert Loop().run() == 4


def test_a_second_pass_over_an_epoch_without_set_epoch_warns() -> None:
    sampler = et.ElasticBatchSampler(PlanSpec(8, 4), 2, rank=0, num_replicas=1)
    first = [list(b) for b in sampler]
    with pytest.warns(RuntimeWarning, match="epoch 0 a second time without set_epoch"):
        again = [list(b) for b in sampler]
    assert again == first
    sampler.set_epoch(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        list(sampler)
        sampler.set_epoch(1)  # the same epoch, asked for again: no warning
        list(sampler)


def test_the_collates_error_names_the_frameworks_that_replace_batch_samplers() -> None:
    collate = et.WeightedCollate()
    with pytest.raises(TypeError, match="a framework probably replaced the batch sampler"):
        collate([(1, 2)])


def test_accelerates_skip_first_batches_is_refused_naming_the_fix() -> None:
    accelerate = pytest.importorskip("accelerate")
    accelerate.PartialState(cpu=True)  # one process, as the docs' Accelerator(cpu=True)
    sampler = et.ElasticBatchSampler(PlanSpec(8, 4), 2, rank=0, num_replicas=1)
    loader = DataLoader(
        sampler.wrap_dataset(list(range(8))), batch_sampler=sampler, collate_fn=sampler.collate()
    )
    skipping = accelerate.skip_first_batches(loader, 1)
    with pytest.raises(RuntimeError, match=r"skip_first_batches.*load_state_dict"):
        list(skipping)


def test_plan_trainer_refuses_trainers_own_gradient_accumulation() -> None:
    pytest.importorskip("transformers")
    from transformers import TrainingArguments

    from epochplan.transformers import PlanTrainer

    args = TrainingArguments("out", gradient_accumulation_steps=2, use_cpu=True, report_to=[])
    with pytest.raises(ValueError, match="gradient_accumulation_steps=1, got 2"):
        PlanTrainer(None, args, global_batch_size=8)


def test_lightning_refuses_to_rebuild_an_elastic_batch_sampler_naming_the_fix() -> None:
    # What Lightning's Trainer does to a training loader on several processes
    # with use_distributed_sampler=True (the guide says to turn it off).
    data = pytest.importorskip("lightning.fabric.utilities.data")
    sampler = et.ElasticBatchSampler(PlanSpec(8, 4), 2, rank=0, num_replicas=1)
    loader = DataLoader(
        sampler.wrap_dataset(list(range(8))), batch_sampler=sampler, collate_fn=sampler.collate()
    )
    theirs = torch.utils.data.distributed.DistributedSampler(range(8), num_replicas=2, rank=0)
    with pytest.raises(TypeError, match="use_distributed_sampler=False"):
        data._update_dataloader(loader, theirs)
