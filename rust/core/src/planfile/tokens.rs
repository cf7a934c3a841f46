//! Writing a token plan's epoch: every step dealt once (steps in parallel
//! on the pool), then every rank's files appended (ranks in parallel), a
//! batch of steps at a time, so memory holds one batch whatever `N`.
//!
//! Per rank it writes the ids in dealing order, the step offsets into them,
//! their lengths and (when not the lengths) their loss tokens; per epoch the
//! step table (`T_t`, `M`, the filler's id and length per step). Each file
//! is a 1-d little-endian `.npy` (int64, but for the lengths and loss tokens
//! in their [`FileDtype`]) whose header is written again with its count at
//! the end; its checksum is then read back (from the page cache), files in
//! parallel.

use super::npy::{npy_file_size_of, npy_header_of, FileDtype};
use super::staging::{batch_arrays, StagedArrays, StagedBatches};
use super::write::{interrupted, with_progress};
use super::{file_checksum, FileInfo};
use crate::dealing::SampleLengths;
use crate::error::{Error, Result};
use crate::parallel;
use crate::plan::Plan;
use crate::tokens::Caps;
use rayon::prelude::*;
use std::fs::File;
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

const I64: FileDtype = FileDtype::I64;

/// Samples dealt per batch of steps (about 40 MiB held for them).
pub const TOKEN_BATCH_SAMPLES: u64 = 1 << 21;
/// Columns of the step table: `T_t`, `M`, the filler's id and length.
pub const STEP_COLUMNS: usize = 4;

/// A token plan's lengths and loss tokens (None: the lengths), read by id
/// from any thread.
#[derive(Clone, Copy)]
pub struct TokenArraysRef<'a> {
    /// Tokens per sample of the store.
    pub lengths: &'a (dyn SampleLengths + Sync),
    /// Loss tokens per sample, when not the lengths.
    pub loss_tokens: Option<&'a (dyn SampleLengths + Sync)>,
}

impl std::fmt::Debug for TokenArraysRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenArraysRef")
            .field("num_samples", &self.lengths.num_samples())
            .field("loss_tokens", &self.loss_tokens.is_some())
            .finish()
    }
}

/// Where an epoch's token plan files go (each created new).
#[derive(Debug, Clone)]
pub struct TokenPaths {
    /// The ranks whose files are written, increasing (every rank of the
    /// epoch, or a part's ranks): the per-rank paths below are theirs.
    pub ranks: Vec<u64>,
    /// Per rank, its ids.
    pub ids: Vec<PathBuf>,
    /// Per rank, its step offsets.
    pub offsets: Vec<PathBuf>,
    /// Per rank, its lengths.
    pub lengths: Vec<PathBuf>,
    /// Per rank, its loss tokens (only when they are not the lengths).
    pub loss_tokens: Option<Vec<PathBuf>>,
    /// The epoch's step table, unless a part written elsewhere holds it.
    pub steps: Option<PathBuf>,
    /// The type the lengths files hold.
    pub lengths_dtype: FileDtype,
    /// The type the loss tokens files hold.
    pub loss_tokens_dtype: FileDtype,
}

/// What was written for one epoch, file by file as [`TokenPaths`] names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenFiles {
    /// Per rank, its ids file.
    pub ids: Vec<FileInfo>,
    /// Per rank, its offsets file.
    pub offsets: Vec<FileInfo>,
    /// Per rank, its lengths file.
    pub lengths: Vec<FileInfo>,
    /// Per rank, its loss tokens file.
    pub loss_tokens: Option<Vec<FileInfo>>,
    /// The step table, when it was written.
    pub steps: Option<FileInfo>,
}

/// A value of a plan file, or the error saying it does not fit in one.
pub fn to_i64(value: u128, what: impl FnOnce() -> String) -> Result<i64> {
    i64::try_from(value).map_err(|_| {
        Error::Value(format!(
            "{} is {value}, above 2**63 - 1: a plan file cannot hold it",
            what()
        ))
    })
}

/// One step dealt: its table row and, rank after rank (the first
/// `starts.len() - 1`; the others hold nothing), its ids, lengths and loss
/// tokens in dealing order.
#[derive(Debug, Default)]
pub struct DealtStep {
    /// `T_t`, `M`, the filler's id and length.
    pub row: [i64; STEP_COLUMNS],
    /// Where each rank's samples start in the vectors below.
    pub starts: Vec<usize>,
    /// Sample ids.
    pub ids: Vec<i64>,
    /// Their lengths.
    pub lengths: Vec<i64>,
    /// Their loss tokens (empty when they are the lengths).
    pub loss_tokens: Vec<i64>,
}

