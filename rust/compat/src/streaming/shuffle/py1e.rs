//! Streaming's `py1e`: the canonical nodes of `py1s`, each sample's position
//! moved by a uniform shift within its piece's random block, each node sorted
//! by the shifted positions.
//!
//! A piece of `size` samples at `offset` in a node of `L` draws a block as
//! `py1br` does and shifts its positions by `uniform(lower, upper)`, with
//! `cutoff = max((block - size) / 2, 0)`, `lower = max(-cutoff, -offset)` and
//! `upper = min(cutoff, L - offset - size)`: no shifted position leaves the
//! node, and none lies more than half the largest block from its position.
//! That bound is what makes the sort fast ([`SortScratch`]'s buckets are
//! written out as soon as no later position can reach them) and what lets a
//! large node be sorted in `segments`. Numpy's `argsort` is unstable; equal
//! shifted positions here keep their position order (see the parent module).
//!
//! On one thread, [`Py1eBlocks::node`] runs each node in turn. On more, a
//! node is one task: `walk`'s generator thread records the node's swap
//! partners and skips its block and shift draws, and the node's task
//! shuffles by the partners and sorts from the generator's state after the
//! shuffles. A large node is planned for `segments` instead, and sorted by
//! several tasks.

use super::blocks::{Py1eBlocks, ScratchPool};
use super::py1br::scaled_block;
use super::segments::Segments;
use super::sort::SortScratch;
use super::spans::node_spans;
use super::walk::{
    draw_partners, fill_with_partners, go_parallel, in_pieces, lock, PartnerPool,
    OUTSTANDING_PER_THREAD,
};
use crate::streaming::numpy_rng::Generator;
use epochplan_core::buffer::{prefault, zeroed_ids};
use epochplan_core::error::{Error, Result};
use epochplan_core::parallel;
use std::sync::atomic::{AtomicBool, Ordering};

/// Shifted positions per segment of a large canonical node: each segment is
/// sorted by a task of its own.
const PY1E_SEGMENT: i64 = 1 << 23;

/// Segments per thread of a run of one canonical node.
const ONE_NODE_SEGMENTS_PER_THREAD: u64 = 2;

/// The segment length of a `py1e` run of `num_samples` in `ncn` canonical
/// nodes on `threads` threads: [`PY1E_SEGMENT`], except for one canonical
/// node (Streaming's default on one machine). That node is all the work, so
/// it is cut into two segments a thread: each thread sorts as much as the
/// other, few pieces near the segments' ends are drawn twice, and a node
/// too small for segments of `PY1E_SEGMENT` is still sorted on every
/// thread ([`Py1eBlocks::segment_count`] keeps a node whole when its
/// segments would be short beside the shifts).
pub(super) fn segment_len(num_samples: u64, ncn: u64, threads: usize) -> i64 {
    if ncn != 1 {
        return PY1E_SEGMENT;
    }
    let segments = ONE_NODE_SEGMENTS_PER_THREAD.saturating_mul(threads.max(1) as u64);
    i64::try_from(num_samples.div_ceil(segments)).unwrap_or(i64::MAX)
}

/// How the generator's thread hands a canonical node of `py1e` to a task.
enum NodeWork {
    /// The swap partners of its shuffles, and the generator after them.
    Partners(Vec<u32>, Generator),
    /// A large node, sorted in segments.
    Segments(Segments),
    /// Neither (too many partners to record, or no memory for them): the
    /// task runs the node from the generator's state at its start.
    FromStart,
}

