//! A bit vector with a rank/select directory: the storage of mask selections.
//!
//! Bit `i` of the store is bit `i % 64` of word `i / 64`. The directory keeps,
//! for every superblock of 4096 bits (64 words), the ones before it (a `u64`),
//! and for every block of 512 bits (8 words), the ones before it inside its
//! superblock (a `u16`, at most 4032). A select sample keeps, for every
//! 8192nd one, the superblock holding it (a `u64`). That is 3 bytes per 512
//! bits for the directory (4.7% more than the bits themselves) and at most 8
//! bytes per 8192 bits for the sample (0.8%, when every bit is set): at most
//! 5.5% in all, plus a padding of 4 superblock counts and of the last
//! superblock's blocks. Large masks are asked for huge pages, so random
//! lookups do not also miss the TLB, and their words start on a cache line,
//! so a block is one line, not two.
//!
//! `select(j)` (the position of the `j`-th set bit, from 0) reads the
//! sample's entries for `j`, which bracket the superblock holding it (one to
//! three superblocks for a mask with a quarter of its bits set or more:
//! counted over a fixed window without a branch; a binary search in sparse
//! stretches), picks the block by counting the superblock's 8 block counts
//! at most `j`, then the word by the running popcounts of the block's words,
//! then the bit inside the word (byte sums, then a table of 2 KiB): a few
//! cache lines and no branch on the data. `rank(i)` (the set bits below `i`)
//! is O(1).
//!
//! # Many lookups at once
//!
//! A plan looks up millions of random `j`; each one's sample entry,
//! superblock count, block counts and words are cache misses that depend on
//! each other. [`BitMask::select_in_place`] works on batches of
//! [`SELECT_BATCH`] positions in stages, one light loop a level: all the
//! batch's sample entries, then their superblock counts, block counts and
//! words (both cache lines a block may straddle), then the word scans.
//! Within a stage the loads are independent, so the processor overlaps their
//! misses. The result is [`BitMask::select`] on each position.
//!
//! The portable build has no population count instruction: each
//! `count_ones` is a dozen arithmetic steps. On x86-64 processors with
//! POPCNT and BMI2 (Intel since 2013, AMD since 2015), the batched lookups
//! run a copy compiled for them, chosen at run time, which also selects
//! inside a word with one `pdep`. Both copies give the same positions; the
//! tests run each one the processor has.

use crate::buffer::{advise_huge_pages, prefetch, vec_with_capacity};
use crate::error::{Error, Result};

/// Words per block (512 bits).
const BLOCK_WORDS: usize = 8;
/// Blocks per superblock (4096 bits).
const SUPER_BLOCKS: usize = 8;
/// Words per superblock.
const SUPER_WORDS: usize = BLOCK_WORDS * SUPER_BLOCKS;
/// Ones per entry of the select sample (a power of two).
const SAMPLE_ONES: u64 = 8192;
/// Superblocks [`BitMask::select`] counts without a search: when the
/// sample's entries bracket at most this many after the first (two or three
/// for a mask with more than a quarter of its bits set).
const SUPER_WINDOW: usize = 4;
/// Positions per batch of [`BitMask::select_in_place`].
pub const SELECT_BATCH: usize = 64;

/// `num_bits` bits and their rank/select directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitMask {
    num_bits: u64,
    words: Words,
    /// Set bits before each superblock, then [`SUPER_WINDOW`] times
    /// `u64::MAX`.
    supers: Box<[u64]>,
    /// Set bits before each block, counted from its superblock's start;
    /// `u16::MAX` for the blocks past the end of the last superblock.
    blocks: Box<[u16]>,
    /// The superblock holding the `(m * SAMPLE_ONES)`-th set bit, for every `m`.
    samples: Box<[u64]>,
    ones: u64,
}

/// Words needed for `num_bits` bits, or an error when they cannot be indexed.
fn word_count(num_bits: u64) -> Result<usize> {
    usize::try_from(num_bits.div_ceil(64)).map_err(|_| {
        Error::Memory(format!(
            "cannot allocate a mask of {num_bits} bits on this machine"
        ))
    })
}

