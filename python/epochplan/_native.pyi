"""Type stubs of the Rust extension module (see rust/py)."""

import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any, overload

import numpy as np
import numpy.typing as npt

FORMAT_VERSION: int
MAX_SAMPLES: int
#: The largest seed or epoch (2**64 - 1).
MAX_SEED: int
#: The most threads set_num_threads takes.
MAX_THREADS: int
#: The order kinds the constructors accept.
KINDS: tuple[str, ...]
#: The algorithms of streaming_get_shuffle, in Streaming's order.
STREAMING_ALGOS: tuple[str, ...]

# The checks of every argument of the bindings, for the Python layer
# (rust/py/src/args.rs).
def _check_int(value: object, name: str, lo: int | None = None, hi: int | None = None) -> int: ...
def _check_bool(value: object, name: str) -> bool: ...

# Exceptions (rust/py/src/errors.rs): a plan file that is not what its manifest
# or plan says is a PlanError; one the system fails to open, read or write is
# also the OSError of the failure's kind, with errno, strerror and filename.
class PlanError(ValueError): ...
class PlanFileNotFoundError(PlanError, FileNotFoundError): ...
class PlanPermissionError(PlanError, PermissionError): ...
class PlanFileExistsError(PlanError, FileExistsError): ...
class PlanOSError(PlanError, OSError): ...

