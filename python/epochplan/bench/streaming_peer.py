"""MosaicML Streaming, loaded from its installed files as ``epochplan bench``'s
peer: the import lines its cases run, and its way to mix sources.

``import streaming`` runs the package's ``__init__``, which pulls in cloud
clients and more; the sub-packages the benchmarks call need numpy (and
torch for its batching), so the parent packages are stood in for by empty
modules over their directories.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

# Loads MosaicML Streaming's partition and shuffle sub-packages without running
# streaming/__init__.py (which imports torch-heavy modules): the parent
# packages are registered as empty namespace modules over their directories.
STREAMING_STUBS = """
import importlib, importlib.util, pathlib, sys, types
_root = pathlib.Path(importlib.util.find_spec("streaming").origin).parent
for _name, _dir in (("streaming", _root), ("streaming.base", _root / "base")):
    _m = types.ModuleType(_name)
    _m.__path__ = [str(_dir)]
    sys.modules[_name] = _m
"""


def streaming_mixture_epoch(
    sizes: list[int], quotas: list[int], *, ranks: int, batch_size: int, seed: int = 1
) -> Callable[[], Any]:
    """MosaicML Streaming's way to mix sources: a call that builds the epoch
    every node of a ``StreamingDataset`` builds for streams of ``sizes``
    samples (concatenated, in shards of 10,000 samples or fewer) whose
    ``choose`` are ``quotas``, on one node of ``ranks`` ranks, in its
    defaults: ``random`` batching, balanced sampling at granularity 1, py1e,
    the relaxed partition and one canonical node. The epoch is an array
    (nodes, ranks, workers, batches, batch) with -1 for padding.

    Loaded from its installed files without running the package's
    ``__init__`` (cloud clients and more): ``generate_work_random_batching``
    (whose module imports torch), and ``StreamingDataset.resample_streams``,
    the method it calls on the dataset, compiled alone from
    ``base/dataset.py`` (whose module imports the whole package; the method
    needs numpy and ``get_sampling`` only) and called on an object holding
    the dataset's attributes.
    """
    import ast
    import importlib
    import math
    import types
    import typing

    import numpy as np
    from numpy.typing import NDArray

    exec(STREAMING_STUBS, {})
    random_batching = importlib.import_module("streaming.base.batching.random")
    sampling = importlib.import_module("streaming.base.sampling")
    path = Path(str(sampling.__file__)).parent / "dataset.py"
    tree = ast.parse(path.read_text(), str(path))
    method = next(
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "StreamingDataset"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "resample_streams"
    )
    names: dict[str, Any] = {
        "np": np,
        "NDArray": NDArray,
        "Optional": typing.Optional,
        "get_sampling": sampling.get_sampling,
    }
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), names)
    shard = math.gcd(10_000, *sizes)
    shards = np.array([size // shard for size in sizes], np.int64)
    samples_per_shard = np.full(int(shards.sum()), shard, np.int64)
    dataset = types.SimpleNamespace(
        num_streams=len(sizes),
        streams=[types.SimpleNamespace(choose=q) for q in quotas],
        shards_per_stream=shards,
        shard_offset_per_stream=np.cumsum(shards) - shards,
        samples_per_shard=samples_per_shard,
        sample_offset_per_shard=np.cumsum(samples_per_shard) - samples_per_shard,
        sampling_method="balanced",
        sampling_granularity=1,
        epoch_seed_change=True,
        shuffle=True,
        shuffle_seed=seed,
        shuffle_algo="py1e",
        shuffle_block_size=4_000_000,  # its default for one canonical node
        partition_algo="relaxed",
        num_canonical_nodes=1,
        initial_physical_nodes=None,
        batch_size=batch_size,
        epoch_size=sum(quotas),
    )
    dataset.resample_streams = lambda epoch: names["resample_streams"](dataset, epoch)
    world = types.SimpleNamespace(num_nodes=1, ranks_per_node=ranks, workers_per_rank=1)
    return lambda: random_batching.generate_work_random_batching(dataset, world, 0, 0)
