//! Plan files: one rank's sample ids of one epoch stored as a 1-d int64 `.npy`
//! file, written and verified in memory that does not depend on `N`.
//!
//! Writing streams a rank's ids in chunks of [`CHUNK_IDS`] from
//! [`Plan::fill_rank_ids`] (parallel over the pool) to a writer thread that
//! checksums (BLAKE3 of the whole file, header included) and writes them, so
//! computing and I/O overlap and at most [`BUFFERS`] chunks exist at a time.
//! Verifying streams every file of an epoch back (files in parallel), checks
//! its header, size and checksum, and marks every id in a bitmap of `N / 8`
//! bytes: an id out of range or seen twice is a violation.
//!
//! The `.npy` format (NumPy Enhancement Proposal 1, "format version 1.0"):
//! the magic `\x93NUMPY`, the version bytes `1, 0`, a little-endian `u16`
//! header length, then an ASCII Python dict literal with the keys `descr`,
//! `fortran_order` and `shape`, padded with spaces and ended by `\n` so that
//! the data starts at a multiple of 64 bytes. Version 2.0 (a `u32` length) is
//! only needed for headers over 65535 bytes, which a 1-d shape never reaches;
//! the reader accepts 1.0, 2.0 and 3.0.

use crate::error::{Error, Result};
use crate::layout::Layout;
use crate::order::Order;
use crate::parallel;
use crate::plan::Plan;
use rayon::prelude::*;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

/// Ids per streamed chunk (8 MiB of int64).
pub const CHUNK_IDS: usize = 1 << 20;
/// Chunks alive at once while writing (computing, queued, being written).
pub const BUFFERS: usize = 4;
/// How often the progress callback runs.
pub const PROGRESS_EVERY: Duration = Duration::from_millis(100);

const MAGIC: &[u8; 6] = b"\x93NUMPY";
const ALIGN: usize = 64;

/// The `.npy` (v1.0) header of a 1-d little-endian int64 array of `count` ids.
pub fn npy_header(count: u64) -> Vec<u8> {
    let dict = format!("{{'descr': '<i8', 'fortran_order': False, 'shape': ({count},), }}");
    let total = (MAGIC.len() + 4 + dict.len() + 1).div_ceil(ALIGN) * ALIGN;
    let mut header = Vec::with_capacity(total);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&[1, 0]);
    // A 1-d dict is < 100 bytes: the length always fits the v1.0 u16 field.
    header.extend_from_slice(&((total - 10) as u16).to_le_bytes());
    header.extend_from_slice(dict.as_bytes());
    header.resize(total - 1, b' ');
    header.push(b'\n');
    header
}

/// The file size of a plan file of `count` ids, header included (in 128
/// bits: for the largest counts it exceeds any file system's limit).
pub fn npy_file_size(count: u64) -> u128 {
    npy_header(count).len() as u128 + u128::from(count) * 8
}

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// Where the data starts.
    pub data_offset: u64,
    /// The dtype descriptor, e.g. `<i8`.
    pub descr: String,
    /// Whether the data is in Fortran order.
    pub fortran_order: bool,
    /// The shape.
    pub shape: Vec<u64>,
}

fn dict_value<'a>(dict: &'a str, key: &str) -> Option<&'a str> {
    let at = dict.find(&format!("'{key}':"))? + key.len() + 3;
    Some(dict[at..].trim_start())
}

