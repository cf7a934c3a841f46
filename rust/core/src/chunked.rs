//! An I/O-local bijection for chunked storage (zarr chunks, parquet row groups,
//! shards): the order of chunks is permuted by a cipher, and the samples of each
//! window of `preload_nchunks` consecutive chunks (in that permuted order) are
//! shuffled among themselves by a cipher keyed per window. Reading positions in order
//! touches at most `preload_nchunks` chunks at a time. O(1) per position.
//!
//! Only the last chunk (id `num_chunks - 1`) may be short. Inside a window the
//! full chunks are enumerated in slot order and the short one, if present,
//! last; window starts after the short chunk's window move down by its deficit.

use crate::cipher::Cipher;
use crate::keys::{derive, Domain};

const fn domain(label: &str) -> Domain<'_> {
    Domain {
        kind: "chunked",
        label,
    }
}

/// The chunked order of `[0, n)`.
#[derive(Debug, Clone)]
pub struct Chunked {
    n: u64,
    seed: u64,
    epoch: u64,
    chunk_size: u64,
    preload_nchunks: u64,
    num_chunks: u64,
    num_windows: u64,
    /// `chunk_size` minus the size of the last chunk (0 when it is full).
    deficit: u64,
    /// Slot (position in chunk order) of the last chunk.
    short_slot: u64,
    chunk_order: Cipher,
}

impl Chunked {
    /// The order of `n` samples in chunks of `chunk_size`, shuffled within
    /// windows of `preload_nchunks` chunks. Both sizes must be at least 1.
    pub fn new(n: u64, seed: u64, epoch: u64, chunk_size: u64, preload_nchunks: u64) -> Self {
        debug_assert!(chunk_size >= 1 && preload_nchunks >= 1);
        let num_chunks = n.div_ceil(chunk_size);
        // A window wider than the whole dataset is the whole dataset; capping
        // it keeps `preload_nchunks * chunk_size` (<= n + chunk_size) from overflowing
        // and changes no order.
        let preload_nchunks = preload_nchunks.min(num_chunks.max(1));
        let chunk_order = Cipher::new(num_chunks, derive(seed, epoch, domain("chunks"), 0));
        let deficit = num_chunks * chunk_size - n;
        let short_slot = if num_chunks == 0 {
            0
        } else {
            chunk_order.invert(num_chunks - 1)
        };
        Self {
            n,
            seed,
            epoch,
            chunk_size,
            preload_nchunks,
            num_chunks,
            num_windows: num_chunks.div_ceil(preload_nchunks),
            deficit,
            short_slot,
            chunk_order,
        }
    }

