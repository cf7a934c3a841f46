//! Shards as spans of sample ids, and their cut into canonical nodes: the
//! common start of every algorithm but `naive`.
//!
//! Streaming lays samples out in numpy arrays and reshapes them; here a shard
//! is the half-open range of its ids, so that shuffling shards and cutting
//! them at canonical-node boundaries moves two integers a shard instead of
//! every sample. The ids themselves are written once, by the algorithm,
//! straight into the output.

use crate::streaming::numpy_rng::Generator;
use epochplan_core::buffer::{ids_with_capacity, vec_with_capacity};
use epochplan_core::error::{Error, Result};

/// A half-open range of sample ids (or of positions).
pub(super) type Span = (i64, i64);

/// Pieces of spans, and per part (canonical node) the range of its pieces.
type Divided = (Vec<Span>, Vec<(usize, usize)>);

/// The number of samples, checking every size is non-negative and the total
/// fits int64.
pub(super) fn total_samples(shard_sizes: &[i64]) -> Result<u64> {
    let mut total: i64 = 0;
    for (i, &size) in shard_sizes.iter().enumerate() {
        if size < 0 {
            return Err(Error::Value(format!(
                "shard_sizes must be non-negative, got {size} at index {i}"
            )));
        }
        total = total.checked_add(size).ok_or_else(|| {
            Error::Overflow("the sum of shard_sizes must be at most 2**63 - 1".to_string())
        })?;
    }
    Ok(total as u64)
}

/// An empty vector with room for `n` ids, or an error if it cannot be had.
pub(super) fn alloc_ids(n: u64) -> Result<Vec<i64>> {
    ids_with_capacity(n, "the shuffled sample ids")
}

/// Each shard's span of sample ids, in shard order.
pub(super) fn shard_spans(shard_sizes: &[i64]) -> Result<Vec<Span>> {
    let mut spans = vec_with_capacity(shard_sizes.len(), "the shard spans")?;
    let mut begin = 0i64;
    spans.extend(shard_sizes.iter().map(|&size| {
        let span = (begin, begin + size);
        begin += size;
        span
    }));
    Ok(spans)
}

/// Cuts the spans, in order, into `num_parts` runs of `num_samples *
/// (p + 1) / num_parts` cumulative samples, splitting a span that crosses a
/// boundary (its head ends one part, its tail starts the next). Returns the
/// pieces and, per part, the range of its pieces. Empty spans stay with the
/// part being filled.
pub(super) fn divide_spans(
    mut spans: Vec<Span>,
    num_samples: u64,
    num_parts: u64,
) -> Result<Divided> {
    let mut pieces = vec_with_capacity(spans.len() + num_parts as usize, "the shard pieces")?;
    let mut parts = vec_with_capacity(num_parts as usize, "the canonical nodes")?;
    let mut next = 0usize;
    let mut so_far: u128 = 0;
    for part in 0..u128::from(num_parts) {
        let part_end = u128::from(num_samples) * (part + 1) / u128::from(num_parts);
        let first = pieces.len();
        while next < spans.len() {
            let (begin, end) = spans[next];
            let len = (end - begin) as u128;
            if part_end < so_far + len {
                if so_far < part_end {
                    let split = (part_end - so_far) as i64;
                    pieces.push((begin, begin + split));
                    spans[next] = (begin + split, end);
                    so_far = part_end;
                }
                break;
            }
            pieces.push((begin, end));
            next += 1;
            so_far += len;
        }
        parts.push((first, pieces.len()));
    }
    Ok((pieces, parts))
}

/// The common start of `py1s`, `py1br` and `py1e`: shard spans shuffled by
/// the run generator, cut into canonical nodes, each node's pieces shuffled
/// by the epoch generator. Returns the pieces, the nodes' piece ranges and
/// the epoch generator.
pub(super) fn node_spans(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<(Divided, Generator)> {
    let mut spans = shard_spans(shard_sizes)?;
    Generator::new(run_seed).shuffle(&mut spans);
    let (mut spans, parts) = divide_spans(spans, num_samples, ncn)?;
    let mut rng = Generator::new(epoch_seed);
    for &(first, last) in &parts {
        rng.shuffle(&mut spans[first..last]);
    }
    Ok(((spans, parts), rng))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn divide_spans_splits_at_part_boundaries() {
        let (pieces, parts) = divide_spans(vec![(0, 5), (5, 5), (5, 12)], 12, 3).unwrap();
        assert_eq!(pieces, [(0, 4), (4, 5), (5, 5), (5, 8), (8, 12)]);
        assert_eq!(parts, [(0, 1), (1, 4), (4, 5)]);
    }
}
