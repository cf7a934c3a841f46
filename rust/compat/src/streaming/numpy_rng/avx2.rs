//! The candidate walk of numpy's Fisher-Yates ([`super::Generator::shuffle`]
//! on 32-bit draws) with AVX2: which candidates a shuffle accepts, at close
//! to the speed PCG64 makes them.
//!
//! Why by hand: with more than one thread, `py1s` and `py1e` are bound by the
//! one thread that takes the epoch generator past every candidate of every
//! piece of work. One scalar PCG64 chain waits on the latency of its 128-bit
//! multiply, and a scalar walk mispredicts its accept branch.
//!
//! - Generation: sixteen lanes (four groups of four) hold sixteen
//!   consecutive LCG states and each steps sixteen states at once (the
//!   jump-ahead multiplier and increment of sixteen steps), so a pass yields
//!   sixteen consecutive 64-bit draws, 32 candidates in numpy's order (low
//!   half first). AVX2 has no 64-bit lane multiply; the 128-bit product is
//!   assembled from 32-bit ones.
//! - Acceptance: the 32 candidates of a pass are judged at once while `i`
//!   stays above half its mask. `i` falls by one per accepted candidate, so
//!   the candidate at place `p` of the batch is judged against a bound
//!   between `i - p` and `i`: at or below `i - p` it is accepted whatever
//!   came before, above `i` rejected. The few in between are settled one by
//!   one, in order, from the accepted ones before them. In the batch where
//!   `i` may reach half its mask, only the candidates before that point are
//!   judged this way.
//! - The rest (the last candidates of a walk, those of a batch after `i`
//!   may have reached half its mask, bounds of 2^31 and more) is judged one
//!   candidate at a time, without branching on the outcome.
//!
//! A micro-benchmark on a Zen 2 core, 10^4 walks of 10^4 items: 0.12 s
//! (0.13 s recording the partners) against 0.18 s for the scalar walk. On a
//! Xeon (Sapphire Rapids), this crate's `walk_speed` example: 0.098 s (0.108
//! s recording) against 0.139 s; [`super::avx512`] is faster there.

use super::vector::{judge, judge_each, leave_after, settle};
use super::{Pcg64, PCG_MULT};
use std::arch::x86_64::{
    __m256i, _mm256_add_epi32, _mm256_add_epi64, _mm256_and_si256, _mm256_blend_epi32,
    _mm256_castsi256_ps, _mm256_cmpgt_epi32, _mm256_cmpgt_epi64, _mm256_loadu_si256,
    _mm256_movemask_ps, _mm256_mul_epu32, _mm256_mullo_epi32, _mm256_or_si256,
    _mm256_permutevar8x32_epi32, _mm256_set1_epi32, _mm256_set1_epi64x, _mm256_setr_epi32,
    _mm256_setr_epi64x, _mm256_setzero_si256, _mm256_shuffle_epi32, _mm256_slli_epi64,
    _mm256_sllv_epi64, _mm256_srli_epi64, _mm256_srlv_epi64, _mm256_storeu_si256, _mm256_sub_epi32,
    _mm256_sub_epi64, _mm256_xor_si256,
};

/// Groups of four lanes stepped together. Measured on 10^4 walks of 10^4
/// items: two groups 0.15 s, four 0.13 s, eight (judging 64 at once) 0.15 s.
const GROUPS: usize = 4;
/// Consecutive 64-bit draws per pass over the lanes.
const LANES: usize = 4 * GROUPS;
/// Candidates judged together: one pass (a bit each in a `u32`).
const BATCH: usize = 2 * LANES;
const _: () = assert!(BATCH == 32);

/// Four LCG states, as high and low 64-bit halves.
#[derive(Clone, Copy)]
struct States {
    hi: __m256i,
    lo: __m256i,
}

/// The affine map of `LANES` LCG steps (`state * mult + plus`), its
/// multiplier split into 32-bit halves.
#[derive(Clone, Copy)]
struct Jump {
    mult_lo_lo: __m256i,
    mult_lo_hi: __m256i,
    mult_hi_lo: __m256i,
    /// The low and high 64-bit halves of the multiplier with their 32-bit
    /// halves swapped.
    mult_lo_swapped: __m256i,
    mult_hi_swapped: __m256i,
    plus_lo: __m256i,
    plus_hi: __m256i,
}

