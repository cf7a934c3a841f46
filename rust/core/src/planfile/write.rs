//! Writing rank files: ids computed in parallel, checksummed and written by a
//! writer thread, in bounded memory.

use super::npy::*;
use super::{BUFFERS, CHUNK_IDS, PROGRESS_EVERY};
use crate::buffer::vec_with_capacity;
use crate::error::{Error, Result};
use crate::parallel;
use crate::plan::Plan;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;

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

pub(super) fn interrupted() -> Error {
    Error::Value("interrupted".into())
}

/// Polls `progress` with `done` every [`PROGRESS_EVERY`] until `work`
/// finishes; a `false` from `progress` sets `stop`, which `work` must watch.
pub(super) fn with_progress<T: Send>(
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
        let count = plan.layout().rank_len(rank, world_size)?;
        to_writer
            .send(Msg::Open(index, count))
            .map_err(|_| gone())?;
        let (mut step, mut skip, mut left) = (plan.layout().start_step(), 0, count);
        while left > 0 {
            if stop.load(Ordering::Relaxed) {
                return Err(interrupted());
            }
            let mut buf = match from_writer.try_recv() {
                Ok(buf) => buf,
                Err(_) if allocated < BUFFERS => {
                    allocated += 1;
                    vec_with_capacity(CHUNK_IDS, "a chunk of ids")?
                }
                Err(_) => from_writer.recv().map_err(|_| gone())?,
            };
            let len = left.min(CHUNK_IDS as u64) as usize;
            buf.clear();
            buf.resize(len, 0);
            (step, skip) = plan.fill_rank_ids(step, skip, rank, world_size, &mut buf)?;
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
