//! One rank's view of a plan ([`RankPlan`]) and the per-rank work behind
//! it: a rank and a world size are checked once, when the view is made,
//! and every method after takes them as checked integers.

use super::{EpochPlan, MicroBatches, MicroCaps, Of};
use crate::args::{sample_ids_arg, step_arg};
use crate::errors::IntoPyResult;
use crate::layout::batch_list;
use crate::lengths::samples_cap_arg;
use epochplan_core::Error;
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyList;

impl EpochPlan {
    /// All of rank `rank`'s sample ids from start_step on, in step order.
    pub(super) fn rank_ids(&self, py: Python<'_>, rank: u64, w: u64) -> PyResult<Vec<i64>> {
        let plan = self.plan(py)?;
        if self.tokens.is_none() {
            return py.detach(|| plan.rank_indices(rank, w)).py();
        }
        let mut ids = Vec::new();
        for step in self.layout.start_step()..self.layout.num_steps() {
            let (samples, shares) = self.shares(py, &plan, step, w)?;
            let dealt = self.layout.dealt_ids(&samples, &shares, rank).py()?;
            // Grown fallibly: a share larger than memory is an error.
            if ids.try_reserve(dealt.len()).is_err() {
                let wanted = ids.len() + dealt.len();
                drop(ids); // the message needs memory too
                return Err(Error::Memory(format!(
                    "cannot allocate rank {rank}'s ids (more than {wanted} values): \
                     not enough memory"
                )))
                .py();
            }
            ids.extend_from_slice(&dealt);
        }
        Ok(ids)
    }

    /// Rank `rank`'s number of real samples from start_step on.
    pub(super) fn rank_len(&self, py: Python<'_>, rank: u64, w: u64) -> PyResult<u64> {
        if self.tokens.is_some() {
            let (first, last) = (self.layout.start_step(), self.layout.num_steps());
            return self.token_rank_len(py, first, last, rank, w);
        }
        self.layout.rank_len(rank, w).py()
    }

    /// Where step `step` (checked, the end included) starts in rank
    /// `rank`'s share of the whole epoch.
    pub(super) fn step_offset(
        &self,
        py: Python<'_>,
        step: u64,
        rank: u64,
        w: u64,
    ) -> PyResult<u64> {
        if self.tokens.is_some() {
            return self.token_rank_len(py, 0, step, rank, w);
        }
        self.layout.rank_step_offset(step, rank, w).py()
    }

    /// The micro-batches of rank `rank`'s step `step` (checked).
    pub(super) fn step_micro_list<'py>(
        &self,
        py: Python<'py>,
        step: u64,
        (rank, w): (u64, u64),
        caps: MicroCaps,
    ) -> PyResult<Bound<'py, PyList>> {
        let batches = self.step_batches(py, &self.plan(py)?, step, rank, w, caps)?;
        batch_list(py, batches)
    }

    /// Cuts `ids` (rank `rank`'s real samples of step `step`, e.g. read from
    /// a plan file) into the step's micro-batches. A token plan deals the
    /// step itself and checks that `ids` are the rank's share.
    pub(super) fn split_ids<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        (rank, w): (u64, u64),
        ids: &Bound<'py, PyAny>,
        (micro_batch_size, max_tokens): (Option<&Bound<'py, PyAny>>, Option<&Bound<'py, PyAny>>),
    ) -> PyResult<Bound<'py, PyList>> {
        let step = step_arg(step, self.layout.num_steps(), false)?;
        let plan = self.plan(py)?;
        if self.tokens.is_some() {
            // A sampler's per-step path: the sampler checked the whole
            // plan at construction; a step's own dealing names any sample
            // over the cap.
            let caps = self.caps_checked(micro_batch_size, max_tokens, false)?;
            let given = sample_ids_arg(ids, "ids", plan.store_size())?;
            let batches = self.step_batches(py, &plan, step, rank, w, caps)?;
            let (samples, shares) = self.shares(py, &plan, step, w)?;
            let share = self.layout.dealt_ids(&samples, &shares, rank).py()?;
            if share != given {
                return Err(PyValueError::new_err(format!(
                    "ids must be rank {rank}'s {} samples of step {step} in the plan's \
                     dealing order (step_indices({step}, {rank}, {w}))",
                    share.len()
                )));
            }
            return batch_list(py, batches);
        }
        let b = samples_cap_arg(micro_batch_size, max_tokens)?;
        let ids = sample_ids_arg(ids, "ids", plan.store_size())?;
        let batches = self
            .layout
            .split_step(step, rank, w, b, &ids, |position| plan.id_at(position))
            .py()?;
        batch_list(py, batches)
    }
}

