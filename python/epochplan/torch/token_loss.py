"""Token losses to the plan's weighted sum, for packed micro-batches
(:class:`~epochplan.torch.packing.PackedBatch`).

A token plan weighs every real sample of step ``t`` by ``W / T_t`` and
applies the weight to the SUM of that sample's per-token losses; fillers
weigh 0. With a packed row, the per-token losses are summed per sample over
``seq_idx``:

* :func:`token_losses`: the causal LM's per-token cross-entropy, aligned
  with the labels (0 where a label is ``ignore_index``);
* :func:`sample_losses`: each sample's summed token loss;
* :func:`weighted_loss`: ``(sample_weight * sample_losses).sum()``, the
  micro-batch's loss; its backward, accumulated over the step's
  micro-batches and averaged over the ranks by DDP, is the gradient of the
  step's mean token loss on one device.

The sums run in the weights' dtype (float64 by default), whatever the
logits' dtype.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F  # noqa: N812

from epochplan.torch.packing import PackedBatch

__all__ = ["sample_losses", "token_losses", "weighted_loss"]


def token_losses(
    logits: torch.Tensor, labels: torch.Tensor, *, ignore_index: int = -100
) -> torch.Tensor:
    """Per-token cross-entropy of a causal LM on one packed row.

    Logit ``t - 1`` predicts label ``t`` (the shift Hugging Face's models
    apply); the result is aligned with the labels: entry ``t`` is the loss of
    label ``t``, 0 where the label is ``ignore_index`` and at ``t = 0``.

    Args:
        logits: ``(1, T, V)`` or ``(T, V)``.
        labels: ``(1, T)`` or ``(T,)``, e.g. ``PackedBatch.labels``.
        ignore_index: the label of tokens outside the loss.

    Returns:
        ``(T,)`` losses in the logits' dtype.
    """
    if logits.dim() == 3:
        if logits.shape[0] != 1:
            raise ValueError(f"logits must be one packed row (1, T, V), got {tuple(logits.shape)}")
        logits = logits[0]
    if labels.dim() == 2:
        labels = labels[0]
    if logits.dim() != 2 or labels.dim() != 1 or logits.shape[0] != labels.shape[0]:
        raise ValueError(
            f"logits (T, V) and labels (T,) must have the same T, got {tuple(logits.shape)} "
            f"and {tuple(labels.shape)}"
        )
    shifted = F.cross_entropy(logits[:-1], labels[1:], reduction="none", ignore_index=ignore_index)
    return torch.cat([shifted.new_zeros(1), shifted])


def sample_losses(losses: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """Each sample's summed token loss: ``(S,)`` in ``batch.sample_weight``'s
    dtype, from the ``(T,)`` (or ``(1, T)``) per-token ``losses``."""
    losses = losses.reshape(-1)
    if losses.shape[0] != batch.num_tokens:
        raise ValueError(
            f"losses must hold the batch's {batch.num_tokens} tokens, got {losses.shape[0]}"
        )
    dtype = batch.sample_weight.dtype
    sums = torch.zeros(batch.num_samples, dtype=dtype, device=losses.device)
    return sums.index_add(0, batch.seq_idx.reshape(-1).long(), losses.to(dtype))


def weighted_loss(
    logits: torch.Tensor, batch: PackedBatch, *, ignore_index: int = -100
) -> torch.Tensor:
    """The micro-batch's loss under the plan's weights:
    ``(batch.sample_weight * sample_losses).sum()`` of the causal LM's
    token cross-entropy. Call ``backward()`` on it for every micro-batch of
    the step (under DDP's ``no_sync`` but the last)."""
    per_sample = sample_losses(token_losses(logits, batch.labels, ignore_index=ignore_index), batch)
    return (batch.sample_weight * per_sample).sum()
