"""Which rank of how many a sampler serves: arguments, ``torch.distributed``,
the ``RANK`` / ``WORLD_SIZE`` environment variables, or a rank provider."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import torch.distributed as dist

from epochplan._args import int_arg, int_label
from epochplan._native import MAX_SAMPLES

__all__ = ["RankProvider", "resolve_rank", "set_rank_provider"]

#: A callable returning ``(rank, world_size)``, e.g.
#: ``lambda: (jax.process_index(), jax.process_count())``.
RankProvider = Callable[[], tuple[int, int]]

_rank_provider: RankProvider | None = None


def set_rank_provider(fn: RankProvider | None) -> None:
    """Sets (or, with None, clears) the process-wide fallback rank provider.

    Used by every sampler of this module when neither arguments, nor
    ``torch.distributed``, nor ``RANK`` / ``WORLD_SIZE`` give the rank.

    Examples:
        >>> set_rank_provider(lambda: (jax.process_index(), jax.process_count()))
        ... # doctest: +SKIP
    """
    global _rank_provider
    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be callable or None, got {type(fn).__name__}")
    _rank_provider = fn


def _env_int(name: str) -> int:
    raw = os.environ[name]
    # ASCII digits only: int() also takes "1_0" (as 10) and other scripts' digits.
    if re.fullmatch(r"\s*[-+]?[0-9]+\s*", raw) is None:
        raise ValueError(f"the environment variable {name} must be an int, got {raw!r}")
    return int(raw)


def resolve_rank(
    rank: int | None = None,
    num_replicas: int | None = None,
    *,
    rank_fn: RankProvider | None = None,
) -> tuple[int, int]:
    """Resolves ``(rank, num_replicas)`` for a sampler.

    Each value not given explicitly comes from the first source that applies:
    ``torch.distributed`` if it is initialised; else the ``RANK`` and
    ``WORLD_SIZE`` environment variables (each needed one must be set); else ``rank_fn``
    or the provider of :func:`set_rank_provider`, which returns
    ``(rank, world_size)``.

    Raises:
        ValueError: no source applies, or the rank is not in
            ``[0, num_replicas - 1]``.
        TypeError: a value is not an int.

    Examples:
        >>> resolve_rank(1, 4)
        (1, 4)
    """
    if rank_fn is not None and not callable(rank_fn):
        raise TypeError(f"rank_fn must be callable or None, got {type(rank_fn).__name__}")
    if num_replicas is not None:
        num_replicas = int_arg(num_replicas, "num_replicas")
    if rank is not None:
        rank = int_arg(rank, "rank")
    source = "arguments"
    if num_replicas is None or rank is None:
        found = _implicit_rank(rank_fn, need_rank=rank is None, need_world=num_replicas is None)
        if found is None:
            missing = " and ".join(
                n for n, v in (("num_replicas", num_replicas), ("rank", rank)) if v is None
            )
            raise ValueError(
                f"{missing} not given and no source defines them: torch.distributed is not "
                "initialised, RANK and WORLD_SIZE are not set and no rank provider was set "
                "(pass num_replicas= and rank=, rank_fn=, or call "
                "epochplan.torch.set_rank_provider)"
            )
        source, (found_rank, found_world) = found
        num_replicas = found_world if num_replicas is None else num_replicas
        rank = found_rank if rank is None else rank
    where = "" if source == "arguments" else f" (from {source})"
    if not 1 <= num_replicas <= MAX_SAMPLES:
        raise ValueError(
            f"num_replicas must be in [1, 2**63 - 1], got {int_label(num_replicas)}{where}"
        )
    # torch's message (a drop-in).
    if rank >= num_replicas or rank < 0:
        raise ValueError(
            f"Invalid rank {int_label(rank)}, rank should be in the interval "
            f"[0, {num_replicas - 1}]{where}"
        )
    return rank, num_replicas


def _implicit_rank(
    rank_fn: RankProvider | None, *, need_rank: bool, need_world: bool
) -> tuple[str, tuple[int, int]] | None:
    """The first source of the rank and world size that applies. From the
    environment, only the variables of the values needed are read (a value
    not needed comes back as 0)."""
    if dist.is_available() and dist.is_initialized():
        return "torch.distributed", (dist.get_rank(), dist.get_world_size())
    needed = [name for name, need in (("RANK", need_rank), ("WORLD_SIZE", need_world)) if need]
    present = [name for name in ("RANK", "WORLD_SIZE") if name in os.environ]
    if present:
        absent = [name for name in needed if name not in present]
        if absent:
            raise ValueError(
                f"the environment variable {present[0]} is set but {absent[0]} is not; set "
                "both or pass num_replicas= and rank="
            )
        return f"the {' and '.join(needed)} environment variable{'s' * (len(needed) > 1)}", (
            _env_int("RANK") if need_rank else 0,
            _env_int("WORLD_SIZE") if need_world else 0,
        )
    fn = rank_fn if rank_fn is not None else _rank_provider
    if fn is None:
        return None
    got = fn()
    if not (isinstance(got, tuple) and len(got) == 2):
        raise TypeError(f"the rank provider must return (rank, world_size), got {got!r}")
    return "the rank provider", (
        int_arg(got[0], "the provider's rank"),
        int_arg(got[1], "the provider's world_size"),
    )
