//! A token plan's lengths staged in the epoch's order, so that a plan
//! written from a memory-mapped lengths file of any size keeps a resident
//! memory that does not grow with it.
//!
//! The writer deals a step from its lengths, read by id at random over the
//! whole array: over a mapped file every page ends up mapped into the
//! process (4 GB for 10^9 int32 lengths; a page cache of large folios maps
//! hundreds of KB a read, so a few thousand reads map all of a 400 MB
//! file). Staging reads the array once
//! in id order instead, giving its pages back as it goes
//! ([`SampleLengths::read_run`]), finds each id's position with the order's
//! inverse, and appends `(position, value)` to the bucket of its position
//! range in an unlinked scratch file (gone when it is closed, a crash
//! included). A batch of steps then reads its buckets back in position
//! order ([`StagedReader`]). Memory: the buckets' write buffers (at most
//! 128 MiB up to `N` of about 2^36, then 2 KiB a bucket) and the decoded
//! buckets of two batches of steps (8 MiB each; a batch covers one or two
//! buckets unless a step is longer than a bucket); cost: 8 bytes a sample
//! written and read once, through the page cache.
//!
//! Only a plan over `0..N` is staged (a selection's or a mixture's ids do
//! not map one to one onto the store's), and not a uniform order (its
//! inverse is a search of its table).

use super::tokens::TokenArraysRef;
use super::write::{interrupted, with_progress};
use crate::dealing::SampleLengths;
use crate::error::{Error, Result};
use crate::order::{Kind, Order};
use crate::parallel;
use crate::plan::Plan;
use crate::space::Space;
use rayon::prelude::*;
use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Positions per bucket, as bits: a bucket decoded is 8 MiB.
const BUCKET_BITS: u32 = 20;
/// Entries a bucket's buffer holds before it is written: at most 32 KiB,
/// at least 2 KiB, and all the buffers of all the threads at most
/// [`BUFFERS_BYTES`] (fewer threads route when there are many buckets)
/// while 2 KiB a bucket fits in it: to about 2^36 samples.
const FLUSH: (usize, usize) = (256, 4096);
/// The most memory the buckets' buffers take, over all threads.
const BUFFERS_BYTES: usize = 128 << 20;
/// Ids a read in id order covers.
const RUN: u64 = 1 << 20;
/// Arrays shorter than this are never staged by [`StagedArrays::for_mapped`].
pub const STAGE_MIN_SAMPLES: u64 = 1 << 20;
/// The largest value staged: a value and its position's offset in its
/// bucket share a u64.
const MAX_VALUE: u64 = (1 << (64 - BUCKET_BITS)) - 1;

/// One array's values, staged by position in an unlinked scratch file.
#[derive(Debug)]
pub struct Staging {
    file: File,
    /// The scratch file's directory, named by its I/O errors.
    dir: PathBuf,
    order: Order,
    num_samples: u64,
    bucket_bits: u32,
}

/// True when `plan`'s values can be staged: a plan over `0..N` whose order
/// has an O(1) inverse.
pub fn can_stage(plan: &Plan) -> bool {
    matches!(plan.space(), Space::Range) && plan.order().kind() != Kind::Uniform
}

impl Staging {
    /// Stages `values` (one per sample of `plan`'s store, read as `name`)
    /// in a scratch file in `dir`. None when the plan cannot be staged
    /// ([`can_stage`]) or a value is 2^44 or more (such arrays are read by
    /// id as before).
    /// `stop` set stops the pass with an "interrupted" error.
    pub fn new(
        plan: &Plan,
        values: &(dyn SampleLengths + Sync),
        name: &str,
        dir: &Path,
        stop: &AtomicBool,
    ) -> Result<Option<Staging>> {
        Staging::with_buckets(plan, values, name, (dir, stop), BUCKET_BITS)
    }

