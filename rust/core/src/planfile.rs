//! Plan files: one rank's sample ids of one epoch stored as a 1-d int64 `.npy`
//! file, written and verified in memory that does not depend on `N`.
//!
//! Writing streams a rank's ids in chunks of [`CHUNK_IDS`] from
//! [`crate::plan::Plan::fill_rank_ids`] (parallel over the pool) to a writer
//! thread that checksums (BLAKE3 of the whole file, header included) and
//! writes them, so computing and I/O overlap and at most [`BUFFERS`] chunks
//! exist at a time.
//! Verifying streams every file of an epoch back (files in parallel), checks
//! its header, size and checksum, and marks every id in a bitmap of `N / 8`
//! bytes: an id out of range or seen twice is a violation.
//!
//! The `.npy` format (NumPy Enhancement Proposal 1, "format version 1.0"):
//! the magic `\x93NUMPY`, the version bytes `1, 0`, a little-endian `u16`
//! header length, then an ASCII Python dict literal with the keys `descr`,
//! `fortran_order` and `shape`, padded with spaces and ended by `\n` so that
//! the data starts at a multiple of 64 bytes. Version 2.0 (a `u32` length) is
//! only needed for headers over 65535 bytes, which a 1-d shape never reaches;
//! the reader accepts 1.0, 2.0 and 3.0.

mod npy;
mod staging;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod token_tests;
mod token_verify;
mod tokens;
mod verify;
mod write;

pub use npy::{
    npy_file_size, npy_file_size_of, npy_header, npy_header_of, parse_npy_header, FileDtype,
    NpyHeader,
};
pub use staging::{
    batch_arrays, can_stage, StagedArrays, StagedArraysReader, StagedBatch, StagedBatches,
    StagedReader, Staging, STAGE_MIN_SAMPLES,
};
pub use token_verify::{verify_token_files, TokenCheck, TokenEpochFiles, DEALING_RANGE_SAMPLES};
pub use tokens::{
    deal_token_step, deal_token_steps, first_error, steps_per_batch, to_i64, write_token_files,
    DealtStep, TokenArraysRef, TokenFiles, TokenPaths, STEP_COLUMNS, TOKEN_BATCH_SAMPLES,
};
pub use verify::{
    check_rank_file, file_checksum, verify_part_files, verify_rank_files, ExpectedFile,
};
pub use write::{stream_ranks, write_rank_files, FileInfo, FileSink, NullSink, RankSink};

use std::time::Duration;

/// Ids per streamed chunk (8 MiB of int64).
pub const CHUNK_IDS: usize = 1 << 20;
/// Chunks alive at once while writing (computing, queued, being written).
pub const BUFFERS: usize = 4;
/// How often the progress callback runs.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);
