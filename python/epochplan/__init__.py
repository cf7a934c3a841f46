"""epochplan: which sample every rank of a data-parallel job sees at every step.

A permutation with O(1) random access, and epoch plans that are exact (every
sample once), equal-step (every rank the same number of steps and
micro-batches), elastic (the same global batches for any world size) and
resumable, computed in Rust.
"""

from epochplan._native import (
    FORMAT_VERSION,
    MAX_SAMPLES,
    Permutation,
    get_num_threads,
    permutation,
    set_num_threads,
)
from epochplan._split import split

__all__ = [
    "FORMAT_VERSION",
    "MAX_SAMPLES",
    "Permutation",
    "get_num_threads",
    "permutation",
    "set_num_threads",
    "split",
]
__version__ = "0.1.0"
