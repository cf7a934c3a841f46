//! An exactly uniform random permutation of `[0, n)`, materialised.
//!
//! Small `n`: Fisher-Yates with xoshiro256++ and Lemire's unbiased bounded
//! integers. Large `n`: the Rao-Sandelius scatter shuffle (one level), made
//! parallel the way Penschuck (SEA 2023) describes: every element draws a
//! uniform label among `B` buckets (a power of two, so a label is exact bits),
//! elements are grouped by label keeping their order, and each bucket is then
//! Fisher-Yates shuffled. Grouping by i.i.d. uniform labels and shuffling each
//! group uniformly gives an exactly uniform permutation.
//!
//! Every random stream is keyed by a fixed unit of work (a block of positions,
//! a bucket), never by a thread, so the output is the same for any thread count.

use crate::keys::{derive, Domain, Xoshiro256pp};
use crate::parallel;
use rayon::prelude::*;

/// Up to this size a single Fisher-Yates pass is used.
const SMALL: u64 = 1 << 16;
/// Positions per label block (the unit of the label streams).
const LABEL_BLOCK: usize = 1 << 16;
/// Target bucket size: a bucket of int64 fits in a core's L2 cache.
const BUCKET_TARGET: u64 = 1 << 16;
const MAX_BUCKET_BITS: u32 = 13;

fn domain(label: &str) -> Domain<'_> {
    Domain {
        kind: "uniform",
        label,
    }
}

/// Fisher-Yates (Durstenfeld) from the back, in place.
fn fisher_yates(values: &mut [i64], rng: &mut Xoshiro256pp) {
    for i in (1..values.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        values.swap(i, j);
    }
}

/// The number of label bits for `n` elements: buckets of about `BUCKET_TARGET`.
fn bucket_bits(n: u64) -> u32 {
    let buckets = (n / BUCKET_TARGET).max(2).next_power_of_two();
    buckets.trailing_zeros().min(MAX_BUCKET_BITS)
}

/// Calls `f(label)` for the labels of the positions in `block`, in order.
fn for_each_label(
    seed: u64,
    epoch: u64,
    block: usize,
    len: usize,
    bits: u32,
    mut f: impl FnMut(usize),
) {
    let mut rng = Xoshiro256pp::from_key(derive(seed, epoch, domain("labels"), block as u64));
    let per_word = (64 / bits) as usize;
    let mask = (1u64 << bits) - 1;
    let mut done = 0;
    while done < len {
        let mut word = rng.next_u64();
        for _ in 0..per_word.min(len - done) {
            f((word & mask) as usize);
            word >>= bits;
        }
        done += per_word;
    }
}

/// A uniformly random permutation of `[0, n)` for `(seed, epoch)`.
pub fn uniform_permutation(n: u64, seed: u64, epoch: u64) -> Vec<i64> {
    if n <= SMALL {
        let mut out: Vec<i64> = (0..n as i64).collect();
        let mut rng = Xoshiro256pp::from_key(derive(seed, epoch, domain("fisher-yates"), 0));
        fisher_yates(&mut out, &mut rng);
        return out;
    }
    let n = n as usize;
    let bits = bucket_bits(n as u64);
    let buckets = 1usize << bits;
    let blocks = n.div_ceil(LABEL_BLOCK);

    // 1. Each block sorts its own positions by label (a counting sort inside
    //    the block), remembering where each label's run starts.
    let mut grouped = vec![0i64; n];
    let mut block_starts = vec![0usize; blocks * (buckets + 1)];
    parallel::install(|| {
        grouped
            .par_chunks_mut(LABEL_BLOCK)
            .zip(block_starts.par_chunks_mut(buckets + 1))
            .enumerate()
            .for_each(|(b, (out, starts))| {
                let base = (b * LABEL_BLOCK) as i64;
                let mut counts = vec![0usize; buckets];
                for_each_label(seed, epoch, b, out.len(), bits, |l| counts[l] += 1);
                let mut acc = 0;
                for (s, c) in starts.iter_mut().zip(&counts) {
                    *s = acc;
                    acc += c;
                }
                starts[buckets] = acc;
                let mut next = starts[..buckets].to_vec();
                let mut i = 0;
                for_each_label(seed, epoch, b, out.len(), bits, |l| {
                    out[next[l]] = base + i;
                    next[l] += 1;
                    i += 1;
                });
            });
    });

    // 2. Bucket sizes and where each bucket starts in the output.
    let mut bucket_start = vec![0usize; buckets + 1];
    for starts in block_starts.chunks(buckets + 1) {
        for (l, w) in starts.windows(2).enumerate() {
            bucket_start[l + 1] += w[1] - w[0];
        }
    }
    for l in 0..buckets {
        bucket_start[l + 1] += bucket_start[l];
    }

    // 3. Each bucket gathers its runs from every block in block order, then is
    //    shuffled with its own stream.
    let mut out = vec![0i64; n];
    let mut pieces: Vec<&mut [i64]> = Vec::with_capacity(buckets);
    let mut rest = out.as_mut_slice();
    for l in 0..buckets {
        let (head, tail) = rest.split_at_mut(bucket_start[l + 1] - bucket_start[l]);
        pieces.push(head);
        rest = tail;
    }
    parallel::install(|| {
        pieces.into_par_iter().enumerate().for_each(|(l, piece)| {
            let mut at = 0;
            for (b, starts) in block_starts.chunks(buckets + 1).enumerate() {
                let run = &grouped[b * LABEL_BLOCK + starts[l]..b * LABEL_BLOCK + starts[l + 1]];
                piece[at..at + run.len()].copy_from_slice(run);
                at += run.len();
            }
            let mut rng = Xoshiro256pp::from_key(derive(seed, epoch, domain("bucket"), l as u64));
            fisher_yates(piece, &mut rng);
        });
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_permutation(v: &[i64]) {
        let mut seen = vec![false; v.len()];
        for &x in v {
            assert!(!seen[x as usize]);
            seen[x as usize] = true;
        }
    }

    #[test]
    fn small_and_large_are_permutations() {
        for n in [0u64, 1, 2, 5, 1000, SMALL, SMALL + 1, 300_001] {
            let v = uniform_permutation(n, 3, 4);
            assert_eq!(v.len() as u64, n);
            assert_permutation(&v);
        }
    }

    #[test]
    fn independent_of_thread_count() {
        parallel::set_num_threads(1);
        let a = uniform_permutation(500_000, 1, 2);
        parallel::set_num_threads(2);
        let b = uniform_permutation(500_000, 1, 2);
        parallel::set_num_threads(0);
        assert_eq!(a, b);
    }
}