impl DealtStep {
    /// Rank `rank`'s part of `values` (one of this step's vectors).
    pub fn of<'a>(&self, values: &'a [i64], rank: usize) -> &'a [i64] {
        match (self.starts.get(rank), self.starts.get(rank + 1)) {
            (Some(&a), Some(&b)) => &values[a..b],
            _ => &[],
        }
    }

    /// Rank `rank`'s sample count.
    pub fn count(&self, rank: usize) -> usize {
        self.of(&self.ids, rank).len()
    }
}

/// Deals step `step` of a balanced `plan` to `world_size` ranks under `caps`.
pub fn deal_token_step(
    plan: &Plan,
    arrays: TokenArraysRef<'_>,
    world_size: u64,
    caps: Caps,
    step: u64,
) -> Result<DealtStep> {
    let loss_reader = arrays.loss_tokens.map(|l| l as &dyn SampleLengths);
    let samples = plan.step_samples(step, arrays.lengths, loss_reader)?;
    let dealing = plan.layout().deal_step(&samples, world_size, caps)?;
    let filler = dealing.filler();
    let row = [
        to_i64(samples.step_tokens(), || {
            format!("the loss tokens of step {step}")
        })?,
        dealing.num_micro_batches() as i64,
        samples.ids[filler],
        to_i64(samples.lengths[filler].into(), || {
            format!("lengths[{}]", samples.ids[filler])
        })?,
    ];
    let n = samples.ids.len();
    let has_loss = samples.loss_tokens.is_some();
    let loss = samples.loss_tokens();
    let active = world_size.min(n as u64) as usize;
    let mut out = DealtStep {
        row,
        starts: Vec::with_capacity(active + 1),
        ids: Vec::with_capacity(n),
        lengths: Vec::with_capacity(n),
        loss_tokens: Vec::with_capacity(if has_loss { n } else { 0 }),
    };
    out.starts.push(0);
    for rank in 0..active as u64 {
        for &i in dealing.share(rank)? {
            let id = samples.ids[i];
            out.ids.push(id);
            out.lengths.push(to_i64(samples.lengths[i].into(), || {
                format!("lengths[{id}]")
            })?);
            if has_loss {
                out.loss_tokens
                    .push(to_i64(loss[i].into(), || format!("loss_tokens[{id}]"))?);
            }
        }
        out.starts.push(out.ids.len());
    }
    Ok(out)
}

/// Deals steps `[start, stop)` in parallel on the pool, in order; the
/// first step's error (in step order) when any fails.
pub fn deal_token_steps(
    plan: &Plan,
    arrays: TokenArraysRef<'_>,
    world_size: u64,
    caps: Caps,
    start: u64,
    stop: u64,
) -> Result<Vec<DealtStep>> {
    parallel::install(|| {
        (start..stop)
            .into_par_iter()
            .map(|step| deal_token_step(plan, arrays, world_size, caps, step))
            .collect::<Vec<_>>()
    })
    .and_then(first_error)
}

/// The values, or the first error in their order (rayon's own collect into
/// a `Result` keeps any one of the errors, not the first).
pub fn first_error<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    results.into_iter().collect()
}

/// Steps per batch for a plan whose steps hold `global_batch_size` samples.
pub fn steps_per_batch(global_batch_size: u64) -> u64 {
    (TOKEN_BATCH_SAMPLES / global_batch_size.max(1)).max(1)
}

/// Appends the values of `parts` as little-endian `dtype` to the file at
/// `path` (`bytes` is the buffer they are converted in).
fn append<'a>(
    path: &Path,
    dtype: FileDtype,
    parts: impl Iterator<Item = &'a [i64]> + Clone,
    bytes: &mut Vec<u8>,
) -> Result<()> {
    let total: usize = parts.clone().map(<[i64]>::len).sum();
    if total == 0 {
        return Ok(());
    }
    bytes.clear();
    for part in parts {
        dtype.extend(part, bytes).map_err(|v| {
            // The values come from a source of this type: a cut only
            // lowers them.
            Error::Value(format!(
                "{}: {v} does not fit the file's {}",
                path.display(),
                dtype.descr()
            ))
        })?;
    }
    let mut f = File::options()
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, "cannot open", &e))?;
    f.write_all(bytes)
        .map_err(|e| Error::io(path, "cannot write", &e))
}

/// Creates the file at `path` (never overwriting) with a header of no values.
fn create(path: &Path, dtype: FileDtype) -> Result<()> {
    let mut f = File::options()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(path, "cannot create", &e))?;
    f.write_all(&npy_header_of(dtype, 0))
        .map_err(|e| Error::io(path, "cannot write", &e))
}

