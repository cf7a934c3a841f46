//! `Mixture` and its `MixtureEpoch`: exact per-epoch quotas of several
//! sources in a stratified order.

use super::{getitem, shaped, take, to_array, Selection};
use crate::args::{int_arg, int_value, positions_arg, Keyword, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use epochplan_core::buffer::try_filled;
use epochplan_core::space::{
    Mixture as CoreMixture, MixtureEpoch as CoreEpoch, QuotaRule, Schedule,
    Selection as CoreSelection,
};
use epochplan_core::Error;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyList, PyTuple};

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
            sels.push((i, (*sel.get().sel).clone()));
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
///     phases: a schedule: ``(start, values)`` pairs, starts increasing,
///         each giving the positions from ``start`` on new values of the
///         same kind as the first (weights, repeat or quotas); a start is an
///         epoch (>= 1), or ``(epoch, position)`` for a phase that starts
///         inside an epoch (position ``t * G``: step ``t`` of a plan of
///         global batch ``G``). Every phase keeps the epoch's length. Each
///         source's passes continue across phases: each epoch (each segment
///         of one, where a phase starts inside it) takes the next samples
///         of source ``k`` (see the index-spaces page).
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
/// A phase's start: an epoch (``int`` >= 1), or ``(epoch, position)`` for
/// one that starts inside an epoch (position 0: at the epoch's start).
fn start_arg(value: &Bound<'_, PyAny>, name: &str) -> PyResult<(u64, u64)> {
    if let Ok(pair) = value.cast::<PyTuple>() {
        if pair.len() != 2 {
            return Err(PyValueError::new_err(format!(
                "{name} must be an epoch or a pair (epoch, position), got {} items",
                pair.len()
            )));
        }
        let epoch = int_arg(&pair.get_item(0)?, &format!("{name}[0]"), 0, MAX_U64)?;
        let position = int_arg(&pair.get_item(1)?, &format!("{name}[1]"), 0, MAX_U64)?;
        if (epoch, position) == (0, 0) {
            return Err(PyValueError::new_err(format!(
                "{name} must start after the first phase (at epoch 0, position 0), got (0, 0)"
            )));
        }
        return Ok((epoch, position));
    }
    Ok((int_arg(value, name, 1, MAX_U64)?, 0))
}

/// Phases as Python takes them: a start at an epoch's first position as
/// that epoch, any other as ``(epoch, position)``.
fn phase_list<'py>(
    py: Python<'py>,
    phases: &[((u64, u64), Vec<u64>)],
) -> PyResult<Vec<(Bound<'py, PyAny>, Vec<u64>)>> {
    phases
        .iter()
        .map(|((epoch, position), quotas)| {
            let start = if *position == 0 {
                epoch.into_pyobject(py)?.into_any()
            } else {
                (*epoch, *position).into_pyobject(py)?.into_any()
            };
            Ok((start, quotas.clone()))
        })
        .collect()
}

