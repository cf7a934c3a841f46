"""epochplan.torch.DistributedSampler in place of torchdata's
StatefulDistributedSampler: ``yielded`` and ``next_yielded`` with torchdata
0.11's meaning, the checks of torchdata's own test_sampler.py, mid-epoch
resume inside a StatefulDataLoader, and a run that switches from torchdata's
sampler to ours by loading its saved state."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import StatefulDistributedSampler

import epochplan.torch as et

N = 100


class Numbers(torch.utils.data.Dataset[int]):
    """Sample i is i, so a batch shows which indices were served."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> int:
        return i


def served(loader: StatefulDataLoader, stop_after: int | None = None) -> list[int]:
    """The indices of the loader's batches (of the first ``stop_after`` ones)."""
    out: list[int] = []
    for k, batch in enumerate(loader):
        out += batch.tolist()
        if stop_after is not None and k + 1 == stop_after:
            break
    return out


def test_a_new_sampler_has_torchdatas_attributes() -> None:
    dataset = Numbers()
    s = et.DistributedSampler(dataset, num_replicas=10, rank=0, shuffle=False, seed=42)
    assert (s.dataset, s.num_replicas, s.rank, s.shuffle, s.seed) == (dataset, 10, 0, False, 42)
    assert s.drop_last is False
    assert s.yielded == 0 and s.next_yielded is None
    assert et.DistributedSampler._YIELDED == StatefulDistributedSampler._YIELDED == "yielded"


def test_assigning_yielded_sets_the_count_a_state_saves() -> None:
    s = et.DistributedSampler(Numbers(), num_replicas=10, rank=0)
    s.yielded = 5
    assert s.yielded == 5 and s.state_dict()["yielded"] == 5
    with pytest.raises(ValueError, match=r"yielded must be in \[0, 10\], got 11"):
        s.yielded = 11


def test_a_torchdata_state_sets_next_yielded() -> None:
    s = et.DistributedSampler(Numbers(), num_replicas=10, rank=0)
    s.load_state_dict({"yielded": 3})
    assert s.next_yielded == 3 and len(s) == 7
    for bad in (-1, 11):
        with pytest.raises(ValueError, match=r"state_dict\['yielded'\] must be in \[0, 10\]"):
            s.load_state_dict({"yielded": bad})
    with pytest.raises(TypeError, match="state_dict\\['yielded'\\] must be an int"):
        s.load_state_dict({"yielded": 2.0})


def test_yielded_counts_on_from_the_loaded_position() -> None:
    s = et.DistributedSampler(Numbers(), num_replicas=2, rank=0, shuffle=True, seed=42)
    whole = list(s)
    it = iter(s)
    assert next(it) == whole[0]
    assert s.yielded == 1 and s.next_yielded is None
    s.load_state_dict({"yielded": 5})
    assert s.next_yielded == 5
    it = iter(s)
    assert next(it) == whole[5]
    assert s.yielded == 6 and s.next_yielded is None
    assert list(it) == whole[6:] and s.yielded == s.num_samples == 50


