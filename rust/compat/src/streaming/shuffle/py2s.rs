//! Streaming's `py2s`: the samples of each shard shuffled twice, once by the
//! run's generator (the same order every epoch) and once by the epoch's.
//!
//! The run order is laid out in one buffer, shards in their shuffled order;
//! the epoch then cuts the buffer's ranges into canonical nodes as `py1s` cuts
//! shards, shuffles each node's pieces and each piece's samples in place, and
//! copies the pieces out in their shuffled order. Sequential: the second
//! shuffle needs the first one's buffer, so there is no cheap walk past it.

use super::spans::{alloc_ids, divide_spans, shard_spans};
use crate::streaming::numpy_rng::Generator;
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::error::Result;

pub(super) fn py2s(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<Vec<i64>> {
    // Run order: shards shuffled, then each shard's samples, laid out in one
    // buffer in the shuffled shard order.
    let mut shards = shard_spans(shard_sizes)?;
    let mut fixed = Generator::new(run_seed);
    fixed.shuffle(&mut shards);
    let mut buf = alloc_ids(num_samples)?;
    let mut ranges = vec_with_capacity(shards.len(), "the shard ranges")?;
    for &(begin, end) in &shards {
        let at = buf.len();
        buf.extend(begin..end);
        fixed.shuffle(&mut buf[at..]);
        ranges.push((at as i64, buf.len() as i64));
    }
    // Epoch order: the buffer ranges cut into nodes, each node's pieces
    // shuffled and each piece's samples shuffled in place.
    let (mut pieces, parts) = divide_spans(ranges, num_samples, ncn)?;
    let mut rng = Generator::new(epoch_seed);
    for &(first, last) in &parts {
        rng.shuffle(&mut pieces[first..last]);
        for &(begin, end) in &pieces[first..last] {
            rng.shuffle(&mut buf[begin as usize..end as usize]);
        }
    }
    let mut ids = alloc_ids(num_samples)?;
    for &(begin, end) in &pieces {
        ids.extend_from_slice(&buf[begin as usize..end as usize]);
    }
    Ok(ids)
}
