"""The plan's values: PlanSpec (frozen, hashable, checked once, JSON and
pickle round trips, its plans), Chunked, Tokens, EpochPlan as a PlanLayout
with value equality, and RankPlan (one rank's view of a plan)."""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import epochplan as ep

LENGTHS = (np.arange(100) * 37 % 50 + 1).astype(np.int32)
LOSS = (LENGTHS // 2).astype(np.int32)
SELECTION = ep.Selection.from_ranges([(0, 30), (40, 90)], 100)
MIXTURE = ep.Mixture([40, 20], quotas=[30, 30], seed=4)


def specs() -> dict[str, ep.PlanSpec]:
    """One spec of each form: a range, a chunked order, a selection, a
    mixture and token plans."""
    return {
        "range": ep.PlanSpec(100, 8, seed=3),
        "identity-drop-last": ep.PlanSpec(100, 7, kind="identity", drop_last=True),
        "chunked": ep.PlanSpec(100, 8, seed=2**64 - 1, kind=ep.Chunked(7, 3)),
        "selection": ep.PlanSpec(SELECTION, 8, seed=5, kind="uniform"),
        "mixture": ep.PlanSpec(MIXTURE, 8, seed=1),
        "tokens": ep.PlanSpec(100, 8, seed=2, tokens=ep.Tokens(LENGTHS)),
        "tokens-loss": ep.PlanSpec(
            100,
            8,
            tokens=ep.Tokens(
                LENGTHS, LOSS, loss_normalization="samples", max_length=40, oversize="truncate"
            ),
        ),
        "tokens-selection": ep.PlanSpec(SELECTION, 8, tokens=ep.Tokens(LENGTHS)),
    }


SPEC_NAMES = sorted(specs())


def from_json_args(spec: ep.PlanSpec) -> dict[str, Any]:
    """What from_json needs given again: the space and the token arrays."""
    args: dict[str, Any] = {}
    if spec.space is not None:
        args["space"] = spec.space
    if spec.tokens is not None:
        args["lengths"] = spec.tokens.lengths
        args["loss_tokens"] = spec.tokens.loss_tokens
    return args


def plan_args(spec: ep.PlanSpec) -> dict[str, Any]:
    """The EpochPlan keywords of the spec's fields."""
    return {
        "seed": spec.seed,
        "kind": spec.kind,
        "drop_last": spec.drop_last,
        "tokens": spec.tokens,
    }


def planned_over(spec: ep.PlanSpec) -> Any:
    return spec.num_samples if spec.space is None else spec.space


# ---------------------------------------------------------------- PlanSpec


@pytest.mark.parametrize(
    ("call", "error", "name"),
    [
        (lambda: ep.PlanSpec(-1, 2), ValueError, "num_samples"),
        (lambda: ep.PlanSpec(2**63, 2), ValueError, "num_samples"),
        (lambda: ep.PlanSpec(1.5, 2), TypeError, "num_samples"),
        (lambda: ep.PlanSpec(None, 2), TypeError, "num_samples"),
        (lambda: ep.PlanSpec(range(3), 2), TypeError, "num_samples"),
        (lambda: ep.PlanSpec(10, 0), ValueError, "global_batch_size"),
        (lambda: ep.PlanSpec(10, 2.0), TypeError, "global_batch_size"),
        (lambda: ep.PlanSpec(10, 2, seed=-1), ValueError, "seed"),
        (lambda: ep.PlanSpec(10, 2, seed=2**64), ValueError, "seed"),
        (lambda: ep.PlanSpec(10, 2, seed=1.0), TypeError, "seed"),
        (lambda: ep.PlanSpec(10, 2, seed=None), TypeError, "seed"),
        (lambda: ep.PlanSpec(10, 2, kind="nope"), ValueError, "kind"),
        (lambda: ep.PlanSpec(10, 2, kind="chunked"), ValueError, "Chunked"),
        (lambda: ep.PlanSpec(10, 2, kind=None), TypeError, "kind"),
        (lambda: ep.PlanSpec(10, 2, kind=ep.Chunked), TypeError, "kind"),
        (lambda: ep.PlanSpec(10, 2, drop_last=1), TypeError, "drop_last"),
        (lambda: ep.PlanSpec(10, 2, drop_last=None), TypeError, "drop_last"),
        (lambda: ep.PlanSpec(10, 2, tokens=LENGTHS[:10]), TypeError, "tokens"),
        (lambda: ep.PlanSpec(10, 2, tokens=ep.Tokens(LENGTHS)), ValueError, "lengths"),
        (lambda: ep.PlanSpec(MIXTURE, 4, kind="uniform"), ValueError, "kind"),
    ],
)
def test_a_spec_is_checked_when_made_and_names_the_bad_argument(
    call: Callable[[], object], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        call()


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_a_spec_is_frozen(name: str) -> None:
    spec = specs()[name]
    for field in (
        "num_samples",
        "global_batch_size",
        "seed",
        "kind",
        "drop_last",
        "space",
        "tokens",
        "store_size",
    ):
        before = getattr(spec, field)
        with pytest.raises(AttributeError):
            setattr(spec, field, before)
        assert getattr(spec, field) is before or getattr(spec, field) == before
    with pytest.raises(AttributeError):
        spec.anything_else = 1  # type: ignore[attr-defined]


def test_equal_specs_are_equal_and_hash_alike() -> None:
    a, b = ep.PlanSpec(100, 8, seed=3), ep.PlanSpec(100, 8, seed=3)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert ep.PlanSpec(np.int64(100), np.uint8(8), seed=np.uint64(3)) == a
    assert a != ep.PlanSpec(100, 8, seed=4) and hash(a) != hash(ep.PlanSpec(100, 8, seed=4))
    assert a != ep.PlanSpec(100, 9, seed=3)
    assert a != ep.PlanSpec(101, 8, seed=3)
    assert a != ep.PlanSpec(100, 8, seed=3, drop_last=True)
    assert a != ep.PlanSpec(100, 8, seed=3, kind="uniform")
    chunked = ep.PlanSpec(100, 8, kind=ep.Chunked(4, 2))
    assert chunked == ep.PlanSpec(100, 8, kind=ep.Chunked(4, 2))
    assert chunked != ep.PlanSpec(100, 8, kind=ep.Chunked(4, 3))
    assert ep.PlanSpec(100, 8, kind=ep.Chunked(4)) == ep.PlanSpec(100, 8, kind=ep.Chunked(4, 1))
    tokens = ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS))
    assert tokens == ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS.copy()))
    assert hash(tokens) == hash(ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS.copy())))
    assert tokens != ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS + 1))
    assert tokens != ep.PlanSpec(100, 8)
    assert ep.PlanSpec(SELECTION, 8) == ep.PlanSpec(SELECTION, 8)
    assert ep.PlanSpec(SELECTION, 8) != ep.PlanSpec(ep.Selection.from_ranges([(0, 80)], 100), 8)
    assert a != "PlanSpec" and a != 100


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_json_round_trips_with_the_space_and_arrays_given_again(name: str) -> None:
    spec = specs()[name]
    text = spec.to_json()
    json.loads(text)  # valid JSON
    again = ep.PlanSpec.from_json(text, **from_json_args(spec))
    assert again == spec and hash(again) == hash(spec)
    assert again.to_json() == text and again.digest() == spec.digest()
    assert again.kind == spec.kind and again.seed == spec.seed


