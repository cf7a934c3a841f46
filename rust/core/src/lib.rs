//! epochplan-core: which sample every rank of a data-parallel job sees at every
//! optimizer step, as plain deterministic integer functions.
//!
//! Orders (which sample is at each position of an epoch):
//! - [`keys`]: the keys of every keyed function, from `(seed, epoch, domain)`.
//! - [`cipher`]: a keyed O(1) bijection of `[0, n)` for any `n < 2^63`.
//! - [`shuffle`]: an exactly uniform permutation (parallel scatter shuffle).
//! - [`chunked`]: an I/O-local order for chunked storage.
//! - [`order`]: the order of an epoch, by kind.
//! - [`space`]: index spaces (selections, random splits, mixtures).
//!
//! Plans (which rank gets each position, in which micro-batch, with which
//! weight):
//! - [`split`]: contiguous shares of a range (`epochplan.split`).
//! - [`dealing`]: dealing a step's positions to ranks.
//! - [`tokens`]: token plans: balanced dealing and capped micro-batches.
//! - [`layout`]: an epoch's steps, shares, micro-batch cuts and weights.
//! - [`plan`]: exact, equal-step, weighted, elastic epoch plans (a layout and an order).
//! - [`locate`]: where sample ids are in a plan (its inverse).
//! - [`planfile`]: plans written to and verified from `.npy` files.
//! - [`audit`]: the exactly-once audit's bitmap of consumed ids.
//!
//! Beside them: [`buffer`] (fallible large allocations), [`pages`] (a
//! memory-mapped file's pages given back behind a pass), [`parallel`] (the
//! thread pool's pieces, the same result on any thread count) and [`error`]
//! (the one error enum).
//!
//! Other libraries' orders, reimplemented bit for bit (MosaicML Streaming's,
//! megatron-core's), live beside this crate in `epochplan-compat`.
//!
//! The only `unsafe` is the calls into builds of hot loops for instructions
//! beyond baseline x86-64 (AVX2, AVX-512, BMI2) after the CPU was seen to
//! have them: the cipher's batch evaluator, a mask's rank and select, the
//! interleave of a mixture; their unaligned vector loads and stores and
//! streaming stores into bounds-checked slices and arrays; the allocation of large zeroed
//! outputs with a huge-page hint (`buffer.rs`); and the pages of a shared
//! file mapping given back after a pass has read them (`pages.rs`). Each
//! carries its reason in a `SAFETY` comment.
#![deny(unsafe_code)]

pub mod audit;
pub mod buffer;
pub mod chunked;
pub mod cipher;
pub mod dealing;
pub mod error;
pub mod keys;
pub mod layout;
pub mod locate;
pub mod order;
pub mod pages;
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
