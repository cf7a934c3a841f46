//! `EpochPlan` and its micro-batch iterator.

use crate::args::{int_arg, rank_args, sample_ids_arg, step_arg, Keyword, MAX_I64};
use crate::errors::IntoPyResult;
use crate::layout::{self, batch_list, flags_arg, PlanLayout};
use crate::lengths::{cost_arg, cost_value, normalization_arg, samples_cap_arg, TokenArrays};
use crate::permutation::{kind_params, order_args};
use epochplan_core::dealing::Dealing;
use epochplan_core::plan::Plan;
use epochplan_core::space::Space;
use epochplan_core::tokens::{Caps, Cost, Normalization};
use epochplan_core::Layout;
use epochplan_core::{Kind, Order};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::sync::{Arc, OnceLock};

mod locate;
mod micro;
pub(crate) mod space;
mod state;
mod tokens;

pub use micro::MicroBatches;
use space::{Given, PlanSpace};

/// A token plan's optional arguments: lengths, loss_tokens, cost and
/// loss_normalization.
type TokenArgs<'a, 'py> = (
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
    Option<&'a Bound<'py, PyAny>>,
);

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
/// Args:
///     num_samples: N (int in [0, 2**63 - 1]).
///     global_batch_size: G, samples per optimizer step over all ranks
///         (int in [1, 2**63 - 1]).
///     seed: the order's seed, as for :class:`Permutation`.
///     epoch: the order's epoch, as for :class:`Permutation`.
///     kind: the order's kind, as for :class:`Permutation`.
///     chunk_size: as for :class:`Permutation` (kind="chunked").
///     preload_nchunks: as for :class:`Permutation` (kind="chunked").
///     drop_last: drop a short last step.
///     cursor: samples of the epoch already consumed, at a step boundary: a
///         multiple of G, or the end of the epoch (N, or with drop_last the
///         end of the last full step). The plan starts at the next step.
///         Resuming at any world size covers the rest of the epoch exactly
///         once.
///     lengths: tokens per sample (a 1-d integer numpy array or np.memmap of
///         N entries, any integer dtype): a token plan. The array is
///         borrowed, never copied whole; a step reads its samples' entries.
///         The steps stay the same; each is dealt balanced by cost, cut into
///         micro-batches under ``max_tokens`` and weighted by tokens (see the
///         token plans guide).
///     loss_tokens: tokens per sample that count in the loss (as lengths;
///         default: lengths).
///     cost: what a sample costs by its length L: ``"tokens"`` (L, default)
///         or ``(a, b)`` for ``a*L + b*L**2``.
///     loss_normalization: ``"tokens"`` (default with lengths: weights
///         ``W / T_t`` for each sample's summed token loss) or ``"samples"``
///         (``W / n_t`` for each sample's mean loss).
///
/// Raises:
///     TypeError: an argument of the wrong type (None too, for seed, epoch,
///         kind, drop_last and cursor; lengths of a non-integer dtype).
///     ValueError: a value outside its range (the cursor off a step
///         boundary, say), or a kind as :class:`Permutation` rejects; lengths
///         of another size or dimension; loss_tokens, cost or
///         loss_normalization without lengths. A negative length is named
///         when its step is first read.
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
///     >>> plan.step_micro_batches(2, 1, 2, 2)  # rank 1 has no sample left: a filler
///     [(array([8]), array([0.]))]
///     >>> EpochPlan.from_state_dict(plan.at_step(2).state_dict()).start_step
///     2
#[pyclass(module = "epochplan._native", frozen)]
#[derive(Debug)]
pub struct EpochPlan {
    layout: Layout,
    seed: u64,
    epoch: u64,
    kind: Kind,
    /// The epoch's order, built when a method first needs ids: O(1) for every
    /// kind but `uniform`, whose table of N ids waits until then, so that a
    /// plan used for its layout, its state or ids read from plan files holds
    /// none. Shared with the plans `at_step` makes of this one.
    order: Arc<OnceLock<Order>>,
    /// A token plan's arrays (shared with the plans `at_step` makes).
    tokens: Option<Arc<TokenArrays>>,
    /// The index space (shared with the plans `at_step` makes).
    space: Arc<PlanSpace>,
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

