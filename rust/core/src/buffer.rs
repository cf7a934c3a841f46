//! Large output arrays of ids.
//!
//! An output of 10^8 ids is 800 MB of fresh memory, and on a virtual machine
//! the first touch of every 4 KiB page is a fault that can cost several
//! microseconds: at 10^8 ids that is more time than computing the ids. So
//! large outputs ask the kernel for transparent huge pages (one fault per
//! 2 MiB, as numpy does for its own large arrays), and they are allocated
//! zeroed but untouched, so that the parallel passes that fill them take the
//! faults on every core instead of one thread zeroing them first.

use crate::error::{Error, Result};
use crate::parallel;

/// Outputs at least this large (in bytes) are advised to use huge pages.
const HUGE_PAGE_MIN_BYTES: usize = 4 << 20;

/// A zeroed vector of `count` int64 values, or an error naming `what` when the
/// machine cannot hold it (instead of an aborted process).
pub fn zeroed_ids(count: u64, what: &str) -> Result<Vec<i64>> {
    let ids = try_zeroed(checked_len(count, what)?).ok_or_else(|| too_large(count, what))?;
    if let Err(threads) = check_headroom(ids.len()) {
        drop(ids);
        return Err(no_headroom(count, what, threads));
    }
    advise_huge_pages(&ids);
    Ok(ids)
}

/// Touches every page of `ids`, in parallel pieces, so that the kernel clears
/// them now rather than in the middle of a cache-bound pass over them
/// (clearing a page evicts that much of the pass's data from the caches).
pub fn prefault(ids: &mut [i64]) {
    const PER_PAGE: usize = 4096 / std::mem::size_of::<i64>();
    parallel::for_each_piece(ids, 1 << 21, |_, piece| {
        for id in piece.iter_mut().step_by(PER_PAGE) {
            *id = 0;
        }
    });
}

/// An empty vector with room for exactly `count` int64 values, to be filled
/// by pushing; errors as [`zeroed_ids`].
pub fn ids_with_capacity(count: u64, what: &str) -> Result<Vec<i64>> {
    let mut ids = Vec::new();
    ids.try_reserve_exact(checked_len(count, what)?)
        .map_err(|_| too_large(count, what))?;
    if let Err(threads) = check_headroom(ids.capacity()) {
        drop(ids);
        return Err(no_headroom(count, what, threads));
    }
    advise_huge_pages(ids.spare_capacity_mut());
    Ok(ids)
}

/// An empty vector with room for `count` items of any type, or an error
/// naming `what` when the machine cannot hold it (instead of an aborted
/// process).
pub fn vec_with_capacity<T>(count: usize, what: &str) -> Result<Vec<T>> {
    let mut items = Vec::new();
    items
        .try_reserve_exact(count)
        .map_err(|_| no_room_for(what, count))?;
    Ok(items)
}

fn no_room_for(what: &str, count: usize) -> Error {
    Error::Memory(format!(
        "cannot allocate {what} ({count} items): not enough memory"
    ))
}

/// A copy of `items`, or an error naming `what` when the machine cannot
/// hold it (instead of an aborted process).
pub fn copy_of<T: Clone>(items: &[T], what: &str) -> Result<Vec<T>> {
    try_copy_of(items).ok_or_else(|| no_room_for(what, items.len()))
}

/// `vec![value; count]`, or `None` when the machine cannot hold it. For
/// callers that hold many allocations: they free those before building the
/// error, whose message needs memory too.
pub fn try_filled<T: Clone>(value: T, count: usize) -> Option<Vec<T>> {
    let mut items = Vec::new();
    items.try_reserve_exact(count).ok()?;
    items.resize(count, value);
    Some(items)
}

/// A copy of `items`, or `None` when the machine cannot hold it; see
/// [`try_filled`].
pub fn try_copy_of<T: Clone>(items: &[T]) -> Option<Vec<T>> {
    let mut copy = Vec::new();
    copy.try_reserve_exact(items.len()).ok()?;
    copy.extend_from_slice(items);
    Some(copy)
}

/// Address space to leave free after a large output, per thread that is yet
/// to start and for the calling thread: glibc reserves 64 MiB for a thread's
/// own malloc arena on its first allocation, and the rest of a call (sort
/// buckets, swap partners, error messages) allocates within that.
const HEADROOM_PER_THREAD: usize = 64 << 20;

