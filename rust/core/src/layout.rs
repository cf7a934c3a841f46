//! Plan layouts: an epoch's steps, shares, micro-batch cuts and weights,
//! apart from its order.
//!
//! Step `t` covers positions `[t*G, min((t+1)*G, N))`; there are `ceil(N/G)`
//! steps (`floor` with `drop_last`). Inside a step the positions are dealt
//! to ranks by a [`Dealing`] (strided: rank `r` of `W` gets the step's
//! positions `r, r + W, ...`), so ranks differ by at most one sample and the
//! set of positions in a step does not depend on `W`: plans are exact and
//! elastic.
//!
//! Every rank splits its share of step `t` into the same number of
//! micro-batches, `M_t = max(1, ceil(ceil(n_t / W) / b))`, as evenly as
//! possible (sizes differ by at most one, none above `b`). A rank with fewer
//! real samples than `M_t` (possible when `b = 1` or when the step has fewer
//! than `W` samples) fills each missing micro-batch with one zero-weight copy
//! of a sample, so no micro-batch is ever empty. Real samples weigh `W / n_t`.
//!
//! A layout dealt [`Dealing::Balanced`] (token plans, DESIGN.md section 8)
//! has the same steps and the same sample set in each; its shares,
//! micro-batches and weights come from the lengths of a step's samples,
//! which the caller reads into a [`StepSamples`] and passes to
//! [`Layout::step_shares`], [`Layout::deal_step`] and
//! [`Layout::dealt_micro_batches`] (the positional methods, which need no
//! lengths, are an error for it). See [`crate::tokens`] for the rules.
//!
//! A layout can start at a step boundary (`cursor`, in samples). Nothing
//! here depends on the order: a [`crate::plan::Plan`] is a layout and an
//! order, and a plan file's sizes and steps need the layout alone.

use crate::buffer::{try_copy_of, try_filled, vec_with_capacity};
use crate::dealing::{Dealing, Span, StepSamples};
use crate::error::{Error, Result};
use crate::order::MAX_SAMPLES;
use crate::split::check_rank;
use crate::tokens::{Caps, Normalization, StepDealing, StepShares};

/// One micro-batch: its sample ids and their loss weights.
pub type MicroBatch = (Vec<i64>, Vec<f64>);

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

    /// The micro-batch holding the `k`-th real sample of the share (`k <
    /// count`): the inverse of [`StepShare::micro_batch_range`].
    pub fn micro_batch_of(&self, k: u64) -> u64 {
        let parts = self.micro_batches;
        let (base, extra) = (self.count / parts, self.count % parts);
        // The first `extra` micro-batches hold `base + 1` samples each.
        let long = extra * (base + 1);
        if k < long {
            k / (base + 1)
        } else {
            extra + (k - long) / base
        }
    }
}

/// The order-free part of an epoch's plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    num_samples: u64,
    global_batch_size: u64,
    drop_last: bool,
    cursor: u64,
    dealing: Dealing,
    /// What a real sample's weight divides by, for a balanced dealing (a
    /// strided one always weighs `W / n_t`).
    normalization: Normalization,
}

impl Layout {
    /// The layout of `num_samples` samples in steps of `global_batch_size`,
    /// starting at sample `cursor` (a step boundary), dealt strided.
    pub fn new(
        num_samples: u64,
        global_batch_size: u64,
        drop_last: bool,
        cursor: u64,
    ) -> Result<Layout> {
        if num_samples > MAX_SAMPLES {
            return Err(Error::Overflow(format!(
                "num_samples must be in [0, 2**63 - 1], got {num_samples}"
            )));
        }
        if global_batch_size == 0 {
            return Err(Error::Value("global_batch_size must be >= 1, got 0".into()));
        }
        let layout = Layout {
            num_samples,
            global_batch_size,
            drop_last,
            cursor: 0,
            dealing: Dealing::Strided,
            normalization: Normalization::Samples,
        };
        let end = layout.cursor_at_step(layout.num_steps());
        if cursor > end || (!cursor.is_multiple_of(global_batch_size) && cursor != end) {
            return Err(Error::Value(format!(
                "cursor must be a multiple of global_batch_size ({global_batch_size}) in [0, {end}] \
                 or the end of the epoch ({end}), got {cursor}"
            )));
        }
        Ok(Layout { cursor, ..layout })
    }

