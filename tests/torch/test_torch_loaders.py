"""epochplan.torch samplers in DataLoaders: weights, workers, pickling, checkpoints resumed."""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

import epochplan as ep
import epochplan.torch as et


class Squares(torch.utils.data.Dataset[tuple[torch.Tensor, int]]):
    """Sample i is (i**2 as a float64 tensor, i)."""

    def __init__(self, n: int) -> None:
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return torch.tensor([float(i) ** 2], dtype=torch.float64), i


@pytest.mark.parametrize("num_workers", [0, 2])
def test_weights_reach_the_training_loop(num_workers: int) -> None:
    n, g, b, w = 203, 16, 3, 3
    sampler = et.ElasticBatchSampler(ep.PlanSpec(n, g, seed=1), b, rank=2, num_replicas=w)
    expected = list(sampler)
    loader = DataLoader(
        sampler.wrap_dataset(Squares(n)),
        batch_sampler=sampler,
        collate_fn=sampler.collate(dtype=torch.float64),
        num_workers=num_workers,
    )
    got = list(loader)
    assert len(got) == len(expected) == len(loader)
    for batch, mb in zip(got, expected, strict=True):
        assert isinstance(batch, et.WeightedBatch)
        x, ids = batch.data
        assert batch.indices.tolist() == ids.tolist() == list(mb)
        assert torch.equal(x[:, 0], batch.indices.double() ** 2)
        assert batch.sample_weight.dtype == torch.float64
        assert batch.sample_weight.tolist() == mb.weights.tolist()
        assert (batch.step, batch.step_end) == (mb.step, mb.step_end)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_plain_dataloader_resumes_from_a_loaded_state(num_workers: int) -> None:
    # A DataLoader calls iter(batch_sampler) twice before the first batch.
    sampler = et.ElasticBatchSampler(ep.PlanSpec(100, 16, seed=5), 4, rank=1, num_replicas=2)
    full = [list(mb) for mb in sampler]
    sampler.load_state_dict(sampler.state_dict_at_step(3))
    loader = DataLoader(
        sampler.wrap_dataset(Squares(100)),
        batch_sampler=sampler,
        collate_fn=sampler.collate(),
        num_workers=num_workers,
    )
    assert len(loader) == len(full) - 3 * 2
    assert [b.indices.tolist() for b in loader] == full[3 * 2 :]
    assert [b.indices.tolist() for b in loader] == full  # the next epoch pass: from step 0
    strided = et.DistributedSampler(range(100), 3, 2)
    head = list(strided)
    strided.load_state_dict({"epoch": 0, "seed": 0, "yielded": 10})
    plain = DataLoader(range(100), sampler=strided, batch_size=4, num_workers=num_workers)
    assert [i for b in plain for i in b.tolist()] == head[10:]


class Batched(Squares):
    """A dataset whose __getitems__ returns a ready batch (a dict), not a list."""

    def __getitems__(self, ids: list[int]) -> dict[str, torch.Tensor]:
        return {"ids": torch.tensor(ids)}


def test_wrapped_dataset_passes_getitems_batches_through() -> None:
    sampler = et.ElasticBatchSampler(ep.PlanSpec(30, 8), 3, rank=0, num_replicas=2)
    loader = DataLoader(
        sampler.wrap_dataset(Batched(30)),
        batch_sampler=sampler,
        collate_fn=sampler.collate(collate_fn=lambda batch: batch, dtype=torch.float64),
    )
    for batch, mb in zip(loader, sampler, strict=True):
        assert batch.data["ids"].tolist() == batch.indices.tolist() == list(mb)
        assert batch.sample_weight.tolist() == mb.weights.tolist()
    plain = DataLoader(sampler.wrap_dataset(Batched(30)), batch_size=4, collate_fn=lambda b: b)
    assert next(iter(plain))["ids"].tolist() == [0, 1, 2, 3]


def test_collate_without_wrapped_dataset_says_what_to_do() -> None:
    sampler = et.ElasticBatchSampler(ep.PlanSpec(10, 4), 2, rank=0, num_replicas=1)
    loader = DataLoader(Squares(10), batch_sampler=sampler, collate_fn=sampler.collate())
    with pytest.raises(TypeError, match="wrap_dataset"):
        next(iter(loader))
    # Unwrapped, the sampler still indexes any dataset (weights unused).
    plain = DataLoader(Squares(10), batch_sampler=sampler)
    assert sorted(i for _, ids in plain for i in ids.tolist()) == list(range(10))


