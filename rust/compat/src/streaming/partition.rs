//! MosaicML Streaming's sample partitions (`get_partitions`, algorithms
//! "orig" and "relaxed"), element for element, from position arithmetic.
//!
//! Streaming builds its partition with a chain of numpy reshapes over the
//! whole epoch. Each step is an index map, so their composition gives every
//! output element in O(1) from its 5-d index. The output has the axes
//! `(physical node, rank of node, worker of rank, batch of worker, slot)`.
//!
//! The maps, outermost first ("orig" over `P` physical nodes, `R` ranks per
//! node, `W` workers per rank, batch size `B`):
//!
//! 1. Slot `(p, r, w, t, e)` is sample `s = (t * W + w) * B + e` of rank
//!    `(p, r)`; past `K` (samples per rank) it is `-1`.
//! 2. Sample `s` of rank `r` is column `col = s * R + r` of node `p`. Columns
//!    past `M` (the node's samples) repeat earlier columns, so that `R`
//!    divides the row: `col - R - u + 1` normally (`u` added columns), or
//!    `(col - M) % M` when the row is shorter than that.
//! 3. Column `i` of node `p` is flat position `f = D + i * P + p` of the
//!    canonical order (`D`: `drop_first` rounded down to a multiple of `P`).
//! 4. Flat position `f` is element `(c, j) = (f % C, f / C)` of the canonical
//!    matrix: `C` rows (canonical nodes) of `Sp` columns. Row `c` covers the
//!    samples `[c * N / C, (c + 1) * N / C)` (floors); a row one short repeats
//!    its last sample; columns past `S = ceil(N / C)` (present when `C < P`,
//!    to make each row divisible by `P / C`) repeat earlier columns at a fixed
//!    distance. With fewer samples than canonical nodes the matrix is instead
//!    `0, 1, ..., N - 1` repeated, row after row.
//!
//! "relaxed", resuming on `P` nodes a run that started on `I` nodes, reads the
//! "orig" partition over `I` nodes (batch size `P * B / I`) in training order
//! and deals it again over `P` nodes: a reindexing of step 1.
//!
//! Filling walks runs of slots along which the flat position grows by a
//! constant, so the inner loop has no division. Work is split into fixed
//! pieces on the fork-safe pool; the result does not depend on the thread
//! count.

use epochplan_core::buffer::zeroed_ids;
use epochplan_core::error::{Error, Result};
use epochplan_core::parallel;

/// The largest sample id or output size: ids and shapes are int64.
const MAX: u128 = i64::MAX as u128;

/// A run of slots shorter than this is filled column-wise (along batches).
const SHORT_RUN: u64 = 16;

/// Streaming's partition algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Algo {
    /// Canonical and physical node counts must divide one another.
    Orig,
    /// Like `Orig`, but resuming on a node count incompatible with the
    /// canonical nodes keeps the global sample order of the initial run.
    Relaxed,
}

impl Algo {
    /// Parses "orig" or "relaxed".
    pub fn parse(name: &str) -> Option<Algo> {
        match name {
            "orig" => Some(Algo::Orig),
            "relaxed" => Some(Algo::Relaxed),
            _ => None,
        }
    }

    /// The algorithm's name.
    pub fn name(self) -> &'static str {
        match self {
            Algo::Orig => "orig",
            Algo::Relaxed => "relaxed",
        }
    }

    /// Whether a given `initial_physical_nodes` shapes the partition: only
    /// under "relaxed", resuming on a physical node count that does not
    /// divide (or is not a multiple of) the canonical one. Otherwise
    /// Streaming does not read it.
    pub fn reads_initial_physical_nodes(
        self,
        num_canonical_nodes: u64,
        num_physical_nodes: u64,
    ) -> bool {
        let (c, p) = (num_canonical_nodes, num_physical_nodes);
        let compatible = c != 0
            && if p <= c {
                c.is_multiple_of(p)
            } else {
                p.is_multiple_of(c)
            };
        self == Algo::Relaxed && !compatible
    }
}