    /// Samples in the epoch (`N`).
    pub fn num_samples(&self) -> u64 {
        self.num_samples
    }

    /// Samples per step over all ranks (`G`).
    pub fn global_batch_size(&self) -> u64 {
        self.global_batch_size
    }

    /// Whether the short last step is dropped.
    pub fn drop_last(&self) -> bool {
        self.drop_last
    }

    /// Samples consumed before this layout starts (a step boundary).
    pub fn cursor(&self) -> u64 {
        self.cursor
    }

    /// How each step's positions are dealt to ranks.
    pub fn dealing(&self) -> Dealing {
        self.dealing
    }

    /// Steps in the whole epoch.
    pub fn num_steps(&self) -> u64 {
        let (n, g) = (self.num_samples, self.global_batch_size);
        if self.drop_last {
            n / g
        } else {
            n.div_ceil(g)
        }
    }

    /// The first step this layout yields (`cursor / G`, rounded up at the end).
    pub fn start_step(&self) -> u64 {
        self.cursor
            .div_ceil(self.global_batch_size)
            .min(self.num_steps())
    }

    /// Steps this layout yields (`num_steps - start_step`).
    pub fn remaining_steps(&self) -> u64 {
        self.num_steps() - self.start_step()
    }

    /// The same layout started at another step boundary.
    pub fn with_cursor(&self, cursor: u64) -> Result<Layout> {
        Layout::new(
            self.num_samples,
            self.global_batch_size,
            self.drop_last,
            cursor,
        )
        .map(|layout| Layout {
            dealing: self.dealing,
            normalization: self.normalization,
            ..layout
        })
    }

    /// The same steps dealt by `dealing`, a balanced one weighing real
    /// samples by `normalization` (a strided one weighs `W / n_t`, whatever
    /// is given).
    pub fn with_dealing(&self, dealing: Dealing, normalization: Normalization) -> Result<Layout> {
        let normalization = match dealing {
            Dealing::Strided => Normalization::Samples,
            Dealing::Balanced { cost } => {
                cost.check()?;
                normalization
            }
        };
        Ok(Layout {
            dealing,
            normalization,
            ..*self
        })
    }

    /// What a real sample's weight divides by.
    pub fn normalization(&self) -> Normalization {
        self.normalization
    }

    /// An error for a balanced layout, whose shares need the step's lengths.
    fn check_by_position(&self) -> Result<()> {
        if self.dealing.by_position() {
            Ok(())
        } else {
            Err(Error::Value(
                "this layout deals by the lengths of a step's samples: its shares and \
                 micro-batches need them (give lengths)"
                    .into(),
            ))
        }
    }

    /// The cost of a balanced layout; an error for a strided one.
    fn balanced_cost(&self) -> Result<crate::tokens::Cost> {
        match self.dealing {
            Dealing::Balanced { cost } => Ok(cost),
            Dealing::Strided => Err(Error::Value(
                "this layout deals strided: it reads no lengths".into(),
            )),
        }
    }

    /// Checks that `samples` are those of one of this layout's steps.
    fn check_samples(&self, samples: &StepSamples) -> Result<()> {
        let span = self.span(samples.step)?;
        let n = samples.ids.len();
        let loss_ok = samples.loss_tokens.as_ref().is_none_or(|l| l.len() == n);
        if span != samples.span || n as u64 != span.len || samples.lengths.len() != n || !loss_ok {
            return Err(Error::Value(format!(
                "the samples must be those of step {} ({} samples from position {})",
                samples.step, span.len, span.start
            )));
        }
        Ok(())
    }

