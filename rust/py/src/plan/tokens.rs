//! A token plan's caps, steps and shares: how `EpochPlan`'s methods deal a
//! step by its lengths (a plan without lengths deals by position).

use super::{EpochPlan, MicroCaps, Of};
use crate::errors::IntoPyResult;
use crate::lengths::{caps_arg, samples_cap_arg};
use epochplan_core::dealing::{SampleLengths, StepSamples};
use epochplan_core::layout::MicroBatch;
use epochplan_core::plan::Plan;
use epochplan_core::tokens::StepShares;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One rank's micro-batches of one step, to be made without the GIL.
pub(super) type StepJob =
    Box<dyn FnOnce() -> epochplan_core::Result<Vec<MicroBatch>> + Send + 'static>;

impl EpochPlan {
    /// The caps of `micro_batch_size` and `max_tokens` for this plan,
    /// refused when a sample of the plan is longer than `max_tokens`.
    pub(super) fn caps(
        &self,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MicroCaps> {
        self.caps_checked(micro_batch_size, max_tokens, true)
    }

    /// The caps; with `oversize`, refused when a sample of the plan is
    /// longer than `max_tokens` (one pass over the lengths a plan and cap).
    pub(super) fn caps_checked(
        &self,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
        oversize: bool,
    ) -> PyResult<MicroCaps> {
        Ok(match &self.tokens {
            Some(tokens) => {
                let caps = caps_arg(micro_batch_size, max_tokens)?.with_packing(tokens.packing);
                if let (Some(cap), Some(arg), true) = (caps.max_tokens(), max_tokens, oversize) {
                    // Every sample over the cap, found before the first batch
                    // (one pass over the lengths, kept for the plan's life).
                    tokens.refuse_oversize(arg.py(), cap, &self.space.space)?;
                }
                MicroCaps::Tokens(caps)
            }
            None => MicroCaps::Samples(samples_cap_arg(micro_batch_size, max_tokens)?),
        })
    }

    /// A token plan's step with its lengths (read under the GIL: only the
    /// step's entries).
    pub(super) fn samples(&self, py: Python<'_>, plan: &Plan, step: u64) -> PyResult<StepSamples> {
        let Some(tokens) = &self.tokens else {
            return Err(PyValueError::new_err(
                "this plan has no lengths: give EpochPlan(..., lengths=...)",
            ));
        };
        let (lengths, loss) = tokens.readers(py)?;
        let loss = loss.as_ref().map(|l| l as &dyn SampleLengths);
        plan.step_samples(step, &lengths, loss).py()
    }

    /// A token plan's step and its shares over `w` ranks.
    pub(super) fn shares(
        &self,
        py: Python<'_>,
        plan: &Plan,
        step: u64,
        w: u64,
    ) -> PyResult<(StepSamples, StepShares)> {
        let samples = self.samples(py, plan, step)?;
        let layout = self.layout;
        let shares = py.detach(|| layout.step_shares(&samples, w)).py()?;
        Ok((samples, shares))
    }

    /// Rank `rank`'s micro-batches of step `step`.
    pub(super) fn step_batches(
        &self,
        py: Python<'_>,
        plan: &Plan,
        step: u64,
        rank: u64,
        w: u64,
        caps: MicroCaps,
    ) -> PyResult<Vec<MicroBatch>> {
        let job = self.step_job(py, plan, step, rank, w, caps)?;
        py.detach(job).py()
    }

    /// The work of [`step_batches`](Self::step_batches) that needs no GIL,
    /// with what it reads from Python (a token plan's step lengths) read
    /// now: it can run on another thread.
    pub(super) fn step_job(
        &self,
        py: Python<'_>,
        plan: &Plan,
        step: u64,
        rank: u64,
        w: u64,
        caps: MicroCaps,
    ) -> PyResult<StepJob> {
        Ok(match caps {
            MicroCaps::Samples(b) => {
                let plan = plan.clone();
                Box::new(move || plan.micro_batches(step, rank, w, b))
            }
            MicroCaps::Tokens(caps) => {
                let samples = self.samples(py, plan, step)?;
                let layout = self.layout;
                Box::new(move || {
                    let dealing = layout.deal_step(&samples, w, caps)?;
                    layout.dealt_micro_batches(&samples, &dealing, rank)
                })
            }
        })
    }

    /// Micro-batches of every rank in step `step`.
    pub(super) fn step_count(
        &self,
        py: Python<'_>,
        step: u64,
        w: u64,
        caps: MicroCaps,
    ) -> PyResult<u64> {
        match caps {
            MicroCaps::Samples(b) => Ok(self.layout.share(step, 0, w, b).py()?.micro_batches),
            MicroCaps::Tokens(caps) => {
                let plan = self.plan(py)?;
                let samples = self.samples(py, &plan, step)?;
                let layout = self.layout;
                py.detach(|| layout.deal_step(&samples, w, caps))
                    .py()
                    .map(|d| d.num_micro_batches())
            }
        }
    }

    /// Rank `rank`'s ids of step `step`, or their sources, in dealing order.
    pub(super) fn rank_step(
        &self,
        py: Python<'_>,
        (step, rank, w): (u64, u64, u64),
        of: Of,
    ) -> PyResult<Vec<i64>> {
        let plan = self.plan(py)?;
        if self.tokens.is_some() {
            let (mut samples, shares) = self.shares(py, &plan, step, w)?;
            if let Of::Sources = of {
                // The dealing picks the step's samples by their place in it:
                // the same picks from the step's sources give theirs.
                samples.ids = py.detach(|| plan.step_position_sources(step)).py()?;
            }
            return self.layout.dealt_ids(&samples, &shares, rank).py();
        }
        py.detach(|| match of {
            Of::Ids => plan.step_indices(step, rank, w),
            Of::Sources => plan.step_sources(step, rank, w),
        })
        .py()
    }

    /// Rank `rank`'s real samples in steps `first..last` of a token plan.
    pub(super) fn token_rank_len(
        &self,
        py: Python<'_>,
        first: u64,
        last: u64,
        rank: u64,
        w: u64,
    ) -> PyResult<u64> {
        let plan = self.plan(py)?;
        let mut total = 0u64;
        for step in first..last {
            total += self.shares(py, &plan, step, w)?.1.count(rank).py()? as u64;
        }
        Ok(total)
    }
}
