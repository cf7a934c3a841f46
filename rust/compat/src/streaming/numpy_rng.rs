//! numpy's `Generator(PCG64(SeedSequence(seed)))`, bit for bit.
//!
//! This is what `numpy.random.default_rng(seed)` builds, and what MosaicML
//! Streaming draws its shuffles from. Each piece reproduces numpy (1.17 and
//! later, checked against numpy 2.4) exactly:
//!
//! - [`SeedSequence`]: the seed, an arbitrary non-negative integer, is split
//!   into little-endian 32-bit words and hashed into a pool of four words;
//!   `generate_state` expands the pool into as many words as asked for.
//! - [`Pcg64`]: the 128-bit LCG (multiplier
//!   `0x2360ed051fc65da44385df649fccf645`) with the XSL-RR output, seeded from
//!   four 64-bit words of the seed sequence. Every draw advances the state
//!   first and outputs the new state. A 32-bit draw uses the low half of a
//!   64-bit draw and keeps the high half for the next 32-bit draw; 64-bit
//!   draws neither use nor clear that kept half.
//! - [`Generator`]: `random` (53 bits), `integers` (Lemire's multiply-shift
//!   rejection: on 32-bit draws when `high - low - 1 < 2^32`, else on 64-bit
//!   draws; a full 32- or 64-bit range takes raw draws), `shuffle` (Fisher-Yates
//!   from the back; the swap partner of position `i` is drawn by masked
//!   rejection in `[0, i]`, on 32-bit draws when `i < 2^32`), `permutation`,
//!   and `uniform` (`low + (high - low) * random()`).

use epochplan_core::error::{Error, Result};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod vector;
#[cfg(target_arch = "x86_64")]
use vector::{avx512_walk_available, vector_walk_available, VECTOR_WALK_MIN};

const MULT_A: u32 = 0x931e_8875;
const MULT_B: u32 = 0x58f3_8ded;
const INIT_A: u32 = 0x43b0_d7e5;
const INIT_B: u32 = 0x8b51_f9dd;
const MIX_MULT_L: u32 = 0xca01_f9dd;
const MIX_MULT_R: u32 = 0x4973_f715;
const XSHIFT: u32 = 16;
const POOL_SIZE: usize = 4;

/// numpy's `SeedSequence` without spawn keys: the entropy pool of a seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeedSequence {
    pool: [u32; POOL_SIZE],
}

/// The running hash multiplier of the seed-sequence mixing.
struct HashMix(u32);

impl HashMix {
    fn mix(&mut self, value: u32) -> u32 {
        let mut v = value ^ self.0;
        self.0 = self.0.wrapping_mul(MULT_A);
        v = v.wrapping_mul(self.0);
        v ^ (v >> XSHIFT)
    }
}

fn combine(x: u32, y: u32) -> u32 {
    let r = MIX_MULT_L
        .wrapping_mul(x)
        .wrapping_sub(MIX_MULT_R.wrapping_mul(y));
    r ^ (r >> XSHIFT)
}

impl SeedSequence {
    /// The pool for entropy given as 32-bit words, least significant first
    /// (an integer seed is its little-endian 32-bit words; zero is `[0]`).
    pub fn from_words(entropy: &[u32]) -> Self {
        let mut pool = [0u32; POOL_SIZE];
        let mut h = HashMix(INIT_A);
        for (i, slot) in pool.iter_mut().enumerate() {
            *slot = h.mix(entropy.get(i).copied().unwrap_or(0));
        }
        for src in 0..POOL_SIZE {
            for dst in 0..POOL_SIZE {
                if src != dst {
                    let hashed = h.mix(pool[src]);
                    pool[dst] = combine(pool[dst], hashed);
                }
            }
        }
        for &word in entropy.iter().skip(POOL_SIZE) {
            for slot in pool.iter_mut() {
                let hashed = h.mix(word);
                *slot = combine(*slot, hashed);
            }
        }
        Self { pool }
    }

