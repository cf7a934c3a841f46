//! A keyed pseudo-random bijection on `[0, n)`, evaluated per position in O(1)
//! time and memory (format-preserving encryption).
//!
//! Construction: an alternating unbalanced Feistel network over `[0, 2^bits)`,
//! `bits` = max(2, bit length of `n - 1`), with cycle-walking back into
//! `[0, n)`. The value is split into `hi` (`ceil(bits/2)` bits) and `lo`
//! (`floor(bits/2)` bits); each pair of rounds does
//! `hi ^= F(lo); lo ^= F(hi)` with `F(x)` = the top bits of SplitMix64's output
//! function (Stafford's "variant 13" mixer) applied to `x ^ k`, with a fresh
//! 64-bit key `k` per round. The mixer's constants are fixed, so no key can be
//! weak (a keyed multiplier, as in plain multiply-shift hashing, is nearly
//! affine when it is close to a fraction with a small denominator, and such
//! keys give visibly related ids at power-of-two distances). Every round is
//! invertible on its own, so the network is a bijection of `[0, 2^bits)`, and
//! cycle-walking (re-encrypting until the value is below `n`) restricts it to a
//! bijection of `[0, n)` for every `n`, including `2^k` and `2^k + 1`.
//! Domains of at most 64 elements are too small for a Feistel network to reach
//! the orders evenly (over keys, some of the 120 orders of 5 elements would be
//! far likelier than others), so there the bijection is a table: Fisher-Yates
//! with xoshiro256++ seeded by the same key, exactly uniform over keys.
//! Using the next power of two (not the next even power) keeps the expected
//! walk below two encryptions. Six rounds: a Feistel network needs four with
//! ideal round functions; two more give margin.
//!
//! The batch evaluation ([`Cipher::apply_in_place`]) has three paths with the
//! same output, chosen at run time by the CPU's instructions: AVX-512 (module
//! `avx512`), AVX2 (module `avx2`) and portable code.
//! `EPOCHPLAN_CIPHER_PATH` (`portable`, `avx2` or `avx512`) caps the choice
//! for a whole process, so that CI can run every test on each path the CPU
//! has, e.g.
//! `EPOCHPLAN_CIPHER_PATH=avx2 cargo test -p epochplan-core` and
//! `EPOCHPLAN_CIPHER_PATH=portable pytest`; see the crate-private `Path`.

use crate::keys::{SplitMix64, Xoshiro256pp};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;

/// Feistel rounds; even, so every half is updated the same number of times.
const ROUNDS: usize = 6;
/// Domains up to this size use a shuffled table instead of the network.
const TABLE_MAX: u64 = 64;
/// Positions processed per block by the batch evaluator: the block and its
/// walk stay in L2, and the short last rounds of the walk are amortised over
/// more values (2048 and 4096 measured 1-2% slower, 16384 no faster).
const BLOCK: usize = 8192;
/// Positions encrypted side by side by the compiled batch evaluator.
const LANES: usize = 4;

/// One keyed bijection of `[0, n)`.
#[derive(Debug, Clone)]
pub struct Cipher {
    n: u64,
    lo_bits: u32,
    /// Right shifts that keep the top `hi_bits` / `lo_bits` of a product.
    hi_shift: u32,
    lo_shift: u32,
    keys: [u64; ROUNDS],
    /// The keys folded into the mixer's first steps, for halves narrower
    /// than 31 bits: see [`narrow_key`].
    narrow_keys: [(u64, u64); ROUNDS],
    /// For `n <= TABLE_MAX`: position -> id and id -> position.
    table: Option<Box<([u8; TABLE_MAX as usize], [u8; TABLE_MAX as usize])>>,
}

/// The round function before truncation: SplitMix64's mixer of `x ^ key`.
/// Only its top bits are used, so its last xor-shift is left out.
#[inline(always)]
fn mix(x: u64, key: u64) -> u64 {
    let z = x ^ key;
    let z = (z ^ (z >> 30)).wrapping_mul(MIX_MUL1);
    (z ^ (z >> 27)).wrapping_mul(MIX_MUL2)
}

/// The multipliers of SplitMix64's mixer.
const MIX_MUL1: u64 = 0xBF58_476D_1CE4_E5B9;
const MIX_MUL2: u64 = 0x94D0_49BB_1331_11EB;

