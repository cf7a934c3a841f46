//! Epoch plans: an epoch's [`Layout`] (steps, shares, micro-batch cuts and
//! weights) combined with its [`Order`] (which sample is at each position).
//!
//! The layout says which positions rank `r` gets in step `t`; the order turns
//! them into sample ids. The state to resume is `(format, N, seed, epoch,
//! kind, G, cursor)`, independent of `W`.
//!
//! A plan over an index space ([`Space`]) maps the order's output through
//! it: a plan over a selection yields `sel[order(position)]`; a plan over a
//! mixture's epoch keeps the epoch's stratified arrangement (its order is
//! the identity) and shuffles each step's positions before the lookup.
//!
//! A plan whose layout deals [`Dealing::Balanced`](crate::dealing::Dealing)
//! reads a step's lengths by the ids its order puts at the step's positions
//! ([`Plan::step_samples`]), one step at a time, and the layout deals them.

use crate::buffer::zeroed_ids;
use crate::dealing::{SampleLengths, StepSamples};
use crate::error::{Error, Result};
use crate::layout::Layout;
pub use crate::layout::{micro_batches_of, MicroBatch, StepShare};
use crate::order::{Kind, Order};
use crate::parallel;
use crate::space::{Space, StepShuffle};
use crate::tokens::Caps;

/// One epoch's plan: a layout and an order of the same number of samples.
#[derive(Debug, Clone)]
pub struct Plan {
    layout: Layout,
    order: Order,
    space: Space,
}

impl Plan {
    /// A plan over `order` with `global_batch_size` samples per step,
    /// starting at sample `cursor` (a step boundary).
    pub fn new(order: Order, global_batch_size: u64, drop_last: bool, cursor: u64) -> Result<Plan> {
        let layout = Layout::new(order.len(), global_batch_size, drop_last, cursor)?;
        Plan::from_parts(layout, order)
    }

    /// The plan of `layout` over `order`, which must have the layout's
    /// number of samples.
    pub fn from_parts(layout: Layout, order: Order) -> Result<Plan> {
        if layout.num_samples() != order.len() {
            return Err(Error::Value(format!(
                "the order has {} samples, the layout {}",
                order.len(),
                layout.num_samples()
            )));
        }
        Ok(Plan {
            layout,
            order,
            space: Space::Range,
        })
    }

    /// The same plan over `space`, which must have the plan's number of
    /// ids; a mixture's epoch needs the identity order (its arrangement is
    /// the epoch's, stratified).
    pub fn with_space(self, space: Space) -> Result<Plan> {
        space.check_len(self.layout.num_samples())?;
        if matches!(space, Space::Mixture { .. }) && self.order.kind() != Kind::Identity {
            return Err(Error::Value(format!(
                "a plan over a mixture keeps the mixture's stratified arrangement: its order \
                 must be the identity, got kind={:?}",
                self.order.kind().name()
            )));
        }
        Ok(Plan { space, ..self })
    }

    /// The plan's index space.
    pub fn space(&self) -> &Space {
        &self.space
    }

    /// The size of the store the plan's ids belong to (`N` for a plan over
    /// `0..N`): what a lengths array is indexed by.
    pub fn store_size(&self) -> u64 {
        self.space.store_size(self.layout.num_samples())
    }

    /// Replaces positions of the epoch (each in `[0, N)`) by their sample
    /// ids: the order, then the space. Parallel for large inputs, the same
    /// result on any thread count.
    pub fn map_positions(&self, values: &mut [i64]) -> Result<()> {
        let n = self.layout.num_samples();
        if let Some(bad) = values.iter().find(|&&p| p < 0 || p as u64 >= n) {
            return Err(Error::Index(format!(
                "positions must be in [0, {n}), got {bad}"
            )));
        }
        self.map_valid(values)
    }

