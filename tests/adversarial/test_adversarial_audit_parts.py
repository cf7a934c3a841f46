"""The adversarial pass over locate, the consumption logs and plans written
in parts: every byte of a part's record and of a log flipped, writers killed
at random moments, and random arguments. Nothing crashes, nothing corrupt is
taken for valid, nothing partial is left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import epochplan as ep
from epochplan.audit import ConsumptionLog, audit
from epochplan.planfile import Part, PlanError, PlanSpec, merge_plan, verify_part, write_plan_part
from epochplan.planfile.manifest import PART_FILE
from tests.core.test_errors import ALLOWED


def test_every_bit_of_a_parts_record_is_checked(tmp_path: Path) -> None:
    # One bit flipped at each byte of one part's part.json: the merge refuses
    # it or, where the flip changes nothing the plan depends on (JSON
    # whitespace cannot, every value is checked), gives the exact plan.
    space = ep.Selection.from_ranges([(5, 900)], 1000)
    spec = PlanSpec(space, 64, seed=3)
    parts = [write_plan_part(tmp_path / f"p{i}", spec, 3, Part(i, 2)) for i in range(2)]
    reference = merge_plan(tmp_path / "ref", parts).manifest
    record = parts[1] / PART_FILE
    original = record.read_bytes()
    refused = accepted = 0
    for i in range(len(original)):
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        record.write_bytes(bytes(flipped))
        try:
            merged = merge_plan(tmp_path / f"m{i}", parts)
        except PlanError:
            refused += 1
            assert not (tmp_path / f"m{i}").exists()
        else:
            accepted += 1
            assert merged.manifest == reference, i
    record.write_bytes(original)
    assert refused + accepted == len(original) and refused > 0.95 * len(original)


def small_log(tmp_path: Path) -> Path:
    plan = ep.EpochPlan(24, 8, seed=1)
    with ConsumptionLog(tmp_path, plan.state_dict(), rank=0, world_size=1) as log:
        for step in range(plan.num_steps):
            log.record(0, step, plan.step_indices(step, 0, 1))
        log.commit(plan.at_step(plan.num_steps).state_dict())
    (path,) = tmp_path.glob("*.eplog")
    return path


def test_every_bit_of_a_consumption_log_is_checked(tmp_path: Path) -> None:
    # A flip is refused as corruption, or is the torn last record (then
    # reported, and what it held is not taken): never a clean report of
    # other ids.
    path = small_log(tmp_path)
    original = path.read_bytes()
    outcomes = {"corrupt": 0, "torn": 0}
    for i in range(len(original)):
        flipped = bytearray(original)
        flipped[i] ^= 0x01
        path.write_bytes(bytes(flipped))
        try:
            report = audit(tmp_path)
        except ValueError:
            outcomes["corrupt"] += 1
            continue
        outcomes["torn"] += 1
        assert report.torn, i
        assert report.consumed in (0, 24) and report.duplicates == report.misplaced == 0, i
    path.write_bytes(original)
    assert audit(tmp_path).ok
    assert sum(outcomes.values()) == len(original) and outcomes["corrupt"] > 0


def test_every_cut_of_a_consumption_log_is_a_torn_tail_or_a_shorter_log(tmp_path: Path) -> None:
    path = small_log(tmp_path)
    original = path.read_bytes()
    # A second, whole log of the same plan keeps the audit going when the
    # cut one is left with nothing.
    whole = tmp_path / "whole"
    whole.mkdir()
    other = small_log(whole)
    os.replace(other, tmp_path / ("0" + other.name))
    boundaries, at = set(), 8  # a log cut before its header is reported too
    while at < len(original):
        at += 8 + int.from_bytes(original[at : at + 4], "little")
        boundaries.add(at)
    for size in range(len(original)):
        path.write_bytes(original[:size])
        report = audit(tmp_path)  # never raises: only the tail can be cut
        # A cut between records is a shorter log; any other, a torn one.
        assert bool(report.torn) == (size not in boundaries), size
        assert report.duplicates == 0 and report.consumed in (24, 48), size
    path.write_bytes(b"not a log at all")
    with pytest.raises(ValueError, match="not a consumption log"):
        audit(tmp_path)


WRITER = """
import sys
from epochplan.planfile import Part, PlanSpec, write_plan_part
spec = PlanSpec(3 * 10**7, 4096, seed=1)
write_plan_part(sys.argv[1], spec, 4, Part(0, 2), epochs=(0, 1))
"""


def test_a_part_writer_killed_at_any_moment_leaves_nothing_or_a_whole_part(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    outcomes = []
    for trial in range(8):
        out = tmp_path / f"p{trial}"
        proc = subprocess.Popen([sys.executable, "-c", WRITER, str(out)])
        time.sleep(float(rng.uniform(0.05, 1.5)))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if out.exists():
            verify_part(out)  # published: whole
            outcomes.append("whole")
        else:
            outcomes.append("absent")
        # Beside published parts, only hidden partials (a later writer of the
        # same part removes its abandoned one).
        assert all(p.name.startswith((".p", "p")) for p in tmp_path.iterdir())
    assert "absent" in outcomes


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(0, 200),
    ids=st.one_of(
        st.lists(st.integers(-(2**65), 2**65), max_size=6),
        st.lists(st.integers(-3, 220), max_size=6),
        st.integers(-5, 300),
        st.floats(allow_nan=True),
        st.none(),
        st.text(max_size=3),
    ),
    world=st.one_of(st.integers(-2, 9), st.none(), st.floats()),
    b=st.one_of(st.integers(-1, 5), st.none()),
    kind=st.sampled_from(["cipher", "uniform", "identity"]),
)
def test_locate_takes_any_argument_without_a_crash(
    n: int, ids: object, world: object, b: object, kind: str
) -> None:
    plan = ep.EpochPlan(n, 7, seed=2, kind=kind)
    try:
        positions, steps, ranks, _ = plan.locate(ids, world, b)  # type: ignore[arg-type]
    except ALLOWED:
        return
    held = positions >= 0
    assert (steps[held] == positions[held] // 7).all() and (ranks[~held] == -1).all()


def test_a_part_directory_is_never_taken_for_a_plan(tmp_path: Path) -> None:
    part = write_plan_part(tmp_path / "p", PlanSpec(100, 10), 2, Part(0, 2))
    with pytest.raises(PlanError, match=r"manifest\.json: missing"):
        ep_open(part)
    os.remove(part / PART_FILE)
    with pytest.raises(PlanError, match=r"part\.json"):
        verify_part(part)


def ep_open(path: Path) -> object:
    from epochplan.planfile import open_plan

    return open_plan(path)
