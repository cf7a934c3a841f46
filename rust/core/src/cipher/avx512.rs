//! The network and the walk's compaction written with AVX-512 intrinsics
//! (F, DQ and VL): eight lanes of 64 bits a vector, native 64-bit multiplies
//! and a compress instruction.
//!
//! The network: with `vpmullq` (AVX512DQ) a round is the mixer itself, with
//! no products assembled from 32-bit ones. For halves of at most 30 bits
//! (`n <= 2^60`), `x >> 30` is zero, so the mixer's first steps
//! `z = x ^ k; z ^= z >> 30` reduce to `x ^ k1` with `k1 = k ^ (k >> 30)`
//! per key (the same folding as [`super::narrow_key`], whose split of `k1`
//! into a low and a high part only serves 32-bit multiplies): a round is an
//! xor, a multiply, an xor-shift and a multiply whose low 64 bits hold the
//! top bits the round keeps. Wider halves add one shift, and the two xors
//! become one three-way xor (`vpternlogq`). As with AVX2 ([`super::avx2`]),
//! a round is a chain of dependent operations (two multiplies of 15 cycles
//! each on current Intel cores), so several independent groups of eight
//! lanes are interleaved: see [`GROUPS`].
//!
//! The walk: `vpcompressq` packs the values still outside `[0, n)` and
//! their indices to the front of a register, which is then stored whole;
//! the next store starts where the kept lanes end. This replaces AVX2's
//! table of lane permutations. The compress targets a register, not memory:
//! compressing straight to memory is microcoded on some CPUs (AMD Zen 4).
//!
//! The AVX-512 intrinsics are stable since Rust 1.89, the workspace's
//! `rust-version`.

use super::{Cipher, Walk, MIX_MUL1, MIX_MUL2, ROUNDS};
use std::arch::x86_64::{
    __m512i, _mm512_add_epi64, _mm512_and_si512, _mm512_cmpge_epi64_mask, _mm512_loadu_epi64,
    _mm512_maskz_compress_epi64, _mm512_mullo_epi64, _mm512_or_si512, _mm512_set1_epi64,
    _mm512_setr_epi64, _mm512_sll_epi64, _mm512_srl_epi64, _mm512_srli_epi64, _mm512_storeu_epi64,
    _mm512_ternarylogic_epi64, _mm512_xor_si512, _mm_cvtsi32_si128,
};

/// Lanes of 64 bits in a vector.
const LANES: usize = 8;
/// Independent groups of eight lanes in flight. Measured at 10^8 positions
/// on a Sapphire Rapids core (fastest of nine calls): 3.9 ns a position with
/// eight, 4.2 to 4.5 with four, 4.8 to 5.0 with two. Products assembled from
/// 32-bit multiplies as in [`super::avx2`] measured slower (4.1 to 4.4 with
/// the first one so, 4.3 to 4.7 with both, against 3.6 to 4.0 native), and
/// compressing to memory the same as compressing to a register.
const GROUPS: usize = 8;
/// Values encrypted per pass of the inner loop.
const WIDTH: usize = LANES * GROUPS;

/// The mixer's constants and one cipher's shifts, in every lane.
#[derive(Clone, Copy)]
struct Constants {
    m1: __m512i,
    m2: __m512i,
    /// Per round, the key folded with its own shift: `k ^ (k >> 30)`.
    keys: [__m512i; ROUNDS],
    lo_mask: __m512i,
}

/// [`super::mix`] of eight lanes, shifted right by `shift`; `NARROW` when
/// every lane is below 2^30. A macro, so that it is inlined before the
/// compiler schedules the groups (as in [`super::avx2`]).
macro_rules! round {
    ($narrow:expr, $x:expr, $key:expr, $c:expr, $shift:expr) => {{
        let (x, key, c): (__m512i, __m512i, Constants) = ($x, $key, $c);
        let t = if $narrow {
            _mm512_xor_si512(x, key)
        } else {
            // x ^ (x >> 30) ^ k1, which is (x ^ k) ^ ((x ^ k) >> 30).
            _mm512_ternarylogic_epi64::<0x96>(x, _mm512_srli_epi64::<30>(x), key)
        };
        let z = _mm512_mullo_epi64(t, c.m1);
        let w = _mm512_xor_si512(z, _mm512_srli_epi64::<27>(z));
        _mm512_srl_epi64(_mm512_mullo_epi64(w, c.m2), $shift)
    }};
}

/// `$body` for each group `$g` in `0..GROUPS`, written out (the compiler
/// keeps a loop over the groups rolled).
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

