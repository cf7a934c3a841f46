"""The exactly-once audit: consumption logs of a real gloo run stopped and
resumed on 3, then 2, then 4 ranks certify clean; the same logs with one
step replayed twice and one skipped are caught, each violation located.
Torn last records (a crash while writing) are reported and never misread."""

from __future__ import annotations

import shutil
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

import epochplan as ep
from epochplan.audit import ConsumptionLog, audit
from epochplan.audit.log import MAGIC, read_log
from tests._support.torchrun import torchrun

EXAMPLE = Path(__file__).parents[2] / "examples" / "ddp_train.py"
N, G, B = 1001, 64, 8  # the example's defaults: 16 steps an epoch


@pytest.fixture(scope="module")
def run_logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two epochs on 3 ranks (stopped after step 10), then 2 (stopped after
    12 more steps, in epoch 1), then 4 to the end."""
    tmp = tmp_path_factory.mktemp("run")
    logs, ck = tmp / "logs", tmp / "ck.pt"
    common = ["--epochs", "2", "--consumption-log", str(logs), "--checkpoint", str(ck)]
    assert "saved" in torchrun(EXAMPLE, 3, *common, "--stop-after-steps", "10", cwd=tmp)
    second = torchrun(EXAMPLE, 2, *common, "--resume", str(ck), "--stop-after-steps", "12", cwd=tmp)
    assert "saved" in second
    torchrun(EXAMPLE, 4, *common, "--resume", str(ck), cwd=tmp)
    return logs


def test_a_run_resumed_on_other_world_sizes_is_exactly_once(run_logs: Path) -> None:
    report = audit(run_logs)
    assert report.ok, report.summary()
    assert len(list(run_logs.glob("*.eplog"))) == 3 + 2 + 4
    assert (report.start, report.end) == ((0, 0), (1, 16))
    assert report.expected == report.consumed == 2 * N
    assert report.duplicates == report.missing == report.misplaced == 0


def frames(path: Path) -> list[bytes]:
    """The raw records of a log file (payloads)."""
    data = path.read_bytes()[len(MAGIC) :]
    out = []
    while data:
        length, _ = struct.unpack_from("<II", data)
        out.append(data[8 : 8 + length])
        data = data[8 + length :]
    return out


def write_frames(path: Path, payloads: list[bytes]) -> None:
    body = b"".join(struct.pack("<II", len(p), zlib.crc32(p)) + p for p in payloads)
    path.write_bytes(MAGIC + body)


def test_a_replayed_step_and_a_skipped_one_are_found_and_located(
    run_logs: Path, tmp_path: Path
) -> None:
    tampered = tmp_path / "logs"
    shutil.copytree(run_logs, tampered)
    # A rank of the 2-rank run: one of its steps logged twice, another gone.
    victim = next(p for p in sorted(tampered.glob("*.eplog")) if "rank00001" in p.name
                  and '"world_size": 2' in p.read_bytes()[:4096].decode("latin-1"))  # fmt: skip
    payloads = frames(victim)
    steps = [i for i, p in enumerate(payloads) if p[:1] == b"B"]
    replayed, skipped = payloads[steps[1]], payloads[steps[3]]
    payloads.insert(steps[1] + 1, replayed)
    payloads.remove(skipped)
    write_frames(victim, payloads)

    report = audit(tampered)
    assert not report.ok
    epoch, step, count = struct.unpack_from("<QQI", replayed, 1)
    replayed_ids = np.frombuffer(replayed, "<i8", offset=1 + 20)
    s_epoch, s_step, s_count = struct.unpack_from("<QQI", skipped, 1)
    skipped_ids = np.frombuffer(skipped, "<i8", offset=1 + 20)
    assert report.duplicates == count and report.missing == s_count and report.misplaced == 0
    dups = [v for v in report.violations if v.kind == "duplicate"]
    assert sorted(v.sample for v in dups) == sorted(replayed_ids.tolist())
    for v in dups:
        # Seen twice, both times where the plan puts it, on the victim's rank.
        assert v.epoch == epoch and v.planned_step == step
        assert [(s.step, s.rank, Path(s.file).name) for s in v.seen] == [(step, 1, victim.name)] * 2
    missing = [v for v in report.violations if v.kind == "missing"]
    assert sorted(v.sample for v in missing) == sorted(skipped_ids.tolist())
    assert {(v.epoch, v.planned_step) for v in missing} == {(s_epoch, s_step)}
    # Where a missing sample was planned, for the world size that ran it.
    plan = ep.EpochPlan(N, G, epoch=s_epoch)
    _, steps_of, ranks, _ = plan.locate(skipped_ids, 2, B)
    assert set(steps_of.tolist()) == {s_step} and set(ranks.tolist()) == {1}
    assert "VIOLATED" in report.summary()


def test_a_sample_in_another_step_is_misplaced(tmp_path: Path) -> None:
    plan = ep.EpochPlan(40, 8, seed=2)
    with ConsumptionLog(tmp_path, plan.state_dict(), rank=0, world_size=1) as log:
        for step in range(plan.num_steps):
            ids = plan.step_indices(step, 0, 1)
            if step == 2:
                ids = plan.step_indices(3, 0, 1)[:1].tolist() + ids[1:].tolist()
            log.record(0, step, ids)
        log.commit(plan.at_step(plan.num_steps).state_dict())
    report = audit(tmp_path)
    assert (report.misplaced, report.duplicates, report.missing) == (1, 1, 1)
    (v,) = [v for v in report.violations if v.kind == "misplaced"]
    assert (v.planned_step, v.seen[0].step) == (3, 2)


def test_uncommitted_records_and_a_torn_tail_are_left_out(tmp_path: Path) -> None:
    plan = ep.EpochPlan(30, 10)
    log = ConsumptionLog(tmp_path, plan.state_dict(), rank=0, world_size=1)
    log.record(0, 0, plan.step_indices(0, 0, 1))
    log.commit(plan.at_step(1).state_dict())
    log.record(0, 1, plan.step_indices(1, 0, 1))  # rolled back: never committed
    log.close()
    data = log.path.read_bytes()
    log.path.write_bytes(data[:-7])  # a crash cut the last record short
    assert any(isinstance(r, str) and "torn last record" in r for r in read_log(log.path))
    report = audit(tmp_path)
    assert report.ok and report.end == (0, 1) and report.consumed == 10
    assert len(report.torn) == 1
    # Corruption before the end is an error, not a torn tail.
    raw = bytearray(data)
    raw[len(MAGIC) + 12] ^= 0xFF
    log.path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="is corrupt"):
        audit(tmp_path)


def test_logs_of_two_plans_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no consumption logs"):
        audit(tmp_path)
    for seed in (1, 2):
        ConsumptionLog(tmp_path, ep.EpochPlan(10, 5, seed=seed).state_dict(), rank=0,
                       world_size=1).close()  # fmt: skip
    with pytest.raises(ValueError, match="log different plans"):
        audit(tmp_path)
    # Two mixtures: another digest is another plan; each epoch's passes are not.
    mixed = tmp_path / "mix"
    for m in (ep.Mixture([5, 5], quotas=[5, 5]), ep.Mixture([5, 5], quotas=[4, 6])):
        ConsumptionLog(mixed, ep.EpochPlan(m, 5).state_dict(), rank=0, world_size=1).close()
    with pytest.raises(ValueError, match="log different plans"):
        audit(mixed, space=m)


def test_the_command_line_audit_exits_0_when_clean_and_1_when_not(tmp_path: Path) -> None:
    import subprocess
    import sys

    plan = ep.EpochPlan(50, 10)
    for skip in (None, 3):
        logs = tmp_path / f"skip{skip}"
        with ConsumptionLog(logs, plan.state_dict(), rank=0, world_size=1) as log:
            for step in range(plan.num_steps):
                if step != skip:
                    log.record(0, step, plan.step_indices(step, 0, 1))
            log.commit(plan.at_step(plan.num_steps).state_dict())
        res = subprocess.run(
            [sys.executable, "-m", "epochplan.cli", "audit", str(logs)],
            capture_output=True,
            text=True,
        )
        assert res.returncode == (0 if skip is None else 1), res.stderr
        assert ("exactly once" if skip is None else "missing 10") in res.stdout
