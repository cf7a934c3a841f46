"""Token plans in plan files: rank files in the balanced dealing's order, the
token files a rank reads alone, PlanSampler equal to the in-memory plan,
and verify's checks of caps, counts, balance and stored lengths."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epochplan as ep
from epochplan import _native
from epochplan._native import _testing
from epochplan.planfile import (
    MANIFEST,
    PlanError,
    manifest_checksum,
    open_plan,
    verify_plan,
    write_plan,
)
from tests.planfile._manifest_flips import assert_every_manifest_byte_refused

torch_mod = pytest.importorskip("epochplan.torch")
PlanSampler = torch_mod.PlanSampler


def _lengths(tmp_path: Path, values: Any, name: str = "lengths.npy") -> Path:
    path = tmp_path / name
    np.save(path, np.asarray(values))
    return path


def _mapped(tmp_path: Path, values: Any, name: str = "lengths.npy") -> np.ndarray:
    """``values`` saved to a .npy file and memory-mapped (a memmap records its file)."""
    return np.load(_lengths(tmp_path, values, name), mmap_mode="r")


def _sampler_batches(
    out: Path, rank: int, w: int, epoch: int
) -> list[tuple[list[int], list[float]]]:
    s = PlanSampler(out, rank=rank, num_replicas=w, epoch=epoch)
    got = [(list(mb), list(mb.weights)) for mb in s]
    assert len(s) == len(got)
    return got


def _plan_batches(plan: ep.EpochPlan, rank: int, w: int, b: Any, m: Any) -> list[Any]:
    return [
        (ids.tolist(), weights.tolist())
        for step in plan.micro_batches(rank, w, b, max_tokens=m)
        for ids, weights in step
    ]


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(0, 60),
    g=st.integers(1, 16),
    w=st.integers(1, 5),
    caps=st.sampled_from([(None, 40), (3, None), (2, 25)]),
    loss=st.booleans(),
    normalization=st.sampled_from(["tokens", "samples"]),
    cost=st.sampled_from(["tokens", (1.0, 0.01)]),
    seed=st.integers(0, 3),
)
def test_a_token_plan_file_serves_the_in_memory_plan(
    tmp_path_factory: pytest.TempPathFactory,
    n: int,
    g: int,
    w: int,
    caps: tuple[int | None, int | None],
    loss: bool,
    normalization: str,
    cost: Any,
    seed: int,
) -> None:
    tmp = tmp_path_factory.mktemp("tok")
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 20, n).astype(np.int32)
    loss_tokens = rng.integers(0, 3, n) * lengths // 2 if loss else None
    b, m = caps
    d = write_plan(
        tmp / "p",
        ep.PlanSpec(
            n,
            g,
            seed=seed,
            tokens=ep.Tokens(
                _mapped(tmp, lengths),
                None if loss_tokens is None else _mapped(tmp, loss_tokens, "loss.npy"),
                cost=cost,
                loss_normalization=normalization,
            ),
        ),
        w,
        epochs=(0, 1),
        micro_batch_size=b,
        max_tokens=m,
    )
    assert verify_plan(d.path) is True
    for epoch in (0, 1):
        plan = ep.EpochPlan(
            n,
            g,
            seed=seed,
            epoch=epoch,
            tokens=ep.Tokens(lengths, loss_tokens, cost=cost, loss_normalization=normalization),
        )
        for rank in range(w):
            want = [plan.step_indices(t, rank, w) for t in range(plan.num_steps)]
            assert d.rank_ids(epoch, rank).tolist() == np.concatenate([[], *want]).tolist()
            assert _sampler_batches(d.path, rank, w, epoch) == _plan_batches(plan, rank, w, b, m)
        state = PlanSampler(d.path, rank=0, num_replicas=w, epoch=epoch).state_dict()
        assert state == plan.state_dict()


def test_the_manifest_records_the_lengths_file_and_the_token_files(tmp_path: Path) -> None:
    lengths = np.arange(30, dtype=np.int64) % 7
    path = _lengths(tmp_path, lengths)
    d = write_plan(
        tmp_path / "p",
        ep.PlanSpec(30, 8, tokens=ep.Tokens(np.load(path, mmap_mode="r"))),
        2,
        max_tokens=20,
    )
    m = json.loads((d.path / MANIFEST).read_text())
    assert m["plan_file_version"] == 3
    digest = ep.EpochPlan(30, 8, tokens=ep.Tokens(lengths)).state_dict()["lengths_digest"]
    assert m["tokens"]["lengths"] == {
        "path": str(path.absolute()),
        "dtype": "<i8",
        "offset": 128,
        "digest": digest,
    }
    assert m["tokens"]["max_tokens"] == 20 and m["tokens"]["micro_batch_size"] is None
    assert m["tokens"]["cost"] == "tokens" and m["tokens"]["loss_normalization"] == "tokens"
    roles = [(f["rank"], f["role"]) for f in m["token_files"]]
    assert roles == [
        (None, "steps"),
        (0, "offsets"),
        (0, "lengths"),
        (1, "offsets"),
        (1, "lengths"),
    ]
    for f in m["token_files"]:
        assert f["blake3"] == _testing.file_checksum(d.path / f["path"])
    files = m["files"] + m["token_files"]
    assert m["total_bytes"] == sum(f["bytes"] for f in files)
    # A memmap records its file; an array in memory records none.
    mm = np.load(path, mmap_mode="r")
    m2 = write_plan(
        tmp_path / "q", ep.PlanSpec(30, 8, tokens=ep.Tokens(mm)), 2, max_tokens=20
    ).manifest
    assert m2["tokens"]["lengths"]["path"] == str(path.absolute())
    m3 = write_plan(
        tmp_path / "r", ep.PlanSpec(30, 8, tokens=ep.Tokens(lengths)), 2, max_tokens=20
    ).manifest
    assert m3["tokens"]["lengths"]["path"] is None and m3["tokens"]["lengths"]["digest"] == digest
    assert verify_plan(tmp_path / "r") is False


def test_a_plan_sampler_reads_its_own_files_not_the_lengths(tmp_path: Path) -> None:
    lengths = np.random.default_rng(3).integers(1, 50, 200)
    path = _lengths(tmp_path, lengths)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(200, 32, tokens=ep.Tokens(np.load(path, mmap_mode="r"))),
        3,
        micro_batch_size=5,
        max_tokens=64,
    )
    path.unlink()  # gone: a sampler never reads it
    plan = ep.EpochPlan(200, 32, tokens=ep.Tokens(lengths))
    for rank in range(3):
        assert _sampler_batches(tmp_path / "p", rank, 3, 0) == _plan_batches(plan, rank, 3, 5, 64)
    assert verify_plan(tmp_path / "p") is False
    out = subprocess.run(
        [sys.executable, "-m", "epochplan.cli", "verify", str(tmp_path / "p")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "the lengths file was not compared (not reachable" in out


def test_plan_sampler_state_round_trips_and_refuses_other_lengths(tmp_path: Path) -> None:
    lengths = np.arange(1, 41)
    write_plan(tmp_path / "p", ep.PlanSpec(40, 8, tokens=ep.Tokens(lengths)), 2, micro_batch_size=2)
    s = PlanSampler(tmp_path / "p", rank=1, num_replicas=2)
    batches = iter(s)
    for _ in range(3):
        next(batches)
    state = s.state_dict()
    other = PlanSampler(tmp_path / "p", rank=1, num_replicas=2)
    other.load_state_dict(state)
    assert other.state_dict() == state
    step = state["cursor"] // 8
    full = [(b.step, list(b)) for b in PlanSampler(tmp_path / "p", rank=1, num_replicas=2)]
    assert [list(b) for b in other] == [ids for t, ids in full if t >= step]
    bad = dict(state, lengths_digest="blake3:" + "0" * 64)
    with pytest.raises(ValueError, match="lengths_digest"):
        other.load_state_dict(bad)
    plain = ep.EpochPlan(40, 8).state_dict()
    with pytest.raises(ValueError, match="without lengths"):
        other.load_state_dict(plain)
    with pytest.raises(PlanError, match="micro_batch_size=2, not 3"):
        PlanSampler(tmp_path / "p", micro_batch_size=3, rank=0, num_replicas=2)


def test_resuming_a_token_plan_sampler_gives_the_rest_of_the_epoch(tmp_path: Path) -> None:
    lengths = np.random.default_rng(0).integers(1, 9, 50)
    write_plan(tmp_path / "p", ep.PlanSpec(50, 10, tokens=ep.Tokens(lengths)), 2, max_tokens=12)
    full = [list(b) for b in PlanSampler(tmp_path / "p", rank=0, num_replicas=2)]
    s = PlanSampler(tmp_path / "p", rank=0, num_replicas=2)
    state = s.state_dict_at_step(2)
    again = PlanSampler(tmp_path / "p", rank=0, num_replicas=2)
    again.load_state_dict(state)
    assert len(again) == sum(
        1 for b in PlanSampler(tmp_path / "p", rank=0, num_replicas=2) if b.step >= 2
    )
    rest = [list(b) for b in again]
    steps = [b.step for b in PlanSampler(tmp_path / "p", rank=0, num_replicas=2)]
    assert rest == [b for b, t in zip(full, steps, strict=True) if t >= 2]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"lengths": None, "loss_tokens": np.ones(20, dtype=int)}, TypeError, "lengths must be"),
        ({"max_tokens": 5}, ValueError, "max_tokens needs lengths"),
        ({"micro_batch_size": 5}, ValueError, "micro_batch_size needs lengths"),
        ({"lengths": np.ones(20, dtype=int), "cost": (1.0,)}, ValueError, "cost must be"),
        ({"lengths": np.ones(19, dtype=int), "max_tokens": 5}, ValueError, r"lengths must hold"),
        ({"lengths": np.ones(20), "max_tokens": 5}, TypeError, "lengths must be an array of int"),
        ({"lengths": np.ones((4, 5), dtype=int), "max_tokens": 5}, ValueError, "1-d"),
        ({"lengths": -np.ones(20, dtype=int), "max_tokens": 5}, ValueError, r"lengths\[0\] = -1"),
        ({"lengths": np.ones(20, dtype=int)}, ValueError, "cannot both be None"),
        ({"lengths": np.ones(20, dtype=int), "max_tokens": 0}, ValueError, "max_tokens must be"),
        (
            {"lengths": np.arange(20), "max_tokens": 10},
            ValueError,
            r"lengths: 9 samples are longer than max_tokens \(10\).*ids: 11 \(11 tokens\)",
        ),
    ],
)
def test_bad_token_arguments_are_refused_and_nothing_is_written(
    tmp_path: Path, kwargs: dict[str, Any], error: type, match: str
) -> None:
    out = tmp_path / "a" / "p"
    kwargs = dict(kwargs)
    tokens = {k: kwargs.pop(k) for k in ("lengths", "loss_tokens", "cost") if k in kwargs}
    with pytest.raises(error, match=match):
        spec = ep.PlanSpec(20, 5, tokens=ep.Tokens(**tokens) if tokens else None)
        write_plan(out, spec, 2, **kwargs)
    assert not (tmp_path / "a").exists()


def test_a_missing_lengths_file_is_an_error_naming_the_argument(tmp_path: Path) -> None:
    # Tokens takes an array (np.load(path, mmap_mode="r") for a file), not a path.
    with pytest.raises(TypeError, match="lengths must be an array"):
        ep.Tokens(str(tmp_path / "none.npy"))


def test_every_byte_of_a_token_manifest_is_authenticated(tmp_path: Path) -> None:
    out = tmp_path / "p"
    lengths = _mapped(tmp_path, np.arange(12) % 5)
    write_plan(
        out, ep.PlanSpec(12, 4, tokens=ep.Tokens(lengths, lengths)), 2, epochs=(0,), max_tokens=9
    )
    readers: dict[str, Callable[[], object]] = {
        "open_plan": lambda: open_plan(out),
        "PlanSampler": lambda: PlanSampler(out, rank=0, num_replicas=2),
        "verify_plan": lambda: verify_plan(out),
    }
    assert_every_manifest_byte_refused(out, readers)


def test_a_token_plan_is_replaced_with_force(tmp_path: Path) -> None:
    lengths = np.arange(12) % 5
    write_plan(tmp_path / "p", ep.PlanSpec(12, 4, tokens=ep.Tokens(lengths)), 2, max_tokens=9)
    d = write_plan(
        tmp_path / "p", ep.PlanSpec(12, 4, tokens=ep.Tokens(lengths)), 3, max_tokens=9, force=True
    )
    assert d.world_size == 3 and verify_plan(d.path) is False


# -- verify: a corrupted file, sealed again, for each check ---------------------


def _rewrite(d: Path, name: str, edit: Callable[[np.ndarray], np.ndarray | None]) -> None:
    """Changes a plan file's values and seals the manifest again (checksums,
    counts, sizes), so that only verify's checks can catch it."""
    f = d / name
    values = np.load(f).copy()
    changed = edit(values)
    values = values if changed is None else changed
    f.write_bytes(_native.npy_header(len(values)) + values.astype("<i8").tobytes())
    m = json.loads((d / MANIFEST).read_text())
    for entry in m["files"] + m.get("token_files", []):
        if entry["path"] == name:
            entry["blake3"] = _testing.file_checksum(f)
            entry["count"] = len(values)
            entry["bytes"] = _native.npy_file_size(len(values))
    m["total_bytes"] = sum(e["bytes"] for e in m["files"] + m["token_files"])
    m["manifest_checksum"] = manifest_checksum(m)
    (d / MANIFEST).write_text(json.dumps(m))


