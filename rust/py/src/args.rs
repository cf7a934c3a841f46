//! Argument checks shared by every binding: one place that turns a Python
//! object into a range-checked integer, an index array or a name, with
//! messages that name the argument and its allowed range.

use crate::errors::IntoPyResult;
use epochplan_core::buffer::copy_of;
use numpy::{PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};

/// The largest sample count and position: ids are int64.
pub const MAX_I64: u64 = epochplan_core::MAX_SAMPLES;
/// The largest seed or epoch: the one definition of the u64 maximum,
/// exported as `MAX_SEED`.
pub const MAX_U64: u64 = u64::MAX;

fn describe(hi: u64) -> String {
    match hi {
        MAX_I64 => "2**63 - 1".to_string(),
        MAX_U64 => "2**64 - 1".to_string(),
        h => h.to_string(),
    }
}

/// The value of an integer argument: anything with `__index__` (Python and
/// numpy integers, 0-d integer arrays) but bool; float, str and objects whose
/// `__index__` fails (a float or multi-element array, say) raise TypeError
/// naming `name`, other errors (an interrupt, say) pass through. An integer
/// beyond 128 bits comes back as `Err` with a short description of it for
/// the caller's range message.
pub fn int_value(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Result<i128, String>> {
    let py = obj.py();
    let not_an_int = || -> PyResult<PyErr> {
        Ok(PyTypeError::new_err(format!(
            "{name} must be an int, got {}",
            obj.get_type().name()?
        )))
    };
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance_of::<PyFloat>()
        || obj.is_instance_of::<PyString>()
        || is_flag_or_array(obj)
    {
        return Err(not_an_int()?);
    }
    let value = match index(obj) {
        Ok(value) => value,
        // A tensor's own conversion fails with RuntimeError (a meta tensor
        // has no value): no int either.
        Err(e) if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyRuntimeError>(py) => {
            return Err(not_an_int()?)
        }
        Err(e) => return Err(e),
    };
    match value.extract::<i128>() {
        Ok(v) => Ok(Ok(v)),
        Err(e) if e.is_instance_of::<PyOverflowError>(py) => Ok(Err(describe_huge(&value))),
        Err(e) => Err(e),
    }
}

/// `operator.index(obj)`: the Python int of anything with `__index__`
/// (the conversion `PyNumber_Index` makes).
fn index<'py>(obj: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    if obj.is_exact_instance_of::<PyInt>() {
        return Ok(obj.clone());
    }
    obj.py().import("operator")?.call_method1("index", (obj,))
}

/// Whether `obj` has `__index__` but is no integer argument: a numpy or
/// torch bool (scalar, 0-d array or tensor), a flag like Python's bool, or
/// a tensor of one or more dimensions (torch gives a one-element tensor of
/// any shape `__index__`; numpy refuses it for arrays that are not 0-d).
fn is_flag_or_array(obj: &Bound<'_, PyAny>) -> bool {
    if obj.is_exact_instance_of::<PyInt>() {
        return false;
    }
    let is_bool = obj
        .getattr("dtype")
        .and_then(|d| d.str().map(|s| s.to_string()))
        .is_ok_and(|d| d == "bool" || d == "torch.bool");
    let has_dims = obj
        .getattr("ndim")
        .and_then(|d| d.extract::<i64>())
        .is_ok_and(|d| d != 0);
    is_bool || has_dims
}

/// `numpy.asarray(obj)`, its failures named: ValueError and TypeError
/// (ragged or odd input) keep their type, MemoryError (an input too large to
/// hold) becomes OverflowError, as for the library's other outputs.
pub fn asarray<'py>(obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
    let py = obj.py();
    let np = py.import("numpy")?;
    np.call_method1("asarray", (obj,)).map_err(|e| {
        let message = format!("{name} must be an array of integers: {}", e.value(py));
        if e.is_instance_of::<PyValueError>(py) {
            PyValueError::new_err(message)
        } else if e.is_instance_of::<PyTypeError>(py) || e.is_instance_of::<PyRuntimeError>(py) {
            // RuntimeError: torch's, for tensors numpy cannot read (one that
            // requires grad, a nested or a meta tensor).
            PyTypeError::new_err(message)
        } else if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py) {
            PyOverflowError::new_err(format!("{name} is too large to hold as an array"))
        } else {
            e
        }
    })
}

