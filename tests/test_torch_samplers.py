"""epochplan.torch samplers in one process: parity with torch, exactness, state, errors."""

from __future__ import annotations

import itertools
import json
import math
import pickle
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data.distributed as torch_dist
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

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


def test_bad_rank_errors_match_torch() -> None:
    for w, r in [(2, 2), (2, -1), (3, 5)]:
        with pytest.raises(ValueError) as theirs:
            torch_dist.DistributedSampler(range(4), w, r)
        with pytest.raises(ValueError) as ours:
            et.DistributedSampler(range(4), w, r)
        assert str(ours.value) == str(theirs.value)
    # torch blames the rank ("interval [0, -1]"); the world size is at fault.
    for w in (0, -2):
        with pytest.raises(
            ValueError, match=rf"num_replicas must be in \[1, 2\*\*63 - 1\], got {w}"
        ):
            et.DistributedSampler(range(4), w, 0)
    with pytest.raises(ValueError, match=r"num_replicas must be in .* got an int of 16610 bits"):
        et.DistributedSampler(range(4), 10**5000, 0)
    with pytest.raises(ValueError, match="Invalid rank an int of 16610 bits"):
        et.DistributedSampler(range(4), 4, 10**5000)
    with pytest.raises(
        ValueError, match=r"num_replicas must be in .* got 0 \(from the rank provider"
    ):
        et.resolve_rank(None, 0, rank_fn=lambda: (0, 0))
    with pytest.raises(TypeError, match="rank must be an int"):
        et.DistributedSampler(range(4), 2, "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="num_replicas must be an int"):
        et.ElasticBatchSampler(4, 2, 1, num_replicas=2.0, rank=0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"micro_batch_size must be an int in \[1, 2\*\*63 - 1\]"):
        et.ElasticBatchSampler(4, 2, 0, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=rf"micro_batch_size must be an int in .*, got {2**63}"):
        et.ElasticBatchSampler(4, 2, 2**63, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="global_batch_size"):
        et.ElasticBatchSampler(4, 0, 1, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"^batch_size must be an int in \[1, 2\*\*63 - 1\]"):
        et.ChunkSampler(4, 2, 1, 0, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"^batch_size must be an int in"):
        et.ChunkSampler(4, 2, 1, 2**70, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"^num_samples must hold \[0, 2\*\*63 - 1\] samples"):
        et.ChunkSampler(-1, 2, 1, 4, num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="dataset must be a sized dataset"):
        et.DistributedSampler(5, 2, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        et.ChunkSampler(4, 0, 1, 2, num_replicas=1, rank=0)


def test_sampler_arguments_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match=r"num_replicas must be in \[1, 2\*\*63 - 1\]"):
        et.ElasticBatchSampler(10, 4, 2, num_replicas=2**63, rank=0)
    with pytest.raises(ValueError, match="data_source_or_num_samples"):
        et.ElasticBatchSampler(2**63, 4, 2, num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="num_replicas must be an int, got ndarray"):
        et.ElasticBatchSampler(10, 4, 2, num_replicas=np.array(2.0), rank=0)
    for bad in (None, 1, "yes"):
        with pytest.raises(TypeError, match="drop_last must be a bool"):
            et.ElasticBatchSampler(10, 4, 2, num_replicas=1, rank=0, drop_last=bad)  # type: ignore[arg-type]
    sampler = et.ElasticBatchSampler(10, 4, 2, num_replicas=1, rank=0, drop_last=np.True_)
    assert sampler.drop_last is True and len(sampler) == 4


def test_rank_resolution_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not torch.distributed.is_initialized()
    with pytest.raises(ValueError, match="num_replicas and rank not given"):
        et.resolve_rank()
    with pytest.raises(ValueError, match="rank not given"):
        et.DistributedSampler(range(4), num_replicas=2)
    # A callable (JAX: jax.process_index(), jax.process_count()).
    assert et.resolve_rank(rank_fn=lambda: (1, 3)) == (1, 3)
    assert et.ElasticBatchSampler(9, 3, 1, rank_fn=lambda: (2, 3)).rank == 2
    et.set_rank_provider(lambda: (0, 5))
    try:
        assert et.resolve_rank() == (0, 5)
        assert et.resolve_rank(rank_fn=lambda: (1, 2)) == (1, 2)
        assert et.resolve_rank(num_replicas=7) == (0, 7)
        # Environment variables come before a provider; explicit arguments first.
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "4")
        assert et.resolve_rank() == (3, 4)
        assert et.resolve_rank(8, 5) == (5, 8)
        s = et.DistributedSampler(range(10))
        assert (s.rank, s.num_replicas) == (3, 4)
        monkeypatch.setenv("RANK", "4")
        with pytest.raises(ValueError, match=r"Invalid rank 4, .*\[0, 3\] \(from the RANK"):
            et.resolve_rank()
        monkeypatch.delenv("WORLD_SIZE")
        with pytest.raises(ValueError, match="RANK is set but WORLD_SIZE is not"):
            et.resolve_rank()
        # Each value is resolved on its own: with num_replicas given, RANK suffices.
        assert et.resolve_rank(num_replicas=8) == (4, 8)
        monkeypatch.setenv("WORLD_SIZE", "3")
        assert et.resolve_rank(num_replicas=8) == (4, 8)
        monkeypatch.delenv("RANK")
        assert et.resolve_rank(rank=2) == (2, 3)
        with pytest.raises(ValueError, match="WORLD_SIZE is set but RANK is not"):
            et.resolve_rank()
        monkeypatch.setenv("RANK", "4")
        monkeypatch.delenv("WORLD_SIZE")
        # ASCII digits only: int() would read "1_0" as 10.
        for bad in ("four", "1_0", "\u0664", "", "4.0"):
            monkeypatch.setenv("WORLD_SIZE", bad)
            with pytest.raises(ValueError, match="WORLD_SIZE must be an int"):
                et.resolve_rank()
        monkeypatch.setenv("WORLD_SIZE", " 8\n")
        assert et.resolve_rank() == (4, 8)
    finally:
        et.set_rank_provider(None)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(TypeError, match="must return"):
        et.resolve_rank(rank_fn=lambda: 3)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=r"Invalid rank 3, .*\[0, 2\] \(from the rank provider"):
        et.resolve_rank(rank_fn=lambda: (3, 3))
    with pytest.raises(TypeError, match="fn must be callable"):
        et.set_rank_provider(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rank_fn must be callable or None, got int"):
        et.resolve_rank(rank_fn=5)  # type: ignore[arg-type]


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


def test_arrays_and_tensors_are_datasets() -> None:
    # An array or a tensor passed as the data is its samples, even when it
    # could be read as an int: only a 0-d one stands for N.
    for data, n in [
        (np.zeros((10, 3)), 10),
        (torch.zeros(10, 3), 10),
        (torch.tensor([7]), 1),
        (np.array([7]), 1),
        (np.array(7), 7),
        (torch.tensor(7), 7),
        (np.int64(7), 7),
    ]:
        sampler = et.ElasticBatchSampler(data, 4, 2, num_replicas=2, rank=0)
        assert sampler.num_samples == n, (data, n)
    for bad in (np.array(7.0), 7.0, None):
        with pytest.raises(TypeError, match="data_source_or_num_samples must be an int or a sized"):
            et.ElasticBatchSampler(bad, 4, 2, num_replicas=1, rank=0)  # type: ignore[arg-type]


def test_elastic_load_state_dict_names_its_argument() -> None:
    s = et.ElasticBatchSampler(10, 4, 2, num_replicas=2, rank=0)
    with pytest.raises(ValueError, match=r"^state_dict: .*missing the key"):
        s.load_state_dict({"cursor": 0})
    with pytest.raises(TypeError, match=r"^state_dict: .*must be a dict, got list"):
        s.load_state_dict([1])  # type: ignore[arg-type]


def collect(sampler: et.ElasticBatchSampler) -> list[et.WeightedIndices]:
    return list(sampler)


@given(
    n=st.integers(0, 200),
    g=st.integers(1, 40),
    b=st.integers(1, 9),
    w=st.integers(1, 7),
    drop_last=st.booleans(),
    seed=st.integers(0, 5),
)
@settings(max_examples=60, deadline=None)
def test_elastic_sampler_is_exact_equal_step_and_elastic(
    n: int, g: int, b: int, w: int, drop_last: bool, seed: int
) -> None:
    ranks = [
        collect(
            et.ElasticBatchSampler(n, g, b, num_replicas=w, rank=r, seed=seed, drop_last=drop_last)
        )
        for r in range(w)
    ]
    plan = ep.EpochPlan(n, g, seed=seed, drop_last=drop_last)
    order = np.asarray(ep.Permutation(n, seed=seed)).tolist()
    # The same number of micro-batches, and of steps, on every rank; never empty.
    assert len({len(r) for r in ranks}) == 1
    assert len(ranks[0]) == len(
        et.ElasticBatchSampler(n, g, b, num_replicas=w, rank=0, drop_last=drop_last)
    )
    seen: list[int] = []
    for step in range(plan.num_steps):
        batches = [[mb for mb in r if mb.step == step] for r in ranks]
        assert len({len(x) for x in batches}) == 1
        n_t = plan.step_size(step)
        real = []
        for per_rank in batches:
            assert [mb.step_end for mb in per_rank] == [False] * (len(per_rank) - 1) + [True]
            for mb in per_rank:
                assert 1 <= len(mb) <= b and len(mb.weights) == len(mb)
                assert all(isinstance(i, int) for i in mb)
                real += [i for i, x in zip(mb, mb.weights, strict=True) if x > 0]
                assert set(mb.weights.tolist()) <= {0.0, w / n_t}
        # Elastic: step t is positions [tG, tG + n_t) of the order, for any W.
        assert sorted(real) == sorted(order[step * g : step * g + n_t])
        seen += real
    assert len(seen) == len(set(seen)) == (plan.num_steps * g if drop_last else n)


def test_elastic_sampler_state_resumes_on_other_world_sizes() -> None:
    n, g = 1001, 64
    for w, b, w2, b2 in [(3, 8, 2, 8), (2, 5, 4, 3), (4, 8, 1, 64)]:
        for stop in [0, 1, 5, 17, 40]:
            # Every rank of W runs `stop` micro-batches; the states agree.
            samplers = [
                et.ElasticBatchSampler(n, g, b, num_replicas=w, rank=r, seed=2) for r in range(w)
            ]
            consumed: list[list[et.WeightedIndices]] = []
            states = []
            for s in samplers:
                s.set_epoch(1)
                consumed.append(list(itertools.islice(iter(s), stop)))
                states.append(json.loads(json.dumps(s.state_dict())))
            assert all(st == states[0] for st in states)
            state = states[0]
            last = consumed[0][-1] if consumed[0] else None
            # A step boundary: after a step's last micro-batch, the next step; mid-step,
            # the start of the current step.
            step = 0 if last is None else last.step + (1 if last.step_end else 0)
            assert state["cursor"] == min(step * g, n) and state["epoch"] == 1
            done = [
                i
                for per in consumed
                for mb in per
                if mb.step < step
                for i, x in zip(mb, mb.weights, strict=True)
                if x > 0
            ]
            rest = []
            for r in range(w2):
                s2 = et.ElasticBatchSampler(n, g, b2, num_replicas=w2, rank=r, seed=0)
                s2.load_state_dict(state)
                assert s2.epoch == 1 and s2.seed == 2
                expected_len = len(s2)
                items = list(s2)
                assert len(items) == expected_len
                assert all(mb.step >= step for mb in items)
                rest += [i for mb in items for i, x in zip(mb, mb.weights, strict=True) if x > 0]
            assert sorted(done + rest) == list(range(n))


def test_elastic_len_after_load_and_iteration_rules() -> None:
    s = et.ElasticBatchSampler(1001, 64, 8, num_replicas=3, rank=1)
    full = list(s)
    for step in [0, 1, 7, 15, 16]:
        s.load_state_dict(s.state_dict_at_step(step))
        assert len(s) == len([mb for mb in full if mb.step >= step])
        assert list(s) == [mb for mb in full if mb.step >= step]
        # Later iterations start at step 0 again.
        assert len(s) == len(full) and list(s) == full
    # A new epoch starts at step 0; the same epoch keeps a loaded cursor.
    s.load_state_dict(s.state_dict_at_step(3))
    s.set_epoch(0)
    assert next(iter(s)).step == 3
    s.load_state_dict(s.state_dict_at_step(3))
    s.set_epoch(1)
    assert next(iter(s)).step == 0 and s.state_dict()["epoch"] == 1
    with pytest.raises(IndexError, match="step must be in"):
        s.state_dict_at_step(17)


def test_elastic_epoch_cannot_change_under_a_running_iteration() -> None:
    # Continuing an iteration after set_epoch would mix the two epochs' batches
    # (and a state saved then would skip the new epoch): it raises instead.
    s = et.ElasticBatchSampler(10, 3, 3, num_replicas=1, rank=0)
    it = iter(s)
    next(it)
    s.set_epoch(1)
    with pytest.raises(RuntimeError, match="set_epoch"):
        next(it)
    assert s.state_dict()["epoch"] == 1 and s.state_dict()["cursor"] == 0
    assert sorted(i for b in s for i in b) == list(range(10))
    it = iter(s)
    next(it)
    s.load_state_dict(s.state_dict_at_step(2))
    with pytest.raises(RuntimeError, match="load_state_dict"):
        next(it)
    # set_epoch to the running epoch changes nothing: the iteration goes on.
    it = iter(s)
    s.set_epoch(1)
    assert [i for b in it for i in b] == s.plan.at_step(2).rank_indices(0, 1).tolist()


def test_elastic_load_rejects_other_datasets() -> None:
    s = et.ElasticBatchSampler(100, 10, 2, num_replicas=1, rank=0)
    for key, value in [("num_samples", 99), ("global_batch_size", 20), ("drop_last", True)]:
        other = dict(s.state_dict(), **{key: value})
        with pytest.raises(ValueError, match=key):
            s.load_state_dict(other)
    with pytest.raises(ValueError, match="format_version"):
        s.load_state_dict(dict(s.state_dict(), format_version=99))
    with pytest.raises(ValueError, match="kind"):
        s.load_state_dict(
            et.ElasticBatchSampler(100, 10, 2, num_replicas=1, rank=0, kind="identity").state_dict()
        )
    # Another chunk layout is another order: resuming in it would repeat and skip samples.
    c = et.ChunkSampler(500, 7, 2, 20, num_replicas=1, rank=0)
    for key, other in [
        ("chunk_size", et.ChunkSampler(500, 10, 2, 20, num_replicas=1, rank=0)),
        ("preload_nchunks", et.ChunkSampler(500, 7, 3, 20, num_replicas=1, rank=0)),
    ]:
        with pytest.raises(ValueError, match=key):
            other.load_state_dict(c.state_dict_at_step(3))


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
    sampler = et.ElasticBatchSampler(n, g, b, num_replicas=w, rank=2, seed=1)
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
    sampler = et.ElasticBatchSampler(100, 16, 4, num_replicas=2, rank=1, seed=5)
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
    sampler = et.ElasticBatchSampler(30, 8, 3, num_replicas=2, rank=0)
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


def test_subclass_hooks_serve_precomputed_plans() -> None:
    """A subclass reading a rank's ids from a precomputed array (as plan files would)."""

    class Precomputed(et.ElasticBatchSampler):
        def _build_plan(self, epoch: int) -> ep.EpochPlan:
            plan = super()._build_plan(epoch)
            self.table = plan.rank_indices(self.rank, self.num_replicas)
            return plan

        def _step_ids(self, step: int) -> np.ndarray:
            a = self.plan.rank_step_offset(step, self.rank, self.num_replicas)
            z = self.plan.rank_step_offset(step + 1, self.rank, self.num_replicas)
            return self.table[a:z]

    for r in range(3):
        kw = {"num_replicas": 3, "rank": r, "seed": 2}
        mine, base = Precomputed(500, 48, 5, **kw), et.ElasticBatchSampler(500, 48, 5, **kw)
        for s in (mine, base):
            s.set_epoch(3)
        assert [(list(m), m.weights.tolist(), m.step) for m in mine] == [
            (list(m), m.weights.tolist(), m.step) for m in base
        ]
        mine.load_state_dict(base.state_dict_at_step(4))
        assert next(iter(mine)).step == 4


def test_collate_without_wrapped_dataset_says_what_to_do() -> None:
    sampler = et.ElasticBatchSampler(10, 4, 2, num_replicas=1, rank=0)
    loader = DataLoader(Squares(10), batch_sampler=sampler, collate_fn=sampler.collate())
    with pytest.raises(TypeError, match="wrap_dataset"):
        next(iter(loader))
    # Unwrapped, the sampler still indexes any dataset (weights unused).
    plain = DataLoader(Squares(10), batch_sampler=sampler)
    assert sorted(i for _, ids in plain for i in ids.tolist()) == list(range(10))


def test_pickling_and_spawned_workers() -> None:
    sampler = et.ElasticBatchSampler(50, 8, 3, num_replicas=2, rank=1, seed=3)
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
        et.ChunkSampler(50, 5, 2, 8, num_replicas=2, rank=0),
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
        sampler = et.ElasticBatchSampler(301, 24, b, num_replicas=w, rank=r, seed=9)
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
            s: Any = et.ElasticBatchSampler(40, 8, 4, num_replicas=1, rank=0, seed=5)
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
            return cls(12, 4, 2, num_replicas=1, rank=0)
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


def test_chunk_sampler_windows_touch_at_most_preload_nchunks() -> None:
    n, c, k = 1037, 10, 3
    perm = np.asarray(ep.Permutation(n, seed=4, kind="chunked", chunk_size=c, preload_nchunks=k))
    chunk_of = perm // c
    sizes = np.bincount(np.arange(n) // c)
    # Cut the order into windows: a window closes when it holds k complete chunks.
    windows, start, counts = [], 0, {}
    for p, chunk in enumerate(chunk_of.tolist()):
        counts[chunk] = counts.get(chunk, 0) + 1
        assert len(counts) <= k, "a window touches more than preload_nchunks chunks"
        complete = all(counts[x] == sizes[x] for x in counts)
        if complete and (len(counts) == k or p == n - 1):
            windows.append((start, p + 1, set(counts)))
            start, counts = p + 1, {}
    assert start == n and len(windows) == math.ceil(math.ceil(n / c) / k)
    window_of = np.empty(n, dtype=np.int64)
    for j, (a, z, _) in enumerate(windows):
        window_of[a:z] = j
    position_of = np.argsort(perm)
    for w in [1, 2, 3]:
        seen = []
        for r in range(w):
            s = et.ChunkSampler(n, c, k, 32, num_replicas=w, rank=r, seed=4)
            assert s.plan.kind == "chunked"
            ids = [i for mb in s for i, x in zip(mb, mb.weights, strict=True) if x > 0]
            seen += ids
            # A rank's reads in a window stay inside that window's chunks.
            for j, (_, _, chunks) in enumerate(windows):
                mine = [i for i in ids if window_of[position_of[i]] == j]
                assert {i // c for i in mine} <= chunks
            # And it reads the windows in order.
            assert np.all(np.diff(window_of[position_of[ids]]) >= 0)
        assert sorted(seen) == list(range(n))


def test_chunk_sampler_is_elastic_and_resumable() -> None:
    n, c, k, g = 500, 7, 2, 20
    steps = {}
    for w in [1, 3]:
        for r in range(w):
            for mb in et.ChunkSampler(n, c, k, g, num_replicas=w, rank=r, seed=1):
                steps.setdefault((w, mb.step), []).extend(
                    i for i, x in zip(mb, mb.weights, strict=True) if x > 0
                )
    for t in range(25):
        assert sorted(steps[(1, t)]) == sorted(steps[(3, t)])
    s = et.ChunkSampler(n, c, k, g, num_replicas=3, rank=0, seed=1)
    assert len(next(iter(s))) == 7  # ceil(20 / 3): one micro-batch per rank and step
    state = s.state_dict_at_step(10)
    s2 = et.ChunkSampler(n, c, k, g, num_replicas=2, rank=1)
    s2.load_state_dict(state)
    assert next(iter(s2)).step == 10 and s2.seed == 1
    # Resumed on 2 ranks, the rest of the epoch: steps 10 on, every sample once.
    rest = []
    for r in range(2):
        resumed = et.ChunkSampler(n, c, k, g, num_replicas=2, rank=r)
        resumed.load_state_dict(state)
        rest += [i for mb in resumed for i, x in zip(mb, mb.weights, strict=True) if x > 0]
    done = [i for t in range(10) for i in steps[(1, t)]]
    assert sorted(done + rest) == list(range(n))


def test_import_epochplan_does_not_import_torch() -> None:
    code = "import sys, epochplan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_reprs() -> None:
    # The dataset's length, not the per-rank `num_samples` attribute (3 here).
    assert repr(et.DistributedSampler(range(5), 2, 1)).startswith(
        "DistributedSampler(dataset_len=5, num_replicas=2"
    )
    assert repr(et.ExactDistributedSampler(range(5), 2, 1)).startswith(
        "ExactDistributedSampler(dataset_len=5, num_replicas=2"
    )
    assert "PlanSampler" in et.__all__
    with pytest.raises(TypeError, match="preload_nchunks"):
        et.ChunkSampler(9, 3, None, 4, num_replicas=2, rank=1)  # type: ignore[arg-type]
    # ChunkSampler's own arguments: batch_size, not global_batch_size.
    assert repr(et.ChunkSampler(9, 3, 1, 4, num_replicas=2, rank=1, seed=5)) == (
        "ChunkSampler(num_samples=9, chunk_size=3, preload_nchunks=1, batch_size=4, "
        "num_replicas=2, rank=1, seed=5, drop_last=False, micro_batch_size=2, epoch=0)"
    )


def test_numpy_and_tensor_epochs() -> None:
    ref = et.DistributedSampler(range(10), 3, 1)
    ref.set_epoch(3)
    for epoch in (np.int64(3), np.uint64(3), np.array(3), torch.tensor(3)):
        s = et.DistributedSampler(range(10), 3, 1)
        s.set_epoch(epoch)
        assert list(s) == list(ref) and type(s.epoch) is int
        s.load_state_dict({"epoch": epoch, "seed": np.int64(0), "yielded": 0})
        assert list(s) == list(ref)
    b = et.ElasticBatchSampler(100, 10, 5, num_replicas=2, rank=0)
    b.set_epoch(np.array(2))
    assert type(b.epoch) is int and b.epoch == 2


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
