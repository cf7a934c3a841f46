//! [`PlanSpec`]: the one value of a plan's parameters (its space or
//! `num_samples`, `global_batch_size`, `seed`, the order kind with its own
//! parameters, `drop_last` and a token plan's [`Tokens`]), checked once when
//! built. Every plan, sampler and plan file is made from one.

mod kind;
mod tokens;

pub use kind::{kind_object, kind_of_state, kind_params, kind_value, Chunked, KIND_KEYS};
pub use tokens::{normalization_name, oversize_arg, Tokens};

use crate::args::{bool_arg, int_arg, Keyword, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use crate::layout::PlanLayout;
use crate::lengths::TokenArrays;
use crate::plan::space::Given;
use crate::plan::EpochPlan;
use epochplan_core::dealing::Dealing;
use epochplan_core::{Kind, Layout, Order};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};
use std::sync::Arc;

/// The most ranks `rank_counts` lists (a list of 2**24 ints is 128 MiB).
const MAX_LISTED_RANKS: u64 = 1 << 24;

/// A token plan's value and its arrays, checked against the store.
#[derive(Debug)]
pub(crate) struct SpecTokens {
    pub(crate) value: Py<Tokens>,
    pub(crate) arrays: Arc<TokenArrays>,
}

/// The parameters that decide a plan's ids, whatever the epoch, the world
/// size or the micro-batch size: one frozen, hashable value, checked once.
///
/// ``spec.plan(epoch)`` is the plan of an epoch; samplers, plan files and
/// the CLI take a spec and make every epoch's plan from it. A spec is
/// equal to another with the same parameters (arrays and spaces compared by
/// digest), and ``to_json`` / ``from_json`` carry it (arrays and spaces by
/// digest: they are given again, and other ones are refused).
///
/// Args:
///     num_samples: N (int in [0, 2**63 - 1]), or the index space the plans
///         permute: a :class:`Selection`, a :class:`Mixture` (epoch ``e``'s
///         plan is over ``mixture.epoch(e)``) or one :class:`MixtureEpoch`.
///     global_batch_size: G, samples per optimizer step over all ranks (int
///         in [1, 2**63 - 1]).
///     seed: the order's seed (int in [0, 2**64 - 1]).
///     kind: the order: ``"cipher"``, ``"uniform"``, ``"identity"`` or a
///         :class:`Chunked` (see :class:`Permutation`). A mixture keeps its
///         own stratified order (``"cipher"``, the default, and
///         ``"identity"`` are taken).
///     drop_last: drop a short last step.
///     tokens: a token plan's :class:`Tokens` (default: none).
///
/// Raises:
///     TypeError: an argument of the wrong type (None too, but for tokens).
///     ValueError: a value outside its range, or token arrays of another
///         size than the store.
///
/// Examples:
///     >>> spec = PlanSpec(10, 4, seed=1)
///     >>> plan = spec.plan(epoch=2)
///     >>> plan.spec == spec, plan.epoch, plan.num_steps
///     (True, 2, 3)
///     >>> PlanSpec.from_json(spec.to_json()) == spec
///     True
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct PlanSpec {
    pub(crate) given: Given,
    /// The layout from the epoch's start (balanced for a token plan).
    pub(crate) layout: Layout,
    pub(crate) seed: u64,
    pub(crate) kind: Kind,
    pub(crate) tokens: Option<SpecTokens>,
}

