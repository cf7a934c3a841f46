"""Loads MosaicML Streaming's partition functions from the installed package.

``streaming/__init__.py`` imports torch-heavy modules. Only
``streaming/base/partition/`` is needed here, and it needs only numpy, so its
three files are loaded by path under stub parent packages that exist only
while loading (the real ``streaming`` package stays importable afterwards).
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

PARTITION_PACKAGE = "streaming.base.partition"


def _partition_dir() -> Path | None:
    try:
        spec = importlib.util.find_spec("streaming")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for root in spec.submodule_search_locations:
        path = Path(root) / "base" / "partition"
        if (path / "__init__.py").is_file() and (path / "orig.py").is_file():
            return path
    return None


def _version() -> str | None:
    try:
        from importlib.metadata import version

        return version("mosaicml-streaming")
    except Exception:
        return None


def load() -> tuple[Callable[..., Any] | None, str]:
    """Returns (Streaming's get_partitions, a description) or (None, why not)."""
    path = _partition_dir()
    if path is None:
        return None, "mosaicml-streaming is not installed (streaming/base/partition not found)"
    saved = {name: sys.modules.get(name) for name in ("streaming", "streaming.base")}
    added = [PARTITION_PACKAGE, PARTITION_PACKAGE + ".orig", PARTITION_PACKAGE + ".relaxed"]
    saved.update({name: sys.modules.get(name) for name in added})
    try:
        for name, sub in (("streaming", path.parent.parent), ("streaming.base", path.parent)):
            stub = types.ModuleType(name)
            stub.__path__ = [str(sub)]
            sys.modules[name] = stub
        spec = importlib.util.spec_from_file_location(
            PARTITION_PACKAGE,
            path / "__init__.py",
            submodule_search_locations=[str(path)],
        )
        if spec is None or spec.loader is None:
            return None, f"cannot load {path / '__init__.py'}"
        module = importlib.util.module_from_spec(spec)
        sys.modules[PARTITION_PACKAGE] = module
        spec.loader.exec_module(module)
        func = module.get_partitions
    except Exception as exc:
        return None, f"cannot load Streaming's partition module from {path}: {exc!r}"
    finally:
        for name, old in saved.items():
            if old is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = old
    return func, f"mosaicml-streaming {_version()} ({path})"


get_partitions_ref, REF_INFO = load()