#[inline]
#[target_feature(enable = "avx2")]
fn splat(v: u64) -> __m256i {
    _mm256_set1_epi64x(v as i64)
}

#[target_feature(enable = "avx2")]
fn jump(inc: u128) -> Jump {
    let (mult, plus) = super::jump(LANES as u128, inc);
    let (m_lo, m_hi) = (mult as u64, (mult >> 64) as u64);
    Jump {
        mult_lo_lo: splat(m_lo & 0xffff_ffff),
        mult_lo_hi: splat(m_lo >> 32),
        mult_hi_lo: splat(m_hi & 0xffff_ffff),
        mult_lo_swapped: splat(m_lo.rotate_left(32)),
        mult_hi_swapped: splat(m_hi.rotate_left(32)),
        plus_lo: splat(plus as u64),
        plus_hi: splat((plus >> 64) as u64),
    }
}

/// Each lane's state `LANES` steps on: `state * mult + plus` modulo 2^128.
#[inline]
#[target_feature(enable = "avx2")]
fn step(s: States, j: &Jump) -> States {
    let low32 = splat(0xffff_ffff);
    // The full 128-bit product of the low halves, from four 32-bit ones
    // (no partial sum overflows 64 bits).
    let lo_hi = _mm256_srli_epi64(s.lo, 32);
    let p00 = _mm256_mul_epu32(s.lo, j.mult_lo_lo);
    let p01 = _mm256_mul_epu32(lo_hi, j.mult_lo_lo);
    let p10 = _mm256_mul_epu32(s.lo, j.mult_lo_hi);
    let p11 = _mm256_mul_epu32(lo_hi, j.mult_lo_hi);
    let t = _mm256_add_epi64(_mm256_srli_epi64(p00, 32), p01);
    let u = _mm256_add_epi64(_mm256_and_si256(t, low32), p10);
    let lo = _mm256_blend_epi32(p00, _mm256_slli_epi64(u, 32), 0b1010_1010);
    let lo_product_hi = _mm256_add_epi64(
        p11,
        _mm256_add_epi64(_mm256_srli_epi64(t, 32), _mm256_srli_epi64(u, 32)),
    );
    // The high half also takes hi * mult_lo + lo * mult_hi modulo 2^64:
    // their low 32-bit products, plus the four cross terms modulo 2^32,
    // which two 32-bit multiplies give at once (against swapped halves).
    let cross = _mm256_add_epi32(
        _mm256_mullo_epi32(s.hi, j.mult_lo_swapped),
        _mm256_mullo_epi32(s.lo, j.mult_hi_swapped),
    );
    // Each lane's two 32-bit sums added in its high half.
    let cross = _mm256_add_epi32(cross, _mm256_shuffle_epi32(cross, 0b10_11_00_01));
    let cross = _mm256_blend_epi32(_mm256_setzero_si256(), cross, 0b1010_1010);
    let hi = _mm256_add_epi64(
        _mm256_add_epi64(lo_product_hi, cross),
        _mm256_add_epi64(
            _mm256_mul_epu32(s.hi, j.mult_lo_lo),
            _mm256_mul_epu32(s.lo, j.mult_hi_lo),
        ),
    );
    // Add the increment, carrying out of the low half (an unsigned
    // compare, by flipping the sign bits).
    let new_lo = _mm256_add_epi64(lo, j.plus_lo);
    let sign = splat(1 << 63);
    let wrapped = _mm256_cmpgt_epi64(
        _mm256_xor_si256(j.plus_lo, sign),
        _mm256_xor_si256(new_lo, sign),
    );
    let new_hi = _mm256_sub_epi64(_mm256_add_epi64(hi, j.plus_hi), wrapped);
    States {
        hi: new_hi,
        lo: new_lo,
    }
}

