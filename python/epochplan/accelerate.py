"""accelerate: a loader of epochplan's samplers prepared without a second sharding.

``Accelerator.prepare(loader)`` wraps a loader's batch sampler in its
``BatchSamplerShard``, which hands each process every ``num_processes``-th
batch: with a sampler that already gives each rank its own share, half the
samples (on 2 processes) would never be seen, and accelerate's ``set_epoch``
would not reach the sampler inside the wrapper. epochplan's samplers refuse
that wrapper loudly; :func:`prepare_data_loader` is the one-line replacement:

.. code-block:: python

    loader = epochplan.accelerate.prepare_data_loader(loader, accelerator)
    model, optimizer = accelerator.prepare(model, optimizer)

The loader it returns is accelerate's own ``DataLoaderShard`` for one
process (batches moved to ``accelerator.device``, the end of the loader
tracked for gradient accumulation, ``set_epoch`` passed to the sampler),
registered with the accelerator, and left as it is by a later
``accelerator.prepare``. See docs/guides/frameworks.md.
"""

from __future__ import annotations

from typing import Any

import accelerate
from accelerate.data_loader import prepare_data_loader as _prepare
from torch.utils.data import DataLoader

from epochplan.torch import DistributedSampler, ElasticBatchSampler, ExactDistributedSampler

__all__ = ["prepare_data_loader", "sampler_of"]

_OURS = (ElasticBatchSampler, DistributedSampler, ExactDistributedSampler)


def sampler_of(
    loader: Any,
) -> ElasticBatchSampler | DistributedSampler | ExactDistributedSampler | None:
    """The epochplan sampler that drives ``loader`` (its batch sampler, or
    the sampler of its batch sampler), or None."""
    for attr in ("batch_sampler", "sampler"):
        found = getattr(loader, attr, None)
        for candidate in (found, getattr(found, "sampler", None)):
            if isinstance(candidate, _OURS):
                return candidate
    return None


def prepare_data_loader(
    data_loader: DataLoader[Any], accelerator: accelerate.Accelerator
) -> DataLoader[Any]:
    """``data_loader`` prepared by ``accelerator`` for this process alone.

    Args:
        data_loader: a ``DataLoader`` whose batch sampler is an
            :class:`~epochplan.torch.ElasticBatchSampler` (or whose sampler
            is a :class:`~epochplan.torch.DistributedSampler`): the sampler
            already serves this process's share.
        accelerator: the run's ``Accelerator``.

    Returns:
        accelerate's ``DataLoaderShard`` over the same batches: moved to
        ``accelerator.device``, ``set_epoch`` reaching the sampler, and
        marked prepared, so ``accelerator.prepare`` keeps it as it is.

    Raises:
        TypeError: the loader is not driven by an epochplan sampler (it
            would not be sharded at all: give it to ``accelerator.prepare``).
    """
    if not isinstance(data_loader, DataLoader):
        raise TypeError(f"data_loader must be a torch DataLoader, got {type(data_loader).__name__}")
    if sampler_of(data_loader) is None:
        raise TypeError(
            "data_loader is not driven by an epochplan sampler (batch_sampler=ElasticBatchSampler"
            " or sampler=DistributedSampler): nothing else shards it, so give it to "
            "accelerator.prepare instead"
        )
    if getattr(data_loader, "_is_accelerate_prepared", False):
        raise ValueError("data_loader was prepared by accelerate already")
    prepared = _prepare(
        data_loader,
        accelerator.device,
        num_processes=1,  # the sampler already serves this process's share
        process_index=0,
        put_on_device=accelerator.device_placement,
        rng_types=list(accelerator.rng_types),
        non_blocking=accelerator.non_blocking,
        use_stateful_dataloader=accelerator.use_stateful_dataloader,
    )
    prepared._is_accelerate_prepared = True
    # Registered like accelerate's own (save_state, gradient accumulation).
    out: DataLoader[Any] = accelerator.prepare_data_loader(prepared)
    return out
