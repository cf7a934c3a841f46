"""PlanSampler: a plan directory's files served as ElasticBatchSampler serves the plan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from epochplan import Chunked, PlanSpec
from epochplan.planfile import PlanError, write_plan
from tests._support.plan_dirs import edit_manifest, rank_file


@pytest.mark.parametrize(
    ("n", "g", "w", "b", "kind", "drop_last"),
    [
        (1000, 64, 3, 5, "cipher", False),
        (1001, 100, 8, 4, "uniform", True),
        (50, 40, 8, 1, "chunked", False),
    ],
)
def test_plan_sampler_matches_elastic_batch_sampler(
    tmp_path: Path, n: int, g: int, w: int, b: int, kind: str, drop_last: bool
) -> None:
    pt = pytest.importorskip("epochplan.torch")
    order = Chunked(7, 2) if kind == "chunked" else kind
    spec = PlanSpec(n, g, seed=4, kind=order, drop_last=drop_last)
    d = write_plan(tmp_path / "p", spec, w, epochs=(1, 2))
    for rank in range(w):
        mine = pt.PlanSampler(d.path, micro_batch_size=b, rank=rank, num_replicas=w)
        theirs = pt.ElasticBatchSampler(spec, b, rank=rank, num_replicas=w)
        assert mine.epoch == 1
        for epoch in (1, 2):
            mine.set_epoch(epoch)
            theirs.set_epoch(epoch)
            got, want = list(mine), list(theirs)
            assert len(mine) == len(theirs) == len(got) == len(want)
            for x, y in zip(got, want, strict=True):
                assert list(x) == list(y)
                np.testing.assert_array_equal(x.weights, y.weights)
                assert (x.step, x.step_end) == (y.step, y.step_end)


def test_plan_sampler_reads_steps_from_the_file(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", PlanSpec(1000, 64), 3)
    s = pt.PlanSampler(d.path, micro_batch_size=8, rank=1, num_replicas=3)
    for step in (0, 2, s.plan.num_steps - 1):
        ids = s._step_ids(step)
        assert not ids.flags.writeable
        np.testing.assert_array_equal(ids, s.plan.step_indices(step, 1, 3))


@pytest.mark.parametrize("keep", [200, 4096])
def test_plan_sampler_on_a_file_cut_short_raises(tmp_path: Path, keep: int) -> None:
    # A rank file truncated in place after the sampler checked it (a copy over
    # it, say): a memory map would kill the process with SIGBUS past the last
    # page, or read zeros within it. Run in a subprocess so a crash shows.
    pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", PlanSpec(20_000, 100), 1)
    code = f"""
import os
import re
from epochplan.planfile import PlanError
from epochplan.torch import PlanSampler
s = PlanSampler({str(d.path)!r}, micro_batch_size=10, num_replicas=1, rank=0)
os.truncate({str(rank_file(d.path, 0, 0))!r}, {keep})
try:
    for batch in s:
        pass
except PlanError as e:
    print("PlanError", e)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PlanError") and "cut short after it was checked" in out.stdout