def _table(d: Path, step: int, column: int, value: int) -> None:
    def edit(v: np.ndarray) -> None:
        v[4 * step + column] = value

    _rewrite(d, "epoch-0000/steps.npy", edit)


@pytest.fixture
def one_rank(tmp_path: Path) -> Path:
    # W = 1 and a large cap: one micro-batch per step, the balance trivial.
    lengths = np.arange(1, 21)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(20, 5, tokens=ep.Tokens(_mapped(tmp_path, lengths))),
        1,
        max_tokens=1000,
    )
    assert verify_plan(tmp_path / "p") is True
    return tmp_path / "p"


def test_verify_finds_a_micro_batch_over_the_cap(tmp_path: Path) -> None:
    lengths = np.full(20, 5)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(20, 10, tokens=ep.Tokens(_mapped(tmp_path, lengths))),
        2,
        max_tokens=10,
    )
    d = tmp_path / "p"

    def grow(v: np.ndarray) -> None:
        v[-1] = 11

    _rewrite(d, "epoch-0000/rank-00000.lengths.npy", grow)
    table = np.load(d / "epoch-0000/steps.npy")
    _table(d, 1, 0, int(table[4]) + 6)
    with pytest.raises(PlanError, match=r"step 1, rank 0: micro-batch \d holds 1 samples and 11"):
        verify_plan(d)


