//! The network for narrow halves (at most 30 bits each, so `n <= 2^60`),
//! written with AVX2 intrinsics: 32 values at a time, as eight independent
//! groups of four lanes.
//!
//! Why by hand: a round is a chain of about fifteen dependent vector
//! operations, so one group of four lanes waits on latency most of the time.
//! The compiled lanes keep few groups in flight; eight interleaved groups
//! keep the vector units busy (a block micro-benchmark on a Zen 2 core:
//! 2.8 ns per encryption, against 4-6 for the compiled lanes, 3.4 with four
//! groups and 4.7 with two).
//!
//! The 64-bit products (AVX2 has no 64-bit lane multiply) are assembled from
//! 32-bit ones. Only the top bits of the second product are used, so its two
//! cross terms are needed modulo 2^32 only, which one `vpmulld` gives for
//! both at once instead of a shift and two `vpmuludq`.
//!
//! The walk's compaction is here too: AVX2 has no compress instruction, so
//! a table of lane permutations packs the values still outside `[0, n)`.

use super::{narrow_key, Cipher, Walk, LANES, MIX_MUL1, MIX_MUL2, ROUNDS};
use std::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_add_epi64, _mm256_and_si256, _mm256_castsi256_pd,
    _mm256_cmpgt_epi64, _mm256_loadu_si256, _mm256_movemask_pd, _mm256_mul_epu32,
    _mm256_mullo_epi32, _mm256_or_si256, _mm256_permutevar8x32_epi32, _mm256_set1_epi64x,
    _mm256_setr_epi64x, _mm256_shuffle_epi32, _mm256_sll_epi64, _mm256_slli_epi64,
    _mm256_srl_epi64, _mm256_srli_epi64, _mm256_storeu_si256, _mm256_xor_si256, _mm_cvtsi32_si128,
};

/// Independent groups of four lanes in flight. Measured at 2^27 positions:
/// four and seven 5-10% slower than eight, six, ten and twelve the same;
/// scalar lanes beside them (2 to 8) no faster.
const GROUPS: usize = 8;
/// Values encrypted per pass of the inner loop.
pub(super) const WIDTH: usize = 4 * GROUPS;

/// One round's key, as [`super::mix_narrow`] uses it, in every lane.
#[derive(Clone, Copy)]
struct RoundKey {
    low: __m256i,
    high: __m256i,
}

/// The multipliers of [`super::mix_narrow`], split for 32-bit lane multiplies.
#[derive(Clone, Copy)]
struct Multipliers {
    m1_low: __m256i,
    m1_high: __m256i,
    m2_low: __m256i,
    /// MIX_MUL2 with its halves swapped, so one 32-bit multiply gives both
    /// cross terms: w_low * m2_high in the low half, w_high * m2_low in the high.
    m2_swapped: __m256i,
}

/// [`super::mix_narrow`] of four lanes, shifted right by `shift`. A macro,
/// not a function, so that it is inlined before the compiler decides how to
/// schedule the groups (a function with a target feature cannot be marked
/// `#[inline(always)]`).
macro_rules! round {
    ($x:expr, $key:expr, $m:expr, $shift:expr) => {{
        let (key, m): (RoundKey, Multipliers) = ($key, $m);
        // z = high + (x ^ low) * MIX_MUL1, with (x ^ low) cut to its low 32
        // bits as in `mix_narrow`: `vpmuludq` reads only those.
        let t = _mm256_xor_si256($x, key.low);
        let product = _mm256_add_epi64(
            _mm256_mul_epu32(t, m.m1_low),
            _mm256_slli_epi64(_mm256_mul_epu32(t, m.m1_high), 32),
        );
        let z = _mm256_add_epi64(product, key.high);
        let w = _mm256_xor_si256(z, _mm256_srli_epi64(z, 27));
        // The top half of w * MIX_MUL2 is the top half of w_low * m2_low plus
        // both cross terms, modulo 2^32: 32-bit adds, after a shuffle that
        // copies the low cross term up. The low halves become garbage, which
        // the shift (at least 34 for narrow halves) drops.
        let cross = _mm256_mullo_epi32(w, m.m2_swapped);
        let cross = _mm256_add_epi32(cross, _mm256_shuffle_epi32(cross, 0b10_10_00_00));
        _mm256_srl_epi64(
            _mm256_add_epi32(_mm256_mul_epu32(w, m.m2_low), cross),
            $shift,
        )
    }};
}