    fn with_buckets(
        plan: &Plan,
        values: &(dyn SampleLengths + Sync),
        name: &str,
        (dir, stop): (&Path, &AtomicBool),
        bucket_bits: u32,
    ) -> Result<Option<Staging>> {
        if !can_stage(plan) {
            return Ok(None);
        }
        let n = plan.layout().num_samples();
        if values.num_samples() != n {
            return Err(Error::Value(format!(
                "{name} must hold one value per sample ({n}), got {}",
                values.num_samples()
            )));
        }
        let file = scratch_file(dir)?;
        let staging = Staging {
            file,
            dir: dir.to_path_buf(),
            order: plan.order().clone(),
            num_samples: n,
            bucket_bits,
        };
        let buckets = n.div_ceil(1 << bucket_bits);
        // Where each bucket's next entry goes.
        let fill: Vec<AtomicU64> = (0..buckets)
            .map(|b| AtomicU64::new(b << bucket_bits))
            .collect();
        let per_bucket = |threads: usize| BUFFERS_BYTES / (8 * buckets as usize * threads).max(1);
        let threads = (1..=parallel::num_threads().max(1))
            .rev()
            .find(|&t| per_bucket(t) >= FLUSH.0)
            .unwrap_or(1);
        let flush = per_bucket(threads).clamp(FLUSH.0, FLUSH.1);
        let threads = threads as u64;
        let per_thread = n.div_ceil(threads).max(1);
        // Set by the first thread to meet a value too large to stage: the
        // others stop too, since the arrays will be read by id instead.
        let too_large = AtomicBool::new(false);
        let fits = parallel::install(|| {
            (0..threads)
                .into_par_iter()
                .map(|t| {
                    let start = (t * per_thread).min(n);
                    let end = (start + per_thread).min(n);
                    let flags = (stop, &too_large);
                    staging.route(values, name, (start, end), flush, (&fill, flags))
                })
                .collect::<Vec<Result<bool>>>()
        })?
        .into_iter()
        .collect::<Result<Vec<bool>>>()?;
        if fits.contains(&false) || too_large.load(Ordering::Relaxed) {
            return Ok(None);
        }
        for (b, filled) in fill.iter().enumerate() {
            let b = b as u64;
            let expected = ((b + 1) << bucket_bits).min(n);
            if filled.load(Ordering::Relaxed) != expected {
                return Err(Error::Value(format!(
                    "staging {name}: bucket {b} holds {} values, expected {}",
                    filled.load(Ordering::Relaxed) - (b << bucket_bits),
                    expected - (b << bucket_bits)
                )));
            }
        }
        Ok(Some(staging))
    }

    /// Routes the values of ids `[start, end)` to their positions' buckets,
    /// each written `flush` entries at a time; false when one is above
    /// [`MAX_VALUE`] (then `too_large` is set) or another thread met one.
    fn route(
        &self,
        values: &(dyn SampleLengths + Sync),
        name: &str,
        (start, end): (u64, u64),
        flush: usize,
        (fill, (stop, too_large)): (&[AtomicU64], (&AtomicBool, &AtomicBool)),
    ) -> Result<bool> {
        let bits = self.bucket_bits;
        let mask = (1u64 << bits) - 1;
        let mut buffers: Vec<Vec<u64>> =
            (0..fill.len()).map(|_| Vec::with_capacity(flush)).collect();
        let mut bytes = vec![0u8; flush * 8];
        let mut read = Vec::new();
        let mut positions = Vec::new();
        let mut at = start;
        while at < end {
            if stop.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            if too_large.load(Ordering::Relaxed) {
                return Ok(false);
            }
            let run_end = end.min(at + RUN);
            read.clear();
            values.read_run(name, at, run_end, &mut read)?;
            positions.clear();
            positions.extend(at as i64..run_end as i64);
            self.order.invert_slice(&mut positions);
            if read.iter().any(|&v| v > MAX_VALUE) {
                too_large.store(true, Ordering::Relaxed);
                return Ok(false);
            }
            for (&p, &v) in positions.iter().zip(&read) {
                let p = p as u64;
                let bucket = (p >> bits) as usize;
                let buffer = &mut buffers[bucket];
                buffer.push(v << bits | (p & mask));
                if buffer.len() == flush {
                    self.flush(buffer, &fill[bucket], &mut bytes)?;
                }
            }
            at = run_end;
        }
        for (bucket, buffer) in buffers.iter_mut().enumerate() {
            if !buffer.is_empty() {
                self.flush(buffer, &fill[bucket], &mut bytes)?;
            }
        }
        Ok(true)
    }

