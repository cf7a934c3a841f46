//! The thread count of large calls (`set_num_threads`, `get_num_threads`).

use crate::args::int_arg;
use epochplan_core::parallel;
use pyo3::prelude::*;

/// Sets the number of threads large calls use (0: the default).
#[pyfunction]
pub fn set_num_threads(num_threads: &Bound<'_, PyAny>) -> PyResult<()> {
    let n = int_arg(num_threads, "num_threads", 0, parallel::MAX_THREADS as u64)?;
    parallel::set_num_threads(n as usize);
    Ok(())
}

/// The number of threads large calls use.
#[pyfunction]
pub fn get_num_threads() -> usize {
    parallel::num_threads()
}
