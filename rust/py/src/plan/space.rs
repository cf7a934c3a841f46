//! The index space of a plan, as `EpochPlan`'s first argument gives it: an
//! int `N`, a `Selection`, a `Mixture` (its epoch `epoch`) or one
//! `MixtureEpoch`; and what a state records of it.

use crate::args::{int_arg, MAX_I64};
use crate::space::{Mixture, MixtureEpoch, Selection};
use epochplan_core::space::Space;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::sync::{Arc, OnceLock};

/// What was given as a plan's space.
#[derive(Debug)]
pub(crate) enum Given {
    /// `0..N`.
    Range(u64),
    Selection(Py<Selection>),
    /// A mixture, or one epoch of one (which fixes its `consumed`).
    Mixture {
        mixture: Py<Mixture>,
        epoch: Option<Py<MixtureEpoch>>,
    },
}

impl Given {
    /// Reads `num_samples`: an int or an index space, named in errors.
    pub(crate) fn parse(num_samples: &Bound<'_, PyAny>) -> PyResult<Given> {
        if let Ok(sel) = num_samples.cast::<Selection>() {
            return Ok(Given::Selection(sel.clone().unbind()));
        }
        if let Ok(mixture) = num_samples.cast::<Mixture>() {
            return Ok(Given::Mixture {
                mixture: mixture.clone().unbind(),
                epoch: None,
            });
        }
        if let Ok(epoch) = num_samples.cast::<MixtureEpoch>() {
            return Ok(Given::Mixture {
                mixture: epoch.get().source_mixture().clone_ref(num_samples.py()),
                epoch: Some(epoch.clone().unbind()),
            });
        }
        Ok(Given::Range(int_arg(
            num_samples,
            "num_samples",
            0,
            MAX_I64,
        )?))
    }

    /// Whether the space is a mixture (its plans keep its arrangement).
    pub(crate) fn is_mixture(&self) -> bool {
        matches!(self, Given::Mixture { .. })
    }

    /// Positions in an epoch: N, or the space's length.
    pub(crate) fn len(&self, py: Python<'_>) -> PyResult<u64> {
        Ok(match self {
            Given::Range(n) => *n,
            Given::Selection(sel) => sel.bind(py).len()? as u64,
            Given::Mixture {
                epoch: Some(epoch), ..
            } => epoch.bind(py).len()? as u64,
            Given::Mixture { mixture, .. } => mixture.bind(py).len()? as u64,
        })
    }

    /// The samples of the store the space's ids are of.
    pub(crate) fn store_size(&self) -> u64 {
        match self {
            Given::Range(n) => *n,
            Given::Selection(sel) => sel.get().core().num_samples(),
            Given::Mixture { mixture, .. } => mixture.get().core().0.store_size(),
        }
    }

    /// The object given (None for `0..N`).
    pub(crate) fn object(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        match self {
            Given::Range(_) => None,
            Given::Selection(sel) => Some(sel.clone_ref(py).into_any()),
            Given::Mixture {
                epoch: Some(epoch), ..
            } => Some(epoch.clone_ref(py).into_any()),
            Given::Mixture { mixture, .. } => Some(mixture.clone_ref(py).into_any()),
        }
    }

    /// Another reference to the same space.
    pub(crate) fn clone_ref(&self, py: Python<'_>) -> Given {
        match self {
            Given::Range(n) => Given::Range(*n),
            Given::Selection(sel) => Given::Selection(sel.clone_ref(py)),
            Given::Mixture { mixture, epoch } => Given::Mixture {
                mixture: mixture.clone_ref(py),
                epoch: epoch.as_ref().map(|e| e.clone_ref(py)),
            },
        }
    }

    /// The epoch a given `MixtureEpoch` fixes.
    pub(crate) fn fixed_epoch(&self) -> Option<u64> {
        match self {
            Given::Mixture { epoch: Some(e), .. } => Some(e.get().number()),
            _ => None,
        }
    }
}

/// A plan's index space: the core's, and the Python object it came from.
#[derive(Debug)]
pub(crate) struct PlanSpace {
    pub(crate) space: Space,
    /// The `Selection` or `MixtureEpoch` (None for `0..N`).
    pub(crate) object: Option<Py<PyAny>>,
    /// A mixture's digest, computed when a state first needs it (its
    /// selections' digests are O(ids)); a selection caches its own.
    mixture_digest: OnceLock<String>,
}

