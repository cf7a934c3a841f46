//! Bindings of megatron-core's dataset indices (`epochplan-compat`). The
//! Python layer (`epochplan.compat.megatron`) converts arguments to the
//! typed, contiguous arrays taken here; numpy's `RandomState` travels as its
//! MT19937 key and position and comes back advanced.

use crate::errors::IntoPyResult;
use epochplan_compat::megatron::gpt_indices::{self, GptLayout};
use epochplan_compat::megatron::random_state::{Mt19937, RandomState, STATE_WORDS};
use epochplan_compat::megatron::{blend, gpt};
use numpy::{IntoPyArray, PyArray1, PyArrayMethods, PyReadonlyArray1, PyReadwriteArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Adds this module's functions to `_native`.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(megatron_sample_idx, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_document_index, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_tokens_per_epoch, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_shuffle_index, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_gpt_indices, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_blending_indices, m)?)?;
    m.add_function(wrap_pyfunction!(megatron_exhaustive_blending_indices, m)?)?;
    Ok(())
}

fn slice<'a, T: numpy::Element>(arr: &'a PyReadonlyArray1<'_, T>, name: &str) -> PyResult<&'a [T]> {
    arr.as_slice()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a contiguous, aligned array")))
}

fn state_of(key: &PyReadonlyArray1<'_, u32>, pos: usize) -> PyResult<RandomState> {
    let words: [u32; STATE_WORDS] = slice(key, "key")?.try_into().map_err(|_| {
        PyValueError::new_err(format!("the MT19937 key must have {STATE_WORDS} words"))
    })?;
    let mt = Mt19937::from_state(words, pos).ok_or_else(|| {
        PyValueError::new_err(format!(
            "the MT19937 position must be in [0, {STATE_WORDS}], got {pos}"
        ))
    })?;
    Ok(RandomState::from_generator(mt))
}

fn state_out<'py>(py: Python<'py>, state: &RandomState) -> (Bound<'py, PyArray1<u32>>, usize) {
    let (key, pos) = state.generator().state();
    (key.to_vec().into_pyarray(py), pos)
}

/// `build_sample_idx_int32` (`int64=False`) or `_int64`: the `(n + 1, 2)` sample index.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn megatron_sample_idx<'py>(
    py: Python<'py>,
    sizes: PyReadonlyArray1<'py, i32>,
    document_idx: PyReadonlyArray1<'py, i32>,
    seq_length: i32,
    num_epochs: i32,
    tokens_per_epoch: i64,
    drop_last_partial_sequence: bool,
    add_extra_token_to_sequence: i32,
    int64: bool,
) -> PyResult<Bound<'py, PyAny>> {
    let sizes = slice(&sizes, "sizes")?;
    let docs = slice(&document_idx, "document_idx")?;
    let args = (
        seq_length,
        num_epochs,
        tokens_per_epoch,
        drop_last_partial_sequence,
        add_extra_token_to_sequence,
    );
    let (s, e, t, d, x) = args;
    if int64 {
        let flat = py
            .detach(|| gpt::build_sample_idx::<i64>(sizes, docs, s, e, t, d, x))
            .py()?;
        let rows = flat.len() / 2;
        Ok(flat.into_pyarray(py).reshape([rows, 2])?.into_any())
    } else {
        let flat = py
            .detach(|| gpt::build_sample_idx::<i32>(sizes, docs, s, e, t, d, x))
            .py()?;
        let rows = flat.len() / 2;
        Ok(flat.into_pyarray(py).reshape([rows, 2])?.into_any())
    }
}

/// `_get_num_tokens_per_epoch`: the tokens of the documents `indices`.
#[pyfunction]
fn megatron_tokens_per_epoch(
    py: Python<'_>,
    sequence_lengths: PyReadonlyArray1<'_, i32>,
    indices: PyReadonlyArray1<'_, i32>,
) -> PyResult<i64> {
    let sizes = slice(&sequence_lengths, "sequence_lengths")?;
    let docs = slice(&indices, "indices")?;
    py.detach(|| gpt::tokens_per_epoch(sizes, docs)).py()
}

type WithState<'py, A> = (Bound<'py, A>, Bound<'py, PyArray1<u32>>, usize);

/// `_build_document_index` from a `RandomState`'s key and position.
#[pyfunction]
fn megatron_document_index<'py>(
    py: Python<'py>,
    documents: PyReadonlyArray1<'py, i32>,
    num_epochs: usize,
    key: PyReadonlyArray1<'py, u32>,
    pos: usize,
    separate_final_epoch: bool,
) -> PyResult<WithState<'py, PyArray1<i32>>> {
    let mut state = state_of(&key, pos)?;
    let documents = slice(&documents, "documents")?;
    let index = py
        .detach(|| {
            gpt::build_document_index(documents, num_epochs, &mut state, separate_final_epoch)
        })
        .py()?;
    let (key, pos) = state_out(py, &state);
    Ok((index.into_pyarray(py), key, pos))
}