/// `$body` for each group `$g` in `0..GROUPS`, written out: the compiler
/// keeps a loop over the groups rolled, which cost 5% at 10^8 positions.
macro_rules! each_group {
    ($g:ident => $body:expr) => {{
        const _: () = assert!(GROUPS == 8);
        each_group!(@ $g => $body; 0 1 2 3 4 5 6 7);
    }};
    (@ $g:ident => $body:expr; $($i:literal)*) => {
        $({
            let $g = $i;
            $body;
        })*
    };
}

/// Encrypts every value once; `values.len()` must be a multiple of [`WIDTH`]
/// and the cipher narrow (both checked by the caller).
#[target_feature(enable = "avx2")]
pub(super) fn encrypt_narrow(cipher: &Cipher, values: &mut [i64]) {
    debug_assert!(cipher.is_narrow() && values.len().is_multiple_of(WIDTH));
    let keys: [RoundKey; ROUNDS] = std::array::from_fn(|r| {
        let (low, high) = narrow_key(cipher.keys[r]);
        RoundKey {
            low: _mm256_set1_epi64x(low as i64),
            high: _mm256_set1_epi64x(high as i64),
        }
    });
    let lo_bits = _mm_cvtsi32_si128(cipher.lo_bits as i32);
    let hi_shift = _mm_cvtsi32_si128(cipher.hi_shift as i32);
    let lo_shift = _mm_cvtsi32_si128(cipher.lo_shift as i32);
    let lo_mask = _mm256_set1_epi64x((1 << cipher.lo_bits) - 1);
    let m = Multipliers {
        m1_low: _mm256_set1_epi64x((MIX_MUL1 & 0xFFFF_FFFF) as i64),
        m1_high: _mm256_set1_epi64x((MIX_MUL1 >> 32) as i64),
        m2_low: _mm256_set1_epi64x((MIX_MUL2 & 0xFFFF_FFFF) as i64),
        m2_swapped: _mm256_set1_epi64x(MIX_MUL2.rotate_left(32) as i64),
    };
    for chunk in values.chunks_exact_mut(WIDTH) {
        let x: [__m256i; GROUPS] = std::array::from_fn(|g| load(&chunk[4 * g..]));
        let mut hi = x.map(|x| _mm256_srl_epi64(x, lo_bits));
        let mut lo = x.map(|x| _mm256_and_si256(x, lo_mask));
        for pair in 0..ROUNDS / 2 {
            let r = 2 * pair;
            each_group!(g => hi[g] = _mm256_xor_si256(hi[g], round!(lo[g], keys[r], m, hi_shift)));
            each_group!(g => lo[g] = _mm256_xor_si256(lo[g], round!(hi[g], keys[r + 1], m, lo_shift)));
        }
        for g in 0..GROUPS {
            let y = _mm256_or_si256(_mm256_sll_epi64(hi[g], lo_bits), lo[g]);
            store(&mut chunk[4 * g..], y);
        }
    }
}

/// The first four values of `values` (which must hold at least four).
#[inline]
#[target_feature(enable = "avx2")]
fn load(values: &[i64]) -> __m256i {
    let four = &values[..4];
    #[allow(unsafe_code)]
    // SAFETY: `four` is 32 readable bytes; the load needs no alignment.
    unsafe {
        _mm256_loadu_si256(four.as_ptr().cast())
    }
}

