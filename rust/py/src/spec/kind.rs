//! The order kind as a value: a name ("cipher", "uniform", "identity") or
//! [`Chunked`], which carries the chunked order's own parameters.

use crate::args::{int_arg, str_arg, Keyword, MAX_I64};
use crate::errors::IntoPyResult;
use epochplan_core::Kind;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;

/// The chunked order: chunks of ``chunk_size`` consecutive samples in
/// cipher order, the samples of every ``preload_nchunks`` consecutive chunks
/// shuffled together (a loader reads a few chunks at a time).
///
/// Give it as ``kind=`` wherever a kind is taken.
///
/// Args:
///     chunk_size: samples per chunk (int in [1, 2**63 - 1]).
///     preload_nchunks: consecutive chunks shuffled together (int in
///         [1, 2**63 - 1]; default 1).
///
/// Examples:
///     >>> Permutation(8, kind=Chunked(4))[:].tolist()
///     [4, 5, 7, 6, 1, 0, 2, 3]
///     >>> Chunked(4, 2) == Chunked(4, preload_nchunks=2)
///     True
#[pyclass(module = "epochplan._native", frozen, eq, hash)]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Chunked {
    chunk_size: u64,
    preload_nchunks: u64,
}

impl Chunked {
    /// The core kind it stands for.
    pub fn kind(&self) -> Kind {
        Kind::Chunked {
            chunk_size: self.chunk_size,
            preload_nchunks: self.preload_nchunks,
        }
    }
}

#[pymethods]
impl Chunked {
    #[new]
    #[pyo3(
        signature = (chunk_size, preload_nchunks = Keyword::Omitted),
        text_signature = "(chunk_size, preload_nchunks=1)"
    )]
    fn new(chunk_size: &Bound<'_, PyAny>, preload_nchunks: Keyword<'_>) -> PyResult<Self> {
        let chunk_size = int_arg(chunk_size, "chunk_size", 1, MAX_I64)?;
        let preload_nchunks = match preload_nchunks.given() {
            Some(p) => int_arg(p, "preload_nchunks", 1, MAX_I64)?,
            None => 1,
        };
        Ok(Self {
            chunk_size,
            preload_nchunks,
        })
    }

    /// Samples per chunk.
    #[getter]
    fn chunk_size(&self) -> u64 {
        self.chunk_size
    }

    /// Consecutive chunks shuffled together.
    #[getter]
    fn preload_nchunks(&self) -> u64 {
        self.preload_nchunks
    }

    fn __getnewargs__(&self) -> (u64, u64) {
        (self.chunk_size, self.preload_nchunks)
    }

    fn __repr__(&self) -> String {
        format!(
            "Chunked(chunk_size={}, preload_nchunks={})",
            self.chunk_size, self.preload_nchunks
        )
    }
}

/// The `kind` argument: a kind's name or a [`Chunked`]; `default` when
/// omitted. The one place a kind is read from Python.
pub fn kind_value(kind: &Keyword<'_>, default: Kind) -> PyResult<Kind> {
    let Some(kind) = kind.given() else {
        return Ok(default);
    };
    if let Ok(chunked) = kind.cast::<Chunked>() {
        return Ok(chunked.get().kind());
    }
    if !kind.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "kind must be a str or a Chunked, got {}",
            kind.get_type().name()?
        )));
    }
    let name = str_arg(kind, "kind")?;
    if name == "chunked" {
        return Err(PyValueError::new_err(
            "kind='chunked' needs its chunk size: give kind=Chunked(chunk_size, \
             preload_nchunks)",
        ));
    }
    Kind::parse(&name, None, None).py()
}

/// A kind as Python sees it: its name, or a [`Chunked`].
pub fn kind_object(py: Python<'_>, kind: Kind) -> PyResult<Py<PyAny>> {
    Ok(match kind {
        Kind::Chunked {
            chunk_size,
            preload_nchunks,
        } => Py::new(
            py,
            Chunked {
                chunk_size,
                preload_nchunks,
            },
        )?
        .into_any(),
        other => other.name().into_pyobject(py)?.into_any().unbind(),
    })
}

/// The keys a plan's state (and a spec's JSON) records a kind's own
/// parameters under, beside its name: the one list of them.
pub const KIND_KEYS: [&str; 2] = ["chunk_size", "preload_nchunks"];

/// A kind's own parameters, in the order of [`KIND_KEYS`] (None for a kind
/// without them).
pub fn kind_params(kind: Kind) -> [Option<u64>; 2] {
    match kind {
        Kind::Chunked {
            chunk_size,
            preload_nchunks,
        } => [Some(chunk_size), Some(preload_nchunks)],
        _ => [None, None],
    }
}

/// A state's kind (its name and its parameters under [`KIND_KEYS`], as
/// `state_dict` records them) as a core kind.
pub fn kind_of_state(name: &Bound<'_, PyAny>, params: [Option<u64>; 2]) -> PyResult<Kind> {
    let [chunk_size, preload_nchunks] = params;
    Kind::parse(&str_arg(name, "kind")?, chunk_size, preload_nchunks).py()
}
