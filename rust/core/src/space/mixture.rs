//! Mixtures: several sources, each contributing an exact quota of samples an
//! epoch, stratified over the epoch's positions.
//!
//! # Sources and their sequences
//!
//! Sources are sizes `n_k` (datasets concatenated: source `k`'s ids are
//! offset by `n_0 + ... + n_{k-1}`, as `torch.utils.data.ConcatDataset`
//! numbers them) or [`Selection`]s (ids as they are, e.g. classes or splits
//! of one store). Source `k` has an endless sequence of samples made of
//! passes: element `s` of the sequence is in pass `p = s / n_k`, at `u = s %
//! n_k`, and is the source's sample `perm_{k,p}(u)`, where `perm_{k,p}` is
//! the [`Cipher`] permutation of `[0, n_k)` keyed by
//! `derive(seed, k, Domain { kind: "mixture", label: "pass" }, p)`
//! ([`crate::keys::derive`]; the source's number takes the epoch's field of
//! the record, the pass its index field). Every pass shows every sample once.
//!
//! # Epochs
//!
//! An epoch takes `q_k` elements of source `k`'s sequence, from
//! `consumed[k]` on (the sum of the earlier epochs' quotas, the state a
//! resumed run carries; quotas may change between epochs, a curriculum, and
//! the sequence continues where it stopped). So:
//! - over the run, after `c` elements of source `k`, every sample of it was
//!   shown `floor(c / n_k)` or `ceil(c / n_k)` times: a down-sampled source
//!   shows every sample once before any repeat;
//! - an epoch that starts at a pass boundary (`consumed[k] % n_k == 0`, as
//!   the first epoch) shows every sample `floor(q_k / n_k)` or
//!   `ceil(q_k / n_k)` times; one that starts inside a pass ends the pass
//!   first, then the counts of one epoch are within
//!   `[floor(q_k / n_k) - 1, ceil(q_k / n_k) + 1]` (the pass's tail and the
//!   next pass's head may share a sample), while the run's totals keep the
//!   bound above.
//!
//! The epoch's `S = q_0 + ... + q_{K-1}` positions are shared by the
//! stratified [`Interleave`](crate::space::Interleave) (its module proves the per-prefix bound), so
//! position `j` is element `consumed[k] + i` of source `k`'s sequence for
//! `(k, i) = locate(j)`. An epoch inside which a phase of a schedule
//! starts is cut into segments, each its own interleave, the sequences
//! running on from one to the next (see the schedule module and
//! [`MixtureEpoch`]).
//!
//! # Quotas
//!
//! [`QuotaRule`] gives them: explicitly; from `repeat_k` as
//! `round(n_k * repeat_k)` (the product in float64, rounded half to even, as
//! Python's `round`); or from weights and an epoch length by largest
//! remainder (see [`quotas_from_weights`]).
//!
//! # Inside a step
//!
//! A plan deals a step's positions to ranks; the interleave is periodic, so
//! strided dealing could give one rank one source. [`StepShuffle`] permutes
//! a step's positions first (keyed by `derive(seed, epoch, Domain { kind:
//! "mixture", label: "step" }, step)`): the step's set of samples, and so
//! the per-step stratification, is unchanged, and every rank sees the mix.

use crate::cipher::Cipher;
use crate::error::{Error, Result};
use crate::keys::{derive, Domain};
use crate::order::MAX_SAMPLES;
use crate::space::mixture_epoch::MixtureEpoch;
use crate::space::selection::Selection;
use std::sync::Arc;

/// The key domain of the sources' passes.
pub const PASS_DOMAIN: Domain<'static> = Domain {
    kind: "mixture",
    label: "pass",
};

/// The key domain of the in-step shuffle.
pub const STEP_DOMAIN: Domain<'static> = Domain {
    kind: "mixture",
    label: "step",
};

#[derive(Debug)]
pub(crate) enum Sources {
    /// Concatenated datasets: their sizes and id offsets.
    Sizes { sizes: Vec<u64>, offsets: Vec<u64> },
    /// Selections: ids as they are.
    Selections(Vec<Selection>),
}