/// A short description of an integer too large to print in a message
/// (Python refuses to print ints of more than 4,300 digits).
fn describe_huge(value: &Bound<'_, PyAny>) -> String {
    const MAX_DIGITS: usize = 40;
    match value.str().map(|s| s.to_string()) {
        Ok(s) if s.len() <= MAX_DIGITS => s,
        _ => {
            let bits: u64 = value
                .call_method0("bit_length")
                .and_then(|b| b.extract())
                .unwrap_or(0);
            let sign = if value.lt(0).unwrap_or(false) {
                "a negative"
            } else {
                "an"
            };
            format!("{sign} int of {bits} bits")
        }
    }
}

/// An integer argument in `[lo, hi]`: TypeError as [`int_value`],
/// ValueError naming the range for values outside it.
pub fn int_arg(obj: &Bound<'_, PyAny>, name: &str, lo: u64, hi: u64) -> PyResult<u64> {
    let out_of_range = |got: String| {
        PyValueError::new_err(format!(
            "{name} must be an int in [{lo}, {}], got {got}",
            describe(hi)
        ))
    };
    match int_value(obj, name)? {
        Ok(v) if v >= i128::from(lo) && v <= i128::from(hi) => Ok(v as u64),
        Ok(v) => Err(out_of_range(v.to_string())),
        Err(huge) => Err(out_of_range(huge)),
    }
}

/// A step of a plan of `num_steps` steps: in `[0, num_steps)`, or
/// `[0, num_steps]` where the epoch's end is a step too (`at_step`). Any int
/// outside is IndexError, as a position outside a sequence is; non-ints are
/// TypeError.
pub fn step_arg(obj: &Bound<'_, PyAny>, num_steps: u64, end_included: bool) -> PyResult<u64> {
    let end = u64::from(end_included) + num_steps;
    match int_value(obj, "step")? {
        Ok(v) if v >= 0 && v < i128::from(end) => Ok(v as u64),
        got => {
            let got = got.map_or_else(|huge| huge, |v| v.to_string());
            let range = if end_included {
                format!("[0, {num_steps}]")
            } else {
                format!("[0, {num_steps})")
            };
            Err(PyIndexError::new_err(format!(
                "step must be in {range}, got {got}"
            )))
        }
    }
}

/// A keyword argument whose default None does not stand for: omitted (the
/// caller's default applies) or given, None included, so that `seed=None`
/// gets the argument's TypeError instead of quietly meaning the default.
/// (pyo3 reads None as omitted for `Option` arguments.)
#[derive(Debug)]
pub enum Keyword<'py> {
    Omitted,
    Given(Bound<'py, PyAny>),
}

impl<'py> Keyword<'py> {
    /// The given value, or None when omitted.
    pub fn given(&self) -> Option<&Bound<'py, PyAny>> {
        match self {
            Keyword::Omitted => None,
            Keyword::Given(v) => Some(v),
        }
    }
}

impl<'a, 'py> FromPyObject<'a, 'py> for Keyword<'py> {
    type Error = PyErr;

    fn extract(obj: Borrowed<'a, 'py, PyAny>) -> PyResult<Self> {
        Ok(Keyword::Given(obj.to_owned()))
    }
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
    let s = obj.cast::<PyString>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a str, got {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    // A str that is not valid UTF-8 (a lone surrogate) names nothing we
    // know: it gets the caller's "must be one of" message, not a
    // UnicodeEncodeError.
    Ok(s.to_string_lossy().into_owned())
}

/// An integer array of any shape (anything numpy's `asarray` takes) as int64
/// values and its shape. Other dtypes raise TypeError naming `name`; `None`
/// comes back for a value outside int64 (a large uint64 or Python int), for
/// the caller's range message.
#[allow(clippy::type_complexity)]
pub fn int64_array(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Option<(Vec<i64>, Vec<usize>)>> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let arr = asarray(obj, name)?;
    let kind: String = arr.getattr("dtype")?.getattr("kind")?.extract()?;
    let size: usize = arr.getattr("size")?.extract()?;
    // Taken before `ascontiguousarray`, which turns a 0-d array into 1-d.
    let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
    if size == 0 && kind != "O" {
        // `take([])`: an empty list is a float64 array to numpy, and numpy's
        // own `take` accepts it.
        return Ok(Some((Vec::new(), shape)));
    }
    let mut arr = arr;
    if kind == "O" && all_python_ints(&arr)? {
        // An object array of Python ints: what numpy makes of ints beyond
        // its integer types (or a caller's own); in range, they are positions.
        match arr.call_method1("astype", (np.getattr("int64")?,)) {
            Ok(ints) => arr = ints,
            Err(e) if e.is_instance_of::<PyOverflowError>(py) => return Ok(None),
            Err(e) => return Err(e),
        }
    } else if kind != "i" && kind != "u" {
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
            return Ok(None);
        }
    }
    // A view larger than memory (a broadcast one, say) fails to copy here:
    // numpy's MemoryError, or ValueError for a size beyond its range.
    // Contiguous and aligned (a view at an odd byte offset, as
    // `np.frombuffer(..., offset=...)` makes, is copied).
    let requirements = pyo3::types::PyDict::new(py);
    requirements.set_item("requirements", ["C", "A"])?;
    let arr = np
        .call_method("require", (arr, np.getattr("int64")?), Some(&requirements))
        .map_err(|e| {
            if e.is_instance_of::<pyo3::exceptions::PyMemoryError>(py)
                || e.is_instance_of::<PyValueError>(py)
            {
                PyOverflowError::new_err(format!(
                    "{name} is too large to hold as an array ({size} positions)"
                ))
            } else {
                e
            }
        })?;
    let arr = arr.cast::<PyArrayDyn<i64>>()?;
    let values = copy_of(arr.readonly().as_slice()?, name).py()?;
    Ok(Some((values, shape)))
}

