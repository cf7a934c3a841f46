//! Index spaces: the sequence of sample ids a plan permutes (DESIGN.md
//! section 7).
//!
//! An int `N` is the space `0..N-1`. A [`Selection`] is a set of ids of a
//! store (ranges, a mask, an id array, or a part of a [`random_split`]); a
//! [`MixtureEpoch`] is one epoch of a [`Mixture`] of several sources, each
//! contributing an exact quota, stratified over the epoch. Every space maps
//! an index `j < len()` to an id in O(1) or O(log) ([`IndexSpace::get`]),
//! and many at once ([`IndexSpace::fill`], vectorised and parallel, with
//! the same result on any thread count). A plan over a space deals
//! positions, maps them through its order, then through the space: a plan
//! over `sel` yields `sel[perm[position]]`. A mixture's epoch is already
//! arranged (stratified), so a plan over it skips the order and shuffles
//! each step's positions with a [`StepShuffle`] before dealing instead.
//!
//! Keys, all from [`crate::keys::derive`] `(seed, epoch, domain, index)`:
//!
//! | use | epoch field | domain (kind, label) | index |
//! |---|---|---|---|
//! | a random split's permutation | 0 | ("split", "store") | 0 |
//! | pass `p` of mixture source `k` | `k` | ("mixture", "pass") | `p` |
//! | the shuffle of step `t` of epoch `e` | `e` | ("mixture", "step") | `t` |
//!
//! A plan takes a space as a [`Space`]; the golden vectors of plans over
//! spaces are in `tests/golden/spaces_v1.txt`, frozen like the others.

mod digest;
mod distinct;
mod interleave;
mod mask;
mod mixture;
mod mixture_epoch;
mod ranges;
mod schedule;
mod selection;
mod split;

pub use interleave::Interleave;
pub use mask::BitMask;
pub use mixture::{
    quotas_from_repeat, quotas_from_weights, Mixture, QuotaRule, StepShuffle, PASS_DOMAIN,
    STEP_DOMAIN,
};
pub use mixture_epoch::MixtureEpoch;
pub use ranges::Ranges;
pub use schedule::Schedule;
pub use selection::{Indices, Permuted, Selection, SelectionKind, SharedIds};
pub use split::{random_split, split_sizes, SPLIT_DOMAIN};

use crate::error::{Error, Result};
use crate::order::MAX_SAMPLES;
use std::sync::Arc;

/// The index space of a plan: what its order's output is mapped through.
#[derive(Debug, Clone, Default)]
pub enum Space {
    /// `0..N`: the order's output is the id.
    #[default]
    Range,
    /// A selection of a store: position `p` holds `sel[order(p)]`.
    Selection(Arc<Selection>),
    /// One epoch of a mixture, already stratified: the plan's order is the
    /// identity, and each step's positions are shuffled by a
    /// [`StepShuffle`] keyed by the plan's `(seed, epoch)` before the
    /// lookup, so that every rank sees the mix.
    Mixture {
        /// The mixture's epoch.
        epoch: Arc<MixtureEpoch>,
        /// The plan's seed (the key of the step shuffles).
        seed: u64,
        /// The plan's epoch (the key of the step shuffles).
        plan_epoch: u64,
    },
}

impl Space {
    /// The space's number of ids, or `None` for `0..N` (any N).
    pub fn num_ids(&self) -> Option<u64> {
        match self {
            Space::Range => None,
            Space::Selection(s) => Some(s.len()),
            Space::Mixture { epoch, .. } => Some(epoch.len()),
        }
    }

    /// The size of the store the ids belong to (`n` for `0..n`): lengths
    /// arrays are indexed by these ids.
    pub fn store_size(&self, n: u64) -> u64 {
        match self {
            Space::Range => n,
            Space::Selection(s) => s.num_samples(),
            Space::Mixture { epoch, .. } => epoch.mixture().store_size(),
        }
    }

    /// Whether `id` (of a store of `n` samples for `0..n`) can be one of
    /// the space's ids: O(1) or O(log) for selections, O(sources) for a
    /// mixture (any sample of any source, whatever the epoch takes).
    pub fn holds(&self, id: u64, n: u64) -> bool {
        match self {
            Space::Range => id < n,
            Space::Selection(s) => s.contains(id),
            Space::Mixture { epoch, .. } => epoch.mixture().holds(id),
        }
    }

    /// Checks that a plan of `n` positions can take this space.
    pub fn check_len(&self, n: u64) -> Result<()> {
        match self.num_ids() {
            Some(len) if len != n => Err(Error::Value(format!(
                "the space has {len} ids, the plan {n} positions"
            ))),
            _ if n > MAX_SAMPLES => Err(Error::Overflow(format!(
                "num_samples must be in [0, 2**63 - 1], got {n}"
            ))),
            _ => Ok(()),
        }
    }
}

/// A sequence of sample ids with random access: what a plan maps its
/// positions through.
pub trait IndexSpace {
    /// The number of ids.
    fn len(&self) -> u64;

    /// True when there is no id.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `j`-th id, for `j < len()`.
    fn get(&self, j: u64) -> Result<u64>;

    /// Writes the `js[i]`-th id to `out[i]` (same lengths; every `js[i]` in
    /// `[0, len())`).
    fn fill(&self, js: &[i64], out: &mut [i64]) -> Result<()>;
}

impl IndexSpace for Selection {
    fn len(&self) -> u64 {
        Selection::len(self)
    }
    fn get(&self, j: u64) -> Result<u64> {
        Selection::get(self, j)
    }
    fn fill(&self, js: &[i64], out: &mut [i64]) -> Result<()> {
        Selection::fill(self, js, out)
    }
}

impl IndexSpace for MixtureEpoch {
    fn len(&self) -> u64 {
        MixtureEpoch::len(self)
    }
    fn get(&self, j: u64) -> Result<u64> {
        MixtureEpoch::get(self, j)
    }
    fn fill(&self, js: &[i64], out: &mut [i64]) -> Result<()> {
        MixtureEpoch::fill(self, js, out)
    }
}
