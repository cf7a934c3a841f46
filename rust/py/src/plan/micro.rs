//! `MicroBatches`: one rank's steps of a plan, as (indices, weights) lists.

use super::{EpochPlan, MicroCaps};
use crate::layout::batch_list;
use pyo3::prelude::*;
use pyo3::types::PyList;

/// Iterates one rank's steps; each item is the step's list of
/// (indices, weights) micro-batches.
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct MicroBatches {
    plan: Py<EpochPlan>,
    rank: u64,
    world_size: u64,
    caps: MicroCaps,
    /// The next step no caller has claimed yet.
    next: std::sync::atomic::AtomicU64,
    /// Claimed steps that failed (no memory for them, say): the next calls
    /// try them again rather than skip their samples.
    retry: std::sync::Mutex<Vec<u64>>,
}

impl MicroBatches {
    /// Rank `rank`'s steps of `plan` from its start step on.
    pub(super) fn new(plan: Py<EpochPlan>, rank: u64, world_size: u64, caps: MicroCaps) -> Self {
        let next = plan.get().layout.start_step();
        MicroBatches {
            plan,
            rank,
            world_size,
            caps,
            next: std::sync::atomic::AtomicU64::new(next),
            retry: std::sync::Mutex::new(Vec::new()),
        }
    }

    fn retry(&self) -> std::sync::MutexGuard<'_, Vec<u64>> {
        self.retry.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl MicroBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        use std::sync::atomic::Ordering;
        let owner = self.plan.get();
        let plan = owner.plan(py)?;
        // Each step is claimed by one caller (the GIL is released while a
        // step is made, and the iterator may be shared between threads).
        let retried = self.retry().pop();
        let step = match retried {
            Some(step) => step,
            None => {
                let steps = plan.layout().num_steps();
                let claim = |s: u64| (s < steps).then_some(s + 1);
                match self
                    .next
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, claim)
                {
                    Ok(step) => step,
                    Err(_) => return Ok(None),
                }
            }
        };
        let made = owner
            .step_batches(py, &plan, step, self.rank, self.world_size, self.caps)
            .and_then(|batches| batch_list(py, batches));
        if made.is_err() {
            self.retry().push(step);
        }
        made.map(Some)
    }

    fn __len__(&self) -> usize {
        let steps = self.plan.get().layout.num_steps();
        let unclaimed = steps
            - self
                .next
                .load(std::sync::atomic::Ordering::Relaxed)
                .min(steps);
        unclaimed as usize + self.retry().len()
    }
}