/// Writes the header of `count` values over the file's first one, syncs
/// the file and reads it back for its checksum.
fn finish(path: &Path, dtype: FileDtype, count: u64, fsync: bool) -> Result<FileInfo> {
    let header = npy_header_of(dtype, count);
    if header.len() != npy_header_of(dtype, 0).len() {
        return Err(Error::Value(format!(
            "{}: the .npy header of {count} values changed size",
            path.display()
        )));
    }
    let mut f = File::options()
        .write(true)
        .open(path)
        .map_err(|e| Error::io(path, "cannot open", &e))?;
    f.seek(SeekFrom::Start(0))
        .and_then(|_| f.write_all(&header))
        .map_err(|e| Error::io(path, "cannot write", &e))?;
    if fsync {
        f.sync_all()
            .map_err(|e| Error::io(path, "cannot write", &e))?;
    }
    drop(f);
    Ok(FileInfo {
        count,
        bytes: npy_file_size_of(dtype, count) as u64,
        checksum: file_checksum(path)?,
    })
}

/// One rank's files and running count while an epoch is written.
struct RankOut<'a> {
    ids: &'a Path,
    offsets: &'a Path,
    lengths: &'a Path,
    loss_tokens: Option<&'a Path>,
    dtypes: (FileDtype, FileDtype),
    total: u64,
}

impl RankOut<'_> {
    /// Appends rank `rank`'s share of each of `steps`.
    fn append(&mut self, rank: usize, steps: &[DealtStep]) -> Result<()> {
        let mut bytes = Vec::new();
        let parts =
            |values: fn(&DealtStep) -> &[i64]| steps.iter().map(move |s| s.of(values(s), rank));
        let (lengths, loss) = self.dtypes;
        append(self.ids, I64, parts(|s| s.ids.as_slice()), &mut bytes)?;
        append(
            self.lengths,
            lengths,
            parts(|s| s.lengths.as_slice()),
            &mut bytes,
        )?;
        if let Some(path) = self.loss_tokens {
            append(path, loss, parts(|s| s.loss_tokens.as_slice()), &mut bytes)?;
        }
        let mut total = self.total;
        let ends: Vec<i64> = steps
            .iter()
            .map(|s| {
                total += s.count(rank) as u64;
                total as i64
            })
            .collect();
        append(self.offsets, I64, [ends.as_slice()].into_iter(), &mut bytes)?;
        self.total = total;
        Ok(())
    }
}

fn check_paths(paths: &TokenPaths, world_size: u64) -> Result<()> {
    if let Some(w) = paths.ranks.windows(2).find(|w| w[0] >= w[1]) {
        return Err(Error::Value(format!(
            "ranks must increase, got {} then {}",
            w[0], w[1]
        )));
    }
    if let Some(r) = paths.ranks.iter().find(|&&r| r >= world_size) {
        return Err(Error::Value(format!(
            "ranks must be below the world size ({world_size}), got {r}"
        )));
    }
    let n = paths.ranks.len();
    let lens = [
        paths.ids.len(),
        paths.offsets.len(),
        paths.lengths.len(),
        paths.loss_tokens.as_ref().map_or(n, Vec::len),
    ];
    if lens.iter().any(|&len| len != n) {
        return Err(Error::Value(format!(
            "paths must hold one path per rank written ({n}) for every role, got {lens:?}"
        )));
    }
    Ok(())
}

/// Writes one epoch of the balanced `plan` over `world_size` ranks under
/// `caps` into the new files of `paths` (see the module docs), syncing each
/// when `fsync`. `progress` gets the number of samples written so far
/// (returning `false` stops the work with an "interrupted" error, files
/// left partial). A sample over the token cap is the error of the first
/// step holding one.
#[allow(clippy::too_many_arguments)]
pub fn write_token_files(
    plan: &Plan,
    arrays: TokenArraysRef<'_>,
    staged: Option<&StagedArrays>,
    world_size: u64,
    caps: Caps,
    paths: &TokenPaths,
    fsync: bool,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<TokenFiles> {
    check_paths(paths, world_size)?;
    if arrays.loss_tokens.is_some() != paths.loss_tokens.is_some() {
        return Err(Error::Value(
            "loss_tokens paths must be given exactly when there are loss tokens".into(),
        ));
    }
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop) = (&done, &stop);
    with_progress(done, stop, progress, move || {
        write_epoch(
            plan, arrays, staged, world_size, caps, paths, fsync, done, stop,
        )
    })
}

