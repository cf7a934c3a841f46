//! numpy's legacy `RandomState`: the MT19937 generator and its `shuffle`, bit
//! for bit.
//!
//! Megatron-core draws every shuffle of a `GPTDataset` from one
//! `numpy.random.RandomState(seed)`. Its generator is the 32-bit Mersenne
//! Twister (Matsumoto and Nishimura 1998), seeded by Knuth's linear
//! recurrence (`init_genrand`: `mt[0] = seed`, `mt[i] = 1812433253 *
//! (mt[i-1] ^ (mt[i-1] >> 30)) + i`). Its `shuffle` of a one-dimensional
//! array is Fisher-Yates from the end: for `i = n-1, ..., 1` it swaps item
//! `i` with item `j`, a uniform draw from `[0, i]` made by masked rejection
//! (draw a word, keep its low bits up to the smallest all-ones mask that
//! covers `i`, retry while the value exceeds `i`). The word is 32 bits while
//! `i < 2^32` and otherwise 64 bits, two 32-bit outputs high half first.
//!
//! The draws do not depend on the array's contents, so [`RandomState::shuffle`]
//! draws each partner some swaps ahead and prefetches its cache line: the
//! swaps of a large array are cache misses, and this way many are in flight
//! at once instead of one.

use epochplan_core::buffer::prefetch;

/// Words of MT19937's state.
pub const STATE_WORDS: usize = 624;
const SHIFT: usize = 397;
const MATRIX_A: u32 = 0x9908_b0df;
const UPPER: u32 = 0x8000_0000;
const LOWER: u32 = 0x7fff_ffff;

/// The 32-bit Mersenne Twister, as numpy's `MT19937` and legacy `RandomState`.
#[derive(Clone, Debug)]
pub struct Mt19937 {
    key: [u32; STATE_WORDS],
    pos: usize,
}

impl Mt19937 {
    /// The generator of `RandomState(seed)` for an integer seed in `[0, 2^32)`.
    pub fn new(seed: u32) -> Mt19937 {
        let mut key = [0u32; STATE_WORDS];
        key[0] = seed;
        for i in 1..STATE_WORDS {
            let prev = key[i - 1];
            key[i] = 1_812_433_253u32
                .wrapping_mul(prev ^ (prev >> 30))
                .wrapping_add(i as u32);
        }
        Mt19937 {
            key,
            pos: STATE_WORDS,
        }
    }

    /// The generator in the state numpy reports as `get_state()`'s key and
    /// position; `None` unless `pos <= 624`.
    pub fn from_state(key: [u32; STATE_WORDS], pos: usize) -> Option<Mt19937> {
        (pos <= STATE_WORDS).then_some(Mt19937 { key, pos })
    }

    /// The key and position, as numpy's `set_state` takes them.
    pub fn state(&self) -> (&[u32; STATE_WORDS], usize) {
        (&self.key, self.pos)
    }

    fn twist(&mut self) {
        let key = &mut self.key;
        let mix = |hi: u32, lo: u32, far: u32| {
            let y = (hi & UPPER) | (lo & LOWER);
            far ^ (y >> 1) ^ (if y & 1 == 1 { MATRIX_A } else { 0 })
        };
        for i in 0..STATE_WORDS - SHIFT {
            key[i] = mix(key[i], key[i + 1], key[i + SHIFT]);
        }
        for i in STATE_WORDS - SHIFT..STATE_WORDS - 1 {
            key[i] = mix(key[i], key[i + 1], key[i + SHIFT - STATE_WORDS]);
        }
        key[STATE_WORDS - 1] = mix(key[STATE_WORDS - 1], key[0], key[SHIFT - 1]);
        self.pos = 0;
    }

