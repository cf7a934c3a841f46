"""Smoke test of an installed epochplan: a wheel, or a build of the sdist.

Run by .ci/wheel_smoke.sh with the Python of a fresh virtual environment,
from outside the checkout, so that only the installed package can be
imported. Each check asserts a property of the result (a permutation, exact
coverage, equal steps, the same global batches on any world size), not only
that the code ran.

    python .ci/wheel_smoke.py            # the core: no torch
    python .ci/wheel_smoke.py --torch    # and the torch samplers in a DataLoader
"""

from __future__ import annotations

import argparse
import sys
import sysconfig
from pathlib import Path

import numpy as np


def check_installed() -> None:
    """epochplan and its native module come from this environment's site-packages."""
    import epochplan
    from epochplan import _native

    site = Path(sysconfig.get_paths()["platlib"]).resolve()
    for module in (epochplan, _native):
        path = Path(str(module.__file__)).resolve()
        assert site in path.parents, f"{module.__name__} is imported from {path}, not {site}"
    assert Path(str(_native.__file__)).name == "_native.abi3.so", _native.__file__
    assert "torch" not in sys.modules, "import epochplan imported torch"
    print(f"epochplan {epochplan.__version__} from {site}")


def check_permutation() -> None:
    import epochplan as ep

    n = 1_000_003
    p = ep.Permutation(n, seed=7)
    order = np.asarray(p)
    assert len(p) == n and order.dtype == np.int64
    assert np.array_equal(np.sort(order), np.arange(n)), "Permutation is not a bijection"
    positions = np.array([0, 1, n // 2, n - 1])
    assert np.array_equal(p.take(positions), order[positions]), "take() disagrees with the array"
    assert int(p[n - 1]) == int(order[-1])
    assert np.array_equal(np.asarray(ep.Permutation(n, seed=7)), order), "not deterministic"
    assert not np.array_equal(np.asarray(ep.Permutation(n, seed=7, epoch=1)), order)
    u = ep.permutation(10_000, seed=3)
    assert np.array_equal(np.sort(u), np.arange(10_000)), "permutation() is not a bijection"
    print(f"permutation: {n} ids, a bijection, deterministic, a new order per epoch")


def step_ids(plan: object, step: int, world_size: int, micro_batch_size: int) -> np.ndarray:
    """The ids of one global step (zero-weight fillers left out), checking the weights."""
    ids, total_weight, counts = [], 0.0, []
    for rank in range(world_size):
        batches = plan.step_micro_batches(step, rank, world_size, micro_batch_size)  # type: ignore[attr-defined]
        counts.append(len(batches))
        for batch_ids, weights in batches:
            ids.append(np.asarray(batch_ids)[np.asarray(weights) > 0])
            total_weight += float(np.sum(weights))
    assert len(set(counts)) == 1, f"step {step}: micro-batches per rank differ: {counts}"
    assert np.isclose(total_weight, world_size), f"step {step}: weights sum to {total_weight}"
    return np.concatenate(ids)


def check_epoch_plan() -> None:
    import epochplan as ep

    n, g, b = 10_007, 64, 8
    plan = ep.EpochPlan(n, g, seed=1)
    seen = []
    for step in range(plan.num_steps):
        two, three = step_ids(plan, step, 2, b), step_ids(plan, step, 3, b)
        assert np.array_equal(np.sort(two), np.sort(three)), f"step {step} depends on world size"
        seen.append(two)
    everything = np.sort(np.concatenate(seen))
    assert np.array_equal(everything, np.arange(n)), "the plan does not cover every sample once"
    ranks = [plan.rank_indices(r, 3) for r in range(3)]
    assert np.array_equal(np.sort(np.concatenate(ranks)), np.arange(n))
    print(f"EpochPlan: {n} samples in {plan.num_steps} steps, each once, the same on 2 and 3 ranks")


def check_torch() -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from epochplan import PlanSpec
    from epochplan.torch import DistributedSampler, ElasticBatchSampler, ExactDistributedSampler

    n, world = 1_003, 4
    dataset = TensorDataset(torch.arange(n))

    def ids(sampler: object) -> list[int]:
        loader = DataLoader(dataset, batch_size=16, sampler=sampler)  # type: ignore[arg-type]
        return [int(x) for (batch,) in loader for x in batch]

    ranks = [DistributedSampler(dataset, num_replicas=world, rank=r, seed=5) for r in range(world)]
    assert all(isinstance(s, torch.utils.data.DistributedSampler) for s in ranks)
    per_rank = -(-n // world)
    first = [ids(s) for s in ranks]
    assert all(len(x) == per_rank for x in first), "ranks differ in length"
    flat = [i for x in first for i in x]
    assert set(flat) == set(range(n)) and len(flat) == per_rank * world
    for s in ranks:
        s.set_epoch(1)
    assert [ids(s) for s in ranks] != first, "set_epoch did not reshuffle"

    exact = [ids(ExactDistributedSampler(dataset, num_replicas=3, rank=r)) for r in range(3)]
    assert sorted(i for x in exact for i in x) == list(range(n)), "not every sample exactly once"

    seen: list[int] = []
    lengths = []
    for rank in range(world):
        spec = PlanSpec(len(dataset), global_batch_size=64)
        sampler = ElasticBatchSampler(spec, micro_batch_size=8, rank=rank, num_replicas=world)
        loader = DataLoader(
            sampler.wrap_dataset(dataset), batch_sampler=sampler, collate_fn=sampler.collate()
        )
        batches = list(loader)
        lengths.append(len(batches))
        for batch in batches:
            (x,) = batch.data
            assert torch.equal(x, batch.indices), "the data are not the planned samples"
            seen += [int(i) for i, w in zip(x, batch.sample_weight, strict=True) if w > 0]
    assert len(set(lengths)) == 1, f"micro-batches per rank differ: {lengths}"
    assert sorted(seen) == list(range(n)), "ElasticBatchSampler does not cover every sample once"
    print(f"torch {torch.__version__}: DistributedSampler, ExactDistributedSampler and")
    print(f"  ElasticBatchSampler in a DataLoader: {n} samples on {world} ranks, each once")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torch", action="store_true", help="also test the torch samplers")
    args = parser.parse_args()
    check_installed()
    check_permutation()
    check_epoch_plan()
    if args.torch:
        check_torch()
    print("wheel smoke test: ok")


if __name__ == "__main__":
    main()
