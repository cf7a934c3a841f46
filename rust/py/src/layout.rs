//! `PlanLayout`: a plan's steps, shares, micro-batch cuts and weights without
//! its order, and the layout methods `EpochPlan` shares with it.

use crate::args::{bool_arg, int_arg, rank_args, sample_ids_arg, step_arg, Keyword, MAX_I64};
use crate::errors::IntoPyResult;
use epochplan_core::layout::MicroBatch;
use epochplan_core::Layout;
use numpy::IntoPyArray;
use pyo3::exceptions::PyOverflowError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};

/// The order-free part of an :class:`EpochPlan`: its steps, each rank's
/// share of a step, the micro-batch cuts and the weights. Every kind of
/// order has the same layout for the same sizes, so a layout serves ids
/// that come from elsewhere (a plan file), in O(1) memory.
///
/// Args:
///     num_samples: N (int in [0, 2**63 - 1]).
///     global_batch_size: G (int in [1, 2**63 - 1]).
///     drop_last: drop a short last step.
///     cursor: samples already consumed, at a step boundary (as for
///         :class:`EpochPlan`).
///
/// Examples:
///     >>> layout = PlanLayout(9, 4)
///     >>> layout.num_steps, layout.rank_size(1, 2)
///     (3, 4)
///     >>> layout.split_step(0, 1, 2, 1, [3, 1])
///     [(array([3]), array([0.5])), (array([1]), array([0.5]))]
///     >>> EpochPlan(9, 4).layout == layout
///     True
#[pyclass(module = "epochplan._native", subclass, frozen, eq, hash)]
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PlanLayout {
    layout: Layout,
}

impl PlanLayout {
    /// The binding of a core layout.
    pub fn of(layout: Layout) -> Self {
        Self { layout }
    }
}

/// `drop_last` and `cursor` keyword arguments (False and 0 when omitted).
pub fn flags_arg(drop_last: &Keyword<'_>, cursor: &Keyword<'_>) -> PyResult<(bool, u64)> {
    let drop_last = match drop_last.given() {
        Some(d) => bool_arg(d, "drop_last")?,
        None => false,
    };
    let cursor = match cursor.given() {
        Some(c) => int_arg(c, "cursor", 0, MAX_I64)?,
        None => 0,
    };
    Ok((drop_last, cursor))
}

