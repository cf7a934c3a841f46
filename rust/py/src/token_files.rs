//! Token plans in plan files: [`TokenDealer`] writes an epoch's files with
//! the core (`planfile::write_token_files`), and [`token_cuts`] cuts one
//! rank's stored share into its micro-batches from the lengths of its own
//! samples alone.

use crate::args::{int64_array, int_arg, opt_int_arg, MAX_I64};
use crate::errors::IntoPyResult;
use crate::lengths::{caps_arg, TokenArrays};
use crate::plan::EpochPlan;
use crate::planfile::run_detached;
use crate::token_slices::Guards;
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::dealing::negative_length;
use epochplan_core::plan::Plan;
use epochplan_core::planfile::{self, FileInfo, StagedArrays, TokenArraysRef, TokenPaths};
use epochplan_core::tokens::{cut_share, Caps};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::Arc;

/// A token plan's epoch as the plan-file writer deals it: the plan (order
/// and balanced layout), its arrays and caps (and, for the manifest, the
/// arrays' digests).
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct TokenDealer {
    plan: Plan,
    tokens: Arc<TokenArrays>,
    caps: Caps,
    world_size: u64,
}

/// `(count, bytes, blake3 hex)` of the ids files and of the token files.
type FileLists = (Vec<(u64, u64, String)>, Vec<(u64, u64, String)>);

/// The dtypes (`.npy` descriptors) a token plan's lengths files and loss
/// tokens files are written in: each source's own integer type up to 32
/// bits, int64 above (the loss tokens' None when there are none).
#[pyfunction]
fn token_file_dtypes(
    py: Python<'_>,
    plan: PyRef<'_, EpochPlan>,
) -> PyResult<(&'static str, Option<&'static str>)> {
    let Some(tokens) = plan.token_arrays() else {
        return Err(PyValueError::new_err(
            "plan must be a token plan (tokens=Tokens(...))",
        ));
    };
    let (lengths, loss) = tokens.file_dtypes(py)?;
    Ok((
        lengths.descr(),
        tokens.loss_tokens.is_some().then(|| loss.descr()),
    ))
}

#[pymethods]
impl TokenDealer {
    /// The dealer of `plan` (a token plan from its epoch's start) over
    /// `world_size` ranks, under the caps; the error of the caps, or of
    /// the samples over `max_tokens`, as the plan raises them.
    #[new]
    #[pyo3(signature = (plan, world_size, *, micro_batch_size = None, max_tokens = None))]
    fn new(
        py: Python<'_>,
        plan: PyRef<'_, EpochPlan>,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<TokenDealer> {
        let world_size = int_arg(world_size, "world_size", 1, MAX_I64)?;
        let Some(tokens) = plan.token_arrays() else {
            return Err(PyValueError::new_err(
                "plan must be a token plan (tokens=Tokens(...))",
            ));
        };
        let caps = caps_arg(micro_batch_size, max_tokens)?.with_packing(tokens.packing);
        let (layout, space, _) = plan.parts();
        if layout.cursor() != 0 {
            return Err(PyValueError::new_err(
                "plan must start at its epoch's start (cursor 0)",
            ));
        }
        if let Some(cap) = caps.max_tokens() {
            // Every sample over the cap, before any file is written (one
            // pass over the lengths in id order, kept for the plan's life).
            tokens.refuse_oversize(py, cap, space)?;
        }
        Ok(TokenDealer {
            plan: plan.plan(py)?,
            tokens: Arc::clone(tokens),
            caps,
            world_size,
        })
    }