/// The arguments of Streaming's `get_partitions`, with its names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionArgs {
    /// Dataset size.
    pub num_samples: u64,
    /// Canonical nodes: the node count the sample order is defined for.
    pub num_canonical_nodes: u64,
    /// Physical nodes of this run.
    pub num_physical_nodes: u64,
    /// Ranks per node.
    pub ranks_per_node: u64,
    /// DataLoader workers per rank.
    pub workers_per_rank: u64,
    /// Per-rank batch size.
    pub batch_size: u64,
    /// Samples already seen in this epoch, skipped.
    pub drop_first: u64,
    /// Physical nodes at the start of training ("relaxed" only).
    pub initial_physical_nodes: Option<u64>,
}

/// Something Streaming reports while partitioning, besides the result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// Raised with `warnings.warn` (category `UserWarning`).
    Warning(String),
    /// Logged at level WARNING.
    Log(String),
}

mod canonical;

use canonical::{Canonical, ComputedStarts, RowStarts, TableStarts};

/// Steps 1 to 3: the "orig" partition over `nodes` physical nodes.
#[derive(Debug, Clone, Copy)]
struct Layout {
    canonical: Canonical,
    /// P.
    nodes: u64,
    /// R.
    ranks: u64,
    /// W.
    workers: u64,
    /// B.
    batch: u64,
    /// `drop_first`, rounded down to a multiple of P.
    drop: u64,
    /// M, the columns of each node before rank padding.
    node_width: u64,
    /// u, the columns added so that R divides the row.
    extra: u64,
    /// The added columns cycle through the row (it is shorter than R + u - 1).
    extra_wraps: bool,
    /// K, the samples of each rank.
    rank_len: u64,
    /// Batches per worker.
    batches: u64,
    /// The walk to the next sample.
    unit: Walk,
    /// The walk to the same slot of the worker's next batch.
    next_batch: Walk,
}

/// Streaming's message when canonical and physical node counts do not divide
/// one another, to the word.
const NOT_DIVISIBLE: &str = "Either canonical or physical nodes must be evenly divisible by \
     the other, otherwise striping slices of shards over nodes may lead to each node \
     downloading all shards";

/// A count Streaming divides by: zero is refused, naming it.
fn positive(name: &str, value: u64) -> Result<()> {
    if value == 0 {
        return Err(Error::Value(format!(
            "{name} must be an int in [1, 2**63 - 1], got 0"
        )));
    }
    Ok(())
}

fn overflow(what: &str, value: u128) -> Error {
    Error::Overflow(format!(
        "{what} = {value} is more than 2**63 - 1; the partition cannot be represented"
    ))
}

/// The product of `factors`, an overflow error naming it as `what` when it
/// does not fit in 128 bits.
fn product(what: &str, factors: &[u64]) -> Result<u128> {
    factors
        .iter()
        .try_fold(1u128, |acc, &f| acc.checked_mul(u128::from(f)))
        .ok_or_else(|| {
            Error::Overflow(format!(
                "{what} is more than 2**128; the partition cannot be represented"
            ))
        })
}

fn fits(what: &str, value: u128) -> Result<u64> {
    if value > MAX {
        return Err(overflow(what, value));
    }
    Ok(value as u64)
}

