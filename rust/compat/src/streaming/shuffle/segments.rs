//! `py1e`'s large canonical nodes, sorted in segments of their shifted
//! positions by tasks of their own.
//!
//! Streaming's default for `py1e` is one canonical node per physical node, so
//! on one machine a node holds the whole epoch, and its sort as one task
//! would leave the pool idle. A node of at least two segments of
//! [`segment_len`](super::py1e::segment_len) shifted positions, with pieces
//! and shifts short beside a segment (see [`Py1eBlocks::segment_count`]), is
//! planned instead: the generator's thread takes the epoch's generator past
//! it, recording where each piece's shuffle and shifts start ([`Segments`]). Each
//! segment's size is then counted from the few pieces whose shifted positions
//! can straddle its ends, so each segment's task writes its own part of the
//! output: it shuffles and shifts again every piece that can reach the
//! segment and keeps the shifted positions that fall inside it. The shifted
//! positions are computed by the one expression [`shifted`] in both places,
//! so the counts and the sorts agree to the bit.

use super::blocks::{shifted, Py1eBlocks, ScratchPool};
use super::sort::{SortScratch, FINE_BITS};
use super::spans::Span;
use super::walk::{fill_ids, lock};
use crate::streaming::numpy_rng::Generator;
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::error::Result;
use rayon::prelude::*;

/// The fewest samples per piece, on average, of a node sorted in segments:
/// its plan keeps about 120 bytes a piece, beside the output's 8 a sample.
const MIN_MEAN_PIECE: i64 = 64;

/// A large canonical node, ready to be sorted in segments of its shifted
/// positions by separate tasks: per piece, the generator at the start of its
/// shuffle and of its shifts, its shift bounds and its position in the node.
/// Segment `k` holds the shifted positions from `node_len * k / count` to
/// `node_len * (k + 1) / count` (the first and last segments also take any
/// below or above, from rounding).
pub(super) struct Segments {
    count: usize,
    shuffle_at: Vec<Generator>,
    shifts_at: Vec<Generator>,
    bounds: Vec<(f64, f64)>,
    /// Where each piece starts in the node, and the node's length.
    offsets: Vec<i64>,
    /// [`Py1eBlocks::reach`].
    reach: f64,
}

impl Segments {
    /// The node's length.
    fn len(&self) -> i64 {
        self.offsets[self.offsets.len() - 1]
    }

    /// The shifted positions piece `s` can take, with a margin for rounding.
    fn key_range(&self, s: usize) -> (f64, f64) {
        let (lower, upper) = self.bounds[s];
        (
            self.offsets[s] as f64 + lower - 1.0,
            self.offsets[s + 1] as f64 + upper + 1.0,
        )
    }

    /// The pieces whose shifted positions may lie in `[from, to)`, found by
    /// bisection on their positions (a shifted position is at most `reach`
    /// from its position); the pieces before them lie wholly below `from`.
    fn reaching(&self, from: f64, to: f64) -> std::ops::Range<usize> {
        let pieces = self.offsets.len() - 1;
        let first = self.offsets[1..].partition_point(|&end| end as f64 + self.reach < from);
        let last = self.offsets[..pieces].partition_point(|&start| start as f64 - self.reach < to);
        first..last.max(first)
    }

    /// Where segment `k` starts (the node's length for `k == count`).
    fn start(&self, k: usize) -> i64 {
        (i128::from(self.len()) * k as i128 / self.count as i128) as i64
    }

    /// Segment `k`'s range of shifted positions, `[from, to)`.
    fn range(&self, k: usize) -> (f64, f64) {
        let from = if k == 0 {
            f64::NEG_INFINITY
        } else {
            self.start(k) as f64
        };
        let to = if k + 1 == self.count {
            f64::INFINITY
        } else {
            self.start(k + 1) as f64
        };
        (from, to)
    }

