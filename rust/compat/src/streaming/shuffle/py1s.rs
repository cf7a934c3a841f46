//! Streaming's `py1s`: shards shuffled by the run's generator, cut at
//! canonical-node boundaries, each node's pieces shuffled and then each
//! piece's samples, all by the epoch's generator.
//!
//! On one thread this is [`fill_shuffled`] over every piece. On more, the
//! pieces are grouped into runs of at least `PY1S_PIECE` samples (the last
//! may be shorter), and `walk`'s generator thread takes the epoch's
//! generator through them, recording the swap partners of each run for a
//! task on the pool that fills and swaps it.

use super::spans::node_spans;
use super::walk::{
    draw_partners, fill_shuffled, fill_with_partners, go_parallel, in_pieces, lock, PartnerPool,
    OUTSTANDING_PER_THREAD,
};
use epochplan_core::buffer::zeroed_ids;
use epochplan_core::error::Result;
use epochplan_core::parallel;

/// Samples per parallel piece of `py1s`.
const PY1S_PIECE: i64 = 1 << 18;

/// With more than one thread, the generator's thread draws the swap partners
/// of each piece (the sequential part, see [`Generator::shuffle_partners`])
/// and a task fills the piece and makes the swaps.
///
/// [`Generator::shuffle_partners`]: crate::streaming::numpy_rng::Generator::shuffle_partners
pub(super) fn py1s(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<Vec<i64>> {
    let ((spans, _), mut rng) = node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let mut ids = zeroed_ids(num_samples, "the shuffled sample ids")?;
    if !go_parallel(num_samples) {
        fill_shuffled(&mut rng, &spans, &mut ids);
        return Ok(ids);
    }
    let mut rest: &mut [i64] = &mut ids;
    let mut first = 0;
    let pieces = std::iter::from_fn(|| {
        if first == spans.len() {
            return None;
        }
        let mut last = first;
        let mut len = 0i64;
        while last < spans.len() && len < PY1S_PIECE {
            len += spans[last].1 - spans[last].0;
            last += 1;
        }
        let (out, tail) = std::mem::take(&mut rest).split_at_mut(len as usize);
        rest = tail;
        let piece = &spans[first..last];
        first = last;
        Some((piece, out))
    });
    let pool = PartnerPool::default();
    in_pieces(
        &mut rng,
        pieces,
        OUTSTANDING_PER_THREAD * parallel::num_threads(),
        |rng, (piece, _)| Ok(draw_partners(rng, piece, &pool)),
        |rng, (piece, out), partners| {
            match partners.flatten() {
                Some(partners) => {
                    fill_with_partners(piece, &partners, out);
                    lock(&pool).push(partners);
                }
                None => fill_shuffled(rng, piece, out),
            }
            Ok(())
        },
    )?;
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::shuffle::{get_shuffle, Algo};

    #[test]
    fn py1s_pieces_agree_across_thread_counts() {
        let _threads = crate::test_threads_lock();
        // Many pieces: the generator's thread draws the swap partners of
        // some pieces for tasks and shuffles others itself, depending on
        // timing; the output must not depend on which.
        let sizes: Vec<i64> = (0..2000).map(|i| (i * 7919) % 2999 + 1).collect();
        parallel::set_num_threads(1);
        let one = get_shuffle(Algo::Py1s, &sizes, 5, 8, 3, 0).unwrap();
        for threads in [2, 3, 4] {
            parallel::set_num_threads(threads);
            let many = get_shuffle(Algo::Py1s, &sizes, 5, 8, 3, 0).unwrap();
            assert_eq!(one, many, "{threads} threads");
        }
        parallel::set_num_threads(0);
        assert!(one.ids.len() as i64 > 8 * PY1S_PIECE);
    }
}
