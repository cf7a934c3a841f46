//! The blend in pieces on several threads, each piece started from a guess of
//! the samples taken before it and mended where the guess was wrong.
//!
//! A position's choice depends only on the samples taken so far. With
//! non-negative weights that sum to one each source's samples taken stay
//! within about a sample of its share `w * s`, so the samples taken before
//! position `s` are almost always the apportionment of `s` by largest
//! remainders (measured: `benches/NOTES.md`), and where they are not, two
//! runs of the rule from the two states agree again within a few positions:
//! from the first position where they have taken the same samples, they make
//! the same choices. So every piece but the first is filled from that guess,
//! all at once; then, in order, each piece is walked again from the true
//! samples taken before it, its positions rewritten, until both walks have
//! taken the same samples, and the rest of the piece is kept. A guess that
//! never meets the true walk only costs time: the mend then rewrites its
//! whole piece.

use super::{fill, x_at, Group, Walk};
use epochplan_core::parallel::{for_each_piece, num_threads};

/// Positions below which a piece is not worth a thread.
const MIN_PIECE: usize = 1 << 20;

/// The length of a piece when `positions` are filled on every thread.
pub(super) fn length(positions: usize) -> usize {
    positions.div_ceil(num_threads().max(1)).max(MIN_PIECE)
}

/// One piece: its outputs, its first position, the samples taken before it
/// (guessed but for the first piece) and, once filled, those taken after it.
pub(super) struct Piece<'a> {
    pub(super) index: &'a mut [i16],
    pub(super) sample: &'a mut [i64],
    pub(super) first: usize,
    pub(super) before: Vec<i64>,
    pub(super) after: Vec<i64>,
}

/// Fills both outputs (from position 0) in pieces of `piece` positions, in
/// parallel, then mends them in order: the outputs of the rule walked once
/// from position 0.
pub(super) fn fill_all<W: Walk>(
    groups: &[Group],
    index: &mut [i16],
    sample: &mut [i64],
    piece: usize,
) {
    let positions = index.len();
    let piece = piece.max(1);
    let mut pieces: Vec<Piece> = index
        .chunks_mut(piece)
        .zip(sample.chunks_mut(piece))
        .enumerate()
        .map(|(j, (index, sample))| {
            let first = j * piece;
            let before = if first == 0 {
                vec![0; groups.len()]
            } else {
                guess(groups, first)
            };
            Piece {
                index,
                sample,
                first,
                before,
                after: Vec::new(),
            }
        })
        .collect();
    for_each_piece(&mut pieces, 1, |_, one| {
        for p in one {
            let mut search = W::start(taking(groups, &p.before), positions, x_at(p.first));
            fill(&mut search, p.first, p.index, p.sample);
            p.after = search.totals();
        }
    });
    mend_all::<W>(groups, pieces, positions);
}

/// Mends filled `pieces` (in order, from position 0, of `positions` in
/// all) one after the other, each from the samples truly taken before it.
pub(super) fn mend_all<W: Walk>(groups: &[Group], pieces: Vec<Piece>, positions: usize) {
    let mut group_of = vec![0u32; groups.iter().map(|g| g.members.len()).sum()];
    for (g, group) in groups.iter().enumerate() {
        for &k in &group.members {
            group_of[usize::from(k)] = g as u32;
        }
    }
    let mut pieces = pieces.into_iter();
    let Some(mut truth) = pieces.next().map(|p| p.after) else {
        return;
    };
    for p in pieces {
        truth = mend::<W>(groups, &group_of, truth, p, positions);
    }
}