    /// [`Plan::map_positions`] for positions known to lie in `[0, N)`; an
    /// error only for want of memory.
    fn map_valid(&self, values: &mut [i64]) -> Result<()> {
        match &self.space {
            Space::Range => self.order.map_in_place(values),
            Space::Selection(sel) => {
                parallel::for_each_piece(values, parallel::PIECE, |_, piece| {
                    self.order.map_slice(piece);
                    sel.map_slice(piece);
                });
            }
            Space::Mixture { epoch, .. } => {
                return parallel::try_for_each_piece(values, parallel::PIECE, |_, piece| {
                    self.shuffle_steps(piece);
                    epoch.map_slice(piece)
                });
            }
        }
        Ok(())
    }

    /// The sample id at one position of the epoch.
    pub fn id_at(&self, position: u64) -> Result<i64> {
        let mut one = [i64::try_from(position).unwrap_or(-1)];
        self.map_positions(&mut one)?;
        Ok(one[0])
    }

    /// A mixture plan's step shuffles, applied in place to `values`
    /// (positions in `[0, N)`, in runs of one step each).
    fn shuffle_steps(&self, values: &mut [i64]) {
        let Space::Mixture {
            seed, plan_epoch, ..
        } = &self.space
        else {
            return;
        };
        let (g, n) = (self.layout.global_batch_size(), self.layout.num_samples());
        let mut rest = values;
        while let Some(&first) = rest.first() {
            let step = first as u64 / g;
            let start = step * g;
            // The run of the step's positions (one subtraction a position,
            // not a division).
            let run = rest
                .iter()
                .position(|&p| (p as u64).wrapping_sub(start) >= g)
                .unwrap_or(rest.len());
            let (head, tail) = rest.split_at_mut(run);
            StepShuffle::of_plan_step(*seed, *plan_epoch, step, start, g.min(n - start))
                .map_slice(head);
            rest = tail;
        }
    }

    /// Replaces positions of the epoch (each in `[0, N)`) by the source of
    /// the sample at each: the mixture's source number for a plan over a
    /// mixture, 0 otherwise.
    fn map_sources(&self, values: &mut [i64]) -> Result<()> {
        match &self.space {
            Space::Mixture { epoch, .. } => {
                self.shuffle_steps(values);
                let positions = values.to_vec();
                epoch.fill_sources(&positions, values)
            }
            _ => {
                values.iter_mut().for_each(|v| *v = 0);
                Ok(())
            }
        }
    }

    /// The source of each of rank `rank`'s samples in step `step`, in the
    /// order of [`Plan::step_indices`].
    pub fn step_sources(&self, step: u64, rank: u64, world_size: u64) -> Result<Vec<i64>> {
        let count = self.layout.step_count(step, rank, world_size)?;
        let mut out = zeroed_ids(count, "the requested sources")?;
        self.layout
            .fill_rank_positions(step, rank, world_size, &mut out);
        self.map_sources(&mut out)?;
        Ok(out)
    }

    /// The source of each of step `step`'s samples, in position order (as
    /// [`Plan::step_ids`] gives the ids).
    pub fn step_position_sources(&self, step: u64) -> Result<Vec<i64>> {
        let mut out = self.step_positions(step)?;
        self.map_sources(&mut out)?;
        Ok(out)
    }

    /// Step `step`'s positions, in order.
    fn step_positions(&self, step: u64) -> Result<Vec<i64>> {
        let span = self.layout.span(step)?;
        let mut positions = zeroed_ids(span.len, "the step's ids")?;
        for (k, slot) in positions.iter_mut().enumerate() {
            *slot = (span.start + k as u64) as i64;
        }
        Ok(positions)
    }

    /// The epoch's layout: everything of the plan but the order.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The epoch's order.
    pub fn order(&self) -> &Order {
        &self.order
    }

    /// The kind of the epoch's order.
    pub fn kind(&self) -> Kind {
        self.order.kind()
    }

    /// The same plan started at another step boundary.
    pub fn with_cursor(&self, cursor: u64) -> Result<Plan> {
        Ok(Plan {
            layout: self.layout.with_cursor(cursor)?,
            order: self.order.clone(),
            space: self.space.clone(),
        })
    }