/// How an epoch's quotas are chosen.
#[derive(Debug, Clone, PartialEq)]
pub enum QuotaRule {
    /// Every sample once: `q_k = n_k`.
    Once,
    /// The quotas themselves.
    Quotas(Vec<u64>),
    /// `q_k = round(n_k * repeat_k)`, half to even.
    Repeat(Vec<f64>),
    /// `num_samples` (default: the sources' total size) shared by weights,
    /// by largest remainder.
    Weights {
        /// One weight per source, finite and `>= 0`, not all 0.
        weights: Vec<f64>,
        /// The epoch's length `S`.
        num_samples: Option<u64>,
    },
}

/// Sources mixed by a seed. Cheap to clone (the sources are shared).
#[derive(Debug, Clone)]
pub struct Mixture {
    seed: u64,
    pub(crate) sources: Arc<Sources>,
}

impl Mixture {
    /// Datasets of `sizes[k]` samples, concatenated: source `k`'s ids are
    /// offset by the sizes before it.
    pub fn from_sizes(sizes: &[u64], seed: u64) -> Result<Mixture> {
        check_some(sizes.len())?;
        let mut offsets = Vec::with_capacity(sizes.len());
        let mut total = 0u64;
        for &n in sizes {
            offsets.push(total);
            total = total
                .checked_add(n)
                .filter(|&t| t <= MAX_SAMPLES)
                .ok_or_else(|| {
                    Error::Overflow("sources must hold at most 2**63 - 1 samples in all".into())
                })?;
        }
        Ok(Mixture {
            seed,
            sources: Arc::new(Sources::Sizes {
                sizes: sizes.to_vec(),
                offsets,
            }),
        })
    }

    /// Selections (e.g. classes or splits of one store), their ids as they
    /// are.
    pub fn from_selections(sources: Vec<Selection>, seed: u64) -> Result<Mixture> {
        check_some(sources.len())?;
        Ok(Mixture {
            seed,
            sources: Arc::new(Sources::Selections(sources)),
        })
    }

    /// The seed of the sources' passes.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// The number of sources (`K`).
    pub fn num_sources(&self) -> usize {
        match &*self.sources {
            Sources::Sizes { sizes, .. } => sizes.len(),
            Sources::Selections(s) => s.len(),
        }
    }

    /// Source `k`'s size (`n_k`); `k < num_sources()`.
    pub(crate) fn source_len(&self, k: usize) -> u64 {
        match &*self.sources {
            Sources::Sizes { sizes, .. } => sizes[k],
            Sources::Selections(s) => s[k].len(),
        }
    }

    /// Every source's size.
    pub fn sizes(&self) -> Vec<u64> {
        (0..self.num_sources())
            .map(|k| self.source_len(k))
            .collect()
    }

    /// Whether `id` is a sample of one of the sources (over the run, a
    /// source shows every one of its samples).
    pub fn holds(&self, id: u64) -> bool {
        match &*self.sources {
            Sources::Sizes { sizes, .. } => id < sizes.iter().sum::<u64>(),
            Sources::Selections(s) => s.iter().any(|s| s.contains(id)),
        }
    }

    /// The size of the store the ids belong to: every id is below it (the
    /// sources' total for sizes, the largest store of the selections).
    pub fn store_size(&self) -> u64 {
        match &*self.sources {
            Sources::Sizes { sizes, .. } => sizes.iter().sum(),
            Sources::Selections(s) => s.iter().map(Selection::num_samples).max().unwrap_or(0),
        }
    }

    /// The selections, for a mixture of selections.
    pub fn selections(&self) -> Option<&[Selection]> {
        match &*self.sources {
            Sources::Selections(s) => Some(s),
            Sources::Sizes { .. } => None,
        }
    }