/// Encrypts every value of `values` once, any length (decrypts with
/// `INVERSE`: the rounds in reverse order); `NARROW` must be
/// [`Cipher::is_narrow`].
#[target_feature(enable = "avx512f,avx512dq,avx512vl")]
pub(super) fn encrypt<const NARROW: bool, const INVERSE: bool>(
    cipher: &Cipher,
    values: &mut [i64],
) {
    debug_assert_eq!(NARROW, cipher.is_narrow());
    let c = Constants {
        m1: _mm512_set1_epi64(MIX_MUL1 as i64),
        m2: _mm512_set1_epi64(MIX_MUL2 as i64),
        keys: cipher
            .keys
            .map(|k| _mm512_set1_epi64((k ^ (k >> 30)) as i64)),
        lo_mask: _mm512_set1_epi64((1 << cipher.lo_bits) - 1),
    };
    let lo_bits = _mm_cvtsi32_si128(cipher.lo_bits as i32);
    let hi_shift = _mm_cvtsi32_si128(cipher.hi_shift as i32);
    let lo_shift = _mm_cvtsi32_si128(cipher.lo_shift as i32);
    let mut chunks = values.chunks_exact_mut(WIDTH);
    for chunk in &mut chunks {
        let x: [__m512i; GROUPS] = std::array::from_fn(|g| load(&chunk[LANES * g..]));
        let mut hi = x.map(|x| _mm512_srl_epi64(x, lo_bits));
        let mut lo = x.map(|x| _mm512_and_si512(x, c.lo_mask));
        for pair in 0..ROUNDS / 2 {
            if INVERSE {
                let r = ROUNDS - 2 - 2 * pair;
                each_group!(g => lo[g] = _mm512_xor_si512(lo[g], round!(NARROW, hi[g], c.keys[r + 1], c, lo_shift)));
                each_group!(g => hi[g] = _mm512_xor_si512(hi[g], round!(NARROW, lo[g], c.keys[r], c, hi_shift)));
            } else {
                let r = 2 * pair;
                each_group!(g => hi[g] = _mm512_xor_si512(hi[g], round!(NARROW, lo[g], c.keys[r], c, hi_shift)));
                each_group!(g => lo[g] = _mm512_xor_si512(lo[g], round!(NARROW, hi[g], c.keys[r + 1], c, lo_shift)));
            }
        }
        for g in 0..GROUPS {
            store(
                &mut chunk[LANES * g..],
                _mm512_or_si512(_mm512_sll_epi64(hi[g], lo_bits), lo[g]),
            );
        }
    }
    // The rest, eight at a time, the last ones through a padded copy.
    for part in chunks.into_remainder().chunks_mut(LANES) {
        let mut padded = [0i64; LANES];
        padded[..part.len()].copy_from_slice(part);
        let x = load(&padded);
        let mut hi = _mm512_srl_epi64(x, lo_bits);
        let mut lo = _mm512_and_si512(x, c.lo_mask);
        for pair in 0..ROUNDS / 2 {
            if INVERSE {
                let r = ROUNDS - 2 - 2 * pair;
                lo = _mm512_xor_si512(lo, round!(NARROW, hi, c.keys[r + 1], c, lo_shift));
                hi = _mm512_xor_si512(hi, round!(NARROW, lo, c.keys[r], c, hi_shift));
            } else {
                let r = 2 * pair;
                hi = _mm512_xor_si512(hi, round!(NARROW, lo, c.keys[r], c, hi_shift));
                lo = _mm512_xor_si512(lo, round!(NARROW, hi, c.keys[r + 1], c, lo_shift));
            }
        }
        store(
            &mut padded,
            _mm512_or_si512(_mm512_sll_epi64(hi, lo_bits), lo),
        );
        part.copy_from_slice(&padded[..part.len()]);
    }
}

/// The first eight values of `values` (which must hold at least eight).
#[inline]
#[target_feature(enable = "avx512f")]
fn load(values: &[i64]) -> __m512i {
    let eight = &values[..LANES];
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 64 readable bytes; the load needs no alignment.
    unsafe {
        _mm512_loadu_epi64(eight.as_ptr())
    }
}

/// Stores eight lanes over the first eight values of `values`.
#[inline]
#[target_feature(enable = "avx512f")]
fn store(values: &mut [i64], lanes: __m512i) {
    let eight = &mut values[..LANES];
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 64 writable bytes; the store needs no alignment.
    unsafe {
        _mm512_storeu_epi64(eight.as_mut_ptr(), lanes)
    }
}

/// Stores the lanes of `values` and `index` whose value is at least `n` at
/// `to` in `walk_values` and `walk_index`; returns the new end. Each store
/// writes eight lanes, of which only the kept ones count, and the next store
/// starts where they end. `to` never passes the group being read, so this
/// also works in place.
#[inline]
#[target_feature(enable = "avx512f")]
fn compress_outside(
    (walk_values, walk_index): (&mut [i64], &mut [i64]),
    to: usize,
    (values, index): (__m512i, __m512i),
    n: __m512i,
) -> usize {
    let outside = _mm512_cmpge_epi64_mask(values, n);
    store(
        &mut walk_values[to..],
        _mm512_maskz_compress_epi64(outside, values),
    );
    store(
        &mut walk_index[to..],
        _mm512_maskz_compress_epi64(outside, index),
    );
    to + outside.count_ones() as usize
}

/// [`Walk::gather_outside`], eight values per step.
#[target_feature(enable = "avx512f")]
pub(super) fn gather_outside(walk: &mut Walk, block: &[i64], n: i64) {
    let whole = block.len() - block.len() % LANES;
    let bound = _mm512_set1_epi64(n);
    let mut index = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    let mut count = 0;
    for start in (0..whole).step_by(LANES) {
        let lanes = (load(&block[start..]), index);
        count = compress_outside((&mut walk.values, &mut walk.index), count, lanes, bound);
        index = _mm512_add_epi64(index, _mm512_set1_epi64(LANES as i64));
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

/// [`Walk::keep_outside`], eight values per step.
#[target_feature(enable = "avx512f")]
pub(super) fn keep_outside(walk: &mut Walk, n: i64) {
    let whole = walk.count - walk.count % LANES;
    let bound = _mm512_set1_epi64(n);
    let mut kept = 0;
    for start in (0..whole).step_by(LANES) {
        let lanes = (load(&walk.values[start..]), load(&walk.index[start..]));
        kept = compress_outside((&mut walk.values, &mut walk.index), kept, lanes, bound);
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
