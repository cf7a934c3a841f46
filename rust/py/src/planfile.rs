//! Plan files: writing, verifying and checking rank `.npy` files, with the
//! GIL released and a progress callback that holds it only while it runs.

use crate::args::{int_arg, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use crate::plan::EpochPlan;
use epochplan_core::planfile::{self, ExpectedFile, FileDtype, FileSink};
use epochplan_core::space::Space;
use epochplan_core::Kind;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;
use std::path::PathBuf;

fn world_arg(world_size: &Bound<'_, PyAny>) -> PyResult<u64> {
    int_arg(world_size, "world_size", 1, MAX_I64)
}

fn paths_arg(paths: Vec<String>, world_size: u64) -> PyResult<Vec<PathBuf>> {
    if paths.len() as u64 != world_size {
        return Err(PyValueError::new_err(format!(
            "paths must hold one path per rank ({world_size}), got {}",
            paths.len()
        )));
    }
    Ok(paths.into_iter().map(PathBuf::from).collect())
}

/// Runs `work` without the GIL. Its progress callback takes the GIL only to
/// deliver signals (Ctrl-C) and to call `progress(done)`; an exception from
/// either stops the work and is what this returns.
pub(crate) fn run_detached<T: Send>(
    py: Python<'_>,
    progress: Option<Py<PyAny>>,
    work: impl FnOnce(&mut dyn FnMut(u64) -> bool) -> epochplan_core::Result<T> + Send,
) -> PyResult<T> {
    let mut failure: Option<PyErr> = None;
    let result = py.detach(|| {
        let mut report = |done: u64| -> bool {
            Python::attach(|py| {
                let outcome = py.check_signals().and_then(|()| match &progress {
                    Some(cb) => cb.call1(py, (done,)).map(drop),
                    None => Ok(()),
                });
                match outcome {
                    Ok(()) => true,
                    Err(e) => {
                        failure.get_or_insert(e);
                        false
                    }
                }
            })
        };
        work(&mut report)
    });
    match (result, failure) {
        (_, Some(err)) => Err(err),
        (result, None) => result.py(),
    }
}

/// The `.npy` header of a plan file of `count` ids.
#[pyfunction]
fn npy_header<'py>(py: Python<'py>, count: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyBytes>> {
    let count = int_arg(count, "count", 0, MAX_I64)?;
    Ok(PyBytes::new(py, &planfile::npy_header(count)))
}

/// Writes every rank's share of one epoch to `paths[rank]` (new files);
/// returns `(count, bytes, blake3 hex)` per rank. Errors name a file by
/// `display_paths[rank]` when given (the path it will have once a writer
/// working in a temporary directory publishes it), else by its path.
#[pyfunction]
#[pyo3(signature = (paths, world_size, plan, *, fsync = true, progress = None, display_paths = None, ranks = None))]
#[allow(clippy::too_many_arguments)]
fn write_epoch_files(
    py: Python<'_>,
    paths: Vec<String>,
    world_size: &Bound<'_, PyAny>,
    plan: PyRef<'_, EpochPlan>,
    fsync: bool,
    progress: Option<Py<PyAny>>,
    display_paths: Option<Vec<String>>,
    ranks: Option<Vec<u64>>,
) -> PyResult<Vec<(u64, u64, String)>> {
    let w = world_arg(world_size)?;
    // Every rank, or some of them (a part of a plan written in parts).
    let ranks = ranks_arg(ranks, w)?;
    let count = ranks.len() as u64;
    let mut files = FileSink::new(paths_arg(paths, count)?, fsync);
    if let Some(shown) = display_paths {
        let shown = paths_arg(shown, count)
            .map_err(|_| PyValueError::new_err("display_paths must hold one path per rank"))?;
        files = files.shown_as(shown).py()?;
    }
    let plan = plan.plan(py)?;
    let infos = run_detached(py, progress, |report| {
        planfile::write_rank_files(&plan, w, &ranks, files, report)
    })?;
    Ok(infos
        .into_iter()
        .map(|i| (i.count, i.bytes, i.checksum))
        .collect())
}

/// The ranks a call writes or checks: all of `[0, w)`, or the given ones
/// (distinct, each below `w`).
fn ranks_arg(ranks: Option<Vec<u64>>, w: u64) -> PyResult<Vec<u64>> {
    let Some(ranks) = ranks else {
        return Ok((0..w).collect());
    };
    let mut seen = std::collections::HashSet::new();
    for &r in &ranks {
        if r >= w || !seen.insert(r) {
            return Err(PyValueError::new_err(format!(
                "ranks must be distinct ranks in [0, {w}), got {r} (again or out of range)"
            )));
        }
    }
    Ok(ranks)
}

fn expected_files(
    paths: Vec<String>,
    counts: Vec<u64>,
    sizes: Vec<u64>,
    checksums: Vec<String>,
    ranks: &[u64],
) -> PyResult<Vec<ExpectedFile>> {
    let paths = paths_arg(paths, ranks.len() as u64)?;
    if counts.len() != paths.len() || sizes.len() != paths.len() || checksums.len() != paths.len() {
        return Err(PyValueError::new_err(
            "paths, counts, sizes and checksums must have the same length",
        ));
    }
    Ok(paths
        .into_iter()
        .zip(counts)
        .zip(sizes)
        .zip(checksums)
        .zip(ranks)
        .map(|((((path, count), bytes), checksum), &rank)| ExpectedFile {
            path,
            rank,
            count,
            bytes,
            checksum,
            dtype: FileDtype::I64,
        })
        .collect())
}

/// Verifies all rank files of one epoch (see `planfile::verify_rank_files`);
/// raises PlanError("<path>: <violation>") on the first violation, or the
/// PlanError that is an OSError for a file that cannot be read. Returns
/// whether every id was compared with the recomputed order (a uniform order
/// is built only with `compare_ids` or for a dropped step).
#[pyfunction]
#[pyo3(signature = (paths, counts, sizes, checksums, world_size, plan, *, progress = None, compare_ids = false, ranks = None))]
#[allow(clippy::too_many_arguments)]
fn verify_epoch_files(
    py: Python<'_>,
    paths: Vec<String>,
    counts: Vec<u64>,
    sizes: Vec<u64>,
    checksums: Vec<String>,
    world_size: &Bound<'_, PyAny>,
    plan: PyRef<'_, EpochPlan>,
    progress: Option<Py<PyAny>>,
    compare_ids: bool,
    ranks: Option<Vec<u64>>,
) -> PyResult<bool> {
    let w = world_arg(world_size)?;
    let part = ranks.is_some();
    let ranks = ranks_arg(ranks, w)?;
    let files = expected_files(paths, counts, sizes, checksums, &ranks)?;
    let (layout, space, kind) = plan.parts();
    let space = space.clone();
    // A uniform table is built when the caller has room for it
    // (`compare_ids`) or when the ids left out by a short last step must be
    // known; without it the layout alone checks sizes and coverage, and the
    // ids are counted, not compared.
    let layout = *layout;
    let leaves_out = layout.cursor_at_step(layout.num_steps()) != layout.num_samples();
    let mixture = matches!(space, Space::Mixture { .. });
    let order = if kind != Kind::Uniform || leaves_out || compare_ids || mixture {
        Some(plan.order_of(py)?)
    } else {
        None
    };
    if part {
        // Some of the epoch's files: each compared id by id (the epoch's
        // coverage is checked on the merged plan).
        let order = plan.order_of(py)?;
        run_detached(py, progress, |report| {
            planfile::verify_part_files(&layout, &order, &space, w, &files, report)
        })?;
        return Ok(true);
    }
    let compared = order.is_some();
    run_detached(py, progress, |report| {
        planfile::verify_rank_files(&layout, order.as_ref(), &space, w, &files, report)
    })?;
    Ok(compared)
}

/// Checks one plan file's size, header and checksum (its values of
/// `dtype`, a descriptor such as `"<i8"`); raises PlanError("<path>:
/// <what>") when any differs, or the PlanError that is an OSError when the
/// file cannot be read.
#[pyfunction]
#[pyo3(signature = (path, count, size, checksum, *, dtype = "<i8", progress = None))]
fn check_plan_file(
    py: Python<'_>,
    path: String,
    count: &Bound<'_, PyAny>,
    size: &Bound<'_, PyAny>,
    checksum: String,
    dtype: &str,
    progress: Option<Py<PyAny>>,
) -> PyResult<()> {
    let file = ExpectedFile {
        path: PathBuf::from(path),
        rank: 0,
        count: int_arg(count, "count", 0, MAX_I64)?,
        bytes: int_arg(size, "size", 0, MAX_U64)?,
        checksum,
        dtype: file_dtype_arg(dtype)?,
    };
    run_detached(py, progress, |report| {
        planfile::check_rank_file(&file, report)
    })
}

/// The BLAKE3 of a whole file (hex), as a plan manifest records it (a
/// token plan's writer checksums the files it writes with it; tests compare
/// manifests with it through `_native._testing` too).
#[pyfunction]
pub fn file_checksum(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    py.detach(|| planfile::file_checksum(&path)).py()
}

/// A plan file's dtype from its descriptor (`"<i8"`, `"<i4"`, ...).
pub fn file_dtype_arg(descr: &str) -> PyResult<FileDtype> {
    FileDtype::from_descr(descr).ok_or_else(|| {
        PyValueError::new_err(format!(
            "dtype must be a plan file's integer type ('<i8', '<i4', '<i2', '|i1', '<u4', \
             '<u2' or '|u1'), got {descr:?}"
        ))
    })
}

/// The size of a plan file of `count` values of `dtype`, header included.
#[pyfunction]
#[pyo3(signature = (count, dtype = "<i8"))]
fn npy_file_size(count: &Bound<'_, PyAny>, dtype: &str) -> PyResult<u128> {
    let count = int_arg(count, "count", 0, MAX_I64)?;
    Ok(planfile::npy_file_size_of(file_dtype_arg(dtype)?, count))
}

/// Registers the plan-file functions.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(npy_header, m)?)?;
    m.add_function(wrap_pyfunction!(npy_file_size, m)?)?;
    m.add_function(wrap_pyfunction!(write_epoch_files, m)?)?;
    m.add_function(wrap_pyfunction!(verify_epoch_files, m)?)?;
    m.add_function(wrap_pyfunction!(check_plan_file, m)?)?;
    m.add_function(wrap_pyfunction!(file_checksum, m)?)?;
    Ok(())
}