def test_json_of_a_token_spec_with_a_cost_pair_round_trips() -> None:
    spec = ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS, LOSS, cost=(1.0, 0.5)))
    again = ep.PlanSpec.from_json(spec.to_json(), lengths=LENGTHS, loss_tokens=LOSS)
    assert again == spec and again.tokens is not None and again.tokens.cost == (1.0, 0.5)


def test_from_json_refuses_another_space_or_other_arrays() -> None:
    sel = ep.PlanSpec(SELECTION, 8)
    with pytest.raises(ValueError, match="space must be given"):
        ep.PlanSpec.from_json(sel.to_json())
    with pytest.raises(ValueError, match="space differs"):
        ep.PlanSpec.from_json(sel.to_json(), space=ep.Selection.from_ranges([(0, 79)], 100))
    other = ep.Selection.from_ranges([(10, 90)], 100)  # as many ids, others
    with pytest.raises(ValueError, match=r"space differs.*digest"):
        ep.PlanSpec.from_json(sel.to_json(), space=other)
    mix = ep.PlanSpec(MIXTURE, 8)
    with pytest.raises(ValueError, match="space differs"):
        ep.PlanSpec.from_json(mix.to_json(), space=ep.Mixture([40, 20], quotas=[31, 29], seed=4))
    tok = ep.PlanSpec(100, 8, tokens=ep.Tokens(LENGTHS, LOSS))
    with pytest.raises(ValueError, match="lengths must be given"):
        ep.PlanSpec.from_json(tok.to_json())
    with pytest.raises(ValueError, match=r"lengths differ.*digest"):
        ep.PlanSpec.from_json(tok.to_json(), lengths=LENGTHS + 1, loss_tokens=LOSS)
    with pytest.raises(ValueError, match="loss_tokens differ"):
        ep.PlanSpec.from_json(tok.to_json(), lengths=LENGTHS, loss_tokens=LOSS + 1)
    with pytest.raises(ValueError, match="loss_tokens differ"):
        ep.PlanSpec.from_json(tok.to_json(), lengths=LENGTHS)
    with pytest.raises(ValueError, match="not JSON"):
        ep.PlanSpec.from_json("not json")
    with pytest.raises(ValueError, match="format_version"):
        ep.PlanSpec.from_json("{}")


