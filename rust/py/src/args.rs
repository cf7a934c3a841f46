//! Argument checks shared by every binding: one place that turns a Python
//! object into a range-checked integer, an index array or a name, with
//! messages that name the argument and its allowed range.

use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyString};

/// The largest sample count and position: ids are int64.
pub const MAX_I64: u64 = i64::MAX as u64;
/// The largest seed or epoch.
pub const MAX_U64: u64 = u64::MAX;

fn describe(hi: u64) -> String {
    match hi {
        MAX_I64 => "2**63 - 1".to_string(),
        MAX_U64 => "2**64 - 1".to_string(),
        h => h.to_string(),
    }
}

/// An integer argument in `[lo, hi]`. Rejects bool, float and str with
/// TypeError; out-of-range values with ValueError. Accepts any object with
/// `__index__` (Python and numpy integers).
pub fn int_arg(obj: &Bound<'_, PyAny>, name: &str, lo: u64, hi: u64) -> PyResult<u64> {
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyFloat>()
        || obj.is_instance_of::<PyString>()
    {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            obj.get_type().name()?
        )));
    }
    let value: i128 = match obj.extract::<i128>() {
        Ok(v) => v,
        Err(_) if obj.hasattr("__index__")? => {
            // An integer too large even for 128 bits.
            return Err(PyValueError::new_err(format!(
                "{name} must be an int in [{lo}, {}], got {}",
                describe(hi),
                obj.str()?
            )));
        }
        Err(_) => {
            return Err(PyTypeError::new_err(format!(
                "{name} must be an int, got {}",
                obj.get_type().name()?
            )))
        }
    };
    if value < i128::from(lo) || value > i128::from(hi) {
        return Err(PyValueError::new_err(format!(
            "{name} must be an int in [{lo}, {}], got {value}",
            describe(hi)
        )));
    }
    Ok(value as u64)
}

/// An optional integer argument (None passes through).
pub fn opt_int_arg(
    obj: Option<&Bound<'_, PyAny>>,
    name: &str,
    lo: u64,
    hi: u64,
) -> PyResult<Option<u64>> {
    match obj {
        None => Ok(None),
        Some(o) if o.is_none() => Ok(None),
        Some(o) => int_arg(o, name, lo, hi).map(Some),
    }
}

/// A string argument (a kind or mode name).
pub fn str_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<String> {
    obj.cast::<PyString>()
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "{name} must be a str, got {}",
                obj.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?
        .to_str()
        .map(str::to_owned)
}

/// An array of positions as a contiguous int64 numpy array of any shape.
/// Integer dtypes only (bool and float raise TypeError); negative positions
/// count from the end of a sequence of `len` items, as in numpy's `take`.
pub fn positions_arg<'py>(
    obj: &Bound<'py, PyAny>,
    name: &str,
    len: u64,
) -> PyResult<(Vec<i64>, Vec<usize>)> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let arr = np.call_method1("asarray", (obj,))?;
    let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
    let size: usize = arr.getattr("size")?.extract()?;
    // Taken before `ascontiguousarray`, which turns a 0-d array into 1-d.
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    if size == 0 && kind != "O" {
        // `take([])`: an empty list is a float64 array to numpy, and numpy's
        // own `take` accepts it.
        return Ok((Vec::new(), shape));
    }
    if kind != "i" && kind != "u" {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an array of integers, got dtype {}",
            arr.getattr("dtype")?.str()?
        )));
    }
    if kind == "u" {
        let big: bool = arr
            .call_method0("max")
            .and_then(|m| m.gt(MAX_I64))
            .unwrap_or(false);
        if big {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "{name} must be in [-{len}, {len}), got a value above 2**63 - 1"
            )));
        }
    }
    let arr = np.call_method1("ascontiguousarray", (arr, np.getattr("int64")?))?;
    let arr = arr.cast::<PyArrayDyn<i64>>()?;
    let ro = arr.readonly();
    let mut values = ro.as_slice()?.to_vec();
    for v in values.iter_mut() {
        if *v < 0 && v.unsigned_abs() <= len {
            *v += len as i64;
        } else if *v < 0 || *v as u64 >= len {
            return Err(pyo3::exceptions::PyIndexError::new_err(format!(
                "{name} must be in [-{len}, {len}), got {v}"
            )));
        }
    }
    Ok((values, shape))
}