impl Layout {
    /// The "orig" algorithm. `nodes_name` names the argument that gave the
    /// physical node count (it is `initial_physical_nodes` under "relaxed").
    #[allow(clippy::too_many_arguments)]
    fn new(
        samples: u64,
        canonical_nodes: u64,
        nodes: u64,
        nodes_name: &str,
        ranks: u64,
        workers: u64,
        batch: u64,
        drop_first: u64,
        notices: &mut Vec<Notice>,
    ) -> Result<Layout> {
        let (n, c, p) = (samples, canonical_nodes, nodes);
        positive("num_canonical_nodes", c)?;
        positive(nodes_name, p)?;
        positive("ranks_per_node", ranks)?;
        if (c < p && p % c != 0) || (p < c && c % p != 0) {
            return Err(Error::Value(format!(
                "{NOT_DIVISIBLE}: num_canonical_nodes ({c}) and {nodes_name} ({p}) must be \
                 multiples of one another"
            )));
        }
        // Streaming divides by these only after its own checks above, so
        // those come first (as in Streaming), these before any notice.
        positive("num_samples", n)?;
        positive("workers_per_rank", workers)?;
        positive("batch_size", batch)?;
        let mut drop = drop_first;
        if !drop.is_multiple_of(p) {
            notices.push(Notice::Log(
                "`drop_first` was not divisible by `num_physical_nodes`. Rounding it down to \
                 make it divisible."
                    .to_string(),
            ));
            drop -= drop % p;
        }

        let width = n.div_ceil(c);
        let ratio = if c < p { p / c } else { 1 };
        let padding = (ratio - width % ratio) % ratio;
        let padded_width = u128::from(width) + u128::from(padding);
        let wrapped = !(n > c || (n == c && c >= p));
        if wrapped {
            notices.push(Notice::Warning(format!(
                "Trying to partition {n} samples over {c} canonical nodes. This will result in \
                 many samples being repeated, and depending on your batching method, batches \
                 being completely dropped. Check if your dataset has the expected number of \
                 samples, and consider decreasing the number of canonical nodes."
            )));
        } else if padding > 0 && width + 1 < padding + ratio {
            // Each padding column copies the column `padding + ratio - 1`
            // before it, which does not exist here.
            return Err(Error::Value(format!(
                "num_samples ({n}) over num_canonical_nodes ({c}) gives {width} samples per \
                 canonical node, too few to pad them for {ratio} physical nodes per canonical \
                 node ({nodes_name} = {p}); at least {} are needed (Streaming fails here too)",
                padding + ratio - 1
            )));
        }
        let total = u128::from(c) * padded_width;
        fits(
            "num_canonical_nodes * padded samples per canonical node",
            total,
        )?;
        let canonical = Canonical {
            samples: n,
            nodes: c,
            width,
            padded_width: padded_width as u64,
            pad_shift: padding + ratio - 1,
            wrapped,
        };

        let total = total as u64;
        let node_width = total.saturating_sub(drop) / p;
        let over = node_width % ranks;
        let extra = if over == 0 { 0 } else { ranks - over };
        let extra_wraps = extra > 0 && ranks + extra - 1 > node_width;
        if extra_wraps {
            notices.push(Notice::Warning(format!(
                "Attempting to partition {node_width} samples per physical node over {ranks} \
                 gpus. This will result in many samples being repeated, and depending on your \
                 batching method, batches being completely dropped. Check if your dataset has \
                 the expected number of samples."
            )));
        }
        let rank_len = (node_width + extra) / ranks;
        let per_batch_round = u128::from(workers) * u128::from(batch);
        // At most rank_len, which is below 2^64.
        let batches = u128::from(rank_len).div_ceil(per_batch_round) as u64;
        let what = format!(
            "the partition's size ({nodes_name} * ranks_per_node * workers_per_rank * \
             batches per worker * batch_size = {p} * {ranks} * {workers} * {batches} * {batch})"
        );
        fits(&what, product(&what, &[p, ranks, workers, batch, batches])?)?;
        let mut layout = Layout {
            canonical,
            nodes: p,
            ranks,
            workers,
            batch,
            drop,
            node_width,
            extra,
            extra_wraps,
            rank_len,
            batches,
            unit: Walk {
                ds: 1,
                stride: (0, 0),
                period: u64::MAX,
                delta: 0,
            },
            next_batch: Walk {
                ds: 1,
                stride: (0, 0),
                period: u64::MAX,
                delta: 0,
            },
        };
        // The walks' strides fit because the partition's size does; with no
        // batches (everything dropped) the size bounds nothing, and nothing
        // walks.
        if batches > 0 {
            layout.unit = layout.walk(1);
            layout.next_batch = layout.walk(workers * batch);
        }
        Ok(layout)
    }

