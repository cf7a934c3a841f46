"""Packed micro-batches: a token plan's micro-batch flattened into one row
of varlen-attention inputs (:class:`PackedCollate`, :class:`PackedBatch`).

A micro-batch of a token plan under ``max_tokens`` holds at most that many
tokens in all: exactly one packed row. :class:`PackedCollate` concatenates
its samples into ``input_ids`` of shape ``(1, T)`` with ``position_ids``
restarting at 0 in every sample, ``cu_seqlens`` and ``max_seqlen`` for
varlen kernels (flash-attention's names), ``seq_idx`` (each token's sample,
Mamba's name), and labels that never cross a sample boundary: each
sample's first label is ``ignore_index``, so the shift of a causal LM never
asks a sample's last token to predict the next sample's first. With
``attention_mask=True`` it also builds the block-diagonal causal mask for
backends without varlen kernels. The loss helpers of
:mod:`epochplan.torch.token_loss` turn the model's logits into the plan's
weighted sum. See the token plans guide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch

from epochplan.torch.collate import WeightedBatch, WeightedCollate, WeightedIndices

__all__ = ["PackedBatch", "PackedCollate"]


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """One micro-batch packed into a single row of ``T`` tokens.

    Attributes:
        input_ids: ``(1, T)`` int64, the samples one after the other.
        labels: ``(1, T)`` int64, the samples' labels (a sample's own
            ``labels``, else its ``input_ids``) with each sample's first
            label set to ``ignore_index``: the causal shift (logit ``t - 1``
            predicts label ``t``) stays inside every sample.
        position_ids: ``(1, T)`` int64, ``0 .. L - 1`` in each sample.
        seq_idx: ``(1, T)`` int32, the row in this micro-batch of each
            token's sample (``0 .. S - 1``).
        cu_seqlens: ``(S + 1,)`` int32, the samples' cumulative lengths
            (``cu_seqlens[i] .. cu_seqlens[i + 1]`` is sample ``i``).
        max_seqlen: the longest sample's length.
        attention_mask: ``(1, 1, T, T)`` bool, True where a query may attend
            to a key (same sample, not later), or None unless asked for.
        sample_weight: ``(S,)`` the plan's loss weights (0 for a filler), in
            float64 unless the collate was given another dtype.
        indices: ``(S,)`` int64, the sample ids.
        step: the optimizer step of this micro-batch.
        step_end: True on the step's last micro-batch.
    """

    input_ids: torch.Tensor
    labels: torch.Tensor
    position_ids: torch.Tensor
    seq_idx: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    attention_mask: torch.Tensor | None
    sample_weight: torch.Tensor
    indices: torch.Tensor
    step: int
    step_end: bool

    @property
    def num_tokens(self) -> int:
        """``T``, the tokens of the packed row."""
        return int(self.input_ids.shape[-1])

    @property
    def num_samples(self) -> int:
        """``S``, the samples of the micro-batch (fillers included)."""
        return int(self.cu_seqlens.shape[0]) - 1

    def to(self, device: torch.device | str, non_blocking: bool = False) -> PackedBatch:
        """The same batch with every tensor on ``device``."""
        moved: dict[str, Any] = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, torch.Tensor):
                value = value.to(device, non_blocking=non_blocking)
            moved[field.name] = value
        return PackedBatch(**moved)

    def model_inputs(self) -> dict[str, torch.Tensor]:
        """``input_ids``, ``position_ids`` and the ``attention_mask`` if built:
        the keyword arguments of a Hugging Face causal LM's forward."""
        inputs = {"input_ids": self.input_ids, "position_ids": self.position_ids}
        if self.attention_mask is not None:
            inputs["attention_mask"] = self.attention_mask
        return inputs

    def flash_attn_kwargs(self) -> dict[str, Any]:
        """``cu_seq_lens_q``/``_k`` and ``max_length_q``/``_k``: the names
        Hugging Face's flash-attention path takes for packed rows."""
        return {
            "cu_seq_lens_q": self.cu_seqlens,
            "cu_seq_lens_k": self.cu_seqlens,
            "max_length_q": self.max_seqlen,
            "max_length_k": self.max_seqlen,
        }


def _tokens_of(sample: Any, name: str) -> npt.NDArray[np.int64]:
    """A 1-d int64 array of a sample's tokens or labels."""
    if isinstance(sample, torch.Tensor):
        sample = sample.detach().cpu().numpy()
    array = np.asarray(sample)
    if array.ndim != 1:
        raise ValueError(f"{name} must be 1-d (one sample's tokens), got shape {array.shape}")
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{name} must hold integers, got dtype {array.dtype}")
    return array.astype(np.int64, copy=False)


