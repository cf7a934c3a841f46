//! The counting sort's two loops over whole arrays, written with AVX-512
//! (F and DQ): each item's sub-bucket, eight keys a vector, and the prefix
//! sums of the sub-buckets' counts, sixteen counts a vector. Their results
//! are the scalar loops' to the bit (the tests compare them on the edge
//! cases of both).
//!
//! Why these two: a coarse bucket holds about 2,048 items and 8,192
//! sub-buckets, so the scalar prefix sum is four dependent additions an
//! item, and the scalar sub-bucket a chain of compares and a conversion an
//! item; both are a few instructions a vector here. The loops that move
//! items (the scatter by sub-bucket, the insertion pass) stay scalar: their
//! stores go to scattered places.

use super::{scalar_prefix_sum, sub_bucket, FINE_BITS, SUB_BUCKETS};
use std::arch::x86_64::{
    __m256i, __m512d, __m512i, _mm256_storeu_si256, _mm512_add_epi32, _mm512_alignr_epi32,
    _mm512_castsi512_si128, _mm512_cvtepi64_epi32, _mm512_cvttpd_epu64, _mm512_loadu_epi32,
    _mm512_loadu_pd, _mm512_max_pd, _mm512_min_pd, _mm512_mul_pd, _mm512_permutex2var_pd,
    _mm512_permutexvar_epi32, _mm512_set1_epi32, _mm512_set1_epi64, _mm512_set1_pd,
    _mm512_setr_epi64, _mm512_setzero_pd, _mm512_setzero_si512, _mm512_storeu_epi32,
    _mm512_sub_epi32, _mm512_sub_epi64, _mm_cvtsi128_si32,
};

/// Items of 16 bytes, a key's lane among a pair of 64-bit lanes.
const ITEM_BYTES: usize = std::mem::size_of::<(f64, i64)>();
const KEY_LANE: i64 = (std::mem::offset_of!((f64, i64), 0) / 8) as i64;
const _: () = assert!(ITEM_BYTES == 16);

/// Whether the CPU runs this module (the answer is cached by std).
pub(super) fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
}

/// The keys of eight items (`items` holds at least eight).
#[inline]
#[target_feature(enable = "avx512f")]
fn load_keys(items: &[(f64, i64)], pick: __m512i) -> __m512d {
    let eight = &items[..8];
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 128 readable bytes (16 a pair, asserted above),
    // read as sixteen 64-bit lanes; no alignment is needed.
    let (low, high) = unsafe {
        let at = eight.as_ptr().cast::<f64>();
        (_mm512_loadu_pd(at), _mm512_loadu_pd(at.add(8)))
    };
    _mm512_permutex2var_pd(low, pick, high)
}

/// [`super::fill_sub_buckets`]: `sub_of[i]` is the sub-bucket of
/// `items[i]`'s key within coarse bucket `c`, as [`sub_bucket`] gives it.
///
/// [`sub_bucket`] truncates the scaled key and clamps it to `[0, top]`;
/// here the scaled key is clamped first, in floating point, and truncated
/// after: the same for every key, since `top` is a whole number and exact
/// as a float (below 2^53), and a negative key or `-0.0` clamps to `0.0`.
#[target_feature(enable = "avx512f,avx512dq")]
pub(super) fn sub_buckets(items: &[(f64, i64)], width: usize, c: usize, sub_of: &mut [u32]) {
    let n = items.len().min(sub_of.len());
    let top = width * SUB_BUCKETS - 1;
    let pick = _mm512_setr_epi64(
        KEY_LANE,
        KEY_LANE + 2,
        KEY_LANE + 4,
        KEY_LANE + 6,
        KEY_LANE + 8,
        KEY_LANE + 10,
        KEY_LANE + 12,
        KEY_LANE + 14,
    );
    let scale = _mm512_set1_pd(SUB_BUCKETS as f64);
    let zero = _mm512_setzero_pd();
    let high = _mm512_set1_pd(top as f64);
    let base = _mm512_set1_epi64(((c << FINE_BITS) * SUB_BUCKETS) as i64);
    let mut i = 0;
    while i + 8 <= n {
        let scaled = _mm512_mul_pd(load_keys(&items[i..], pick), scale);
        let clamped = _mm512_min_pd(_mm512_max_pd(scaled, zero), high);
        let steps = _mm512_sub_epi64(_mm512_cvttpd_epu64(clamped), base);
        let out = &mut sub_of[i..i + 8];
        #[allow(unsafe_code)]
        // SAFETY: `out` is 32 writable bytes; no alignment is needed.
        unsafe {
            _mm256_storeu_si256(
                out.as_mut_ptr().cast::<__m256i>(),
                _mm512_cvtepi64_epi32(steps),
            );
        }
        i += 8;
    }
    for (f, &(key, _)) in sub_of[i..n].iter_mut().zip(&items[i..n]) {
        *f = sub_bucket(width, c, key) as u32;
    }
}

/// [`super::exclusive_prefix_sum`]: each count replaced by the sum of those
/// before it (the sum fits `u32`: the counts are of one bucket's items).
#[target_feature(enable = "avx512f")]
pub(super) fn exclusive_prefix_sum(counts: &mut [u32]) {
    let zero = _mm512_setzero_si512();
    let last = _mm512_set1_epi32(15);
    // The sum of every count before the current vector, in all lanes.
    let mut carry = zero;
    let mut chunks = counts.chunks_exact_mut(16);
    for chunk in &mut chunks {
        #[allow(unsafe_code)]
        // SAFETY: `chunk` is 64 readable bytes; no alignment is needed.
        let x = unsafe { _mm512_loadu_epi32(chunk.as_ptr().cast::<i32>()) };
        // Sums within the vector, in four steps: lane `i` adds lane `i - 1`,
        // then `i - 2`, `i - 4` and `i - 8` (lanes shifted in from `zero`).
        let mut sums = _mm512_add_epi32(x, _mm512_alignr_epi32::<15>(x, zero));
        sums = _mm512_add_epi32(sums, _mm512_alignr_epi32::<14>(sums, zero));
        sums = _mm512_add_epi32(sums, _mm512_alignr_epi32::<12>(sums, zero));
        sums = _mm512_add_epi32(sums, _mm512_alignr_epi32::<8>(sums, zero));
        let inclusive = _mm512_add_epi32(sums, carry);
        #[allow(unsafe_code)]
        // SAFETY: `chunk` is 64 writable bytes; no alignment is needed.
        unsafe {
            _mm512_storeu_epi32(
                chunk.as_mut_ptr().cast::<i32>(),
                _mm512_sub_epi32(inclusive, x),
            );
        }
        carry = _mm512_permutexvar_epi32(last, inclusive);
    }
    let sum = _mm_cvtsi128_si32(_mm512_castsi512_si128(carry)) as u32;
    scalar_prefix_sum(chunks.into_remainder(), sum);
}
