"""Bad input raises ValueError, TypeError, OverflowError or IndexError with a
message that names the argument; no input crashes the process or raises
anything else."""

from __future__ import annotations

import inspect
import os
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan as ep
from epochplan.compat import streaming

ALLOWED = (ValueError, TypeError, OverflowError, IndexError)
MAX = 2**63 - 1
P = ep.Permutation(100, seed=1)
PLAN = ep.EpochPlan(10, 3)


class _Long:
    """A sequence too long to hold."""

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, i: int) -> int:
        return 0


CASES: list[tuple[str, Callable[[], object], type[Exception], str]] = [
    # sizes
    ("negative size", lambda: ep.Permutation(-1), ValueError, "num_samples"),
    ("size too large", lambda: ep.Permutation(2**63), ValueError, "num_samples"),
    ("huge size", lambda: ep.permutation(10**40), ValueError, "num_samples"),
    ("float size", lambda: ep.Permutation(10.0), TypeError, "num_samples"),
    ("str size", lambda: ep.permutation("10"), TypeError, "num_samples"),
    ("bool size", lambda: ep.Permutation(True), TypeError, "num_samples"),
    ("numpy bool size", lambda: ep.Permutation(np.True_), TypeError, "num_samples"),
    ("numpy float size", lambda: ep.Permutation(np.float32(3)), TypeError, "num_samples"),
    ("None size", lambda: ep.Permutation(None), TypeError, "num_samples"),
    ("0-d float array size", lambda: ep.Permutation(np.array(10.0)), TypeError, "num_samples"),
    ("1-element array size", lambda: ep.Permutation(np.array([10])), TypeError, "num_samples"),
    ("array batch size", lambda: ep.EpochPlan(10, np.array([3])), TypeError, "global_batch_size"),
    ("unprintable size", lambda: ep.Permutation(10**5000), ValueError, "an int of 16610 bits"),
    ("unprintable negative", lambda: ep.Permutation(-(10**5000)), ValueError, "a negative int"),
    ("uniform too large", lambda: ep.permutation(MAX), OverflowError, "num_samples"),
    ("uniform 2**60", lambda: ep.Permutation(2**60, kind="uniform"), OverflowError, "num_samples"),
    (
        "cipher too large to list",
        lambda: ep.permutation(2**62, kind="cipher"),
        OverflowError,
        "num_samples must be at most",
    ),
    # seeds and epochs
    ("negative seed", lambda: ep.Permutation(10, seed=-1), ValueError, "seed"),
    ("seed 2**64", lambda: ep.permutation(10, seed=2**64), ValueError, "seed"),
    ("float seed", lambda: ep.Permutation(10, seed=1.5), TypeError, "seed"),
    ("bool seed", lambda: ep.Permutation(10, seed=False), TypeError, "seed"),
    ("str seed", lambda: ep.Permutation(10, seed="0"), TypeError, "seed"),
    ("negative epoch", lambda: ep.Permutation(10, epoch=-1), ValueError, "epoch"),
    ("epoch 2**64", lambda: ep.permutation(10, epoch=2**64), ValueError, "epoch"),
    ("float epoch", lambda: ep.permutation(10, epoch=np.float64(1)), TypeError, "epoch"),
    ("bool epoch", lambda: ep.permutation(10, epoch=True), TypeError, "epoch"),
    # None is not "the default" (numpy reads seed=None as "a fresh random seed")
    ("None seed", lambda: ep.Permutation(10, seed=None), TypeError, "seed must be an int"),
    ("None epoch", lambda: ep.permutation(10, epoch=None), TypeError, "epoch must be an int"),
    ("None kind", lambda: ep.EpochPlan(10, 3, kind=None), TypeError, "kind must be a str"),
    ("None drop_last", lambda: ep.EpochPlan(10, 3, drop_last=None), TypeError, "drop_last"),
    ("None cursor", lambda: ep.EpochPlan(10, 3, cursor=None), TypeError, "cursor must be an int"),
    # kinds
    ("unknown kind", lambda: ep.Permutation(10, kind="random"), ValueError, "kind"),
    ("kind not a str", lambda: ep.permutation(10, kind=1), TypeError, "kind"),
    ("chunked without size", lambda: ep.Permutation(10, kind="chunked"), ValueError, "chunk_size"),
    (
        "chunk_size 0",
        lambda: ep.Permutation(10, kind="chunked", chunk_size=0),
        ValueError,
        "chunk_size",
    ),
    (
        "preload_nchunks 0",
        lambda: ep.Permutation(10, kind="chunked", chunk_size=2, preload_nchunks=0),
        ValueError,
        "preload_nchunks",
    ),
    (
        "float chunk_size",
        lambda: ep.Permutation(10, kind="chunked", chunk_size=2.0),
        TypeError,
        "chunk_size",
    ),
    ("chunk_size on cipher", lambda: ep.Permutation(10, chunk_size=4), ValueError, "chunk_size"),
    # indexing
    ("index too large", lambda: P[100], IndexError, "index"),
    ("index too small", lambda: P[-101], IndexError, "index"),
    ("huge index", lambda: P[10**30], IndexError, "index"),
    ("float index", lambda: P[1.0], TypeError, "indices"),
    ("bool index", lambda: P[True], TypeError, "indices"),
    ("str index", lambda: P["1"], TypeError, "indices"),
    ("None index", lambda: P[None], TypeError, "indices"),
    ("tuple index", lambda: P[1, 2], TypeError, "indices"),
    ("0-d float array index", lambda: P[np.array(3.0)], TypeError, "indices"),
    ("unprintable index", lambda: P[10**5000], IndexError, "index must be in [-100, 100)"),
    ("array index too large", lambda: P[np.array([1, 100])], IndexError, "positions"),
    ("slice step 0", lambda: P[::0], ValueError, "slice step"),
    ("slice of floats", lambda: P[0.5:], TypeError, "slice"),
    ("take too large", lambda: P.take([0, 100]), IndexError, "positions"),
    ("take too small", lambda: P.take(np.array([-101])), IndexError, "positions"),
    ("take uint64 max", lambda: P.take(np.array([2**64 - 1], np.uint64)), IndexError, "positions"),
    ("take floats", lambda: P.take([0.0, 1.0]), TypeError, "positions"),
    ("take bools", lambda: P.take(np.array([True, False])), TypeError, "positions"),
    ("take strings", lambda: P.take(["a"]), TypeError, "positions"),
    ("take objects", lambda: P.take(np.array([1, None], dtype=object)), TypeError, "positions"),
    ("take None", lambda: P.take(None), TypeError, "positions"),
    ("take from empty", lambda: ep.Permutation(0).take([0]), IndexError, "positions"),
    ("take 2**64", lambda: P.take([2**64]), IndexError, "positions must be in [-100, 100)"),
    ("take -2**70", lambda: P.take([1, -(2**70)]), IndexError, "got a value outside int64"),
    ("take ragged", lambda: P.take([[1], [2, 3]]), ValueError, "positions must be an array"),
    # plans
    (
        "split_step negative ids",
        lambda: PLAN.split_step(0, 0, 1, 2, [-1, -2, -3]),
        ValueError,
        "ids must be sample ids in [0, 10)",
    ),
    ("split_step id = N", lambda: PLAN.split_step(0, 0, 1, 2, [1, 2, 10]), ValueError, "got 10"),
    (
        "split_step huge uint64 id",
        lambda: PLAN.split_step(0, 0, 1, 2, np.array([1, 2, 2**63], np.uint64)),
        ValueError,
        "ids must be sample ids",
    ),
    (
        "split_step 2-d ids",
        lambda: PLAN.split_step(0, 0, 1, 2, [[1, 2, 3]]),
        ValueError,
        "ids must be a 1-d array",
    ),
    (
        "int drop_last",
        lambda: ep.EpochPlan(10, 3, drop_last=1),
        TypeError,
        "drop_last must be a bool, got int",
    ),
    # split
    ("world_size 0", lambda: ep.split(10, 0, 0), ValueError, "world_size"),
    ("negative world_size", lambda: ep.split(10, -2, 0), ValueError, "world_size"),
    ("rank = world_size", lambda: ep.split(10, 2, 2), ValueError, "rank"),
    ("negative rank", lambda: ep.split(10, 2, -1), ValueError, "rank"),
    ("float rank", lambda: ep.split(10, 2, 1.0), TypeError, "rank"),
    ("bool rank", lambda: ep.split(10, 2, True), TypeError, "rank"),
    ("str world_size", lambda: ep.split(10, "2", 0), TypeError, "world_size"),
    ("negative samples", lambda: ep.split(-1, 2, 0), ValueError, "num_samples_or_array must"),
    ("ragged array", lambda: ep.split([[1], [2, 3]], 2, 0), ValueError, "num_samples_or_array"),
    ("0-d float array", lambda: ep.split(np.array(1.5), 2, 0), TypeError, "num_samples_or_array"),
    ("huge range", lambda: ep.split(range(2**62), 2, 0), OverflowError, "num_samples_or_array"),
    ("range too long", lambda: ep.split(range(2**70), 2, 0), OverflowError, "num_samples_or_array"),
    (
        "range beyond int64",
        lambda: ep.split(range(2**63, 2**63 + 4), 2, 0),
        OverflowError,
        "num_samples_or_array",
    ),
    (
        # Rank 0's share would fit: every rank refuses alike.
        "range partly beyond int64",
        lambda: ep.split(range(2**63 - 3, 2**63 + 3), 2, 0, "contiguous"),
        OverflowError,
        "num_samples_or_array",
    ),
    (
        "range ending at 2**63",
        lambda: ep.split(range(2**63 - 1, 2**63 + 1), 1, 0),
        OverflowError,
        "num_samples_or_array's values must fit int64",
    ),
    (
        "range starting below -2**63",
        lambda: ep.split(range(-(2**63) - 1, -(2**63) + 1), 1, 0),
        OverflowError,
        "num_samples_or_array's values must fit int64",
    ),
    ("huge rank", lambda: ep.split(10, 2, 10**5000), ValueError, "Invalid rank an int of"),
    ("float samples", lambda: ep.split(10.0, 2, 0), TypeError, "num_samples_or_array"),
    ("bool samples", lambda: ep.split(True, 2, 0), TypeError, "num_samples_or_array"),
    ("None samples", lambda: ep.split(None, 2, 0), TypeError, "num_samples_or_array"),
    ("unknown mode", lambda: ep.split(10, 2, 0, "blocks"), ValueError, "mode"),
    ("split too large", lambda: ep.split(2**62, 3, 0), OverflowError, "num_samples_or_array"),
    ("mode not a str", lambda: ep.split(10, 2, 0, 1), TypeError, "mode"),
    # ints beyond what Python prints, flags where ints belong
    (
        "huge worker_id",
        lambda: ep.worker_shard(range(3), 10**5000, 3),
        ValueError,
        "worker_id must be an int in [0, 2], got an int of 16610 bits",
    ),
    ("worker_id alone", lambda: ep.worker_shard(range(7), worker_id=1), ValueError, "together"),
    ("num_workers alone", lambda: ep.worker_shard(range(7), num_workers=2), ValueError, "together"),
    ("numpy bool seed", lambda: ep.Permutation(3, seed=np.True_), TypeError, "seed must be an int"),
    # arrays numpy cannot make
    (
        "ragged shard sizes",
        lambda: streaming.get_shuffle("py1e", [[1], [2, 3]], 2, 7, 0, 8),
        ValueError,
        "shard_sizes must be an array of integers",
    ),
    ("positions too long", lambda: P.take(_Long()), OverflowError, "positions is too large"),
    # materialising
    (
        "permutation too large",
        lambda: ep.permutation(2**61),
        OverflowError,
        "num_samples must be at most 1152921504606846975",
    ),
    ("copy=False", lambda: np.array(P, copy=False), ValueError, "copy=False"),
    # resuming: None is no default in a saved state
    *[
        (
            f"state {key} None",
            lambda key=key: ep.EpochPlan.from_state_dict({**PLAN.state_dict(), key: None}),
            TypeError,
            f"state['{key}'] must be",
        )
        for key in ("num_samples", "seed", "epoch", "cursor", "kind", "drop_last")
    ],
    # ... and a value the constructor checks says it comes from the state
    (
        "state kind unknown",
        lambda: ep.EpochPlan.from_state_dict({**PLAN.state_dict(), "kind": "zz"}),
        ValueError,
        "state: kind must be one of",
    ),
    (
        "state cursor off a step",
        lambda: ep.EpochPlan.from_state_dict({**PLAN.state_dict(), "cursor": 1}),
        ValueError,
        "state: cursor must be a multiple of global_batch_size",
    ),
    # a str that is not valid UTF-8 names no kind
    ("lone surrogate kind", lambda: ep.Permutation(3, kind="\udcff"), ValueError, "kind"),
    ("lone surrogate mode", lambda: ep.split(10, 2, 0, "\udcff"), ValueError, "mode"),
    # threads
    ("negative threads", lambda: ep.set_num_threads(-1), ValueError, "num_threads"),
    ("too many threads", lambda: ep.set_num_threads(10**6), ValueError, "num_threads"),
    ("float threads", lambda: ep.set_num_threads(2.0), TypeError, "num_threads"),
]


