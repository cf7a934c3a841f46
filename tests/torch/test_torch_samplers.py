"""epochplan.torch's strided samplers: parity with torch's DistributedSampler, exactness, state."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import torch.utils.data.distributed as torch_dist
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep
import epochplan.torch as et

SIZES = [*range(0, 26), 64, 100, 1001]


WORLDS = [1, 2, 3, 4, 5, 7, 8, 16]


def torch_ranks(n: int, w: int, **kw: object) -> list[list[int]]:
    return [list(torch_dist.DistributedSampler(range(n), w, r, **kw)) for r in range(w)]  # type: ignore[arg-type]


def our_ranks(n: int, w: int, **kw: object) -> list[list[int]]:
    return [list(et.DistributedSampler(range(n), w, r, **kw)) for r in range(w)]  # type: ignore[arg-type]


def interleave(ranks: list[list[int]]) -> list[int]:
    """Rank r's k-th index is position k * W + r of the padded global list."""
    return [i for column in itertools.zip_longest(*ranks) for i in column if i is not None]


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_matches_torch_without_shuffle(drop_last: bool) -> None:
    for n, w in itertools.product(SIZES, WORLDS):
        ours = our_ranks(n, w, shuffle=False, drop_last=drop_last)
        assert ours == torch_ranks(n, w, shuffle=False, drop_last=drop_last), (n, w)
        for r in range(w):
            a = et.DistributedSampler(range(n), w, r, shuffle=False, drop_last=drop_last)
            b = torch_dist.DistributedSampler(range(n), w, r, shuffle=False, drop_last=drop_last)
            assert (len(a), a.num_samples, a.total_size) == (len(b), b.num_samples, b.total_size)
            assert (a.num_replicas, a.rank, a.epoch, a.seed, a.drop_last, a.shuffle) == (
                b.num_replicas,
                b.rank,
                b.epoch,
                b.seed,
                b.drop_last,
                b.shuffle,
            )


@pytest.mark.parametrize("drop_last", [False, True])
def test_distributed_sampler_shuffled_counts_padding_and_order(drop_last: bool) -> None:
    for n, w in itertools.product(SIZES, WORLDS):
        ours = our_ranks(n, w, seed=3, drop_last=drop_last)
        theirs = torch_ranks(n, w, seed=3, drop_last=drop_last)
        assert [len(r) for r in ours] == [len(r) for r in theirs], (n, w)
        order = np.asarray(ep.Permutation(n, seed=3, epoch=0)).tolist()
        total = len(ours[0]) * w
        # The padded global list repeats the order's beginning (position p -> p mod N).
        assert interleave(ours) == [order[p % n] for p in range(total)], (n, w)
        if not drop_last:
            assert set(interleave(ours)) == set(range(n))


@pytest.mark.parametrize("shuffle", [False, True])
def test_distributed_sampler_across_chunk_boundaries(shuffle: bool) -> None:
    n, w = 200_003, 3
    order = np.asarray(ep.Permutation(n, seed=5, epoch=2)) if shuffle else np.arange(n)
    for r in range(w):
        s = et.DistributedSampler(range(n), w, r, shuffle=shuffle, seed=5)
        s.set_epoch(2)
        got = np.fromiter(s, dtype=np.int64)
        padded = np.concatenate([order, order[: s.total_size - n]])
        assert np.array_equal(got, padded[r::w])
        if not shuffle:
            t = torch_dist.DistributedSampler(range(n), w, r, shuffle=False)
            assert got.tolist() == list(t)


def test_seed_and_epoch_are_hashed_not_added() -> None:
    def first(seed: int, epoch: int) -> list[int]:
        s = et.DistributedSampler(range(1000), 1, 0, seed=seed)
        s.set_epoch(epoch)
        return list(s)

    assert first(0, 1) != first(1, 0)
    assert first(0, 0) != first(0, 1)
    assert sorted(first(7, 3)) == list(range(1000))
    # Negative seeds (accepted by torch) are keyed modulo 2**64.
    assert first(-1, 0) == first(2**64 - 1, 0)