    /// Appends `buffer`'s entries to their bucket and empties it.
    fn flush(&self, buffer: &mut Vec<u64>, fill: &AtomicU64, bytes: &mut [u8]) -> Result<()> {
        let at = fill.fetch_add(buffer.len() as u64, Ordering::Relaxed);
        let bytes = &mut bytes[..buffer.len() * 8];
        for (to, e) in bytes.chunks_exact_mut(8).zip(buffer.iter()) {
            to.copy_from_slice(&e.to_le_bytes());
        }
        write_at(&self.file, bytes, at * 8).map_err(|e| self.io_error("cannot write", &e))?;
        buffer.clear();
        Ok(())
    }

    /// Decodes bucket `b` into `values` (its positions' values in order),
    /// reading it through `bytes` (both reused from bucket to bucket).
    fn decode(&self, b: u64, bytes: &mut Vec<u8>, values: &mut Vec<u64>) -> Result<()> {
        let first = b << self.bucket_bits;
        let len = (self.num_samples - first).min(1 << self.bucket_bits) as usize;
        bytes.resize(len * 8, 0);
        read_at(&self.file, bytes, first * 8).map_err(|e| self.io_error("cannot read", &e))?;
        let mask = (1u64 << self.bucket_bits) - 1;
        // Every position gets exactly one entry: an unwritten slot (a write
        // lost after it was reported done) keeps the mark, which no value
        // staged can equal.
        const UNSET: u64 = u64::MAX;
        values.clear();
        values.resize(len, UNSET);
        let mut twice = false;
        for entry in bytes.chunks_exact(8) {
            let e = u64::from_le_bytes(entry.try_into().unwrap_or([0; 8]));
            let slot = values
                .get_mut((e & mask) as usize)
                .ok_or_else(|| self.corrupt(first + (e & mask), "lies outside its bucket"))?;
            twice |= *slot != UNSET;
            *slot = e >> self.bucket_bits;
        }
        if twice {
            return Err(self.corrupt(first, "holds a position twice"));
        }
        if let Some(k) = values.iter().position(|&v| v == UNSET) {
            return Err(self.corrupt(first + k as u64, "is missing"));
        }
        Ok(())
    }

    /// The error of an I/O failure on the scratch file.
    fn io_error(&self, action: &str, err: &std::io::Error) -> Error {
        let action = format!(
            "{action} the lengths staged in this directory (8 bytes a sample, {} bytes)",
            8 * self.num_samples
        );
        Error::io(&self.dir, &action, err)
    }

    /// The error of a staged bucket read back wrong (storage that lost or
    /// changed a write): `what` of the entry of `position`.
    fn corrupt(&self, position: u64, what: &str) -> Error {
        Error::Value(format!(
            "the lengths staged in {} were read back wrong: the entry of position \
             {position} {what}; the storage lost a write",
            self.dir.display()
        ))
    }
}

/// Reads staged values a batch of positions at a time, batches in
/// increasing order (each bucket is decoded once).
#[derive(Debug)]
pub struct StagedReader<'a> {
    staging: &'a Staging,
    /// Decoded buckets, oldest first.
    decoded: VecDeque<(u64, Vec<u64>)>,
    /// A bucket's bytes as read.
    bytes: Vec<u8>,
}

impl<'a> StagedReader<'a> {
    /// A reader of `staging`.
    pub fn new(staging: &'a Staging) -> StagedReader<'a> {
        StagedReader {
            staging,
            decoded: VecDeque::new(),
            bytes: Vec::new(),
        }
    }

    /// The values of positions `[start, end)`, as a reader by position.
    pub fn batch(&mut self, start: u64, end: u64) -> Result<StagedBatch<'a>> {
        let staging = self.staging;
        if start > end || end > staging.num_samples {
            return Err(Error::Index(format!(
                "positions [{start}, {end}) must lie in [0, {})",
                staging.num_samples
            )));
        }
        let bits = staging.bucket_bits;
        let mut values = Vec::with_capacity((end - start) as usize);
        if start < end {
            let (first, last) = (start >> bits, (end - 1) >> bits);
            // Buckets before this batch are done with: their memory is reused.
            let mut spare: Vec<Vec<u64>> = Vec::new();
            while self.decoded.front().is_some_and(|(b, _)| *b < first) {
                if let Some((_, v)) = self.decoded.pop_front() {
                    spare.push(v);
                }
            }
            for b in first..=last {
                if !self.decoded.iter().any(|(k, _)| *k == b) {
                    let mut decoded = spare.pop().unwrap_or_default();
                    staging.decode(b, &mut self.bytes, &mut decoded)?;
                    self.decoded.push_back((b, decoded));
                }
                let (_, bucket) = self
                    .decoded
                    .iter()
                    .find(|(k, _)| *k == b)
                    .ok_or_else(|| Error::Value("a staged bucket was not decoded".into()))?;
                let base = b << bits;
                let from = start.max(base) - base;
                let to = end.min(base + bucket.len() as u64) - base;
                values.extend_from_slice(&bucket[from as usize..to as usize]);
            }
        }
        Ok(StagedBatch {
            start,
            values,
            order: &staging.order,
        })
    }
}

