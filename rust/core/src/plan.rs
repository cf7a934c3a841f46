//! Epoch plans: the epoch's order cut into global steps and dealt to ranks.
//!
//! Step `t` covers positions `[t*G, min((t+1)*G, N))`; there are `ceil(N/G)`
//! steps (`floor` with `drop_last`). Inside a step the positions are dealt
//! strided: rank `r` of `W` gets the step's positions `r, r + W, ...`, so
//! ranks differ by at most one sample and the set of samples in a step does
//! not depend on `W`: plans are exact and elastic.
//!
//! Every rank splits its share of step `t` into the same number of
//! micro-batches, `M_t = max(1, ceil(ceil(n_t / W) / b))`, as evenly as
//! possible (sizes differ by at most one, none above `b`). A rank with fewer
//! real samples than `M_t` (possible when `b = 1` or when the step has fewer
//! than `W` samples) fills each missing micro-batch with one zero-weight copy
//! of a sample, so no micro-batch is ever empty. Real samples weigh `W / n_t`.
//!
//! A plan can start at a step boundary (`cursor`, in samples): the state to
//! resume is `(format, N, seed, epoch, kind, G, cursor)`, independent of `W`.

use crate::buffer::{try_copy_of, try_filled, vec_with_capacity, zeroed_ids};
use crate::error::{Error, Result};
use crate::order::{Kind, Order};
use crate::parallel;
use crate::split::check_rank;

/// The layout of one rank's share of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShare {
    /// Real samples in the whole step, over all ranks (`n_t`).
    pub step_len: u64,
    /// Real samples of this rank in the step.
    pub count: u64,
    /// Micro-batches of every rank in this step (`M_t`).
    pub micro_batches: u64,
}

impl StepShare {
    /// The real-sample range `[start, end)` (indices into the rank's share of
    /// the step) of micro-batch `m`; empty for a filler micro-batch.
    pub fn micro_batch_range(&self, m: u64) -> (u64, u64) {
        let parts = self.micro_batches;
        let (base, extra) = (self.count / parts, self.count % parts);
        let start = m * base + m.min(extra);
        let len = base + u64::from(m < extra);
        (start, start + len)
    }
}

/// One epoch's plan.
#[derive(Debug, Clone)]
pub struct Plan {
    order: Order,
    global_batch_size: u64,
    drop_last: bool,
    cursor: u64,
}

impl Plan {
    /// A plan over `order` with `global_batch_size` samples per step,
    /// starting at sample `cursor` (a step boundary).
    pub fn new(order: Order, global_batch_size: u64, drop_last: bool, cursor: u64) -> Result<Plan> {
        if global_batch_size == 0 {
            return Err(Error::Value("global_batch_size must be >= 1, got 0".into()));
        }
        let plan = Plan {
            order,
            global_batch_size,
            drop_last,
            cursor: 0,
        };
        let end = plan.num_steps() * global_batch_size;
        let end = end.min(plan.num_samples());
        if cursor > end || (!cursor.is_multiple_of(global_batch_size) && cursor != end) {
            return Err(Error::Value(format!(
                "cursor must be a multiple of global_batch_size ({global_batch_size}) in [0, {end}] \
                 or the end of the epoch ({end}), got {cursor}"
            )));
        }
        Ok(Plan { cursor, ..plan })
    }

    /// The epoch's order.
    pub fn order(&self) -> &Order {
        &self.order
    }

    /// Samples in the epoch (`N`).
    pub fn num_samples(&self) -> u64 {
        self.order.len()
    }

    /// Samples per step over all ranks (`G`).
    pub fn global_batch_size(&self) -> u64 {
        self.global_batch_size
    }

    /// Whether the short last step is dropped.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// Samples consumed before this plan starts (a step boundary).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// The kind of the epoch's order.
    pub fn kind(&self) -> Kind {
        self.order.kind()
    }

    /// Steps in the whole epoch.
    pub fn num_steps(&self) -> u64 {
        let (n, g) = (self.num_samples(), self.global_batch_size);
        if self.drop_last {
            n / g
        } else {
            n.div_ceil(g)
        }
    }

    /// The first step this plan yields (`cursor / G`, rounded up at the end).
    pub fn start_step(&self) -> u64 {
        self.cursor
            .div_ceil(self.global_batch_size)
            .min(self.num_steps())
    }

