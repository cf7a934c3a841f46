//! `EpochPlan` and its micro-batch iterator.

use crate::args::{int_arg, rank_args, step_arg, Keyword, MAX_I64, MAX_U64};
use crate::errors::IntoPyResult;
use crate::layout::{self, PlanLayout};
use crate::lengths::{cost_value, TokenArrays};
use crate::spec::{kind_params, normalization_name, PlanSpec, Tokens};
use epochplan_core::dealing::Dealing;
use epochplan_core::plan::Plan;
use epochplan_core::space::Space;
use epochplan_core::tokens::Caps;
use epochplan_core::Layout;
use epochplan_core::{Kind, Order};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::sync::{Arc, OnceLock};

mod locate;
mod micro;
mod rank;
pub(crate) mod space;
mod state;
mod tokens;

pub use micro::MicroBatches;
pub use rank::RankPlan;
use space::{Given, PlanSpace};

/// Sample ids and their lengths, as two int64 arrays.
type IdsAndLengths<'py> = (Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<i64>>);

/// What a rank's step gives: its sample ids, or the source of each.
#[derive(Debug, Clone, Copy)]
enum Of {
    Ids,
    Sources,
}

/// How micro-batches are capped: by samples (a plan without lengths) or
/// by samples and/or tokens (a token plan).
#[derive(Debug, Clone, Copy)]
enum MicroCaps {
    Samples(u64),
    Tokens(Caps),
}

/// An epoch cut into global steps and dealt to ranks: exact, equal-step,
/// weighted, elastic and resumable.
///
/// Step ``t`` holds the positions ``[t*G, min((t+1)*G, N))`` of the
/// epoch's order (:class:`Permutation` with the same seed, epoch and kind),
/// so every sample is in exactly one step, nothing padded or dropped, and a
/// step's samples do not depend on the world size W. Within a step, rank
/// ``r`` gets the step's positions ``r, r + W, ...``. For a micro-batch
/// size b every rank gets the same number of micro-batches in a step; a
/// rank with too few samples fills them with zero-weight copies. A real
/// sample of step ``t`` weighs ``W / n_t`` (``n_t`` real samples in the
/// step), so ``(w * per_sample_loss).sum()``, accumulated over a step's
/// micro-batches and averaged by DDP, is the mean over the step's samples.
///
/// An ``EpochPlan`` is a :class:`PlanLayout` (its steps, shares, cuts and
/// weights) with an order; ``plan.rank(rank, world_size)`` is one rank's
/// view of it (:class:`RankPlan`), and ``plan.spec`` the
/// :class:`PlanSpec` it is the epoch ``epoch`` of.
///
/// Args:
///     num_samples: N (int in [0, 2**63 - 1]), or an index space, as for
///         :class:`PlanSpec`.
///     global_batch_size: G, samples per optimizer step over all ranks
///         (int in [1, 2**63 - 1]).
///     seed: the order's seed, as for :class:`Permutation`.
///     epoch: the order's epoch, as for :class:`Permutation`.
///     kind: the order's kind, as for :class:`Permutation` (a name or a
///         :class:`Chunked`).
///     drop_last: drop a short last step.
///     cursor: samples of the epoch already consumed, at a step boundary: a
///         multiple of G, or the end of the epoch (N, or with drop_last the
///         end of the last full step). The plan starts at the next step.
///         Resuming at any world size covers the rest of the epoch exactly
///         once.
///     tokens: a token plan's :class:`Tokens` (lengths, loss tokens, cost,
///         normalization): each step is dealt balanced by cost, cut into
///         micro-batches under ``max_tokens`` and weighted by tokens (see
///         the token plans guide).
///
/// Raises:
///     TypeError: an argument of the wrong type (None too, for seed, epoch,
///         kind, drop_last and cursor).
///     ValueError: a value outside its range (the cursor off a step
///         boundary, say), or a kind as :class:`Permutation` rejects; token
///         arrays of another size than the store. A negative length is
///         named when its step is first read.
///     OverflowError: kind="uniform" with more ids than memory can hold, at
///         the first call that needs ids (its permutation is built then: a
///         plan used for its layout, its state or ids read from plan files
///         never holds it).
///
/// Examples:
///     >>> plan = EpochPlan(9, 4)
///     >>> plan.num_steps
///     3
///     >>> plan.step_indices(0, 0, 2).tolist(), plan.step_indices(0, 1, 2).tolist()
///     ([7, 2], [3, 1])
///     >>> plan.rank(1, 2).step_micro_batches(2, 2)  # no sample left: a filler
///     [(array([8]), array([0.]))]
///     >>> EpochPlan.from_state_dict(plan.at_step(2).state_dict()).start_step
///     2
#[pyclass(module = "epochplan._native", extends = PlanLayout, frozen)]
#[derive(Debug)]
pub struct EpochPlan {
    /// The parameters the plan is of (shared with the plans `at_step` makes).
    spec: Py<PlanSpec>,
    /// The base class's layout, kept here too for the methods of this class.
    layout: Layout,
    seed: u64,
    epoch: u64,
    kind: Kind,
    /// The epoch's order, built when a method first needs ids: O(1) for every
    /// kind but `uniform`, whose table of N ids waits until then, so that a
    /// plan used for its layout, its state or ids read from plan files holds
    /// none. Shared with the plans `at_step` makes of this one.
    order: Arc<OnceLock<Order>>,
    /// A token plan's arrays (the spec's).
    tokens: Option<Arc<TokenArrays>>,
    /// The index space (shared with the plans `at_step` makes).
    space: Arc<PlanSpace>,
}

