"""Mixture schedules (DESIGN.md section 11), phases at epochs and inside
them: over random schedules, each epoch's per-source counts are exactly its
phase's quotas (a segment's, apportioned, where a phase starts inside the
epoch);
each source's passes continue across phases (after c samples of a source
of n, every sample was shown floor(c / n) or ceil(c / n) times: none lost
or repeated within a pass); the stratified prefix bound holds inside every
phase; a plan resumes inside any phase on another world size with the same
global batches; the state stays constant-size per source. A phased epoch is
the frozen dealing of an unphased mixture with its phase's quotas and the
consumed counts before it (so the golden vectors of mixtures cover it)."""

from __future__ import annotations

import itertools
import math
import pickle
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep


def sources_and_quotas(
    draw: st.DrawFn, least: int
) -> tuple[list[int], int, Callable[[], list[int]]]:
    """Drawn with ``draw``: 1 to 3 sources' sizes, an epoch's length (at
    least ``least``) and a drawer of quotas summing to it."""
    k = draw(st.integers(1, 3))
    sizes = draw(st.lists(st.integers(1, 30), min_size=k, max_size=k))
    total = draw(st.integers(least, 60))

    def quotas() -> list[int]:
        cuts = sorted(draw(st.lists(st.integers(0, total), min_size=k - 1, max_size=k - 1)))
        return [b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)]

    return sizes, total, quotas


@st.composite
def schedules(draw: st.DrawFn) -> tuple[ep.Mixture, int]:
    sizes, _, quotas = sources_and_quotas(draw, 1)

    starts = sorted(set(draw(st.lists(st.integers(1, 7), max_size=3))))
    mix = ep.Mixture(
        sizes,
        quotas=quotas(),
        seed=draw(st.integers(0, 3)),
        phases=[(s, quotas()) for s in starts],
    )
    return mix, draw(st.integers(1, 9))


