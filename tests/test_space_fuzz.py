"""Fuzzing the index spaces and the plans over them: every call either
returns or raises TypeError, ValueError, OverflowError or IndexError (never a
panic or a crash), and the valid half of the examples reaches past every
check."""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_errors import ALLOWED, VALUES

import epochplan as ep

MAKERS = ["from_ranges", "from_mask", "from_indices", "random_split", "Mixture", "plan"]


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


def test_fuzz_spaces_and_plans_over_them() -> None:
    returned: Counter[str] = Counter()

    @settings(
        max_examples=800,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(MAKERS))
        valid = data.draw(st.booleans())
        draw = data.draw
        try:
            if target == "plan":
                space = small_space(data) if valid else draw(st.one_of(VALUES, st.just(None)))
                g = draw(st.integers(1, 9)) if valid else draw(VALUES)
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
                    list(
                        plan.micro_batches(draw(st.integers(0, w - 1)), w, draw(st.integers(1, 3)))
                    )
                else:
                    state = plan.state_dict()
                    other = small_space(data) if draw(st.booleans()) else plan.space
                    if not valid and "space" in state:
                        state["space"] = draw(st.one_of(VALUES, st.just({"kind": 1})))
                    mixture = getattr(other, "mixture", None)
                    ep.EpochPlan.from_state_dict(state, space=mixture or other)
            elif target == "from_ranges":
                n = draw(st.integers(0, 100)) if valid else draw(VALUES)
                ranges = draw(st.lists(st.tuples(st.integers(-2, 102), st.integers(-2, 102))))
                ep.Selection.from_ranges(ranges if valid else draw(VALUES), n)
            elif target == "from_mask":
                ep.Selection.from_mask(
                    np.array(draw(st.lists(st.booleans(), max_size=50))) if valid else draw(VALUES)
                )
            elif target == "from_indices":
                ids = draw(st.lists(st.integers(-3, 60), max_size=20)) if valid else draw(VALUES)
                ep.Selection.from_indices(ids, draw(st.integers(0, 60)) if valid else draw(VALUES))
            elif target == "random_split":
                if valid:
                    parts = draw(st.lists(st.integers(0, 10**11), min_size=1, max_size=4))
                    n = sum(parts)
                else:
                    parts, n = draw(VALUES), draw(VALUES)
                ep.random_split(n, parts, seed=draw(st.integers(0, 5)))
            else:
                sizes = draw(st.lists(st.integers(0, 30), max_size=4)) if valid else draw(VALUES)
                rule = draw(st.sampled_from(["weights", "repeat", "quotas", None]))
                kwargs = {} if rule is None else {rule: draw(VALUES)}
                if valid and rule == "quotas":
                    kwargs = {rule: draw(st.lists(st.integers(0, 40), max_size=4))}
                ep.Mixture(sizes, **kwargs)
            returned[target] += 1
        except ALLOWED:
            pass

    fuzz()
    assert all(returned[t] for t in MAKERS), returned