/// A plan's state dict (see [`state`]).
pub(crate) fn state_of<'py>(
    plan: PyClassInitializer<EpochPlan>,
    py: Python<'py>,
) -> PyResult<Bound<'py, PyDict>> {
    let plan = Bound::new(py, plan)?;
    state::to_dict(plan.get(), py)
}

/// The plan a state describes (see [`state`]); `label` names the document
/// in messages ("state" or "spec").
pub(crate) fn plan_of_state(
    py: Python<'_>,
    state: &Bound<'_, PyAny>,
    space: Option<&Bound<'_, PyAny>>,
    lengths: Option<&Bound<'_, PyAny>>,
    loss_tokens: Option<&Bound<'_, PyAny>>,
    label: &str,
) -> PyResult<Py<EpochPlan>> {
    state::from_dict(py, state, space, lengths, loss_tokens, label)
}

impl EpochPlan {
    /// The plan's order, built on first use (the GIL released meanwhile).
    fn order(&self, py: Python<'_>) -> PyResult<&Order> {
        if let Some(order) = self.order.get() {
            return Ok(order);
        }
        let (n, seed, epoch, kind) = (self.layout.num_samples(), self.seed, self.epoch, self.kind);
        let built = py.detach(|| Order::new(n, seed, epoch, kind)).py()?;
        // Another thread may have built it meanwhile: the same order.
        Ok(self.order.get_or_init(|| built))
    }

    /// The layout and the order as one core plan (the order shared, not copied).
    pub(crate) fn plan(&self, py: Python<'_>) -> PyResult<Plan> {
        Plan::from_parts(self.layout, self.order(py)?.clone())
            .and_then(|p| p.with_space(self.space.space.clone()))
            .py()
    }

    /// The plan's layout, space and kind of order.
    pub(crate) fn parts(&self) -> (&Layout, &Space, Kind) {
        (&self.layout, &self.space.space, self.kind)
    }

    /// The plan's order (built now when it is a uniform one not built yet).
    pub(crate) fn order_of(&self, py: Python<'_>) -> PyResult<Order> {
        self.order(py).cloned()
    }

    /// A token plan's arrays.
    pub(crate) fn token_arrays(&self) -> Option<&Arc<TokenArrays>> {
        self.tokens.as_ref()
    }

    /// The epoch the plan is of.
    pub(crate) fn epoch_number(&self) -> u64 {
        self.epoch
    }

    /// The spec the plan is of.
    pub(crate) fn spec(&self) -> &Py<PlanSpec> {
        &self.spec
    }

