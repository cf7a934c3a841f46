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
//! No golden vectors are frozen for spaces yet: they will be when plans
//! take spaces (a new format version of their own).

mod interleave;
mod mask;
mod mixture;
mod ranges;
mod selection;
mod split;

pub use interleave::Interleave;
pub use mask::BitMask;
pub use mixture::{
    quotas_from_repeat, quotas_from_weights, Mixture, MixtureEpoch, QuotaRule, StepShuffle,
    PASS_DOMAIN, STEP_DOMAIN,
};
pub use ranges::Ranges;
pub use selection::{Indices, Permuted, Selection, SelectionKind, SharedIds};
pub use split::{random_split, split_sizes, SPLIT_DOMAIN};

use crate::error::Result;

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