def test_pickling_and_spawned_workers() -> None:
    sampler = et.ElasticBatchSampler(ep.PlanSpec(50, 8, seed=3), 3, rank=1, num_replicas=2)
    sampler.set_epoch(2)
    clone = pickle.loads(pickle.dumps(sampler))
    assert list(clone) == list(sampler) and repr(clone) == repr(sampler)
    mb = next(iter(sampler))
    back = pickle.loads(pickle.dumps(mb))
    assert type(back) is et.WeightedIndices and back == mb and back.step == mb.step
    assert back.weights.tolist() == mb.weights.tolist() and back.step_end == mb.step_end
    for s in [
        et.DistributedSampler(range(50), 3, 1, seed=3),
        et.ExactDistributedSampler(range(50), 3, 1),
        et.ChunkSampler(50, 8, ep.Chunked(5, 2), num_replicas=2, rank=0),
    ]:
        assert list(pickle.loads(pickle.dumps(s))) == list(s)
    loader = DataLoader(
        sampler.wrap_dataset(Squares(50)),
        batch_sampler=sampler,
        collate_fn=sampler.collate(),
        num_workers=1,
        multiprocessing_context="spawn",
    )
    batches = list(loader)
    assert [b.indices.tolist() for b in batches] == [list(m) for m in sampler]
    assert [b.sample_weight.tolist() for b in batches] == [
        torch.tensor(m.weights, dtype=torch.float32).tolist() for m in sampler
    ]


