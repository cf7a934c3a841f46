"""Samples longer than the token cap, found before the first batch
(DESIGN.md section 11): a plan refuses them at its first micro_batches
call, a sampler at construction, with how many and the first ids; the
policy oversize="truncate" cuts them (lengths and loss tokens exactly as
the rule says) and "skip" leaves them out of every step, weight and
step_tokens, while every other sample is still planned exactly once."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep

torch = pytest.importorskip("torch")

from epochplan.torch import ElasticBatchSampler  # noqa: E402

CAP = 64


def lognormal(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.maximum(1, rng.lognormal(3.0, 0.9, n)).astype(np.int32)


def sampler(lengths, world, rank, **kw) -> ElasticBatchSampler:
    tokens = ep.Tokens(lengths, kw.pop("loss_tokens", None), oversize=kw.pop("oversize", "error"))
    spec = ep.PlanSpec(
        kw.pop("space", len(lengths)), kw.pop("global_batch_size", 16), seed=4, tokens=tokens
    )
    return ElasticBatchSampler(
        spec, None, max_tokens=kw.pop("max_tokens", CAP), rank=rank, num_replicas=world, **kw
    )


def test_a_plan_refuses_oversize_samples_at_its_first_micro_batches_call() -> None:
    lengths = lognormal(2000, 1)
    over = np.flatnonzero(lengths > CAP)
    assert 10 < over.size < 500
    plan = ep.EpochPlan(len(lengths), 16, tokens=ep.Tokens(lengths))
    ids, got = plan.oversize(CAP)
    assert ids.tolist() == over.tolist() and got.tolist() == lengths[over].tolist()
    with pytest.raises(ValueError) as e:
        plan.micro_batches(0, 2, max_tokens=CAP)  # before any batch, whatever step holds them
    message = str(e.value)
    assert message.startswith(f"lengths: {over.size} samples are longer than max_tokens ({CAP})")
    first = ", ".join(f"{i} ({lengths[i]} tokens)" for i in over[:10])
    assert f"the first ids: {first} and {over.size - 10} more. Give" in message
    assert 'Give oversize="skip" (or "truncate", in a sampler)' in message
    with pytest.raises(ValueError, match="longer than max_tokens"):
        plan.num_micro_batches(plan.num_steps - 1, 3, max_tokens=CAP)
    # Within the cap, nothing is refused.
    assert plan.oversize(int(lengths.max()))[0].size == 0


def test_a_plan_over_a_selection_reports_only_the_selections_samples() -> None:
    lengths = np.array([100, 1, 200, 2, 300, 3], dtype=np.int32)
    sel = ep.Selection.from_ranges([(1, 4)], 6)
    ids, got = ep.EpochPlan(sel, 2, tokens=ep.Tokens(lengths)).oversize(50)
    assert ids.tolist() == [2] and got.tolist() == [200]


def test_a_sampler_refuses_at_construction_with_how_many_and_the_first_ids() -> None:
    lengths = lognormal(3000, 2)
    over = np.flatnonzero(lengths > CAP)
    with pytest.raises(ValueError, match=f"lengths: {over.size} samples are longer"):
        sampler(lengths, 4, 1)
    fine = sampler(np.minimum(lengths, CAP), 4, 1)
    assert fine.oversize_report is not None and fine.oversize_report.count == 0
    with pytest.raises(ValueError, match="oversize must be"):
        sampler(lengths, 4, 1, oversize="drop")
    with pytest.raises(TypeError, match="oversize must be"):
        sampler(lengths, 4, 1, oversize=None)


def all_ranks(lengths, world, **kw):
    """Every rank's micro-batches of the epoch: (step, ids, weights)."""
    out = []
    for rank in range(world):
        s = sampler(lengths, world, rank, **kw)
        out += [(mb.step, list(mb), mb.weights) for mb in s]
    return out, s


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(1, 300),
    world=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    sft=st.booleans(),
)
def test_truncate_cuts_lengths_and_loss_tokens_and_keeps_every_sample_once(
    n: int, world: int, seed: int, sft: bool
) -> None:
    lengths = lognormal(n, seed)
    rng = np.random.default_rng(seed)
    loss = (lengths - 1) if not sft else rng.integers(0, lengths + 1).astype(np.int32)
    batches, s = all_ranks(lengths, world, loss_tokens=loss, oversize="truncate")
    over = np.flatnonzero(lengths > CAP)
    assert s.oversize_report.ids.tolist() == over.tolist()
    assert s.oversize_report.lengths.tolist() == lengths[over].tolist()
    cut = np.minimum(lengths, CAP)
    cut_loss = np.where(lengths > CAP, np.maximum(loss - (lengths - CAP), 0), loss)
    real = [
        (step, i, w) for step, ids, ws in batches for i, w in zip(ids, ws, strict=True) if w > 0
    ]
    filler_ids = [i for _, ids, ws in batches for i, w in zip(ids, ws, strict=True) if w == 0]
    assert all(cut[ids].sum() <= CAP for _, ids, _ in batches)
    # Every sample once, in its step; the weights are W over the cut loss tokens.
    plan = s.plan
    for step in range(plan.num_steps):
        step_ids = plan.step_indices(step, 0, 1)
        total = cut_loss[step_ids].sum()
        assert plan.step_tokens(step) == total
        got = sorted(i for st_, i, _ in real if st_ == step)
        assert got == (sorted(step_ids.tolist()) if total > 0 else [])
        for st_, _, w in real:
            if st_ == step:
                assert w == pytest.approx(world / total, rel=1e-15)
    assert set(filler_ids) <= set(range(n))


