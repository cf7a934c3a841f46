"""Fuzzing plans over index spaces and token plans: every call either
returns or raises TypeError, ValueError, OverflowError or IndexError (never a
panic or a crash), and the valid half of the examples reaches past every
check. (The spaces' own constructors are fuzzed in test_fuzz.py.)"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan as ep
from tests.adversarial.test_fuzz import ALLOWED, VALUES, bounded, fuzz_until_each_returns

TARGETS = ["space plan", "token plan", "token call"]


def small_space(data: st.DataObject) -> Any:
    """A valid space of at most 60 ids, empty and single-id ones included."""
    n = data.draw(st.integers(0, 60))
    form = data.draw(st.sampled_from(["ranges", "mask", "indices", "split", "mixture"]))
    bits = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype=bool)
    if form == "ranges":
        edges = sorted(set(data.draw(st.lists(st.integers(0, n), max_size=6))))
        pairs = list(zip(edges[::2], edges[1::2], strict=False))
        return ep.Selection.from_ranges(pairs, n)
    if form == "mask":
        return ep.Selection.from_mask(bits)
    if form == "indices":
        return ep.Selection.from_indices(np.flatnonzero(bits)[::-1].copy(), n)
    if form == "split":
        return ep.random_split(n, [int(bits.sum()), n - int(bits.sum())], seed=3)[0]
    sizes = data.draw(st.lists(st.integers(1, 20), min_size=1, max_size=4))
    quotas = data.draw(st.lists(st.integers(0, 25), min_size=len(sizes), max_size=len(sizes)))
    return ep.Mixture(sizes, quotas=quotas, seed=data.draw(st.integers(0, 3)))


def test_fuzz_plans_over_spaces_and_token_plans() -> None:
    returned: Counter[str] = Counter()

    @settings(
        max_examples=800,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(TARGETS))
        valid = data.draw(st.booleans())
        draw = data.draw
        try:
            if target == "space plan":
                # An invalid draw may still be a valid count or batch size:
                # only ones whose ids fit in memory (or that are refused at
                # once), as rank_indices and step_indices build them.
                space = (
                    small_space(data)
                    if valid
                    else draw(st.one_of(VALUES.filter(bounded), st.just(None)))
                )
                g = draw(st.integers(1, 9)) if valid else draw(VALUES.filter(bounded))
                extra: dict[str, Any] = {}
                if not valid:
                    extra = draw(
                        st.dictionaries(st.sampled_from(["kind", "epoch", "seed"]), VALUES)
                    )
                plan = ep.EpochPlan(space, g, **extra)
                w = draw(st.integers(1, 5))
                method = draw(st.sampled_from(["step", "rank", "sources", "state", "micro"]))
                step = draw(st.integers(0, max(plan.num_steps - 1, 0)))
                if method == "step" and plan.num_steps:
                    plan.step_indices(step, draw(st.integers(0, w - 1)), w)
                elif method == "sources" and plan.num_steps:
                    plan.sources(step, draw(st.integers(0, w - 1)), w)
                elif method == "rank":
                    plan.rank_indices(draw(st.integers(0, w - 1)), w)
                elif method == "micro":
                    # The first steps only, each dropped once made: a count of
                    # 10**6 is 10**6 steps at G = 1, and a step of 10**6 ids
                    # (a count of 2**61 or more) 10**6 micro-batches.
                    rank = draw(st.integers(0, w - 1))
                    steps = plan.micro_batches(rank, w, draw(st.integers(1, 3)))
                    for _ in itertools.islice(steps, 50 if plan.global_batch_size <= 1000 else 1):
                        pass
                else:
                    state = plan.state_dict()
                    other = small_space(data) if draw(st.booleans()) else plan.space
                    if not valid and "space" in state:
                        state["space"] = draw(st.one_of(VALUES, st.just({"kind": 1})))
                    mixture = getattr(other, "mixture", None)
                    ep.EpochPlan.from_state_dict(state, space=mixture or other)
            elif target == "token plan":
                n = draw(st.integers(0, 40))
                good = np.asarray(draw(st.lists(st.integers(0, 60), min_size=n, max_size=n)))
                lengths = good.astype(np.int32) if valid else draw(st.one_of(VALUES, st.just(good)))
                kwargs: dict[str, Any] = {}
                for key, bad in (
                    ("loss_tokens", VALUES),
                    ("cost", st.one_of(VALUES, st.tuples(VALUES, VALUES))),
                    ("loss_normalization", VALUES),
                ):
                    if not valid and draw(st.booleans()):
                        kwargs[key] = draw(bad)
                ep.EpochPlan(n, draw(st.integers(1, 8)), tokens=ep.Tokens(lengths, **kwargs))
            else:
                n = draw(st.integers(1, 40))
                lengths = np.asarray(draw(st.lists(st.integers(0, 30), min_size=n, max_size=n)))
                plan = ep.EpochPlan(n, draw(st.integers(1, 8)), tokens=ep.Tokens(lengths))
                w = draw(st.integers(1, 4))
                caps = {
                    "micro_batch_size": draw(st.one_of(st.none(), st.integers(1, 4))),
                    "max_tokens": draw(st.one_of(st.none(), st.integers(1, 80))),
                }
                if not valid:
                    caps = {k: draw(st.one_of(VALUES, st.none())) for k in caps}
                step = draw(st.integers(0, max(plan.num_steps - 1, 0)))
                b, cap = caps["micro_batch_size"], caps["max_tokens"]
                if plan.num_steps:
                    plan.step_micro_batches(step, draw(st.integers(0, w - 1)), w, b, max_tokens=cap)
                state = plan.state_dict()
                other = lengths if valid else np.asarray(draw(st.lists(st.integers(0, 30))))
                ep.EpochPlan.from_state_dict(state, lengths=other)
            returned[target] += 1
        except ALLOWED:
            pass

    fuzz_until_each_returns(fuzz, returned, TARGETS)
