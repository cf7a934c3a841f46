//! The blend on AVX-512, 32 pieces a thread at once: Megatron's own loop
//! over every source, each vector lane a different piece.
//!
//! A position's choice is a serial chain (the next depends on this one), so
//! one walk of the blocks waits on the latency of its comparisons, and its
//! branches (which blocks to evaluate) mispredict. Pieces of the blend are
//! independent once their samples taken are guessed (the `pieces` module), so
//! here each of 32 lanes walks its own piece: at every step every source's
//! error is computed for the 32 pieces (four vectors of eight), and each lane
//! keeps the first largest, exactly as Megatron's loop does. That is O(K)
//! work a position, but no branch among the sources, and four vectors of
//! independent work while each step's samples taken are stored; measured at
//! K = 128 on one core, five times faster than the blocks (`benches/NOTES.md`). Sources are not grouped here (the loop is
//! Megatron's as written); the guesses and the mend still count by groups.
//! Without AVX-512 (the tests on such a machine) each lane is walked by the
//! same loop in scalar code.

use super::pieces::{guess, mend_all, Piece};
use super::{Group, Walk};
use epochplan_core::parallel::{for_each_piece, num_threads};
use std::arch::x86_64::{
    __m512d, _mm512_add_pd, _mm512_cmp_pd_mask, _mm512_cvttpd_epi64, _mm512_loadu_pd,
    _mm512_mask_mov_pd, _mm512_max_pd, _mm512_mul_pd, _mm512_set1_pd, _mm512_storeu_epi64,
    _mm512_sub_pd, _CMP_EQ_OQ, _CMP_GT_OQ, _CMP_LT_OQ,
};

/// Vectors of eight lanes a thread: four, so that while one vector's
/// samples taken are stored the others compute (measured faster than one,
/// two or three in `benches/NOTES.md`).
const VECTORS: usize = 4;
/// Pieces walked at once on a thread.
pub(super) const LANES: usize = VECTORS * 8;
/// Independent chains of comparisons over the sources (even and odd), so
/// that the comparisons of one wait less on the last (measured faster than
/// one or four).
const CHAINS: usize = 2;
/// Positions a lane walks at least: below, its piece's mend (up to about a
/// thousand positions, walked alone) would cost more than it saved.
const MIN_LANE: usize = 1 << 13;

/// Whether the CPU has AVX-512 (F and DQ; the answer is cached by std).
fn available() -> bool {
    std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512dq")
}

/// The most sources the lanes take: their work grows with the sources, the
/// blocks' more slowly (measured: the lanes still faster at 4,000 sources,
/// by less than a quarter; `benches/NOTES.md`).
const MAX_SOURCES: usize = 4096;

/// Whether a blend (to be filled in pieces: its weights sum to one) of
/// `sources` in `groups` groups over `positions` is filled here: with
/// AVX-512, from four groups (fewer are faster scanned one walk at a time),
/// while the sources are at most 16 times the groups (the lanes evaluate
/// every source, the walks one a group) and at most [`MAX_SOURCES`], from
/// `LANES * MIN_LANE` (2^18) positions.
pub(super) fn suit(groups: usize, sources: usize, positions: usize) -> bool {
    groups >= 4
        && sources <= 16 * groups
        && sources <= MAX_SOURCES
        && positions >= LANES * MIN_LANE
        && available()
}

/// Fills both outputs: 32 pieces a batch, as many batches as threads (fewer
/// where a lane would walk less than `MIN_LANE` positions, at least one),
/// pieces of equal length give or take one, each batch walked on a thread;
/// then the pieces are mended in order with the walk `W`, as
/// [`super::pieces::fill_all`] does.
pub(super) fn fill_all<W: Walk>(
    groups: &[Group],
    weights: &[f64],
    sizes: Option<&[i64]>,
    index: &mut [i16],
    sample: &mut [i64],
) {
    let positions = index.len();
    let batches = (positions / (LANES * MIN_LANE)).clamp(1, num_threads().max(1));
    let count = batches * LANES;
    let (short, longer) = (positions / count, positions % count);
    let mut pieces = Vec::with_capacity(count);
    let (mut index, mut sample) = (index, sample);
    let mut first = 0;
    for j in 0..count {
        let len = short + usize::from(j < longer);
        let (i, rest_i) = std::mem::take(&mut index).split_at_mut(len);
        let (s, rest_s) = std::mem::take(&mut sample).split_at_mut(len);
        (index, sample) = (rest_i, rest_s);
        let before = if first == 0 {
            vec![0; groups.len()]
        } else {
            guess(groups, first)
        };
        pieces.push(Piece {
            index: i,
            sample: s,
            first,
            before,
            after: Vec::new(),
        });
        first += len;
    }
    let table = Sources::new(groups, weights, sizes);
    for_each_piece(&mut pieces, LANES, |_, batch| table.walk(batch, short));
    mend_all::<W>(groups, pieces, positions);
}