def test_digests_are_stable_and_equal_for_equal_specs() -> None:
    made = specs()
    for name, spec in made.items():
        digest = spec.digest()
        assert isinstance(digest, str) and len(digest) == 64, name
        assert int(digest, 16) >= 0
        assert digest == spec.digest() == specs()[name].digest()
        assert pickle.loads(pickle.dumps(spec)).digest() == digest
    assert len({s.digest() for s in made.values()}) == len(made)
    a = ep.PlanSpec(100, 8, seed=3)
    assert a.digest() == ep.PlanSpec(100, 8, seed=3).digest()
    assert a.digest() != a.replace(seed=4).digest()
    assert a.digest() != a.replace(drop_last=True).digest()
    # The digest is of the parameters alone: fixed for these ones.
    assert ep.PlanSpec(4, 2).digest() == (
        "cb88613ee330f82f9d420b09f1b881e63275504cf4cc1d8ea48b7047189980eb"
    )


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_a_spec_pickles(name: str) -> None:
    spec = specs()[name]
    again = pickle.loads(pickle.dumps(spec))
    assert again == spec and hash(again) == hash(spec) and repr(again) == repr(spec)
    assert again.to_json() == spec.to_json()
    assert again.plan(1).state_dict() == spec.plan(1).state_dict()


@pytest.mark.parametrize("name", SPEC_NAMES)
def test_a_specs_plan_is_the_epoch_plan_of_the_same_arguments(name: str) -> None:
    spec = specs()[name]
    over = planned_over(spec)
    for epoch, cursor in [(0, 0), (1, 0), (3, 2 * spec.global_batch_size)]:
        plan = spec.plan(epoch, cursor)
        want = ep.EpochPlan(
            over, spec.global_batch_size, epoch=epoch, cursor=cursor, **plan_args(spec)
        )
        assert plan == want and plan.spec == spec
        assert plan.state_dict() == want.state_dict()
        assert (plan.epoch, plan.cursor) == (epoch, cursor)
        for rank, world in [(0, 1), (0, 2), (1, 2), (2, 3), (4, 5), (0, 7)]:
            assert np.array_equal(plan.rank_indices(rank, world), want.rank_indices(rank, world))
    assert spec.plan() == spec.plan(0, 0) == spec.plan(epoch=0, cursor=0)


def test_a_specs_layout_and_rank_counts() -> None:
    for spec in specs().values():
        plan = spec.plan()
        assert isinstance(spec.layout, ep.PlanLayout)
        assert spec.layout.num_steps == plan.num_steps
        assert spec.layout.num_samples == plan.num_samples
        if spec.tokens is None:
            for world in (1, 3, 8):
                counts = spec.rank_counts(world)
                assert list(counts) == [plan.rank_size(r, world) for r in range(world)]
                assert sum(counts) == sum(plan.step_size(t) for t in range(plan.num_steps))


