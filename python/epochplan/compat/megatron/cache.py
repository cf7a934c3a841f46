"""A whole megatron-core index cache, written offline.

:func:`write_cache` reads Megatron's indexed datasets (the ``.idx`` of each
``.bin/.idx`` prefix) and builds every index that
``BlendedMegatronDatasetBuilder`` would build for the same blend, split,
sizes and config: each ``GPTDataset``'s document, sample and shuffle indices
and each ``BlendedDataset``'s dataset and dataset sample indices. Each is
saved under Megatron's own name (the md5 of its unique description, the
class, the split and the index) with its ``description.txt``, so that
megatron-core, pointed at the directory (``path_to_cache``), loads every
index and builds none. Each file is written under a temporary name and
renamed into place: a file is complete or absent.

Megatron's unique description includes the tokenizer's
``unique_identifiers``: pass them as they are (a mapping), for instance
``{"class": "megatron.core.tokenizers.text.libraries.null_tokenizer.NullTokenizer"}``.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import itertools
import json
import os
import re
import struct
import tempfile
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from epochplan.compat.megatron.blended_dataset import (
    DEFAULT_SURPLUS,
    build_blended_indices,
    get_size_per_split_per_dataset,
    normalize,
)
from epochplan.compat.megatron.gpt_dataset import build_gpt_indices

__all__ = ["SPLITS", "IndexedDatasetIndex", "read_index", "split_matrix", "write_cache"]

#: Megatron's splits, in order.
SPLITS = ("train", "valid", "test")

_HEADER = b"MMIDIDX\x00\x00"
_DTYPE_CODES = range(1, 9)


@dataclass(frozen=True)
class IndexedDatasetIndex:
    """What the cache needs of an ``.idx`` file: its path and the token
    count of each sequence (int32)."""

    path: Path
    sequence_lengths: npt.NDArray[np.int32]

    def __repr__(self) -> str:
        return f"IndexedDatasetIndex({str(self.path)!r}, sequences={len(self.sequence_lengths)})"


def read_index(prefix: str | os.PathLike[str]) -> IndexedDatasetIndex:
    """Reads ``prefix.idx`` (Megatron's indexed-dataset index, version 1)
    and checks that ``prefix.bin`` exists.

    Raises:
        FileNotFoundError: ``prefix.idx`` or ``prefix.bin`` is missing.
        ValueError: The ``.idx`` is truncated, of another format or version,
            or of an unknown token dtype; the message names the file.
    """
    idx = Path(f"{os.fspath(prefix)}.idx")
    binary = Path(f"{os.fspath(prefix)}.bin")
    for path in (idx, binary):
        if not path.is_file():
            raise FileNotFoundError(
                errno.ENOENT, "no such file (a blend source needs its .idx and .bin)", str(path)
            )
    size = idx.stat().st_size
    with idx.open("rb") as f:
        head = f.read(34)
    if len(head) < 34:
        raise ValueError(f"{idx}: truncated: {size} bytes, shorter than the 34-byte header")
    if head[:9] != _HEADER:
        raise ValueError(f"{idx}: not a Megatron indexed-dataset index (bad magic)")
    (version,) = struct.unpack("<Q", head[9:17])
    if version != 1:
        raise ValueError(f"{idx}: unknown index version {version} (Megatron reads version 1)")
    if head[17] not in _DTYPE_CODES:
        raise ValueError(f"{idx}: unknown token dtype code {head[17]}")
    sequences, documents = struct.unpack("<QQ", head[18:34])
    need = 34 + sequences * (4 + 8) + documents * 8
    if size < need:
        raise ValueError(
            f"{idx}: truncated: {size} bytes, its header announces {sequences} sequences "
            f"and {documents} document offsets ({need} bytes)"
        )
    # Read, not mapped: the lengths start at byte 34, unaligned for int32.
    lengths = np.fromfile(idx, dtype=np.int32, count=sequences, offset=34)
    return IndexedDatasetIndex(idx, lengths)


def split_matrix(split: str) -> list[tuple[float, float] | None]:
    """Megatron's ``split_matrix`` of a split string such as ``"969,30,1"``:
    the normalized ``[start, end)`` fraction of each split, None when empty.
    Computed with Megatron's operations, so the floats (and their JSON) are
    the same."""
    parts = [float(x) for x in re.findall(r"[.0-9]+", split)]
    parts += [0.0] * (len(SPLITS) - len(parts))
    if len(parts) != len(SPLITS) or any(p < 0 for p in parts) or sum(parts) <= 0:
        raise ValueError(f"split must be up to three non-negative weights, got {split!r}")
    vector = normalize_split(parts)
    ends: list[float] = functools.reduce(lambda a, b: [*a, a[-1] + b], vector, [0])
    matrix: list[tuple[float, float] | None] = []
    for lo, hi in itertools.pairwise(ends):
        matrix.append(None if hi <= lo else (lo, hi))
    return matrix


def normalize_split(parts: Sequence[float]) -> list[float]:
    """Megatron's ``normalize`` of a split vector (zeros allowed)."""
    w = np.array(parts, dtype=np.float64)
    out: list[float] = (w / np.sum(w)).tolist()
    return out


def _description(identifiers: Mapping[str, Any]) -> tuple[str, str]:
    text = json.dumps(identifiers, indent=4)
    return text, hashlib.md5(text.encode("utf-8"), usedforsecurity=False).hexdigest()


def _publish(path: Path, content: bytes | np.ndarray) -> None:
    """Writes ``content`` (an array as ``numpy.save`` writes it) to ``path``
    under a temporary name in its directory, then renames it into place."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            if isinstance(content, bytes):
                f.write(content)
            else:
                np.save(f, content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _save(cache: Path, base: str, description: str, arrays: Mapping[str, np.ndarray]) -> None:
    for name, array in arrays.items():
        _publish(cache / f"{base}-{name}.npy", array)
    # The description last: with it every index of the dataset is in place.
    _publish(cache / f"{base}-description.txt", description.encode("utf-8"))


@dataclass(frozen=True)
class _Config:
    """The config attributes the indices and their descriptions depend on."""

    random_seed: int
    sequence_length: int
    split: str | None
    split_matrix: list[tuple[float, float] | None] | None
    tokenizer: dict[str, Any]
    add_extra_token_to_sequence: bool
    drop_last_partial_validation_sequence: bool


@dataclass
class _GPT:
    identifiers: OrderedDict[str, Any]
    num_samples: int


def _gpt_dataset(
    cache: Path,
    prefix: str,
    index: IndexedDatasetIndex,
    split_id: int,
    bounds: tuple[float, float],
    num_samples: int | None,
    config: _Config,
) -> _GPT:
    count = index.sequence_lengths.shape[0]
    beg, end = round(bounds[0] * float(count)), round(bounds[1] * float(count))
    if end <= beg:
        raise ValueError(f"{index.path}: the {SPLITS[split_id]} split holds no documents")
    identifiers: OrderedDict[str, Any] = OrderedDict(
        [
            ("class", "GPTDataset"),
            ("dataset_path", prefix),
            ("num_samples", num_samples),
            ("index_split", SPLITS[split_id]),
            ("random_seed", config.random_seed),
            ("sequence_length", config.sequence_length),
            ("split", config.split),
            ("split_matrix", config.split_matrix),
            ("tokenizer", config.tokenizer),
        ]
    )
    description, md5 = _description(identifiers)
    drop_last = SPLITS[split_id] != "valid" or config.drop_last_partial_validation_sequence
    indices = build_gpt_indices(
        index.sequence_lengths,
        np.arange(beg, end, dtype=np.int32),
        num_samples,
        config.sequence_length,
        config.random_seed,
        add_extra_token_to_sequence=config.add_extra_token_to_sequence,
        drop_last_partial_sequence=drop_last,
    )
    _save(
        cache,
        f"{md5}-GPTDataset-{SPLITS[split_id]}",
        description,
        {
            "document_index": indices.document_index,
            "sample_index": indices.sample_index,
            "shuffle_index": indices.shuffle_index,
        },
    )
    return _GPT(identifiers, indices.sample_index.shape[0] - 1)


def _blend_split(
    cache: Path,
    sources: Sequence[tuple[str, IndexedDatasetIndex]],
    weights: list[float] | None,
    split_id: int,
    bounds: tuple[float, float],
    size: int | None,
    config: _Config,
    surplus: float,
) -> None:
    """One split of a blend: each source's GPTDataset, then the
    BlendedDataset over them, as the builder makes them."""
    if weights is not None:
        if size is None:
            raise ValueError(f"a weighted blend needs a size for the {SPLITS[split_id]} split")
        target = [t for [t] in get_size_per_split_per_dataset(weights, [size])]
        buffer = [b for [b] in get_size_per_split_per_dataset(weights, [size], surplus)]
    parts = [
        _gpt_dataset(
            cache, prefix, index, split_id, bounds, None if weights is None else buffer[k], config
        )
        for k, (prefix, index) in enumerate(sources)
    ]
    # The weights BlendedDataset is given; it normalizes them (again) when
    # it has a size, and its description holds what it blends with.
    given: list[float] | list[int]
    blend_size: int | None
    if weights is not None:
        given = weights
        blend_size = sum(int(t or 0) for t in target)
    else:
        given = [p.num_samples for p in parts]
        blend_size = None if size is None else min(size, sum(given))
    blend_weights = given if blend_size is None else normalize(given)
    dataset_index, dataset_sample_index = build_blended_indices(given, blend_size)
    taken = np.bincount(dataset_index, minlength=len(parts))
    for k, part in enumerate(parts):
        if taken[k] > part.num_samples:
            raise ValueError(
                f"the {SPLITS[split_id]} blend takes {taken[k]} samples from {sources[k][0]}, "
                f"which has {part.num_samples}: raise mid_level_dataset_surplus"
            )
    identifiers = OrderedDict(
        [
            ("class", "BlendedDataset"),
            ("datasets", [p.identifiers for p in parts]),
            ("split", SPLITS[split_id]),
            ("weights", blend_weights),
            ("size", blend_size),
        ]
    )
    description, md5 = _description(identifiers)
    _save(
        cache,
        f"{md5}-BlendedDataset-{SPLITS[split_id]}",
        description,
        {"dataset_index": dataset_index, "dataset_sample_index": dataset_sample_index},
    )


Blend = Sequence[str] | tuple[Sequence[str], Sequence[float] | None]


def _parse_blend(blend: Blend, name: str) -> tuple[list[str], list[float] | None]:
    if isinstance(blend, tuple):
        prefixes = [str(p).strip() for p in blend[0]]
        weights = None if blend[1] is None else [float(w) for w in blend[1]]
    else:
        prefixes, weights = [str(p).strip() for p in blend], None
    if not prefixes:
        raise ValueError(f"{name} must name at least one prefix")
    if weights is not None and len(weights) != len(prefixes):
        raise ValueError(f"{name} must give one weight per prefix")
    return prefixes, weights


def write_cache(
    path_to_cache: str | os.PathLike[str],
    blend: Blend | None,
    split: str | None,
    sizes: Sequence[int | None],
    *,
    sequence_length: int,
    random_seed: int,
    tokenizer: Mapping[str, Any],
    mid_level_dataset_surplus: float = DEFAULT_SURPLUS,
    add_extra_token_to_sequence: bool = True,
    drop_last_partial_validation_sequence: bool = True,
    blend_per_split: Sequence[Blend | None] | None = None,
) -> list[Path]:
    """Writes the index cache megatron-core's GPT builder would write.

    Args:
        path_to_cache: The cache directory (``config.path_to_cache``,
            Megatron-LM's ``--data-cache-path``); created if missing.
        blend: The prefixes, or ``(prefixes, weights)`` as
            ``config.blend`` (weights None: blend by the datasets' lengths);
            None with ``blend_per_split``.
        split: ``config.split``, e.g. ``"969,30,1"``; None with
            ``blend_per_split``.
        sizes: Samples of the train, valid and test blends (None: one epoch).
        sequence_length: ``config.sequence_length``.
        random_seed: ``config.random_seed``.
        tokenizer: The tokenizer's ``unique_identifiers``.
        mid_level_dataset_surplus: ``config.mid_level_dataset_surplus``.
        add_extra_token_to_sequence: ``config.add_extra_token_to_sequence``.
        drop_last_partial_validation_sequence: as the config's.
        blend_per_split: ``config.blend_per_split``: a blend (or None) for
            each of train, valid and test, each split's sources whole.

    Returns:
        The description files of the directory, one per dataset.

    Raises:
        FileNotFoundError: A blend source's ``.idx`` or ``.bin`` is missing.
        ValueError: A bad ``.idx`` (named), split, size or weight.
    """
    if len(sizes) != len(SPLITS):
        raise ValueError(f"sizes must give the train, valid and test sizes, got {list(sizes)}")
    per_split = blend_per_split is not None
    if per_split and (blend is not None or split is not None):
        raise ValueError("blend_per_split excludes blend and split")
    if not per_split and (blend is None or split is None):
        raise ValueError("give blend and split, or blend_per_split")
    if per_split and len(blend_per_split or ()) != len(SPLITS):
        raise ValueError("blend_per_split must give a blend (or None) for train, valid and test")
    config = _Config(
        random_seed,
        sequence_length,
        split,
        None if split is None else split_matrix(split),
        dict(tokenizer),
        add_extra_token_to_sequence,
        drop_last_partial_validation_sequence,
    )
    blends = (
        [None if b is None else _parse_blend(b, "blend_per_split") for b in blend_per_split or ()]
        if per_split
        else [_parse_blend(blend, "blend")] * len(SPLITS)  # type: ignore[arg-type]
    )
    indexes = {p: read_index(p) for b in blends if b is not None for p in b[0]}
    cache = Path(path_to_cache)
    cache.mkdir(parents=True, exist_ok=True)
    for i in range(len(SPLITS)):
        parsed = blends[i]
        bounds = (0.0, 1.0) if per_split else (config.split_matrix or [None] * 3)[i]
        if parsed is None or bounds is None:
            continue
        prefixes, weights = parsed
        # One source alone is a GPTDataset without a blend (with a blend
        # per split, even a weighted one).
        if len(prefixes) == 1 and (per_split or weights is None):
            _gpt_dataset(cache, prefixes[0], indexes[prefixes[0]], i, bounds, sizes[i], config)
            continue
        _blend_split(
            cache,
            [(p, indexes[p]) for p in prefixes],
            None if weights is None else normalize(weights),
            i,
            bounds,
            sizes[i],
            config,
            mid_level_dataset_surplus,
        )
    return sorted(cache.glob("*-description.txt"))
