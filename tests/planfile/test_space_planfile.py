"""Plan files over index spaces: a Selection or Mixture recorded in the
manifest, rebuilt by the reader, served by PlanSampler, verified and on the
command line."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import epochplan as ep
from epochplan import _native
from epochplan.planfile import (
    MANIFEST,
    PLAN_FILE_VERSION,
    PlanError,
    manifest_checksum,
    open_plan,
    verify_plan,
    write_plan,
)
from epochplan.planfile.space import SPACE_PLAN_FILE_VERSION
from epochplan.planfile.tokens import TOKEN_PLAN_FILE_VERSION
from tests.planfile._manifest_flips import assert_every_manifest_byte_refused

Space = ep.Selection | ep.Mixture

N = 1000
LABELS = np.arange(N) % 5


def _spaces() -> dict[str, Callable[[], Space]]:
    return {
        "ranges": lambda: ep.Selection.from_ranges([(0, 300), (450, 460), (700, 1000)], N),
        "mask": lambda: ep.Selection.from_mask(LABELS != 2),
        "indices": lambda: ep.Selection.from_indices(
            np.random.default_rng(3).permutation(N)[:377], N
        ),
        "split part 1": lambda: ep.random_split(N, [0.7, 0.2, 0.1], seed=11)[1],
        "split part 0": lambda: ep.random_split(N, [0.9, 0.1], seed=5)[0],
        "split last part": lambda: ep.random_split(N, [600, 400], seed=5)[1],
        "mixture of sizes": lambda: ep.Mixture([300, 50, 650], weights=[0.5, 0.3, 0.2], seed=4),
        "mixture of masks": lambda: ep.Mixture(
            [ep.Selection.from_mask(np.equal(LABELS, k)) for k in range(3)],
            quotas=[90, 250, 10],
            seed=2,
        ),
        "mixture of selections": lambda: ep.Mixture(
            [
                ep.Selection.from_ranges([(0, 100)], N),
                ep.Selection.from_indices(np.array([900, 5, 950]), N),
                ep.random_split(N, [0.5, 0.5], seed=1)[1],
            ],
            repeat=[1.5, 4, 0.1],
        ),
        "empty selection": lambda: ep.Selection.from_ranges([], N),
        "one id": lambda: ep.Selection.from_indices(np.array([417]), N),
    }


SPACES = _spaces()


def digest(space: Any) -> str:
    value: str = ep.EpochPlan(space, 1).state_dict()["space"]["digest"]
    return value


@pytest.mark.parametrize("name", list(SPACES))
def test_a_plan_over_a_space_is_written_read_and_verified(tmp_path: Path, name: str) -> None:
    space = SPACES[name]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 64, seed=9), 3, epochs=(0, 2))
    assert d.manifest["plan_file_version"] == SPACE_PLAN_FILE_VERSION == 4
    assert d.manifest["num_samples"] == len(space)
    section = d.manifest["space"]
    assert section["digest"] == digest(space)
    for entry in section["files"]:
        path = d.path / entry["path"]
        assert entry["bytes"] == path.stat().st_size
        assert entry["blake3"] == _native.file_checksum(path)
    assert d.manifest["total_bytes"] == sum(
        f.stat().st_size for f in d.path.rglob("*") if f.is_file() and f.name != MANIFEST
    )
    # A reader rebuilds the very space from the directory alone.
    again = open_plan(d.path)
    assert type(again.space) is type(space) and len(again.space) == len(space)
    assert digest(again.space) == digest(space)
    if isinstance(space, ep.Selection):
        np.testing.assert_array_equal(np.asarray(again.space), np.asarray(space))
    for epoch in (0, 2):
        want = ep.EpochPlan(space, 64, seed=9, epoch=epoch)
        assert again.plan(epoch).state_dict() == want.state_dict()
        for rank in range(3):
            np.testing.assert_array_equal(again.rank_ids(epoch, rank), want.rank_indices(rank, 3))
    assert verify_plan(d.path) is True


def test_the_space_file_forms_stored(tmp_path: Path) -> None:
    def spec(name: str) -> dict[str, Any]:
        out = tmp_path / name.replace(" ", "-")
        manifest = write_plan(out, ep.PlanSpec(SPACES[name](), 8), 1).manifest
        value: dict[str, Any] = manifest["space"]["spec"]
        return value

    assert spec("ranges") == {"ranges": [[0, 300], [450, 460], [700, 1000]], "num_samples": N}
    assert spec("mask") == {"mask": "space/mask.npy"}
    assert spec("indices") == {"indices": "space/indices.npy", "num_samples": N}
    assert spec("split part 1") == {
        "split": [700, 200, 100],
        "part": 1,
        "num_samples": N,
        "seed": 11,
    }
    assert spec("split part 0") == {"split": [900, 100], "part": 0, "num_samples": N, "seed": 5}
    mixture = SPACES["mixture of sizes"]()
    assert spec("mixture of sizes") == {
        "mixture": [300, 50, 650],
        "quotas": mixture.quotas,
        "seed": 4,
    }
    assert spec("mixture of masks")["mixture"] == [
        {"mask": f"space/source-{k:05d}.mask.npy"} for k in range(3)
    ]
    # The files themselves: a bool mask and the ids as int64, in their order.
    d = tmp_path / "indices"
    np.testing.assert_array_equal(np.load(d / "space/indices.npy"), np.asarray(SPACES["indices"]()))
    assert np.load(d / "space/indices.npy").dtype == np.dtype("<i8")
    mask = np.load(tmp_path / "mask" / "space/mask.npy")
    assert mask.dtype == np.bool_ and np.array_equal(mask, LABELS != 2)


def test_plans_without_a_space_keep_their_versions(tmp_path: Path) -> None:
    assert (
        write_plan(tmp_path / "a", ep.PlanSpec(100, 8), 2).manifest["plan_file_version"]
        == PLAN_FILE_VERSION
    )
    assert "space" not in write_plan(tmp_path / "b", ep.PlanSpec(np.int64(100), 8), 2).manifest
    d = write_plan(
        tmp_path / "c",
        ep.PlanSpec(100, 8, tokens=ep.Tokens(np.arange(100) % 7 + 1)),
        2,
        max_tokens=20,
    )
    assert d.manifest["plan_file_version"] == TOKEN_PLAN_FILE_VERSION
    assert d.space is None and "space" not in d.manifest


def test_one_epoch_of_a_mixture_is_refused(tmp_path: Path) -> None:
    mixture = ep.Mixture([10, 20], quotas=[5, 5])
    with pytest.raises(TypeError, match="spec must be over the Mixture, not one of its epochs"):
        write_plan(tmp_path / "p", ep.PlanSpec(mixture.epoch(1), 4), 2)
    assert not (tmp_path / "p").exists()


def test_a_plan_over_a_space_is_replaced_with_force(tmp_path: Path) -> None:
    write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mask"](), 16), 2)
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["indices"](), 16), 2, force=True)
    assert sorted(f.name for f in (d.path / "space").iterdir()) == ["indices.npy"]
    assert verify_plan(d.path)


def test_a_uniform_plan_over_a_selection(tmp_path: Path) -> None:
    space = SPACES["mask"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 50, kind="uniform", drop_last=True), 3)
    want = ep.EpochPlan(space, 50, kind="uniform", drop_last=True)
    for rank in range(3):
        np.testing.assert_array_equal(d.rank_ids(0, rank), want.rank_indices(rank, 3))
    assert verify_plan(d.path) is True


def test_a_chunked_plan_over_a_selection(tmp_path: Path) -> None:
    space = SPACES["ranges"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 32, kind=ep.Chunked(40, 2)), 2)
    want = ep.EpochPlan(space, 32, kind=ep.Chunked(40, 2))
    np.testing.assert_array_equal(d.rank_ids(0, 1), want.rank_indices(1, 2))
    assert verify_plan(d.path) is True


# ------------------------------------------------------------------ token plans


def test_a_token_plan_over_a_selection(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    space = SPACES["split part 1"]()
    lengths = np.random.default_rng(0).integers(1, 60, N)
    np.save(tmp_path / "lengths.npy", lengths)
    d = write_plan(
        tmp_path / "p",
        ep.PlanSpec(space, 24, tokens=ep.Tokens(np.load(tmp_path / "lengths.npy", mmap_mode="r"))),
        3,
        epochs=(0, 1),
        max_tokens=90,
    )
    assert d.manifest["plan_file_version"] == SPACE_PLAN_FILE_VERSION
    assert "tokens" in d.manifest and "space" in d.manifest
    assert verify_plan(d.path) is True
    for epoch in (0, 1):
        plan = ep.EpochPlan(space, 24, epoch=epoch, tokens=ep.Tokens(lengths))
        for rank in range(3):
            sampler = pt.PlanSampler(d.path, rank=rank, num_replicas=3, epoch=epoch)
            got = [(list(b), list(b.weights)) for b in sampler]
            want = [
                (ids.tolist(), weights.tolist())
                for step in plan.micro_batches(rank, 3, None, max_tokens=90)
                for ids, weights in step
            ]
            assert got == want
            assert sampler.state_dict() == dict(plan.state_dict(), cursor=len(space))


def test_a_token_plan_over_a_mixture(tmp_path: Path) -> None:
    space = SPACES["mixture of sizes"]()
    lengths = np.arange(N) % 13 + 1
    d = write_plan(
        tmp_path / "p", ep.PlanSpec(space, 40, tokens=ep.Tokens(lengths)), 2, micro_batch_size=8
    )
    plan = ep.EpochPlan(space, 40, tokens=ep.Tokens(lengths))
    for rank in range(2):
        want = [plan.step_indices(step, rank, 2) for step in range(plan.num_steps)]
        np.testing.assert_array_equal(d.rank_ids(0, rank), np.concatenate(want))
    # Not reachable from the directory (an array in memory): counted, not compared.
    assert verify_plan(d.path) is False


# ---------------------------------------------------------------- PlanSampler


@pytest.mark.parametrize("name", ["mask", "split part 1", "mixture of masks"])
@pytest.mark.parametrize("w", [1, 2, 3, 5])
def test_plan_sampler_serves_the_plan_over_the_space(tmp_path: Path, name: str, w: int) -> None:
    pt = pytest.importorskip("epochplan.torch")
    space = SPACES[name]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 48, seed=3), w, epochs=(1, 2))
    for rank in range(w):
        mine = pt.PlanSampler(d.path, micro_batch_size=5, rank=rank, num_replicas=w)
        theirs = pt.ElasticBatchSampler(
            ep.PlanSpec(space, 48, seed=3), 5, rank=rank, num_replicas=w
        )
        for epoch in (1, 2):
            mine.set_epoch(epoch)
            theirs.set_epoch(epoch)
            plan = ep.EpochPlan(space, 48, seed=3, epoch=epoch)
            assert mine.plan.state_dict() == plan.state_dict()
            for step in range(plan.num_steps):
                np.testing.assert_array_equal(
                    mine._step_ids(step), plan.step_indices(step, rank, w)
                )
            got, want = list(mine), list(theirs)
            assert len(mine) == len(got) == len(want)
            for x, y in zip(got, want, strict=True):
                assert list(x) == list(y)
                np.testing.assert_array_equal(x.weights, y.weights)
                assert (x.step, x.step_end) == (y.step, y.step_end)
            assert mine.state_dict() == theirs.state_dict()
            assert mine.state_dict()["space"]["digest"] == digest(space)


@pytest.mark.parametrize("name", ["indices", "mixture of sizes"])
def test_plan_sampler_resumes_on_another_world_size(tmp_path: Path, name: str) -> None:
    pt = pytest.importorskip("epochplan.torch")
    space = SPACES[name]()
    two = write_plan(tmp_path / "w2", ep.PlanSpec(space, 30, seed=1), 2, epochs=(0, 1))
    three = write_plan(tmp_path / "w3", ep.PlanSpec(space, 30, seed=1), 3, epochs=(0, 1))
    first = pt.PlanSampler(two.path, micro_batch_size=4, rank=1, num_replicas=2, epoch=1)
    it = iter(first)
    for _ in range(5):
        next(it)
    state = first.state_dict()
    assert state["cursor"] > 0
    for rank in range(3):
        resumed = pt.PlanSampler(three.path, micro_batch_size=4, rank=rank, num_replicas=3)
        resumed.load_state_dict(state)
        ref = pt.ElasticBatchSampler(ep.PlanSpec(space, 30, seed=1), 4, rank=rank, num_replicas=3)
        ref.load_state_dict(state)
        assert resumed.epoch == 1
        assert [list(x) for x in resumed] == [list(x) for x in ref]


def test_plan_sampler_refuses_a_state_of_another_space(tmp_path: Path) -> None:
    pt = pytest.importorskip("epochplan.torch")
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mask"](), 30), 2)
    sampler = pt.PlanSampler(d.path, micro_batch_size=4, rank=0, num_replicas=2)
    other = ep.EpochPlan(SPACES["ranges"](), 30).state_dict()
    with pytest.raises(ValueError, match="space differs from the state's"):
        sampler.load_state_dict(other)
    with pytest.raises(ValueError, match=r"space must be None"):
        sampler.load_state_dict(ep.EpochPlan(len(SPACES["mask"]()), 30).state_dict())
    # A mixture's state continued from other counts than the files hold.
    mixture = SPACES["mixture of sizes"]()
    m = write_plan(tmp_path / "m", ep.PlanSpec(mixture, 30), 2, epochs=(0, 1))
    sampler = pt.PlanSampler(m.path, micro_batch_size=4, rank=0, num_replicas=2)
    state = ep.EpochPlan(mixture.epoch(1, consumed=[1, 2, 3]), 30).state_dict()
    with pytest.raises(ValueError, match=r"\['consumed'\] is \[1, 2, 3\]"):
        sampler.load_state_dict(state)
    sampler.load_state_dict(ep.EpochPlan(mixture.epoch(1), 30).state_dict())


# ----------------------------------------------------------------- corruption


def _reseal(d: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    """Edits the manifest and seals it again, as a writer would: only the
    checks past the checksum can catch the change."""
    m = json.loads((d / MANIFEST).read_text())
    edit(m)
    m["manifest_checksum"] = manifest_checksum(m)
    (d / MANIFEST).write_text(json.dumps(m))


def _restamp_space_file(d: Path, name: str) -> None:
    def edit(m: dict[str, Any]) -> None:
        for entry in m["space"]["files"]:
            if entry["path"] == name:
                entry["blake3"] = _native.file_checksum(d / name)
                entry["bytes"] = (d / name).stat().st_size

    _reseal(d, edit)


def test_a_changed_mask_is_caught_by_its_checksum_then_by_the_digest(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mask"](), 32), 2).path
    mask = LABELS != 2
    mask[1] = not mask[1]
    np.save(d / "space/mask.npy", mask)
    with pytest.raises(PlanError, match=r"space/mask\.npy: its checksum is not the manifest's"):
        open_plan(d)
    _restamp_space_file(d, "space/mask.npy")
    for read in (lambda: open_plan(d), lambda: verify_plan(d)):
        with pytest.raises(PlanError, match=r"manifest\.json: the space built from .* has digest"):
            read()


def test_changed_indices_are_caught_by_the_digest(tmp_path: Path) -> None:
    space = SPACES["indices"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 32), 2).path
    ids = np.asarray(space).copy()
    ids[[0, 1]] = ids[[1, 0]]  # the same ids in another order: another space
    np.save(d / "space/indices.npy", ids)
    _restamp_space_file(d, "space/indices.npy")
    with pytest.raises(PlanError, match=r"has digest .* the manifest records"):
        open_plan(d)


def test_a_changed_space_spec_is_caught_by_the_digest(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["split part 1"](), 32), 2).path
    _reseal(d, lambda m: m["space"]["spec"].update(seed=12))
    with pytest.raises(PlanError, match=r"has digest .* the manifest records"):
        open_plan(d)


@pytest.mark.parametrize(
    ("edit", "match"),
    [
        (lambda s: s["files"][0].update(path="../escape.npy"), "not a .npy file of space/"),
        (lambda s: s["spec"].update(mask="space/other.npy"), "reads the files"),
        (lambda s: s.update(files=[]), "reads the files"),
        (lambda s: s.update(digest="md5:0"), "space\\['digest'\\]"),
        (lambda s: s.pop("spec"), "'space' must be an object"),
    ],
)
def test_a_bad_space_section_is_refused(
    tmp_path: Path, edit: Callable[[dict[str, Any]], None], match: str
) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mask"](), 32), 2).path
    _reseal(d, lambda m: edit(m["space"]))
    with pytest.raises(PlanError, match=match):
        open_plan(d)


def test_versions_and_space_sections_go_together(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["ranges"](), 32), 2).path
    _reseal(d, lambda m: m.update(plan_file_version=2))
    with pytest.raises(PlanError, match="a version-2 manifest holds no 'space'"):
        open_plan(d)
    _reseal(d, lambda m: (m.update(plan_file_version=4), m.pop("space")))
    with pytest.raises(PlanError, match="a version-4 manifest needs a 'space'"):
        open_plan(d)
    _reseal(d, lambda m: m.update(plan_file_version=5))  # a cut token plan's
    with pytest.raises(PlanError, match="a token plan's manifest needs a 'tokens' object"):
        open_plan(d)
    _reseal(d, lambda m: m.update(plan_file_version=6))  # a packed token plan's
    with pytest.raises(PlanError, match="a token plan's manifest needs a 'tokens' object"):
        open_plan(d)
    _reseal(d, lambda m: m.update(plan_file_version=7))  # a narrow token plan's
    with pytest.raises(PlanError, match="a token plan's manifest needs a 'tokens' object"):
        open_plan(d)
    _reseal(d, lambda m: m.update(plan_file_version=8))
    with pytest.raises(PlanError, match="plan_file_version is 8; this release reads"):
        open_plan(d)


def test_a_missing_space_file(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mixture of masks"](), 32), 2).path
    (d / "space/source-00001.mask.npy").unlink()
    with pytest.raises(PlanError, match=r"source-00001\.mask\.npy: missing space file"):
        open_plan(d)


def _swap_id(d: Path, epoch: int, rank: int, at: int, new: int) -> None:
    """Puts ``new`` at index ``at`` of a rank file and seals its checksum."""
    f = d / f"epoch-{epoch:04d}" / f"rank-{rank:05d}.npy"
    ids = np.load(f).copy()
    ids[at] = new
    f.write_bytes(_native.npy_header(len(ids)) + ids.astype("<i8").tobytes())

    def edit(m: dict[str, Any]) -> None:
        entry = next(e for e in m["files"] if e["epoch"] == epoch and e["rank"] == rank)
        entry["blake3"] = _native.file_checksum(f)

    _reseal(d, edit)
    open_plan(d).rank_ids(epoch, rank)  # consistent again: only verify can tell


@pytest.mark.parametrize("kind", ["cipher", "uniform"])
def test_an_id_outside_the_selection_is_caught(tmp_path: Path, kind: str) -> None:
    space = SPACES["mask"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 32, kind=kind), 2).path
    _swap_id(d, 0, 1, 7, 2)  # id 2 has label 2: not selected
    with pytest.raises(PlanError, match=r"rank-00001\.npy: .*\b2\b"):
        verify_plan(d)


def test_an_id_of_the_selection_in_another_place_is_caught(tmp_path: Path) -> None:
    space = SPACES["split part 1"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 32), 2).path
    _swap_id(d, 0, 0, 3, int(open_plan(d).rank_ids(0, 1)[0]))
    with pytest.raises(PlanError, match=r"rank-00000\.npy"):
        verify_plan(d)


def test_a_swapped_id_of_a_mixture_is_caught(tmp_path: Path) -> None:
    # A mixture's ids repeat: an id of the space put where another was is
    # still a store id of the space, caught by comparing with the plan.
    space = SPACES["mixture of sizes"]()
    d = write_plan(tmp_path / "p", ep.PlanSpec(space, 32), 2).path
    ids = open_plan(d).rank_ids(0, 0)
    other = next(int(i) for i in ids if i != ids[0])
    _swap_id(d, 0, 0, 0, other)
    with pytest.raises(PlanError, match=r"rank-00000\.npy: id .* differs from the plan's"):
        verify_plan(d)


def test_every_byte_of_a_space_plan_manifest_is_authenticated(tmp_path: Path) -> None:
    # One bit flipped at each byte of a small space plan's manifest: every
    # reader refuses every flip with a PlanError naming the manifest.
    pt = pytest.importorskip("epochplan.torch")
    out = tmp_path / "p"
    space = ep.Mixture(
        [ep.Selection.from_mask(np.arange(40) % 2 == 0), ep.Selection.from_ranges([(1, 9)], 40)],
        quotas=[6, 4],
        seed=1,
    )
    write_plan(out, ep.PlanSpec(space, 4), 2, epochs=(0,))
    readers: dict[str, Callable[[], object]] = {
        "open_plan": lambda: open_plan(out),
        "rank_ids": lambda: open_plan(out).rank_ids(0, 1),
        "PlanSampler": lambda: pt.PlanSampler(out, micro_batch_size=2, rank=0, num_replicas=2),
        "verify_plan": lambda: verify_plan(out),
    }
    assert_every_manifest_byte_refused(out, readers)


# ------------------------------------------------------------------------ CLI


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "epochplan.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_cli_plans_over_a_space_file(tmp_path: Path) -> None:
    np.save(tmp_path / "even.npy", np.arange(N) % 2 == 0)
    spec = {
        "mixture": [{"mask": "even.npy"}, {"ranges": [[0, 40]], "num_samples": N}],
        "quotas": [120, 80],
        "seed": 6,
    }
    (tmp_path / "space.json").write_text(json.dumps(spec))
    out = tmp_path / "plan"
    res = cli("plan", "-g", "32", "-w", "3", "--epochs", "2", "--seed", "2",
              "--space", str(tmp_path / "space.json"), "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "space: a mixture of 2 sources" in res.stdout
    assert "the mixture's ids with their multiplicities" in res.stdout
    space = ep.load_space(tmp_path / "space.json")
    d = open_plan(out)
    assert digest(d.space) == digest(space)
    for epoch in (0, 1):
        plan = ep.EpochPlan(space, 32, seed=2, epoch=epoch)
        for rank in range(3):
            np.testing.assert_array_equal(d.rank_ids(epoch, rank), plan.rank_indices(rank, 3))
    # -n, when given, is the space file's store size.
    res = cli("plan", "-n", "1000", "-g", "32", "-w", "1", "--no-verify",
              "--space", str(tmp_path / "space.json"), "--out", str(tmp_path / "p2"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    # The plan stands alone: the space file and its mask may go.
    (tmp_path / "even.npy").unlink()
    (tmp_path / "space.json").unlink()
    res = cli("verify", str(out))
    assert res.returncode == 0, res.stderr
    assert "over a mixture of 2 sources" in res.stdout and "every id compared" in res.stdout


def test_cli_plans_a_part_of_a_split(tmp_path: Path) -> None:
    out = tmp_path / "val"
    res = cli("plan", "-n", "5000", "-g", "64", "-w", "2", "--split", "0.9,0.1", "--part", "1",
              "--split-seed", "8", "--seed", "3", "--out", str(out))  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "plan: N=500 " in res.stdout
    assert "space: a split selection of 500 of 5,000 ids" in res.stdout
    part = ep.random_split(5000, [0.9, 0.1], seed=8)[1]
    d = open_plan(out)
    assert d.manifest["space"]["spec"] == {
        "split": [4500, 500, 0],
        "part": 1,
        "num_samples": 5000,
        "seed": 8,
    }
    plan = ep.EpochPlan(part, 64, seed=3)
    for rank in range(2):
        np.testing.assert_array_equal(d.rank_ids(0, rank), plan.rank_indices(rank, 2))
    # Sizes work as fractions do; the default split seed is 0.
    res = cli("plan", "-n", "5000", "-g", "64", "-w", "2", "--split", "4500,500", "--part", "0",
              "--out", str(tmp_path / "train"))  # fmt: skip
    assert res.returncode == 0, res.stderr
    train = open_plan(tmp_path / "train")
    assert digest(train.space) == digest(ep.random_split(5000, [4500, 500])[0])
    # Disjoint from the validation part of the same seed, none of whose ids it holds.
    val = ep.random_split(5000, [4500, 500])[1]
    ids = np.concatenate([train.rank_ids(0, r) for r in range(2)])
    assert len(ids) == 4500 and not np.isin(ids, np.asarray(val)).any()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--part", "0"], "--part needs --split"),
        (["--split-seed", "1"], "--split-seed needs --split"),
        (["--split", "0.9,0.1", "--part", "0"], "--split needs -n/--num-samples"),
        (["-n", "100", "--split", "0.9,0.1"], "--split needs --part K"),
        (["-n", "100", "--split", "0.9,0.1", "--part", "2"], "--part must be in [0, 1]"),
        (["-n", "100", "--split", "0.9,0.2", "--part", "0"], "--split: "),
        (["-n", "100", "--split", "x,y", "--part", "0"], "argument --split: expected"),
        (["--space", "SPACE", "--split", "0.5,0.5", "-n", "100", "--part", "0"],
         "--space and --split"),
        (["--space", "SPACE", "-n", "99"], "-n/--num-samples is 99 but the space file's store"),
        (["--space", "MISSING"], "--space MISSING: cannot read the space spec"),
        (["--space", "BAD"], "--space BAD: spec must have exactly one of the keys"),
    ],
)  # fmt: skip
def test_cli_space_mistakes_name_the_flag(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "space.json").write_text(json.dumps({"ranges": [[0, 10]], "num_samples": 100}))
    (tmp_path / "bad.json").write_text(json.dumps({"rangez": []}))
    names = {"SPACE": "space.json", "MISSING": "missing.json", "BAD": "bad.json"}
    args = [str(tmp_path / names[a]) if a in names else a for a in args]
    message = message.replace("MISSING", str(tmp_path / "missing.json"))
    message = message.replace("BAD", str(tmp_path / "bad.json"))
    res = cli("plan", "-g", "4", "-w", "2", *args, "--out", str(tmp_path / "p"))
    assert res.returncode == 2, res.stderr
    assert res.stderr.startswith("epochplan plan: error: ")
    assert message in res.stderr
    assert res.stderr.count("\n") == 1
    assert not (tmp_path / "p").exists()


def test_cli_verify_names_a_corrupt_space_file(tmp_path: Path) -> None:
    d = write_plan(tmp_path / "p", ep.PlanSpec(SPACES["mask"](), 32), 2).path
    np.save(d / "space/mask.npy", LABELS == 2)
    res = cli("verify", str(d))
    assert res.returncode == 1
    assert "space/mask.npy: its checksum is not the manifest's" in res.stderr
