//! Rank files read as memory maps that hold no file descriptor.
//!
//! numpy's memory maps keep a duplicate of the file's descriptor for as long
//! as the array lives (Python's `mmap` does), so a reader holding many rank
//! files runs into the open-file limit. A mapping needs no descriptor once it
//! is made: here the file is closed right after it is mapped, and the array's
//! base object owns the mapping.

use crate::errors::IntoPyResult;
use epochplan_core::Error;
use memmap2::Mmap;
use numpy::ndarray::ArrayView1;
use numpy::PyArray1;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::fs::File;
use std::path::PathBuf;

/// The mapping a mapped array's memory belongs to (its numpy base object).
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
struct MappedFile {
    map: Mmap,
}

/// The `count` int64 ids at byte `offset` of the file at `path`, as a
/// read-only numpy array over a memory map of the file; the file itself is
/// closed before this returns. As with any memory map, the file must not be
/// cut short while the array is in use.
#[pyfunction]
pub fn map_ids(
    py: Python<'_>,
    path: PathBuf,
    offset: usize,
    count: usize,
) -> PyResult<Bound<'_, PyArray1<i64>>> {
    let file = File::open(&path)
        .map_err(|e| Error::io(&path, "cannot open", &e))
        .py()?;
    // SAFETY: the map is read-only and private to this process. Another
    // process changing or truncating the file while it is mapped changes the
    // values seen or raises SIGBUS on access, as numpy's own memory maps do;
    // `PlanDirectory.rank_ids` documents it.
    #[allow(unsafe_code)]
    let map = unsafe { Mmap::map(&file) }
        .map_err(|e| Error::io(&path, "cannot map", &e))
        .py()?;
    drop(file); // the mapping keeps the pages, not the descriptor
    let bytes = count.checked_mul(8).and_then(|b| b.checked_add(offset));
    if bytes.is_none_or(|end| end > map.len()) {
        return Err(Error::plan_file(
            &path,
            format!(
                "holds {} bytes, fewer than {count} ids after {offset}",
                map.len()
            ),
        ))
        .py();
    }
    let start = map.as_ptr().wrapping_add(offset);
    if !cfg!(target_endian = "little") || start.align_offset(8) != 0 {
        return Err(Error::plan_file(
            &path,
            "cannot be mapped as native int64 values (a big-endian machine or an unaligned header)",
        ))
        .py();
    }
    let owner = Bound::new(py, MappedFile { map })?;
    let start = owner.get().map.as_ptr().wrapping_add(offset).cast::<i64>();
    // SAFETY: `start` is aligned for i64 and the `count` values after it lie
    // inside the map (both checked above, on the same mapping, which moving
    // into `owner` did not move); they are little-endian int64 as on this
    // machine.
    #[allow(unsafe_code)]
    let view = unsafe { ArrayView1::from_shape_ptr(count, start) };
    // SAFETY: the array's base is `owner`, which keeps the mapping alive as
    // long as the array (and any view of it) is; the array is made read-only
    // below, so nothing writes through it.
    #[allow(unsafe_code)]
    let array = unsafe { PyArray1::borrow_from_array(&view, owner.into_any()) };
    let flags = PyDict::new(py);
    flags.set_item("write", false)?;
    array.call_method("setflags", (), Some(&flags))?;
    Ok(array)
}

/// Registers `map_ids`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<MappedFile>()?;
    m.add_function(wrap_pyfunction!(map_ids, m)?)?;
    Ok(())
}
