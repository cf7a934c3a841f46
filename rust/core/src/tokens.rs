//! Token plans: a step's samples dealt to ranks balanced by cost, cut into
//! capped micro-batches, weighted so that DDP's mean is the step's mean
//! token loss (DESIGN.md section 8).
//!
//! Everything here is a deterministic function of one step's samples (their
//! positions `0..n` in the step and their `lengths`), the cost model, the
//! world size `W` and the caps: never of the rank asking, the number of
//! workers or anything else, so every rank computes the same dealing and a
//! step's sample set (fixed by the order, not here) stays elastic.
//!
//! # Cost
//! [`Cost::Tokens`] (a sample costs its length `L`) or [`Cost::Quadratic`]
//! (`a*L + b*L^2`, attention's quadratic term). Token costs are integers and
//! a rank's load is their exact sum in `u128`: the bound below holds
//! exactly and any checker can recompute it. Quadratic costs are the
//! binary64 value of `a * L + b * (L * L)` evaluated in that order (`L` the
//! length as `f64`; Rust never fuses or reorders these operations), and a
//! rank's load is their binary64 sum in a fixed order: the same bits on
//! every machine. Every order between costs breaks ties by position, so the
//! dealing is reproducible with either model.
//!
//! # Balance
//! The greedy assignment takes the samples by decreasing cost (ties: lower
//! position first) and gives each to the rank with the least load (ties:
//! fewer samples, then the lower rank). The strided assignment gives sample
//! `i` to rank `i mod W`. The dealing keeps whichever has the smaller
//! spread `max_r load_r - min_r load_r` over all `W` ranks (strided on a
//! tie), so it is never worse than strided dealing; with equal costs the
//! two coincide and the dealing is exactly the strided one.
//!
//! **Bound: spread <= the largest single cost `c_max`.** Let `s_k` be the
//! greedy spread after `k` samples; `s_0 = 0`. The `k`-th sample, of cost
//! `c`, goes to a rank whose load `m` is the minimum. Afterwards no load is
//! below `m` (that rank now has `m + c >= m`, the others are unchanged), and
//! the maximum is the old maximum or `m + c`. So `s_k <= max(s_{k-1}, c) <=
//! c_max` by induction. The kept assignment has a spread no larger than the
//! greedy one. (The bound needs only "least loaded"; taking costs in
//! decreasing order adds the LPT guarantee on the largest load, at most
//! 4/3 of the best possible, and smaller spreads in practice.) With the
//! quadratic model the loads are rounded sums, so the bound holds up to the
//! rounding of a load (relative `n * 2^-53`). When `W > n`, `W - n` ranks
//! get nothing and the spread is the largest load.
//!
//! # Micro-batches
//! A micro-batch holds at most [`Caps::micro_batch_size`] samples and at
//! most [`Caps::max_tokens`] tokens, counted as the sum of its samples'
//! lengths (the tokens of the micro-batch packed into one sequence; with
//! padding, similar lengths keep the padded size close to that sum). A
//! sample longer than `max_tokens` is an error naming its position in the
//! step.
//!
//! 1. Each rank's share is sorted by length (ties: position): that is the
//!    rank's *dealing order*, and it does not depend on the caps. With
//!    [`Packing::FirstFit`] the sorted share is then reordered into its
//!    first-fit decreasing bins under the caps (see [`Packing`]), and that
//!    is the dealing order.
//! 2. Next-fit: the share in dealing order is cut into consecutive runs, a
//!    new run starting when the next sample would break a cap. Sorted,
//!    similar lengths share a micro-batch; packed first fit, the runs are
//!    exactly the bins.
//! 3. `M` is the largest number of runs of any rank (at least 1). A rank
//!    with fewer splits its own runs, the one with the most samples first
//!    (ties: most tokens, then earliest), into halves of `ceil(k/2)` and
//!    `floor(k/2)` samples, until it has `M` or every run holds one sample.
//!    A part of a run is within the caps, and the runs stay consecutive in
//!    the dealing order.
//! 4. Only then fillers: a rank with fewer than `M` samples gets one filler
//!    micro-batch per missing one, each holding the step's shortest sample
//!    (ties: lowest position) with weight 0. It fits both caps, as every
//!    sample does. No micro-batch is ever empty.
//!
//! # Weights
//! Every real sample of a step weighs `W / T` ([`token_weight`]), `T` the
//! sum of the step's loss tokens over all ranks ([`step_tokens`]), applied
//! to the sample's summed per-token loss; fillers weigh 0. Summed over a
//! rank's micro-batches and averaged over `W` ranks by DDP, that is the sum
//! of the step's token losses divided by `T`: the mean token loss of the
//! whole global batch on one device, with no collective for the count. A
//! step with `T = 0` weighs 0 everywhere. [`Normalization::Samples`] weighs
//! `W / n` ([`sample_weight`]), applied to each sample's mean loss.
//!
//! # Cost of computing it
//! O(n log n) time and O(n) memory for a step of `n` samples, whatever `W`
//! (ranks beyond `n` hold nothing and are never materialised; their `M`
//! fillers are produced on demand). A rank computes the whole step's
//! balance, since its share depends on every cost, but only once per step.
//!
//! # Plugging into a layout
//! [`StepShares`] answers what [`crate::dealing::Dealing`] is asked today (a
//! rank's count and positions in dealing order, for `rank_indices` and
//! `step_indices`); [`StepDealing`] adds the micro-batch cuts for
//! `micro_batches`. Positions in the step are `0..n`: the caller adds the
//! step's first position and maps through the order.

