//! [`Interleave::locate`](super::Interleave::locate) on eight positions at
//! once, with AVX-512 (F and DQ).
//!
//! Each step of the descent divides `x = i * qL + floor(Q / 2)` by the
//! node's `Q`. AVX-512 has a 64-bit lane multiply (`vpmullq`) but no high
//! half of a 64-bit product, so the scalar path's reciprocal does not carry
//! over; the quotient is estimated in float64 instead, `trunc(x * (1 / Q))`,
//! and corrected with the remainder. For an epoch of at most 2^32 positions
//! ([`MAX_LEN`]), `i < Q <= 2^32`, so `x < 2^64` is exact in a lane, and the
//! quotient, below 2^32, is estimated within 2^-19 (three roundings of
//! relative error 2^-53 each): its truncation is the quotient or one off
//! either way. The remainder `x - est * Q` (modulo 2^64) then lies in
//! `[-Q, 2 Q)`, and one signed comparison each way fixes both. The side, the
//! child and `L(i)` follow as in the scalar step, selected per lane by a
//! mask.
//!
//! The nodes of the first levels (up to eight a level, so every level for
//! up to eight sources) are held in registers and picked per lane with one
//! permutation (`vpermq`) a field; deeper levels' nodes are gathered from
//! the tree's array, and the leaves' sources likewise.

use super::{Node, Tree};
use std::arch::x86_64::{
    __m512i, _mm512_add_epi64, _mm512_castsi512_pd, _mm512_cmpge_epi64_mask,
    _mm512_cmpge_epu64_mask, _mm512_cmplt_epi64_mask, _mm512_cvtepu64_pd, _mm512_cvttpd_epu64,
    _mm512_i64gather_epi64, _mm512_loadu_epi64, _mm512_mask_add_epi64, _mm512_mask_blend_epi64,
    _mm512_mask_sub_epi64, _mm512_mul_pd, _mm512_mullo_epi64, _mm512_permutexvar_epi64,
    _mm512_set1_epi64, _mm512_setzero_si512, _mm512_slli_epi64, _mm512_srli_epi64,
    _mm512_storeu_epi64, _mm512_sub_epi64,
};

/// Lanes of 64 bits in a vector.
const LANES: usize = 8;

/// The longest epoch the vector descent takes (see the module's comment).
pub(super) const MAX_LEN: u64 = 1 << 32;

/// The words of one [`Node`] (`repr(C)`, four `u64`), the gathers' stride.
const NODE_WORDS: i64 = (std::mem::size_of::<Node>() / 8) as i64;
const _: () = assert!(std::mem::size_of::<Node>() == 32);

/// `(floor(x / q), x % q)` in each lane, for `1 <= q <= 2^32`, `x < 2^64`
/// and `floor(x / q) < 2^32`, with `inverse` the bits of `1 / q` in float64
/// (see the module's comment).
#[target_feature(enable = "avx512f,avx512dq")]
fn div_rem(x: __m512i, q: __m512i, inverse: __m512i) -> (__m512i, __m512i) {
    let one = _mm512_set1_epi64(1);
    let estimate = _mm512_mul_pd(_mm512_cvtepu64_pd(x), _mm512_castsi512_pd(inverse));
    let mut quotient = _mm512_cvttpd_epu64(estimate);
    let mut r = _mm512_sub_epi64(x, _mm512_mullo_epi64(quotient, q));
    // One too many: the remainder is in [-q, 0).
    let high = _mm512_cmplt_epi64_mask(r, _mm512_setzero_si512());
    quotient = _mm512_mask_sub_epi64(quotient, high, quotient, one);
    r = _mm512_mask_add_epi64(r, high, r, q);
    // One too few: in [q, 2 q).
    let low = _mm512_cmpge_epi64_mask(r, q);
    quotient = _mm512_mask_add_epi64(quotient, low, quotient, one);
    r = _mm512_mask_sub_epi64(r, low, r, q);
    (quotient, r)
}

/// Levels of the tree with at most eight nodes (levels 0 to 3), whose
/// nodes' fields are held in registers and picked per lane by a
/// permutation instead of gathered from memory.
const TABLE_LEVELS: u32 = 4;

/// Lanes `t` of a register: `field(t)` for `t < count`, else 0.
#[target_feature(enable = "avx512f")]
#[allow(unsafe_code)]
fn table(count: usize, field: impl Fn(usize) -> u64) -> __m512i {
    let lanes: [u64; LANES] = std::array::from_fn(|t| if t < count { field(t) } else { 0 });
    // SAFETY: eight u64 are read from an array of eight.
    unsafe { _mm512_loadu_epi64(lanes.as_ptr() as *const i64) }
}