def test_verify_finds_unequal_micro_batch_counts(tmp_path: Path) -> None:
    lengths = np.full(20, 5)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(20, 10, tokens=ep.Tokens(_mapped(tmp_path, lengths))),
        2,
        max_tokens=10,
    )
    d = tmp_path / "p"
    assert np.load(d / "epoch-0000/steps.npy")[1] == 3  # M of step 0
    _table(d, 0, 1, 2)
    with pytest.raises(PlanError, match="rank 0: has 3 micro-batches, the other ranks 2"):
        verify_plan(d)


def test_verify_finds_a_step_table_count_the_shares_do_not_make(tmp_path: Path) -> None:
    lengths = np.full(20, 5)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(20, 10, tokens=ep.Tokens(_mapped(tmp_path, lengths))),
        2,
        max_tokens=10,
    )
    _table(tmp_path / "p", 0, 1, 4)
    with pytest.raises(PlanError, match="says 4 micro-batches, the step's shares make 3"):
        verify_plan(tmp_path / "p")


def test_verify_finds_a_broken_balance_bound(tmp_path: Path) -> None:
    # One step of four samples of length 1: 2 and 2, moved to 3 and 1.
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(4, 4, tokens=ep.Tokens(np.ones(4, dtype=int))),
        2,
        max_tokens=100,
    )
    d = tmp_path / "p"
    moved = int(np.load(d / "epoch-0000/rank-00001.npy")[0])
    _rewrite(d, "epoch-0000/rank-00000.npy", lambda v: np.append(v, moved))
    _rewrite(d, "epoch-0000/rank-00001.npy", lambda v: v[1:])
    _rewrite(d, "epoch-0000/rank-00000.lengths.npy", lambda v: np.append(v, 1))
    _rewrite(d, "epoch-0000/rank-00001.lengths.npy", lambda v: v[1:])
    _rewrite(d, "epoch-0000/rank-00000.offsets.npy", lambda v: np.array([0, 3]))
    _rewrite(d, "epoch-0000/rank-00001.offsets.npy", lambda v: np.array([0, 1]))
    with pytest.raises(PlanError, match="costs spread by 2, more than the step's largest single"):
        verify_plan(d)