    /// Writes the epoch's token plan files (new files: per rank its ids,
    /// offsets, lengths and loss tokens, only when there are loss tokens;
    /// the step table) with every core, in memory that does not depend on
    /// `N`. `ranks`: the ranks the per-rank paths are for (increasing; all
    /// by default), and `steps` None when another part holds the step
    /// table. Returns `(count, bytes, blake3 hex)` of the ids files, rank by
    /// rank, and of the token files in the manifest's order: the step table,
    /// then per rank its offsets, lengths (and loss tokens).
    /// `scratch`: a directory for the lengths staged in the epoch's order
    /// when they are a memory-mapped file (see
    /// `epochplan_core::planfile::StagedArrays`); None reads them by id.
    #[pyo3(signature = (ids, offsets, lengths, loss_tokens, steps, *, ranks = None, fsync = true, progress = None, scratch = None))]
    #[allow(clippy::too_many_arguments)]
    fn write_files(
        &self,
        py: Python<'_>,
        ids: Vec<PathBuf>,
        offsets: Vec<PathBuf>,
        lengths: Vec<PathBuf>,
        loss_tokens: Option<Vec<PathBuf>>,
        steps: Option<PathBuf>,
        ranks: Option<Vec<u64>>,
        fsync: bool,
        progress: Option<Py<PyAny>>,
        scratch: Option<PathBuf>,
    ) -> PyResult<FileLists> {
        if loss_tokens.is_some() != self.tokens.loss_tokens.is_some() {
            return Err(PyValueError::new_err(
                "loss_tokens must hold paths exactly when the plan has loss tokens",
            ));
        }
        let (lengths_dtype, loss_tokens_dtype) = self.tokens.file_dtypes(py)?;
        let paths = TokenPaths {
            ranks: ranks.unwrap_or_else(|| (0..self.world_size).collect()),
            ids,
            offsets,
            lengths,
            loss_tokens,
            steps,
            lengths_dtype,
            loss_tokens_dtype,
        };
        let guards = Guards::new(py, &self.tokens)?;
        let (lengths, loss) = guards.readers()?;
        let arrays = TokenArraysRef {
            lengths: &lengths,
            loss_tokens: loss.as_ref().map(|l| l as _),
        };
        let (plan, w, caps) = (&self.plan, self.world_size, self.caps);
        let files = run_detached(py, progress, |report| {
            let staged = match &scratch {
                Some(dir) => StagedArrays::for_mapped(plan, arrays, dir, &mut *report)?,
                None => None,
            };
            planfile::write_token_files(
                plan,
                arrays,
                staged.as_ref(),
                w,
                caps,
                &paths,
                fsync,
                report,
            )
        })?;
        let row = |i: &FileInfo| (i.count, i.bytes, i.checksum.clone());
        let mut token: Vec<_> = files.steps.iter().map(row).collect();
        for r in 0..files.ids.len() {
            token.push(row(&files.offsets[r]));
            token.push(row(&files.lengths[r]));
            if let Some(loss) = &files.loss_tokens {
                token.push(row(&loss[r]));
            }
        }
        Ok((files.ids.iter().map(row).collect(), token))
    }
}

/// One rank's micro-batch cuts of a step from the lengths of its samples
/// (in dealing order) and the step's micro-batch count `M`: the end of each
/// real micro-batch in the share (the rest of the `M` are fillers) and the
/// share's next-fit runs under the caps (the step's `M` is their largest
/// over the ranks, at least 1). See `epochplan_core::tokens::cut_share`.
#[pyfunction]
#[pyo3(signature = (lengths, micro_batches, micro_batch_size = None, max_tokens = None))]
fn token_cuts<'py>(
    py: Python<'py>,
    lengths: &Bound<'py, PyAny>,
    micro_batches: &Bound<'py, PyAny>,
    micro_batch_size: Option<&Bound<'py, PyAny>>,
    max_tokens: Option<&Bound<'py, PyAny>>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, u64)> {
    let b = opt_int_arg(micro_batch_size, "micro_batch_size", 1, MAX_I64)?;
    let m = opt_int_arg(max_tokens, "max_tokens", 1, MAX_I64)?;
    let caps = Caps::new(b, m).py()?;
    let micro_batches = int_arg(micro_batches, "micro_batches", 1, MAX_I64)?;
    let Some((values, shape)) = int64_array(lengths, "lengths")? else {
        return Err(PyValueError::new_err("lengths must lie in [0, 2**63 - 1]"));
    };
    if shape.len() != 1 {
        return Err(PyValueError::new_err(format!(
            "lengths must be a 1-d array, got {} dimensions",
            shape.len()
        )));
    }
    let mut read = vec_with_capacity(values.len(), "lengths").py()?;
    for (i, &v) in values.iter().enumerate() {
        if v < 0 {
            return Err(negative_length("lengths", i as i64, v.into())).py();
        }
        read.push(v as u64);
    }
    let cuts = py.detach(|| cut_share(&read, caps, micro_batches)).py()?;
    let ends: Vec<i64> = cuts.ends.iter().map(|&e| e as i64).collect();
    Ok((ends.into_pyarray(py), cuts.runs as u64))
}

/// Registers the token plan-file bindings.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<TokenDealer>()?;
    m.add_function(wrap_pyfunction!(token_cuts, m)?)?;
    m.add_function(wrap_pyfunction!(token_file_dtypes, m)?)?;
    Ok(())
}
