//! The ranks' shares of a step in dealing order: the [`Balance`] grouped by
//! rank, each share sorted by length (ties: lower position first), or, with
//! [`super::Packing::FirstFit`], in its first-fit decreasing bins.

use super::balance::{
    active_ranks, balance, balance_in_order, by_decreasing_length, check_world_size, order_by_key,
    Balance, Method,
};
use super::micro::Caps;
use super::packing::{first_fit_order, FreeSpace};
use super::Cost;
use crate::buffer::vec_with_capacity;
use crate::error::Result;
use crate::split::check_rank;

/// Which samples of a step each rank gets, in dealing order. Sorted by
/// length, it does not depend on the micro-batch caps; packed first fit, it
/// does. The micro-batches of [`super::StepDealing`] are consecutive runs of
/// these shares either way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepShares {
    world_size: u64,
    method: Method,
    /// The step's sample indices, rank 0's share first, each share in
    /// dealing order.
    order: Vec<usize>,
    /// Where each of the first `min(W, n)` ranks' share starts in `order`,
    /// and the end of the last (`min(W, n) + 1` entries).
    starts: Vec<usize>,
}

impl StepShares {
    /// The shares of a step whose samples have `lengths` tokens, balanced by
    /// `cost` over `world_size` ranks.
    pub fn new(lengths: &[u64], cost: Cost, world_size: u64) -> Result<StepShares> {
        check_world_size(world_size)?;
        let by_length = order_by_key(lengths.len(), |i| lengths[i], "the step's dealing order")?;
        let balance = match cost {
            // Costs are the lengths: their decreasing order comes from the
            // one sort by length.
            Cost::Tokens => {
                let by_cost = by_decreasing_length(&by_length, lengths)?;
                balance_in_order(lengths, world_size, &by_cost)?
            }
            Cost::Quadratic { .. } => balance(&cost.costs(lengths)?, world_size)?,
        };
        StepShares::grouped(&balance, lengths, &by_length)
    }

    /// Groups `balance` (of a step whose samples have `lengths` tokens) by
    /// rank, each share sorted by length, ties by position. O(n log n).
    pub fn from_balance(balance: &Balance, lengths: &[u64]) -> Result<StepShares> {
        let rank_of = balance.rank_of();
        if rank_of.len() != lengths.len() {
            return Err(crate::Error::Value(format!(
                "lengths must hold one length per sample of the balance ({}), got {}",
                rank_of.len(),
                lengths.len()
            )));
        }
        let by_length = order_by_key(lengths.len(), |i| lengths[i], "the step's dealing order")?;
        StepShares::grouped(balance, lengths, &by_length)
    }

    /// [`StepShares::from_balance`] with the step already ordered by
    /// `(length, position)` (`by_length`).
    fn grouped(balance: &Balance, lengths: &[u64], by_length: &[usize]) -> Result<StepShares> {
        let rank_of = balance.rank_of();
        let active = balance.active_ranks();
        // A counting sort by rank keeps the order by length in each share.
        let mut starts = vec_with_capacity(active + 1, "the ranks' shares")?;
        starts.resize(active + 1, 0usize);
        for &r in rank_of {
            starts[r + 1] += 1;
        }
        for r in 0..active {
            starts[r + 1] += starts[r];
        }
        let mut next = starts.clone();
        let mut order = vec_with_capacity(lengths.len(), "the step's dealing order")?;
        order.resize(lengths.len(), 0usize);
        for &i in by_length {
            let r = rank_of[i];
            order[next[r]] = i;
            next[r] += 1;
        }
        Ok(StepShares {
            world_size: balance.world_size(),
            method: balance.method(),
            order,
            starts,
        })
    }

    /// Reorders every share into its first-fit decreasing bins under `caps`
    /// ([`super::Packing::FirstFit`]): the dealing order then depends on the
    /// caps.
    pub(crate) fn pack_first_fit(&mut self, lengths: &[u64], caps: Caps) -> Result<()> {
        let mut bins = FreeSpace::default();
        for r in 0..self.active_ranks() {
            let (start, end) = (self.starts[r], self.starts[r + 1]);
            first_fit_order(&mut self.order[start..end], lengths, caps, &mut bins)?;
        }
        Ok(())
    }

    /// The number of ranks `W`.
    pub fn world_size(&self) -> u64 {
        self.world_size
    }

    /// Which assignment the balance kept.
    pub fn method(&self) -> Method {
        self.method
    }

    /// Samples in the step (`n_t`).
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether the step has no sample.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Ranks that can hold samples, `min(W, n)`; every later rank's share is
    /// empty.
    pub fn active_ranks(&self) -> usize {
        active_ranks(self.order.len(), self.world_size)
    }

    /// Rank `rank`'s samples (indices into the step), in dealing order:
    /// by length, ties by position (or in their first-fit bins, once
    /// packed so).
    pub fn share(&self, rank: u64) -> Result<&[usize]> {
        check_rank(rank, self.world_size)?;
        Ok(self.share_unchecked(rank))
    }

    /// Rank `rank`'s number of samples.
    pub fn count(&self, rank: u64) -> Result<usize> {
        Ok(self.share(rank)?.len())
    }

    /// [`StepShares::share`] for `rank < W`.
    pub(crate) fn share_unchecked(&self, rank: u64) -> &[usize] {
        match usize::try_from(rank) {
            Ok(r) if r < self.active_ranks() => &self.order[self.starts[r]..self.starts[r + 1]],
            _ => &[],
        }
    }

    /// Where rank `r`'s share starts in the flat dealing order (`r < min(W, n)`).
    pub(crate) fn start(&self, r: usize) -> usize {
        self.starts[r]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_sorted_by_length_then_position() {
        // Greedy on [4, 9, 4, 5, 1] over 2 ranks: rank 0 gets 9 and 4 (pos 2),
        // rank 1 gets 4 (pos 0), 5 and 1.
        let shares = StepShares::new(&[4, 9, 4, 5, 1], Cost::Tokens, 2).unwrap();
        assert_eq!(shares.method(), Method::Greedy);
        assert_eq!(shares.share(0).unwrap(), &[2, 1]);
        assert_eq!(shares.share(1).unwrap(), &[4, 0, 3]);
        assert!(shares.share(2).is_err());
    }

    #[test]
    fn ranks_beyond_the_samples_have_empty_shares() {
        let shares = StepShares::new(&[5, 5], Cost::Tokens, 4).unwrap();
        assert_eq!(shares.active_ranks(), 2);
        assert_eq!(shares.share(1).unwrap(), &[1]);
        assert_eq!(shares.count(3).unwrap(), 0);
        let huge = StepShares::new(&[1], Cost::Tokens, u64::MAX).unwrap();
        assert_eq!(huge.count(u64::MAX - 1).unwrap(), 0);
    }
}
