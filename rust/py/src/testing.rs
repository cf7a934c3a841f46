//! `_native._testing`: hooks only the tests use (the numpy generator's
//! internals, a file's checksum), kept out of the module users see.

use pyo3::prelude::*;

/// Adds the `_testing` submodule to `_native`, importable both as
/// `from epochplan._native import _testing` and as
/// `import epochplan._native._testing`.
pub fn register(parent: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = parent.py();
    let m = PyModule::new(py, "_testing")?;
    crate::streaming_shuffle::register_testing(&m)?;
    m.add_function(wrap_pyfunction!(crate::planfile::file_checksum, &m)?)?;
    m.add_function(wrap_pyfunction!(file_mapped, &m)?)?;
    parent.add_submodule(&m)?;
    let name = format!("{}._testing", parent.name()?);
    m.setattr("__name__", &name)?;
    py.import("sys")?.getattr("modules")?.set_item(name, &m)?;
    Ok(())
}

/// True when `array`'s values lie in a shared mapping of a file: a token
/// plan's lengths the plan-file writer stages in the epoch's order (see
/// `epochplan_core::planfile::StagedArrays::for_mapped`).
#[pyfunction]
fn file_mapped(array: &Bound<'_, numpy::PyUntypedArray>) -> PyResult<bool> {
    use epochplan_core::dealing::SampleLengths;
    let guard = crate::token_slices::Guard::new(array, "array")?;
    Ok(guard.slice()?.file_mapped())
}
