"""epochplan.torch.nodes: a torchdata.nodes source over the epochplan samplers.

Ranks are simulated in one process: one pipeline per rank, each
``Loader(ParallelMapper(SamplerWrapper(sampler), fetch, num_workers=2))``.
"""

from __future__ import annotations

import doctest
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import epochplan as ep

pytest.importorskip("torch")
tn = pytest.importorskip("torchdata.nodes")
import epochplan.torch as et  # noqa: E402
from epochplan.torch import nodes  # noqa: E402

N, G, B = 103, 12, 2  # 9 steps, the last one short; 2 or more micro-batches a step
DATA = np.arange(N) * 10  # a record is its id times ten


def fetch(batch: et.WeightedIndices) -> tuple[list[int], list[float], int, bool]:
    """Loads a micro-batch: its records, with the weights and step it carries."""
    records = [int(DATA[i]) for i in batch]
    return records, batch.weights.tolist(), batch.step, batch.step_end


def elastic_loader(world: int, rank: int, make: Callable[..., Any] | None = None) -> Any:
    make = make or (
        lambda w, r: et.ElasticBatchSampler(ep.PlanSpec(N, G, seed=7), B, rank=r, num_replicas=w)
    )
    node = nodes.SamplerWrapper(make(world, rank))
    return tn.Loader(tn.ParallelMapper(node, fetch, num_workers=2))


def real_records(items: list[Any]) -> list[int]:
    """The records with a non-zero weight, as their sample ids."""
    return [
        rec // 10
        for recs, weights, _, _ in items
        for rec, w in zip(recs, weights, strict=True)
        if w > 0
    ]


def take(it: Any, count: int) -> list[Any]:
    return [next(it) for _ in range(count)]


def chunk_sampler(w: int, r: int) -> et.ElasticBatchSampler:
    # The chunked order with B samples a micro-batch (ChunkSampler deals one
    # micro-batch per rank and step: a step would never be cut short).
    spec = ep.PlanSpec(N, G, seed=7, kind=ep.Chunked(10, 2))
    return et.ElasticBatchSampler(spec, B, num_replicas=w, rank=r)


@pytest.mark.parametrize("make", [None, chunk_sampler], ids=["elastic", "chunk"])
@pytest.mark.parametrize(("before", "after"), [(3, 2), (2, 5), (4, 1)])
@pytest.mark.parametrize("mid_step", [False, True], ids=["at-step-end", "mid-step"])
def test_a_state_saved_on_w_ranks_restores_on_another_world_size_exactly_once(
    make: Callable[..., Any] | None, before: int, after: int, mid_step: bool
) -> None:
    loaders = [elastic_loader(before, r, make) for r in range(before)]
    done: list[Any] = []
    for loader in loaders:
        it = iter(loader)
        items = [next(it)]
        # Through step 2's last micro-batch, or into step 3 (its first micro-batch).
        while not (items[-1][2] == 3 if mid_step else items[-1][2] == 2 and items[-1][3]):
            items.append(next(it))
        # A step cut short is not trained on: the restore replays it.
        done += [x for x in items if x[2] < 3]
    states = [loader.state_dict() for loader in loaders]
    sampler_states = [s["root"]["it_state"]["snapshot"]["_sampler"] for s in states]
    assert all(s == sampler_states[0] for s in sampler_states)
    assert sampler_states[0]["cursor"] == 3 * G  # a step boundary, whatever the world size
    rest: list[Any] = []
    for r in range(after):
        loader = elastic_loader(after, r, make)
        loader.load_state_dict(states[0])
        items = list(loader)
        assert items[0][2] == 3  # the restore starts at step 3
        rest += items
    seen = Counter(real_records(done) + real_records(rest))
    assert sorted(seen) == list(range(N)) and set(seen.values()) == {1}