    /// The `epoch` and `cursor` arguments of a plan of `given`: a
    /// `MixtureEpoch` fixes the epoch.
    pub(crate) fn epoch_args(
        given: &Given,
        epoch: &Keyword<'_>,
        cursor: &Keyword<'_>,
    ) -> PyResult<(u64, u64)> {
        let number = match epoch.given() {
            Some(e) => int_arg(e, "epoch", 0, MAX_U64)?,
            None => 0,
        };
        let number = match (given.fixed_epoch(), epoch.given()) {
            (Some(fixed), Some(_)) if fixed != number => {
                return Err(PyValueError::new_err(format!(
                    "epoch must be the MixtureEpoch's ({fixed}), got {number}: give the \
                     Mixture to plan another epoch"
                )))
            }
            (Some(fixed), _) => fixed,
            (None, _) => number,
        };
        let cursor = match cursor.given() {
            Some(c) => int_arg(c, "cursor", 0, MAX_I64)?,
            None => 0,
        };
        Ok((number, cursor))
    }

    /// The plan of `spec` for `epoch` from `cursor` on; `consumed` continues
    /// a mixture's sources (a state's).
    pub(crate) fn from_spec(
        py: Python<'_>,
        spec: &Bound<'_, PlanSpec>,
        epoch: u64,
        cursor: u64,
        consumed: Option<Vec<u64>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let s = spec.get();
        let layout = s.layout.with_cursor(cursor).py()?;
        let space = PlanSpace::new(py, &s.given, s.seed, epoch, consumed)?;
        let order = Arc::new(OnceLock::new());
        if s.kind != Kind::Uniform {
            let _ = order.set(Order::new(layout.num_samples(), s.seed, epoch, s.kind).py()?);
        }
        Ok(
            PyClassInitializer::from(PlanLayout::of(layout)).add_subclass(EpochPlan {
                spec: spec.clone().unbind(),
                layout,
                seed: s.seed,
                epoch,
                kind: s.kind,
                order,
                tokens: s.tokens.as_ref().map(|t| Arc::clone(&t.arrays)),
                space: Arc::new(space),
            }),
        )
    }

    /// The same plan with another layout (another cursor).
    fn with_layout(&self, py: Python<'_>, layout: Layout) -> PyClassInitializer<Self> {
        PyClassInitializer::from(PlanLayout::of(layout)).add_subclass(EpochPlan {
            spec: self.spec.clone_ref(py),
            layout,
            seed: self.seed,
            epoch: self.epoch,
            kind: self.kind,
            order: Arc::clone(&self.order),
            tokens: self.tokens.clone(),
            space: Arc::clone(&self.space),
        })
    }
}