/// PCG64's XSL-RR output of four states: `(hi ^ lo)` rotated right by the
/// top six bits of `hi`.
#[inline]
#[target_feature(enable = "avx2")]
fn output(s: States) -> __m256i {
    let x = _mm256_xor_si256(s.hi, s.lo);
    let rot = _mm256_srli_epi64(s.hi, 58);
    let back = _mm256_sub_epi64(splat(64), rot);
    // A shift by 64 gives zero, so a rotation by 0 is `x`.
    _mm256_or_si256(_mm256_srlv_epi64(x, rot), _mm256_sllv_epi64(x, back))
}

/// For each 8-bit set of accepted lanes, the lane order that packs them first.
static PACK: [[u32; 8]; 256] = {
    let mut table = [[0u32; 8]; 256];
    let mut set = 0;
    while set < 256 {
        let (mut lane, mut k) = (0, 0);
        while lane < 8 {
            if set >> lane & 1 == 1 {
                table[set][k] = lane as u32;
                k += 1;
            }
            lane += 1;
        }
        set += 1;
    }
    table
};

/// Walks the candidates of a Fisher-Yates over `top + 1` items (`0 < top <
/// 2^32`), leaving `bits` where the shuffle would. With `partners` (at least
/// `top` long), the accepted candidate of each `i` from `top` down to 1 is
/// written at `partners[top - i]`.
#[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
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
        let s: [u128; 4] = std::array::from_fn(|_| {
            state = state.wrapping_mul(PCG_MULT).wrapping_add(bits.inc);
            state
        });
        States {
            hi: _mm256_setr_epi64x(
                (s[0] >> 64) as i64,
                (s[1] >> 64) as i64,
                (s[2] >> 64) as i64,
                (s[3] >> 64) as i64,
            ),
            lo: _mm256_setr_epi64x(s[0] as i64, s[1] as i64, s[2] as i64, s[3] as i64),
        }
    });
    // Candidates drawn from `start` on, and the last batch (masked in the
    // batched judgement).
    let mut drawn = 0usize;
    let mut batch = [0u32; BATCH];
    let lane_offsets = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    loop {
        let mask = u32::MAX >> (i as u32).leading_zeros();
        let floor = (mask >> 1) as usize;
        // While `i` stays above `floor`, candidates are judged with one mask
        // and signed 32-bit compares: the first `valid` of the batch at
        // once, the rest (after `i` may have reached `floor`) one at a time.
        // With `floor >= BATCH`, the batch cannot end the walk (`i` stays
        // above `floor - BATCH`), and its packed stores stay below `taken +
        // BATCH <= top` since `i > BATCH`.
        if floor >= BATCH && i < 1 << 31 {
            let valid = (i - floor).min(BATCH);
            let masks = _mm256_set1_epi32(mask as i32);
            let bound = _mm256_set1_epi32(i as i32);
            // Bit p: candidate p is accepted for sure / needs settling.
            let (mut accepted, mut unsure) = (0u32, 0u32);
            for (w, s) in lanes.iter_mut().enumerate() {
                let v = _mm256_and_si256(output(*s), masks);
                *s = step(*s, &j);
                store(&mut batch[8 * w..], v);
                let sure_bound = _mm256_sub_epi32(
                    bound,
                    _mm256_add_epi32(lane_offsets, _mm256_set1_epi32(8 * w as i32)),
                );
                let above = movemask(_mm256_cmpgt_epi32(v, bound));
                let above_sure = movemask(_mm256_cmpgt_epi32(v, sure_bound));
                accepted |= (!above_sure & 0xff) << (8 * w);
                unsure |= (above_sure & !above) << (8 * w);
            }
            let valid_bits = u32::MAX >> (BATCH - valid);
            let (accepted, unsure) = (accepted & valid_bits, unsure & valid_bits);
            let accepted = settle(u64::from(accepted), u64::from(unsure), &batch, i) as u32;
            if let Some(out) = partners.as_deref_mut() {
                for w in 0..BATCH / 8 {
                    let set = (accepted >> (8 * w)) as usize & 0xff;
                    let order = load(&PACK[set]);
                    let packed = _mm256_permutevar8x32_epi32(load(&batch[8 * w..]), order);
                    store(&mut out[taken..], packed);
                    taken += set.count_ones() as usize;
                }
            } else {
                taken += accepted.count_ones() as usize;
            }
            i -= accepted.count_ones() as usize;
            // `judge` masks again: the masks only narrow as `i` falls.
            let ended = judge_each(&batch[valid..], &mut i, partners.as_deref_mut(), &mut taken);
            debug_assert!(ended.is_none());
            drawn += BATCH;
            continue;
        }
        for (w, s) in lanes.iter_mut().enumerate() {
            store(&mut batch[8 * w..], output(*s));
            *s = step(*s, &j);
        }
        if let Some(k) = judge_each(&batch, &mut i, partners.as_deref_mut(), &mut taken) {
            leave_after(bits, start, drawn + k);
            return;
        }
        drawn += BATCH;
    }
}