    /// How the flat position moves when the sample index moves by `ds`.
    fn walk(&self, ds: u64) -> Walk {
        let df = ds * self.ranks * self.nodes;
        let rows = self.canonical.nodes;
        let period = rows / gcd(df % rows, rows);
        let delta = u128::from(period) * u128::from(df) / u128::from(rows);
        let (period, delta) = match u64::try_from(delta) {
            Ok(delta) => (period, delta),
            Err(_) => (u64::MAX, 0),
        };
        Walk {
            ds,
            stride: self.canonical.stride(df),
            period,
            delta,
        }
    }

    /// Writes samples `s0, s0 + ds, ...` of rank `r` of node `p` into the
    /// `count` slots of `out` (`-1` past the rank's samples).
    fn fill_samples<'a>(
        &self,
        starts: &impl RowStarts,
        (p, r): (u64, u64),
        s0: u64,
        walk: Walk,
        count: u64,
        out: impl Iterator<Item = &'a mut i64>,
    ) {
        if count == 0 {
            return;
        }
        let ds = walk.ds;
        let mut out = out.take(count as usize);
        // Samples below `plain` are columns of the node's row, below
        // `rank_len` added columns; the rest is padding.
        let last = s0 + (count - 1) * ds;
        let (n_plain, n_valid) = if last * self.ranks + r < self.node_width {
            (count, count)
        } else {
            let plain = if self.node_width > r {
                (self.node_width - r).div_ceil(self.ranks)
            } else {
                0
            };
            let below = |limit: u64| {
                if s0 >= limit {
                    0
                } else {
                    count.min((limit - s0).div_ceil(ds))
                }
            };
            (below(plain), below(self.rank_len))
        };
        if n_plain > 0 {
            let f0 = self.drop + (s0 * self.ranks + r) * self.nodes + p;
            let at = self.canonical.locate(f0);
            self.canonical
                .run(starts, at, walk.stride, n_plain, out.by_ref());
        }
        for (k, slot) in (n_plain..n_valid).zip(out.by_ref()) {
            let col = (s0 + k * ds) * self.ranks + r;
            let i = if self.extra_wraps {
                (col - self.node_width) % self.node_width
            } else {
                col + 1 - self.ranks - self.extra
            };
            *slot = self.canonical.at(starts, self.drop + i * self.nodes + p);
        }
        for slot in out {
            *slot = -1;
        }
    }
}

impl Layout {
    /// Whole batches from batch `t0` of worker `w` of rank `r` of node `p`,
    /// one run per batch, stepping the flat position from batch to batch
    /// without division.
    fn fill_batch_runs(
        &self,
        starts: &impl RowStarts,
        (p, r): (u64, u64),
        w: u64,
        t0: u64,
        out: &mut [i64],
    ) {
        let batch = self.batch;
        let first = (t0 * self.workers + w) * batch;
        let mut at = self
            .canonical
            .locate(self.drop + (first * self.ranks + r) * self.nodes + p);
        for (k, chunk) in out.chunks_mut(batch as usize).enumerate() {
            let s0 = first + k as u64 * self.next_batch.ds;
            if (s0 + batch - 1) * self.ranks + r < self.node_width {
                self.canonical.run_slice(starts, at, &self.unit, chunk);
            } else {
                self.fill_samples_slice(starts, (p, r), s0, &self.unit, chunk);
            }
            at = self.canonical.advance(at, self.next_batch.stride);
        }
    }

    /// [`Layout::fill_samples`] into a slice: through
    /// [`Canonical::run_slice`] when every sample is a column of the row.
    fn fill_samples_slice(
        &self,
        starts: &impl RowStarts,
        (p, r): (u64, u64),
        s0: u64,
        walk: &Walk,
        out: &mut [i64],
    ) {
        let count = out.len() as u64;
        if count > 0 && (s0 + (count - 1) * walk.ds) * self.ranks + r < self.node_width {
            let f0 = self.drop + (s0 * self.ranks + r) * self.nodes + p;
            self.canonical
                .run_slice(starts, self.canonical.locate(f0), walk, out);
        } else {
            self.fill_samples(starts, (p, r), s0, *walk, count, out.iter_mut());
        }
    }
}