def test_replace_makes_a_new_checked_spec() -> None:
    spec = ep.PlanSpec(100, 8, seed=3)
    assert spec.replace() == spec
    other = spec.replace(seed=4, drop_last=True)
    assert (other.seed, other.drop_last, other.num_samples) == (4, True, 100)
    assert spec.seed == 3 and not spec.drop_last  # unchanged
    assert spec.replace(kind=ep.Chunked(5, 2)).kind == ep.Chunked(5, 2)
    assert spec.replace(num_samples=50).num_samples == 50
    assert spec.replace(global_batch_size=4).global_batch_size == 4
    tokens = spec.replace(tokens=ep.Tokens(LENGTHS))
    assert tokens.tokens is not None and tokens.replace(tokens=None).tokens is None
    with pytest.raises(ValueError, match="seed"):
        spec.replace(seed=-1)
    with pytest.raises(ValueError, match="Chunked"):
        spec.replace(kind="chunked")
    with pytest.raises(TypeError, match="drop_last"):
        spec.replace(drop_last=1)
    with pytest.raises(ValueError, match="lengths"):
        spec.replace(num_samples=50, tokens=ep.Tokens(LENGTHS))
    with pytest.raises(TypeError, match="bogus"):
        spec.replace(bogus=1)


def test_a_specs_fields() -> None:
    spec = ep.PlanSpec(SELECTION, 8, seed=5, kind=ep.Chunked(4, 2), drop_last=True)
    assert spec.num_samples == len(SELECTION) == 80
    assert spec.store_size == 100 and spec.space == SELECTION
    assert (spec.global_batch_size, spec.seed, spec.drop_last) == (8, 5, True)
    assert spec.kind == ep.Chunked(4, 2) and spec.tokens is None
    plain = ep.PlanSpec(10, 2)
    assert plain.kind == "cipher" and plain.space is None and plain.seed == 0
    assert repr(plain) == (
        "PlanSpec(num_samples=10, global_batch_size=2, seed=0, kind='cipher', drop_last=False)"
    )
    assert "kind=Chunked(chunk_size=4, preload_nchunks=2)" in repr(spec)


# ---------------------------------------------------------------- Chunked


def test_chunked_values() -> None:
    a = ep.Chunked(4, 2)
    assert (a.chunk_size, a.preload_nchunks) == (4, 2)
    assert a == ep.Chunked(4, 2) and hash(a) == hash(ep.Chunked(4, 2))
    assert a == ep.Chunked(chunk_size=4, preload_nchunks=2)
    assert ep.Chunked(4) == ep.Chunked(4, 1) and ep.Chunked(4).preload_nchunks == 1
    assert a != ep.Chunked(4, 3) and a != ep.Chunked(5, 2) and a != "chunked"
    assert len({a, ep.Chunked(4, 2), ep.Chunked(4, 3)}) == 2
    assert repr(a) == "Chunked(chunk_size=4, preload_nchunks=2)"
    again = pickle.loads(pickle.dumps(a))
    assert again == a and repr(again) == repr(a)
    assert ep.Chunked(np.int64(4), np.uint8(2)) == a
    with pytest.raises(AttributeError):
        a.chunk_size = 5  # type: ignore[misc]
    p = ep.Permutation(100, kind=a)
    assert p.kind == "chunked" and (p.chunk_size, p.preload_nchunks) == (4, 2)
    assert repr(p).endswith("kind=Chunked(chunk_size=4, preload_nchunks=2))")
    plan = ep.EpochPlan(100, 8, kind=a)
    assert plan.kind == "chunked" and (plan.chunk_size, plan.preload_nchunks) == (4, 2)
    assert plan.spec.kind == a
    assert "kind=Chunked(chunk_size=4, preload_nchunks=2)" in repr(plan)
    assert np.array_equal(np.asarray(ep.permutation(100, kind=a)), np.asarray(p))