    /// The plan of `given` (an int or an index space; a mixture continues
    /// its sources from `consumed` when given), the other arguments as
    /// `EpochPlan(...)` takes them.
    #[allow(clippy::too_many_arguments)]
    fn build(
        py: Python<'_>,
        given: &Given,
        consumed: Option<Vec<u64>>,
        global_batch_size: &Bound<'_, PyAny>,
        seed: Keyword<'_>,
        epoch: Keyword<'_>,
        kind: Keyword<'_>,
        drop_last: Keyword<'_>,
        cursor: Keyword<'_>,
        chunk_size: Option<&Bound<'_, PyAny>>,
        preload_nchunks: Option<&Bound<'_, PyAny>>,
        tokens: TokenArgs<'_, '_>,
    ) -> PyResult<Self> {
        let positions = match given {
            Given::Range(n) => *n,
            Given::Selection(sel) => sel.bind(py).len()? as u64,
            Given::Mixture { mixture, .. } => mixture.bind(py).len()? as u64,
        };
        // A mixture's epoch keeps its stratified arrangement (each step
        // shuffled before dealing): its order is the identity. One rule
        // (docs/concepts/index-spaces.md): every API's default kind,
        // "cipher", and "identity" are taken; any other kind is refused.
        let mut kind = kind;
        if given.is_mixture() {
            if let Some(k) = kind.given() {
                match k.extract::<String>().ok().as_deref() {
                    Some("identity") | Some("cipher") => kind = Keyword::Omitted,
                    _ => {
                        return Err(PyValueError::new_err(format!(
                            "kind does not apply to a plan over a Mixture, got kind={}: its \
                             order is the mixture's stratified arrangement (each step \
                             shuffled before dealing; plan.kind is 'identity'); leave kind \
                             at its default 'cipher' or give 'identity'",
                            k.repr()?
                        )))
                    }
                }
            }
        }
        let default_kind = if given.is_mixture() {
            "identity"
        } else {
            "cipher"
        };
        let (n, seed, epoch_number, kind) = order_args(
            &positions.into_pyobject(py)?.into_any(),
            &seed,
            &epoch,
            &kind,
            chunk_size,
            preload_nchunks,
            default_kind,
        )?;
        let epoch_number = match (given.fixed_epoch(), epoch.given()) {
            (Some(fixed), Some(_)) if fixed != epoch_number => {
                return Err(PyValueError::new_err(format!(
                    "epoch must be the MixtureEpoch's ({fixed}), got {epoch_number}: give the \
                     Mixture to plan another epoch"
                )))
            }
            (Some(fixed), _) => fixed,
            (None, _) => epoch_number,
        };
        let space = PlanSpace::new(py, given, seed, epoch_number, consumed)?;
        let store = space.space.store_size(n);
        let g = int_arg(global_batch_size, "global_batch_size", 1, MAX_I64)?;
        let (drop_last, cursor) = flags_arg(&drop_last, &cursor)?;
        let mut layout = Layout::new(n, g, drop_last, cursor).py()?;
        let (lengths, loss_tokens, cost, loss_normalization, max_length) = tokens;
        let max_length = crate::args::opt_int_arg(max_length, "max_length", 1, MAX_I64)?;
        let cost = cost_arg(cost)?;
        let normalization = normalization_arg(loss_normalization)?;
        let tokens = match lengths.filter(|l| !l.is_none()) {
            Some(lengths) => {
                let arrays =
                    TokenArrays::new(lengths, loss_tokens.filter(|l| !l.is_none()), store)?
                        .truncated_to(max_length);
                let dealing = Dealing::Balanced {
                    cost: cost.unwrap_or(Cost::Tokens),
                };
                let normalization = normalization.unwrap_or(Normalization::Tokens);
                layout = layout.with_dealing(dealing, normalization).py()?;
                Some(Arc::new(arrays))
            }
            None => {
                for (name, given) in [
                    ("loss_tokens", loss_tokens.is_some_and(|l| !l.is_none())),
                    ("loss_normalization", normalization.is_some()),
                    ("cost", cost.is_some_and(|c| c != Cost::Tokens)),
                    ("max_length", max_length.is_some()),
                ] {
                    if given {
                        return Err(PyValueError::new_err(format!(
                            "{name} needs lengths: give lengths= (tokens per sample) too"
                        )));
                    }
                }
                None
            }
        };
        let order = Arc::new(OnceLock::new());
        if kind != Kind::Uniform {
            // O(1) to build: built now, so that every error comes from here.
            let _ = order.set(Order::new(n, seed, epoch_number, kind).py()?);
        }
        Ok(Self {
            layout,
            seed,
            epoch: epoch_number,
            kind,
            order,
            tokens,
            space: Arc::new(space),
        })
    }
}

