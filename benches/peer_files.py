"""Peers' files loaded by path for the token benchmarks (``bench_tokens.py``,
``bench_packing.py``), their packages' ``__init__`` and dependencies kept
out: stand-ins for the few names a file imports are registered while it
loads and removed after (:func:`load_with_stubs`).

verl's sequence-length balancing (``verl/utils/seqlen_balancing.py``; ``pip
install --no-deps verl==0.9.1``, it needs torch) imports three verl names
that its balancing and cutting functions do not need in one process
(``DataProto``, ``tensordict_utils.index_select_tensor_dict`` and
``device.get_device_name``)."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

VERL_PIN = "verl==0.9.1"


def load_with_stubs(path: Path, name: str, stubs: dict[str, types.ModuleType]) -> Any:
    """The module of the file at ``path``, loaded as ``name`` while
    ``stubs`` stand in ``sys.modules`` for what it imports (restored after)."""
    import importlib.util

    saved = {stub: sys.modules.get(stub) for stub in stubs}
    sys.modules.update(stubs)
    try:
        file_spec = importlib.util.spec_from_file_location(name, path)
        assert file_spec is not None and file_spec.loader is not None
        module = importlib.util.module_from_spec(file_spec)
        file_spec.loader.exec_module(module)
    finally:
        for stub, old in saved.items():
            if old is None:
                sys.modules.pop(stub, None)
            else:
                sys.modules[stub] = old
    return module


def find_verl() -> tuple[Path | None, str]:
    """The path of verl's ``seqlen_balancing.py`` and verl's version, without
    importing anything; ``None`` and the reason when verl or torch is missing."""
    import importlib.machinery
    import importlib.util
    from importlib.metadata import PackageNotFoundError, version

    try:
        info = f"verl {version('verl')}"
    except PackageNotFoundError:
        return None, f"verl is not installed (pip install --no-deps {VERL_PIN})"
    spec = importlib.machinery.PathFinder.find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        return None, "verl is installed but its package directory was not found"
    path = Path(next(iter(spec.submodule_search_locations))) / "utils" / "seqlen_balancing.py"
    if not path.is_file():
        return None, f"{info} has no {path}"
    if importlib.util.find_spec("torch") is None:
        return None, f"{info} needs torch, which is not installed"
    return path, info


def load_verl() -> tuple[Any, str]:
    """verl's ``seqlen_balancing`` module, loaded by file path, and its version;
    ``None`` and the reason when verl or torch is missing."""

    path, info = find_verl()
    if path is None:
        return None, info

    stubs = {
        name: types.ModuleType(name)
        for name in ("verl", "verl.protocol", "verl.utils", "verl.utils.tensordict_utils")
    }
    stubs["verl.utils.device"] = types.ModuleType("verl.utils.device")
    stubs["verl.protocol"].DataProto = object  # type: ignore[attr-defined]
    stubs["verl.utils"].tensordict_utils = stubs["verl.utils.tensordict_utils"]  # type: ignore[attr-defined]
    stubs["verl.utils.tensordict_utils"].index_select_tensor_dict = (  # type: ignore[attr-defined]
        lambda batch, indices: indices
    )
    stubs["verl.utils.device"].get_device_name = lambda: "cpu"  # type: ignore[attr-defined]
    module = load_with_stubs(path, "_verl_seqlen_balancing", stubs)
    return module, info