    /// Rank `rank`'s sample ids in step `step`, in dealing order.
    pub fn step_indices(&self, step: u64, rank: u64, world_size: u64) -> Result<Vec<i64>> {
        let count = self.layout.step_count(step, rank, world_size)?;
        let mut out = zeroed_ids(count, "the requested ids")?;
        self.layout
            .fill_rank_positions(step, rank, world_size, &mut out);
        self.map_positions(&mut out)?;
        Ok(out)
    }

    /// All of rank `rank`'s sample ids from `start_step` on, in step order:
    /// O(N/W) time and memory, never building the global order.
    pub fn rank_indices(&self, rank: u64, world_size: u64) -> Result<Vec<i64>> {
        let total = self.layout.rank_len(rank, world_size)?;
        let mut out = zeroed_ids(total, "the rank's share")?;
        let first = self.layout.start_step();
        self.layout
            .fill_rank_positions(first, rank, world_size, &mut out);
        self.map_positions(&mut out)?;
        Ok(out)
    }

    /// Fills `out` with rank `rank`'s sample ids from `first_step` (after
    /// `skip` samples of it), for chunked writers and readers; returns the
    /// step and the offset inside it where it stopped.
    pub fn fill_rank_ids(
        &self,
        first_step: u64,
        skip: u64,
        rank: u64,
        world_size: u64,
        out: &mut [i64],
    ) -> Result<(u64, u64)> {
        let end = self
            .layout
            .fill_rank_positions_from(first_step, skip, rank, world_size, out);
        self.map_valid(out)?;
        Ok(end)
    }

    /// The micro-batches of rank `rank` in step `step`: for each, the sample
    /// ids and their loss weights (`W / n_t` for real samples, 0 for fillers).
    pub fn micro_batches(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
    ) -> Result<Vec<MicroBatch>> {
        let ids = self.step_indices(step, rank, world_size)?;
        self.split_step(step, rank, world_size, micro_batch_size, &ids)
    }

    /// Cuts `ids`, rank `rank`'s real samples of step `step` (as
    /// [`Plan::step_indices`] gives them, or as read from a plan file), into
    /// the step's micro-batches with their weights; an empty share is filled
    /// with the order's sample at [`Layout::filler_position`].
    pub fn split_step(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        micro_batch_size: u64,
        ids: &[i64],
    ) -> Result<Vec<MicroBatch>> {
        self.layout
            .split_step(step, rank, world_size, micro_batch_size, ids, |position| {
                self.id_at(position)
            })
    }

    /// The sample ids at step `step`'s positions, in position order.
    pub fn step_ids(&self, step: u64) -> Result<Vec<i64>> {
        let mut ids = self.step_positions(step)?;
        self.map_valid(&mut ids)?;
        Ok(ids)
    }

    /// Step `step`'s samples with their `lengths` and `loss_tokens` (the
    /// lengths when `None`), read by id: only the step's entries are read.
    pub fn step_samples(
        &self,
        step: u64,
        lengths: &dyn SampleLengths,
        loss_tokens: Option<&dyn SampleLengths>,
    ) -> Result<StepSamples> {
        let store = self.store_size();
        for (name, values) in [("lengths", Some(lengths)), ("loss_tokens", loss_tokens)] {
            match values {
                Some(v) if v.num_samples() != store => {
                    return Err(Error::Value(format!(
                        "{name} must hold one value per sample of the store ({store}), got {}",
                        v.num_samples()
                    )))
                }
                _ => {}
            }
        }
        let span = self.layout.span(step)?;
        let ids = self.step_ids(step)?;
        let mut read = Vec::new();
        lengths.read_at("lengths", span.start, &ids, &mut read)?;
        let loss = match loss_tokens {
            Some(loss) => {
                let mut out = Vec::new();
                loss.read_at("loss_tokens", span.start, &ids, &mut out)?;
                Some(out)
            }
            None => None,
        };
        Ok(StepSamples {
            step,
            span,
            ids,
            lengths: read,
            loss_tokens: loss,
        })
    }

