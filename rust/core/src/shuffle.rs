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
//! Both passes over the buckets wait on memory unless helped: the scatter's
//! thousands of write streams are more than the hardware prefetcher follows
//! (so it fetches each bucket's next line itself), and Fisher-Yates' random
//! reads of a bucket fresh from the scatter would each miss (so the bucket
//! is read in order first).
//!
//! Every random stream is keyed by a fixed unit of work (a block of positions,
//! a bucket), never by a thread, so the output is the same for any thread count.

use crate::buffer::{prefetch, zeroed_ids};
use crate::error::Result;
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
/// From this many label bits, the scatter fetches each bucket's next cache
/// line as its cursor enters a line: more write streams than the hardware
/// prefetcher follows would each wait for memory at every new line (measured
/// at 128 buckets and more: 1.2x faster at 6 * 10^6 ids, 1.5x at 10^8). With
/// 64 buckets or fewer the hardware keeps up, and the prefetches cost 10% to
/// 30%.
const PREFETCH_MIN_BITS: u32 = 7;
/// Runs of consecutive label blocks scattered in parallel, per thread.
const TASKS_PER_THREAD: usize = 4;

fn domain(label: &str) -> Domain<'_> {
    Domain {
        kind: "uniform",
        label,
    }
}

/// Bytes, and ids, in a cache line.
const LINE_BYTES: usize = 64;
const LINE: usize = LINE_BYTES / std::mem::size_of::<i64>();

/// Whether `id` is the first of its cache line.
fn starts_line(id: &i64) -> bool {
    (id as *const i64 as usize).is_multiple_of(LINE_BYTES)
}

/// Reads one id in every `LINE` of `values`, in order, so that the
/// hardware prefetcher brings them in before a random-access pass: a bucket
/// fresh from the scatter is in memory, and Fisher-Yates' random reads would
/// otherwise each wait for it.
fn touch(values: &[i64]) {
    let lines = values.iter().step_by(LINE).fold(0, |acc, &v| acc ^ v);
    std::hint::black_box(lines);
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
pub fn uniform_permutation(n: u64, seed: u64, epoch: u64) -> Result<Vec<i64>> {
    let mut out = zeroed_ids(n, "kind='uniform' (num_samples)")?;
    if n <= SMALL {
        for (i, x) in out.iter_mut().enumerate() {
            *x = i as i64;
        }
        let mut rng = Xoshiro256pp::from_key(derive(seed, epoch, domain("fisher-yates"), 0));
        fisher_yates(&mut out, &mut rng);
        return Ok(out);
    }
    let n = n as usize;
    let bits = bucket_bits(n as u64);
    let buckets = 1usize << bits;
    let blocks = n.div_ceil(LABEL_BLOCK);
    let block_len = |b: usize| LABEL_BLOCK.min(n - b * LABEL_BLOCK);

    // Bucket l holds, in block order, the positions of every block that drew
    // label l. The blocks are dealt to `tasks` runs of consecutive blocks; a
    // run's positions with label l form one contiguous piece of bucket l, so
    // each run writes its positions straight into the output. The output does
    // not depend on `tasks`.
    let tasks = blocks
        .min(TASKS_PER_THREAD * parallel::num_threads())
        .max(1);
    let first_block = |t: usize| t * blocks / tasks;

    // 1. How many positions of each run draw each label.
    let mut sizes = vec![0usize; tasks * buckets];
    parallel::install(|| {
        sizes
            .par_chunks_mut(buckets)
            .enumerate()
            .for_each(|(t, c)| {
                for b in first_block(t)..first_block(t + 1) {
                    for_each_label(seed, epoch, b, block_len(b), bits, |l| c[l] += 1);
                }
            });
    })?;

    // 2. Each run scatters its positions into its pieces of the buckets.
    let mut bucket_pieces: Vec<&mut [i64]> = Vec::with_capacity(buckets);
    let mut task_pieces: Vec<Vec<&mut [i64]>> =
        (0..tasks).map(|_| Vec::with_capacity(buckets)).collect();
    let mut rest = out.as_mut_slice();
    for l in 0..buckets {
        let len: usize = (0..tasks).map(|t| sizes[t * buckets + l]).sum();
        let (bucket, tail) = rest.split_at_mut(len);
        rest = tail;
        bucket_pieces.push(bucket);
    }
    for bucket in bucket_pieces {
        let mut bucket = bucket;
        for (t, pieces) in task_pieces.iter_mut().enumerate() {
            let (piece, tail) = bucket.split_at_mut(sizes[t * buckets + pieces.len()]);
            pieces.push(piece);
            bucket = tail;
        }
    }
    let prefetch_lines = bits >= PREFETCH_MIN_BITS;
    parallel::install(|| {
        task_pieces
            .into_par_iter()
            .enumerate()
            .for_each(|(t, mut pieces)| {
                let mut next = vec![0usize; buckets];
                for b in first_block(t)..first_block(t + 1) {
                    let mut id = (b * LABEL_BLOCK) as i64;
                    for_each_label(seed, epoch, b, block_len(b), bits, |l| {
                        let (piece, at) = (&mut pieces[l], next[l]);
                        piece[at] = id;
                        if prefetch_lines && starts_line(&piece[at]) {
                            if let Some(ahead) = piece.get(at + LINE) {
                                prefetch(ahead);
                            }
                        }
                        next[l] = at + 1;
                        id += 1;
                    });
                }
            });
    })?;

    // 3. Each bucket is shuffled with its own stream.
    let mut pieces: Vec<&mut [i64]> = Vec::with_capacity(buckets);
    let mut rest = out.as_mut_slice();
    for l in 0..buckets {
        let len: usize = (0..tasks).map(|t| sizes[t * buckets + l]).sum();
        let (head, tail) = rest.split_at_mut(len);
        pieces.push(head);
        rest = tail;
    }
    parallel::install(|| {
        pieces.into_par_iter().enumerate().for_each(|(l, piece)| {
            let mut rng = Xoshiro256pp::from_key(derive(seed, epoch, domain("bucket"), l as u64));
            touch(piece);
            fisher_yates(piece, &mut rng);
        });
    })?;
    Ok(out)
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
            let v = uniform_permutation(n, 3, 4).unwrap();
            assert_eq!(v.len() as u64, n);
            assert_permutation(&v);
        }
    }

    #[test]
    fn independent_of_thread_count() {
        let _threads = parallel::test_threads_lock();
        // Below and from the size whose scatter prefetches.
        let prefetched = (BUCKET_TARGET << PREFETCH_MIN_BITS) + 1;
        assert!(bucket_bits(prefetched) >= PREFETCH_MIN_BITS);
        for n in [500_000, prefetched] {
            parallel::set_num_threads(1);
            let a = uniform_permutation(n, 1, 2).unwrap();
            parallel::set_num_threads(2);
            let b = uniform_permutation(n, 1, 2).unwrap();
            parallel::set_num_threads(0);
            assert_eq!(a, b);
            assert_permutation(&a);
        }
    }
}
