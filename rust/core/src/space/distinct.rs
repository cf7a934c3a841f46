//! Whether the ids of an array are distinct, in bounded memory.
//!
//! An index selection keeps its caller's array without a copy, so its check
//! must not copy it either: a 10 GiB array sorted in a copy needs 20 GiB.
//! The ids are checked one value range at a time. A histogram of the ids
//! by their top bits (at most 2^16 buckets) groups consecutive buckets into
//! passes, each within a memory budget: a pass over a range whose span is
//! small beside its count marks a bitmap of the span (one bit an id), one
//! whose count is small beside its span sorts a buffer of its ids. Each pass
//! reads the array once, in order. The budget is an eighth of the array's
//! size, at least [`MIN_BUDGET`] bytes, so the check takes about nine reads
//! of the array at most and an eighth of its memory (a single bucket whose
//! ids fit in neither is sorted alone, in a buffer of its ids).

use crate::buffer::vec_with_capacity;
use crate::{Error, Result};

/// The smallest memory budget of a check, in bytes.
pub(crate) const MIN_BUDGET: u64 = 64 << 20;

/// Buckets of the histogram (2^16: half a megabyte of counts).
const BUCKET_BITS: u32 = 16;

/// The index of the first id of `ids` equal to an earlier one, or None when
/// all are distinct. Every id must be in `[0, num_samples)` (checked by the
/// caller). Takes at most `max(budget, one bucket's ids)` bytes.
pub(crate) fn first_repeat(ids: &[i64], num_samples: u64, budget: u64) -> Result<Option<usize>> {
    if ids.len() < 2 {
        return Ok(None);
    }
    if num_samples / 8 <= budget {
        // The whole store's bitmap fits: one pass.
        return Ok(repeat_by_bitmap(ids, 0, num_samples)?.map(|v| second_occurrence(ids, v)));
    }
    let bits = 64 - num_samples.saturating_sub(1).leading_zeros();
    let shift = bits.saturating_sub(BUCKET_BITS);
    let buckets = ((num_samples.saturating_sub(1) >> shift) + 1) as usize;
    let mut counts = vec![0u64; buckets];
    for &id in ids {
        counts[(id as u64 >> shift) as usize] += 1;
    }
    let mut repeated: Option<i64> = None;
    let mut first = 0;
    while first < buckets {
        // The widest run of buckets whose check fits in the budget (one
        // bucket at least).
        let (mut last, mut count) = (first + 1, counts[first]);
        while last < buckets {
            let span = ((last + 1 - first) as u64) << shift;
            if cost(span, count + counts[last]) > budget {
                break;
            }
            count += counts[last];
            last += 1;
        }
        let lo = (first as u64) << shift;
        let hi = ((last as u64) << shift).min(num_samples);
        if count > 1 {
            let found = if span_is_cheaper(hi - lo, count) {
                repeat_by_bitmap(ids, lo, hi)?
            } else {
                repeat_by_sorting(ids, lo, hi, count)?
            };
            // The smallest repeated value of the first range with one: the
            // same one a sorted copy of the whole array would find first.
            if found.is_some() {
                repeated = found;
                break;
            }
        }
        first = last;
    }
    Ok(repeated.map(|value| second_occurrence(ids, value)))
}

/// The bytes a range's check takes: a bitmap of its span or its ids sorted.
fn cost(span: u64, count: u64) -> u64 {
    (span / 8).min(count.saturating_mul(8))
}

fn span_is_cheaper(span: u64, count: u64) -> bool {
    span / 8 <= count.saturating_mul(8)
}

/// The smallest id in `[lo, hi)` that appears twice, marking a bitmap.
fn repeat_by_bitmap(ids: &[i64], lo: u64, hi: u64) -> Result<Option<i64>> {
    let words = (hi - lo).div_ceil(64);
    let mut seen = vec_with_capacity::<u64>(words as usize, "the bitmap of a distinctness check")?;
    seen.resize(words as usize, 0);
    let mut smallest: Option<i64> = None;
    for &id in ids {
        let v = id as u64;
        if v < lo || v >= hi {
            continue;
        }
        let (w, bit) = (((v - lo) / 64) as usize, 1u64 << ((v - lo) % 64));
        if seen[w] & bit != 0 {
            smallest = Some(smallest.map_or(id, |s| s.min(id)));
        }
        seen[w] |= bit;
    }
    Ok(smallest)
}

/// The smallest id in `[lo, hi)` that appears twice, sorting a buffer of the
/// `count` ids in the range.
fn repeat_by_sorting(ids: &[i64], lo: u64, hi: u64, count: u64) -> Result<Option<i64>> {
    let mut range = vec_with_capacity::<i64>(count as usize, "the ids of a distinctness check")?;
    range.extend(
        ids.iter()
            .copied()
            .filter(|&id| (lo..hi).contains(&(id as u64))),
    );
    range.sort_unstable();
    Ok(range.windows(2).find(|w| w[0] == w[1]).map(|w| w[0]))
}

/// The index of the second occurrence of `value` in `ids`.
fn second_occurrence(ids: &[i64], value: i64) -> usize {
    let mut at = ids.iter().enumerate().filter(|&(_, &v)| v == value);
    let first = at.next().map_or(0, |(i, _)| i);
    at.next().map_or(first, |(i, _)| i)
}

/// The check's budget for an array of `len` ids: an eighth of its bytes, at
/// least [`MIN_BUDGET`].
pub(crate) fn budget_for(len: usize) -> u64 {
    (len as u64).saturating_mul(8).div_ceil(8).max(MIN_BUDGET)
}

/// An error naming an id that appears earlier.
pub(crate) fn repeated_error(ids: &[i64], i: usize) -> Error {
    Error::Value(format!(
        "ids must be distinct: ids[{i}] = {} appears earlier",
        ids[i]
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn naive(ids: &[i64]) -> Option<usize> {
        let mut sorted = ids.to_vec();
        sorted.sort_unstable();
        let value = sorted.windows(2).find(|w| w[0] == w[1])?[0];
        Some(second_occurrence(ids, value))
    }

    #[test]
    fn every_budget_finds_the_repeat_a_sorted_copy_finds() {
        // Small budgets force many passes, both kinds of them, and the
        // lone-bucket fallback; each must name the same element.
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        for num_samples in [2u64, 3, 64, 65, 1000, 1 << 20, 1 << 40, (1 << 63) - 1] {
            for len in [2usize, 3, 10, 100, 3000] {
                for repeats in [0usize, 1, 3] {
                    let mut ids: Vec<i64> =
                        (0..len).map(|_| (next() % num_samples) as i64).collect();
                    ids.sort_unstable();
                    ids.dedup();
                    for k in 0..repeats.min(ids.len()) {
                        let j = (next() % ids.len() as u64) as usize;
                        let v = ids[k];
                        ids.insert(j, v);
                    }
                    for budget in [1u64, 8, 64, 1 << 10, MIN_BUDGET] {
                        assert_eq!(
                            first_repeat(&ids, num_samples, budget).unwrap(),
                            naive(&ids),
                            "N = {num_samples}, len = {len}, budget = {budget}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn the_budget_is_an_eighth_of_the_array_with_a_floor() {
        assert_eq!(budget_for(0), MIN_BUDGET);
        assert_eq!(budget_for(1 << 30), 1 << 30); // 8 GiB of ids: 1 GiB
    }
}