    /// The ranks' shares of a step (in dealing order, as indices into the
    /// step), balanced by the layout's cost over `world_size` ranks. They
    /// do not depend on any micro-batch cap.
    pub fn step_shares(&self, samples: &StepSamples, world_size: u64) -> Result<StepShares> {
        let cost = self.balanced_cost()?;
        self.check_samples(samples)?;
        StepShares::new(&samples.lengths, cost, world_size)
    }

    /// A step dealt to `world_size` ranks in micro-batches under `caps`. A
    /// sample longer than the token cap is an error naming its id.
    pub fn deal_step(
        &self,
        samples: &StepSamples,
        world_size: u64,
        caps: Caps,
    ) -> Result<StepDealing> {
        self.check_samples(samples)?;
        if let (Some(i), Some(cap)) = (caps.first_over(&samples.lengths), caps.max_tokens()) {
            let id = samples.ids[i];
            return Err(Error::Value(format!(
                "lengths[{id}] must be <= max_tokens ({cap}), got {}: sample {id} of step {} \
                 fits in no micro-batch",
                samples.lengths[i], samples.step
            )));
        }
        StepDealing::new(
            self.step_shares(samples, world_size)?,
            &samples.lengths,
            caps,
        )
    }

    /// The weight of every real sample of the step over `world_size`
    /// ranks: `W / T_t` (0 when `T_t = 0`), or `W / n_t` when normalised
    /// by samples.
    pub fn step_weight(&self, samples: &StepSamples, world_size: u64) -> Result<f64> {
        self.normalization
            .step_weight(samples.loss_tokens(), world_size)
    }

    /// Rank `rank`'s sample ids of a dealt step, in dealing order.
    pub fn dealt_ids(
        &self,
        samples: &StepSamples,
        shares: &StepShares,
        rank: u64,
    ) -> Result<Vec<i64>> {
        let share = shares.share(rank)?;
        let mut ids = vec_with_capacity(share.len(), "the requested ids")?;
        ids.extend(share.iter().map(|&i| samples.ids[i]));
        Ok(ids)
    }

    /// Rank `rank`'s micro-batches of a dealt step: the ids and their
    /// weights (the step's weight for real samples, 0 for a filler: the
    /// step's shortest sample).
    pub fn dealt_micro_batches(
        &self,
        samples: &StepSamples,
        dealing: &StepDealing,
        rank: u64,
    ) -> Result<Vec<MicroBatch>> {
        let weight = self.step_weight(samples, dealing.shares().world_size())?;
        let parts = dealing.micro_batches(rank)?;
        let mut batches = vec_with_capacity(parts.len(), "the step's micro-batches")?;
        for part in parts {
            let ids: Option<Vec<i64>> = crate::buffer::try_filled(0i64, part.samples.len());
            let weights = try_filled(part.weight(weight), part.samples.len());
            let (Some(mut ids), Some(weights)) = (ids, weights) else {
                drop(batches);
                return Err(Error::Memory(format!(
                    "cannot allocate a micro-batch of step {}: not enough memory",
                    samples.step
                )));
            };
            for (slot, &i) in ids.iter_mut().zip(part.samples) {
                *slot = samples.ids[i];
            }
            batches.push((ids, weights));
        }
        Ok(batches)
    }

