"""The document, sample and shuffle indices of megatron-core's ``GPTDataset``,
byte for byte, computed in Rust.

:func:`build_document_index` and :func:`build_shuffle_index` take and
advance a ``numpy.random.RandomState`` exactly as Megatron's
``_build_document_index`` and ``_build_shuffle_index`` do (its MT19937
state is read, advanced in Rust and written back), so they can stand in for
them one by one. :func:`build_gpt_indices` is the whole of
``GPTDataset._build_document_sample_shuffle_indices``: the number of epochs,
the separate final epoch (when the last epoch contributes fewer than 80% of
an epoch's samples), and the three indices, with the dtypes Megatron saves.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

import epochplan._native as _native
from epochplan.compat.megatron.helpers import int32_array

__all__ = [
    "GPTIndices",
    "build_document_index",
    "build_gpt_indices",
    "build_shuffle_index",
    "get_num_epochs",
]

#: Megatron separates the final epoch when it contributes fewer samples
#: than this fraction of an epoch.
SEPARATE_FINAL_EPOCH_THRESHOLD = 0.80


def _state_of(numpy_random_state: np.random.RandomState) -> tuple[Any, ...]:
    if not isinstance(numpy_random_state, np.random.RandomState):
        raise TypeError(
            "numpy_random_state must be a numpy.random.RandomState, "
            f"got {type(numpy_random_state).__name__}"
        )
    state = numpy_random_state.get_state(legacy=True)
    assert isinstance(state, tuple)
    return state


def _set_state(
    numpy_random_state: np.random.RandomState,
    state: tuple[Any, ...],
    key: npt.NDArray[np.uint32],
    pos: int,
) -> None:
    numpy_random_state.set_state((state[0], key, pos, *state[3:]))


def build_document_index(
    documents: npt.ArrayLike,
    num_epochs: int,
    numpy_random_state: np.random.RandomState,
    separate_final_epoch: bool,
) -> npt.NDArray[np.int32]:
    """Megatron's ``_build_document_index``: ``documents`` once per epoch as
    int32, shuffled; with ``separate_final_epoch`` the last epoch is shuffled
    apart and placed last. Advances ``numpy_random_state`` as Megatron does.

    Examples:
        >>> rs = np.random.RandomState(1234)
        >>> build_document_index(np.arange(4), 2, rs, False).tolist()
        [2, 1, 2, 0, 0, 1, 3, 3]
    """
    docs = np.asarray(documents)
    if docs.ndim != 1 or docs.dtype.kind not in "iu":
        raise TypeError("documents must be a one-dimensional array of integers")
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, int | np.integer):
        raise TypeError(f"num_epochs must be an int, got {type(num_epochs).__name__}")
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be at least 1, got {num_epochs}")
    state = _state_of(numpy_random_state)
    # Megatron casts to int32 with numpy's wrapping ``astype``.
    docs32 = np.ascontiguousarray(docs.astype(np.int32))
    index, key, pos = _native.megatron_document_index(
        docs32, int(num_epochs), state[1], state[2], bool(separate_final_epoch)
    )
    _set_state(numpy_random_state, state, key, pos)
    result: npt.NDArray[np.int32] = index
    return result


def build_shuffle_index(
    num_samples: int, total_size: int, numpy_random_state: np.random.RandomState
) -> npt.NDArray[np.uint32] | npt.NDArray[np.int64]:
    """Megatron's ``_build_shuffle_index``: ``[0, num_samples)`` shuffled,
    then ``[num_samples, total_size)`` shuffled after it; uint32 below
    ``2**32 - 2`` samples, else int64.

    Examples:
        >>> build_shuffle_index(4, 6, np.random.RandomState(0)).tolist()
        [2, 3, 1, 0, 4, 5]
    """
    for name, value in (("num_samples", num_samples), ("total_size", total_size)):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")
    state = _state_of(numpy_random_state)
    index, key, pos = _native.megatron_shuffle_index(
        int(num_samples), int(total_size), state[1], state[2]
    )
    _set_state(numpy_random_state, state, key, pos)
    result: npt.NDArray[np.uint32] | npt.NDArray[np.int64] = index
    return result


def get_num_epochs(
    num_tokens_per_epoch: int,
    num_samples: int | None,
    sequence_length: int,
    add_extra_token_to_sequence: bool = True,
) -> int:
    """``GPTDataset._get_num_epochs``: the epochs needed for ``num_samples``
    samples (1 when ``num_samples`` is None)."""
    if num_samples is None:
        return 1
    if num_tokens_per_epoch < 1:
        raise ValueError(f"num_tokens_per_epoch must be positive, got {num_tokens_per_epoch}")
    requested = num_samples * sequence_length + int(add_extra_token_to_sequence)
    return max(1, -(-requested // num_tokens_per_epoch))


class GPTIndices(tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]]):
    """``(document_index, sample_index, shuffle_index)``, as Megatron saves them."""

    __slots__ = ()

    @property
    def document_index(self) -> npt.NDArray[np.int32]:
        """The shuffled document ids of every epoch (int32)."""
        return self[0]

    @property
    def sample_index(self) -> npt.NDArray[Any]:
        """Where each sample starts (int32 or int64, ``(n + 1, 2)``)."""
        return self[1]

    @property
    def shuffle_index(self) -> npt.NDArray[Any]:
        """The order of the samples (uint32 or int64)."""
        return self[2]

    def __repr__(self) -> str:
        return (
            f"GPTIndices(documents={self[0].shape[0]}, samples={self[1].shape[0] - 1}, "
            f"sample_index={self[1].dtype}, shuffle_index={self[2].dtype})"
        )


def build_gpt_indices(
    sequence_lengths: npt.ArrayLike,
    indices: npt.ArrayLike,
    num_samples: int | None,
    sequence_length: int,
    random_seed: int,
    *,
    add_extra_token_to_sequence: bool = True,
    drop_last_partial_sequence: bool = True,
) -> GPTIndices:
    """The three indices of a ``GPTDataset``, as Megatron builds and caches them.

    Args:
        sequence_lengths: The indexed dataset's ``sequence_lengths`` (int32).
        indices: The split's document ids (``GPTDataset.indices``).
        num_samples: Samples requested (None: one epoch).
        sequence_length: ``config.sequence_length``.
        random_seed: ``config.random_seed``, in [0, 2**32 - 1].
        add_extra_token_to_sequence: ``config.add_extra_token_to_sequence``.
        drop_last_partial_sequence: True, except for the validation split,
            where it is ``config.drop_last_partial_validation_sequence``.

    Returns:
        The document, sample and shuffle indices.

    Examples:
        >>> sizes = np.array([7, 3, 9, 5], np.int32)
        >>> idx = build_gpt_indices(sizes, np.arange(4), 6, 4, 1234)
        >>> idx
        GPTIndices(documents=8, samples=11, sample_index=int32, shuffle_index=uint32)
    """
    lengths = int32_array(sequence_lengths, "sequence_lengths")
    docs = int32_array(indices, "indices")
    if docs.size == 0:
        raise ValueError("indices must not be empty")
    if num_samples is not None and num_samples < 0:
        raise ValueError(f"num_samples must be non-negative or None, got {num_samples}")
    extra = int(bool(add_extra_token_to_sequence))
    # Checks every id against the lengths too.
    tokens_per_epoch = _native.megatron_tokens_per_epoch(lengths, docs)
    num_epochs = get_num_epochs(tokens_per_epoch, num_samples, sequence_length, bool(extra))
    separate_final_epoch = False
    sans_final = 0
    if num_epochs > 1:
        assert num_samples is not None
        sans_final = ((num_epochs - 1) * tokens_per_epoch - extra) // sequence_length
        from_final = num_samples - sans_final
        per_epoch = (tokens_per_epoch - extra) // sequence_length
        separate_final_epoch = from_final < int(SEPARATE_FINAL_EPOCH_THRESHOLD * per_epoch)
    state = np.random.RandomState(random_seed)
    legacy = _state_of(state)
    positions = docs.shape[0] * num_epochs
    largest = max(positions, int(lengths.max()) if lengths.size else 0)
    # One native call builds all three, shuffling (document, size) pairs so
    # the sample walk reads sizes in order: the bytes of the three builders.
    document_index, sample_index, shuffle_index, _, _ = _native.megatron_gpt_indices(
        lengths,
        docs,
        (sequence_length, num_epochs, tokens_per_epoch, bool(drop_last_partial_sequence), extra),
        separate_final_epoch,
        sans_final if separate_final_epoch else None,
        largest > np.iinfo(np.int32).max,
        legacy[1],
        legacy[2],
    )
    return GPTIndices((document_index, sample_index, shuffle_index))