/// Outputs at least this large (in ids) check their headroom.
const HEADROOM_MIN_IDS: usize = 1 << 17;

/// The threads whose memory a call over `len` ids must leave room for: the
/// caller's, and the pool threads it runs on (no more than it has pieces of
/// work for: 16 for 10^6 ids, on a node of 128 cores too) unless the pool is
/// running already, when their memory is taken.
fn threads_for(len: usize) -> usize {
    if parallel::pool_started() {
        return 1;
    }
    parallel::num_threads()
        .min(len.div_ceil(parallel::PIECE))
        .max(1)
        + 1
}

/// Whether, beside an output of `len` ids just allocated, the rest of the
/// call has room: [`HEADROOM_PER_THREAD`] for each thread it runs on (see
/// [`threads_for`]). Small outputs do not check (see [`has_room`]). The
/// error is the number of threads counted.
fn check_headroom(len: usize) -> std::result::Result<(), usize> {
    let threads = threads_for(len);
    if len < HEADROOM_MIN_IDS || has_room(0, threads) {
        Ok(())
    } else {
        Err(threads)
    }
}

/// Whether `bytes`, plus `HEADROOM_PER_THREAD` for each of `threads`
/// threads, can be allocated now. The small allocations of a call are not
/// checked one by one (a failed one aborts the process), so where they can
/// fail, a call that would leave too little room for them is refused
/// instead. Reserving untouched memory and giving it back costs two system
/// calls (and more, with threads running), so it is done only where
/// allocations can fail at all.
pub fn has_room(bytes: usize, threads: usize) -> bool {
    if !allocations_can_fail() {
        return true;
    }
    let bytes = HEADROOM_PER_THREAD
        .saturating_mul(threads)
        .saturating_add(bytes);
    let mut room = Vec::<u8>::new();
    let fits = room.try_reserve_exact(bytes).is_ok();
    std::hint::black_box(&room); // an unused allocation may be elided
    fits
}

