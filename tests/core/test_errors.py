"""Bad input raises ValueError, TypeError, OverflowError or IndexError with a
message that names the argument; no input crashes the process or raises
anything else."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

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
    (
        "chunked as a str",
        lambda: ep.Permutation(10, kind="chunked"),
        ValueError,
        "kind='chunked' needs its chunk size: give kind=Chunked",
    ),
    ("chunk_size 0", lambda: ep.Permutation(10, kind=ep.Chunked(0)), ValueError, "chunk_size"),
    (
        "preload_nchunks 0",
        lambda: ep.Permutation(10, kind=ep.Chunked(2, 0)),
        ValueError,
        "preload_nchunks",
    ),
    ("float chunk_size", lambda: ep.Permutation(10, kind=ep.Chunked(2.0)), TypeError, "chunk_size"),
    ("bool preload_nchunks", lambda: ep.Chunked(2, True), TypeError, "preload_nchunks"),
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
    ("negative world_size", lambda: ep.split(10, 0, -2), ValueError, "world_size"),
    ("rank = world_size", lambda: ep.split(10, 2, 2), ValueError, "rank"),
    ("negative rank", lambda: ep.split(10, -1, 2), ValueError, "rank"),
    ("float rank", lambda: ep.split(10, 1.0, 2), TypeError, "rank"),
    ("bool rank", lambda: ep.split(10, True, 2), TypeError, "rank"),
    ("str world_size", lambda: ep.split(10, 0, "2"), TypeError, "world_size"),
    ("negative samples", lambda: ep.split(-1, 0, 2), ValueError, "num_samples_or_array must"),
    ("ragged array", lambda: ep.split([[1], [2, 3]], 0, 2), ValueError, "num_samples_or_array"),
    ("0-d float array", lambda: ep.split(np.array(1.5), 0, 2), TypeError, "num_samples_or_array"),
    ("huge range", lambda: ep.split(range(2**62), 0, 2), OverflowError, "num_samples_or_array"),
    ("range too long", lambda: ep.split(range(2**70), 0, 2), OverflowError, "num_samples_or_array"),
    (
        "range beyond int64",
        lambda: ep.split(range(2**63, 2**63 + 4), 0, 2),
        OverflowError,
        "num_samples_or_array",
    ),
    (
        # Rank 0's share would fit: every rank refuses alike.
        "range partly beyond int64",
        lambda: ep.split(range(2**63 - 3, 2**63 + 3), 0, 2, "contiguous"),
        OverflowError,
        "num_samples_or_array",
    ),
    (
        "range ending at 2**63",
        lambda: ep.split(range(2**63 - 1, 2**63 + 1), 0, 1),
        OverflowError,
        "num_samples_or_array's values must fit int64",
    ),
    (
        "range starting below -2**63",
        lambda: ep.split(range(-(2**63) - 1, -(2**63) + 1), 0, 1),
        OverflowError,
        "num_samples_or_array's values must fit int64",
    ),
    ("huge rank", lambda: ep.split(10, 10**5000, 2), ValueError, "Invalid rank an int of"),
    ("float samples", lambda: ep.split(10.0, 0, 2), TypeError, "num_samples_or_array"),
    ("bool samples", lambda: ep.split(True, 0, 2), TypeError, "num_samples_or_array"),
    ("None samples", lambda: ep.split(None, 0, 2), TypeError, "num_samples_or_array"),
    ("unknown mode", lambda: ep.split(10, 0, 2, "blocks"), ValueError, "mode"),
    ("split too large", lambda: ep.split(2**62, 0, 3), OverflowError, "num_samples_or_array"),
    ("mode not a str", lambda: ep.split(10, 0, 2, 1), TypeError, "mode"),
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
    ("lone surrogate mode", lambda: ep.split(10, 0, 2, "\udcff"), ValueError, "mode"),
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
    with pytest.raises(TypeError, match="num_samples must be an int, got Tensor"):
        et.ElasticBatchSampler(ep.PlanSpec(torch.tensor(True), 3), 1, num_replicas=1, rank=0)


def test_a_dataset_is_not_a_spec() -> None:
    # A sampler takes a PlanSpec: a dataset (or its length) is an error naming
    # the argument, and PlanSpec names a size that is not an int.
    et = pytest.importorskip("epochplan.torch")

    class Huge:
        def __len__(self) -> int:
            return 2**70

    with pytest.raises(TypeError, match="spec"):
        et.ElasticBatchSampler(Huge(), 1, num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="spec"):
        et.ElasticBatchSampler(10, 1, num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="num_samples must be an int, got Huge"):
        ep.PlanSpec(Huge(), 3)


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
    assert ep.split(np.int32(10), np.uint8(2), np.int64(3)).tolist() == [2, 5, 8]


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
        "split": ("num_samples_or_array", lambda t: ep.split(t, 0, 2)),
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
    assert ep.split(torch.tensor([5, 6, 7]), 1, 2).tolist() == [6]
