//! MosaicML Streaming's shard-aware shuffles (`streaming.base.shuffle`,
//! mosaicml-streaming 0.13.0), bit for bit.
//!
//! Every algorithm draws from numpy generators seeded like Streaming's
//! (`default_rng(seed)` for the order of shards, fixed over a run, and
//! `default_rng(seed + epoch)` for the epoch), in the same order, so the
//! output is identical:
//!
//! - `naive`: a permutation of all samples.
//! - `py1s`: shards shuffled, cut at canonical-node boundaries, the pieces of
//!   each node shuffled, each piece's samples shuffled.
//! - `py2s`: like `py1s` with the samples shuffled twice (once for the run,
//!   once for the epoch).
//! - `py1br`: like `py1s`, then each node shuffled in staggered blocks of
//!   random size in `[0.75, 1.25) * block_size`.
//! - `py1e`: like `py1s`, then each sample's position moved by a uniform
//!   shift within its piece's random block, and each node sorted by the
//!   shifted positions.
//!
//! Where Streaming leaves the order undefined: `py1e` sorts with numpy's
//! unstable `argsort`, whose order for equal shifted positions depends on the
//! CPU's SIMD dispatch. Here equal shifted positions keep their position
//! order (what `argsort(kind="stable")` gives). Equal positions need two
//! shifted positions to round to the same double: about `0.18 L^2 / 2^52`
//! pairs in a canonical node of `L` samples (0.4 at `L = 10^8`, about 40 at
//! `10^9`); without them the output is identical.
//!
//! How it is fast while identical:
//!
//! - Fisher-Yates draws are branch-free (a rejected candidate swaps an item
//!   with itself), see [`Generator::shuffle`].
//! - The epoch generator is inherently sequential, but advancing it past a
//!   piece of work without doing the work is cheap (the shuffle's candidate
//!   draws without the items, walked with AVX2, see
//!   [`Generator::skip_shuffle`]; PCG64's jump-ahead for `uniform`). With
//!   more than one thread, one thread takes it through the pieces of work
//!   (spans for `py1s`, canonical nodes for `py1e`) in order, handing a copy
//!   of its state at the start of a piece to a task on the pool that does
//!   the piece for real, or doing the piece itself when enough tasks wait
//!   (see `in_pieces`). The walk also records each shuffle's swap partners,
//!   so that the task only fills and swaps (`py1e` then draws its shifts
//!   from the state after the shuffles). The output does not depend on the
//!   thread count.
//! - `py1e` replaces numpy's `argsort` of the shifted positions by a bucket
//!   sort on them (each lies inside its canonical node), with buckets
//!   written out as soon as no later position can reach them. With more
//!   than one thread, a canonical node of at least two segments of 2^23
//!   shifted positions, or a run's only canonical node (Streaming's default
//!   for `py1e` is one canonical node per physical node; it is cut into two
//!   segments a thread), with pieces and shifts short beside a segment, is
//!   sorted segment by segment in parallel: the generator's
//!   thread records where each piece's shuffle and shifts start, each
//!   segment's size is counted from the few pieces that straddle its ends,
//!   and each segment's task shuffles and shifts the pieces that can reach
//!   it, keeping its own.
//!
//! The code, one idea a module: `spans` (shards as spans of sample ids, cut
//! into canonical nodes), one module an algorithm (`py1s`, `py2s`, `py1br`,
//! `py1e`; `naive` is three lines of [`get_shuffle`]), `walk` (the
//! generator's walk through pieces of work that hands them to the pool),
//! `segments` (`py1e`'s large canonical nodes, sorted in parallel) and
//! `sort` (`py1e`'s bucket sort).

mod blocks;
mod py1br;
mod py1e;
mod py1s;
mod py2s;
mod segments;
mod sort;
mod spans;
mod walk;

pub use sort::{sort_by_keys, SortScratch};

use crate::streaming::numpy_rng::Generator;
use epochplan_core::error::{Error, Result};
use epochplan_core::parallel;
use py1br::py1br;
use py1e::py1e;
use py1s::py1s;
use py2s::py2s;
use spans::{alloc_ids, total_samples};

/// The largest number of canonical nodes accepted.
pub const MAX_CANONICAL_NODES: u64 = 1 << 20;

/// A shuffle algorithm of Streaming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// All samples permuted together.
    Naive,
    /// Shards, then samples within each shard piece, shuffled once.
    Py1s,
    /// Samples within shards shuffled twice (run and epoch).
    Py2s,
    /// Shuffled in staggered blocks of random size.
    Py1br,
    /// Samples spread by uniform shifts within random blocks.
    Py1e,
}

impl Algo {
    /// Every algorithm, in Streaming's order of names.
    pub const ALL: [Algo; 5] = [Algo::Py1br, Algo::Py1e, Algo::Py1s, Algo::Py2s, Algo::Naive];

    /// The algorithm named `name` (Streaming's names).
    pub fn parse(name: &str) -> Result<Algo> {
        Algo::ALL
            .into_iter()
            .find(|a| a.name() == name)
            .ok_or_else(|| {
                Error::Value(format!(
                    "algo must be one of 'naive', 'py1s', 'py2s', 'py1br', 'py1e', got '{name}'"
                ))
            })
    }

    /// Streaming's name of the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Naive => "naive",
            Algo::Py1s => "py1s",
            Algo::Py2s => "py2s",
            Algo::Py1br => "py1br",
            Algo::Py1e => "py1e",
        }
    }

    /// Whether the algorithm reads `block_size`.
    pub fn uses_block_size(self) -> bool {
        matches!(self, Algo::Py1br | Algo::Py1e)
    }

    /// Whether the algorithm reads `num_canonical_nodes`.
    pub fn uses_canonical_nodes(self) -> bool {
        !matches!(self, Algo::Naive)
    }
}