/// Whether an allocation can fail before the machine runs out of memory:
/// under an address-space or data limit (`ulimit -v`, `ulimit -d`), or
/// with the kernel's strict overcommit. Otherwise Linux grants any
/// allocation that could ever fit and ends the process (the OOM killer)
/// when memory does run out, which no check here can prevent.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn allocations_can_fail() -> bool {
    static STRICT_OVERCOMMIT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let limited = |resource| {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` into the valid `limit`.
        let ok = unsafe { libc::getrlimit(resource, &mut limit) } == 0;
        !ok || limit.rlim_cur != libc::RLIM_INFINITY
    };
    limited(libc::RLIMIT_AS)
        || limited(libc::RLIMIT_DATA)
        || *STRICT_OVERCOMMIT.get_or_init(|| {
            std::fs::read_to_string("/proc/sys/vm/overcommit_memory")
                .is_ok_and(|mode| mode.trim() == "2")
        })
}

#[cfg(not(target_os = "linux"))]
fn allocations_can_fail() -> bool {
    true
}

fn too_large(count: u64, what: &str) -> Error {
    Error::Memory(format!(
        "cannot allocate {count} int64 values for {what}: not enough memory"
    ))
}

fn no_headroom(count: u64, what: &str, threads: usize) -> Error {
    Error::Memory(format!(
        "cannot allocate {count} int64 values for {what}: not enough memory for them and \
         the {threads} threads the call runs on ({} MiB each; EPOCHPLAN_NUM_THREADS or \
         epochplan.set_num_threads lowers the count)",
        HEADROOM_PER_THREAD >> 20
    ))
}

fn checked_len(count: u64, what: &str) -> Result<usize> {
    usize::try_from(count).map_err(|_| too_large(count, what))
}

/// `vec![0; len]` that returns `None` instead of aborting when the
/// allocation fails. Large zeroed allocations come straight from the kernel
/// (already zero), so nothing is written here.
#[allow(unsafe_code)]
fn try_zeroed<T: ZeroBits>(len: usize) -> Option<Vec<T>> {
    if len == 0 {
        return Some(Vec::new());
    }
    let layout = std::alloc::Layout::array::<T>(len).ok()?;
    // SAFETY: `layout` has a non-zero size. A non-null result is a block of
    // `len` zeroed values of `T`, valid because `T` is one of the integers
    // that `ZeroBits` is sealed to, from the global allocator with exactly
    // the layout that `Vec<T>` of capacity `len` frees it with.
    unsafe {
        let ptr = std::alloc::alloc_zeroed(layout).cast::<T>();
        if ptr.is_null() {
            return None;
        }
        Some(Vec::from_raw_parts(ptr, len, len))
    }
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u32 {}
}

/// The integers whose all-zero bytes are a value: what [`zeroed`] allocates.
pub trait ZeroBits: sealed::Sealed + Copy {}
impl ZeroBits for i32 {}
impl ZeroBits for i64 {}
impl ZeroBits for u32 {}

/// `count` zeros, allocated zeroed but untouched (each page is cleared by
/// the kernel at its first write, on the thread that writes it), or an error
/// naming `what` when the machine cannot hold them.
pub fn zeroed<T: ZeroBits>(count: usize, what: &str) -> Result<Vec<T>> {
    try_zeroed(count).ok_or_else(|| no_room_for(what, count))
}

/// Advises the kernel to back the whole pages inside `memory` with huge
/// pages when it is large. Only a hint: any failure leaves ordinary pages,
/// which are correct too.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub fn advise_huge_pages<T>(memory: &[T]) {
    const PAGE: usize = 4096;
    let bytes = std::mem::size_of_val(memory);
    if bytes < HUGE_PAGE_MIN_BYTES {
        return;
    }
    let start = (memory.as_ptr() as usize).next_multiple_of(PAGE);
    let end = (memory.as_ptr() as usize + bytes) & !(PAGE - 1);
    if end > start {
        // SAFETY: [start, end) is page aligned and lies inside the live
        // allocation behind `memory`. MADV_HUGEPAGE changes no contents and no
        // mapping, only how future faults in the range are served.
        unsafe {
            libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn advise_huge_pages<T>(_memory: &[T]) {}

/// Asks the processor to bring `item`'s cache line in, without waiting for
/// it: random lookups issue their misses ahead of their use, and nothing
/// holds up the instructions after a prefetch as a load would.
#[inline(always)]
pub fn prefetch<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: a prefetch reads nothing and faults on no address; SSE, which
    // has it, is part of every x86-64 processor.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>((item as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(item);
}

/// [`prefetch`] for a line read once: the processor brings it close to the
/// core without keeping it in the outer caches (the non-temporal hint).
/// Random reads over an array far larger than the cache issue their misses
/// faster so: gathering 1.1 * 10^7 random ids of a 720 MB array took 14 to
/// 15 ns a read on one thread against 18 ns unprefetched and 17 to 18 ns
/// with [`prefetch`]'s hint, 32 reads ahead.
#[inline(always)]
pub(crate) fn prefetch_once<T>(item: &T) {
    #[cfg(target_arch = "x86_64")]
    #[allow(unsafe_code)]
    // SAFETY: as for `prefetch`.
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_NTA};
        _mm_prefetch::<_MM_HINT_NTA>((item as *const T).cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    std::hint::black_box(item);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_of_any_size() {
        for count in [0u64, 1, 7, 1 << 20, 5 << 20] {
            let mut ids = zeroed_ids(count, "a test").unwrap();
            assert_eq!(ids.len() as u64, count);
            assert!(ids.iter().all(|&x| x == 0));
            prefault(&mut ids);
            assert!(ids.iter().all(|&x| x == 0));
        }
    }

    #[test]
    fn with_capacity_of_any_size() {
        for count in [0u64, 1, 1 << 20] {
            let ids = ids_with_capacity(count, "a test").unwrap();
            assert!(ids.is_empty());
            assert_eq!(ids.capacity() as u64, count);
        }
    }

    #[test]
    fn too_large_is_an_error() {
        for err in [
            zeroed_ids(u64::MAX / 2, "a test").unwrap_err(),
            ids_with_capacity(u64::MAX / 2, "a test").unwrap_err(),
            vec_with_capacity::<(u64, u64)>(usize::MAX / 4, "a test").unwrap_err(),
        ] {
            assert!(err.to_string().contains("a test"), "{err}");
        }
    }
}