/// Parses the header of a `.npy` file from its first bytes (at least the
/// whole header). Errors describe what is wrong, for a violation message.
pub fn parse_npy_header(bytes: &[u8]) -> std::result::Result<NpyHeader, String> {
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err("is not an .npy file (no \\x93NUMPY magic)".into());
    }
    let (len, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(format!("has an unsupported .npy version {v}")),
    };
    let end = start + len;
    let text = bytes.get(start..end).ok_or("has a truncated .npy header")?;
    let dict = std::str::from_utf8(text).map_err(|_| "has a .npy header that is not text")?;
    let descr = dict_value(dict, "descr")
        .and_then(|v| v.strip_prefix('\''))
        .and_then(|v| v.split('\'').next())
        .ok_or("has a .npy header without 'descr'")?;
    let fortran_order = match dict_value(dict, "fortran_order") {
        Some(v) if v.starts_with("False") => false,
        Some(v) if v.starts_with("True") => true,
        _ => return Err("has a .npy header without 'fortran_order'".into()),
    };
    let shape = dict_value(dict, "shape")
        .and_then(|v| v.strip_prefix('('))
        .and_then(|v| v.split(')').next())
        .ok_or("has a .npy header without 'shape'")?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>())
        .collect::<std::result::Result<Vec<u64>, _>>()
        .map_err(|_| format!("has a .npy header with a bad shape ({shape})"))?;
    Ok(NpyHeader {
        data_offset: end as u64,
        descr: descr.to_string(),
        fortran_order,
        shape,
    })
}

/// What was written to one plan file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// Ids in the file.
    pub count: u64,
    /// Bytes in the file, header included.
    pub bytes: u64,
    /// BLAKE3 of the whole file, as 64 lowercase hex digits.
    pub checksum: String,
}

/// Where the streamed ranks go: one "file" per rank, opened, written, closed.
pub trait RankSink: Send {
    /// Starts the `index`-th rank's file.
    fn open(&mut self, index: usize) -> Result<()>;
    /// Appends bytes to the open file.
    fn write(&mut self, bytes: &[u8]) -> Result<()>;
    /// Finishes the open file.
    fn close(&mut self) -> Result<()>;
}

/// Writes each rank to its own file, optionally `fsync`ed when closed.
#[derive(Debug)]
pub struct FileSink {
    paths: Vec<PathBuf>,
    /// What errors call each file: `paths`, or the names the files will
    /// have once published (a writer working in a temporary directory).
    shown: Vec<PathBuf>,
    fsync: bool,
    file: Option<(File, usize)>,
}

impl FileSink {
    /// A sink writing the `i`-th rank to `paths[i]` (created, never overwritten).
    pub fn new(paths: Vec<PathBuf>, fsync: bool) -> FileSink {
        FileSink {
            shown: paths.clone(),
            paths,
            fsync,
            file: None,
        }
    }

    /// The same sink with its errors naming `shown[i]` for `paths[i]`: the
    /// files' final paths, when they are written under temporary ones.
    pub fn shown_as(self, shown: Vec<PathBuf>) -> Result<FileSink> {
        if shown.len() != self.paths.len() {
            return Err(Error::Value(format!(
                "display paths must have one entry per file ({}), got {}",
                self.paths.len(),
                shown.len()
            )));
        }
        Ok(FileSink { shown, ..self })
    }

    /// The number of files.
    pub fn len(&self) -> usize {
        self.paths.len()
    }

    /// True when the sink has no files.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty()
    }

    fn io_error(&self, index: usize, action: &str, err: &std::io::Error) -> Error {
        let path = self
            .shown
            .get(index)
            .map_or(Path::new("?"), PathBuf::as_path);
        Error::io(path, action, err)
    }
}

impl RankSink for FileSink {
    fn open(&mut self, index: usize) -> Result<()> {
        let path = self
            .paths
            .get(index)
            .ok_or_else(|| Error::Index(format!("no path for rank file {index}")))?;
        let file = File::options()
            .write(true)
            .create_new(true)
            .open(path)
            .map_err(|e| self.io_error(index, "cannot create", &e))?;
        self.file = Some((file, index));
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        if let Some((file, index)) = self.file.as_mut() {
            let index = *index;
            if let Err(e) = file.write_all(bytes) {
                return Err(self.io_error(index, "cannot write", &e));
            }
        }
        Ok(())
    }

    fn close(&mut self) -> Result<()> {
        if let Some((file, index)) = self.file.take() {
            if self.fsync {
                file.sync_all()
                    .map_err(|e| self.io_error(index, "cannot write", &e))?;
            }
        }
        Ok(())
    }
}

/// Discards everything (to measure computing and checksumming alone).
#[derive(Debug, Default)]
pub struct NullSink;