#[allow(clippy::too_many_arguments)]
fn write_epoch(
    plan: &Plan,
    arrays: TokenArraysRef<'_>,
    staged: Option<&StagedArrays>,
    world_size: u64,
    caps: Caps,
    paths: &TokenPaths,
    fsync: bool,
    done: &AtomicU64,
    stop: &AtomicBool,
) -> Result<TokenFiles> {
    let w = paths.ranks.len();
    let loss_paths = paths.loss_tokens.as_deref();
    let mut ranks: Vec<RankOut<'_>> = (0..w)
        .map(|r| RankOut {
            ids: &paths.ids[r],
            offsets: &paths.offsets[r],
            lengths: &paths.lengths[r],
            loss_tokens: loss_paths.map(|l| l[r].as_path()),
            dtypes: (paths.lengths_dtype, paths.loss_tokens_dtype),
            total: 0,
        })
        .collect();
    let (lengths_dtype, loss_dtype) = (paths.lengths_dtype, paths.loss_tokens_dtype);
    let all: Vec<(&Path, FileDtype)> = ranks
        .iter()
        .flat_map(|r| {
            [
                Some((r.ids, I64)),
                Some((r.offsets, I64)),
                Some((r.lengths, lengths_dtype)),
                r.loss_tokens.map(|p| (p, loss_dtype)),
            ]
        })
        .flatten()
        .chain(paths.steps.as_deref().map(|p| (p, I64)))
        .collect();
    for &(path, dtype) in &all {
        create(path, dtype)?;
    }
    let mut zero = Vec::new();
    for r in &ranks {
        append(r.offsets, I64, [&[0i64][..]].into_iter(), &mut zero)?;
    }
    let num_steps = plan.layout().num_steps();
    let per_batch = steps_per_batch(plan.layout().global_batch_size());
    let mut table_bytes = Vec::new();
    // Staged values are read a batch ahead, while the current batch is
    // dealt (reading them back is serial).
    let mut staged_reader = staged.map(StagedArrays::reader);
    let mut read_ahead = |start: u64| -> Result<Option<StagedBatches<'_>>> {
        match &mut staged_reader {
            Some(reader) if start < num_steps => {
                let stop_step = num_steps.min(start + per_batch);
                reader.steps(plan, start, stop_step).map(Some)
            }
            _ => Ok(None),
        }
    };
    let mut batch = read_ahead(0)?;
    let mut start = 0;
    while start < num_steps {
        if stop.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let stop_step = num_steps.min(start + per_batch);
        let batch_arrays = batch.as_ref().map_or(arrays, batch_arrays);
        let (steps, next) = parallel::install(|| {
            rayon::join(
                || deal_token_steps(plan, batch_arrays, world_size, caps, start, stop_step),
                || read_ahead(stop_step),
            )
        })?;
        let steps = steps?;
        batch = next?;
        parallel::install(|| {
            ranks
                .par_iter_mut()
                .zip(&paths.ranks)
                .map(|(out, &r)| out.append(r as usize, &steps))
                .collect::<Vec<_>>()
        })
        .and_then(first_error)?;
        if let Some(table) = &paths.steps {
            append(
                table,
                I64,
                steps.iter().map(|s| &s.row[..]),
                &mut table_bytes,
            )?;
        }
        done.fetch_add(
            steps.iter().map(|s| s.ids.len() as u64).sum::<u64>(),
            Ordering::Relaxed,
        );
        start = stop_step;
    }
    let counts: Vec<u64> = ranks.iter().map(|r| r.total).collect();
    let jobs: Vec<(&Path, FileDtype, u64)> = ranks
        .iter()
        .enumerate()
        .flat_map(|(r, out)| {
            let c = counts[r];
            [
                Some((out.ids, I64, c)),
                Some((out.offsets, I64, num_steps + 1)),
                Some((out.lengths, lengths_dtype, c)),
                out.loss_tokens.map(|p| (p, loss_dtype, c)),
            ]
        })
        .flatten()
        .chain(
            paths
                .steps
                .as_deref()
                .map(|table| (table, I64, STEP_COLUMNS as u64 * num_steps)),
        )
        .collect();
    let mut infos = parallel::install(|| {
        jobs.par_iter()
            .map(|&(path, dtype, count)| finish(path, dtype, count, fsync))
            .collect::<Vec<_>>()
    })
    .and_then(first_error)?
    .into_iter();
    let per_rank = if loss_paths.is_some() { 4 } else { 3 };
    let mut files = TokenFiles {
        ids: Vec::with_capacity(w),
        offsets: Vec::with_capacity(w),
        lengths: Vec::with_capacity(w),
        loss_tokens: loss_paths.map(|_| Vec::with_capacity(w)),
        steps: None,
    };
    let lost = || Error::Value("a token plan file's record is missing".into());
    for _ in 0..w {
        let mut next = || infos.next().ok_or_else(lost);
        files.ids.push(next()?);
        files.offsets.push(next()?);
        files.lengths.push(next()?);
        if let Some(loss) = files.loss_tokens.as_mut() {
            loss.push(next()?);
        }
    }
    if paths.steps.is_some() {
        files.steps = Some(infos.next().ok_or_else(lost)?);
    }
    debug_assert_eq!(
        jobs.len(),
        w * per_rank + usize::from(paths.steps.is_some())
    );
    Ok(files)
}