    /// The next 32-bit output.
    #[inline]
    pub fn next_u32(&mut self) -> u32 {
        if self.pos == STATE_WORDS {
            self.twist();
        }
        let mut y = self.key[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// The next 64-bit output: two 32-bit outputs, the first the high half.
    #[inline]
    pub fn next_u64(&mut self) -> u64 {
        let hi = u64::from(self.next_u32());
        (hi << 32) | u64::from(self.next_u32())
    }
}

/// numpy's legacy `RandomState`, as far as Megatron uses it: `shuffle`.
#[derive(Clone, Debug)]
pub struct RandomState {
    mt: Mt19937,
}

/// Swaps between the draw (and prefetch) of a partner and its swap.
const AHEAD: usize = 48;
/// The partners drawn and not yet swapped: a power of two above [`AHEAD`].
const RING: usize = 64;

impl RandomState {
    /// `numpy.random.RandomState(seed)`.
    pub fn new(seed: u32) -> RandomState {
        RandomState {
            mt: Mt19937::new(seed),
        }
    }

    /// A state continuing from `mt`.
    pub fn from_generator(mt: Mt19937) -> RandomState {
        RandomState { mt }
    }

    /// The generator, to hand its state back to numpy.
    pub fn generator(&self) -> &Mt19937 {
        &self.mt
    }

    /// A uniform draw from `[0, max]` by masked rejection, as numpy's
    /// `random_interval`.
    #[inline]
    pub fn interval(&mut self, max: u64) -> u64 {
        if max == 0 {
            return 0;
        }
        let mask = u64::MAX >> max.leading_zeros();
        if max <= u64::from(u32::MAX) {
            let mask = mask as u32;
            loop {
                let value = self.mt.next_u32() & mask;
                if u64::from(value) <= max {
                    return u64::from(value);
                }
            }
        }
        loop {
            let value = self.mt.next_u64() & mask;
            if value <= max {
                return value;
            }
        }
    }

    /// The partners `shuffle` draws for an array of `len` items, in its
    /// order, each handed to `each`: the generator is left where `shuffle`
    /// leaves it.
    pub fn draw_partners(&mut self, len: usize, mut each: impl FnMut(usize)) {
        for top in (1..len).rev() {
            each(self.interval(top as u64) as usize);
        }
    }

    /// `RandomState.shuffle` of a one-dimensional array: the same swaps in the
    /// same order, and the generator left where numpy leaves it. Partners
    /// are drawn 48 swaps early and their lines prefetched, so that
    /// many cache misses are in flight at once.
    pub fn shuffle<T: Copy>(&mut self, items: &mut [T]) {
        let n = items.len();
        if n < 2 {
            return;
        }
        let swaps = n - 1;
        let mut ring = [0usize; RING];
        let mut drawn = 0;
        for done in 0..swaps {
            while drawn < swaps && drawn < done + AHEAD {
                let partner = self.interval((swaps - drawn) as u64) as usize;
                prefetch(&items[partner]);
                ring[drawn % RING] = partner;
                drawn += 1;
            }
            items.swap(swaps - done, ring[done % RING]);
        }
    }
}

/// The swaps of a [`RandomState::shuffle`] whose partners were drawn
/// elsewhere ([`RandomState::draw_partners`]): `partners` continues the
/// swaps of `items` after the first `done`. Each partner's line is
/// prefetched some swaps before its swap, as `shuffle` does.
pub fn swap_with_partners<T: Copy>(items: &mut [T], done: usize, partners: &[usize]) {
    let Some(top) = items.len().checked_sub(1) else {
        return;
    };
    for (t, &partner) in partners.iter().enumerate() {
        if let Some(&later) = partners.get(t + AHEAD) {
            prefetch(&items[later]);
        }
        items.swap(top - done - t, partner);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reference_outputs_of_mt19937() {
        // std::mt19937 with the default seed 5489: its 10000th output is
        // 4123659995 (C++ [rand.predef]).
        let mut mt = Mt19937::new(5489);
        let mut last = 0;
        for _ in 0..10_000 {
            last = mt.next_u32();
        }
        assert_eq!(last, 4_123_659_995);
    }

    #[test]
    fn numpy_random_state_zero_draws() {
        // numpy.random.RandomState(0).randint(2**32, dtype=np.uint32, size=3)
        // draws raw outputs: 2357136044, 2546248239, 3071714933.
        let mut mt = Mt19937::new(0);
        assert_eq!(
            [mt.next_u32(), mt.next_u32(), mt.next_u32()],
            [2_357_136_044, 2_546_248_239, 3_071_714_933]
        );
    }

    #[test]
    fn shuffle_is_fisher_yates_with_the_same_draws() {
        for n in [0usize, 1, 2, 3, 10, 255, 256, 257, 1000, 5000] {
            let mut fast: Vec<u32> = (0..n as u32).collect();
            let mut slow = fast.clone();
            let mut a = RandomState::new(1234);
            let mut b = RandomState::new(1234);
            a.shuffle(&mut fast);
            for i in (1..n).rev() {
                let j = b.interval(i as u64) as usize;
                slow.swap(i, j);
            }
            assert_eq!(fast, slow, "n = {n}");
            assert_eq!(a.mt.next_u32(), b.mt.next_u32(), "n = {n}");
        }
    }

    #[test]
    fn partners_drawn_elsewhere_swap_as_shuffle_does() {
        for n in [0usize, 1, 2, 3, 100, 5000] {
            let mut fast: Vec<u32> = (0..n as u32).collect();
            let mut slow = fast.clone();
            let mut a = RandomState::new(42);
            let mut b = RandomState::new(42);
            a.shuffle(&mut fast);
            let mut partners = Vec::new();
            b.draw_partners(n, |p| partners.push(p));
            // In two pieces, as the pipeline hands them over.
            let half = partners.len() / 2;
            if n > 0 {
                swap_with_partners(&mut slow, 0, &partners[..half]);
                swap_with_partners(&mut slow, half, &partners[half..]);
            }
            assert_eq!(fast, slow, "n = {n}");
            assert_eq!(a.mt.next_u32(), b.mt.next_u32(), "n = {n}");
        }
    }

    #[test]
    fn intervals_stay_in_range_and_use_64_bit_words_above_2_pow_32() {
        let mut a = RandomState::new(7);
        for max in [1u64, 2, 3, 7, 8, 1000, u64::from(u32::MAX)] {
            assert!(a.interval(max) <= max);
        }
        let mut a = RandomState::new(7);
        let mut b = Mt19937::new(7);
        let big = 1u64 << 40;
        let v = a.interval(big);
        let mut expect = b.next_u64() & ((big << 1) - 1);
        while expect > big {
            expect = b.next_u64() & ((big << 1) - 1);
        }
        assert_eq!(v, expect);
    }

    #[test]
    fn state_round_trips() {
        let mut mt = Mt19937::new(99);
        mt.next_u32();
        let (key, pos) = mt.state();
        let mut copy = Mt19937::from_state(*key, pos).unwrap();
        assert_eq!(copy.next_u32(), mt.next_u32());
        assert!(Mt19937::from_state([0; STATE_WORDS], 625).is_none());
    }
}
