"""Shuffled training batches from a parquet file, reading each row group once per epoch.

What it shows: ``epochplan.torch.ChunkSampler(num_rows, global_batch_size,
Chunked(chunk_size, preload_nchunks))`` over parquet row groups. The
sampler visits the chunks (here: row groups of ``chunk_size`` rows) in a keyed
random order and shuffles the samples of each window of ``preload_nchunks``
consecutive chunks among themselves. The loader below reads a window's row
groups with one ``pq.ParquetFile.read_row_groups`` call when the training loop
reaches it, serves the window's micro-batches from memory and drops it when
the loop has moved past it. The batches are still random, the plan is still
exact, equal-step and elastic, and the file is read sequentially in large
pieces instead of row by row.

How to run it (needs torch and pyarrow: ``pip install 'epochplan[examples]'``):

    python examples/chunked_parquet.py
    python examples/chunked_parquet.py --num-rows 20000 --chunk-size 500 --preload-nchunks 8

It writes a parquet file of ``--num-rows`` rows in row groups of
``--chunk-size`` rows to a temporary directory (removed at the end), then runs
``--epochs`` epochs on ``--world-size`` ranks simulated in one process (one
sampler and one loader per rank; in a real job each rank builds its own, with
the rank and world size from ``torch.distributed``). It checks, and prints,
that every rank reads each row group exactly once per epoch, that every row
read is the row asked for, and that over the ranks every row is in exactly
one step of the epoch with a non-zero weight. It exits 1 if a check fails.

Each rank reads every window (its share of a step is spread over the step's
positions), so W ranks read the file W times per epoch: a window is what a
rank holds in memory, ``preload_nchunks`` row groups (two windows while a step
crosses from one to the next, when the global batch is at most a window).
Choosing the sizes: docs/guides/chunked-storage.md.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
import torch

import epochplan as ep
from epochplan.torch import ChunkSampler, WeightedIndices


def write_parquet(path: Path, num_rows: int, chunk_size: int) -> None:
    """Rows ``id`` (0..num_rows-1) and ``x = sqrt(id)``, in row groups of ``chunk_size`` rows."""
    ids = np.arange(num_rows, dtype=np.int64)
    table = pa.table({"id": ids, "x": np.sqrt(ids)})
    pq.write_table(table, path, row_group_size=chunk_size)


@dataclass(frozen=True)
class Batch:
    """One micro-batch of a rank: the rows' columns and their loss weights."""

    ids: torch.Tensor  # the sampler's sample ids (= the rows' positions in the file)
    row_id: torch.Tensor  # the "id" column of the rows read
    x: torch.Tensor  # the "x" column
    sample_weight: torch.Tensor  # 0 for the fillers that keep micro-batch counts equal
    step: int
    step_end: bool