    /// Rank `rank`'s sample ids of step `step` of a balanced plan, in
    /// dealing order.
    pub fn balanced_step_indices(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        lengths: &dyn SampleLengths,
        loss_tokens: Option<&dyn SampleLengths>,
    ) -> Result<Vec<i64>> {
        let samples = self.step_samples(step, lengths, loss_tokens)?;
        let shares = self.layout.step_shares(&samples, world_size)?;
        self.layout.dealt_ids(&samples, &shares, rank)
    }

    /// Rank `rank`'s micro-batches of step `step` of a balanced plan, under
    /// `caps`, with their weights.
    #[allow(clippy::too_many_arguments)]
    pub fn balanced_micro_batches(
        &self,
        step: u64,
        rank: u64,
        world_size: u64,
        caps: Caps,
        lengths: &dyn SampleLengths,
        loss_tokens: Option<&dyn SampleLengths>,
    ) -> Result<Vec<MicroBatch>> {
        let samples = self.step_samples(step, lengths, loss_tokens)?;
        let dealing = self.layout.deal_step(&samples, world_size, caps)?;
        self.layout.dealt_micro_batches(&samples, &dealing, rank)
    }
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
            assert_eq!(p.layout().num_steps(), 13_242);
            assert_eq!(
                p.layout().total_micro_batches(w, 1_000_000).unwrap(),
                13_242
            );
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
        assert!(p.layout().share(0, 0, 2, 0).is_err());
        assert!(p.micro_batches(0, 0, 2, 0).is_err());
        let ids = p.step_indices(0, 0, 2).unwrap();
        assert!(p.split_step(0, 0, 2, 0, &ids).is_err());
        assert!(p.layout().total_micro_batches(2, 0).is_err());
    }

    #[test]
    fn balanced_plans_keep_the_steps_and_cover_them_once() {
        use crate::dealing::Dealing;
        use crate::tokens::{Cost, Normalization};
        let lengths: Vec<u32> = (0..23u32).map(|i| (i * 7919) % 50 + 1).collect();
        let strided = plan(23, 5, false);
        let layout = strided
            .layout()
            .with_dealing(
                Dealing::Balanced { cost: Cost::Tokens },
                Normalization::Tokens,
            )
            .unwrap();
        let p = Plan::from_parts(layout, strided.order().clone()).unwrap();
        assert!(
            p.step_indices(0, 0, 2).is_err(),
            "positional methods need lengths"
        );
        let caps = Caps::new(Some(2), Some(60)).unwrap();
        for w in 1..8 {
            for step in 0..p.layout().num_steps() {
                let mut balanced: Vec<i64> = (0..w)
                    .flat_map(|r| p.balanced_step_indices(step, r, w, &lengths, None).unwrap())
                    .collect();
                let mut by_stride: Vec<i64> = (0..w)
                    .flat_map(|r| strided.step_indices(step, r, w).unwrap())
                    .collect();
                balanced.sort_unstable();
                by_stride.sort_unstable();
                assert_eq!(balanced, by_stride);
                let batches: Vec<_> = (0..w)
                    .map(|r| {
                        p.balanced_micro_batches(step, r, w, caps, &lengths, None)
                            .unwrap()
                    })
                    .collect();
                let total: f64 = batches
                    .iter()
                    .flatten()
                    .flat_map(|(ids, weights)| {
                        ids.iter()
                            .zip(weights)
                            .map(|(&id, &w)| w * lengths[id as usize] as f64)
                    })
                    .sum();
                assert!((total - w as f64).abs() < 1e-9, "{total}");
                assert!(batches.iter().all(|b| b.len() == batches[0].len()));
            }
        }
        let err = p
            .balanced_micro_batches(0, 0, 2, Caps::new(None, Some(3)).unwrap(), &lengths, None)
            .unwrap_err();
        assert!(err.to_string().starts_with("lengths["), "{err}");
        let negative = [-1i64; 23];
        let err = p
            .balanced_step_indices(0, 0, 1, &negative.to_vec(), None)
            .unwrap_err();
        assert!(err.to_string().contains("lengths must be >= 0"), "{err}");
    }
}