def test_verify_finds_stored_lengths_that_differ_from_the_lengths_file(one_rank: Path) -> None:
    ids = np.load(one_rank / "epoch-0000/rank-00000.npy")

    def edit(v: np.ndarray) -> None:
        v[4] += 1  # the longest of step 0: the filler stays

    _rewrite(one_rank, "epoch-0000/rank-00000.lengths.npy", edit)
    stored = np.load(one_rank / "epoch-0000/rank-00000.lengths.npy")
    _table(one_rank, 0, 0, int(stored[:5].sum()))
    with pytest.raises(
        PlanError, match=rf"step 0, rank 0: the stored lengths of sample {ids[4]} is {ids[4] + 2}"
    ):
        verify_plan(one_rank)


def test_verify_finds_a_wrong_step_token_count(one_rank: Path) -> None:
    _table(one_rank, 2, 0, 7)
    with pytest.raises(PlanError, match=r"step 2: the step table says T_t = 7"):
        verify_plan(one_rank)


def test_verify_finds_an_id_of_another_step(one_rank: Path) -> None:
    def edit(v: np.ndarray) -> None:
        v[0] = v[7]

    _rewrite(one_rank, "epoch-0000/rank-00000.npy", edit)
    with pytest.raises(PlanError, match="step 0: the ranks' ids are not exactly the step's"):
        verify_plan(one_rank)


