//! The one mapping from core errors to Python exceptions.

use epochplan_core::Error;
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyRuntimeError, PyValueError};
use pyo3::PyErr;

/// Converts a core error into the Python exception its variant names.
pub fn to_py(err: Error) -> PyErr {
    match err {
        Error::Value(msg) => PyValueError::new_err(msg),
        Error::Index(msg) => PyIndexError::new_err(msg),
        Error::Overflow(msg) | Error::Memory(msg) => PyOverflowError::new_err(msg),
        Error::Thread(msg) => PyRuntimeError::new_err(msg),
    }
}

/// For the Streaming functions: a failure to allocate raises MemoryError,
/// as numpy does for Streaming; other errors map as everywhere else.
pub fn to_py_as_numpy(err: Error) -> PyErr {
    match err {
        Error::Memory(msg) => pyo3::exceptions::PyMemoryError::new_err(msg),
        other => to_py(other),
    }
}

/// `.map_err(to_py)` for core results.
pub trait IntoPyResult<T> {
    /// The result with a Python exception in place of a core error.
    fn py(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPyResult<T> for epochplan_core::Result<T> {
    fn py(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}
