"""Migrating from MosaicML Streaming's sample partitioning to epochplan, in two steps.

What it shows:

1. Before: Streaming's partitioner and shuffle decide which sample each
   node, rank and worker reads::

       from streaming.base.partition import get_partitions
       from streaming.base.shuffle import get_shuffle

       parts = get_partitions("orig", num_samples, num_canonical_nodes, num_physical_nodes,
                              ranks_per_node, workers_per_rank, batch_size)
       order = get_shuffle("py1e", shard_sizes, num_canonical_nodes, seed, epoch)
       ids = np.where(parts == -1, -1, order[parts])   # what StreamingDataset serves

2. Drop-in: change the import only. ``epochplan.compat.streaming`` has the
   same signatures and returns the same arrays, bit for bit, computed in Rust
   (and ``get_partition_part`` gives one rank's part without building the
   rest)::

       from epochplan.compat.streaming import get_partitions, get_shuffle

   When mosaicml-streaming is installed (``pip install --no-deps
   mosaicml-streaming==0.13.0`` is enough: only its numpy-only partition and
   shuffle files are loaded, by path, as Streaming's package ``__init__``
   imports torch and cloud clients), the script checks that both outputs
   equal Streaming's own, element for element.

3. Elastic: ``epochplan.EpochPlan`` is epochplan's own plan. Streaming's
   ``batch_size`` is per rank, so its global batch must be a multiple of the
   world size (and canonical and physical node counts must divide one
   another), and it repeats samples to fill the last batches. An
   ``EpochPlan`` takes any global batch on any number of ranks, gives every
   sample exactly once, and its global steps do not depend on the world size:
   the script checks that 8 and 7 ranks see the same global steps with a
   global batch of 60, which Streaming cannot split over 8 or 7 ranks. The
   order is epochplan's own, not Streaming's: switch at an epoch boundary.

How to run it:

    python examples/migrate_from_streaming.py
    python examples/migrate_from_streaming.py --num-samples 100000 --global-batch-size 1000

It prints one line per check and exits 1 if one fails. The guide:
docs/guides/migrate-streaming.md.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

import epochplan as ep
from epochplan.compat.streaming import get_partition_part, get_partitions, get_shuffle


def load_streaming(subpackage: str) -> types.ModuleType | None:
    """``streaming.base.<subpackage>`` loaded from its files, or None when not installed.

    ``import streaming`` runs the package's ``__init__`` (torch, cloud clients,
    ...); the ``partition`` and ``shuffle`` sub-packages need only numpy, so
    empty stand-ins are registered for the parent packages and the
    sub-package is executed from its path.
    """
    spec = importlib.machinery.PathFinder.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    init = root / "base" / subpackage / "__init__.py"
    if not init.is_file():
        return None
    for name, where in (("streaming", root), ("streaming.base", root / "base")):
        if name not in sys.modules:
            stub = types.ModuleType(name)
            stub.__path__ = [str(where)]
            sys.modules[name] = stub
    full = f"streaming.base.{subpackage}"
    module_spec = importlib.util.spec_from_file_location(
        full, init, submodule_search_locations=[str(init.parent)]
    )
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[full] = module
    module_spec.loader.exec_module(module)
    return module


def global_steps(parts: npt.NDArray[np.int64]) -> list[list[int]]:
    """The sorted sample ids of each global step of a Streaming partition.

    ``parts`` has the shape (physical nodes, ranks per node, workers per rank,
    batches per worker, batch size); a rank's DataLoader takes its workers'
    batches in turn, and a global step is every rank's next batch (-1 is
    padding, dropped).
    """
    workers, per_worker = parts.shape[2], parts.shape[3]
    steps = []
    for i in range(workers * per_worker):
        ids = parts[:, :, i % workers, i // workers].reshape(-1)
        if (ids >= 0).any():  # a batch of padding only is never served
            steps.append(sorted(ids[ids >= 0].tolist()))
    return steps


def plan_steps(plan: ep.EpochPlan, world_size: int) -> list[list[int]]:
    """The sorted sample ids of each remaining global step of ``plan`` on ``world_size`` ranks."""
    return [
        sorted(
            np.concatenate(
                [plan.step_indices(step, rank, world_size) for rank in range(world_size)]
            ).tolist()
        )
        for step in range(plan.start_step, plan.num_steps)
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-samples", type=int, default=10_000)
    parser.add_argument("--shard-size", type=int, default=500, help="samples per shard")
    parser.add_argument("--num-canonical-nodes", type=int, default=8)
    parser.add_argument("--workers-per-rank", type=int, default=2)
    parser.add_argument(
        "--streaming-global-batch", type=int, default=56, help="a multiple of 8 and 7"
    )
    parser.add_argument("--global-batch-size", type=int, default=60, help="for the EpochPlan")
    parser.add_argument("--seed", type=int, default=9176)
    parser.add_argument("--epoch", type=int, default=0)
    args = parser.parse_args(argv)
    if args.streaming_global_batch % 56:
        parser.error("--streaming-global-batch must be a multiple of 56 (8 and 7 ranks)")
    n = args.num_samples
    shard_sizes = [args.shard_size] * (n // args.shard_size)
    if n % args.shard_size:
        shard_sizes.append(n % args.shard_size)
    ok = True

    # Step 1 -> 2: the same calls, now from epochplan.compat.streaming.
    ref_partition, ref_shuffle = load_streaming("partition"), load_streaming("shuffle")
    outputs: dict[int, npt.NDArray[np.int64]] = {}
    for world in (8, 7):
        call = (
            "orig",
            n,
            args.num_canonical_nodes,
            1,  # num_physical_nodes
            world,  # ranks_per_node
            args.workers_per_rank,
            args.streaming_global_batch // world,  # Streaming's batch_size is per rank
        )
        parts = get_partitions(*call)
        outputs[world] = parts
        # One rank's part alone, as that rank needs it: the same array.
        part = get_partition_part(*call, node=0, rank=world - 1)
        part_same = np.array_equal(part, parts[0, world - 1])
        ok &= part_same
        line = f"get_partitions, {world} ranks: last rank's part alone the same: {part_same}"
        if ref_partition is not None:
            same = np.array_equal(parts, ref_partition.get_partitions(*call))
            ok &= same
            line += f", equal to Streaming's: {same}"
        print(line, flush=True)
    order = get_shuffle("py1e", shard_sizes, args.num_canonical_nodes, args.seed, args.epoch)
    if ref_shuffle is not None:
        same = np.array_equal(
            order,
            ref_shuffle.get_shuffle(
                "py1e", shard_sizes, args.num_canonical_nodes, args.seed, args.epoch
            ),
        )
        ok &= same
        print(f"get_shuffle py1e: equal to Streaming's: {same}", flush=True)
    else:
        print("mosaicml-streaming is not installed: the comparison is skipped", flush=True)
    # Streaming's own elasticity: the same global batch (56 = 7 a rank on 8 ranks, 8 on 7)
    # gives the same global steps, but for the last one, padded per rank (-1 or repeats).
    steps_s8, steps_s7 = global_steps(outputs[8]), global_steps(outputs[7])
    steps_equal = sum(a == b for a, b in zip(steps_s8, steps_s7, strict=False))
    repeated = {w: int((np.bincount(p[p >= 0], minlength=n) > 1).sum()) for w, p in outputs.items()}
    print(
        f"Streaming, global batch {args.streaming_global_batch}: {steps_equal} of "
        f"{max(len(steps_s8), len(steps_s7))} global steps the same on 8 and 7 ranks, "
        f"samples repeated: {repeated[8]} on 8 ranks, {repeated[7]} on 7",
        flush=True,
    )
    # What StreamingDataset serves on 8 ranks: the shuffled ids, every one at least once.
    ids = np.where(outputs[8] == -1, -1, order[outputs[8]])
    assert np.array_equal(np.unique(ids[ids >= 0]), np.arange(n))

    # Step 3: epochplan's own elastic plan, any global batch, any number of ranks.
    plan = ep.EpochPlan(n, args.global_batch_size, seed=args.seed, epoch=args.epoch)
    steps8, steps7 = plan_steps(plan, 8), plan_steps(plan, 7)
    same = steps8 == steps7
    seen = np.bincount(np.concatenate([np.asarray(s, dtype=np.int64) for s in steps8]))
    once = len(seen) == n and bool((seen == 1).all())
    # Equal steps: in every step, every rank has as many micro-batches (of at most 4) as
    # the others, so DDP never waits for a rank that has run out.
    layouts = {tuple(len(step) for step in plan.micro_batches(rank, 7, 4)) for rank in range(7)}
    equal = len(layouts) == 1
    ok &= same and once and equal
    print(
        f"EpochPlan, global batch {args.global_batch_size}: {plan.num_steps} steps, "
        f"same global steps on 8 and 7 ranks: {same}, each sample once: {once}, "
        f"equal micro-batch counts on 7 ranks: {equal}",
        flush=True,
    )
    # A resume state has no world size in it: saved on 8 ranks, loaded on 7.
    state = plan.at_step(3).state_dict()  # JSON-serialisable, constant size
    resumed = ep.EpochPlan.from_state_dict(state)
    rest = plan_steps(resumed, 7)
    ok &= rest == steps8[3:]
    print(
        f"saved at step 3, resumed on 7 ranks: {len(rest)} steps left, "
        f"the same as on 8 ranks: {rest == steps8[3:]}",
        flush=True,
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