impl PlanSpec {
    /// The spec of these arguments (as the constructor takes them).
    pub(crate) fn build(
        py: Python<'_>,
        given: Given,
        global_batch_size: &Bound<'_, PyAny>,
        seed: &Keyword<'_>,
        kind: &Keyword<'_>,
        drop_last: &Keyword<'_>,
        tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PlanSpec> {
        let n = given.len(py)?;
        let kind = if given.is_mixture() {
            mixture_kind(kind)?
        } else {
            kind_value(kind, Kind::Cipher)?
        };
        let seed = match seed.given() {
            Some(s) => int_arg(s, "seed", 0, MAX_U64)?,
            None => 0,
        };
        let g = int_arg(global_batch_size, "global_batch_size", 1, MAX_I64)?;
        let drop_last = match drop_last.given() {
            Some(d) => bool_arg(d, "drop_last")?,
            None => false,
        };
        let mut layout = Layout::new(n, g, drop_last, 0).py()?;
        let tokens = match tokens.filter(|t| !t.is_none()) {
            None => None,
            Some(t) => {
                let value = t.cast::<Tokens>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "tokens must be a Tokens (Tokens(lengths, ...)), got {}",
                        t.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })?;
                let arrays = TokenArrays::of(py, value.get(), given.store_size())?;
                let t = value.get();
                layout = layout
                    .with_dealing(Dealing::Balanced { cost: t.cost }, t.normalization)
                    .py()?;
                Some(SpecTokens {
                    value: value.clone().unbind(),
                    arrays: Arc::new(arrays),
                })
            }
        };
        if kind != Kind::Uniform {
            // O(1) to build: every error of the order comes from here.
            Order::new(n, seed, 0, kind).py()?;
        }
        Ok(PlanSpec {
            given,
            layout,
            seed,
            kind,
            tokens,
        })
    }

    /// The same parameters with the token arrays of `tokens` (or none).
    pub(crate) fn with_tokens(&self, py: Python<'_>, tokens: Option<Py<Tokens>>) -> PyResult<Self> {
        let tokens = tokens.map(|t| t.into_bound(py).into_any());
        let kind = kind_object(py, self.kind)?.into_bound(py);
        Self::build(
            py,
            self.given.clone_ref(py),
            &self
                .layout
                .global_batch_size()
                .into_pyobject(py)?
                .into_any(),
            &Keyword::Given(self.seed.into_pyobject(py)?.into_any()),
            &Keyword::Given(kind),
            &Keyword::Given(
                pyo3::types::PyBool::new(py, self.layout.drop_last())
                    .to_owned()
                    .into_any(),
            ),
            tokens.as_ref(),
        )
    }

    /// The document `to_json` writes, as a dict.
    fn document<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyDict>> {
        let py = slf.py();
        let epoch = slf.get().given.fixed_epoch().unwrap_or(0);
        let plan = EpochPlan::from_spec(py, slf, epoch, 0, None)?;
        let d = crate::plan::state_of(plan, py)?;
        d.del_item("epoch")?;
        d.del_item("cursor")?;
        if let Some(space) = d.get_item("space")? {
            let space = space.cast::<PyDict>()?;
            if space.contains("consumed")? {
                space.del_item("consumed")?;
            }
        }
        if let Some(tokens) = &slf.get().tokens {
            d.set_item("oversize", tokens.value.get().oversize)?;
        }
        Ok(d)
    }
}

/// A mixture's kind: its stratified arrangement, as the identity order.
/// One rule (docs/concepts/index-spaces.md): every API's default kind,
/// "cipher", and "identity" are taken; any other kind is refused.
fn mixture_kind(kind: &Keyword<'_>) -> PyResult<Kind> {
    let Some(k) = kind.given() else {
        return Ok(Kind::Identity);
    };
    match k.extract::<String>().ok().as_deref() {
        Some("identity") | Some("cipher") => Ok(Kind::Identity),
        _ => Err(PyValueError::new_err(format!(
            "kind does not apply to a plan over a Mixture, got kind={}: its order is the \
             mixture's stratified arrangement (each step shuffled before dealing; plan.kind \
             is 'identity'); leave kind at its default 'cipher' or give 'identity'",
            k.repr()?
        ))),
    }
}