    /// How many of the node's shifted positions lie below `cut`: every
    /// sample of the pieces below it, and those of the pieces across it
    /// counted from their draws.
    fn count_below(&self, cut: f64) -> usize {
        let across = self.reaching(cut, cut);
        let mut below = self.offsets[across.start] as usize;
        for s in across {
            let (offset, end) = (self.offsets[s], self.offsets[s + 1]);
            let (lowest, highest) = self.key_range(s);
            if highest < cut {
                below += (end - offset) as usize;
            } else if lowest < cut {
                let (lower, upper) = self.bounds[s];
                let mut g = self.shifts_at[s].clone();
                below += (offset..end)
                    .filter(|&p| shifted(p, &mut g, lower, upper) < cut)
                    .count();
            }
        }
        below
    }
}

impl Py1eBlocks {
    /// How many segments a node of `node_len` samples is sorted in: one (the
    /// node is a single task) unless it spans at least two segments and its
    /// pieces and shifts are short beside a segment (each segment's task
    /// shuffles and draws every piece that can reach it, so the work repeated
    /// at the ends stays small).
    pub(super) fn segment_count(&self, node: &[Span], node_len: i64, segment_len: i64) -> usize {
        let short = segment_len / 8;
        if node_len < 2 * segment_len
            || self.reach() > short as f64
            || node.iter().any(|&(begin, end)| end - begin > short)
            || (node.len() as i64).saturating_mul(MIN_MEAN_PIECE) > node_len
        {
            return 1;
        }
        ((node_len + segment_len - 1) / segment_len) as usize
    }

    /// Takes `rng` past a node exactly as [`Py1eBlocks::node`] would, without
    /// the samples, recording what its segments need. Returns the record
    /// and whether a block was smaller than its piece.
    pub(super) fn plan_segments(
        &self,
        rng: &mut Generator,
        node: &[Span],
        count: usize,
    ) -> Result<(Segments, bool)> {
        let what = "the generator states of a canonical node";
        let mut shuffle_at = vec_with_capacity(node.len(), what)?;
        let mut shifts_at = vec_with_capacity(node.len(), what)?;
        let mut bounds = vec_with_capacity(node.len(), what)?;
        let mut offsets = vec_with_capacity(node.len() + 1, what)?;
        let mut offset = 0;
        for &(begin, end) in node {
            shuffle_at.push(rng.clone());
            rng.skip_shuffle((end - begin) as usize);
            offsets.push(offset);
            offset += end - begin;
        }
        offsets.push(offset);
        let small = self.skip_blocks(rng, node, |piece_bounds, g| {
            bounds.push(piece_bounds);
            shifts_at.push(g.clone());
        })?;
        let plan = Segments {
            count,
            shuffle_at,
            shifts_at,
            bounds,
            offsets,
            reach: self.reach(),
        };
        Ok((plan, small))
    }

    /// Sorts a planned node into `out`, its segments in parallel: each
    /// segment's size is counted first, so each writes its own part of
    /// `out`.
    pub(super) fn sort_segments(
        &self,
        plan: &Segments,
        node: &[Span],
        out: &mut [i64],
        pool: &ScratchPool,
    ) -> Result<()> {
        let cuts: Vec<f64> = (1..plan.count).map(|k| plan.range(k).0).collect();
        let below: Vec<usize> = cuts
            .par_iter()
            .map(|&cut| plan.count_below(cut))
            .chain([out.len()])
            .collect();
        let mut parts = Vec::with_capacity(plan.count);
        let (mut rest, mut start) = (out, 0);
        for &end in &below {
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
            parts.push(part);
            rest = tail;
            start = end;
        }
        parts.into_par_iter().enumerate().try_for_each(|(k, part)| {
            let mut scratch = lock(pool).pop().unwrap_or_default();
            let sorted = self.sort_segment(plan, k, node, part, &mut scratch);
            lock(pool).push(scratch);
            sorted
        })
    }