@settings(max_examples=20, deadline=None)
@given(n=st.integers(1, 300), world=st.integers(1, 5), seed=st.integers(0, 2**16))
def test_skip_leaves_the_samples_out_of_every_step_and_weight_exactly(
    n: int, world: int, seed: int
) -> None:
    lengths = lognormal(n, seed)
    over = np.flatnonzero(lengths > CAP)
    batches, s = all_ranks(lengths, world, oversize="skip")
    assert s.oversize_report.ids.tolist() == over.tolist()
    real = [
        (step, i, w) for step, ids, ws in batches for i, w in zip(ids, ws, strict=True) if w > 0
    ]
    kept = sorted(set(range(n)) - set(over.tolist()))
    assert sorted(i for _, i, _ in real) == kept  # each kept sample once, none skipped
    assert not set(over.tolist()) & {i for _, ids, _ in batches for i in ids}
    plan = s.plan
    assert plan.num_samples == len(kept)  # an empty epoch when every sample is over
    for step in range(plan.num_steps):
        step_ids = plan.step_indices(step, 0, 1)
        total = int(lengths[step_ids].sum())
        assert plan.step_tokens(step) == total
        # The step's weighted tokens over all ranks: W (the step's token mean).
        weighted = sum(w * lengths[i] for st_, i, w in real if st_ == step)
        assert weighted == pytest.approx(world, rel=1e-12)


def test_a_truncating_plan_resumes_and_pickles_with_its_cut() -> None:
    lengths = lognormal(500, 3)
    s = sampler(lengths, 3, 0, oversize="truncate", loss_tokens=lengths - 1)
    state = s.plan.at_step(2).state_dict()
    assert state["max_length"] == CAP
    again = ep.EpochPlan.from_state_dict(state, lengths=lengths, loss_tokens=lengths - 1)
    assert again.max_length == CAP and again.start_step == 2
    assert [again.step_tokens(t) for t in range(2, 5)] == [
        s.plan.step_tokens(t) for t in range(2, 5)
    ]
    assert pickle.loads(pickle.dumps(s.plan)).max_length == CAP
    # A sampler resumed from the state continues the same micro-batches.
    other = sampler(lengths, 2, 1, oversize="truncate", loss_tokens=lengths - 1)
    other.load_state_dict(s.state_dict_at_step(2))
    first = next(iter(other))
    assert first.step == 2