def test_the_epoch_advances_across_resets_and_resumes() -> None:
    plans = [ep.EpochPlan(N, G, seed=7, epoch=e) for e in range(3)]
    loader = elastic_loader(1, 0)
    for e in range(2):
        ids = [rec // 10 for recs, w, _, _ in loader for rec in recs]
        assert ids == plans[e].rank_indices(0, 1).tolist()
    # Saved at the end of epoch 1: a restored loader goes on with epoch 2.
    state = loader.state_dict()
    assert state["root"]["it_state"]["snapshot"]["_epoch"] == 1
    restored = elastic_loader(1, 0)
    restored.load_state_dict(state)
    ids = [rec // 10 for recs, w, _, _ in restored for rec in recs]
    assert ids == plans[2].rank_indices(0, 1).tolist()


@pytest.mark.parametrize(
    "cls", [et.DistributedSampler, et.ExactDistributedSampler, et.ElasticBatchSampler]
)
def test_a_reset_after_restoring_a_finished_epoch_starts_the_next(cls: Any) -> None:
    # The sequence of meta-pytorch/data#1513, node by node: torchdata's own
    # SamplerWrapper serves nothing after the last reset.
    sampler = (
        cls(ep.PlanSpec(10, 4, seed=42), 2, num_replicas=2, rank=0)
        if cls is et.ElasticBatchSampler
        else cls(range(10), num_replicas=2, rank=0, seed=42)
    )
    node = nodes.SamplerWrapper(sampler)
    node.reset()
    next(node)
    state = node.state_dict()
    rest = list(node)
    node.reset()
    epoch1 = list(node)
    node.reset(state)
    assert (node.epoch, sampler.epoch) == (0, 0) and list(node) == rest
    finished = node.state_dict()
    node.reset(finished)
    node.reset()
    assert (node.epoch, sampler.epoch) == (1, 1)
    assert list(node) == epoch1 and len(epoch1) > 0


def test_a_state_saved_mid_epoch_keeps_its_epoch() -> None:
    loader = elastic_loader(2, 1)
    for _ in loader:
        pass  # epoch 0
    it = iter(loader)  # epoch 1
    take(it, 3)
    state = loader.state_dict()
    restored = elastic_loader(2, 1)
    restored.load_state_dict(state)
    resumed = iter(restored)
    first = next(resumed)
    assert state["root"]["it_state"]["snapshot"]["_epoch"] == 1 and first[2] >= 1
    expected = ep.EpochPlan(N, G, seed=7, epoch=1).step_indices(first[2], 1, 2)
    assert [rec // 10 for rec in first[0]] == expected[: len(first[0])].tolist()
    # After the restored epoch, the next one is epoch 2.
    list(resumed)
    second = [rec // 10 for recs, w, _, _ in restored for rec in recs]
    assert second == ep.EpochPlan(N, G, seed=7, epoch=2).rank_indices(1, 2).tolist()


@pytest.mark.parametrize("exact", [True, False], ids=["exact", "torch-like"])
def test_the_strided_samplers_restore_on_the_same_world_size(exact: bool) -> None:
    world, batch = 3, 5
    cls = et.ExactDistributedSampler if exact else et.DistributedSampler

    def make(rank: int) -> Any:
        node = nodes.SamplerWrapper(cls(range(N), num_replicas=world, rank=rank, seed=3))
        batcher = tn.Batcher(node, batch_size=batch, drop_last=False)
        return tn.Loader(tn.ParallelMapper(batcher, lambda ids: [DATA[i] // 10 for i in ids], 2))

    seen: list[int] = []
    for r in range(world):
        loader = make(r)
        full = [int(i) for b in make(r) for i in b]
        it = iter(loader)
        head = [int(i) for b in take(it, 4) for i in b]
        restored = make(r)
        restored.load_state_dict(loader.state_dict())
        tail = [int(i) for b in restored for i in b]
        assert head + tail == full
        seen += full
    counts = Counter(seen)
    assert sorted(counts) == list(range(N))
    if exact:
        assert set(counts.values()) == {1}
    else:  # torch's padding: the total is a multiple of the world size
        assert sum(counts.values()) == -(-N // world) * world
    with pytest.raises(ValueError, match="num_replicas"):
        other = nodes.SamplerWrapper(cls(range(N), num_replicas=2, rank=0))
        other.reset(make(0).state_dict()["root"]["it_state"]["snapshot"]["source"])


def test_the_items_are_the_samplers_and_the_state_keys_torchdatas() -> None:
    sampler = et.ElasticBatchSampler(ep.PlanSpec(N, G, seed=7), B, rank=0, num_replicas=2)
    node = nodes.SamplerWrapper(sampler, initial_epoch=4)
    first = next(node)
    assert isinstance(first, et.WeightedIndices) and sampler.epoch == 4
    reference = et.ElasticBatchSampler(ep.PlanSpec(N, G, seed=7), B, rank=0, num_replicas=2)
    reference.set_epoch(4)
    assert first == next(iter(reference))
    state = node.state_dict()
    assert set(state) == set(tn.SamplerWrapper(reference).state_dict())
    assert state["_num_yielded"] == 1 and state["_epoch"] == 4
    node.reset()  # a started epoch: the next one
    assert node.epoch == 5 and sampler.epoch == 5
    node.reset()  # nothing taken: the same epoch
    assert node.epoch == 5
    custom = nodes.SamplerWrapper(sampler, epoch_updater=lambda e: e + 10)
    next(custom)
    custom.reset()
    assert custom.epoch == 10
    assert "ElasticBatchSampler" in repr(node)


def test_a_sampler_without_a_state_is_refused() -> None:
    with pytest.raises(TypeError, match="sampler must have"):
        nodes.SamplerWrapper(range(10))


def test_docstring_examples_run() -> None:
    result = doctest.testmod(nodes, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_import_epochplan_torch_does_not_import_torchdata() -> None:
    code = "import sys, epochplan, epochplan.torch; print('torchdata' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