#[pymethods]
impl PlanLayout {
    #[new]
    #[pyo3(
        signature = (num_samples, global_batch_size, *, drop_last = Keyword::Omitted,
                     cursor = Keyword::Omitted),
        text_signature = "(num_samples, global_batch_size, *, drop_last=False, cursor=0)"
    )]
    fn new(
        num_samples: &Bound<'_, PyAny>,
        global_batch_size: &Bound<'_, PyAny>,
        drop_last: Keyword<'_>,
        cursor: Keyword<'_>,
    ) -> PyResult<Self> {
        let n = int_arg(num_samples, "num_samples", 0, MAX_I64)?;
        let g = int_arg(global_batch_size, "global_batch_size", 1, MAX_I64)?;
        let (drop_last, cursor) = flags_arg(&drop_last, &cursor)?;
        Ok(Self::of(Layout::new(n, g, drop_last, cursor).py()?))
    }

    /// Samples in the epoch.
    #[getter]
    fn num_samples(&self) -> u64 {
        self.layout.num_samples()
    }

    /// Samples per optimizer step over all ranks.
    #[getter]
    fn global_batch_size(&self) -> u64 {
        self.layout.global_batch_size()
    }

    /// Whether the short last step is dropped.
    #[getter]
    fn drop_last(&self) -> bool {
        self.layout.drop_last()
    }

    /// Samples consumed before this layout starts (a step boundary).
    #[getter]
    fn cursor(&self) -> u64 {
        self.layout.cursor()
    }

    /// Steps in the whole epoch.
    #[getter]
    fn num_steps(&self) -> u64 {
        self.layout.num_steps()
    }

    /// The first step this layout yields.
    #[getter]
    fn start_step(&self) -> u64 {
        self.layout.start_step()
    }

    /// Steps this layout yields: num_steps - start_step.
    #[getter]
    fn remaining_steps(&self) -> u64 {
        self.layout.remaining_steps()
    }

    /// Real samples in step `step`, over all ranks.
    fn step_size(&self, step: &Bound<'_, PyAny>) -> PyResult<u64> {
        step_size(&self.layout, step)
    }

    /// Rank `rank`'s number of real samples from start_step on.
    fn rank_size(&self, rank: &Bound<'_, PyAny>, world_size: &Bound<'_, PyAny>) -> PyResult<u64> {
        rank_size(&self.layout, rank, world_size)
    }

    /// Micro-batches of every rank in step `step`.
    fn num_micro_batches(
        &self,
        step: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        num_micro_batches(&self.layout, step, world_size, micro_batch_size)
    }

    /// Micro-batches every rank gets from start_step on (the same for all ranks).
    fn total_micro_batches(
        &self,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        total_micro_batches(&self.layout, world_size, micro_batch_size)
    }

    /// Where step `step` starts inside rank `rank`'s share of the whole epoch.
    fn rank_step_offset(
        &self,
        step: &Bound<'_, PyAny>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        rank_step_offset(&self.layout, step, rank, world_size)
    }

    /// The position of the epoch whose sample fills rank `rank`'s
    /// micro-batches (weight 0) when its share of step `step` is empty.
    fn filler_position(
        &self,
        step: &Bound<'_, PyAny>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let step = step_arg(step, self.layout.num_steps(), false)?;
        let (rank, w) = rank_args(rank, world_size)?;
        self.layout.filler_position(step, rank, w).py()
    }

    /// Cuts `ids` (rank `rank`'s real samples of step `step`, e.g. read from
    /// a plan file) into the step's micro-batches: a list of (indices,
    /// weights), as :meth:`EpochPlan.split_step` gives them. A rank whose
    /// share is empty is filled with the sample id `filler` (weight 0); by
    /// default the id :meth:`filler_position` gives (the plan of
    /// kind="identity"'s; :meth:`EpochPlan.split_step` uses its order's).
    #[pyo3(signature = (step, rank, world_size, micro_batch_size, ids, *, filler = None))]
    #[allow(clippy::too_many_arguments)]
    fn split_step<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
        micro_batch_size: &Bound<'py, PyAny>,
        ids: &Bound<'py, PyAny>,
        filler: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let n = self.layout.num_samples();
        let filler = match filler {
            Some(f) if !f.is_none() => Some(int_arg(f, "filler", 0, n.saturating_sub(1))?),
            _ => None,
        };
        split_step(
            py,
            &self.layout,
            (step, rank, world_size, micro_batch_size, ids),
            n,
            |position| Ok(filler.unwrap_or(position) as i64),
        )
    }

    /// The same layout started after `step` steps of the epoch.
    fn at_step(&self, step: &Bound<'_, PyAny>) -> PyResult<Self> {
        at_step(&self.layout, step).map(Self::of)
    }

    fn __getnewargs_ex__<'py>(
        &self,
        py: Python<'py>,
    ) -> PyResult<(Bound<'py, PyTuple>, Bound<'py, PyDict>)> {
        let kwargs = PyDict::new(py);
        kwargs.set_item("drop_last", self.layout.drop_last())?;
        kwargs.set_item("cursor", self.layout.cursor())?;
        let args = [self.layout.num_samples(), self.layout.global_batch_size()];
        Ok((PyTuple::new(py, args)?, kwargs))
    }

    fn __repr__(&self) -> String {
        let l = &self.layout;
        format!(
            "PlanLayout(num_samples={}, global_batch_size={}, drop_last={}, cursor={}, \
             num_steps={})",
            l.num_samples(),
            l.global_batch_size(),
            if l.drop_last() { "True" } else { "False" },
            l.cursor(),
            l.num_steps()
        )
    }
}

/// `step_size(step)` of a layout.
pub fn step_size(layout: &Layout, step: &Bound<'_, PyAny>) -> PyResult<u64> {
    let step = step_arg(step, layout.num_steps(), false)?;
    layout.step_len(step).py()
}

/// `rank_size(rank, world_size)` of a layout.
pub fn rank_size(
    layout: &Layout,
    rank: &Bound<'_, PyAny>,
    world_size: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let (rank, w) = rank_args(rank, world_size)?;
    layout.rank_len(rank, w).py()
}