def test_drop_last_counts_inside_a_stateful_dataloader() -> None:
    def count(drop_last: bool) -> int:
        s = et.DistributedSampler(Numbers(), 3, 0, shuffle=False, drop_last=drop_last)
        return len(served(StatefulDataLoader(Numbers(), sampler=s)))

    assert (count(True), count(False)) == (N // 3, -(-N // 3))


@pytest.mark.parametrize("shuffle", [True, False])
def test_a_stateful_dataloader_serves_the_samplers_order(shuffle: bool) -> None:
    s = et.DistributedSampler(Numbers(), num_replicas=1, rank=0, shuffle=shuffle)
    order = list(s)
    assert sorted(order) == list(range(N))
    assert (order == list(range(N))) is not shuffle
    assert served(StatefulDataLoader(Numbers(), sampler=s, batch_size=32)) == order


def test_replicas_cover_the_dataset_once_through_stateful_dataloaders() -> None:
    seen = []
    for rank in range(5):
        s = et.DistributedSampler(Numbers(), num_replicas=5, rank=rank, shuffle=False)
        seen += served(StatefulDataLoader(Numbers(), sampler=s))
    assert sorted(seen) == list(range(N))


def our_loader(num_workers: int, *, shuffle: bool = True, rank: int = 1) -> StatefulDataLoader:
    s = et.DistributedSampler(Numbers(), num_replicas=2, rank=rank, shuffle=shuffle, seed=3)
    return StatefulDataLoader(Numbers(), sampler=s, batch_size=4, num_workers=num_workers)


def torchdata_loader(num_workers: int, *, shuffle: bool, rank: int = 1) -> StatefulDataLoader:
    s = StatefulDistributedSampler(Numbers(), num_replicas=2, rank=rank, shuffle=shuffle, seed=3)
    return StatefulDataLoader(Numbers(), sampler=s, batch_size=4, num_workers=num_workers)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_mid_epoch_state_resumes_inside_a_stateful_dataloader(num_workers: int) -> None:
    full = our_loader(num_workers)
    full.sampler.set_epoch(1)
    whole = served(full)
    first = our_loader(num_workers)
    first.sampler.set_epoch(1)
    head = served(first, stop_after=3)
    state = first.state_dict()
    again = our_loader(num_workers)
    again.load_state_dict(state)
    again.sampler.set_epoch(1)
    rest = served(again)
    assert head == whole[:12] and head + rest == whole
    assert again.sampler.yielded == again.sampler.num_samples


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_run_switches_from_torchdatas_sampler_mid_epoch(num_workers: int) -> None:
    # shuffle=False: both samplers serve the same order, so the switched run
    # serves every index of the rank's epoch exactly once.
    theirs = torchdata_loader(num_workers, shuffle=False)
    theirs.sampler.set_epoch(2)
    head = served(theirs, stop_after=5)
    state = theirs.state_dict()
    ours = our_loader(num_workers, shuffle=False)
    ours.load_state_dict(state)
    ours.sampler.set_epoch(2)
    rest = served(ours)
    assert head + rest == list(range(1, N, 2))
    assert ours.sampler.state_dict() == {
        "epoch": 2,
        "seed": 3,
        "yielded": 50,
        "num_replicas": 2,
    }


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_switched_shuffled_run_continues_at_the_same_position_of_our_order(
    num_workers: int,
) -> None:
    # The shuffled orders differ (torch seeds with seed + epoch): the switched
    # run serves our epoch's order from the position torchdata had reached.
    theirs = torchdata_loader(num_workers, shuffle=True)
    served(theirs, stop_after=5)
    ours = our_loader(num_workers)
    ours.load_state_dict(theirs.state_dict())
    whole = list(et.DistributedSampler(Numbers(), num_replicas=2, rank=1, seed=3))
    assert served(ours) == whole[20:]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_torchdata_state_saved_at_the_end_of_an_epoch_then_the_next_epoch(
    num_workers: int,
) -> None:
    # The usual loop saves after an epoch and resumes at the next one, calling
    # set_epoch before iterating; StatefulDataLoader loads the sampler's state
    # at iter(). The next epoch is served whole, once (torchdata's own sampler
    # serves it empty: meta-pytorch/data#1513).
    theirs = torchdata_loader(num_workers, shuffle=True)
    theirs.sampler.set_epoch(0)
    assert len(served(theirs)) == 50
    finished = theirs.state_dict()
    ours = our_loader(num_workers)
    ours.load_state_dict(finished)
    for epoch in (1, 2):
        ours.sampler.set_epoch(epoch)
        expected = et.DistributedSampler(Numbers(), num_replicas=2, rank=1, seed=3)
        expected.set_epoch(epoch)
        assert served(ours) == list(expected)


def test_a_torchdata_position_holds_for_the_epoch_set_after_the_load() -> None:
    # torchdata's state has no epoch: the position is in the epoch iterated next,
    # whether set_epoch comes before the load or after it.
    expected = et.DistributedSampler(Numbers(), 2, 0, seed=1)
    expected.set_epoch(4)
    whole = list(expected)
    before = et.DistributedSampler(Numbers(), 2, 0, seed=1)
    before.set_epoch(4)
    before.load_state_dict({"yielded": 7})
    after = et.DistributedSampler(Numbers(), 2, 0, seed=1)
    after.load_state_dict({"yielded": 7})
    after.set_epoch(4)
    for s in (before, after):
        assert s.epoch == 4 and s.next_yielded == 7 and list(s) == whole[7:]
    # Used once: the next epoch starts at its beginning.
    after.set_epoch(5)
    expected.set_epoch(5)
    assert list(after) == list(expected)


def test_a_finished_torchdata_state_without_set_epoch_ends_the_current_epoch() -> None:
    s = et.DistributedSampler(Numbers(), 2, 0)
    s.load_state_dict({"yielded": 50})
    assert s.next_yielded == 50 and len(s) == 0 and list(s) == []
    assert s.state_dict()["yielded"] == 50
    # A set_epoch to another epoch then starts that epoch whole.
    s.load_state_dict({"yielded": 50})
    s.set_epoch(1)
    assert s.next_yielded is None and len(list(s)) == 50


def test_our_own_state_still_carries_its_epoch_and_world_size() -> None:
    s = et.DistributedSampler(Numbers(), 2, 0, seed=1)
    s.set_epoch(3)
    it = iter(s)
    head = [next(it) for _ in range(4)]
    state: dict[str, Any] = s.state_dict()
    assert state == {"epoch": 3, "seed": 1, "yielded": 4, "num_replicas": 2}
    fresh = et.DistributedSampler(Numbers(), 2, 0, seed=1)
    fresh.load_state_dict(state)
    assert fresh.epoch == 3 and head + list(fresh) == list(s)
    with pytest.raises(ValueError, match="num_replicas"):
        et.DistributedSampler(Numbers(), 4, 0).load_state_dict(state)
    with pytest.raises(ValueError, match=r"missing the keys \['epoch', 'seed'\]"):
        fresh.load_state_dict({"yielded": 1, "generator": None})