    /// The cursor after the first `step` steps of the epoch.
    pub fn cursor_at_step(&self, step: u64) -> u64 {
        (step.min(self.num_steps()) * self.global_batch_size).min(self.num_samples)
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

    /// The positions of step `step`.
    pub fn span(&self, step: u64) -> Result<Span> {
        self.check_step(step)?;
        Ok(self.span_unchecked(step))
    }

    fn span_unchecked(&self, step: u64) -> Span {
        let start = step * self.global_batch_size;
        Span {
            start,
            len: self.global_batch_size.min(self.num_samples - start),
        }
    }

    /// Real samples in step `step` (`n_t`).
    pub fn step_len(&self, step: u64) -> Result<u64> {
        Ok(self.span(step)?.len)
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
        check_micro_batch_size(micro_batch_size)?;
        self.check_by_position()?;
        let span = self.span(step)?;
        Ok(StepShare {
            step_len: span.len,
            count: self.dealing.count(span, rank, world_size),
            micro_batches: micro_batches_of(span.len, world_size, micro_batch_size),
        })
    }

    /// Rank `rank`'s real samples in step `step`.
    pub fn step_count(&self, step: u64, rank: u64, world_size: u64) -> Result<u64> {
        check_rank(rank, world_size)?;
        self.check_by_position()?;
        Ok(self.dealing.count(self.span(step)?, rank, world_size))
    }

    /// Writes the positions of rank `rank`'s share from step `first_step`
    /// on into `out` (which is filled completely, possibly stopping
    /// mid-step). Returns the step and the offset inside that step where it
    /// stopped, so a caller can stream a rank's share in bounded chunks.
    pub fn fill_rank_positions(
        &self,
        first_step: u64,
        rank: u64,
        world_size: u64,
        out: &mut [i64],
    ) -> (u64, u64) {
        self.fill_rank_positions_from(first_step, 0, rank, world_size, out)
    }

    /// [`Layout::fill_rank_positions`] starting `skip` samples into
    /// `first_step`'s share. A balanced layout fills nothing (its shares
    /// need the steps' lengths: see [`Layout::step_shares`]).
    pub fn fill_rank_positions_from(
        &self,
        first_step: u64,
        skip: u64,
        rank: u64,
        world_size: u64,
        out: &mut [i64],
    ) -> (u64, u64) {
        let (mut step, mut skip) = (first_step, skip);
        if !self.dealing.by_position() {
            return (step, skip);
        }
        let mut at = 0usize;
        while at < out.len() && step < self.num_steps() {
            let span = self.span_unchecked(step);
            let count = self.dealing.count(span, rank, world_size);
            let take = (count - skip).min((out.len() - at) as u64);
            let slots = &mut out[at..at + take as usize];
            self.dealing
                .fill_positions(span, rank, world_size, skip, slots);
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
        self.check_by_position()?;
        Ok(self.rank_total(self.start_step(), self.num_steps(), rank, world_size))
    }

    /// Micro-batches every rank gets from `start_step` on (the same for all).
    pub fn total_micro_batches(&self, world_size: u64, micro_batch_size: u64) -> Result<u64> {
        check_rank(0, world_size)?;
        check_micro_batch_size(micro_batch_size)?;
        self.check_by_position()?;
        Ok(
            self.sum_over_steps(self.start_step(), self.num_steps(), |span| {
                micro_batches_of(span.len, world_size, micro_batch_size)
            }),
        )
    }

    /// Where step `step` starts inside rank `rank`'s share of the whole
    /// epoch (as a plan with cursor 0 lays it out).
    pub fn rank_step_offset(&self, step: u64, rank: u64, world_size: u64) -> Result<u64> {
        check_rank(rank, world_size)?;
        self.check_by_position()?;
        if step > self.num_steps() {
            return Err(Error::Index(format!(
                "step must be in [0, {}], got {step}",
                self.num_steps()
            )));
        }
        Ok(self.rank_total(0, step, rank, world_size))
    }

    fn rank_total(&self, first: u64, last: u64, rank: u64, world_size: u64) -> u64 {
        self.sum_over_steps(first, last, |span| {
            self.dealing.count(span, rank, world_size)
        })
    }

    /// The sum of `per_step(span)` over steps `first..last`: in O(1) when
    /// the dealing's shares depend on a step's length alone (every step but
    /// the epoch's last has `G` samples), else step by step.
    fn sum_over_steps(&self, first: u64, last: u64, per_step: impl Fn(Span) -> u64) -> u64 {
        if first >= last {
            return 0;
        }
        if !self.dealing.by_length_only() {
            return (first..last)
                .map(|step| per_step(self.span_unchecked(step)))
                .sum();
        }
        let full = per_step(self.span_unchecked(first));
        let tail = self.span_unchecked(last - 1);
        if tail.len == self.global_batch_size {
            (last - first) * full
        } else {
            (last - first - 1) * full + per_step(tail)
        }
    }

    /// The position whose sample fills the micro-batches of rank `rank` when
    /// its share of step `step` is empty (weight 0).
    pub fn filler_position(&self, step: u64, rank: u64, world_size: u64) -> Result<u64> {
        check_rank(rank, world_size)?;
        self.check_by_position()?;
        Ok(self.dealing.filler_position(self.span(step)?, rank))
    }

    /// Cuts `ids`, rank `rank`'s real samples of step `step` (in dealing
    /// order, as computed from an order or read from a plan file), into the
    /// step's micro-batches with their weights (`W / n_t` for real samples,
    /// 0 for fillers). A filler copies the share's last id, or, for an empty
    /// share, `filler_id(`[`Layout::filler_position`]`)`.
    pub fn split_step(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
        ids: &[i64],
        filler_id: impl FnOnce(u64) -> Result<i64>,
    ) -> Result<Vec<MicroBatch>> {
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
            None => filler_id(self.filler_position(step, rank, world_size)?)?,
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
}

fn check_micro_batch_size(micro_batch_size: u64) -> Result<()> {
    if micro_batch_size == 0 {
        return Err(Error::Value("micro_batch_size must be >= 1, got 0".into()));
    }
    Ok(())
}

/// Micro-batches of every rank in a step of `step_len` samples.
pub fn micro_batches_of(step_len: u64, world_size: u64, micro_batch_size: u64) -> u64 {
    step_len
        .div_ceil(world_size)
        .div_ceil(micro_batch_size)
        .max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_needs_no_order() {
        // N = 9, G = 4: steps of 4, 4 and 1; rank 1 of 2 has nothing in the last.
        let layout = Layout::new(9, 4, false, 0).unwrap();
        assert_eq!(layout.num_steps(), 3);
        assert_eq!(layout.rank_len(1, 2).unwrap(), 4);
        assert_eq!(layout.rank_step_offset(2, 1, 2).unwrap(), 4);
        assert_eq!(layout.filler_position(2, 1, 2).unwrap(), 8);
        let batches = layout
            .split_step(2, 1, 2, 2, &[], |p| Ok(p as i64))
            .unwrap();
        assert_eq!(batches, vec![(vec![8], vec![0.0])]);
    }

    #[test]
    fn bad_cursor_is_rejected() {
        assert!(Layout::new(10, 4, false, 3).is_err());
        assert!(Layout::new(10, 4, false, 10).is_ok());
        assert!(Layout::new(10, 4, true, 10).is_err());
        assert!(Layout::new(10, 4, true, 8).is_ok());
        assert!(Layout::new(10, 0, false, 0).is_err());
        assert!(Layout::new(MAX_SAMPLES + 1, 1, false, 0).is_err());
    }

    #[test]
    fn step_sums_agree_with_steps() {
        for (n, g, drop_last) in [
            (0u64, 3u64, false),
            (17, 4, false),
            (17, 4, true),
            (16, 4, false),
        ] {
            let layout = Layout::new(n, g, drop_last, 0).unwrap();
            for w in 1..6 {
                for r in 0..w {
                    let per_step: u64 = (0..layout.num_steps())
                        .map(|t| layout.step_count(t, r, w).unwrap())
                        .sum();
                    assert_eq!(layout.rank_len(r, w).unwrap(), per_step);
                }
            }
        }
    }
}
