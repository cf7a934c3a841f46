//! Index spaces (DESIGN.md section 7): `Selection`, `random_split`,
//! `Mixture` and its `MixtureEpoch`. Thin wrappers of `epochplan_core::space`:
//! the arguments are checked and named here, every lookup of many positions
//! runs in the core with the GIL released, and outputs are int64 arrays
//! handed to numpy without a copy.
//!
//! An int64 C-contiguous numpy array given to `Selection.from_indices` is
//! kept, not copied: the selection holds a read-only view of it and the core
//! reads the ids through [`NumpyIds`], the one `unsafe` block of the
//! bindings (its safety argument is on it).

use crate::args::{int64_array, int_arg, int_value, positions_arg, Keyword, MAX_I64, MAX_U64};
use crate::errors::{to_py, IntoPyResult};
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::space::{
    self as core_space, Mixture as CoreMixture, MixtureEpoch as CoreEpoch, QuotaRule,
    Selection as CoreSelection, SelectionKind, SharedIds,
};
use epochplan_core::Error;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PySlice, PyTuple};
use std::sync::Arc;

/// Positions looked up at once when two spaces are compared.
const PIECE: u64 = 1 << 16;

// ---------------------------------------------------------------------------
// Random access shared by selections and mixture epochs.

/// A sequence of ids with random access, as the bindings index it.
trait Space: Sync {
    fn size(&self) -> u64;
    fn id(&self, j: u64) -> epochplan_core::Result<u64>;
    fn map(&self, values: &mut [i64]) -> epochplan_core::Result<()>;
    /// Every id, in the space's order.
    fn ids(&self) -> epochplan_core::Result<Vec<i64>> {
        let mut ids = vec_with_capacity(self.size() as usize, "the ids")?;
        ids.extend(0..self.size() as i64);
        self.map(&mut ids)?;
        Ok(ids)
    }
}

impl Space for CoreSelection {
    fn size(&self) -> u64 {
        self.len()
    }
    fn id(&self, j: u64) -> epochplan_core::Result<u64> {
        self.get(j)
    }
    fn map(&self, values: &mut [i64]) -> epochplan_core::Result<()> {
        self.map_in_place(values)
    }
    fn ids(&self) -> epochplan_core::Result<Vec<i64>> {
        self.to_vec()
    }
}

impl Space for CoreEpoch {
    fn size(&self) -> u64 {
        self.len()
    }
    fn id(&self, j: u64) -> epochplan_core::Result<u64> {
        self.get(j)
    }
    fn map(&self, values: &mut [i64]) -> epochplan_core::Result<()> {
        self.map_in_place(values)
    }
}

/// Positions `start, start + step, ...` (`count` of them, all inside the
/// space: the caller's contract).
fn stepped(start: i64, step: i64, count: u64, what: &str) -> PyResult<Vec<i64>> {
    let mut positions = vec_with_capacity(count as usize, what).py()?;
    positions.extend((0..count as i64).map(|i| start + i * step));
    Ok(positions)
}

/// `space[key]`: an int (negative from the end) gives a Python int, a slice
/// or an integer array an int64 array.
fn getitem<'py, S: Space>(
    py: Python<'py>,
    space: &S,
    key: &Bound<'py, PyAny>,
    class: &str,
) -> PyResult<Bound<'py, PyAny>> {
    let n = space.size();
    if let Ok(slice) = key.cast::<PySlice>() {
        let ix = slice.indices(n as isize)?;
        let mut ids = stepped(
            ix.start as i64,
            ix.step as i64,
            ix.slicelength as u64,
            "the slice's ids",
        )?;
        py.detach(|| space.map(&mut ids)).py()?;
        return Ok(ids.into_pyarray(py).into_any());
    }
    let is_array = !key.is_instance_of::<PyInt>()
        && (key.is_instance_of::<PyList>()
            || key
                .getattr("ndim")
                .and_then(|d| d.extract::<usize>())
                .is_ok_and(|d| d > 0));
    if is_array {
        return take(py, space, key);
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
    Ok(space.id(pos as u64).py()?.into_pyobject(py)?.into_any())
}

/// The ids at an array of positions, in its shape (negative positions count
/// from the end, as numpy's `take`); one position gives a numpy int64.
fn take<'py, S: Space>(
    py: Python<'py>,
    space: &S,
    positions: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let (mut values, shape) = positions_arg(positions, "positions", space.size())?;
    py.detach(|| space.map(&mut values)).py()?;
    shaped(py, values, shape)
}

/// An int64 array of `shape`; a 0-d shape gives its one value as a numpy
/// scalar.
fn shaped<'py>(
    py: Python<'py>,
    values: Vec<i64>,
    shape: Vec<usize>,
) -> PyResult<Bound<'py, PyAny>> {
    let arr = values.into_pyarray(py).into_any();
    if shape.is_empty() {
        return arr.get_item(0);
    }
    arr.call_method1("reshape", (PyTuple::new(py, shape)?,))
}

/// `np.asarray(space)`: every id, always a fresh array.
fn to_array<'py, S: Space>(
    py: Python<'py>,
    space: &S,
    class: &str,
    dtype: Option<&Bound<'py, PyAny>>,
    copy: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    if let Some(c) = copy.filter(|c| !c.is_none()) {
        if !c.is_truthy()? {
            return Err(PyValueError::new_err(format!(
                "Unable to avoid copy while creating an array as requested: a {class} \
                 computes its ids (copy=False is not possible)"
            )));
        }
    }
    let arr = py.detach(|| space.ids()).py()?.into_pyarray(py).into_any();
    match dtype {
        Some(d) if !d.is_none() => arr.call_method1("astype", (d,)),
        _ => Ok(arr),
    }
}

// ---------------------------------------------------------------------------
// Selections.

/// The ids of an int64 C-contiguous numpy array, read in place.
///
/// `owner` is a read-only view of the caller's array (so nothing written
/// through an array the selection hands out can change it), and keeps its
/// memory alive: `addr` and `len` were read from it when it was made.
struct NumpyIds {
    _owner: Py<PyAny>,
    addr: usize,
    len: usize,
}

