//! A bit vector with a rank/select directory: the storage of mask selections.
//!
//! Bit `i` of the store is bit `i % 64` of word `i / 64`. The directory keeps,
//! for every superblock of 4096 bits (64 words), the ones before it (a `u64`),
//! and for every block of 512 bits (8 words), the ones before it inside its
//! superblock (a `u16`, at most 4032). That is 3 bytes per 512 bits beyond the
//! mask's own 64: 4.7% more than the bits themselves.
//!
//! `select(j)` (the position of the `j`-th set bit, from 0) is a binary search
//! over the superblocks, one over the at most 8 blocks of the superblock, a
//! scan of at most 8 words and a select inside one word: O(log N) and a few
//! cache lines. `rank(i)` (the set bits below `i`) is O(1).

use crate::buffer::vec_with_capacity;
use crate::error::{Error, Result};

/// Words per block (512 bits).
const BLOCK_WORDS: usize = 8;
/// Blocks per superblock (4096 bits).
const SUPER_BLOCKS: usize = 8;
/// Words per superblock.
const SUPER_WORDS: usize = BLOCK_WORDS * SUPER_BLOCKS;

/// `num_bits` bits and their rank/select directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BitMask {
    num_bits: u64,
    words: Box<[u64]>,
    /// Set bits before each superblock.
    supers: Box<[u64]>,
    /// Set bits before each block, counted from its superblock's start.
    blocks: Box<[u16]>,
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

impl BitMask {
    /// The mask whose bit `i` is `bits[i]`.
    pub fn from_bools(bits: &[bool]) -> Result<BitMask> {
        let mut words = vec_with_capacity(bits.len().div_ceil(64), "the mask's words")?;
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
        BitMask::from_words_unchecked(words, num_bits)
    }

    /// Builds the directory over `words`, whose length and trailing bits the
    /// caller has made right.
    pub(crate) fn from_words_unchecked(words: Vec<u64>, num_bits: u64) -> Result<BitMask> {
        let num_supers = words.len().div_ceil(SUPER_WORDS);
        let num_blocks = words.len().div_ceil(BLOCK_WORDS);
        let mut supers = vec_with_capacity(num_supers, "the mask's directory")?;
        let mut blocks = vec_with_capacity(num_blocks, "the mask's directory")?;
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
        Ok(BitMask {
            num_bits,
            words: words.into_boxed_slice(),
            supers: supers.into_boxed_slice(),
            blocks: blocks.into_boxed_slice(),
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
        // The last superblock with at most j ones before it holds the bit.
        let sup = self.supers.partition_point(|&c| c <= j) - 1;
        let mut left = j - self.supers[sup];
        let first_block = sup * SUPER_BLOCKS;
        let last_block = (first_block + SUPER_BLOCKS).min(self.blocks.len());
        let blocks = &self.blocks[first_block..last_block];
        let block = first_block + blocks.partition_point(|&c| u64::from(c) <= left) - 1;
        left -= u64::from(self.blocks[block]);
        let mut word = block * BLOCK_WORDS;
        loop {
            let ones = u64::from(self.words[word].count_ones());
            if left < ones {
                return word as u64 * 64 + u64::from(select_in_word(self.words[word], left as u32));
            }
            left -= ones;
            word += 1;
        }
    }

    /// Bit-wise combination of two masks of the same size; `op` must map
    /// two clear bits to a clear bit.
    pub(crate) fn combine(&self, other: &BitMask, op: impl Fn(u64, u64) -> u64) -> Result<BitMask> {
        let mut words = vec_with_capacity(self.words.len(), "the mask's words")?;
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
        let mut words = vec_with_capacity(self.words.len(), "the mask's words")?;
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
        let mut words = vec_with_capacity(n, "the mask's words")?;
        words.resize(n, 0);
        Ok(words)
    }
}

/// The position of the `k`-th set bit of `w` (from 0); `k < popcount(w)`.
#[inline]
fn select_in_word(mut w: u64, k: u32) -> u32 {
    for _ in 0..k {
        w &= w - 1;
    }
    w.trailing_zeros()
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