pub(super) fn py1e(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
    block_size: u64,
    segment_len: i64,
) -> Result<(Vec<i64>, bool)> {
    let ((spans, parts), mut rng) =
        node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let node_len = |&(first, last): &(usize, usize)| -> i64 {
        spans[first..last].iter().map(|&(b, e)| e - b).sum()
    };
    if parts.iter().any(|p| node_len(p) == 0) {
        // Streaming's message, then what it means here.
        return Err(Error::Value(format!(
            "The number of samples assigned to a canonical node is 0. This very likely \
             indicates that the number of samples in this stream is less than the number of \
             canonical nodes, which is {ncn}. Please check your index.json file and ensure \
             that your dataset has been written out correctly. If this was intended, reduce \
             num_canonical_nodes. (py1e needs at least one sample per canonical node; \
             num_canonical_nodes={ncn} leaves one without samples, {num_samples} samples in \
             all.)"
        )));
    }
    let blocks = Py1eBlocks {
        low: scaled_block(0.75, block_size),
        high: scaled_block(1.25, block_size),
        block_size,
    };
    let mut ids = zeroed_ids(num_samples, "the shuffled sample ids")?;
    let one_task = |part: &(usize, usize)| {
        blocks.segment_count(&spans[part.0..part.1], node_len(part), segment_len) == 1
    };
    if !go_parallel(num_samples) || (parts.len() == 1 && one_task(&parts[0])) {
        let mut scratch = SortScratch::default();
        let mut small = false;
        let mut rest: &mut [i64] = &mut ids;
        for part in &parts {
            let (out, tail) = std::mem::take(&mut rest).split_at_mut(node_len(part) as usize);
            rest = tail;
            let node = &spans[part.0..part.1];
            small |= blocks.node(&mut rng, node, out, &mut scratch)?;
        }
        return Ok((ids, small));
    }
    if let [part] = parts[..] {
        // One node in segments (Streaming's default on one machine): its
        // plan is a walk on one thread, so the other faults in the output's
        // pages meanwhile.
        let node = &spans[part.0..part.1];
        let count = blocks.segment_count(node, node_len(&part), segment_len);
        let small = parallel::install(|| {
            let (planned, ()) = rayon::join(
                || blocks.plan_segments(&mut rng, node, count),
                || prefault(&mut ids),
            );
            let (plan, small) = planned?;
            blocks.sort_segments(&plan, node, &mut ids, &ScratchPool::default())?;
            Ok::<_, Error>(small)
        })??;
        return Ok((ids, small));
    }
    // The sorts are cache-bound: clearing fresh pages of the output in the
    // middle of them would evict their buckets, so the pages are faulted in
    // first.
    prefault(&mut ids);
    let pool = ScratchPool::default();
    let partner_pool = PartnerPool::default();
    let small = AtomicBool::new(false);
    let mut rest: &mut [i64] = &mut ids;
    let nodes = parts.iter().map(|part| {
        let (out, tail) = std::mem::take(&mut rest).split_at_mut(node_len(part) as usize);
        rest = tail;
        (&spans[part.0..part.1], out)
    });
    // The generator's thread draws each node's swap partners (as py1s does)
    // and skips its block and shift draws; the task shuffles by the partners
    // and sorts from the generator's state after the shuffles. A large node
    // is planned for its segments instead.
    in_pieces(
        &mut rng,
        nodes,
        OUTSTANDING_PER_THREAD * parallel::num_threads(),
        |rng, (node, out)| {
            let count = blocks.segment_count(node, out.len() as i64, segment_len);
            if count > 1 {
                let (plan, smaller) = blocks.plan_segments(rng, node, count)?;
                small.fetch_or(smaller, Ordering::Relaxed);
                return Ok(NodeWork::Segments(plan));
            }
            let partners = draw_partners(rng, node, &partner_pool);
            let shuffled = rng.clone();
            let smaller = blocks.skip_blocks(rng, node, |_, _| {})?;
            small.fetch_or(smaller, Ordering::Relaxed);
            Ok(match partners {
                Some(partners) => NodeWork::Partners(partners, shuffled),
                None => NodeWork::FromStart,
            })
        },
        |rng, (node, out), work| {
            let smaller = match work {
                Some(NodeWork::Segments(plan)) => {
                    blocks.sort_segments(&plan, node, out, &pool)?;
                    false
                }
                Some(NodeWork::Partners(partners, shuffled)) => {
                    fill_with_partners(node, &partners, out);
                    lock(&partner_pool).push(partners);
                    *rng = shuffled;
                    let mut scratch = lock(&pool).pop().unwrap_or_default();
                    let smaller = blocks.sort_node(rng, node, out, &mut scratch);
                    lock(&pool).push(scratch);
                    smaller?
                }
                Some(NodeWork::FromStart) | None => {
                    let mut scratch = lock(&pool).pop().unwrap_or_default();
                    let smaller = blocks.node(rng, node, out, &mut scratch);
                    lock(&pool).push(scratch);
                    smaller?
                }
            };
            small.fetch_or(smaller, Ordering::Relaxed);
            Ok(())
        },
    )?;
    Ok((ids, small.into_inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::shuffle::spans::Span;
    use crate::streaming::shuffle::{get_shuffle, Algo};

    #[test]
    fn one_canonical_node_is_two_segments_a_thread() {
        let blocks = Py1eBlocks {
            low: scaled_block(0.75, 1 << 18),
            high: scaled_block(1.25, 1 << 18),
            block_size: 1 << 18,
        };
        let shards = |n: i64| -> Vec<Span> {
            (0..n / 10_000)
                .map(|i| (i * 10_000, (i + 1) * 10_000))
                .collect()
        };
        // Streaming's defaults at 10^7 and 10^8 samples: four segments on
        // two threads (one task at 10^7 with segments of 2^23).
        for n in [10_000_000i64, 100_000_000] {
            let len = segment_len(n as u64, 1, 2);
            assert_eq!(len, n / 4);
            assert_eq!(blocks.segment_count(&shards(n), n, len), 4, "{n}");
        }
        // Too short beside the shifts: one task. Many nodes: 2^23 whatever
        // the run; no thread count divides by zero.
        let n = 1_000_000;
        assert_eq!(
            blocks.segment_count(&shards(n), n, segment_len(n as u64, 1, 2)),
            1
        );
        assert_eq!(segment_len(10, 64, 2), PY1E_SEGMENT);
        assert_eq!(segment_len(10, 1, 0), 5);
        assert_eq!(segment_len(u64::MAX, 1, 1), i64::MAX);
        // Through `get_shuffle`, whose segments follow the thread count:
        // the same output on every count.
        let _threads = crate::test_threads_lock();
        let sizes: Vec<i64> = (0..500).map(|i| (i * 7919) % 300 + 1).collect();
        let run = |threads| {
            parallel::set_num_threads(threads);
            get_shuffle(Algo::Py1e, &sizes, 1, 8, 11, 256).unwrap()
        };
        let one = run(1);
        for threads in [2, 3, 4] {
            assert!(one == run(threads), "{threads} threads");
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn parallel_errors_are_errors() {
        let _threads = crate::test_threads_lock();
        // A block size that gives no valid random block fails in the first
        // node, skipped or run, on any number of threads.
        let sizes = vec![1000i64; 300];
        for threads in [1, 2, 4] {
            parallel::set_num_threads(threads);
            let out = get_shuffle(Algo::Py1e, &sizes, 6, 1, 2, 0);
            parallel::set_num_threads(0);
            assert!(matches!(out, Err(Error::Value(_))), "{threads} threads");
        }
    }
}