impl std::fmt::Debug for NumpyIds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NumpyIds").field("len", &self.len).finish()
    }
}

impl AsRef<[i64]> for NumpyIds {
    #[allow(unsafe_code)]
    fn as_ref(&self) -> &[i64] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `addr` is the data pointer of a C-contiguous, aligned,
        // native-order int64 numpy array of `len` elements, checked when
        // `NumpyIds` was made; `owner`, a view of it, keeps its buffer alive
        // for as long as `self` lives (a numpy array never moves or frees
        // the buffer of an array that has views: `resize` refuses; only
        // `resize(refcheck=False)`, which numpy documents as unsafe for every
        // view, would). The returned slice borrows `self`. Writes to the
        // caller's array while a call reads it are the caller's race, as
        // with any numpy function that releases the GIL; the selection
        // reads int64 values and checks every position it indexes by, so
        // changed ids give other ids, never an access outside the buffer.
        unsafe { std::slice::from_raw_parts(self.addr as *const i64, self.len) }
    }
}

/// The core's name of a kind, as the bindings show it.
fn kind_name(kind: SelectionKind) -> &'static str {
    match kind {
        SelectionKind::Ranges => "ranges",
        SelectionKind::Mask => "mask",
        SelectionKind::Indices => "indices",
        SelectionKind::Permuted => "split",
    }
}

