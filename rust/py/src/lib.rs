//! The Python bindings of epochplan-core: argument checks, the GIL released
//! around every long computation, and int64 arrays handed to numpy without a
//! copy. Nothing here computes an order or a plan itself.
//!
//! Unsafe code is denied, with four exceptions, documented where they are:
//! `space::selection::NumpyIds` reads the ids of a numpy array it keeps
//! alive, so that `Selection.from_indices` takes a large id array without a
//! copy; `mapped::map_ids` maps a rank file and hands numpy an array over the
//! mapping, so that a mapped rank file holds no file descriptor; `audit`
//! maps a consumption log to read it; `reserve::WithReserve`, the
//! allocator, serves a small allocation the system refuses from a static
//! reserve, so that an out-of-memory error reaches Python instead of
//! aborting the process.
#![deny(unsafe_code)]

mod args;
mod audit;
mod errors;
mod layout;
mod lengths;
mod mapped;
mod megatron;
mod permutation;
mod plan;
mod planfile;
mod reserve;
mod space;
mod spec;
mod split;
mod streaming_partition;
mod streaming_shuffle;
mod testing;
mod threads;
mod token_files;
mod token_slices;
mod token_verify;

use pyo3::prelude::*;

#[global_allocator]
static ALLOCATOR: reserve::WithReserve = reserve::WithReserve;

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("FORMAT_VERSION", epochplan_core::FORMAT_VERSION)?;
    m.add("MAX_SAMPLES", epochplan_core::MAX_SAMPLES)?;
    m.add_class::<permutation::Permutation>()?;
    m.add_class::<plan::EpochPlan>()?;
    m.add_class::<layout::PlanLayout>()?;
    m.add_class::<plan::MicroBatches>()?;
    m.add_class::<plan::RankPlan>()?;
    m.add_class::<spec::PlanSpec>()?;
    m.add_class::<spec::Chunked>()?;
    m.add_class::<spec::Tokens>()?;
    m.add_function(wrap_pyfunction!(permutation::permutation, m)?)?;
    m.add_function(wrap_pyfunction!(split::split_range, m)?)?;
    m.add_function(wrap_pyfunction!(threads::set_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(threads::get_num_threads, m)?)?;
    m.add_function(wrap_pyfunction!(audit::scan_log, m)?)?;
    m.add_function(wrap_pyfunction!(audit::gather_log_ids, m)?)?;
    m.add_function(wrap_pyfunction!(audit::unmarked_ids, m)?)?;
    m.add_function(wrap_pyfunction!(audit::consume_ids, m)?)?;
    streaming_partition::register(m)?;
    streaming_shuffle::register(m)?;
    planfile::register(m)?;
    token_files::register(m)?;
    token_verify::register(m)?;
    mapped::register(m)?;
    megatron::register(m)?;
    space::register(m)?;
    errors::register(m)?;
    args::register(m)?;
    testing::register(m)?;
    Ok(())
}