/// [`mix`] for `x < 2^30`, with its key folded into `(low, high)` by
/// [`narrow_key`]: the same value in 17 vector operations instead of 21.
#[inline(always)]
fn mix_narrow(x: u64, (low, high): (u64, u64)) -> u64 {
    let z = high.wrapping_add(((x ^ low) & 0xFFFF_FFFF).wrapping_mul(MIX_MUL1));
    (z ^ (z >> 27)).wrapping_mul(MIX_MUL2)
}

/// `key` folded into the first steps of [`mix`] for inputs `x < 2^30`: for such `x`,
/// `(x ^ k) >> 30 == k >> 30`, so the first xor-shift only touches the key;
/// and `x ^ k1` is `(k1 & !0xFFFF_FFFF) + ((k1 ^ x) & 0xFFFF_FFFF)`, whose
/// product is a per-key constant plus a 32-by-64-bit product, which takes two
/// 32-bit vector multiplies instead of three.
fn narrow_key(key: u64) -> (u64, u64) {
    let k1 = key ^ (key >> 30);
    (k1 & 0xFFFF_FFFF, (k1 & !0xFFFF_FFFF).wrapping_mul(MIX_MUL1))
}

impl Cipher {
    /// The bijection of `[0, n)` selected by a 128-bit `key`.
    pub fn new(n: u64, key: [u64; 2]) -> Self {
        let bits = (64 - n.saturating_sub(1).leading_zeros()).max(2);
        let hi_bits = bits.div_ceil(2);
        let lo_bits = bits - hi_bits;
        let mut stream = SplitMix64::new(key[0] ^ key[1].rotate_left(29));
        let keys = std::array::from_fn(|_| stream.next_u64());
        let table = (n <= TABLE_MAX).then(|| {
            let mut forward: [u8; TABLE_MAX as usize] = std::array::from_fn(|i| i as u8);
            let mut rng = Xoshiro256pp::from_key(key);
            for i in (1..n as usize).rev() {
                forward.swap(i, rng.below(i as u64 + 1) as usize);
            }
            let mut inverse = [0u8; TABLE_MAX as usize];
            for (p, &id) in forward.iter().enumerate().take(n as usize) {
                inverse[id as usize] = p as u8;
            }
            Box::new((forward, inverse))
        });
        Self {
            n,
            lo_bits,
            hi_shift: 64 - hi_bits,
            lo_shift: 64 - lo_bits,
            keys,
            narrow_keys: keys.map(narrow_key),
            table,
        }
    }

    /// The size of the domain.
    pub fn len(&self) -> u64 {
        self.n
    }

    /// True when the domain is empty.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    #[inline(always)]
    fn encrypt_once(&self, x: u64) -> u64 {
        self.encrypt_lanes([x], |x, r| mix(x, self.keys[r]))[0]
    }

    /// True when both halves are narrow enough for [`mix_narrow`].
    fn is_narrow(&self) -> bool {
        64 - self.hi_shift <= 30
    }

    /// One pass of the network over `L` independent values side by side, with
    /// `round(x, r)` the untruncated round function: the lanes share every
    /// instruction, so the compiler can keep them in vector registers, and
    /// their multiplies overlap instead of waiting on each other.
    #[inline(always)]
    fn encrypt_lanes<const L: usize>(
        &self,
        x: [u64; L],
        round: impl Fn(u64, usize) -> u64,
    ) -> [u64; L] {
        let mut hi: [u64; L] = std::array::from_fn(|i| x[i] >> self.lo_bits);
        let mut lo: [u64; L] = std::array::from_fn(|i| x[i] & ((1 << self.lo_bits) - 1));
        let mut r = 0;
        while r < ROUNDS {
            for i in 0..L {
                hi[i] ^= round(lo[i], r) >> self.hi_shift;
            }
            for i in 0..L {
                lo[i] ^= round(hi[i], r + 1) >> self.lo_shift;
            }
            r += 2;
        }
        std::array::from_fn(|i| (hi[i] << self.lo_bits) | lo[i])
    }

    #[inline(always)]
    fn decrypt_once(&self, x: u64) -> u64 {
        self.decrypt_lanes([x], |x, r| mix(x, self.keys[r]))[0]
    }