/// Whether an object array holds only Python ints (not bools).
fn all_python_ints(arr: &Bound<'_, PyAny>) -> PyResult<bool> {
    let items = arr.call_method0("ravel")?.call_method0("tolist")?;
    for item in items.try_iter()? {
        let item = item?;
        if !item.is_instance_of::<PyInt>() || item.is_instance_of::<PyBool>() {
            return Ok(false);
        }
    }
    Ok(true)
}

/// An array of positions as int64 values of any shape (see [`int64_array`]);
/// negative positions count from the end of a sequence of `len` items, as in
/// numpy's `take`. Positions out of range raise IndexError.
pub fn positions_arg(
    obj: &Bound<'_, PyAny>,
    name: &str,
    len: u64,
) -> PyResult<(Vec<i64>, Vec<usize>)> {
    let Some((mut values, shape)) = int64_array(obj, name)? else {
        return Err(PyIndexError::new_err(format!(
            "{name} must be in [-{len}, {len}), got a value outside int64"
        )));
    };
    for v in values.iter_mut() {
        if *v < 0 && v.unsigned_abs() <= len {
            *v += len as i64;
        } else if *v < 0 || *v as u64 >= len {
            return Err(PyIndexError::new_err(format!(
                "{name} must be in [-{len}, {len}), got {v}"
            )));
        }
    }
    Ok((values, shape))
}

/// Whether a `__getitem__` key is an array of positions (a list, or an
/// array or tensor of at least one dimension) rather than one position.
/// Python ints skip the test (the common case, kept cheap).
pub fn is_position_array(key: &Bound<'_, PyAny>) -> bool {
    !key.is_instance_of::<PyInt>()
        && (key.is_instance_of::<PyList>()
            || key
                .getattr("ndim")
                .and_then(|d| d.extract::<usize>())
                .is_ok_and(|d| d > 0))
}

/// One `__getitem__` position of a sequence of `n` items of `class` (negative
/// counts from the end, as Python's): IndexError outside `[-n, n)`,
/// TypeError naming the class for a key that is no integer.
pub fn position_arg(key: &Bound<'_, PyAny>, n: u64, class: &str) -> PyResult<u64> {
    let py = key.py();
    let i = match int_value(key, "index") {
        Ok(Ok(i)) => i,
        Ok(Err(huge)) => {
            return Err(PyIndexError::new_err(format!(
                "index must be in [-{n}, {n}), got {huge}"
            )))
        }
        Err(e) if e.is_instance_of::<PyTypeError>(py) => {
            return Err(PyTypeError::new_err(format!(
                "{class} indices must be integers, slices or integer arrays, not {}",
                key.get_type().name()?
            )))
        }
        Err(e) => return Err(e),
    };
    let pos = if i < 0 { i + i128::from(n) } else { i };
    if pos < 0 || pos >= i128::from(n) {
        return Err(PyIndexError::new_err(format!(
            "index must be in [-{n}, {n}), got {i}"
        )));
    }
    Ok(pos as u64)
}

/// A 1-d array of sample ids, each in `[0, num_samples)`: ValueError
/// naming `name` for another shape or an id out of range.
pub fn sample_ids_arg(obj: &Bound<'_, PyAny>, name: &str, num_samples: u64) -> PyResult<Vec<i64>> {
    let out_of_range = |got: String| {
        PyValueError::new_err(format!(
            "{name} must be sample ids in [0, {num_samples}), got {got}"
        ))
    };
    let Some((values, shape)) = int64_array(obj, name)? else {
        return Err(out_of_range("a value outside int64".to_string()));
    };
    if shape.len() != 1 {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        return Err(PyValueError::new_err(format!(
            "{name} must be a 1-d array of sample ids, got shape ({})",
            dims.join(", ")
        )));
    }
    match values.iter().find(|&&v| v < 0 || v as u64 >= num_samples) {
        Some(v) => Err(out_of_range(v.to_string())),
        None => Ok(values),
    }
}

