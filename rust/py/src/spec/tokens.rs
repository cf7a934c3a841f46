//! [`Tokens`]: a token plan's arguments as one value (the arrays, the cost
//! and normalization models, the cut and the oversize policy).

use crate::args::{opt_int_arg, str_arg, Keyword, MAX_I64};
use crate::lengths::{checked_array, cost_arg, cost_value, normalization_arg};
use epochplan_core::tokens::{Cost, Normalization, Packing};
use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

/// What a sampler or plan writer capped at ``max_tokens`` does with a
/// sample longer than the cap.
pub const OVERSIZE_POLICIES: [&str; 3] = ["error", "truncate", "skip"];

/// A token plan's arguments: tokens per sample and how they count.
///
/// Give it as ``tokens=`` to :class:`PlanSpec` or :class:`EpochPlan`. The
/// steps stay the same; each is dealt balanced by cost, cut into
/// micro-batches under ``max_tokens`` and weighted by tokens (see the token
/// plans guide).
///
/// Args:
///     lengths: tokens per sample (a 1-d integer numpy array or np.memmap of
///         one entry per sample of the store, any integer dtype). Borrowed,
///         never copied whole: a step reads its samples' entries.
///     loss_tokens: tokens per sample that count in the loss (as lengths;
///         default: the lengths). A causal LM predicts every token but its
///         first: ``lengths - 1`` (see the token plans guide).
///     cost: what a sample costs by its length L: ``"tokens"`` (L) or
///         ``(a, b)`` for ``a*L + b*L**2``.
///     loss_normalization: ``"tokens"`` (weights ``W / T_t`` for each
///         sample's summed token loss) or ``"samples"`` (``W / n_t`` for each
///         sample's mean loss).
///     max_length: samples longer than this are read cut to their first
///         ``max_length`` tokens (int >= 1; default: no cut).
///     oversize: what a sampler or plan writer capped at ``max_tokens``
///         does with a longer sample: ``"error"`` (refuse the plan before
///         the first batch, naming how many and the first ids),
///         ``"truncate"`` (cut it to the cap) or ``"skip"`` (leave it out of
///         every step and weight).
///     packing: how a rank's share of a step is cut into micro-batches:
///         ``"sorted"`` (runs of similar lengths, for padded batches) or
///         ``"first_fit"`` (first-fit decreasing under the caps: fewer,
///         fuller micro-batches packed into one sequence, for varlen
///         attention). The steps, shares and weights are the same.
///
/// A pickle (a spec sent to Ray tasks or spawned workers) names a read-only
/// ``np.memmap`` of a whole file (``np.load(path, mmap_mode="r")``) and
/// maps the file again where it is loaded, instead of copying its values.
///
/// Raises:
///     TypeError: arrays that are not of integers, or an argument of the
///         wrong type.
///     ValueError: arrays that are not 1-d, or a value outside its range.
///
/// Examples:
///     >>> import numpy as np
///     >>> tokens = Tokens(np.array([3, 1, 4, 1, 5]), cost=(1.0, 0.01))
///     >>> plan = EpochPlan(5, 5, tokens=tokens)
///     >>> plan.step_tokens(0), plan.tokens is tokens
///     (14, True)
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Tokens {
    pub(crate) lengths: Py<PyUntypedArray>,
    pub(crate) loss_tokens: Option<Py<PyUntypedArray>>,
    pub(crate) cost: Cost,
    pub(crate) normalization: Normalization,
    pub(crate) max_length: Option<u64>,
    pub(crate) oversize: &'static str,
    pub(crate) packing: Packing,
}

impl Tokens {
    /// The same arguments with another oversize policy (a spec read back
    /// from JSON).
    pub(crate) fn with_oversize(&self, py: Python<'_>, oversize: &'static str) -> Tokens {
        Tokens {
            lengths: self.lengths.clone_ref(py),
            loss_tokens: self.loss_tokens.as_ref().map(|l| l.clone_ref(py)),
            cost: self.cost,
            normalization: self.normalization,
            max_length: self.max_length,
            oversize,
            packing: self.packing,
        }
    }
}

/// The `packing` argument: "sorted" or "first_fit".
pub fn packing_arg(obj: &Bound<'_, PyAny>) -> PyResult<Packing> {
    let message = |got: String| format!("packing must be \"sorted\" or \"first_fit\", got {got}");
    if !obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(message(
            obj.get_type().name()?.to_string(),
        )));
    }
    let name = str_arg(obj, "packing")?;
    Packing::from_name(&name).ok_or_else(|| PyValueError::new_err(message(format!("{name:?}"))))
}

/// The `oversize` argument: one of [`OVERSIZE_POLICIES`].
pub fn oversize_arg(obj: &Bound<'_, PyAny>) -> PyResult<&'static str> {
    if !obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "oversize must be \"error\", \"truncate\" or \"skip\", got {}",
            obj.get_type().name()?
        )));
    }
    let name = str_arg(obj, "oversize")?;
    OVERSIZE_POLICIES
        .into_iter()
        .find(|p| *p == name)
        .ok_or_else(|| {
            PyValueError::new_err(format!(
                "oversize must be \"error\", \"truncate\" or \"skip\", got {name:?}"
            ))
        })
}

