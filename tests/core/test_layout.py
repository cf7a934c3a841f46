"""The native layer's layout, validation exports and exception classes."""

from __future__ import annotations

import errno
import pickle
from pathlib import Path

import numpy as np
import pytest

import epochplan
from epochplan import _native
from epochplan._native import EpochPlan, Permutation, PlanLayout


class Index:
    """An object that is an int only through ``__index__``."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value


def test_objects_with_only_index_are_ints() -> None:
    assert len(Permutation(Index(10))) == 10
    p = Permutation(10, seed=1)
    assert p[Index(3)] == p[3]
    assert EpochPlan(10, Index(4)).num_steps == 3
    assert _native._check_int(Index(5), "x", 0, 10) == 5
    assert epochplan.split(10, 0, Index(2)).tolist() == [0, 2, 4, 6, 8]
    assert epochplan.split(Index(10), Index(1), 2).tolist() == [1, 3, 5, 7, 9]


@pytest.mark.parametrize(
    ("n", "g", "drop_last", "cursor"),
    [(0, 3, False, 0), (9, 4, False, 0), (9, 4, True, 4), (17, 4, False, 17), (100, 7, False, 14)],
)
def test_a_plans_layout_answers_as_the_plan(n: int, g: int, drop_last: bool, cursor: int) -> None:
    plan = EpochPlan(n, g, seed=3, kind="uniform", drop_last=drop_last, cursor=cursor)
    layout = PlanLayout(n, g, drop_last=drop_last, cursor=cursor)
    order = Permutation(n, seed=3, kind="uniform")
    assert plan.layout == layout
    for name in ["num_samples", "global_batch_size", "drop_last", "cursor", "num_steps"]:
        assert getattr(layout, name) == getattr(plan, name), name
    assert (layout.start_step, layout.remaining_steps) == (plan.start_step, plan.remaining_steps)
    for w in [1, 2, 5]:
        for b in [1, 2, 3]:
            assert layout.total_micro_batches(w, b) == plan.total_micro_batches(w, b)
        for r in range(w):
            assert layout.rank_size(r, w) == plan.rank_size(r, w)
            for step in range(plan.num_steps):
                assert layout.step_size(step) == plan.step_size(step)
                assert layout.num_micro_batches(step, w, 2) == plan.num_micro_batches(step, w, 2)
                assert layout.rank_step_offset(step, r, w) == plan.rank_step_offset(step, r, w)
                ids = plan.step_indices(step, r, w)
                # An empty share is filled with the order's sample at the filler position.
                filler = order[layout.filler_position(step, r, w)]
                got = layout.split_step(step, r, w, 2, ids, filler=filler)
                want = plan.split_step(step, r, w, 2, ids)
                assert [(a.tolist(), b.tolist()) for a, b in got] == [
                    (a.tolist(), b.tolist()) for a, b in want
                ]


def test_an_empty_share_is_filled_with_the_identity_plans_sample_by_default() -> None:
    layout = PlanLayout(9, 4)
    assert layout.filler_position(2, 1, 2) == 8
    identity = EpochPlan(9, 4, kind="identity")
    got = layout.split_step(2, 1, 2, 2, np.array([], dtype=np.int64))
    want = identity.split_step(2, 1, 2, 2, np.array([], dtype=np.int64))
    assert [(a.tolist(), b.tolist()) for a, b in got] == [([8], [0.0])]
    assert [(a.tolist(), b.tolist()) for a, b in want] == [([8], [0.0])]
    assert [(a.tolist(), b.tolist()) for a, b in layout.split_step(2, 1, 2, 2, [], filler=5)] == [
        ([5], [0.0])
    ]


def test_a_layout_is_a_value() -> None:
    layout = PlanLayout(100, 7, drop_last=True, cursor=14)
    assert pickle.loads(pickle.dumps(layout)) == layout
    assert hash(PlanLayout(100, 7, drop_last=True, cursor=14)) == hash(layout)
    assert layout != PlanLayout(100, 7, drop_last=True)
    assert layout.at_step(0) == PlanLayout(100, 7, drop_last=True)
    assert repr(layout) == (
        "PlanLayout(num_samples=100, global_batch_size=7, drop_last=True, cursor=14, num_steps=14)"
    )


def test_layout_arguments_are_checked_as_the_plans() -> None:
    with pytest.raises(ValueError, match=r"global_batch_size must be an int in \[1, 2\*\*63 - 1\]"):
        PlanLayout(10, 0)
    with pytest.raises(ValueError, match="cursor must be a multiple of global_batch_size"):
        PlanLayout(10, 4, cursor=3)
    with pytest.raises(TypeError, match="drop_last must be a bool"):
        PlanLayout(10, 4, drop_last=1)
    with pytest.raises(IndexError, match=r"step must be in \[0, 3\)"):
        PlanLayout(10, 4).step_size(3)
    with pytest.raises(ValueError, match="Invalid rank 2"):
        PlanLayout(10, 4).rank_size(2, 2)


def test_limits_and_names_are_exported_once() -> None:
    assert _native.MAX_SEED == 2**64 - 1
    assert _native.MAX_SAMPLES == 2**63 - 1
    assert _native.KINDS == ("cipher", "uniform", "chunked", "identity")
    assert set(_native.STREAMING_ALGOS) == {"naive", "py1s", "py2s", "py1br", "py1e"}
    for kind in _native.KINDS:
        order = epochplan.Chunked(2) if kind == "chunked" else kind
        assert Permutation(4, kind=order).kind == kind
    _native.set_num_threads(_native.MAX_THREADS)
    with pytest.raises(ValueError, match=f"in \\[0, {_native.MAX_THREADS}\\]"):
        _native.set_num_threads(_native.MAX_THREADS + 1)
    _native.set_num_threads(0)


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        ((11, "x", 0, 10), ValueError, r"^x must be an int in \[0, 10\], got 11$"),
        ((2**64, "seed", 0, 2**64 - 1), ValueError, r"^seed must be an int in \[0, 2\*\*64 - 1\]"),
        (
            (-(2**300), "x", 0),
            ValueError,
            r"^x must be an int >= 0, got a negative int of 301 bits$",
        ),
        ((1.0, "x"), TypeError, r"^x must be an int, got float$"),
        ((True, "x"), TypeError, r"^x must be an int, got bool$"),
        ((np.array([1, 2]), "x"), TypeError, r"^x must be an int, got ndarray$"),
    ],
)
def test_check_int_refuses_with_the_bindings_messages(args, error, message) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(error, match=message):
        _native._check_int(*args)


def test_check_int_and_check_bool_accept_what_the_bindings_accept() -> None:
    assert _native._check_int(np.int64(7), "x", 0, 10) == 7
    assert type(_native._check_int(np.int64(7), "x")) is int
    assert _native._check_int(2**200, "x", 0) == 2**200
    assert _native._check_bool(np.bool_(True), "flag") is True
    with pytest.raises(TypeError, match=r"^flag must be a bool, got int$"):
        _native._check_bool(1, "flag")


def test_plan_file_errors_are_plan_errors_and_keep_their_os_kind(tmp_path: Path) -> None:
    missing = tmp_path / "rank-00000.npy"
    with pytest.raises(_native.PlanError) as info:
        _native.check_plan_file(str(missing), 0, _native.npy_file_size(0), "0" * 64)
    err = info.value
    assert isinstance(err, FileNotFoundError) and isinstance(err, ValueError)
    assert type(err).__name__ == "PlanFileNotFoundError"
    assert (err.errno, err.filename) == (errno.ENOENT, str(missing))
    assert str(err).startswith(f"{missing}: cannot open: ")
    missing.write_bytes(b"\x93NUMPY")
    with pytest.raises(_native.PlanError, match=f"^{missing}: the manifest says 1 bytes") as bad:
        _native.check_plan_file(str(missing), 0, 1, "0" * 64)
    assert not isinstance(bad.value, OSError)
    for name, base in [
        ("PlanFileNotFoundError", FileNotFoundError),
        ("PlanPermissionError", PermissionError),
        ("PlanFileExistsError", FileExistsError),
        ("PlanOSError", OSError),
    ]:
        cls = getattr(_native, name)
        assert issubclass(cls, _native.PlanError) and issubclass(cls, base)
    assert issubclass(_native.PlanError, ValueError)


def test_a_writer_names_its_files_by_their_display_paths(tmp_path: Path) -> None:
    plan = EpochPlan(10, 4)
    paths = [str(tmp_path / f"r{r}.npy") for r in range(2)]
    (tmp_path / "r0.npy").write_bytes(b"")
    with pytest.raises(_native.PlanFileExistsError) as info:
        _native.write_epoch_files(paths, 2, plan, display_paths=["/plan/r0.npy", "/plan/r1.npy"])
    assert str(info.value).startswith("/plan/r0.npy: cannot create: ")
    assert info.value.filename == "/plan/r0.npy"
    assert str(tmp_path) not in str(info.value)
