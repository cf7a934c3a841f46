//! Verifying rank files: header, size, checksum, and every id against the
//! plan and a bitmap of the epoch.

use super::npy::*;
use super::write::{interrupted, with_progress};
use super::CHUNK_IDS;
use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::order::Order;
use crate::parallel;
use crate::plan::Plan;
use crate::space::Space;
use rayon::prelude::*;
use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// One file an epoch's verification expects, as the manifest describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedFile {
    /// Where it is.
    pub path: PathBuf,
    /// Its rank.
    pub rank: u64,
    /// Ids in it, by the manifest.
    pub count: u64,
    /// Its size in bytes, by the manifest.
    pub bytes: u64,
    /// Its BLAKE3, by the manifest (hex).
    pub checksum: String,
    /// The type of its values (int64 but for a token plan's lengths and
    /// loss tokens).
    pub dtype: FileDtype,
}

/// Ids per chunk when reading a file of `count` ids.
fn chunk_len(count: u64) -> usize {
    count.min(CHUNK_IDS as u64) as usize
}

/// A failed check: the file and the first thing wrong with it.
fn violation(path: &Path, what: impl std::fmt::Display) -> Error {
    Error::plan_file(path, what)
}

/// Opens a plan file and checks its size and header against `file`; returns
/// the open file positioned at the data, and a hasher that has seen the header.
fn open_checked(file: &ExpectedFile) -> Result<(File, blake3::Hasher)> {
    let path = &file.path;
    // The manifest's size must be that of its count, so that no byte of a
    // file escapes the checksum or the ids.
    let need = npy_file_size_of(file.dtype, file.count);
    if u128::from(file.bytes) != need {
        return Err(violation(
            path,
            format!(
                "the manifest says {} bytes, {} values of {} need {need}",
                file.bytes,
                file.count,
                file.dtype.descr()
            ),
        ));
    }
    let mut f = File::open(path).map_err(|e| Error::io(path, "cannot open", &e))?;
    let size = f
        .metadata()
        .map_err(|e| Error::io(path, "cannot stat", &e))?
        .len();
    if size != file.bytes {
        return Err(violation(
            path,
            format!(
                "has {size} bytes, the manifest says {} (truncated or altered)",
                file.bytes
            ),
        ));
    }
    let expected = npy_header_of(file.dtype, file.count);
    let mut head = vec![0u8; expected.len().min(size as usize)];
    f.read_exact(&mut head)
        .map_err(|e| Error::io(path, "cannot read the header", &e))?;
    if head != expected {
        let what = match parse_npy_header(&head) {
            Err(e) => e,
            Ok(h) if h.descr != file.dtype.descr() => {
                format!("has dtype '{}', expected '{}'", h.descr, file.dtype.descr())
            }
            Ok(h) if h.fortran_order => "is in Fortran order".to_string(),
            Ok(h) if h.shape != [file.count] => {
                format!("has shape {:?}, expected [{}]", h.shape, file.count)
            }
            Ok(_) => "has a header that differs from the one written".to_string(),
        };
        return Err(violation(path, what));
    }
    let mut hasher = blake3::Hasher::new();
    hasher.update(&head);
    Ok((f, hasher))
}

fn finish_checksum(file: &ExpectedFile, hasher: &blake3::Hasher) -> Result<()> {
    let got = hasher.finalize().to_hex();
    if got.as_str() != file.checksum {
        return Err(violation(
            &file.path,
            format!(
                "checksum mismatch: blake3 {got}, the manifest says {}",
                file.checksum
            ),
        ));
    }
    Ok(())
}

/// Reads the data of `f` in chunks, hashing it and passing each chunk's
/// values (with the index of its first in the file) to `visit`. Progress
/// counts the file's bytes, its header (read by [`open_checked`]) included.
fn stream_ids(
    file: &ExpectedFile,
    f: &mut File,
    hasher: &mut blake3::Hasher,
    stop: &AtomicBool,
    done: &AtomicU64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    done.fetch_add(
        npy_header_of(file.dtype, file.count).len() as u64,
        Ordering::Relaxed,
    );
    let size = file.dtype.itemsize();
    // No larger than the file: thousands of files can be empty or short.
    let mut buf = vec![0u8; chunk_len(file.count) * size];
    let mut index = 0u64;
    loop {
        // Checked before the first chunk too: an empty file is also a point
        // where the work stops.
        if stop.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        if index == file.count {
            return Ok(());
        }
        let len = chunk_len(file.count - index) * size;
        f.read_exact(&mut buf[..len])
            .map_err(|e| Error::io(&file.path, "cannot read", &e))?;
        hasher.update(&buf[..len]);
        visit(index, &buf[..len])?;
        index += (len / size) as u64;
        done.fetch_add(len as u64, Ordering::Relaxed);
    }
}