#[pymethods]
impl Tokens {
    #[new]
    #[pyo3(
        signature = (lengths, loss_tokens = None, *, cost = Keyword::Omitted,
                     loss_normalization = Keyword::Omitted, max_length = None,
                     oversize = Keyword::Omitted, packing = Keyword::Omitted),
        text_signature = "(lengths, loss_tokens=None, *, cost='tokens', loss_normalization='tokens', max_length=None, oversize='error', packing='sorted')"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        lengths: &Bound<'_, PyAny>,
        loss_tokens: Option<&Bound<'_, PyAny>>,
        cost: Keyword<'_>,
        loss_normalization: Keyword<'_>,
        max_length: Option<&Bound<'_, PyAny>>,
        oversize: Keyword<'_>,
        packing: Keyword<'_>,
    ) -> PyResult<Self> {
        let lengths = checked_array(lengths, "lengths", None)?;
        let loss_tokens = loss_tokens
            .filter(|l| !l.is_none())
            .map(|l| checked_array(l, "loss_tokens", None))
            .transpose()?;
        if let Some(loss) = &loss_tokens {
            let (n, m) = (lengths.bind(py).len()?, loss.bind(py).len()?);
            if n != m {
                return Err(PyValueError::new_err(format!(
                    "loss_tokens must hold one value per sample, as lengths ({n}), got {m}"
                )));
            }
        }
        let cost = match cost.given() {
            Some(c) if c.is_none() => {
                return Err(PyTypeError::new_err(
                    "cost must be \"tokens\" or a pair (a, b), got NoneType",
                ))
            }
            given => cost_arg(given)?.unwrap_or(Cost::Tokens),
        };
        let normalization = match loss_normalization.given() {
            Some(n) if n.is_none() => {
                return Err(PyTypeError::new_err(
                    "loss_normalization must be \"tokens\" or \"samples\", got NoneType",
                ))
            }
            given => normalization_arg(given)?.unwrap_or(Normalization::Tokens),
        };
        let max_length = opt_int_arg(max_length, "max_length", 1, MAX_I64)?;
        let oversize = match oversize.given() {
            Some(o) => oversize_arg(o)?,
            None => "error",
        };
        let packing = packing
            .given()
            .map(packing_arg)
            .transpose()?
            .unwrap_or_default();
        Ok(Tokens {
            lengths,
            loss_tokens,
            cost,
            normalization,
            max_length,
            oversize,
            packing,
        })
    }

    /// Tokens per sample (the array given).
    #[getter]
    fn lengths<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.lengths.bind(py).clone().into_any()
    }

    /// Loss tokens per sample (the array given), or None (the lengths count).
    #[getter]
    fn loss_tokens<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.loss_tokens
            .as_ref()
            .map(|l| l.bind(py).clone().into_any())
    }

    /// The cost model: "tokens" or (a, b).
    #[getter]
    fn cost<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        cost_value(py, self.cost)
    }

    /// What a real sample's weight divides by: "tokens" or "samples".
    #[getter]
    fn loss_normalization(&self) -> &'static str {
        normalization_name(self.normalization)
    }

    /// The cut: samples longer are read cut to it, or None.
    #[getter]
    fn max_length(&self) -> Option<u64> {
        self.max_length
    }

    /// The oversize policy: "error", "truncate" or "skip".
    #[getter]
    fn oversize(&self) -> &'static str {
        self.oversize
    }

    /// How a share is cut into micro-batches: "sorted" or "first_fit".
    #[getter]
    fn packing(&self) -> &'static str {
        self.packing.name()
    }

    /// The same arrays and models with some of them replaced (keyword
    /// arguments as the constructor takes them).
    #[pyo3(signature = (**changes))]
    fn replace<'py>(
        &self,
        py: Python<'py>,
        changes: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let kwargs = self.kwargs(py)?;
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                if !kwargs.contains(&key)? {
                    return Err(PyTypeError::new_err(format!(
                        "replace() got an unexpected keyword argument {key}"
                    )));
                }
                kwargs.set_item(key, value)?;
            }
        }
        py.get_type::<Tokens>().call((), Some(&kwargs))
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        // The constructor's keywords, a map of a whole file by reference
        // (see `epochplan._mapped`): the values themselves stay in the file.
        let py = slf.py();
        let kwargs = slf.get().kwargs(py)?;
        let mapped = py.import("epochplan._mapped")?;
        for key in ["lengths", "loss_tokens"] {
            if let Some(value) = kwargs.get_item(key)? {
                kwargs.set_item(key, mapped.getattr("by_reference")?.call1((value,))?)?;
            }
        }
        let args = (py.get_type::<Tokens>(), PyTuple::empty(py), kwargs);
        Ok((mapped.getattr("call_mapped")?, args.into_pyobject(py)?))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let n = self.lengths.bind(py).len()?;
        Ok(format!(
            "Tokens(lengths=<{n} values>, loss_tokens={}, cost={}, loss_normalization='{}', \
             max_length={}, oversize='{}', packing='{}')",
            if self.loss_tokens.is_some() {
                "<given>"
            } else {
                "None"
            },
            cost_value(py, self.cost)?.repr()?,
            normalization_name(self.normalization),
            self.max_length
                .map_or_else(|| "None".to_string(), |m| m.to_string()),
            self.oversize,
            self.packing.name()
        ))
    }
}

impl Tokens {
    /// The constructor's keyword arguments that make this value.
    fn kwargs<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("lengths", self.lengths.bind(py))?;
        kwargs.set_item("loss_tokens", self.loss_tokens.as_ref().map(|l| l.bind(py)))?;
        kwargs.set_item("cost", cost_value(py, self.cost)?)?;
        kwargs.set_item("loss_normalization", normalization_name(self.normalization))?;
        kwargs.set_item("max_length", self.max_length)?;
        kwargs.set_item("oversize", self.oversize)?;
        kwargs.set_item("packing", self.packing.name())?;
        Ok(kwargs)
    }
}

/// A normalization's name.
pub fn normalization_name(normalization: Normalization) -> &'static str {
    match normalization {
        Normalization::Tokens => "tokens",
        Normalization::Samples => "samples",
    }
}
