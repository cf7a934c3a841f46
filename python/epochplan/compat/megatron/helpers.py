"""megatron-core's compiled index helpers (``megatron.core.datasets.helpers``
and ``helpers_cpp``), byte for byte, computed in Rust.

The same names, arguments and outputs as megatron-core 0.16.1:
:func:`build_sample_idx` with its int32/int64 choice,
``build_sample_idx_int32`` / ``_int64``, and the blending builders that fill
the caller's ``dataset_index`` (int16) and ``dataset_sample_index`` (int64)
in place. Where the C++ would read or write out of bounds or assert, a
``ValueError`` or ``TypeError`` names the argument instead. See
docs/guides/from-megatron.md.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native

__all__ = [
    "build_blending_indices",
    "build_exhaustive_blending_indices",
    "build_sample_idx",
    "build_sample_idx_int32",
    "build_sample_idx_int64",
]

_INT32_MAX = int(np.iinfo(np.int32).max)


def int32_array(values: npt.ArrayLike, name: str) -> npt.NDArray[np.int32]:
    """``values`` as a contiguous one-dimensional int32 array, refusing values
    int32 cannot hold (the C++ would wrap them)."""
    arr = np.asarray(values)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got {arr.ndim} dimensions")
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an array of integers, got dtype {arr.dtype}")
    if arr.dtype != np.int32 and arr.size and (arr.min() < 0 or arr.max() > _INT32_MAX):
        raise ValueError(f"{name} must hold values in [0, 2**31 - 1]")
    # Aligned too: Megatron's .idx arrays start at unaligned offsets.
    return np.require(arr, np.int32, ["C_CONTIGUOUS", "ALIGNED"])


def _int(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not lo <= int(value) <= hi:
        raise ValueError(f"{name} must be in [{lo}, {hi}], got {value}")
    return int(value)


def _sample_idx(
    sizes: npt.ArrayLike,
    document_idx: npt.ArrayLike,
    seq_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool,
    add_extra_token_to_sequence: int,
    int64: bool,
) -> npt.NDArray[Any]:
    out: npt.NDArray[Any] = _native.megatron_sample_idx(
        int32_array(sizes, "sizes"),
        int32_array(document_idx, "document_idx"),
        _int(seq_length, "seq_length", 2, _INT32_MAX),
        _int(num_epochs, "num_epochs", 1, _INT32_MAX),
        _int(tokens_per_epoch, "tokens_per_epoch", 2, 2**63 - 1),
        bool(drop_last_partial_sequence),
        _int(int(add_extra_token_to_sequence), "add_extra_token_to_sequence", 0, 1),
        int64,
    )
    return out


def build_sample_idx_int32(
    sizes: npt.ArrayLike,
    document_idx: npt.ArrayLike,
    seq_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> npt.NDArray[np.int32]:
    """``helpers_cpp.build_sample_idx_int32``: the ``(num_samples + 1, 2)``
    int32 sample index (see :func:`build_sample_idx`)."""
    return _sample_idx(
        sizes,
        document_idx,
        seq_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
        int64=False,
    )


def build_sample_idx_int64(
    sizes: npt.ArrayLike,
    document_idx: npt.ArrayLike,
    seq_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: int = 1,
) -> npt.NDArray[np.int64]:
    """``helpers_cpp.build_sample_idx_int64``: as
    :func:`build_sample_idx_int32`, in int64."""
    return _sample_idx(
        sizes,
        document_idx,
        seq_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
        int64=True,
    )


def build_sample_idx(
    sizes: npt.ArrayLike,
    document_indices: npt.ArrayLike,
    sequence_length: int,
    num_epochs: int,
    tokens_per_epoch: int,
    drop_last_partial_sequence: bool = True,
    add_extra_token_to_sequence: bool = True,
) -> npt.NDArray[np.int32] | npt.NDArray[np.int64]:
    """The sample index of a ``GPTDataset``, as ``helpers.build_sample_idx``.

    Row ``s`` is ``(position in document_indices, token offset)`` where
    sample ``s`` starts; the last row ends the last sample. int32 when both
    the document index's length and the largest document fit in int32,
    else int64, as Megatron chooses.

    Args:
        sizes: Tokens per document (int32 values).
        document_indices: The document index (document ids in epoch order).
        sequence_length: Tokens per sample, more than 1.
        num_epochs: Epochs in ``document_indices``.
        tokens_per_epoch: Tokens of one epoch.
        drop_last_partial_sequence: Omit a last, partial sample.
        add_extra_token_to_sequence: Samples of ``sequence_length + 1`` tokens.

    Returns:
        The ``(num_samples + 1, 2)`` sample index.

    Examples:
        >>> build_sample_idx([5, 3, 4], [0, 1, 2], 4, 1, 12).tolist()
        [[0, 0], [0, 4], [2, 0]]
    """
    sizes32 = int32_array(sizes, "sizes")
    docs32 = int32_array(document_indices, "document_indices")
    largest = max(docs32.shape[0], int(sizes32.max()) if sizes32.size else 0)
    return _sample_idx(
        sizes32,
        docs32,
        sequence_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        1 if add_extra_token_to_sequence else 0,
        int64=largest > _INT32_MAX,
    )


def _output(array: Any, dtype: type[np.generic], name: str) -> npt.NDArray[Any]:
    """An output array as the C++ takes it: writable, contiguous, of ``dtype``
    (pybind11 would fill a converted copy and leave the caller's untouched)."""
    if not isinstance(array, np.ndarray) or array.dtype != dtype or array.ndim != 1:
        raise TypeError(f"{name} must be a one-dimensional numpy array of {np.dtype(dtype).name}")
    if not array.flags.c_contiguous or not array.flags.writeable:
        raise ValueError(f"{name} must be writable and contiguous")
    return array


def build_blending_indices(
    dataset_index: npt.NDArray[np.int16],
    dataset_sample_index: npt.NDArray[np.int64],
    weights: npt.ArrayLike,
    num_datasets: int,
    size: int,
    verbose: bool = False,
) -> None:
    """``helpers_cpp.build_blending_indices``: fills ``size`` positions.

    Position ``i`` takes the next sample of the source with the largest
    ``weights[k] * max(i, 1) - taken[k]`` (ties to the lowest ``k``), in
    double precision as Megatron computes it. Beyond 32 sources (of distinct
    weights) the search skips those that cannot be largest, so it does not
    scan all ``num_datasets`` per sample; with weights that sum to one, a
    long blend is filled in pieces on every thread (see
    :func:`epochplan.set_num_threads`), 32 pieces a thread in vector lanes
    where the CPU has AVX-512, with the same outputs.

    Args:
        dataset_index: int16 output, the source of each position.
        dataset_sample_index: int64 output, the sample within the source.
        weights: The sources' weights (Megatron normalizes them to sum 1).
        num_datasets: Number of sources, in [1, 32767].
        size: Positions to fill.
        verbose: Accepted for Megatron's signature; prints nothing.

    Examples:
        >>> index = np.zeros(5, np.int16)
        >>> sample = np.zeros(5, np.int64)
        >>> build_blending_indices(index, sample, [0.6, 0.4], 2, 5)
        >>> index.tolist(), sample.tolist()
        ([0, 1, 0, 1, 0], [0, 0, 1, 1, 2])
    """
    del verbose
    _native.megatron_blending_indices(
        _output(dataset_index, np.int16, "dataset_index"),
        _output(dataset_sample_index, np.int64, "dataset_sample_index"),
        np.ascontiguousarray(weights, dtype=np.float64).reshape(-1),
        _int(num_datasets, "num_datasets", 1, 32767),
        _int(size, "size", 0, 2**63 - 1),
    )


def build_exhaustive_blending_indices(
    dataset_index: npt.NDArray[np.int16],
    dataset_sample_index: npt.NDArray[np.int64],
    sizes: npt.ArrayLike,
    num_datasets: int,
) -> None:
    """``helpers_cpp.build_exhaustive_blending_indices``: every sample of
    every source once, ``sum(sizes)`` positions, each source weighted by its
    size and retired when spent (see :func:`build_blending_indices`).

    Examples:
        >>> index = np.zeros(4, np.int16)
        >>> sample = np.zeros(4, np.int64)
        >>> build_exhaustive_blending_indices(index, sample, [1, 3], 2)
        >>> index.tolist(), sample.tolist()
        ([1, 0, 1, 1], [0, 0, 1, 2])
    """
    arr = np.asarray(sizes)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"sizes must be an array of integers, got dtype {arr.dtype}")
    _native.megatron_exhaustive_blending_indices(
        _output(dataset_index, np.int16, "dataset_index"),
        _output(dataset_sample_index, np.int64, "dataset_sample_index"),
        np.ascontiguousarray(arr, dtype=np.int64).reshape(-1),
        _int(num_datasets, "num_datasets", 1, 32767),
    )
