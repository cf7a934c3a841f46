"""ElasticBatchSampler and ChunkSampler: exact, equal-step, elastic, resumable on any world size."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep
import epochplan.torch as et


def test_elastic_load_state_dict_names_its_argument() -> None:
    s = et.ElasticBatchSampler(ep.PlanSpec(10, 4), 2, rank=0, num_replicas=2)
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
            et.ElasticBatchSampler(
                ep.PlanSpec(n, g, seed=seed, drop_last=drop_last), b, rank=r, num_replicas=w
            )
        )
        for r in range(w)
    ]
    plan = ep.EpochPlan(n, g, seed=seed, drop_last=drop_last)
    order = np.asarray(ep.Permutation(n, seed=seed)).tolist()
    # The same number of micro-batches, and of steps, on every rank; never empty.
    assert len({len(r) for r in ranks}) == 1
    assert len(ranks[0]) == len(
        et.ElasticBatchSampler(ep.PlanSpec(n, g, drop_last=drop_last), b, rank=0, num_replicas=w)
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
                et.ElasticBatchSampler(ep.PlanSpec(n, g, seed=2), b, rank=r, num_replicas=w)
                for r in range(w)
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
                s2 = et.ElasticBatchSampler(ep.PlanSpec(n, g, seed=0), b2, rank=r, num_replicas=w2)
                s2.load_state_dict(state)
                assert s2.epoch == 1 and s2.seed == 2
                expected_len = len(s2)
                items = list(s2)
                assert len(items) == expected_len
                assert all(mb.step >= step for mb in items)
                rest += [i for mb in items for i, x in zip(mb, mb.weights, strict=True) if x > 0]
            assert sorted(done + rest) == list(range(n))


def test_elastic_len_after_load_and_iteration_rules() -> None:
    s = et.ElasticBatchSampler(ep.PlanSpec(1001, 64), 8, rank=1, num_replicas=3)
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
    s = et.ElasticBatchSampler(ep.PlanSpec(10, 3), 3, rank=0, num_replicas=1)
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
    s = et.ElasticBatchSampler(ep.PlanSpec(100, 10), 2, rank=0, num_replicas=1)
    for key, value in [("num_samples", 99), ("global_batch_size", 20), ("drop_last", True)]:
        other = dict(s.state_dict(), **{key: value})
        with pytest.raises(ValueError, match=key):
            s.load_state_dict(other)
    with pytest.raises(ValueError, match="format_version"):
        s.load_state_dict(dict(s.state_dict(), format_version=99))
    with pytest.raises(ValueError, match="kind"):
        s.load_state_dict(
            et.ElasticBatchSampler(
                ep.PlanSpec(100, 10, kind="identity"), 2, rank=0, num_replicas=1
            ).state_dict()
        )
    # Another chunk layout is another order: resuming in it would repeat and skip samples.
    c = et.ChunkSampler(500, 20, ep.Chunked(7, 2), num_replicas=1, rank=0)
    for key, other in [
        ("chunk_size", et.ChunkSampler(500, 20, ep.Chunked(10, 2), num_replicas=1, rank=0)),
        ("preload_nchunks", et.ChunkSampler(500, 20, ep.Chunked(7, 3), num_replicas=1, rank=0)),
    ]:
        with pytest.raises(ValueError, match=key):
            other.load_state_dict(c.state_dict_at_step(3))


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
        spec, kw = ep.PlanSpec(500, 48, seed=2), {"num_replicas": 3, "rank": r}
        mine, base = Precomputed(spec, 5, **kw), et.ElasticBatchSampler(spec, 5, **kw)
        for s in (mine, base):
            s.set_epoch(3)
        assert [(list(m), m.weights.tolist(), m.step) for m in mine] == [
            (list(m), m.weights.tolist(), m.step) for m in base
        ]
        mine.load_state_dict(base.state_dict_at_step(4))
        assert next(iter(mine)).step == 4


def test_chunk_sampler_windows_touch_at_most_preload_nchunks() -> None:
    n, c, k = 1037, 10, 3
    perm = np.asarray(ep.Permutation(n, seed=4, kind=ep.Chunked(c, k)))
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
            s = et.ChunkSampler(n, 32, ep.Chunked(c, k), num_replicas=w, rank=r, seed=4)
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
            for mb in et.ChunkSampler(n, g, ep.Chunked(c, k), num_replicas=w, rank=r, seed=1):
                steps.setdefault((w, mb.step), []).extend(
                    i for i, x in zip(mb, mb.weights, strict=True) if x > 0
                )
    for t in range(25):
        assert sorted(steps[(1, t)]) == sorted(steps[(3, t)])
    s = et.ChunkSampler(n, g, ep.Chunked(c, k), num_replicas=3, rank=0, seed=1)
    assert len(next(iter(s))) == 7  # ceil(20 / 3): one micro-batch per rank and step
    state = s.state_dict_at_step(10)
    s2 = et.ChunkSampler(n, g, ep.Chunked(c, k), num_replicas=2, rank=1)
    s2.load_state_dict(state)
    assert next(iter(s2)).step == 10 and s2.seed == 1
    # Resumed on 2 ranks, the rest of the epoch: steps 10 on, every sample once.
    rest = []
    for r in range(2):
        resumed = et.ChunkSampler(n, g, ep.Chunked(c, k), num_replicas=2, rank=r)
        resumed.load_state_dict(state)
        rest += [i for mb in resumed for i, x in zip(mb, mb.weights, strict=True) if x > 0]
    done = [i for t in range(10) for i in steps[(1, t)]]
    assert sorted(done + rest) == list(range(n))


def plain(b: et.WeightedIndices) -> tuple[list[int], list[float], int, bool]:
    return list(b), np.asarray(b.weights).tolist(), b.step, b.step_end


@pytest.mark.parametrize("threads", [1, 2])
def test_iteration_is_each_steps_batches_in_turn(threads: int) -> None:
    # The iteration takes the plan's iterator (steps made ahead on the pool);
    # step_batches deals one step: the same batches, from the start and
    # from a resumed step, at any thread count.
    lengths = np.random.default_rng(5).integers(1, 400, size=3_001).astype(np.int32)
    specs = [
        (ep.PlanSpec(3_001, 64, seed=4), {"micro_batch_size": 3}),
        *(
            (ep.PlanSpec(3_001, 64, seed=4, tokens=ep.Tokens(lengths, packing=p)), {})
            for p in ("sorted", "first_fit")
        ),
        (ep.PlanSpec(3_001, 64, seed=4, kind=ep.Chunked(100)), {"micro_batch_size": 2}),
    ]
    ep.set_num_threads(threads)
    try:
        for spec, caps in specs:
            cap = {"max_tokens": 900} if spec.tokens is not None else {}
            size = caps.get("micro_batch_size")
            s = et.ElasticBatchSampler(spec, size, rank=1, num_replicas=3, **cap)
            steps = range(s.plan.num_steps)
            want = [plain(b) for t in steps for b in s.step_batches(t)]
            assert [plain(b) for b in s] == want
            s.load_state_dict(s.state_dict_at_step(7))
            assert [plain(b) for b in s] == [w for w in want if w[2] >= 7]
    finally:
        ep.set_num_threads(0)