def test_verify_finds_offsets_that_do_not_cut_the_rank_file(one_rank: Path) -> None:
    def edit(v: np.ndarray) -> None:
        v[2], v[3] = v[3], v[2]

    _rewrite(one_rank, "epoch-0000/rank-00000.offsets.npy", edit)
    with pytest.raises(PlanError, match="not an increasing cut"):
        verify_plan(one_rank)


def test_verify_finds_a_dealing_that_is_not_the_lengths(tmp_path: Path) -> None:
    # Equal lengths in one share: every structural check holds when two swap,
    # only the recomputed dealing (by position on ties) sees it.
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(8, 8, tokens=ep.Tokens(_mapped(tmp_path, np.full(8, 3)))),
        2,
        max_tokens=100,
    )

    def swap(v: np.ndarray) -> None:
        v[0], v[1] = v[1], v[0]

    _rewrite(tmp_path / "p", "epoch-0000/rank-00000.npy", swap)
    with pytest.raises(PlanError, match=r"rank 0: the ids of steps .* not the balanced dealing"):
        verify_plan(tmp_path / "p")


def test_verify_finds_a_changed_lengths_file(tmp_path: Path) -> None:
    lengths = np.arange(1, 21)
    path = _lengths(tmp_path, lengths)
    write_plan(
        tmp_path / "p",
        ep.PlanSpec(20, 5, tokens=ep.Tokens(np.load(path, mmap_mode="r"))),
        2,
        max_tokens=1000,
    )
    np.save(path, lengths[::-1].copy())
    # Its digest names the change before any stored value is compared.
    with pytest.raises(PlanError, match="the files changed since the plan was written"):
        verify_plan(tmp_path / "p")


def test_cli_writes_and_verifies_a_token_plan(tmp_path: Path) -> None:
    path = _lengths(tmp_path, np.random.default_rng(2).integers(1, 30, 300).astype(np.int32))
    loss = _lengths(tmp_path, np.random.default_rng(2).integers(0, 2, 300), "loss.npy")
    cli = [sys.executable, "-m", "epochplan.cli"]
    out = tmp_path / "p"
    args = ["plan", "-n", "300", "-g", "32", "-w", "3", "--out", str(out), "--lengths", str(path)]
    args += ["--loss-tokens", str(loss), "--max-tokens", "50", "--micro-batch-size", "4"]
    done = subprocess.run([*cli, *args], capture_output=True, text=True, check=True)
    assert "every id as planned" in done.stdout
    d = open_plan(out)
    assert d.tokens is not None and d.tokens.max_tokens == 50 and d.tokens.loss_tokens is not None
    done = subprocess.run([*cli, "verify", str(out)], capture_output=True, text=True, check=True)
    assert "lengths and every id compared" in done.stdout
    bad = subprocess.run(
        [*cli, "plan", "-n", "30", "-g", "3", "--max-tokens", "5", "--out", str(tmp_path / "q")],
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and "--max-tokens needs --lengths" in bad.stderr


def test_cli_cuts_the_samples_over_the_cap_with_oversize_truncate(tmp_path: Path) -> None:
    lengths = np.random.default_rng(3).integers(1, 90, 300).astype(np.int32)
    path = _lengths(tmp_path, lengths)
    out = tmp_path / "p"
    args = ["plan", "-n", "300", "-g", "32", "-w", "3", "--out", str(out), "--lengths", str(path)]
    args += ["--max-tokens", "40", "--oversize", "truncate"]
    done = subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args], capture_output=True, text=True, check=True
    )
    assert "every id as planned" in done.stdout
    d = open_plan(out)
    # Cut (version 5) and kept in the lengths file's int32 (version 7).
    assert d.manifest["plan_file_version"] == 7 and d.tokens is not None
    assert d.tokens.max_length == 40 and d.tokens.dtype("lengths") == "<i4"
    stored = d.open_token_file(0, 2, "lengths")
    ids = d.rank_ids(0, 2)
    assert stored.read(0, len(ids)).tolist() == np.minimum(lengths[ids], 40).tolist()
