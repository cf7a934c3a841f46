"""Refusing the framework wrappers that would lose samples silently.

A sampler of this package already gives each rank its own share. A
framework that wraps it and shards its output a second time (accelerate's
``BatchSamplerShard``), skips part of what it yields (accelerate's
``skip_first_batches``, which HF ``Trainer`` uses to resume), or turns its
weighted batches into plain tuples (Ray Train's device move) would drop
samples or weights without a word. Such a wrapper is the code that iterates
the sampler, so it is found on the call stack when an iteration starts, and
the iteration raises there, naming the framework and the fix.

A second pass over the same epoch (no ``set_epoch`` in between) repeats its
order: a warning names the frameworks that do not call ``set_epoch`` on a
sampler they did not make.
"""

from __future__ import annotations

import sys
import warnings
from types import FrameType

from torch.utils.data import Sampler

__all__ = ["check_iteration"]

_GUIDE = "see docs/guides/frameworks.md"

# (module, class) of the wrappers known to lose samples: what they do and the fix.
_KNOWN: dict[tuple[str, str], str] = {
    ("accelerate.data_loader", "BatchSamplerShard"): (
        "accelerate's BatchSamplerShard (Accelerator.prepare) shards the batches of this "
        "{sampler} a second time, so each rank trains on part of its share only. Prepare the "
        "loader with epochplan.accelerate.prepare_data_loader(loader, accelerator) instead of "
        "accelerator.prepare(loader) (HF Trainer: use epochplan.transformers.PlanTrainer)"
    ),
    ("accelerate.data_loader", "SkipBatchSampler"): (
        "accelerate's skip_first_batches (HF Trainer's resume_from_checkpoint) skips batches "
        "of this {sampler} and hides its set_epoch, so a resumed epoch loses and repeats "
        "samples. Restore the sampler with load_state_dict instead of skipping batches "
        "(HF Trainer: epochplan.transformers.PlanTrainer does)"
    ),
    ("ray.train.torch.train_loop_utils", "_WrappedDataLoader"): (
        "Ray Train's prepare_data_loader(move_to_device=True) turns each WeightedBatch of "
        "this {sampler} into a plain tuple (its weights, step and step_end lost). Prepare "
        "the loader with epochplan.ray.prepare_data_loader(loader) instead"
    ),
}

# Attributes through which a wrapper says it shards for several processes.
_WORLD_ATTRS = ("num_processes", "num_replicas", "world_size", "num_shards")

_DEPTH = 16  # frames looked at above the sampler's own


def _holds(owner: object, sampler: object, depth: int = 2) -> bool:
    """Whether ``owner`` holds ``sampler`` as its ``sampler`` or
    ``batch_sampler``, directly or through one more wrapper (attributes
    read from ``__dict__``: no property runs)."""
    fields = getattr(owner, "__dict__", {})
    for attr in ("batch_sampler", "sampler"):
        value = fields.get(attr)
        if value is sampler or (depth > 1 and value is not None and _holds(value, sampler, 1)):
            return True
    return False


def _wrapper_in(frame: FrameType | None, sampler: object) -> tuple[str, object] | None:
    """The first object up the stack that is a known wrapper, or a foreign
    sampler that wraps ``sampler`` and shards for more than one process."""
    for _ in range(_DEPTH):
        if frame is None:
            return None
        owner = frame.f_locals.get("self")
        if owner is not None:
            cls = type(owner)
            module = cls.__module__
            known = _KNOWN.get((module, cls.__qualname__))
            if known is not None:
                return known, owner
            foreign = not module.startswith(("epochplan.", "torch.", "torchdata."))
            if foreign and isinstance(owner, Sampler) and _holds(owner, sampler):
                for attr in _WORLD_ATTRS:
                    value = getattr(owner, attr, None)
                    if type(value) is int and value > 1:
                        return (
                            f"{module}.{cls.__qualname__} (with {attr}={value}) shards the "
                            "output of this {sampler} a second time, so each rank trains on "
                            "part of its share only. Give the framework the loader without "
                            "sharding it again"
                        ), owner
        frame = frame.f_back
    return None


def check_iteration(sampler: object, epoch: int, repeated: bool) -> None:
    """Called by a sampler when an iteration starts (its first item is
    asked for). Raises RuntimeError if a wrapper that loses samples drives
    the iteration; warns if this iteration repeats a finished epoch
    (``repeated``) without ``set_epoch``."""
    name = type(sampler).__name__
    # Frame 0 is this function, 1 the sampler's generator; the wrapper is above.
    found = _wrapper_in(sys._getframe(2), sampler)
    if found is not None:
        message, _ = found
        raise RuntimeError(
            message.format(sampler=name) + f"; {_GUIDE}. Refusing to lose samples silently."
        )
    if repeated:
        warnings.warn(
            f"{name} is iterated over epoch {epoch} a second time without set_epoch(): the "
            "same order again, not a new epoch. Call sampler.set_epoch(epoch) before each "
            "epoch (a loop over a plain DataLoader must; accelerate and HF Trainer reach the "
            "sampler through epochplan.accelerate.prepare_data_loader and "
            f"epochplan.transformers.PlanTrainer); {_GUIDE}",
            RuntimeWarning,
            stacklevel=4,
        )
