//! Where samples are in an epoch: the inverse of a plan.
//!
//! A plan maps a position `p` of the epoch to a sample id: through its
//! order, then its index space. [`Plan::positions_of`] runs that map
//! backwards for an array of ids, without building the epoch: the cipher
//! and chunked orders are inverted per id in O(1), a selection's index of
//! an id is O(1) (a mask, a random-split part), O(log ranges) or O(log
//! len) (ascending indices); a uniform order's table and an unordered index
//! array are read once for the whole query. A mixture's epoch is searched
//! forwards (its arrangement has no inverse here): O(N) for the whole
//! query, and a sample a mixture repeats in the epoch is found at its first
//! position. [`Plan::locate`] then gives each position's step, rank and
//! micro-batch, for a plan dealt by position (strided): the step is
//! `p / G`, the rank and the place in the rank's share come from the
//! dealing, the micro-batch from the share's cut ([`StepShare`]).

use crate::buffer::{copy_of, try_filled, vec_with_capacity};
use crate::dealing::Dealing;
use crate::error::{Error, Result};
use crate::layout::StepShare;
use crate::plan::Plan;
use crate::space::Space;
use std::collections::HashMap;

/// The value of a query whose id the epoch does not hold (outside the
/// plan's space, or in the short last step `drop_last` drops).
pub const ABSENT: i64 = -1;

/// Where each id of a query is in one epoch, [`ABSENT`] where it is not.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Located {
    /// The position in the epoch's order.
    pub positions: Vec<i64>,
    /// The step (`position / global_batch_size`).
    pub steps: Vec<i64>,
    /// The rank whose share holds it.
    pub ranks: Vec<i64>,
    /// The micro-batch of that rank's step that holds it.
    pub micro_batches: Vec<i64>,
}

impl Located {
    /// The steps, ranks and micro-batches of `positions`, all [`ABSENT`] for
    /// now; an error (not an abort) when memory runs out.
    pub fn absent(positions: Vec<i64>) -> Result<Located> {
        let n = positions.len();
        let filled = || {
            try_filled(ABSENT, n).ok_or_else(|| {
                Error::Memory(format!("cannot allocate the locations of {n} sample ids"))
            })
        };
        Ok(Located {
            steps: filled()?,
            ranks: filled()?,
            micro_batches: filled()?,
            positions,
        })
    }
}

/// Positions of an epoch searched at once by the forward search.
const SEARCH_PIECE: u64 = 1 << 16;

impl Plan {
    /// An error naming the first of `ids` that is not a sample id of the
    /// store (`ids` being `sample_ids[offset..]` of the caller's).
    pub(crate) fn check_ids(&self, ids: &[i64], offset: usize) -> Result<()> {
        let store = self.store_size();
        // A negative id is at least 2^63 as unsigned: one comparison, with
        // no early exit, which the compiler vectorises; the first bad id is
        // looked for only when there is one.
        let bad = |v: i64| v as u64 >= store;
        let any_bad = ids
            .chunks(4096)
            .any(|chunk| chunk.iter().fold(false, |any, &v| any | bad(v)));
        if !any_bad {
            return Ok(());
        }
        match ids.iter().position(|&v| bad(v)) {
            Some(i) => Err(Error::Value(format!(
                "sample_ids[{}] must be a sample id in [0, {store}), got {}",
                offset + i,
                ids[i]
            ))),
            None => Ok(()),
        }
    }

    /// The position of each sample id of `ids` (store ids, each in
    /// `[0, store_size())`) in the epoch, or [`ABSENT`]; the steps dropped by
    /// `drop_last` hold none.
    pub fn positions_of(&self, ids: &[i64]) -> Result<Vec<i64>> {
        self.check_ids(ids, 0)?;
        self.positions_of_checked(ids)
    }