#[pymethods]
impl EpochPlan {
    #[new]
    #[pyo3(
        signature = (num_samples, global_batch_size, *, seed = Keyword::Omitted,
                     epoch = Keyword::Omitted, kind = Keyword::Omitted,
                     drop_last = Keyword::Omitted, cursor = Keyword::Omitted,
                     chunk_size = None, preload_nchunks = None, lengths = None,
                     loss_tokens = None, cost = None, loss_normalization = None,
                     max_length = None),
        text_signature = "(num_samples, global_batch_size, *, seed=0, epoch=0, kind='cipher', drop_last=False, cursor=0, chunk_size=None, preload_nchunks=None, lengths=None, loss_tokens=None, cost='tokens', loss_normalization=None, max_length=None)"
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
        chunk_size: Option<&Bound<'_, PyAny>>,
        preload_nchunks: Option<&Bound<'_, PyAny>>,
        lengths: Option<&Bound<'_, PyAny>>,
        loss_tokens: Option<&Bound<'_, PyAny>>,
        cost: Option<&Bound<'_, PyAny>>,
        loss_normalization: Option<&Bound<'_, PyAny>>,
        max_length: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let py = num_samples.py();
        let given = Given::parse(num_samples)?;
        Self::build(
            py,
            &given,
            None,
            global_batch_size,
            seed,
            epoch,
            kind,
            drop_last,
            cursor,
            chunk_size,
            preload_nchunks,
            (lengths, loss_tokens, cost, loss_normalization, max_length),
        )
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
        match self.layout.normalization() {
            Normalization::Tokens => "tokens",
            Normalization::Samples => "samples",
        }
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
        kind_params(self.kind).0
    }

    /// Consecutive chunks shuffled together (kind="chunked"), else None.
    #[getter]
    fn preload_nchunks(&self) -> Option<u64> {
        kind_params(self.kind).1
    }

    /// Whether the short last step is dropped.
    #[getter]
    fn drop_last(&self) -> bool {
        self.layout.drop_last()
    }

    /// Samples consumed before this plan starts (a step boundary).
    #[getter]
    fn cursor(&self) -> u64 {
        self.layout.cursor()
    }

    /// Steps in the whole epoch.
    #[getter]
    fn num_steps(&self) -> u64 {
        self.layout.num_steps()
    }

    /// The first step this plan yields: cursor // global_batch_size, or
    /// num_steps once the cursor is at the end of the epoch.
    #[getter]
    fn start_step(&self) -> u64 {
        self.layout.start_step()
    }

    /// Steps this plan yields: num_steps - start_step.
    #[getter]
    fn remaining_steps(&self) -> u64 {
        self.layout.remaining_steps()
    }

    /// Real samples in step `step`, over all ranks.
    fn step_size(&self, step: &Bound<'_, PyAny>) -> PyResult<u64> {
        layout::step_size(&self.layout, step)
    }

    /// Rank `rank`'s sample ids in step `step` (int64 array).
    fn step_indices<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        Ok(self
            .rank_step(py, (step, rank, world_size), Of::Ids)?
            .into_pyarray(py))
    }

    /// The source of each of rank `rank`'s samples in step `step`, in the
    /// order of ``step_indices`` (int64 array): the mixture's source number
    /// for a plan over a Mixture (for per-source loss logging), 0 for any
    /// other plan.
    fn sources<'py>(
        &self,
        py: Python<'py>,
        step: &Bound<'py, PyAny>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        Ok(self
            .rank_step(py, (step, rank, world_size), Of::Sources)?
            .into_pyarray(py))
    }

    /// The plan's index space: the Selection or MixtureEpoch it permutes,
    /// or None for ``range(num_samples)``.
    #[getter]
    fn space<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyAny>> {
        self.space.object.as_ref().map(|o| o.bind(py).clone())
    }

    /// All of rank `rank`'s sample ids from start_step on, in step order.
    fn rank_indices<'py>(
        &self,
        py: Python<'py>,
        rank: &Bound<'py, PyAny>,
        world_size: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let (rank, w) = rank_args(rank, world_size)?;
        let plan = self.plan(py)?;
        let ids = if self.tokens.is_some() {
            let mut ids = Vec::new();
            for step in self.layout.start_step()..self.layout.num_steps() {
                let (samples, shares) = self.shares(py, &plan, step, w)?;
                ids.extend(self.layout.dealt_ids(&samples, &shares, rank).py()?);
            }
            ids
        } else {
            py.detach(|| plan.rank_indices(rank, w)).py()?
        };
        Ok(ids.into_pyarray(py))
    }

    /// Rank `rank`'s number of real samples from start_step on.
    fn rank_size(
        &self,
        py: Python<'_>,
        rank: &Bound<'_, PyAny>,
        world_size: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        if self.tokens.is_some() {
            let (rank, w) = rank_args(rank, world_size)?;
            let (first, last) = (self.layout.start_step(), self.layout.num_steps());
            return self.token_rank_len(py, first, last, rank, w);
        }
        layout::rank_size(&self.layout, rank, world_size)
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
    ///     >>> pos, step, rank, mb = plan.locate([int(plan.step_indices(2, 1, 2)[0])], 2, 1)
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

    /// The micro-batches of one step: a list of (indices, weights) pairs.
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
        let (rank, w) = rank_args(rank, world_size)?;
        let caps = self.caps(micro_batch_size, max_tokens)?;
        let batches = self.step_batches(py, &self.plan(py)?, step, rank, w, caps)?;
        batch_list(py, batches)
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
        micro_batch_size: &Bound<'py, PyAny>,
        ids: &Bound<'py, PyAny>,
        max_tokens: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyList>> {
        if self.tokens.is_some() {
            let step = step_arg(step, self.layout.num_steps(), false)?;
            let (rank, w) = rank_args(rank, world_size)?;
            // A sampler's per-step path: the sampler checked the whole
            // plan at construction; a step's own dealing names any sample
            // over the cap.
            let caps = self.caps_checked(Some(micro_batch_size), max_tokens, false)?;
            let plan = self.plan(py)?;
            let given = sample_ids_arg(ids, "ids", plan.store_size())?;
            let batches = self.step_batches(py, &plan, step, rank, w, caps)?;
            let (samples, shares) = self.shares(py, &plan, step, w)?;
            let share = self.layout.dealt_ids(&samples, &shares, rank).py()?;
            if share != given {
                return Err(PyValueError::new_err(format!(
                    "ids must be rank {rank}'s {} samples of step {step} in the plan's \
                     dealing order (step_indices({step}, {rank}, {w}))",
                    share.len()
                )));
            }
            return batch_list(py, batches);
        }
        if max_tokens.is_some_and(|m| !m.is_none()) {
            samples_cap_arg(None, max_tokens)?;
        }
        let plan = self.plan(py)?;
        layout::split_step(
            py,
            &self.layout,
            (step, rank, world_size, micro_batch_size, ids),
            plan.store_size(),
            |position| plan.id_at(position),
        )
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
        if self.tokens.is_some() {
            let step = step_arg(step, self.layout.num_steps(), true)?;
            let (rank, w) = rank_args(rank, world_size)?;
            return self.token_rank_len(py, 0, step, rank, w);
        }
        layout::rank_step_offset(&self.layout, step, rank, world_size)
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
    fn at_step(&self, step: &Bound<'_, PyAny>) -> PyResult<Self> {
        Ok(Self {
            layout: layout::at_step(&self.layout, step)?,
            seed: self.seed,
            epoch: self.epoch,
            kind: self.kind,
            order: Arc::clone(&self.order),
            tokens: self.tokens.clone(),
            space: Arc::clone(&self.space),
        })
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
    ) -> PyResult<Self> {
        state::from_dict(cls.py(), state, space, lengths, loss_tokens)
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

    fn __repr__(&self) -> String {
        let p = &self.layout;
        let extra = match kind_params(self.kind) {
            (Some(c), Some(w)) => format!(", chunk_size={c}, preload_nchunks={w}"),
            _ => String::new(),
        };
        let extra = match (&self.tokens, p.dealing()) {
            (Some(t), Dealing::Balanced { cost }) => {
                let cost = match cost {
                    Cost::Tokens => "'tokens'".to_string(),
                    Cost::Quadratic { a, b } => format!("({a:?}, {b:?})"),
                };
                format!(
                    "{extra}, lengths=<{} values>, loss_tokens={}, cost={cost}, \
                     loss_normalization='{}'",
                    p.num_samples(),
                    if t.loss_tokens.is_some() {
                        "<given>"
                    } else {
                        "None"
                    },
                    self.loss_normalization()
                )
            }
            _ => extra,
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
        format!(
            "EpochPlan(num_samples={}, global_batch_size={}, seed={}, epoch={}, kind='{}'{extra}\
             {space}, drop_last={}, cursor={}, num_steps={})",
            p.num_samples(),
            p.global_batch_size(),
            self.seed,
            self.epoch,
            self.kind.name(),
            if p.drop_last() { "True" } else { "False" },
            p.cursor(),
            p.num_steps()
        )
    }
}
