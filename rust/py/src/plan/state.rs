//! A plan's state dict: what it holds and how a plan is made from one.

use super::space::Given;
use super::EpochPlan;
use crate::args::{bool_arg, int_arg, opt_int_arg, str_arg, Keyword, MAX_I64, MAX_U64};
use crate::lengths::cost_value;
use crate::spec::{kind_object, kind_of_state, kind_params, PlanSpec, Tokens, KIND_KEYS};
use epochplan_core::dealing::Dealing;
use epochplan_core::tokens::Packing;
use epochplan_core::FORMAT_VERSION;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// The keys of a state dict, but the kind's own parameters ([`KIND_KEYS`],
/// which follow "kind").
const STATE_KEYS: [&str; 8] = [
    "format_version",
    "num_samples",
    "global_batch_size",
    "seed",
    "epoch",
    "kind",
    "drop_last",
    "cursor",
];

/// The key a plan over an index space adds: the space's form, digest and
/// (a mixture) each source's consumed count.
const SPACE_KEY: &str = "space";

/// The key a token plan that cuts its samples adds (`max_length`).
const MAX_LENGTH_KEY: &str = "max_length";

/// The key a token plan whose shares are packed first fit adds (absent for
/// the default "sorted", so such states stay as they were).
const PACKING_KEY: &str = "packing";

/// The keys a token plan's state adds.
const TOKEN_KEYS: [&str; 4] = [
    "cost",
    "loss_normalization",
    "lengths_digest",
    "loss_tokens_digest",
];
/// The constant-size, world-size independent state (JSON-serialisable).
pub(super) fn to_dict<'py>(plan: &EpochPlan, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("format_version", FORMAT_VERSION)?;
    d.set_item("num_samples", plan.layout.num_samples())?;
    d.set_item("global_batch_size", plan.layout.global_batch_size())?;
    d.set_item("seed", plan.seed)?;
    d.set_item("epoch", plan.epoch)?;
    d.set_item("kind", plan.kind.name())?;
    for (key, value) in KIND_KEYS.iter().zip(kind_params(plan.kind)) {
        d.set_item(key, value)?;
    }
    d.set_item("drop_last", plan.layout.drop_last())?;
    d.set_item("cursor", plan.layout.cursor())?;
    if let Some(space) = plan.space.state(py)? {
        d.set_item(SPACE_KEY, space)?;
    }
    if let (Some(tokens), Dealing::Balanced { cost }) = (&plan.tokens, plan.layout.dealing()) {
        let (lengths, loss) = tokens.digests(py)?;
        d.set_item("cost", cost_value(py, cost)?)?;
        d.set_item("loss_normalization", plan.loss_normalization())?;
        d.set_item("lengths_digest", lengths)?;
        d.set_item("loss_tokens_digest", loss)?;
        if let Some(max_length) = tokens.max_length {
            d.set_item(MAX_LENGTH_KEY, max_length)?;
        }
        if tokens.packing != Packing::default() {
            d.set_item(PACKING_KEY, tokens.packing.name())?;
        }
    }
    Ok(d)
}