/// Room for `n` words of a mask, on huge pages when large: a plan's lookups
/// land on random words, and with 4 KiB pages most of them would also miss
/// the TLB. The room has the few words more that [`Words::new`] needs to
/// move them onto a cache line in place.
fn words_with_capacity(n: usize) -> Result<Vec<u64>> {
    let mut words = vec_with_capacity(n + BLOCK_WORDS - 1, "the mask's words")?;
    advise_huge_pages(words.spare_capacity_mut());
    Ok(words)
}

/// A mask's words, from the first word of a cache line on: the allocator
/// aligns large buffers to 16 bytes, which would make every 64-byte block
/// straddle two lines, two misses for a lookup's last step instead of one.
#[derive(Debug)]
struct Words {
    buf: Vec<u64>,
    /// The words are `buf[start..start + len]`.
    start: usize,
    len: usize,
}

impl Words {
    /// `words`, moved (in place when their buffer has room) to start on a
    /// cache line.
    fn new(mut words: Vec<u64>) -> Result<Words> {
        let len = words.len();
        let start = words_to_line(&words);
        if start == 0 {
            return Ok(Words {
                buf: words,
                start,
                len,
            });
        }
        if words.capacity() >= len + start {
            // Within the capacity: the buffer does not move.
            words.resize(len + start, 0);
            words.copy_within(0..len, start);
            return Ok(Words {
                buf: words,
                start,
                len,
            });
        }
        Words::copied(&words)
    }

    /// A copy of `words` starting on a cache line.
    fn copied(words: &[u64]) -> Result<Words> {
        Ok(Words::copied_into(words_with_capacity(words.len())?, words))
    }

    /// `words` copied into the empty `buf`, which has room for them and
    /// `BLOCK_WORDS - 1` more, from its first cache line on.
    fn copied_into(mut buf: Vec<u64>, words: &[u64]) -> Words {
        let start = words_to_line(&buf);
        buf.resize(start, 0);
        buf.extend_from_slice(words);
        Words {
            buf,
            start,
            len: words.len(),
        }
    }
}

/// The words from the start of `buf` to the next cache line's start.
fn words_to_line(buf: &[u64]) -> usize {
    let past = (buf.as_ptr() as usize / std::mem::size_of::<u64>()) % BLOCK_WORDS;
    (BLOCK_WORDS - past) % BLOCK_WORDS
}

impl std::ops::Deref for Words {
    type Target = [u64];

    fn deref(&self) -> &[u64] {
        &self.buf[self.start..self.start + self.len]
    }
}

impl Clone for Words {
    fn clone(&self) -> Words {
        // Like any clone, an allocation failure here aborts.
        Words::copied_into(Vec::with_capacity(self.len + BLOCK_WORDS - 1), self)
    }
}

impl PartialEq for Words {
    fn eq(&self, other: &Words) -> bool {
        **self == **other
    }
}

impl Eq for Words {}

impl BitMask {
    /// The mask whose bit `i` is `bits[i]`.
    pub fn from_bools(bits: &[bool]) -> Result<BitMask> {
        let mut words = words_with_capacity(bits.len().div_ceil(64))?;
        words.extend(bits.chunks(64).map(|chunk| {
            chunk
                .iter()
                .enumerate()
                .fold(0u64, |w, (i, &b)| w | (u64::from(b) << i))
        }));
        BitMask::from_words_unchecked(words, bits.len() as u64)
    }

    /// The mask of `num_bits` bits stored in `words` (bit `i` in bit `i % 64`
    /// of word `i / 64`); bits at or beyond `num_bits` must be clear.
    pub fn from_words(words: Vec<u64>, num_bits: u64) -> Result<BitMask> {
        let need = word_count(num_bits)?;
        if words.len() != need {
            return Err(Error::Value(format!(
                "mask must have {need} words for {num_bits} bits, got {}",
                words.len()
            )));
        }
        if !num_bits.is_multiple_of(64) {
            if let Some(&last) = words.last() {
                if last >> (num_bits % 64) != 0 {
                    return Err(Error::Value(format!(
                        "mask must have no bit set at or beyond num_samples = {num_bits}"
                    )));
                }
            }
        }
        // Already filled: huge pages only if the kernel collapses them later.
        advise_huge_pages(&words);
        BitMask::from_words_unchecked(words, num_bits)
    }