/// A walk through a rank's samples: the sample step, the flat stride, and
/// the walk's period: after `period` steps the row repeats and the sample
/// has grown by exactly `delta` (`u64::MAX` when that does not fit).
#[derive(Debug, Clone, Copy)]
struct Walk {
    ds: u64,
    stride: (u64, u64),
    period: u64,
    delta: u64,
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// Streaming's first check, made before the algorithm is looked up:
/// `drop_first` may not pass the end of the epoch padded to a multiple of
/// the world size (`num_physical_nodes * ranks_per_node`).
pub fn check_drop_first(args: &PartitionArgs) -> Result<()> {
    let a = *args;
    let world = u128::from(a.num_physical_nodes) * u128::from(a.ranks_per_node);
    if world == 0 {
        return Err(Error::Value(format!(
            "num_physical_nodes and ranks_per_node must be >= 1, got {} and {}",
            a.num_physical_nodes, a.ranks_per_node
        )));
    }
    let n = u128::from(a.num_samples);
    let padded = n + world - n % world;
    if u128::from(a.drop_first) > padded {
        // Streaming's message, then which bound drop_first passed.
        return Err(Error::Value(format!(
            "Resuming further into the dataset ({}) than it has samples ({}): drop_first \
             must be at most num_samples padded to the next multiple of num_physical_nodes \
             * ranks_per_node ({world}), {padded}",
            a.drop_first, a.num_samples
        )));
    }
    Ok(())
}

/// Streaming's partition for one set of arguments, ready to be filled in
/// whole or in part.
#[derive(Debug, Clone)]
pub struct Partition {
    layout: Layout,
    /// "relaxed" over other nodes than the layout's: the output's node count
    /// and batch size.
    remap: Option<(u64, u64)>,
    shape: [u64; 5],
    notices: Vec<Notice>,
}

impl Partition {
    /// Checks the arguments as Streaming does, in its order, and resolves
    /// the layout. The errors are Streaming's (all `Error::Value`, except
    /// sizes beyond int64).
    pub fn new(algo: Algo, args: &PartitionArgs) -> Result<Partition> {
        Partition::resolve(algo, args).0
    }

    /// [`Partition::new`], with the notices Streaming gives on the way,
    /// including those it gives before failing.
    pub fn resolve(algo: Algo, args: &PartitionArgs) -> (Result<Partition>, Vec<Notice>) {
        let mut notices = Vec::new();
        let partition = Partition::build(algo, args, &mut notices).map(|mut p| {
            p.notices.clone_from(&notices);
            p
        });
        (partition, notices)
    }

    fn build(algo: Algo, args: &PartitionArgs, notices: &mut Vec<Notice>) -> Result<Partition> {
        check_drop_first(args)?;
        let a = *args;
        let (p, r, b) = (a.num_physical_nodes, a.ranks_per_node, a.batch_size);
        let c = a.num_canonical_nodes;
        // Streaming divides by it in its next check, under either algorithm.
        positive("num_canonical_nodes", c)?;
        let initial = a
            .initial_physical_nodes
            .filter(|_| algo.reads_initial_physical_nodes(c, p));
        let Some(initial) = initial else {
            let layout = Layout::new(
                a.num_samples,
                c,
                p,
                "num_physical_nodes",
                r,
                a.workers_per_rank,
                b,
                a.drop_first,
                notices,
            )?;
            let shape = [p, r, layout.workers, layout.batches, b];
            return Ok(Partition {
                layout,
                remap: None,
                shape,
                notices: Vec::new(),
            });
        };
        if initial == 0 {
            return Err(Error::Value(
                "initial_physical_nodes must be None or >= 1, got 0".to_string(),
            ));
        }
        let global = product(
            "num_physical_nodes * ranks_per_node * batch_size",
            &[p, r, b],
        )?;
        let initial_world = u128::from(initial) * u128::from(r);
        if global % initial_world != 0 {
            // Streaming's message, then the arguments it is made of.
            return Err(Error::Value(format!(
                "A global batch size of {global} is not evenly divisible by the initial total \
                 number of devices of {initial_world}. Make sure that when using the `relaxed` \
                 partitioning algorithm, the global batch size does not change during \
                 resumption of training. (num_physical_nodes * ranks_per_node * batch_size \
                 must be a multiple of initial_physical_nodes * ranks_per_node.)"
            )));
        }
        let initial_batch = fits(
            "the initial batch size (num_physical_nodes * batch_size / initial_physical_nodes)",
            global / initial_world,
        )?;
        let layout = Layout::new(
            a.num_samples,
            c,
            initial,
            "initial_physical_nodes",
            r,
            a.workers_per_rank,
            initial_batch,
            a.drop_first,
            notices,
        )?;
        let shape = [p, r, layout.workers, layout.batches, b];
        Ok(Partition {
            layout,
            remap: Some((p, b)),
            shape,
            notices: Vec::new(),
        })
    }

