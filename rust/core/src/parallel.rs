//! The thread pool, made safe to use again after `fork()`.
//!
//! DataLoader workers fork after the parent has used the library. A rayon pool
//! inherited through `fork()` has lost its threads, and waiting on it would
//! hang forever, so the pool remembers the process that built it and a forked
//! child builds its own. Work is split into fixed-size pieces whose results do
//! not depend on which thread runs them: output is identical for any thread
//! count.

use crate::error::{Error, Result};
use rayon::prelude::*;
use std::sync::{Arc, Mutex, OnceLock};

struct PoolSlot {
    pid: u32,
    threads: usize,
    pool: Arc<rayon::ThreadPool>,
}

static POOL: Mutex<Option<PoolSlot>> = Mutex::new(None);
static REQUESTED: Mutex<usize> = Mutex::new(0);

/// Elements per parallel piece; below this a call stays on the caller's thread.
pub const PIECE: usize = 1 << 16;

/// The most threads a pool is built with (more is a typo, not a machine).
pub const MAX_THREADS: usize = 1024;

fn default_threads() -> usize {
    std::env::var("EPOCHPLAN_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(available_cores)
        .min(MAX_THREADS)
}

/// The cores this process may use, read once: finding them reads the
/// cgroup's CPU quota from files, which costs about 50 us a call.
fn available_cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// The number of threads parallel calls use.
pub fn num_threads() -> usize {
    let requested = *REQUESTED.lock().unwrap_or_else(|e| e.into_inner());
    if requested > 0 {
        requested
    } else {
        default_threads()
    }
}

/// Sets the number of threads (0 restores the default: `EPOCHPLAN_NUM_THREADS`
/// or the number of available cores).
pub fn set_num_threads(n: usize) {
    *REQUESTED.lock().unwrap_or_else(|e| e.into_inner()) = n;
}

/// The pool for the current thread count: with fewer threads when the
/// system refuses some (a process thread limit), an error when it refuses
/// even one.
fn pool() -> Result<Arc<rayon::ThreadPool>> {
    let threads = num_threads();
    let pid = std::process::id();
    if let Some(pool) = current_pool(pid, threads) {
        return Ok(pool);
    }
    let build = |n: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("epochplan-{i}"))
            .build()
    };
    // Built without the lock held: a fork() by another thread while the
    // threads start must not leave the child a lock that nobody releases.
    let pool = Arc::new(build(threads).or_else(|_| build(1)).map_err(|e| {
        Error::Thread(format!(
            "cannot start a worker thread ({e}): raise the process's thread limit, \
             or lower the thread count (epochplan.set_num_threads)"
        ))
    })?);
    if let Some(theirs) = current_pool(pid, threads) {
        return Ok(theirs); // another thread built one meanwhile
    }
    *POOL.lock().unwrap_or_else(|e| e.into_inner()) = Some(PoolSlot {
        pid,
        threads,
        pool: Arc::clone(&pool),
    });
    Ok(pool)
}

/// Whether this process's pool for the current thread count is running: its
/// threads have started, and with them the memory each keeps for itself.
pub fn pool_started() -> bool {
    current_pool(std::process::id(), num_threads()).is_some()
}

/// The pool of this process for `threads` threads, if it is built. A pool
/// inherited through fork() is forgotten: its threads do not exist here,
/// so it must never be joined or dropped.
fn current_pool(pid: u32, threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    let mut slot = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(inherited) = slot.take_if(|s| s.pid != pid) {
        std::mem::forget(inherited);
    }
    slot.as_ref()
        .filter(|s| s.threads == threads)
        .map(|s| Arc::clone(&s.pool))
}

/// Runs `f` on every `piece`-sized chunk of `data`, in parallel when there is
/// more than one chunk and more than one thread (and on the calling thread
/// alone when the system refuses every thread). `f` gets the chunk's offset.
pub fn for_each_piece<T: Send>(data: &mut [T], piece: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    let parallel = data.len() > piece && num_threads() > 1;
    let pool = match parallel.then(pool) {
        Some(Ok(pool)) => pool,
        _ => {
            for (i, chunk) in data.chunks_mut(piece.max(1)).enumerate() {
                f(i * piece, chunk);
            }
            return;
        }
    };
    pool.install(|| {
        data.par_chunks_mut(piece)
            .enumerate()
            .for_each(|(i, chunk)| f(i * piece, chunk));
    });
}

/// [`for_each_piece`] for an `f` that can fail (for want of memory): the
/// first error found, once every piece has run.
pub fn try_for_each_piece<T: Send>(
    data: &mut [T],
    piece: usize,
    f: impl Fn(usize, &mut [T]) -> Result<()> + Sync,
) -> Result<()> {
    let failed: Mutex<Option<Error>> = Mutex::new(None);
    for_each_piece(data, piece, |at, chunk| {
        if let Err(e) = f(at, chunk) {
            failed
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get_or_insert(e);
        }
    });
    match failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Runs `f` inside the pool (for callers that use rayon iterators directly);
/// an error when no thread can be started.
pub fn install<R: Send>(f: impl FnOnce() -> R + Send) -> Result<R> {
    Ok(pool()?.install(f))
}

/// The result of a job started by [`spawn`]; a panic in the job arrives as
/// an error.
pub type Spawned<R> = std::sync::mpsc::Receiver<std::thread::Result<R>>;

/// Starts `f` on the pool and returns at once; the receiver gets its result.
/// An error when no thread can be started. A job keeps the pool's threads
/// alive until it ends, even when the thread count changes meanwhile.
pub fn spawn<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> Result<Spawned<R>> {
    let (sender, receiver) = std::sync::mpsc::sync_channel(1);
    pool()?.spawn(move || {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
        // The receiver may be gone (its iterator dropped): nothing to tell.
        let _ = sender.send(result);
    });
    Ok(receiver)
}

/// Serialises the tests that change the thread count: cargo runs tests on
/// parallel threads, and the count is the process's.
#[cfg(test)]
pub(crate) fn test_threads_lock() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}
