//! epochplan-core: which sample every rank of a data-parallel job sees at every
//! optimizer step, as plain deterministic integer functions.
//!
//! - [`cipher`]: a keyed O(1) bijection of `[0, n)` for any `n < 2^63`.
//! - [`shuffle`]: an exactly uniform permutation (parallel scatter shuffle).
//! - [`chunked`]: an I/O-local order for chunked storage.
//! - [`order`]: the order of an epoch, by kind.
//! - [`split`]: dealing positions to ranks.
//! - [`dealing`]: dealing a step's positions to ranks.
//! - [`layout`]: an epoch's steps, shares, micro-batch cuts and weights.
//! - [`plan`]: exact, equal-step, weighted, elastic epoch plans (a layout and an order).
//! - [`planfile`]: plans written to and verified from `.npy` files.
//!
//! Other libraries' orders, reimplemented bit for bit (MosaicML Streaming's,
//! megatron-core's), live beside this crate in `epochplan-compat`.
//!
//! The only `unsafe` is the calls into builds of hot loops for instructions
//! beyond baseline x86-64 (AVX2, AVX-512, BMI2) after the CPU was seen to
//! have them: the cipher's batch evaluator, a mask's rank and select, the
//! interleave of a mixture; their unaligned vector loads and stores and
//! streaming stores into
//! bounds-checked slices and arrays; and the allocation of large zeroed
//! outputs with a huge-page hint (`buffer.rs`). Each carries its reason in a
//! `SAFETY` comment.
#![deny(unsafe_code)]

pub mod buffer;
pub mod chunked;
pub mod cipher;
pub mod dealing;
pub mod error;
pub mod keys;
pub mod layout;
pub mod order;
pub mod parallel;
pub mod plan;
pub mod planfile;
pub mod shuffle;
pub mod space;
pub mod split;
pub mod tokens;

pub use error::{Error, Result};
pub use keys::FORMAT_VERSION;
pub use layout::Layout;
pub use order::{Kind, Order, MAX_SAMPLES};
