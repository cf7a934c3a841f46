//! Sorted, disjoint ranges of ids: the storage of range selections.
//!
//! The ranges are kept normalised (non-empty, sorted, and with no two
//! touching: `[0, 3)` and `[3, 5)` are stored as `[0, 5)`), so two range
//! selections with the same ids are equal. Prefix counts give the `j`-th id
//! by a binary search, O(log ranges); the set operations are merges,
//! O(ranges of both).

use crate::buffer::vec_with_capacity;
use crate::error::{Error, Result};
use crate::order::MAX_SAMPLES;

/// Ids `start..stop` of every range, in ascending order, inside a store of
/// `num_samples` ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ranges {
    num_samples: u64,
    ranges: Vec<(u64, u64)>,
    /// Ids in the ranges before each range.
    before: Vec<u64>,
    len: u64,
}

/// Checks a store size.
pub(crate) fn check_num_samples(num_samples: u64) -> Result<()> {
    if num_samples > MAX_SAMPLES {
        return Err(Error::Overflow(format!(
            "num_samples must be in [0, 2**63 - 1], got {num_samples}"
        )));
    }
    Ok(())
}

impl Ranges {
    /// The ranges `[start, stop)` of a store of `num_samples` ids: sorted,
    /// disjoint (touching is fine) and inside `[0, num_samples]`; empty ranges
    /// are allowed and hold nothing.
    pub fn new(ranges: &[(u64, u64)], num_samples: u64) -> Result<Ranges> {
        check_num_samples(num_samples)?;
        let mut kept: Vec<(u64, u64)> = vec_with_capacity(ranges.len(), "the ranges")?;
        // The index of the last non-empty range, for messages.
        let mut last: Option<usize> = None;
        for (i, &(start, stop)) in ranges.iter().enumerate() {
            if stop < start {
                return Err(Error::Value(format!(
                    "ranges[{i}] = ({start}, {stop}) must have start <= stop"
                )));
            }
            if stop > num_samples {
                return Err(Error::Value(format!(
                    "ranges[{i}] = ({start}, {stop}) must lie in [0, {num_samples}] \
                     (num_samples = {num_samples})"
                )));
            }
            if start == stop {
                continue;
            }
            if let (Some(p), Some(&(prev_start, prev_stop))) = (last, kept.last()) {
                if start < prev_start {
                    return Err(Error::Value(format!(
                        "ranges[{i}] = ({start}, {stop}) starts before ranges[{p}]: \
                         ranges must be sorted by start"
                    )));
                }
                if start < prev_stop {
                    return Err(Error::Value(format!(
                        "ranges[{i}] = ({start}, {stop}) overlaps ranges[{p}] = \
                         ({prev_start}, {prev_stop}): ranges must be disjoint"
                    )));
                }
            }
            last = Some(i);
            kept.push((start, stop));
        }
        Ranges::from_sorted(kept, num_samples)
    }

    /// Ranges from sorted, disjoint, possibly empty or touching ranges
    /// inside the store (the caller's contract); an error only for want of
    /// memory (every buffer here is reserved fallibly, at its most).
    pub(crate) fn from_sorted(ranges: Vec<(u64, u64)>, num_samples: u64) -> Result<Ranges> {
        let mut merged: Vec<(u64, u64)> = vec_with_capacity(ranges.len(), "the ranges")?;
        for (start, stop) in ranges {
            if start == stop {
                continue;
            }
            match merged.last_mut() {
                Some(prev) if prev.1 == start => prev.1 = stop,
                _ => merged.push((start, stop)),
            }
        }
        let mut before = vec_with_capacity(merged.len(), "the ranges")?;
        let mut len = 0u64;
        for &(start, stop) in &merged {
            before.push(len);
            // Disjoint ranges inside the store: the sum stays <= num_samples.
            len += stop - start;
        }
        Ok(Ranges {
            num_samples,
            ranges: merged,
            before,
            len,
        })
    }

    /// The store's size.
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// The ids held.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// True when no id is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The normalised ranges (non-empty, sorted, not touching).
    pub fn ranges(&self) -> &[(u64, u64)] {
        &self.ranges
    }

    /// The number of ids in the ranges before range `k`.
    pub fn before(&self, k: usize) -> u64 {
        self.before[k]
    }

    /// The `j`-th id; `j < len()` is the caller's contract.
    #[inline]
    pub fn id_at(&self, j: u64) -> u64 {
        debug_assert!(j < self.len);
        let r = self.before.partition_point(|&b| b <= j) - 1;
        self.ranges[r].0 + (j - self.before[r])
    }

