//! `py1e`'s blocks and shifts, shared by the whole-node sort (`py1e`) and
//! the segmented sort of a large node (`segments`): the parameters every
//! canonical node draws its blocks with, each position's shifted position,
//! and the pool of sort buffers. Kept apart so that `py1e` and `segments`
//! both use them without using each other.

use super::py1br::draw_between;
use super::sort::{SortScratch, FINE_BITS};
use super::spans::Span;
use super::walk::fill_shuffled;
use crate::streaming::numpy_rng::Generator;
use epochplan_core::error::Result;
use std::sync::Mutex;

/// The `py1e` parameters shared by every canonical node.
#[derive(Clone, Copy)]
pub(super) struct Py1eBlocks {
    pub(super) low: i128,
    pub(super) high: i128,
    pub(super) block_size: u64,
}

impl Py1eBlocks {
    /// The shift range `(lower, upper)` of a piece of `size` samples at
    /// `offset` in a node of `node_len`, for a drawn block.
    pub(super) fn bounds(block: i64, size: i64, offset: i64, node_len: i64) -> (f64, f64) {
        let cutoff = ((i128::from(block) - i128::from(size)) as f64 / 2.0).max(0.0);
        let lower = (-cutoff).max(-(offset as f64));
        let upper = cutoff.min((node_len - offset - size) as f64);
        (lower, upper)
    }

    /// How far a shifted position can lie from its position: half the
    /// largest block, plus a margin for rounding.
    pub(super) fn reach(&self) -> f64 {
        (self.high - 1).max(0) as f64 / 2.0 + 2.0
    }

    /// Advances `rng` past a node's block and shift draws exactly as
    /// [`Py1eBlocks::sort_node`] would, without the samples, and gives
    /// `at_shifts` each piece's shift bounds and the generator at its first
    /// shift. Returns whether a block was smaller than its piece.
    pub(super) fn skip_blocks(
        &self,
        rng: &mut Generator,
        node: &[Span],
        mut at_shifts: impl FnMut((f64, f64), &Generator),
    ) -> Result<bool> {
        let node_len = node.iter().map(|&(begin, end)| end - begin).sum();
        let mut small = false;
        let mut offset = 0;
        for &(begin, end) in node {
            let size = end - begin;
            let block = draw_between(rng, self.low, self.high, self.block_size)?;
            small |= block < size;
            at_shifts(Self::bounds(block, size, offset, node_len), rng);
            // uniform() takes one 64-bit draw per sample.
            rng.bit_generator().advance(size as u128);
            offset += size;
        }
        Ok(small)
    }

    /// One canonical node: its pieces' samples shuffled, then sorted as
    /// [`Py1eBlocks::sort_node`] does.
    pub(super) fn node(
        &self,
        rng: &mut Generator,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<bool> {
        fill_shuffled(rng, node, out);
        self.sort_node(rng, node, out, scratch)
    }

    /// The samples of one canonical node (`out`, its pieces shuffled in
    /// position order) with each position shifted within its piece's random
    /// block, sorted by shifted position. Returns whether a block was
    /// smaller than its piece.
    pub(super) fn sort_node(
        &self,
        rng: &mut Generator,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<bool> {
        let node_len = out.len() as i64;
        scratch.begin(out.len());
        // Every shift is at most half the largest block: once positions up
        // to `j` are pushed, no later key falls below `j - reach` (plus a
        // margin for rounding), so the buckets below are final and written
        // out while they are still in cache.
        let reach = self.reach();
        let stride = 1i64 << FINE_BITS;
        let mut small = false;
        let mut offset: i64 = 0;
        for &(begin, end) in node {
            let size = end - begin;
            let block = draw_between(rng, self.low, self.high, self.block_size)?;
            small |= block < size;
            let (lower, upper) = Self::bounds(block, size, offset, node_len);
            let mut g = rng.clone();
            let mut j = offset;
            while j < offset + size {
                let stop = (j + stride).min(offset + size);
                for p in j..stop {
                    scratch.push(shifted(p, &mut g, lower, upper), out[p as usize]);
                }
                j = stop;
                scratch.flush_below(j as f64 - reach, out);
                scratch.check_memory()?;
            }
            *rng = g;
            offset += size;
        }
        scratch.finish(out);
        scratch.check_memory()?;
        Ok(small)
    }
}

/// `py1e`'s shifted position of position `p`: one shift drawn from `g`. The
/// one expression for the sort and for the sizes of its segments, so that
/// they agree to the bit.
#[inline(always)]
pub(super) fn shifted(p: i64, g: &mut Generator, lower: f64, upper: f64) -> f64 {
    p as f64 + g.uniform(lower, upper)
}

/// Sort buffers, reused across the nodes and segments of a run (fresh pages
/// are slow to fault in): a task takes one from the pool, or makes one, and
/// returns it.
pub(super) type ScratchPool = Mutex<Vec<SortScratch>>;