impl PlanSpace {
    /// The space of `given` for the plan's `(seed, epoch)`; `consumed`
    /// continues a mixture's sources (a state's).
    pub(crate) fn new(
        py: Python<'_>,
        given: &Given,
        seed: u64,
        epoch: u64,
        consumed: Option<Vec<u64>>,
    ) -> PyResult<PlanSpace> {
        Ok(match given {
            Given::Range(_) => PlanSpace {
                space: Space::Range,
                object: None,
                mixture_digest: OnceLock::new(),
            },
            Given::Selection(sel) => {
                let core = Arc::clone(sel.get().core());
                PlanSpace {
                    space: Space::Selection(core),
                    object: Some(sel.clone_ref(py).into_any()),
                    mixture_digest: OnceLock::new(),
                }
            }
            Given::Mixture {
                mixture,
                epoch: fixed,
            } => {
                let object: Py<MixtureEpoch> = match (fixed, consumed) {
                    (Some(e), None) => e.clone_ref(py),
                    (_, consumed) => mixture
                        .bind(py)
                        .call_method1("epoch", (epoch, consumed))?
                        .cast_into::<MixtureEpoch>()?
                        .unbind(),
                };
                let core = object.get().core().clone();
                PlanSpace {
                    space: Space::Mixture {
                        epoch: Arc::new(core),
                        seed,
                        plan_epoch: epoch,
                    },
                    object: Some(object.into_any()),
                    mixture_digest: OnceLock::new(),
                }
            }
        })
    }

    /// The space's state: its form, digest and (a mixture) each source's
    /// consumed count; None for `0..N`.
    pub(crate) fn state<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let Some(object) = &self.object else {
            return Ok(None);
        };
        let d = PyDict::new(py);
        match &self.space {
            Space::Selection(_) => {
                let sel = object.bind(py).cast::<Selection>()?;
                d.set_item("kind", "selection")?;
                d.set_item("digest", sel.get().digest(py))?;
            }
            Space::Mixture { epoch, .. } => {
                let digest = self
                    .mixture_digest
                    .get_or_init(|| py.detach(|| epoch.digest()));
                d.set_item("kind", "mixture")?;
                d.set_item("digest", digest)?;
                d.set_item("consumed", epoch.consumed().to_vec())?;
            }
            Space::Range => return Ok(None),
        }
        Ok(Some(d))
    }

    /// Checks a state's record of the space (`state['space']`) against
    /// this one.
    pub(crate) fn check_state(&self, py: Python<'_>, saved: &Bound<'_, PyAny>) -> PyResult<()> {
        let mine = self.state(py)?;
        let Some(mine) = mine else {
            return Err(PyValueError::new_err(
                "space must be given: the state is of a plan over an index space",
            ));
        };
        let saved = saved.cast::<PyDict>().map_err(|_| {
            PyValueError::new_err("state['space'] must be a dict of kind, digest (and consumed)")
        })?;
        // The keys this space's state has, no more: a key the plan does not
        // read would be silently ignored.
        for key in saved.keys() {
            if !mine.contains(&key)? {
                return Err(PyValueError::new_err(format!(
                    "state['space'] has an unknown key {key}: a {} plan's holds {}",
                    mine.get_item("kind")?
                        .map(|k| k.to_string())
                        .unwrap_or_default(),
                    mine.keys()
                )));
            }
        }
        for key in ["kind", "digest"] {
            let want = mine.get_item(key)?;
            let Some(got) = saved.get_item(key)? else {
                return Err(PyValueError::new_err(format!(
                    "state['space'] is missing the key '{key}'"
                )));
            };
            if !got.is_instance_of::<pyo3::types::PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "state['space']['{key}'] must be a str, got {}",
                    got.get_type().name()?
                )));
            }
            let same = match &want {
                Some(a) => a.eq(&got)?,
                None => false,
            };
            if same {
                continue;
            }
            let want = want.map(|v| v.to_string()).unwrap_or_default();
            return Err(PyValueError::new_err(if key == "kind" {
                format!(
                    "space differs from the state's: the state was saved over a {got}, \
                     this plan is over a {want}"
                )
            } else {
                format!(
                    "space differs from the state's: it has as many ids as the state's \
                     space, but other ids or another order (another split, selection or \
                     mixture; its digest is {want}, the state's {got}): give space= the \
                     space the state was saved with"
                )
            }));
        }
        Ok(())
    }
}