def _split_sample(sample: Any, row: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A sample's ``(input_ids, labels)``: a mapping with ``input_ids`` and
    optional ``labels``, or a sequence of token ids (its own labels)."""
    if isinstance(sample, Mapping):
        if "input_ids" not in sample:
            raise ValueError(
                f"sample {row} of the micro-batch must have 'input_ids', got keys {list(sample)}"
            )
        ids = _tokens_of(sample["input_ids"], f"sample {row}'s input_ids")
        labels_in = sample.get("labels")
        if labels_in is None:
            return ids, ids
        labels = _tokens_of(labels_in, f"sample {row}'s labels")
        if labels.shape != ids.shape:
            raise ValueError(
                f"sample {row}'s labels must have its input_ids' length {ids.size}, "
                f"got {labels.size}"
            )
        return ids, labels
    ids = _tokens_of(sample, f"sample {row}")
    return ids, ids


class PackedCollate:
    """A collate function packing a token plan's micro-batch into one row
    (:class:`PackedBatch`); picklable, for DataLoader workers.

    Each sample is a 1-d sequence of token ids (a list, an array, a tensor)
    or a mapping with ``input_ids`` and optional ``labels`` of the same
    length (Hugging Face's unshifted labels: ``ignore_index`` where a token is
    not a target, e.g. an SFT prompt). Use it with a sampler's
    ``wrap_dataset`` (the weights travel with the samples)::

        loader = DataLoader(sampler.wrap_dataset(dataset), batch_sampler=sampler,
                            collate_fn=PackedCollate(max_tokens=8192))

    The weights are float64 by default: the plan's ``W / T_t`` rounded to
    float32 makes the step's token mean exact only to about 1e-7, float64 to
    about 1e-16, and a weighted sum of float32 losses with float64 weights
    costs nothing next to the model.

    Args:
        attention_mask: also build the ``(1, 1, T, T)`` bool block-diagonal
            causal mask (for SDPA and other backends without varlen kernels;
            its memory is ``T**2`` bytes).
        ignore_index: the label of tokens outside the loss (torch's and
            Hugging Face's -100).
        weight_dtype: the dtype of ``sample_weight``.
        max_tokens: if given, a micro-batch of more tokens is a ValueError (a
            dataset whose samples disagree with the plan's ``lengths``).
        lengths: if given, each sample must have ``lengths[id]`` tokens
            (the plan's lengths; a ValueError names the first that does not).
        max_length: if given, each sample is cut to its first ``max_length``
            tokens first (a sampler's ``oversize="truncate"``: give it
            ``max_tokens``).

    Examples:
        >>> from epochplan import PlanSpec, Tokens
        >>> from epochplan.torch import ElasticBatchSampler
        >>> data = [[1, 2, 3], [4, 5], [6, 7, 8, 9]]
        >>> spec = PlanSpec(3, 3, tokens=Tokens(np.array([3, 2, 4])))
        >>> sampler = ElasticBatchSampler(spec, max_tokens=9, rank=0, num_replicas=1)
        >>> loader = torch.utils.data.DataLoader(
        ...     sampler.wrap_dataset(data), batch_sampler=sampler,
        ...     collate_fn=PackedCollate())
        >>> batch = next(iter(loader))
        >>> batch.cu_seqlens.tolist(), batch.position_ids.tolist()
        ([0, 2, 5, 9], [[0, 1, 0, 1, 2, 0, 1, 2, 3]])
        >>> batch.labels.tolist()
        [[-100, 5, -100, 2, 3, -100, 7, 8, 9]]
    """

    def __init__(
        self,
        *,
        attention_mask: bool = False,
        ignore_index: int = -100,
        weight_dtype: torch.dtype = torch.float64,
        max_tokens: int | None = None,
        lengths: npt.ArrayLike | None = None,
        max_length: int | None = None,
    ) -> None:
        if not isinstance(attention_mask, bool):
            raise TypeError(f"attention_mask must be a bool, got {type(attention_mask).__name__}")
        if isinstance(ignore_index, bool) or not isinstance(ignore_index, int):
            raise TypeError(f"ignore_index must be an int, got {type(ignore_index).__name__}")
        if not isinstance(weight_dtype, torch.dtype) or not weight_dtype.is_floating_point:
            raise TypeError(f"weight_dtype must be a floating torch.dtype, got {weight_dtype!r}")
        if max_tokens is not None and (
            isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
        ):
            raise ValueError(f"max_tokens must be None or an int >= 1, got {max_tokens!r}")
        if max_length is not None and (
            isinstance(max_length, bool) or not isinstance(max_length, int) or max_length < 1
        ):
            raise ValueError(f"max_length must be None or an int >= 1, got {max_length!r}")
        self.max_length = max_length
        self.attention_mask = attention_mask
        self.ignore_index = ignore_index
        self.weight_dtype = weight_dtype
        self.max_tokens = max_tokens
        self.lengths = None if lengths is None else np.asarray(lengths)
        if self.lengths is not None and self.lengths.ndim != 1:
            raise ValueError(f"lengths must be 1-d, got shape {self.lengths.shape}")
        self._weighted = WeightedCollate(self._pack, dtype=weight_dtype)

    def __call__(self, samples: list[Any]) -> PackedBatch:
        indices = getattr(samples, "indices", None)
        if not isinstance(indices, WeightedIndices):
            raise TypeError(
                "PackedCollate got samples without weights: give the DataLoader "
                "sampler.wrap_dataset(dataset) and batch_sampler=<a token-plan sampler>"
            )
        self._check_lengths(indices, samples)
        weighted: WeightedBatch = self._weighted(samples)
        packed: dict[str, Any] = weighted.data
        return PackedBatch(
            **packed,
            sample_weight=weighted.sample_weight,
            indices=weighted.indices,
            step=weighted.step,
            step_end=weighted.step_end,
        )

    def _check_lengths(self, indices: Sequence[int], samples: Any) -> None:
        if self.lengths is None or not isinstance(samples, list):
            return
        for row, (sample_id, sample) in enumerate(zip(indices, samples, strict=False)):
            got = self._split(sample, row)[0].size
            if got != int(self.lengths[sample_id]):
                raise ValueError(
                    f"sample {sample_id} has {got} tokens, but lengths[{sample_id}] = "
                    f"{int(self.lengths[sample_id])}: the dataset and the plan's lengths disagree"
                )

    def _split(self, sample: Any, row: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """A sample's ``(input_ids, labels)``, cut to ``max_length``."""
        ids, labels = _split_sample(sample, row)
        cut = self.max_length
        return (ids, labels) if cut is None else (ids[:cut], labels[:cut])

    def _pack(self, samples: list[Any]) -> dict[str, Any]:
        pairs = [self._split(sample, row) for row, sample in enumerate(samples)]
        if not pairs:
            raise ValueError("a micro-batch must hold at least one sample, got none")
        sizes = np.array([ids.size for ids, _ in pairs], dtype=np.int64)
        total = int(sizes.sum())
        if self.max_tokens is not None and total > self.max_tokens:
            raise ValueError(
                f"the micro-batch holds {total} tokens, more than max_tokens ({self.max_tokens}): "
                "the dataset's samples are longer than the plan's lengths"
            )
        cu = np.zeros(len(pairs) + 1, dtype=np.int64)
        np.cumsum(sizes, out=cu[1:])
        input_ids = np.concatenate([ids for ids, _ in pairs])
        labels = np.concatenate([labels for _, labels in pairs]).copy()
        starts = cu[:-1][sizes > 0]
        labels[starts] = self.ignore_index
        seq_idx = np.repeat(np.arange(len(pairs), dtype=np.int64), sizes)
        position_ids = np.arange(total, dtype=np.int64) - cu[seq_idx]
        seq = torch.from_numpy(seq_idx)
        mask = None
        if self.attention_mask:
            pos = torch.arange(total)
            mask = (seq[:, None] == seq[None, :]) & (pos[:, None] >= pos[None, :])
            mask = mask[None, None]
        return {
            "input_ids": torch.from_numpy(input_ids)[None],
            "labels": torch.from_numpy(labels)[None],
            "position_ids": torch.from_numpy(position_ids)[None],
            "seq_idx": seq.to(torch.int32)[None],
            "cu_seqlens": torch.from_numpy(cu.astype(np.int32)),
            "max_seqlen": int(sizes.max()),
            "attention_mask": mask,
        }

    def __repr__(self) -> str:
        return (
            f"PackedCollate(attention_mask={self.attention_mask}, "
            f"ignore_index={self.ignore_index}, weight_dtype={self.weight_dtype}, "
            f"max_tokens={self.max_tokens}, max_length={self.max_length})"
        )