/// `_build_shuffle_index` from a `RandomState`'s key and position.
#[pyfunction]
fn megatron_shuffle_index<'py>(
    py: Python<'py>,
    num_samples: usize,
    total_size: usize,
    key: PyReadonlyArray1<'py, u32>,
    pos: usize,
) -> PyResult<WithState<'py, PyAny>> {
    let mut state = state_of(&key, pos)?;
    let index = py
        .detach(|| gpt::build_shuffle_index(num_samples, total_size, &mut state))
        .py()?;
    let index = match index {
        gpt::ShuffleIndex::U32(v) => v.into_pyarray(py).into_any(),
        gpt::ShuffleIndex::I64(v) => v.into_pyarray(py).into_any(),
    };
    let (key, pos) = state_out(py, &state);
    Ok((index, key, pos))
}

/// The three indices with a sample index of `S`, shaped `(n + 1, 2)`.
fn gpt_indices_as<'py, S: gpt::SampleInt + numpy::Element>(
    py: Python<'py>,
    sizes: &[i32],
    documents: &[i32],
    layout: &GptLayout,
    state: &mut RandomState,
) -> PyResult<(Vec<i32>, Bound<'py, PyAny>, gpt::ShuffleIndex)> {
    let built = py
        .detach(|| gpt_indices::build_gpt_indices::<S>(sizes, documents, layout, state))
        .py()?;
    let rows = built.sample_index.len() / 2;
    let samples = built
        .sample_index
        .into_pyarray(py)
        .reshape([rows, 2])?
        .into_any();
    Ok((built.document_index, samples, built.shuffle_index))
}

/// The three indices of a `GPTDataset` in one call, from a `RandomState`'s
/// key and position: `cut` is `(seq_length, num_epochs, tokens_per_epoch,
/// drop_last_partial_sequence, add_extra_token_to_sequence)`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn megatron_gpt_indices<'py>(
    py: Python<'py>,
    sizes: PyReadonlyArray1<'py, i32>,
    documents: PyReadonlyArray1<'py, i32>,
    cut: (i32, i32, i64, bool, i32),
    separate_final_epoch: bool,
    shuffled_first: Option<usize>,
    int64: bool,
    key: PyReadonlyArray1<'py, u32>,
    pos: usize,
) -> PyResult<Bound<'py, pyo3::types::PyTuple>> {
    let mut state = state_of(&key, pos)?;
    let sizes = slice(&sizes, "sequence_lengths")?;
    let documents = slice(&documents, "indices")?;
    let (seq_length, num_epochs, tokens_per_epoch, drop_last_partial_sequence, add_extra) = cut;
    let layout = GptLayout {
        cut: gpt::SampleCut {
            seq_length,
            num_epochs,
            tokens_per_epoch,
            drop_last_partial_sequence,
            add_extra,
        },
        separate_final_epoch,
        shuffled_first,
    };
    let (docs, samples, shuffle) = if int64 {
        gpt_indices_as::<i64>(py, sizes, documents, &layout, &mut state)?
    } else {
        gpt_indices_as::<i32>(py, sizes, documents, &layout, &mut state)?
    };
    let shuffle = match shuffle {
        gpt::ShuffleIndex::U32(v) => v.into_pyarray(py).into_any(),
        gpt::ShuffleIndex::I64(v) => v.into_pyarray(py).into_any(),
    };
    let (key, pos) = state_out(py, &state);
    (docs.into_pyarray(py), samples, shuffle, key, pos).into_pyobject(py)
}

fn slice_mut<'a, T: numpy::Element>(
    arr: &'a mut PyReadwriteArray1<'_, T>,
    name: &str,
) -> PyResult<&'a mut [T]> {
    arr.as_slice_mut()
        .map_err(|_| PyValueError::new_err(format!("{name} must be a contiguous, aligned array")))
}

/// `build_blending_indices`: fills both outputs in place.
#[pyfunction]
fn megatron_blending_indices(
    py: Python<'_>,
    mut dataset_index: PyReadwriteArray1<'_, i16>,
    mut dataset_sample_index: PyReadwriteArray1<'_, i64>,
    weights: PyReadonlyArray1<'_, f64>,
    num_datasets: i64,
    size: i64,
) -> PyResult<()> {
    let index = slice_mut(&mut dataset_index, "dataset_index")?;
    let sample = slice_mut(&mut dataset_sample_index, "dataset_sample_index")?;
    let weights = slice(&weights, "weights")?;
    py.detach(|| blend::build_blending_indices(index, sample, weights, num_datasets, size))
        .py()
}

/// `build_exhaustive_blending_indices`: fills both outputs in place.
#[pyfunction]
fn megatron_exhaustive_blending_indices(
    py: Python<'_>,
    mut dataset_index: PyReadwriteArray1<'_, i16>,
    mut dataset_sample_index: PyReadwriteArray1<'_, i64>,
    sizes: PyReadonlyArray1<'_, i64>,
    num_datasets: i64,
) -> PyResult<()> {
    let index = slice_mut(&mut dataset_index, "dataset_index")?;
    let sample = slice_mut(&mut dataset_sample_index, "dataset_sample_index")?;
    let sizes = slice(&sizes, "sizes")?;
    py.detach(|| blend::build_exhaustive_blending_indices(index, sample, sizes, num_datasets))
        .py()
}
