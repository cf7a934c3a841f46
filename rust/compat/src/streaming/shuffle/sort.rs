//! `py1e`'s sort: a stable bucket sort of `(key, value)` items by key, in
//! place of numpy's `argsort` of the shifted positions.
//!
//! `py1e`'s keys are positions moved by bounded shifts inside a node of
//! `width` positions, so they are nearly sorted already and spread evenly over
//! `[0, width)`: integer buckets hold a handful of items each, and a bucket
//! is final as soon as the pushed positions have passed it by more than the
//! largest shift. [`SortScratch`] exploits both: items go to coarse buckets of
//! `2^FINE_BITS` integers as they are pushed, a coarse bucket (small enough
//! for the cache) is sorted and written out once no later key can fall in it,
//! and its emptied memory is reused by the next bucket to fill. Equal keys
//! keep their push order, as numpy's `argsort(kind="stable")` would. The
//! counting sort's loops over whole arrays (each item's sub-bucket, the
//! prefix sums of the counts) run with AVX-512 where the CPU has it
//! ([`avx512`]), with the scalar loops' results. A large sort writes its
//! output with streaming stores ([`STREAM_MIN`]).

use epochplan_core::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Fine buckets per coarse bucket, as a power of two (a coarse bucket's
/// items fit in L1/L2 cache while they are sorted).
pub(super) const FINE_BITS: u32 = 11;

/// Sub-buckets per integer in the sort of a coarse bucket.
const SUB_BUCKETS: usize = 4;

/// Sorts of at least this many items write their output with streaming
/// stores, which skip the caches: an output this large (8 MB and more) has
/// left the cache before anyone reads it, and a plain store would first read
/// each of its lines from memory and evict the buckets' lines for it.
const STREAM_MIN: usize = 1 << 20;

/// Reorders `values` by `keys` (same length); equal keys keep their
/// order. Keys are finite. See [`SortScratch::sort`].
pub fn sort_by_keys(keys: &[f64], values: &mut [i64]) -> Result<()> {
    SortScratch::default().sort(keys, values)
}

/// The buffers of the `py1e` sort, reusable from one node to the next.
///
/// Items are pushed in position order as `(key, value)`. A bucket sort on the
/// key clamped to `[0, width)` (a non-decreasing map, so buckets are ordered):
/// each item goes to its coarse bucket of `2^FINE_BITS` integers as it is
/// pushed; then each coarse bucket (small enough for the cache) is
/// counting-sorted on steps of `1/SUB_BUCKETS`, and each step's items (rarely
/// more than one for `py1e`'s keys) sorted by key. Every step is stable, so
/// equal keys keep their push order.
#[derive(Debug, Default)]
pub struct SortScratch {
    /// Keys are clamped to `[0, width)`.
    width: usize,
    /// Coarse buckets already written out, and the output position reached.
    done: usize,
    at: usize,
    /// Whether the output is written with streaming stores (see
    /// [`STREAM_MIN`]).
    stream: bool,
    coarse: Vec<Vec<(f64, i64)>>,
    /// Emptied buckets, handed to the next buckets to fill: the few buckets
    /// in use keep reusing the same memory, which stays in cache (a bucket
    /// per coarse index would sweep through memory the size of the node).
    spare: Vec<Vec<(f64, i64)>>,
    /// A coarse bucket's items ordered by sub-bucket, each item's
    /// sub-bucket, and where each sub-bucket's items go next.
    fine: Vec<(f64, i64)>,
    sub_of: Vec<u32>,
    next: Vec<u32>,
    /// Set when a bucket could not grow: the sort is then incomplete, and
    /// [`SortScratch::check_memory`] says so. (Checked once per stride rather
    /// than on every push, which stays cheap; a block size near the node's
    /// length keeps the whole node in the buckets.)
    out_of_memory: bool,
}

impl SortScratch {
    /// Starts a sort of items whose keys lie in `[0, width)` (a key outside
    /// counts as the nearest end of the range).
    pub fn begin(&mut self, width: usize) {
        self.width = width;
        self.done = 0;
        self.at = 0;
        self.stream = width >= STREAM_MIN;
        self.out_of_memory = false;
        let count = if width == 0 {
            0
        } else {
            ((width - 1) >> FINE_BITS) + 1
        };
        // Buckets left by an unfinished sort go back to the spares.
        let mut coarse = std::mem::take(&mut self.coarse);
        for bucket in coarse.drain(..) {
            self.recycle(bucket);
        }
        self.coarse = coarse;
        if self.coarse.try_reserve(count).is_err() {
            self.out_of_memory = true;
            self.width = 0; // nothing is pushed
            return;
        }
        self.coarse.resize_with(count, Vec::new);
    }

    /// The integer bucket of a key (`as` saturates: a key below 0 counts
    /// as 0).
    #[inline(always)]
    fn bucket(width: usize, key: f64) -> usize {
        (key as usize).min(width - 1)
    }

    /// Adds the next item.
    #[inline(always)]
    pub fn push(&mut self, key: f64, value: i64) {
        if self.width == 0 {
            return;
        }
        let c = Self::bucket(self.width, key) >> FINE_BITS;
        let bucket = &mut self.coarse[c];
        if bucket.capacity() == 0 {
            *bucket = self.spare.pop().unwrap_or_default();
        }
        if bucket.len() == bucket.capacity() && bucket.try_reserve(1).is_err() {
            self.out_of_memory = true;
            return;
        }
        bucket.push((key, value));
    }

    /// An error if a bucket could not grow since [`SortScratch::begin`], with
    /// the buckets' memory given back first (the message needs some too).
    pub fn check_memory(&mut self) -> Result<()> {
        if !self.out_of_memory {
            return Ok(());
        }
        *self = SortScratch::default();
        Err(Error::Memory(
            "cannot allocate py1e's sort buckets: not enough memory".to_string(),
        ))
    }

    /// Writes out, in order, every coarse bucket whose keys all lie below
    /// `bound`: the caller promises that no item pushed from now on has a key
    /// below `bound`. Written items take the next positions of `out`, which
    /// must not be read again (for `py1e`: positions are pushed in order and
    /// a key is at most the shift bound away from its position).
    pub fn flush_below(&mut self, bound: f64, out: &mut [i64]) {
        while self.done < self.coarse.len() && (((self.done + 1) << FINE_BITS) as f64) <= bound {
            self.write_bucket(self.done, out);
            self.done += 1;
        }
    }

    /// Writes the pushed values, ordered by key, into `out`.
    pub fn finish(&mut self, out: &mut [i64]) {
        while self.done < self.coarse.len() {
            self.write_bucket(self.done, out);
            self.done += 1;
        }
        debug_assert_eq!(self.at, out.len(), "one value pushed per output slot");
        if self.stream {
            // Streaming stores are ordered only by a fence: the output is
            // complete for every thread once this returns.
            #[cfg(target_arch = "x86_64")]
            #[allow(unsafe_code)]
            // SAFETY: SSE, which has the fence, is part of every x86-64
            // processor.
            unsafe {
                std::arch::x86_64::_mm_sfence()
            };
        }
    }

    /// Sorts coarse bucket `c` and writes its values at the next positions.
    fn write_bucket(&mut self, c: usize, out: &mut [i64]) {
        let steps = SUB_BUCKETS << FINE_BITS;
        let width = self.width;
        let mut bucket = std::mem::take(&mut self.coarse[c]);
        let n = bucket.len();
        if n > u32::MAX as usize {
            // Beyond the counters' range (never with py1e's keys): a plain
            // stable sort.
            bucket.sort_by(by_key);
            emit(&bucket, out, &mut self.at, self.stream);
            self.recycle(bucket);
            return;
        }
        let grow = |len: usize| n.saturating_sub(len);
        if self.fine.try_reserve(grow(self.fine.len())).is_err()
            || self.sub_of.try_reserve(grow(self.sub_of.len())).is_err()
        {
            self.out_of_memory = true;
            self.recycle(bucket);
            return;
        }
        if self.fine.len() < n {
            self.fine.resize(n, (0.0, 0));
        }
        if self.sub_of.len() < n {
            self.sub_of.resize(n, 0);
        }
        // Counting sort on the sub-bucket, remembering each item's.
        let next = &mut self.next;
        next.clear();
        next.resize(steps, 0);
        let mut crowded = false;
        fill_sub_buckets(&bucket, width, c, &mut self.sub_of[..n]);
        for &f in &self.sub_of[..n] {
            let f = f as usize;
            next[f] += 1;
            crowded |= next[f] > 32;
        }
        exclusive_prefix_sum(next);
        let fine = &mut self.fine[..n];
        for (&item, &f) in bucket.iter().zip(&self.sub_of) {
            let f = f as usize;
            fine[next[f] as usize] = item;
            next[f] += 1;
        }
        // Items are now ordered by sub-bucket (`next[f]` is where sub-bucket
        // `f` ends): one insertion pass moves items only within their
        // sub-bucket, which holds a handful of items at most with py1e's
        // keys (so the pass rarely moves one at all). A crowded sub-bucket is
        // sorted on its own so the pass stays linear.
        if crowded {
            let mut start = 0;
            for &end in next.iter() {
                fine[start..end as usize].sort_by(by_key);
                start = end as usize;
            }
        } else {
            insertion_sort(fine);
        }
        emit(fine, out, &mut self.at, self.stream);
        self.recycle(bucket);
    }

    /// Keeps an emptied bucket's memory for the next bucket to fill.
    fn recycle(&mut self, mut bucket: Vec<(f64, i64)>) {
        // Dropped, and its memory freed, when the spares cannot grow.
        if bucket.capacity() > 0 && self.spare.try_reserve(1).is_ok() {
            bucket.clear();
            self.spare.push(bucket);
        }
    }

    /// Reorders `values` by `keys` (same length); equal keys keep their order.
    pub fn sort(&mut self, keys: &[f64], values: &mut [i64]) -> Result<()> {
        let n = keys.len().min(values.len());
        self.begin(n);
        for (&k, &v) in keys[..n].iter().zip(&values[..n]) {
            self.push(k, v);
        }
        self.finish(&mut values[..n]);
        self.check_memory()
    }
}

/// The sub-bucket of a key within coarse bucket `c` of a sort of `width`
/// integers: the key's `1/SUB_BUCKETS` step, clamped like
/// [`SortScratch::bucket`] (scaling by a power of two is exact, so this
/// refines the integer buckets).
#[inline(always)]
fn sub_bucket(width: usize, c: usize, key: f64) -> usize {
    let step = ((key * SUB_BUCKETS as f64) as usize).min(width * SUB_BUCKETS - 1);
    step - (c << FINE_BITS) * SUB_BUCKETS
}

/// `sub_of[i]` = the sub-bucket of `items[i]` in coarse bucket `c`.
fn fill_sub_buckets(items: &[(f64, i64)], width: usize, c: usize, sub_of: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        #[allow(unsafe_code)]
        // SAFETY: `avx512` only requires the instructions just detected.
        unsafe {
            avx512::sub_buckets(items, width, c, sub_of)
        };
        return;
    }
    for (f, &(key, _)) in sub_of.iter_mut().zip(items) {
        *f = sub_bucket(width, c, key) as u32;
    }
}

