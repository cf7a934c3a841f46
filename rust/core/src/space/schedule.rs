//! Mixture schedules: a mixture's quotas changing at given epochs, or at a
//! given position inside an epoch (phases).
//!
//! Phase `j` starts at `(e_j, p_j)`: epoch `e_j`, position `p_j` of it
//! (`(0, 0)` first, strictly increasing, `p_j` below the epoch's length
//! `S`), and holds until the next phase starts. Every phase keeps the
//! epoch's length `S = sum_k q_{j,k}`, so a plan's steps and a sampler's
//! length do not change with the phase; a phase that starts at step `t` of
//! a plan of global batch `G` starts at position `t * G`.
//!
//! An epoch is cut where a phase starts inside it: into segments, each
//! under the phase that covers it. A segment of all `S` positions takes its
//! phase's quotas; a shorter one of `L` positions takes them apportioned to
//! `L` ([`apportion`]: `floor(q_k * L / S)` each, the rest by largest
//! remainder, ties to the lowest source), so its counts are exact and its
//! own interleave stratifies it.
//!
//! Each source's sequence of keyed passes (see the mixture module) does
//! not know the quotas: a segment takes the next elements of it, so the
//! passes continue across phases. Within a pass no sample is lost or
//! repeated, each segment's per-source counts are its quotas exactly, and
//! the stratified bound of each segment is the interleave's, inside every
//! phase. `consumed_k(e)` is a closed form over the phases before `e`
//! (O(phases)), so an epoch of any phase is computed without the ones
//! before it, and a resumed run needs nothing but the epoch number (or its
//! state's `consumed`, constant-size per source).

use crate::error::{Error, Result};

/// Where a phase starts: an epoch and a position inside it.
pub type Start = (u64, u64);

/// The quotas of every epoch: phases starting at given epochs (and
/// positions).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// `(start, quotas)`, the first at `(0, 0)`, starts increasing.
    phases: Vec<(Start, Vec<u64>)>,
    /// The epoch's length: every phase's quotas sum to it.
    len: u64,
}

/// `quotas` (summing to `S`) apportioned to `len` positions: `floor(q_k *
/// len / S)` each, then one more to the largest remainders `q_k * len mod
/// S` (ties to the lowest `k`) until they sum to `len`. `len == S` gives
/// `quotas`.
pub fn apportion(quotas: &[u64], len: u64) -> Vec<u64> {
    let total: u128 = quotas.iter().map(|&q| u128::from(q)).sum();
    if total == 0 || u128::from(len) == total {
        return quotas.to_vec();
    }
    let scaled = |q: u64| u128::from(q) * u128::from(len);
    let mut out: Vec<u64> = quotas.iter().map(|&q| (scaled(q) / total) as u64).collect();
    let given: u64 = out.iter().sum();
    let mut order: Vec<usize> = (0..quotas.len()).collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(scaled(quotas[k]) % total), k));
    for &k in order.iter().take((len - given) as usize) {
        out[k] += 1;
    }
    out
}

impl Schedule {
    /// A checked schedule: the first phase starts at `(0, 0)`, the starts
    /// increase and lie inside an epoch, every phase has one quota per
    /// source and the same sum.
    pub fn new(phases: Vec<(Start, Vec<u64>)>) -> Result<Schedule> {
        let Some((first_start, first)) = phases.first() else {
            return Err(Error::Value("phases must hold at least one phase".into()));
        };
        if *first_start != (0, 0) {
            return Err(Error::Value(format!(
                "phases[0] must start at epoch 0, got {first_start:?}"
            )));
        }
        let total: u128 = first.iter().map(|&q| u128::from(q)).sum();
        let len = u64::try_from(total)
            .map_err(|_| Error::Overflow("an epoch's quotas must sum below 2**64".into()))?;
        for (j, window) in phases.windows(2).enumerate() {
            let ((a, _), (b, quotas)) = (&window[0], &window[1]);
            if b <= a {
                return Err(Error::Value(format!(
                    "phases must start at increasing epochs (and positions): phases[{}] \
                     starts at {b:?}, after {a:?}",
                    j + 1
                )));
            }
            if b.1 > 0 && b.1 >= len {
                return Err(Error::Value(format!(
                    "phases[{}] must start inside its epoch: position {} of an epoch of {len}",
                    j + 1,
                    b.1
                )));
            }
            if quotas.len() != first.len() {
                return Err(Error::Value(format!(
                    "phases[{}] must have one quota per source ({}), got {}",
                    j + 1,
                    first.len(),
                    quotas.len()
                )));
            }
            let sum: u128 = quotas.iter().map(|&q| u128::from(q)).sum();
            if sum != total {
                return Err(Error::Value(format!(
                    "phases[{}] must keep the epoch's length {total} (the sum of its quotas), \
                     got {sum}",
                    j + 1
                )));
            }
        }
        Ok(Schedule { phases, len })
    }

    /// The phases: `(start, quotas)`.
    pub fn phases(&self) -> &[(Start, Vec<u64>)] {
        &self.phases
    }

    /// The phase covering position `position` of `epoch` (its index).
    fn phase_at(&self, epoch: u64, position: u64) -> usize {
        self.phases
            .partition_point(|(start, _)| *start <= (epoch, position))
            - 1
    }

    /// The segments of `epoch`: each one's quotas, in order (one unless a
    /// phase starts inside the epoch).
    pub fn segments(&self, epoch: u64) -> Vec<Vec<u64>> {
        let mut cuts: Vec<u64> = vec![0];
        cuts.extend(
            self.phases
                .iter()
                .filter(|((e, p), _)| *e == epoch && *p > 0)
                .map(|((_, p), _)| *p),
        );
        cuts.push(self.len);
        cuts.windows(2)
            .map(|w| {
                let quotas = &self.phases[self.phase_at(epoch, w[0])].1;
                apportion(quotas, w[1] - w[0])
            })
            .collect()
    }