/// One `ranges[i]` item: a `(start, stop)` pair or a slice with step 1.
fn range_item(item: &Bound<'_, PyAny>, i: usize, num_samples: u64) -> PyResult<(u64, u64)> {
    let name = format!("ranges[{i}]");
    let bound = |obj: &Bound<'_, PyAny>, default: u64| -> PyResult<u64> {
        if obj.is_none() {
            return Ok(default);
        }
        match int_value(obj, &name)? {
            Ok(v) if (0..=i128::from(MAX_I64)).contains(&v) => Ok(v as u64),
            got => {
                let got = got.map_or_else(|huge| huge, |v| v.to_string());
                Err(PyValueError::new_err(format!(
                    "{name} must lie in [0, {num_samples}] (num_samples = {num_samples}), \
                     got a bound of {got}"
                )))
            }
        }
    };
    if let Ok(slice) = item.cast::<PySlice>() {
        let step = slice.getattr("step")?;
        let unit = step.is_none() || matches!(int_value(&step, &name), Ok(Ok(1)));
        if !unit {
            return Err(PyValueError::new_err(format!(
                "{name} must be a slice with step None or 1, got step {}",
                step.repr()?
            )));
        }
        let start = bound(&slice.getattr("start")?, 0)?;
        let stop = bound(&slice.getattr("stop")?, num_samples)?;
        return Ok((start, stop));
    }
    let pair = || {
        PyTypeError::new_err(format!(
            "{name} must be a (start, stop) pair or a slice, got {}",
            item.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    };
    if item.is_instance_of::<pyo3::types::PyString>() || item.len().ok() != Some(2) {
        return Err(pair());
    }
    let start = bound(&item.get_item(0).map_err(|_| pair())?, 0)?;
    let stop = bound(&item.get_item(1).map_err(|_| pair())?, num_samples)?;
    Ok((start, stop))
}

/// Whether `obj` is a numpy array the core can read in place: int64 in the
/// machine's order, 1-d, C-contiguous and aligned.
fn is_shareable(obj: &Bound<'_, PyAny>) -> PyResult<bool> {
    let Ok(arr) = obj.cast::<PyArray1<i64>>() else {
        return Ok(false);
    };
    let np = obj.py().import("numpy")?;
    let native = arr
        .getattr("dtype")?
        .eq(np.getattr("dtype")?.call1(("int64",))?)?;
    let aligned: bool = arr.getattr("flags")?.getattr("aligned")?.extract()?;
    Ok(native && aligned && arr.is_c_contiguous())
}

/// The ids of `from_indices`: the caller's array itself when it can be read
/// in place, else an int64 copy.
fn indices_arg(obj: &Bound<'_, PyAny>, num_samples: u64) -> PyResult<SharedIds> {
    if is_shareable(obj)? {
        let view = obj.call_method0("view")?;
        let flags = PyDict::new(obj.py());
        flags.set_item("write", false)?;
        view.call_method("setflags", (), Some(&flags))?;
        let arr = view.cast::<PyArray1<i64>>()?;
        let (addr, len) = {
            let read = arr.readonly();
            let ids = read.as_slice()?;
            (ids.as_ptr() as usize, ids.len())
        };
        return Ok(Arc::new(NumpyIds {
            _owner: view.unbind(),
            addr,
            len,
        }));
    }
    let Some((values, shape)) = int64_array(obj, "ids")? else {
        return Err(PyValueError::new_err(format!(
            "ids must be in [0, {num_samples}) (num_samples = {num_samples}), \
             got a value outside int64"
        )));
    };
    if shape.len() != 1 {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        return Err(PyValueError::new_err(format!(
            "ids must be a 1-d array of ids, got shape ({})",
            dims.join(", ")
        )));
    }
    Ok(Arc::new(values))
}

/// A set of distinct ids of a store of ``num_samples`` ids, with random
/// access to its ``j``-th id; what a plan will take in place of a sample
/// count (see the index-spaces concept page).
///
/// Build one with :meth:`from_ranges` (O(number of ranges) memory),
/// :meth:`from_mask` (N/8 bytes plus a small directory), :meth:`from_indices`
/// (the caller's int64 array, kept without a copy) or :func:`random_split`
/// (O(1) memory). Ranges and masks hold their ids in ascending order; index
/// arrays keep the caller's order; split parts are in the order of their
/// keyed permutation.
///
/// Index it like an array: ``sel[j]`` (negative from the end), ``sel[a:b:c]``
/// and ``sel.take(positions)`` (int64 arrays), ``np.asarray(sel)``;
/// ``id in sel`` tests membership. ``&``, ``|``, ``-`` and ``~`` combine two
/// range selections or two masks of one store; other kinds raise TypeError
/// (convert with ``Selection.from_mask(sel.to_mask())``). Two selections are
/// equal when they have the same store and the same ids in the same order.
///
/// Examples:
///     >>> train = Selection.from_ranges([(0, 80), (90, 100)], 100)
///     >>> len(train), train[79], train[-1], int(train[80])
///     (90, 79, 99, 90)
///     >>> (~train).to_mask().nonzero()[0].tolist() == list(range(80, 90))
///     True
///     >>> Selection.from_indices([7, 2, 5], 10)[:].tolist()
///     [7, 2, 5]
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Selection {
    sel: CoreSelection,
}

impl Selection {
    /// The core selection (for the plans and samplers that will take one).
    #[allow(dead_code)]
    pub fn core(&self) -> &CoreSelection {
        &self.sel
    }

    fn set_op(
        &self,
        py: Python<'_>,
        other: &Selection,
        op: &str,
        f: impl Fn(&CoreSelection, &CoreSelection) -> epochplan_core::Result<CoreSelection>
            + Send
            + Sync,
    ) -> PyResult<Selection> {
        let (a, b) = (self.sel.kind(), other.sel.kind());
        let cheap = matches!(
            (a, b),
            (SelectionKind::Ranges, SelectionKind::Ranges)
                | (SelectionKind::Mask, SelectionKind::Mask)
        );
        if !cheap {
            return Err(PyTypeError::new_err(format!(
                "'{op}' needs two range selections or two mask selections, got {} and {}: \
                 convert both with Selection.from_mask(sel.to_mask())",
                kind_name(a),
                kind_name(b)
            )));
        }
        let sel = py.detach(|| f(&self.sel, &other.sel)).py()?;
        Ok(Selection { sel })
    }

    /// Whether two selections hold the same ids in the same order, compared
    /// a piece at a time.
    fn same_ids(&self, py: Python<'_>, other: &Selection) -> PyResult<bool> {
        let (a, b) = (&self.sel, &other.sel);
        if a.num_samples() != b.num_samples() || a.len() != b.len() {
            return Ok(false);
        }
        if let (Some(x), Some(y)) = (a.as_ranges(), b.as_ranges()) {
            return Ok(x == y);
        }
        if let (Some(x), Some(y)) = (a.as_mask_words(), b.as_mask_words()) {
            return Ok(x == y);
        }
        if let (Some(x), Some(y)) = (a.as_split_part(), b.as_split_part()) {
            if x == y {
                return Ok(true);
            }
        }
        py.detach(|| {
            let len = a.len();
            let mut from = 0;
            while from < len {
                let to = len.min(from + PIECE);
                let mut x: Vec<i64> = (from as i64..to as i64).collect();
                let mut y = x.clone();
                a.map_in_place(&mut x)?;
                b.map_in_place(&mut y)?;
                if x != y {
                    return Ok(false);
                }
                from = to;
            }
            Ok(true)
        })
        .py()
    }
}

#[pymethods]
impl Selection {
    /// The ids of the ranges ``[start, stop)`` of a store of ``num_samples``.
    ///
    /// Args:
    ///     ranges: ``(start, stop)`` pairs or slices (step None or 1; a
    ///         missing start is 0, a missing stop ``num_samples``), sorted by
    ///         start and disjoint (touching is fine; empty ranges hold
    ///         nothing), inside ``[0, num_samples]``.
    ///     num_samples: the store's size (int in [0, 2**63 - 1]).
    ///
    /// Raises:
    ///     TypeError: an item that is no pair or slice, or a bound that is
    ///         no int.
    ///     ValueError: a range that overlaps or precedes the one before it,
    ///         lies outside the store or has start > stop, named
    ///         ``ranges[i]``.
    ///
    /// Examples:
    ///     >>> Selection.from_ranges([(2, 4), slice(8, None)], 10)[:].tolist()
    ///     [2, 3, 8, 9]
    #[classmethod]
    fn from_ranges(
        _cls: &Bound<'_, pyo3::types::PyType>,
        ranges: &Bound<'_, PyAny>,
        num_samples: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
        let items = ranges.try_iter().map_err(|_| {
            PyTypeError::new_err(format!(
                "ranges must be a list of (start, stop) pairs or slices, got {}",
                ranges
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })?;
        let mut pairs = Vec::new();
        for (i, item) in items.enumerate() {
            pairs.push(range_item(&item?, i, n)?);
        }
        Ok(Selection {
            sel: CoreSelection::from_ranges(&pairs, n).py()?,
        })
    }

    /// The ids ``i`` with ``mask[i]``, of a store of ``len(mask)`` ids
    /// (N/8 bytes and a rank/select directory of 4.7% of that).
    ///
    /// Args:
    ///     mask: a 1-d bool array (or anything ``numpy.asarray`` makes one
    ///         of).
    ///
    /// Raises:
    ///     TypeError: a dtype other than bool.
    ///     ValueError: an array that is not 1-d.
    ///
    /// Examples:
    ///     >>> Selection.from_mask([True, False, True]).to_mask().tolist()
    ///     [True, False, True]
    #[classmethod]
    fn from_mask(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        mask: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        let np = py.import("numpy")?;
        let arr = np.call_method1("asarray", (mask,)).map_err(|e| {
            PyTypeError::new_err(format!("mask must be a bool array: {}", e.value(py)))
        })?;
        let dtype = arr.getattr("dtype")?;
        if dtype.getattr("kind")?.extract::<String>()? != "b" {
            return Err(PyTypeError::new_err(format!(
                "mask must be a bool array, got dtype {}",
                dtype.str()?
            )));
        }
        let shape: Vec<usize> = arr.getattr("shape")?.extract()?;
        if shape.len() != 1 {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            return Err(PyValueError::new_err(format!(
                "mask must be a 1-d bool array, got shape ({})",
                dims.join(", ")
            )));
        }
        let arr = np.call_method1("ascontiguousarray", (arr,))?;
        let arr = arr.cast::<PyArray1<bool>>()?;
        let read = arr.readonly();
        let bits = read.as_slice()?;
        let sel = py.detach(|| CoreSelection::from_mask(bits)).py()?;
        Ok(Selection { sel })
    }

    /// The ids ``ids``, in this order, of a store of ``num_samples`` ids.
    ///
    /// An int64 C-contiguous numpy array (a memory map too) is kept without
    /// a copy: the selection reads it in place, so do not write to it
    /// afterwards (its ids were checked once). Other integer arrays and
    /// lists are copied as int64.
    ///
    /// Args:
    ///     ids: a 1-d integer array of distinct ids in ``[0, num_samples)``.
    ///     num_samples: the store's size (int in [0, 2**63 - 1]).
    ///
    /// Raises:
    ///     TypeError: ids that are not integers (bools included).
    ///     ValueError: an id outside the store or seen before, named
    ///         ``ids[i]``, or an array that is not 1-d.
    ///
    /// Examples:
    ///     >>> sel = Selection.from_indices([9, 0, 4], 10)
    ///     >>> sel.kind, len(sel), 4 in sel, 5 in sel
    ///     ('indices', 3, True, False)
    #[classmethod]
    fn from_indices(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        ids: &Bound<'_, PyAny>,
        num_samples: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
        let shared = indices_arg(ids, n)?;
        let sel = py
            .detach(|| CoreSelection::from_shared_indices(shared, n))
            .py()?;
        Ok(Selection { sel })
    }

    /// A mask selection from its packed words (little-endian bytes of the
    /// u64 words), as pickling stores it.
    #[classmethod]
    fn _from_packed(
        _cls: &Bound<'_, pyo3::types::PyType>,
        py: Python<'_>,
        data: &Bound<'_, PyBytes>,
        num_samples: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
        let bytes = data.as_bytes();
        if bytes.len() % 8 != 0 {
            return Err(PyValueError::new_err(
                "data must hold whole 8-byte words".to_string(),
            ));
        }
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let sel = py
            .detach(|| CoreSelection::from_mask_words(words, n))
            .py()?;
        Ok(Selection { sel })
    }

    /// Part ``[start, start + length)`` of the random split of a store, as
    /// pickling stores it.
    #[classmethod]
    fn _from_split_part(
        _cls: &Bound<'_, pyo3::types::PyType>,
        num_samples: &Bound<'_, PyAny>,
        seed: &Bound<'_, PyAny>,
        start: &Bound<'_, PyAny>,
        length: &Bound<'_, PyAny>,
    ) -> PyResult<Selection> {
        let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
        let seed = int_arg(seed, "seed", 0, MAX_U64)?;
        let start = int_arg(start, "start", 0, n)?;
        let len = int_arg(length, "length", 0, n - start)?;
        let mut parts = core_space::random_split(n, &[start, len, n - start - len], seed).py()?;
        Ok(Selection {
            sel: parts.swap_remove(1),
        })
    }

    /// The store's size: every id is below it.
    #[getter]
    fn num_samples(&self) -> u64 {
        self.sel.num_samples()
    }

    /// The representation: "ranges", "mask", "indices" or "split" (a part
    /// of a random split).
    #[getter]
    fn kind(&self) -> &'static str {
        kind_name(self.sel.kind())
    }

    /// The ranges ``(start, stop)`` of a range selection, merged and sorted;
    /// None for other kinds.
    #[getter]
    fn ranges(&self) -> Option<Vec<(u64, u64)>> {
        self.sel.as_ranges().map(<[(u64, u64)]>::to_vec)
    }

    fn __len__(&self) -> usize {
        self.sel.len() as usize
    }

    /// `id in sel`: O(1) for masks and split parts, O(log) for ranges and
    /// ascending indices, O(len) for other indices.
    fn __contains__(&self, value: &Bound<'_, PyAny>) -> bool {
        match value.extract::<i128>() {
            Ok(v) if (0..i128::from(self.sel.num_samples())).contains(&v) => {
                self.sel.contains(v as u64)
            }
            _ => false,
        }
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        getitem(py, &self.sel, key, "Selection")
    }

    /// The ids at an array of positions (any integer array, any shape;
    /// negative positions count from the end, as numpy's ``take``), as an
    /// int64 array of that shape; one position gives a numpy int64.
    ///
    /// Args:
    ///     positions: integer positions in ``[-len(sel), len(sel))``.
    ///
    /// Raises:
    ///     TypeError: positions that are not integers.
    ///     IndexError: a position outside the selection.
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        take(py, &self.sel, positions)
    }

    /// The selection as a bool array of the store's size (True for every
    /// selected id): ``Selection.from_mask(sel.to_mask())`` converts any
    /// selection to a mask, for the set operations.
    fn to_mask<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Some(ids) = self.sel.as_indices() {
            // The ids were checked when the selection was made; the caller
            // may have written to the array since.
            let n = self.sel.num_samples();
            if ids.iter().any(|&v| v < 0 || v as u64 >= n) {
                return Err(PyValueError::new_err(format!(
                    "ids must be in [0, {n}): the array was written to after the \
                     selection was made"
                )));
            }
        }
        let n = self.sel.num_samples();
        let bytes: Vec<u8> = py
            .detach(|| {
                let mask = self.sel.to_mask()?;
                let words = mask.as_mask_words().unwrap_or(&[]);
                let mut bytes = vec_with_capacity(words.len() * 8, "the mask")?;
                bytes.extend(words.iter().flat_map(|w| w.to_le_bytes()));
                Ok::<_, Error>(bytes)
            })
            .py()?;
        let np = py.import("numpy")?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("count", n)?;
        kwargs.set_item("bitorder", "little")?;
        let bits = np.call_method("unpackbits", (bytes.into_pyarray(py),), Some(&kwargs))?;
        bits.call_method1("view", (np.getattr("bool_")?,))
    }

    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_array(py, &self.sel, "Selection", dtype, copy)
    }

    fn __and__(&self, py: Python<'_>, other: PyRef<'_, Selection>) -> PyResult<Selection> {
        self.set_op(py, &other, "&", CoreSelection::intersection)
    }

    fn __or__(&self, py: Python<'_>, other: PyRef<'_, Selection>) -> PyResult<Selection> {
        self.set_op(py, &other, "|", CoreSelection::union)
    }

    fn __sub__(&self, py: Python<'_>, other: PyRef<'_, Selection>) -> PyResult<Selection> {
        self.set_op(py, &other, "-", CoreSelection::difference)
    }

    fn __invert__(&self, py: Python<'_>) -> PyResult<Selection> {
        let kind = self.sel.kind();
        if !matches!(kind, SelectionKind::Ranges | SelectionKind::Mask) {
            return Err(PyTypeError::new_err(format!(
                "'~' needs a range selection or a mask selection, got {}: \
                 convert it with Selection.from_mask(sel.to_mask())",
                kind_name(kind)
            )));
        }
        let sel = py.detach(|| self.sel.complement()).py()?;
        Ok(Selection { sel })
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        match other.cast::<Selection>() {
            Ok(other) => Ok(PyBool::new(py, self.same_ids(py, other.get())?)
                .to_owned()
                .into_any()
                .unbind()),
            Err(_) => Ok(py.NotImplemented()),
        }
    }

    /// Consistent with `==`: the store, the length and three ids.
    fn __hash__(&self) -> PyResult<u64> {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let len = self.sel.len();
        (self.sel.num_samples(), len).hash(&mut h);
        for j in [0, len / 2, len.saturating_sub(1)] {
            if j < len {
                self.sel.get(j).py()?.hash(&mut h);
            }
        }
        Ok(h.finish())
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let class = py.get_type::<Selection>();
        let n = self.sel.num_samples();
        if let Some(ranges) = self.sel.as_ranges() {
            let args = (ranges.to_vec(), n).into_pyobject(py)?;
            return PyTuple::new(py, [class.getattr("from_ranges")?, args.into_any()]);
        }
        if let Some(words) = self.sel.as_mask_words() {
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let args = (PyBytes::new(py, &bytes), n).into_pyobject(py)?;
            return PyTuple::new(py, [class.getattr("_from_packed")?, args.into_any()]);
        }
        if let Some((seed, start, len)) = self.sel.as_split_part() {
            let args = (n, seed, start, len).into_pyobject(py)?;
            return PyTuple::new(py, [class.getattr("_from_split_part")?, args.into_any()]);
        }
        let ids = self.sel.as_indices().unwrap_or(&[]).to_vec();
        let args = (ids.into_pyarray(py), n).into_pyobject(py)?;
        PyTuple::new(py, [class.getattr("from_indices")?, args.into_any()])
    }

    fn __repr__(&self) -> String {
        let (sel, n) = (&self.sel, self.sel.num_samples());
        let extra = if let Some(ranges) = sel.as_ranges() {
            if ranges.len() <= 4 {
                format!(", ranges={ranges:?}")
            } else {
                format!(", ranges=<{} ranges>", ranges.len())
            }
        } else if let Some((seed, start, _)) = sel.as_split_part() {
            format!(", seed={seed}, start={start}")
        } else {
            String::new()
        };
        format!(
            "Selection(kind='{}', len={}, num_samples={n}{extra})",
            kind_name(sel.kind()),
            sel.len()
        )
    }
}