def stateful_run(
    w: int, b: int, num_workers: int, stop: int | None, state: dict[str, object] | None
) -> tuple[list[list[et.WeightedBatch]], list[dict[str, object]]]:
    """Per rank, the batches of a StatefulDataLoader run (stopping after `stop`) and its state."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    out, states = [], []
    for r in range(w):
        sampler = et.ElasticBatchSampler(ep.PlanSpec(301, 24, seed=9), b, rank=r, num_replicas=w)
        loader = StatefulDataLoader(
            sampler.wrap_dataset(Squares(301)),
            batch_sampler=sampler,
            collate_fn=sampler.collate(),
            num_workers=num_workers,
        )
        if state is not None:
            loader.load_state_dict(state)
        got = []
        for batch in loader:
            got.append(batch)
            if stop is not None and len(got) == stop:
                break
        states.append(loader.state_dict())
        out.append(got)
    return out, states


@pytest.mark.parametrize("num_workers", [0, 2])
def test_stateful_dataloader_resumes_on_another_world_size(num_workers: int) -> None:
    # Rank batches: W=3, b=4: 8 real per rank per step -> 2 micro-batches per step.
    first, states = stateful_run(3, 4, num_workers, stop=7, state=None)
    # Stopped mid-step 3 (its first micro-batch): resume at the start of step 3.
    assert all(b[-1].step == 3 and not b[-1].step_end for b in first)
    main = states[0]["_snapshot"]["_main_snapshot"] if num_workers else states[0]  # type: ignore[index]
    assert main["_index_sampler_state"]["cursor"] == 3 * 24  # type: ignore[index]
    done = [i for r in first for batch in r if batch.step < 3 for i in batch.indices.tolist()]
    # Resume on W=2 with another micro-batch size; a StatefulDataLoader keeps its worker count.
    rest, _ = stateful_run(2, 5, num_workers, stop=None, state=states[0])
    assert all(batch.step >= 3 for r in rest for batch in r)
    real = [
        i
        for r in rest
        for batch in r
        for i, x in zip(batch.indices.tolist(), batch.sample_weight.tolist(), strict=True)
        if x > 0
    ]
    assert sorted(done + real) == list(range(301))


def test_distributed_sampler_inside_stateful_dataloader() -> None:
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> StatefulDataLoader:
        sampler = et.DistributedSampler(range(5000), 3, 1, seed=8)
        sampler.set_epoch(4)
        return StatefulDataLoader(range(5000), sampler=sampler, batch_size=100)

    full = [i for b in loader() for i in b.tolist()]
    first = loader()
    it = iter(first)
    head = [i for _ in range(7) for i in next(it).tolist()]
    state = first.state_dict()
    again = loader()
    again.sampler.set_epoch(0)  # the state restores the epoch
    again.load_state_dict(state)
    assert head + [i for b in again for i in b.tolist()] == full


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("elastic", [True, False])
def test_end_of_epoch_checkpoint_then_next_epoch(num_workers: int, elastic: bool) -> None:
    # The usual loop saves after an epoch and resumes at the next one, calling
    # set_epoch before iterating; a StatefulDataLoader loads the sampler's
    # state only then, at iter(). The finished epoch's state must not undo
    # set_epoch (it trained on nothing, or on the finished epoch's order again).
    from torchdata.stateful_dataloader import StatefulDataLoader

    def loader() -> tuple[StatefulDataLoader, Any]:
        if elastic:
            s: Any = et.ElasticBatchSampler(ep.PlanSpec(40, 8, seed=5), 4, rank=0, num_replicas=1)
            dataset = s.wrap_dataset(Squares(40))
            kwargs = {"batch_sampler": s, "collate_fn": s.collate()}
            return StatefulDataLoader(dataset, num_workers=num_workers, **kwargs), s
        s = et.DistributedSampler(range(40), 1, 0, seed=5)
        return StatefulDataLoader(range(40), sampler=s, batch_size=8, num_workers=num_workers), s

    def epoch_ids(pair: tuple[StatefulDataLoader, Any], epoch: int) -> list[list[int]]:
        pair[1].set_epoch(epoch)
        return [(b.indices if elastic else b).tolist() for b in pair[0]]

    fresh = loader()
    epochs = [epoch_ids(fresh, e) for e in range(3)]
    first = loader()
    assert epoch_ids(first, 0) == epochs[0]
    resumed = loader()
    resumed[0].load_state_dict(first[0].state_dict())
    for epoch in (1, 2):
        assert epoch_ids(resumed, epoch) == epochs[epoch]
        assert resumed[1].epoch == epoch


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ElasticBatchSampler])
def test_finished_state_of_another_epoch_keeps_the_set_epoch(cls: Any) -> None:
    def make() -> Any:
        if cls is et.ElasticBatchSampler:
            return cls(ep.PlanSpec(12, 4), 2, num_replicas=1, rank=0)
        return cls(range(12), 1, 0)

    done = make()
    list(done)
    finished = done.state_dict()  # epoch 0, nothing left
    s = make()
    s.set_epoch(1)
    s.load_state_dict(finished)
    expected = make()
    expected.set_epoch(1)
    assert s.epoch == 1 and list(s) == list(expected)
    # Without set_epoch, or from a state with steps left, the state decides.
    s = make()
    s.load_state_dict(finished)
    assert s.epoch == 0 and list(s) == []
    half = make()
    half.set_epoch(2)
    it = iter(half)
    next(it)
    partial = half.state_dict()
    s = make()
    s.set_epoch(1)
    s.load_state_dict(partial)
    assert s.epoch == 2
    # A finished state of the epoch that was set leaves nothing of it.
    s = make()
    s.set_epoch(0)
    s.load_state_dict(finished)
    assert s.epoch == 0 and len(s) == 0 and list(s) == []
    # A second load is not taken for a set_epoch: the last state decides.
    s = make()
    s.load_state_dict(partial)
    s.load_state_dict(finished)
    assert s.epoch == 0 and len(s) == 0 and list(s) == []


@pytest.mark.parametrize("num_workers", [0, 2, 3])
def test_worker_shard_in_a_dataloader_keeps_the_plan_order(num_workers: int) -> None:
    # An IterableDataset over the plan's steps, sharded across DataLoader
    # workers: the main process receives the steps in plan order, each once.
    plan = ep.EpochPlan(103, 10, seed=4)

    class Steps(torch.utils.data.IterableDataset[list[list[int]]]):
        def __iter__(self) -> Iterator[list[list[int]]]:
            for step in ep.worker_shard(plan.micro_batches(1, 3, 2)):
                yield [ids.tolist() for ids, _ in step]

    loader = torch.utils.data.DataLoader(Steps(), batch_size=None, num_workers=num_workers)
    want = [[ids.tolist() for ids, _ in step] for step in plan.micro_batches(1, 3, 2)]
    assert list(loader) == want
