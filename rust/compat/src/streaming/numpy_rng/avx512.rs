//! The candidate walk of numpy's Fisher-Yates with AVX-512: the method of
//! [`super::avx2`] on lanes twice as wide, with the instructions AVX2 lacks.
//!
//! - Generation: eight 64-bit lanes per vector, `GROUPS` vectors of
//!   consecutive LCG states, each stepped `LANES` states at once. The low
//!   product's high half is still assembled from 32-bit multiplies, but the
//!   cross terms take one 64-bit multiply each (AVX-512 DQ), the output one
//!   variable rotate, and the carry out of the low half a mask.
//! - Acceptance: as in [`super::avx2`], 32 candidates at once, with
//!   unsigned compares into masks, so bounds of 2^31 and more are judged in
//!   batches too. The mask is set once for all the batches in which `i`
//!   stays above half of it.
//! - Recording: the accepted candidates of sixteen lanes are packed by
//!   `vpcompressd`, in place of the table of lane orders AVX2 needs.
//!
//! This crate's `walk_speed` example (10^4 walks of 10^4 items, as `py1s`
//! and `py1e` walk 10,000 shards of 10,000 samples) on one Xeon core
//! (Sapphire Rapids): 0.066 s (0.071 s recording the partners) against
//! 0.098 s (0.108 s) for AVX2 and 0.139 s (0.507 s) scalar; 0.47 ns an item
//! in walks of 10^6. Measured and not kept: four vectors a pass (64
//! candidates judged at once; 0.076 s), one (0.082 s), the next batch's
//! bound counted in the vector registers off `i`'s chain (no change), and
//! the first unsure candidate settled without a branch (slower: it puts
//! the settling on every batch's chain through `i`).

use super::vector::{judge, judge_each, leave_after, settle};
use super::{Pcg64, PCG_MULT};
use std::arch::x86_64::{
    __m512i, _mm512_add_epi32, _mm512_add_epi64, _mm512_and_si512, _mm512_cmpgt_epu32_mask,
    _mm512_cmplt_epu64_mask, _mm512_mask_add_epi64, _mm512_mask_blend_epi32,
    _mm512_maskz_compress_epi32, _mm512_mul_epu32, _mm512_mullo_epi64, _mm512_rorv_epi64,
    _mm512_set1_epi32, _mm512_set1_epi64, _mm512_setr_epi32, _mm512_slli_epi64, _mm512_srli_epi64,
    _mm512_storeu_si512, _mm512_sub_epi32, _mm512_xor_si512,
};

/// Vectors of eight lanes stepped together.
const GROUPS: usize = 2;
/// Consecutive 64-bit draws per pass over the lanes.
const LANES: usize = 8 * GROUPS;
/// Candidates judged together: one pass (a bit each in a `u64`).
const BATCH: usize = 2 * LANES;
const _: () = assert!(BATCH <= 64);

/// Eight LCG states, as high and low 64-bit halves.
#[derive(Clone, Copy)]
struct States {
    hi: __m512i,
    lo: __m512i,
}

/// The affine map of `LANES` LCG steps (`state * mult + plus`).
#[derive(Clone, Copy)]
struct Jump {
    mult_lo: __m512i,
    /// The low half of the multiplier's high 32 bits, for the 32-bit
    /// multiplies of the low product.
    mult_lo_hi: __m512i,
    mult_hi: __m512i,
    plus_lo: __m512i,
    plus_hi: __m512i,
}

#[inline]
#[target_feature(enable = "avx512f")]
fn splat(v: u64) -> __m512i {
    _mm512_set1_epi64(v as i64)
}

#[target_feature(enable = "avx512f")]
fn jump(inc: u128) -> Jump {
    let (mult, plus) = super::jump(LANES as u128, inc);
    let (m_lo, m_hi) = (mult as u64, (mult >> 64) as u64);
    Jump {
        mult_lo: splat(m_lo),
        mult_lo_hi: splat(m_lo >> 32),
        mult_hi: splat(m_hi),
        plus_lo: splat(plus as u64),
        plus_hi: splat((plus >> 64) as u64),
    }
}