// ---------------------------------------------------------------------------
// Random splits.

/// One item of `sizes_or_fractions`.
enum Part {
    Size(u64),
    Fraction(f64),
}

fn is_float(obj: &Bound<'_, PyAny>) -> bool {
    obj.is_instance_of::<PyFloat>()
        || obj
            .getattr("dtype")
            .and_then(|d| d.getattr("kind"))
            .and_then(|k| k.extract::<String>())
            .is_ok_and(|k| k == "f")
}

fn part_arg(item: &Bound<'_, PyAny>, i: usize) -> PyResult<Part> {
    let name = format!("sizes_or_fractions[{i}]");
    if is_float(item) {
        return Ok(Part::Fraction(item.extract::<f64>()?));
    }
    match int_value(item, &name) {
        Ok(Ok(v)) if (0..=i128::from(MAX_I64)).contains(&v) => Ok(Part::Size(v as u64)),
        Ok(got) => {
            let got = got.map_or_else(|huge| huge, |v| v.to_string());
            Err(PyValueError::new_err(format!(
                "{name} must be a size in [0, 2**63 - 1], got {got}"
            )))
        }
        Err(e) if e.is_instance_of::<PyTypeError>(item.py()) => Err(PyTypeError::new_err(format!(
            "{name} must be an int (a size) or a float (a fraction), got {}",
            item.get_type().name()?
        ))),
        Err(e) => Err(e),
    }
}

