//! `Permutation`, `permutation`, `split_range` and the thread controls.

use crate::args::{
    int_arg, is_position_array, position_arg, positions_arg, Keyword, MAX_I64, MAX_U64,
};
use crate::errors::IntoPyResult;
use crate::space::Selection;
use crate::spec::{kind_object, kind_params, kind_value};
use epochplan_core::space::Selection as CoreSelection;
use epochplan_core::{Kind, Order};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PySlice, PyTuple};
use std::sync::Arc;

/// The checked arguments that select an order: `(num_samples, seed, epoch, kind)`,
/// with `default_kind` when `kind` is omitted. Shared by every class and
/// function that builds an order alone, so each argument is checked and
/// named in one place.
pub fn order_args(
    num_samples: &Bound<'_, PyAny>,
    seed: &Keyword<'_>,
    epoch: &Keyword<'_>,
    kind: &Keyword<'_>,
    default_kind: Kind,
) -> PyResult<(u64, u64, u64, Kind)> {
    let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
    let key = |arg: &Keyword<'_>, name: &str| match arg.given() {
        Some(v) => int_arg(v, name, 0, MAX_U64),
        None => Ok(0),
    };
    let (seed, epoch) = (key(seed, "seed")?, key(epoch, "epoch")?);
    Ok((n, seed, epoch, kind_value(kind, default_kind)?))
}

/// A keyed bijection of ``range(num_samples)``: position -> sample id,
/// evaluated per position in O(1) time and memory for every kind but
/// "uniform" (nothing of size N is built unless asked for).
///
/// Index it like an array: ``p[i]``, ``p[a:b:c]`` and ``p.take(positions)``
/// give ints and int64 arrays; ``np.asarray(p)`` lists every id.
///
/// Over a :class:`Selection` ``sel``, position ``i`` holds
/// ``sel[order[i]]``: a permutation of the selected ids, as
/// ``EpochPlan(sel, ...)`` orders them.
///
/// Args:
///     num_samples: N; the ids are 0 .. N-1 (int in [0, 2**63 - 1]); or a
///         Selection, whose ids are permuted.
///     seed: the run's seed (int in [0, 2**64 - 1]).
///     epoch: the epoch (int in [0, 2**64 - 1]). Every (seed, epoch) pair
///         keys its own order, unrelated to the others.
///     kind: "cipher" (keyed format-preserving encryption), "uniform" (an
///         exactly uniform shuffle, held in memory), "identity", or a
///         :class:`Chunked` (chunks in cipher order, samples shuffled
///         within windows of ``preload_nchunks`` chunks).
///
/// Raises:
///     TypeError: an argument of the wrong type (None too, for seed, epoch
///         and kind).
///     ValueError: a value outside its range, or an unknown kind.
///     OverflowError: kind="uniform" with more ids than memory can hold.
///
/// Examples:
///     >>> p = Permutation(10, seed=1, epoch=2)
///     >>> p[:].tolist()
///     [0, 8, 9, 3, 4, 1, 5, 2, 7, 6]
///     >>> p[3], p.take([3, -1]).tolist()
///     (3, [3, 6])
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Permutation {
    order: Order,
    seed: u64,
    epoch: u64,
    /// The selection whose ids are permuted (None: `range(N)`).
    selection: Option<Py<Selection>>,
}

impl Permutation {
    fn array<'py>(py: Python<'py>, ids: Vec<i64>) -> Bound<'py, PyArray1<i64>> {
        ids.into_pyarray(py)
    }

    /// The core selection, if any.
    fn core_selection(&self) -> Option<&Arc<CoreSelection>> {
        self.selection.as_ref().map(|s| s.get().core())
    }

    /// Maps the order's ids through the selection, in place.
    fn select(&self, ids: &mut [i64]) -> epochplan_core::Result<()> {
        match self.core_selection() {
            Some(sel) => sel.map_in_place(ids),
            None => Ok(()),
        }
    }
}

