//! Random splits: disjoint parts of a store with exact sizes, O(1) memory.
//!
//! Part `k` of a split of `[0, N)` into sizes `n_0, n_1, ...` is the
//! positions `[a_k, a_k + n_k)` (`a_k = n_0 + ... + n_{k-1}`) of one keyed
//! [`Cipher`] permutation of the store: the parts are disjoint, cover the
//! store, and each lookup is one cipher evaluation. The key is
//! `derive(seed, 0, Domain { kind: "split", label: "store" }, 0)`
//! ([`crate::keys::derive`]): it depends on the seed only, never on an
//! epoch, so a train/validation split stays fixed for the whole run, and it
//! is unrelated to the epochs' orders (whose kind is "cipher").

use crate::cipher::Cipher;
use crate::error::{Error, Result};
use crate::keys::{derive, Domain};
use crate::space::ranges::check_num_samples;
use crate::space::selection::{Permuted, Selection};

/// The key domain of random splits.
pub const SPLIT_DOMAIN: Domain<'static> = Domain {
    kind: "split",
    label: "store",
};

/// Splits a store of `num_samples` ids into disjoint parts of exactly
/// `sizes[k]` ids (summing to `num_samples`), by `seed` alone.
pub fn random_split(num_samples: u64, sizes: &[u64], seed: u64) -> Result<Vec<Selection>> {
    check_num_samples(num_samples)?;
    let total = sizes
        .iter()
        .try_fold(0u64, |acc, &s| acc.checked_add(s))
        .filter(|&t| t == num_samples);
    if total.is_none() {
        let shown: Vec<String> = sizes.iter().map(u64::to_string).collect();
        return Err(Error::Value(format!(
            "sizes must sum to num_samples = {num_samples}, got [{}]",
            shown.join(", ")
        )));
    }
    let cipher = Cipher::new(num_samples, derive(seed, 0, SPLIT_DOMAIN, 0));
    let mut start = 0u64;
    Ok(sizes
        .iter()
        .map(|&len| {
            let part = Permuted::new(cipher.clone(), seed, start, len);
            start += len;
            Selection::from_permuted(part, num_samples)
        })
        .collect())
}

/// The sizes of a split of `num_samples` ids by `fractions`, rounded as
/// `torch.utils.data.random_split` rounds them: `floor(fraction * N)` each
/// (in float64, `N` converted first), then the remainder one by one to the
/// parts in order, round robin. The fractions must be in `[0, 1]` and sum
/// (left to right in float64, as Python 3.11's `sum`) to 1 within a
/// relative 1e-9 (`math.isclose`) and not above 1.
pub fn split_sizes(num_samples: u64, fractions: &[f64]) -> Result<Vec<u64>> {
    check_num_samples(num_samples)?;
    for (i, &f) in fractions.iter().enumerate() {
        if !(0.0..=1.0).contains(&f) {
            return Err(Error::Value(format!(
                "fractions[{i}] must be in [0, 1], got {f}"
            )));
        }
    }
    let sum: f64 = fractions.iter().fold(0.0, |acc, &f| acc + f);
    // math.isclose(sum, 1): |sum - 1| <= 1e-9 * max(|sum|, 1).
    if (sum - 1.0).abs() > 1e-9 * sum.abs().max(1.0) || sum > 1.0 {
        return Err(Error::Value(format!(
            "fractions must sum to 1 (within 1e-9, not above), got a sum of {sum}"
        )));
    }
    let n = num_samples as f64;
    let mut sizes: Vec<u64> = fractions.iter().map(|&f| (n * f).floor() as u64).collect();
    let floors = sizes
        .iter()
        .try_fold(0u64, |acc, &s| acc.checked_add(s))
        .filter(|&t| t <= num_samples)
        .ok_or_else(|| {
            Error::Value(format!(
                "fractions round to more than num_samples = {num_samples} ids \
                 (float64 cannot hold num_samples exactly): give sizes instead"
            ))
        })?;
    let (k, rest) = (sizes.len() as u64, num_samples - floors);
    for (i, size) in sizes.iter_mut().enumerate() {
        *size += rest / k + u64::from((i as u64) < rest % k);
    }
    Ok(sizes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fractions_round_as_torch_does() {
        // torch: random_split(range(30), [0.3, 0.3, 0.4]) -> 9, 9, 12
        assert_eq!(split_sizes(30, &[0.3, 0.3, 0.4]).unwrap(), vec![9, 9, 12]);
        // floor(0.33 * 10) = 3 three times, remainder 1 to the first part.
        assert_eq!(split_sizes(10, &[0.33, 0.33, 0.34]).unwrap(), vec![4, 3, 3]);
        assert_eq!(
            split_sizes(5, &[0.1; 10]).unwrap(),
            vec![1, 1, 1, 1, 1, 0, 0, 0, 0, 0]
        );
        assert_eq!(split_sizes(0, &[0.5, 0.5]).unwrap(), vec![0, 0]);
    }

    #[test]
    fn bad_fractions_are_refused() {
        assert!(split_sizes(10, &[0.5, 0.6]).is_err());
        assert!(split_sizes(10, &[0.5, 0.4]).is_err());
        assert!(split_sizes(10, &[f64::NAN, 1.0]).is_err());
        assert!(split_sizes(10, &[-0.5, 1.5])
            .unwrap_err()
            .to_string()
            .contains("fractions[0]"));
        assert!(split_sizes(10, &[]).is_err());
        // Within math.isclose's tolerance below 1 is accepted, above 1 is not.
        assert!(split_sizes(10, &[0.5, 0.5 - 1e-12]).is_ok());
        assert!(split_sizes(10, &[0.5, 0.5 + 1e-12]).is_err());
    }

    #[test]
    fn sizes_must_sum_to_the_store() {
        let err = random_split(10, &[3, 6], 0).unwrap_err();
        assert_eq!(
            err,
            Error::Value("sizes must sum to num_samples = 10, got [3, 6]".into())
        );
        assert!(random_split(10, &[u64::MAX, 11], 0).is_err());
        assert!(random_split(0, &[], 0).unwrap().is_empty());
    }
}