    /// One epoch's quotas by `rule`.
    pub fn quotas(&self, rule: &QuotaRule) -> Result<Vec<u64>> {
        let sizes = self.sizes();
        let k = sizes.len();
        let check_len = |name: &str, len: usize| {
            if len == k {
                Ok(())
            } else {
                Err(Error::Value(format!(
                    "{name} must have one entry per source ({k}), got {len}"
                )))
            }
        };
        match rule {
            QuotaRule::Once => Ok(sizes),
            QuotaRule::Quotas(q) => {
                check_len("quotas", q.len())?;
                Ok(q.clone())
            }
            QuotaRule::Repeat(repeat) => {
                check_len("repeat", repeat.len())?;
                quotas_from_repeat(&sizes, repeat)
            }
            QuotaRule::Weights {
                weights,
                num_samples,
            } => {
                check_len("weights", weights.len())?;
                let total = sizes.iter().sum::<u64>(); // at most 2**63 - 1: checked when built
                let s = num_samples.unwrap_or(total);
                let quotas = quotas_from_weights(weights, s)?;
                if let Some(k) = (0..k).find(|&k| sizes[k] == 0 && quotas[k] > 0) {
                    return Err(Error::Value(format!(
                        "weights[{k}] must be 0: source {k} is empty, got {}",
                        weights[k]
                    )));
                }
                Ok(quotas)
            }
        }
    }

    /// Element `s` of source `k`'s sequence, as an id.
    pub fn sequence_id(&self, k: usize, s: u64) -> Result<u64> {
        let num = self.num_sources();
        if k >= num {
            return Err(Error::Index(format!(
                "source must be in [0, {num}), got {k}"
            )));
        }
        let n = self.source_len(k);
        if n == 0 {
            return Err(Error::Value(format!(
                "source {k} is empty: its sequence has no element"
            )));
        }
        Ok(self.sequence_id_at(k, s))
    }

    /// [`Mixture::sequence_id`] for a source that exists and is not empty.
    pub(crate) fn sequence_id_at(&self, k: usize, s: u64) -> u64 {
        let n = self.source_len(k);
        self.source_id(k, self.pass(k, s / n).apply(s % n))
    }

    /// The cipher of pass `p` of source `k`.
    pub(crate) fn pass(&self, k: usize, p: u64) -> Cipher {
        Cipher::new(
            self.source_len(k),
            derive(self.seed, k as u64, PASS_DOMAIN, p),
        )
    }

    /// Source `k`'s sample `v` (`v < n_k`) as an id.
    #[inline]
    fn source_id(&self, k: usize, v: u64) -> u64 {
        match &*self.sources {
            Sources::Sizes { offsets, .. } => offsets[k] + v,
            Sources::Selections(s) => s[k].id_at(v),
        }
    }

    /// The epoch of consecutive segments taking `segments[j][k]` elements
    /// of each source's sequence in turn, from element `consumed[k]` on (a
    /// phase that starts inside the epoch cuts it into segments).
    pub fn epoch_in_segments(
        &self,
        segments: &[Vec<u64>],
        consumed: &[u64],
    ) -> Result<MixtureEpoch> {
        match segments {
            [only] => self.epoch(only, consumed),
            _ => MixtureEpoch::in_segments(self.clone(), segments, consumed),
        }
    }

    /// The epoch taking `quotas[k]` elements of each source's sequence from
    /// element `consumed[k]` on.
    pub fn epoch(&self, quotas: &[u64], consumed: &[u64]) -> Result<MixtureEpoch> {
        let k = self.num_sources();
        for (name, len) in [("quotas", quotas.len()), ("consumed", consumed.len())] {
            if len != k {
                return Err(Error::Value(format!(
                    "{name} must have one entry per source ({k}), got {len}"
                )));
            }
        }
        for k in 0..k {
            if self.source_len(k) == 0 && quotas[k] > 0 {
                return Err(Error::Value(format!(
                    "quotas[{k}] must be 0: source {k} is empty, got {}",
                    quotas[k]
                )));
            }
            if consumed[k].checked_add(quotas[k]).is_none() {
                return Err(Error::Overflow(format!(
                    "consumed[{k}] + quotas[{k}] must be below 2**64, got {} + {}",
                    consumed[k], quotas[k]
                )));
            }
        }
        MixtureEpoch::new(self.clone(), quotas, consumed)
    }
}

fn check_some(k: usize) -> Result<()> {
    if k == 0 {
        return Err(Error::Value("sources must hold at least one source".into()));
    }
    Ok(())
}

