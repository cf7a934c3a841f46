//! `MicroBatches`: one rank's steps of a plan, as (indices, weights) lists.
//!
//! While the caller works on one step, the next ones are made on the pool:
//! a step's dealing needs no GIL, and on the pool's threads its buffers come
//! from their own allocator arenas instead of being faulted in again on the
//! caller's for every step (measured in `benches/NOTES.md`: one rank's epoch
//! at G = 65,536 in less than half the time on two threads).

use super::tokens::StepJob;
use super::{EpochPlan, MicroCaps};
use crate::errors::IntoPyResult;
use crate::layout::batch_list;
use epochplan_core::layout::MicroBatch;
use epochplan_core::parallel::{self, Spawned};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::PyList;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The most steps made ahead, whatever the thread count (each holds one
/// step's lengths and one rank's micro-batches).
const MAX_AHEAD: usize = 16;

/// A step being made on the pool.
#[derive(Debug)]
struct Ahead {
    step: u64,
    /// The process that started it: a forked child has not the thread that
    /// makes it, and makes the step itself.
    pid: u32,
    /// None when the pool could not take it: made in turn, its error then.
    result: Option<Spawned<epochplan_core::Result<Vec<MicroBatch>>>>,
}

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
    next: AtomicU64,
    /// Claimed steps that failed (no memory for them, say): the next calls
    /// try them again rather than skip their samples.
    retry: Mutex<Vec<u64>>,
    /// Claimed steps being made on the pool, in the order they were claimed.
    ahead: Mutex<VecDeque<Ahead>>,
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
            next: AtomicU64::new(next),
            retry: Mutex::new(Vec::new()),
            ahead: Mutex::new(VecDeque::new()),
        }
    }

    fn retry(&self) -> MutexGuard<'_, Vec<u64>> {
        self.retry.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ahead(&self) -> MutexGuard<'_, VecDeque<Ahead>> {
        self.ahead.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Claims the next step nobody has claimed. Each step is claimed by one
    /// caller: the iterator may be shared between threads.
    fn claim(&self) -> Option<u64> {
        let steps = self.plan.get().layout.num_steps();
        let claim = |s: u64| (s < steps).then_some(s + 1);
        self.next
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, claim)
            .ok()
    }

    /// The step made ahead that comes first, if one is.
    fn take_ahead(&self) -> Option<Ahead> {
        self.ahead().pop_front()
    }

    /// Makes `step` on the caller's thread.
    fn make(&self, py: Python<'_>, step: u64) -> PyResult<Vec<MicroBatch>> {
        let job = self.job(py, step)?;
        py.detach(job).py()
    }

    /// A step made ahead, waited for (or made now when it could not be
    /// started, or was started before a fork).
    fn finish(&self, py: Python<'_>, ahead: Ahead) -> PyResult<Vec<MicroBatch>> {
        match ahead.result {
            Some(result) if ahead.pid == std::process::id() => {
                match py.detach(move || result.recv()) {
                    Ok(Ok(made)) => made.py(),
                    _ => Err(PyRuntimeError::new_err(format!(
                        "making step {} failed on a worker thread; the next call makes it again",
                        ahead.step
                    ))),
                }
            }
            _ => self.make(py, ahead.step),
        }
    }

    fn job(&self, py: Python<'_>, step: u64) -> PyResult<StepJob> {
        let owner = self.plan.get();
        let plan = owner.plan(py)?;
        owner.step_job(py, &plan, step, self.rank, self.world_size, self.caps)
    }

    /// Starts the next steps on the pool: two a thread, so that every thread
    /// has one to start on while the caller builds its lists (one a thread
    /// left the pool idle half the time; more gained nothing). None with one
    /// thread: the caller asked for one core.
    fn read_ahead(&self, py: Python<'_>) {
        let threads = parallel::num_threads();
        let depth = if threads > 1 {
            (2 * threads).min(MAX_AHEAD)
        } else {
            0
        };
        while self.ahead().len() < depth {
            let Some(step) = self.claim() else { return };
            let started = self.job(py, step).and_then(|job| parallel::spawn(job).py());
            let failed = started.is_err();
            self.ahead().push_back(Ahead {
                step,
                pid: std::process::id(),
                result: started.ok(),
            });
            if failed {
                return;
            }
        }
    }
}

#[pymethods]
impl MicroBatches {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyList>>> {
        let retried = self.retry().pop();
        let (step, made) = if let Some(step) = retried {
            (step, self.make(py, step))
        } else if let Some(ahead) = self.take_ahead() {
            (ahead.step, self.finish(py, ahead))
        } else if let Some(step) = self.claim() {
            (step, self.make(py, step))
        } else {
            return Ok(None);
        };
        // Started before this step's list is built, so the two overlap.
        if made.is_ok() {
            self.read_ahead(py);
        }
        let list = made.and_then(|batches| batch_list(py, batches));
        if list.is_err() {
            self.retry().push(step);
        }
        list.map(Some)
    }

    fn __len__(&self) -> usize {
        let steps = self.plan.get().layout.num_steps();
        let unclaimed = steps - self.next.load(Ordering::Relaxed).min(steps);
        unclaimed as usize + self.retry().len() + self.ahead().len()
    }
}