@given(n=st.integers(0, 300), w=st.integers(1, 9), shuffle=st.booleans(), seed=st.integers(0, 9))
@settings(max_examples=60, deadline=None)
def test_exact_sampler_covers_each_sample_once(n: int, w: int, shuffle: bool, seed: int) -> None:
    ranks = [list(et.ExactDistributedSampler(range(n), w, r, shuffle, seed)) for r in range(w)]
    sizes = [len(r) for r in ranks]
    assert max(sizes) - min(sizes) <= 1
    assert sorted(itertools.chain(*ranks)) == list(range(n))
    kind = "cipher" if shuffle else "identity"
    order = np.asarray(ep.Permutation(n, seed=seed, kind=kind)).tolist()
    assert interleave(ranks) == order
    for r, ids in enumerate(ranks):
        s = et.ExactDistributedSampler(range(n), w, r, shuffle, seed)
        assert len(s) == s.num_samples == len(ids) and s.total_size == n


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ExactDistributedSampler])
def test_strided_state_dict_round_trip(cls: type[et.DistributedSampler]) -> None:
    n, w, r = 30_000, 3, 2
    s = cls(range(n), w, r, seed=4)
    s.set_epoch(6)
    full = list(s)
    assert s.state_dict() == {"epoch": 6, "seed": 4, "yielded": len(full), "num_replicas": 3}
    for k in [0, 1, 1023, 1024, 1025, 3000, len(full)]:
        it = iter(s)
        head = list(itertools.islice(it, k))
        state = json.loads(json.dumps(s.state_dict()))
        assert state["yielded"] == k
        fresh = cls(range(n), w, r)
        fresh.load_state_dict(state)
        assert fresh.state_dict() == state
        assert head + list(fresh) == full
        # Only the first iteration after a load resumes.
        assert list(fresh) == full
    with pytest.raises(ValueError, match="yielded"):
        s.load_state_dict({"epoch": 0, "seed": 0, "yielded": len(full) + 1})
    with pytest.raises(ValueError, match="missing"):
        s.load_state_dict({"epoch": 0})
    with pytest.raises(ValueError, match=r"unknown keys \['cursor'\]"):
        s.load_state_dict({"epoch": 0, "seed": 0, "yielded": 0, "cursor": 0})
    # A strided position is for the same world size only.
    other = cls(range(n), w + 1, r)
    with pytest.raises(ValueError, match=r"state_dict\['num_replicas'\] is 3 but this sampler"):
        other.load_state_dict(s.state_dict())
    assert other.state_dict()["yielded"] == 0  # unchanged


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ExactDistributedSampler])
def test_strided_set_epoch_starts_the_new_epoch(cls: type[et.DistributedSampler]) -> None:
    # A checkpoint taken after set_epoch(1), before its first index, resumes
    # all of epoch 1 (not the finished progress of epoch 0).
    s = cls(range(10), 2, 0, seed=3)
    list(s)
    s.set_epoch(1)
    assert s.state_dict() == {"epoch": 1, "seed": 3, "yielded": 0, "num_replicas": 2}
    epoch1 = list(s)
    fresh = cls(range(10), 2, 0, seed=3)
    fresh.load_state_dict({"epoch": 0, "seed": 3, "yielded": 5})
    fresh.set_epoch(1)  # a new epoch drops the loaded position of another
    assert list(fresh) == epoch1 and len(fresh) == len(epoch1)
    # The loop's set_epoch call for the loaded epoch keeps the position.
    fresh.load_state_dict({"epoch": 1, "seed": 3, "yielded": 2})
    fresh.set_epoch(1)
    assert len(fresh) == 3
    assert list(fresh) == epoch1[2:]
    assert len(fresh) == 5  # later iterations are whole epochs


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ExactDistributedSampler])
@pytest.mark.parametrize("n", [20, 5000])  # within the first chunk, and across chunks
def test_strided_epoch_cannot_change_under_a_running_iteration(
    cls: type[et.DistributedSampler], n: int
) -> None:
    # As ElasticBatchSampler: going on after set_epoch or load_state_dict would
    # serve the old epoch while the state records the new one.
    whole = list(cls(range(n), 2, 0, seed=3))
    s = cls(range(n), 2, 0, seed=3)
    it = iter(s)
    assert [next(it) for _ in range(3)] == whole[:3]
    s.set_epoch(1)
    with pytest.raises(RuntimeError, match="set_epoch"):
        next(it)
    assert s.state_dict() == {"epoch": 1, "seed": 3, "yielded": 0, "num_replicas": 2}
    it = iter(s)
    next(it)
    s.load_state_dict({"epoch": 0, "seed": 3, "yielded": 3, "num_replicas": 2})
    with pytest.raises(RuntimeError, match="load_state_dict"):
        next(it)
    # The loaded state is what the next iteration serves.
    assert s.state_dict()["yielded"] == 3 and list(s) == whole[3:]
    # set_epoch to the running epoch changes nothing: the iteration goes on.
    it = iter(s)
    got = [next(it) for _ in range(3)]
    s.set_epoch(0)
    assert got + list(it) == whole
    # An iteration with nothing left ends as usual.
    it = iter(s)
    got = [next(it) for _ in range(len(whole))]
    s.set_epoch(2)
    assert list(it) == [] and got == whole


def test_padding_near_the_largest_dataset() -> None:
    class Huge:
        def __len__(self) -> int:
            return 2**63 - 1

    for shuffle in (False, True):
        s = et.DistributedSampler(Huge(), 3, 2, shuffle=shuffle)  # type: ignore[arg-type]
        s.load_state_dict({"epoch": 0, "seed": 0, "yielded": s.num_samples - 2})
        # N = 3q + 1: rank 2's last positions are N - 2 and N + 1 (padding,
        # past 2**63 - 1), which repeats position 1. (Not list(s): it would
        # reserve len(s) slots.)
        tail = [i for i in iter(s)]
        order = ep.Permutation(2**63 - 1, seed=0, epoch=0) if shuffle else None
        want = [2**63 - 3, 1] if order is None else [order[2**63 - 3], order[1]]
        assert tail == want