#[pymethods]
impl EpochPlan {
    #[new]
    #[pyo3(
        signature = (num_samples, global_batch_size, *, seed = Keyword::Omitted,
                     epoch = Keyword::Omitted, kind = Keyword::Omitted,
                     drop_last = Keyword::Omitted, cursor = Keyword::Omitted, tokens = None),
        text_signature = "(num_samples, global_batch_size, *, seed=0, epoch=0, kind='cipher', drop_last=False, cursor=0, tokens=None)"
    )]
    #[allow(clippy::too_many_arguments)]
    fn new(
        num_samples: &Bound<'_, PyAny>,
        global_batch_size: &Bound<'_, PyAny>,
        seed: Keyword<'_>,
        epoch: Keyword<'_>,
        kind: Keyword<'_>,
        drop_last: Keyword<'_>,
        cursor: Keyword<'_>,
        tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let py = num_samples.py();
        let given = Given::parse(num_samples)?;
        let (epoch, cursor) = Self::epoch_args(&given, &epoch, &cursor)?;
        let spec = PlanSpec::build(
            py,
            given,
            global_batch_size,
            &seed,
            &kind,
            &drop_last,
            tokens,
        )?;
        Self::from_spec(py, &Bound::new(py, spec)?, epoch, cursor, None)
    }

    /// The plan's parameters (a :class:`PlanSpec`): ``plan.spec.plan(e)``
    /// is this plan's epoch ``e``.
    #[getter(spec)]
    fn spec_value(&self, py: Python<'_>) -> Py<PlanSpec> {
        self.spec.clone_ref(py)
    }

    /// A token plan's :class:`Tokens`, or None.
    #[getter]
    fn tokens(&self, py: Python<'_>) -> Option<Py<Tokens>> {
        self.spec
            .get()
            .tokens
            .as_ref()
            .map(|t| t.value.clone_ref(py))
    }

    /// Rank ``rank`` of ``world_size``'s view of the plan (a
    /// :class:`RankPlan`): its ids, steps and micro-batches, the rank
    /// checked once.
    fn rank(
        slf: &Bound<'_, Self>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<RankPlan> {
        let (rank, world_size) = rank_args(rank, world_size)?;
        Ok(RankPlan::new(slf.clone().unbind(), rank, world_size))
    }

    /// Samples longer than this are read cut to it (the tokens after the
    /// first ``max_length``), or None.
    #[getter]
    fn max_length(&self) -> Option<u64> {
        self.tokens.as_ref().and_then(|t| t.max_length)
    }

    /// The plan's samples longer than ``max_tokens`` (after any cut to
    /// ``max_length``): their ids, ascending, and their lengths. One pass
    /// over the lengths in id order the first time a cap is asked for
    /// (``micro_batches`` asks before its first batch, and refuses a plan
    /// that has any), then kept.
    fn oversize<'py>(
        &self,
        py: Python<'py>,
        max_tokens: &Bound<'py, PyAny>,
    ) -> PyResult<IdsAndLengths<'py>> {
        let Some(tokens) = &self.tokens else {
            return Err(PyValueError::new_err(
                "this plan has no lengths: give EpochPlan(..., lengths=...)",
            ));
        };
        let cap = int_arg(max_tokens, "max_tokens", 1, MAX_I64)?;
        let report = tokens.oversize(py, cap, &self.space.space)?;
        let ids: Vec<i64> = report.ids.iter().map(|&i| i as i64).collect();
        let lengths: Vec<i64> = report
            .lengths
            .iter()
            .map(|&l| i64::try_from(l).unwrap_or(i64::MAX))
            .collect();
        Ok((ids.into_pyarray(py), lengths.into_pyarray(py)))
    }

    /// The plan's lengths (tokens per sample, the array given), or None.
    #[getter]
    fn lengths<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.tokens
            .as_ref()
            .map(|t| t.lengths.bind(py).clone().into_any())
    }

    /// The plan's loss tokens per sample (the array given), or None (the
    /// lengths count, or no lengths).
    #[getter]
    fn loss_tokens<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.tokens
            .as_ref()
            .and_then(|t| t.loss_tokens.as_ref())
            .map(|l| l.bind(py).clone().into_any())
    }

    /// The cost model of a token plan: "tokens" or (a, b); None without lengths.
    #[getter]
    fn cost<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyAny>>> {
        match self.layout.dealing() {
            Dealing::Balanced { cost } => cost_value(py, cost).map(Some),
            Dealing::Strided => Ok(None),
        }
    }

    /// What a real sample's weight divides by: "tokens" or "samples" (a plan
    /// without lengths: "samples").
    #[getter]
    fn loss_normalization(&self) -> &'static str {
        normalization_name(self.layout.normalization())
    }

    /// ``T_t``: the loss tokens of step ``step`` over all ranks (a token plan).
    fn step_tokens(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<u128> {
        let step = step_arg(step, self.layout.num_steps(), false)?;
        let plan = self.plan(py)?;
        Ok(self.samples(py, &plan, step)?.step_tokens())
    }

    /// The plan's layout: its steps, shares, micro-batch cuts and weights,
    /// without the order (a :class:`PlanLayout`).
    #[getter]
    fn layout(&self) -> PlanLayout {
        PlanLayout::of(self.layout)
    }

    /// The seed of the epoch's order.
    #[getter]
    fn seed(&self) -> u64 {
        self.seed
    }

    /// The epoch.
    #[getter]
    fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The kind of order.
    #[getter]
    fn kind(&self) -> &'static str {
        self.kind.name()
    }

    /// Samples per chunk (kind="chunked"), else None.
    #[getter]
    fn chunk_size(&self) -> Option<u64> {
        kind_params(self.kind)[0]
    }

    /// Consecutive chunks shuffled together (kind="chunked"), else None.
    #[getter]
    fn preload_nchunks(&self) -> Option<u64> {
        kind_params(self.kind)[1]
    }

    /// Rank `rank`'s sample ids in step `step` (int64 array); as
    /// ``plan.rank(rank, world_size).step_indices(step)``.
    fn step_indices<'py>(
        slf: &Bound<'py, Self>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::rank(slf, rank, world_size)?
            .into_pyobject(slf.py())?
            .call_method1("step_indices", (step,))
    }

    /// The source of each of rank `rank`'s samples in step `step`, in the
    /// order of ``step_indices`` (int64 array): the mixture's source number
    /// for a plan over a Mixture (for per-source loss logging), 0 for any
    /// other plan.
    fn sources<'py>(
        slf: &Bound<'py, Self>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        Self::rank(slf, rank, world_size)?
            .into_pyobject(slf.py())?
            .call_method1("sources", (step,))
    }

    /// The plan's index space: the Selection or MixtureEpoch it permutes,
    /// or None for ``range(num_samples)``.
    #[getter]
    fn space<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.space.object.as_ref().map(|o| o.bind(py).clone())
    }

    /// All of rank `rank`'s sample ids from start_step on, in step order;
    /// as ``plan.rank(rank, world_size).indices()``.
    fn rank_indices<'py>(
        &self,
        py: Python<'py>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (rank, w) = rank_args(rank, world_size)?;
        Ok(self.rank_ids(py, rank, w)?.into_pyarray(py))
    }

    /// Rank `rank`'s number of real samples from start_step on.
    fn rank_size(
        &self,
        py: Python<'_>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let (rank, w) = rank_args(rank, world_size)?;
        self.rank_len(py, rank, w)
    }

    /// Micro-batches of every rank in step `step` (a token plan: under
    /// micro_batch_size and/or max_tokens).
    #[pyo3(signature = (step, world_size, micro_batch_size = None, *, max_tokens = None))]
    fn num_micro_batches(
        &self,
        py: Python<'_>,
        step: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let step = step_arg(step, self.layout.num_steps(), false)?;
        let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
        let caps = self.caps(micro_batch_size, max_tokens)?;
        self.step_count(py, step, w, caps)
    }

    /// Micro-batches every rank gets from start_step on (the same for all
    /// ranks). A token plan counts them step by step (it reads every step's
    /// lengths).
    #[pyo3(signature = (world_size, micro_batch_size = None, *, max_tokens = None))]
    fn total_micro_batches(
        &self,
        py: Python<'_>,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<u64> {
        let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
        match self.caps(micro_batch_size, max_tokens)? {
            MicroCaps::Samples(b) => self.layout.total_micro_batches(w, b).py(),
            caps => {
                let mut total = 0;
                for step in self.layout.start_step()..self.layout.num_steps() {
                    total += self.step_count(py, step, w, caps)?;
                }
                Ok(total)
            }
        }
    }

    /// The position in this epoch of each sample id (store ids, a 1-d
    /// integer array or one id), -1 where the epoch does not hold it: the
    /// inverse of the plan's order and space, without building the epoch
    /// (see :meth:`locate`).
    fn positions_of<'py>(
        &self,
        py: Python<'py>,
        sample_ids: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (ids, shape) =
            crate::args::int64_array(sample_ids, "sample_ids")?.ok_or_else(|| {
                PyValueError::new_err("sample_ids must be sample ids, got a value outside int64")
            })?;
        let plan = self.plan(py)?;
        let positions = py.detach(|| plan.positions_of(&ids)).py()?;
        positions.into_pyarray(py).call_method1("reshape", (shape,))
    }

    /// Where sample ids are in this epoch, without building it.
    ///
    /// Args:
    ///     sample_ids: store ids (a 1-d integer array, or one id).
    ///     world_size: the ranks the epoch is dealt to.
    ///     micro_batch_size, max_tokens: the micro-batch caps, as for
    ///         :meth:`micro_batches`.
    ///
    /// Returns:
    ///     ``(positions, steps, ranks, micro_batches)``: int64 arrays of the
    ///     ids' shape, -1 for an id the epoch does not hold (outside its
    ///     space, or in the short step ``drop_last`` drops). The step counts
    ///     from the epoch's start, whatever the plan's cursor. See the
    ///     offline-plans guide for the cost of each kind and space.
    ///
    /// Examples:
    ///     >>> plan = EpochPlan(10, 4, seed=1)
    ///     >>> sample = int(plan.step_indices(2, 1, 2)[0])
    ///     >>> pos, step, rank, mb = plan.locate([sample], 2, 1)
    ///     >>> int(step[0]), int(rank[0]), int(mb[0])
    ///     (2, 1, 0)
    #[pyo3(signature = (sample_ids, world_size, micro_batch_size = None, *, max_tokens = None))]
    fn locate<'py>(
        &self,
        py: Python<'py>,
        sample_ids: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
        micro_batch_size: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyTuple>> {
        let w = int_arg(world_size, "world_size", 1, MAX_I64)?;
        let caps = self.caps(micro_batch_size, max_tokens)?;
        let (ids, shape) =
            crate::args::int64_array(sample_ids, "sample_ids")?.ok_or_else(|| {
                PyValueError::new_err("sample_ids must be sample ids, got a value outside int64")
            })?;
        let plan = self.plan(py)?;
        let located = self.locate_ids(py, &plan, &ids, w, caps)?;
        let shaped = |values: Vec<i64>| -> PyResult<Bound<'py, PyAny>> {
            values
                .into_pyarray(py)
                .call_method1("reshape", (shape.clone(),))
        };
        PyTuple::new(
            py,
            [
                shaped(located.positions)?,
                shaped(located.steps)?,
                shaped(located.ranks)?,
                shaped(located.micro_batches)?,
            ],
        )
    }

    /// The micro-batches of one step: a list of (indices, weights) pairs;
    /// as ``plan.rank(rank, world_size).step_micro_batches(step, ...)``.
    #[pyo3(signature = (step, rank, world_size, micro_batch_size = None, *, max_tokens = None))]
    fn step_micro_batches<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
        micro_batch_size: Option<&Bound<'py, PyAny>>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let step = step_arg(step, self.layout.num_steps(), false)?;
        let at = rank_args(rank, world_size)?;
        let caps = self.caps(micro_batch_size, max_tokens)?;
        self.step_micro_list(py, step, at, caps)
    }

    /// Cuts `ids` (rank `rank`'s real samples of step `step`, e.g. read from a
    /// plan file) into the step's micro-batches: a list of (indices, weights).
    /// A token plan deals the step itself and checks that `ids` are the
    /// rank's share.
    #[pyo3(signature = (step, rank, world_size, micro_batch_size, ids, *, max_tokens = None))]
    #[allow(clippy::too_many_arguments)]
    fn split_step<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
        micro_batch_size: Option<&Bound<'py, PyAny>>,
        ids: &Bound<'py, PyAny>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        let at = rank_args(rank, world_size)?;
        self.split_ids(py, step, at, ids, (micro_batch_size, max_tokens))
    }

    /// Where step `step` starts inside rank `rank`'s share of the whole epoch
    /// (an offset into `at_step(0).rank_indices(rank, world_size)`).
    fn rank_step_offset(
        &self,
        py: Python<'_>,
        step: &Bound<'_, PyAny>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        let step = step_arg(step, self.layout.num_steps(), true)?;
        let (rank, w) = rank_args(rank, world_size)?;
        self.step_offset(py, step, rank, w)
    }

    /// Yields, per step from start_step on, the list of that step's
    /// micro-batches as (indices, weights) pairs; every rank gets the same
    /// number of steps and of micro-batches per step.
    /// A token plan caps each micro-batch by micro_batch_size samples and/or
    /// max_tokens tokens (at least one).
    #[pyo3(signature = (rank, world_size, micro_batch_size = None, *, max_tokens = None))]
    fn micro_batches(
        slf: Bound<'_, Self>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
        micro_batch_size: Option<&Bound<'_, PyAny>>,
        max_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<MicroBatches> {
        let (rank, w) = rank_args(rank, world_size)?;
        let caps = slf.get().caps(micro_batch_size, max_tokens)?;
        Ok(MicroBatches::new(slf.unbind(), rank, w, caps))
    }

    /// The same plan started after `step` steps of the epoch.
    fn at_step(&self, py: Python<'_>, step: &Bound<'_, PyAny>) -> PyResult<Py<Self>> {
        let layout = layout::at_step(&self.layout, step)?;
        Py::new(py, self.with_layout(py, layout))
    }

    /// The constant-size, world-size independent state (JSON-serialisable).
    fn state_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        state::to_dict(self, py)
    }

    /// The plan a state dict describes; rejects unknown format versions,
    /// missing or unknown keys and inconsistent values. A token plan's state
    /// needs its arrays again (``lengths=``, ``loss_tokens=``): the state
    /// holds their digests and refuses other arrays.
    #[classmethod]
    #[pyo3(signature = (state, *, space = None, lengths = None, loss_tokens = None))]
    fn from_state_dict(
        cls: &Bound<'_, pyo3::types::PyType>,
        state: &Bound<'_, PyAny>,
        space: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
        loss_tokens: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<Self>> {
        state::from_dict(cls.py(), state, space, lengths, loss_tokens, "state")
    }

    fn __reduce__<'py>(
        slf: &Bound<'py, Self>,
    ) -> PyResult<(Bound<'py, PyAny>, Bound<'py, PyTuple>)> {
        let py = slf.py();
        let mut from_state = slf.get_type().getattr("from_state_dict")?;
        let state = slf.get().state_dict(py)?;
        let kwargs = PyDict::new(py);
        if let Some(tokens) = &slf.get().tokens {
            // The arrays travel beside the state (pickled as numpy pickles them).
            kwargs.set_item("lengths", tokens.lengths.bind(py))?;
            kwargs.set_item(
                "loss_tokens",
                tokens.loss_tokens.as_ref().map(|l| l.bind(py)),
            )?;
        }
        if let Some(space) = &slf.get().space.object {
            kwargs.set_item("space", space.bind(py))?;
        }
        if !kwargs.is_empty() {
            from_state = py
                .import("functools")?
                .getattr("partial")?
                .call((from_state,), Some(&kwargs))?;
        }
        Ok((from_state, PyTuple::new(py, [state])?))
    }

    fn __eq__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        // Another plan is equal when its state is (parameters, epoch, cursor,
        // a mixture's consumed counts, spaces and arrays by digest); a
        // plain layout is not a plan.
        let Ok(other) = other.cast::<EpochPlan>() else {
            return Ok(if other.is_instance_of::<PlanLayout>() {
                false.into_pyobject(py)?.to_owned().into_any().unbind()
            } else {
                py.NotImplemented()
            });
        };
        let same = self.layout == other.get().layout
            && self.epoch == other.get().epoch
            && self.state_dict(py)?.eq(other.get().state_dict(py)?)?;
        Ok(same.into_pyobject(py)?.to_owned().into_any().unbind())
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (self.layout, self.seed, self.epoch, self.kind).hash(&mut h);
        h.finish()
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        let p = &self.layout;
        let kind = crate::spec::kind_object(py, self.kind)?;
        let tokens = match self.spec.get().tokens.as_ref() {
            Some(t) => format!(", tokens={}", t.value.bind(py).repr()?),
            None => String::new(),
        };
        let space = match &self.space.space {
            Space::Range => String::new(),
            Space::Selection(s) => format!(", space=<Selection of {} ids>", s.len()),
            Space::Mixture { epoch, .. } => format!(
                ", space=<MixtureEpoch of {} sources, {} ids>",
                epoch.mixture().num_sources(),
                epoch.len()
            ),
        };
        Ok(format!(
            "EpochPlan(num_samples={}, global_batch_size={}, seed={}, epoch={}, kind={}\
             {space}, drop_last={}, cursor={}{tokens}, num_steps={})",
            p.num_samples(),
            p.global_batch_size(),
            self.seed,
            self.epoch,
            kind.bind(py).repr()?,
            if p.drop_last() { "True" } else { "False" },
            p.cursor(),
            p.num_steps()
        ))
    }
}