/// Each lane's state `LANES` steps on: `state * mult + plus` modulo 2^128.
#[inline]
#[target_feature(enable = "avx512f,avx512dq")]
fn step(s: States, j: &Jump) -> States {
    let low32 = splat(0xffff_ffff);
    // The full 128-bit product of the low halves, from four 32-bit ones (no
    // partial sum overflows 64 bits); `_mm512_mul_epu32` reads the low 32
    // bits of each lane.
    let lo_hi = _mm512_srli_epi64::<32>(s.lo);
    let p00 = _mm512_mul_epu32(s.lo, j.mult_lo);
    let p01 = _mm512_mul_epu32(lo_hi, j.mult_lo);
    let p10 = _mm512_mul_epu32(s.lo, j.mult_lo_hi);
    let p11 = _mm512_mul_epu32(lo_hi, j.mult_lo_hi);
    let t = _mm512_add_epi64(_mm512_srli_epi64::<32>(p00), p01);
    let u = _mm512_add_epi64(_mm512_and_si512(t, low32), p10);
    let lo = _mm512_mask_blend_epi32(0xaaaa, p00, _mm512_slli_epi64::<32>(u));
    let lo_product_hi = _mm512_add_epi64(
        p11,
        _mm512_add_epi64(_mm512_srli_epi64::<32>(t), _mm512_srli_epi64::<32>(u)),
    );
    // The high half also takes hi * mult_lo + lo * mult_hi modulo 2^64.
    let hi = _mm512_add_epi64(
        lo_product_hi,
        _mm512_add_epi64(
            _mm512_mullo_epi64(s.hi, j.mult_lo),
            _mm512_mullo_epi64(s.lo, j.mult_hi),
        ),
    );
    // Add the increment, carrying out of the low half.
    let new_lo = _mm512_add_epi64(lo, j.plus_lo);
    let carry = _mm512_cmplt_epu64_mask(new_lo, j.plus_lo);
    let new_hi = _mm512_add_epi64(hi, j.plus_hi);
    States {
        hi: _mm512_mask_add_epi64(new_hi, carry, new_hi, splat(1)),
        lo: new_lo,
    }
}

/// PCG64's XSL-RR output of eight states: `(hi ^ lo)` rotated right by the
/// top six bits of `hi`.
#[inline]
#[target_feature(enable = "avx512f")]
fn output(s: States) -> __m512i {
    _mm512_rorv_epi64(_mm512_xor_si512(s.hi, s.lo), _mm512_srli_epi64::<58>(s.hi))
}