/// One rank's view of an :class:`EpochPlan` (``plan.rank(rank,
/// world_size)``): the rank's ids, steps and micro-batches, with the rank
/// and world size checked once.
///
/// Examples:
///     >>> view = EpochPlan(9, 4).rank(1, 2)
///     >>> view.step_indices(0).tolist(), view.size()
///     ([3, 1], 4)
///     >>> view.step_micro_batches(2, 2)  # no sample left: a filler
///     [(array([8]), array([0.]))]
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct RankPlan {
    plan: Py<EpochPlan>,
    rank: u64,
    world_size: u64,
}

impl RankPlan {
    /// The view of `plan` for a checked rank and world size.
    pub(super) fn new(plan: Py<EpochPlan>, rank: u64, world_size: u64) -> Self {
        RankPlan {
            plan,
            rank,
            world_size,
        }
    }

    fn at(&self) -> (u64, u64) {
        (self.rank, self.world_size)
    }

    /// The rank's ids of step `step`, or their sources.
    fn of_step<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        of: Of,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let plan = self.plan.get();
        let step = step_arg(step, plan.layout.num_steps(), false)?;
        let ids = plan.rank_step(py, (step, self.rank, self.world_size), of)?;
        Ok(ids.into_pyarray(py))
    }
}

#[pymethods]
impl RankPlan {
    /// The plan viewed.
    #[getter]
    fn plan(&self, py: Python<'_>) -> Py<EpochPlan> {
        self.plan.clone_ref(py)
    }

    /// The rank.
    #[getter]
    fn rank(&self) -> u64 {
        self.rank
    }

    /// The number of ranks.
    #[getter]
    fn world_size(&self) -> u64 {
        self.world_size
    }

    /// The rank's sample ids from the plan's start step on, in step order.
    fn indices<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let ids = self.plan.get().rank_ids(py, self.rank, self.world_size)?;
        Ok(ids.into_pyarray(py))
    }

    /// The rank's number of real samples from the plan's start step on.
    fn size(&self, py: Python<'_>) -> PyResult<u64> {
        self.plan.get().rank_len(py, self.rank, self.world_size)
    }

    /// The rank's sample ids in step ``step``.
    fn step_indices<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        self.of_step(py, step, Of::Ids)
    }

    /// The source of each of the rank's samples in step ``step`` (see
    /// :meth:`EpochPlan.sources`).
    fn sources<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        self.of_step(py, step, Of::Sources)
    }

    /// Where step ``step`` starts in the rank's share of the whole epoch.
    fn step_offset(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<u64> {
        let plan = self.plan.get();
        let step = step_arg(step, plan.layout.num_steps(), true)?;
        plan.step_offset(py, step, self.rank, self.world_size)
    }

    /// The micro-batches of step ``step``: a list of (indices, weights)
    /// pairs (a token plan: under micro_batch_size and/or max_tokens).
    #[pyo3(signature = (step, micro_batch_size = None, *, max_tokens = None))]
    fn step_micro_batches<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        micro_batch_size: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let plan = self.plan.get();
        let step = step_arg(step, plan.layout.num_steps(), false)?;
        let caps = plan.caps(micro_batch_size, max_tokens)?;
        plan.step_micro_list(py, step, self.at(), caps)
    }

    /// Yields, per step from the plan's start step on, the step's list of
    /// micro-batches (see :meth:`EpochPlan.micro_batches`).
    #[pyo3(signature = (micro_batch_size = None, *, max_tokens = None))]
    fn micro_batches(
        &self,
        py: Python<'_>,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MicroBatches> {
        let caps = self.plan.get().caps(micro_batch_size, max_tokens)?;
        Ok(MicroBatches::new(
            self.plan.clone_ref(py),
            self.rank,
            self.world_size,
            caps,
        ))
    }

    /// Cuts ``ids`` (the rank's real samples of step ``step``, e.g. read
    /// from a plan file) into the step's micro-batches.
    #[pyo3(signature = (step, ids, micro_batch_size = None, *, max_tokens = None))]
    fn split_step<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        ids: &Bound<'py, PyAny>,
        micro_batch_size: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.plan
            .get()
            .split_ids(py, step, self.at(), ids, (micro_batch_size, max_tokens))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "RankPlan(rank={}, world_size={}, plan={})",
            self.rank,
            self.world_size,
            self.plan.bind(py).repr()?
        ))
    }
}
