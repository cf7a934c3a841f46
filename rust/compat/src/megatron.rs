//! megatron-core's dataset indices, byte for byte (megatron-core 0.16.1).
//!
//! - [`random_state`]: numpy's legacy `RandomState` (MT19937) and its shuffle.
//! - [`gpt`]: `GPTDataset`'s document, sample and shuffle indices
//!   (`helpers_cpp.build_sample_idx` among them).
//! - [`gpt_indices`]: the three at once, in less time.
//! - [`blend`]: `BlendedDataset`'s blending indices
//!   (`helpers_cpp.build_blending_indices` and the exhaustive variant).

pub mod blend;
pub mod gpt;
pub mod gpt_indices;
pub mod random_state;
