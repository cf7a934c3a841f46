"""MosaicML Streaming's reference shuffles and partitions, loaded by file path.

``import streaming`` pulls in the whole package (cloud clients, torch, ...).
Its ``base.shuffle`` and ``base.partition`` sub-packages need only numpy, so
this module registers empty stand-ins for the parent packages and executes
the sub-package files directly. Tests call :func:`load_shuffle` or
:func:`load_partition`, which skip the test when mosaicml-streaming is absent.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

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