    /// The output's shape: (physical nodes, ranks per node, workers per
    /// rank, batches per worker, batch size).
    pub fn shape(&self) -> [u64; 5] {
        self.shape
    }

    /// The number of output elements (it fits in an i64).
    pub fn len(&self) -> u64 {
        self.shape.iter().product()
    }

    /// Whether the output has no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The number of elements of one rank's part: `shape[2..].product()`.
    pub fn part_len(&self) -> u64 {
        self.shape[2..].iter().product()
    }

    /// Streaming's warnings and log messages for these arguments, in order.
    pub fn notices(&self) -> &[Notice] {
        &self.notices
    }

    /// Checks a (node, rank) pair and returns the offset of its part.
    pub fn part_offset(&self, node: u64, rank: u64) -> Result<u64> {
        let [nodes, ranks, ..] = self.shape;
        if node >= nodes {
            return Err(Error::Index(format!(
                "node must be in [0, {nodes}) (num_physical_nodes = {nodes}), got {node}"
            )));
        }
        if rank >= ranks {
            return Err(Error::Index(format!(
                "rank must be in [0, {ranks}) (ranks_per_node = {ranks}), got {rank}"
            )));
        }
        Ok((node * ranks + rank) * self.part_len())
    }

    /// The whole partition, flat in C order.
    pub fn to_vec(&self) -> Result<Vec<i64>> {
        let mut out = zeroed_ids(self.len(), "the partition")?;
        self.fill(0, &mut out);
        Ok(out)
    }

    /// The part of rank `rank` of node `node` (all its workers), flat in C
    /// order: `full[node, rank]`. Time and memory proportional to the part.
    pub fn part(&self, node: u64, rank: u64) -> Result<Vec<i64>> {
        let offset = self.part_offset(node, rank)?;
        let mut out = zeroed_ids(self.part_len(), "the partition part")?;
        self.fill(offset, &mut out);
        Ok(out)
    }

    /// Writes the flat (C order) output elements `offset..offset + out.len()`
    /// into `out`, on the pool when it is large.
    ///
    /// # Panics
    /// If the window extends past [`Partition::len`].
    pub fn fill(&self, offset: u64, out: &mut [i64]) {
        assert!(
            offset + out.len() as u64 <= self.len(),
            "window past the end of the partition"
        );
        let canonical = &self.layout.canonical;
        let rows = canonical.nodes;
        if canonical.wrapped || rows >= out.len() as u64 {
            let starts = ComputedStarts {
                n: canonical.samples,
                nodes: rows,
            };
            self.fill_parallel(&starts, offset, out);
        } else {
            let starts = ComputedStarts {
                n: canonical.samples,
                nodes: rows,
            };
            let table = TableStarts((0..=rows).map(|c| starts.get(c)).collect());
            self.fill_parallel(&table, offset, out);
        }
    }

    fn fill_parallel<S: RowStarts + Sync>(&self, starts: &S, offset: u64, out: &mut [i64]) {
        parallel::for_each_piece(out, parallel::PIECE, |at, piece| {
            self.fill_window(starts, offset + at as u64, piece);
        });
    }