    /// Builds the directory over `words`, whose length and trailing bits the
    /// caller has made right.
    pub(crate) fn from_words_unchecked(words: Vec<u64>, num_bits: u64) -> Result<BitMask> {
        let num_supers = words.len().div_ceil(SUPER_WORDS);
        let num_blocks = words.len().div_ceil(BLOCK_WORDS);
        let mut supers = vec_with_capacity(num_supers + SUPER_WINDOW, "the mask's directory")?;
        // The last superblock's blocks are padded to 8 with counts above any
        // superblock's ones, so that every superblock has 8 counts to read.
        let mut blocks = vec_with_capacity(num_supers * SUPER_BLOCKS, "the mask's directory")?;
        let mut ones = 0u64;
        for sup in words.chunks(SUPER_WORDS) {
            supers.push(ones);
            let mut inside = 0u16;
            for block in sup.chunks(BLOCK_WORDS) {
                blocks.push(inside);
                // At most 512 ones a block, 4096 a superblock: no overflow.
                inside += block.iter().map(|w| w.count_ones() as u16).sum::<u16>();
            }
            ones += u64::from(inside);
        }
        debug_assert!(blocks.len() == num_blocks);
        blocks.resize(num_supers * SUPER_BLOCKS, u16::MAX);
        let mut samples = vec_with_capacity(
            usize::try_from(ones.div_ceil(SAMPLE_ONES)).unwrap_or(usize::MAX),
            "the mask's directory",
        )?;
        for (sup, &before) in supers.iter().enumerate() {
            let after = supers.get(sup + 1).copied().unwrap_or(ones);
            // The sampled ones in [before, after) are in this superblock.
            let mut next = samples.len() as u64 * SAMPLE_ONES;
            while next < after {
                debug_assert!(next >= before);
                samples.push(sup as u64);
                next += SAMPLE_ONES;
            }
        }
        // Counts above any j past the end, for the window of superblocks.
        supers.resize(num_supers + SUPER_WINDOW, u64::MAX);
        Ok(BitMask {
            num_bits,
            words: Words::new(words)?,
            supers: supers.into_boxed_slice(),
            blocks: blocks.into_boxed_slice(),
            samples: samples.into_boxed_slice(),
            ones,
        })
    }

    /// The number of bits (the store's size).
    pub fn num_bits(&self) -> u64 {
        self.num_bits
    }

    /// The number of set bits.
    pub fn count_ones(&self) -> u64 {
        self.ones
    }

    /// The words of the mask (bits beyond `num_bits` are clear).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Whether bit `i` is set; `false` beyond the mask.
    pub fn bit(&self, i: u64) -> bool {
        i < self.num_bits && (self.words[(i / 64) as usize] >> (i % 64)) & 1 == 1
    }

    /// The set bits below bit `i` (`i <= num_bits`).
    pub fn rank(&self, i: u64) -> u64 {
        if i >= self.num_bits {
            return self.ones;
        }
        let word = (i / 64) as usize;
        let block = word / BLOCK_WORDS;
        let mut count = self.supers[word / SUPER_WORDS] + u64::from(self.blocks[block]);
        for w in &self.words[block * BLOCK_WORDS..word] {
            count += u64::from(w.count_ones());
        }
        count + u64::from((self.words[word] & ((1u64 << (i % 64)) - 1)).count_ones())
    }

    /// The position of the `j`-th set bit (from 0); `j < count_ones()` is the
    /// caller's contract.
    pub fn select(&self, j: u64) -> u64 {
        debug_assert!(j < self.ones);
        let sup = self.superblock_of(j);
        let (block, left) = self.block_of(sup, j - self.supers[sup]);
        self.select_in_block::<false>(block, left)
    }

    /// The superblock holding the `j`-th set bit: the last superblock with
    /// at most `j` ones before it, between the sample's entries for `j`.
    #[inline(always)]
    fn superblock_of(&self, j: u64) -> usize {
        let m = (j / SAMPLE_ONES) as usize;
        let lo = self.samples[m] as usize;
        let hi = self
            .samples
            .get(m + 1)
            .map_or(self.num_supers() - 1, |&s| s as usize);
        // supers[lo] <= j (the (m * SAMPLE_ONES)-th one is in superblock
        // lo), and every superblock after hi has more than j ones before it
        // (the ((m + 1) * SAMPLE_ONES)-th one is in hi): the superblock is lo
        // plus the count of those after lo with at most j ones before them.
        if hi - lo <= SUPER_WINDOW {
            // Counted without branches on the data, over a fixed window
            // (the padding at the end counts for none).
            let window = &self.supers[lo + 1..lo + 1 + SUPER_WINDOW];
            return lo + window.iter().map(|&c| usize::from(c <= j)).sum::<usize>();
        }
        // A sparse stretch: a binary search whose steps select, not branch.
        let (mut base, mut len) = (lo, hi + 1 - lo);
        while len > 1 {
            let half = len / 2;
            base += half * usize::from(self.supers[base + half] <= j);
            len -= half;
        }
        base
    }