    /// The number of samples.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when there are no samples.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    fn short_window(&self) -> u64 {
        self.short_slot / self.preload_nchunks
    }

    /// First position of window `j`.
    fn window_start(&self, j: u64) -> u64 {
        let full = j * self.preload_nchunks * self.chunk_size;
        if j > self.short_window() {
            full - self.deficit
        } else {
            full
        }
    }

    /// The number of positions in window `j`.
    fn window_len(&self, j: u64) -> u64 {
        let slots = (self.num_chunks - j * self.preload_nchunks).min(self.preload_nchunks);
        let full = slots * self.chunk_size;
        if j == self.short_window() {
            full - self.deficit
        } else {
            full
        }
    }

    /// The window holding `position`.
    fn window_of(&self, position: u64) -> u64 {
        let j = position / (self.preload_nchunks * self.chunk_size);
        if j + 1 < self.num_windows && position >= self.window_start(j + 1) {
            j + 1
        } else {
            j
        }
    }

    /// The cipher that shuffles the samples of window `j`.
    pub fn window_cipher(&self, j: u64) -> Cipher {
        Cipher::new(
            self.window_len(j),
            derive(self.seed, self.epoch, domain("window"), j),
        )
    }

    /// The sample id at `position` (< n), given the cipher of its window.
    fn id_in_window(&self, j: u64, inner: &Cipher, position: u64) -> u64 {
        let offset = inner.apply(position - self.window_start(j));
        let t = offset / self.chunk_size;
        let first_slot = j * self.preload_nchunks;
        let holds_short = self.deficit > 0 && j == self.short_window();
        let full_here = if holds_short {
            self.window_len(j) / self.chunk_size
        } else {
            u64::MAX
        };
        if t >= full_here {
            // Past the window's full chunks: the short chunk.
            let chunk = self.num_chunks - 1;
            return chunk * self.chunk_size + (offset - full_here * self.chunk_size);
        }
        let mut slot = first_slot + t;
        if holds_short && slot >= self.short_slot {
            slot += 1;
        }
        self.chunk_order.apply(slot) * self.chunk_size + offset % self.chunk_size
    }

    /// The sample id at `position` (< n).
    pub fn apply(&self, position: u64) -> u64 {
        let j = self.window_of(position);
        self.id_in_window(j, &self.window_cipher(j), position)
    }

    /// Replaces every position in `values` (each in `[0, n)`) by its id,
    /// reusing a window's cipher while consecutive positions stay in it.
    pub fn apply_in_place(&self, values: &mut [i64]) {
        let mut cached: Option<(u64, Cipher)> = None;
        for v in values.iter_mut() {
            let p = *v as u64;
            let j = self.window_of(p);
            let inner = match &cached {
                Some((cj, c)) if *cj == j => c,
                _ => &cached.insert((j, self.window_cipher(j))).1,
            };
            *v = self.id_in_window(j, inner, p) as i64;
        }
    }

    /// The position of sample `id` (< n): the inverse of [`Chunked::apply`].
    pub fn invert(&self, id: u64) -> u64 {
        let chunk = id / self.chunk_size;
        let slot = self.chunk_order.invert(chunk);
        let j = slot / self.preload_nchunks;
        let holds_short = self.deficit > 0 && j == self.short_window();
        let offset = if holds_short && chunk == self.num_chunks - 1 {
            // The short chunk comes after the window's full chunks.
            (self.window_len(j) / self.chunk_size) * self.chunk_size + id % self.chunk_size
        } else {
            // The full chunks of a window holding the short one skip its slot.
            let skipped = u64::from(holds_short && slot > self.short_slot);
            (slot - j * self.preload_nchunks - skipped) * self.chunk_size + id % self.chunk_size
        };
        self.window_start(j) + self.window_cipher(j).invert(offset)
    }

    /// The chunk that sample `id` lives in.
    pub fn chunk_of(&self, id: u64) -> u64 {
        id / self.chunk_size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bijection_and_window_locality() {
        for n in [0u64, 1, 2, 7, 10, 99, 100, 101, 1000, 1237] {
            for chunk in [1u64, 3, 10, 64] {
                for preload_nchunks in [1u64, 2, 5] {
                    let c = Chunked::new(n, 5, 6, chunk, preload_nchunks);
                    let mut ids: Vec<i64> = (0..n as i64).collect();
                    c.apply_in_place(&mut ids);
                    let mut sorted = ids.clone();
                    sorted.sort_unstable();
                    assert_eq!(
                        sorted,
                        (0..n as i64).collect::<Vec<_>>(),
                        "n={n} c={chunk} w={preload_nchunks}"
                    );
                    for (p, &id) in ids.iter().enumerate() {
                        assert_eq!(c.apply(p as u64), id as u64);
                    }
                    // Each full preload_nchunks of positions touches at most `preload_nchunks` chunks.
                    for j in 0..c.num_windows {
                        let lo = c.window_start(j) as usize;
                        let hi = lo + c.window_len(j) as usize;
                        let mut chunks: Vec<u64> =
                            ids[lo..hi].iter().map(|&i| c.chunk_of(i as u64)).collect();
                        chunks.sort_unstable();
                        chunks.dedup();
                        assert!(chunks.len() as u64 <= preload_nchunks);
                    }
                }
            }
        }
    }
}