/// Stores four lanes over the first four values of `values`.
#[inline]
#[target_feature(enable = "avx2")]
fn store(values: &mut [i64], lanes: __m256i) {
    let four = &mut values[..4];
    #[allow(unsafe_code)]
    // SAFETY: `four` is 32 writable bytes; the store needs no alignment.
    unsafe {
        _mm256_storeu_si256(four.as_mut_ptr().cast(), lanes)
    }
}

/// For each 4-bit mask, the `vpermd` control that moves the 64-bit lanes
/// selected by the mask to the front, in order (AVX2 has no compress).
const COMPRESS: [[i32; 8]; 16] = {
    let mut table = [[0; 8]; 16];
    let mut mask = 0;
    while mask < 16 {
        let (mut to, mut lane) = (0, 0);
        while lane < 4 {
            if mask & (1 << lane) != 0 {
                table[mask][2 * to] = 2 * lane;
                table[mask][2 * to + 1] = 2 * lane + 1;
                to += 1;
            }
            lane += 1;
        }
        mask += 1;
    }
    table
};

/// Stores the lanes of `values` and `index` whose value is at least `n` at
/// `to` in `walk_values` and `walk_index`; returns the new end. Four values
/// per step with no branch on the data: each store writes four lanes, of
/// which only the kept ones count, and the next store starts where they end.
/// `to` never passes the group being read, so this also works in place.
#[inline]
#[target_feature(enable = "avx2")]
fn compress_outside(
    (walk_values, walk_index): (&mut [i64], &mut [i64]),
    to: usize,
    (values, index): (__m256i, __m256i),
    n: i64,
) -> usize {
    let outside = _mm256_cmpgt_epi64(values, _mm256_set1_epi64x(n - 1));
    let mask = _mm256_movemask_pd(_mm256_castsi256_pd(outside)) as usize;
    let control = load_i32(&COMPRESS[mask]);
    store(
        &mut walk_values[to..],
        _mm256_permutevar8x32_epi32(values, control),
    );
    store(
        &mut walk_index[to..],
        _mm256_permutevar8x32_epi32(index, control),
    );
    to + mask.count_ones() as usize
}

#[inline]
#[target_feature(enable = "avx2")]
fn load_i32(control: &[i32; 8]) -> __m256i {
    #[allow(unsafe_code)]
    // SAFETY: 32 readable bytes; the load needs no alignment.
    unsafe {
        _mm256_loadu_si256(control.as_ptr().cast())
    }
}

/// [`Walk::gather_outside`], four values per step.
#[target_feature(enable = "avx2")]
pub(super) fn gather_outside(walk: &mut Walk, block: &[i64], n: i64) {
    let whole = block.len() - block.len() % LANES;
    let mut index = _mm256_setr_epi64x(0, 1, 2, 3);
    let mut count = 0;
    for start in (0..whole).step_by(LANES) {
        let lanes = (load(&block[start..]), index);
        count = compress_outside((&mut walk.values, &mut walk.index), count, lanes, n);
        index = _mm256_add_epi64(index, _mm256_set1_epi64x(LANES as i64));
    }
    for (i, &v) in block.iter().enumerate().skip(whole) {
        if v >= n {
            walk.values[count] = v;
            walk.index[count] = i as i64;
            count += 1;
        }
    }
    walk.count = count;
}

/// [`Walk::keep_outside`], four values per step.
#[target_feature(enable = "avx2")]
pub(super) fn keep_outside(walk: &mut Walk, n: i64) {
    let whole = walk.count - walk.count % LANES;
    let mut kept = 0;
    for start in (0..whole).step_by(LANES) {
        let lanes = (load(&walk.values[start..]), load(&walk.index[start..]));
        kept = compress_outside((&mut walk.values, &mut walk.index), kept, lanes, n);
    }
    for j in whole..walk.count {
        if walk.values[j] >= n {
            walk.values[kept] = walk.values[j];
            walk.index[kept] = walk.index[j];
            kept += 1;
        }
    }
    walk.count = kept;
}