/// The sources as the lanes read them, padded with sources never taken to
/// a multiple of [`CHAINS`].
struct Sources<'a> {
    groups: &'a [Group],
    weight: Vec<f64>,
    /// Each source's index, as a double (what a lane keeps of its best).
    number: Vec<f64>,
    /// Each source's samples (exhaustive), or +inf: once its samples taken
    /// reach it, its samples taken become +inf, its error -inf. (Padding:
    /// 0, never reached, as the padding's samples taken start at +inf.)
    limit: Vec<f64>,
}

/// Per source, per lane: the samples taken.
type Taken = Vec<[[f64; 8]; VECTORS]>;

impl<'a> Sources<'a> {
    fn new(groups: &'a [Group], weights: &[f64], sizes: Option<&[i64]>) -> Sources<'a> {
        let padded = weights.len().next_multiple_of(CHAINS);
        let mut weight = weights.to_vec();
        weight.resize(padded, 0.0);
        let mut limit: Vec<f64> = match sizes {
            Some(sizes) => sizes.iter().map(|&s| s as f64).collect(),
            None => vec![f64::INFINITY; weights.len()],
        };
        limit.resize(padded, 0.0);
        Sources {
            groups,
            weight,
            number: (0..padded).map(|k| k as f64).collect(),
            limit,
        }
    }

    /// The samples taken of each source in each lane, from each piece's
    /// samples taken a group (round robin within a group, as
    /// [`Group::set_total`] splits them).
    fn taken(&self, batch: &[Piece]) -> Taken {
        let mut taken = vec![[[f64::INFINITY; 8]; VECTORS]; self.weight.len()];
        for (lane, p) in batch.iter().enumerate() {
            for (group, &total) in self.groups.iter().zip(&p.before) {
                let len = group.members.len() as i64;
                for (j, &k) in group.members.iter().enumerate() {
                    let k = usize::from(k);
                    let count = (total / len + i64::from((j as i64) < total % len)) as f64;
                    taken[k][lane / 8][lane % 8] = self.after_taking(k, count);
                }
            }
        }
        taken
    }

    /// What a lane keeps of source `k` once `count` samples are taken.
    #[inline(always)]
    fn after_taking(&self, k: usize, count: f64) -> f64 {
        if count == self.limit[k] {
            f64::INFINITY
        } else {
            count
        }
    }

    /// Walks the pieces of `batch` (32, each `steps` positions or one more)
    /// from their `before`, and sets their `after`.
    fn walk(&self, batch: &mut [Piece], steps: usize) {
        debug_assert_eq!(batch.len(), LANES);
        let mut taken = self.taken(batch);
        let mut done = 0;
        if available() {
            #[allow(unsafe_code)]
            // SAFETY: the CPU was just seen to have AVX-512 F and DQ.
            unsafe {
                self.steps(&mut taken, batch, steps);
            }
            done = steps;
        }
        for (lane, p) in batch.iter_mut().enumerate() {
            // The one more position of the longer pieces (every position
            // without AVX-512), as Megatron's loop.
            for t in done..p.index.len() {
                let x = super::x_at(p.first + t);
                let (mut best, mut top) = (0, f64::NEG_INFINITY);
                for (k, w) in self.weight.iter().enumerate() {
                    let error = w * x - taken[k][lane / 8][lane % 8];
                    if error > top {
                        (best, top) = (k, error);
                    }
                }
                let count = taken[best][lane / 8][lane % 8];
                p.index[t] = best as i16;
                p.sample[t] = count as i64;
                taken[best][lane / 8][lane % 8] = self.after_taking(best, count + 1.0);
            }
            p.after = self
                .groups
                .iter()
                .map(|group| {
                    let count = |&k: &u16| {
                        let k = usize::from(k);
                        match taken[k][lane / 8][lane % 8] {
                            c if c.is_finite() => c as i64,
                            // Retired: all its samples taken.
                            _ => self.limit[k] as i64,
                        }
                    };
                    group.members.iter().map(count).sum()
                })
                .collect();
        }
    }

    /// The first `steps` positions of every lane.
    #[target_feature(enable = "avx512f,avx512dq")]
    fn steps(&self, taken: &mut Taken, batch: &mut [Piece], steps: usize) {
        let one = _mm512_set1_pd(1.0);
        let mut position: [__m512d; VECTORS] = std::array::from_fn(|v| {
            let firsts: [f64; 8] = std::array::from_fn(|l| batch[v * 8 + l].first as f64);
            load(&firsts)
        });
        for t in 0..steps {
            let x: [__m512d; VECTORS] = std::array::from_fn(|v| _mm512_max_pd(position[v], one));
            let mut best = [[_mm512_set1_pd(f64::NEG_INFINITY); CHAINS]; VECTORS];
            let mut source = [[_mm512_set1_pd(0.0); CHAINS]; VECTORS];
            for ((w, n), rows) in self
                .weight
                .chunks_exact(CHAINS)
                .zip(self.number.chunks_exact(CHAINS))
                .zip(taken.chunks_exact(CHAINS))
            {
                for c in 0..CHAINS {
                    let (w, n) = (_mm512_set1_pd(w[c]), _mm512_set1_pd(n[c]));
                    for v in 0..VECTORS {
                        // Megatron's rounding: the product, then the difference.
                        let error = _mm512_sub_pd(_mm512_mul_pd(w, x[v]), load(&rows[c][v]));
                        let above = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(error, best[v][c]);
                        best[v][c] = _mm512_mask_mov_pd(best[v][c], above, error);
                        source[v][c] = _mm512_mask_mov_pd(source[v][c], above, n);
                    }
                }
            }
            for v in 0..VECTORS {
                // Each chain kept its first largest; of the chains, the
                // largest, the lowest source on ties.
                let (mut top, mut k) = (best[v][0], source[v][0]);
                for c in 1..CHAINS {
                    let above = _mm512_cmp_pd_mask::<_CMP_GT_OQ>(best[v][c], top);
                    let tie = _mm512_cmp_pd_mask::<_CMP_EQ_OQ>(best[v][c], top)
                        & _mm512_cmp_pd_mask::<_CMP_LT_OQ>(source[v][c], k);
                    top = _mm512_mask_mov_pd(top, above | tie, best[v][c]);
                    k = _mm512_mask_mov_pd(k, above | tie, source[v][c]);
                }
                let mut chosen = [0i64; 8];
                #[allow(unsafe_code)]
                // SAFETY: `chosen` holds eight 64-bit lanes.
                unsafe {
                    _mm512_storeu_epi64(chosen.as_mut_ptr(), _mm512_cvttpd_epi64(k));
                }
                for (l, &k) in chosen.iter().enumerate() {
                    let k = k as usize;
                    let p = &mut batch[v * 8 + l];
                    let count = taken[k][v][l];
                    p.index[t] = k as i16;
                    p.sample[t] = count as i64;
                    taken[k][v][l] = self.after_taking(k, count + 1.0);
                }
                position[v] = _mm512_add_pd(position[v], one);
            }
        }
    }
}

/// Eight doubles as a vector.
#[inline]
#[target_feature(enable = "avx512f")]
fn load(eight: &[f64; 8]) -> __m512d {
    #[allow(unsafe_code)]
    // SAFETY: `eight` is 64 readable bytes; no alignment is needed.
    unsafe {
        _mm512_loadu_pd(eight.as_ptr())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        build_blending_indices, build_exhaustive_blending_indices, groups_of,
        reference_blending_indices, reference_exhaustive_blending_indices, Scan, Search, NARROW,
    };
    use super::*;
    use epochplan_core::parallel::set_num_threads;
    use proptest::prelude::*;

    /// The outputs of the lanes at any size (the blends' entry points take
    /// them only from `LANES * MIN_LANE` positions), mended by a scan or by
    /// the blocks.
    fn lanes(
        weights: &[f64],
        sizes: Option<&[i64]>,
        size: usize,
        scan: bool,
    ) -> (Vec<i16>, Vec<i64>) {
        let mut index = vec![0i16; size];
        let mut sample = vec![0i64; size];
        let groups = groups_of(weights, sizes, size);
        if scan {
            fill_all::<Scan>(&groups, weights, sizes, &mut index, &mut sample);
        } else {
            fill_all::<Search<NARROW>>(&groups, weights, sizes, &mut index, &mut sample);
        }
        (index, sample)
    }

    fn normalized(raw: &[f64]) -> Vec<f64> {
        let total: f64 = raw.iter().sum();
        raw.iter().map(|r| r / total).collect()
    }

    #[test]
    fn the_entry_points_take_the_lanes_and_match_the_loops() {
        // 40 sources, 8 of them of one weight (a group taken round robin).
        let mut raw: Vec<f64> = (0..32).map(|k| f64::from(k * k % 29 + 1)).collect();
        raw.extend([3.0; 8]);
        let w = normalized(&raw);
        let size = LANES * MIN_LANE + 777;
        assert_eq!(
            suit(groups_of(&w, None, size).len(), w.len(), size),
            available()
        );
        let expected = reference_blending_indices(&w, size);
        // Sizes of which some run out early, and one source a sample.
        let sizes: Vec<i64> = (0..40).map(|k| [1, 500, 9_000, 20_000][k % 4]).collect();
        let exhaustive = reference_exhaustive_blending_indices(&sizes);
        let _threads = crate::test_threads_lock();
        for threads in [1, 2, 3] {
            set_num_threads(threads);
            let mut index = vec![0i16; size];
            let mut sample = vec![0i64; size];
            build_blending_indices(&mut index, &mut sample, &w, 40, size as i64).unwrap();
            assert!((index, sample) == expected, "{threads} threads");
            let total = exhaustive.0.len();
            let mut index = vec![0i16; total];
            let mut sample = vec![0i64; total];
            build_exhaustive_blending_indices(&mut index, &mut sample, &sizes, 40).unwrap();
            assert!(
                (index, sample) == exhaustive,
                "{threads} threads, exhaustive"
            );
        }
        set_num_threads(0);
    }

    #[test]
    fn ties_signed_zeros_negative_vast_and_denormal_weights_fill_as_the_loop() {
        let a = 2f64.powi(300);
        let cases: [&[f64]; 8] = [
            // Dyadic: errors of different groups tie exactly, across chains.
            &[0.5, 0.25, 0.125, 0.0625, 0.0625],
            &[0.0625, 0.25, 0.125, 0.0625, 0.25, 0.25],
            &[0.5, -0.0, 0.25, 0.0, 0.25, -0.0, 0.0],
            &[0.7, -0.2, 0.3, 0.2],
            // Vast weights: every source its own group.
            &[2.0 * a, a, -3.0 * a, 1.0, 0.0],
            &[1e10, 1e10, -2e10, 0.5, 0.5],
            &[1.0, 5e-324, 1e-310, 0.0, -5e-324],
            &[0.1 + 5e-10, 0.2, 0.3, 0.4],
        ];
        for w in cases {
            for size in [0, 1, 31, 32, 33, 65, 1000, 4099] {
                for scan in [false, true] {
                    let expected = reference_blending_indices(w, size);
                    assert!(lanes(w, None, size, scan) == expected, "{w:?} {size}");
                }
            }
        }
    }

    #[test]
    fn a_source_retired_is_never_taken_again() {
        // Weights that are not sizes over the total, so that the error of
        // source 0 stays the largest after its 3 samples: only retiring it
        // keeps it out, as in Megatron's exhaustive loop.
        let (w, sizes) = ([0.9, 0.05, 0.05, 0.0], [3i64, 40, 40, 1]);
        let total = sizes.iter().sum::<i64>() as usize;
        let mut counts = [0i64; 4];
        let mut expected = (Vec::new(), Vec::new());
        for i in 0..total {
            let x = (i as f64).max(1.0);
            let open = (0..4).filter(|&k| counts[k] < sizes[k]);
            let errors = open.map(|k| (w[k] * x - counts[k] as f64, k));
            let best = errors
                .fold((f64::MIN, 0), |b, e| if e.0 > b.0 { e } else { b })
                .1;
            expected.0.push(best as i16);
            expected.1.push(counts[best]);
            counts[best] += 1;
        }
        assert_eq!(expected.0.iter().filter(|&&k| k == 0).count(), 3);
        for scan in [false, true] {
            assert_eq!(lanes(&w, Some(&sizes), total, scan), expected);
        }
    }

    proptest! {
        #[test]
        fn dyadic_weights_tie_and_fill_as_the_loop(
            raw in prop::collection::vec(-4i32..9, 1..12),
            size in 0usize..3000,
            scan: bool,
        ) {
            // Sixteenths, some negative, and the rest to one: exact sums, and
            // errors of different groups equal at many positions.
            let mut w: Vec<f64> = raw.iter().map(|&r| f64::from(r) / 16.0).collect();
            w.push(1.0 - w.iter().sum::<f64>());
            prop_assert_eq!(lanes(&w, None, size, scan), reference_blending_indices(&w, size));
        }

        #[test]
        fn any_lanes_fill_as_the_loop(
            raw in prop::collection::vec(0u32..1000, 1..50),
            equal in 0usize..12,
            size in 0usize..6000,
            scan: bool,
        ) {
            let mut raw: Vec<f64> = raw.iter().map(|&r| f64::from(r) + 0.5).collect();
            raw.extend(std::iter::repeat_n(7.0, equal));
            let w = normalized(&raw);
            prop_assert_eq!(lanes(&w, None, size, scan), reference_blending_indices(&w, size));
        }

        #[test]
        fn any_lanes_fill_the_exhaustive_loop(
            sizes in prop::collection::vec(1i64..300, 1..40),
            scan: bool,
        ) {
            let total: i64 = sizes.iter().sum();
            let w: Vec<f64> = sizes.iter().map(|&s| s as f64 / total as f64).collect();
            prop_assert_eq!(
                lanes(&w, Some(&sizes), total as usize, scan),
                reference_exhaustive_blending_indices(&sizes)
            );
        }
    }
}
