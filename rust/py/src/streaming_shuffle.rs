//! Bindings of Streaming's shuffles (to be written).

use pyo3::prelude::*;

/// Adds this module's functions to `_native`.
pub fn register(_m: &Bound<'_, PyModule>) -> PyResult<()> {
    Ok(())
}
