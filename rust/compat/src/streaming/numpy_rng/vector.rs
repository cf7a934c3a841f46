//! What numpy's vector shuffle walks ([`super::avx2`], [`super::avx512`])
//! share: when they run, and the scalar steps around their batches (the
//! candidates judged one at a time, the in-between candidates of a batch
//! settled in order, the generator left after the last candidate).

use super::{xsl_rr, Pcg64};

/// Walks shorter than this stay scalar: setting up the vector lanes and
/// moving the generator to the end cost about as much as a few hundred
/// candidates.
pub(super) const VECTOR_WALK_MIN: usize = 256;

/// Whether the CPU runs [`super::avx2::walk`] (the answer is cached by std).
pub(super) fn vector_walk_available() -> bool {
    std::is_x86_feature_detected!("avx2")
        && std::is_x86_feature_detected!("bmi1")
        && std::is_x86_feature_detected!("bmi2")
        && std::is_x86_feature_detected!("lzcnt")
        && std::is_x86_feature_detected!("popcnt")
}

/// Whether the CPU runs [`super::avx512::walk`] (the answer is cached by std).
pub(super) fn avx512_walk_available() -> bool {
    std::is_x86_feature_detected!("avx512f")
        && std::is_x86_feature_detected!("avx512dq")
        && vector_walk_available()
}

/// One candidate judged alone for the current `i` (by the vector walks, for
/// the candidates they do not judge in batches); an accepted one is written
/// at `partners[taken]`. Returns whether `i` reached 0. Without a branch on
/// the outcome (half of them would be mispredicted): the candidate is
/// written either way, and a rejected one is overwritten by the next (while
/// `i > 0`, `taken = top - i < top`).
#[inline]
pub(super) fn judge(
    v: u32,
    i: &mut usize,
    partners: Option<&mut [u32]>,
    taken: &mut usize,
) -> bool {
    let v = v & (u32::MAX >> (*i as u32).leading_zeros());
    let accept = v as usize <= *i;
    if let Some(out) = partners {
        out[*taken] = v;
    }
    *taken += usize::from(accept);
    *i -= usize::from(accept);
    *i == 0
}

/// [`judge`] on each of `candidates` in turn: how many were drawn, when
/// the walk ended among them.
#[inline]
pub(super) fn judge_each(
    candidates: &[u32],
    i: &mut usize,
    mut partners: Option<&mut [u32]>,
    taken: &mut usize,
) -> Option<usize> {
    for (k, &v) in candidates.iter().enumerate() {
        if judge(v, i, partners.as_deref_mut(), taken) {
            return Some(k + 1);
        }
    }
    None
}

/// The accepted candidates of a batch judged at once for `i` (bit `p` for
/// the candidate `batch[p]`): `accepted` holds those at or below `i - p`,
/// and each of the `unsure` ones (above `i - p`, at most `i`) is settled in
/// order from the accepted ones before it.
#[inline]
pub(super) fn settle(mut accepted: u64, mut unsure: u64, batch: &[u32], i: usize) -> u64 {
    while unsure != 0 {
        let p = unsure.trailing_zeros();
        unsure &= unsure - 1;
        let before = (accepted & ((1u64 << p) - 1)).count_ones() as usize;
        if batch[p as usize] as usize <= i - before {
            accepted |= 1 << p;
        }
    }
    accepted
}

/// Leaves `bits` after the first `drawn` 32-bit candidates from `start`
/// (with no kept half): an odd count keeps the high half of the last 64-bit
/// draw.
pub(super) fn leave_after(bits: &mut Pcg64, start: u128, drawn: usize) {
    bits.state = start;
    bits.advance(drawn.div_ceil(2) as u128);
    bits.kept = (drawn % 2 == 1).then(|| (xsl_rr(bits.state) >> 32) as u32);
}

#[cfg(test)]
mod tests {
    use super::super::tests::scalar_partners;
    use super::super::{avx2, avx512, Generator};
    use super::*;