    /// The number of superblocks (without the padding).
    #[inline]
    fn num_supers(&self) -> usize {
        self.supers.len() - SUPER_WINDOW
    }

    /// The block of superblock `sup` holding the superblock's `left`-th set
    /// bit, and the set bits before that one inside the block.
    #[inline(always)]
    fn block_of(&self, sup: usize, left: u64) -> (usize, u64) {
        let first = sup * SUPER_BLOCKS;
        let counts = &self.blocks[first..first + SUPER_BLOCKS];
        // The counts grow along the superblock (the padding last): the
        // blocks with at most `left` ones before them are a prefix, and its
        // last holds the bit. `left < 4096`, so counting needs no branch.
        let left16 = left as u16;
        let inside: usize = counts.iter().map(|&c| usize::from(c <= left16)).sum();
        let block = first + inside - 1;
        (block, left - u64::from(self.blocks[block]))
    }

    /// The position of the `left`-th set bit of block `block`.
    #[inline(always)]
    fn select_in_block<const BMI2: bool>(&self, block: usize, mut left: u64) -> u64 {
        let mut word = block * BLOCK_WORDS;
        if let Some(words) = self.words.get(word..word + BLOCK_WORDS) {
            // A whole block: the words whose running count stays at most
            // `left` come first, counted without branches on the data.
            let (mut skip, mut before, mut sum) = (0usize, 0u64, 0u64);
            for &w in &words[..BLOCK_WORDS - 1] {
                sum += u64::from(w.count_ones());
                let passed = sum <= left;
                skip += usize::from(passed);
                before = if passed { sum } else { before };
            }
            word += skip;
            return word as u64 * 64
                + u64::from(select_in_word::<BMI2>(
                    self.words[word],
                    (left - before) as u32,
                ));
        }
        loop {
            let ones = u64::from(self.words[word].count_ones());
            if left < ones {
                return word as u64 * 64
                    + u64::from(select_in_word::<BMI2>(self.words[word], left as u32));
            }
            left -= ones;
            word += 1;
        }
    }

    /// Replaces every `values[i]` (each in `[0, count_ones())`) by
    /// `select(values[i])`, in batches whose cache misses overlap (see the
    /// module's documentation), on the POPCNT and BMI2 copy when the
    /// processor has them.
    pub fn select_in_place(&self, values: &mut [i64]) {
        #[cfg(target_arch = "x86_64")]
        if has_popcnt_and_bmi2() {
            #[allow(unsafe_code)]
            // SAFETY: the processor has POPCNT, BMI1 and BMI2, checked above.
            unsafe {
                self.select_in_place_popcnt(values);
            }
            return;
        }
        self.select_batches::<false>(values);
    }

    /// [`BitMask::select_batches`] compiled for POPCNT, BMI1 and BMI2.
    ///
    /// # Safety
    /// The processor must have them.
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    #[target_feature(enable = "popcnt,bmi1,bmi2")]
    unsafe fn select_in_place_popcnt(&self, values: &mut [i64]) {
        self.select_batches::<true>(values);
    }

