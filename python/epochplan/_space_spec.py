"""Index spaces written as JSON: what ``epochplan plan --space SPEC.json``
reads (the format is documented in ``docs/reference/space-files.md``).

A spec is one JSON object, one of::

    {"ranges": [[start, stop], ...], "num_samples": N}
    {"mask": "mask.npy"}                          a 1-d bool array
    {"indices": "ids.npy", "num_samples": N}      a 1-d integer array
    {"split": [0.9, 0.1], "part": 0, "num_samples": N, "seed": 0}
    {"mixture": [source, ...], "weights": [...], "num_samples": S, "seed": 0}

where a mixture's sources are all ints (dataset sizes) or all selection
specs, and it takes at most one of ``weights`` (with ``num_samples``),
``repeat`` and ``quotas``. Paths are relative to the spec file's directory.
Every error names the key it is about, from the spec's root (``spec['mixture'][1]['mask']``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from epochplan._files import map_npy, read_regular
from epochplan._native import Mixture, Selection, random_split

__all__ = ["MAX_SPEC_BYTES", "load_space", "space_from_spec", "split_space"]

#: The largest space spec read (a spec holds ranges or names .npy files; a
#: spec of millions of ranges takes tens of MB).
MAX_SPEC_BYTES = 256 << 20

_SELECTION_KEYS = {
    "ranges": {"ranges", "num_samples"},
    "mask": {"mask"},
    "indices": {"indices", "num_samples"},
    "split": {"split", "part", "num_samples", "seed"},
}
_MIXTURE_KEYS = {"mixture", "weights", "repeat", "quotas", "num_samples", "seed", "phases"}


def load_space(path: str | os.PathLike[str]) -> Selection | Mixture:
    """The space a JSON spec file describes."""
    path = Path(path)
    try:
        data = read_regular(path, MAX_SPEC_BYTES)
    except OSError as e:
        raise ValueError(f"cannot read the space spec {str(path)!r}: {e.strerror or e}") from None
    try:
        spec = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValueError(
            f"the space spec {str(path)!r} is not UTF-8 text ({e.reason} at byte {e.start})"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"the space spec {str(path)!r} is not JSON: {e}") from None
    except RecursionError:
        raise ValueError(f"the space spec {str(path)!r} is nested too deeply to read") from None
    try:
        return space_from_spec(spec, path.parent)
    except RecursionError:  # pragma: no cover - json refuses such depths first
        raise ValueError(f"the space spec {str(path)!r} is nested too deeply to read") from None


def space_from_spec(spec: Any, base: Path, where: str = "spec") -> Selection | Mixture:
    """The space of a parsed spec; relative paths are read from ``base``."""
    if not isinstance(spec, Mapping):
        raise TypeError(f"{where} must be a JSON object, got {_json_type(spec)}")
    if "mixture" in spec:
        return _mixture(spec, base, where)
    return _selection(spec, base, where)


def split_space(num_samples: int, fractions: list[float], part: int, seed: int) -> Selection:
    """Part ``part`` of ``random_split(num_samples, fractions, seed=seed)``
    (``--split 0.9,0.1 --part 0``)."""
    parts = random_split(num_samples, fractions, seed=seed)
    if isinstance(part, bool) or not isinstance(part, int) or not 0 <= part < len(parts):
        raise ValueError(f"part must be an int in [0, {len(parts) - 1}], got {part!r}")
    return parts[part]


def _selection(spec: Mapping[str, Any], base: Path, where: str) -> Selection:
    forms = [form for form in _SELECTION_KEYS if form in spec]
    if len(forms) != 1:
        names = ", ".join(repr(f) for f in (*_SELECTION_KEYS, "mixture"))
        got = ", ".join(repr(k) for k in spec) or "no key"
        raise ValueError(f"{where} must have exactly one of the keys {names}, got {got}")
    form = forms[0]
    _check_keys(spec, _SELECTION_KEYS[form], where)
    if form == "ranges":
        ranges = spec["ranges"]
        if not isinstance(ranges, list):
            raise TypeError(f"{where}['ranges'] must be a list of [start, stop] pairs")
        pairs = [tuple(r) if isinstance(r, list) else r for r in ranges]
        return Selection.from_ranges(pairs, _int(spec, "num_samples", where))
    if form == "mask":
        mask = _array(spec["mask"], base, f"{where}['mask']")
        if mask.dtype != np.bool_:
            raise TypeError(f"{where}['mask'] must hold a bool array, got dtype {mask.dtype}")
        return Selection.from_mask(mask)
    if form == "indices":
        ids = _array(spec["indices"], base, f"{where}['indices']")
        return Selection.from_indices(ids, _int(spec, "num_samples", where))
    fractions = spec["split"]
    if not isinstance(fractions, list):
        raise TypeError(f"{where}['split'] must be a list of fractions or sizes")
    return split_space(
        _int(spec, "num_samples", where),
        fractions,
        _int(spec, "part", where),
        _int(spec, "seed", where, default=0),
    )


def _mixture(spec: Mapping[str, Any], base: Path, where: str) -> Mixture:
    _check_keys(spec, _MIXTURE_KEYS, where)
    sources = spec["mixture"]
    if not isinstance(sources, list):
        raise TypeError(f"{where}['mixture'] must be a list of sources, got {_json_type(sources)}")
    # Ints and selections: the Mixture refuses sources of both kinds.
    given: list[Any] = [
        s if isinstance(s, int) else _selection_of(s, base, f"{where}['mixture'][{i}]")
        for i, s in enumerate(sources)
    ]
    rules = {k: spec[k] for k in ("weights", "repeat", "quotas", "num_samples") if k in spec}
    if "phases" in spec:
        phases = spec["phases"]
        if not isinstance(phases, list) or not all(
            isinstance(p, list) and len(p) == 2 for p in phases
        ):
            raise TypeError(
                f"{where}['phases'] must be a list of [start, values] pairs (a start is an "
                f"epoch or [epoch, position]), got {_json_type(phases)}"
            )
        # JSON has no tuples: a start [epoch, position] is the Mixture's pair.
        rules["phases"] = [
            (tuple(start) if isinstance(start, list) else start, values) for start, values in phases
        ]
    return Mixture(given, **rules, seed=_int(spec, "seed", where, default=0))


def _selection_of(spec: Any, base: Path, where: str) -> Selection:
    if isinstance(spec, Mapping) and "mixture" in spec:
        raise ValueError(f"{where} must be a selection: a mixture's sources cannot be mixtures")
    space = space_from_spec(spec, base, where)
    assert isinstance(space, Selection)
    return space


def _check_keys(spec: Mapping[str, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise ValueError(f"{where} has unknown keys {unknown}: this form takes {sorted(allowed)}")


def _int(spec: Mapping[str, Any], key: str, where: str, default: int | None = None) -> int:
    if key not in spec:
        if default is not None:
            return default
        raise ValueError(f"{where} is missing the key {key!r}")
    value = spec[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{where}[{key!r}] must be an int, got {_json_type(value)}")
    return value


def _array(value: Any, base: Path, where: str) -> np.ndarray:
    if not isinstance(value, str):
        raise TypeError(f"{where} must be the path of a .npy file, got {_json_type(value)}")
    path = base / value
    try:
        # Memory-mapped: a mask or id array of a large store is not read whole.
        array, _ = map_npy(path)
    except OSError as e:
        raise ValueError(
            f"{where}: cannot load {str(path)!r} as a .npy array: {e.strerror or e}"
        ) from None
    except ValueError as e:
        raise ValueError(f"{where}: cannot load {str(path)!r} as a .npy array: {e}") from None
    if array.ndim != 1:
        raise ValueError(f"{where} must be 1-d, got {array.ndim} dimensions in {str(path)!r}")
    return np.asarray(array)


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a bool", type(None): "null"}
    for kind, name in names.items():
        if isinstance(value, kind):
            return name
    return "a number" if isinstance(value, (int, float)) else type(value).__name__


def store_size(space: Selection | Mixture | None, num_samples: int) -> int:
    """The size of the store the space's ids index (its arrays of lengths
    have one value per store id): ``num_samples`` without a space."""
    if space is None:
        return num_samples
    if isinstance(space, Selection):
        return space.num_samples
    sources = space.sources
    if sources and isinstance(sources[0], Selection):
        return sources[0].num_samples
    return sum(space.sizes)