    /// Steps this plan yields (`num_steps - start_step`).
    pub fn remaining_steps(&self) -> u64 {
        self.num_steps() - self.start_step()
    }

    /// The same plan started at another step boundary.
    pub fn with_cursor(&self, cursor: u64) -> Result<Plan> {
        Plan::new(
            self.order.clone(),
            self.global_batch_size,
            self.drop_last,
            cursor,
        )
    }

    /// The cursor after the first `step` steps of the epoch.
    pub fn cursor_at_step(&self, step: u64) -> u64 {
        (step.min(self.num_steps()) * self.global_batch_size).min(self.num_samples())
    }

    fn check_step(&self, step: u64) -> Result<()> {
        if step >= self.num_steps() {
            return Err(Error::Index(format!(
                "step must be in [0, {}), got {step}",
                self.num_steps()
            )));
        }
        Ok(())
    }

    /// Real samples in step `step` (`n_t`).
    pub fn step_len(&self, step: u64) -> Result<u64> {
        self.check_step(step)?;
        Ok(self.step_len_unchecked(step))
    }

    fn step_len_unchecked(&self, step: u64) -> u64 {
        let start = step * self.global_batch_size;
        self.global_batch_size.min(self.num_samples() - start)
    }

    /// The layout of rank `rank`'s share of step `step`.
    pub fn share(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
    ) -> Result<StepShare> {
        check_rank(rank, world_size)?;
        if micro_batch_size == 0 {
            return Err(Error::Value("micro_batch_size must be >= 1, got 0".into()));
        }
        let step_len = self.step_len(step)?;
        Ok(share_of(step_len, rank, world_size, micro_batch_size))
    }

    /// Rank `rank`'s sample ids in step `step`, in dealing order.
    pub fn step_indices(&self, step: u64, rank: u64, world_size: u64) -> Result<Vec<i64>> {
        check_rank(rank, world_size)?;
        let step_len = self.step_len(step)?;
        let count = rank_count(step_len, rank, world_size);
        self.order.range(
            step * self.global_batch_size + rank,
            world_size as i64,
            count,
        )
    }

    /// All of rank `rank`'s sample ids from `start_step` on, in step order:
    /// O(N/W) time and memory, never building the global order.
    pub fn rank_indices(&self, rank: u64, world_size: u64) -> Result<Vec<i64>> {
        check_rank(rank, world_size)?;
        let (first, last) = (self.start_step(), self.num_steps());
        let total = rank_total(self, first, last, rank, world_size);
        let mut out = zeroed_ids(total, "the rank's share")?;
        self.fill_rank_positions(first, rank, world_size, &mut out);
        self.order.map_in_place(&mut out);
        Ok(out)
    }

    /// Writes the positions of rank `rank`'s share from step `first_step` on
    /// into `out` (which is filled completely, possibly stopping mid-step).
    /// Returns the step and the offset inside that step where it stopped, so a
    /// caller can stream a rank's share in bounded chunks.
    pub fn fill_rank_positions(
        &self,
        first_step: u64,
        rank: u64,
        world_size: u64,
        out: &mut [i64],
    ) -> (u64, u64) {
        self.fill_rank_positions_from(first_step, 0, rank, world_size, out)
    }

    /// [`Plan::fill_rank_positions`] starting `skip` samples into `first_step`'s share.
    pub fn fill_rank_positions_from(
        &self,
        first_step: u64,
        skip: u64,
        rank: u64,
        world_size: u64,
        out: &mut [i64],
    ) -> (u64, u64) {
        let g = self.global_batch_size;
        let full_count = rank_count(g, rank, world_size);
        let (mut step, mut skip) = (first_step, skip);
        let mut at = 0usize;
        while at < out.len() && step < self.num_steps() {
            let step_len = self.step_len_unchecked(step);
            let count = if step_len == g {
                full_count
            } else {
                rank_count(step_len, rank, world_size)
            };
            let take = (count - skip).min((out.len() - at) as u64);
            let base = (step * g + rank + skip * world_size) as i64;
            for (k, slot) in out[at..at + take as usize].iter_mut().enumerate() {
                *slot = base + k as i64 * world_size as i64;
            }
            at += take as usize;
            if skip + take == count {
                step += 1;
                skip = 0;
            } else {
                skip += take;
            }
        }
        (step, skip)
    }

