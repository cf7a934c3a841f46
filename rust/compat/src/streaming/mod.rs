//! Bit-exact reimplementations of MosaicML Streaming's sample partitioning and
//! shuffles, computed from position arithmetic instead of numpy reshapes.
//!
//! - [`numpy_rng`]: numpy's `Generator(PCG64(SeedSequence))`, bit for bit.
//! - [`shuffle`]: Streaming's shard-aware shuffles (`get_shuffle`).
//! - [`partition`]: Streaming's partitions (`get_partitions`).

pub mod numpy_rng;
pub mod partition;
pub mod shuffle;
