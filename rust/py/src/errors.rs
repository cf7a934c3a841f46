//! The one mapping from core errors to Python exceptions, and the exception
//! classes of the bindings.
//!
//! A plan file that is not what its manifest or plan says raises
//! [`PlanError`] (a ValueError). A plan file the system fails to open, read
//! or write raises a class that is both a `PlanError` and the OSError of the
//! failure's kind, as polars maps I/O errors: `PlanFileNotFoundError(PlanError,
//! FileNotFoundError)`, `PlanPermissionError(PlanError, PermissionError)`,
//! `PlanFileExistsError(PlanError, FileExistsError)` and `PlanOSError(PlanError,
//! OSError)`, with `errno`, `strerror` and `filename` set (Python allows the
//! combination, as `io.UnsupportedOperation(OSError, ValueError)`). Their
//! `str()` is the message, which names the file first, as every PlanError's.

use epochplan_core::Error;
use pyo3::create_exception;
use pyo3::exceptions::{
    PyBaseException, PyFileExistsError, PyFileNotFoundError, PyIndexError, PyOSError,
    PyOverflowError, PyPermissionError, PyRuntimeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyTuple, PyType};
use std::io::ErrorKind;

create_exception!(
    epochplan._native,
    PlanError,
    PyValueError,
    "A plan directory that is missing, incomplete, corrupt or of another format, \
     or a request it cannot serve. The message names the file."
);

/// The plan-file errors that are also OSErrors, by the failure's kind.
struct IoClasses {
    not_found: Py<PyType>,
    permission: Py<PyType>,
    exists: Py<PyType>,
    other: Py<PyType>,
}

static IO_CLASSES: PyOnceLock<IoClasses> = PyOnceLock::new();

/// `class name(PlanError, os_base)`, its `str()` the message alone (not
/// OSError's `[Errno n] strerror: 'filename'`).
fn plan_io_class(py: Python<'_>, name: &str, os_base: Bound<'_, PyType>) -> PyResult<Py<PyType>> {
    let dict = PyDict::new(py);
    dict.set_item("__module__", "epochplan._native")?;
    dict.set_item(
        "__doc__",
        format!(
            "A plan file the system failed to open, read or write: a PlanError and a {}.",
            os_base.name()?
        ),
    )?;
    dict.set_item(
        "__str__",
        py.get_type::<PyBaseException>().getattr("__str__")?,
    )?;
    let bases = PyTuple::new(py, [py.get_type::<PlanError>(), os_base])?;
    let class = py.get_type::<PyType>().call1((name, bases, dict))?;
    Ok(class.cast_into::<PyType>()?.unbind())
}

fn io_classes(py: Python<'_>) -> PyResult<&IoClasses> {
    IO_CLASSES.get_or_try_init(py, || {
        Ok(IoClasses {
            not_found: plan_io_class(
                py,
                "PlanFileNotFoundError",
                py.get_type::<PyFileNotFoundError>(),
            )?,
            permission: plan_io_class(
                py,
                "PlanPermissionError",
                py.get_type::<PyPermissionError>(),
            )?,
            exists: plan_io_class(
                py,
                "PlanFileExistsError",
                py.get_type::<PyFileExistsError>(),
            )?,
            other: plan_io_class(py, "PlanOSError", py.get_type::<PyOSError>())?,
        })
    })
}

/// Adds the exception classes to the module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("PlanError", py.get_type::<PlanError>())?;
    let classes = io_classes(py)?;
    for class in [
        &classes.not_found,
        &classes.permission,
        &classes.exists,
        &classes.other,
    ] {
        let class = class.bind(py);
        m.add(class.name()?, class)?;
    }
    Ok(())
}

/// The exception of a failed operation on a plan file.
fn io_error(
    py: Python<'_>,
    message: String,
    path: &std::path::Path,
    kind: ErrorKind,
    errno: Option<i32>,
    text: &str,
) -> PyResult<PyErr> {
    let classes = io_classes(py)?;
    let class = match kind {
        ErrorKind::NotFound => &classes.not_found,
        ErrorKind::PermissionDenied => &classes.permission,
        ErrorKind::AlreadyExists => &classes.exists,
        _ => &classes.other,
    };
    let err = class.bind(py).call1((message,))?;
    // std words an OS error "<strerror> (os error <n>)".
    let strerror = errno
        .and_then(|n| text.strip_suffix(&format!(" (os error {n})")))
        .unwrap_or(text);
    err.setattr("errno", errno)?;
    err.setattr("strerror", strerror)?;
    err.setattr("filename", path.to_string_lossy())?;
    Ok(PyErr::from_value(err))
}

/// Converts a core error into the Python exception its variant names.
pub fn to_py(err: Error) -> PyErr {
    let message = err.to_string();
    match err {
        Error::Value(msg) => PyValueError::new_err(msg),
        Error::Index(msg) => PyIndexError::new_err(msg),
        Error::Overflow(msg) | Error::Memory(msg) => PyOverflowError::new_err(msg),
        Error::Thread(msg) => PyRuntimeError::new_err(msg),
        Error::PlanFile { .. } => PlanError::new_err(message),
        Error::Io {
            path,
            kind,
            errno,
            text,
            ..
        } => Python::attach(|py| {
            io_error(py, message, &path, kind, errno, &text).unwrap_or_else(|e| e)
        }),
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
