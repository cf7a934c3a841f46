"""megatron-core's dataset indices, byte for byte, computed in Rust.

The modules mirror megatron-core 0.16.1's (``megatron.core.datasets``):
:mod:`~epochplan.compat.megatron.helpers` its compiled helpers,
:mod:`~epochplan.compat.megatron.gpt_dataset` the ``GPTDataset`` indices,
:mod:`~epochplan.compat.megatron.blended_dataset` the ``BlendedDataset``
indices and the builder's sizes. ``epochplan megatron-cache`` writes a whole
Megatron index cache from them. See docs/guides/from-megatron.md.
"""

from epochplan.compat.megatron.blended_dataset import (
    build_blended_indices,
    get_size_per_split_per_dataset,
    normalize,
)
from epochplan.compat.megatron.gpt_dataset import (
    GPTIndices,
    build_document_index,
    build_gpt_indices,
    build_shuffle_index,
)
from epochplan.compat.megatron.helpers import (
    build_blending_indices,
    build_exhaustive_blending_indices,
    build_sample_idx,
    build_sample_idx_int32,
    build_sample_idx_int64,
)

#: The megatron-core release these functions reproduce.
MEGATRON_CORE_VERSION = "0.16.1"

__all__ = [
    "MEGATRON_CORE_VERSION",
    "GPTIndices",
    "build_blended_indices",
    "build_blending_indices",
    "build_document_index",
    "build_exhaustive_blending_indices",
    "build_gpt_indices",
    "build_sample_idx",
    "build_sample_idx_int32",
    "build_sample_idx_int64",
    "build_shuffle_index",
    "get_size_per_split_per_dataset",
    "normalize",
]