/// The core's error about `sizes` or `fractions`, named as the caller's
/// argument.
fn as_parts_error(err: Error) -> PyErr {
    match err {
        Error::Value(msg) => PyValueError::new_err(format!("sizes_or_fractions: {msg}")),
        other => to_py(other),
    }
}

/// Disjoint selections that cover a store, of exact sizes, each the
/// positions ``[a_k, b_k)`` of one keyed permutation of the store: O(1)
/// memory and lookups at any ``num_samples``. The split depends on ``seed``
/// alone, never on an epoch, so train and validation stay apart for the
/// whole run.
///
/// Args:
///     num_samples: the store's size (int in [0, 2**63 - 1]).
///     sizes_or_fractions: ints, the parts' sizes, summing to
///         ``num_samples``; or floats, fractions in [0, 1] summing to 1,
///         rounded as ``torch.utils.data.random_split`` rounds them
///         (``floor(f * N)`` each, the remainder one by one to the parts in
///         order). Not both.
///     seed: the split's seed (int in [0, 2**64 - 1]).
///
/// Raises:
///     TypeError: an item that is neither int nor float, or a seed that is
///         no int.
///     ValueError: sizes that do not sum to ``num_samples``, fractions that
///         do not sum to 1, negative items, or ints and floats mixed: each
///         naming ``sizes_or_fractions``.
///
/// Examples:
///     >>> train, val = random_split(10, [0.8, 0.2], seed=3)
///     >>> len(train), len(val)
///     (8, 2)
///     >>> sorted(train[:].tolist() + val[:].tolist()) == list(range(10))
///     True
#[pyfunction]
#[pyo3(
    signature = (num_samples, sizes_or_fractions, *, seed = Keyword::Omitted),
    text_signature = "(num_samples, sizes_or_fractions, *, seed=0)"
)]
pub fn random_split(
    num_samples: &Bound<'_, PyAny>,
    sizes_or_fractions: &Bound<'_, PyAny>,
    seed: Keyword<'_>,
) -> PyResult<Vec<Selection>> {
    let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
    let seed = match seed.given() {
        Some(s) => int_arg(s, "seed", 0, MAX_U64)?,
        None => 0,
    };
    let items = sizes_or_fractions.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "sizes_or_fractions must be a list of ints or of floats, got {}",
            sizes_or_fractions
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    let (mut sizes, mut fractions) = (Vec::new(), Vec::new());
    for (i, item) in items.enumerate() {
        match part_arg(&item?, i)? {
            Part::Size(s) => sizes.push((i, s)),
            Part::Fraction(f) => fractions.push((i, f)),
        }
        if let (Some(&(a, _)), Some(&(b, _))) = (sizes.first(), fractions.first()) {
            return Err(PyValueError::new_err(format!(
                "sizes_or_fractions must be all ints (sizes) or all floats (fractions), \
                 got an int at [{a}] and a float at [{b}]"
            )));
        }
    }
    let sizes: Vec<u64> = if fractions.is_empty() {
        sizes.into_iter().map(|(_, s)| s).collect()
    } else {
        let fractions: Vec<f64> = fractions.into_iter().map(|(_, f)| f).collect();
        core_space::split_sizes(n, &fractions).map_err(as_parts_error)?
    };
    let parts = core_space::random_split(n, &sizes, seed).map_err(as_parts_error)?;
    Ok(parts.into_iter().map(|sel| Selection { sel }).collect())
}

