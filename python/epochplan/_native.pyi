"""Type stubs of the Rust extension module (see rust/py)."""

import os
from collections.abc import Callable
from typing import Any, overload

import numpy as np
import numpy.typing as npt

FORMAT_VERSION: int
MAX_SAMPLES: int

class Permutation:
    def __init__(
        self,
        num_samples: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        kind: str = "cipher",
        chunk_size: int | None = None,
        preload_nchunks: int | None = None,
    ) -> None: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def chunk_size(self) -> int | None: ...
    @property
    def preload_nchunks(self) -> int | None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, key: Any) -> Any: ...
    @overload
    def take(self, positions: int | np.integer[Any]) -> np.int64: ...
    @overload
    def take(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def __array__(self, dtype: Any = None, copy: Any = None) -> npt.NDArray[Any]: ...

def permutation(
    num_samples: int,
    *,
    seed: int = 0,
    epoch: int = 0,
    kind: str = "uniform",
    chunk_size: int | None = None,
    preload_nchunks: int | None = None,
) -> npt.NDArray[np.int64]: ...
def split_range(
    num_samples: int, world_size: int, rank: int, mode: str | None = None
) -> tuple[int, int, int]: ...
def set_num_threads(num_threads: int) -> None: ...
def get_num_threads() -> int: ...

MicroBatch = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]

class EpochPlan:
    def __init__(
        self,
        num_samples: int,
        global_batch_size: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        kind: str = "cipher",
        drop_last: bool = False,
        cursor: int = 0,
        chunk_size: int | None = None,
        preload_nchunks: int | None = None,
    ) -> None: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def global_batch_size(self) -> int: ...
    @property
    def seed(self) -> int: ...
    @property
    def epoch(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def chunk_size(self) -> int | None: ...
    @property
    def preload_nchunks(self) -> int | None: ...
    @property
    def drop_last(self) -> bool: ...
    @property
    def cursor(self) -> int: ...
    @property
    def num_steps(self) -> int: ...
    @property
    def start_step(self) -> int: ...
    @property
    def remaining_steps(self) -> int: ...
    def step_size(self, step: int) -> int: ...
    def step_indices(self, step: int, rank: int, world_size: int) -> npt.NDArray[np.int64]: ...
    def rank_indices(self, rank: int, world_size: int) -> npt.NDArray[np.int64]: ...
    def rank_size(self, rank: int, world_size: int) -> int: ...
    def num_micro_batches(self, step: int, world_size: int, micro_batch_size: int) -> int: ...
    def total_micro_batches(self, world_size: int, micro_batch_size: int) -> int: ...
    def step_micro_batches(
        self, step: int, rank: int, world_size: int, micro_batch_size: int
    ) -> list[MicroBatch]: ...
    def split_step(
        self, step: int, rank: int, world_size: int, micro_batch_size: int, ids: npt.ArrayLike
    ) -> list[MicroBatch]: ...
    def rank_step_offset(self, step: int, rank: int, world_size: int) -> int: ...
    def micro_batches(self, rank: int, world_size: int, micro_batch_size: int) -> MicroBatches: ...
    def at_step(self, step: int) -> EpochPlan: ...
    def state_dict(self) -> dict[str, Any]: ...
    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> EpochPlan: ...

class MicroBatches:
    def __iter__(self) -> MicroBatches: ...
    def __next__(self) -> list[MicroBatch]: ...
    def __len__(self) -> int: ...

# Plan files (rust/py/src/planfile.rs). ``plan`` is a dict with the keys
# num_samples, global_batch_size, seed, epoch, kind, chunk_size,
# preload_nchunks and drop_last.
def npy_header(count: int) -> bytes: ...
def npy_file_size(count: int) -> int: ...
def file_checksum(path: str | os.PathLike[str]) -> str: ...
def write_epoch_files(
    paths: list[str],
    world_size: int,
    plan: dict[str, Any],
    *,
    fsync: bool = True,
    progress: Callable[[int], object] | None = None,
) -> list[tuple[int, int, str]]: ...
def verify_epoch_files(
    paths: list[str],
    counts: list[int],
    sizes: list[int],
    checksums: list[str],
    world_size: int,
    plan: dict[str, Any],
    *,
    progress: Callable[[int], object] | None = None,
) -> None: ...
def check_plan_file(
    path: str,
    count: int,
    size: int,
    checksum: str,
    *,
    progress: Callable[[int], object] | None = None,
) -> None: ...

# Streaming's shuffles (rust/py/src/streaming_shuffle.rs).
def streaming_get_shuffle(
    algo: str,
    shard_sizes: npt.ArrayLike,
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int,
) -> tuple[npt.NDArray[np.int64], bool]: ...
def _np_seed_pool(seed: int) -> list[int]: ...
def _np_generate_state(seed: int, n_words: int) -> list[int]: ...
def _np_pcg64_state(seed: int) -> tuple[int, int]: ...
def _np_run(seed: int, ops: list[tuple[Any, ...]]) -> list[npt.NDArray[Any]]: ...
def _np_sort_by_keys(keys: list[float], samples: list[int]) -> npt.NDArray[np.int64]: ...

# Streaming's partitions (rust/py/src/streaming_partition.rs); they warn and
# log as Streaming does.
def streaming_partitions(
    algo: str,
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int,
    initial_physical_nodes: int | None = None,
) -> npt.NDArray[np.int64]: ...
def streaming_partition_part(
    algo: str,
    num_samples: int,
    num_canonical_nodes: int,
    num_physical_nodes: int,
    ranks_per_node: int,
    workers_per_rank: int,
    batch_size: int,
    drop_first: int,
    initial_physical_nodes: int | None = None,
    *,
    node: int,
    rank: int,
) -> npt.NDArray[np.int64]: ...
