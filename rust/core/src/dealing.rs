//! Dealing: which of a step's positions each rank gets.
//!
//! A step is a [`Span`] of positions `[start, start + len)` of the epoch's
//! order; which span is a step does not depend on the world size `W` (that
//! is what makes plans elastic). A dealing gives every position of the span
//! to exactly one of the `W` ranks, in an order inside the rank's share, and
//! names the position whose sample fills a rank that gets none.
//!
//! [`Dealing::Strided`]: rank `r` gets the span's positions `r, r + W,
//! ...`, so shares differ by at most one sample; a share's size, its
//! positions and its filler follow from the span alone.
//!
//! [`Dealing::Balanced`] (DESIGN.md section 8) deals a span's positions by
//! the lengths of the samples there, balanced by a [`Cost`] over the ranks
//! ([`crate::tokens::StepShares`]); micro-batches are cut under
//! [`crate::tokens::Caps`] ([`crate::tokens::StepDealing`]). The lengths are
//! not part of the dealing: a caller reads the span's lengths (the order maps
//! its positions to ids, the ids index a [`SampleLengths`]) into a
//! [`StepSamples`] and hands it to the layout, one step at a time, so that
//! lengths stay borrowed (a memory map, say) and are read per step. The
//! span's sample set is the same as for strided dealing: only who gets
//! which sample changes. Index spaces
//! (DESIGN.md section 7) live on the other side of the order: a dealing
//! works on positions, the order maps them to ids, a space maps those ids to
//! the store's.

use crate::error::{Error, Result};
use crate::tokens::Cost;

/// The positions `[start, start + len)` of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// The step's first position.
    pub start: u64,
    /// Real samples in the step, over all ranks (`n_t`).
    pub len: u64,
}

/// How a step's positions are dealt to ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Dealing {
    /// Rank `r` of `W` gets the step's positions `r, r + W, r + 2W, ...`.
    #[default]
    Strided,
    /// Balanced by `cost` over the ranks, from the lengths of the step's
    /// samples (see [`crate::tokens`]); the positional methods below deal
    /// nothing for it: a layout asks it with the step's [`StepSamples`].
    Balanced {
        /// What a sample costs by its length.
        cost: Cost,
    },
}

impl Dealing {
    /// Whether a rank's share of a step depends on the step's length alone
    /// (not on which samples it holds): sums over steps are then O(1).
    pub fn by_length_only(&self) -> bool {
        match self {
            Dealing::Strided => true,
            Dealing::Balanced { .. } => false,
        }
    }

    /// Whether shares follow from the span alone (the positional methods
    /// below answer), as opposed to the lengths of its samples.
    pub fn by_position(&self) -> bool {
        matches!(self, Dealing::Strided)
    }

    /// Real samples of rank `rank` of `world_size` in the step `span` (0 for
    /// a balanced dealing, which needs the step's lengths).
    pub fn count(&self, span: Span, rank: u64, world_size: u64) -> u64 {
        match self {
            Dealing::Strided => strided_count(span.len, rank, world_size),
            Dealing::Balanced { .. } => 0,
        }
    }

    /// Writes the positions of rank `rank`'s share of `span`, from its
    /// `skip`-th on, into `out` (at most `count - skip` of them).
    pub fn fill_positions(
        &self,
        span: Span,
        rank: u64,
        world_size: u64,
        skip: u64,
        out: &mut [i64],
    ) {
        match self {
            Dealing::Strided => {
                let base = (span.start + rank + skip * world_size) as i64;
                for (k, slot) in out.iter_mut().enumerate() {
                    *slot = base + k as i64 * world_size as i64;
                }
            }
            Dealing::Balanced { .. } => {}
        }
    }

    /// The position whose sample (with weight 0) fills the micro-batches of
    /// a rank whose share of `span` is empty: the span's position
    /// `rank mod n_t`. `span` must not be empty.
    pub fn filler_position(&self, span: Span, rank: u64) -> u64 {
        match self {
            Dealing::Strided => span.start + rank % span.len,
            Dealing::Balanced { .. } => span.start,
        }
    }
}