def test_skip_over_a_selection_and_refusals() -> None:
    lengths = np.array([100, 1, 200, 2, 300, 3, 4], dtype=np.int32)
    sel = ep.Selection.from_ranges([(1, 7)], 7)
    s = sampler(lengths, 2, 0, space=sel, global_batch_size=2, oversize="skip", max_tokens=50)
    assert s.oversize_report.ids.tolist() == [2, 4]
    assert sorted(np.asarray(s.plan.space).tolist()) == [1, 3, 5, 6]
    mix = ep.Mixture([1, 1, 5], weights=[1, 1, 1], num_samples=6)  # source 0 is sample 0
    with pytest.raises(ValueError, match="leaves source 0 of the Mixture without samples"):
        sampler(lengths, 2, 0, space=mix, global_batch_size=2, oversize="skip", max_tokens=50)
    with pytest.raises(TypeError, match="lengths must be an array"):
        ep.EpochPlan(5, 2, tokens=ep.Tokens(None, max_length=3))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_length"):
        ep.EpochPlan(5, 2, tokens=ep.Tokens(np.ones(5, dtype=np.int32), max_length=0))
    with pytest.raises(ValueError, match="max_tokens"):
        ep.EpochPlan(5, 2, tokens=ep.Tokens(np.ones(5, dtype=np.int32))).oversize(0)
    with pytest.raises(ValueError, match="no lengths"):
        ep.EpochPlan(5, 2).oversize(3)


def test_the_scan_reads_a_memmap_once_in_order(tmp_path) -> None:
    lengths = lognormal(100_000, 5)
    path = tmp_path / "lengths.i32"
    lengths.tofile(path)
    mm = np.memmap(path, dtype=np.int32, mode="r")
    plan = ep.EpochPlan(len(mm), 1024, tokens=ep.Tokens(mm))
    ids, _ = plan.oversize(CAP)
    assert ids.tolist() == np.flatnonzero(lengths > CAP).tolist()
    again, _ = plan.oversize(CAP)
    assert again.tolist() == ids.tolist()