/// `num_micro_batches(step, world_size, micro_batch_size)` of a layout.
pub fn num_micro_batches(
    layout: &Layout,
    step: &Bound<'_, PyAny>,
    world_size: &Bound<'_, PyAny>,
    micro_batch_size: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let step = step_arg(step, layout.num_steps(), false)?;
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let b = int_arg(micro_batch_size, "micro_batch_size", 1, MAX_I64)?;
    Ok(layout.share(step, 0, w, b).py()?.micro_batches)
}

/// `total_micro_batches(world_size, micro_batch_size)` of a layout.
pub fn total_micro_batches(
    layout: &Layout,
    world_size: &Bound<'_, PyAny>,
    micro_batch_size: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
    let b = int_arg(micro_batch_size, "micro_batch_size", 1, MAX_I64)?;
    layout.total_micro_batches(w, b).py()
}

/// `rank_step_offset(step, rank, world_size)` of a layout.
pub fn rank_step_offset(
    layout: &Layout,
    step: &Bound<'_, PyAny>,
    rank: &Bound<'_, PyAny>,
    world_size: &Bound<'_, PyAny>,
) -> PyResult<u64> {
    let step = step_arg(step, layout.num_steps(), true)?;
    let (rank, w) = rank_args(rank, world_size)?;
    layout.rank_step_offset(step, rank, w).py()
}

/// The layout started after `step` steps of the epoch.
pub fn at_step(layout: &Layout, step: &Bound<'_, PyAny>) -> PyResult<Layout> {
    let step = step_arg(step, layout.num_steps(), true)?;
    layout.with_cursor(layout.cursor_at_step(step)).py()
}

/// The arguments of `split_step`: step, rank, world_size,
/// micro_batch_size and ids.
pub type SplitArgs<'a, 'py> = (
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
    &'a Bound<'py, PyAny>,
);

/// `split_step(step, rank, world_size, micro_batch_size, ids)` of a
/// layout; `filler_id` gives the id at a filler position.
pub fn split_step<'py>(
    py: Python<'py>,
    layout: &Layout,
    (step, rank, world_size, micro_batch_size, ids): SplitArgs<'_, 'py>,
    id_bound: u64,
    filler_id: impl FnOnce(u64) -> epochplan_core::Result<i64>,
) -> PyResult<Bound<'py, PyList>> {
    let step = step_arg(step, layout.num_steps(), false)?;
    let (rank, w) = rank_args(rank, world_size)?;
    let b = int_arg(micro_batch_size, "micro_batch_size", 1, MAX_I64)?;
    let ids = sample_ids_arg(ids, "ids", id_bound)?;
    let batches = layout.split_step(step, rank, w, b, &ids, filler_id).py()?;
    batch_list(py, batches)
}

/// Python memory a micro-batch may take: its tuple, its two arrays and
/// their owners (about 0.5 KiB measured), doubled for margin.
const PY_BYTES_PER_MICRO_BATCH: usize = 1 << 10;

/// A step's micro-batches as a list of (indices, weights) array pairs.
pub fn batch_list<'py>(py: Python<'py>, batches: Vec<MicroBatch>) -> PyResult<Bound<'py, PyList>> {
    // numpy and pyo3 do not check every allocation made while an array is
    // created (a failed one crashes the process), so a step of very many
    // micro-batches first checks that its Python objects fit: it reserves
    // room for them and gives it back. That costs two system calls, more
    // than a step of a few micro-batches takes, so only large steps check.
    let count = batches.len();
    let bytes = count.saturating_mul(PY_BYTES_PER_MICRO_BATCH);
    if bytes >= 4 << 20 && !epochplan_core::buffer::has_room(bytes, 1) {
        drop(batches); // with them held, even the message may not fit
        return Err(PyOverflowError::new_err(format!(
            "cannot allocate the step's {count} micro-batches as Python objects \
             (about {} MiB): not enough memory",
            bytes >> 20
        )));
    }
    // Appended one by one: the list grows fallibly, where collecting the
    // tuples into a Vec first would abort on a failed allocation.
    let list = PyList::empty(py);
    for (ids, weights) in batches {
        list.append(PyTuple::new(
            py,
            [
                ids.into_pyarray(py).into_any(),
                weights.into_pyarray(py).into_any(),
            ],
        )?)?;
    }
    Ok(list)
}