/// `q_k = round(n_k * repeat_k)`: the product in float64 (`n_k` converted
/// first), rounded half to even as Python's `round`; `repeat_k` finite and
/// `>= 0`.
pub fn quotas_from_repeat(sizes: &[u64], repeat: &[f64]) -> Result<Vec<u64>> {
    sizes
        .iter()
        .zip(repeat)
        .enumerate()
        .map(|(k, (&n, &r))| {
            if !(r.is_finite() && r >= 0.0) {
                return Err(Error::Value(format!(
                    "repeat[{k}] must be a finite number >= 0, got {r}"
                )));
            }
            let q = (n as f64 * r).round_ties_even();
            if q >= MAX_SAMPLES as f64 {
                return Err(Error::Overflow(format!(
                    "repeat[{k}] = {r} gives source {k} (of {n} samples) more than \
                     2**63 - 1 samples an epoch"
                )));
            }
            Ok(q as u64)
        })
        .collect()
}

/// `num_samples` positions shared by `weights` by largest remainder
/// (Hamilton's method): each source gets `floor(S * w_k / sum w)`, and the
/// positions left (fewer than K) go one each to the largest fractional
/// parts, ties to the lower source. The weights (finite, `>= 0`, not all 0
/// unless `num_samples` is 0) are first quantised to integers,
/// `round(w_k / max w * 2**52)`, so the rest is exact integer arithmetic:
/// weights in exact ratios (1:1:2, 0.25:0.75) keep them exactly.
pub fn quotas_from_weights(weights: &[f64], num_samples: u64) -> Result<Vec<u64>> {
    if num_samples > MAX_SAMPLES {
        return Err(Error::Overflow(format!(
            "num_samples must be in [0, 2**63 - 1], got {num_samples}"
        )));
    }
    if weights.is_empty() {
        return Err(Error::Value("weights must name at least one source".into()));
    }
    for (k, &w) in weights.iter().enumerate() {
        if !(w.is_finite() && w >= 0.0) {
            return Err(Error::Value(format!(
                "weights[{k}] must be a finite number >= 0, got {w}"
            )));
        }
    }
    let max = weights.iter().copied().fold(0.0, f64::max);
    if max == 0.0 {
        if num_samples == 0 {
            return Ok(vec![0; weights.len()]);
        }
        return Err(Error::Value(format!(
            "weights must not all be 0 for num_samples = {num_samples}"
        )));
    }
    let scaled: Vec<u128> = weights
        .iter()
        .map(|&w| (w / max * (1u64 << 52) as f64).round_ties_even() as u128)
        .collect();
    let total: u128 = scaled.iter().sum();
    let s = u128::from(num_samples);
    let mut quotas: Vec<u64> = scaled.iter().map(|&w| (s * w / total) as u64).collect();
    let given: u64 = quotas.iter().sum();
    let mut by_remainder: Vec<usize> = (0..weights.len()).collect();
    by_remainder.sort_by_key(|&k| (std::cmp::Reverse(s * scaled[k] % total), k));
    for &k in by_remainder.iter().take((num_samples - given) as usize) {
        quotas[k] += 1;
    }
    Ok(quotas)
}

/// A keyed permutation of one step's positions `[start, start + len)`,
/// applied before dealing so that every rank sees the mix: O(1) per
/// position.
#[derive(Debug, Clone)]
pub struct StepShuffle {
    start: u64,
    cipher: Cipher,
}

impl StepShuffle {
    /// The shuffle of step `step` of epoch `epoch`, covering positions
    /// `[start, start + len)`.
    pub fn new(seed: u64, epoch: u64, step: u64, start: u64, len: u64) -> Result<StepShuffle> {
        if start.checked_add(len).is_none_or(|end| end > MAX_SAMPLES) {
            return Err(Error::Overflow(format!(
                "the step's positions [{start}, {start} + {len}) must end by 2**63 - 1"
            )));
        }
        Ok(StepShuffle::of_plan_step(seed, epoch, step, start, len))
    }