    /// The inverse of [`Cipher::encrypt_lanes`]: the rounds in reverse order.
    #[inline(always)]
    fn decrypt_lanes<const L: usize>(
        &self,
        x: [u64; L],
        round: impl Fn(u64, usize) -> u64,
    ) -> [u64; L] {
        let mut hi: [u64; L] = std::array::from_fn(|i| x[i] >> self.lo_bits);
        let mut lo: [u64; L] = std::array::from_fn(|i| x[i] & ((1 << self.lo_bits) - 1));
        let mut r = ROUNDS;
        while r > 0 {
            r -= 2;
            for i in 0..L {
                lo[i] ^= round(hi[i], r + 1) >> self.lo_shift;
            }
            for i in 0..L {
                hi[i] ^= round(lo[i], r) >> self.hi_shift;
            }
        }
        std::array::from_fn(|i| (hi[i] << self.lo_bits) | lo[i])
    }

    /// The id at `position`; `position < n` is the caller's contract.
    #[inline]
    pub fn apply(&self, position: u64) -> u64 {
        debug_assert!(position < self.n);
        if let Some(t) = &self.table {
            return u64::from(t.0[position as usize]);
        }
        let mut y = self.encrypt_once(position);
        while y >= self.n {
            y = self.encrypt_once(y);
        }
        y
    }

    /// The position of `id` (the inverse bijection); `id < n`.
    #[inline]
    pub fn invert(&self, id: u64) -> u64 {
        debug_assert!(id < self.n);
        if let Some(t) = &self.table {
            return u64::from(t.1[id as usize]);
        }
        let mut x = self.decrypt_once(id);
        while x >= self.n {
            x = self.decrypt_once(x);
        }
        x
    }

    /// Replaces every position in `values` (each in `[0, n)`) by its id.
    ///
    /// One vectorised pass encrypts a block of positions, then only the
    /// values that left `[0, n)` are walked again, as a dense list.
    pub fn apply_in_place(&self, values: &mut [i64]) {
        self.in_place::<false>(values);
    }

    /// Replaces every id in `values` (each in `[0, n)`) by its position: the
    /// inverse of [`Cipher::apply_in_place`], by the same blocks and walk
    /// with the rounds reversed (cycle-walking backwards from an id reaches
    /// its position).
    pub fn invert_in_place(&self, values: &mut [i64]) {
        self.in_place::<true>(values);
    }

    /// [`Cipher::apply_in_place`], or its inverse with `INVERSE`.
    fn in_place<const INVERSE: bool>(&self, values: &mut [i64]) {
        if let Some(t) = &self.table {
            let table = if INVERSE { &t.1 } else { &t.0 };
            values
                .iter_mut()
                .for_each(|v| *v = i64::from(table[*v as usize]));
            return;
        }
        self.blocks_on::<INVERSE>(Path::active(), values);
    }

