//! Bindings of Streaming's shuffles (`get_shuffle`) and small private hooks
//! (`_np_*`, in `_native._testing`) that expose the numpy generator for tests.

use crate::args::{asarray, int_arg, int_value, str_arg, MAX_I64, MAX_U64};
use crate::errors::{to_py_as_numpy, IntoPyResult};
use epochplan_compat::streaming::numpy_rng::{Generator, SeedSequence};
use epochplan_compat::streaming::shuffle::{self, Algo};
use epochplan_core::buffer::copy_of;
use numpy::{IntoPyArray, PyArray1, PyArrayDyn, PyArrayMethods};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

/// Adds this module's functions to `_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(streaming_get_shuffle, m)?)?;
    Ok(())
}

/// Adds the test hooks of the numpy generator to `_native._testing`.
pub fn register_testing(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_np_seed_pool, m)?)?;
    m.add_function(wrap_pyfunction!(_np_generate_state, m)?)?;
    m.add_function(wrap_pyfunction!(_np_pcg64_state, m)?)?;
    m.add_function(wrap_pyfunction!(_np_run, m)?)?;
    m.add_function(wrap_pyfunction!(_np_sort_by_keys, m)?)?;
    Ok(())
}

/// Shard sizes as int64: a 1-d array-like of integers, each non-negative.
fn sizes_arg(obj: &Bound<'_, PyAny>, name: &str) -> PyResult<Vec<i64>> {
    let py = obj.py();
    let np = py.import("numpy")?;
    let arr = asarray(obj, name)?;
    let dtype = arr.getattr("dtype")?;
    let kind: String = dtype.getattr("kind")?.extract()?;
    let size: usize = arr.getattr("size")?.extract()?;
    // An empty list becomes a float64 array: treat it as no shards.
    if kind != "i" && kind != "u" && size > 0 {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an array of integers, got dtype {}",
            dtype.str()?
        )));
    }
    let ndim: usize = arr.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(PyValueError::new_err(format!(
            "{name} must be one-dimensional, got {ndim} dimensions"
        )));
    }
    if kind == "u" && size > 0 {
        let big: bool = arr.call_method0("max")?.gt(MAX_I64)?;
        if big {
            return Err(PyValueError::new_err(format!(
                "{name} must be in [0, 2**63 - 1], got a value above 2**63 - 1"
            )));
        }
    }
    let arr = np.call_method1("ascontiguousarray", (arr, np.getattr("int64")?))?;
    let arr = arr.cast::<PyArrayDyn<i64>>()?;
    let ro = arr.readonly();
    copy_of(ro.as_slice()?, name).map_err(to_py_as_numpy)
}

/// Streaming's `get_shuffle`: the epoch's sample order as int64, and whether
/// Streaming would warn that a block was smaller than a shard piece.
#[pyfunction]
#[pyo3(signature = (algo, shard_sizes, num_canonical_nodes, seed, epoch, block_size))]
fn streaming_get_shuffle<'py>(
    py: Python<'py>,
    algo: &Bound<'py, PyAny>,
    shard_sizes: &Bound<'py, PyAny>,
    num_canonical_nodes: &Bound<'py, PyAny>,
    seed: &Bound<'py, PyAny>,
    epoch: &Bound<'py, PyAny>,
    block_size: &Bound<'py, PyAny>,
) -> PyResult<(Bound<'py, PyArray1<i64>>, bool)> {
    let algo = Algo::parse(&str_arg(algo, "algo")?).py()?;
    let sizes = sizes_arg(shard_sizes, "shard_sizes")?;
    let ncn = if algo.uses_canonical_nodes() {
        int_arg(
            num_canonical_nodes,
            "num_canonical_nodes",
            1,
            shuffle::MAX_CANONICAL_NODES,
        )?
    } else {
        0
    };
    let seed = int_arg(seed, "seed", 0, MAX_U64)?;
    // Negative as in Streaming, as long as seed + epoch is not (checked with it).
    let bound = i128::from(MAX_U64);
    let epoch = match int_value(epoch, "epoch")? {
        Ok(v) if (-bound..=bound).contains(&v) => v,
        got => {
            return Err(PyValueError::new_err(format!(
                "epoch must be an int in [-(2**64 - 1), 2**64 - 1], got {}",
                got.map_or_else(|huge| huge, |v| v.to_string())
            )))
        }
    };
    let block_size = if algo.uses_block_size() {
        int_arg(block_size, "block_size", 0, MAX_U64)?
    } else {
        0
    };
    let out = py
        .detach(|| shuffle::get_shuffle(algo, &sizes, ncn, seed, epoch, block_size))
        .map_err(to_py_as_numpy)?;
    Ok((out.ids.into_pyarray(py), out.block_smaller_than_shard))
}

