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

/// `read(bytes)` of the log file at `path`, mapped read-only (an empty
/// file, which cannot be mapped, as no bytes), every page read in ahead.
/// As with any memory map, the file must not be cut short while it is
/// read; a log is only appended to.
fn with_log<T>(path: &Path, read: impl FnOnce(&[u8]) -> T) -> PyResult<T> {
    with_log_range(path, (0, u64::MAX), read)
}

/// As [`with_log`], bytes `[start, end)` only (`end` cut to the file's
/// size).
fn with_log_range<T>(
    path: &Path,
    (start, end): (u64, u64),
    read: impl FnOnce(&[u8]) -> T,
) -> PyResult<T> {
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
    let end = end.min(size);
    if start >= end {
        return Ok(read(&[]));
    }
    let mut options = MmapOptions::new();
    // One read ahead instead of a page fault a page.
    options.offset(start).len((end - start) as usize).populate();
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
        .detach(|| with_log(&path, audit::scan_log))?
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
    // Only the records' bytes are mapped, each page read in at once.
    let start = offsets.iter().copied().min().unwrap_or(0);
    let end = offsets
        .iter()
        .zip(counts)
        .map(|(&at, &count)| at.saturating_add(count.saturating_mul(8)))
        .max()
        .unwrap_or(0);
    let relative: Vec<u64> = offsets.iter().map(|&at| at - start).collect();
    let ids = py
        .detach(|| {
            with_log_range(&path, (start, end), |data| {
                audit::gather_log_ids(data, &relative, counts)
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

/// Three int64 arrays.
type ArrayTriple<'py> = (
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
    Bound<'py, PyArray1<i64>>,
);

/// `(repeated, misplaced, planned_steps)`: checks ids of `plan`'s epoch,
/// read from records (record `k`: the next `counts[k]` ids, consumed in
/// step `steps[k]`), and marks their positions in `bitmap` (see
/// `epochplan_core::audit::consume`).
#[pyfunction]
pub fn consume_ids<'py>(
    py: Python<'py>,
    plan: PyRef<'py, EpochPlan>,
    mut bitmap: PyReadwriteArray1<'py, u64>,
    ids: PyReadonlyArray1<'py, i64>,
    steps: PyReadonlyArray1<'py, i64>,
    counts: PyReadonlyArray1<'py, u64>,
) -> PyResult<ArrayTriple<'py>> {
    let plan = plan.plan(py)?;
    let words = bitmap.as_slice_mut()?;
    let (ids, steps, counts) = (ids.as_slice()?, steps.as_slice()?, counts.as_slice()?);
    let found = py
        .detach(|| audit::consume(&plan, words, ids, steps, counts))
        .py()?;
    let index = |v: Vec<usize>| v.into_iter().map(|i| i as i64).collect::<Vec<_>>();
    Ok((
        index(found.repeated).into_pyarray(py),
        index(found.misplaced).into_pyarray(py),
        found.planned_steps.into_pyarray(py),
    ))
}