/// The order of an epoch and what Streaming would warn about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shuffled {
    /// The sample id at each position of the epoch.
    pub ids: Vec<i64>,
    /// `py1e` only: some shard piece was larger than its random block, so its
    /// samples were not spread (Streaming warns about this).
    pub block_smaller_than_shard: bool,
}

/// `get_shuffle(algo, shard_sizes, num_canonical_nodes, seed, epoch,
/// block_size)`. `num_canonical_nodes` is ignored by `naive` and
/// `block_size` by every algorithm but `py1br` and `py1e`, as in Streaming.
/// `epoch` may be negative, as in Streaming, when `seed + epoch` (numpy's
/// seed of the epoch's generator) is not.
pub fn get_shuffle(
    algo: Algo,
    shard_sizes: &[i64],
    num_canonical_nodes: u64,
    seed: u64,
    epoch: i128,
    block_size: u64,
) -> Result<Shuffled> {
    let epoch_seed = u128::try_from(i128::from(seed) + epoch).map_err(|_| {
        Error::Value(format!(
            "seed + epoch must be non-negative (the seed of numpy's generator), got {seed} + {epoch}"
        ))
    })?;
    let num_samples = total_samples(shard_sizes)?;
    if algo.uses_canonical_nodes() && !(1..=MAX_CANONICAL_NODES).contains(&num_canonical_nodes) {
        return Err(Error::Value(format!(
            "num_canonical_nodes must be in [1, {MAX_CANONICAL_NODES}], got {num_canonical_nodes}"
        )));
    }
    let run_seed = u128::from(seed);
    let ncn = num_canonical_nodes;
    let (ids, block_smaller_than_shard) = match algo {
        Algo::Naive => {
            let mut ids = alloc_ids(num_samples)?;
            ids.extend(0..num_samples as i64);
            Generator::new(epoch_seed).shuffle(&mut ids);
            (ids, false)
        }
        Algo::Py1s => (
            py1s(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?,
            false,
        ),
        Algo::Py2s => (
            py2s(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?,
            false,
        ),
        Algo::Py1br => {
            let ids = py1br(
                shard_sizes,
                num_samples,
                ncn,
                run_seed,
                epoch_seed,
                block_size,
            )?;
            (ids, false)
        }
        Algo::Py1e => py1e(
            shard_sizes,
            num_samples,
            ncn,
            run_seed,
            epoch_seed,
            block_size,
            py1e::segment_len(num_samples, ncn, parallel::num_threads()),
        )?,
    };
    Ok(Shuffled {
        ids,
        block_smaller_than_shard,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use epochplan_core::parallel;

    fn is_permutation(ids: &[i64]) -> bool {
        let mut seen = vec![false; ids.len()];
        ids.iter().all(|&x| {
            let fresh = !seen[x as usize];
            seen[x as usize] = true;
            fresh
        })
    }

    #[test]
    fn every_algorithm_gives_a_permutation() {
        let sizes = [5i64, 0, 17, 1, 1, 40, 3];
        for algo in Algo::ALL {
            for ncn in [1u64, 2, 5] {
                let out = get_shuffle(algo, &sizes, ncn, 9, 2, 8).unwrap();
                assert_eq!(out.ids.len(), 67);
                assert!(is_permutation(&out.ids), "{algo:?} {ncn}");
            }
        }
    }

    #[test]
    fn parallel_and_sequential_agree() {
        let _threads = crate::test_threads_lock();
        let sizes: Vec<i64> = (0..300).map(|i| (i * 7919) % 5000 + 1).collect();
        for algo in Algo::ALL {
            parallel::set_num_threads(1);
            let a = get_shuffle(algo, &sizes, 6, 4, 1, 1 << 12).unwrap();
            parallel::set_num_threads(2);
            let b = get_shuffle(algo, &sizes, 6, 4, 1, 1 << 12).unwrap();
            parallel::set_num_threads(0);
            assert_eq!(a, b, "{algo:?}");
        }
    }

    #[test]
    fn bad_inputs_are_errors() {
        assert!(get_shuffle(Algo::Py1s, &[3, -1], 1, 0, 0, 8).is_err());
        assert!(get_shuffle(Algo::Py1s, &[i64::MAX, 1], 1, 0, 0, 8).is_err());
        assert!(get_shuffle(Algo::Py1s, &[3], 0, 0, 0, 8).is_err());
        let too_many = MAX_CANONICAL_NODES + 1;
        assert!(get_shuffle(Algo::Py1s, &[3, 4], too_many, 0, 0, 8).is_err());
        assert!(get_shuffle(Algo::Py1br, &[3, 4], too_many, 0, 0, 8).is_err());
        assert!(get_shuffle(Algo::Naive, &[3], 0, 0, 0, 8).is_ok());
        assert!(get_shuffle(Algo::Naive, &[3], 0, 1, -1, 8).is_ok());
        assert!(get_shuffle(Algo::Naive, &[3], 0, 1, -2, 8).is_err());
        assert!(get_shuffle(Algo::Py1e, &[3], 4, 0, 0, 8).is_err());
        assert!(get_shuffle(Algo::Py1e, &[3], 1, 0, 0, 0).is_err());
        assert!(get_shuffle(Algo::Py1br, &[3], 1, 0, 0, 1).is_err());
        assert!(Algo::parse("py3").is_err());
    }
}