impl RankSink for NullSink {
    fn open(&mut self, _: usize) -> Result<()> {
        Ok(())
    }
    fn write(&mut self, _: &[u8]) -> Result<()> {
        Ok(())
    }
    fn close(&mut self) -> Result<()> {
        Ok(())
    }
}

enum Msg {
    Open(usize, u64),
    Ids(Vec<i64>),
    Close,
}

/// Starts a scoped thread, or an error when the system refuses it (a
/// process thread limit) instead of a panic.
fn spawn_scoped<'scope, T: Send + 'scope>(
    scope: &'scope std::thread::Scope<'scope, '_>,
    f: impl FnOnce() -> T + Send + 'scope,
) -> Result<std::thread::ScopedJoinHandle<'scope, T>> {
    std::thread::Builder::new()
        .spawn_scoped(scope, f)
        .map_err(|e| Error::Thread(format!("cannot start a plan file thread: {e}")))
}

fn interrupted() -> Error {
    Error::Value("interrupted".into())
}

/// Polls `progress` with `done` every [`PROGRESS_EVERY`] until `work`
/// finishes; a `false` from `progress` sets `stop`, which `work` must watch.
fn with_progress<T: Send>(
    done: &AtomicU64,
    stop: &AtomicBool,
    progress: &mut dyn FnMut(u64) -> bool,
    work: impl FnOnce() -> Result<T> + Send,
) -> Result<T> {
    // Room for the chunk buffers (the writer's, or one per verifying thread)
    // and for this thread, the work's, the writer's and the pool's.
    let threads = parallel::num_threads();
    let buffers = (BUFFERS + 1 + threads) * CHUNK_IDS * std::mem::size_of::<i64>();
    if !crate::buffer::has_room(buffers, threads + 3) {
        return Err(Error::Memory(
            "not enough memory for the plan files' buffers and threads".into(),
        ));
    }
    std::thread::scope(|s| {
        // The result comes through a channel: waiting on it returns as soon
        // as the work ends (a park woken before the thread counts as
        // finished waited a whole period).
        let (send, receive) = mpsc::channel();
        let handle = spawn_scoped(s, move || {
            // A send fails only if the caller is gone, which the scope prevents.
            let _ = send.send(work());
        })?;
        let result = loop {
            match receive.recv_timeout(PROGRESS_EVERY) {
                Ok(result) => break result,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if !stop.load(Ordering::Relaxed) && !progress(done.load(Ordering::Relaxed)) {
                        stop.store(true, Ordering::Relaxed);
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err(Error::Value("plan file worker failed".into()))
                }
            }
        };
        // Joined here so that a panic of the work is this error, not the
        // scope's panic.
        let _ = handle.join();
        if stop.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        progress(done.load(Ordering::Relaxed));
        result
    })
}

/// Streams the shares of `ranks` (of `world_size`) into `sink`, one file each,
/// in bounded memory: computing in parallel on the pool while a writer thread
/// checksums and writes. `progress` gets the number of ids written so far,
/// every [`PROGRESS_EVERY`], on the calling thread; returning `false` stops
/// the work and returns an "interrupted" error (files are left partial).
pub fn stream_ranks<S: RankSink>(
    plan: &Plan,
    world_size: u64,
    ranks: &[u64],
    mut sink: S,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<Vec<FileInfo>> {
    for &rank in ranks {
        crate::split::check_rank(rank, world_size)?;
    }
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop) = (&done, &stop);
    with_progress(done, stop, progress, move || {
        let (to_writer, from_main) = mpsc::sync_channel::<Msg>(BUFFERS - 2);
        let (to_main, from_writer) = mpsc::channel::<Vec<i64>>();
        std::thread::scope(|s| {
            let writer = spawn_scoped(s, move || write_loop(&mut sink, from_main, to_main, done))?;
            let produced = produce(plan, world_size, ranks, &to_writer, &from_writer, stop);
            drop(to_writer);
            let written = writer
                .join()
                .unwrap_or_else(|_| Err(Error::Value("plan file writer failed".into())));
            // A writer error (disk full) explains a failed send: report it first.
            let infos = written?;
            produced?;
            Ok(infos)
        })
    })
}