    /// The pool for a non-negative integer seed.
    pub fn new(seed: u128) -> Self {
        let mut words = Vec::with_capacity(4);
        let mut rest = seed;
        loop {
            words.push(rest as u32);
            rest >>= 32;
            if rest == 0 {
                break;
            }
        }
        Self::from_words(&words)
    }

    /// The mixed entropy pool.
    pub fn pool(&self) -> [u32; POOL_SIZE] {
        self.pool
    }

    /// `generate_state(n, np.uint32)`.
    pub fn generate_state_u32(&self, n: usize) -> Vec<u32> {
        let mut h = INIT_B;
        (0..n)
            .map(|i| {
                let mut v = self.pool[i % POOL_SIZE] ^ h;
                h = h.wrapping_mul(MULT_B);
                v = v.wrapping_mul(h);
                v ^ (v >> XSHIFT)
            })
            .collect()
    }

    /// `generate_state(n, np.uint64)`: pairs of 32-bit words, low word first.
    pub fn generate_state_u64(&self, n: usize) -> Vec<u64> {
        self.generate_state_u32(2 * n)
            .chunks_exact(2)
            .map(|w| u64::from(w[0]) | (u64::from(w[1]) << 32))
            .collect()
    }
}

const PCG_MULT: u128 = 0x2360_ed05_1fc6_5da4_4385_df64_9fcc_f645;

/// numpy's `PCG64` bit generator (PCG XSL-RR 128/64) with its 32-bit buffer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pcg64 {
    state: u128,
    inc: u128,
    kept: Option<u32>,
}

impl Pcg64 {
    /// The generator numpy seeds from `seed_seq`.
    pub fn from_seed_sequence(seed_seq: &SeedSequence) -> Self {
        let v = seed_seq.generate_state_u64(4);
        let init_state = (u128::from(v[0]) << 64) | u128::from(v[1]);
        let init_seq = (u128::from(v[2]) << 64) | u128::from(v[3]);
        Self::from_state_and_sequence(init_state, init_seq)
    }

    /// The PCG "srandom" seeding: the stream from `init_seq`, then the state.
    pub fn from_state_and_sequence(init_state: u128, init_seq: u128) -> Self {
        let mut g = Self {
            state: 0,
            inc: (init_seq << 1) | 1,
            kept: None,
        };
        g.step();
        g.state = g.state.wrapping_add(init_state);
        g.step();
        g
    }

    /// The raw `(state, inc)` pair, as numpy reports it in `PCG64().state`.
    pub fn state(&self) -> (u128, u128) {
        (self.state, self.inc)
    }

    #[inline(always)]
    fn step(&mut self) {
        self.state = self.state.wrapping_mul(PCG_MULT).wrapping_add(self.inc);
    }

    /// One 64-bit draw.
    #[inline(always)]
    pub fn next_u64(&mut self) -> u64 {
        self.step();
        xsl_rr(self.state)
    }

    /// One 32-bit draw: the kept high half of the last split draw, else the
    /// low half of a fresh 64-bit draw (keeping its high half).
    #[inline(always)]
    pub fn next_u32(&mut self) -> u32 {
        if let Some(v) = self.kept.take() {
            return v;
        }
        let x = self.next_u64();
        self.kept = Some((x >> 32) as u32);
        x as u32
    }

    /// Skips `delta` 64-bit draws in O(log delta) (the LCG's jump-ahead). The
    /// kept 32-bit half is left alone, as the skipped draws would leave it.
    pub fn advance(&mut self, delta: u128) {
        let (mult, plus) = jump(delta, self.inc);
        self.state = mult.wrapping_mul(self.state).wrapping_add(plus);
    }

    /// Drops the kept 32-bit half (numpy does this when it resets or
    /// advances the bit generator explicitly).
    pub fn clear_kept(&mut self) {
        self.kept = None;
    }

    /// A double in `[0, 1)` from the top 53 bits of a 64-bit draw.
    #[inline(always)]
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / 9_007_199_254_740_992.0)
    }
}