/// Rewrites piece `p`'s positions with the rule walked from `truth` (the
/// samples truly taken before it) until that walk and the piece's own have
/// taken the same samples; returns the samples truly taken after the piece.
fn mend<W: Walk>(
    groups: &[Group],
    group_of: &[u32],
    mut truth: Vec<i64>,
    p: Piece,
    positions: usize,
) -> Vec<i64> {
    let mut guessed = p.before;
    let mut differ = truth.iter().zip(&guessed).filter(|(a, b)| a != b).count();
    if differ == 0 {
        return p.after;
    }
    let mut search = W::start(taking(groups, &truth), positions, x_at(p.first));
    for (i, (index, sample)) in p.index.iter_mut().zip(p.sample.iter_mut()).enumerate() {
        let x = x_at(p.first + i);
        let was = group_of[*index as usize] as usize;
        let (g, source) = search.choose(x);
        *sample = search.take(g, x);
        *index = source as i16;
        let apart = |t: &[i64], u: &[i64]| {
            usize::from(t[g] != u[g]) + usize::from(was != g && t[was] != u[was])
        };
        let before = apart(&truth, &guessed);
        truth[g] += 1;
        guessed[was] += 1;
        differ = differ + apart(&truth, &guessed) - before;
        if differ == 0 {
            return p.after;
        }
    }
    truth
}

/// The groups with `totals` samples taken from each.
fn taking(groups: &[Group], totals: &[i64]) -> Vec<Group> {
    let mut groups = groups.to_vec();
    for (group, &total) in groups.iter_mut().zip(totals) {
        group.set_total(total);
    }
    groups
}

/// A guess of the samples each group has taken before position `s`: each
/// member's share `w * s` rounded down, then one more for the members of
/// largest remainder until `s` are given (lowest group first on ties),
/// never more than a member's size or `s`; then, if the shares passed `s`,
/// some taken back. The sum is at most `s`, so the exhaustive variant has
/// every position's sample left.
pub(super) fn guess(groups: &[Group], s: usize) -> Vec<i64> {
    let x = s as f64;
    let cap = |g: &Group| g.size.unwrap_or(i64::MAX);
    let mut totals: Vec<i64> = groups
        .iter()
        .map(|g| {
            // No member has taken more than `s` (`as` saturates a vast or
            // negative share), so no total comes near overflow.
            let floor = ((g.weight * x).floor() as i64).clamp(0, cap(g).min(s as i64));
            floor * g.members.len() as i64
        })
        .collect();
    let remainder = |g: usize| {
        let w = groups[g].weight * x;
        w - w.floor()
    };
    let mut order: Vec<usize> = (0..groups.len()).collect();
    order.sort_by(|&a, &b| remainder(b).total_cmp(&remainder(a)).then(a.cmp(&b)));
    let given: i64 = totals.iter().sum();
    let mut left = s as i64 - given;
    for &g in &order {
        if left <= 0 {
            break;
        }
        let len = groups[g].members.len() as i64;
        let room = if totals[g] / len < cap(&groups[g]) {
            len
        } else {
            0
        };
        let more = room.min(left);
        totals[g] += more;
        left -= more;
    }
    // Shares rounded up past `s` (weights summing to a little over one):
    // take back from the smallest remainders.
    for &g in order.iter().rev() {
        if left >= 0 {
            break;
        }
        let less = totals[g].min(-left);
        totals[g] -= less;
        left += less;
    }
    totals
}

#[cfg(test)]
mod tests {
    use super::super::{
        groups_of, reference_blending_indices, reference_exhaustive_blending_indices, Scan, Search,
        NARROW, WIDE,
    };
    use super::*;
    use epochplan_core::parallel::set_num_threads;
    use proptest::prelude::*;

    /// The outputs filled in pieces of `piece` positions, by the blocks or
    /// by a scan.
    fn in_pieces(weights: &[f64], size: usize, piece: usize, scan: bool) -> (Vec<i16>, Vec<i64>) {
        let mut index = vec![0i16; size];
        let mut sample = vec![0i64; size];
        let groups = groups_of(weights, None, size);
        if scan {
            fill_all::<Scan>(&groups, &mut index, &mut sample, piece);
        } else {
            fill_all::<Search<NARROW>>(&groups, &mut index, &mut sample, piece);
        }
        (index, sample)
    }

