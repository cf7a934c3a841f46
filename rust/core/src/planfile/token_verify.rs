//! Verifying a token plan's epoch: every file's header, size and checksum
//! (files in parallel), the step offsets of every rank, then a batch of
//! steps at a time (steps in parallel). Without the lengths, each step's own
//! rules: coverage, stored lengths, step table, micro-batch caps and counts
//! and the balance bound. With them, every stored value against the dealing
//! recomputed from them; a step equal to it keeps every rule (the dealing
//! does), and only a step that differs is checked rule by rule, for the
//! error that names what differs. Memory holds one batch of steps, whatever
//! `N`.
//!
//! A plan over `0..N` whose order has an inverse is dealt again from its
//! stored values, put back in the epoch's order, and those are tied to the
//! arrays by an order-free sum of `(id, value)` pairs over the epoch
//! ([`PairSums`]): the arrays are read once in id order (a memory-mapped
//! file's pages given back as the pass goes), never by id, so the process
//! maps none of a large lengths file for long. Only when the sums differ
//! are the stored values compared with the arrays by id, for the error
//! that names the first sample that differs. Any other plan is dealt again
//! from the arrays, read by id.

use super::staging::{batch_arrays, can_stage, StagedBatch, StagedBatches};
use super::tokens::{deal_token_step, first_error, DealtStep, TokenArraysRef, STEP_COLUMNS};
use super::verify::{check_file, ExpectedFile};
use super::write::{interrupted, with_progress};
use crate::error::{Error, Result};
use crate::parallel;
use crate::plan::Plan;
use crate::tokens::{cut_share, Caps, Cost};
use rayon::prelude::*;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Steps whose recomputed dealing is compared at once: a mismatch names
/// the range it falls in (as the writer deals it).
pub const DEALING_RANGE_SAMPLES: u64 = 1 << 18;
/// Dealing ranges read and checked per batch.
const RANGES_PER_BATCH: u64 = 2;

/// An epoch's token plan files as its manifest lists them.
#[derive(Debug, Clone)]
pub struct TokenEpochFiles {
    /// Per rank, its ids file.
    pub ids: Vec<ExpectedFile>,
    /// Per rank, its offsets file.
    pub offsets: Vec<ExpectedFile>,
    /// Per rank, its lengths file.
    pub lengths: Vec<ExpectedFile>,
    /// Per rank, its loss tokens file (only when they are not the lengths).
    pub loss_tokens: Option<Vec<ExpectedFile>>,
    /// The step table.
    pub steps: ExpectedFile,
}

/// What an epoch's verification checks against.
#[derive(Debug, Clone, Copy)]
pub struct TokenCheck<'a> {
    /// The balanced plan of the epoch.
    pub plan: &'a Plan,
    /// Its ranks.
    pub world_size: u64,
    /// Its micro-batch caps.
    pub caps: Caps,
    /// Its cost model (the balance bound).
    pub cost: Cost,
    /// The plan directory and the epoch, as errors name them.
    pub dir: &'a Path,
    /// The epoch.
    pub epoch: u64,
}

/// The `count` values from index `start` of a checked file.
fn read_values(file: &ExpectedFile, start: u64, count: u64) -> Result<Vec<i64>> {
    let path = &file.path;
    let size = file.dtype.itemsize() as u64;
    let header = file.bytes - size * file.count;
    let mut f = File::open(path).map_err(|e| Error::io(path, "cannot open", &e))?;
    f.seek(SeekFrom::Start(header + size * start))
        .map_err(|e| Error::io(path, "cannot read", &e))?;
    let mut bytes = vec![0u8; (size * count) as usize];
    f.read_exact(&mut bytes)
        .map_err(|e| Error::io(path, "cannot read", &e))?;
    let mut values = Vec::with_capacity(count as usize);
    file.dtype.decode(&bytes, &mut values);
    Ok(values)
}

