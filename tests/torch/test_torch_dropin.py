"""epochplan.torch's strided samplers are torch DistributedSamplers: isinstance
holds, every attribute torch users read is there, none of torch's code runs, and
the facts PyTorch's own DistributedSampler tests check (test/test_dataloader.py,
torch/testing/_internal/distributed/distributed_test.py) hold for ours."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
import tracemalloc
from typing import Any

import numpy as np
import pytest
import torch
import torch.utils.data.distributed as torch_dist
from torch.utils.data import DataLoader

import epochplan as ep
import epochplan.torch as et
from tests.torch import _sampler_group_worker as group_worker

ATTRIBUTES = [
    "dataset",
    "num_replicas",
    "rank",
    "epoch",
    "shuffle",
    "seed",
    "drop_last",
    "num_samples",
    "total_size",
]


class Huge:
    """A dataset of 2**62 samples that holds none of them."""

    def __len__(self) -> int:
        return 2**62


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ExactDistributedSampler])
def test_both_samplers_are_torch_distributed_samplers(cls: Any) -> None:
    sampler = cls(range(10), 3, 1)
    assert isinstance(sampler, torch.utils.data.DistributedSampler)
    assert isinstance(sampler, torch_dist.DistributedSampler)
    assert isinstance(sampler, torch.utils.data.Sampler)
    # A loop that guards set_epoch with this check now reshuffles.
    if isinstance(sampler, torch.utils.data.DistributedSampler):
        sampler.set_epoch(4)
    assert sampler.epoch == 4


@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize("shuffle", [False, True])
def test_every_attribute_torch_users_read_has_torchs_value(shuffle: bool, drop_last: bool) -> None:
    for n in (0, 1, 2, 7, 10, 64, 101):
        for w in (1, 2, 3, 4, 8):
            dataset = list(range(n))
            for r in range(w):
                kw: dict[str, Any] = {"shuffle": shuffle, "seed": 5, "drop_last": drop_last}
                theirs: Any = torch_dist.DistributedSampler(dataset, w, r, **kw)  # type: ignore[arg-type]
                ours = et.DistributedSampler(dataset, w, r, **kw)
                for name in ATTRIBUTES:
                    assert getattr(ours, name) == getattr(theirs, name), (n, w, r, name)
                assert ours.dataset is dataset
                assert len(ours) == len(theirs) == len(list(ours))
                theirs.set_epoch(3)
                ours.set_epoch(3)
                assert ours.epoch == theirs.epoch == 3


def test_exact_sampler_has_the_same_attributes_without_padding() -> None:
    dataset = list(range(10))
    shares = [et.ExactDistributedSampler(dataset, 4, r, shuffle=False, seed=2) for r in range(4)]
    for r, s in enumerate(shares):
        assert (s.dataset, s.num_replicas, s.rank, s.epoch) == (dataset, 4, r, 0)
        assert (s.shuffle, s.seed, s.drop_last, s.total_size) == (False, 2, False, 10)
    assert [s.num_samples for s in shares] == [3, 3, 2, 2]
    assert sorted(i for s in shares for i in s) == dataset


@pytest.mark.parametrize("cls", [et.DistributedSampler, et.ExactDistributedSampler])
def test_none_of_torchs_sampler_code_runs(cls: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> Any:
        raise AssertionError("torch's DistributedSampler code ran")

    for name in ("__init__", "__iter__", "__len__", "set_epoch"):
        monkeypatch.setattr(torch_dist.DistributedSampler, name, refuse)
    sampler = cls(range(50), 4, 3, seed=1)
    sampler.set_epoch(2)
    first = list(sampler)
    assert len(first) == len(sampler) == sampler.num_samples
    loader: Any = DataLoader(range(50), batch_size=4, sampler=sampler)  # type: ignore[arg-type]
    assert [i for b in loader for i in b.tolist()] == first
    state = sampler.state_dict()
    sampler.load_state_dict(state)


def test_sizes_are_exact_integers_where_torchs_floats_are_not() -> None:
    # torch computes math.ceil(N / W) in floats; past 2**53 that is off.
    n, w = 2**62, 3
    ours = et.DistributedSampler(Huge(), w, 2, drop_last=True)
    assert ours.num_samples == (n - w) // w + 1 == n // w
    assert math.ceil((n - w) / w) != ours.num_samples
    padded = et.DistributedSampler(Huge(), w, 2)
    assert padded.num_samples == -(-n // w) and padded.total_size == padded.num_samples * w


def test_nothing_of_size_n_is_built_for_the_first_indices() -> None:
    n, w, r = 2**62, 1000, 999
    tracemalloc.start()
    try:
        start = time.perf_counter()
        sampler = et.DistributedSampler(Huge(), w, r, seed=7)
        sampler.set_epoch(1)
        it = iter(sampler)
        head = [next(it) for _ in range(100)]
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    order = ep.Permutation(n, seed=7, epoch=1)
    assert head == np.asarray(order[r : r + 100 * w : w]).tolist()
    # Python-side memory of the first chunk only (1024 ids), far below N / W.
    assert peak < 2**20, peak
    assert elapsed < 5.0  # generous: a list of N / W ids would not even fit in memory


def test_a_bad_rank_is_a_value_error_naming_the_rank() -> None:
    # test_dataloader.py: rank == num_replicas and a negative rank.
    dataset = torch.IntTensor(range(10))
    for rank in (3, -1):
        with pytest.raises(ValueError, match="Invalid rank"):
            et.DistributedSampler(dataset, 3, rank)
        with pytest.raises(ValueError, match="Invalid rank"):
            et.ExactDistributedSampler(dataset, 3, rank)


@pytest.mark.parametrize("shuffle", [True, False])
def test_drop_last_batches_over_ranks_hold_no_sample_twice(shuffle: bool) -> None:
    # test_dataloader.py: 9 samples on 4 ranks, batches of 2 with the
    # DataLoader's drop_last: the padded sample is in a dropped batch.
    data = torch.IntTensor(range(9))
    seen: list[int] = []
    for rank in range(4):
        sampler = et.DistributedSampler(data, 4, rank, shuffle=shuffle)
        loader: Any = DataLoader(data, batch_size=9 // 4, drop_last=True, sampler=sampler)  # type: ignore[arg-type]
        batches = [b.tolist() for b in loader]
        assert [len(b) for b in batches] == [2]
        seen += [i for b in batches for i in b]
    assert len(seen) == len(set(seen)) == 8


@pytest.fixture(scope="module")
def group_runs(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    out = tmp_path_factory.mktemp("group")
    world = 3
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), OMP_NUM_THREADS="1")
        log = open(out / f"log-{rank}.txt", "w")  # noqa: SIM115
        cmd = [sys.executable, group_worker.__file__, str(out)]
        procs.append((subprocess.Popen(cmd, env=env, stdout=log, stderr=log), log))
    try:
        for proc, _ in procs:
            proc.wait(timeout=120)
    finally:
        for proc, log in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
    logs = "\n".join((out / f"log-{r}.txt").read_text()[-3000:] for r in range(world))
    assert all(proc.returncode == 0 for proc, _ in procs), logs
    return [json.loads((out / f"rank-{r}.json").read_text()) for r in range(world)]


@pytest.mark.parametrize("case", ["casual-drop1", "casual-drop0", "tiny-drop1", "tiny-drop0"])
def test_padding_in_a_process_group(group_runs: list[dict[str, Any]], case: str) -> None:
    # distributed_test.py's test_DistributedSampler_padding: rank and world
    # size from the default group; drop_last gives the largest multiple of W
    # not above N, padding the smallest not below; every rank the same count.
    world = len(group_runs)
    runs = [run[case] for run in group_runs]
    n = runs[0]["n"]
    for r, run in enumerate(runs):
        assert (run["rank"], run["num_replicas"]) == (r, world)
        if case.endswith("drop1"):
            expected = math.ceil((n - world) / world) if n % world else n // world
        else:
            expected = math.ceil(n / world)
        assert run["num_samples"] == expected
        assert run["total_size"] == expected * world
        assert len(run["indices"]) == expected
        assert run["everyone"] == [expected] * world
    served = [i for run in runs for i in run["indices"]]
    if case.endswith("drop1"):
        assert len(set(served)) == len(served)  # dropped, not repeated
    else:
        assert set(served) == set(range(n))  # every sample, some twice
