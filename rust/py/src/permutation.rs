//! `Permutation`, `permutation`, `split_range` and the thread controls.

use crate::args::{int_arg, int_value, opt_int_arg, positions_arg, str_arg, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use epochplan_core::split::{split_range as core_split_range, SplitMode};
use epochplan_core::{parallel, Kind, Order};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyInt, PyList, PySlice, PyString, PyTuple};

/// Parses `kind` (+ the chunked parameters) from Python arguments.
pub fn kind_arg(
    kind: &Bound<'_, PyAny>,
    chunk_size: Option<&Bound<'_, PyAny>>,
    preload_nchunks: Option<&Bound<'_, PyAny>>,
) -> PyResult<Kind> {
    let name = str_arg(kind, "kind")?;
    let chunk_size = opt_int_arg(chunk_size, "chunk_size", 1, MAX_I64)?;
    let window = opt_int_arg(preload_nchunks, "preload_nchunks", 1, MAX_I64)?;
    Kind::parse(&name, chunk_size, window).py()
}

/// The checked arguments that select an order: `(num_samples, seed, epoch, kind)`,
/// with `default_kind` when `kind` is None. Shared by every class and function
/// that builds an order, so each argument is checked and named in one place.
pub fn order_args(
    num_samples: &Bound<'_, PyAny>,
    seed: Option<&Bound<'_, PyAny>>,
    epoch: Option<&Bound<'_, PyAny>>,
    kind: Option<&Bound<'_, PyAny>>,
    chunk_size: Option<&Bound<'_, PyAny>>,
    preload_nchunks: Option<&Bound<'_, PyAny>>,
    default_kind: &str,
) -> PyResult<(u64, u64, u64, Kind)> {
    let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
    let seed = opt_int_arg(seed, "seed", 0, MAX_U64)?.unwrap_or(0);
    let epoch = opt_int_arg(epoch, "epoch", 0, MAX_U64)?.unwrap_or(0);
    let kind = match kind {
        Some(k) if !k.is_none() => kind_arg(k, chunk_size, preload_nchunks)?,
        _ => kind_arg(
            &PyString::new(num_samples.py(), default_kind).into_any(),
            chunk_size,
            preload_nchunks,
        )?,
    };
    Ok((n, seed, epoch, kind))
}

/// The chunked parameters of a kind, for reprs and pickling.
pub fn kind_params(kind: Kind) -> (Option<u64>, Option<u64>) {
    match kind {
        Kind::Chunked { chunk_size, window } => (Some(chunk_size), Some(window)),
        _ => (None, None),
    }
}

/// A keyed bijection of range(num_samples), evaluated per position.
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Permutation {
    order: Order,
    seed: u64,
    epoch: u64,
}

impl Permutation {
    fn array<'py>(py: Python<'py>, ids: Vec<i64>) -> Bound<'py, PyArray1<i64>> {
        ids.into_pyarray(py)
    }
}

#[pymethods]
impl Permutation {
    #[new]
    #[pyo3(signature = (num_samples, *, seed = None, epoch = None, kind = None, chunk_size = None, preload_nchunks = None))]
    fn new(
        py: Python<'_>,
        num_samples: &Bound<'_, PyAny>,
        seed: Option<&Bound<'_, PyAny>>,
        epoch: Option<&Bound<'_, PyAny>>,
        kind: Option<&Bound<'_, PyAny>>,
        chunk_size: Option<&Bound<'_, PyAny>>,
        preload_nchunks: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let (n, seed, epoch, kind) = order_args(
            num_samples,
            seed,
            epoch,
            kind,
            chunk_size,
            preload_nchunks,
            "cipher",
        )?;
        let order = py.detach(|| Order::new(n, seed, epoch, kind)).py()?;
        Ok(Self { order, seed, epoch })
    }

    /// The number of samples.
    #[getter]
    fn num_samples(&self) -> u64 {
        self.order.len()
    }