    /// A vector walk, as [`Generator::walk_32`] calls it.
    type Walk = unsafe fn(&mut Pcg64, usize, Option<&mut [u32]>);

    /// Each vector walk this CPU runs, by name.
    fn vector_walks() -> Vec<(&'static str, Walk)> {
        let mut walks: Vec<(&'static str, Walk)> = Vec::new();
        if vector_walk_available() {
            walks.push(("avx2", avx2::walk));
        } else {
            eprintln!("no AVX2: the vector walks are not tested on this CPU");
        }
        if avx512_walk_available() {
            walks.push(("avx512", avx512::walk));
        } else {
            eprintln!("no AVX-512: its walk is not tested on this CPU");
        }
        walks
    }

    #[test]
    fn vector_walks_directly() {
        // Each vector walk itself, below the threshold `walk_32` applies too,
        // from raw states (extreme ones included) with and without a kept
        // half, against the scalar walk.
        let walks = vector_walks();
        let mut draws = Generator::new(4242);
        let mut next = || draws.bit_generator().next_u64();
        for n in 0..6000u32 {
            let raw = |a: u64, b: u64| (u128::from(a) << 64) | u128::from(b);
            let state = match n % 5 {
                0 => u128::MAX - u128::from(n),
                1 => u128::from(n),
                _ => raw(next(), next()),
            };
            let inc = if n % 7 == 0 {
                u128::MAX
            } else {
                raw(next(), next()) | 1
            };
            let kept = (n % 2 == 0).then(|| next() as u32);
            let top = match n % 4 {
                0 => 1 + (next() % 300) as usize,
                1 => 1 + (next() % 3000) as usize,
                // Around a power of two, where the mask halves.
                2 => ((1usize << (1 + next() % 17)) + (next() % 80) as usize)
                    .saturating_sub(40)
                    .max(1),
                _ => 1 + (next() % 70_000) as usize,
            };
            let g = Generator {
                bits: Pcg64 { state, inc, kept },
            };
            let (expected, after) = scalar_partners(&g, top);
            for &(name, walk) in &walks {
                let mut recorded = g.clone();
                let mut partners = vec![u32::MAX; top];
                #[allow(unsafe_code)]
                // SAFETY: the CPU has the walk's features (`vector_walks`).
                unsafe {
                    walk(&mut recorded.bits, top, Some(&mut partners))
                };
                assert_eq!(
                    (&partners, &recorded),
                    (&expected, &after),
                    "{name} case {n}"
                );
                let mut skipped = g.clone();
                #[allow(unsafe_code)]
                // SAFETY: as above.
                unsafe {
                    walk(&mut skipped.bits, top, None)
                };
                assert_eq!(skipped, after, "{name} case {n}");
            }
        }
    }

    #[test]
    #[cfg_attr(
        debug_assertions,
        ignore = "minutes in a debug build; run with --release"
    )]
    fn vector_walks_at_bounds_of_2_pow_31_and_more() {
        // AVX2 judges bounds of 2^31 and more one candidate at a time,
        // AVX-512 in batches with unsigned compares: the generator after
        // each against the scalar walk's (a wrong judgement moves it).
        let walks = vector_walks();
        for top in [
            (1usize << 31) - 1,
            1 << 31,
            (1 << 31) + 40,
            u32::MAX as usize,
        ] {
            for kept in [None, Some(u32::MAX)] {
                let g = Generator {
                    bits: Pcg64 {
                        state: 0x1234_5678_9abc_def0_0fed_cba9_8765_4321,
                        inc: 0x5851_f42d_4c95_7f2d_1405_7b7e_f767_814f,
                        kept,
                    },
                };
                let mut scalar = g.clone();
                scalar.fisher_yates_32(top, |i, v| v <= i);
                for &(name, walk) in &walks {
                    let mut vector = g.clone();
                    #[allow(unsafe_code)]
                    // SAFETY: the CPU has the walk's features (`vector_walks`).
                    unsafe {
                        walk(&mut vector.bits, top, None)
                    };
                    assert_eq!(vector, scalar, "{name} top {top}");
                }
            }
        }
    }
}