    /// Runs [`Cipher::apply_blocks`] (the network, or its inverse with
    /// `INVERSE`) on `path`, which the CPU must support (checked: an
    /// unsupported path runs the portable one).
    #[allow(unsafe_code)]
    pub(crate) fn blocks_on<const INVERSE: bool>(&self, path: Path, values: &mut [i64]) {
        #[cfg(target_arch = "x86_64")]
        match path {
            Path::Avx512 if Path::Avx512.is_supported() => {
                // SAFETY: `with_avx512` only requires the AVX-512 F, DQ and VL
                // instructions (which imply AVX2), and the CPU running this has
                // been detected to support them.
                return unsafe { self.with_avx512::<INVERSE>(values) };
            }
            Path::Avx2 if Path::Avx2.is_supported() => {
                // SAFETY: `with_avx2` only requires the AVX2 instructions, and
                // the CPU running this has been detected to support them.
                return unsafe { self.with_avx2::<INVERSE>(values) };
            }
            _ => {}
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = path;
        self.blocks_portable::<INVERSE>(values);
    }

    /// [`Cipher::apply_blocks`] compiled for AVX2: with the hand-written
    /// network and walk of [`avx2`] for narrow halves going forwards, else
    /// with the compiled lanes (AVX2 has no 64-bit lane multiply, but its
    /// 32-bit one on four lanes still beats the scalar multiplier).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2")]
    fn with_avx2<const INVERSE: bool>(&self, values: &mut [i64]) {
        if self.is_narrow() && !INVERSE {
            let encrypt = |v: &mut [i64]| {
                let whole = v.len() - v.len() % avx2::WIDTH;
                let (head, tail) = v.split_at_mut(whole);
                avx2::encrypt_narrow(self, head);
                self.network_all::<false>(tail);
            };
            let n = self.n as i64;
            self.apply_blocks::<false>(
                values,
                encrypt,
                |walk, block| avx2::gather_outside(walk, block, n),
                |walk| avx2::keep_outside(walk, n),
            );
        } else {
            self.blocks_portable::<INVERSE>(values);
        }
    }

    /// [`Cipher::apply_blocks`] with the network (or its inverse) and walk
    /// of [`avx512`], for halves of any width.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512dq,avx512vl")]
    fn with_avx512<const INVERSE: bool>(&self, values: &mut [i64]) {
        let n = self.n as i64;
        let gather = |walk: &mut Walk, block: &[i64]| avx512::gather_outside(walk, block, n);
        let keep = |walk: &mut Walk| avx512::keep_outside(walk, n);
        if self.is_narrow() {
            let network = |v: &mut [i64]| avx512::encrypt::<true, INVERSE>(self, v);
            self.apply_blocks::<INVERSE>(values, network, gather, keep);
        } else {
            let network = |v: &mut [i64]| avx512::encrypt::<false, INVERSE>(self, v);
            self.apply_blocks::<INVERSE>(values, network, gather, keep);
        }
    }

    /// [`Cipher::apply_blocks`] with the compiled lanes and scalar walk.
    #[inline(always)]
    fn blocks_portable<const INVERSE: bool>(&self, values: &mut [i64]) {
        self.apply_blocks::<INVERSE>(
            values,
            |v| self.network_all::<INVERSE>(v),
            |walk, block| walk.gather_outside(block, self.n as i64),
            |walk| walk.keep_outside(self.n as i64),
        );
    }

    /// The batch evaluation of the network (not the table), inlined into each
    /// instruction-set variant of [`Cipher::blocks_on`], from its parts:
    /// `network` runs the network (or its inverse) once over every value of
    /// a slice, `gather` starts a [`Walk`] from the values of a block outside
    /// `[0, n)`, and `keep` keeps only the walked values still outside.
    #[inline(always)]
    fn apply_blocks<const INVERSE: bool>(
        &self,
        values: &mut [i64],
        network: impl Fn(&mut [i64]),
        gather: impl Fn(&mut Walk, &[i64]),
        keep: impl Fn(&mut Walk),
    ) {
        let Some(mut walk) = Walk::try_new(values.len().min(BLOCK)) else {
            // No memory for the walk's list: one value at a time needs none,
            // so a process near its memory limit is slower, not aborted.
            for v in values.iter_mut() {
                let x = *v as u64;
                *v = if INVERSE {
                    self.invert(x)
                } else {
                    self.apply(x)
                } as i64;
            }
            return;
        };
        for block in values.chunks_mut(BLOCK) {
            network(block);
            gather(&mut walk, block);
            while walk.count > 0 {
                // Lanes past `count` hold stale values; encrypting them is harmless.
                let padded = walk.count.next_multiple_of(LANES);
                network(&mut walk.values[..padded]);
                for (&v, &i) in walk.values[..walk.count].iter().zip(&walk.index) {
                    block[i as usize] = v;
                }
                keep(&mut walk);
            }
        }
    }

    /// Runs the network (or its inverse) once over every value, `LANES` at
    /// a time.
    #[inline(always)]
    fn network_all<const INVERSE: bool>(&self, values: &mut [i64]) {
        if self.is_narrow() {
            self.network_all_with::<INVERSE>(values, |x, r| mix_narrow(x, self.narrow_keys[r]));
        } else {
            self.network_all_with::<INVERSE>(values, |x, r| mix(x, self.keys[r]));
        }
    }

    #[inline(always)]
    fn network_all_with<const INVERSE: bool>(
        &self,
        values: &mut [i64],
        round: impl Fn(u64, usize) -> u64 + Copy,
    ) {
        let lanes = |x: [u64; LANES]| {
            if INVERSE {
                self.decrypt_lanes(x, round)
            } else {
                self.encrypt_lanes(x, round)
            }
        };
        let mut groups = values.chunks_exact_mut(LANES);
        for group in &mut groups {
            let x = std::array::from_fn(|l| group[l] as u64);
            for (v, y) in group.iter_mut().zip(lanes(x)) {
                *v = y as i64;
            }
        }
        for v in groups.into_remainder() {
            let x = *v as u64;
            *v = if INVERSE {
                self.decrypt_lanes([x], round)[0]
            } else {
                self.encrypt_lanes([x], round)[0]
            } as i64;
        }
    }
}

/// The instruction sets the batch evaluator can run on, slowest first. Each
/// gives the same output as [`Cipher::apply`] (tested on every path the CPU
/// supports); the fastest one the CPU has is chosen at run time.
///
/// `EPOCHPLAN_CIPHER_PATH` (`portable`, `avx2` or `avx512`), read once per
/// process, caps the choice, so that a test suite or a benchmark can run a
/// slower path on a faster CPU: for example
/// `EPOCHPLAN_CIPHER_PATH=avx2 cargo test -p epochplan-core` (and the same
/// for the Python tests) runs everything on the AVX2 path. The test
/// `the_requested_path_is_the_active_one` fails when the variable names a
/// path this CPU lacks or no path at all, so that a CI job cannot silently
/// test another path than the one it asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Path {
    /// The compiled lanes and the scalar walk, on any CPU.
    Portable,
    /// [`avx2`]: narrow halves only, wider ones on the compiled lanes.
    Avx2,
    /// [`avx512`], with the F, DQ and VL extensions.
    Avx512,
}