/// Checks one plan file's size, header and checksum, counting its bytes in
/// `done` and stopping when `stop` is set (for callers that run their own
/// progress).
pub(super) fn check_file(file: &ExpectedFile, stop: &AtomicBool, done: &AtomicU64) -> Result<()> {
    let (mut f, mut hasher) = open_checked(file)?;
    stream_ids(file, &mut f, &mut hasher, stop, done, |_, _| Ok(()))?;
    finish_checksum(file, &hasher)
}

/// Checks one plan file's size, header and checksum (not its ids against a
/// plan): what a reader checks before memory-mapping it.
pub fn check_rank_file(file: &ExpectedFile, progress: &mut dyn FnMut(u64) -> bool) -> Result<()> {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop) = (&done, &stop);
    with_progress(done, stop, progress, move || check_file(file, stop, done))
}

/// The BLAKE3 of a whole file, as 64 lowercase hex digits.
pub fn file_checksum(path: &Path) -> Result<String> {
    let mut f = File::open(path).map_err(|e| Error::io(path, "cannot open", &e))?;
    let mut hasher = blake3::Hasher::new();
    let mut buf = vec![0u8; CHUNK_IDS];
    loop {
        let got = f
            .read(&mut buf)
            .map_err(|e| Error::io(path, "cannot read", &e))?;
        if got == 0 {
            return Ok(hasher.finalize().to_hex().to_string());
        }
        hasher.update(&buf[..got]);
    }
}

/// A bitmap of `n` bits, set concurrently.
#[derive(Debug)]
struct Bitmap(Vec<AtomicU64>);

impl Bitmap {
    fn new(n: u64) -> Result<Bitmap> {
        let words = usize::try_from(n.div_ceil(64))
            .map_err(|_| Error::Overflow(format!("a bitmap of {n} bits does not fit")))?;
        let mut bits = Vec::new();
        bits.try_reserve_exact(words).map_err(|_| {
            Error::Overflow(format!(
                "the coverage bitmap of N/8 = {} bytes does not fit in memory",
                n.div_ceil(8)
            ))
        })?;
        bits.extend((0..words).map(|_| AtomicU64::new(0)));
        Ok(Bitmap(bits))
    }

    /// Sets bit `i`; true when it was already set.
    fn test_and_set(&self, i: u64) -> bool {
        let bit = 1u64 << (i % 64);
        self.0[(i / 64) as usize].fetch_or(bit, Ordering::Relaxed) & bit != 0
    }
}