fn produce(
    plan: &Plan,
    world_size: u64,
    ranks: &[u64],
    to_writer: &mpsc::SyncSender<Msg>,
    from_writer: &mpsc::Receiver<Vec<i64>>,
    stop: &AtomicBool,
) -> Result<()> {
    let gone = || Error::Value("plan file writer stopped".into());
    let mut allocated = 0;
    for (index, &rank) in ranks.iter().enumerate() {
        // Checked per file too: with more ranks than a step has samples,
        // thousands of files can be empty.
        if stop.load(Ordering::Relaxed) {
            return Err(interrupted());
        }
        let count = plan.rank_len(rank, world_size)?;
        to_writer
            .send(Msg::Open(index, count))
            .map_err(|_| gone())?;
        let (mut step, mut skip, mut left) = (plan.start_step(), 0, count);
        while left > 0 {
            if stop.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            let mut buf = match from_writer.try_recv() {
                Ok(buf) => buf,
                Err(_) if allocated < BUFFERS => {
                    allocated += 1;
                    Vec::with_capacity(CHUNK_IDS)
                }
                Err(_) => from_writer.recv().map_err(|_| gone())?,
            };
            let len = left.min(CHUNK_IDS as u64) as usize;
            buf.clear();
            buf.resize(len, 0);
            (step, skip) = plan.fill_rank_ids(step, skip, rank, world_size, &mut buf);
            left -= len as u64;
            to_writer.send(Msg::Ids(buf)).map_err(|_| gone())?;
        }
        to_writer.send(Msg::Close).map_err(|_| gone())?;
    }
    Ok(())
}

fn write_loop<S: RankSink>(
    sink: &mut S,
    from_main: mpsc::Receiver<Msg>,
    to_main: mpsc::Sender<Vec<i64>>,
    done: &AtomicU64,
) -> Result<Vec<FileInfo>> {
    let mut infos = Vec::new();
    let mut bytes = Vec::with_capacity(CHUNK_IDS * 8);
    let mut current: Option<(blake3::Hasher, u64, u64)> = None;
    for msg in from_main {
        match msg {
            Msg::Open(index, count) => {
                sink.open(index)?;
                let header = npy_header(count);
                let mut hasher = blake3::Hasher::new();
                hasher.update(&header);
                sink.write(&header)?;
                current = Some((hasher, count, header.len() as u64));
            }
            Msg::Ids(ids) => {
                bytes.clear();
                bytes.extend(ids.iter().flat_map(|id| id.to_le_bytes()));
                if let Some((hasher, _, size)) = current.as_mut() {
                    hasher.update(&bytes);
                    *size += bytes.len() as u64;
                }
                sink.write(&bytes)?;
                done.fetch_add(ids.len() as u64, Ordering::Relaxed);
                // The producer may have finished: a closed channel is fine.
                let _ = to_main.send(ids);
            }
            Msg::Close => {
                sink.close()?;
                if let Some((hasher, count, size)) = current.take() {
                    infos.push(FileInfo {
                        count,
                        bytes: size,
                        checksum: hasher.finalize().to_hex().to_string(),
                    });
                }
            }
        }
    }
    Ok(infos)
}