#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct Mixture {
    mixture: CoreMixture,
    quotas: Vec<u64>,
    /// The quotas of every epoch (one phase without a schedule).
    schedule: Schedule,
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
                     num_samples = None, seed = Keyword::Omitted, phases = None),
        text_signature = "(sources, *, weights=None, repeat=None, quotas=None, num_samples=None, seed=0, phases=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        sources: &Bound<'_, PyAny>,
        weights: Option<&Bound<'_, PyAny>>,
        repeat: Option<&Bound<'_, PyAny>>,
        quotas: Option<&Bound<'_, PyAny>>,
        num_samples: Option<&Bound<'_, PyAny>>,
        seed: Keyword<'_>,
        phases: Option<&Bound<'_, PyAny>>,
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
        let py = sources.py();
        let mut table = vec![((0, 0), quotas.clone())];
        if let Some(phases) = phases.filter(|p| !p.is_none()) {
            for (j, item) in phases.try_iter()?.enumerate() {
                let name = format!("phases[{}]", j + 1);
                let pair = item?;
                let pair = pair.cast::<PyTuple>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{name} must be a pair (start, values), got {}",
                        type_name(&pair)
                    ))
                })?;
                if pair.len() != 2 {
                    return Err(PyValueError::new_err(format!(
                        "{name} must be a pair (start, values), got {} items",
                        pair.len()
                    )));
                }
                let start = start_arg(&pair.get_item(0)?, &format!("{name}[0]"))?;
                let values = pair.get_item(1)?;
                let values_name = format!("{name}[1]");
                let phase_rule = match &rule {
                    QuotaRule::Weights { num_samples, .. } => QuotaRule::Weights {
                        weights: floats_arg(&values, &values_name)?,
                        num_samples: *num_samples,
                    },
                    QuotaRule::Repeat(_) => QuotaRule::Repeat(floats_arg(&values, &values_name)?),
                    QuotaRule::Quotas(_) => {
                        QuotaRule::Quotas(ints_arg(&values, &values_name, MAX_I64)?)
                    }
                    QuotaRule::Once => {
                        return Err(PyValueError::new_err(
                            "phases need weights, repeat or quotas: the first phase's values",
                        ))
                    }
                };
                // The core names the values (`weights[0]`); the message says
                // which phase they are.
                let in_phase = |e: PyErr| {
                    PyErr::from_type(e.get_type(py), format!("{values_name}: {}", e.value(py)))
                };
                let phase_quotas = mixture.quotas(&phase_rule).py().map_err(in_phase)?;
                mixture
                    .epoch(&phase_quotas, &vec![0; phase_quotas.len()])
                    .py()
                    .map_err(in_phase)?;
                table.push((start, phase_quotas));
            }
        }
        let schedule = Schedule::new(table).py()?;
        Ok(Self {
            mixture,
            quotas,
            schedule,
            sources: given,
        })
    }

    /// The schedule: ``(start, quotas)`` of each phase, the first at epoch
    /// 0 (one phase without ``phases``); a start is an epoch, or ``(epoch,
    /// position)`` for a phase that starts inside one.
    #[getter]
    fn phases<'py>(&self, py: Python<'py>) -> PyResult<Vec<(Bound<'py, PyAny>, Vec<u64>)>> {
        phase_list(py, self.schedule.phases())
    }

    /// The quotas of ``epoch``: each source's positions in it (its phase's
    /// quotas, or the sum of its segments' when a phase starts inside it).
    fn quotas_at(&self, epoch: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
        let epoch = int_arg(epoch, "epoch", 0, MAX_U64)?;
        Ok(self.schedule.quotas(epoch))
    }

    /// Each source's samples an epoch (``q_k``; the first phase's).
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
            None if this.schedule.phases().len() > 1 => this.schedule.consumed(number).py()?,
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
        let inner = this
            .mixture
            .epoch_in_segments(&this.schedule.segments(number), &consumed)
            .py()?;
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
        if self.schedule.phases().len() > 1 {
            kwargs.set_item("phases", phase_list(py, &self.schedule.phases()[1..])?)?;
        }
        let sources = PyList::new(py, self.sources.iter().map(|s| s.bind(py)))?;
        Ok((PyTuple::new(py, [sources])?, kwargs))
    }

    fn __repr__(&self) -> String {
        let later: Vec<String> = self
            .schedule
            .phases()
            .iter()
            .skip(1)
            .map(|(start, quotas)| match start {
                (epoch, 0) => format!("({epoch}, {quotas:?})"),
                (epoch, position) => format!("(({epoch}, {position}), {quotas:?})"),
            })
            .collect();
        let phases = if later.is_empty() {
            String::new()
        } else {
            format!(", phases=[{}]", later.join(", "))
        };
        format!(
            "Mixture(sizes={:?}, quotas={:?}, seed={}{phases})",
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
    /// The core epoch (for the plans over it).
    pub fn core(&self) -> &CoreEpoch {
        &self.inner
    }

    /// The epoch's number.
    pub fn number(&self) -> u64 {
        self.number
    }

    /// The mixture it is an epoch of.
    pub fn source_mixture(&self) -> &Py<Mixture> {
        &self.mixture
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
        self.inner.quotas()
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

    /// The digest of the mixture this epoch is of and of its quotas (not of
    /// the sources' consumed counts), as a plan's state records it.
    fn digest(&self, py: Python<'_>) -> String {
        py.detach(|| self.inner.digest())
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
        let mut out = try_filled(0, values.len())
            .ok_or_else(|| {
                Error::Memory(format!(
                    "cannot allocate the sources of {} positions: not enough memory",
                    values.len()
                ))
            })
            .py()?;
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