/// The variable that caps [`Path::active`].
pub(crate) const PATH_VARIABLE: &str = "EPOCHPLAN_CIPHER_PATH";

impl Path {
    /// Every path, slowest first.
    pub(crate) const ALL: [Path; 3] = [Path::Portable, Path::Avx2, Path::Avx512];

    /// The name `EPOCHPLAN_CIPHER_PATH` takes.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Path::Portable => "portable",
            Path::Avx2 => "avx2",
            Path::Avx512 => "avx512",
        }
    }

    /// True when the CPU running this has the instructions of the path (the
    /// standard library caches the detection).
    pub(crate) fn is_supported(self) -> bool {
        match self {
            Path::Portable => true,
            #[cfg(target_arch = "x86_64")]
            Path::Avx2 => std::is_x86_feature_detected!("avx2"),
            #[cfg(target_arch = "x86_64")]
            Path::Avx512 => {
                std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512dq")
                    && std::is_x86_feature_detected!("avx512vl")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The path [`PATH_VARIABLE`] names, if any.
    pub(crate) fn requested() -> Option<Path> {
        let name = std::env::var(PATH_VARIABLE).ok()?;
        Path::ALL.into_iter().find(|p| p.name() == name.trim())
    }

    /// The fastest supported path, at most the requested one; decided once
    /// per process.
    pub(crate) fn active() -> Path {
        static ACTIVE: std::sync::OnceLock<Path> = std::sync::OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let cap = Path::requested().unwrap_or(Path::Avx512);
            Path::ALL
                .into_iter()
                .filter(|p| *p <= cap && p.is_supported())
                .max()
                .unwrap_or(Path::Portable)
        })
    }
}

/// The values of one block still outside `[0, n)` during the batch walk,
/// with their indices in the block: the walk re-encrypts only these (a
/// quarter of a block at n = 10^8, under half for any n, then the same share
/// of those, ...), as a compacted list, so the unpredictable walk never costs
/// a mispredicted branch per element.
#[derive(Debug)]
struct Walk {
    values: Vec<i64>,
    /// Indices in the block, as i64 so vector code moves them like values.
    index: Vec<i64>,
    count: usize,
}

impl Walk {
    /// A walk for blocks of up to `len` values, with room to round the list
    /// up to whole groups of lanes; None when the memory is not there (a
    /// process under an address-space limit), which the caller survives.
    fn try_new(len: usize) -> Option<Self> {
        let zeros = || {
            let mut v = Vec::new();
            v.try_reserve_exact(len + LANES).ok()?;
            v.resize(len + LANES, 0);
            Some(v)
        };
        Some(Self {
            values: zeros()?,
            index: zeros()?,
            count: 0,
        })
    }