@settings(max_examples=120, deadline=None)
@given(planned=schedules())
def test_phases_keep_exact_counts_continuing_passes_and_the_prefix_bound(
    planned: tuple[ep.Mixture, int],
) -> None:
    mix, epochs = planned
    sizes, k = mix.sizes, len(mix.sizes)
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    shown = [np.zeros(n, dtype=np.int64) for n in sizes]
    consumed = [0] * k
    bound = max(0.5, math.ceil(math.log2(k)) / 2) if k > 1 else 0.0
    for e in range(epochs):
        epoch = mix.epoch(e)
        quotas = mix.quotas_at(e)
        assert epoch.quotas == quotas and epoch.consumed == consumed
        ids = np.asarray(epoch)
        src = epoch.sources(np.arange(len(epoch)))
        s = len(epoch)
        assert s == len(mix)  # every phase keeps the epoch's length
        for j in range(k):
            assert int((src == j).sum()) == quotas[j]  # exact per phase
            mine = ids[src == j] - offsets[j]
            np.add.at(shown[j], mine, 1)
            consumed[j] += quotas[j]
            c, n = consumed[j], sizes[j]
            # The passes continue across phases: none lost or repeated in a pass.
            assert set(np.unique(shown[j])) <= {c // n, -(-c // n)}
            assert int(shown[j].sum()) == c
            # The stratified bound, inside the phase.
            prefix = np.cumsum(src == j)
            expected = np.arange(1, s + 1) * quotas[j] / s
            assert np.abs(prefix - expected).max() <= bound + 1e-9
        # The frozen dealing of an unphased mixture with these quotas.
        plain = ep.Mixture(sizes, quotas=quotas, seed=mix.seed)
        assert np.array_equal(np.asarray(plain.epoch(e, consumed=epoch.consumed)), ids)
        assert epoch.consumed_after == consumed


def apportion(quotas: list[int], length: int) -> list[int]:
    """The schedule's rule: floor(q_k * L / S), then largest remainders."""
    total = sum(quotas)
    if length == total:
        return list(quotas)
    out = [q * length // total for q in quotas]
    order = sorted(range(len(quotas)), key=lambda k: (-(quotas[k] * length % total), k))
    for k in order[: length - sum(out)]:
        out[k] += 1
    return out


@st.composite
def inside_schedules(draw: st.DrawFn) -> tuple[ep.Mixture, int]:
    """Schedules whose phases may start inside epochs: ``(epoch, position)``."""
    sizes, total, quotas = sources_and_quotas(draw, 2)

    points = st.tuples(st.integers(0, 5), st.integers(0, total - 1))
    starts = sorted(set(draw(st.lists(points, max_size=5))) - {(0, 0)})
    phases = [((e, p) if p else e, quotas()) for e, p in starts]
    mix = ep.Mixture(sizes, quotas=quotas(), seed=draw(st.integers(0, 3)), phases=phases)
    return mix, draw(st.integers(1, 7))


@settings(max_examples=150, deadline=None)
@given(planned=inside_schedules())
def test_phases_inside_epochs_keep_exact_segments_and_continuing_passes(
    planned: tuple[ep.Mixture, int],
) -> None:
    mix, epochs = planned
    sizes, k, s = mix.sizes, len(mix.sizes), len(mix)
    starts = [(st_, q) if isinstance(st_, tuple) else ((st_, 0), q) for st_, q in mix.phases]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    shown = [np.zeros(n, dtype=np.int64) for n in sizes]
    consumed = [0] * k
    bound = max(0.5, math.ceil(math.log2(k)) / 2) if k > 1 else 0.0
    for e in range(epochs):
        epoch = mix.epoch(e)
        assert epoch.consumed == consumed  # the closed form is the running sum
        ids, src = np.asarray(epoch), epoch.sources(np.arange(s))
        cuts = sorted({0, s} | {p for (se, p), _ in starts if se == e and p > 0})
        for a, b in itertools.pairwise(cuts):
            phase = [q for start, q in starts if start <= (e, a)][-1]
            want = apportion(phase, b - a)
            seg_ids, seg_src = ids[a:b], src[a:b]
            # The segment is the frozen epoch of a plain mixture of its quotas.
            plain = ep.Mixture(sizes, quotas=want, seed=mix.seed).epoch(0, consumed=consumed)
            assert np.array_equal(np.asarray(plain), seg_ids)
            for j in range(k):
                assert int((seg_src == j).sum()) == want[j]  # exact per segment
                np.add.at(shown[j], seg_ids[seg_src == j] - offsets[j], 1)
                consumed[j] += want[j]
                c, n = consumed[j], sizes[j]
                assert set(np.unique(shown[j])) <= {c // n, -(-c // n)}  # passes continue
                prefix = np.cumsum(seg_src == j)  # the stratified bound, in the segment
                expected = np.arange(1, b - a + 1) * want[j] / (b - a)
                assert np.abs(prefix - expected).max() <= bound + 1e-9
        assert epoch.consumed_after == consumed
        assert epoch.quotas == mix.quotas_at(e)


@settings(max_examples=40, deadline=None)
@given(
    planned=st.one_of(schedules(), inside_schedules()),
    g=st.integers(1, 12),
    w=st.integers(1, 5),
    w2=st.integers(1, 5),
    data=st.data(),
)
def test_a_plan_resumes_inside_any_phase_on_another_world_size(
    planned: tuple[ep.Mixture, int], g: int, w: int, w2: int, data: st.DataObject
) -> None:
    mix, epochs = planned
    e = data.draw(st.integers(0, epochs))
    plan = ep.EpochPlan(mix, g, epoch=e, seed=5)
    step = data.draw(st.integers(0, plan.num_steps))
    state = plan.at_step(step).state_dict()
    assert len(state["space"]["consumed"]) == len(mix.sizes)  # constant size per source
    again = ep.EpochPlan.from_state_dict(state, space=mix)
    for t in range(step, plan.num_steps):
        before = np.sort(np.concatenate([plan.step_indices(t, r, w) for r in range(w)]))
        after = np.sort(np.concatenate([again.step_indices(t, r, w2) for r in range(w2)]))
        assert np.array_equal(before, after)
    assert np.array_equal(np.asarray(plan.space), np.asarray(mix.epoch(e)))


def test_a_sampler_follows_the_schedule_and_resumes_in_a_later_phase() -> None:
    torch = pytest.importorskip("torch")
    from epochplan.torch import ElasticBatchSampler

    del torch
    # 1:1, then 2:1 from epoch 1, then 1:3 from epoch 2 (12 samples an epoch).
    mix = ep.Mixture([40, 40], weights=[1, 1], num_samples=12, phases=[(1, [2, 1]), (2, [1, 3])])
    assert mix.phases == [(0, [6, 6]), (1, [8, 4]), (2, [3, 9])]
    counts = []
    for e in range(3):
        sampler = ElasticBatchSampler(ep.PlanSpec(mix, 4), 2, rank=0, num_replicas=2)
        other = ElasticBatchSampler(ep.PlanSpec(mix, 4), 2, rank=1, num_replicas=2)
        ids = []
        for s in (sampler, other):
            s.set_epoch(e)
            ids += [i for mb in s for i, x in zip(mb, mb.weights, strict=True) if x > 0]
        counts.append([sum(i < 40 for i in ids), sum(i >= 40 for i in ids)])
    assert counts == [[6, 6], [8, 4], [3, 9]]
    # Stopped after a step of epoch 2 on 2 ranks, resumed on 3.
    first = ElasticBatchSampler(ep.PlanSpec(mix, 4), 2, rank=0, num_replicas=2)
    first.set_epoch(2)
    state = first.state_dict_at_step(1)
    resumed = [
        ElasticBatchSampler(ep.PlanSpec(mix, 4), 2, rank=r, num_replicas=3) for r in range(3)
    ]
    rest = []
    for s in resumed:
        s.load_state_dict(state)
        rest += [i for mb in s for i, x in zip(mb, mb.weights, strict=True) if x > 0]
    plan = ep.EpochPlan(mix, 4, epoch=2)
    expected = np.concatenate([plan.step_indices(t, 0, 1) for t in (1, 2)])
    assert sorted(rest) == sorted(expected.tolist())


def test_phases_pickle_and_travel_in_plan_directories(tmp_path) -> None:
    from epochplan.planfile import open_plan, write_plan

    # A phase at epoch 2, then one from position 4 of epoch 3.
    mix = ep.Mixture([5, 7], quotas=[4, 2], seed=2, phases=[(2, [1, 5]), ((3, 4), [3, 3])])
    back = pickle.loads(pickle.dumps(mix))
    assert back.phases == mix.phases and "phases=[(2, [1, 5]), ((3, 4), [3, 3])]" in repr(mix)
    assert np.array_equal(np.asarray(back.epoch(3)), np.asarray(mix.epoch(3)))
    write_plan(tmp_path / "p", ep.PlanSpec(mix, 3), 2, epochs=range(5))
    d = open_plan(tmp_path / "p")
    assert d.space.phases == mix.phases
    for e in range(5):
        got = np.sort(np.concatenate([d.rank_ids(e, r) for r in range(2)]))
        assert np.array_equal(got, np.sort(np.asarray(mix.epoch(e))))


def test_bad_schedules_raise_errors_naming_the_phase() -> None:
    with pytest.raises(ValueError, match=r"increasing epochs \(and positions\): phases\[2\]"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[(2, [2, 0]), (2, [0, 2])])
    with pytest.raises(ValueError, match=r"phases\[1\] must keep the epoch's length 2"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[(1, [2, 1])])
    with pytest.raises(ValueError, match=r"phases\[1\]\[0\]"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[(0, [2, 0])])
    with pytest.raises(ValueError, match="quotas must have one entry per source"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[(1, [2])])
    with pytest.raises(TypeError, match=r"phases\[1\] must be a pair"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[[1, [2, 0]]])
    with pytest.raises(ValueError, match="phases need weights, repeat or quotas"):
        ep.Mixture([3, 3], phases=[(1, [2, 0])])
    with pytest.raises(ValueError, match=r"phases\[1\]\[1\]"):
        ep.Mixture([3, 3], weights=[1, 1], phases=[(1, [-1.0, 2.0])])
    with pytest.raises(ValueError, match=r"phases\[1\] must start inside its epoch"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[((1, 2), [2, 0])])
    with pytest.raises(ValueError, match=r"phases\[1\]\[0\] must start after the first"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[((0, 0), [2, 0])])
    with pytest.raises(ValueError, match="an epoch or a pair"):
        ep.Mixture([3, 3], quotas=[1, 1], phases=[((1, 1, 1), [2, 0])])