    /// [`StepShuffle::new`] for a step of a plan, whose positions end by
    /// 2**63 - 1 already.
    pub(crate) fn of_plan_step(
        seed: u64,
        epoch: u64,
        step: u64,
        start: u64,
        len: u64,
    ) -> StepShuffle {
        StepShuffle {
            start,
            cipher: Cipher::new(len, derive(seed, epoch, STEP_DOMAIN, step)),
        }
    }

    /// The epoch position that the step's position `position` shows.
    pub fn apply(&self, position: u64) -> Result<u64> {
        let (start, len) = (self.start, self.cipher.len());
        if position < start || position - start >= len {
            return Err(Error::Index(format!(
                "position must be in the step's [{start}, {}), got {position}",
                start + len
            )));
        }
        Ok(start + self.cipher.apply(position - start))
    }

    /// [`StepShuffle::apply`] on every position, in place.
    pub fn map_in_place(&self, positions: &mut [i64]) -> Result<()> {
        let (start, len) = (self.start, self.cipher.len());
        if let Some(i) = positions
            .iter()
            .position(|&p| p < start as i64 || (p as u64 - start) >= len)
        {
            return Err(Error::Index(format!(
                "positions[{i}] must be in the step's [{start}, {}), got {}",
                start + len,
                positions[i]
            )));
        }
        self.map_slice(positions);
        Ok(())
    }

