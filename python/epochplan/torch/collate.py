"""Weights through a DataLoader: the micro-batch a batch sampler yields, the
dataset wrapper that carries its weights to the workers, and the collate
function that returns them as a :class:`WeightedBatch`."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import Dataset, default_collate

__all__ = ["WeightedBatch", "WeightedCollate", "WeightedDataset", "WeightedIndices"]


class WeightedIndices(list[int]):
    """One micro-batch as :class:`ElasticBatchSampler` yields it.

    A list of sample ids (so any dataset can be indexed with it) that also
    carries the loss ``weights`` (float64, ``W / n_t`` for a real sample of
    step ``step``, 0 for a zero-weight filler), the ``step`` and ``step_end``
    (True on the step's last micro-batch: call ``optimizer.step()`` after it).
    It pickles with its attributes, so it reaches DataLoader workers intact.
    """

    weights: npt.NDArray[np.float64]
    step: int
    step_end: bool

    def __init__(
        self,
        ids: Sequence[int],
        weights: npt.ArrayLike,
        step: int,
        step_end: bool,
    ) -> None:
        super().__init__(ids)
        self.weights = np.asarray(weights, dtype=np.float64)
        self.step = step
        self.step_end = step_end

    def __reduce__(self) -> tuple[Any, ...]:
        return (WeightedIndices, (list(self), self.weights, self.step, self.step_end))

    def __repr__(self) -> str:
        return (
            f"WeightedIndices({list(self)!r}, weights={self.weights.tolist()!r}, "
            f"step={self.step}, step_end={self.step_end})"
        )


class _WeightedSamples(list[Any]):
    """The samples of one micro-batch and the :class:`WeightedIndices` they came from.

    A dataset whose ``__getitems__`` returns something other than a list (a
    ready batch) keeps it in ``batch``, handed to the collate function as is.
    """

    def __init__(self, samples: Any, indices: WeightedIndices) -> None:
        is_list = isinstance(samples, list)
        super().__init__(samples if is_list else ())
        self.indices = indices
        self.batch = None if is_list else samples

    def collate_input(self) -> Any:
        return list(self) if self.batch is None else self.batch


class WeightedDataset(Dataset[Any]):
    """Wraps a map-style dataset so a micro-batch's weights reach the collate function.

    Indexing is unchanged; fetching a :class:`WeightedIndices` batch (in a
    DataLoader worker or in the main process) returns the samples together with
    the batch's weights, step and step end, which :class:`WeightedCollate`
    turns into a :class:`WeightedBatch`. The wrapped dataset's own
    ``__getitems__`` is used when it has one.
    """

    def __init__(self, dataset: Any) -> None:
        self.dataset = dataset

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: Any) -> Any:
        return self.dataset[index]

    def __getitems__(self, indices: Sequence[int]) -> list[Any]:
        ids = list(indices)
        getitems = getattr(self.dataset, "__getitems__", None)
        samples = getitems(ids) if getitems else [self.dataset[i] for i in ids]
        if isinstance(indices, WeightedIndices):
            return _WeightedSamples(samples, indices)
        return samples

    def __repr__(self) -> str:
        return f"WeightedDataset({self.dataset!r})"


def _to_device(value: Any, device: Any, non_blocking: bool) -> Any:
    """``value`` with every tensor in it (nested in mappings, named tuples,
    tuples and lists, or anything with a ``.to``) moved to ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device, non_blocking=non_blocking)
    if isinstance(value, Mapping):
        items = {k: _to_device(v, device, non_blocking) for k, v in value.items()}
        try:
            return type(value)(items)  # type: ignore[call-arg]
        except TypeError:
            return items
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(_to_device(v, device, non_blocking) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(_to_device(v, device, non_blocking) for v in value)
    move = getattr(value, "to", None)
    return move(device) if callable(move) else value


class WeightedBatch(NamedTuple):
    """A collated micro-batch with its loss weights.

    ``batch.to(device)`` moves every tensor in it (those nested in ``data``
    too) and keeps the type and the step attributes, so the device moves of
    accelerate (``send_to_device``) and Lightning (``move_data_to_device``)
    return a ``WeightedBatch``.

    Attributes:
        data: the samples collated by the wrapped collate function.
        sample_weight: one loss weight per sample (0 for fillers).
        indices: the sample ids (int64 tensor).
        step: the optimizer step this micro-batch belongs to.
        step_end: True on the step's last micro-batch.
    """

    data: Any
    sample_weight: torch.Tensor
    indices: torch.Tensor
    step: int
    step_end: bool

    def to(self, device: Any, non_blocking: bool = False) -> WeightedBatch:
        """This batch with its tensors on ``device`` (a device only: a dtype
        would turn the sample ids into floats)."""
        if isinstance(device, torch.dtype):
            raise TypeError(
                f"WeightedBatch.to takes a device, got the dtype {device}: convert batch.data "
                "or batch.sample_weight instead"
            )
        return WeightedBatch(
            _to_device(self.data, device, non_blocking),
            self.sample_weight.to(device, non_blocking=non_blocking),
            self.indices.to(device, non_blocking=non_blocking),
            self.step,
            self.step_end,
        )


class WeightedCollate:
    """A collate function producing :class:`WeightedBatch` (picklable, for workers).

    Args:
        collate_fn: collates the samples (default: torch's ``default_collate``).
        dtype: the dtype of ``sample_weight`` (default float32; use the loss's dtype).
    """

    def __init__(
        self,
        collate_fn: Callable[[list[Any]], Any] | None = None,
        dtype: torch.dtype = torch.float32,
    ) -> None:
        self.collate_fn = default_collate if collate_fn is None else collate_fn
        self.dtype = dtype

    def __call__(self, samples: list[Any]) -> WeightedBatch:
        if not isinstance(samples, _WeightedSamples):
            raise TypeError(
                "WeightedCollate got samples without weights: give the DataLoader "
                "ElasticBatchSampler.wrap_dataset(dataset) and batch_sampler=<an "
                "ElasticBatchSampler>. If you did, a framework probably replaced the batch "
                "sampler: Ray Train's prepare_data_loader does (use "
                "epochplan.ray.prepare_data_loader(loader)), and so does a loader rebuilt "
                "with batch_size= or sampler=; see docs/guides/frameworks.md"
            )
        batch = samples.indices
        return WeightedBatch(
            data=self.collate_fn(samples.collate_input()),
            sample_weight=torch.as_tensor(batch.weights, dtype=self.dtype),
            indices=torch.tensor(list(batch), dtype=torch.int64),
            step=batch.step,
            step_end=batch.step_end,
        )

    def __repr__(self) -> str:
        return f"WeightedCollate({self.collate_fn!r}, dtype={self.dtype})"