    /// [`Plan::positions_of`] of ids [`Plan::check_ids`] has checked.
    pub(crate) fn positions_of_checked(&self, ids: &[i64]) -> Result<Vec<i64>> {
        // Fallible: under an address-space limit a large query is an
        // error, not an aborted process.
        let mut out = copy_of(ids, "the positions of sample_ids")?;
        match self.space() {
            Space::Range => self.order().invert_slice(&mut out),
            Space::Selection(sel) => {
                sel.index_of_slice(&mut out);
                let mut held: Vec<usize> = vec_with_capacity(out.len(), "the selected sample ids")?;
                held.extend((0..out.len()).filter(|&i| out[i] != ABSENT));
                let mut js: Vec<i64> = vec_with_capacity(held.len(), "the selected sample ids")?;
                js.extend(held.iter().map(|&i| out[i]));
                self.order().invert_slice(&mut js);
                for (&i, &p) in held.iter().zip(&js) {
                    out[i] = p;
                }
            }
            Space::Mixture { .. } => self.search_positions(&mut out)?,
        }
        // Positions past the last step (drop_last's short step) are not dealt.
        let dealt = self.layout().num_steps() * self.layout().global_batch_size();
        for p in out.iter_mut() {
            if *p != ABSENT && *p as u64 >= dealt {
                *p = ABSENT;
            }
        }
        Ok(out)
    }

    /// Replaces each id of `values` by its first position in the epoch, or
    /// [`ABSENT`], reading the epoch's ids forwards a piece at a time.
    /// Memory: a map entry an id and a link an index (every index of one id
    /// chained from its first), each reserved fallibly.
    fn search_positions(&self, values: &mut [i64]) -> Result<()> {
        let no_room = || {
            Error::Memory(format!(
                "cannot allocate the search for {} sample ids: not enough memory",
                values.len()
            ))
        };
        let mut first: HashMap<i64, usize> = HashMap::new();
        first.try_reserve(values.len()).map_err(|_| no_room())?;
        let mut next = try_filled(usize::MAX, values.len()).ok_or_else(no_room)?;
        for (i, &id) in values.iter().enumerate().rev() {
            if let Some(later) = first.insert(id, i) {
                next[i] = later;
            }
        }
        values.iter_mut().for_each(|v| *v = ABSENT);
        let n = self.layout().num_samples();
        let mut piece = vec_with_capacity(SEARCH_PIECE.min(n) as usize, "a piece of the epoch")?;
        let mut start = 0;
        while start < n && !first.is_empty() {
            let end = (start + SEARCH_PIECE).min(n);
            piece.clear();
            piece.extend(start as i64..end as i64);
            self.map_positions(&mut piece)?;
            for (offset, id) in piece.iter().enumerate() {
                if let Some(mut i) = first.remove(id) {
                    let position = (start + offset as u64) as i64;
                    while i != usize::MAX {
                        values[i] = position;
                        i = next[i];
                    }
                }
            }
            start = end;
        }
        Ok(())
    }

