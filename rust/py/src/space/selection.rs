//! `Selection`: ranges, masks, id arrays (read in place) and random-split
//! parts of a store.

use super::{getitem, take, to_array, PIECE};
use crate::args::{int64_array, int_arg, int_value, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use epochplan_core::buffer::{copy_of, vec_with_capacity};
use epochplan_core::space::{
    self as core_space, Selection as CoreSelection, SelectionKind, SharedIds,
};
use epochplan_core::Error;
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyUntypedArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PySlice, PyTuple};
use std::sync::{Arc, OnceLock};

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
    pub(super) sel: Arc<CoreSelection>,
    /// The selection's digest, computed when a plan's state first needs it
    /// (O(ids) for an id array).
    digest: OnceLock<String>,
}

impl Selection {
    pub(super) fn wrap(sel: CoreSelection) -> Self {
        Selection {
            sel: Arc::new(sel),
            digest: OnceLock::new(),
        }
    }

    /// The core selection, shared (by the plans over it).
    pub fn core(&self) -> &Arc<CoreSelection> {
        &self.sel
    }

    /// The selection's digest (see `epochplan_core::space::digest`).
    pub fn digest(&self, py: Python<'_>) -> String {
        self.digest
            .get_or_init(|| py.detach(|| self.sel.digest()))
            .clone()
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
        Ok(Selection::wrap(sel))
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
        let mut pairs: Vec<(u64, u64)> = Vec::new();
        for (i, item) in items.enumerate() {
            let pair = range_item(&item?, i, n)?;
            if pairs.len() == pairs.capacity() {
                // Grown fallibly: a list of ranges beyond memory is an error.
                pairs
                    .try_reserve(pairs.len().max(64))
                    .map_err(|_| {
                        Error::Memory(format!("cannot hold {i} ranges: not enough memory"))
                    })
                    .py()?;
            }
            pairs.push(pair);
        }
        Ok(Selection::wrap(CoreSelection::from_ranges(&pairs, n).py()?))
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
        Ok(Selection::wrap(sel))
    }

    /// The ids ``ids``, in this order, of a store of ``num_samples`` ids.
    ///
    /// An int64 C-contiguous numpy array (a memory map too) is kept without
    /// a copy: the selection reads it in place, so do not write to it
    /// afterwards (its ids were checked once). Other integer arrays and
    /// lists are copied as int64. Checking that the ids are distinct reads
    /// the array once when it is ascending; otherwise about nine times at
    /// most, with a temporary of an eighth of its size (64 MiB at least),
    /// never a copy of it.
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
    ///     >>> sel.form, len(sel), 4 in sel, 5 in sel
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
        Ok(Selection::wrap(sel))
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
        Ok(Selection::wrap(sel))
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
        Ok(Selection::wrap(parts.swap_remove(1)))
    }

    /// The store's size: every id is below it.
    #[getter]
    fn num_samples(&self) -> u64 {
        self.sel.num_samples()
    }

    /// The representation: "ranges", "mask", "indices" or "split" (a part
    /// of a random split). (``kind`` is always an order's.)
    #[getter]
    fn form(&self) -> &'static str {
        kind_name(self.sel.kind())
    }

    /// A random-split part's ``(seed, start, length)``: the positions
    /// ``[start, start + length)`` of the split's keyed permutation of the
    /// store; None for other kinds.
    #[getter]
    fn split_part(&self) -> Option<(u64, u64, u64)> {
        self.sel.as_split_part()
    }

    /// The ranges ``(start, stop)`` of a range selection, merged and sorted;
    /// None for other kinds.
    #[getter]
    fn ranges(&self) -> Option<Vec<(u64, u64)>> {
        self.sel.as_ranges().map(<[(u64, u64)]>::to_vec)
    }

    /// The selection's digest (of its ids in order and its store), as a
    /// plan's state records it; O(ids) the first time, then kept.
    #[pyo3(name = "digest")]
    fn digest_of(&self, py: Python<'_>) -> String {
        self.digest(py)
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
        getitem(py, &*self.sel, key, "Selection")
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
        take(py, &*self.sel, positions)
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
        to_array(py, &*self.sel, "Selection", dtype, copy)
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
        Ok(Selection::wrap(sel))
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
        let ids = copy_of(self.sel.as_indices().unwrap_or(&[]), "the selection's ids").py()?;
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
            "Selection(form='{}', len={}, num_samples={n}{extra})",
            kind_name(sel.kind()),
            sel.len()
        )
    }
}