    /// The ids in both.
    pub fn intersection(&self, other: &Ranges) -> Result<Ranges> {
        let (a, b) = (&self.ranges, &other.ranges);
        let (mut i, mut k) = (0, 0);
        let mut out = vec_with_capacity(a.len() + b.len(), "the ranges")?;
        while i < a.len() && k < b.len() {
            let start = a[i].0.max(b[k].0);
            let stop = a[i].1.min(b[k].1);
            if start < stop {
                out.push((start, stop));
            }
            if a[i].1 < b[k].1 {
                i += 1;
            } else {
                k += 1;
            }
        }
        Ranges::from_sorted(out, self.num_samples)
    }

    /// The ids in either.
    pub fn union(&self, other: &Ranges) -> Result<Ranges> {
        let (a, b) = (&self.ranges, &other.ranges);
        let (mut i, mut k) = (0, 0);
        let mut out: Vec<(u64, u64)> = vec_with_capacity(a.len() + b.len(), "the ranges")?;
        while i < a.len() || k < b.len() {
            let next = if k == b.len() || (i < a.len() && a[i].0 <= b[k].0) {
                i += 1;
                a[i - 1]
            } else {
                k += 1;
                b[k - 1]
            };
            match out.last_mut() {
                Some(prev) if next.0 <= prev.1 => prev.1 = prev.1.max(next.1),
                _ => out.push(next),
            }
        }
        Ranges::from_sorted(out, self.num_samples)
    }

    /// The ids in `self` and not in `other`.
    pub fn difference(&self, other: &Ranges) -> Result<Ranges> {
        let b = &other.ranges;
        let mut k = 0;
        // Each range of `other` splits one of `self` in two at most.
        let mut out = vec_with_capacity(self.ranges.len() + b.len(), "the ranges")?;
        for &(start, stop) in self.ranges.iter() {
            let mut from = start;
            // Skip the ranges of `other` that end before this one starts.
            while k < b.len() && b[k].1 <= from {
                k += 1;
            }
            let mut t = k;
            while t < b.len() && b[t].0 < stop {
                if b[t].0 > from {
                    out.push((from, b[t].0));
                }
                from = from.max(b[t].1);
                t += 1;
            }
            if from < stop {
                out.push((from, stop));
            }
        }
        Ranges::from_sorted(out, self.num_samples)
    }

    /// The ids of the store not held.
    pub fn complement(&self) -> Result<Ranges> {
        let mut out = vec_with_capacity(self.ranges.len() + 1, "the ranges")?;
        let mut from = 0;
        for &(start, stop) in self.ranges.iter() {
            out.push((from, start));
            from = stop;
        }
        out.push((from, self.num_samples));
        Ranges::from_sorted(out, self.num_samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(r: &Ranges) -> Vec<u64> {
        (0..r.len()).map(|j| r.id_at(j)).collect()
    }

    #[test]
    fn touching_ranges_merge_and_empty_ones_vanish() {
        let r = Ranges::new(&[(0, 3), (3, 5), (5, 5), (7, 9)], 10).unwrap();
        assert_eq!(r.ranges(), &[(0, 5), (7, 9)]);
        assert_eq!(ids(&r), vec![0, 1, 2, 3, 4, 7, 8]);
    }

    #[test]
    fn bad_ranges_are_refused_with_their_index() {
        let msg = |r: &[(u64, u64)]| Ranges::new(r, 10).unwrap_err().to_string();
        assert!(msg(&[(0, 4), (3, 6)]).contains("ranges[1] = (3, 6) overlaps ranges[0]"));
        assert!(msg(&[(5, 6), (1, 2)]).contains("ranges[1] = (1, 2) starts before ranges[0]"));
        assert!(msg(&[(0, 11)]).contains("ranges[0] = (0, 11) must lie in [0, 10]"));
        assert!(msg(&[(4, 3)]).contains("ranges[0] = (4, 3) must have start <= stop"));
        assert!(Ranges::new(&[], u64::MAX).is_err());
    }

    #[test]
    fn set_operations_match_a_scan() {
        let n = 20;
        let a = Ranges::new(&[(0, 4), (6, 9), (12, 20)], n).unwrap();
        let b = Ranges::new(&[(2, 7), (8, 13), (19, 20)], n).unwrap();
        let has = |r: &Ranges, x: u64| ids(r).contains(&x);
        let pick = |f: &dyn Fn(u64) -> bool| (0..n).filter(|&x| f(x)).collect::<Vec<_>>();
        assert_eq!(
            ids(&a.intersection(&b).unwrap()),
            pick(&|x| has(&a, x) && has(&b, x))
        );
        assert_eq!(
            ids(&a.union(&b).unwrap()),
            pick(&|x| has(&a, x) || has(&b, x))
        );
        assert_eq!(
            ids(&a.difference(&b).unwrap()),
            pick(&|x| has(&a, x) && !has(&b, x))
        );
        assert_eq!(ids(&a.complement().unwrap()), pick(&|x| !has(&a, x)));
    }
}