// ---------------------------------------------------------------------------
// Mixtures.

/// The sources, checked: sizes or selections (of one store).
enum Sources {
    Sizes(Vec<u64>),
    Selections(Vec<CoreSelection>),
}

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

fn sources_arg(sources: &Bound<'_, PyAny>) -> PyResult<(Sources, Vec<Py<PyAny>>)> {
    let items = sources.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "sources must be a list of ints (dataset sizes) or of Selections, got {}",
            type_name(sources)
        ))
    })?;
    let (mut sizes, mut sels, mut given) = (Vec::new(), Vec::new(), Vec::new());
    for (i, item) in items.enumerate() {
        let item = item?;
        if let Ok(sel) = item.cast::<Selection>() {
            sels.push((i, sel.get().sel.clone()));
        } else {
            let name = format!("sources[{i}]");
            match int_value(&item, &name) {
                Ok(Ok(v)) if (0..=i128::from(MAX_I64)).contains(&v) => sizes.push((i, v as u64)),
                Ok(got) => {
                    let got = got.map_or_else(|huge| huge, |v| v.to_string());
                    return Err(PyValueError::new_err(format!(
                        "{name} must be a dataset size in [0, 2**63 - 1], got {got}"
                    )));
                }
                Err(e) if e.is_instance_of::<PyTypeError>(item.py()) => {
                    return Err(PyTypeError::new_err(format!(
                        "{name} must be an int (a dataset's size) or a Selection, got {}",
                        type_name(&item)
                    )))
                }
                Err(e) => return Err(e),
            }
        }
        if let (Some(&(a, _)), Some((b, _))) = (sizes.first(), sels.first()) {
            return Err(PyTypeError::new_err(format!(
                "sources must be all ints (dataset sizes) or all Selections, \
                 got an int at sources[{a}] and a Selection at sources[{b}]"
            )));
        }
        given.push(item.unbind());
    }
    if given.is_empty() {
        return Err(PyValueError::new_err(
            "sources must hold at least one source",
        ));
    }
    if sels.is_empty() {
        return Ok((
            Sources::Sizes(sizes.into_iter().map(|(_, s)| s).collect()),
            given,
        ));
    }
    let store = sels[0].1.num_samples();
    if let Some((i, sel)) = sels.iter().find(|(_, s)| s.num_samples() != store) {
        return Err(PyValueError::new_err(format!(
            "sources must be Selections of one store: sources[{}] has num_samples {store}, \
             sources[{i}] has {}",
            sels[0].0,
            sel.num_samples()
        )));
    }
    Ok((
        Sources::Selections(sels.into_iter().map(|(_, s)| s).collect()),
        given,
    ))
}

/// A list of numbers (`repeat`, `weights`), each named `name[i]`.
fn floats_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<f64>> {
    let items = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a list of numbers, got {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        let item = item?;
        let bad = || {
            PyTypeError::new_err(format!(
                "{name}[{i}] must be a number, got {}",
                type_name(&item)
            ))
        };
        let is_flag = item.is_instance_of::<PyBool>()
            || item
                .getattr("dtype")
                .and_then(|d| d.getattr("kind"))
                .and_then(|k| k.extract::<String>())
                .is_ok_and(|k| k == "b");
        if is_flag || item.is_instance_of::<pyo3::types::PyString>() {
            return Err(bad());
        }
        out.push(item.extract::<f64>().map_err(|_| bad())?);
    }
    Ok(out)
}

/// A list of ints in `[0, hi]` (`quotas`, `consumed`), each named `name[i]`.
fn ints_arg(obj: &Bound<'_, PyAny>, name: &str, hi: u64) -> PyResult<Vec<u64>> {
    let items = obj.try_iter().map_err(|_| {
        PyTypeError::new_err(format!(
            "{name} must be a list of ints, got {}",
            type_name(obj)
        ))
    })?;
    let mut out = Vec::new();
    for (i, item) in items.enumerate() {
        out.push(int_arg(&item?, &format!("{name}[{i}]"), 0, hi)?);
    }
    Ok(out)
}

