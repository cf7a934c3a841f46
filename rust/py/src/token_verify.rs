//! Verifying a token plan's epoch in the core (`planfile::verify_token_files`):
//! the files as the manifest lists them, the plan, and the lengths when the
//! file recorded in the manifest is reachable.

use crate::args::{int_arg, MAX_I64};
use crate::errors::{to_py, IntoPyResult};
use crate::lengths::{caps_arg, cost_arg, normalization_arg, TokenArrays};
use crate::planfile::{run_detached, PlanArgs, PlanSpec};
use crate::token_slices::Guards;
use epochplan_core::dealing::Dealing;
use epochplan_core::plan::Plan;
use epochplan_core::planfile::{self, ExpectedFile, TokenArraysRef, TokenCheck, TokenEpochFiles};
use epochplan_core::tokens::{Cost, Normalization};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::path::PathBuf;

/// A file as the manifest lists it: path, count, bytes, blake3.
type Listed = (PathBuf, u64, u64, String);

fn expected(files: Vec<Listed>) -> Vec<ExpectedFile> {
    files
        .into_iter()
        .enumerate()
        .map(|(rank, (path, count, bytes, checksum))| ExpectedFile {
            path,
            rank: rank as u64,
            count,
            bytes,
            checksum,
        })
        .collect()
}

/// Verifies one epoch of a token plan (files listed as `(path, count,
/// bytes, blake3)`, per rank for each role), raising PlanError at the first
/// violation of the stored plan's own rules. With `lengths` (and
/// `loss_tokens` when the plan has them), also the stored values against
/// them and every id against the dealing recomputed from them: a dealing
/// that differs is returned as the PlanError to raise (the caller checks
/// the lengths' digests first), else None.
#[pyfunction]
#[pyo3(signature = (plan, world_size, ids, offsets, lengths_files, loss_files, steps, *, directory, cost = None, loss_normalization = None, micro_batch_size = None, max_tokens = None, space = None, lengths = None, loss_tokens = None, progress = None))]
#[allow(clippy::too_many_arguments)]
fn verify_token_epoch(
    py: Python<'_>,
    plan: PlanArgs<'_>,
    world_size: &Bound<'_, PyAny>,
    ids: Vec<Listed>,
    offsets: Vec<Listed>,
    lengths_files: Vec<Listed>,
    loss_files: Option<Vec<Listed>>,
    steps: Listed,
    directory: PathBuf,
    cost: Option<&Bound<'_, PyAny>>,
    loss_normalization: Option<&Bound<'_, PyAny>>,
    micro_batch_size: Option<&Bound<'_, PyAny>>,
    max_tokens: Option<&Bound<'_, PyAny>>,
    space: Option<&Bound<'_, PyAny>>,
    lengths: Option<&Bound<'_, PyAny>>,
    loss_tokens: Option<&Bound<'_, PyAny>>,
    progress: Option<Py<PyAny>>,
) -> PyResult<Option<Py<PyAny>>> {
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let spec = PlanSpec::parse(&plan)?;
    let epoch = spec.epoch();
    let cost = cost_arg(cost)?.unwrap_or(Cost::Tokens);
    let normalization = normalization_arg(loss_normalization)?.unwrap_or(Normalization::Tokens);
    let caps = caps_arg(micro_batch_size, max_tokens)?;
    let space = spec.space(py, space)?;
    let store = space.store_size(spec.layout.num_samples());
    let layout = spec
        .layout
        .with_dealing(Dealing::Balanced { cost }, normalization)
        .py()?;
    let plan = Plan::from_parts(layout, spec.order(py)?)
        .and_then(|p| p.with_space(space))
        .py()?;
    if loss_files.is_some() && lengths.is_some() != loss_tokens.is_some() {
        return Err(PyValueError::new_err(
            "loss_tokens must be given with lengths when the plan has loss tokens",
        ));
    }
    let files = TokenEpochFiles {
        ids: expected(ids),
        offsets: expected(offsets),
        lengths: expected(lengths_files),
        loss_tokens: loss_files.map(expected),
        steps: expected(vec![steps]).remove(0),
    };
    let tokens = match lengths {
        Some(l) => Some(TokenArrays::new(l, loss_tokens, store)?),
        None => None,
    };
    let guards = tokens.as_ref().map(|t| Guards::new(py, t)).transpose()?;
    let slices = guards.as_ref().map(Guards::slices).transpose()?;
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