@pytest.mark.parametrize(
    ("args", "error", "name"),
    [
        ((0,), ValueError, "chunk_size"),
        ((-1,), ValueError, "chunk_size"),
        ((2**63,), ValueError, "chunk_size"),
        ((2.0,), TypeError, "chunk_size"),
        ((None,), TypeError, "chunk_size"),
        ((True,), TypeError, "chunk_size"),
        ((4, 0), ValueError, "preload_nchunks"),
        ((4, 2**63), ValueError, "preload_nchunks"),
        ((4, 1.5), TypeError, "preload_nchunks"),
        ((4, None), TypeError, "preload_nchunks"),
        ((4, np.True_), TypeError, "preload_nchunks"),
    ],
)
def test_bad_chunked_arguments_name_themselves(
    args: tuple[Any, ...], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        ep.Chunked(*args)


def test_a_chunked_kind_as_a_string_points_at_chunked() -> None:
    for call in (
        lambda: ep.Permutation(10, kind="chunked"),
        lambda: ep.permutation(10, kind="chunked"),
        lambda: ep.EpochPlan(10, 2, kind="chunked"),
        lambda: ep.PlanSpec(10, 2, kind="chunked"),
    ):
        with pytest.raises(ValueError, match=r"kind=Chunked\(chunk_size, preload_nchunks\)"):
            call()


# ---------------------------------------------------------------- Tokens


@pytest.mark.parametrize(
    ("kwargs", "error", "name"),
    [
        ({"lengths": None}, TypeError, "lengths"),
        ({"lengths": LENGTHS.astype(np.float32)}, TypeError, "lengths"),
        ({"lengths": LENGTHS.reshape(10, 10)}, ValueError, "lengths"),
        ({"lengths": "lengths.npy"}, TypeError, "lengths"),
        ({"lengths": LENGTHS, "loss_tokens": LOSS[:3]}, ValueError, "loss_tokens"),
        ({"lengths": LENGTHS, "loss_tokens": LOSS.astype(float)}, TypeError, "loss_tokens"),
        ({"lengths": LENGTHS, "cost": "flops"}, ValueError, "cost"),
        ({"lengths": LENGTHS, "cost": (1.0,)}, ValueError, "cost"),
        ({"lengths": LENGTHS, "cost": None}, (TypeError, ValueError), "cost"),
        ({"lengths": LENGTHS, "loss_normalization": "x"}, ValueError, "loss_normalization"),
        ({"lengths": LENGTHS, "loss_normalization": None}, TypeError, "loss_normalization"),
        ({"lengths": LENGTHS, "max_length": 0}, ValueError, "max_length"),
        ({"lengths": LENGTHS, "max_length": 1.5}, TypeError, "max_length"),
        ({"lengths": LENGTHS, "oversize": "drop"}, ValueError, "oversize"),
        ({"lengths": LENGTHS, "oversize": None}, TypeError, "oversize"),
    ],
)
def test_bad_token_arguments_name_themselves(
    kwargs: dict[str, Any], error: type[Exception], name: str
) -> None:
    with pytest.raises(error, match=name):
        ep.Tokens(**kwargs)


def test_tokens_fields_pickle_and_replace() -> None:
    t = ep.Tokens(LENGTHS, LOSS, cost=(1.0, 0.5), max_length=40, oversize="skip")
    assert np.array_equal(t.lengths, LENGTHS) and np.array_equal(t.loss_tokens, LOSS)
    assert (t.cost, t.loss_normalization, t.max_length, t.oversize) == (
        (1.0, 0.5),
        "tokens",
        40,
        "skip",
    )
    plain = ep.Tokens(LENGTHS)
    assert plain.loss_tokens is None and plain.cost == "tokens" and plain.max_length is None
    assert (plain.loss_normalization, plain.oversize) == ("tokens", "error")
    for tokens in (t, plain):
        again = pickle.loads(pickle.dumps(tokens))
        assert repr(again) == repr(tokens)
        assert np.array_equal(again.lengths, tokens.lengths)
        assert (again.cost, again.max_length, again.oversize) == (
            tokens.cost,
            tokens.max_length,
            tokens.oversize,
        )
        a = ep.EpochPlan(100, 8, seed=1, tokens=again).state_dict()
        assert a == ep.EpochPlan(100, 8, seed=1, tokens=tokens).state_dict()
    other = t.replace(max_length=10, oversize="truncate")
    assert (other.max_length, other.oversize, other.cost) == (10, "truncate", (1.0, 0.5))
    assert t.max_length == 40  # unchanged
    assert t.replace(loss_tokens=None).loss_tokens is None
    assert t.replace(loss_normalization="samples").loss_normalization == "samples"
    with pytest.raises(ValueError, match="max_length"):
        t.replace(max_length=0)
    with pytest.raises(ValueError, match="oversize"):
        t.replace(oversize="drop")
    with pytest.raises(TypeError, match="bogus"):
        t.replace(bogus=1)
    with pytest.raises(AttributeError):
        t.max_length = 3  # type: ignore[misc]
    assert "tokens=Tokens(" in repr(ep.EpochPlan(100, 8, tokens=t))


def test_a_token_plans_fields_come_from_its_tokens() -> None:
    t = ep.Tokens(LENGTHS, LOSS, loss_normalization="samples", max_length=40, oversize="truncate")
    plan = ep.EpochPlan(100, 8, tokens=t)
    assert plan.tokens is not None and plan.spec.tokens is not None
    assert np.array_equal(plan.lengths, LENGTHS) and np.array_equal(plan.loss_tokens, LOSS)
    assert (plan.cost, plan.loss_normalization, plan.max_length) == ("tokens", "samples", 40)
    assert ep.EpochPlan(100, 8).tokens is None


# ---------------------------------------------------------------- EpochPlan


def test_an_epoch_plan_is_a_plan_layout() -> None:
    for spec in specs().values():
        for plan in (spec.plan(), spec.plan(2, spec.global_batch_size)):
            assert isinstance(plan, ep.PlanLayout) and isinstance(plan, ep.EpochPlan)
            layout = plan.layout
            assert type(layout) is ep.PlanLayout
            assert plan.num_steps == layout.num_steps
            assert plan.start_step == layout.start_step
            assert plan.remaining_steps == layout.remaining_steps
            assert (plan.num_samples, plan.global_batch_size) == (
                layout.num_samples,
                layout.global_batch_size,
            )
            for t in range(plan.num_steps):
                assert plan.step_size(t) == layout.step_size(t)
                if plan.tokens is not None:
                    # A token plan deals by lengths: neither names a filler position.
                    with pytest.raises(ValueError, match="lengths"):
                        plan.filler_position(t, 0, 2)
                    continue
                for world in (1, 3, 5):
                    for r in range(world):
                        assert plan.filler_position(t, r, world) == layout.filler_position(
                            t, r, world
                        )
    assert issubclass(ep.EpochPlan, ep.PlanLayout)


def test_epoch_plans_are_equal_by_value() -> None:
    a = ep.EpochPlan(100, 8, seed=3, epoch=2)
    assert a == ep.EpochPlan(100, 8, seed=3, epoch=2)
    assert a == pickle.loads(pickle.dumps(a))
    assert a == ep.EpochPlan.from_state_dict(a.state_dict())
    assert a == ep.PlanSpec(100, 8, seed=3).plan(2)
    for other in (
        ep.EpochPlan(100, 8, seed=4, epoch=2),
        ep.EpochPlan(100, 8, seed=3, epoch=1),
        ep.EpochPlan(100, 8, seed=3, epoch=2, cursor=8),
        ep.EpochPlan(100, 8, seed=3, epoch=2, drop_last=True),
        ep.EpochPlan(100, 8, seed=3, epoch=2, kind="uniform"),
        ep.EpochPlan(100, 8, seed=3, epoch=2, tokens=ep.Tokens(LENGTHS)),
    ):
        assert a != other
    assert a.at_step(1) == ep.EpochPlan(100, 8, seed=3, epoch=2, cursor=8)
    assert a != a.layout and a != a.state_dict() and a != "plan"
    t = ep.EpochPlan(100, 8, tokens=ep.Tokens(LENGTHS))
    assert t == ep.EpochPlan(100, 8, tokens=ep.Tokens(LENGTHS.copy()))
    assert t != ep.EpochPlan(100, 8, tokens=ep.Tokens(LENGTHS + 1))


def test_an_epoch_plans_spec() -> None:
    plan = ep.EpochPlan(SELECTION, 8, seed=5, epoch=3, kind=ep.Chunked(4, 2), cursor=16)
    assert plan.spec == ep.PlanSpec(SELECTION, 8, seed=5, kind=ep.Chunked(4, 2))
    assert plan.spec.plan(3, 16) == plan


# ---------------------------------------------------------------- RankPlan


def rank_plans() -> dict[str, ep.EpochPlan]:
    return {
        "plain": ep.EpochPlan(103, 8, seed=3),
        "plain-cursor": ep.EpochPlan(103, 8, seed=3, cursor=16, drop_last=True),
        "chunked": ep.EpochPlan(103, 8, seed=1, kind=ep.Chunked(7, 3)),
        "selection": ep.EpochPlan(SELECTION, 8, seed=5),
        "mixture": ep.EpochPlan(MIXTURE, 8, seed=1, epoch=2),
        "tokens": ep.EpochPlan(100, 8, seed=2, tokens=ep.Tokens(LENGTHS, LOSS)),
    }


def same_batches(a: list[Any], b: list[Any]) -> bool:
    return len(a) == len(b) and all(
        np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1]) for x, y in zip(a, b, strict=True)
    )