mod balance;
mod micro;
mod oversize;
mod packing;
mod shares;

pub use balance::{balance, greedy, spread, strided, Balance, CostValue, FloatLoad, Method};
pub use micro::{cut_share, deal_step, Caps, MicroBatchRef, MicroBatches, ShareCuts, StepDealing};
pub use oversize::{
    truncated, CutLengths, CutLoss, Oversize, OversizeReport, OversizeScan, NAMED_IDS,
};
pub use packing::Packing;
pub use shares::StepShares;

use crate::error::{Error, Result};

/// What a sample costs to compute, by its length `L`.
#[derive(Debug, Clone, Copy, Default)]
pub enum Cost {
    /// `L`.
    #[default]
    Tokens,
    /// `a*L + b*L^2`: `a` and `b` finite and `>= 0`, not both 0 (checked by
    /// [`Cost::quadratic`] and wherever the cost is used).
    Quadratic {
        /// The linear coefficient.
        a: f64,
        /// The quadratic coefficient.
        b: f64,
    },
}

impl Cost {
    /// The checked cost `a*L + b*L^2`.
    pub fn quadratic(a: f64, b: f64) -> Result<Cost> {
        let cost = Cost::Quadratic {
            a: a + 0.0,
            b: b + 0.0,
        };
        cost.check()?;
        Ok(cost)
    }

    /// An error unless the coefficients are finite, `>= 0` and not both 0.
    pub fn check(&self) -> Result<()> {
        match *self {
            Cost::Tokens => Ok(()),
            Cost::Quadratic { a, b } => {
                let fine = |x: f64| x.is_finite() && x >= 0.0;
                if fine(a) && fine(b) && (a > 0.0 || b > 0.0) {
                    Ok(())
                } else {
                    Err(Error::Value(format!(
                        "cost must be \"tokens\" or (a, b) with a and b finite and >= 0, \
                         not both 0, got ({a:?}, {b:?})"
                    )))
                }
            }
        }
    }

    /// The cost of a sample of `length` tokens, as a float (exact for
    /// [`Cost::Tokens`] below `2^53`).
    pub fn of(&self, length: u64) -> f64 {
        let l = length as f64;
        match *self {
            Cost::Tokens => l,
            // `+ 0.0` turns a `-0.0` coefficient's product into `+0.0`.
            Cost::Quadratic { a, b } => a * l + b * (l * l) + 0.0,
        }
    }

    /// The quadratic costs of a step's samples, each and their sum finite.
    pub(crate) fn costs(&self, lengths: &[u64]) -> Result<Vec<f64>> {
        self.check()?;
        let mut costs = crate::buffer::vec_with_capacity(lengths.len(), "the step's costs")?;
        let mut total = 0.0f64;
        for (i, &length) in lengths.iter().enumerate() {
            let cost = self.of(length);
            total += cost;
            if !cost.is_finite() || !total.is_finite() {
                return Err(Error::Overflow(format!(
                    "the cost of lengths[{i}] = {length} (with the step's before it) is above \
                     the largest float under cost {self:?}"
                )));
            }
            costs.push(cost);
        }
        Ok(costs)
    }
}

impl PartialEq for Cost {
    fn eq(&self, other: &Self) -> bool {
        match (*self, *other) {
            (Cost::Tokens, Cost::Tokens) => true,
            (Cost::Quadratic { a, b }, Cost::Quadratic { a: c, b: d }) => {
                a.to_bits() == c.to_bits() && b.to_bits() == d.to_bits()
            }
            _ => false,
        }
    }
}