/// Verifies all rank files of one epoch for `world_size` ranks against its
/// `layout` and, when known, its `order`: each file's size, header, checksum
/// and length (the layout's rank share), every id against the plan (with the
/// order), and exact coverage (every id in `[0, N)` at most once, none that
/// the steps leave out, and as many ids as the steps hold). Without the
/// order (a uniform table is not built) the ids are not compared with the
/// plan, and the steps must leave no position out. Returns the first
/// violation, by file, as an [`Error::PlanFile`] (a fault of the whole epoch
/// names the epoch's directory) or the [`Error::Io`] of a file that cannot
/// be read. `progress` gets bytes read so far.
pub fn verify_rank_files(
    layout: &Layout,
    order: Option<&Order>,
    space: &Space,
    world_size: u64,
    files: &[ExpectedFile],
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<()> {
    verify_files(layout, order, space, world_size, files, true, progress)
}

/// Verifies some of the rank files of one epoch (a part of a plan written
/// in parts), as [`verify_rank_files`] does each file: its size, header,
/// checksum and length, and every id against the plan, so the order must be
/// known; the epoch's coverage is the merged plan's to check, since it needs
/// every file.
pub fn verify_part_files(
    layout: &Layout,
    order: &Order,
    space: &Space,
    world_size: u64,
    files: &[ExpectedFile],
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<()> {
    verify_files(
        layout,
        Some(order),
        space,
        world_size,
        files,
        false,
        progress,
    )
}

fn verify_files(
    layout: &Layout,
    order: Option<&Order>,
    space: &Space,
    world_size: u64,
    files: &[ExpectedFile],
    whole_epoch: bool,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<()> {
    let epoch_dir = files
        .first()
        .and_then(|f| f.path.parent())
        .unwrap_or(Path::new(""));
    for file in files {
        crate::split::check_rank(file.rank, world_size)?;
        let want = layout.rank_len(file.rank, world_size)?;
        if file.count != want {
            return Err(violation(
                &file.path,
                format!(
                    "holds {} ids, but the plan gives rank {} of {world_size} {want}",
                    file.count, file.rank
                ),
            ));
        }
    }
    let plan = order
        .map(|o| Plan::from_parts(*layout, o.clone()).and_then(|p| p.with_space(space.clone())))
        .transpose()?;
    // A mixture's ids repeat (a source shown more than once): its files are
    // proved by comparing every id with the plan's (its order, the
    // identity, is always known), not by distinctness.
    let distinct = !matches!(space, Space::Mixture { .. });
    if !distinct && plan.is_none() {
        return Err(violation(
            epoch_dir,
            "checking a plan over a mixture needs the epoch's order",
        ));
    }
    let store = space.store_size(layout.num_samples());
    let bitmap = Bitmap::new(if distinct { store } else { 0 })?;
    let left_out = LeftOut::of(layout);
    match &plan {
        Some(plan) if distinct => left_out.mark(plan, &bitmap),
        Some(_) => {}
        None if !left_out.is_empty() => {
            return Err(violation(
                epoch_dir,
                "checking which ids the steps leave out needs the epoch's order",
            ))
        }
        None => {}
    }
    let checks = Checks {
        layout,
        plan: plan.as_ref(),
        space,
        store,
        distinct,
        bitmap: &bitmap,
        left_out: &left_out,
    };
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop, checks) = (&done, &stop, &checks);
    with_progress(done, stop, progress, move || {
        let results: Vec<Result<()>> = parallel::install(|| {
            files
                .par_iter()
                .with_max_len(1)
                .map(|file| verify_one(checks, world_size, file, stop, done))
                .collect()
        })?;
        results.into_iter().collect::<Result<()>>()?;
        if !whole_epoch {
            return Ok(());
        }
        let total: u64 = files.iter().map(|f| f.count).sum();
        let want = layout.cursor_at_step(layout.num_steps()) - layout.cursor();
        if total != want {
            return Err(violation(
                epoch_dir,
                format!("the epoch's files hold {total} ids, its steps hold {want}"),
            ));
        }
        Ok(())
    })
}

/// The positions of an epoch that its steps leave out: those before the
/// plan's cursor and, with `drop_last`, the short last step.
struct LeftOut([(u64, u64); 2]);

impl LeftOut {
    fn of(layout: &Layout) -> LeftOut {
        let end = layout.cursor_at_step(layout.num_steps());
        LeftOut([(0, layout.cursor()), (end, layout.num_samples())])
    }

    fn is_empty(&self) -> bool {
        self.0.iter().all(|&(begin, end)| begin >= end)
    }

    /// Calls `f` with the ids at the left-out positions, a chunk at a time.
    fn for_each_chunk(&self, plan: &Plan, mut f: impl FnMut(&[i64]) -> bool) {
        const CHUNK: u64 = 1 << 16;
        for &(begin, end) in &self.0 {
            let mut at = begin;
            while at < end {
                let len = CHUNK.min(end - at);
                let mut ids: Vec<i64> = (at as i64..(at + len) as i64).collect();
                // In [0, N) by construction: the mapping cannot fail.
                let _ = plan.map_positions(&mut ids);
                if !f(&ids) {
                    return;
                }
                at += len;
            }
        }
    }

    /// Sets the bits of the left-out ids, so that one of them in a file
    /// reads as already seen.
    fn mark(&self, plan: &Plan, bitmap: &Bitmap) {
        self.for_each_chunk(plan, |ids| {
            for &id in ids {
                bitmap.test_and_set(id as u64);
            }
            true
        });
    }

    /// Whether `id` is left out (slow: only to word a violation; never
    /// without the order, as nothing is left out then).
    fn contains(&self, plan: Option<&Plan>, id: i64) -> bool {
        let Some(plan) = plan else {
            return false;
        };
        let mut found = false;
        self.for_each_chunk(plan, |ids| {
            found = ids.contains(&id);
            !found
        });
        found
    }
}

/// What every id of a file is checked against.
struct Checks<'a> {
    layout: &'a Layout,
    /// The layout with the epoch's order, when it is known.
    plan: Option<&'a Plan>,
    /// The index space the ids come from.
    space: &'a Space,
    /// Every id is below it.
    store: u64,
    /// Whether the ids are distinct (every space but a mixture).
    distinct: bool,
    /// The ids seen so far in the epoch, and the left-out ones.
    bitmap: &'a Bitmap,
    left_out: &'a LeftOut,
}

fn verify_one(
    checks: &Checks,
    world_size: u64,
    file: &ExpectedFile,
    stop: &AtomicBool,
    done: &AtomicU64,
) -> Result<()> {
    if file.dtype != FileDtype::I64 {
        return Err(Error::Value(format!(
            "{}: a rank file holds int64 ids, not {}",
            file.path.display(),
            file.dtype.descr()
        )));
    }
    let (mut f, mut hasher) = open_checked(file)?;
    // With the order known, every id is compared with the plan's, computed
    // a chunk at a time alongside the reading (as the writer computed them).
    let mut expected = vec![0i64; checks.plan.map_or(0, |_| chunk_len(file.count))];
    let mut at = (checks.layout.start_step(), 0);
    // The first bad id; reading goes on to the end, so that a checksum
    // mismatch (the file changed after it was written) is reported first.
    let mut bad: Option<String> = None;
    stream_ids(file, &mut f, &mut hasher, stop, done, |start, bytes| {
        if bad.is_none() {
            let want = &mut expected[..checks.plan.map_or(0, |_| bytes.len() / 8)];
            if let Some(plan) = checks.plan {
                at = plan.fill_rank_ids(at.0, at.1, file.rank, world_size, want)?;
            }
            bad = first_bad_id(start, bytes, want, checks);
        }
        Ok(())
    })?;
    finish_checksum(file, &hasher)?;
    match bad {
        Some(what) => Err(violation(&file.path, what)),
        None => Ok(()),
    }
}

/// The first id of a chunk (starting at index `start` of its file) that is
/// not the plan's (`expected`, the chunk's ids, or empty when the order is
/// not known), outside `[0, n)`, left out by the steps or already seen in
/// the epoch.
fn first_bad_id(start: u64, bytes: &[u8], expected: &[i64], checks: &Checks) -> Option<String> {
    let n = checks.store;
    for (k, raw) in bytes.chunks_exact(8).enumerate() {
        let mut word = [0u8; 8];
        word.copy_from_slice(raw);
        let id = i64::from_le_bytes(word);
        let at = start + k as u64;
        if id < 0 || id as u64 >= n {
            return Some(format!("id {id} at index {at} is outside [0, {n})"));
        }
        if let Some(&want) = expected.get(k) {
            if id != want {
                return Some(
                    if checks.distinct && checks.left_out.contains(checks.plan, id) {
                        format!(
                        "id {id} at index {at} is not in the epoch's steps (the plan's is {want})"
                    )
                    } else {
                        format!("id {id} at index {at} differs from the plan's {want}")
                    },
                );
            }
        } else if let Space::Selection(sel) = checks.space {
            // The order is not known (a uniform table not built): the id
            // must at least be one of the selection's.
            if !sel.contains(id as u64) {
                return Some(format!(
                    "id {id} at index {at} is not in the plan's selection"
                ));
            }
        }
        if checks.distinct && checks.bitmap.test_and_set(id as u64) {
            return Some(if checks.left_out.contains(checks.plan, id) {
                format!("id {id} at index {at} is not in the epoch's steps")
            } else {
                format!("id {id} at index {at} appears a second time in the epoch")
            });
        }
    }
    None
}
