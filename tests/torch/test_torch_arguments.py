"""epochplan.torch's arguments: ranks resolved, bad values refused as torch refuses them."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
import torch
import torch.utils.data.distributed as torch_dist

import epochplan.torch as et
from epochplan import Chunked, PlanSpec


def test_bad_rank_errors_match_torch() -> None:
    for w, r in [(2, 2), (2, -1), (3, 5)]:
        with pytest.raises(ValueError) as theirs:
            torch_dist.DistributedSampler(range(4), w, r)
        with pytest.raises(ValueError) as ours:
            et.DistributedSampler(range(4), w, r)
        assert str(ours.value) == str(theirs.value)
    # torch blames the rank ("interval [0, -1]"); the world size is at fault.
    for w in (0, -2):
        with pytest.raises(
            ValueError, match=rf"num_replicas must be in \[1, 2\*\*63 - 1\], got {w}"
        ):
            et.DistributedSampler(range(4), w, 0)
    with pytest.raises(ValueError, match=r"num_replicas must be in .* got an int of 16610 bits"):
        et.DistributedSampler(range(4), 10**5000, 0)
    with pytest.raises(ValueError, match="Invalid rank an int of 16610 bits"):
        et.DistributedSampler(range(4), 4, 10**5000)
    with pytest.raises(
        ValueError, match=r"num_replicas must be in .* got 0 \(from the rank provider"
    ):
        et.resolve_rank(0, None, rank_fn=lambda: (0, 0))
    with pytest.raises(TypeError, match="rank must be an int"):
        et.DistributedSampler(range(4), 2, "1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="num_replicas must be an int"):
        et.ElasticBatchSampler(PlanSpec(4, 2), 1, rank=0, num_replicas=2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"micro_batch_size must be an int in \[1, 2\*\*63 - 1\]"):
        et.ElasticBatchSampler(PlanSpec(4, 2), 0, rank=0, num_replicas=1)
    with pytest.raises(ValueError, match=rf"micro_batch_size must be an int in .*, got {2**63}"):
        et.ElasticBatchSampler(PlanSpec(4, 2), 2**63, rank=0, num_replicas=1)
    with pytest.raises(ValueError, match="global_batch_size"):
        et.ElasticBatchSampler(PlanSpec(4, 0), 1, rank=0, num_replicas=1)
    with pytest.raises(ValueError, match=r"global_batch_size must be an int in \[1, 2\*\*63 - 1\]"):
        et.ChunkSampler(4, 0, Chunked(2, 1), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"global_batch_size must be an int in"):
        et.ChunkSampler(4, 2**70, Chunked(2, 1), num_replicas=1, rank=0)
    with pytest.raises(ValueError, match=r"^num_samples must hold \[0, 2\*\*63 - 1\] samples"):
        et.ChunkSampler(-1, 4, Chunked(2, 1), num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="dataset must be a sized dataset"):
        et.DistributedSampler(5, 2, 0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="chunk_size"):
        et.ChunkSampler(4, 2, Chunked(0, 1), num_replicas=1, rank=0)
    with pytest.raises(TypeError, match="chunked must be a Chunked"):
        et.ChunkSampler(4, 2, 3, num_replicas=1, rank=0)  # type: ignore[arg-type]


def test_a_samplers_plan_parameters_travel_in_its_spec() -> None:
    spec = PlanSpec(10, 4, seed=3, kind=Chunked(2, 2))
    sampler = et.ElasticBatchSampler(spec, 2, rank=0, num_replicas=1)
    assert sampler.spec == spec and sampler.seed == 3 and sampler.kind == Chunked(2, 2)
    assert (sampler.num_samples, sampler.global_batch_size, sampler.drop_last) == (10, 4, False)
    # Setting a field replaces the spec, the value checked at once.
    sampler.seed = 5
    assert sampler.spec == spec.replace(seed=5) and sampler.seed == 5
    with pytest.raises(ValueError, match="seed"):
        sampler.seed = -1
    with pytest.raises(TypeError, match="seed"):
        sampler.seed = 1.5  # type: ignore[assignment]
    with pytest.raises(TypeError, match="drop_last"):
        sampler.drop_last = 1  # type: ignore[assignment]
    assert sampler.seed == 5
    # The plan's old keywords name where they went.
    for name, value in [("seed", 1), ("kind", "uniform"), ("drop_last", True), ("lengths", [1])]:
        with pytest.raises(TypeError, match=rf"takes no {name}=.*PlanSpec"):
            et.ElasticBatchSampler(PlanSpec(10, 4), 2, rank=0, num_replicas=1, **{name: value})
    with pytest.raises(TypeError, match="spec must be a PlanSpec"):
        et.ElasticBatchSampler(10, 2, rank=0, num_replicas=1)  # type: ignore[arg-type]


def test_sampler_arguments_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match=r"num_replicas must be in \[1, 2\*\*63 - 1\]"):
        et.ElasticBatchSampler(PlanSpec(10, 4), 2, rank=0, num_replicas=2**63)
    with pytest.raises(ValueError, match="num_samples must be an int in"):
        et.ElasticBatchSampler(PlanSpec(2**63, 4), 2, rank=0, num_replicas=1)
    with pytest.raises(TypeError, match="num_replicas must be an int, got ndarray"):
        et.ElasticBatchSampler(PlanSpec(10, 4), 2, rank=0, num_replicas=np.array(2.0))
    for bad in (None, 1, "yes"):
        with pytest.raises(TypeError, match="drop_last must be a bool"):
            et.ElasticBatchSampler(PlanSpec(10, 4, drop_last=bad), 2, rank=0, num_replicas=1)  # type: ignore[arg-type]
    sampler = et.ElasticBatchSampler(PlanSpec(10, 4, drop_last=np.True_), 2, rank=0, num_replicas=1)
    assert sampler.drop_last is True and len(sampler) == 4


def test_rank_resolution_sources(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not torch.distributed.is_initialized()
    with pytest.raises(ValueError, match="num_replicas and rank not given"):
        et.resolve_rank()
    with pytest.raises(ValueError, match="rank not given"):
        et.DistributedSampler(range(4), num_replicas=2)
    # A callable (JAX: jax.process_index(), jax.process_count()).
    assert et.resolve_rank(rank_fn=lambda: (1, 3)) == (1, 3)
    assert et.ElasticBatchSampler(PlanSpec(9, 3), 1, rank_fn=lambda: (2, 3)).rank == 2
    et.set_rank_provider(lambda: (0, 5))
    try:
        assert et.resolve_rank() == (0, 5)
        assert et.resolve_rank(rank_fn=lambda: (1, 2)) == (1, 2)
        assert et.resolve_rank(num_replicas=7) == (0, 7)
        # Environment variables come before a provider; explicit arguments first.
        monkeypatch.setenv("RANK", "3")
        monkeypatch.setenv("WORLD_SIZE", "4")
        assert et.resolve_rank() == (3, 4)
        assert et.resolve_rank(5, 8) == (5, 8)
        s = et.DistributedSampler(range(10))
        assert (s.rank, s.num_replicas) == (3, 4)
        monkeypatch.setenv("RANK", "4")
        with pytest.raises(ValueError, match=r"Invalid rank 4, .*\[0, 3\] \(from the RANK"):
            et.resolve_rank()
        monkeypatch.delenv("WORLD_SIZE")
        with pytest.raises(ValueError, match="RANK is set but WORLD_SIZE is not"):
            et.resolve_rank()
        # Each value is resolved on its own: with num_replicas given, RANK suffices.
        assert et.resolve_rank(num_replicas=8) == (4, 8)
        monkeypatch.setenv("WORLD_SIZE", "3")
        assert et.resolve_rank(num_replicas=8) == (4, 8)
        monkeypatch.delenv("RANK")
        assert et.resolve_rank(rank=2) == (2, 3)
        with pytest.raises(ValueError, match="WORLD_SIZE is set but RANK is not"):
            et.resolve_rank()
        monkeypatch.setenv("RANK", "4")
        monkeypatch.delenv("WORLD_SIZE")
        # ASCII digits only: int() would read "1_0" as 10.
        for bad in ("four", "1_0", "\u0664", "", "4.0"):
            monkeypatch.setenv("WORLD_SIZE", bad)
            with pytest.raises(ValueError, match="WORLD_SIZE must be an int"):
                et.resolve_rank()
        monkeypatch.setenv("WORLD_SIZE", " 8\n")
        assert et.resolve_rank() == (4, 8)
    finally:
        et.set_rank_provider(None)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    with pytest.raises(TypeError, match="must return"):
        et.resolve_rank(rank_fn=lambda: 3)  # type: ignore[arg-type, return-value]
    with pytest.raises(ValueError, match=r"Invalid rank 3, .*\[0, 2\] \(from the rank provider"):
        et.resolve_rank(rank_fn=lambda: (3, 3))
    with pytest.raises(TypeError, match="fn must be callable"):
        et.set_rank_provider(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rank_fn must be callable or None, got int"):
        et.resolve_rank(rank_fn=5)  # type: ignore[arg-type]


def test_arrays_and_tensors_stand_for_n_only_when_0_d() -> None:
    # A dataset is given by its length (PlanSpec(len(dataset), ...)); a 0-d
    # array or tensor is an int, one with a length is not.
    for data in (np.zeros((10, 3)), torch.zeros(10, 3), torch.tensor([7]), np.array([7])):
        sampler = et.ElasticBatchSampler(PlanSpec(len(data), 4), 2, rank=0, num_replicas=2)
        assert sampler.num_samples == len(data)
        with pytest.raises(TypeError, match="num_samples must be an int"):
            PlanSpec(data, 4)
    for data in (np.array(7), torch.tensor(7), np.int64(7)):
        sampler = et.ElasticBatchSampler(PlanSpec(data, 4), 2, rank=0, num_replicas=2)
        assert sampler.num_samples == 7 and type(sampler.num_samples) is int
    for bad in (np.array(7.0), 7.0, None):
        with pytest.raises(TypeError, match="num_samples must be an int"):
            PlanSpec(bad, 4)  # type: ignore[arg-type]


def test_import_epochplan_does_not_import_torch() -> None:
    code = "import sys, epochplan; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_reprs() -> None:
    # The dataset's length, not the per-rank `num_samples` attribute (3 here).
    assert repr(et.DistributedSampler(range(5), 2, 1)).startswith(
        "DistributedSampler(dataset_len=5, num_replicas=2"
    )
    assert repr(et.ExactDistributedSampler(range(5), 2, 1)).startswith(
        "ExactDistributedSampler(dataset_len=5, num_replicas=2"
    )
    assert "PlanSampler" in et.__all__
    with pytest.raises(TypeError, match="preload_nchunks"):
        Chunked(3, None)  # type: ignore[arg-type]
    # ChunkSampler's arguments: global_batch_size (not batch_size) and its Chunked.
    text = repr(et.ChunkSampler(9, 4, Chunked(3, 1), num_replicas=2, rank=1, seed=5))
    assert text.startswith("ChunkSampler(") and not re.search(r"(?<!global_)batch_size=4", text)
    for part in (
        "num_samples=9",
        "global_batch_size=4",
        "seed=5",
        "Chunked(chunk_size=3, preload_nchunks=1)",
        "rank=1",
        "num_replicas=2",
    ):
        assert part in text, (part, text)


def test_numpy_and_tensor_epochs() -> None:
    ref = et.DistributedSampler(range(10), 3, 1)
    ref.set_epoch(3)
    for epoch in (np.int64(3), np.uint64(3), np.array(3), torch.tensor(3)):
        s = et.DistributedSampler(range(10), 3, 1)
        s.set_epoch(epoch)
        assert list(s) == list(ref) and type(s.epoch) is int
        s.load_state_dict({"epoch": epoch, "seed": np.int64(0), "yielded": 0})
        assert list(s) == list(ref)
    b = et.ElasticBatchSampler(PlanSpec(100, 10), 5, rank=0, num_replicas=2)
    b.set_epoch(np.array(2))
    assert type(b.epoch) is int and b.epoch == 2