    /// The position, step, rank and micro-batch of each id of `ids` in the
    /// epoch, for `world_size` ranks and micro-batches of at most
    /// `micro_batch_size` samples. A plan dealt by tokens places its samples
    /// by their lengths: it is located step by step by the caller.
    pub fn locate(&self, ids: &[i64], world_size: u64, micro_batch_size: u64) -> Result<Located> {
        if !matches!(self.layout().dealing(), Dealing::Strided) {
            return Err(Error::Value(
                "a plan dealt by tokens is located step by step (its dealing reads the \
                 step's lengths)"
                    .into(),
            ));
        }
        if world_size == 0 || micro_batch_size == 0 {
            return Err(Error::Value(format!(
                "world_size and micro_batch_size must be >= 1, got {world_size} and \
                 {micro_batch_size}"
            )));
        }
        let positions = self.positions_of(ids)?;
        let g = self.layout().global_batch_size();
        let mut located = Located::absent(positions)?;
        for (i, &p) in located.positions.iter().enumerate() {
            if p == ABSENT {
                continue;
            }
            let p = p as u64;
            let step = p / g;
            let offset = p - step * g;
            let rank = offset % world_size;
            // O(1): the share's count and cut follow from the step's length.
            let share: StepShare = self
                .layout()
                .share(step, rank, world_size, micro_batch_size)?;
            located.steps[i] = step as i64;
            located.ranks[i] = rank as i64;
            located.micro_batches[i] = share.micro_batch_of(offset / world_size) as i64;
        }
        Ok(located)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::{Kind, Order};
    use crate::space::Selection;
    use std::sync::Arc;

    fn plans() -> Vec<Plan> {
        let kinds = [
            Kind::Cipher,
            Kind::Uniform,
            Kind::Identity,
            Kind::Chunked {
                chunk_size: 7,
                preload_nchunks: 3,
            },
        ];
        let mut plans = Vec::new();
        for n in [0u64, 1, 5, 64, 65, 100, 1000] {
            for kind in kinds {
                for (g, drop_last) in [(1, false), (7, false), (7, true), (16, false)] {
                    let order = Order::new(n, 3, 2, kind).unwrap();
                    plans.push(Plan::new(order, g, drop_last, 0).unwrap());
                }
            }
        }
        plans
    }

    #[test]
    fn every_id_is_located_where_the_plan_deals_it() {
        for plan in plans() {
            let n = plan.layout().num_samples();
            for (w, b) in [(1, 1), (3, 2), (8, 1), (5, 100)] {
                let ids: Vec<i64> = (0..n as i64).collect();
                let located = plan.locate(&ids, w, b).unwrap();
                let mut seen = vec![false; n as usize];
                for step in 0..plan.layout().num_steps() {
                    for rank in 0..w {
                        let batches = plan.micro_batches(step, rank, w, b).unwrap();
                        for (m, (batch, weights)) in batches.iter().enumerate() {
                            for (&id, &weight) in batch.iter().zip(weights) {
                                if weight == 0.0 {
                                    continue; // a filler
                                }
                                let i = id as usize;
                                assert!(!seen[i]);
                                seen[i] = true;
                                assert_eq!(located.steps[i], step as i64);
                                assert_eq!(located.ranks[i], rank as i64);
                                assert_eq!(located.micro_batches[i], m as i64);
                            }
                        }
                    }
                }
                for (i, &was) in seen.iter().enumerate() {
                    // Dealt exactly where located; the rest (drop_last) absent.
                    assert_eq!(was, located.positions[i] != ABSENT, "id {i}");
                    if located.positions[i] != ABSENT {
                        assert_eq!(plan.id_at(located.positions[i] as u64).unwrap(), i as i64);
                    }
                }
            }
        }
    }

    #[test]
    fn a_selection_locates_its_ids_and_nothing_else() {
        let store = 500u64;
        let selections = [
            Selection::from_ranges(&[(10, 60), (100, 250), (400, 401)], store).unwrap(),
            Selection::from_mask(&(0..store).map(|i| i % 3 == 1).collect::<Vec<_>>()).unwrap(),
            Selection::from_indices((0..200).map(|i| (i * 7 + 3) % 500).collect(), store).unwrap(),
            Selection::from_indices((0..200).map(|i| i * 2).collect(), store).unwrap(),
            crate::space::random_split(store, &[120, 380], 9)
                .unwrap()
                .swap_remove(1),
        ];
        for sel in selections {
            for kind in [Kind::Cipher, Kind::Uniform] {
                let order = Order::new(sel.len(), 1, 0, kind).unwrap();
                let plan = Plan::new(order, 16, false, 0)
                    .unwrap()
                    .with_space(Space::Selection(Arc::new(sel.clone())))
                    .unwrap();
                let ids: Vec<i64> = (0..store as i64).collect();
                let positions = plan.positions_of(&ids).unwrap();
                for id in 0..store {
                    let p = positions[id as usize];
                    assert_eq!(p != ABSENT, sel.contains(id), "id {id}");
                    if p != ABSENT {
                        assert_eq!(plan.id_at(p as u64).unwrap(), id as i64);
                    }
                }
            }
        }
    }

    #[test]
    fn ids_outside_the_store_are_named() {
        let plan = Plan::new(Order::new(10, 0, 0, Kind::Cipher).unwrap(), 4, false, 0).unwrap();
        let err = plan.positions_of(&[3, 10]).unwrap_err();
        assert!(err
            .to_string()
            .contains("sample_ids[1] must be a sample id in [0, 10), got 10"));
        assert!(plan.locate(&[1], 0, 1).is_err());
    }
}