/// Staged values of positions `[start, start + values.len())`.
#[derive(Debug)]
pub struct StagedBatch<'a> {
    start: u64,
    values: Vec<u64>,
    order: &'a Order,
}

impl<'a> StagedBatch<'a> {
    /// The values of positions `[start, start + values.len())` of `order`'s
    /// epoch.
    pub(super) fn new(start: u64, values: Vec<u64>, order: &'a Order) -> StagedBatch<'a> {
        StagedBatch {
            start,
            values,
            order,
        }
    }

    fn at(&self, position: u64) -> Result<u64> {
        position
            .checked_sub(self.start)
            .and_then(|k| self.values.get(k as usize))
            .copied()
            .ok_or_else(|| {
                Error::Index(format!(
                    "position {position} is outside the staged batch [{}, {})",
                    self.start,
                    self.start + self.values.len() as u64
                ))
            })
    }
}

impl SampleLengths for StagedBatch<'_> {
    fn num_samples(&self) -> u64 {
        self.order.len()
    }

    /// By id: each id's position is found with the order's inverse.
    fn read(&self, _name: &str, ids: &[i64], out: &mut Vec<u64>) -> Result<()> {
        let n = self.order.len();
        if let Some(bad) = ids.iter().find(|&&id| id < 0 || id as u64 >= n) {
            return Err(Error::Index(format!(
                "sample id must be in [0, {n}), got {bad}"
            )));
        }
        let mut positions = ids.to_vec();
        self.order.invert_slice(&mut positions);
        for p in positions {
            out.push(self.at(p as u64)?);
        }
        Ok(())
    }

    fn read_at(
        &self,
        _name: &str,
        first_position: u64,
        ids: &[i64],
        out: &mut Vec<u64>,
    ) -> Result<()> {
        let from = first_position.checked_sub(self.start);
        let values = from.and_then(|k| self.values.get(k as usize..k as usize + ids.len()));
        let Some(values) = values else {
            return Err(Error::Index(format!(
                "positions [{first_position}, {}) are outside the staged batch [{}, {})",
                first_position + ids.len() as u64,
                self.start,
                self.start + self.values.len() as u64
            )));
        };
        out.extend_from_slice(values);
        Ok(())
    }
}

/// A token plan's arrays staged: the lengths, and the loss tokens when
/// they are not the lengths.
#[derive(Debug)]
pub struct StagedArrays {
    lengths: Staging,
    loss_tokens: Option<Staging>,
}

impl StagedArrays {
    /// `arrays` staged for `plan` in scratch files in `dir`; None when they
    /// cannot be (see [`Staging::new`]).
    pub fn new(
        plan: &Plan,
        arrays: TokenArraysRef<'_>,
        dir: &Path,
    ) -> Result<Option<StagedArrays>> {
        StagedArrays::until(plan, arrays, dir, &AtomicBool::new(false))
    }

    /// [`StagedArrays::new`], stopped with an "interrupted" error once
    /// `stop` is set.
    fn until(
        plan: &Plan,
        arrays: TokenArraysRef<'_>,
        dir: &Path,
        stop: &AtomicBool,
    ) -> Result<Option<StagedArrays>> {
        let Some(lengths) = Staging::new(plan, arrays.lengths, "lengths", dir, stop)? else {
            return Ok(None);
        };
        let loss_tokens = match arrays.loss_tokens {
            Some(loss) => match Staging::new(plan, loss, "loss_tokens", dir, stop)? {
                Some(staged) => Some(staged),
                None => return Ok(None),
            },
            None => None,
        };
        Ok(Some(StagedArrays {
            lengths,
            loss_tokens,
        }))
    }

