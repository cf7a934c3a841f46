"""Plans, permutations and samplers over index spaces: exact coverage of the
space's ids (with their multiplicities for mixtures), step sets independent
of the world size, equal micro-batch counts, resume at a step boundary on
another world size, per-step stratification of mixtures, and the state's
record of the space."""

from __future__ import annotations

import pickle
import resource
from collections import Counter
from math import ceil, log2

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep


def selections(n: int, bits: np.ndarray, seed: int = 0) -> list[ep.Selection]:
    """The same ids as every form of selection (a split part has its own)."""
    ids = np.flatnonzero(bits)
    edges = np.flatnonzero(np.diff(np.concatenate([[0], bits.astype(np.int8), [0]])))
    ranges = list(zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True))
    return [
        ep.Selection.from_ranges(ranges, n),
        ep.Selection.from_mask(bits),
        ep.Selection.from_indices(ids[::-1].copy(), n),
        ep.random_split(n, [len(ids), n - len(ids)], seed=seed)[0],
    ]


def all_ids(plan: ep.EpochPlan, w: int) -> list[int]:
    return sorted(np.concatenate([plan.rank_indices(r, w) for r in range(w)]).tolist())


def step_sets(plan: ep.EpochPlan, w: int) -> list[list[int]]:
    return [
        sorted(np.concatenate([plan.step_indices(t, r, w) for r in range(w)]).tolist())
        for t in range(plan.start_step, plan.num_steps)
    ]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(0, 90),
    bits_seed=st.integers(0, 2**32 - 1),
    density=st.sampled_from([0.0, 0.1, 0.5, 1.0]),
    g=st.integers(1, 12),
    kind=st.sampled_from(["cipher", "uniform", "identity", "chunked"]),
)
def test_selection_plans_are_exact_and_elastic(
    n: int, bits_seed: int, density: float, g: int, kind: str
) -> None:
    bits = np.random.default_rng(bits_seed).random(n) < density
    order = ep.Chunked(3, 2) if kind == "chunked" else kind
    for sel in selections(n, bits, bits_seed):
        plan = ep.EpochPlan(sel, g, seed=5, kind=order)
        want = sorted(np.asarray(sel).tolist())
        reference = step_sets(plan, 1)
        for w in range(1, 18):
            assert all_ids(plan, w) == want
            assert step_sets(plan, w) == reference
            counts = {len(list(plan.micro_batches(r, w, 2))) for r in range(w)}
            assert len(counts) == 1
        # Stop after half the steps on 3 ranks; resume from the state on 2.
        stop = plan.num_steps // 2
        done = [i for t in range(stop) for r in range(3) for i in plan.step_indices(t, r, 3)]
        state = plan.at_step(stop).state_dict()
        resumed = ep.EpochPlan.from_state_dict(state, space=sel)
        assert sorted(done + all_ids(resumed, 2)) == want
        # The permutation of the same order over the selection.
        perm = ep.Permutation(sel, seed=5, kind=order)
        assert sorted(np.asarray(perm).tolist()) == want


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 25), min_size=1, max_size=5),
    data=st.data(),
    g=st.integers(1, 16),
    epoch=st.integers(0, 3),
)
def test_mixture_plans_cover_each_quota_and_stay_mixed(
    sizes: list[int], data: st.DataObject, g: int, epoch: int
) -> None:
    quotas = data.draw(st.lists(st.integers(0, 40), min_size=len(sizes), max_size=len(sizes)))
    mix = ep.Mixture(sizes, quotas=quotas, seed=2)
    plan = ep.EpochPlan(mix, g, seed=7, epoch=epoch)
    expected = Counter(np.asarray(mix.epoch(epoch)).tolist())
    reference = step_sets(plan, 1)
    bound = max(1, ceil(log2(len(sizes)))) if len(sizes) > 1 else 0
    total = sum(quotas)
    for w in (1, 2, 3, 8, 17):
        assert Counter(all_ids(plan, w)) == expected
        assert step_sets(plan, w) == reference
    for t in range(plan.num_steps):
        src = np.concatenate([plan.sources(t, r, 3) for r in range(3)])
        ids = np.concatenate([plan.step_indices(t, r, 3) for r in range(3)])
        offsets = np.cumsum([0, *sizes])
        assert ((ids >= offsets[src]) & (ids < offsets[src + 1])).all()
        for k, q in enumerate(quotas):
            share = len(src) * q / total
            assert abs(int((src == k).sum()) - share) <= bound + 1e-9
    if plan.num_steps > 1:
        stop = plan.num_steps - 1
        done = [i for t in range(stop) for r in range(3) for i in plan.step_indices(t, r, 3)]
        state = plan.at_step(stop).state_dict()
        assert state["space"]["consumed"] == [q * epoch for q in quotas]
        resumed = ep.EpochPlan.from_state_dict(state, space=mix)
        assert Counter(done + all_ids(resumed, 2)) == expected