@pytest.mark.parametrize(
    ("call", "error", "name"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_raises_a_named_error(
    call: Callable[[], object], error: type[Exception], name: str
) -> None:
    with pytest.raises(error) as info:
        call()
    message = str(info.value)
    assert name in message
    # ... and says what is allowed.
    assert re.search(r"must|\[|at most|cannot|needs|only|too large|not possible", message), message


def test_torch_bools_are_not_ints() -> None:
    # A torch bool has __index__; like Python's bool it is a flag, not a count.
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="seed must be an int, got Tensor"):
        ep.Permutation(3, seed=torch.tensor(True))
    with pytest.raises(TypeError, match="worker_id must be an int, got Tensor"):
        ep.worker_shard(range(3), torch.tensor(False), 2)
    assert ep.Permutation(3, seed=torch.tensor(5)).seed == 5
    # torch gives a one-element tensor of any shape __index__: only 0-d is an int.
    with pytest.raises(TypeError, match="num_samples must be an int, got Tensor"):
        ep.EpochPlan(torch.tensor([10]), 3)
    with pytest.raises(TypeError, match="global_batch_size must be an int, got Tensor"):
        ep.EpochPlan(10, torch.tensor([[3]]))
    et = pytest.importorskip("epochplan.torch")
    with pytest.raises(TypeError, match="seed must be an int, got Tensor"):
        et.DistributedSampler(range(3), 1, 0, seed=torch.tensor([3]))
    with pytest.raises(TypeError, match="data_source_or_num_samples must be an int or a sized"):
        et.ElasticBatchSampler(torch.tensor(True), 3, 1, num_replicas=1, rank=0)


def test_a_dataset_whose_len_fails_is_named() -> None:
    et = pytest.importorskip("epochplan.torch")

    class Huge:
        def __len__(self) -> int:
            return 2**70

    with pytest.raises(ValueError, match=r"data_source_or_num_samples must hold .* len"):
        et.ElasticBatchSampler(Huge(), 3, 1, num_replicas=1, rank=0)


def test_ranges_are_in_messages() -> None:
    with pytest.raises(ValueError, match=r"\[0, 2\*\*63 - 1\], got -1"):
        ep.Permutation(-1)
    with pytest.raises(ValueError, match=r"\[0, 2\*\*64 - 1\]"):
        ep.Permutation(1, seed=-1)
    with pytest.raises(IndexError, match=r"\[-100, 100\)"):
        P[100]


def test_array_indexing_is_take_and_numpy_bools_are_bools() -> None:
    # Integer arrays and lists index like numpy's integer array indexing.
    assert np.array_equal(P[np.array([[1, 2], [3, -1]])], P.take([[1, 2], [3, -1]]))
    assert np.array_equal(P[[5, 0]], P.take([5, 0]))
    assert P[np.array(7)] == P[7]
    assert ep.EpochPlan(10, 3, drop_last=np.True_).drop_last
    assert not ep.EpochPlan(10, 3, drop_last=np.False_).drop_last


class _Interrupting:
    """An integer-like (and array-like) object whose conversion is interrupted."""

    def __index__(self) -> int:
        raise KeyboardInterrupt

    def __array__(self, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt


def test_interrupts_in_conversions_pass_through() -> None:
    # Only TypeError and ValueError of a conversion become the argument's
    # error; Ctrl-C (or any other exception) stays what it is.
    for call in (
        lambda: ep.Permutation(_Interrupting()),
        lambda: P[_Interrupting()],
        lambda: P.take(_Interrupting()),
        lambda: PLAN.split_step(0, 0, 1, 2, _Interrupting()),
    ):
        with pytest.raises(KeyboardInterrupt):
            call()


def test_object_arrays_of_ints_are_positions() -> None:
    ids = np.array([1, 2, 99], dtype=object)
    assert np.array_equal(P.take(ids), P.take([1, 2, 99]))
    assert np.array_equal(P[ids], P.take([1, 2, 99]))
    assert P.take(np.array([], dtype=object)).shape == (0,)
    with pytest.raises(TypeError, match="positions must be an array of integers"):
        P.take(np.array([1, 1.5], dtype=object))


def test_limits_are_accepted() -> None:
    p = ep.Permutation(MAX, seed=2**64 - 1, epoch=2**64 - 1)
    assert 0 <= p[MAX - 1] < MAX
    assert len(ep.permutation(0)) == 0
    assert ep.Permutation(5, seed=np.uint64(2**64 - 1), epoch=np.int8(3)).seed == 2**64 - 1
    assert ep.split(np.int32(10), np.int64(3), np.uint8(2)).tolist() == [2, 5, 8]


# ---------------------------------------------------------------- fuzzing

SCALARS = st.one_of(
    st.integers(-(2**70), 2**70),
    st.integers(-3, 300),
    st.sampled_from([0, 1, 2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63)]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from(["cipher", "uniform", "chunked", "identity", "strided", "contiguous"]),
    st.builds(np.int64, st.integers(-(2**63), 2**63 - 1)),
    st.builds(np.uint64, st.integers(0, 2**64 - 1)),
    st.builds(np.int8, st.integers(-128, 127)),
    st.builds(np.float32, st.floats(-1e6, 1e6, width=32)),
    st.sampled_from([np.True_, np.False_, np.nan]),
)
ARRAYS = st.one_of(
    st.lists(st.integers(-(2**65), 2**65), max_size=5).map(lambda v: np.array(v, dtype=object)),
    st.lists(st.integers(-300, 300), max_size=5).map(np.array),
    st.lists(st.integers(-300, 300), max_size=5),
    st.lists(st.floats(), max_size=3).map(np.array),
    st.lists(st.booleans(), max_size=3).map(np.array),
    st.lists(st.integers(0, 2**64 - 1), max_size=3).map(lambda v: np.array(v, dtype=np.uint64)),
    st.lists(st.text(max_size=2), max_size=3),
)
VALUES = st.one_of(SCALARS, ARRAYS)

# A size that keeps any materialised output small, or one far too large to
# allocate (rejected before any work).
SIZES = st.one_of(SCALARS, st.integers(0, 2000))
LIMIT = 10**6  # largest output the fuzzer may ask to build


def bounded(n: object) -> bool:
    """True when materialising an order of n samples is cheap or refused."""
    try:
        value = int(n)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return True
    return value <= LIMIT or value >= 2**61


def kwargs() -> st.SearchStrategy[dict[str, Any]]:
    keys = ["seed", "epoch", "kind", "chunk_size", "preload_nchunks"]
    return st.dictionaries(st.sampled_from(keys), VALUES, max_size=4)


def slices() -> st.SearchStrategy[slice]:
    part = st.one_of(st.none(), st.integers(-3000, 3000), SCALARS)
    return st.builds(slice, part, part, part)


def test_fuzz_public_functions() -> None:
    # Which targets returned: the fuzz must reach past their argument checks.
    returned: Counter[str] = Counter()

    @settings(
        max_examples=600,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        target = data.draw(
            st.sampled_from(["Permutation", "permutation", "index", "take", "split", "threads"])
        )
        # Half the examples take valid small arguments, so that every target
        # also gets past its checks (hypothesis favours the odd values).
        valid = data.draw(st.booleans())
        try:
            if target in ("Permutation", "permutation") and valid:
                n = data.draw(st.integers(0, 2000))
                kind = data.draw(st.sampled_from(["cipher", "uniform", "identity"]))
                getattr(ep, target)(n, seed=data.draw(st.integers(0, 9)), kind=kind)
            elif target == "Permutation":
                ep.Permutation(data.draw(SIZES), **data.draw(kwargs()))
            elif target == "permutation":
                n = data.draw(SIZES.filter(bounded))
                ep.permutation(n, **data.draw(kwargs()))
            elif target == "split" and valid:
                w = data.draw(st.integers(1, 9))
                mode = data.draw(st.sampled_from(["strided", "contiguous"]))
                ep.split(data.draw(st.integers(0, 2000)), w, data.draw(st.integers(0, w - 1)), mode)
            elif target == "threads" and valid:
                ep.set_num_threads(data.draw(st.integers(0, 8)))
            elif target in ("index", "take"):
                n = data.draw(st.one_of(st.integers(0, 3000), st.just(MAX)))
                kind = data.draw(st.sampled_from(["cipher", "chunked", "identity", "uniform"]))
                extra = {}
                if kind == "chunked":
                    layout = st.one_of(st.integers(1, 8), st.integers(1, MAX))
                    extra = {"chunk_size": data.draw(layout), "preload_nchunks": data.draw(layout)}
                if kind == "uniform" and n == MAX:
                    kind = "cipher"
                p = ep.Permutation(n, kind=kind, **extra)
                if target == "take":
                    p.take(data.draw(VALUES))
                else:
                    key = data.draw(st.one_of(VALUES, slices()))
                    if isinstance(key, slice) and n == MAX:
                        start = data.draw(st.integers(-5000, MAX))
                        key = slice(start, start + data.draw(st.integers(-5000, 5000)), key.step)
                        if not isinstance(key.step, int) or abs(key.step) > 10**6:
                            key = slice(key.start, key.stop)
                    p[key]
            elif target == "split":
                n = data.draw(st.one_of(VALUES, st.integers(0, 10**6)))
                args = data.draw(st.lists(VALUES, min_size=2, max_size=3))
                if bounded(n) or not isinstance(n, (int, np.integer)):
                    ep.split(n, *args)
            else:
                ep.set_num_threads(data.draw(VALUES))
            returned[target] += 1
        except ALLOWED:
            pass
        finally:
            ep.set_num_threads(0)

    fuzz()
    targets = ["Permutation", "permutation", "index", "take", "split", "threads"]
    assert all(returned[t] for t in targets), returned


# Plans, workers and Streaming: integers are small or invalid (never a valid
# size big enough to allocate much), everything else as above.
SMALL_OR_BAD = st.one_of(
    st.integers(-3, 20),
    st.sampled_from([2**63, 2**64, 2**70, -(2**63) - 1]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.builds(np.int64, st.integers(-3, 20)),
    st.builds(np.float32, st.floats(-1e6, 1e6, width=32)),
    st.sampled_from([np.True_, np.nan]),
    ARRAYS,
)
# Mostly valid small integers (four in five), so that calls get past their
# first check.
ARG = st.integers(0, 4).flatmap(lambda k: st.integers(0, 12) if k else SMALL_OR_BAD)
KINDS = st.sampled_from(["cipher", "uniform", "chunked", "identity"])
# Shard sizes: small, or invalid (never a valid total big enough to build).
SHARD_SIZES = st.one_of(
    st.lists(st.integers(0, 50), max_size=6),
    st.lists(st.integers(0, 50), max_size=6).map(np.array),
    st.lists(ARG, max_size=4),
    st.lists(st.integers(-50, -1), min_size=1, max_size=3),
    st.lists(st.integers(2**63, 2**64 - 1), min_size=1, max_size=3).map(
        lambda v: np.array(v, dtype=np.uint64)
    ),
    st.lists(st.floats(), max_size=3).map(np.array),
    st.just(np.zeros((2, 2), np.int64)),
    st.sampled_from([[2**62, 2**62], [2**63 - 1, 1]]),
    SCALARS,
)
PLAN_KEYS = ["seed", "epoch", "kind", "drop_last", "cursor", "chunk_size", "preload_nchunks"]
PLAN_EXTRA = st.dictionaries(st.sampled_from(PLAN_KEYS), st.one_of(ARG, KINDS))
PLAN_METHODS = sorted(
    name
    for name in dir(ep.EpochPlan)
    if not name.startswith("_") and callable(getattr(ep.EpochPlan, name))
)


def positional_count(function: Callable[..., object]) -> int:
    """Required positional arguments of a method, from its signature."""
    return sum(
        p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        for p in inspect.signature(function).parameters.values()
        if p.name != "self"
    )


def valid_args(data: st.DataObject, plan: ep.EpochPlan, method: Callable[..., object]) -> list:
    """Arguments a plan's method accepts, by their names."""
    world_size = data.draw(st.integers(1, 3))
    step = data.draw(st.integers(0, max(plan.num_steps - 1, 0)))
    rank = data.draw(st.integers(0, world_size - 1))
    values = {
        "step": step,
        "rank": rank,
        "world_size": world_size,
        "micro_batch_size": data.draw(st.integers(1, 4)),
        "state": plan.state_dict(),
    }
    if plan.num_steps:
        values["ids"] = plan.step_indices(step, rank, world_size)
    names = [
        p.name
        for p in inspect.signature(method).parameters.values()
        if p.kind is not p.KEYWORD_ONLY  # lengths=, max_tokens=: token plans, fuzzed apart
    ]
    return [values[name] for name in names if name != "self"]


def test_fuzz_plans_workers_and_streaming() -> None:
    # Which calls returned: the fuzz must reach past the argument checks of
    # every target and every plan method, or it proves nothing about them.
    returned: Counter[str] = Counter()

    @settings(
        max_examples=1500,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        # Plans have the most methods: they get half of the examples.
        target = data.draw(
            st.sampled_from(["EpochPlan"] * 4 + ["worker_shard", "partitions", "part", "shuffle"])
        )
        # Half the examples take only small positive integers, so that calls
        # get past their first check (hypothesis favours the odd values).
        small = data.draw(st.booleans())
        arg = st.integers(1, 12) if small else ARG
        draw_args = lambda k, s=arg: data.draw(st.lists(s, min_size=k, max_size=k))  # noqa: E731
        streaming_target = target in ("partitions", "part", "shuffle")
        try:
            if target == "EpochPlan":
                extra = {} if small else data.draw(PLAN_EXTRA)
                sizes = draw_args(2)
                if small and data.draw(st.booleans()):
                    # A token plan: tokens per sample, zeros included.
                    lengths = st.lists(st.integers(0, 9), min_size=sizes[0], max_size=sizes[0])
                    extra = {"lengths": np.asarray(data.draw(lengths), dtype=np.int32)}
                plan = ep.EpochPlan(*sizes, **extra)
                target = data.draw(st.sampled_from(PLAN_METHODS))
                method = getattr(plan, target)
                if small:
                    args = valid_args(data, plan, method)
                else:
                    args = draw_args(positional_count(method))
                if target == "from_state_dict":
                    state = plan.state_dict()
                    if not small:
                        state[data.draw(st.sampled_from(sorted(state)))] = args[0]
                    ep.EpochPlan.from_state_dict(state, lengths=plan.lengths)
                else:
                    result = method(*args)
                    if target == "micro_batches":
                        list(result)
            elif target == "worker_shard":
                list(ep.worker_shard(range(30), *draw_args(2, st.integers(0, 3) if small else ARG)))
            elif target in ("partitions", "part"):
                algo = data.draw(st.sampled_from(["orig", "relaxed", "other"]))
                args = draw_args(7)
                if target == "partitions":
                    streaming.get_partitions(
                        algo, *args, initial_physical_nodes=data.draw(st.one_of(st.none(), arg))
                    )
                else:
                    place = st.integers(0, 1) if small else ARG
                    streaming.get_partition_part(
                        algo, *args, node=data.draw(place), rank=data.draw(place)
                    )
            else:
                algo = data.draw(st.sampled_from(["naive", "py1s", "py2s", "py1br", "py1e", "x"]))
                sizes = (
                    data.draw(st.lists(st.integers(1, 50), min_size=1, max_size=6))
                    if small
                    else data.draw(SHARD_SIZES)
                )
                streaming.get_shuffle(algo, sizes, *draw_args(4))
        except ALLOWED:
            return
        except KeyError:
            # Streaming's own error for an unknown algo; nothing else raises it.
            if not streaming_target:
                raise
            return
        returned[target] += 1

    fuzz()
    expected = ["worker_shard", "partitions", "part", "shuffle", *PLAN_METHODS]
    assert not [name for name in expected if returned[name] == 0], returned


def test_partition_size_overflow_is_an_error() -> None:
    import warnings

    from epochplan.compat import streaming

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(OverflowError, match="partition's size"):
            streaming.get_partition_part("orig", 10, 2**62, 2**62, 2**62, 16, 1, node=0, rank=0)
        with pytest.raises(OverflowError, match="partition's size"):
            streaming.get_partitions("orig", 10, 1, 1, 2**62, 2**62, 2**62)


def test_numpy_integers_for_workers() -> None:
    assert list(ep.worker_shard(range(7), np.int64(1), np.int64(3))) == [1, 4]


def test_no_thread_to_start_is_a_runtime_error(tmp_path: Path) -> None:
    # A stack too large to map makes every thread start fail, as a process
    # thread limit does: calls that need a thread raise RuntimeError (not a
    # Rust panic, which no `except Exception` catches), the others run on the
    # calling thread, and a plan write leaves nothing behind.
    script = f"""
import numpy as np
import epochplan as ep
from epochplan import planfile
from epochplan.compat import streaming
calls = {{
    "cipher": lambda: ep.Permutation(10**6)[:],
    "rank_indices": lambda: ep.EpochPlan(10**6, 64).rank_indices(0, 2),
    "partitions": lambda: streaming.get_partitions("orig", 10**6, 2, 2, 2, 2, 8),
    "uniform": lambda: ep.permutation(10**6),
    "py1e": lambda: streaming.get_shuffle("py1e", np.full(100, 10**4), 2, 0, 0, 1 << 18),
    "write_plan": lambda: planfile.write_plan({str(tmp_path / "plan")!r}, 10**5, 64, 2),
}}
for name, call in calls.items():
    try:
        call()
        print(name, "returned")
    except Exception as e:
        print(name, type(e).__name__, e)
"""
    env = {**os.environ, "RUST_MIN_STACK": str(2**40), "RUST_BACKTRACE": "0"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr
    lines = dict(line.split(" ", 1) for line in res.stdout.splitlines())
    for name in ("cipher", "rank_indices", "partitions"):
        assert lines[name] == "returned"
    for name in ("uniform", "py1e"):
        assert lines[name].startswith("RuntimeError cannot start a worker thread"), lines[name]
    assert lines["write_plan"].startswith("RuntimeError cannot start a plan file thread")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "call",
    [
        *["permutation", "uniform", "rank_indices", "partitions", "partition_part"],
        *["naive", "py1s", "py2s", "py1br", "py1e", "py1e_one_block", "write_plan"],
    ],
)
def test_no_memory_limit_crashes_a_call(call: str, tmp_path: Path) -> None:
    # Under address-space limits from none to plenty above what the call
    # needs, each call returns or raises; a small allocation failing after
    # the output fitted (a thread's malloc arena, a sort bucket) would
    # abort the process instead. Files are complete or absent.
    script = f"""
import os, resource, shutil
from collections import Counter
import numpy as np, epochplan as ep
from epochplan import planfile
from epochplan.compat import streaming
shards = np.full(200, 10**4)  # 2 * 10**6 samples, a 16 MB output
out = {str(tmp_path / "plan")!r}
calls = {{
    "permutation": lambda: ep.Permutation(2 * 10**6)[:],
    "uniform": lambda: ep.permutation(2 * 10**6),
    "rank_indices": lambda: ep.EpochPlan(4 * 10**6, 64).rank_indices(0, 2),
    "partitions": lambda: streaming.get_partitions("orig", 2 * 10**6, 2, 2, 2, 2, 8),
    "partition_part": lambda: streaming.get_partition_part(
        "orig", 4 * 10**6, 2, 2, 2, 2, 8, node=0, rank=0
    ),
    "py1e_one_block": lambda: streaming.get_shuffle("py1e", shards, 1, 0, 0, 10**9),
    "write_plan": lambda: planfile.write_plan(out, 2 * 10**6, 64, 2),
}}
algo = {call!r}
call = calls.get(algo) or (lambda: streaming.get_shuffle(algo, shards, 2, 0, 0, 1 << 18))
soft, hard = resource.getrlimit(resource.RLIMIT_AS)
outcomes = Counter()
for extra_mb in range(0, 400, 5):
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (extra_mb << 20), hard))
    try:
        call()
        outcomes["returned"] += 1
    except (MemoryError, OverflowError, RuntimeError) as e:
        outcomes[type(e).__name__] += 1
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    if algo == "write_plan" and os.path.exists(out):
        planfile.verify_plan(out)  # raises unless the plan is whole
        shutil.rmtree(out)
print(dict(outcomes))
"""
    # Two threads on any machine: the room a call needs grows with the
    # threads, and the sweep must reach it.
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "2"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=600
    )
    assert res.returncode == 0, res.stderr[-2000:]
    outcomes = eval(res.stdout)
    # The sweep spans the call's need: it failed under the tight limits and
    # returned under the loose ones.
    assert outcomes.get("returned", 0) > 0 and len(outcomes) > 1, outcomes


@pytest.mark.parametrize(
    "call", ["take", "get_shuffle", "step_micro_batches", "step_micro_batches_in_python"]
)
def test_out_of_memory_is_an_exception(call: str) -> None:
    # Under an address-space limit (as cluster schedulers set), copies of
    # inputs and the many micro-batches of a step fail with an exception;
    # Rust's default on a failed allocation is to abort the process, and
    # numpy's array creation crashes when Python's memory runs out.
    script = f"""
import resource, numpy as np, epochplan as ep
from epochplan.compat import streaming
def limit(extra_mb):
    with open("/proc/self/status") as f:
        size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
    resource.setrlimit(resource.RLIMIT_AS, (size + (extra_mb << 20),) * 2)
call = {call!r}
if call.startswith("step_micro_batches"):
    plan = ep.EpochPlan(10**7, 10**7, kind="identity")
    # 800 MB: the step's ids and its list fit, its 10**7 micro-batches do
    # not. 2500 MB: they fit (1.2 GB), their Python objects (5 GB) do not.
    limit(800 if call == "step_micro_batches" else 2500)
    f = lambda: plan.step_micro_batches(0, 0, 1, 1)
else:
    a = np.zeros(5 * 10**7, dtype=np.int64)
    limit(100)  # the 400 MB input is there, its copy does not fit
    if call == "take":
        f = lambda: ep.Permutation(10).take(a)
    else:
        f = lambda: streaming.get_shuffle("py1s", a, 1, 0, 0, 1 << 18)
try:
    f()
    print("returned")
except Exception as e:
    print(type(e).__name__, e)
"""
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert res.returncode == 0, res.stderr[-2000:]
    want = {
        "take": "OverflowError cannot allocate positions",
        "get_shuffle": "MemoryError cannot allocate shard_sizes",
        "step_micro_batches": "OverflowError cannot allocate a micro-batch",
        "step_micro_batches_in_python": "OverflowError cannot allocate the step's 10000000",
    }[call]
    assert res.stdout.startswith(want), res.stdout


def test_small_calls_on_many_threads_fit_an_address_space_limit() -> None:
    # A node of 128 cores under `ulimit -v` (as schedulers set): a call counts
    # the room of the threads yet to start that it runs on, which its size
    # caps (10**6 ids are 16 pieces of work), not of the whole pool; a call
    # that cannot fit says how many threads it counted and what lowers them.
    script = """
import resource, sys, epochplan as ep
with open("/proc/self/status") as f:
    size = next(int(l.split()[1]) for l in f if l.startswith("VmSize:")) * 1024
resource.setrlimit(resource.RLIMIT_AS, (size + (int(sys.argv[1]) << 20),) * 2)
if sys.argv[2] == "small":
    print(len(ep.permutation(10**6)), len(ep.Permutation(10**6)[:]))
else:
    try:
        ep.Permutation(10**7)[:]
    except OverflowError as e:
        print(e)
"""
    env = {**os.environ, "EPOCHPLAN_NUM_THREADS": "128"}
    out = []
    for limit_mb, case in (("2048", "small"), ("1024", "large")):
        res = subprocess.run(
            [sys.executable, "-c", script, limit_mb, case],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert res.returncode == 0, res.stderr[-2000:]
        out.append(res.stdout.strip())
    assert out[0] == "1000000 1000000"
    assert "the 129 threads the call runs on" in out[1]
    assert "EPOCHPLAN_NUM_THREADS" in out[1]


def test_fuzz_index_spaces() -> None:
    # Selections, random splits and mixtures: only the allowed exceptions, and
    # every target also returns (half the examples take valid small values).
    returned: Counter[str] = Counter()
    targets = ["from_ranges", "from_mask", "from_indices", "random_split", "Mixture"]
    targets += ["epoch", "index", "take", "sources", "set"]

    @st.composite
    def selection(draw: st.DrawFn) -> ep.Selection:
        n = draw(st.integers(0, 12))
        form = draw(st.sampled_from(["ranges", "mask", "indices", "split"]))
        if form == "ranges":
            cuts = sorted(draw(st.lists(st.integers(0, n), max_size=4)))
            return ep.Selection.from_ranges(list(zip(cuts[::2], cuts[1::2], strict=False)), n)
        if form == "mask":
            return ep.Selection.from_mask(draw(st.lists(st.booleans(), min_size=n, max_size=n)))
        if form == "indices":
            return ep.Selection.from_indices(draw(st.permutations(range(n)))[: n // 2], n)
        return ep.random_split(n, [n // 3, n - n // 3], seed=draw(st.integers(0, 9)))[1]

    @settings(
        max_examples=800,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        target = data.draw(st.sampled_from(targets))
        valid = data.draw(st.booleans())
        arg = st.integers(0, 12) if valid else ARG
        items = st.lists(arg, max_size=4) if valid else st.one_of(VALUES, st.lists(ARG, max_size=4))
        try:
            if target == "from_ranges":
                pair = st.one_of(st.tuples(arg, arg), st.builds(slice, arg, arg, arg), arg)
                ranges = data.draw(st.one_of(st.lists(pair, max_size=3), VALUES))
                if valid:
                    cuts = sorted(data.draw(st.lists(st.integers(0, 12), max_size=4)))
                    ranges = list(zip(cuts[::2], cuts[1::2], strict=False))
                ep.Selection.from_ranges(ranges, data.draw(arg) if not valid else 12)
            elif target == "from_mask":
                mask = (
                    data.draw(st.lists(st.booleans(), max_size=9)) if valid else data.draw(VALUES)
                )
                ep.Selection.from_mask(mask)
            elif target == "from_indices":
                ids = data.draw(st.permutations(range(9)))[:4] if valid else data.draw(VALUES)
                ep.Selection.from_indices(ids, 9 if valid else data.draw(SMALL_OR_BAD))
            elif target == "random_split":
                spec = data.draw(st.sampled_from([[6, 6], [0.5, 0.5], [12]]) if valid else items)
                ep.random_split(12 if valid else data.draw(arg), spec, seed=data.draw(arg))
            elif target == "Mixture":
                sources = data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3))
                kind = data.draw(st.sampled_from(["weights", "repeat", "quotas", None]))
                if not valid:
                    sources = data.draw(st.one_of(items, st.lists(selection(), max_size=2)))
                extra = {} if kind is None else {kind: data.draw(items)}
                if valid and kind is not None:
                    extra = {kind: [1] * len(sources)}
                if kind == "weights" and data.draw(st.booleans()):
                    extra["num_samples"] = data.draw(arg)
                ep.Mixture(sources, **extra, seed=data.draw(arg))
            elif target in ("epoch", "sources"):
                mix = ep.Mixture(data.draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
                consumed = data.draw(st.one_of(st.none(), items))
                epoch = mix.epoch(data.draw(arg), consumed if not valid else None)
                if target == "sources":
                    epoch.sources(data.draw(VALUES) if not valid else [0, -1])
            elif target in ("index", "take"):
                space: Any = data.draw(selection())
                if data.draw(st.booleans()):
                    space = ep.Mixture([len(space) or 1, 3]).epoch(1)
                key = data.draw(st.one_of(VALUES, slices()))
                if target == "take":
                    space.take(key)
                else:
                    space[key]
            else:
                a, b = data.draw(selection()), data.draw(selection())
                op = data.draw(st.sampled_from(["&", "|", "-", "~", "mask"]))
                if op == "~":
                    _ = ~a
                elif op == "mask":
                    ep.Selection.from_mask(a.to_mask())
                else:
                    {"&": a.__and__, "|": a.__or__, "-": a.__sub__}[op](b)
            returned[target] += 1
        except ALLOWED:
            pass

    fuzz()
    assert all(returned[t] for t in targets), returned


def test_torch_tensors_numpy_cannot_read_are_type_errors_naming_the_argument() -> None:
    # A float tensor that requires grad, a nested tensor and a 0-d meta tensor
    # leaked torch's RuntimeError; integer CPU tensors work where arrays do.
    torch = pytest.importorskip("torch")
    p = ep.Permutation(10)
    plan = ep.EpochPlan(10, 5)
    unreadable = {
        "requires grad": torch.ones(3, requires_grad=True),
        "nested": torch.nested.nested_tensor([torch.arange(2), torch.arange(3)]),
        "meta": torch.tensor(3, device="meta"),
    }
    calls: dict[str, tuple[str, Callable[[Any], object]]] = {
        "take": ("positions", lambda t: p.take(t)),
        "getitem": ("", lambda t: p[t]),
        "split": ("num_samples_or_array", lambda t: ep.split(t, 2, 0)),
        "Permutation": ("num_samples", lambda t: ep.Permutation(t)),
        "split_step": ("ids", lambda t: plan.split_step(0, 0, 1, 5, t)),
        "get_shuffle": ("shard_sizes", lambda t: streaming.get_shuffle("py1s", t, 1, 0, 0, 100)),
    }
    for tensor in unreadable.values():
        for name, call in calls.values():
            with pytest.raises(TypeError, match=name):
                call(tensor)
    assert p.take(torch.tensor([1, 2])).tolist() == p.take([1, 2]).tolist()
    assert p[torch.tensor(3)] == p[3]
    assert ep.split(torch.tensor([5, 6, 7]), 2, 1).tolist() == [6]