/// Locates the first multiple of eight of `values` (epoch positions, each
/// below the tree's total, which must be at most [`MAX_LEN`]): each becomes
/// its index among its source's positions and `sources` gets its source.
/// Returns how many were done.
#[target_feature(enable = "avx512f,avx512dq")]
#[allow(unsafe_code)]
pub(super) fn locate_lanes(tree: &Tree, values: &mut [i64], sources: &mut [usize]) -> usize {
    let done = values.len().min(sources.len()) / LANES * LANES;
    let depth = tree.depth;
    // The nodes' q, qL and 1 / Q of each table level, by position in level.
    let tables: Vec<[__m512i; 3]> = (0..depth.min(TABLE_LEVELS))
        .map(|level| {
            let level_nodes = &tree.nodes[(1 << level) - 1..(2 << level) - 1];
            let count = level_nodes.len();
            [
                table(count, |t| level_nodes[t].q),
                table(count, |t| level_nodes[t].ql),
                table(count, |t| level_nodes[t].inverse),
            ]
        })
        .collect();
    let leaves = table(tree.leaves.len(), |t| tree.leaves[t] as u64);
    let nodes = tree.nodes.as_ptr() as *const i64;
    let one = _mm512_set1_epi64(1);
    let stride = _mm512_set1_epi64(NODE_WORDS);
    for start in (0..done).step_by(LANES) {
        // SAFETY (the loads, gathers and stores below): `start + LANES <=
        // values.len()` and `sources.len()`. Whatever the values, the node
        // at `position` (in `[0, 2^level)`) of a gathered level is node
        // `2^level - 1 + position` < `nodes.len() = 2^depth - 1`, and a
        // gathered leaf is below `2^depth = leaves.len()`; a Node is four u64
        // words, `q` first, `ql` second, `inverse` fourth.
        let mut i = unsafe { _mm512_loadu_epi64(values.as_ptr().add(start)) };
        // Each lane's node, by its position in its level.
        let mut position = _mm512_setzero_si512();
        for level in 0..depth {
            let (q, ql, inverse) = if let Some([q, ql, inverse]) = tables.get(level as usize) {
                (
                    _mm512_permutexvar_epi64(position, *q),
                    _mm512_permutexvar_epi64(position, *ql),
                    _mm512_permutexvar_epi64(position, *inverse),
                )
            } else {
                let node = _mm512_add_epi64(position, _mm512_set1_epi64((1 << level) - 1));
                let at = _mm512_mullo_epi64(node, stride);
                unsafe {
                    (
                        _mm512_i64gather_epi64::<8>(at, nodes),
                        _mm512_i64gather_epi64::<8>(at, nodes.add(1)),
                        _mm512_i64gather_epi64::<8>(at, nodes.add(3)),
                    )
                }
            };
            let x = _mm512_add_epi64(_mm512_mullo_epi64(i, ql), _mm512_srli_epi64::<1>(q));
            let (left, r) = div_rem(x, q, inverse);
            // Left exactly when r + qL >= Q (the scalar `Node::split`).
            let goes_left = _mm512_cmpge_epu64_mask(_mm512_add_epi64(r, ql), q);
            i = _mm512_mask_blend_epi64(goes_left, _mm512_sub_epi64(i, left), left);
            // The children of the node at position p: 2 p (left) and 2 p + 1.
            position = _mm512_slli_epi64::<1>(position);
            position = _mm512_mask_add_epi64(position, !goes_left, position, one);
        }
        let source = if depth < TABLE_LEVELS {
            _mm512_permutexvar_epi64(position, leaves)
        } else {
            unsafe { _mm512_i64gather_epi64::<8>(position, tree.leaves.as_ptr() as *const i64) }
        };
        unsafe {
            _mm512_storeu_epi64(values.as_mut_ptr().add(start), i);
            _mm512_storeu_epi64(sources.as_mut_ptr().add(start) as *mut i64, source);
        }
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cipher::Path;

    #[test]
    #[allow(unsafe_code)]
    fn lane_division_is_exact_next_to_every_multiple() {
        if !Path::Avx512.is_supported() {
            return;
        }
        // Divisors up to 2^32 and dividends next to multiples of them, with
        // quotients up to 2^32 - 1: where a float64 estimate rounds across.
        let mut cases = Vec::new();
        for q in [
            1u64,
            2,
            3,
            7,
            1 << 31,
            (1 << 32) - 5,
            (1 << 32) - 1,
            1 << 32,
        ] {
            for m in [
                0u64,
                1,
                2,
                1 << 20,
                (1 << 31) + 1,
                (1 << 32) - 2,
                (1 << 32) - 1,
            ] {
                if m.checked_mul(q).is_none() {
                    continue;
                }
                for d in [-2i64, -1, 0, 1, 2] {
                    let x = (m * q).wrapping_add_signed(d);
                    if x / q < 1 << 32 && x.checked_add(q).is_some() {
                        cases.push((x, q));
                    }
                }
            }
        }
        let mut z = 7u64;
        for _ in 0..200_000 {
            z = z
                .wrapping_mul(0x5851_F42D_4C95_7F2D)
                .wrapping_add(1442695040888963407);
            let q = (z >> 31).max(1);
            // Wrapping, as release builds compute it: any x is a case.
            let x = (z % (1 << 32)).wrapping_mul(q).wrapping_add((z >> 7) % q);
            cases.push((x, q));
        }
        for chunk in cases.chunks(LANES) {
            let mut x = [0u64; LANES];
            let mut q = [1u64; LANES];
            for (t, &(xt, qt)) in chunk.iter().enumerate() {
                (x[t], q[t]) = (xt, qt);
            }
            let inverse = q.map(|q| (1.0 / q as f64).to_bits());
            let (mut quotient, mut r) = ([0u64; LANES], [0u64; LANES]);
            // SAFETY: AVX-512 F and DQ were detected; every array holds
            // eight u64.
            unsafe {
                let load = |a: &[u64; LANES]| _mm512_loadu_epi64(a.as_ptr() as *const i64);
                let (qv, rv) = div_rem(load(&x), load(&q), load(&inverse));
                _mm512_storeu_epi64(quotient.as_mut_ptr() as *mut i64, qv);
                _mm512_storeu_epi64(r.as_mut_ptr() as *mut i64, rv);
            }
            for t in 0..chunk.len() {
                assert_eq!(
                    (quotient[t], r[t]),
                    (x[t] / q[t], x[t] % q[t]),
                    "x {}, q {}",
                    x[t],
                    q[t]
                );
            }
        }
    }
}