#[pymethods]
impl Permutation {
    #[new]
    #[pyo3(
        signature = (num_samples, *, seed = Keyword::Omitted, epoch = Keyword::Omitted,
                     kind = Keyword::Omitted),
        text_signature = "(num_samples, *, seed=0, epoch=0, kind='cipher')"
    )]
    fn new(
        py: Python<'_>,
        num_samples: &Bound<'_, PyAny>,
        seed: Keyword<'_>,
        epoch: Keyword<'_>,
        kind: Keyword<'_>,
    ) -> PyResult<Self> {
        let selection = num_samples
            .cast::<Selection>()
            .ok()
            .map(|s| s.clone().unbind());
        let count = match &selection {
            Some(s) => s.get().core().len().into_pyobject(py)?.into_any(),
            None => num_samples.clone(),
        };
        let (n, seed, epoch, kind) = order_args(&count, &seed, &epoch, &kind, Kind::Cipher)?;
        let order = py.detach(|| Order::new(n, seed, epoch, kind)).py()?;
        Ok(Self {
            order,
            seed,
            epoch,
            selection,
        })
    }

    /// The number of samples.
    #[getter]
    fn num_samples(&self) -> u64 {
        self.order.len()
    }

    /// The Selection whose ids are permuted, or None (``range(num_samples)``).
    #[getter]
    fn selection<'py>(&self, py: Python<'py>) -> Option<Bound<'py, Selection>> {
        self.selection.as_ref().map(|s| s.bind(py).clone())
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
        kind_params(self.order.kind())[0]
    }

    /// Consecutive chunks shuffled together (kind="chunked"), else None.
    #[getter]
    fn preload_nchunks(&self) -> Option<u64> {
        kind_params(self.order.kind())[1]
    }

    fn __len__(&self) -> usize {
        self.order.len() as usize
    }

    /// `id in p`: a bijection of `range(N)` holds exactly the ints in
    /// `[0, N)` (O(1); without it `in` would scan every position); one of a
    /// selection, exactly its ids.
    fn __contains__(&self, value: &Bound<'_, PyAny>) -> bool {
        if let Some(sel) = self.core_selection() {
            return value
                .extract::<i128>()
                .ok()
                .or_else(|| {
                    let v = value.extract::<f64>().ok()?;
                    (v.fract() == 0.0 && v.abs() < 1e19).then_some(v as i128)
                })
                .is_some_and(|v| {
                    (0..i128::from(sel.num_samples())).contains(&v) && sel.contains(v as u64)
                });
        }
        let n = self.order.len();
        if let Ok(v) = value.extract::<i128>() {
            return (0..i128::from(n)).contains(&v);
        }
        // Like range(): other numbers count when equal to such an int.
        value
            .extract::<f64>()
            .is_ok_and(|v| v.fract() == 0.0 && v >= 0.0 && v < n as f64)
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
                py.detach(|| {
                    let mut ids = self.order.range(start as u64, step, count)?;
                    self.select(&mut ids)?;
                    Ok::<_, epochplan_core::Error>(ids)
                })
                .py()?
            };
            return Ok(Self::array(py, ids).into_any());
        }
        if is_position_array(key) {
            // An array of positions, as numpy's integer array indexing.
            return self.take(py, key);
        }
        let pos = position_arg(key, n, "Permutation")?;
        let mut id = self.order.get(pos).py()?;
        if let Some(sel) = self.core_selection() {
            id = sel.get(id).py()?;
        }
        Ok(id.into_pyobject(py)?.into_any())
    }

    /// The ids at an array of positions (any integer array, any shape;
    /// negative positions count from the end), as an int64 array of that
    /// shape; one position gives a numpy int64, as numpy's `take` does
    /// (`p[i]` gives a Python int).
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (mut values, shape) = positions_arg(positions, "positions", self.order.len())?;
        py.detach(|| {
            self.order.map_in_place(&mut values);
            self.select(&mut values)
        })
        .py()?;
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
        let ids = py
            .detach(|| {
                let mut ids = self.order.to_vec()?;
                self.select(&mut ids)?;
                Ok::<_, epochplan_core::Error>(ids)
            })
            .py()?;
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
        kwargs.set_item("kind", kind_object(py, self.order.kind())?)?;
        let first = match &self.selection {
            Some(s) => s.bind(py).clone().into_any(),
            None => self.order.len().into_pyobject(py)?.into_any(),
        };
        Ok((PyTuple::new(py, [first])?, kwargs))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let kind = kind_object(py, self.order.kind())?;
        let over = match self.core_selection() {
            Some(sel) => format!("<Selection of {} ids>", sel.len()),
            None => self.order.len().to_string(),
        };
        Ok(format!(
            "Permutation(num_samples={over}, seed={}, epoch={}, kind={})",
            self.seed,
            self.epoch,
            kind.bind(py).repr()?
        ))
    }
}

/// A permutation of ``range(num_samples)`` as an int64 array (the ids of
/// ``Permutation(...)`` at every position, computed on every core).
///
/// Args:
///     num_samples: as for :class:`Permutation`.
///     seed: as for :class:`Permutation`.
///     epoch: as for :class:`Permutation`.
///     kind: as for :class:`Permutation`, but "uniform" by default.
///
/// Raises:
///     TypeError, ValueError: as :class:`Permutation`.
///     OverflowError: more ids than memory can hold.
///
/// Examples:
///     >>> permutation(5, kind="identity").tolist()
///     [0, 1, 2, 3, 4]
///     >>> sorted(permutation(1000, seed=7).tolist()) == list(range(1000))
///     True
#[pyfunction]
#[pyo3(
    signature = (num_samples, *, seed = Keyword::Omitted, epoch = Keyword::Omitted,
                 kind = Keyword::Omitted),
    text_signature = "(num_samples, *, seed=0, epoch=0, kind='uniform')"
)]
pub fn permutation<'py>(
    py: Python<'py>,
    num_samples: &Bound<'py, PyAny>,
    seed: Keyword<'py>,
    epoch: Keyword<'py>,
    kind: Keyword<'py>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let (n, seed, epoch, kind) = order_args(num_samples, &seed, &epoch, &kind, Kind::Uniform)?;
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
