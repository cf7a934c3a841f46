"""The indices of megatron-core's ``BlendedDataset`` and the sizes its
builder requests from each source, byte for byte.

``BlendedMegatronDatasetBuilder`` normalizes the blend's weights, asks each
source for ``ceil(ceil(size * weight) * (1 + surplus))`` samples (the
surplus, ``mid_level_dataset_surplus``, defaults to 0.005), and blends
``sum(ceil(size * weight))`` samples from them. Without weights, each
source's length is its weight and, without a size, the blend takes every
sample once (the exhaustive indices).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from epochplan.compat.megatron.helpers import (
    build_blending_indices,
    build_exhaustive_blending_indices,
)

__all__ = [
    "DEFAULT_SURPLUS",
    "build_blended_indices",
    "get_size_per_split_per_dataset",
    "normalize",
]

#: ``BlendedMegatronDatasetConfig.mid_level_dataset_surplus``'s default.
DEFAULT_SURPLUS = 0.005


def normalize(weights: Sequence[float]) -> list[float]:
    """Megatron's ``normalize``: the weights over their float64 sum."""
    w = np.array(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ValueError("weights must be a non-empty list of numbers")
    if not np.all(np.isfinite(w)) or np.any(w <= 0):
        raise ValueError("weights must be finite and positive")
    normalized: list[float] = (w / np.sum(w)).tolist()
    return normalized


def get_size_per_split_per_dataset(
    normalized_weights: Sequence[float],
    target_size_per_split: Sequence[int | None],
    surplus: float = 0.0,
) -> list[list[int | None]]:
    """Megatron's ``_get_size_per_split_per_dataset``: per source and split,
    ``ceil(ceil(target * weight) * (1 + surplus))`` (None for a split without
    a target, where Megatron would fail).

    Examples:
        >>> get_size_per_split_per_dataset([0.3, 0.7], [1000, 10], surplus=0.005)
        [[302, 4], [704, 8]]
    """
    if not math.isclose(math.fsum(normalized_weights), 1.0, rel_tol=1e-5, abs_tol=1e-8):
        raise ValueError("normalized_weights must sum to 1")
    return [
        [
            None if target is None else math.ceil(math.ceil(target * w) * (1 + surplus))
            for target in target_size_per_split
        ]
        for w in normalized_weights
    ]


def build_blended_indices(
    weights: Sequence[float] | Sequence[int], size: int | None
) -> tuple[npt.NDArray[np.int16], npt.NDArray[np.int64]]:
    """``BlendedDataset._build_indices``: the dataset index (int16) and the
    dataset sample index (int64) of a blend.

    Args:
        weights: With ``size``, the blend's weights (normalized here, as
            Megatron does); without, each source's number of samples.
        size: Samples of the blend, or None for every sample once.

    Examples:
        >>> index, sample = build_blended_indices([3, 1], 4)
        >>> index.tolist(), sample.tolist()
        ([0, 1, 0, 0], [0, 0, 1, 2])
    """
    if size is not None:
        w = normalize(weights)
        if size < 0:
            raise ValueError(f"size must be non-negative or None, got {size}")
        dataset_index = np.zeros(size, dtype=np.int16)
        dataset_sample_index = np.zeros(size, dtype=np.int64)
        build_blending_indices(dataset_index, dataset_sample_index, w, len(w), size)
        return dataset_index, dataset_sample_index
    sizes = np.asarray(weights)
    if sizes.ndim != 1 or sizes.size == 0 or sizes.dtype.kind not in "iuf":
        raise ValueError("weights must be a non-empty list of sample counts")
    if np.any(sizes != np.round(sizes)) or np.any(sizes <= 0):
        raise ValueError("weights must be positive whole sample counts when size is None")
    counts = sizes.astype(np.int64)
    total = int(counts.sum())
    dataset_index = np.zeros(total, dtype=np.int16)
    dataset_sample_index = np.zeros(total, dtype=np.int64)
    build_exhaustive_blending_indices(dataset_index, dataset_sample_index, counts, len(counts))
    return dataset_index, dataset_sample_index