/// Replaces each count by the sum of the counts before it (which fits
/// `u32`).
fn exclusive_prefix_sum(counts: &mut [u32]) {
    #[cfg(target_arch = "x86_64")]
    if avx512::available() {
        #[allow(unsafe_code)]
        // SAFETY: `avx512` only requires the instructions just detected.
        unsafe {
            avx512::exclusive_prefix_sum(counts)
        };
        return;
    }
    scalar_prefix_sum(counts, 0);
}

/// [`exclusive_prefix_sum`] one count at a time, the sums starting at
/// `sum` (the vector loop's carry for its tail).
fn scalar_prefix_sum(counts: &mut [u32], mut sum: u32) {
    for slot in counts {
        let count = *slot;
        *slot = sum;
        sum = sum.wrapping_add(count);
    }
}

/// Writes the values of sorted `items` at `out[*at..]` (as many as fit) and
/// moves `at` past them; with streaming stores if `stream` (the caller
/// fences them, see [`SortScratch::finish`]).
fn emit(items: &[(f64, i64)], out: &mut [i64], at: &mut usize, stream: bool) {
    let start = (*at).min(out.len());
    let end = (start + items.len()).min(out.len());
    *at = end;
    let out = &mut out[start..end];
    #[cfg(target_arch = "x86_64")]
    if stream {
        // One 8-byte store a value: the processor combines them into whole
        // lines (a vector version, eight values a store, measured no faster).
        for (o, &(_, v)) in out.iter_mut().zip(items) {
            #[allow(unsafe_code)]
            // SAFETY: `o` is a writable `i64`; SSE2, which has the store, is
            // part of every x86-64 processor.
            unsafe {
                std::arch::x86_64::_mm_stream_si64(o, v)
            };
        }
        return;
    }
    let _ = stream;
    for (o, &(_, v)) in out.iter_mut().zip(items) {
        *o = v;
    }
}