/// PCG64's output of a state: XSL-RR, the halves xor-ed and rotated right by
/// the top six bits.
#[inline(always)]
fn xsl_rr(state: u128) -> u64 {
    let hi = (state >> 64) as u64;
    let lo = state as u64;
    (hi ^ lo).rotate_right((hi >> 58) as u32)
}

/// The affine map `(mult, plus)` of `delta` LCG steps with increment `inc`
/// (a state goes to `state * mult + plus`), by squaring.
fn jump(delta: u128, inc: u128) -> (u128, u128) {
    let (mut mult, mut plus) = (PCG_MULT, inc);
    let (mut acc_mult, mut acc_plus) = (1u128, 0u128);
    let mut d = delta;
    while d > 0 {
        if d & 1 == 1 {
            acc_mult = acc_mult.wrapping_mul(mult);
            acc_plus = acc_plus.wrapping_mul(mult).wrapping_add(plus);
        }
        plus = mult.wrapping_add(1).wrapping_mul(plus);
        mult = mult.wrapping_mul(mult);
        d >>= 1;
    }
    (acc_mult, acc_plus)
}

/// Makes the swaps of `shuffle` of `x` with the partners
/// [`Generator::shuffle_partners`] drew for `x.len()` items.
pub fn apply_partners<T>(x: &mut [T], partners: &[u32]) {
    debug_assert_eq!(partners.len() + 1, x.len().max(1));
    let top = x.len().saturating_sub(1);
    for (k, &j) in partners.iter().enumerate() {
        x.swap(top - k, j as usize);
    }
}

/// The most swap partners [`Generator::shuffle`] draws with a vector walk
/// before it makes the swaps (a buffer of 256 KiB a thread at most); longer
/// shuffles draw and swap together, at the scalar generator's pace. Walking
/// first takes `py1e` on one thread (pieces of 10^4 samples, 2.5 x 10^7 in
/// all) from 0.381 s to 0.364 to 0.370 s with the AVX-512 walk.
#[cfg(target_arch = "x86_64")]
const SHUFFLE_BY_PARTNERS_MAX: usize = 1 << 16;

#[cfg(target_arch = "x86_64")]
thread_local! {
    /// [`Generator::shuffle`]'s partner buffer, kept for the thread's next
    /// shuffle.
    static SHUFFLE_PARTNERS: std::cell::RefCell<Vec<u32>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

/// numpy's `Generator` on [`Pcg64`]: the methods Streaming uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Generator {
    bits: Pcg64,
}

/// The smallest all-ones mask covering `max`.
#[inline(always)]
fn mask_for(max: u64) -> u64 {
    if max == 0 {
        0
    } else {
        u64::MAX >> max.leading_zeros()
    }
}

impl Generator {
    /// `numpy.random.default_rng(seed)` for a non-negative integer seed.
    pub fn new(seed: u128) -> Self {
        Self::from_seed_sequence(&SeedSequence::new(seed))
    }

    /// `Generator(PCG64(seed_seq))`.
    pub fn from_seed_sequence(seed_seq: &SeedSequence) -> Self {
        Self {
            bits: Pcg64::from_seed_sequence(seed_seq),
        }
    }

    /// The bit generator.
    pub fn bit_generator(&mut self) -> &mut Pcg64 {
        &mut self.bits
    }

    /// `random()`: a double in `[0, 1)`.
    #[inline(always)]
    pub fn random(&mut self) -> f64 {
        self.bits.next_f64()
    }

    /// `uniform(low, high)`: `low + (high - low) * random()`.
    #[inline(always)]
    pub fn uniform(&mut self, low: f64, high: f64) -> f64 {
        low + (high - low) * self.random()
    }

    /// A uniform integer in `[0, rng]` by Lemire's method on 32-bit draws
    /// (`rng < 2^32 - 1`).
    #[inline(always)]
    fn lemire32(&mut self, rng: u32) -> u32 {
        let excl = rng + 1;
        let mut m = u64::from(self.bits.next_u32()) * u64::from(excl);
        if (m as u32) < excl {
            let threshold = (u32::MAX - rng) % excl;
            while (m as u32) < threshold {
                m = u64::from(self.bits.next_u32()) * u64::from(excl);
            }
        }
        (m >> 32) as u32
    }