/// A bool argument: Python's bool or numpy's; TypeError naming `name`
/// otherwise (ints included, to catch arguments passed in the wrong place).
pub fn bool_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    // numpy is looked up only for objects that are not Python bools.
    if obj.is_instance_of::<PyBool>()
        || obj.is_instance(&obj.py().import("numpy")?.getattr("bool_")?)?
    {
        return obj.is_truthy();
    }
    Err(PyTypeError::new_err(format!(
        "{name} must be a bool, got {}",
        obj.get_type().name()?
    )))
}

/// Checks a (rank, world_size) pair of arguments: world_size in
/// `[1, 2**63 - 1]`, rank below it (torch's wording).
pub fn rank_args(rank: &Bound<'_, PyAny>, world_size: &Bound<'_, PyAny>) -> PyResult<(u64, u64)> {
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let r = int_arg(rank, "rank", 0, MAX_I64)?;
    if r >= w {
        return Err(PyValueError::new_err(format!(
            "Invalid rank {r}, rank should be in the interval [0, {}]",
            w - 1
        )));
    }
    Ok((r, w))
}

/// An int for a message, as the Python layer writes it: its digits up to
/// 128 bits, else its size.
fn int_label(value: &Bound<'_, PyAny>) -> PyResult<String> {
    let bits: u64 = value.call_method0("bit_length")?.extract()?;
    if bits <= 128 {
        return Ok(value.str()?.to_string());
    }
    let sign = if value.lt(0)? { "a negative" } else { "an" };
    Ok(format!("{sign} int of {bits} bits"))
}

/// The Python layer's integer check, the same as every argument of the
/// bindings: ``value`` as an int (anything with ``__index__`` but bools,
/// 0-d only), TypeError naming ``name`` otherwise, ValueError for a value
/// outside ``[lo, hi]`` (a missing bound is open). Returns the int.
#[pyfunction]
#[pyo3(signature = (value, name, lo = None, hi = None))]
pub fn _check_int<'py>(
    value: &Bound<'py, PyAny>,
    name: &str,
    lo: Option<&Bound<'py, PyInt>>,
    hi: Option<&Bound<'py, PyInt>>,
) -> PyResult<Bound<'py, PyAny>> {
    // TypeError for what is no int argument; the range is checked below on
    // the int itself, of any size.
    let _in_i128 = int_value(value, name)?;
    let number = index(value)?;
    let below = lo.map(|lo| number.lt(lo)).transpose()?.unwrap_or(false);
    let above = hi.map(|hi| number.gt(hi)).transpose()?.unwrap_or(false);
    if below || above {
        let got = int_label(&number)?;
        let label = |bound: &Bound<'py, PyInt>| -> PyResult<String> {
            let hi: Option<u64> = bound.extract().ok();
            Ok(match hi {
                Some(h @ (MAX_I64 | MAX_U64)) => describe(h),
                _ => bound.str()?.to_string(),
            })
        };
        return Err(PyValueError::new_err(match (lo, hi) {
            (Some(lo), Some(hi)) => {
                format!(
                    "{name} must be an int in [{}, {}], got {got}",
                    lo,
                    label(hi)?
                )
            }
            (Some(lo), None) => format!("{name} must be an int >= {lo}, got {got}"),
            (None, Some(hi)) => format!("{name} must be an int <= {}, got {got}", label(hi)?),
            (None, None) => format!("{name} must be an int, got {got}"),
        }));
    }
    Ok(number)
}

/// The Python layer's bool check, the same as every argument of the
/// bindings: Python's or numpy's bool; TypeError naming ``name`` otherwise.
#[pyfunction]
pub fn _check_bool(value: &Bound<'_, PyAny>, name: &str) -> PyResult<bool> {
    bool_arg(value, name)
}

/// Registers the checks and the limits the Python layer shares.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("MAX_SEED", MAX_U64)?;
    m.add("MAX_THREADS", epochplan_core::parallel::MAX_THREADS)?;
    m.add(
        "KINDS",
        PyTuple::new(m.py(), epochplan_core::order::KIND_NAMES)?,
    )?;
    let algos = epochplan_compat::streaming::shuffle::Algo::ALL.map(|a| a.name());
    m.add("STREAMING_ALGOS", PyTuple::new(m.py(), algos)?)?;
    m.add_function(wrap_pyfunction!(_check_int, m)?)?;
    m.add_function(wrap_pyfunction!(_check_bool, m)?)?;
    Ok(())
}