/// Sample lengths (or loss tokens) by sample id, borrowed: a slice (`&[T]`
/// or a `Vec<T>` of any integer type), a
/// memory-mapped file, an array of another runtime (numpy's, in the
/// bindings). Only the ids asked for are read.
pub trait SampleLengths {
    /// The number of samples it holds a length for.
    fn num_samples(&self) -> u64;

    /// Appends the length of each of `ids` (each in `[0, num_samples)`) to
    /// `out`; an error for a negative value, naming `name` and the id.
    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()>;

    /// Appends the values of ids `[start, end)` in order: a pass in id
    /// order, which gives back the pages it read when the values are a
    /// shared file mapping (see [`crate::pages`]).
    fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
        let ids: Vec<i64> = (start as i64..end as i64).collect();
        self.read(name, &ids, out)
    }

    /// True when the values are a shared mapping of a file (whose pages a
    /// pass in id order gives back).
    fn file_mapped(&self) -> bool {
        false
    }

    /// As [`SampleLengths::read`], for `ids` that are the samples of the
    /// epoch's positions `first_position, first_position + 1, ...` (a
    /// step's ids in order): values staged by position are read without
    /// the ids.
    fn read_at(
        &self,
        name: &str,
        first_position: u64,
        ids: &[i64],
        out: &mut Vec<u64>,
    ) -> Result<()> {
        let _ = first_position;
        self.read(name, ids, out)
    }
}

macro_rules! slice_lengths {
    ($($t:ty),*) => {$(
        impl SampleLengths for &[$t] {
            fn num_samples(&self) -> u64 {
                self.len() as u64
            }

            fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
                out.try_reserve(ids.len())
                    .map_err(|_| Error::Memory("cannot allocate the step's lengths".into()))?;
                // The ids of a step are scattered over the array: each read
                // is a cache miss, so the entry a few ids ahead is fetched
                // while this one is read.
                const AHEAD: usize = 16;
                for (k, &id) in ids.iter().enumerate() {
                    if let Some(ahead) = ids
                        .get(k + AHEAD)
                        .and_then(|&a| usize::try_from(a).ok())
                        .and_then(|a| self.get(a))
                    {
                        crate::buffer::prefetch(ahead);
                    }
                    let value = usize::try_from(id).ok().and_then(|i| self.get(i)).ok_or_else(|| {
                        Error::Index(format!(
                            "sample id must be in [0, {}), got {id}",
                            self.len()
                        ))
                    })?;
                    let value = i128::from(*value);
                    if value < 0 {
                        return Err(negative_length(name, id, value));
                    }
                    out.push(value as u64);
                }
                Ok(())
            }

            fn file_mapped(&self) -> bool {
                crate::pages::Pages::of(self).is_some()
            }

            fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
                let values = usize::try_from(start)
                    .ok()
                    .zip(usize::try_from(end).ok())
                    .and_then(|(a, b)| self.get(a..b))
                    .ok_or_else(|| {
                        Error::Index(format!(
                            "sample ids [{start}, {end}) must lie in [0, {})",
                            self.len()
                        ))
                    })?;
                out.try_reserve(values.len())
                    .map_err(|_| Error::Memory("cannot allocate the lengths read".into()))?;
                for (k, &value) in values.iter().enumerate() {
                    let value = i128::from(value);
                    if value < 0 {
                        return Err(negative_length(name, (start + k as u64) as i64, value));
                    }
                    out.push(value as u64);
                }
                if let Some(pages) = crate::pages::Pages::of(self) {
                    pages.release(values);
                }
                Ok(())
            }
        }
    )*};
}

slice_lengths!(u8, u16, u32, u64, i8, i16, i32, i64);

impl<T> SampleLengths for Vec<T>
where
    for<'a> &'a [T]: SampleLengths,
{
    fn num_samples(&self) -> u64 {
        self.len() as u64
    }

    fn read(&self, name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        self.as_slice().read(name, ids, out)
    }

    fn read_run(&self, name: &str, start: u64, end: u64, out: &mut Vec<u64>) -> Result<()> {
        self.as_slice().read_run(name, start, end, out)
    }

    fn file_mapped(&self) -> bool {
        self.as_slice().file_mapped()
    }
}