    /// A uniform integer in `[0, rng]` by Lemire's method on 64-bit draws
    /// (`rng < 2^64 - 1`).
    #[inline(always)]
    fn lemire64(&mut self, rng: u64) -> u64 {
        let excl = rng + 1;
        let mut m = u128::from(self.bits.next_u64()) * u128::from(excl);
        if (m as u64) < excl {
            let threshold = (u64::MAX - rng) % excl;
            while (m as u64) < threshold {
                m = u128::from(self.bits.next_u64()) * u128::from(excl);
            }
        }
        (m >> 64) as u64
    }

    /// A uniform integer in `[0, rng]` as `integers` draws it for 64-bit dtypes.
    #[inline(always)]
    fn bounded_u64(&mut self, rng: u64) -> u64 {
        if rng == 0 {
            0
        } else if rng < u64::from(u32::MAX) {
            u64::from(self.lemire32(rng as u32))
        } else if rng == u64::from(u32::MAX) {
            u64::from(self.bits.next_u32())
        } else if rng == u64::MAX {
            self.bits.next_u64()
        } else {
            self.lemire64(rng)
        }
    }

    /// `integers(low, high)` with the default int64 dtype: one value in
    /// `[low, high)`.
    pub fn integers(&mut self, low: i64, high: i64) -> Result<i64> {
        if low >= high {
            return Err(Error::Value(format!(
                "integers needs low < high, got low={low}, high={high}"
            )));
        }
        self.integers_closed(low, high - 1)
    }

    /// `integers(low, high + 1)` (int64): one value in `[low, high]`, for a
    /// `high` of `2^63 - 1` too.
    pub fn integers_closed(&mut self, low: i64, high: i64) -> Result<i64> {
        let rng = Self::closed_width(low, high)?;
        Ok((low as u64).wrapping_add(self.bounded_u64(rng)) as i64)
    }

    /// `integers(low, high + 1, size=out.len())` (int64): values in `[low, high]`.
    pub fn integers_closed_fill(&mut self, low: i64, high: i64, out: &mut [i64]) -> Result<()> {
        let rng = Self::closed_width(low, high)?;
        for v in out.iter_mut() {
            *v = (low as u64).wrapping_add(self.bounded_u64(rng)) as i64;
        }
        Ok(())
    }

    fn closed_width(low: i64, high: i64) -> Result<u64> {
        if low > high {
            return Err(Error::Value(format!(
                "integers needs low <= high (inclusive), got low={low}, high={high}"
            )));
        }
        Ok(high.wrapping_sub(low) as u64)
    }

    /// A uniform integer in `[0, max]` by masked rejection (numpy's
    /// `random_interval`, the draw `shuffle` and `permutation` use).
    #[inline(always)]
    pub fn interval(&mut self, max: u64) -> u64 {
        let mask = mask_for(max);
        if max <= u64::from(u32::MAX) {
            let mask = mask as u32;
            loop {
                let v = self.bits.next_u32() & mask;
                if u64::from(v) <= max {
                    return u64::from(v);
                }
            }
        }
        loop {
            let v = self.bits.next_u64() & mask;
            if v <= max {
                return v;
            }
        }
    }

