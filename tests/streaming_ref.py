"""MosaicML Streaming's reference shuffles, partitions and stream mixing,
loaded by file path.

``import streaming`` pulls in the whole package (cloud clients, torch, ...).
Its ``base.shuffle`` and ``base.partition`` sub-packages need only numpy, so
this module registers empty stand-ins for the parent packages and executes
the sub-package files directly. Tests call :func:`load_shuffle` or
:func:`load_partition`, which skip the test when mosaicml-streaming is absent.
Benchmarks of mixtures call :func:`load_mixing`: Streaming's epoch of a
mixture of streams (its ``random`` batching, which needs torch too).
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

_PARENTS = ("streaming", "streaming.base")


def _streaming_root() -> Path | None:
    spec = importlib.machinery.PathFinder.find_spec("streaming")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    return root if (root / "base").is_dir() else None


def _load_package(name: str) -> types.ModuleType:
    """Imports ``streaming.base.<name>`` without running the package's ``__init__``."""
    full = f"streaming.base.{name}"
    if full in sys.modules:
        return sys.modules[full]
    root = _streaming_root()
    if root is None or not (root / "base" / name / "__init__.py").is_file():
        pytest.skip(f"mosaicml-streaming is not installed: cannot load {full}")
    for parent, where in zip(_PARENTS, (root, root / "base"), strict=True):
        if parent not in sys.modules:
            stub = types.ModuleType(parent)
            stub.__path__ = [str(where)]
            # A real spec keeps importlib.util.find_spec working for later callers.
            stub.__spec__ = importlib.machinery.ModuleSpec(parent, None, is_package=True)
            stub.__spec__.submodule_search_locations = [str(where)]
            sys.modules[parent] = stub
    spec = importlib.util.spec_from_file_location(
        full,
        root / "base" / name / "__init__.py",
        submodule_search_locations=[str(root / "base" / name)],
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[full] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[full]
        raise
    return module


def load_shuffle() -> types.ModuleType:
    """``streaming.base.shuffle`` (``get_shuffle`` and the per-algorithm modules)."""
    return _load_package("shuffle")


def load_partition() -> types.ModuleType:
    """``streaming.base.partition`` (``get_partitions``)."""
    return _load_package("partition")


def load_mixing() -> tuple[Callable[..., Any], Callable[..., Any]]:
    """Streaming's epoch of a mixture of streams: ``generate_work_random_batching``
    (its default batching: resample the streams, partition, shuffle, map) and
    ``StreamingDataset.resample_streams``, the method it calls on the dataset.

    The method is compiled alone from ``base/dataset.py``, whose module imports
    the whole package; it needs numpy and ``get_sampling`` only, so a benchmark
    can call it on a plain object holding the dataset's attributes.
    """
    batching = _load_package("batching")
    sampling = importlib.import_module("streaming.base.sampling")
    root = _streaming_root()
    assert root is not None  # _load_package skipped otherwise
    path = root / "base" / "dataset.py"
    tree = ast.parse(path.read_text(), str(path))
    method = next(
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "StreamingDataset"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == "resample_streams"
    )
    import numpy as np
    from numpy.typing import NDArray

    names: dict[str, Any] = {
        "np": np,
        "NDArray": NDArray,
        "Optional": __import__("typing").Optional,
        "get_sampling": sampling.get_sampling,
    }
    exec(compile(ast.Module(body=[method], type_ignores=[]), str(path), "exec"), names)
    return batching.generate_work_random_batching, names["resample_streams"]
