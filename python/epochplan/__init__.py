"""epochplan: which sample every rank of a data-parallel job sees at every step.

A permutation with O(1) random access, and epoch plans that are exact (every
sample once), equal-step (every rank the same number of steps and
micro-batches), elastic (the same global batches for any world size) and
resumable, computed in Rust.
"""

from epochplan._native import (
    FORMAT_VERSION,
    MAX_SAMPLES,
    EpochPlan,
    MicroBatches,
    Permutation,
    get_num_threads,
    permutation,
    set_num_threads,
)
from epochplan._split import split
from epochplan._types import MicroBatch
from epochplan._version import __version__ as __version__
from epochplan._workers import worker_shard

__all__ = [
    "FORMAT_VERSION",
    "MAX_SAMPLES",
    "EpochPlan",
    "MicroBatch",
    "MicroBatches",
    "Permutation",
    "get_num_threads",
    "permutation",
    "set_num_threads",
    "split",
    "worker_shard",
]