    /// The batched lookups; `BMI2` only in [`BitMask::select_in_place_popcnt`].
    #[inline(always)]
    fn select_batches<const BMI2: bool>(&self, values: &mut [i64]) {
        let mut sups = [0usize; SELECT_BATCH];
        let mut blocks = [0usize; SELECT_BATCH];
        let mut lefts = [0u64; SELECT_BATCH];
        for batch in values.chunks_mut(SELECT_BATCH) {
            let n = batch.len();
            debug_assert!(batch.iter().all(|&j| (j as u64) < self.ones));
            // Each stage is one light loop whose loads are independent of
            // each other: the processor has many of them in flight, and
            // the next stage finds its lines in the cache.
            for &j in batch.iter() {
                prefetch(&self.samples[(j as u64 / SAMPLE_ONES) as usize]);
            }
            for &j in batch.iter() {
                let lo = self.samples[(j as u64 / SAMPLE_ONES) as usize] as usize;
                prefetch(&self.supers[lo + 1]);
            }
            for (i, &j) in batch.iter().enumerate() {
                let sup = self.superblock_of(j as u64);
                sups[i] = sup;
                lefts[i] = j as u64 - self.supers[sup];
                prefetch(&self.blocks[sup * SUPER_BLOCKS]);
            }
            for i in 0..n {
                let (block, left) = self.block_of(sups[i], lefts[i]);
                blocks[i] = block;
                lefts[i] = left;
                // A block is one cache line (the words start on one).
                prefetch(&self.words[block * BLOCK_WORDS]);
            }
            for (i, v) in batch.iter_mut().enumerate() {
                *v = self.select_in_block::<BMI2>(blocks[i], lefts[i]) as i64;
            }
        }
    }

    /// Bit-wise combination of two masks of the same size; `op` must map
    /// two clear bits to a clear bit.
    pub(crate) fn combine(&self, other: &BitMask, op: impl Fn(u64, u64) -> u64) -> Result<BitMask> {
        let mut words = words_with_capacity(self.words.len())?;
        words.extend(
            self.words
                .iter()
                .zip(other.words.iter())
                .map(|(&a, &b)| op(a, b)),
        );
        BitMask::from_words_unchecked(words, self.num_bits)
    }

    /// The complement inside the store.
    pub(crate) fn complement(&self) -> Result<BitMask> {
        let mut words = words_with_capacity(self.words.len())?;
        words.extend(self.words.iter().map(|&w| !w));
        if !self.num_bits.is_multiple_of(64) {
            if let Some(last) = words.last_mut() {
                *last &= (1u64 << (self.num_bits % 64)) - 1;
            }
        }
        BitMask::from_words_unchecked(words, self.num_bits)
    }

    /// The clear words of a mask of `num_bits` bits, to be set by the caller
    /// and given to [`BitMask::from_words_unchecked`].
    pub(crate) fn clear_words(num_bits: u64) -> Result<Vec<u64>> {
        let n = word_count(num_bits)?;
        let mut words = words_with_capacity(n)?;
        words.resize(n, 0);
        Ok(words)
    }
}

/// Every byte set to 1.
const ONES_STEP_8: u64 = 0x0101_0101_0101_0101;
/// The top bit of every byte.
const MSBS_STEP_8: u64 = 0x8080_8080_8080_8080;

/// `SELECT_IN_BYTE[k * 256 + b]`: the position of the `k`-th set bit of the
/// byte `b` (8 when `b` has at most `k` set bits).
static SELECT_IN_BYTE: [u8; 2048] = {
    let mut table = [8u8; 2048];
    let mut b = 0;
    while b < 256 {
        let (mut k, mut bit) = (0, 0);
        while bit < 8 {
            if (b >> bit) & 1 == 1 {
                table[k * 256 + b] = bit as u8;
                k += 1;
            }
            bit += 1;
        }
        b += 1;
    }
    table
};

/// Whether the processor has POPCNT, BMI1 and BMI2 (the standard library
/// caches the answer).
#[cfg(target_arch = "x86_64")]
fn has_popcnt_and_bmi2() -> bool {
    std::is_x86_feature_detected!("popcnt")
        && std::is_x86_feature_detected!("bmi1")
        && std::is_x86_feature_detected!("bmi2")
}

