//! Mixture schedules: a mixture's quotas changing at given epochs (phases).
//!
//! Phase `j` starts at epoch `e_j` (`e_0 = 0`, strictly increasing) and
//! gives every epoch until the next phase the quotas `q_j`. Every phase
//! keeps the epoch's length `S = sum_k q_{j,k}`, so a plan's steps and a
//! sampler's length do not change with the phase.
//!
//! Each source's sequence of keyed passes (see the mixture module) does
//! not know the quotas: epoch `e` takes the next `q_k(e)` elements from
//! `consumed_k(e) = sum_{e' < e} q_k(e')`, so the passes continue across
//! phases. Within a pass no sample is lost or repeated, each epoch's
//! per-source counts are exactly its phase's quotas, and the stratified
//! bound of each epoch is the interleave's, inside every phase.
//! `consumed_k(e)` is a closed form over the phases before `e` (O(phases)),
//! so an epoch of any phase is computed without the ones before it, and a
//! resumed run needs nothing but the epoch number (or its state's
//! `consumed`, constant-size per source).

use crate::error::{Error, Result};

/// The quotas of every epoch: phases starting at given epochs.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Schedule {
    /// `(start_epoch, quotas)`, the first at epoch 0, starts increasing.
    phases: Vec<(u64, Vec<u64>)>,
}

impl Schedule {
    /// A checked schedule: the first phase starts at epoch 0, the starts
    /// increase, every phase has one quota per source and the same sum.
    pub fn new(phases: Vec<(u64, Vec<u64>)>) -> Result<Schedule> {
        let Some((first_start, first)) = phases.first() else {
            return Err(Error::Value("phases must hold at least one phase".into()));
        };
        if *first_start != 0 {
            return Err(Error::Value(format!(
                "phases[0] must start at epoch 0, got {first_start}"
            )));
        }
        let total: u128 = first.iter().map(|&q| u128::from(q)).sum();
        for (j, window) in phases.windows(2).enumerate() {
            let ((a, _), (b, quotas)) = (&window[0], &window[1]);
            if b <= a {
                return Err(Error::Value(format!(
                    "phases must start at increasing epochs: phases[{}] starts at {b}, after {a}",
                    j + 1
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
        Ok(Schedule { phases })
    }

    /// The phases: `(start_epoch, quotas)`.
    pub fn phases(&self) -> &[(u64, Vec<u64>)] {
        &self.phases
    }

    /// The phase of `epoch` (its index).
    pub fn phase_of(&self, epoch: u64) -> usize {
        self.phases.partition_point(|(start, _)| *start <= epoch) - 1
    }

    /// The quotas of `epoch`.
    pub fn quotas(&self, epoch: u64) -> &[u64] {
        &self.phases[self.phase_of(epoch)].1
    }

    /// Each source's elements taken by the epochs before `epoch`.
    pub fn consumed(&self, epoch: u64) -> Result<Vec<u64>> {
        let k = self.phases[0].1.len();
        let mut consumed = vec![0u128; k];
        for (j, (start, quotas)) in self.phases.iter().enumerate() {
            if *start >= epoch {
                break;
            }
            let end = self
                .phases
                .get(j + 1)
                .map_or(epoch, |(s, _)| (*s).min(epoch));
            let epochs = u128::from(end - start);
            for (c, &q) in consumed.iter_mut().zip(quotas) {
                *c += epochs * u128::from(q);
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
        let s = Schedule::new(vec![(0, vec![2, 2]), (3, vec![3, 1]), (4, vec![1, 3])]).unwrap();
        let mut running = [0u64, 0];
        for e in 0..9u64 {
            assert_eq!(s.consumed(e).unwrap(), running.to_vec(), "epoch {e}");
            let q = s.quotas(e);
            running[0] += q[0];
            running[1] += q[1];
        }
        assert_eq!(s.quotas(3), &[3, 1]);
        assert_eq!(s.quotas(u64::MAX), &[1, 3]);
        let big = Schedule::new(vec![(0, vec![u64::MAX])]).unwrap();
        assert!(matches!(big.consumed(3), Err(Error::Overflow(_))));
    }

    #[test]
    fn bad_schedules_are_refused_naming_the_phase() {
        let err = |p: Vec<(u64, Vec<u64>)>| Schedule::new(p).unwrap_err().to_string();
        assert!(err(vec![]).contains("at least one"));
        assert!(err(vec![(1, vec![1])]).starts_with("phases[0] must start at epoch 0"));
        assert!(err(vec![(0, vec![1]), (0, vec![1])]).contains("increasing"));
        assert!(err(vec![(0, vec![1, 1]), (2, vec![2])]).contains("one quota per source"));
        assert!(err(vec![(0, vec![1, 1]), (2, vec![2, 1])]).contains("length 2"));
    }
}