    /// Fills any window, one batch (or run of whole batches) at a time.
    fn fill_window(&self, starts: &impl RowStarts, offset: u64, out: &mut [i64]) {
        let [_, ranks, workers, batches, batch] = self.shape;
        let mut pos = offset;
        let mut done = 0usize;
        while done < out.len() {
            let left = (out.len() - done) as u64;
            let e = pos % batch;
            let t = (pos / batch) % batches;
            let block = pos / batch / batches;
            let (p, r, w) = (
                block / (ranks * workers),
                (block / workers) % ranks,
                block % workers,
            );
            let whole = if e == 0 {
                (batches - t).min(left / batch)
            } else {
                0
            };
            let len = if whole > 0 {
                let len = (whole * batch) as usize;
                self.fill_batches(starts, [p, r, w, t], whole, &mut out[done..done + len]);
                len
            } else {
                let len = (batch - e).min(left) as usize;
                self.fill_slots(starts, [p, r, w, t], e, &mut out[done..done + len]);
                len
            };
            done += len;
            pos += len as u64;
        }
    }

    /// Slots `e0..e0 + out.len()` of batch `t` of worker `w` of rank `(p, r)`.
    fn fill_slots(&self, starts: &impl RowStarts, at: [u64; 4], e0: u64, out: &mut [i64]) {
        let [p, r, w, t] = at;
        let l = &self.layout;
        let Some((_, batch)) = self.remap else {
            let s0 = (t * l.workers + w) * l.batch + e0;
            l.fill_samples_slice(starts, (p, r), s0, &l.unit, out);
            return;
        };
        // In training order a step is the same global batch on either node
        // count: slot e of rank (p, r) is global slot g, which belongs to
        // rank g / initial_batch of the initial run.
        let ib = l.batch;
        let mut g = (p * l.ranks + r) * batch + e0;
        let mut rest = out;
        while !rest.is_empty() {
            let (p0, r0, e) = (g / (l.ranks * ib), (g / ib) % l.ranks, g % ib);
            let len = (ib - e).min(rest.len() as u64);
            let (now, later) = rest.split_at_mut(len as usize);
            let s0 = (t * l.workers + w) * ib + e;
            l.fill_samples_slice(starts, (p0, r0), s0, &l.unit, now);
            rest = later;
            g += len;
        }
    }

    /// `count` whole batches from batch `t` of worker `w` of rank `(p, r)`.
    fn fill_batches(&self, starts: &impl RowStarts, at: [u64; 4], count: u64, out: &mut [i64]) {
        let [p, r, w, t] = at;
        let l = &self.layout;
        let batch = self.shape[4];
        let run = match self.remap {
            None => batch,
            Some(_) => batch.min(l.batch),
        };
        if run >= SHORT_RUN && self.remap.is_none() {
            l.fill_batch_runs(starts, (p, r), w, t, out);
            return;
        }
        if run >= SHORT_RUN || count == 1 {
            for (k, chunk) in out.chunks_mut(batch as usize).enumerate() {
                self.fill_slots(starts, [p, r, w, t + k as u64], 0, chunk);
            }
            return;
        }
        // Short runs: fill slot e of every batch at once; consecutive batches
        // are a constant number of samples apart. A column is computed
        // contiguously, then spread over the batches.
        let walk = l.next_batch;
        let mut column = vec![0; if batch == 1 { 0 } else { count as usize }];
        for e in 0..batch {
            let (p0, r0, e0) = match self.remap {
                None => (p, r, e),
                Some(_) => {
                    let g = (p * l.ranks + r) * batch + e;
                    (
                        g / (l.ranks * l.batch),
                        (g / l.batch) % l.ranks,
                        g % l.batch,
                    )
                }
            };
            let s0 = (t * l.workers + w) * l.batch + e0;
            if batch == 1 {
                l.fill_samples_slice(starts, (p0, r0), s0, &walk, out);
                return;
            }
            l.fill_samples_slice(starts, (p0, r0), s0, &walk, &mut column);
            let slots = out[e as usize..].iter_mut().step_by(batch as usize);
            for (slot, &value) in slots.zip(&column) {
                *slot = value;
            }
        }
    }
}

#[cfg(test)]
mod tests;