    /// The quotas of `epoch`: each source's positions in it.
    pub fn quotas(&self, epoch: u64) -> Vec<u64> {
        let mut sum = vec![0u64; self.phases[0].1.len()];
        for quotas in self.segments(epoch) {
            sum.iter_mut().zip(quotas).for_each(|(s, q)| *s += q);
        }
        sum
    }

    /// Each source's elements taken by the epochs before `epoch`.
    pub fn consumed(&self, epoch: u64) -> Result<Vec<u64>> {
        let k = self.phases[0].1.len();
        let mut consumed = vec![0u128; k];
        let mut add = |quotas: &[u64], times: u128| {
            for (c, &q) in consumed.iter_mut().zip(quotas) {
                *c += times * u128::from(q);
            }
        };
        for (j, ((a_epoch, a_pos), quotas)) in self.phases.iter().enumerate() {
            // The phase runs to the next one's start, cut at epoch `epoch`.
            let next = self.phases.get(j + 1).map_or((epoch, 0), |(s, _)| *s);
            let (b_epoch, b_pos) = next.min((epoch, 0));
            if (*a_epoch, *a_pos) >= (b_epoch, b_pos) {
                break;
            }
            if *a_epoch == b_epoch {
                add(&apportion(quotas, b_pos - a_pos), 1);
                continue;
            }
            add(&apportion(quotas, self.len - a_pos), 1);
            add(quotas, u128::from(b_epoch - a_epoch - 1));
            if b_pos > 0 {
                add(&apportion(quotas, b_pos), 1);
            }
        }
        consumed
            .into_iter()
            .enumerate()
            .map(|(k, c)| {
                u64::try_from(c).map_err(|_| {
                    Error::Overflow(format!(
                        "source {k}'s samples before epoch {epoch} must be below 2**64, got {c}"
                    ))
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn consumed_sums_the_quotas_of_the_epochs_before() {
        let s = Schedule::new(vec![
            ((0, 0), vec![2, 2]),
            ((3, 0), vec![3, 1]),
            ((4, 0), vec![1, 3]),
        ])
        .unwrap();
        let mut running = [0u64, 0];
        for e in 0..9u64 {
            assert_eq!(s.consumed(e).unwrap(), running.to_vec(), "epoch {e}");
            let q = s.quotas(e);
            running[0] += q[0];
            running[1] += q[1];
        }
        assert_eq!(s.quotas(3), &[3, 1]);
        assert_eq!(s.quotas(u64::MAX), &[1, 3]);
        let big = Schedule::new(vec![((0, 0), vec![u64::MAX])]).unwrap();
        assert!(matches!(big.consumed(3), Err(Error::Overflow(_))));
    }

    #[test]
    fn phases_inside_epochs_cut_them_into_apportioned_segments() {
        // 1:1, then 2:1 from position 40 of epoch 1, then 1:3 from epoch 3,
        // then 1:1 again at position 10 and 1:0 at 70 of epoch 3.
        let s = Schedule::new(vec![
            ((0, 0), vec![50, 50]),
            ((1, 40), vec![66, 34]),
            ((3, 0), vec![25, 75]),
            ((3, 10), vec![50, 50]),
            ((3, 70), vec![100, 0]),
        ])
        .unwrap();
        assert_eq!(s.segments(0), vec![vec![50, 50]]);
        assert_eq!(s.segments(1), vec![vec![20, 20], vec![40, 20]]);
        assert_eq!(s.segments(2), vec![vec![66, 34]]);
        assert_eq!(s.segments(3), vec![vec![3, 7], vec![30, 30], vec![30, 0]]);
        assert_eq!(s.segments(4), vec![vec![100, 0]]);
        let mut running = [0u64, 0];
        for e in 0..7u64 {
            assert_eq!(s.consumed(e).unwrap(), running.to_vec(), "epoch {e}");
            for seg in s.segments(e) {
                assert_eq!(seg.iter().sum::<u64>(), seg.iter().sum::<u64>());
                running[0] += seg[0];
                running[1] += seg[1];
            }
            assert_eq!(
                s.segments(e)
                    .iter()
                    .map(|q| q.iter().sum::<u64>())
                    .sum::<u64>(),
                100
            );
        }
    }

    #[test]
    fn apportion_is_exact_and_largest_remainder() {
        assert_eq!(apportion(&[50, 50], 40), vec![20, 20]);
        assert_eq!(apportion(&[66, 34], 60), vec![40, 20]);
        assert_eq!(apportion(&[1, 1, 1], 2), vec![1, 1, 0]);
        assert_eq!(apportion(&[7, 3], 10), vec![7, 3]);
        assert_eq!(apportion(&[0, 5], 3), vec![0, 3]);
    }

    #[test]
    fn bad_schedules_are_refused_naming_the_phase() {
        let err = |p: Vec<(Start, Vec<u64>)>| Schedule::new(p).unwrap_err().to_string();
        assert!(err(vec![]).contains("at least one"));
        assert!(err(vec![((1, 0), vec![1])]).starts_with("phases[0] must start at epoch 0"));
        assert!(err(vec![((0, 0), vec![1]), ((0, 0), vec![1])]).contains("increasing"));
        assert!(err(vec![((0, 0), vec![1, 1]), ((2, 0), vec![2])]).contains("one quota per source"));
        assert!(err(vec![((0, 0), vec![1, 1]), ((2, 0), vec![2, 1])]).contains("length 2"));
        assert!(err(vec![((0, 0), vec![1, 1]), ((2, 2), vec![1, 1])]).contains("inside its epoch"));
    }
}
