"""Samplers for ``torch.utils.data.DataLoader`` built on epochplan's orders and plans.

This is the only module of the package that imports torch.

* :class:`DistributedSampler`: a drop-in for ``torch.utils.data.DistributedSampler``
  (same arguments, attributes, counts, padding and dropping), whose shuffled order
  comes from a :class:`~epochplan.Permutation`: a rank computes only its own share,
  lazily, in chunks; nothing of size N is built.
* :class:`ExactDistributedSampler`: no padding, no dropping (for evaluation).
* :class:`ElasticBatchSampler`: micro-batches of an :class:`~epochplan.EpochPlan`,
  the same count on every rank, with loss weights; resumable on any world size.
* :class:`ChunkSampler`: the same for chunked storage (kind ``"chunked"``).
* :class:`PlanSampler`: the same micro-batches read from a plan directory
  written offline (:mod:`epochplan.planfile`).
* :class:`PackedCollate`: a token plan's micro-batch packed into one row of
  varlen-attention inputs (:class:`PackedBatch`), with the loss helpers of
  :mod:`epochplan.torch.token_loss`.

:class:`epochplan.torch.dcp.PlanState` (imported from its module) saves a
sampler's position with ``torch.distributed.checkpoint``; the integrations
with training frameworks live in :mod:`epochplan.accelerate`,
:mod:`epochplan.transformers` and :mod:`epochplan.ray`.

Rank and world size come from :func:`resolve_rank`: explicit arguments, else
``torch.distributed`` (if initialised), else the ``RANK`` / ``WORLD_SIZE``
environment variables, else a rank provider (``rank_fn=`` or
:func:`set_rank_provider`, e.g. for JAX).
"""

from epochplan.torch.collate import (
    WeightedBatch,
    WeightedCollate,
    WeightedDataset,
    WeightedIndices,
)
from epochplan.torch.distributed import DistributedSampler, ExactDistributedSampler
from epochplan.torch.elastic import ChunkSampler, ElasticBatchSampler
from epochplan.torch.packing import PackedBatch, PackedCollate
from epochplan.torch.plan_sampler import PlanSampler
from epochplan.torch.rank import RankProvider, resolve_rank, set_rank_provider
from epochplan.torch.token_loss import sample_losses, token_losses, weighted_loss

__all__ = [
    "ChunkSampler",
    "DistributedSampler",
    "ElasticBatchSampler",
    "ExactDistributedSampler",
    "PackedBatch",
    "PackedCollate",
    "PlanSampler",
    "RankProvider",
    "WeightedBatch",
    "WeightedCollate",
    "WeightedDataset",
    "WeightedIndices",
    "resolve_rank",
    "sample_losses",
    "set_rank_provider",
    "token_losses",
    "weighted_loss",
]