    /// [`StagedArrays::new`] for arrays worth staging: at least
    /// [`STAGE_MIN_SAMPLES`] values, one of them a shared file mapping
    /// (arrays in memory are read by id, as fast and with nothing to
    /// save).
    ///
    /// `progress` is polled as the plan-file writer polls it (with 0
    /// samples written); a `false` stops the staging with an "interrupted"
    /// error.
    pub fn for_mapped(
        plan: &Plan,
        arrays: TokenArraysRef<'_>,
        dir: &Path,
        progress: &mut dyn FnMut(u64) -> bool,
    ) -> Result<Option<StagedArrays>> {
        let mapped =
            arrays.lengths.file_mapped() || arrays.loss_tokens.is_some_and(|l| l.file_mapped());
        let layout = plan.layout();
        if !mapped || layout.num_samples() < STAGE_MIN_SAMPLES || layout.num_steps() == 0 {
            return Ok(None);
        }
        let (done, stop) = (AtomicU64::new(0), AtomicBool::new(false));
        let stop = &stop;
        with_progress(&done, stop, progress, move || {
            StagedArrays::until(plan, arrays, dir, stop)
        })
    }

    /// A reader of batches of steps, in increasing order.
    pub fn reader(&self) -> StagedArraysReader<'_> {
        StagedArraysReader {
            lengths: StagedReader::new(&self.lengths),
            loss_tokens: self.loss_tokens.as_ref().map(StagedReader::new),
        }
    }
}

/// Reads a [`StagedArrays`] a batch of steps at a time.
#[derive(Debug)]
pub struct StagedArraysReader<'a> {
    lengths: StagedReader<'a>,
    loss_tokens: Option<StagedReader<'a>>,
}

/// The staged values of a batch of steps: the lengths, and the loss tokens
/// when they are not the lengths.
pub type StagedBatches<'a> = (StagedBatch<'a>, Option<StagedBatch<'a>>);

impl<'a> StagedArraysReader<'a> {
    /// The values of steps `[start, stop)` of `plan` (`start < stop`).
    pub fn steps(&mut self, plan: &Plan, start: u64, stop: u64) -> Result<StagedBatches<'a>> {
        let first = plan.layout().span(start)?.start;
        let last = plan.layout().span(stop - 1)?;
        let end = last.start + last.len;
        let loss = match &mut self.loss_tokens {
            Some(reader) => Some(reader.batch(first, end)?),
            None => None,
        };
        Ok((self.lengths.batch(first, end)?, loss))
    }
}

/// `batch` as the arrays a step is dealt from.
pub fn batch_arrays<'a>(batch: &'a StagedBatches<'_>) -> TokenArraysRef<'a> {
    TokenArraysRef {
        lengths: &batch.0,
        loss_tokens: batch.1.as_ref().map(|l| l as _),
    }
}

/// A new file in `dir`, unlinked at once: it lives as long as its handle.
fn scratch_file(dir: &Path) -> Result<File> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = format!(
        ".epochplan-staging-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    let path = dir.join(name);
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| Error::io(&path, "cannot create", &e))?;
    std::fs::remove_file(&path).map_err(|e| Error::io(&path, "cannot remove", &e))?;
    Ok(file)
}

#[cfg(unix)]
fn write_at(file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.write_all_at(bytes, offset)
}

#[cfg(unix)]
fn read_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    file.read_exact_at(bytes, offset)
}

#[cfg(not(unix))]
fn write_at(file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    let mut done = 0;
    while done < bytes.len() {
        done += file.seek_write(&bytes[done..], offset + done as u64)?;
    }
    Ok(())
}