    /// Segment `k` of a planned node, sorted into `out`: the pieces that can
    /// reach it shuffled and their shifts drawn again, keeping the shifted
    /// positions inside the segment.
    fn sort_segment(
        &self,
        plan: &Segments,
        k: usize,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<()> {
        let (from, to) = plan.range(k);
        let first = plan.start(k);
        let width = plan.start(k + 1) - first;
        // Subtracting a whole number below the key is exact: the order and
        // the ties of the shifted positions stay as they are.
        let base = first as f64;
        let reach = self.reach();
        let stride = 1usize << FINE_BITS;
        let longest = node.iter().map(|&(b, e)| e - b).max().unwrap_or(0);
        let mut values = vec![0i64; longest as usize];
        scratch.begin(width as usize);
        for s in plan.reaching(from, to) {
            let (begin, end) = node[s];
            let size = end - begin;
            let (lowest, highest) = plan.key_range(s);
            if highest < from || lowest >= to {
                continue;
            }
            let values = &mut values[..size as usize];
            fill_ids(values, begin);
            plan.shuffle_at[s].clone().shuffle(values);
            let (lower, upper) = plan.bounds[s];
            let mut g = plan.shifts_at[s].clone();
            let mut p = plan.offsets[s];
            // Most pieces lie wholly inside the segment.
            let inside = lowest >= from && highest < to;
            for chunk in values.chunks(stride) {
                if inside {
                    for &value in chunk {
                        scratch.push(shifted(p, &mut g, lower, upper) - base, value);
                        p += 1;
                    }
                } else {
                    for &value in chunk {
                        let key = shifted(p, &mut g, lower, upper);
                        if key >= from && key < to {
                            scratch.push(key - base, value);
                        }
                        p += 1;
                    }
                }
                scratch.flush_below(p as f64 - reach - base, out);
                scratch.check_memory()?;
            }
        }
        scratch.finish(out);
        scratch.check_memory()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::shuffle::py1br::scaled_block;
    use crate::streaming::shuffle::py1e::py1e;
    use crate::streaming::shuffle::spans::{node_spans, total_samples};
    use epochplan_core::parallel;

    #[test]
    fn large_nodes_sorted_in_segments_agree_with_one_sort() {
        let _threads = crate::test_threads_lock();
        // Segments of 4,096 shifted positions: every node below spans
        // several (one node, as a single task whose segments run on the
        // pool, or several nodes); blocks are sometimes smaller than pieces.
        let sizes: Vec<i64> = (0..500).map(|i| (i * 7919) % 300 + 1).collect();
        let n = total_samples(&sizes).unwrap();
        let (segment_len, block_size) = (4096, 256);
        let blocks = Py1eBlocks {
            low: scaled_block(0.75, block_size),
            high: scaled_block(1.25, block_size),
            block_size,
        };
        // A node of one-sample pieces stays whole (its plan would outweigh
        // the output).
        let tiny: Vec<Span> = (0..3 * segment_len).map(|i| (i, i + 1)).collect();
        assert_eq!(blocks.segment_count(&tiny, 3 * segment_len, segment_len), 1);
        let run = |ncn: u64| py1e(&sizes, n, ncn, 8, 11, block_size, segment_len).unwrap();
        for ncn in [1u64, 3, 7] {
            let ((spans, parts), _) = node_spans(&sizes, n, ncn, 8, 11).unwrap();
            for &(first, last) in &parts {
                let node = &spans[first..last];
                let len = node.iter().map(|&(b, e)| e - b).sum();
                assert!(blocks.segment_count(node, len, segment_len) > 1, "{ncn}");
            }
            parallel::set_num_threads(1);
            let one = run(ncn);
            assert!(one.1, "some block is smaller than its piece");
            for threads in [2, 3] {
                parallel::set_num_threads(threads);
                assert_eq!(one, run(ncn), "{ncn} nodes, {threads} threads");
            }
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn segments_cut_at_the_right_pieces_over_many_epochs() {
        // A piece whose shifts can cross a segment's start is counted and
        // sorted on both sides; a wrong margin shows in a few epochs of
        // hundreds only (373, 403 and 504 when the lower margin was +1).
        let _threads = crate::test_threads_lock();
        let sizes: Vec<i64> = (0..500).map(|i| (i * 7919) % 300 + 1).collect();
        let n = total_samples(&sizes).unwrap();
        let epochs = if cfg!(debug_assertions) { 40 } else { 640 };
        parallel::set_num_threads(2);
        for epoch in 0..epochs {
            let whole = py1e(&sizes, n, 1, 8, epoch, 256, i64::MAX / 4).unwrap();
            let cut = py1e(&sizes, n, 1, 8, epoch, 256, 4096).unwrap();
            assert_eq!(whole, cut, "epoch {epoch}");
        }
        parallel::set_num_threads(0);
    }
}