@pytest.mark.parametrize("name", sorted(rank_plans()))
def test_a_rank_plan_is_the_epoch_plans_rank_methods(name: str) -> None:
    plan = rank_plans()[name]
    tokens = plan.tokens is not None
    for world in (1, 2, 3, 5):
        for r in range(world):
            view = plan.rank(r, world)
            assert isinstance(view, ep.RankPlan)
            assert (view.rank, view.world_size) == (r, world) and view.plan == plan
            assert np.array_equal(view.indices(), plan.rank_indices(r, world))
            assert view.size() == plan.rank_size(r, world)
            for t in range(plan.start_step, plan.num_steps + 1):
                assert view.step_offset(t) == plan.rank_step_offset(t, r, world)
            for t in range(plan.start_step, plan.num_steps):
                ids = plan.step_indices(t, r, world)
                assert np.array_equal(view.step_indices(t), ids)
                assert np.array_equal(view.sources(t), plan.sources(t, r, world))
                assert same_batches(
                    view.step_micro_batches(t, 2), plan.step_micro_batches(t, r, world, 2)
                )
                assert same_batches(
                    view.split_step(t, ids, 3), plan.split_step(t, r, world, 3, ids)
                )
                if tokens:
                    assert same_batches(
                        view.step_micro_batches(t, max_tokens=120),
                        plan.step_micro_batches(t, r, world, max_tokens=120),
                    )
                    assert same_batches(
                        view.split_step(t, ids, 4, max_tokens=120),
                        plan.split_step(t, r, world, 4, ids, max_tokens=120),
                    )
            mine = [same for step in view.micro_batches(2) for same in step]
            theirs = [same for step in plan.micro_batches(r, world, 2) for same in step]
            assert same_batches(mine, theirs)
            if tokens:
                mine = [b for step in view.micro_batches(max_tokens=120) for b in step]
                theirs = [b for step in plan.micro_batches(r, world, max_tokens=120) for b in step]
                assert same_batches(mine, theirs)