def test_plan_sampler_resumes_like_elastic_batch_sampler(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", PlanSpec(5000, 128, seed=1), 4, epochs=(0, 1))
    s = pt.PlanSampler(d.path, micro_batch_size=16, rank=2, num_replicas=4, epoch=1)
    it = iter(s)
    for _ in range(7):
        next(it)
    state = s.state_dict()
    ref = pt.ElasticBatchSampler(PlanSpec(5000, 128, seed=1), 16, rank=2, num_replicas=4)
    ref.set_epoch(1)
    assert state == ref.state_dict_at_step(state["cursor"] // 128)
    resumed = pt.PlanSampler(d.path, micro_batch_size=16, rank=2, num_replicas=4)
    resumed.load_state_dict(state)
    ref.load_state_dict(state)
    assert [list(x) for x in resumed] == [list(x) for x in ref]
    # A state of an epoch that is not in the plan cannot load, nor one of another seed.
    other = dict(state, epoch=5)
    with pytest.raises(PlanError, match="epoch 5 is not in the plan"):
        resumed.load_state_dict(other)
    with pytest.raises(PlanError, match="the plan has seed 1, not 4"):
        resumed.load_state_dict(dict(state, seed=4))
    # A refused state changes nothing: the next iteration is epoch 1 from step 0.
    assert resumed.seed == 1 and resumed.epoch == 1
    ref.set_epoch(0)
    ref.set_epoch(1)
    assert [list(x) for x in resumed] == [list(x) for x in ref]


def test_plan_sampler_rejects_what_it_cannot_serve(plan_dir: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    with pytest.raises(PlanError, match="written for world_size=4, not 3"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=3)
    with pytest.raises(PlanError, match="epoch 9 is not in the plan"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=4, epoch=9)
    s = pt.PlanSampler(plan_dir, micro_batch_size=4, rank=1, num_replicas=4)
    with pytest.raises(PlanError, match="epoch 3 is not in the plan"):
        s.set_epoch(3)
    f = rank_file(plan_dir, 1, 1)
    data = bytearray(f.read_bytes())
    data[-9] ^= 4
    f.write_bytes(bytes(data))
    with pytest.raises(PlanError, match="checksum mismatch"):
        s.set_epoch(1)
    f.write_bytes(bytes(data[:-8]))
    with pytest.raises(PlanError, match="the manifest says"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=1, num_replicas=4, epoch=1)
    rank_file(plan_dir, 0, 2).unlink()
    with pytest.raises(PlanError, match="missing rank file"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=2, num_replicas=4)
    edit_manifest(plan_dir, {"plan_file_version": 8})
    with pytest.raises(PlanError, match="plan_file_version is 8"):
        pt.PlanSampler(plan_dir, micro_batch_size=4, rank=0, num_replicas=4)


def test_plan_sampler_of_a_uniform_plan_serves_its_files(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", PlanSpec(3000, 96, seed=4, kind="uniform", drop_last=True), 3)
    s = pt.PlanSampler(d.path, micro_batch_size=10, rank=2, num_replicas=3)
    ref = pt.ElasticBatchSampler(
        PlanSpec(3000, 96, seed=4, kind="uniform", drop_last=True), 10, rank=2, num_replicas=3
    )
    assert [(list(x), x.weights.tolist()) for x in s] == [
        (list(x), x.weights.tolist()) for x in ref
    ]
    assert s.plan.kind == "uniform" and len(s) == len(ref)
    # States say "uniform" and pass between the two samplers.
    state = s.state_dict_at_step(7)
    assert state == ref.state_dict_at_step(7)
    ref.load_state_dict(state)
    s.load_state_dict(ref.state_dict_at_step(9))
    assert [list(x) for x in s] == [list(x) for x in ref if x.step >= 9]
    with pytest.raises(
        ValueError, match="state_dict\\['kind'\\] is 'identity' but this sampler has kind='uniform'"
    ):
        s.load_state_dict(dict(state, kind="identity"))


def test_plan_sampler_of_a_uniform_plan_holds_no_permutation(tmp_path: Path) -> None:
    # 2 * 10^7 samples: the permutation would be 160 MB on every rank.
    write_plan(tmp_path / "p", PlanSpec(2 * 10**7, 4096, kind="uniform"), 8)
    code = (
        "import resource, sys; from epochplan.torch import PlanSampler;"
        "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss;"
        "s = PlanSampler(sys.argv[1], micro_batch_size=512, rank=3, num_replicas=8);"
        "s.load_state_dict(s.state_dict_at_step(100)); next(iter(s));"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "p")],
        capture_output=True, text=True, check=True, timeout=300,
    )  # fmt: skip
    assert int(out.stdout) < 50 * 10**6, out.stdout


def test_plan_sampler_pickles_without_its_memory_map(tmp_path: Path) -> None:
    import pickle

    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", PlanSpec(1000, 64), 2, epochs=(3, 4))
    s = pt.PlanSampler(d.path, micro_batch_size=8, rank=1, num_replicas=2)
    for epoch in (3, 4):
        s.set_epoch(epoch)
        blob = pickle.dumps(s)
        assert len(blob) < 4096
        assert [list(x) for x in pickle.loads(blob)] == [list(x) for x in s]
    ref = pt.ElasticBatchSampler(PlanSpec(1000, 64), 8, rank=1, num_replicas=2)
    ref.set_epoch(4)
    assert [list(x) for x in pickle.loads(blob)] == [list(x) for x in ref]