/// Costs compare by their coefficients' bits ([`Cost::quadratic`] makes
/// `-0.0` into `0.0`), so a cost can sit in a hashed layout.
impl Eq for Cost {}

impl std::hash::Hash for Cost {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match *self {
            Cost::Tokens => 0u8.hash(state),
            Cost::Quadratic { a, b } => {
                1u8.hash(state);
                a.to_bits().hash(state);
                b.to_bits().hash(state);
            }
        }
    }
}

/// What a real sample's weight divides by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Normalization {
    /// `W / T`, `T` the step's loss tokens ([`token_weight`]).
    #[default]
    Tokens,
    /// `W / n`, `n` the step's samples ([`sample_weight`]).
    Samples,
}

impl Normalization {
    /// The weight of every real sample of a step whose samples have
    /// `loss_tokens` loss tokens, over `world_size` ranks.
    pub fn step_weight(&self, loss_tokens: &[u64], world_size: u64) -> Result<f64> {
        match self {
            Normalization::Tokens => token_weight(loss_tokens, world_size),
            Normalization::Samples => sample_weight(loss_tokens.len(), world_size),
        }
    }
}

/// `T`: the step's loss tokens over all ranks (exact).
pub fn step_tokens(loss_tokens: &[u64]) -> u128 {
    loss_tokens.iter().map(|&t| u128::from(t)).sum()
}

/// `W / T` for every real sample of a step with `loss_tokens`, or 0 when
/// `T = 0` (nothing of the step counts in the loss).
pub fn token_weight(loss_tokens: &[u64], world_size: u64) -> Result<f64> {
    balance_check(world_size)?;
    let total = step_tokens(loss_tokens);
    Ok(if total == 0 {
        0.0
    } else {
        world_size as f64 / total as f64
    })
}

/// `W / n` for every real sample of a step of `step_len` samples (0 for
/// an empty step).
pub fn sample_weight(step_len: usize, world_size: u64) -> Result<f64> {
    balance_check(world_size)?;
    Ok(if step_len == 0 {
        0.0
    } else {
        world_size as f64 / step_len as f64
    })
}

fn balance_check(world_size: u64) -> Result<()> {
    if world_size == 0 {
        return Err(Error::Value("world_size must be >= 1, got 0".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quadratic_costs_are_checked() {
        assert!(Cost::quadratic(1.0, 0.5).is_ok());
        assert!(Cost::quadratic(0.0, 1e-4).is_ok());
        for (a, b) in [
            (0.0, 0.0),
            (-1.0, 1.0),
            (1.0, f64::NAN),
            (f64::INFINITY, 0.0),
        ] {
            let err = Cost::quadratic(a, b).unwrap_err();
            assert!(err.to_string().starts_with("cost must be"), "{err}");
        }
        assert_eq!(
            Cost::quadratic(-0.0, 1.0).unwrap(),
            Cost::quadratic(0.0, 1.0).unwrap()
        );
        assert_eq!(Cost::quadratic(2.0, 0.25).unwrap().of(4), 12.0);
        assert_eq!(Cost::Tokens.of(7), 7.0);
    }

    #[test]
    fn costs_above_the_largest_float_are_overflow_errors() {
        let cost = Cost::quadratic(0.0, f64::MAX).unwrap();
        let err = cost.costs(&[0, 2]).unwrap_err();
        assert!(matches!(err, Error::Overflow(_)));
        assert!(
            err.to_string().starts_with("the cost of lengths[1] = 2"),
            "{err}"
        );
        assert!(deal_step(&[0, 2], cost, 2, Caps::new(Some(1), None).unwrap()).is_err());
    }

    #[test]
    fn weights_make_the_step_sum_to_the_world_size() {
        let loss = [3u64, 0, 5];
        let w = token_weight(&loss, 4).unwrap();
        assert_eq!(w, 0.5);
        assert_eq!(loss.iter().map(|&t| t as f64 * w).sum::<f64>(), 4.0);
        assert_eq!(token_weight(&[0, 0], 4).unwrap(), 0.0);
        assert_eq!(sample_weight(3, 6).unwrap(), 2.0);
        assert_eq!(Normalization::Samples.step_weight(&loss, 3).unwrap(), 1.0);
        assert_eq!(step_tokens(&[u64::MAX, u64::MAX]), 2 * u128::from(u64::MAX));
        assert!(token_weight(&loss, 0).is_err());
    }
}
