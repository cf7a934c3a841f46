//! Streaming's `py1br`: the canonical nodes of `py1s`, each shuffled in
//! staggered blocks of random size, and the random block sizes it shares
//! with `py1e`.
//!
//! A block's size is Python's `integers(int(0.75 * block_size),
//! int(1.25 * block_size))`, computed with the same double rounding and the
//! same failure (a `ValueError`) when that range is empty or leaves int64.
//! Each node draws a stagger below `int(0.75 * block_size)`; its blocks
//! follow one another, each starting that stagger before the end of the one
//! before (so they overlap by it, as in Streaming), and each is shuffled in
//! turn. Sequential: a node's blocks are drawn one after the other from the
//! epoch's generator.

use super::spans::{alloc_ids, node_spans, Span};
use crate::streaming::numpy_rng::Generator;
use epochplan_core::error::{Error, Result};

/// Python's `int(factor * block_size)` (the product rounded as a double).
pub(super) fn scaled_block(factor: f64, block_size: u64) -> i128 {
    (factor * block_size as f64) as i128
}

/// `integers(low, high)` for int64 with Python-int bounds, with Streaming's
/// failure (ValueError) when the range is empty or out of int64.
pub(super) fn draw_between(
    rng: &mut Generator,
    low: i128,
    high: i128,
    block_size: u64,
) -> Result<i64> {
    let top = high - 1;
    if low > top || low < i128::from(i64::MIN) || top > i128::from(i64::MAX) {
        return Err(Error::Value(format!(
            "block_size={block_size} gives no valid random block size: integers({low}, {high}) \
             needs low < high within int64"
        )));
    }
    rng.integers_closed(low as i64, top as i64)
}

pub(super) fn py1br(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
    block_size: u64,
) -> Result<Vec<i64>> {
    let ((spans, parts), mut rng) =
        node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let low = scaled_block(0.75, block_size);
    let high = scaled_block(1.25, block_size);
    if low < 1 || low - 1 > i128::from(i64::MAX) {
        return Err(Error::Value(format!(
            "block_size must be at least 2 for py1br (the stagger is drawn from \
             [0, int(0.75 * block_size))) and int(0.75 * block_size) at most 2**63, \
             got {block_size}"
        )));
    }
    let mut stagger = vec![0i64; ncn as usize];
    rng.integers_closed_fill(0, (low - 1) as i64, &mut stagger)?;
    let mut ids = alloc_ids(num_samples)?;
    let mut blocks: Vec<Span> = Vec::new();
    for (node, &(first, last)) in parts.iter().enumerate() {
        let node_start = ids.len() as i64;
        for &(begin, end) in &spans[first..last] {
            ids.extend(begin..end);
        }
        let node_stop = ids.len() as i64;
        let st = stagger[node];
        blocks.clear();
        let mut blocks_end = node_start;
        while blocks_end < node_stop {
            let size = draw_between(&mut rng, low, high, block_size)?;
            let start = (blocks_end - st).max(node_start);
            let stop = (blocks_end + size - st).min(node_stop);
            blocks.push((start, stop));
            blocks_end += stop - start;
        }
        for &(start, stop) in &blocks {
            rng.shuffle(&mut ids[start as usize..stop as usize]);
        }
    }
    Ok(ids)
}