    /// [`StepShuffle::map_in_place`] for positions known to lie in the step.
    pub(crate) fn map_slice(&self, positions: &mut [i64]) {
        let start = self.start as i64;
        positions.iter_mut().for_each(|p| *p -= start);
        self.cipher.apply_in_place(positions);
        positions.iter_mut().for_each(|p| *p += start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::space::mixture_epoch::MAP_BATCH;

    #[test]
    fn weights_share_by_largest_remainder() {
        assert_eq!(
            quotas_from_weights(&[1.0, 1.0, 2.0], 10).unwrap(),
            vec![3, 2, 5]
        );
        assert_eq!(
            quotas_from_weights(&[1.0, 2.0, 3.0], 6_000_000_000).unwrap(),
            vec![1_000_000_000, 2_000_000_000, 3_000_000_000]
        );
        assert_eq!(quotas_from_weights(&[0.0, 1.0], 7).unwrap(), vec![0, 7]);
        assert_eq!(quotas_from_weights(&[1.0; 3], 2).unwrap(), vec![1, 1, 0]);
        let err = quotas_from_weights(&[1.0, -1.0], 5)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("weights[1] must be a finite number >= 0"),
            "{err}"
        );
        assert!(quotas_from_weights(&[f64::NAN], 5).is_err());
        assert!(quotas_from_weights(&[0.0, 0.0], 5).is_err());
        assert_eq!(quotas_from_weights(&[0.0], 0).unwrap(), vec![0]);
    }

    #[test]
    fn repeat_rounds_half_to_even() {
        assert_eq!(
            quotas_from_repeat(&[5, 3, 10], &[0.5, 0.5, 1.25]).unwrap(),
            vec![2, 2, 12]
        );
        assert!(quotas_from_repeat(&[5], &[-1.0]).is_err());
        assert!(quotas_from_repeat(&[1 << 62], &[4.0]).is_err());
    }

    #[test]
    fn concatenated_sources_are_offset_and_each_pass_is_a_permutation() {
        let mix = Mixture::from_sizes(&[3, 0, 5], 9).unwrap();
        let epoch = mix.epoch(&[6, 0, 5], &[0, 0, 0]).unwrap();
        let mut out = vec![0; 11];
        epoch.fill(&(0..11).collect::<Vec<_>>(), &mut out).unwrap();
        let mut counts = [0; 8];
        out.iter().for_each(|&id| counts[id as usize] += 1);
        assert_eq!(counts, [2, 2, 2, 1, 1, 1, 1, 1]);
        for j in 0..11 {
            assert_eq!(epoch.get(j).unwrap() as i64, out[j as usize]);
        }
        assert_eq!(epoch.consumed_after(), vec![6, 0, 5]);
        let err = mix.epoch(&[1, 1, 1], &[0, 0, 0]).unwrap_err().to_string();
        assert!(
            err.contains("quotas[1] must be 0: source 1 is empty"),
            "{err}"
        );
        assert!(mix.epoch(&[1, 0], &[0, 0, 0]).is_err());
        assert!(matches!(epoch.get(11), Err(Error::Index(_))));
    }

    /// Checks `map_slice` on every position, then on scattered positions,
    /// against `get` one position at a time.
    fn check_batched_against_get(epoch: &MixtureEpoch, what: &str) {
        let len = epoch.len();
        let mut js: Vec<i64> = (0..len as i64).collect();
        // Scattered positions, as a plan's step shuffle leaves them.
        js.extend((0..3 * MAP_BATCH as u64 + 17).map(|i| {
            let x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
            ((x ^ (x >> 29)) % len) as i64
        }));
        let mut got = js.clone();
        epoch.map_slice(&mut got).unwrap();
        for (&j, &id) in js.iter().zip(&got) {
            assert_eq!(
                epoch.get(j as u64).unwrap() as i64,
                id,
                "{what}, position {j}"
            );
        }
    }

    #[test]
    fn batched_lookups_agree_with_one_position_at_a_time() {
        let cases: [(&[u64], &[u64], &[u64]); 8] = [
            // One pass per source per batch; several passes; more passes
            // than elements (a source of one or two samples repeated).
            (
                &[60_000, 30_000, 10_000],
                &[50_000, 30_000, 10_000],
                &[0, 0, 0],
            ),
            (&[700, 5, 30_000], &[9_000, 20_000, 3_000], &[0, 3, 29_999]),
            (&[1, 2, 50_000], &[20_000, 20_000, 1], &[0, 1, 7]),
            (&[3, 0, 5], &[6, 0, 5], &[0, 0, 0]),
            (&[40_000], &[100_000], &[39_990]),
            (
                &[10, 20, 30, 40, 50, 60, 70],
                &[1, 0, 900, 2, 0, 5_000, 13],
                &[5, 0, 1, 2, 3, 4, 69],
            ),
            // More sources than are grouped by compaction.
            (
                &[9, 100, 3_000, 7, 1, 50, 2_000, 640, 33, 5_000],
                &[90, 0, 3_000, 700, 5, 50, 1_999, 6_400, 1, 4_321],
                &[0, 0, 1, 2, 0, 49, 1_000, 3, 0, 4_999],
            ),
            // Sources and ids beyond 2**32.
            (
                &[1 << 40, 1 << 41],
                &[9_000, 11_000],
                &[(1 << 40) - 4_000, 7],
            ),
        ];
        for (sizes, quotas, consumed) in cases {
            let mix = Mixture::from_sizes(sizes, 11).unwrap();
            let epoch = mix.epoch(quotas, consumed).unwrap();
            check_batched_against_get(&epoch, &format!("sizes {sizes:?}"));
        }
        // Selections (a mask, ranges, a random split part) as sources.
        let n = 50_000;
        let mask: Vec<bool> = (0..n).map(|i| i % 7 == 2 || i % 11 == 0).collect();
        let sources = vec![
            Selection::from_mask(&mask).unwrap(),
            Selection::from_ranges(&[(5, 900), (20_000, 26_000)], n as u64).unwrap(),
            crate::space::random_split(n as u64, &[30_000, 20_000], 3)
                .unwrap()
                .remove(1),
        ];
        let mix = Mixture::from_selections(sources, 5).unwrap();
        let epoch = mix
            .epoch(&[12_000, 30_000, 9_000], &[100, 0, 19_999])
            .unwrap();
        check_batched_against_get(&epoch, "selections");
    }

    #[test]
    fn the_step_shuffle_permutes_the_step_only() {
        let sh = StepShuffle::new(1, 2, 3, 100, 37).unwrap();
        let mut ps: Vec<i64> = (100..137).collect();
        sh.map_in_place(&mut ps).unwrap();
        for (i, &p) in ps.iter().enumerate() {
            assert_eq!(sh.apply(100 + i as u64).unwrap() as i64, p);
        }
        ps.sort_unstable();
        assert_eq!(ps, (100..137).collect::<Vec<i64>>());
        assert!(sh.apply(137).is_err() && sh.apply(99).is_err());
        assert!(sh.map_in_place(&mut [99]).is_err());
    }
}