    /// `shuffle(x)` of a 1-d array or a list, in place.
    pub fn shuffle<T>(&mut self, x: &mut [T]) {
        if x.len() <= 1 {
            return;
        }
        if x.len() - 1 > u32::MAX as usize {
            for i in (1..x.len()).rev() {
                let j = self.interval(i as u64) as usize;
                x.swap(i, j);
            }
            return;
        }
        #[cfg(target_arch = "x86_64")]
        if (VECTOR_WALK_MIN..=SHUFFLE_BY_PARTNERS_MAX).contains(&(x.len() - 1))
            && vector_walk_available()
        {
            // The vector walk draws the partners, then the swaps follow.
            SHUFFLE_PARTNERS.with_borrow_mut(|partners| {
                partners.resize(x.len() - 1, 0);
                self.walk_32(x.len() - 1, Some(partners));
                apply_partners(x, partners);
            });
            return;
        }
        // Each 32-bit candidate, masked, is either the swap partner of `i`
        // (when it is at most `i`) or rejected. Written without branches on
        // the candidate: a rejected one swaps `i` with itself.
        self.fisher_yates_32(x.len() - 1, |i, v| {
            let accept = v <= i;
            let j = if accept { v } else { i };
            x.swap(i, j);
            accept
        });
    }

    /// Advances the generator exactly as `shuffle` of `len` items would,
    /// without the items.
    pub fn skip_shuffle(&mut self, len: usize) {
        if len <= 1 {
            return;
        }
        if len - 1 > u32::MAX as usize {
            for i in (1..len).rev() {
                self.interval(i as u64);
            }
            return;
        }
        self.walk_32(len - 1, None);
    }

    /// The swap partners of `shuffle` of `partners.len() + 1` items, in
    /// the order the shuffle draws them (`partners[k]` for `i = len - 1 -
    /// k`), leaving the generator where the shuffle would. [`apply_partners`]
    /// then makes the shuffle's swaps, so the drawing and the moving of items
    /// can be done apart. Returns false, drawing nothing, when there are
    /// 2^32 partners or more.
    pub fn shuffle_partners(&mut self, partners: &mut [u32]) -> bool {
        if partners.len() > u32::MAX as usize {
            return false;
        }
        if !partners.is_empty() {
            self.walk_32(partners.len(), Some(partners));
        }
        true
    }

    /// Takes the generator past the candidates of a Fisher-Yates over `top +
    /// 1` items (`0 < top < 2^32`), writing the accepted one for each `i`
    /// at `partners[top - i]` when given.
    fn walk_32(&mut self, top: usize, partners: Option<&mut [u32]>) {
        #[cfg(target_arch = "x86_64")]
        if top >= VECTOR_WALK_MIN {
            if avx512_walk_available() {
                #[allow(unsafe_code)]
                // SAFETY: `walk` only requires the instructions just detected.
                unsafe {
                    avx512::walk(&mut self.bits, top, partners)
                };
                return;
            }
            if vector_walk_available() {
                #[allow(unsafe_code)]
                // SAFETY: as above.
                unsafe {
                    avx2::walk(&mut self.bits, top, partners)
                };
                return;
            }
        }
        match partners {
            Some(partners) => self.fisher_yates_32(top, |i, v| {
                let accept = v <= i;
                if accept {
                    partners[top - i] = v as u32;
                }
                accept
            }),
            None => self.fisher_yates_32(top, |i, v| v <= i),
        }
    }

    /// Feeds 32-bit candidates, masked for the current `i`, to `take` for
    /// `i` from `top` down to 1; `take` says whether it accepted the
    /// candidate (then `i` moves on). The mask is fixed while `i` stays above
    /// half of it, so the inner loop carries no mask computation.
    #[inline(always)]
    fn fisher_yates_32(&mut self, top: usize, mut take: impl FnMut(usize, usize) -> bool) {
        let mut i = top;
        while i > 0 {
            let mask = (u32::MAX >> (i as u32).leading_zeros()) as usize;
            let floor = mask >> 1;
            while i > floor {
                let v = self.bits.next_u32() as usize & mask;
                i -= usize::from(take(i, v));
            }
        }
    }