def test_a_rank_plans_arguments_are_checked_once_when_made() -> None:
    plan = ep.EpochPlan(50, 8)
    for rank, world, error, name in [
        (3, 3, ValueError, "rank"),
        (-1, 3, ValueError, "rank"),
        (0, 0, ValueError, "world_size"),
        (0, -1, ValueError, "world_size"),
        (1.0, 3, TypeError, "rank"),
        (0, 2.0, TypeError, "world_size"),
        (None, 3, TypeError, "rank"),
    ]:
        with pytest.raises(error, match=name):
            plan.rank(rank, world)
    # The same message as the EpochPlan method's.
    with pytest.raises(ValueError) as view:
        plan.rank(3, 3)
    with pytest.raises(ValueError) as method:
        plan.rank_indices(3, 3)
    assert str(view.value) == str(method.value)
    view = plan.rank(np.int64(1), np.uint8(3))
    assert (view.rank, view.world_size) == (1, 3)
    with pytest.raises(IndexError, match="step"):
        view.step_indices(plan.num_steps)
    with pytest.raises(TypeError, match="micro_batch_size"):
        view.step_micro_batches(0)


def test_mapped_lengths_travel_by_reference_in_pickles(tmp_path) -> None:
    # A spec sent to other processes (Ray tasks, spawned workers) names the
    # lengths file instead of copying its values, and maps it again there.
    np.save(tmp_path / "lengths.npy", np.arange(1, 10**6 + 1, dtype=np.int32))
    lengths = np.load(tmp_path / "lengths.npy", mmap_mode="r")
    loss = np.asarray(lengths[:10]).repeat(10**5)  # in memory: by value
    spec = ep.PlanSpec(10**6, 64, seed=3, tokens=ep.Tokens(lengths, loss))
    blob = pickle.dumps(spec)
    assert len(blob) < len(pickle.dumps(loss)) + 5_000  # the lengths by reference
    back = pickle.loads(blob)
    assert back == spec
    assert isinstance(back.tokens.lengths, np.memmap)
    assert str(back.tokens.lengths.filename) == str(lengths.filename)
    assert not isinstance(back.tokens.loss_tokens, np.memmap)
    tokens = pickle.loads(pickle.dumps(ep.Tokens(lengths, cost=(1, 2), max_length=9)))
    assert str(tokens.lengths.filename) == str(lengths.filename) and tokens.max_length == 9
    assert len(pickle.dumps(ep.Tokens(lengths))) < 2_000
    assert back.plan(1).state_dict() == spec.plan(1).state_dict()
