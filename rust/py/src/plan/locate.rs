//! `EpochPlan.locate`: where sample ids are in the epoch.

use super::{EpochPlan, MicroCaps};
use crate::errors::IntoPyResult;
use epochplan_core::locate::{Located, ABSENT};
use epochplan_core::plan::Plan;
use pyo3::prelude::*;
use std::collections::HashMap;

impl EpochPlan {
    /// Where each of `ids` is (see `EpochPlan.locate`). A plan dealt by
    /// position is located by the core alone; a token plan deals each step
    /// that holds a queried id (its dealing reads the step's lengths) and
    /// finds the id among its ranks' micro-batches.
    pub(super) fn locate_ids(
        &self,
        py: Python<'_>,
        plan: &Plan,
        ids: &[i64],
        world_size: u64,
        caps: MicroCaps,
    ) -> PyResult<Located> {
        let caps = match caps {
            MicroCaps::Samples(b) => {
                return py.detach(|| plan.locate(ids, world_size, b)).py();
            }
            MicroCaps::Tokens(_) => caps,
        };
        let positions = py.detach(|| plan.positions_of(ids)).py()?;
        let g = plan.layout().global_batch_size();
        let mut located = Located::absent(positions).py()?;
        // The queries of each step, dealt one step at a time.
        let mut by_step: HashMap<u64, Vec<usize>> = HashMap::new();
        for (i, &p) in located.positions.iter().enumerate() {
            if p != ABSENT {
                by_step.entry(p as u64 / g).or_default().push(i);
            }
        }
        let mut steps: Vec<u64> = by_step.keys().copied().collect();
        steps.sort_unstable();
        for step in steps {
            let wanted = &by_step[&step];
            let mut found: HashMap<i64, (i64, i64)> = HashMap::with_capacity(wanted.len());
            for rank in 0..world_size {
                let batches = self.step_batches(py, plan, step, rank, world_size, caps)?;
                for (m, (batch, weights)) in batches.iter().enumerate() {
                    for (&id, &w) in batch.iter().zip(weights) {
                        if w != 0.0 {
                            found.insert(id, (rank as i64, m as i64)); // fillers weigh 0
                        }
                    }
                }
            }
            for &i in wanted {
                let (rank, m) = found.get(&ids[i]).copied().unwrap_or((ABSENT, ABSENT));
                located.steps[i] = step as i64;
                located.ranks[i] = rank;
                located.micro_batches[i] = m;
            }
        }
        Ok(located)
    }
}
