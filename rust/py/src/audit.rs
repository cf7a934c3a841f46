//! The exactly-once audit's bitmap functions (`epochplan.audit` drives them).

use crate::errors::IntoPyResult;
use epochplan_core::audit;
use numpy::{IntoPyArray, PyArray1, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::prelude::*;

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