/// Walks the candidates of a Fisher-Yates over `top + 1` items (`0 < top <
/// 2^32`), leaving `bits` where the shuffle would. With `partners` (at least
/// `top` long), the accepted candidate of each `i` from `top` down to 1 is
/// written at `partners[top - i]`.
#[target_feature(enable = "avx512f,avx512dq,bmi1,bmi2,lzcnt,popcnt")]
pub(super) fn walk(bits: &mut Pcg64, top: usize, mut partners: Option<&mut [u32]>) {
    debug_assert!(top > 0 && top <= u32::MAX as usize);
    debug_assert!(partners.as_ref().is_none_or(|p| p.len() >= top));
    let mut taken = 0usize;
    let mut i = top;
    if let Some(v) = bits.kept.take() {
        if judge(v, &mut i, partners.as_deref_mut(), &mut taken) {
            return;
        }
    }
    let start = bits.state;
    let j = jump(bits.inc);
    let mut state = start;
    let mut lanes: [States; GROUPS] = std::array::from_fn(|_| {
        let s: [u128; 8] = std::array::from_fn(|_| {
            state = state.wrapping_mul(PCG_MULT).wrapping_add(bits.inc);
            state
        });
        States {
            hi: load64(s.map(|x| (x >> 64) as u64)),
            lo: load64(s.map(|x| x as u64)),
        }
    });
    // Candidates drawn from `start` on, and the last batch.
    let mut drawn = 0usize;
    let mut batch = [0u32; BATCH];
    loop {
        let mask = u32::MAX >> (i as u32).leading_zeros();
        let floor = (mask >> 1) as usize;
        // While `i` stays above `floor`, candidates are judged with one mask,
        // a batch at once. With `floor >= BATCH`, no batch can end the walk
        // (`i` stays above `floor - BATCH`), and the packed stores stay
        // below `taken + BATCH <= top` since `i > BATCH`.
        if floor >= BATCH {
            let masks = _mm512_set1_epi32(mask as i32);
            while i - floor >= BATCH {
                let accepted = judge_batch(&mut lanes, &j, masks, i, BATCH, &mut batch);
                record(accepted, &batch, partners.as_deref_mut(), &mut taken);
                i -= accepted.count_ones() as usize;
                drawn += BATCH;
            }
            // The batch in which `i` may reach `floor`: its first `valid`
            // candidates at once, the rest one at a time (`judge` masks
            // again; the masks only narrow as `i` falls).
            let valid = i - floor;
            let accepted = judge_batch(&mut lanes, &j, masks, i, valid, &mut batch);
            record(accepted, &batch, partners.as_deref_mut(), &mut taken);
            i -= accepted.count_ones() as usize;
            let ended = judge_each(&batch[valid..], &mut i, partners.as_deref_mut(), &mut taken);
            debug_assert!(ended.is_none());
            drawn += BATCH;
            continue;
        }
        for (w, s) in lanes.iter_mut().enumerate() {
            store(&mut batch[16 * w..], output(*s));
            *s = step(*s, &j);
        }
        if let Some(k) = judge_each(&batch, &mut i, partners.as_deref_mut(), &mut taken) {
            leave_after(bits, start, drawn + k);
            return;
        }
        drawn += BATCH;
    }
}

/// Draws the next batch into `batch`, masked by `masks`, and judges its
/// first `valid` candidates (`0 < valid <= BATCH`) for `i` (`i > BATCH`,
/// above half the mask for all of them): bit `p` of the answer is set when
/// candidate `p` is accepted.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,bmi1,bmi2,lzcnt,popcnt")]
fn judge_batch(
    lanes: &mut [States; GROUPS],
    j: &Jump,
    masks: __m512i,
    i: usize,
    valid: usize,
    batch: &mut [u32; BATCH],
) -> u64 {
    let lane_offsets = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    let bound = _mm512_set1_epi32(i as u32 as i32);
    // Bit p: candidate p is accepted for sure / needs settling.
    let (mut accepted, mut unsure) = (0u64, 0u64);
    for (w, s) in lanes.iter_mut().enumerate() {
        let v = _mm512_and_si512(output(*s), masks);
        *s = step(*s, j);
        store(&mut batch[16 * w..], v);
        // `i - p` for the candidate at place `p`: `i > BATCH > p`.
        let sure_bound = _mm512_sub_epi32(
            bound,
            _mm512_add_epi32(lane_offsets, _mm512_set1_epi32(16 * w as i32)),
        );
        let above = _mm512_cmpgt_epu32_mask(v, bound);
        let above_sure = _mm512_cmpgt_epu32_mask(v, sure_bound);
        accepted |= u64::from(!above_sure) << (16 * w);
        unsure |= u64::from(above_sure & !above) << (16 * w);
    }
    let valid_bits = u64::MAX >> (64 - valid);
    settle(accepted & valid_bits, unsure & valid_bits, batch, i)
}

/// Writes the accepted candidates of `batch` (bit `p` for `batch[p]`) at
/// `partners[taken..]`, when recording, and counts them in `taken`.
#[inline]
#[target_feature(enable = "avx512f,popcnt")]
fn record(accepted: u64, batch: &[u32; BATCH], partners: Option<&mut [u32]>, taken: &mut usize) {
    if let Some(out) = partners {
        for w in 0..BATCH / 16 {
            let set = (accepted >> (16 * w)) as u16;
            let packed = _mm512_maskz_compress_epi32(set, load(&batch[16 * w..]));
            store(&mut out[*taken..], packed);
            *taken += set.count_ones() as usize;
        }
    } else {
        *taken += accepted.count_ones() as usize;
    }
}