/// Writes the shares of `ranks` to the files of `files` (one new file
/// each, never overwriting), see [`stream_ranks`].
pub fn write_rank_files(
    plan: &Plan,
    world_size: u64,
    ranks: &[u64],
    files: FileSink,
    progress: &mut dyn FnMut(u64) -> bool,
) -> Result<Vec<FileInfo>> {
    if files.len() != ranks.len() {
        return Err(Error::Value(format!(
            "paths must have one entry per rank ({}), got {}",
            ranks.len(),
            files.len()
        )));
    }
    stream_ranks(plan, world_size, ranks, files, progress)
}

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
    if u128::from(file.bytes) != npy_file_size(file.count) {
        return Err(violation(
            path,
            format!(
                "the manifest says {} bytes, {} ids need {}",
                file.bytes,
                file.count,
                npy_file_size(file.count)
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
    let expected = npy_header(file.count);
    let mut head = vec![0u8; expected.len().min(size as usize)];
    f.read_exact(&mut head)
        .map_err(|e| Error::io(path, "cannot read the header", &e))?;
    if head != expected {
        let what = match parse_npy_header(&head) {
            Err(e) => e,
            Ok(h) if h.descr != "<i8" => format!("has dtype {:?}, expected '<i8'", h.descr),
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

/// Reads the data of `f` in chunks, hashing it and passing each chunk's ids
/// (with their index in the file) to `visit`. Progress counts the file's
/// bytes, its header (read by [`open_checked`]) included.
fn stream_ids(
    file: &ExpectedFile,
    f: &mut File,
    hasher: &mut blake3::Hasher,
    stop: &AtomicBool,
    done: &AtomicU64,
    mut visit: impl FnMut(u64, &[u8]) -> Result<()>,
) -> Result<()> {
    done.fetch_add(npy_header(file.count).len() as u64, Ordering::Relaxed);
    // No larger than the file: thousands of files can be empty or short.
    let mut buf = vec![0u8; chunk_len(file.count) * 8];
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
        let len = chunk_len(file.count - index) * 8;
        f.read_exact(&mut buf[..len])
            .map_err(|e| Error::io(&file.path, "cannot read", &e))?;
        hasher.update(&buf[..len]);
        visit(index, &buf[..len])?;
        index += (len / 8) as u64;
        done.fetch_add(len as u64, Ordering::Relaxed);
    }
}

/// Checks one plan file's size, header and checksum (not its ids against a
/// plan): what a reader checks before memory-mapping it.
pub fn check_rank_file(file: &ExpectedFile, progress: &mut dyn FnMut(u64) -> bool) -> Result<()> {
    let done = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let (done, stop) = (&done, &stop);
    with_progress(done, stop, progress, move || {
        let (mut f, mut hasher) = open_checked(file)?;
        stream_ids(file, &mut f, &mut hasher, stop, done, |_, _| Ok(()))?;
        finish_checksum(file, &hasher)
    })
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
    world_size: u64,
    files: &[ExpectedFile],
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
        .map(|o| Plan::from_parts(*layout, o.clone()))
        .transpose()?;
    let bitmap = Bitmap::new(layout.num_samples())?;
    let left_out = LeftOut::of(layout);
    match &plan {
        Some(plan) => left_out.mark(plan.order(), &bitmap),
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
    fn for_each_chunk(&self, order: &Order, mut f: impl FnMut(&[i64]) -> bool) {
        const CHUNK: u64 = 1 << 16;
        for &(begin, end) in &self.0 {
            let mut at = begin;
            while at < end {
                let len = CHUNK.min(end - at);
                let mut ids: Vec<i64> = (at as i64..(at + len) as i64).collect();
                order.map_slice(&mut ids);
                if !f(&ids) {
                    return;
                }
                at += len;
            }
        }
    }

    /// Sets the bits of the left-out ids, so that one of them in a file
    /// reads as already seen.
    fn mark(&self, order: &Order, bitmap: &Bitmap) {
        self.for_each_chunk(order, |ids| {
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
        self.for_each_chunk(plan.order(), |ids| {
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
                at = plan.fill_rank_ids(at.0, at.1, file.rank, world_size, want);
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
    let n = checks.layout.num_samples();
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
                return Some(if checks.left_out.contains(checks.plan, id) {
                    format!(
                        "id {id} at index {at} is not in the epoch's steps (the plan's is {want})"
                    )
                } else {
                    format!("id {id} at index {at} differs from the plan's {want}")
                });
            }
        }
        if checks.bitmap.test_and_set(id as u64) {
            return Some(if checks.left_out.contains(checks.plan, id) {
                format!("id {id} at index {at} is not in the epoch's steps")
            } else {
                format!("id {id} at index {at} appears a second time in the epoch")
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Kind, Order};

    fn plan(n: u64, g: u64, drop_last: bool) -> Plan {
        Plan::new(Order::new(n, 3, 1, Kind::Cipher).unwrap(), g, drop_last, 0).unwrap()
    }

    #[test]
    fn header_is_aligned_and_parses() {
        for count in [0u64, 1, 99, 10u64.pow(10), i64::MAX as u64] {
            let h = npy_header(count);
            assert_eq!(h.len() % ALIGN, 0);
            assert_eq!(*h.last().unwrap(), b'\n');
            let parsed = parse_npy_header(&h).unwrap();
            assert_eq!(parsed.shape, vec![count]);
            assert_eq!(parsed.descr, "<i8");
            assert!(!parsed.fortran_order);
            assert_eq!(parsed.data_offset, h.len() as u64);
        }
    }

    #[derive(Default)]
    struct MemSink(Vec<Vec<u8>>);

    impl RankSink for &mut MemSink {
        fn open(&mut self, _: usize) -> Result<()> {
            self.0.push(Vec::new());
            Ok(())
        }
        fn write(&mut self, bytes: &[u8]) -> Result<()> {
            self.0.last_mut().unwrap().extend_from_slice(bytes);
            Ok(())
        }
        fn close(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn streamed_files_hold_the_rank_indices() {
        // More than one chunk per rank, and a short last step.
        let (n, g, w) = (3 * CHUNK_IDS as u64 + 17, 1000, 3);
        let p = plan(n, g, false);
        let mut sink = MemSink::default();
        let ranks: Vec<u64> = (0..w).collect();
        let infos = stream_ranks(&p, w, &ranks, &mut sink, &mut |_| true).unwrap();
        for (r, (bytes, info)) in sink.0.iter().zip(&infos).enumerate() {
            let ids = p.rank_indices(r as u64, w).unwrap();
            let header = npy_header(ids.len() as u64);
            assert_eq!(&bytes[..header.len()], &header[..]);
            let data: Vec<i64> = bytes[header.len()..]
                .chunks_exact(8)
                .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
                .collect();
            assert_eq!(data, ids);
            assert_eq!(info.bytes, bytes.len() as u64);
            assert_eq!(info.checksum, blake3::hash(bytes).to_hex().to_string());
        }
    }

    #[test]
    fn stopping_is_an_error() {
        let p = plan(1 << 32, 7, false);
        let err = stream_ranks(&p, 1, &[0], NullSink, &mut |_| false);
        assert_eq!(err, Err(interrupted()));
    }

    /// Opens files slowly and counts them.
    struct SlowSink<'a>(&'a AtomicU64);

    impl RankSink for SlowSink<'_> {
        fn open(&mut self, _: usize) -> Result<()> {
            self.0.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(Duration::from_millis(1));
            Ok(())
        }
        fn write(&mut self, _: &[u8]) -> Result<()> {
            Ok(())
        }
        fn close(&mut self) -> Result<()> {
            Ok(())
        }
    }

    #[test]
    fn empty_files_are_points_where_writing_stops() {
        // 10 samples over 2,000 ranks: all but ten files are empty.
        let p = plan(10, 10, false);
        let ranks: Vec<u64> = (0..2000).collect();
        let opened = AtomicU64::new(0);
        let err = stream_ranks(&p, 2000, &ranks, SlowSink(&opened), &mut |_| false);
        assert_eq!(err, Err(interrupted()));
        let opened = opened.load(Ordering::Relaxed);
        assert!(opened < 2000, "stopped after {opened} of 2000 files");
    }

    /// A directory of its own under the system's temporary directory,
    /// removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir =
                std::env::temp_dir().join(format!("epochplan-core-{}-{name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
            TempDir(dir)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// Writes every rank's file of `p` for `w` ranks into `dir`, described
    /// as a manifest describes them.
    fn written(p: &Plan, w: u64, dir: &Path) -> Vec<ExpectedFile> {
        let ranks: Vec<u64> = (0..w).collect();
        let paths: Vec<PathBuf> = ranks
            .iter()
            .map(|r| dir.join(format!("r{r}.npy")))
            .collect();
        let sink = FileSink::new(paths.clone(), false);
        let infos = write_rank_files(p, w, &ranks, sink, &mut |_| true).unwrap();
        ranks
            .iter()
            .zip(paths)
            .zip(infos)
            .map(|((&rank, path), info)| ExpectedFile {
                path,
                rank,
                count: info.count,
                bytes: info.bytes,
                checksum: info.checksum,
            })
            .collect()
    }

    fn verify(p: &Plan, w: u64, files: &[ExpectedFile]) -> Result<()> {
        verify_rank_files(p.layout(), Some(p.order()), w, files, &mut |_| true)
    }

    #[test]
    fn verification_needs_every_rank_once() {
        let dir = TempDir::new("ranks");
        let p = plan(100, 8, false);
        let files = written(&p, 2, &dir.0);
        assert_eq!(verify(&p, 2, &files), Ok(()));
        let err = verify(&p, 2, &files[..1]).unwrap_err().to_string();
        assert!(err.contains("hold 50 ids, its steps hold 100"), "{err}");
        let twice = [files[0].clone(), files[0].clone()];
        assert!(verify(&p, 2, &twice).is_err());
    }

    #[test]
    fn bytes_beyond_the_ids_or_missing_are_refused() {
        let dir = TempDir::new("bytes");
        let p = plan(100, 8, false);
        let files = written(&p, 2, &dir.0);
        // The checksum covers the header and the ids only, so bytes appended
        // with the manifest's size raised to match must fail on the size.
        let mut longer = files.clone();
        std::fs::OpenOptions::new()
            .append(true)
            .open(&longer[0].path)
            .unwrap()
            .write_all(&[0; 8])
            .unwrap();
        longer[0].bytes += 8;
        let err = check_rank_file(&longer[0], &mut |_| true)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("the manifest says 536 bytes, 50 ids need 528"),
            "{err}"
        );
        assert!(verify(&p, 2, &longer).is_err());
        // Cut short: the size no longer matches the manifest's.
        let file = File::options().write(true).open(&files[0].path).unwrap();
        file.set_len(files[0].bytes - 8).unwrap();
        let err = check_rank_file(&files[0], &mut |_| true)
            .unwrap_err()
            .to_string();
        assert!(err.contains("truncated or altered"), "{err}");
        assert!(verify(&p, 2, &files).is_err());
    }

    #[test]
    fn io_failures_keep_their_kind_and_name_the_shown_path() {
        let dir = TempDir::new("io");
        let p = plan(100, 8, false);
        let files = written(&p, 2, &dir.0);
        // Written again to the same paths: the files exist.
        let paths: Vec<PathBuf> = files.iter().map(|f| f.path.clone()).collect();
        let shown: Vec<PathBuf> = ["/final/r0.npy", "/final/r1.npy"].map(PathBuf::from).into();
        let sink = FileSink::new(paths, false).shown_as(shown).unwrap();
        let err = write_rank_files(&p, 2, &[0, 1], sink, &mut |_| true).unwrap_err();
        assert!(
            matches!(&err, Error::Io { kind: std::io::ErrorKind::AlreadyExists, path, .. }
                if path == Path::new("/final/r0.npy")),
            "{err:?}"
        );
        assert!(
            err.to_string()
                .starts_with("/final/r0.npy: cannot create: "),
            "{err}"
        );
        std::fs::remove_file(&files[1].path).unwrap();
        let err = verify(&p, 2, &files).unwrap_err();
        assert!(
            matches!(&err, Error::Io { kind: std::io::ErrorKind::NotFound, errno: Some(_), path, .. }
                if *path == files[1].path),
            "{err:?}"
        );
    }

    #[test]
    fn verification_without_the_order_needs_no_left_out_positions() {
        let dir = TempDir::new("layout");
        let p = plan(100, 8, false);
        let files = written(&p, 2, &dir.0);
        assert_eq!(
            verify_rank_files(p.layout(), None, 2, &files, &mut |_| true),
            Ok(())
        );
        let dropped = plan(100, 8, true);
        let dropped_dir = TempDir::new("layout-dropped");
        let files = written(&dropped, 2, &dropped_dir.0);
        let err = verify_rank_files(dropped.layout(), None, 2, &files, &mut |_| true).unwrap_err();
        assert_eq!(
            err,
            Error::plan_file(
                &dropped_dir.0,
                "checking which ids the steps leave out needs the epoch's order"
            )
        );
    }
}