    /// The seed the order is keyed by.
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch the order is keyed by.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The kind of order: "cipher", "uniform", "chunked" or "identity".
    #[getter]
    fn kind(&self) -> &'static str {
        self.order.kind().name()
    }

    /// Samples per chunk (kind="chunked"), else None.
    #[getter]
    fn chunk_size(&self) -> Option<u64> {
        kind_params(self.order.kind()).0
    }

    /// Chunks per shuffle window (kind="chunked"), else None.
    #[getter]
    fn preload_nchunks(&self) -> Option<u64> {
        kind_params(self.order.kind()).1
    }

    fn __len__(&self) -> usize {
        self.order.len() as usize
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let n = self.order.len();
        if let Ok(slice) = key.cast::<PySlice>() {
            let ix = slice.indices(n as isize)?;
            let (start, step, count) = (ix.start, ix.step as i64, ix.slicelength as u64);
            let ids = if count == 0 {
                Vec::new()
            } else {
                py.detach(|| self.order.range(start as u64, step, count))
                    .py()?
            };
            return Ok(Self::array(py, ids).into_any());
        }
        // Python ints skip the array test (the common case, kept cheap).
        let is_array = !key.is_instance_of::<PyInt>()
            && (key.is_instance_of::<PyList>()
                || key
                    .getattr("ndim")
                    .and_then(|d| d.extract::<usize>())
                    .is_ok_and(|d| d > 0));
        if is_array {
            // An array of positions, as numpy's integer array indexing.
            return self.take(py, key);
        }
        let i = match int_value(key, "index") {
            Ok(Ok(i)) => i,
            Ok(Err(huge)) => {
                return Err(PyIndexError::new_err(format!(
                    "index must be in [-{n}, {n}), got {huge}"
                )))
            }
            Err(e) if e.is_instance_of::<PyTypeError>(py) => {
                return Err(PyTypeError::new_err(format!(
                    "Permutation indices must be integers, slices or integer arrays, not {}",
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
        Ok(self
            .order
            .get(pos as u64)
            .py()?
            .into_pyobject(py)?
            .into_any())
    }

    /// The ids at an array of positions (any integer array, any shape;
    /// negative positions count from the end).
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (mut values, shape) = positions_arg(positions, "positions", self.order.len())?;
        py.detach(|| self.order.map_in_place(&mut values));
        let ids = Self::array(py, values).into_any();
        if shape.is_empty() {
            // A scalar position gives a scalar id, as numpy's take does.
            return ids.get_item(0);
        }
        ids.call_method1("reshape", (PyTuple::new(py, shape)?,))
    }

    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        // The array is always built fresh: numpy 2's protocol asks for an
        // error when a copy cannot be avoided.
        if let Some(c) = copy.filter(|c| !c.is_none()) {
            if !c.is_truthy()? {
                return Err(PyValueError::new_err(
                    "Unable to avoid copy while creating an array as requested: a Permutation \
                 computes its ids (copy=False is not possible)",
                ));
            }
        }
        let ids = py.detach(|| self.order.to_vec()).py()?;
        let arr = Self::array(py, ids).into_any();
        match dtype {
            Some(d) if !d.is_none() => arr.call_method1("astype", (d,)),
            _ => Ok(arr),
        }
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("seed", self.seed)?;
        kwargs.set_item("epoch", self.epoch)?;
        kwargs.set_item("kind", self.order.kind().name())?;
        let (chunk, window) = kind_params(self.order.kind());
        kwargs.set_item("chunk_size", chunk)?;
        kwargs.set_item("preload_nchunks", window)?;
        Ok((PyTuple::new(py, [self.order.len()])?, kwargs))
    }

    fn __repr__(&self) -> String {
        let extra = match kind_params(self.order.kind()) {
            (Some(c), Some(w)) => format!(", chunk_size={c}, preload_nchunks={w}"),
            _ => String::new(),
        };
        format!(
            "Permutation(num_samples={}, seed={}, epoch={}, kind='{}'{extra})",
            self.order.len(),
            self.seed,
            self.epoch,
            self.order.kind().name()
        )
    }
}

/// A materialised permutation of range(num_samples) as an int64 array.
#[pyfunction]
#[pyo3(signature = (num_samples, *, seed = None, epoch = None, kind = None, chunk_size = None, preload_nchunks = None))]
pub fn permutation<'py>(
    py: Python<'py>,
    num_samples: &Bound<'py, PyAny>,
    seed: Option<&Bound<'py, PyAny>>,
    epoch: Option<&Bound<'py, PyAny>>,
    kind: Option<&Bound<'py, PyAny>>,
    chunk_size: Option<&Bound<'py, PyAny>>,
    preload_nchunks: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (n, seed, epoch, kind) = order_args(
        num_samples,
        seed,
        epoch,
        kind,
        chunk_size,
        preload_nchunks,
        "uniform",
    )?;
    const MAX_MATERIALISED: u64 = (isize::MAX as u64) / 8;
    if n > MAX_MATERIALISED {
        return Err(pyo3::exceptions::PyOverflowError::new_err(format!(
            "num_samples must be at most {MAX_MATERIALISED} to materialise the ids \
             (8 bytes each), got {n}"
        )));
    }
    let ids = py
        .detach(|| Order::new(n, seed, epoch, kind).and_then(Order::into_vec))
        .py()?;
    Ok(ids.into_pyarray(py))
}

/// One rank's positions as (start, stop, step), without padding.
#[pyfunction]
#[pyo3(signature = (num_samples, world_size, rank, mode = None))]
pub fn split_range(
    num_samples: &Bound<'_, PyAny>,
    world_size: &Bound<'_, PyAny>,
    rank: &Bound<'_, PyAny>,
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

/// Sets the number of threads large calls use (0: the default).
#[pyfunction]
pub fn set_num_threads(num_threads: &Bound<'_, PyAny>) -> PyResult<()> {
    let n = int_arg(num_threads, "num_threads", 0, 1024)?;
    parallel::set_num_threads(n as usize);
    Ok(())
}

/// The number of threads large calls use.
#[pyfunction]
pub fn get_num_threads() -> usize {
    parallel::num_threads()
}
