//! `split_range`: one rank's contiguous or strided share of a range.

use crate::args::{int_arg, int_value, str_arg, MAX_I64};
use crate::errors::IntoPyResult;
use epochplan_core::split::{split_range as core_split_range, SplitMode};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One rank's positions as (start, stop, step), without padding.
#[pyfunction]
#[pyo3(signature = (num_samples, rank, world_size, mode = None))]
pub fn split_range(
    num_samples: &Bound<'_, PyAny>,
    rank: &Bound<'_, PyAny>,
    world_size: &Bound<'_, PyAny>,
    mode: Option<&Bound<'_, PyAny>>,
) -> PyResult<(u64, u64, u64)> {
    let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let r = match int_arg(rank, "rank", 0, MAX_I64) {
        Ok(r) => r,
        // Out of range (negative or huge): torch's DistributedSampler wording.
        Err(e) if e.is_instance_of::<PyValueError>(rank.py()) => {
            let got = match int_value(rank, "rank")? {
                Ok(v) => v.to_string(),
                Err(huge) => huge,
            };
            return Err(PyValueError::new_err(format!(
                "Invalid rank {got}, rank should be in the interval [0, {}]",
                w - 1
            )));
        }
        Err(e) => return Err(e),
    };
    let mode = match mode {
        Some(m) if !m.is_none() => SplitMode::parse(&str_arg(m, "mode")?).py()?,
        _ => SplitMode::Strided,
    };
    core_split_range(n, w, r, mode).py()
}