    /// `permutation(n)`: a shuffled `arange(n)`.
    pub fn permutation(&mut self, n: usize) -> Vec<i64> {
        let mut out: Vec<i64> = (0..n as i64).collect();
        self.shuffle(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values were printed by numpy 2.4.

    #[test]
    fn seed_sequence_pools() {
        // np.random.SeedSequence(seed).pool
        let cases: [(u128, [u32; 4]); 4] = [
            (0, [0xfe40_eb07, 0x4f36_3a36, 0x4eb2_009d, 0xc89a_7aa7]),
            (1, [0xa137_e185, 0x0de2_fab1, 0x950e_ae78, 0x54dd_0a81]),
            (
                1 << 32,
                [0xe0f3_eff2, 0xdccd_2c4e, 0x17f1_8c20, 0x9b8c_b8db],
            ),
            (
                (1 << 100) + 7,
                [0x02e3_19a0, 0x6672_a91f, 0xff9d_6154, 0x4fb7_e522],
            ),
        ];
        for (seed, pool) in cases {
            assert_eq!(SeedSequence::new(seed).pool(), pool, "seed {seed}");
        }
    }

    #[test]
    fn pcg64_seeding() {
        // PCG64(seed).state["state"]
        let g = Pcg64::from_seed_sequence(&SeedSequence::new(12345));
        assert_eq!(
            g.state(),
            (
                0x1905_e033_5aae_9634_9199_b0d0_9775_add5,
                0xc9c7_353e_6e2b_1f28_7d76_1f2d_4027_fae7
            )
        );
        let g = Pcg64::from_seed_sequence(&SeedSequence::new(u128::from(u64::MAX)));
        assert_eq!(g.state().0, 0xddc4_1944_2aeb_de79_4d8b_0a3b_048a_cdb0);
    }

    #[test]
    fn raw_and_split_draws() {
        // default_rng(42).bit_generator.random_raw(3)
        let mut g = Generator::new(42);
        let raw: Vec<u64> = (0..3).map(|_| g.bit_generator().next_u64()).collect();
        assert_eq!(
            raw,
            [
                0xc621_fbcd_16d9_2688,
                0x705a_5661_a791_ffc1,
                0xdbcd_12c2_6eda_1624
            ]
        );
        // default_rng(42).integers(0, 2**32, size=3, dtype=np.uint32)
        let mut g = Generator::new(42);
        let halves: Vec<u32> = (0..3).map(|_| g.bit_generator().next_u32()).collect();
        assert_eq!(halves, [383_329_928, 3_324_115_917, 2_811_363_265]);
    }

    #[test]
    fn generator_methods() {
        // g = default_rng(42); g.random(), g.integers(0, 10),
        // g.integers(0, 2**40), g.permutation(10)
        let mut g = Generator::new(42);
        assert_eq!(g.random(), 0.773_956_048_555_963_3);
        assert_eq!(g.integers(0, 10), Ok(6));
        assert_eq!(g.integers(0, 1 << 40), Ok(944_038_396_526));
        assert_eq!(g.permutation(10), [6, 7, 2, 3, 0, 9, 8, 4, 5, 1]);
        // default_rng(7).uniform(-3.5, 2.25)
        assert_eq!(
            Generator::new(7).uniform(-3.5, 2.25),
            0.094_298_932_976_835_11
        );
        // default_rng(1).integers(0, 2**32): a full 32-bit range is a raw draw.
        assert_eq!(Generator::new(1).integers(0, 1 << 32), Ok(2_032_329_983));
    }

    #[test]
    fn integers_rejects_empty_ranges() {
        let mut g = Generator::new(0);
        assert!(g.integers(3, 3).is_err());
        assert!(g.integers(4, 3).is_err());
        assert_eq!(g.integers(i64::MIN, i64::MAX).map(|_| ()), Ok(()));
    }

    #[test]
    fn skips_match_draws() {
        // Lengths on both sides of the vector walk's threshold and of the
        // longest shuffle walked before swapping.
        for len in [0usize, 1, 2, 3, 17, 256, 257, 1000, 65_537, 65_538] {
            for pre in [0, 1] {
                let mut a = Generator::new(len as u128);
                for _ in 0..pre {
                    a.bit_generator().next_u32();
                }
                let mut b = a.clone();
                let mut items: Vec<u32> = (0..len as u32).collect();
                a.shuffle(&mut items);
                b.skip_shuffle(len);
                assert_eq!(a, b, "len {len} pre {pre}");
                // The slow path (one masked rejection loop per item) agrees.
                let mut c = b.clone();
                let mut slow: Vec<u32> = (0..len as u32).collect();
                let mut d = b.clone();
                for i in (1..len).rev() {
                    let j = c.interval(i as u64) as usize;
                    slow.swap(i, j);
                }
                let mut fast: Vec<u32> = (0..len as u32).collect();
                d.shuffle(&mut fast);
                assert_eq!((slow, c), (fast, d));
            }
        }
        let mut a = Generator::new(5);
        a.bit_generator().next_u32();
        let mut b = a.clone();
        for _ in 0..1001 {
            a.bit_generator().next_u64();
        }
        b.bit_generator().advance(1001);
        assert_eq!(a, b);
    }

    #[test]
    fn partners_make_the_shuffle() {
        // Lengths around the vector walk's threshold and mask boundaries,
        // from states with and without a kept 32-bit half. The vector walk
        // and `skip_shuffle` must leave the generator where the scalar
        // shuffle does, and the partners must make the same order.
        let lengths = [
            2usize, 3, 33, 255, 256, 257, 258, 289, 290, 1000, 4096, 4097, 4130, 65_537, 1_000_003,
        ];
        for (case, &len) in lengths.iter().enumerate() {
            for pre in 0..3 {
                let mut a = Generator::new(1000 + case as u128);
                for _ in 0..pre {
                    a.bit_generator().next_u32();
                }
                let (mut b, mut c) = (a.clone(), a.clone());
                let mut shuffled: Vec<u32> = (0..len as u32).collect();
                a.shuffle(&mut shuffled);
                let mut partners = vec![0u32; len - 1];
                assert!(b.shuffle_partners(&mut partners));
                let mut applied: Vec<u32> = (0..len as u32).collect();
                apply_partners(&mut applied, &partners);
                assert_eq!(applied, shuffled, "len {len} pre {pre}");
                assert_eq!(a, b, "len {len} pre {pre}");
                c.skip_shuffle(len);
                assert_eq!(a, c, "len {len} pre {pre}");
            }
        }
        // Nothing to draw for one item.
        let mut g = Generator::new(3);
        let before = g.clone();
        assert!(g.shuffle_partners(&mut []));
        assert_eq!(g, before);
    }

    #[test]
    fn vector_walk_matches_scalar_walk_on_many_states() {
        // Every start state of a long run of walks of random lengths: the
        // walks follow one another on one generator, so any slip (a
        // candidate judged wrongly, a kept half lost) shows in all later ones.
        let mut lengths = Generator::new(77);
        let mut vector = Generator::new(78);
        let mut scalar = vector.clone();
        for _ in 0..2000 {
            let len = 2 + lengths.integers(0, 5000).unwrap_or(0) as usize;
            let mut partners = vec![0u32; len - 1];
            assert!(vector.shuffle_partners(&mut partners));
            let (expected, after) = scalar_partners(&scalar, len - 1);
            scalar = after;
            assert_eq!(partners, expected, "len {len}");
            assert_eq!(vector, scalar, "len {len}");
        }
    }

    /// The scalar walk's partners for `top`, and the generator after it.
    pub(super) fn scalar_partners(g: &Generator, top: usize) -> (Vec<u32>, Generator) {
        let mut g = g.clone();
        let mut partners = Vec::with_capacity(top);
        g.fisher_yates_32(top, |i, v| {
            let accept = v <= i;
            if accept {
                partners.push(v as u32);
            }
            accept
        });
        (partners, g)
    }

    #[test]
    fn interval_masks() {
        assert_eq!(mask_for(0), 0);
        assert_eq!(mask_for(1), 1);
        assert_eq!(mask_for(5), 7);
        assert_eq!(mask_for(8), 15);
        assert_eq!(mask_for(u64::MAX), u64::MAX);
    }
}