/// Several sources mixed with exact per-epoch quotas, stratified over each
/// epoch (see the index-spaces concept page for the guarantees and their
/// proofs).
///
/// Each epoch, source ``k`` contributes exactly ``q_k`` samples, the next
/// ``q_k`` of its own sequence of passes (pass ``p`` is a keyed permutation
/// of the source): over the run, after ``c`` samples of a source of ``n_k``,
/// every one of its samples was shown ``floor(c / n_k)`` or
/// ``ceil(c / n_k)`` times, so a down-sampled source shows every sample once
/// before any repeat. Within one epoch that starts at a pass boundary (the
/// first, or every epoch when ``q_k`` is a multiple of ``n_k``) each sample
/// is shown ``floor(q_k / n_k)`` or ``ceil(q_k / n_k)`` times; an epoch that
/// starts inside a pass may show one sample once more or once less.
/// For every prefix of ``P`` positions of an epoch of ``S`` and every
/// source, the count of that source's positions differs from
/// ``P * q_k / S`` by at most ``d_k / 2 <= ceil(log2 K) / 2`` (``d_k`` the
/// source's depth in a balanced tree over the ``K`` sources: 1/2 for two
/// sources).
///
/// Args:
///     sources: all ints (dataset sizes; ids offset as
///         ``torch.utils.data.ConcatDataset`` numbers them) or all
///         Selections of one store (ids as they are).
///     weights: per-source weights (finite, >= 0): the epoch's
///         ``num_samples`` positions are shared by largest remainder.
///     repeat: per-source factors (finite, >= 0): ``q_k = round(n_k *
///         repeat_k)``, half to even.
///     quotas: per-source sample counts.
///     num_samples: the epoch's length with ``weights`` (default: the
///         sources' total size).
///     seed: the seed of the sources' passes (int in [0, 2**64 - 1]).
///
/// At most one of ``weights``, ``repeat`` and ``quotas``; none means every
/// source once an epoch.
///
/// Raises:
///     TypeError: sources of both kinds, or an item of the wrong type.
///     ValueError: no sources, selections of different stores, negative or
///         NaN weights or repeats, two of weights/repeat/quotas, quotas of
///         the wrong length, a positive quota for an empty source,
///         num_samples without weights: each naming its argument.
///     OverflowError: quotas summing beyond 2**63 - 1.
///
/// Examples:
///     >>> mix = Mixture([4, 4], weights=[1, 1], seed=1)
///     >>> mix.quotas, len(mix)
///     ([4, 4], 8)
///     >>> e = mix.epoch(0)
///     >>> sorted(e[:].tolist())
///     [0, 1, 2, 3, 4, 5, 6, 7]
///     >>> e.sources(range(8)).tolist()
///     [0, 1, 0, 1, 0, 1, 0, 1]
///     >>> e.consumed_after
///     [4, 4]
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Mixture {
    mixture: CoreMixture,
    quotas: Vec<u64>,
    /// The sources as given (ints or Selections).
    sources: Vec<Py<PyAny>>,
}

impl Mixture {
    /// The core mixture and its quotas (for the plans that will take one).
    #[allow(dead_code)]
    pub fn core(&self) -> (&CoreMixture, &[u64]) {
        (&self.mixture, &self.quotas)
    }
}

#[pymethods]
impl Mixture {
    #[new]
    #[pyo3(
        signature = (sources, *, weights = None, repeat = None, quotas = None,
                     num_samples = None, seed = Keyword::Omitted),
        text_signature = "(sources, *, weights=None, repeat=None, quotas=None, num_samples=None, seed=0)"
    )]
    fn new(
        sources: &Bound<'_, PyAny>,
        weights: Option<&Bound<'_, PyAny>>,
        repeat: Option<&Bound<'_, PyAny>>,
        quotas: Option<&Bound<'_, PyAny>>,
        num_samples: Option<&Bound<'_, PyAny>>,
        seed: Keyword<'_>,
    ) -> PyResult<Self> {
        let seed = match seed.given() {
            Some(s) => int_arg(s, "seed", 0, MAX_U64)?,
            None => 0,
        };
        let (checked, given) = sources_arg(sources)?;
        let rules: Vec<&str> = [("weights", weights), ("repeat", repeat), ("quotas", quotas)]
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(name, _)| *name)
            .collect();
        if rules.len() > 1 {
            return Err(PyValueError::new_err(format!(
                "give at most one of weights, repeat and quotas, got {}",
                rules.join(" and ")
            )));
        }
        if num_samples.is_some() && weights.is_none() {
            return Err(PyValueError::new_err(
                "num_samples is taken with weights only (quotas and repeat fix the epoch's \
                 length), got num_samples without weights",
            ));
        }
        let mixture = match checked {
            Sources::Sizes(sizes) => CoreMixture::from_sizes(&sizes, seed),
            Sources::Selections(sels) => CoreMixture::from_selections(sels, seed),
        }
        .py()?;
        let rule = if let Some(w) = weights {
            QuotaRule::Weights {
                weights: floats_arg(w, "weights")?,
                num_samples: match num_samples {
                    Some(n) => Some(int_arg(n, "num_samples", 0, MAX_I64)?),
                    None => None,
                },
            }
        } else if let Some(r) = repeat {
            QuotaRule::Repeat(floats_arg(r, "repeat")?)
        } else if let Some(q) = quotas {
            QuotaRule::Quotas(ints_arg(q, "quotas", MAX_I64)?)
        } else {
            QuotaRule::Once
        };
        let quotas = mixture.quotas(&rule).py()?;
        // The quotas' checks against the sources (a positive quota for an
        // empty source, the epoch's length), made now rather than at the
        // first epoch.
        mixture.epoch(&quotas, &vec![0; quotas.len()]).py()?;
        Ok(Self {
            mixture,
            quotas,
            sources: given,
        })
    }

    /// Each source's samples an epoch (``q_k``).
    #[getter]
    fn quotas(&self) -> Vec<u64> {
        self.quotas.clone()
    }

    /// Each source's size (``n_k``).
    #[getter]
    fn sizes(&self) -> Vec<u64> {
        self.mixture.sizes()
    }

    /// The sources as given: ints or Selections.
    #[getter]
    fn sources<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, self.sources.iter().map(|s| s.bind(py)))
    }

    /// The seed of the sources' passes.
    #[getter]
    fn seed(&self) -> u64 {
        self.mixture.seed()
    }

    /// The epoch's length ``S``, the sum of the quotas.
    fn __len__(&self) -> usize {
        self.quotas.iter().sum::<u64>() as usize
    }

    /// One epoch of the mixture: ``S`` positions, source ``k`` at
    /// ``quotas[k]`` of them, stratified.
    ///
    /// Args:
    ///     epoch: the epoch's number (int in [0, 2**64 - 1]).
    ///     consumed: each source's samples taken by the epochs before (the
    ///         previous epoch's ``consumed_after``); default
    ///         ``epoch * quotas[k]``, right when the quotas never changed.
    ///         Give it to continue a run whose quotas changed (a new Mixture
    ///         of the same sources and seed).
    ///
    /// Raises:
    ///     TypeError, ValueError: a bad epoch or consumed, naming it.
    ///     OverflowError: a count beyond 2**64 - 1.
    ///
    /// Examples:
    ///     >>> mix = Mixture([4, 2], quotas=[2, 2])
    ///     >>> e0 = mix.epoch(0)
    ///     >>> e1 = mix.epoch(1, consumed=e0.consumed_after)
    ///     >>> sorted(e0[:].tolist() + e1[:].tolist())[:4]
    ///     [0, 1, 2, 3]
    #[pyo3(signature = (epoch = Keyword::Omitted, consumed = None))]
    fn epoch(
        slf: &Bound<'_, Self>,
        epoch: Keyword<'_>,
        consumed: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MixtureEpoch> {
        let this = slf.get();
        let number = match epoch.given() {
            Some(e) => int_arg(e, "epoch", 0, MAX_U64)?,
            None => 0,
        };
        let consumed = match consumed {
            Some(c) => ints_arg(c, "consumed", MAX_U64)?,
            None => this
                .quotas
                .iter()
                .enumerate()
                .map(|(k, &q)| {
                    q.checked_mul(number).ok_or_else(|| {
                        pyo3::exceptions::PyOverflowError::new_err(format!(
                            "epoch * quotas[{k}] must be below 2**64, got {number} * {q}: \
                             give consumed"
                        ))
                    })
                })
                .collect::<PyResult<Vec<u64>>>()?,
        };
        let inner = this.mixture.epoch(&this.quotas, &consumed).py()?;
        Ok(MixtureEpoch {
            inner,
            number,
            mixture: slf.clone().unbind(),
        })
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("quotas", self.quotas.clone())?;
        kwargs.set_item("seed", self.mixture.seed())?;
        let sources = PyList::new(py, self.sources.iter().map(|s| s.bind(py)))?;
        Ok((PyTuple::new(py, [sources])?, kwargs))
    }

    fn __repr__(&self) -> String {
        format!(
            "Mixture(sizes={:?}, quotas={:?}, seed={})",
            self.mixture.sizes(),
            self.quotas,
            self.mixture.seed()
        )
    }
}

