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
//!   shifted positions (Streaming's default for `py1e` is one canonical
//!   node per physical node), with pieces and shifts short beside a
//!   segment, is sorted segment by segment in parallel: the generator's
//!   thread records where each piece's shuffle and shifts start, each
//!   segment's size is counted from the few pieces that straddle its ends,
//!   and each segment's task shuffles and shifts the pieces that can reach
//!   it, keeping its own.

use super::numpy_rng::{apply_partners, Generator};
use crate::buffer::{ids_with_capacity, prefault, vec_with_capacity, zeroed_ids};
use crate::error::{Error, Result};
use crate::parallel;
use rayon::prelude::*;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

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

/// A half-open range of sample ids (or of positions).
type Span = (i64, i64);

/// Pieces of spans, and per part (canonical node) the range of its pieces.
type Divided = (Vec<Span>, Vec<(usize, usize)>);

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
            PY1E_SEGMENT,
        )?,
    };
    Ok(Shuffled {
        ids,
        block_smaller_than_shard,
    })
}

/// The number of samples, checking every size is non-negative and the total
/// fits int64.
fn total_samples(shard_sizes: &[i64]) -> Result<u64> {
    let mut total: i64 = 0;
    for (i, &size) in shard_sizes.iter().enumerate() {
        if size < 0 {
            return Err(Error::Value(format!(
                "shard_sizes must be non-negative, got {size} at index {i}"
            )));
        }
        total = total.checked_add(size).ok_or_else(|| {
            Error::Overflow("the sum of shard_sizes must be at most 2**63 - 1".to_string())
        })?;
    }
    Ok(total as u64)
}

/// An empty vector with room for `n` ids, or an error if it cannot be had.
fn alloc_ids(n: u64) -> Result<Vec<i64>> {
    ids_with_capacity(n, "the shuffled sample ids")
}

/// Each shard's span of sample ids, in shard order.
fn shard_spans(shard_sizes: &[i64]) -> Result<Vec<Span>> {
    let mut spans = vec_with_capacity(shard_sizes.len(), "the shard spans")?;
    let mut begin = 0i64;
    spans.extend(shard_sizes.iter().map(|&size| {
        let span = (begin, begin + size);
        begin += size;
        span
    }));
    Ok(spans)
}

/// Cuts the spans, in order, into `num_parts` runs of `num_samples *
/// (p + 1) / num_parts` cumulative samples, splitting a span that crosses a
/// boundary (its head ends one part, its tail starts the next). Returns the
/// pieces and, per part, the range of its pieces. Empty spans stay with the
/// part being filled.
fn divide_spans(mut spans: Vec<Span>, num_samples: u64, num_parts: u64) -> Result<Divided> {
    let mut pieces = vec_with_capacity(spans.len() + num_parts as usize, "the shard pieces")?;
    let mut parts = vec_with_capacity(num_parts as usize, "the canonical nodes")?;
    let mut next = 0usize;
    let mut so_far: u128 = 0;
    for part in 0..u128::from(num_parts) {
        let part_end = u128::from(num_samples) * (part + 1) / u128::from(num_parts);
        let first = pieces.len();
        while next < spans.len() {
            let (begin, end) = spans[next];
            let len = (end - begin) as u128;
            if part_end < so_far + len {
                if so_far < part_end {
                    let split = (part_end - so_far) as i64;
                    pieces.push((begin, begin + split));
                    spans[next] = (begin + split, end);
                    so_far = part_end;
                }
                break;
            }
            pieces.push((begin, end));
            next += 1;
            so_far += len;
        }
        parts.push((first, pieces.len()));
    }
    Ok((pieces, parts))
}