def test_plan_files_refuse_before_writing_or_skip_the_samples(tmp_path) -> None:
    from epochplan.planfile import write_plan

    lengths = lognormal(400, 6)
    over = np.flatnonzero(lengths > CAP)
    assert over.size > 0
    with pytest.raises(ValueError, match=f"lengths: {over.size} samples are longer"):
        write_plan(
            tmp_path / "refused", ep.PlanSpec(400, 32, tokens=ep.Tokens(lengths)), 3, max_tokens=CAP
        )
    assert not (tmp_path / "refused").exists()  # nothing written
    d = write_plan(
        tmp_path / "s",
        ep.PlanSpec(400, 32, seed=4, tokens=ep.Tokens(lengths, oversize="skip")),
        3,
        max_tokens=CAP,
    )
    ids = np.concatenate([d.rank_ids(0, r) for r in range(3)])
    assert sorted(ids.tolist()) == sorted(set(range(400)) - set(over.tolist()))
    # The directory's plan is the sampler's: the same ids on every rank.
    s = sampler(lengths, 3, 1, global_batch_size=32, oversize="skip")
    assert d.rank_ids(0, 1).tolist() == s.plan.rank_indices(1, 3).tolist()


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 200),
    kind=st.sampled_from(["ranges", "mask", "indices", "split"]),
    seed=st.integers(0, 2**16),
)
def test_skip_over_every_kind_of_selection_keeps_exactly_its_other_samples(
    n: int, kind: str, seed: int
) -> None:
    lengths = lognormal(n, seed)
    rng = np.random.default_rng(seed)
    if kind == "ranges":
        sel = ep.Selection.from_ranges([(0, n // 2), (n // 2 + 1, n)], n)
    elif kind == "mask":
        sel = ep.Selection.from_mask(rng.random(n) < 0.7)
    elif kind == "indices":
        sel = ep.Selection.from_indices(rng.permutation(n)[: n // 2 + 1], n)
    else:
        sel = ep.random_split(n, [0.6, 0.4], seed=seed)[0]
    members = np.asarray(sel)
    s = sampler(lengths, 2, 0, space=sel, global_batch_size=8, oversize="skip")
    over = np.sort(members[lengths[members] > CAP])
    assert s.oversize_report.ids.tolist() == over.tolist()  # only the selection's
    kept = np.asarray(s.plan.space) if len(over) else members
    assert sorted(kept.tolist()) == sorted(set(members.tolist()) - set(over.tolist()))


def test_a_plan_over_a_mixture_reports_only_its_sources_samples() -> None:
    lengths = np.array([100, 1, 200, 2, 300, 3], dtype=np.int32)
    evens = ep.Selection.from_indices([0, 2, 4], 6)
    odds = ep.Selection.from_indices([1, 3, 5], 6)
    mix = ep.Mixture([odds, evens], quotas=[3, 0])  # no even sample this epoch
    ids, _ = ep.EpochPlan(mix, 3, tokens=ep.Tokens(lengths)).oversize(50)
    assert ids.tolist() == [0, 2, 4]  # a later epoch (or phase) may take them
    ids, _ = ep.EpochPlan(ep.Mixture([odds]), 3, tokens=ep.Tokens(lengths)).oversize(50)
    assert ids.tolist() == []


def test_skip_over_a_mixture_keeps_its_quotas_and_phases_over_the_samples_left() -> None:
    lengths = lognormal(300, 11)
    mix = ep.Mixture([100, 200], weights=[1, 1], num_samples=120, seed=3, phases=[(2, [1, 3])])
    s = sampler(lengths, 3, 1, space=mix, global_batch_size=16, oversize="skip")
    over = set(np.flatnonzero(lengths > CAP).tolist())
    assert s.oversize_report.ids.tolist() == sorted(over)
    skipped = s.plan.space.mixture
    assert skipped.phases == mix.phases  # each source's count an epoch, in every phase
    for epoch in range(4):
        s.set_epoch(epoch)
        ids = np.concatenate([s.plan.rank_indices(r, 3) for r in range(3)])
        assert not over & set(ids.tolist())  # no weight counts a skipped sample
        counts = [int((ids < 100).sum()), int((ids >= 100).sum())]
        assert counts == mix.quotas_at(epoch)
    # A source's passes run over its samples left: the first pass of each
    # takes each of them once before any twice.
    first = np.asarray(skipped.epoch(0))
    for start, stop in ((0, 100), (100, 300)):
        mine = first[(first >= start) & (first < stop)].tolist()
        left = sorted(set(range(start, stop)) - over)
        assert len(set(mine)) == min(len(mine), len(left))


def test_plan_files_truncate_store_the_cut_lengths_and_serve_the_samplers_plan(
    tmp_path,
) -> None:
    from epochplan.planfile import open_plan, verify_plan, write_plan
    from epochplan.torch import PlanSampler

    # int64 lengths and loss tokens: files of version 5 (narrower sources
    # give version 7, with the same cut).
    lengths = lognormal(500, 13).astype(np.int64)
    np.save(tmp_path / "lengths.npy", lengths)
    mapped = np.load(tmp_path / "lengths.npy", mmap_mode="r")
    loss = np.maximum(lengths - 1, 0)
    spec = ep.PlanSpec(500, 32, seed=2, tokens=ep.Tokens(mapped, loss, oversize="truncate"))
    d = write_plan(tmp_path / "cut", spec, 3, epochs=range(2), max_tokens=CAP)
    assert d.manifest["plan_file_version"] == 5
    assert d.manifest["tokens"]["max_length"] == CAP
    assert verify_plan(d.path) is False  # the loss tokens were given in memory
    for rank in range(3):
        tokens = ep.Tokens(lengths, loss, oversize="truncate")
        s = ElasticBatchSampler(
            ep.PlanSpec(500, 32, seed=2, tokens=tokens), max_tokens=CAP, rank=rank, num_replicas=3
        )
        p = PlanSampler(d.path, rank=rank, num_replicas=3)
        for epoch in range(2):
            s.set_epoch(epoch)
            p.set_epoch(epoch)
            ours, theirs = list(s), list(p)
            assert [list(b) for b in ours] == [list(b) for b in theirs]
            assert all(np.allclose(a.weights, b.weights) for a, b in zip(ours, theirs, strict=True))
        # Their states are one: either resumes the other.
        s.load_state_dict(p.state_dict_at_step(2))
        p.load_state_dict(s.state_dict_at_step(1))
    # Each rank file's lengths are the cut ones.
    stored = open_plan(d.path).open_token_file(0, 1, "lengths")
    ids = d.rank_ids(0, 1)
    assert stored.read(0, len(ids)).tolist() == np.minimum(lengths[ids], CAP).tolist()
    # With the lengths file alone, verification compares every stored value.
    spec = ep.PlanSpec(500, 32, tokens=ep.Tokens(mapped, oversize="truncate"))
    d = write_plan(tmp_path / "cut-file", spec, 2, max_tokens=CAP)
    assert verify_plan(d.path) is True