/// A float as Python prints it (`12.0`, not `12`).
fn py_float(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e16 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

fn py_opt(x: Option<u64>) -> String {
    x.map_or_else(|| "None".to_string(), |v| v.to_string())
}

/// One rank's stored share of a step: ids, lengths, loss tokens (None:
/// the lengths).
type Share = (Vec<i64>, Vec<i64>, Option<Vec<i64>>);

/// One step's stored shares, rank by rank.
struct Stored {
    row: [i64; STEP_COLUMNS],
    /// Per rank: ids, lengths, loss tokens (None: the lengths).
    shares: Vec<Share>,
}

/// What recomputing one step's dealing found: an error dealing it, or
/// whether its table row differs and the first rank whose ids differ. It is
/// reported after every step's own checks (as a range of steps).
#[derive(Default)]
struct StepFinding {
    error: Option<Error>,
    table_differs: bool,
    bad_rank: Option<usize>,
    /// Every stored value (ids, lengths, loss tokens, the table row) is the
    /// recomputed dealing's.
    exact: bool,
}

impl StepFinding {
    fn any(&self) -> bool {
        self.error.is_some() || self.table_differs || self.bad_rank.is_some()
    }
}

impl TokenCheck<'_> {
    fn at(&self, step: u64, what: impl std::fmt::Display) -> Error {
        Error::plan_file(
            self.dir,
            format!("epoch {}, step {step}: {what}", self.epoch),
        )
    }

    fn at_rank(&self, step: u64, rank: usize, what: impl std::fmt::Display) -> Error {
        Error::plan_file(
            self.dir,
            format!("epoch {}, step {step}, rank {rank}: {what}", self.epoch),
        )
    }

    /// The checks of one stored step that need no lengths file.
    fn check_step(&self, step: u64, s: &Stored) -> Result<()> {
        let [t, m, filler, filler_length] = s.row;
        let mut ids: Vec<i64> = s.shares.iter().flat_map(|x| x.0.iter().copied()).collect();
        let lengths: Vec<i64> = s.shares.iter().flat_map(|x| x.1.iter().copied()).collect();
        let mut want = self.plan.step_ids(step)?;
        let order_ids = ids.clone();
        ids.sort_unstable();
        want.sort_unstable();
        if ids != want {
            return Err(self.at(step, "the ranks' ids are not exactly the step's samples"));
        }
        if lengths.iter().any(|&l| l < 0) {
            return Err(self.at(step, "a stored length is negative"));
        }
        let loss_total: i128 = s
            .shares
            .iter()
            .flat_map(|x| x.2.as_ref().unwrap_or(&x.1).iter())
            .map(|&v| i128::from(v))
            .sum();
        if loss_total != i128::from(t) {
            return Err(self.at(
                step,
                format!("the step table says T_t = {t}, the stored loss tokens {loss_total}"),
            ));
        }
        let shortest = lengths.iter().copied().min().unwrap_or(0);
        let found = order_ids.iter().position(|&id| id == filler);
        if filler_length != shortest || found.is_none_or(|i| lengths[i] != filler_length) {
            return Err(self.at(
                step,
                format!(
                    "the filler is sample {filler} of length {filler_length}, not one of the \
                     step's shortest samples (length {shortest})"
                ),
            ));
        }
        let (b, cap) = (self.caps.micro_batch_size(), self.caps.max_tokens());
        if cap.is_some_and(|c| filler_length as u64 > c) {
            return Err(self.at(
                step,
                format!(
                    "the filler holds {filler_length} tokens, over max_tokens {}",
                    py_opt(cap)
                ),
            ));
        }
        let m_cut = m.max(1) as u64;
        let mut runs_max = 0;
        for (r, (_, share, _)) in s.shares.iter().enumerate() {
            let share: Vec<u64> = share.iter().map(|&l| l as u64).collect();
            let cuts = cut_share(&share, self.caps, m_cut)?;
            runs_max = runs_max.max(cuts.runs);
            let mut start = 0;
            for (k, &end) in cuts.ends.iter().enumerate() {
                let tokens: u128 = share[start..end].iter().map(|&l| u128::from(l)).sum();
                let count = (end - start) as u64;
                let over_tokens = cap.is_some_and(|c| tokens > u128::from(c));
                if over_tokens || b.is_some_and(|b| count > b) {
                    return Err(self.at_rank(
                        step,
                        r,
                        format!(
                            "micro-batch {k} holds {count} samples and {tokens} tokens, over \
                             the caps (micro_batch_size={}, max_tokens={})",
                            py_opt(b),
                            py_opt(cap)
                        ),
                    ));
                }
                start = end;
            }
            if cuts.ends.len() as i64 > m {
                return Err(self.at_rank(
                    step,
                    r,
                    format!(
                        "has {} micro-batches, the other ranks {m}: every rank must have the \
                         same count",
                        cuts.ends.len()
                    ),
                ));
            }
        }
        let made = runs_max.max(1) as i64;
        if m != made {
            return Err(self.at(
                step,
                format!("the step table says {m} micro-batches, the step's shares make {made}"),
            ));
        }
        self.check_balance(step, s)
    }

    fn check_balance(&self, step: u64, s: &Stored) -> Result<()> {
        let w = self.world_size;
        let empty = w > s.shares.len() as u64;
        match self.cost {
            Cost::Tokens => {
                let loads = s
                    .shares
                    .iter()
                    .map(|x| x.1.iter().map(|&l| l as u128).sum::<u128>());
                let (mut lo, mut hi) = (if empty { 0 } else { u128::MAX }, 0u128);
                for load in loads {
                    lo = lo.min(load);
                    hi = hi.max(load);
                }
                let largest = s.shares.iter().flat_map(|x| x.1.iter()).max();
                let largest = largest.map_or(0, |&l| l as u128);
                if hi.saturating_sub(lo) > largest {
                    return Err(self.spread_error(
                        step,
                        (hi - lo).to_string(),
                        largest.to_string(),
                    ));
                }
            }
            Cost::Quadratic { .. } => {
                let loads: Vec<f64> = s
                    .shares
                    .iter()
                    .map(|x| x.1.iter().map(|&l| self.cost.of(l as u64)).sum::<f64>())
                    .chain(empty.then_some(0.0))
                    .collect();
                let hi = loads.iter().copied().fold(f64::MIN, f64::max);
                let lo = loads.iter().copied().fold(f64::MAX, f64::min);
                let largest = s
                    .shares
                    .iter()
                    .flat_map(|x| x.1.iter())
                    .map(|&l| self.cost.of(l as u64))
                    .fold(0.0, f64::max);
                if hi - lo > largest + 1e-9 * hi {
                    return Err(self.spread_error(step, py_float(hi - lo), py_float(largest)));
                }
            }
        }
        Ok(())
    }

    fn spread_error(&self, step: u64, spread: String, largest: String) -> Error {
        self.at(
            step,
            format!(
                "the ranks' costs spread by {spread}, more than the step's largest single cost \
                 {largest} (the balance bound)"
            ),
        )
    }

    /// The stored lengths and loss tokens against the arrays'.
    fn compare(&self, step: u64, s: &Stored, arrays: TokenArraysRef<'_>) -> Result<()> {
        for (r, (ids, lengths, loss)) in s.shares.iter().enumerate() {
            for (name, stored, values) in [
                ("lengths", Some(lengths), Some(arrays.lengths)),
                ("loss_tokens", loss.as_ref(), arrays.loss_tokens),
            ] {
                let (Some(stored), Some(values)) = (stored, values) else {
                    continue;
                };
                let mut actual = Vec::with_capacity(ids.len());
                values.read(name, ids, &mut actual)?;
                if let Some(i) = (0..ids.len()).find(|&i| actual[i] as i128 != stored[i] as i128) {
                    return Err(self.at_rank(
                        step,
                        r,
                        format!(
                            "the stored {name} of sample {} is {}, the {name} file has {}",
                            ids[i], stored[i], actual[i]
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The stored step against the dealing recomputed from the arrays.
    fn against_dealing(&self, step: u64, s: &Stored, arrays: TokenArraysRef<'_>) -> StepFinding {
        let dealt: DealtStep =
            match deal_token_step(self.plan, arrays, self.world_size, self.caps, step) {
                Ok(dealt) => dealt,
                Err(error) => {
                    return StepFinding {
                        error: Some(error),
                        ..StepFinding::default()
                    }
                }
            };
        let bad_rank = s
            .shares
            .iter()
            .enumerate()
            .find(|(r, x)| dealt.of(&dealt.ids, *r) != x.0.as_slice())
            .map(|(r, _)| r);
        let table_differs = dealt.row != s.row;
        let values_equal = s.shares.iter().enumerate().all(|(r, (_, lengths, loss))| {
            dealt.of(&dealt.lengths, r) == lengths.as_slice()
                && loss
                    .as_ref()
                    .is_none_or(|l| dealt.of(&dealt.loss_tokens, r) == l.as_slice())
        });
        StepFinding {
            error: None,
            table_differs,
            bad_rank,
            exact: bad_rank.is_none() && !table_differs && values_equal,
        }
    }
}

/// An order-free sum of `(id, value)` pairs, in two keyed 64-bit lanes,
/// for the lengths and for the loss tokens. An epoch's stored values (each
/// id once) sum as the arrays' do when every stored value is the array's;
/// one value that differs always changes the sum (a lane's term is a
/// bijection of the value for a given id), several that differ by
/// accident cancel out with a chance of about 2^-128. (The keys are
/// constants: this checks against corruption, not against changes made to
/// cancel out.)
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct PairSums {
    lengths: [u64; 2],
    loss_tokens: [u64; 2],
}

/// The lanes' keys.
const LANE_KEYS: [u64; 2] = [0x9E37_79B9_7F4A_7C15, 0xD1B5_4A32_D192_ED03];

/// SplitMix64's finaliser, a bijection of u64.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn add_pair(lanes: &mut [u64; 2], id: u64, value: u64) {
    for (lane, key) in lanes.iter_mut().zip(LANE_KEYS) {
        *lane = lane.wrapping_add(mix(mix(id ^ key).wrapping_add(value)));
    }
}

impl PairSums {
    fn merge(self, other: PairSums) -> PairSums {
        let add = |a: [u64; 2], b: [u64; 2]| [a[0].wrapping_add(b[0]), a[1].wrapping_add(b[1])];
        PairSums {
            lengths: add(self.lengths, other.lengths),
            loss_tokens: add(self.loss_tokens, other.loss_tokens),
        }
    }

    /// The sums of a batch's stored shares.
    fn of_stored(stored: &[Stored]) -> Result<PairSums> {
        parallel::install(|| {
            stored
                .par_iter()
                .map(|s| {
                    let mut sums = PairSums::default();
                    for (ids, lengths, loss) in &s.shares {
                        for (k, &id) in ids.iter().enumerate() {
                            add_pair(&mut sums.lengths, id as u64, lengths[k] as u64);
                            if let Some(loss) = loss {
                                add_pair(&mut sums.loss_tokens, id as u64, loss[k] as u64);
                            }
                        }
                    }
                    sums
                })
                .reduce(PairSums::default, PairSums::merge)
        })
    }

    /// The sums of the arrays' values of the ids `plan`'s epoch holds (all
    /// `N`, but those of a short last step `drop_last` drops), as the plan
    /// reads them: one pass in id order on every core, a memory-mapped
    /// file's pages given back behind it.
    /// `stop` set stops the pass within a run with an "interrupted" error.
    fn of_arrays(arrays: TokenArraysRef<'_>, plan: &Plan, stop: &AtomicBool) -> Result<PairSums> {
        const RUN: u64 = 1 << 20;
        let layout = plan.layout();
        let n = layout.num_samples();
        let kept = match layout.num_steps() {
            0 => 0,
            steps => layout.span(steps - 1).map(|s| s.start + s.len)?,
        };
        let runs = n.div_ceil(RUN);
        let sums = parallel::install(|| {
            (0..runs)
                .into_par_iter()
                .map(|r| {
                    if stop.load(Ordering::Relaxed) {
                        return Err(interrupted());
                    }
                    let (start, end) = (r * RUN, n.min((r + 1) * RUN));
                    let mut sums = PairSums::default();
                    let mut values = Vec::with_capacity((end - start) as usize);
                    // Where each id is, when the epoch does not hold them all.
                    let positions = (kept < n).then(|| {
                        let mut p: Vec<i64> = (start as i64..end as i64).collect();
                        plan.order().invert_slice(&mut p);
                        p
                    });
                    for (lanes, source, name) in [
                        (&mut sums.lengths, Some(arrays.lengths), "lengths"),
                        (&mut sums.loss_tokens, arrays.loss_tokens, "loss_tokens"),
                    ] {
                        let Some(source) = source else {
                            continue;
                        };
                        values.clear();
                        source.read_run(name, start, end, &mut values)?;
                        for (k, &v) in values.iter().enumerate() {
                            if positions.as_ref().is_none_or(|p| (p[k] as u64) < kept) {
                                add_pair(lanes, start + k as u64, v);
                            }
                        }
                    }
                    Ok(sums)
                })
                .collect::<Vec<Result<PairSums>>>()
        })?;
        sums.into_iter()
            .try_fold(PairSums::default(), |acc, s| Ok(acc.merge(s?)))
    }
}

/// Steps `[start, end)` of `plan` as stored, their values by position:
/// what the dealing is recomputed from, once the epoch's [`PairSums`] tie
/// them to the arrays. None when the plan cannot be read by position
/// ([`can_stage`]) or the stored ids are not exactly each step's (the
/// step's own checks then name what is wrong).
fn stored_by_position<'a>(
    plan: &'a Plan,
    start: u64,
    end: u64,
    stored: &[Stored],
    loss: bool,
) -> Option<StagedBatches<'a>> {
    if !can_stage(plan) || start >= end {
        return None;
    }
    let first = plan.layout().span(start).ok()?.start;
    let last = plan.layout().span(end - 1).ok()?;
    let len = (last.start + last.len - first) as usize;
    let n = plan.layout().num_samples();
    let mut lengths = vec![u64::MAX; len];
    let mut losses = vec![u64::MAX; if loss { len } else { 0 }];
    let spans: Vec<_> = (start..end)
        .map(|t| plan.layout().span(t))
        .collect::<Result<_>>()
        .ok()?;
    // Each step's values are one run of positions: steps in parallel.
    let mut pieces = Vec::with_capacity(spans.len());
    let (mut rest, mut rest_loss) = (&mut lengths[..], &mut losses[..]);
    for span in &spans {
        let (piece, tail) = rest.split_at_mut(span.len as usize);
        let (loss_piece, loss_tail) =
            rest_loss.split_at_mut(if loss { span.len as usize } else { 0 });
        pieces.push((piece, loss_piece));
        (rest, rest_loss) = (tail, loss_tail);
    }
    let filled = parallel::install(|| {
        pieces
            .into_par_iter()
            .zip(stored.par_iter().zip(&spans))
            .all(|((values, loss_values), (s, span))| {
                let ids: Vec<i64> = s.shares.iter().flat_map(|x| x.0.iter().copied()).collect();
                if ids.len() as u64 != span.len || ids.iter().any(|&id| id < 0 || id as u64 >= n) {
                    return false;
                }
                let mut positions = ids;
                plan.order().invert_slice(&mut positions);
                let mut k = 0;
                for (_, stored_lengths, stored_loss) in &s.shares {
                    if loss && stored_loss.is_none() {
                        return false;
                    }
                    for (i, &value) in stored_lengths.iter().enumerate() {
                        let at = (positions[k] as u64).wrapping_sub(span.start) as usize;
                        k += 1;
                        if at >= values.len() || values[at] != u64::MAX || value < 0 {
                            return false;
                        }
                        values[at] = value as u64;
                        if let Some(stored_loss) = stored_loss.as_ref().filter(|_| loss) {
                            if stored_loss[i] < 0 {
                                return false;
                            }
                            loss_values[at] = stored_loss[i] as u64;
                        }
                    }
                }
                true
            })
    })
    .ok()?;
    if !filled {
        return None;
    }
    let order = plan.order();
    Some((
        StagedBatch::new(first, lengths, order),
        loss.then(|| StagedBatch::new(first, losses, order)),
    ))
}

fn check_lengths(files: &TokenEpochFiles, world_size: u64) -> Result<()> {
    let w = world_size as usize;
    let n = [
        files.ids.len(),
        files.offsets.len(),
        files.lengths.len(),
        files.loss_tokens.as_ref().map_or(w, Vec::len),
    ];
    if n.iter().any(|&k| k != w) {
        return Err(Error::Value(format!(
            "files must list one file per rank ({world_size}) for every role, got {n:?}"
        )));
    }
    Ok(())
}

/// Verifies one epoch of a token plan (see the module docs). Returns the
/// error of the recomputed dealing, when the lengths are given and it
/// differs from the stored one: the caller checks the lengths' digests
/// before it (a changed lengths file explains it better).
pub fn verify_token_files(
    check: TokenCheck<'_>,
    files: &TokenEpochFiles,
    arrays: Option<TokenArraysRef<'_>>,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<Option<Error>> {
    check_lengths(files, check.world_size)?;
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop) = (&done, &stop);
    with_progress(done, stop, progress, move || {
        verify_epoch(check, files, arrays, done, stop)
    })
}

fn verify_epoch(
    check: TokenCheck<'_>,
    files: &TokenEpochFiles,
    arrays: Option<TokenArraysRef<'_>>,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> Result<Option<Error>> {
    let w = check.world_size as usize;
    // Every file's checksum first, reported in the order files are opened:
    // ids, lengths, loss tokens, offsets, the step table.
    let all: Vec<&ExpectedFile> = files
        .ids
        .iter()
        .chain(&files.lengths)
        .chain(files.loss_tokens.iter().flatten())
        .chain(&files.offsets)
        .chain([&files.steps])
        .collect();
    parallel::install(|| {
        all.par_iter()
            .map(|f| check_file(f, stop, done))
            .collect::<Vec<_>>()
    })
    .and_then(first_error)?;
    let num_steps = check.plan.layout().num_steps();
    if files.steps.count != STEP_COLUMNS as u64 * num_steps {
        return Err(Error::plan_file(
            &files.steps.path,
            format!(
                "holds {} values, the plan's {num_steps} steps need {}",
                files.steps.count,
                STEP_COLUMNS as u64 * num_steps
            ),
        ));
    }
    // The offsets: an increasing cut of each rank file.
    for r in 0..w {
        let offsets = &files.offsets[r];
        let count = files.ids[r].count as i64;
        let bad = || {
            Error::plan_file(
                check.dir,
                format!(
                    "epoch {}, rank {r}: the step offsets are not an increasing cut of the rank \
                     file's {count} ids",
                    check.epoch
                ),
            )
        };
        if offsets.count != num_steps + 1 {
            return Err(bad());
        }
        let mut previous = 0i64;
        let mut index = 0u64;
        while index < offsets.count {
            let len = (offsets.count - index).min(1 << 20);
            let values = read_values(offsets, index, len)?;
            for (k, &v) in values.iter().enumerate() {
                let first = index == 0 && k == 0;
                if (first && v != 0) || v < previous {
                    return Err(bad());
                }
                previous = v;
            }
            index += len;
        }
        if previous != count {
            return Err(bad());
        }
    }
    let per_range = (DEALING_RANGE_SAMPLES / check.plan.layout().global_batch_size().max(1)).max(1);
    // Whole ranges per batch: a range's findings are all in one batch.
    let per_batch = per_range * RANGES_PER_BATCH;
    let mut dealing_error: Option<(u64, Error)> = None;
    // A plan over `0..N` (whose order has an inverse) is dealt again from
    // its stored values, tied to the arrays by their sums; any other from
    // the arrays, read by id.
    let by_values = can_stage(check.plan);
    let mut stored_sums = PairSums::default();
    let mut start = 0;
    while start < num_steps {
        let (end, stored) = next_batch(files, w, (start, per_batch, num_steps), stop)?;
        // The stored values by position, when they cover the batch: the
        // dealing is recomputed from them, and they are tied to the arrays
        // by the epoch's pair sums below (the arrays are not read by id).
        let by_position = arrays.and_then(|a| {
            stored_by_position(check.plan, start, end, &stored, a.loss_tokens.is_some())
        });
        if arrays.is_some() && by_values {
            stored_sums = stored_sums.merge(PairSums::of_stored(&stored)?);
        }
        let mut findings = parallel::install(|| {
            stored
                .par_iter()
                .enumerate()
                .map(|(k, s)| {
                    let step = start + k as u64;
                    let Some(a) = arrays else {
                        return check.check_step(step, s).map(|()| StepFinding::default());
                    };
                    // A step stored exactly as the arrays deal it keeps every
                    // rule (the dealing does). Any other gets the stored
                    // step's own checks and its values against the arrays
                    // first: their errors name what differs best.
                    let dealt_from = by_position.as_ref().map_or(a, batch_arrays);
                    let finding = check.against_dealing(step, s, dealt_from);
                    if !finding.exact {
                        check.check_step(step, s)?;
                        check.compare(step, s, a)?;
                    }
                    Ok(finding)
                })
                .collect::<Vec<_>>()
        })
        .and_then(first_error)?;
        if dealing_error.is_none() {
            dealing_error =
                dealing_mismatch(check, start, end, per_range, num_steps, &mut findings);
        }
        start = end;
    }
    if let Some((_, error)) = dealing_error {
        return Ok(Some(error));
    }
    let Some(arrays) = arrays.filter(|_| by_values) else {
        return Ok(None);
    };
    if stored_sums == PairSums::of_arrays(arrays, check.plan, stop)? {
        return Ok(None);
    }
    // Some stored value is not the arrays': found (and named) by id.
    let mut start = 0;
    while start < num_steps {
        let (end, stored) = next_batch(files, w, (start, per_batch, num_steps), stop)?;
        for (k, s) in stored.iter().enumerate() {
            if let Err(error) = check.compare(start + k as u64, s, arrays) {
                return Ok(Some(error));
            }
        }
        start = end;
    }
    Err(Error::plan_file(
        check.dir,
        format!(
            "epoch {}: the stored lengths and loss tokens do not sum as the arrays' do",
            check.epoch
        ),
    ))
}

/// The first range (of `per_range` steps from 0) holding a step of
/// `[start, end)` whose recomputed dealing differs, and its error.
fn dealing_mismatch(
    check: TokenCheck<'_>,
    start: u64,
    end: u64,
    per_range: u64,
    num_steps: u64,
    findings: &mut [StepFinding],
) -> Option<(u64, Error)> {
    let first = (start..end).find(|&t| findings[(t - start) as usize].any())?;
    let range_start = first / per_range * per_range;
    let range_end = num_steps.min(range_start + per_range);
    // Batches hold whole ranges. A range is dealt first (its first error),
    // then its table compared, then its ids.
    let steps = range_start.max(start)..range_end.min(end);
    if let Some(t) = steps
        .clone()
        .find(|&t| findings[(t - start) as usize].error.is_some())
    {
        let error = findings[(t - start) as usize].error.take()?;
        return Some((range_start, error));
    }
    let in_range = |t: u64| &findings[(t - start) as usize];
    let table = steps.clone().any(|t| in_range(t).table_differs);
    let where_ = format!("epoch {}", check.epoch);
    if table {
        return Some((
            range_start,
            Error::plan_file(
                check.dir,
                format!(
                    "{where_}: the step table of steps [{range_start}, {range_end}) differs \
                     from the one the lengths give"
                ),
            ),
        ));
    }
    let rank = steps.filter_map(|t| in_range(t).bad_rank).min()?;
    Some((
        range_start,
        Error::plan_file(
            check.dir,
            format!(
                "{where_}, rank {rank}: the ids of steps [{range_start}, {range_end}) are not \
                 the balanced dealing of the lengths"
            ),
        ),
    ))
}

/// Steps `[start, end)` as stored: the table rows and every rank's shares.
/// The end of the batch of steps from `start` (at most `per_batch` steps,
/// none past `num_steps`) and its stored steps; an "interrupted" error once
/// `stop` is set.
fn next_batch(
    files: &TokenEpochFiles,
    w: usize,
    (start, per_batch, num_steps): (u64, u64, u64),
    stop: &AtomicBool,
) -> Result<(u64, Vec<Stored>)> {
    if stop.load(Ordering::Relaxed) {
        return Err(interrupted());
    }
    let end = num_steps.min(start + per_batch);
    Ok((end, read_batch(files, w, start, end)?))
}

fn read_batch(files: &TokenEpochFiles, w: usize, start: u64, end: u64) -> Result<Vec<Stored>> {
    let n = (end - start) as usize;
    let table = read_values(
        &files.steps,
        start * STEP_COLUMNS as u64,
        n as u64 * STEP_COLUMNS as u64,
    )?;
    let per_rank = parallel::install(|| {
        (0..w)
            .into_par_iter()
            .map(|r| {
                let offsets = read_values(&files.offsets[r], start, n as u64 + 1)?;
                let (a, b) = (offsets[0] as u64, offsets[n] as u64);
                let ids = read_values(&files.ids[r], a, b - a)?;
                let lengths = read_values(&files.lengths[r], a, b - a)?;
                let loss = match &files.loss_tokens {
                    Some(l) => Some(read_values(&l[r], a, b - a)?),
                    None => None,
                };
                Ok((offsets, ids, lengths, loss))
            })
            .collect::<Vec<Result<_>>>()
    })
    .and_then(first_error)?;
    let mut stored: Vec<Stored> = (0..n)
        .map(|k| Stored {
            row: [
                table[STEP_COLUMNS * k],
                table[STEP_COLUMNS * k + 1],
                table[STEP_COLUMNS * k + 2],
                table[STEP_COLUMNS * k + 3],
            ],
            shares: Vec::with_capacity(w),
        })
        .collect();
    for (offsets, ids, lengths, loss) in &per_rank {
        let base = offsets[0];
        for (k, s) in stored.iter_mut().enumerate() {
            let (a, b) = (
                (offsets[k] - base) as usize,
                (offsets[k + 1] - base) as usize,
            );
            s.shares.push((
                ids[a..b].to_vec(),
                lengths[a..b].to_vec(),
                loss.as_ref().map(|l| l[a..b].to_vec()),
            ));
        }
    }
    Ok(stored)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_sums_ignore_the_order_and_see_any_one_value_change() {
        let ids: Vec<i64> = (0..1000).collect();
        let values: Vec<i64> = ids.iter().map(|i| i * 7 % 300 + 1).collect();
        let stored = |ids: &[i64], values: &[i64]| Stored {
            row: [0; STEP_COLUMNS],
            shares: vec![(ids.to_vec(), values.to_vec(), None)],
        };
        let sums = PairSums::of_stored(&[stored(&ids, &values)]).unwrap();
        // The same pairs in another order and split over two steps.
        let (mut r_ids, mut r_values) = (ids.clone(), values.clone());
        r_ids.reverse();
        r_values.reverse();
        let split = [
            stored(&r_ids[..400], &r_values[..400]),
            stored(&r_ids[400..], &r_values[400..]),
        ];
        assert_eq!(PairSums::of_stored(&split).unwrap(), sums);
        // And the arrays' own sum, read in id order.
        let lengths: Vec<u64> = values.iter().map(|&v| v as u64).collect();
        let plan = Plan::new(
            crate::Order::new(1000, 1, 0, crate::Kind::Cipher).unwrap(),
            100,
            false,
            0,
        )
        .unwrap();
        let arrays = TokenArraysRef {
            lengths: &lengths.as_slice(),
            loss_tokens: None,
        };
        assert_eq!(
            PairSums::of_arrays(arrays, &plan, &AtomicBool::new(false)).unwrap(),
            sums
        );
        for k in [0usize, 499, 999] {
            for delta in [1i64, -1, 1 << 40] {
                let mut changed = values.clone();
                changed[k] += delta;
                assert_ne!(
                    PairSums::of_stored(&[stored(&ids, &changed)]).unwrap(),
                    sums
                );
            }
        }
        // Two values swapped between ids: a different set of pairs.
        let mut swapped = values.clone();
        swapped.swap(3, 4);
        assert_ne!(
            PairSums::of_stored(&[stored(&ids, &swapped)]).unwrap(),
            sums
        );
    }
}