    /// Rank `rank`'s number of real samples from `start_step` on.
    pub fn rank_len(&self, rank: u64, world_size: u64) -> Result<u64> {
        check_rank(rank, world_size)?;
        Ok(rank_total(
            self,
            self.start_step(),
            self.num_steps(),
            rank,
            world_size,
        ))
    }

    /// Micro-batches every rank gets from `start_step` on (the same for all).
    pub fn total_micro_batches(&self, world_size: u64, micro_batch_size: u64) -> Result<u64> {
        check_rank(0, world_size)?;
        if micro_batch_size == 0 {
            return Err(Error::Value("micro_batch_size must be >= 1, got 0".into()));
        }
        Ok(
            self.sum_over_steps(self.start_step(), self.num_steps(), |len| {
                micro_batches_of(len, world_size, micro_batch_size)
            }),
        )
    }

    /// The sum of `per_step(n_t)` over steps `first..last` in O(1): every
    /// step but the epoch's last has `G` samples.
    fn sum_over_steps(&self, first: u64, last: u64, per_step: impl Fn(u64) -> u64) -> u64 {
        if first >= last {
            return 0;
        }
        let g = self.global_batch_size;
        let tail = self.step_len_unchecked(last - 1);
        if tail == g {
            (last - first) * per_step(g)
        } else {
            (last - first - 1) * per_step(g) + per_step(tail)
        }
    }

    /// The micro-batches of rank `rank` in step `step`: for each, the sample
    /// ids and their loss weights (`W / n_t` for real samples, 0 for fillers).
    pub fn micro_batches(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
    ) -> Result<Vec<(Vec<i64>, Vec<f64>)>> {
        let ids = self.step_indices(step, rank, world_size)?;
        self.split_step(step, rank, world_size, micro_batch_size, &ids)
    }

    /// Cuts `ids`, rank `rank`'s real samples of step `step` (as
    /// [`Plan::step_indices`] gives them, or as read from a plan file), into
    /// the step's micro-batches with their weights.
    pub fn split_step(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
        ids: &[i64],
    ) -> Result<Vec<(Vec<i64>, Vec<f64>)>> {
        let share = self.share(step, rank, world_size, micro_batch_size)?;
        if ids.len() as u64 != share.count {
            return Err(Error::Value(format!(
                "ids must hold rank {rank}'s {} samples of step {step}, got {}",
                share.count,
                ids.len()
            )));
        }
        let weight = world_size as f64 / share.step_len as f64;
        let filler = match ids.last() {
            Some(&id) => id,
            // An empty share: copy the step's sample at position rank mod n_t.
            None => self
                .order
                .get(step * self.global_batch_size + rank % share.step_len)?
                as i64,
        };
        let count = usize::try_from(share.micro_batches).unwrap_or(usize::MAX);
        let mut batches = vec_with_capacity(count, "the step's micro-batches")?;
        for m in 0..share.micro_batches {
            let (a, b) = share.micro_batch_range(m);
            // Each micro-batch is allocated apart and fallibly, so that a
            // step of millions of them is an error when memory runs out.
            let batch = if a == b {
                try_filled(filler, 1).zip(try_filled(0.0, 1))
            } else {
                let real = &ids[a as usize..b as usize];
                try_copy_of(real).zip(try_filled(weight, real.len()))
            };
            let Some(batch) = batch else {
                // Free the step's micro-batches first: with them held, even
                // the error's message may not fit.
                drop(batches);
                return Err(Error::Memory(format!(
                    "cannot allocate a micro-batch of step {step}: not enough memory \
                     for its {} micro-batches",
                    share.micro_batches
                )));
            };
            batches.push(batch);
        }
        Ok(batches)
    }

    /// Where step `step` starts inside rank `rank`'s share of the whole epoch
    /// (as [`Plan::rank_indices`] of a plan with cursor 0 lays it out).
    pub fn rank_step_offset(&self, step: u64, rank: u64, world_size: u64) -> Result<u64> {
        check_rank(rank, world_size)?;
        if step > self.num_steps() {
            return Err(Error::Index(format!(
                "step must be in [0, {}], got {step}",
                self.num_steps()
            )));
        }
        Ok(rank_total(self, 0, step, rank, world_size))
    }
}