/// Items in key order (keys are finite; `-0.0` and `0.0` are equal, as in
/// [`insertion_sort`] and numpy).
fn by_key(a: &(f64, i64), b: &(f64, i64)) -> std::cmp::Ordering {
    a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal)
}

/// A stable insertion sort by key (buckets hold a handful of items).
fn insertion_sort(items: &mut [(f64, i64)]) {
    for i in 1..items.len() {
        let item = items[i];
        let mut j = i;
        while j > 0 && items[j - 1].0 > item.0 {
            items[j] = items[j - 1];
            j -= 1;
        }
        items[j] = item;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::streaming::numpy_rng::Generator;

    #[test]
    fn every_path_gives_the_scalar_sub_buckets_and_prefix_sums() {
        // Keys around the clamps and the steps' edges, in coarse buckets at
        // the start, the middle and the end of a sort, every tail length.
        #[cfg(target_arch = "x86_64")]
        let vector = avx512::available();
        let mut g = Generator::new(5);
        for (width, c) in [
            (1usize, 0usize),
            (5000, 0),
            (5000, 1),
            (5000, 2),
            (1 << 20, 300),
        ] {
            let base = (c << FINE_BITS) as f64;
            let top = width as f64;
            let mut keys = vec![
                -1e300,
                -1.0,
                -0.0,
                0.0,
                0.2,
                top - 1.0,
                top - 0.25,
                top,
                1e300,
            ];
            for edge in [base, base + 0.25, base + 2047.75] {
                keys.extend([edge, edge + 1e-9, edge - 1e-9]);
            }
            keys.extend((0..60).map(|_| base + g.random() * 2048.0));
            // Only keys of this coarse bucket reach it (past the sort's ends, clamped).
            keys.retain(|&k| SortScratch::bucket(width, k) >> FINE_BITS == c);
            for len in [0, 1, 7, 8, 9, keys.len()] {
                let items: Vec<(f64, i64)> = keys[..len.min(keys.len())]
                    .iter()
                    .map(|&k| (k, 7))
                    .collect();
                let expect: Vec<u32> = items
                    .iter()
                    .map(|&(k, _)| sub_bucket(width, c, k) as u32)
                    .collect();
                assert!(expect
                    .iter()
                    .all(|&f| (f as usize) < SUB_BUCKETS << FINE_BITS));
                let mut got = vec![u32::MAX; items.len()];
                fill_sub_buckets(&items, width, c, &mut got);
                assert_eq!(got, expect, "width {width}, bucket {c}");
                #[cfg(target_arch = "x86_64")]
                if vector {
                    let mut got = vec![u32::MAX; items.len()];
                    #[allow(unsafe_code)]
                    // SAFETY: the instructions were detected.
                    unsafe {
                        avx512::sub_buckets(&items, width, c, &mut got)
                    };
                    assert_eq!(got, expect, "width {width}, bucket {c}");
                }
            }
        }
        for len in [0usize, 1, 15, 16, 17, 100, SUB_BUCKETS << FINE_BITS] {
            let counts: Vec<u32> = (0..len).map(|_| (g.random() * 40.0) as u32).collect();
            let mut expect = counts.clone();
            let mut sum = 0;
            for slot in &mut expect {
                (*slot, sum) = (sum, sum + *slot);
            }
            let mut got = counts.clone();
            exclusive_prefix_sum(&mut got);
            assert_eq!(got, expect, "{len} counts");
            let mut got = counts.clone();
            scalar_prefix_sum(&mut got, 0);
            assert_eq!(got, expect, "{len} counts");
            #[cfg(target_arch = "x86_64")]
            if vector {
                let mut got = counts.clone();
                #[allow(unsafe_code)]
                // SAFETY: the instructions were detected.
                unsafe {
                    avx512::exclusive_prefix_sum(&mut got)
                };
                assert_eq!(got, expect, "{len} counts");
            }
        }
    }

    #[test]
    fn sort_by_keys_is_stable_on_ties() {
        let keys = [2.5, 0.25, 2.5, 0.25, 1.0, 2.5, 0.0];
        let mut out = [10, 11, 12, 13, 14, 15, 16];
        sort_by_keys(&keys, &mut out).unwrap();
        assert_eq!(out, [16, 11, 13, 14, 10, 12, 15]);
        // -0.0 and 0.0 are equal keys, also in a crowded sub-bucket.
        let keys: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
            .collect();
        let mut out: Vec<i64> = (0..40).collect();
        sort_by_keys(&keys, &mut out).unwrap();
        assert_eq!(out, (0..40).collect::<Vec<i64>>());
        // Many coarse buckets, keys out of range, big tie groups: compare
        // with a stable comparison sort (the last size with streaming
        // stores).
        let mut g = Generator::new(3);
        for n in [1usize, 2, 5000, 20_000, STREAM_MIN + 3] {
            let keys: Vec<f64> = (0..n)
                .map(|_| ((g.random() * 1.2 - 0.1) * n as f64 / 3.0).floor() / 2.0)
                .collect();
            let samples: Vec<i64> = (0..n as i64).map(|i| i * 7).collect();
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
            let expect: Vec<i64> = order.iter().map(|&i| samples[i]).collect();
            let mut out = samples.clone();
            sort_by_keys(&keys, &mut out).unwrap();
            assert_eq!(out, expect, "n {n}");
        }
    }
}