/// The position of the `k`-th set bit of `w` (from 0); `k < popcount(w)`.
///
/// With `BMI2` (only in code compiled for it): deposit one bit at the `k`-th
/// set bit of `w` and count the zeros below it. Otherwise broadword: the
/// set bits of each byte, their running sums in the bytes of one product,
/// the byte where the sum passes `k` from the bytes whose sum is at most
/// `k`, then a table for the byte.
#[inline(always)]
fn select_in_word<const BMI2: bool>(w: u64, k: u32) -> u32 {
    debug_assert!(k < w.count_ones());
    #[cfg(target_arch = "x86_64")]
    if BMI2 {
        #[allow(unsafe_code)]
        // SAFETY: `BMI2` is true only in `BitMask::select_in_place_popcnt`,
        // which runs only on processors with BMI2.
        let deposited = unsafe { std::arch::x86_64::_pdep_u64(1u64 << k, w) };
        return deposited.trailing_zeros();
    }
    let mut s = w - ((w >> 1) & 0x5555_5555_5555_5555);
    s = (s & 0x3333_3333_3333_3333) + ((s >> 2) & 0x3333_3333_3333_3333);
    s = (s + (s >> 4)) & 0x0F0F_0F0F_0F0F_0F0F;
    // Byte b holds the set bits of bytes 0..=b (at most 64: the top bits
    // stay clear, so the comparison below borrows nothing across bytes).
    let sums = s.wrapping_mul(ONES_STEP_8);
    let below = (((u64::from(k) * ONES_STEP_8) | MSBS_STEP_8) - sums) & MSBS_STEP_8;
    // The bytes whose running sum is at most k come first.
    let byte = below.count_ones() * 8;
    let before = ((sums << 8) >> byte) & 0xFF;
    let rank = u64::from(k) - before;
    byte + u32::from(SELECT_IN_BYTE[(rank * 256 + ((w >> byte) & 0xFF)) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive_positions(bits: &[bool]) -> Vec<u64> {
        (0..bits.len() as u64)
            .filter(|&i| bits[i as usize])
            .collect()
    }

    #[test]
    fn select_and_rank_agree_with_a_scan_across_block_and_superblock_edges() {
        let n = 3 * 4096 + 700;
        let patterns: Vec<Box<dyn Fn(usize) -> bool>> = vec![
            Box::new(|i| i % 3 == 0),
            Box::new(|i| (i / 5000) % 2 == 1), // long empty stretches
            Box::new(|i| i == 4095 || i == 4096 || i == n - 1),
            Box::new(|_| true),
            Box::new(|i| (i * 2654435761) % 97 < 5),
        ];
        for p in patterns {
            let bits: Vec<bool> = (0..n).map(&p).collect();
            let mask = BitMask::from_bools(&bits).unwrap();
            let want = naive_positions(&bits);
            assert_eq!(mask.count_ones(), want.len() as u64);
            for (j, &pos) in want.iter().enumerate() {
                assert_eq!(mask.select(j as u64), pos);
                assert_eq!(mask.rank(pos), j as u64);
                assert!(mask.bit(pos));
            }
            assert_eq!(mask.rank(n as u64), want.len() as u64);
        }
    }

    /// The `k`-th set bit of `w`, by clearing the lower ones.
    fn select_in_word_by_clearing(mut w: u64, k: u32) -> u32 {
        for _ in 0..k {
            w &= w - 1;
        }
        w.trailing_zeros()
    }

    /// SplitMix64's output function, for test patterns.
    fn hash(x: u64) -> u64 {
        let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    #[test]
    fn select_in_word_agrees_with_clearing_the_lower_ones() {
        let mut words: Vec<u64> = vec![1, 1 << 63, u64::MAX, 0x8000_0000_0000_0001, 0xFF00];
        words.extend((0..64).map(|b| 1u64 << b));
        words.extend((0..2000).map(hash));
        // Sparse and dense random words.
        words.extend((0..2000).map(|i| hash(i) & hash(i + 7919) & hash(i + 104_729)));
        words.extend((0..2000).map(|i| hash(i) | hash(i + 7919)));
        #[cfg(target_arch = "x86_64")]
        let bmi2 = has_popcnt_and_bmi2();
        for w in words {
            for k in 0..w.count_ones() {
                let want = select_in_word_by_clearing(w, k);
                assert_eq!(select_in_word::<false>(w, k), want, "word {w:#x}, k {k}");
                #[cfg(target_arch = "x86_64")]
                if bmi2 {
                    assert_eq!(select_in_word::<true>(w, k), want, "pdep: {w:#x}, k {k}");
                }
            }
        }
    }

    #[test]
    fn batched_select_agrees_with_one_select_at_a_time_on_many_masks() {
        // Several superblocks and select-sample entries; a last partial word.
        let n = 9 * SAMPLE_ONES as usize + 4096 * 3 + 77;
        type Pattern = Box<dyn Fn(usize) -> bool>;
        let patterns: Vec<(&str, Pattern)> = vec![
            ("dense", Box::new(|i| i % 10 != 3)),
            ("all", Box::new(|_| true)),
            ("sparse", Box::new(|i| hash(i as u64).is_multiple_of(1000))),
            ("one", Box::new(|i| i == 40_000)),
            ("last bit", Box::new(move |i| i == n - 1)),
            ("first and last", Box::new(move |i| i == 0 || i == n - 1)),
            // Empty blocks and superblocks between dense runs.
            (
                "runs",
                Box::new(|i| (i / 600) % 7 == 0 || (i / 20_000) % 3 == 1),
            ),
            ("empty superblocks", Box::new(|i| (i / 4096) % 3 == 2)),
            ("random half", Box::new(|i| hash(i as u64) & 1 == 1)),
            ("none", Box::new(|_| false)),
        ];
        for (name, p) in patterns {
            for len in [n, n - 77, 64 * 3 + 5, 1] {
                let bits: Vec<bool> = (0..len).map(&p).collect();
                let mask = BitMask::from_bools(&bits).unwrap();
                let want = naive_positions(&bits);
                assert_eq!(mask.count_ones(), want.len() as u64, "{name}");
                if want.is_empty() {
                    mask.select_in_place(&mut []);
                    continue;
                }
                // Every j in order, then random js (a length that is not a
                // multiple of the batch).
                let mut js: Vec<i64> = (0..want.len() as i64).collect();
                js.extend(
                    (0..(3 * SELECT_BATCH + 5) as u64)
                        .map(|i| (hash(i ^ len as u64) % want.len() as u64) as i64),
                );
                let mut got = js.clone();
                mask.select_in_place(&mut got);
                // The portable copy too, whichever one `select_in_place` ran.
                let mut portable = js.clone();
                mask.select_batches::<false>(&mut portable);
                assert_eq!(portable, got, "{name}, len {len}");
                for (&j, &id) in js.iter().zip(&got) {
                    assert_eq!(id as u64, want[j as usize], "{name}, len {len}, j {j}");
                    assert_eq!(mask.select(j as u64), id as u64, "{name}, j {j}");
                }
            }
        }
    }

    #[test]
    fn the_select_sample_stays_within_its_documented_size() {
        for n in [1usize, 8191, 8192, 8193, 5 * 8192 + 1] {
            let mask = BitMask::from_bools(&vec![true; n]).unwrap();
            assert_eq!(mask.samples.len(), n.div_ceil(SAMPLE_ONES as usize));
            // At most 8 bytes per 8192 bits, plus one entry.
            assert!(mask.samples.len() * 8 <= n / 1024 + 8);
        }
    }

    #[test]
    fn words_start_on_a_cache_line_however_they_come() {
        let bits: Vec<bool> = (0..5000).map(|i| i % 3 == 0).collect();
        let want = BitMask::from_bools(&bits).unwrap();
        assert_eq!(words_to_line(want.words()), 0);
        // Buffers of many sizes land at every 16-byte offset of a line; with
        // and without room to move in place.
        let mut misaligned = 0;
        let mut keep = Vec::new();
        for extra in 0..64 {
            let mut words: Vec<u64> = Vec::with_capacity(want.words().len() + extra);
            misaligned += usize::from(words_to_line(&words) != 0);
            words.extend_from_slice(want.words());
            let mask = BitMask::from_words(words, 5000).unwrap();
            assert_eq!(words_to_line(mask.words()), 0);
            assert_eq!(mask, want);
            assert_eq!(words_to_line(mask.clone().words()), 0);
            // Other sizes between, so that the next buffer moves.
            keep.push(vec![0u8; 8 * extra + 16]);
        }
        assert!(
            misaligned > 0,
            "no buffer needed moving: the test tried nothing"
        );
    }

    #[test]
    fn words_with_bits_beyond_the_store_are_refused() {
        assert!(BitMask::from_words(vec![1 << 5], 5).is_err());
        assert!(BitMask::from_words(vec![1 << 4], 5).is_ok());
        assert!(BitMask::from_words(vec![0, 0], 64).is_err());
        assert!(BitMask::from_words(vec![], 0).is_ok());
    }

    #[test]
    fn the_complement_stays_inside_the_store() {
        let mask = BitMask::from_bools(&[true, false, true]).unwrap();
        let not = mask.complement().unwrap();
        assert_eq!(not.words(), &[0b010]);
        assert_eq!(not.count_ones(), 1);
    }
}