class Permutation:
    def __init__(
        self,
        num_samples: int | Selection,
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
    def selection(self) -> Selection | None: ...
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
def mark_ids(
    bitmap: npt.NDArray[np.uint64], ids: npt.NDArray[np.int64]
) -> npt.NDArray[np.int64]: ...
def scan_log(path: str) -> dict[str, Any]: ...
def gather_log_ids(
    path: str, id_offsets: npt.NDArray[np.uint64], id_counts: npt.NDArray[np.uint64]
) -> npt.NDArray[np.int64]: ...
def unmarked_ids(
    plan: EpochPlan, bitmap: npt.NDArray[np.uint64], start: int, end: int
) -> npt.NDArray[np.int64]: ...
def misplaced(
    plan: EpochPlan, ids: npt.NDArray[np.int64], steps: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
def get_num_threads() -> int: ...

MicroBatch = tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]

class PlanLayout:
    def __init__(
        self,
        num_samples: int,
        global_batch_size: int,
        *,
        drop_last: bool = False,
        cursor: int = 0,
    ) -> None: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def global_batch_size(self) -> int: ...
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
    def rank_size(self, rank: int, world_size: int) -> int: ...
    def num_micro_batches(self, step: int, world_size: int, micro_batch_size: int) -> int: ...
    def total_micro_batches(self, world_size: int, micro_batch_size: int) -> int: ...
    def rank_step_offset(self, step: int, rank: int, world_size: int) -> int: ...
    def filler_position(self, step: int, rank: int, world_size: int) -> int: ...
    def split_step(
        self,
        step: int,
        rank: int,
        world_size: int,
        micro_batch_size: int,
        ids: npt.ArrayLike,
        *,
        filler: int | None = None,
    ) -> list[MicroBatch]: ...
    def at_step(self, step: int) -> PlanLayout: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

class EpochPlan:
    def __init__(
        self,
        num_samples: int | Selection | Mixture | MixtureEpoch,
        global_batch_size: int,
        *,
        seed: int = 0,
        epoch: int = 0,
        kind: str = "cipher",
        drop_last: bool = False,
        cursor: int = 0,
        chunk_size: int | None = None,
        preload_nchunks: int | None = None,
        lengths: npt.ArrayLike | None = None,
        loss_tokens: npt.ArrayLike | None = None,
        cost: str | tuple[float, float] | None = "tokens",
        loss_normalization: str | None = None,
        max_length: int | None = None,
    ) -> None: ...
    @property
    def layout(self) -> PlanLayout: ...
    @property
    def lengths(self) -> npt.NDArray[np.integer[Any]] | None: ...
    @property
    def max_length(self) -> int | None: ...
    def oversize(self, max_tokens: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    @property
    def loss_tokens(self) -> npt.NDArray[np.integer[Any]] | None: ...
    @property
    def cost(self) -> str | tuple[float, float] | None: ...
    @property
    def loss_normalization(self) -> str: ...
    def step_tokens(self, step: int) -> int: ...
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
    def sources(self, step: int, rank: int, world_size: int) -> npt.NDArray[np.int64]: ...
    @property
    def space(self) -> Selection | MixtureEpoch | None: ...
    def rank_indices(self, rank: int, world_size: int) -> npt.NDArray[np.int64]: ...
    def rank_size(self, rank: int, world_size: int) -> int: ...
    def num_micro_batches(
        self,
        step: int,
        world_size: int,
        micro_batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> int: ...
    def total_micro_batches(
        self, world_size: int, micro_batch_size: int | None = None, *, max_tokens: int | None = None
    ) -> int: ...
    def step_micro_batches(
        self,
        step: int,
        rank: int,
        world_size: int,
        micro_batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> list[MicroBatch]: ...
    def split_step(
        self,
        step: int,
        rank: int,
        world_size: int,
        micro_batch_size: int | None,
        ids: npt.ArrayLike,
        *,
        max_tokens: int | None = None,
    ) -> list[MicroBatch]: ...
    def rank_step_offset(self, step: int, rank: int, world_size: int) -> int: ...
    def micro_batches(
        self,
        rank: int,
        world_size: int,
        micro_batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> MicroBatches: ...
    def at_step(self, step: int) -> EpochPlan: ...
    def positions_of(self, sample_ids: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def locate(
        self,
        sample_ids: npt.ArrayLike,
        world_size: int,
        micro_batch_size: int | None = None,
        *,
        max_tokens: int | None = None,
    ) -> tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
    ]: ...
    def state_dict(self) -> dict[str, Any]: ...
    @classmethod
    def from_state_dict(
        cls,
        state: dict[str, Any],
        *,
        space: Selection | Mixture | MixtureEpoch | None = None,
        lengths: npt.ArrayLike | None = None,
        loss_tokens: npt.ArrayLike | None = None,
    ) -> EpochPlan: ...

class MicroBatches:
    def __iter__(self) -> MicroBatches: ...
    def __next__(self) -> list[MicroBatch]: ...
    def __len__(self) -> int: ...

# Plan files (rust/py/src/planfile.rs). ``plan`` is a dict with the keys
# num_samples, global_batch_size, seed, epoch, kind, chunk_size,
# preload_nchunks and drop_last.
def npy_header(count: int) -> bytes: ...
def npy_file_size(count: int) -> int: ...
def write_epoch_files(
    paths: list[str],
    world_size: int,
    plan: dict[str, Any],
    *,
    fsync: bool = True,
    progress: Callable[[int], object] | None = None,
    display_paths: list[str] | None = None,
    space: Selection | Mixture | MixtureEpoch | None = None,
    ranks: list[int] | None = None,
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
    compare_ids: bool = False,
    space: Selection | Mixture | MixtureEpoch | None = None,
    ranks: list[int] | None = None,
) -> bool: ...
def map_ids(path: str, offset: int, count: int) -> npt.NDArray[np.int64]: ...
def file_checksum(path: str | os.PathLike[str]) -> str: ...

# Token plans in plan files (rust/py/src/token_files.rs).
class TokenDealer:
    def __init__(
        self,
        plan: dict[str, Any],
        world_size: int,
        lengths: Any,
        loss_tokens: Any = None,
        cost: str | tuple[float, float] | None = None,
        loss_normalization: str | None = None,
        *,
        micro_batch_size: int | None = None,
        max_tokens: int | None = None,
        space: Selection | Mixture | MixtureEpoch | None = None,
    ) -> None: ...
    def digests(self) -> tuple[str, str | None]: ...
    def write_files(
        self,
        ids: list[str],
        offsets: list[str],
        lengths: list[str],
        loss_tokens: list[str] | None,
        steps: str,
        *,
        fsync: bool = True,
        progress: Callable[[int], object] | None = None,
    ) -> tuple[list[tuple[int, int, str]], list[tuple[int, int, str]]]: ...

def verify_token_epoch(
    plan: dict[str, Any],
    world_size: int,
    ids: list[tuple[str, int, int, str]],
    offsets: list[tuple[str, int, int, str]],
    lengths_files: list[tuple[str, int, int, str]],
    loss_files: list[tuple[str, int, int, str]] | None,
    steps: tuple[str, int, int, str],
    *,
    directory: str,
    cost: str | tuple[float, float] | None = None,
    loss_normalization: str | None = None,
    micro_batch_size: int | None = None,
    max_tokens: int | None = None,
    space: Selection | Mixture | MixtureEpoch | None = None,
    lengths: Any = None,
    loss_tokens: Any = None,
    progress: Callable[[int], object] | None = None,
) -> Exception | None: ...
def token_cuts(
    lengths: npt.ArrayLike,
    micro_batches: int,
    micro_batch_size: int | None = None,
    max_tokens: int | None = None,
) -> tuple[npt.NDArray[np.int64], int]: ...
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

# megatron-core's dataset indices (rust/py/src/megatron.rs); the arrays come
# typed and contiguous from epochplan.compat.megatron.
def megatron_sample_idx(
    sizes: npt.NDArray[np.int32],
    document_idx: npt.NDArray[np.int32],
    seq_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool,
    add_extra_token_to_sequence: int,
    int64: bool,
) -> npt.NDArray[Any]: ...
def megatron_tokens_per_epoch(
    sequence_lengths: npt.NDArray[np.int32], indices: npt.NDArray[np.int32]
) -> int: ...
def megatron_document_index(
    documents: npt.NDArray[np.int32],
    num_epochs: int,
    key: npt.NDArray[np.uint32],
    pos: int,
    separate_final_epoch: bool,
) -> tuple[npt.NDArray[np.int32], npt.NDArray[np.uint32], int]: ...
def megatron_shuffle_index(
    num_samples: int, total_size: int, key: npt.NDArray[np.uint32], pos: int
) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint32], int]: ...
def megatron_blending_indices(
    dataset_index: npt.NDArray[np.int16],
    dataset_sample_index: npt.NDArray[np.int64],
    weights: npt.NDArray[np.float64],
    num_datasets: int,
    size: int,
) -> None: ...
def megatron_exhaustive_blending_indices(
    dataset_index: npt.NDArray[np.int16],
    dataset_sample_index: npt.NDArray[np.int64],
    sizes: npt.NDArray[np.int64],
    num_datasets: int,
) -> None: ...

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

# Hooks only the tests use (rust/py/src/testing.rs), in the submodule
# ``epochplan._native._testing``.
class _Testing:
    @staticmethod
    def file_checksum(path: str | os.PathLike[str]) -> str: ...
    @staticmethod
    def _np_seed_pool(seed: int) -> list[int]: ...
    @staticmethod
    def _np_generate_state(seed: int, n_words: int) -> list[int]: ...
    @staticmethod
    def _np_pcg64_state(seed: int) -> tuple[int, int]: ...
    @staticmethod
    def _np_run(seed: int, ops: list[tuple[Any, ...]]) -> list[npt.NDArray[Any]]: ...
    @staticmethod
    def _np_sort_by_keys(keys: list[float], samples: list[int]) -> npt.NDArray[np.int64]: ...

_testing: _Testing

# Index spaces (rust/py/src/space.rs).
class Selection:
    @classmethod
    def from_ranges(
        cls, ranges: Iterable[tuple[int, int] | slice], num_samples: int
    ) -> Selection: ...
    @classmethod
    def from_mask(cls, mask: npt.ArrayLike) -> Selection: ...
    @classmethod
    def from_indices(cls, ids: npt.ArrayLike, num_samples: int) -> Selection: ...
    @property
    def num_samples(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def ranges(self) -> list[tuple[int, int]] | None: ...
    @property
    def split_part(self) -> tuple[int, int, int] | None: ...
    def __len__(self) -> int: ...
    def __contains__(self, value: object) -> bool: ...
    @overload
    def __getitem__(self, key: int | np.integer[Any]) -> int: ...
    @overload
    def __getitem__(self, key: slice | npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    @overload
    def take(self, positions: int | np.integer[Any]) -> np.int64: ...
    @overload
    def take(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def to_mask(self) -> npt.NDArray[np.bool_]: ...
    def __array__(self, dtype: Any = None, copy: Any = None) -> npt.NDArray[Any]: ...
    def __and__(self, other: Selection) -> Selection: ...
    def __or__(self, other: Selection) -> Selection: ...
    def __sub__(self, other: Selection) -> Selection: ...
    def __invert__(self) -> Selection: ...
    def __eq__(self, other: object) -> bool: ...
    def __hash__(self) -> int: ...

def random_split(
    num_samples: int, sizes_or_fractions: Sequence[int] | Sequence[float], *, seed: int = 0
) -> list[Selection]: ...

class Mixture:
    def __init__(
        self,
        sources: Sequence[int] | Sequence[Selection],
        *,
        weights: Sequence[float] | None = None,
        repeat: Sequence[float] | None = None,
        quotas: Sequence[int] | None = None,
        num_samples: int | None = None,
        seed: int = 0,
        phases: Sequence[tuple[int, Sequence[float] | Sequence[int]]] | None = None,
    ) -> None: ...
    @property
    def quotas(self) -> list[int]: ...
    @property
    def phases(self) -> list[tuple[int, list[int]]]: ...
    def quotas_at(self, epoch: int) -> list[int]: ...
    @property
    def sizes(self) -> list[int]: ...
    @property
    def sources(self) -> list[int] | list[Selection]: ...
    @property
    def seed(self) -> int: ...
    def __len__(self) -> int: ...
    def epoch(self, epoch: int = 0, consumed: Sequence[int] | None = None) -> MixtureEpoch: ...

class MixtureEpoch:
    @property
    def epoch(self) -> int: ...
    @property
    def mixture(self) -> Mixture: ...
    @property
    def quotas(self) -> list[int]: ...
    @property
    def consumed(self) -> list[int]: ...
    @property
    def consumed_after(self) -> list[int]: ...
    def __len__(self) -> int: ...
    @overload
    def __getitem__(self, key: int | np.integer[Any]) -> int: ...
    @overload
    def __getitem__(self, key: slice | npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    @overload
    def take(self, positions: int | np.integer[Any]) -> np.int64: ...
    @overload
    def take(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def sources(self, positions: npt.ArrayLike) -> npt.NDArray[np.int64]: ...
    def __array__(self, dtype: Any = None, copy: Any = None) -> npt.NDArray[Any]: ...