/// The sign bits of eight 32-bit lanes.
#[inline]
#[target_feature(enable = "avx2")]
fn movemask(lanes: __m256i) -> u32 {
    _mm256_movemask_ps(_mm256_castsi256_ps(lanes)) as u32
}

/// The first eight values of `values` (which must hold at least eight).
#[inline]
#[target_feature(enable = "avx2")]
fn load(values: &[u32]) -> __m256i {
    let eight = &values[..8];
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 32 readable bytes; the load needs no alignment.
    unsafe {
        _mm256_loadu_si256(eight.as_ptr().cast())
    }
}

/// Stores eight lanes over the first eight values of `values`.
#[inline]
#[target_feature(enable = "avx2")]
fn store(values: &mut [u32], lanes: __m256i) {
    let eight = &mut values[..8];
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 32 writable bytes; the store needs no alignment.
    unsafe {
        _mm256_storeu_si256(eight.as_mut_ptr().cast(), lanes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::arch::x86_64::_mm256_extract_epi64;

    /// The four 64-bit lanes of `v`.
    #[target_feature(enable = "avx2")]
    fn lanes_of(v: __m256i) -> [u64; 4] {
        [
            _mm256_extract_epi64::<0>(v) as u64,
            _mm256_extract_epi64::<1>(v) as u64,
            _mm256_extract_epi64::<2>(v) as u64,
            _mm256_extract_epi64::<3>(v) as u64,
        ]
    }

    /// One vector step and output of four states against u128 arithmetic.
    #[target_feature(enable = "avx2")]
    fn check(states: [u128; 4], inc: u128) {
        let (mult, plus) = super::super::jump(LANES as u128, inc);
        let s = States {
            hi: _mm256_setr_epi64x(
                (states[0] >> 64) as i64,
                (states[1] >> 64) as i64,
                (states[2] >> 64) as i64,
                (states[3] >> 64) as i64,
            ),
            lo: _mm256_setr_epi64x(
                states[0] as i64,
                states[1] as i64,
                states[2] as i64,
                states[3] as i64,
            ),
        };
        let outputs = lanes_of(output(s));
        let next = step(s, &jump(inc));
        let (hi, lo) = (lanes_of(next.hi), lanes_of(next.lo));
        for k in 0..4 {
            assert_eq!(outputs[k], super::super::xsl_rr(states[k]), "{states:x?}");
            let want = mult.wrapping_mul(states[k]).wrapping_add(plus);
            let got = (u128::from(hi[k]) << 64) | u128::from(lo[k]);
            assert_eq!(got, want, "state {:#x} inc {inc:#x}", states[k]);
        }
    }

    #[test]
    fn lanes_step_like_the_lcg() {
        if !std::is_x86_feature_detected!("avx2") {
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
                    #[allow(unsafe_code)]
                    // SAFETY: the CPU has AVX2 (checked above).
                    unsafe {
                        check([a, b, random(), a ^ b], inc)
                    };
                }
            }
        }
        for _ in 0..20_000 {
            let states = [random(), random(), random(), random()];
            #[allow(unsafe_code)]
            // SAFETY: as above.
            unsafe {
                check(states, random() | 1)
            };
        }
    }
}