    #[test]
    fn the_guess_gives_every_position_once() {
        let w: Vec<f64> = (1..=50).map(|k| f64::from(k) / 1275.0).collect();
        let groups = groups_of(&w, None, 200_000);
        for s in [1, 7, 1000, 123_457] {
            assert_eq!(guess(&groups, s).iter().sum::<i64>(), s as i64);
        }
    }

    #[test]
    fn vast_weights_that_sum_to_one_leave_the_guess_in_range() {
        // Shares of 2^301 * s: each member's guess is capped at s samples,
        // then taken back to s in all (a total of i64::MAX would overflow).
        let a = 2f64.powi(300);
        let w = [2.0 * a, a, -3.0 * a, 1.0];
        assert_eq!(w.iter().sum::<f64>(), 1.0);
        let groups = groups_of(&w, None, 4000);
        assert!(guess(&groups, 1000)
            .iter()
            .all(|&t| (0..=1000).contains(&t)));
        assert_eq!(guess(&groups, 1000).iter().sum::<i64>(), 1000);
        for scan in [false, true] {
            assert_eq!(
                in_pieces(&w, 4000, 1000, scan),
                reference_blending_indices(&w, 4000)
            );
        }
    }

    #[test]
    fn a_guess_that_never_meets_is_rewritten_whole() {
        // Weights summing to 6: the errors drift and no guess is met.
        let w = [2.0, 3.0, 0.0, 1.0];
        for scan in [false, true] {
            assert_eq!(
                in_pieces(&w, 3000, 100, scan),
                reference_blending_indices(&w, 3000)
            );
        }
    }

    #[test]
    fn many_threads_fill_as_one() {
        // Pieces of their full length (a million positions and more), one a
        // thread (the entry point takes the lanes where the CPU has AVX-512).
        let raw: Vec<f64> = (0..24).map(|k| f64::from(k * k % 17 + 1)).collect();
        let total: f64 = raw.iter().sum();
        let w: Vec<f64> = raw.iter().map(|r| r / total).collect();
        let size = 3 * MIN_PIECE + 12_345;
        let expected = reference_blending_indices(&w, size);
        let groups = groups_of(&w, None, size);
        let _threads = crate::test_threads_lock();
        for threads in [1, 2, 3] {
            set_num_threads(threads);
            let mut index = vec![0i16; size];
            let mut sample = vec![0i64; size];
            fill_all::<Search<NARROW>>(&groups, &mut index, &mut sample, length(size));
            assert!((index, sample) == expected, "{threads} threads");
        }
        set_num_threads(0);
    }

    proptest! {
        #[test]
        fn any_pieces_fill_as_one(
            raw in prop::collection::vec(0u32..1000, 1..60),
            equal in 0usize..20,
            size in 0usize..5000,
            piece in 1usize..700,
            scan: bool,
        ) {
            // Some sources of equal weight, so that groups of several members
            // start mid-round.
            let mut raw: Vec<f64> = raw.iter().map(|&r| f64::from(r) + 0.5).collect();
            raw.extend(std::iter::repeat_n(7.0, equal));
            let total: f64 = raw.iter().sum();
            let w: Vec<f64> = raw.iter().map(|r| r / total).collect();
            prop_assert_eq!(in_pieces(&w, size, piece, scan), reference_blending_indices(&w, size));
        }

        #[test]
        fn any_pieces_fill_the_exhaustive_blend_as_one(
            sizes in prop::collection::vec(1i64..80, 1..40),
            piece in 1usize..300,
            scan: bool,
        ) {
            let total: i64 = sizes.iter().sum();
            let weights: Vec<f64> = sizes.iter().map(|&s| s as f64 / total as f64).collect();
            let groups = groups_of(&weights, Some(&sizes), total as usize);
            let mut index = vec![0i16; total as usize];
            let mut sample = vec![0i64; total as usize];
            if scan {
                fill_all::<Scan>(&groups, &mut index, &mut sample, piece);
            } else {
                fill_all::<Search<WIDE>>(&groups, &mut index, &mut sample, piece);
            }
            prop_assert_eq!((index, sample), reference_exhaustive_blending_indices(&sizes));
        }
    }
}