/// The error for a negative length or loss-token count of sample `id`.
pub fn negative_length(name: &str, id: i64, value: i128) -> Error {
    Error::Value(format!(
        "{name} must be >= 0 for every sample, got {name}[{id}] = {value}"
    ))
}

/// A digest of an array of lengths (or loss tokens), for a plan's state to
/// refuse other arrays: BLAKE3 of a tag, the count and every value as a
/// little-endian `u64`, so an array's dtype does not matter, its values do.
/// O(N): computed once per plan, when its state is first asked for.
#[derive(Debug, Clone)]
pub struct LengthsDigest(blake3::Hasher);

impl LengthsDigest {
    /// A digest of `count` values, fed in order by [`LengthsDigest::update`].
    pub fn new(count: u64) -> LengthsDigest {
        let mut hasher = blake3::Hasher::new();
        hasher.update(b"epochplan lengths v1\0");
        hasher.update(&count.to_le_bytes());
        LengthsDigest(hasher)
    }

    /// Feeds the next values.
    pub fn update(&mut self, values: &[u64]) {
        // Pieces of 64 KiB: BLAKE3 hashes the 1 KiB chunks of one input
        // side by side in the vector lanes (16 with AVX-512), so a larger
        // input is hashed faster.
        let mut bytes = vec![0u8; 8 * values.len().min(8192)];
        for piece in values.chunks(8192) {
            for (slot, v) in bytes.chunks_exact_mut(8).zip(piece) {
                slot.copy_from_slice(&v.to_le_bytes());
            }
            self.0.update(&bytes[..8 * piece.len()]);
        }
    }

    /// The digest, as `"blake3:"` and 64 hex digits.
    pub fn finish(&self) -> String {
        format!("blake3:{}", self.0.finalize().to_hex())
    }
}

/// The samples of one step, as a balanced dealing reads them: their ids
/// (position order: `ids[i]` is at position `span.start + i`), lengths and
/// loss tokens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepSamples {
    /// The step.
    pub step: u64,
    /// Its positions.
    pub span: Span,
    /// The sample ids at its positions (the positions themselves for a
    /// layout without an order).
    pub ids: Vec<i64>,
    /// Their lengths in tokens.
    pub lengths: Vec<u64>,
    /// Their loss tokens, when not the lengths.
    pub loss_tokens: Option<Vec<u64>>,
}

impl StepSamples {
    /// The tokens that count in the loss, per sample.
    pub fn loss_tokens(&self) -> &[u64] {
        self.loss_tokens.as_deref().unwrap_or(&self.lengths)
    }

    /// `T_t`: the step's loss tokens (exact).
    pub fn step_tokens(&self) -> u128 {
        crate::tokens::step_tokens(self.loss_tokens())
    }
}

/// Real samples of rank `rank` in a strided step of `step_len` samples.
pub fn strided_count(step_len: u64, rank: u64, world_size: u64) -> u64 {
    if rank < step_len {
        (step_len - rank).div_ceil(world_size)
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_shares_partition_the_span() {
        for len in [0u64, 1, 5, 16, 17] {
            for w in 1..7 {
                let span = Span { start: 100, len };
                let mut all = Vec::new();
                for r in 0..w {
                    let count = Dealing::Strided.count(span, r, w);
                    let mut out = vec![0; count as usize];
                    Dealing::Strided.fill_positions(span, r, w, 0, &mut out);
                    all.extend(out);
                }
                all.sort_unstable();
                assert_eq!(all, (100..100 + len as i64).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn skipping_starts_inside_the_share() {
        let span = Span { start: 10, len: 9 };
        let mut out = [0; 2];
        Dealing::Strided.fill_positions(span, 1, 2, 2, &mut out);
        assert_eq!(out, [15, 17]);
        assert_eq!(Dealing::Strided.filler_position(span, 12), 13);
    }
}
