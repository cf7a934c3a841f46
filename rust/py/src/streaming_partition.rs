//! Bindings of Streaming's partitions: the whole array
//! (`streaming_partitions`) and one rank's part (`streaming_partition_part`).
//! Both report Streaming's notices as Streaming does, also when the
//! arguments are then rejected: `UserWarning`s (attributed to the caller of
//! the Python wrapper) and WARNING records on the
//! `epochplan.compat.streaming` logger.

use crate::args::{int_arg, int_value, opt_int_arg, MAX_I64};
use crate::errors::{to_py_as_numpy, IntoPyResult};
use epochplan_compat::streaming::partition::{
    check_drop_first, Algo, Notice, Partition, PartitionArgs,
};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::exceptions::{PyIndexError, PyKeyError, PyTypeError, PyUserWarning};
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::ffi::CString;

/// The logger Streaming's log messages go to.
const LOGGER: &str = "epochplan.compat.streaming";

/// Checks the arguments in Streaming's order: their values, then
/// `drop_first` against the epoch, then the algorithm's name (KeyError, as
/// Streaming's lookup), then the algorithm's own checks.
#[allow(clippy::too_many_arguments)]
fn resolve(
    py: Python<'_>,
    algo: &Bound<'_, PyAny>,
    num_samples: &Bound<'_, PyAny>,
    num_canonical_nodes: &Bound<'_, PyAny>,
    num_physical_nodes: &Bound<'_, PyAny>,
    ranks_per_node: &Bound<'_, PyAny>,
    workers_per_rank: &Bound<'_, PyAny>,
    batch_size: &Bound<'_, PyAny>,
    drop_first: &Bound<'_, PyAny>,
    initial_physical_nodes: Option<&Bound<'_, PyAny>>,
) -> PyResult<Partition> {
    // Zero counts pass here: the core refuses each where Streaming would
    // first divide by it, after Streaming's own checks (whose messages come
    // first, as in Streaming). Zero nodes or ranks fail Streaming's first
    // line, so they are refused here.
    let mut args = PartitionArgs {
        num_samples: int_arg(num_samples, "num_samples", 0, MAX_I64)?,
        num_canonical_nodes: int_arg(num_canonical_nodes, "num_canonical_nodes", 0, MAX_I64)?,
        num_physical_nodes: int_arg(num_physical_nodes, "num_physical_nodes", 1, MAX_I64)?,
        ranks_per_node: int_arg(ranks_per_node, "ranks_per_node", 1, MAX_I64)?,
        workers_per_rank: int_arg(workers_per_rank, "workers_per_rank", 0, MAX_I64)?,
        batch_size: int_arg(batch_size, "batch_size", 0, MAX_I64)?,
        drop_first: int_arg(drop_first, "drop_first", 0, MAX_I64)?,
        initial_physical_nodes: None,
    };
    check_drop_first(&args).py()?;
    let algo = algo_arg(py, algo)?;
    // Read only where Streaming reads it, as it ignores it elsewhere.
    if algo.reads_initial_physical_nodes(args.num_canonical_nodes, args.num_physical_nodes) {
        args.initial_physical_nodes =
            opt_int_arg(initial_physical_nodes, "initial_physical_nodes", 1, MAX_I64)?;
    }
    let (partition, notices) = Partition::resolve(algo, &args);
    report(py, &notices)?;
    partition.py()
}

/// The algorithm, looked up as Streaming looks it up in a dict: an unhashable
/// value is Streaming's TypeError ("unhashable type: ..."), any other unknown
/// value its KeyError, whose only argument is the value (so `str(error)` is
/// the same); the allowed names come in a note.
fn algo_arg(py: Python<'_>, algo: &Bound<'_, PyAny>) -> PyResult<Algo> {
    if let Ok(name) = algo.cast::<PyString>() {
        if let Some(algo) = Algo::parse(&name.to_string_lossy()) {
            return Ok(algo);
        }
    }
    if let Err(unhashable) = algo.hash() {
        if !unhashable.is_instance_of::<PyTypeError>(py) {
            return Err(unhashable);
        }
        return Err(PyTypeError::new_err(format!(
            "{}; algo must be a str, got {}",
            unhashable.value(py),
            algo.get_type().name()?
        )));
    }
    let error = PyKeyError::new_err((algo.clone().unbind(),));
    let note = format!(r#"algo must be "orig" or "relaxed", got {}"#, algo.repr()?);
    let value = error.value(py);
    if value.hasattr("add_note")? {
        value.call_method1("add_note", (note,))?;
    } else {
        // Python 3.10: no add_note, the note is kept where 3.11 keeps it.
        value.setattr("__notes__", vec![note])?;
    }
    Err(error)
}

/// Emits Streaming's notices, in order. A warning filter set to "error"
/// turns a warning into the exception, as with Streaming.
fn report(py: Python<'_>, notices: &[Notice]) -> PyResult<()> {
    for notice in notices {
        match notice {
            Notice::Warning(message) => {
                let category = py.get_type::<PyUserWarning>();
                let message = CString::new(message.as_str())?;
                // 1 is the Python wrapper, 2 its caller.
                PyErr::warn(py, &category, &message, 2)?;
            }
            Notice::Log(message) => {
                py.import("logging")?
                    .call_method1("getLogger", (LOGGER,))?
                    .call_method1("warning", (message,))?;
            }
        }
    }
    Ok(())
}

/// `ids` as an int64 numpy array of `shape`, without a copy.
fn shaped<'py>(py: Python<'py>, ids: Vec<i64>, shape: &[u64]) -> PyResult<Bound<'py, PyAny>> {
    Ok(ids.into_pyarray(py).reshape(dims(shape))?.into_any())
}