class ParquetWindowLoader:
    """Serves one rank's micro-batches, reading one preload window of row groups at a time.

    Step ``t`` of the plan covers positions ``[t*G, (t+1)*G)`` of the epoch's
    ``chunked`` order; window ``k`` covers positions ``[k*C*P, (k+1)*C*P)``
    (C = chunk_size, P = preload_nchunks, the row count a multiple of C) and
    holds whole chunks. So before a step the loader loads the windows it
    overlaps, reading exactly their row groups, and drops the earlier ones.
    ``epochplan.Permutation`` gives a window's ids (random access, O(window)).
    """

    def __init__(self, path: Path, sampler: ChunkSampler) -> None:
        self.file = pq.ParquetFile(path)
        self.sampler = sampler
        meta = self.file.metadata
        sizes = {meta.row_group(i).num_rows for i in range(meta.num_row_groups)}
        if sizes != {sampler.plan.chunk_size}:
            raise ValueError(f"row groups of {sizes} rows: chunk_size must be their size")
        self.row_group_reads = np.zeros(self.file.num_row_groups, dtype=np.int64)
        self.max_resident = 0  # the most row groups held at once
        # window -> the row groups read for it (ascending) and their rows, in that order
        self._windows: dict[int, tuple[npt.NDArray[np.int64], pa.Table]] = {}
        self._start = np.full(self.file.num_row_groups, -1, dtype=np.int64)
        self._resident: dict[str, npt.NDArray[np.generic]] = {}

    def __iter__(self) -> Iterator[Batch]:
        plan = self.sampler.plan
        assert plan.chunk_size is not None and plan.preload_nchunks is not None
        self.row_group_reads[:] = 0
        self._windows.clear()
        order = ep.Permutation(
            plan.num_samples,
            seed=plan.seed,
            epoch=plan.epoch,
            kind=ep.Chunked(plan.chunk_size, plan.preload_nchunks),
        )
        window = plan.chunk_size * plan.preload_nchunks
        g, n = plan.global_batch_size, plan.num_samples
        for indices in self.sampler:
            first = indices.step * g // window
            last = (min((indices.step + 1) * g, n) - 1) // window
            if set(self._windows) != set(range(first, last + 1)):
                for w in [w for w in self._windows if w < first]:
                    del self._windows[w]
                for w in range(first, last + 1):
                    if w not in self._windows:
                        lo, hi = w * window, min((w + 1) * window, n)
                        row_groups = np.unique(order[lo:hi] // plan.chunk_size)
                        table = self.file.read_row_groups(row_groups.tolist())
                        self._windows[w] = (row_groups, table)
                        self.row_group_reads[row_groups] += 1
                self._index_resident(plan.chunk_size)
            yield self._batch(indices, plan.chunk_size)

    def _index_resident(self, chunk_size: int) -> None:
        """One array per column over the loaded windows, and where each row group starts."""
        windows = [self._windows[w] for w in sorted(self._windows)]
        table = pa.concat_tables([t for _, t in windows])
        self._resident = {name: table.column(name).to_numpy() for name in ("id", "x")}
        row_groups = np.concatenate([rg for rg, _ in windows])  # in the table's order
        self._start[:] = -1
        self._start[row_groups] = np.arange(len(row_groups)) * chunk_size
        self.max_resident = max(self.max_resident, len(row_groups))

    def _batch(self, indices: WeightedIndices, chunk_size: int) -> Batch:
        ids = np.asarray(indices, dtype=np.int64)
        start = self._start[ids // chunk_size]
        if (start < 0).any():
            raise RuntimeError(f"ids {ids[start < 0]} are outside the loaded windows")
        rows = start + ids % chunk_size
        return Batch(
            ids=torch.from_numpy(ids),
            row_id=torch.from_numpy(self._resident["id"][rows]),
            x=torch.from_numpy(self._resident["x"][rows]),
            sample_weight=torch.as_tensor(indices.weights),
            step=indices.step,
            step_end=indices.step_end,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--num-rows", type=int, default=2400)
    parser.add_argument("--chunk-size", type=int, default=100, help="rows per row group")
    parser.add_argument("--preload-nchunks", type=int, default=4, help="row groups per window")
    parser.add_argument("--batch-size", type=int, default=64, help="global: over all ranks")
    parser.add_argument("--world-size", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.num_rows % args.chunk_size:
        parser.error("--num-rows must be a multiple of --chunk-size (whole row groups)")

    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "data.parquet"
        write_parquet(path, args.num_rows, args.chunk_size)
        print(
            f"wrote {path.name}: {args.num_rows} rows, "
            f"{pq.ParquetFile(path).num_row_groups} row groups of {args.chunk_size}",
            flush=True,
        )
        loaders = [
            ParquetWindowLoader(
                path,
                ChunkSampler(
                    args.num_rows,
                    args.batch_size,  # the global batch, over all ranks
                    ep.Chunked(args.chunk_size, args.preload_nchunks),
                    seed=args.seed,
                    rank=rank,
                    num_replicas=args.world_size,  # in a real job: from torch.distributed
                ),
            )
            for rank in range(args.world_size)
        ]
        for epoch in range(args.epochs):
            counts = torch.zeros(args.num_rows, dtype=torch.int64)
            for rank, loader in enumerate(loaders):
                loader.sampler.set_epoch(epoch)
                micro_batches, right_rows = 0, True
                for batch in loader:
                    # A training step would use batch.x with (sample_weight * loss).sum().
                    right_rows &= torch.equal(batch.row_id, batch.ids)
                    counts[batch.ids[batch.sample_weight > 0]] += 1
                    micro_batches += 1
                read_once = bool((loader.row_group_reads == 1).all())
                ok &= read_once and right_rows
                print(
                    f"epoch {epoch} rank {rank}: {micro_batches} micro-batches, "
                    f"{int(loader.row_group_reads.sum())} row group reads, "
                    f"each row group once: {read_once}, right rows: {right_rows}, "
                    f"at most {loader.max_resident} row groups in memory",
                    flush=True,
                )
            once = bool((counts == 1).all())
            ok &= once
            print(
                f"epoch {epoch}: {args.world_size} ranks, {int(counts.sum())} of "
                f"{args.num_rows} rows, each once: {once}",
                flush=True,
            )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
