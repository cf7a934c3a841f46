"""Token plans (DESIGN.md section 8): properties over random lengths, sizes,
world sizes, caps and both packings, the state's digests, the errors, and a memory-mapped
lengths file that is read per step, never whole."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan as ep

LENGTH_KINDS = st.sampled_from(["random", "equal", "one_huge", "zeros"])


@st.composite
def token_plans(draw: st.DrawFn) -> tuple[ep.EpochPlan, np.ndarray, np.ndarray | None]:
    n = draw(st.integers(0, 60))
    g = draw(st.integers(1, 20))
    kind = draw(LENGTH_KINDS)
    if kind == "equal":
        lengths = np.full(n, draw(st.integers(0, 30)), dtype=np.int64)
    else:
        lengths = np.asarray(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
        if kind == "one_huge" and n:
            lengths[draw(st.integers(0, n - 1))] = 400
    dtype = draw(st.sampled_from([np.int32, np.int64, np.uint16, np.uint64]))
    lengths = lengths.astype(dtype)
    loss = None
    if kind == "zeros" or draw(st.booleans()):
        # Many zeros in loss_tokens (prompt tokens masked out), never above the length.
        keep = np.asarray(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
        loss = np.where(keep & (np.arange(n) % 3 == 0), lengths, 0).astype(np.int32)
    cost = draw(st.sampled_from(["tokens", (1.0, 0.01), (0.0, 1.0)]))
    packing = draw(st.sampled_from(["sorted", "first_fit"]))
    plan = ep.EpochPlan(
        n,
        g,
        seed=draw(st.integers(0, 3)),
        drop_last=draw(st.booleans()),
        tokens=ep.Tokens(lengths, loss, cost=cost, packing=packing),
    )
    return plan, lengths.astype(np.int64), None if loss is None else loss.astype(np.int64)


def cost_of(lengths: np.ndarray, plan: ep.EpochPlan) -> np.ndarray:
    if plan.cost == "tokens":
        return lengths.astype(np.float64)
    a, b = plan.cost
    return a * lengths + b * lengths.astype(np.float64) ** 2


CAPS = st.tuples(st.one_of(st.none(), st.integers(1, 5)), st.one_of(st.none(), st.integers(1, 90)))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(planned=token_plans(), w=st.integers(1, 9), caps=CAPS)
def test_token_plans_are_exact_balanced_capped_and_weighted(
    planned: tuple[ep.EpochPlan, np.ndarray, np.ndarray | None],
    w: int,
    caps: tuple[int | None, int | None],
) -> None:
    plan, lengths, loss = planned
    b, max_tokens = caps
    if b is None and max_tokens is None:
        b = 2
    loss = lengths if loss is None else loss
    costs = cost_of(lengths, plan)
    strided = ep.EpochPlan(
        plan.num_samples, plan.global_batch_size, seed=plan.seed, drop_last=plan.drop_last
    )
    seen: list[int] = []
    for step in range(plan.num_steps):
        # The step's set is section 4's, whatever W (W above the step size included).
        shares = [plan.step_indices(step, r, w) for r in range(w)]
        step_set = np.sort(np.concatenate(shares))
        assert np.array_equal(step_set, np.sort(strided.step_indices(step, 0, 1)))
        seen.extend(step_set.tolist())
        # The spread bound: at most the largest single cost (float rounding aside).
        loads = np.array([costs[s].sum() for s in shares])
        largest = costs[step_set].max() if len(step_set) else 0.0
        assert loads.max() - loads.min() <= largest * (1 + 1e-9) + 1e-9
        t_t = plan.step_tokens(step)
        assert t_t == int(loss[step_set].sum())
        if max_tokens is not None and lengths.max(initial=0) > max_tokens:
            # A sample over the cap anywhere in the plan (a drop_last epoch's
            # dropped samples too: another epoch trains them) refuses every
            # step, before its first batch, naming how many.
            over = int((lengths > max_tokens).sum())
            with pytest.raises(ValueError, match=rf"lengths: {over} samples? (is|are) longer"):
                plan.step_micro_batches(step, 0, w, b, max_tokens=max_tokens)
            continue
        per_rank = [plan.step_micro_batches(step, r, w, b, max_tokens=max_tokens) for r in range(w)]
        counts = {len(batches) for batches in per_rank}
        assert len(counts) == 1  # equal micro-batch counts on every rank
        assert counts == {plan.num_micro_batches(step, w, b, max_tokens=max_tokens)}
        total = 0.0
        for r, batches in enumerate(per_rank):
            real = [i for ids, ws in batches for i, x in zip(ids, ws, strict=True) if x != 0]
            if t_t > 0:
                assert sorted(real) == sorted(shares[r].tolist())
            for ids, weights in batches:
                assert len(ids) >= 1  # never an empty micro-batch
                if b is not None:
                    assert len(ids) <= b
                if max_tokens is not None:
                    assert lengths[ids].sum() <= max_tokens
                total += float((weights * loss[ids]).sum())
        # Weights over loss tokens sum to W per step when T_t > 0, else all 0.
        assert total == pytest.approx(w if t_t > 0 else 0.0, rel=1e-12, abs=1e-12)
    assert sorted(seen) == sorted(strided.at_step(0).rank_indices(0, 1).tolist())
    assert len(seen) == len(set(seen))
    assert sum(plan.rank_size(r, w) for r in range(w)) == len(seen)


@settings(max_examples=60, deadline=None)
@given(planned=token_plans(), w=st.integers(1, 6))
def test_rank_indices_are_the_steps_shares_in_order(
    planned: tuple[ep.EpochPlan, np.ndarray, np.ndarray | None], w: int
) -> None:
    plan = planned[0]
    for r in range(w):
        steps = [plan.step_indices(t, r, w) for t in range(plan.num_steps)]
        joined = np.concatenate(steps) if steps else np.empty(0, np.int64)
        assert np.array_equal(plan.rank_indices(r, w), joined)
        if plan.num_steps:
            offset = plan.rank_step_offset(plan.num_steps - 1, r, w)
            assert offset == sum(len(s) for s in steps[:-1])


@settings(max_examples=60, deadline=None)
@given(planned=token_plans(), step=st.integers(0, 10))
def test_states_round_trip_and_refuse_other_lengths(
    planned: tuple[ep.EpochPlan, np.ndarray, np.ndarray | None], step: int
) -> None:
    plan, lengths, loss = planned
    at = plan.at_step(min(step, plan.num_steps))
    state = at.state_dict()
    # The default packing leaves the state as it was; first fit is recorded.
    packing = plan.tokens.packing if plan.tokens is not None else "sorted"
    assert state.get("packing", "sorted") == packing
    back = ep.EpochPlan.from_state_dict(state, lengths=lengths, loss_tokens=loss)
    assert back.start_step == at.start_step and back.state_dict() == state
    for t in range(back.start_step, back.num_steps):
        assert np.array_equal(back.step_indices(t, 0, 3), at.step_indices(t, 0, 3))
    if len(lengths):
        other = lengths.copy()
        other[0] += 1
        with pytest.raises(ValueError, match="lengths differ"):
            ep.EpochPlan.from_state_dict(state, lengths=other, loss_tokens=loss)
    with pytest.raises(ValueError, match="lengths must be given"):
        ep.EpochPlan.from_state_dict(state)


def test_equal_lengths_deal_as_strided_and_samples_normalisation_weighs_by_count() -> None:
    lengths = np.full(23, 7, dtype=np.int32)
    tokens = ep.EpochPlan(23, 5, tokens=ep.Tokens(lengths, loss_normalization="samples"))
    strided = ep.EpochPlan(23, 5)
    for t in range(tokens.num_steps):
        for r in range(3):
            assert sorted(tokens.step_indices(t, r, 3)) == sorted(strided.step_indices(t, r, 3))
            for _, weights in tokens.step_micro_batches(t, r, 3, 2):
                assert set(weights) <= {0.0, 3 / strided.step_size(t)}


def test_a_step_without_loss_tokens_weighs_nothing() -> None:
    plan = ep.EpochPlan(4, 4, tokens=ep.Tokens([3, 1, 2, 5], [0, 0, 0, 0]))
    assert plan.step_tokens(0) == 0
    for r in range(2):
        for _, weights in plan.step_micro_batches(0, r, 2, max_tokens=5):
            assert not weights.any()


def test_fillers_are_the_steps_shortest_sample_with_weight_zero() -> None:
    lengths = np.array([9, 4, 6], dtype=np.int64)
    plan = ep.EpochPlan(3, 3, kind="identity", tokens=ep.Tokens(lengths))
    batches = [plan.step_micro_batches(0, r, 5, 1) for r in range(5)]
    assert {len(b) for b in batches} == {1}
    fillers = [b[0] for b in batches if not b[0][1].any()]
    assert len(fillers) == 2 and all(ids.tolist() == [1] for ids, _ in fillers)


def test_the_packing_travels_with_the_spec() -> None:
    """JSON, pickles, replace() and states keep a first-fit packing; the
    default leaves every one of them as it was."""
    import pickle

    lengths = np.arange(1, 41, dtype=np.int32)
    packed = ep.PlanSpec(40, 8, tokens=ep.Tokens(lengths, packing="first_fit"))
    plain = ep.PlanSpec(40, 8, tokens=ep.Tokens(lengths))
    assert "packing" not in plain.to_json() and '"packing": "first_fit"' in packed.to_json()
    back = ep.PlanSpec.from_json(packed.to_json(), lengths=lengths)
    assert back.tokens is not None and back.tokens.packing == "first_fit"
    assert back.digest() == packed.digest() != plain.digest()
    again = pickle.loads(pickle.dumps(packed))
    assert again.tokens is not None and again.tokens.packing == "first_fit"
    assert plain.tokens is not None
    assert plain.tokens.replace(packing="first_fit").packing == "first_fit"
    assert "packing='first_fit'" in repr(packed.tokens)
    plan = packed.plan(0)
    assert ep.EpochPlan.from_state_dict(plan.state_dict(), lengths=lengths).tokens.packing == (
        "first_fit"
    )


def test_bad_token_arguments_name_themselves() -> None:
    lengths = np.arange(10, dtype=np.int32)
    cases: list[tuple[dict[str, object], type[Exception], str]] = [
        ({"lengths": lengths[:9]}, ValueError, "lengths must hold one value per sample"),
        ({"lengths": lengths.astype(np.float32)}, TypeError, "lengths must be an array of int"),
        ({"lengths": lengths.reshape(2, 5)}, ValueError, "lengths must be a 1-d array"),
        # loss_tokens alone: Tokens needs lengths first.
        ({"lengths": None, "loss_tokens": lengths}, TypeError, "lengths must be an array"),
        ({"lengths": lengths, "loss_tokens": lengths[:3]}, ValueError, "loss_tokens must hold"),
        ({"lengths": lengths, "cost": (0, 0)}, ValueError, "cost must be"),
        ({"lengths": lengths, "cost": "flops"}, ValueError, "cost must be"),
        ({"lengths": lengths, "loss_normalization": "x"}, ValueError, "loss_normalization must"),
        ({"lengths": lengths, "packing": "best_fit"}, ValueError, "packing must be"),
        ({"lengths": lengths, "packing": None}, TypeError, "packing must be"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            ep.EpochPlan(10, 4, tokens=ep.Tokens(**kwargs))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="tokens must be a Tokens"):
        ep.EpochPlan(10, 4, tokens=lengths)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="lengths"):
        ep.Tokens(loss_tokens=lengths)  # type: ignore[call-arg]
    plan = ep.EpochPlan(10, 10, kind="identity", tokens=ep.Tokens(lengths))
    with pytest.raises(ValueError, match="micro_batch_size and max_tokens cannot both be None"):
        plan.step_micro_batches(0, 0, 2)
    with pytest.raises(ValueError, match="max_tokens must be an int in"):
        plan.step_micro_batches(0, 0, 2, max_tokens=0)
    with pytest.raises(
        ValueError, match=r"lengths: 1 sample is longer than max_tokens \(8\).*ids: 9 \(9 tokens\)"
    ):
        list(plan.micro_batches(0, 2, max_tokens=8))
    with pytest.raises(ValueError, match=r"lengths must be >= 0 .* lengths\[1\] = -1"):
        ep.EpochPlan(10, 10, kind="identity", tokens=ep.Tokens(-lengths)).step_indices(0, 0, 1)
    with pytest.raises(ValueError, match="max_tokens needs lengths"):
        ep.EpochPlan(10, 4).step_micro_batches(0, 0, 2, 2, max_tokens=5)


def test_a_memmapped_int32_lengths_file_is_read_per_step_not_whole(tmp_path: Path) -> None:
    path = tmp_path / "lengths.i32"
    n = 1_000_000
    np.random.default_rng(0).integers(1, 2048, n, dtype=np.int32).tofile(path)
    script = textwrap.dedent(
        f"""
        import numpy as np, epochplan as ep
        def status(key):
            for line in open("/proc/self/status"):
                if line.startswith(key):
                    return int(line.split()[1]) * 1024
        lengths = np.memmap({str(path)!r}, dtype=np.int32, mode="r")
        assert int(lengths.sum(dtype=np.int64)) > 0  # every page of the file resident now
        warm = ep.EpochPlan(8, 4, tokens=ep.Tokens(lengths[:8]))  # numpy's C API and the like, once
        next(iter(warm.micro_batches(0, 2, 2)))
        warm.state_dict()
        open("/proc/self/clear_refs", "w").write("5")  # resets the peak to the current RSS
        base = status("VmHWM")
        plan = ep.EpochPlan({n}, 1024, seed=1, tokens=ep.Tokens(lengths))
        count = 0
        for step in plan.micro_batches(3, 8, max_tokens=65536):
            count += sum(len(ids) for ids, w in step if w[0] > 0)
        state = plan.state_dict()
        print(count, status("VmHWM") - base, state["lengths_digest"])
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    count, growth, digest = done.stdout.split()
    file_size = 4 * n
    assert 0 < int(count) < n // 4  # rank 3's share of the epoch
    # A whole copy (int32: 4 MB, int64: 8 MB) would show; a step's reads do not.
    assert int(growth) < file_size // 4, (growth, file_size)
    assert digest.startswith("blake3:")
