"""MosaicML Streaming's ``get_shuffle``, bit for bit, computed in Rust."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import numpy.typing as npt

import epochplan._native as _native

__all__ = ["ALGOS", "get_shuffle"]

#: The algorithm names Streaming's ``get_shuffle`` accepts.
ALGOS = frozenset(_native.STREAMING_ALGOS)

# Streaming's text to the character: its source continues the string with a
# backslash, so the space before it and the next line's indentation make a
# gap of 25 spaces.
_GAP = " " * 25
_BLOCK_WARNING = (
    f"Shuffle block size was smaller than shard size for some shards. This{_GAP}"
    f"will result in these shards not being shuffled with other shards. Set{_GAP}"
    "shuffle_block_size to a larger value for a higher quality shuffle."
)


def _with_note(error: BaseException, note: str) -> BaseException:
    """``error`` with ``note`` added (``BaseException.add_note``, or its
    ``__notes__`` where Python 3.10 has no ``add_note``)."""
    if sys.version_info >= (3, 11):
        error.add_note(note)
    else:
        vars(error)["__notes__"] = [note]
    return error


def get_shuffle(
    algo: str,
    shard_sizes: npt.ArrayLike,
    num_canonical_nodes: int,
    seed: int,
    epoch: int,
    block_size: int = 1 << 18,
) -> npt.NDArray[np.int64]:
    """The shuffled order of an epoch's samples, as Streaming's ``get_shuffle``.

    Same arguments, defaults and output as
    ``streaming.base.shuffle.get_shuffle`` (mosaicml-streaming 0.13.0), bit for
    bit: numpy's ``default_rng`` streams are reproduced exactly in Rust.

    One order is not defined by Streaming itself: ``py1e`` sorts shifted
    sample positions with numpy's unstable ``argsort``, whose order for equal
    values depends on the CPU. Here equal shifted positions keep their
    original order (as ``argsort(kind="stable")``). Two shifted positions are
    equal only if they round to the same double: about 0.18 * L**2 / 2**52
    pairs in a canonical node of L samples (0.4 at L = 10**8, about 40 at
    10**9), where Streaming's order may differ; elsewhere the output is
    identical.

    Args:
        algo: ``"naive"``, ``"py1s"``, ``"py2s"``, ``"py1br"`` or ``"py1e"``.
        shard_sizes: Number of samples in each shard, in shard order
            (non-negative integers).
        num_canonical_nodes: Number of canonical nodes, in [1, 2**20]
            (ignored by ``"naive"``).
        seed: Base random seed of the run, in [0, 2**64 - 1].
        epoch: The epoch, in [-(2**64 - 1), 2**64 - 1]; the epoch's generator
            is seeded with ``seed + epoch``, as in Streaming (so it may be
            negative when ``seed + epoch`` is not).
        block_size: Unit of shuffle of ``"py1br"`` and ``"py1e"`` (ignored by
            the others).

    Returns:
        An int64 array: the sample id at each position of the epoch.

    Raises:
        KeyError: ``algo`` is not one of the names above: Streaming's
            ``KeyError(algo)``, the names in its note.
        ValueError: an argument is out of range, or ``"py1e"`` is left with a
            canonical node without samples (as Streaming).
        TypeError: an argument has the wrong type (an unhashable ``algo``:
            Streaming's "unhashable type" message first).

    Warns:
        UserWarning: ``"py1e"`` met a shard piece larger than its random block
            (as Streaming).

    Examples:
        >>> import numpy as np
        >>> from epochplan.compat.streaming import get_shuffle
        >>> sizes = np.array([4, 4, 4])
        >>> ids = get_shuffle("py1e", sizes, 2, seed=7, epoch=0, block_size=8)
        >>> sorted(ids.tolist()) == list(range(12))
        True
    """
    # Streaming looks the name up in a dict: an unhashable value (a list,
    # say) is its TypeError, any other unknown value its KeyError, whose only
    # argument is the value; the allowed names come in a note.
    try:
        known = algo in ALGOS
    except TypeError as unhashable:
        raise TypeError(f"{unhashable}; algo must be a str, got {type(algo).__name__}") from None
    if not known or not isinstance(algo, str):
        names = ", ".join(f'"{name}"' for name in sorted(ALGOS))
        raise _with_note(KeyError(algo), f"algo must be one of {names}, got {algo!r}")
    ids, block_smaller_than_shard = _native.streaming_get_shuffle(
        algo, shard_sizes, num_canonical_nodes, seed, epoch, block_size
    )
    if block_smaller_than_shard:
        warnings.warn(_BLOCK_WARNING, UserWarning, stacklevel=2)
    return ids