def test_class_balanced_batches_on_eight_ranks() -> None:
    # Four classes of one store, mixed with equal quotas, dealt to 8 ranks:
    # every global batch holds each class within ceil(log2 K) of its share.
    labels = np.random.default_rng(0).choice(4, size=5000, p=[0.7, 0.2, 0.07, 0.03])
    classes = [ep.Selection.from_mask(labels == k) for k in range(4)]
    mix = ep.Mixture(classes, quotas=[400] * 4, seed=1)
    plan = ep.EpochPlan(mix, 64, seed=3)
    for t in range(plan.num_steps):
        ids = np.concatenate([plan.step_indices(t, r, 8) for r in range(8)])
        sources = np.concatenate([plan.sources(t, r, 8) for r in range(8)])
        assert (labels[ids] == sources).all()
        counts = np.bincount(sources, minlength=4)
        assert (np.abs(counts - len(ids) / 4) <= 2).all(), counts
        # Every rank sees more than one class (the step shuffle).
        assert all(len(set(plan.sources(t, r, 8).tolist())) > 1 for r in range(8))


def test_a_ten_to_the_nine_store_split_for_four_ranks() -> None:
    # Train and validation of a 10**9-sample store: no array of the store's
    # size is built. The parts are checked disjoint and the plans exact over
    # what every rank reads of the first steps (the whole epoch is exact by
    # the properties above; running all of it here would take minutes).
    n = 10**9
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    train, val = ep.random_split(n, [0.9, 0.1], seed=11)
    assert len(train) + len(val) == n
    for part in (train, val):
        plan = ep.EpochPlan(part, 4096, seed=1)
        assert plan.num_steps == -(-len(part) // 4096)
        seen = np.concatenate([plan.step_indices(t, r, 4) for t in range(3) for r in range(4)])
        assert len(np.unique(seen)) == len(seen) == 3 * 4096
        other = val if part is train else train
        assert not any(int(i) in other for i in seen[:2000])
        assert all(int(i) in part for i in seen[:2000])
        last = plan.num_steps - 1
        tail = np.concatenate([plan.step_indices(last, r, 4) for r in range(4)])
        assert len(tail) == len(part) - last * 4096
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mib < 200, grown_mib


def test_token_plans_over_a_selection_read_lengths_by_store_id() -> None:
    n = 200
    lengths = (np.arange(n) * 37 % 50 + 1).astype(np.int32)
    sel = ep.Selection.from_ranges([(20, 120)], n)
    plan = ep.EpochPlan(sel, 16, tokens=ep.Tokens(lengths), seed=2)
    want = sorted(range(20, 120))
    for w in (1, 3, 5):
        assert all_ids(plan, w) == want
        for t in range(plan.num_steps):
            batches = plan.step_micro_batches(t, 0, w, max_tokens=200)
            total = sum(
                (weights * lengths[ids]).sum()
                for r in range(w)
                for ids, weights in plan.step_micro_batches(t, r, w, max_tokens=200)
            )
            assert abs(total - w) < 1e-9 and batches
    with pytest.raises(ValueError, match="lengths must hold one value per sample"):
        ep.EpochPlan(sel, 16, tokens=ep.Tokens(lengths[:100]))
    mix = ep.Mixture([sel, ep.Selection.from_ranges([(150, 200)], n)], quotas=[30, 30], seed=1)
    token_mix = ep.EpochPlan(mix, 8, tokens=ep.Tokens(lengths))
    for t in range(token_mix.num_steps):
        ids = token_mix.step_indices(t, 1, 2)
        src = token_mix.sources(t, 1, 2)
        assert (((ids >= 150) & (src == 1)) | ((ids < 120) & (src == 0))).all()


def test_states_record_the_space_and_refuse_another() -> None:
    sel = ep.Selection.from_ranges([(0, 40)], 100)
    plan = ep.EpochPlan(sel, 8, seed=3).at_step(2)
    state = plan.state_dict()
    assert state["space"]["kind"] == "selection"
    assert state["space"]["digest"].startswith("blake3:")
    with pytest.raises(ValueError, match="space must be given"):
        ep.EpochPlan.from_state_dict(state)
    other = ep.Selection.from_ranges([(1, 41)], 100)
    with pytest.raises(ValueError, match="space differs from the state's: it has as many ids"):
        ep.EpochPlan.from_state_dict(state, space=other)
    with pytest.raises(ValueError, match="space differs from the state's: it has 39 ids"):
        ep.EpochPlan.from_state_dict(state, space=ep.Selection.from_ranges([(0, 39)], 100))
    plain = ep.EpochPlan(40, 8).state_dict()
    with pytest.raises(ValueError, match="space must be None"):
        ep.EpochPlan.from_state_dict(plain, space=sel)
    mix = ep.Mixture([30, 10], quotas=[20, 20], seed=1)
    mstate = ep.EpochPlan(mix, 8, epoch=2).at_step(1).state_dict()
    assert mstate["space"]["consumed"] == [40, 40]
    with pytest.raises(ValueError, match="space differs"):
        ep.EpochPlan.from_state_dict(mstate, space=ep.Mixture([30, 10], quotas=[25, 15], seed=1))
    with pytest.raises(ValueError, match="space differs"):
        ep.EpochPlan.from_state_dict(mstate, space=ep.Mixture([30, 10], quotas=[20, 20], seed=2))
    # Pickling carries the space.
    for p in (plan, ep.EpochPlan.from_state_dict(mstate, space=mix)):
        q = pickle.loads(pickle.dumps(p))
        assert q.state_dict() == p.state_dict()
        assert (q.step_indices(q.start_step, 0, 2) == p.step_indices(p.start_step, 0, 2)).all()


def test_mixture_plans_take_no_other_kind_and_one_epoch() -> None:
    mix = ep.Mixture([10, 10], seed=0)
    assert ep.EpochPlan(mix, 4).kind == "identity"
    assert ep.EpochPlan(mix, 4, kind="cipher").kind == "identity"
    with pytest.raises(ValueError, match="kind does not apply to a plan over a Mixture"):
        ep.EpochPlan(mix, 4, kind="uniform")
    e3 = mix.epoch(3)
    assert ep.EpochPlan(e3, 4).epoch == 3
    with pytest.raises(ValueError, match="epoch must be the MixtureEpoch's"):
        ep.EpochPlan(e3, 4, epoch=2)
    # A curriculum: the epoch continues each source where it stopped.
    e = ep.Mixture([10, 10], quotas=[4, 16], seed=0).epoch(1, consumed=[10, 4])
    plan = ep.EpochPlan(e, 4)
    assert plan.state_dict()["space"]["consumed"] == [10, 4]
    assert Counter(all_ids(plan, 3)) == Counter(np.asarray(e).tolist())


def test_sources_of_a_plain_plan_are_zero() -> None:
    plan = ep.EpochPlan(10, 4)
    assert plan.sources(0, 0, 2).tolist() == [0, 0]
    assert plan.space is None
    sel = ep.Selection.from_ranges([(0, 5)], 10)
    assert ep.EpochPlan(sel, 4).space is sel


def test_permutation_over_a_selection() -> None:
    sel = ep.Selection.from_mask(np.arange(50) % 5 == 0)
    perm = ep.Permutation(sel, seed=1, epoch=2)
    order = ep.Permutation(len(sel), seed=1, epoch=2)
    assert perm[:].tolist() == np.asarray(sel)[order[:]].tolist()
    assert perm[3] == sel[order[3]] and perm.take([-1]) == sel[order[-1]]
    assert 5 in perm and 6 not in perm and perm.selection is sel
    assert pickle.loads(pickle.dumps(perm))[:].tolist() == perm[:].tolist()
    assert "Selection of 10 ids" in repr(perm)


torch = pytest.importorskip("torch")


def test_samplers_take_index_spaces() -> None:
    from epochplan.torch import (
        ChunkSampler,
        DistributedSampler,
        ElasticBatchSampler,
        ExactDistributedSampler,
    )

    dataset = list(range(100))
    sel = ep.Selection.from_mask(np.arange(100) % 3 == 0)
    want = sorted(np.asarray(sel).tolist())
    for w in (1, 2, 3):
        exact = [i for r in range(w) for i in ExactDistributedSampler(dataset, w, r, selection=sel)]
        assert sorted(exact) == want
        padded = [DistributedSampler(dataset, w, r, selection=sel) for r in range(w)]
        assert {len(s) for s in padded} == {-(-len(sel) // w)}
        assert set(i for s in padded for i in s) == set(want)
        elastic = [
            i
            for r in range(w)
            for mb in ElasticBatchSampler(ep.PlanSpec(sel, 8), 2, num_replicas=w, rank=r)
            for i, wt in zip(mb, mb.weights, strict=True)
            if wt > 0
        ]
        assert sorted(elastic) == want
        chunked = [
            i
            for r in range(w)
            for mb in ChunkSampler(sel, 8, ep.Chunked(4, 2), num_replicas=w, rank=r)
            for i, wt in zip(mb, mb.weights, strict=True)
            if wt > 0
        ]
        assert sorted(chunked) == want
    with pytest.raises(ValueError, match="selection must be of the dataset's 99 samples"):
        DistributedSampler(list(range(99)), 1, 0, selection=sel)
    # A mixture sampler stopped on 3 ranks resumes on 2 from its state.
    mix = ep.Mixture([40, 20], quotas=[30, 30], seed=4)
    first = [ElasticBatchSampler(ep.PlanSpec(mix, 8), 2, num_replicas=3, rank=r) for r in range(3)]
    state = first[0].state_dict_at_step(3)
    done = [
        i
        for s in first
        for mb in s
        if mb.step < 3
        for i, wt in zip(mb, mb.weights, strict=True)
        if wt
    ]
    rest = []
    for r in range(2):
        s = ElasticBatchSampler(ep.PlanSpec(mix, 8), 2, num_replicas=2, rank=r)
        s.load_state_dict(state)
        rest += [i for mb in s for i, wt in zip(mb, mb.weights, strict=True) if wt]
    assert Counter(done + rest) == Counter(np.asarray(mix.epoch(0)).tolist())
    other = ElasticBatchSampler(
        ep.PlanSpec(ep.Mixture([40, 20], quotas=[31, 29], seed=4), 8), 2, num_replicas=2, rank=0
    )
    with pytest.raises(ValueError, match="space differs"):
        other.load_state_dict(state)
    with pytest.raises(TypeError, match="the Mixture, not one of its epochs"):
        ElasticBatchSampler(ep.PlanSpec(mix.epoch(1), 8), 2, num_replicas=2, rank=0)