    /// Starts the walk with the values of `block` at least `n`.
    #[inline(always)]
    fn gather_outside(&mut self, block: &[i64], n: i64) {
        self.count = 0;
        for (c, chunk) in block.chunks(64).enumerate() {
            let mut outside = outside_mask(chunk, n);
            while outside != 0 {
                let i = 64 * c + outside.trailing_zeros() as usize;
                self.values[self.count] = block[i];
                self.index[self.count] = i as i64;
                self.count += 1;
                outside &= outside - 1;
            }
        }
    }

    /// Keeps, in order, only the walked values at least `n`.
    #[inline(always)]
    fn keep_outside(&mut self, n: i64) {
        let mut kept = 0;
        for start in (0..self.count).step_by(64) {
            let mut outside = outside_mask(&self.values[start..self.count], n);
            while outside != 0 {
                let j = start + outside.trailing_zeros() as usize;
                self.values[kept] = self.values[j];
                self.index[kept] = self.index[j];
                kept += 1;
                outside &= outside - 1;
            }
        }
        self.count = kept;
    }
}

/// Bit `i` set for each of the first 64 values at least `n`. Every value is in
/// `[0, 2^63)` and `n < 2^63`, so signed comparisons (the only ones AVX2 has)
/// are exact; the compiler computes these with vector comparisons. Walking
/// from the set bits stores only the values outside (in the portable build
/// this measured the same as a branch-free copy of every value).
#[inline(always)]
fn outside_mask(values: &[i64], n: i64) -> u64 {
    values
        .iter()
        .take(64)
        .enumerate()
        .fold(0, |mask, (i, &v)| mask | (u64::from(v >= n) << i))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_bijection(n: u64, key: [u64; 2]) -> bool {
        let c = Cipher::new(n, key);
        let mut seen = vec![false; n as usize];
        for p in 0..n {
            let y = c.apply(p);
            if y >= n || seen[y as usize] || c.invert(y) != p {
                return false;
            }
            seen[y as usize] = true;
        }
        true
    }

    #[test]
    fn small_domains_are_bijections() {
        for n in 0..300 {
            assert!(is_bijection(n, [n, 7]), "n = {n}");
        }
    }

    #[test]
    fn tiny_domains_hit_every_order_about_equally() {
        // All 120 orders of 5 elements over 12,000 keys: each about 100 times.
        let mut counts = std::collections::HashMap::new();
        for k in 0..12_000u64 {
            let c = Cipher::new(5, [k, 99]);
            *counts
                .entry((0..5).map(|p| c.apply(p)).collect::<Vec<_>>())
                .or_insert(0u32) += 1;
        }
        assert_eq!(counts.len(), 120);
        let chi2: f64 = counts
            .values()
            .map(|&c| (f64::from(c) - 100.0).powi(2) / 100.0)
            .sum();
        // 119 degrees of freedom: the 1e-6 upper quantile is about 215.
        assert!(chi2 < 215.0, "chi2 = {chi2}");
    }

    /// Sizes where the batch path could go wrong: tables, the smallest
    /// networks, both sides of every power of two, and the largest domain.
    fn awkward_sizes() -> Vec<u64> {
        let mut sizes: Vec<u64> = (0..=70).chain([1_000_003, i64::MAX as u64]).collect();
        for k in 7..63 {
            sizes.extend([(1 << k) - 1, 1 << k, (1 << k) + 1]);
        }
        sizes
    }

    /// The paths this CPU can run.
    fn supported_paths() -> Vec<Path> {
        Path::ALL.into_iter().filter(|p| p.is_supported()).collect()
    }

    /// `apply_in_place` (the dispatched path) and, for networks, every batch
    /// path this CPU supports, against `apply`; and the same for the
    /// inverse: `invert_in_place` of the ids gives the positions back.
    fn assert_batch_equals_scalar(c: &Cipher, positions: Vec<i64>, case: &str) {
        let expect: Vec<i64> = positions
            .iter()
            .map(|&p| c.apply(p as u64) as i64)
            .collect();
        let mut dispatched = positions.clone();
        c.apply_in_place(&mut dispatched);
        assert_eq!(dispatched, expect, "{case}");
        let mut inverted = expect.clone();
        c.invert_in_place(&mut inverted);
        assert_eq!(inverted, positions, "{case}, inverse");
        if c.table.is_none() {
            for path in supported_paths() {
                let mut on_path = positions.clone();
                c.blocks_on::<false>(path, &mut on_path);
                assert_eq!(on_path, expect, "{case}, path {path:?}");
                c.blocks_on::<true>(path, &mut on_path);
                assert_eq!(on_path, positions, "{case}, inverse on path {path:?}");
            }
        }
    }

    #[test]
    fn the_requested_path_is_the_active_one() {
        // Without the variable: the fastest path the CPU has.
        let Ok(name) = std::env::var(PATH_VARIABLE) else {
            assert_eq!(Some(Path::active()), supported_paths().into_iter().max());
            return;
        };
        let requested = Path::requested();
        assert!(requested.is_some(), "{PATH_VARIABLE}={name} names no path");
        assert!(
            requested.is_some_and(Path::is_supported),
            "{PATH_VARIABLE}={name}: this CPU lacks it"
        );
        assert_eq!(Some(Path::active()), requested);
    }

    #[test]
    fn every_supported_path_equals_scalar_at_large_sizes() {
        // Walk-heavy sizes just above a power of two and sizes near the
        // largest, with runs of consecutive positions from a few offsets.
        let mut sizes = vec![(1 << 30) + 1, (1 << 33) + 3, 100_000_000];
        sizes.extend([(1 << 59) + 1, (1 << 60) - 1, 1 << 60, (1 << 60) + 1]);
        sizes.extend([(1 << 61) + 5, (1 << 62) + 1, i64::MAX as u64 - 1]);
        for n in sizes {
            let c = Cipher::new(n, [n, 11]);
            for start in [0, n / 3, n - (BLOCK as u64 + 77)] {
                let positions: Vec<i64> = (start..start + BLOCK as u64 + 77)
                    .map(|p| p as i64)
                    .collect();
                assert_batch_equals_scalar(&c, positions, &format!("n = {n}, from {start}"));
            }
        }
    }

    #[test]
    fn batch_equals_scalar() {
        for n in awkward_sizes() {
            for key in [[0, 0], [3, 4], [u64::MAX, 1 << 63]] {
                let c = Cipher::new(n, key);
                // Two blocks and a few: full blocks, a partial one, a partial group.
                let len = if n == 0 { 0 } else { 2 * BLOCK + LANES + 3 };
                let positions: Vec<i64> = (0..len as u64)
                    .map(|i| match i {
                        0 => n - 1,
                        _ => (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) % n,
                    })
                    .map(|p| p as i64)
                    .collect();
                assert_batch_equals_scalar(&c, positions, &format!("n = {n}, key = {key:?}"));
            }
        }
    }

    #[test]
    fn short_and_odd_lengths_equal_scalar() {
        // Walks sized to inputs shorter than a block, blocks with a partial
        // group of lanes, and both sides of the narrow/wide boundary.
        let lens = (0..=70).chain([BLOCK - 1, BLOCK + 1, 2 * BLOCK + 1]);
        let lens: Vec<usize> = lens.collect();
        for n in [
            65,
            129,
            (1 << 20) + 1,
            (1 << 40) + 1,
            1 << 60,
            (1 << 60) + 1,
        ] {
            let c = Cipher::new(n, [1, 2]);
            for &len in &lens {
                let positions: Vec<i64> = (0..len as u64)
                    .map(|i| ((i.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 1) % n) as i64)
                    .collect();
                assert_batch_equals_scalar(&c, positions, &format!("n = {n}, len = {len}"));
            }
        }
    }

    /// The vector gathers and keeps against the portable ones, for every
    /// length up to 70 and a block, with none to all of the values outside.
    #[cfg(target_arch = "x86_64")]
    #[test]
    #[allow(unsafe_code)]
    fn vector_walks_equal_portable() {
        type Part = fn(&mut Walk, &[i64], i64);
        type Keep = fn(&mut Walk, i64);
        // SAFETY (of each call below): a path's functions run only when the
        // CPU has been detected to support it.
        let avx2: (Part, Keep) = (
            |w, b, n| unsafe { avx2::gather_outside(w, b, n) },
            |w, n| unsafe { avx2::keep_outside(w, n) },
        );
        let avx512: (Part, Keep) = (
            |w, b, n| unsafe { avx512::gather_outside(w, b, n) },
            |w, n| unsafe { avx512::keep_outside(w, n) },
        );
        let paths = [(Path::Avx2, avx2), (Path::Avx512, avx512)];
        let mut tested = 0;
        for (path, (gather, keep)) in paths.into_iter().filter(|(p, _)| p.is_supported()) {
            let n = 1000;
            let mut rng = SplitMix64::new(7);
            for len in (0..=70).chain([BLOCK - 1, BLOCK]) {
                for quarters_outside in 0..=4 {
                    let values: Vec<i64> = (0..len)
                        .map(|_| match rng.next_u64() % 4 < quarters_outside {
                            true => n + (rng.next_u64() % 1000) as i64,
                            false => (rng.next_u64() % n as u64) as i64,
                        })
                        .collect();
                    let (mut vector, mut portable) =
                        (Walk::try_new(len).unwrap(), Walk::try_new(len).unwrap());
                    gather(&mut vector, &values, n);
                    portable.gather_outside(&values, n);
                    let taken =
                        |w: &Walk| (w.values[..w.count].to_vec(), w.index[..w.count].to_vec());
                    let case = format!("{path:?}, len = {len}");
                    assert_eq!(taken(&vector), taken(&portable), "gather, {case}");
                    // Keep from a walk of every value, with indices as tags.
                    for walk in [&mut vector, &mut portable] {
                        walk.values[..len].copy_from_slice(&values);
                        walk.index[..len]
                            .iter_mut()
                            .zip(0..)
                            .for_each(|(i, t)| *i = t);
                        walk.count = len;
                    }
                    keep(&mut vector, n);
                    portable.keep_outside(n);
                    assert_eq!(taken(&vector), taken(&portable), "keep, {case}");
                }
            }
            tested += 1;
        }
        assert_eq!(tested + 1, supported_paths().len());
    }

    /// Times every supported path on 10^7 consecutive positions of a narrow
    /// and a wide domain (best of five, into a warm buffer), checking that
    /// they agree: `cargo test -p epochplan-core --profile release-tests --lib
    /// -- --ignored --nocapture paths_agree_and_their_speeds`.
    #[test]
    #[ignore = "a timing run; prints ns per position"]
    fn paths_agree_and_their_speeds() {
        let len = 10_000_000;
        for n in [100_000_000, 1_000_000_000_000_000] {
            let c = Cipher::new(n, [1, 2]);
            let start = n / 2;
            let mut first: Option<Vec<i64>> = None;
            for path in supported_paths() {
                let mut values = vec![0; len];
                let mut best = f64::INFINITY;
                for _ in 0..5 {
                    values
                        .iter_mut()
                        .zip(start as i64..)
                        .for_each(|(v, p)| *v = p);
                    let t = std::time::Instant::now();
                    c.blocks_on::<false>(path, &mut values);
                    best = best.min(t.elapsed().as_secs_f64());
                }
                println!(
                    "n = {n}, {path:?}: {:.2} ns per position",
                    best * 1e9 / len as f64
                );
                match &first {
                    None => first = Some(values),
                    Some(f) => assert!(*f == values, "n = {n}, {path:?}"),
                }
            }
        }
    }

    #[test]
    fn narrow_mixer_equals_mixer() {
        let mut keys = SplitMix64::new(5);
        for _ in 0..1000 {
            let key = keys.next_u64();
            let x_max = (1u64 << 30) - 1;
            for x in [0, 1, key & x_max, (key >> 17) & x_max, x_max] {
                assert_eq!(mix_narrow(x, narrow_key(key)), mix(x, key), "{x} {key}");
            }
        }
    }

    #[test]
    fn largest_domain_round_trips() {
        let n = i64::MAX as u64;
        let c = Cipher::new(n, [1, 2]);
        for p in [0, 1, n / 2, n - 2, n - 1] {
            let y = c.apply(p);
            assert!(y < n);
            assert_eq!(c.invert(y), p);
        }
    }
}
