"""Type stubs of the Rust extension module (see rust/py)."""

from typing import Any

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
    num_samples: int, world_size: int, rank: int, mode: str = "strided"
) -> tuple[int, int, int]: ...
def set_num_threads(num_threads: int) -> None: ...
def get_num_threads() -> int: ...

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
    drop_first: int = 0,
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
    drop_first: int = 0,
    initial_physical_nodes: int | None = None,
    *,
    node: int,
    rank: int,
) -> npt.NDArray[np.int64]: ...
