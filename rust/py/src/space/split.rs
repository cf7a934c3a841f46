//! `random_split`: disjoint parts of a store of exact sizes, from one keyed
//! permutation.

use super::Selection;
use crate::args::{int_arg, int_value, Keyword, MAX_I64, MAX_U64};
use crate::errors::to_py;
use epochplan_core::space::{self as core_space};
use epochplan_core::Error;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyFloat;

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
    Ok(parts.into_iter().map(Selection::wrap).collect())
}