/// One epoch of a :class:`Mixture`: its ``S`` positions, each an id of some
/// source, indexed like an array (``e[j]``, ``e[a:b:c]``, ``e.take(...)``,
/// ``np.asarray(e)``). ``e.sources(positions)`` gives each position's
/// source, for per-source loss logging; ``e.consumed_after`` is what the
/// next epoch continues from.
///
/// Examples:
///     >>> e = Mixture([2, 2], repeat=[1.0, 0.5]).epoch(0)
///     >>> len(e), e.quotas, e.consumed, e.consumed_after
///     (3, [2, 1], [0, 0], [2, 1])
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct MixtureEpoch {
    inner: CoreEpoch,
    number: u64,
    mixture: Py<Mixture>,
}

impl MixtureEpoch {
    /// The core epoch (for the plans that will take one).
    #[allow(dead_code)]
    pub fn core(&self) -> &CoreEpoch {
        &self.inner
    }
}

#[pymethods]
impl MixtureEpoch {
    /// The epoch's number.
    #[getter]
    fn epoch(&self) -> u64 {
        self.number
    }

    /// The mixture it is an epoch of.
    #[getter]
    fn mixture(&self, py: Python<'_>) -> Py<Mixture> {
        self.mixture.clone_ref(py)
    }

    /// Each source's positions in the epoch.
    #[getter]
    fn quotas(&self) -> Vec<u64> {
        let il = self.inner.interleave();
        (0..il.num_sources()).map(|k| il.quota(k)).collect()
    }

    /// Each source's samples taken before this epoch.
    #[getter]
    fn consumed(&self) -> Vec<u64> {
        self.inner.consumed().to_vec()
    }

    /// Each source's samples taken after this epoch: the next epoch's
    /// ``consumed``.
    #[getter]
    fn consumed_after(&self) -> Vec<u64> {
        self.inner.consumed_after()
    }

    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        getitem(py, &self.inner, key, "MixtureEpoch")
    }

    /// The ids at an array of positions, as :meth:`Selection.take`.
    ///
    /// Args:
    ///     positions: integer positions in ``[-len(e), len(e))``.
    fn take<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        take(py, &self.inner, positions)
    }

    /// The source (its index in ``sources``) of each position, as an int64
    /// array of the positions' shape (negative positions count from the end).
    ///
    /// Args:
    ///     positions: integer positions in ``[-len(e), len(e))``.
    fn sources<'py>(
        &self,
        py: Python<'py>,
        positions: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (values, shape) = positions_arg(positions, "positions", self.inner.len())?;
        let mut out = vec![0; values.len()];
        py.detach(|| self.inner.fill_sources(&values, &mut out))
            .py()?;
        shaped(py, out, shape)
    }

    #[pyo3(signature = (dtype = None, copy = None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        to_array(py, &self.inner, "MixtureEpoch", dtype, copy)
    }

    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let method = self.mixture.bind(py).getattr("epoch")?;
        let args = (self.number, self.inner.consumed().to_vec()).into_pyobject(py)?;
        PyTuple::new(py, [method, args.into_any()])
    }

    fn __repr__(&self) -> String {
        format!(
            "MixtureEpoch(epoch={}, len={}, quotas={:?}, consumed={:?})",
            self.number,
            self.inner.len(),
            self.quotas(),
            self.inner.consumed()
        )
    }
}

/// Registers the classes and `random_split`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Selection>()?;
    m.add_class::<Mixture>()?;
    m.add_class::<MixtureEpoch>()?;
    m.add_function(wrap_pyfunction!(random_split, m)?)?;
    Ok(())
}
