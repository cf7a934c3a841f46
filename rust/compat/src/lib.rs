//! epochplan-compat: other libraries' sample orders and dataset indices,
//! reimplemented bit for bit on epochplan-core, so that a user can swap
//! epochplan in and check that nothing changed.
//!
//! - [`megatron`]: megatron-core's `GPTDataset` and `BlendedDataset` indices.
//!
//! Errors are the core's [`epochplan_core::Error`], so the bindings map them
//! as every other. No unsafe code: the one prefetch is the core's.
#![deny(unsafe_code)]

pub mod megatron;
