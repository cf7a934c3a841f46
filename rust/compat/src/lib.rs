//! epochplan-compat: other libraries' sample orders and dataset indices,
//! reimplemented bit for bit on epochplan-core, so that a user can swap
//! epochplan in and check that nothing changed.
//!
//! - [`streaming`]: MosaicML Streaming's partitions and shuffles, with numpy's
//!   `Generator(PCG64)`.
//! - [`megatron`]: megatron-core's `GPTDataset` and `BlendedDataset` indices,
//!   with numpy's legacy `RandomState` (MT19937).
//!
//! Errors are the core's [`epochplan_core::Error`], so the bindings map them
//! as every other. The only `unsafe` is the calls into builds of hot loops for
//! instructions beyond baseline x86-64 (AVX2, AVX-512, BMI2) after the CPU
//! was seen to have them: the numpy generator's shuffle walk, `py1e`'s sort
//! and the blending loop of Megatron's indices; and those loops' unaligned
//! vector loads and stores into bounds-checked slices. Each carries its reason
//! in a `SAFETY` comment.
#![deny(unsafe_code)]

pub mod megatron;
pub mod streaming;

/// Serialises the tests that change the thread count: cargo runs tests on
/// parallel threads, and the count is the process's.
#[cfg(test)]
pub(crate) fn test_threads_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
