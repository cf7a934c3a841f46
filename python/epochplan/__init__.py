"""epochplan: which sample every rank of a data-parallel job sees at every step.

A permutation with O(1) random access, and epoch plans that are exact (every
sample once), equal-step (every rank the same number of steps and
micro-batches), elastic (the same global batches for any world size) and
resumable, computed in Rust.

The names below, ``__version__`` too, are loaded on first use, so that
``import epochplan`` imports nothing: neither numpy and the native module
nor ``typing`` and ``importlib.metadata``. The ``epochplan`` command runs
this module before it can handle signals, so a Ctrl-C there would print a
traceback.
"""

from __future__ import annotations

# typing.TYPE_CHECKING without importing typing (type checkers take the name).
TYPE_CHECKING = False

if TYPE_CHECKING:
    from typing import Any

    from epochplan._native import (
        FORMAT_VERSION,
        MAX_SAMPLES,
        Chunked,
        EpochPlan,
        MicroBatches,
        Mixture,
        MixtureEpoch,
        Permutation,
        PlanLayout,
        PlanSpec,
        RankPlan,
        Selection,
        Tokens,
        get_num_threads,
        permutation,
        random_split,
        set_num_threads,
    )
    from epochplan._oversize import OversizeReport
    from epochplan._space_spec import load_space
    from epochplan._split import split
    from epochplan._types import MicroBatch
    from epochplan._version import __version__ as __version__
    from epochplan._workers import worker_shard

# Each public name and the module that defines it.
_HOMES = {
    "__version__": "epochplan._version",
    "FORMAT_VERSION": "epochplan._native",
    "MAX_SAMPLES": "epochplan._native",
    "Chunked": "epochplan._native",
    "EpochPlan": "epochplan._native",
    "MicroBatches": "epochplan._native",
    "Mixture": "epochplan._native",
    "MixtureEpoch": "epochplan._native",
    "Permutation": "epochplan._native",
    "PlanLayout": "epochplan._native",
    "PlanSpec": "epochplan._native",
    "RankPlan": "epochplan._native",
    "Selection": "epochplan._native",
    "Tokens": "epochplan._native",
    "get_num_threads": "epochplan._native",
    "permutation": "epochplan._native",
    "random_split": "epochplan._native",
    "set_num_threads": "epochplan._native",
    "OversizeReport": "epochplan._oversize",
    "load_space": "epochplan._space_spec",
    "split": "epochplan._split",
    "MicroBatch": "epochplan._types",
    "worker_shard": "epochplan._workers",
}

__all__ = [
    "FORMAT_VERSION",
    "MAX_SAMPLES",
    "Chunked",
    "EpochPlan",
    "MicroBatch",
    "MicroBatches",
    "Mixture",
    "MixtureEpoch",
    "OversizeReport",
    "Permutation",
    "PlanLayout",
    "PlanSpec",
    "RankPlan",
    "Selection",
    "Tokens",
    "get_num_threads",
    "load_space",
    "permutation",
    "random_split",
    "set_num_threads",
    "split",
    "worker_shard",
]


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'epochplan' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups do not come here
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__, "__version__"})
