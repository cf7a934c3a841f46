//! Verifying a token plan's epoch in the core (`planfile::verify_token_files`):
//! the files as the manifest lists them, the plan, and the lengths when the
//! file recorded in the manifest is reachable.

use crate::args::{int_arg, MAX_I64};
use crate::errors::{to_py, IntoPyResult};
use crate::lengths::{caps_arg, cost_arg, normalization_arg};
use crate::plan::EpochPlan;
use crate::planfile::file_dtype_arg;
use crate::planfile::run_detached;
use crate::token_slices::Guards;
use epochplan_core::dealing::Dealing;
use epochplan_core::plan::Plan;
use epochplan_core::planfile::{
    self, ExpectedFile, FileDtype, TokenArraysRef, TokenCheck, TokenEpochFiles,
};
use epochplan_core::tokens::{Cost, Normalization};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// A file as the manifest lists it: path, count, bytes, blake3.
type Listed = (PathBuf, u64, u64, String);

fn expected(files: Vec<Listed>, dtype: FileDtype) -> Vec<ExpectedFile> {
    files
        .into_iter()
        .enumerate()
        .map(|(rank, (path, count, bytes, checksum))| ExpectedFile {
            path,
            rank: rank as u64,
            count,
            bytes,
            checksum,
            dtype,
        })
        .collect()
}

/// Verifies one epoch of a token plan (files listed as `(path, count,
/// bytes, blake3)`, per rank for each role; `file_dtypes` those of the
/// lengths and loss tokens files), raising PlanError at the first
/// violation of the stored plan's own rules. With `lengths` (and
/// `loss_tokens` when the plan has them), also the stored values against
/// them and every id against the dealing recomputed from them: a dealing
/// that differs is returned as the PlanError to raise (the caller checks
/// the lengths' digests first), else None.
#[pyfunction]
#[pyo3(signature = (plan, world_size, ids, offsets, lengths_files, loss_files, steps, *, directory, file_dtypes, cost = None, loss_normalization = None, micro_batch_size = None, max_tokens = None, progress = None))]
#[allow(clippy::too_many_arguments)]
fn verify_token_epoch(
    py: Python<'_>,
    plan: PyRef<'_, EpochPlan>,
    world_size: &Bound<'_, PyAny>,
    ids: Vec<Listed>,
    offsets: Vec<Listed>,
    lengths_files: Vec<Listed>,
    loss_files: Option<Vec<Listed>>,
    steps: Listed,
    directory: PathBuf,
    file_dtypes: (String, String),
    cost: Option<&Bound<'_, PyAny>>,
    loss_normalization: Option<&Bound<'_, PyAny>>,
    micro_batch_size: Option<&Bound<'_, PyAny>>,
    max_tokens: Option<&Bound<'_, PyAny>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let epoch = plan.epoch_number();
    // A stored share's cuts are next-fit over its dealing order whatever the
    // packing; the packing matters only to deal the step again.
    let tokens_packing = plan.token_arrays().map(|t| t.packing).unwrap_or_default();
    let caps = caps_arg(micro_batch_size, max_tokens)?.with_packing(tokens_packing);
    // A token plan (with its arrays) is dealt as it deals; a plan without
    // them by the models the manifest records.
    let tokens = plan.token_arrays().cloned();
    let (layout, space, _) = plan.parts();
    let (layout, cost) = match (&tokens, layout.dealing()) {
        (Some(_), Dealing::Balanced { cost }) => (*layout, cost),
        _ => {
            let cost = cost_arg(cost)?.unwrap_or(Cost::Tokens);
            let normalization =
                normalization_arg(loss_normalization)?.unwrap_or(Normalization::Tokens);
            let layout = layout
                .with_dealing(Dealing::Balanced { cost }, normalization)
                .py()?;
            (layout, cost)
        }
    };
    let plan = Plan::from_parts(layout, plan.order_of(py)?)
        .and_then(|p| p.with_space(space.clone()))
        .py()?;
    let has_loss = tokens.as_ref().map(|t| t.loss_tokens.is_some());
    if loss_files.is_some() && has_loss == Some(false) {
        return Err(PyValueError::new_err(
            "loss_tokens must be given with lengths when the plan has loss tokens",
        ));
    }
    if loss_files.is_none() && has_loss == Some(true) {
        return Err(PyValueError::new_err(
            "loss_tokens were given, but the plan was written without them: verify it \
             with its lengths alone",
        ));
    }
    let (lengths_dtype, loss_dtype) = file_dtypes;
    let i64 = FileDtype::I64;
    let files = TokenEpochFiles {
        ids: expected(ids, i64),
        offsets: expected(offsets, i64),
        lengths: expected(lengths_files, file_dtype_arg(&lengths_dtype)?),
        loss_tokens: loss_files
            .map(|f| Ok::<_, PyErr>(expected(f, file_dtype_arg(&loss_dtype)?)))
            .transpose()?,
        steps: expected(vec![steps], i64).remove(0),
    };
    let guards = tokens.as_deref().map(|t| Guards::new(py, t)).transpose()?;
    let slices = guards.as_ref().map(Guards::readers).transpose()?;
    let arrays = slices.as_ref().map(|(l, loss)| TokenArraysRef {
        lengths: l,
        loss_tokens: loss.as_ref().map(|x| x as _),
    });
    let check = TokenCheck {
        plan: &plan,
        world_size: w,
        caps,
        cost,
        dir: &directory,
        epoch,
    };
    let dealing = run_detached(py, progress, |report| {
        planfile::verify_token_files(check, &files, arrays, report)
    })?;
    Ok(dealing.map(|e| to_py(e).into_value(py).into_any()))
}

/// Registers the token plan verifier.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify_token_epoch, m)?)?;
    Ok(())
}