fn dims(shape: &[u64]) -> Vec<usize> {
    shape.iter().map(|&d| d as usize).collect()
}

/// Streaming's `get_partitions`: ids of shape (nodes, ranks per node,
/// workers per rank, batches per worker, batch size).
#[pyfunction]
#[pyo3(signature = (algo, num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node, workers_per_rank, batch_size, drop_first, initial_physical_nodes = None))]
#[allow(clippy::too_many_arguments)]
pub fn streaming_partitions<'py>(
    py: Python<'py>,
    algo: &Bound<'py, PyAny>,
    num_samples: &Bound<'py, PyAny>,
    num_canonical_nodes: &Bound<'py, PyAny>,
    num_physical_nodes: &Bound<'py, PyAny>,
    ranks_per_node: &Bound<'py, PyAny>,
    workers_per_rank: &Bound<'py, PyAny>,
    batch_size: &Bound<'py, PyAny>,
    drop_first: &Bound<'py, PyAny>,
    initial_physical_nodes: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let partition = resolve(
        py,
        algo,
        num_samples,
        num_canonical_nodes,
        num_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        batch_size,
        drop_first,
        initial_physical_nodes,
    )?;
    let ids = py.detach(|| partition.to_vec()).map_err(to_py_as_numpy)?;
    shaped(py, ids, &partition.shape())
}

/// An index argument in `[0, len)`: TypeError for non-integers, IndexError
/// naming the argument and its range otherwise.
fn index_arg(obj: &Bound<'_, PyAny>, name: &str, len: u64, what: &str) -> PyResult<u64> {
    let got = match int_value(obj, name)? {
        Ok(v) if v >= 0 && v < i128::from(len) => return Ok(v as u64),
        Ok(v) => v.to_string(),
        Err(huge) => huge,
    };
    Err(PyIndexError::new_err(format!(
        "{name} must be in [0, {len}) ({what} = {len}), got {got}"
    )))
}

/// One rank's part of Streaming's `get_partitions`: `full[node, rank]`, of
/// shape (workers per rank, batches per worker, batch size), computed alone.
#[pyfunction]
#[pyo3(signature = (algo, num_samples, num_canonical_nodes, num_physical_nodes, ranks_per_node, workers_per_rank, batch_size, drop_first, initial_physical_nodes = None, *, node, rank))]
#[allow(clippy::too_many_arguments)]
pub fn streaming_partition_part<'py>(
    py: Python<'py>,
    algo: &Bound<'py, PyAny>,
    num_samples: &Bound<'py, PyAny>,
    num_canonical_nodes: &Bound<'py, PyAny>,
    num_physical_nodes: &Bound<'py, PyAny>,
    ranks_per_node: &Bound<'py, PyAny>,
    workers_per_rank: &Bound<'py, PyAny>,
    batch_size: &Bound<'py, PyAny>,
    drop_first: &Bound<'py, PyAny>,
    initial_physical_nodes: Option<&Bound<'py, PyAny>>,
    node: &Bound<'py, PyAny>,
    rank: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let partition = resolve(
        py,
        algo,
        num_samples,
        num_canonical_nodes,
        num_physical_nodes,
        ranks_per_node,
        workers_per_rank,
        batch_size,
        drop_first,
        initial_physical_nodes,
    )?;
    let [nodes, ranks, ..] = partition.shape();
    let node = index_arg(node, "node", nodes, "num_physical_nodes")?;
    let rank = index_arg(rank, "rank", ranks, "ranks_per_node")?;
    let ids = py
        .detach(|| partition.part(node, rank))
        .map_err(to_py_as_numpy)?;
    shaped(py, ids, &partition.shape()[2..])
}

/// Adds this module's functions to `_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(streaming_partitions, m)?)?;
    m.add_function(wrap_pyfunction!(streaming_partition_part, m)?)?;
    Ok(())
}