/// The common start of `py1s`, `py1br` and `py1e`: shard spans shuffled by
/// the run generator, cut into canonical nodes, each node's pieces shuffled
/// by the epoch generator. Returns the pieces, the nodes' piece ranges and
/// the epoch generator.
fn node_spans(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<(Divided, Generator)> {
    let mut spans = shard_spans(shard_sizes)?;
    Generator::new(run_seed).shuffle(&mut spans);
    let (mut spans, parts) = divide_spans(spans, num_samples, ncn)?;
    let mut rng = Generator::new(epoch_seed);
    for &(first, last) in &parts {
        rng.shuffle(&mut spans[first..last]);
    }
    Ok(((spans, parts), rng))
}

fn py2s(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<Vec<i64>> {
    // Run order: shards shuffled, then each shard's samples, laid out in one
    // buffer in the shuffled shard order.
    let mut shards = shard_spans(shard_sizes)?;
    let mut fixed = Generator::new(run_seed);
    fixed.shuffle(&mut shards);
    let mut buf = alloc_ids(num_samples)?;
    let mut ranges = vec_with_capacity(shards.len(), "the shard ranges")?;
    for &(begin, end) in &shards {
        let at = buf.len();
        buf.extend(begin..end);
        fixed.shuffle(&mut buf[at..]);
        ranges.push((at as i64, buf.len() as i64));
    }
    // Epoch order: the buffer ranges cut into nodes, each node's pieces
    // shuffled and each piece's samples shuffled in place.
    let (mut pieces, parts) = divide_spans(ranges, num_samples, ncn)?;
    let mut rng = Generator::new(epoch_seed);
    for &(first, last) in &parts {
        rng.shuffle(&mut pieces[first..last]);
        for &(begin, end) in &pieces[first..last] {
            rng.shuffle(&mut buf[begin as usize..end as usize]);
        }
    }
    let mut ids = alloc_ids(num_samples)?;
    for &(begin, end) in &pieces {
        ids.extend_from_slice(&buf[begin as usize..end as usize]);
    }
    Ok(ids)
}

/// Python's `int(factor * block_size)` (the product rounded as a double).
fn scaled_block(factor: f64, block_size: u64) -> i128 {
    (factor * block_size as f64) as i128
}

/// `integers(low, high)` for int64 with Python-int bounds, with Streaming's
/// failure (ValueError) when the range is empty or out of int64.
fn draw_between(rng: &mut Generator, low: i128, high: i128, block_size: u64) -> Result<i64> {
    let top = high - 1;
    if low > top || low < i128::from(i64::MIN) || top > i128::from(i64::MAX) {
        return Err(Error::Value(format!(
            "block_size={block_size} gives no valid random block size: integers({low}, {high}) \
             needs low < high within int64"
        )));
    }
    rng.integers_closed(low as i64, top as i64)
}

fn py1br(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
    block_size: u64,
) -> Result<Vec<i64>> {
    let ((spans, parts), mut rng) =
        node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let low = scaled_block(0.75, block_size);
    let high = scaled_block(1.25, block_size);
    if low < 1 || low - 1 > i128::from(i64::MAX) {
        return Err(Error::Value(format!(
            "block_size must be at least 2 for py1br (the stagger is drawn from \
             [0, int(0.75 * block_size))) and int(0.75 * block_size) at most 2**63, \
             got {block_size}"
        )));
    }
    let mut stagger = vec![0i64; ncn as usize];
    rng.integers_closed_fill(0, (low - 1) as i64, &mut stagger)?;
    let mut ids = alloc_ids(num_samples)?;
    let mut blocks: Vec<Span> = Vec::new();
    for (node, &(first, last)) in parts.iter().enumerate() {
        let node_start = ids.len() as i64;
        for &(begin, end) in &spans[first..last] {
            ids.extend(begin..end);
        }
        let node_stop = ids.len() as i64;
        let st = stagger[node];
        blocks.clear();
        let mut blocks_end = node_start;
        while blocks_end < node_stop {
            let size = draw_between(&mut rng, low, high, block_size)?;
            let start = (blocks_end - st).max(node_start);
            let stop = (blocks_end + size - st).min(node_stop);
            blocks.push((start, stop));
            blocks_end += stop - start;
        }
        for &(start, stop) in &blocks {
            rng.shuffle(&mut ids[start as usize..stop as usize]);
        }
    }
    Ok(ids)
}

/// Samples per parallel piece of `py1s`.
const PY1S_PIECE: i64 = 1 << 18;

/// Fills `out` with each span's ids, each span shuffled in turn.
fn fill_shuffled(rng: &mut Generator, spans: &[Span], out: &mut [i64]) {
    let mut at = 0usize;
    for &(begin, end) in spans {
        let piece = &mut out[at..at + (end - begin) as usize];
        fill_ids(piece, begin);
        rng.shuffle(piece);
        at += piece.len();
    }
}

/// `begin, begin + 1, ...` into `out`.
fn fill_ids(out: &mut [i64], begin: i64) {
    for (slot, id) in out.iter_mut().zip(begin..) {
        *slot = id;
    }
}

/// Buffers of swap partners, reused across the pieces of a run.
type PartnerPool = Mutex<Vec<Vec<u32>>>;

/// Pieces of work with more swap partners than this are not recorded but
/// shuffled by the task from the generator's state, so that a partner buffer
/// (4 bytes a sample, one per piece in flight) stays small beside the output.
const MAX_RECORDED: usize = 1 << 22;

/// The swap partners of each span's shuffle, one span after another, in a
/// buffer from `pool`. None, with the generator taken past the spans all
/// the same, when the spans have more than [`MAX_RECORDED`] partners or the
/// buffer cannot be allocated.
fn draw_partners(rng: &mut Generator, spans: &[Span], pool: &PartnerPool) -> Option<Vec<u32>> {
    let partners_of = |&(begin, end): &Span| ((end - begin) as usize).saturating_sub(1);
    let total = spans
        .iter()
        .try_fold(0usize, |sum, span| sum.checked_add(partners_of(span)))
        .filter(|&total| total <= MAX_RECORDED);
    if let Some(total) = total {
        let mut partners = lock(pool).pop().unwrap_or_default();
        if partners
            .try_reserve(total.saturating_sub(partners.len()))
            .is_ok()
        {
            // A reused buffer is only cut or grown, not cleared: every value
            // is written below.
            partners.resize(total, 0);
            let mut at = 0;
            for span in spans {
                let drawn = rng.shuffle_partners(&mut partners[at..at + partners_of(span)]);
                debug_assert!(drawn);
                at += partners_of(span);
            }
            return Some(partners);
        }
    }
    for &(begin, end) in spans {
        rng.skip_shuffle((end - begin) as usize);
    }
    None
}

/// Fills `out` with each span's ids shuffled by the partners
/// [`draw_partners`] drew for the spans.
fn fill_with_partners(spans: &[Span], partners: &[u32], out: &mut [i64]) {
    let (mut at, mut drawn) = (0usize, 0usize);
    for &(begin, end) in spans {
        let piece = &mut out[at..at + (end - begin) as usize];
        fill_ids(piece, begin);
        let count = piece.len().saturating_sub(1);
        apply_partners(piece, &partners[drawn..drawn + count]);
        at += piece.len();
        drawn += count;
    }
}

/// Whether work should be split over the pool.
fn go_parallel(num_samples: u64) -> bool {
    parallel::num_threads() > 1 && num_samples >= parallel::PIECE as u64
}

/// With more than one thread, the generator's thread draws the swap partners
/// of each piece (the sequential part, see [`Generator::shuffle_partners`])
/// and a task fills the piece and makes the swaps.
fn py1s(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
) -> Result<Vec<i64>> {
    let ((spans, _), mut rng) = node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let mut ids = zeroed_ids(num_samples, "the shuffled sample ids")?;
    if !go_parallel(num_samples) {
        fill_shuffled(&mut rng, &spans, &mut ids);
        return Ok(ids);
    }
    let mut rest: &mut [i64] = &mut ids;
    let mut first = 0;
    let pieces = std::iter::from_fn(|| {
        if first == spans.len() {
            return None;
        }
        let mut last = first;
        let mut len = 0i64;
        while last < spans.len() && len < PY1S_PIECE {
            len += spans[last].1 - spans[last].0;
            last += 1;
        }
        let (out, tail) = std::mem::take(&mut rest).split_at_mut(len as usize);
        rest = tail;
        let piece = &spans[first..last];
        first = last;
        Some((piece, out))
    });
    let pool = PartnerPool::default();
    in_pieces(
        &mut rng,
        pieces,
        OUTSTANDING_PER_THREAD * parallel::num_threads(),
        |rng, (piece, _)| Ok(draw_partners(rng, piece, &pool)),
        |rng, (piece, out), partners| {
            match partners.flatten() {
                Some(partners) => {
                    fill_with_partners(piece, &partners, out);
                    lock(&pool).push(partners);
                }
                None => fill_shuffled(rng, piece, out),
            }
            Ok(())
        },
    )?;
    Ok(ids)
}

/// The `py1e` parameters shared by every canonical node.
#[derive(Clone, Copy)]
struct Py1eBlocks {
    low: i128,
    high: i128,
    block_size: u64,
}

impl Py1eBlocks {
    /// The shift range `(lower, upper)` of a piece of `size` samples at
    /// `offset` in a node of `node_len`, for a drawn block.
    fn bounds(block: i64, size: i64, offset: i64, node_len: i64) -> (f64, f64) {
        let cutoff = ((i128::from(block) - i128::from(size)) as f64 / 2.0).max(0.0);
        let lower = (-cutoff).max(-(offset as f64));
        let upper = cutoff.min((node_len - offset - size) as f64);
        (lower, upper)
    }

    /// How far a shifted position can lie from its position: half the
    /// largest block, plus a margin for rounding.
    fn reach(&self) -> f64 {
        (self.high - 1).max(0) as f64 / 2.0 + 2.0
    }

    /// Advances `rng` past a node's block and shift draws exactly as
    /// [`Py1eBlocks::sort_node`] would, without the samples, and gives
    /// `at_shifts` each piece's shift bounds and the generator at its first
    /// shift. Returns whether a block was smaller than its piece.
    fn skip_blocks(
        &self,
        rng: &mut Generator,
        node: &[Span],
        mut at_shifts: impl FnMut((f64, f64), &Generator),
    ) -> Result<bool> {
        let node_len = node.iter().map(|&(begin, end)| end - begin).sum();
        let mut small = false;
        let mut offset = 0;
        for &(begin, end) in node {
            let size = end - begin;
            let block = draw_between(rng, self.low, self.high, self.block_size)?;
            small |= block < size;
            at_shifts(Self::bounds(block, size, offset, node_len), rng);
            // uniform() takes one 64-bit draw per sample.
            rng.bit_generator().advance(size as u128);
            offset += size;
        }
        Ok(small)
    }

    /// One canonical node: its pieces' samples shuffled, then sorted as
    /// [`Py1eBlocks::sort_node`] does.
    fn node(
        &self,
        rng: &mut Generator,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<bool> {
        fill_shuffled(rng, node, out);
        self.sort_node(rng, node, out, scratch)
    }

    /// The samples of one canonical node (`out`, its pieces shuffled in
    /// position order) with each position shifted within its piece's random
    /// block, sorted by shifted position. Returns whether a block was
    /// smaller than its piece.
    fn sort_node(
        &self,
        rng: &mut Generator,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<bool> {
        let node_len = out.len() as i64;
        scratch.begin(out.len());
        // Every shift is at most half the largest block: once positions up
        // to `j` are pushed, no later key falls below `j - reach` (plus a
        // margin for rounding), so the buckets below are final and written
        // out while they are still in cache.
        let reach = self.reach();
        let stride = 1i64 << FINE_BITS;
        let mut small = false;
        let mut offset: i64 = 0;
        for &(begin, end) in node {
            let size = end - begin;
            let block = draw_between(rng, self.low, self.high, self.block_size)?;
            small |= block < size;
            let (lower, upper) = Self::bounds(block, size, offset, node_len);
            let mut g = rng.clone();
            let mut j = offset;
            while j < offset + size {
                let stop = (j + stride).min(offset + size);
                for p in j..stop {
                    scratch.push(shifted(p, &mut g, lower, upper), out[p as usize]);
                }
                j = stop;
                scratch.flush_below(j as f64 - reach, out);
                scratch.check_memory()?;
            }
            *rng = g;
            offset += size;
        }
        scratch.finish(out);
        scratch.check_memory()?;
        Ok(small)
    }
}

/// `py1e`'s shifted position of position `p`: one shift drawn from `g`. The
/// one expression for the sort and for the sizes of its segments, so that
/// they agree to the bit.
#[inline(always)]
fn shifted(p: i64, g: &mut Generator, lower: f64, upper: f64) -> f64 {
    p as f64 + g.uniform(lower, upper)
}

/// Sort buffers, reused across the nodes and segments of a run (fresh pages
/// are slow to fault in): a task takes one from the pool, or makes one, and
/// returns it.
type ScratchPool = Mutex<Vec<SortScratch>>;

/// Shifted positions per segment of a large canonical node: each segment is
/// sorted by a task of its own.
const PY1E_SEGMENT: i64 = 1 << 23;

/// The fewest samples per piece, on average, of a node sorted in segments:
/// its plan keeps about 120 bytes a piece, beside the output's 8 a sample.
const MIN_MEAN_PIECE: i64 = 64;

/// A large canonical node, ready to be sorted in segments of its shifted
/// positions by separate tasks: per piece, the generator at the start of its
/// shuffle and of its shifts, its shift bounds and its position in the node.
/// Segment `k` holds the shifted positions from `node_len * k / count` to
/// `node_len * (k + 1) / count` (the first and last segments also take any
/// below or above, from rounding).
struct Segments {
    count: usize,
    shuffle_at: Vec<Generator>,
    shifts_at: Vec<Generator>,
    bounds: Vec<(f64, f64)>,
    /// Where each piece starts in the node, and the node's length.
    offsets: Vec<i64>,
    /// [`Py1eBlocks::reach`].
    reach: f64,
}

impl Segments {
    /// The node's length.
    fn len(&self) -> i64 {
        self.offsets[self.offsets.len() - 1]
    }

    /// The shifted positions piece `s` can take, with a margin for rounding.
    fn key_range(&self, s: usize) -> (f64, f64) {
        let (lower, upper) = self.bounds[s];
        (
            self.offsets[s] as f64 + lower - 1.0,
            self.offsets[s + 1] as f64 + upper + 1.0,
        )
    }

    /// The pieces whose shifted positions may lie in `[from, to)`, found by
    /// bisection on their positions (a shifted position is at most `reach`
    /// from its position); the pieces before them lie wholly below `from`.
    fn reaching(&self, from: f64, to: f64) -> std::ops::Range<usize> {
        let pieces = self.offsets.len() - 1;
        let first = self.offsets[1..].partition_point(|&end| end as f64 + self.reach < from);
        let last = self.offsets[..pieces].partition_point(|&start| start as f64 - self.reach < to);
        first..last.max(first)
    }

    /// Where segment `k` starts (the node's length for `k == count`).
    fn start(&self, k: usize) -> i64 {
        (i128::from(self.len()) * k as i128 / self.count as i128) as i64
    }

    /// Segment `k`'s range of shifted positions, `[from, to)`.
    fn range(&self, k: usize) -> (f64, f64) {
        let from = if k == 0 {
            f64::NEG_INFINITY
        } else {
            self.start(k) as f64
        };
        let to = if k + 1 == self.count {
            f64::INFINITY
        } else {
            self.start(k + 1) as f64
        };
        (from, to)
    }

    /// How many of the node's shifted positions lie below `cut`: every
    /// sample of the pieces below it, and those of the pieces across it
    /// counted from their draws.
    fn count_below(&self, cut: f64) -> usize {
        let across = self.reaching(cut, cut);
        let mut below = self.offsets[across.start] as usize;
        for s in across {
            let (offset, end) = (self.offsets[s], self.offsets[s + 1]);
            let (lowest, highest) = self.key_range(s);
            if highest < cut {
                below += (end - offset) as usize;
            } else if lowest < cut {
                let (lower, upper) = self.bounds[s];
                let mut g = self.shifts_at[s].clone();
                below += (offset..end)
                    .filter(|&p| shifted(p, &mut g, lower, upper) < cut)
                    .count();
            }
        }
        below
    }
}

impl Py1eBlocks {
    /// How many segments a node of `node_len` samples is sorted in: one (the
    /// node is a single task) unless it spans at least two segments and its
    /// pieces and shifts are short beside a segment (each segment's task
    /// shuffles and draws every piece that can reach it, so the work repeated
    /// at the ends stays small).
    fn segment_count(&self, node: &[Span], node_len: i64, segment_len: i64) -> usize {
        let short = segment_len / 8;
        if node_len < 2 * segment_len
            || self.reach() > short as f64
            || node.iter().any(|&(begin, end)| end - begin > short)
            || (node.len() as i64).saturating_mul(MIN_MEAN_PIECE) > node_len
        {
            return 1;
        }
        ((node_len + segment_len - 1) / segment_len) as usize
    }

    /// Takes `rng` past a node exactly as [`Py1eBlocks::node`] would, without
    /// the samples, recording what its segments need. Returns the record
    /// and whether a block was smaller than its piece.
    fn plan_segments(
        &self,
        rng: &mut Generator,
        node: &[Span],
        count: usize,
    ) -> Result<(Segments, bool)> {
        let what = "the generator states of a canonical node";
        let mut shuffle_at = vec_with_capacity(node.len(), what)?;
        let mut shifts_at = vec_with_capacity(node.len(), what)?;
        let mut bounds = vec_with_capacity(node.len(), what)?;
        let mut offsets = vec_with_capacity(node.len() + 1, what)?;
        let mut offset = 0;
        for &(begin, end) in node {
            shuffle_at.push(rng.clone());
            rng.skip_shuffle((end - begin) as usize);
            offsets.push(offset);
            offset += end - begin;
        }
        offsets.push(offset);
        let small = self.skip_blocks(rng, node, |piece_bounds, g| {
            bounds.push(piece_bounds);
            shifts_at.push(g.clone());
        })?;
        let plan = Segments {
            count,
            shuffle_at,
            shifts_at,
            bounds,
            offsets,
            reach: self.reach(),
        };
        Ok((plan, small))
    }

    /// Sorts a planned node into `out`, its segments in parallel: each
    /// segment's size is counted first, so each writes its own part of
    /// `out`.
    fn sort_segments(
        &self,
        plan: &Segments,
        node: &[Span],
        out: &mut [i64],
        pool: &ScratchPool,
    ) -> Result<()> {
        let cuts: Vec<f64> = (1..plan.count).map(|k| plan.range(k).0).collect();
        let below: Vec<usize> = cuts
            .par_iter()
            .map(|&cut| plan.count_below(cut))
            .chain([out.len()])
            .collect();
        let mut parts = Vec::with_capacity(plan.count);
        let (mut rest, mut start) = (out, 0);
        for &end in &below {
            let (part, tail) = std::mem::take(&mut rest).split_at_mut(end - start);
            parts.push(part);
            rest = tail;
            start = end;
        }
        parts.into_par_iter().enumerate().try_for_each(|(k, part)| {
            let mut scratch = lock(pool).pop().unwrap_or_default();
            let sorted = self.sort_segment(plan, k, node, part, &mut scratch);
            lock(pool).push(scratch);
            sorted
        })
    }

    /// Segment `k` of a planned node, sorted into `out`: the pieces that can
    /// reach it shuffled and their shifts drawn again, keeping the shifted
    /// positions inside the segment.
    fn sort_segment(
        &self,
        plan: &Segments,
        k: usize,
        node: &[Span],
        out: &mut [i64],
        scratch: &mut SortScratch,
    ) -> Result<()> {
        let (from, to) = plan.range(k);
        let first = plan.start(k);
        let width = plan.start(k + 1) - first;
        // Subtracting a whole number below the key is exact: the order and
        // the ties of the shifted positions stay as they are.
        let base = first as f64;
        let reach = self.reach();
        let stride = 1usize << FINE_BITS;
        let longest = node.iter().map(|&(b, e)| e - b).max().unwrap_or(0);
        let mut values = vec![0i64; longest as usize];
        scratch.begin(width as usize);
        for s in plan.reaching(from, to) {
            let (begin, end) = node[s];
            let size = end - begin;
            let (lowest, highest) = plan.key_range(s);
            if highest < from || lowest >= to {
                continue;
            }
            let values = &mut values[..size as usize];
            fill_ids(values, begin);
            plan.shuffle_at[s].clone().shuffle(values);
            let (lower, upper) = plan.bounds[s];
            let mut g = plan.shifts_at[s].clone();
            let mut p = plan.offsets[s];
            // Most pieces lie wholly inside the segment.
            let inside = lowest >= from && highest < to;
            for chunk in values.chunks(stride) {
                if inside {
                    for &value in chunk {
                        scratch.push(shifted(p, &mut g, lower, upper) - base, value);
                        p += 1;
                    }
                } else {
                    for &value in chunk {
                        let key = shifted(p, &mut g, lower, upper);
                        if key >= from && key < to {
                            scratch.push(key - base, value);
                        }
                        p += 1;
                    }
                }
                scratch.flush_below(p as f64 - reach - base, out);
                scratch.check_memory()?;
            }
        }
        scratch.finish(out);
        scratch.check_memory()
    }
}

/// How the generator's thread hands a canonical node of `py1e` to a task.
enum NodeWork {
    /// The swap partners of its shuffles, and the generator after them.
    Partners(Vec<u32>, Generator),
    /// A large node, sorted in segments.
    Segments(Segments),
    /// Neither (too many partners to record, or no memory for them): the
    /// task runs the node from the generator's state at its start.
    FromStart,
}

fn py1e(
    shard_sizes: &[i64],
    num_samples: u64,
    ncn: u64,
    run_seed: u128,
    epoch_seed: u128,
    block_size: u64,
    segment_len: i64,
) -> Result<(Vec<i64>, bool)> {
    let ((spans, parts), mut rng) =
        node_spans(shard_sizes, num_samples, ncn, run_seed, epoch_seed)?;
    let node_len = |&(first, last): &(usize, usize)| -> i64 {
        spans[first..last].iter().map(|&(b, e)| e - b).sum()
    };
    if parts.iter().any(|p| node_len(p) == 0) {
        return Err(Error::Value(format!(
            "num_canonical_nodes={ncn} leaves a canonical node without samples \
             ({num_samples} samples in all): py1e needs at least one sample per canonical node"
        )));
    }
    let blocks = Py1eBlocks {
        low: scaled_block(0.75, block_size),
        high: scaled_block(1.25, block_size),
        block_size,
    };
    let mut ids = zeroed_ids(num_samples, "the shuffled sample ids")?;
    let one_task = |part: &(usize, usize)| {
        blocks.segment_count(&spans[part.0..part.1], node_len(part), segment_len) == 1
    };
    if !go_parallel(num_samples) || (parts.len() == 1 && one_task(&parts[0])) {
        let mut scratch = SortScratch::default();
        let mut small = false;
        let mut rest: &mut [i64] = &mut ids;
        for part in &parts {
            let (out, tail) = std::mem::take(&mut rest).split_at_mut(node_len(part) as usize);
            rest = tail;
            let node = &spans[part.0..part.1];
            small |= blocks.node(&mut rng, node, out, &mut scratch)?;
        }
        return Ok((ids, small));
    }
    // The sorts are cache-bound: clearing fresh pages of the output in the
    // middle of them would evict their buckets, so the pages are faulted in
    // first.
    prefault(&mut ids);
    let pool = ScratchPool::default();
    let partner_pool = PartnerPool::default();
    let small = AtomicBool::new(false);
    let mut rest: &mut [i64] = &mut ids;
    let nodes = parts.iter().map(|part| {
        let (out, tail) = std::mem::take(&mut rest).split_at_mut(node_len(part) as usize);
        rest = tail;
        (&spans[part.0..part.1], out)
    });
    // The generator's thread draws each node's swap partners (as py1s does)
    // and skips its block and shift draws; the task shuffles by the partners
    // and sorts from the generator's state after the shuffles. A large node
    // is planned for its segments instead.
    in_pieces(
        &mut rng,
        nodes,
        OUTSTANDING_PER_THREAD * parallel::num_threads(),
        |rng, (node, out)| {
            let count = blocks.segment_count(node, out.len() as i64, segment_len);
            if count > 1 {
                let (plan, smaller) = blocks.plan_segments(rng, node, count)?;
                small.fetch_or(smaller, Ordering::Relaxed);
                return Ok(NodeWork::Segments(plan));
            }
            let partners = draw_partners(rng, node, &partner_pool);
            let shuffled = rng.clone();
            let smaller = blocks.skip_blocks(rng, node, |_, _| {})?;
            small.fetch_or(smaller, Ordering::Relaxed);
            Ok(match partners {
                Some(partners) => NodeWork::Partners(partners, shuffled),
                None => NodeWork::FromStart,
            })
        },
        |rng, (node, out), work| {
            let smaller = match work {
                Some(NodeWork::Segments(plan)) => {
                    blocks.sort_segments(&plan, node, out, &pool)?;
                    false
                }
                Some(NodeWork::Partners(partners, shuffled)) => {
                    fill_with_partners(node, &partners, out);
                    lock(&partner_pool).push(partners);
                    *rng = shuffled;
                    let mut scratch = lock(&pool).pop().unwrap_or_default();
                    let smaller = blocks.sort_node(rng, node, out, &mut scratch);
                    lock(&pool).push(scratch);
                    smaller?
                }
                Some(NodeWork::FromStart) | None => {
                    let mut scratch = lock(&pool).pop().unwrap_or_default();
                    let smaller = blocks.node(rng, node, out, &mut scratch);
                    lock(&pool).push(scratch);
                    smaller?
                }
            };
            small.fetch_or(smaller, Ordering::Relaxed);
            Ok(())
        },
    )?;
    Ok((ids, small.into_inner()))
}

/// Tasks of [`in_pieces`] queued or running, per thread of the pool, past
/// which the generator's thread runs pieces itself.
const OUTSTANDING_PER_THREAD: usize = 2;

/// Runs `pieces` of work that draw from one generator in turn (the pieces of
/// spans of `py1s`, the canonical nodes of `py1e`) on the pool, with the
/// output of a sequential run. The generator is sequential, so this thread
/// takes it through the pieces in order: it `hand_off`s a piece (takes the
/// generator past it, much cheaper than the piece, returning whatever part
/// of the work it did) and gives a copy of the state at its start and that
/// part to a task that `run`s the piece. When `max_outstanding` tasks are
/// queued or running already, it runs the piece itself (with no part done),
/// which takes the generator past it at no extra cost. On failure, no
/// further piece is started and the error of the first failing piece is
/// returned, as a sequential run would.
fn in_pieces<P: Send, T: Send>(
    rng: &mut Generator,
    pieces: impl Iterator<Item = P> + Send,
    max_outstanding: usize,
    hand_off: impl Fn(&mut Generator, &P) -> Result<T> + Sync,
    run: impl Fn(&mut Generator, P, Option<T>) -> Result<()> + Sync,
) -> Result<()> {
    let outstanding = AtomicUsize::new(0);
    // The lowest failing piece and its error.
    let failure: Mutex<Option<(usize, Error)>> = Mutex::new(None);
    let fail = |index: usize, e: Error| {
        let mut first = lock(&failure);
        if first.as_ref().is_none_or(|(i, _)| index < *i) {
            *first = Some((index, e));
        }
    };
    parallel::install(|| {
        rayon::scope(|scope| {
            for (index, piece) in pieces.enumerate() {
                if lock(&failure).is_some() {
                    return;
                }
                if outstanding.load(Ordering::Relaxed) >= max_outstanding {
                    if let Err(e) = run(rng, piece, None) {
                        return fail(index, e);
                    }
                    continue;
                }
                let start = rng.clone();
                let done = match hand_off(rng, &piece) {
                    Ok(done) => done,
                    Err(e) => return fail(index, e),
                };
                outstanding.fetch_add(1, Ordering::Relaxed);
                let (outstanding, fail, run) = (&outstanding, &fail, &run);
                let failure = &failure;
                scope.spawn(move |_| {
                    // Pieces after a failed one need not run.
                    let after_failure = lock(failure).as_ref().is_some_and(|(i, _)| *i < index);
                    if !after_failure {
                        let mut g = start;
                        if let Err(e) = run(&mut g, piece, Some(done)) {
                            fail(index, e);
                        }
                    }
                    outstanding.fetch_sub(1, Ordering::Relaxed);
                });
            }
        });
    })?;
    match failure.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Locks `m`, also after a panic elsewhere (the data are plain buffers).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Fine buckets per coarse bucket, as a power of two (a coarse bucket's
/// items fit in L1/L2 cache while they are sorted).
const FINE_BITS: u32 = 11;

/// Sub-buckets per integer in the sort of a coarse bucket.
const SUB_BUCKETS: usize = 4;

/// Reorders `values` by `keys` (same length); equal keys keep their
/// order. Keys are finite. See [`SortScratch::sort`].
pub fn sort_by_keys(keys: &[f64], values: &mut [i64]) -> Result<()> {
    SortScratch::default().sort(keys, values)
}

/// The buffers of the `py1e` sort, reusable from one node to the next.
///
/// Items are pushed in position order as `(key, value)`. A bucket sort on the
/// key clamped to `[0, width)` (a non-decreasing map, so buckets are ordered):
/// each item goes to its coarse bucket of `2^FINE_BITS` integers as it is
/// pushed; then each coarse bucket (small enough for the cache) is
/// counting-sorted on steps of `1/SUB_BUCKETS`, and each step's items (rarely
/// more than one for `py1e`'s keys) sorted by key. Every step is stable, so
/// equal keys keep their push order.
#[derive(Debug, Default)]
pub struct SortScratch {
    /// Keys are clamped to `[0, width)`.
    width: usize,
    /// Coarse buckets already written out, and the output position reached.
    done: usize,
    at: usize,
    coarse: Vec<Vec<(f64, i64)>>,
    /// Emptied buckets, handed to the next buckets to fill: the few buckets
    /// in use keep reusing the same memory, which stays in cache (a bucket
    /// per coarse index would sweep through memory the size of the node).
    spare: Vec<Vec<(f64, i64)>>,
    /// A coarse bucket's items ordered by sub-bucket, each item's
    /// sub-bucket, and where each sub-bucket's items go next.
    fine: Vec<(f64, i64)>,
    sub_of: Vec<u32>,
    next: Vec<u32>,
    /// Set when a bucket could not grow: the sort is then incomplete, and
    /// [`SortScratch::check_memory`] says so. (Checked once per stride rather
    /// than on every push, which stays cheap; a block size near the node's
    /// length keeps the whole node in the buckets.)
    out_of_memory: bool,
}

impl SortScratch {
    /// Starts a sort of items whose keys lie in `[0, width)` (a key outside
    /// counts as the nearest end of the range).
    pub fn begin(&mut self, width: usize) {
        self.width = width;
        self.done = 0;
        self.at = 0;
        self.out_of_memory = false;
        let count = if width == 0 {
            0
        } else {
            ((width - 1) >> FINE_BITS) + 1
        };
        // Buckets left by an unfinished sort go back to the spares.
        let mut coarse = std::mem::take(&mut self.coarse);
        for bucket in coarse.drain(..) {
            self.recycle(bucket);
        }
        self.coarse = coarse;
        if self.coarse.try_reserve(count).is_err() {
            self.out_of_memory = true;
            self.width = 0; // nothing is pushed
            return;
        }
        self.coarse.resize_with(count, Vec::new);
    }

    /// The integer bucket of a key.
    #[inline(always)]
    fn bucket(width: usize, key: f64) -> usize {
        let top = (width - 1) as f64;
        if key >= top {
            width - 1
        } else if key > 0.0 {
            key as usize
        } else {
            0
        }
    }

    /// Adds the next item.
    #[inline(always)]
    pub fn push(&mut self, key: f64, value: i64) {
        if self.width == 0 {
            return;
        }
        let c = Self::bucket(self.width, key) >> FINE_BITS;
        let bucket = &mut self.coarse[c];
        if bucket.capacity() == 0 {
            *bucket = self.spare.pop().unwrap_or_default();
        }
        if bucket.len() == bucket.capacity() && bucket.try_reserve(1).is_err() {
            self.out_of_memory = true;
            return;
        }
        bucket.push((key, value));
    }

    /// An error if a bucket could not grow since [`SortScratch::begin`], with
    /// the buckets' memory given back first (the message needs some too).
    pub fn check_memory(&mut self) -> Result<()> {
        if !self.out_of_memory {
            return Ok(());
        }
        *self = SortScratch::default();
        Err(Error::Memory(
            "cannot allocate py1e's sort buckets: not enough memory".to_string(),
        ))
    }

    /// Writes out, in order, every coarse bucket whose keys all lie below
    /// `bound`: the caller promises that no item pushed from now on has a key
    /// below `bound`. Written items take the next positions of `out`, which
    /// must not be read again (for `py1e`: positions are pushed in order and
    /// a key is at most the shift bound away from its position).
    pub fn flush_below(&mut self, bound: f64, out: &mut [i64]) {
        while self.done < self.coarse.len() && (((self.done + 1) << FINE_BITS) as f64) <= bound {
            self.write_bucket(self.done, out);
            self.done += 1;
        }
    }

    /// Writes the pushed values, ordered by key, into `out`.
    pub fn finish(&mut self, out: &mut [i64]) {
        while self.done < self.coarse.len() {
            self.write_bucket(self.done, out);
            self.done += 1;
        }
        debug_assert_eq!(self.at, out.len(), "one value pushed per output slot");
    }

    /// The sub-bucket of a key within coarse bucket `c`: the key's
    /// `1/SUB_BUCKETS` step, clamped like [`SortScratch::bucket`] (scaling by
    /// a power of two is exact, so this refines the integer buckets).
    #[inline(always)]
    fn sub_bucket(width: usize, c: usize, key: f64) -> usize {
        let scaled = key * SUB_BUCKETS as f64;
        let top = (width * SUB_BUCKETS - 1) as f64;
        let sub = if scaled >= top {
            width * SUB_BUCKETS - 1
        } else if scaled > 0.0 {
            scaled as usize
        } else {
            0
        };
        sub - (c << FINE_BITS) * SUB_BUCKETS
    }

    /// Sorts coarse bucket `c` and writes its values at the next positions.
    fn write_bucket(&mut self, c: usize, out: &mut [i64]) {
        let steps = SUB_BUCKETS << FINE_BITS;
        let width = self.width;
        let mut bucket = std::mem::take(&mut self.coarse[c]);
        let n = bucket.len();
        if n > u32::MAX as usize {
            // Beyond the counters' range (never with py1e's keys): a plain
            // stable sort.
            bucket.sort_by(by_key);
            emit(&bucket, out, &mut self.at);
            self.recycle(bucket);
            return;
        }
        let grow = |len: usize| n.saturating_sub(len);
        if self.fine.try_reserve(grow(self.fine.len())).is_err()
            || self.sub_of.try_reserve(grow(self.sub_of.len())).is_err()
        {
            self.out_of_memory = true;
            self.recycle(bucket);
            return;
        }
        if self.fine.len() < n {
            self.fine.resize(n, (0.0, 0));
        }
        if self.sub_of.len() < n {
            self.sub_of.resize(n, 0);
        }
        // Counting sort on the sub-bucket, remembering each item's.
        let next = &mut self.next;
        next.clear();
        next.resize(steps, 0);
        let mut crowded = false;
        for (&(k, _), sub_of) in bucket.iter().zip(&mut self.sub_of) {
            let f = Self::sub_bucket(width, c, k);
            *sub_of = f as u32;
            next[f] += 1;
            crowded |= next[f] > 32;
        }
        let mut sum = 0;
        for slot in next.iter_mut() {
            let count = *slot;
            *slot = sum;
            sum += count;
        }
        let fine = &mut self.fine[..n];
        for (&item, &f) in bucket.iter().zip(&self.sub_of) {
            let f = f as usize;
            fine[next[f] as usize] = item;
            next[f] += 1;
        }
        // Items are now ordered by sub-bucket (`next[f]` is where sub-bucket
        // `f` ends): one insertion pass moves items only within their
        // sub-bucket, which holds a handful of items at most with py1e's
        // keys (so the pass rarely moves one at all). A crowded sub-bucket is
        // sorted on its own so the pass stays linear.
        if crowded {
            let mut start = 0;
            for &end in next.iter() {
                fine[start..end as usize].sort_by(by_key);
                start = end as usize;
            }
        } else {
            insertion_sort(fine);
        }
        emit(fine, out, &mut self.at);
        self.recycle(bucket);
    }

    /// Keeps an emptied bucket's memory for the next bucket to fill.
    fn recycle(&mut self, mut bucket: Vec<(f64, i64)>) {
        // Dropped, and its memory freed, when the spares cannot grow.
        if bucket.capacity() > 0 && self.spare.try_reserve(1).is_ok() {
            bucket.clear();
            self.spare.push(bucket);
        }
    }

    /// Reorders `values` by `keys` (same length); equal keys keep their order.
    pub fn sort(&mut self, keys: &[f64], values: &mut [i64]) -> Result<()> {
        let n = keys.len().min(values.len());
        self.begin(n);
        for (&k, &v) in keys[..n].iter().zip(&values[..n]) {
            self.push(k, v);
        }
        self.finish(&mut values[..n]);
        self.check_memory()
    }
}

/// Writes the values of sorted `items` at `out[*at..]` (as many as fit) and
/// moves `at` past them.
fn emit(items: &[(f64, i64)], out: &mut [i64], at: &mut usize) {
    let start = (*at).min(out.len());
    let end = (start + items.len()).min(out.len());
    for (o, &(_, v)) in out[start..end].iter_mut().zip(items) {
        *o = v;
    }
    *at = end;
}

/// Items in key order (keys are finite; `-0.0` and `0.0` are equal, as in
/// [`insertion_sort`] and numpy).
fn by_key(a: &(f64, i64), b: &(f64, i64)) -> std::cmp::Ordering {
    a.0.partial_cmp(&b.0).unwrap_or(std::cmp::Ordering::Equal)
}

/// A stable insertion sort by key (buckets hold a handful of items).
fn insertion_sort(items: &mut [(f64, i64)]) {
    for i in 1..items.len() {
        let item = items[i];
        let mut j = i;
        while j > 0 && items[j - 1].0 > item.0 {
            items[j] = items[j - 1];
            j -= 1;
        }
        items[j] = item;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let _threads = parallel::test_threads_lock();
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
    fn py1s_pieces_agree_across_thread_counts() {
        let _threads = parallel::test_threads_lock();
        // Many pieces: the generator's thread draws the swap partners of
        // some pieces for tasks and shuffles others itself, depending on
        // timing; the output must not depend on which.
        let sizes: Vec<i64> = (0..2000).map(|i| (i * 7919) % 2999 + 1).collect();
        parallel::set_num_threads(1);
        let one = get_shuffle(Algo::Py1s, &sizes, 5, 8, 3, 0).unwrap();
        for threads in [2, 3, 4] {
            parallel::set_num_threads(threads);
            let many = get_shuffle(Algo::Py1s, &sizes, 5, 8, 3, 0).unwrap();
            assert_eq!(one, many, "{threads} threads");
        }
        parallel::set_num_threads(0);
        assert!(one.ids.len() as i64 > 8 * PY1S_PIECE);
    }

    #[test]
    fn long_pieces_are_shuffled_by_tasks_from_the_generator() {
        let _threads = parallel::test_threads_lock();
        // More than MAX_RECORDED partners in a py1s piece (a long shard) or
        // in a py1e node (two canonical nodes): the piece is handed over as a
        // generator state, not as partners.
        let sizes = [(2 * MAX_RECORDED) as i64, 300_000, 7, 1, 0, 70_000];
        for (algo, ncn) in [(Algo::Py1s, 1), (Algo::Py1e, 2)] {
            parallel::set_num_threads(1);
            let one = get_shuffle(algo, &sizes, ncn, 8, 3, 1 << 18).unwrap();
            for threads in [2, 3] {
                parallel::set_num_threads(threads);
                let many = get_shuffle(algo, &sizes, ncn, 8, 3, 1 << 18).unwrap();
                assert_eq!(one, many, "{algo:?} {threads} threads");
            }
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn large_nodes_sorted_in_segments_agree_with_one_sort() {
        let _threads = parallel::test_threads_lock();
        // Segments of 4,096 shifted positions: every node below spans
        // several (one node, as a single task whose segments run on the
        // pool, or several nodes); blocks are sometimes smaller than pieces.
        let sizes: Vec<i64> = (0..500).map(|i| (i * 7919) % 300 + 1).collect();
        let n = total_samples(&sizes).unwrap();
        let (segment_len, block_size) = (4096, 256);
        let blocks = Py1eBlocks {
            low: scaled_block(0.75, block_size),
            high: scaled_block(1.25, block_size),
            block_size,
        };
        // A node of one-sample pieces stays whole (its plan would outweigh
        // the output).
        let tiny: Vec<Span> = (0..3 * segment_len).map(|i| (i, i + 1)).collect();
        assert_eq!(blocks.segment_count(&tiny, 3 * segment_len, segment_len), 1);
        let run = |ncn: u64| py1e(&sizes, n, ncn, 8, 11, block_size, segment_len).unwrap();
        for ncn in [1u64, 3, 7] {
            let ((spans, parts), _) = node_spans(&sizes, n, ncn, 8, 11).unwrap();
            for &(first, last) in &parts {
                let node = &spans[first..last];
                let len = node.iter().map(|&(b, e)| e - b).sum();
                assert!(blocks.segment_count(node, len, segment_len) > 1, "{ncn}");
            }
            parallel::set_num_threads(1);
            let one = run(ncn);
            assert!(one.1, "some block is smaller than its piece");
            for threads in [2, 3] {
                parallel::set_num_threads(threads);
                assert_eq!(one, run(ncn), "{ncn} nodes, {threads} threads");
            }
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn segments_cut_at_the_right_pieces_over_many_epochs() {
        // A piece whose shifts can cross a segment's start is counted and
        // sorted on both sides; a wrong margin shows in a few epochs of
        // hundreds only (373, 403 and 504 when the lower margin was +1).
        let _threads = parallel::test_threads_lock();
        let sizes: Vec<i64> = (0..500).map(|i| (i * 7919) % 300 + 1).collect();
        let n = total_samples(&sizes).unwrap();
        let epochs = if cfg!(debug_assertions) { 40 } else { 640 };
        parallel::set_num_threads(2);
        for epoch in 0..epochs {
            let whole = py1e(&sizes, n, 1, 8, epoch, 256, i64::MAX / 4).unwrap();
            let cut = py1e(&sizes, n, 1, 8, epoch, 256, 4096).unwrap();
            assert_eq!(whole, cut, "epoch {epoch}");
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn in_pieces_runs_every_piece_once_and_reports_the_first_failure() {
        let _threads = parallel::test_threads_lock();
        // Piece k shuffles k + 2 values and records the first; a piece
        // fails if it is in `failing`. Whether pieces are skipped for tasks
        // or run by the generator's thread (max_outstanding 0 forces the
        // latter), the draws and the error are those of a sequential run.
        let run_all = |max_outstanding: usize, failing: &[usize]| {
            let firsts: Vec<Mutex<u32>> = (0..100).map(|_| Mutex::new(0)).collect();
            let mut rng = Generator::new(11);
            let outcome = in_pieces(
                &mut rng,
                0..100usize,
                max_outstanding,
                |rng, &k| {
                    rng.skip_shuffle(k + 2);
                    Ok(())
                },
                |rng, k, _| {
                    if failing.contains(&k) {
                        // Later pieces fail later, so that a later failure
                        // can be recorded after an earlier one.
                        std::thread::sleep(std::time::Duration::from_micros(300 * k as u64));
                        return Err(Error::Value(format!("piece {k}")));
                    }
                    let mut items: Vec<u32> = (0..k as u32 + 2).collect();
                    rng.shuffle(&mut items);
                    *lock(&firsts[k]) = items[0] + 1;
                    Ok(())
                },
            );
            let firsts: Vec<u32> = firsts
                .into_iter()
                .map(|m| m.into_inner().unwrap())
                .collect();
            (outcome, firsts)
        };
        parallel::set_num_threads(1);
        let (ok, expect) = run_all(0, &[]);
        parallel::set_num_threads(0);
        assert!(ok.is_ok() && expect.iter().all(|&f| f > 0));
        for threads in [1, 2, 4] {
            parallel::set_num_threads(threads);
            for max_outstanding in [0, 1, 4, 1000] {
                let (ok, firsts) = run_all(max_outstanding, &[]);
                assert!(ok.is_ok());
                assert_eq!(firsts, expect, "{threads} threads, {max_outstanding}");
                for failing in [&[0usize][..], &[1], &[5, 30], &[99]] {
                    let (err, _) = run_all(max_outstanding, failing);
                    let want = format!("piece {}", failing[0]);
                    assert!(
                        matches!(&err, Err(Error::Value(m)) if *m == want),
                        "{err:?}"
                    );
                }
            }
        }
        parallel::set_num_threads(0);
    }

    #[test]
    fn parallel_errors_are_errors() {
        let _threads = parallel::test_threads_lock();
        // A block size that gives no valid random block fails in the first
        // node, skipped or run, on any number of threads.
        let sizes = vec![1000i64; 300];
        for threads in [1, 2, 4] {
            parallel::set_num_threads(threads);
            let out = get_shuffle(Algo::Py1e, &sizes, 6, 1, 2, 0);
            parallel::set_num_threads(0);
            assert!(matches!(out, Err(Error::Value(_))), "{threads} threads");
        }
    }

    #[test]
    fn divide_spans_splits_at_part_boundaries() {
        let (pieces, parts) = divide_spans(vec![(0, 5), (5, 5), (5, 12)], 12, 3).unwrap();
        assert_eq!(pieces, [(0, 4), (4, 5), (5, 5), (5, 8), (8, 12)]);
        assert_eq!(parts, [(0, 1), (1, 4), (4, 5)]);
    }

    #[test]
    fn sort_by_keys_is_stable_on_ties() {
        let keys = [2.5, 0.25, 2.5, 0.25, 1.0, 2.5, 0.0];
        let mut out = [10, 11, 12, 13, 14, 15, 16];
        sort_by_keys(&keys, &mut out).unwrap();
        assert_eq!(out, [16, 11, 13, 14, 10, 12, 15]);
        // -0.0 and 0.0 are equal keys, also in a crowded sub-bucket.
        let keys: Vec<f64> = (0..40)
            .map(|i| if i % 2 == 0 { 0.0 } else { -0.0 })
            .collect();
        let mut out: Vec<i64> = (0..40).collect();
        sort_by_keys(&keys, &mut out).unwrap();
        assert_eq!(out, (0..40).collect::<Vec<i64>>());
        // Many coarse buckets, keys out of range, big tie groups: compare
        // with a stable comparison sort.
        let mut g = Generator::new(3);
        for n in [1usize, 2, 5000, 20_000] {
            let keys: Vec<f64> = (0..n)
                .map(|_| ((g.random() * 1.2 - 0.1) * n as f64 / 3.0).floor() / 2.0)
                .collect();
            let samples: Vec<i64> = (0..n as i64).map(|i| i * 7).collect();
            let mut order: Vec<usize> = (0..n).collect();
            order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
            let expect: Vec<i64> = order.iter().map(|&i| samples[i]).collect();
            let mut out = samples.clone();
            sort_by_keys(&keys, &mut out).unwrap();
            assert_eq!(out, expect, "n {n}");
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