#[cfg(not(unix))]
fn read_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::os::windows::fs::FileExt;
    let mut done = 0;
    while done < bytes.len() {
        let got = file.seek_read(&mut bytes[done..], offset + done as u64)?;
        if got == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        done += got;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::Kind;

    fn plan(n: u64, kind: Kind) -> Plan {
        Plan::new(Order::new(n, 5, 1, kind).unwrap(), 64, false, 0).unwrap()
    }

    #[test]
    fn staged_batches_hold_every_position_s_value() {
        let dir = std::env::temp_dir();
        for kind in [
            Kind::Cipher,
            Kind::Identity,
            Kind::Chunked {
                chunk_size: 37,
                preload_nchunks: 3,
            },
        ] {
            for n in [1u64, 999, 5000] {
                let plan = plan(n, kind);
                let values: Vec<u32> = (0..n as u32).map(|i| i * 7 % 1000 + 1).collect();
                let stop = AtomicBool::new(false);
                let staged = Staging::with_buckets(&plan, &values, "lengths", (&dir, &stop), 8)
                    .unwrap()
                    .unwrap();
                let mut reader = StagedReader::new(&staged);
                let mut start = 0;
                while start < n {
                    let end = n.min(start + 333);
                    let batch = reader.batch(start, end).unwrap();
                    let mut ids: Vec<i64> = (start as i64..end as i64).collect();
                    plan.order().map_slice(&mut ids);
                    let (mut direct, mut by_position, mut by_id) = (vec![], vec![], vec![]);
                    values.read("lengths", &ids, &mut direct).unwrap();
                    batch
                        .read_at("lengths", start, &ids, &mut by_position)
                        .unwrap();
                    batch.read("lengths", &ids, &mut by_id).unwrap();
                    assert_eq!(by_position, direct);
                    assert_eq!(by_id, direct);
                    start = end;
                }
            }
        }
    }

    #[test]
    fn what_cannot_be_staged_is_read_by_id() {
        let dir = std::env::temp_dir();
        let go = AtomicBool::new(false);
        let uniform = plan(100, Kind::Uniform);
        let values = vec![1u64; 100];
        assert!(Staging::new(&uniform, &values, "lengths", &dir, &go)
            .unwrap()
            .is_none());
        let huge = vec![1u64 << 50; 100];
        assert!(
            Staging::new(&plan(100, Kind::Cipher), &huge, "lengths", &dir, &go)
                .unwrap()
                .is_none()
        );
        let staged = Staging::new(&plan(100, Kind::Cipher), &values, "lengths", &dir, &go)
            .unwrap()
            .unwrap();
        let stopped = AtomicBool::new(true);
        let err =
            Staging::new(&plan(100, Kind::Cipher), &values, "lengths", &dir, &stopped).unwrap_err();
        assert_eq!(err.to_string(), "interrupted");
        let batch = StagedReader::new(&staged).batch(10, 20).unwrap();
        assert!(batch.read_at("lengths", 15, &[0; 10], &mut vec![]).is_err());
        assert!(batch.read("lengths", &[100], &mut vec![]).is_err());
    }

    #[test]
    fn a_bucket_read_back_wrong_is_an_error_naming_the_position() {
        let dir = std::env::temp_dir();
        let go = AtomicBool::new(false);
        let values: Vec<u32> = (1..=1000).collect();
        let staged = |plan: &Plan| {
            Staging::with_buckets(plan, &values, "lengths", (&dir, &go), 8)
                .unwrap()
                .unwrap()
        };
        let plan = plan(1000, Kind::Cipher);
        let (mut bytes, mut decoded) = (vec![], vec![]);
        // A lost write reads back as zeros: the entry of position 0 twice,
        // another position's missing.
        let lost = staged(&plan);
        write_at(&lost.file, &[0; 8], 8 * 300).unwrap();
        let err = lost.decode(1, &mut bytes, &mut decoded).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
        // An entry whose offset lies past the last bucket's end.
        let outside = staged(&plan);
        let last = (1000u64 >> 8) << 8;
        write_at(&outside.file, &255u64.to_le_bytes(), 8 * last).unwrap();
        let err = outside.decode(3, &mut bytes, &mut decoded).unwrap_err();
        assert!(err.to_string().contains("outside its bucket"), "{err}");
        // The intact ones decode.
        let intact = staged(&plan);
        for b in 0..4 {
            intact.decode(b, &mut bytes, &mut decoded).unwrap();
        }
    }
}