/// Real samples of rank `rank` in a step of `step_len` samples.
pub fn rank_count(step_len: u64, rank: u64, world_size: u64) -> u64 {
    if rank < step_len {
        (step_len - rank).div_ceil(world_size)
    } else {
        0
    }
}

/// Micro-batches of every rank in a step of `step_len` samples.
pub fn micro_batches_of(step_len: u64, world_size: u64, micro_batch_size: u64) -> u64 {
    step_len
        .div_ceil(world_size)
        .div_ceil(micro_batch_size)
        .max(1)
}

fn share_of(step_len: u64, rank: u64, world_size: u64, micro_batch_size: u64) -> StepShare {
    StepShare {
        step_len,
        count: rank_count(step_len, rank, world_size),
        micro_batches: micro_batches_of(step_len, world_size, micro_batch_size),
    }
}

fn rank_total(plan: &Plan, first: u64, last: u64, rank: u64, world_size: u64) -> u64 {
    plan.sum_over_steps(first, last, |len| rank_count(len, rank, world_size))
}

/// Fills `out` with rank `rank`'s sample ids from `first_step` (after
/// `skip` samples of it), for chunked writers; returns where it stopped.
pub fn fill_rank_ids(
    plan: &Plan,
    first_step: u64,
    skip: u64,
    rank: u64,
    world_size: u64,
    out: &mut [i64],
) -> (u64, u64) {
    let end = plan.fill_rank_positions_from(first_step, skip, rank, world_size, out);
    parallel::for_each_piece(out, parallel::PIECE, |_, v| plan.order.map_slice(v));
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(n: u64, g: u64, drop_last: bool) -> Plan {
        Plan::new(Order::new(n, 1, 2, Kind::Cipher).unwrap(), g, drop_last, 0).unwrap()
    }

    #[test]
    fn strided_field_case_is_equal_step() {
        // N = 9, W = 2, b = 4, one step: 5 and 4 samples, 2 micro-batches each.
        let p = plan(9, 9, false);
        let a = p.micro_batches(0, 0, 2, 4).unwrap();
        let b = p.micro_batches(0, 1, 2, 4).unwrap();
        assert_eq!(a.len(), b.len());
        assert_eq!(a.iter().map(|m| m.0.len()).sum::<usize>(), 5);
        assert_eq!(b.iter().map(|m| m.0.len()).sum::<usize>(), 4);
    }

    #[test]
    fn field_step_count() {
        for w in [1, 2, 4, 8] {
            let p = plan(8_474_566, 640, false);
            assert_eq!(p.num_steps(), 13_242);
            assert_eq!(p.total_micro_batches(w, 1_000_000).unwrap(), 13_242);
        }
    }

    #[test]
    fn rank_indices_cover_epoch_once() {
        for (n, g) in [(0u64, 3u64), (1, 1), (1, 5), (17, 4), (100, 7), (101, 10)] {
            for w in 1..6 {
                let p = plan(n, g, false);
                let mut all: Vec<i64> =
                    (0..w).flat_map(|r| p.rank_indices(r, w).unwrap()).collect();
                all.sort_unstable();
                assert_eq!(all, (0..n as i64).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn micro_batch_size_zero_is_an_error() {
        let p = plan(10, 4, false);
        assert!(p.share(0, 0, 2, 0).is_err());
        assert!(p.micro_batches(0, 0, 2, 0).is_err());
        let ids = p.step_indices(0, 0, 2).unwrap();
        assert!(p.split_step(0, 0, 2, 0, &ids).is_err());
        assert!(p.total_micro_batches(2, 0).is_err());
    }

    #[test]
    fn bad_cursor_is_rejected() {
        let order = Order::new(10, 0, 0, Kind::Cipher).unwrap();
        assert!(Plan::new(order.clone(), 4, false, 3).is_err());
        assert!(Plan::new(order.clone(), 4, false, 10).is_ok());
        assert!(Plan::new(order.clone(), 4, true, 10).is_err());
        assert!(Plan::new(order, 4, true, 8).is_ok());
    }
}