/// The plan a state dict describes; rejects unknown format versions,
/// missing or unknown keys and inconsistent values. A token plan's state
/// needs its arrays again (``lengths=``, ``loss_tokens=``): the state
/// holds their digests and refuses other arrays.
pub(super) fn from_dict(
    py: Python<'_>,
    state: &Bound<'_, PyAny>,
    space: Option<&Bound<'_, PyAny>>,
    lengths: Option<&Bound<'_, PyAny>>,
    loss_tokens: Option<&Bound<'_, PyAny>>,
    label: &str,
) -> PyResult<Py<EpochPlan>> {
    let d = state.cast::<PyDict>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{label} must be a dict, got {}",
            state
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    for key in d.keys() {
        let k: String = key.extract().unwrap_or_default();
        // A cut (`max_length`) and a packing belong to a token plan's state only.
        let cut = (k == MAX_LENGTH_KEY || k == PACKING_KEY)
            && d.contains("lengths_digest").unwrap_or(false);
        let known = STATE_KEYS.contains(&k.as_str())
            || KIND_KEYS.contains(&k.as_str())
            || TOKEN_KEYS.contains(&k.as_str())
            || k == SPACE_KEY
            || cut;
        if !known {
            return Err(PyValueError::new_err(format!(
                "{label} has an unknown key {key}"
            )));
        }
    }
    for k in STATE_KEYS.iter().chain(&KIND_KEYS) {
        if !d.contains(*k)? {
            return Err(PyValueError::new_err(format!(
                "{label} is missing the key {k:?}"
            )));
        }
    }
    let get = |k: &str| -> PyResult<Bound<'_, PyAny>> {
        d.get_item(k)?
            .ok_or_else(|| PyValueError::new_err(format!("{label} is missing the key {k:?}")))
    };
    let version = int_arg(
        &get("format_version")?,
        &format!("{label}['format_version']"),
        0,
        MAX_U64,
    )?;
    if version != u64::from(FORMAT_VERSION) {
        return Err(PyValueError::new_err(format!(
            "{label}['format_version'] is {version}; this release reads format_version {FORMAT_VERSION}"
        )));
    }
    // Every value is checked here, so that a message names its key
    // (`state['seed']`), not the constructor's argument.
    for (k, lo, hi) in [
        ("num_samples", 0, MAX_I64),
        ("global_batch_size", 1, MAX_I64),
        ("seed", 0, MAX_U64),
        ("epoch", 0, MAX_U64),
        ("cursor", 0, MAX_I64),
    ] {
        int_arg(&get(k)?, &format!("{label}['{k}']"), lo, hi)?;
    }
    let mut params = [None; KIND_KEYS.len()];
    for (param, k) in params.iter_mut().zip(KIND_KEYS) {
        *param = opt_int_arg(Some(&get(k)?), &format!("{label}['{k}']"), 1, MAX_I64)?;
    }
    str_arg(&get("kind")?, &format!("{label}['kind']"))?;
    bool_arg(&get("drop_last")?, &format!("{label}['drop_last']"))?;
    let tokens_in_state = TOKEN_KEYS
        .iter()
        .filter(|k| d.contains(**k).unwrap_or(false))
        .count();
    if tokens_in_state != 0 && tokens_in_state != TOKEN_KEYS.len() {
        return Err(PyValueError::new_err(format!(
            "{label} must hold all of the keys {TOKEN_KEYS:?} of a token plan or none"
        )));
    }
    let lengths = lengths.filter(|l| !l.is_none());
    let loss_tokens = loss_tokens.filter(|l| !l.is_none());
    match (tokens_in_state > 0, lengths.is_some()) {
        (true, false) => {
            return Err(PyValueError::new_err(
                "lengths must be given: the state is a token plan's (give lengths= and \
                 loss_tokens= as the plan had them)",
            ))
        }
        (false, true) => {
            return Err(PyValueError::new_err(
                "lengths must be None: the state is of a plan without lengths",
            ))
        }
        _ => {}
    }
    let (cost, normalization) = if tokens_in_state > 0 {
        (Some(get("cost")?), Some(get("loss_normalization")?))
    } else {
        (None, None)
    };
    let given = |k: &str| get(k).map(Keyword::Given);
    // What the constructor checks across keys (the kind's name, a cursor
    // off the step boundaries) says it is about the state.
    let in_state = |e: PyErr| PyErr::from_type(e.get_type(py), format!("{label}: {}", e.value(py)));
    let saved_space = d.get_item(SPACE_KEY)?;
    let space = space.filter(|s| !s.is_none());
    let (space_given, consumed) = match (&saved_space, space) {
        (Some(saved), Some(space)) => {
            let given = Given::parse(space)
                .map_err(|e| PyErr::from_type(e.get_type(py), format!("space: {}", e.value(py))))?;
            if matches!(given, Given::Range(_)) {
                return Err(PyValueError::new_err(
                    "space must be the Selection or Mixture the plan had, got an int",
                ));
            }
            let consumed = match saved.cast::<PyDict>()?.get_item("consumed")? {
                Some(c) if given.is_mixture() => Some(
                    c.try_iter()?
                        .enumerate()
                        .map(|(k, v)| {
                            int_arg(&v?, &format!("state['space']['consumed'][{k}]"), 0, MAX_U64)
                        })
                        .collect::<PyResult<Vec<u64>>>()?,
                ),
                _ => None,
            };
            let want = int_arg(&get("num_samples")?, "state['num_samples']", 0, MAX_I64)?;
            let len = space.len()? as u64;
            if len != want {
                return Err(PyValueError::new_err(format!(
                    "space differs from the state's: it has {len} ids, the state's plan {want}"
                )));
            }
            (given, consumed)
        }
        (Some(saved), None) => {
            return Err(PyValueError::new_err(format!(
                "space must be given: the state is of a plan over a {} (give space= the \
                 Selection or Mixture it had)",
                saved
                    .get_item("kind")
                    .map(|k| k.to_string())
                    .unwrap_or_else(|_| "index space".into())
            )))
        }
        (None, Some(_)) => {
            return Err(PyValueError::new_err(
                "space must be None: the state is of a plan over range(num_samples)",
            ))
        }
        (None, None) => (Given::parse(&get("num_samples")?)?, None),
    };
    let build = || -> PyResult<Py<EpochPlan>> {
        let kind = kind_of_state(&get("kind")?, params)?;
        let tokens = match lengths {
            Some(lengths) => {
                let kwargs = PyDict::new(py);
                kwargs.set_item("cost", cost.as_ref())?;
                kwargs.set_item("loss_normalization", normalization.as_ref())?;
                kwargs.set_item("max_length", d.get_item(MAX_LENGTH_KEY)?)?;
                if let Some(packing) = d.get_item(PACKING_KEY)? {
                    kwargs.set_item("packing", packing)?;
                }
                Some(
                    py.get_type::<Tokens>()
                        .call((lengths, loss_tokens), Some(&kwargs))?,
                )
            }
            None => None,
        };
        let spec = PlanSpec::build(
            py,
            space_given,
            &get("global_batch_size")?,
            &given("seed")?,
            &Keyword::Given(kind_object(py, kind)?.into_bound(py)),
            &given("drop_last")?,
            tokens.as_ref(),
        )?;
        let (epoch, cursor) =
            EpochPlan::epoch_args(&spec.given, &given("epoch")?, &given("cursor")?)?;
        let spec = Bound::new(py, spec)?;
        Py::new(
            py,
            EpochPlan::from_spec(py, &spec, epoch, cursor, consumed)?,
        )
    };
    build().map_err(in_state).and_then(|plan| {
        let checked = plan.get();
        if let Some(saved) = &saved_space {
            checked.space.check_state(py, saved)?;
        }
        if let Some(tokens) = &checked.tokens {
            let (lengths, loss) = tokens.digests(py)?;
            let saved: String = get("lengths_digest")?.extract()?;
            if *lengths != saved {
                return Err(PyValueError::new_err(format!(
                    "lengths differ from the state's: their digest is {lengths}, the \
                     state's {saved}"
                )));
            }
            let saved: Option<String> = get("loss_tokens_digest")?.extract()?;
            if *loss != saved {
                return Err(PyValueError::new_err(format!(
                    "loss_tokens differ from the state's: their digest is {}, the \
                     state's {}",
                    loss.as_deref().unwrap_or("None (the lengths)"),
                    saved.as_deref().unwrap_or("None (the lengths)")
                )));
            }
        }
        Ok(plan)
    })
}