#[pymethods]
impl PlanSpec {
    #[new]
    #[pyo3(
        signature = (num_samples, global_batch_size, *, seed = Keyword::Omitted,
                     kind = Keyword::Omitted, drop_last = Keyword::Omitted, tokens = None),
        text_signature = "(num_samples, global_batch_size, *, seed=0, kind='cipher', drop_last=False, tokens=None)"
    )]
    fn new(
        num_samples: &Bound<'_, PyAny>,
        global_batch_size: &Bound<'_, PyAny>,
        seed: Keyword<'_>,
        kind: Keyword<'_>,
        drop_last: Keyword<'_>,
        tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = num_samples.py();
        let given = Given::parse(num_samples)?;
        Self::build(
            py,
            given,
            global_batch_size,
            &seed,
            &kind,
            &drop_last,
            tokens,
        )
    }

    /// The plan of epoch ``epoch``, started ``cursor`` samples in (at a step
    /// boundary, as for :class:`EpochPlan`).
    #[pyo3(signature = (epoch = Keyword::Omitted, cursor = Keyword::Omitted),
           text_signature = "(self, epoch=0, cursor=0)")]
    fn plan(
        slf: &Bound<'_, Self>,
        epoch: Keyword<'_>,
        cursor: Keyword<'_>,
    ) -> PyResult<Py<EpochPlan>> {
        let py = slf.py();
        let (epoch, cursor) = EpochPlan::epoch_args(&slf.get().given, &epoch, &cursor)?;
        Py::new(py, EpochPlan::from_spec(py, slf, epoch, cursor, None)?)
    }

    /// The spec's steps, shares, micro-batch cuts and weights, without the
    /// order (a :class:`PlanLayout`).
    #[getter]
    fn layout(&self) -> PlanLayout {
        PlanLayout::of(self.layout)
    }

    /// Positions in an epoch (the space's length).
    #[getter]
    fn num_samples(&self) -> u64 {
        self.layout.num_samples()
    }

    /// Samples per optimizer step over all ranks.
    #[getter]
    fn global_batch_size(&self) -> u64 {
        self.layout.global_batch_size()
    }

    /// The seed of every epoch's order.
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// The kind of order as given: its name, or a :class:`Chunked`.
    #[getter]
    fn kind(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        kind_object(py, self.kind)
    }

    /// Whether a short last step is dropped.
    #[getter]
    fn drop_last(&self) -> bool {
        self.layout.drop_last()
    }

    /// The index space given (a Selection, Mixture or MixtureEpoch), or
    /// None for ``range(num_samples)``.
    #[getter]
    fn space(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.given.object(py)
    }

    /// The samples of the store the space's ids are of.
    #[getter]
    fn store_size(&self) -> u64 {
        self.given.store_size()
    }

    /// A token plan's :class:`Tokens`, or None.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> Option<Py<Tokens>> {
        self.tokens.as_ref().map(|t| t.value.clone_ref(py))
    }

    /// Each rank's number of ids in an epoch, for ``world_size`` ranks (a
    /// plan without lengths; a token plan's shares depend on its lengths).
    fn rank_counts(&self, world_size: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        if self.tokens.is_some() {
            return Err(PyValueError::new_err(
                "a token plan's shares depend on its lengths: count them with the plan",
            ));
        }
        // One count a rank, as a list: as many ranks as a list can hold.
        let w = int_arg(world_size, "world_size", 1, MAX_LISTED_RANKS)?;
        (0..w)
            .map(|rank| self.layout.rank_len(rank, w).py())
            .collect()
    }

    /// The spec as JSON: its parameters, and its space and token arrays by
    /// digest (the arrays are O(N) to digest, once).
    fn to_json(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let kwargs = PyDict::new(py);
        kwargs.set_item("sort_keys", true)?;
        py.import("json")?
            .call_method("dumps", (Self::document(slf)?,), Some(&kwargs))?
            .extract()
    }

    /// The spec ``to_json`` wrote, with the space and arrays it names given
    /// again (as for :meth:`EpochPlan.from_state_dict`; others are refused).
    #[classmethod]
    #[pyo3(signature = (text, *, space = None, lengths = None, loss_tokens = None))]
    fn from_json(
        cls: &Bound<'_, pyo3::types::PyType>,
        text: &Bound<'_, PyAny>,
        space: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
        loss_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PlanSpec>> {
        let py = cls.py();
        if !text.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err(format!(
                "text must be a str, got {}",
                text.get_type().name()?
            )));
        }
        let parsed = py
            .import("json")?
            .call_method1("loads", (text,))
            .map_err(|e| PyValueError::new_err(format!("text is not JSON: {}", e.value(py))))?;
        let d = parsed
            .cast::<PyDict>()
            .map_err(|_| PyValueError::new_err("text must hold a JSON object"))?;
        for key in ["epoch", "cursor"] {
            if d.contains(key)? {
                return Err(PyValueError::new_err(format!(
                    "spec has an unknown key '{key}' (a plan's state is read by \
                     EpochPlan.from_state_dict)"
                )));
            }
        }
        let oversize = match d.get_item("oversize")? {
            Some(o) => {
                d.del_item("oversize")?;
                Some(oversize_arg(&o).map_err(|e| {
                    PyErr::from_type(e.get_type(py), format!("spec: {}", e.value(py)))
                })?)
            }
            None => None,
        };
        d.set_item("epoch", 0)?;
        d.set_item("cursor", 0)?;
        let plan = crate::plan::plan_of_state(py, d.as_any(), space, lengths, loss_tokens, "spec")?;
        let spec = plan.bind(py).get().spec().clone_ref(py);
        match (oversize, &spec.get().tokens) {
            (Some(policy), Some(tokens)) if policy != tokens.value.get().oversize => {
                let value = Py::new(py, tokens.value.get().with_oversize(py, policy))?;
                Py::new(py, spec.get().with_tokens(py, Some(value))?)
            }
            (Some(_), None) => Err(PyValueError::new_err(
                "spec has an unknown key 'oversize': it is of a plan without lengths",
            )),
            _ => Ok(spec),
        }
    }

    /// A digest of the spec (a hex string): of its JSON, so that equal
    /// specs have the same digest.
    fn digest(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let text = Self::to_json(slf)?;
        py.import("hashlib")?
            .call_method1("sha256", (text.into_bytes(),))?
            .call_method0("hexdigest")?
            .extract()
    }

    /// The same spec with some parameters replaced (keyword arguments as
    /// the constructor takes them).
    #[pyo3(signature = (**changes))]
    fn replace<'py>(
        slf: &Bound<'py, Self>,
        changes: Option<&Bound<'py, PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let me = slf.get();
        let kwargs = PyDict::new(py);
        let num_samples = match me.given.object(py) {
            Some(space) => space.into_bound(py),
            None => me.layout.num_samples().into_pyobject(py)?.into_any(),
        };
        kwargs.set_item("num_samples", num_samples)?;
        kwargs.set_item("global_batch_size", me.layout.global_batch_size())?;
        kwargs.set_item("seed", me.seed)?;
        if !me.given.is_mixture() {
            kwargs.set_item("kind", kind_object(py, me.kind)?)?;
        }
        kwargs.set_item("drop_last", me.layout.drop_last())?;
        kwargs.set_item("tokens", me.tokens.as_ref().map(|t| t.value.clone_ref(py)))?;
        if let Some(changes) = changes {
            for (key, value) in changes.iter() {
                let known = [
                    "num_samples",
                    "global_batch_size",
                    "seed",
                    "kind",
                    "drop_last",
                    "tokens",
                ];
                if !known.iter().any(|k| key.eq(k).unwrap_or(false)) {
                    return Err(PyTypeError::new_err(format!(
                        "replace() got an unexpected keyword argument {key}"
                    )));
                }
                kwargs.set_item(key, value)?;
            }
        }
        py.get_type::<PlanSpec>().call((), Some(&kwargs))
    }

    fn __eq__(slf: &Bound<'_, Self>, other: &Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(other) = other.cast::<PlanSpec>() else {
            return Ok(false);
        };
        if slf.is(other) {
            return Ok(true);
        }
        Ok(Self::to_json(slf)? == Self::to_json(other)?)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (
            self.layout.num_samples(),
            self.layout.global_batch_size(),
            self.seed,
            self.kind,
        )
            .hash(&mut h);
        h.finish()
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let me = slf.get();
        let kwargs = PyDict::new(py);
        if let Some(space) = me.given.object(py) {
            kwargs.set_item("space", space)?;
        }
        // A map of a whole file travels by reference (`epochplan._mapped`).
        let mapped = py.import("epochplan._mapped")?;
        let by_reference = mapped.getattr("by_reference")?;
        if let Some(tokens) = &me.tokens {
            let t = tokens.value.get();
            kwargs.set_item("lengths", by_reference.call1((t.lengths.bind(py),))?)?;
            let loss = match &t.loss_tokens {
                Some(l) => by_reference.call1((l.bind(py),))?,
                None => py.None().into_bound(py),
            };
            kwargs.set_item("loss_tokens", loss)?;
        }
        let make = slf.get_type().getattr("from_json")?;
        let args = (make, PyTuple::new(py, [Self::to_json(slf)?])?, kwargs);
        Ok((mapped.getattr("call_mapped")?, args.into_pyobject(py)?))
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let l = &self.layout;
        let num_samples = match self.given.object(py) {
            Some(space) => space.bind(py).repr()?.to_string(),
            None => l.num_samples().to_string(),
        };
        let tokens = match &self.tokens {
            Some(t) => format!(", tokens={}", t.value.bind(py).repr()?),
            None => String::new(),
        };
        Ok(format!(
            "PlanSpec(num_samples={num_samples}, global_batch_size={}, seed={}, kind={}, \
             drop_last={}{tokens})",
            l.global_batch_size(),
            self.seed,
            kind_object(py, self.kind)?.bind(py).repr()?,
            if l.drop_last() { "True" } else { "False" },
        ))
    }
}
