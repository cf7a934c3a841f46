//! Index spaces (DESIGN.md section 7): `Selection`, `random_split`,
//! `Mixture` and its `MixtureEpoch`. Thin wrappers of `epochplan_core::space`:
//! the arguments are checked and named here, every lookup of many positions
//! runs in the core with the GIL released, and outputs are int64 arrays
//! handed to numpy without a copy.
//!
//! An int64 C-contiguous numpy array given to `Selection.from_indices` is
//! kept, not copied: the selection holds a read-only view of it and the core
//! reads the ids through `selection::NumpyIds`, the one `unsafe` block of the
//! bindings (its safety argument is on it).

use crate::args::{is_position_array, position_arg, positions_arg};
use crate::errors::IntoPyResult;
use epochplan_core::buffer::vec_with_capacity;
use epochplan_core::space::{MixtureEpoch as CoreEpoch, Selection as CoreSelection};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PySlice, PyTuple};

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
    if is_position_array(key) {
        return take(py, space, key);
    }
    let pos = position_arg(key, n, class)?;
    Ok(space.id(pos).py()?.into_pyobject(py)?.into_any())
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

mod mixture;
mod selection;
mod split;

pub use mixture::{Mixture, MixtureEpoch};
pub use selection::Selection;
pub use split::random_split;

/// Registers the classes and `random_split`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Selection>()?;
    m.add_class::<Mixture>()?;
    m.add_class::<MixtureEpoch>()?;
    m.add_function(wrap_pyfunction!(random_split, m)?)?;
    Ok(())
}