/// Eight 64-bit values as one vector, the first in the lowest lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn load64(values: [u64; 8]) -> __m512i {
    let mut words = [0u32; 16];
    for (k, v) in values.iter().enumerate() {
        words[2 * k] = *v as u32;
        words[2 * k + 1] = (*v >> 32) as u32;
    }
    load(&words)
}

/// The first sixteen values of `values` (which must hold at least sixteen).
#[inline]
#[target_feature(enable = "avx512f")]
fn load(values: &[u32]) -> __m512i {
    let sixteen = &values[..16];
    #[allow(unsafe_code)]
    // SAFETY: `sixteen` is 64 readable bytes; the load needs no alignment.
    unsafe {
        std::arch::x86_64::_mm512_loadu_si512(sixteen.as_ptr().cast())
    }
}

/// Stores sixteen lanes over the first sixteen values of `values`.
#[inline]
#[target_feature(enable = "avx512f")]
fn store(values: &mut [u32], lanes: __m512i) {
    let sixteen = &mut values[..16];
    #[allow(unsafe_code)]
    // SAFETY: `sixteen` is 64 writable bytes; the store needs no alignment.
    unsafe {
        _mm512_storeu_si512(sixteen.as_mut_ptr().cast(), lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The eight 64-bit lanes of `v`.
    #[target_feature(enable = "avx512f")]
    fn lanes_of(v: __m512i) -> [u64; 8] {
        let mut words = [0u32; 16];
        store(&mut words, v);
        std::array::from_fn(|k| u64::from(words[2 * k]) | (u64::from(words[2 * k + 1]) << 32))
    }

    /// One vector step and output of eight states against u128 arithmetic.
    #[target_feature(enable = "avx512f,avx512dq")]
    fn check(states: [u128; 8], inc: u128) {
        let (mult, plus) = super::super::jump(LANES as u128, inc);
        let s = States {
            hi: load64(states.map(|x| (x >> 64) as u64)),
            lo: load64(states.map(|x| x as u64)),
        };
        let outputs = lanes_of(output(s));
        let next = step(s, &jump(inc));
        let (hi, lo) = (lanes_of(next.hi), lanes_of(next.lo));
        for k in 0..8 {
            assert_eq!(outputs[k], super::super::xsl_rr(states[k]), "{states:x?}");
            let want = mult.wrapping_mul(states[k]).wrapping_add(plus);
            let got = (u128::from(hi[k]) << 64) | u128::from(lo[k]);
            assert_eq!(got, want, "state {:#x} inc {inc:#x}", states[k]);
        }
    }

    #[test]
    fn lanes_step_like_the_lcg() {
        if !super::super::vector::avx512_walk_available() {
            eprintln!("no AVX-512: its walk is not tested on this CPU");
            return;
        }
        // States whose halves carry, overflow or are all ones or zeros, and
        // pseudo-random ones.
        let edges = [
            0u128,
            1,
            u128::MAX,
            u128::from(u64::MAX),
            u128::from(u64::MAX) << 64,
            1 << 63,
            1 << 127,
            0xffff_ffff,
            0xffff_ffff_0000_0000_ffff_ffff_0000_0000,
            0x8000_0000_8000_0000_8000_0000_8000_0000,
        ];
        let mut x = 0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c834u128;
        let mut random = || {
            x = x.wrapping_mul(PCG_MULT).wrapping_add(0x1405_7b7e_f767_814f);
            x ^ (x >> 61)
        };
        for a in edges {
            for b in edges {
                for inc in [1, u128::MAX, random() | 1] {
                    let states = [a, b, random(), a ^ b, b, a, u128::MAX - a, random()];
                    #[allow(unsafe_code)]
                    // SAFETY: the CPU has AVX-512 F and DQ (checked above).
                    unsafe {
                        check(states, inc)
                    };
                }
            }
        }
        for _ in 0..20_000 {
            let states = std::array::from_fn(|_| random());
            #[allow(unsafe_code)]
            // SAFETY: as above.
            unsafe {
                check(states, random() | 1)
            };
        }
    }
}
