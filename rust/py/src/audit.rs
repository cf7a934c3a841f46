//! The exactly-once audit's inner loops (`epochplan.audit` drives them):
//! consumption logs read and checked, and the bitmap of consumed ids.

use crate::errors::IntoPyResult;
use crate::plan::EpochPlan;
use epochplan_core::{audit, Error};
use memmap2::MmapOptions;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fs::File;
use std::path::{Path, PathBuf};

/// Marks `ids` in `bitmap` (uint64 words, one bit a store id) and returns
/// the indices into `ids` of those already marked (earlier or in `ids`).
#[pyfunction]
pub fn mark_ids<'py>(
    py: Python<'py>,
    mut bitmap: PyReadwriteArray1<'py, u64>,
    ids: PyReadonlyArray1<'py, i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let words = bitmap.as_slice_mut()?;
    let ids = ids.as_slice()?;
    let repeated = py.detach(|| audit::mark_ids(words, ids)).py()?;
    Ok(repeated
        .into_iter()
        .map(|i| i as i64)
        .collect::<Vec<_>>()
        .into_pyarray(py))
}

/// `read(bytes)` of the log file at `path`, mapped read-only (an empty
/// file, which cannot be mapped, as no bytes); `whole`: every page read in
/// ahead, for a read of the whole file. As with any memory map, the file
/// must not be cut short while it is read; a log is only appended to.
fn with_log<T>(path: &Path, whole: bool, read: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    let file = File::open(path)
        .map_err(|e| Error::io(path, "cannot open", &e))
        .py()?;
    let size = file
        .metadata()
        .map_err(|e| Error::io(path, "cannot read", &e))
        .py()?
        .len();
    if size == 0 {
        return Ok(read(&[]));
    }
    let mut options = MmapOptions::new();
    if whole {
        options.populate(); // one read ahead instead of a page fault a page
    }
    // SAFETY: read-only and private to this process; appending to the file
    // leaves the mapped bytes as they are.
    #[allow(unsafe_code)]
    let map = unsafe { options.map(&file) }
        .map_err(|e| Error::io(path, "cannot map", &e))
        .py()?;
    drop(file);
    Ok(read(&map))
}

/// The records of the consumption log at `path` (see
/// `epochplan_core::audit::scan_log`), checksums checked: a dict of numpy
/// arrays (`kinds` uint8, `offsets`, `epochs`, `steps`, `id_counts`,
/// `id_offsets` uint64, `header_ranges` (n, 2) uint64) and `torn` (the
/// message of a torn last record, or None). ValueError naming the file for
/// a corrupt record or a file that is not a log.
#[pyfunction]
pub fn scan_log<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let records = py
        .detach(|| with_log(&path, true, audit::scan_log))?
        .map_err(|e| Error::Value(format!("{}: {e}", path.display())))
        .py()?;
    let n = records.kinds.len();
    let out = PyDict::new(py);
    out.set_item("kinds", records.kinds.into_pyarray(py))?;
    out.set_item("offsets", records.offsets.into_pyarray(py))?;
    out.set_item("epochs", records.epochs.into_pyarray(py))?;
    out.set_item("steps", records.steps.into_pyarray(py))?;
    out.set_item("id_counts", records.id_counts.into_pyarray(py))?;
    out.set_item("id_offsets", records.id_offsets.into_pyarray(py))?;
    let ranges: Vec<u64> = records
        .header_ranges
        .iter()
        .flat_map(|&(a, b)| [a, b])
        .collect();
    out.set_item("header_ranges", ranges.into_pyarray(py).reshape([n, 2])?)?;
    out.set_item("torn", records.torn)?;
    Ok(out)
}

/// The ids of the log's `B` records at byte offsets `id_offsets`
/// (`id_counts` ids each), one after another, as int64.
#[pyfunction]
pub fn gather_log_ids<'py>(
    py: Python<'py>,
    path: PathBuf,
    id_offsets: PyReadonlyArray1<'py, u64>,
    id_counts: PyReadonlyArray1<'py, u64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (offsets, counts) = (id_offsets.as_slice()?, id_counts.as_slice()?);
    if offsets.len() != counts.len() {
        return Err(Error::Value(
            "id_offsets and id_counts must have one length".into(),
        ))
        .py();
    }
    let ids = py
        .detach(|| {
            with_log(&path, false, |data| {
                audit::gather_log_ids(data, offsets, counts)
            })
        })?
        .map_err(|e| Error::Value(format!("{}: {e}", path.display())))
        .py()?;
    Ok(ids.into_pyarray(py))
}

/// The ids at positions `[start, end)` of `plan`'s epoch whose bit in
/// `bitmap` is clear: planned there and not consumed.
#[pyfunction]
pub fn unmarked_ids<'py>(
    py: Python<'py>,
    plan: PyRef<'py, EpochPlan>,
    bitmap: PyReadonlyArray1<'py, u64>,
    start: u64,
    end: u64,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let plan = plan.plan(py)?;
    let words = bitmap.as_slice()?;
    let ids = py
        .detach(|| audit::unmarked_ids(&plan, words, start, end))
        .py()?;
    Ok(ids.into_pyarray(py))
}

/// Two int64 arrays.
type ArrayPair<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

/// `(indices, planned_steps)`: the indices into `ids` of the ids consumed
/// in another step than `plan` puts them in (`steps[i]` is where `ids[i]`
/// was consumed), and the step planned for each (-1: not in the epoch).
#[pyfunction]
pub fn misplaced<'py>(
    py: Python<'py>,
    plan: PyRef<'py, EpochPlan>,
    ids: PyReadonlyArray1<'py, i64>,
    steps: PyReadonlyArray1<'py, i64>,
) -> PyResult<ArrayPair<'py>> {
    let plan = plan.plan(py)?;
    let (ids, steps) = (ids.as_slice()?, steps.as_slice()?);
    let (wrong, planned) = py.detach(|| audit::misplaced(&plan, ids, steps)).py()?;
    let wrong: Vec<i64> = wrong.into_iter().map(|i| i as i64).collect();
    Ok((wrong.into_pyarray(py), planned.into_pyarray(py)))
}
