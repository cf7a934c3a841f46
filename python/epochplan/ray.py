"""Ray Train: a loader of epochplan's samplers prepared without losing its plan.

``ray.train.torch.prepare_data_loader(loader)`` with its defaults rebuilds
the loader around a ``DistributedSampler`` of its own (the batch sampler and
its weights are gone: :class:`~epochplan.torch.WeightedCollate` then refuses
the samples), and its device move turns each
:class:`~epochplan.torch.WeightedBatch` into a plain tuple (the sampler
refuses that wrapper). :func:`prepare_data_loader` is the one-line
replacement inside the training function::

    loader = epochplan.ray.prepare_data_loader(loader)

It keeps the sampler (no second sharding: it already serves this worker's
rank of ``torch.distributed``, which Ray Train sets up) and moves each
batch to ``ray.train.torch.get_device()`` with ``WeightedBatch.to``. See
docs/guides/frameworks.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import ray.train.torch
from torch.utils.data import DataLoader

from epochplan.torch import (
    DistributedSampler,
    ElasticBatchSampler,
    ExactDistributedSampler,
    WeightedBatch,
)

__all__ = ["prepare_data_loader", "sampler_of"]


_OURS = (ElasticBatchSampler, DistributedSampler, ExactDistributedSampler)


def sampler_of(
    loader: Any,
) -> ElasticBatchSampler | DistributedSampler | ExactDistributedSampler | None:
    """The epochplan sampler that drives ``loader``, or None."""
    for attr in ("batch_sampler", "sampler"):
        found = getattr(loader, attr, None)
        for candidate in (found, getattr(found, "sampler", None)):
            if isinstance(candidate, _OURS):
                return candidate
    return None


class _DeviceLoader:
    """The batches of ``loader`` moved to ``device``, as WeightedBatch."""

    def __init__(self, loader: DataLoader[Any], device: Any) -> None:
        self.loader = loader
        self.device = device
        self.sampler = sampler_of(loader)

    def __len__(self) -> int:
        return len(self.loader)

    def set_epoch(self, epoch: int) -> None:
        """Sets the sampler's epoch (call it before each epoch)."""
        if self.sampler is not None:
            self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:
        for batch in self.loader:
            yield batch.to(self.device) if isinstance(batch, WeightedBatch) else batch

    def __repr__(self) -> str:
        return f"prepare_data_loader({self.loader!r}) on {self.device}"


def prepare_data_loader(data_loader: DataLoader[Any], move_to_device: bool = True) -> Any:
    """``data_loader`` prepared for Ray Train with its epochplan sampler kept.

    Args:
        data_loader: a ``DataLoader`` whose batch sampler is an
            :class:`~epochplan.torch.ElasticBatchSampler` (or whose sampler
            is a :class:`~epochplan.torch.DistributedSampler`).
        move_to_device: move each batch to ``ray.train.torch.get_device()``.

    Returns:
        An iterable of the same batches (a :class:`WeightedBatch` stays
        one), with ``len()`` and ``set_epoch``.

    Raises:
        TypeError: the loader is not driven by an epochplan sampler.
    """
    if sampler_of(data_loader) is None:
        raise TypeError(
            "data_loader is not driven by an epochplan sampler (batch_sampler=ElasticBatchSampler"
            " or sampler=DistributedSampler): give it to ray.train.torch.prepare_data_loader"
        )
    loader = ray.train.torch.prepare_data_loader(
        data_loader, add_dist_sampler=False, move_to_device=False
    )
    if not move_to_device:
        return loader
    return _DeviceLoader(loader, ray.train.torch.get_device())