fn seed_arg(seed: &Bound<'_, PyAny>) -> PyResult<u128> {
    seed.extract::<u128>()
        .map_err(|_| PyValueError::new_err("seed must be an int in [0, 2**128 - 1]"))
}

/// Test hook: `SeedSequence(seed).pool`.
#[pyfunction]
fn _np_seed_pool(seed: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    Ok(SeedSequence::new(seed_arg(seed)?).pool().to_vec())
}

/// Test hook: `SeedSequence(seed).generate_state(n_words, np.uint32)`.
#[pyfunction]
fn _np_generate_state(seed: &Bound<'_, PyAny>, n_words: &Bound<'_, PyAny>) -> PyResult<Vec<u32>> {
    let n = int_arg(n_words, "n_words", 0, 1 << 20)? as usize;
    Ok(SeedSequence::new(seed_arg(seed)?).generate_state_u32(n))
}

/// Test hook: `PCG64(seed).state["state"]` as `(state, inc)`.
#[pyfunction]
fn _np_pcg64_state(seed: &Bound<'_, PyAny>) -> PyResult<(u128, u128)> {
    let mut g = Generator::new(seed_arg(seed)?);
    Ok(g.bit_generator().state())
}

/// Test hook: runs `ops` in order on `default_rng(seed)` and returns one
/// array per op. Ops are tuples: `("raw", n)` (uint64 draws), `("u32", n)`,
/// `("random", n)`, `("integers", low, high, n)` (int64, `[low, high)`),
/// `("uniform", low, high, n)`, `("permutation", n)`.
#[pyfunction]
fn _np_run<'py>(
    py: Python<'py>,
    seed: &Bound<'py, PyAny>,
    ops: &Bound<'py, PyList>,
) -> PyResult<Vec<Bound<'py, PyAny>>> {
    let mut g = Generator::new(seed_arg(seed)?);
    let mut out = Vec::with_capacity(ops.len());
    for op in ops.iter() {
        let op = op.cast::<PyTuple>()?;
        let name = str_arg(&op.get_item(0)?, "op")?;
        let count = |i: usize| -> PyResult<usize> {
            Ok(int_arg(&op.get_item(i)?, "n", 0, 1 << 24)? as usize)
        };
        let arr = match name.as_str() {
            "raw" => {
                let n = count(1)?;
                let v: Vec<u64> = (0..n).map(|_| g.bit_generator().next_u64()).collect();
                v.into_pyarray(py).into_any()
            }
            "u32" => {
                let n = count(1)?;
                let v: Vec<u32> = (0..n).map(|_| g.bit_generator().next_u32()).collect();
                v.into_pyarray(py).into_any()
            }
            "random" => {
                let n = count(1)?;
                let v: Vec<f64> = (0..n).map(|_| g.random()).collect();
                v.into_pyarray(py).into_any()
            }
            "integers" => {
                let low: i64 = op.get_item(1)?.extract()?;
                let high: i128 = op.get_item(2)?.extract()?;
                let n = count(3)?;
                if high <= i128::from(low) || high - 1 > i128::from(i64::MAX) {
                    return Err(PyValueError::new_err("integers needs low < high <= 2**63"));
                }
                let mut v = vec![0i64; n];
                g.integers_closed_fill(low, (high - 1) as i64, &mut v)
                    .py()?;
                v.into_pyarray(py).into_any()
            }
            "uniform" => {
                let low: f64 = op.get_item(1)?.extract()?;
                let high: f64 = op.get_item(2)?.extract()?;
                let n = count(3)?;
                let v: Vec<f64> = (0..n).map(|_| g.uniform(low, high)).collect();
                v.into_pyarray(py).into_any()
            }
            "permutation" => g.permutation(count(1)?).into_pyarray(py).into_any(),
            other => {
                return Err(PyValueError::new_err(format!("unknown op '{other}'")));
            }
        };
        out.push(arr);
    }
    Ok(out)
}

/// Test hook: `samples` ordered by `keys` the way `py1e` orders a canonical
/// node (equal keys keep their order).
#[pyfunction]
fn _np_sort_by_keys<'py>(
    py: Python<'py>,
    keys: Vec<f64>,
    samples: Vec<i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    if keys.len() != samples.len() || keys.iter().any(|k| !k.is_finite()) {
        return Err(PyValueError::new_err(
            "keys must be finite and as many as samples",
        ));
    }
    let mut out = samples;
    shuffle::sort_by_keys(&keys, &mut out).map_err(to_py_as_numpy)?;
    Ok(out.into_pyarray(py))
}
