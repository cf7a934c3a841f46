//! The extension's allocator: the system's, with a small reserve for the
//! moment it runs out.
//!
//! Large buffers are allocated fallibly and a failure becomes a Python
//! `MemoryError`; but building that error (its message, a worker thread's
//! bookkeeping) takes a few small allocations, and under an address-space
//! limit (as cluster schedulers set) those can fail too. Rust aborts the
//! process on a failed allocation, so a small one the system refuses is
//! served from a static reserve instead: the error reaches Python. The
//! reserve is a bump allocator (its blocks are never reused) of 1 MiB,
//! untouched, and so not resident, until the system refuses.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Bytes of the reserve.
const RESERVE_BYTES: usize = 1 << 20;
/// The largest allocation the reserve serves: error messages and small
/// bookkeeping, never a buffer.
const SMALL: usize = 4096;

/// The system allocator, backed by the reserve for small allocations.
pub struct WithReserve;

#[repr(C, align(4096))]
struct Reserve(UnsafeCell<[u8; RESERVE_BYTES]>);

// SAFETY: the reserve's bytes are handed out once each (a bump pointer moved
// with compare-and-swap), so no two threads ever share a block.
#[allow(unsafe_code)]
unsafe impl Sync for Reserve {}

static RESERVE: Reserve = Reserve(UnsafeCell::new([0; RESERVE_BYTES]));
/// Bytes of the reserve handed out.
static USED: AtomicUsize = AtomicUsize::new(0);

fn base() -> usize {
    RESERVE.0.get() as usize
}

fn in_reserve(ptr: *mut u8) -> bool {
    (base()..base() + RESERVE_BYTES).contains(&(ptr as usize))
}

/// A block of the reserve for `layout`, or null once the reserve cannot
/// hold it (the caller then aborts, as it would have).
fn from_reserve(layout: Layout) -> *mut u8 {
    if layout.size() > SMALL {
        return std::ptr::null_mut();
    }
    let mut used = USED.load(Ordering::Relaxed);
    loop {
        let start = (base() + used).next_multiple_of(layout.align()) - base();
        let end = start + layout.size();
        if end > RESERVE_BYTES {
            return std::ptr::null_mut();
        }
        match USED.compare_exchange_weak(used, end, Ordering::Relaxed, Ordering::Relaxed) {
            // The block lies inside the reserve, which starts zeroed and
            // hands each byte out once.
            Ok(_) => return RESERVE.0.get().cast::<u8>().wrapping_add(start),
            Err(now) => used = now,
        }
    }
}

// SAFETY: every block comes from `System` (and goes back to it) or from the
// reserve (whose blocks are never freed, and never given out twice); a
// reallocation moves a block across with the smaller of its two sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for WithReserve {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc(layout) };
        if ptr.is_null() {
            from_reserve(layout)
        } else {
            ptr
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let ptr = unsafe { System.alloc_zeroed(layout) };
        if ptr.is_null() {
            from_reserve(layout) // zeroed: never handed out before
        } else {
            ptr
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if !in_reserve(ptr) {
            // SAFETY: a block of `System`, as the caller's contract says.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !in_reserve(ptr) {
            // SAFETY: a block of `System`, as the caller's contract says.
            let moved = unsafe { System.realloc(ptr, layout, new_size) };
            if !moved.is_null() || new_size > SMALL {
                return moved;
            }
        }
        // A block of the reserve, or a small one the system could not grow:
        // a new block, the bytes copied, the old one given back.
        // SAFETY: `new_size` is non-zero and fits `isize` with this
        // alignment (the caller's contract for `realloc`).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: as `alloc`.
        let new = unsafe { self.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks hold at least the smaller size, and they
            // are distinct (the new one was free until now).
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                self.dealloc(ptr, layout);
            }
        }
        new
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reserve_hands_out_aligned_distinct_blocks_and_refuses_large_ones() {
        let a = from_reserve(Layout::from_size_align(88, 8).unwrap());
        let b = from_reserve(Layout::from_size_align(1, 64).unwrap());
        assert!(in_reserve(a) && in_reserve(b) && a != b);
        assert_eq!(b as usize % 64, 0);
        assert!(from_reserve(Layout::from_size_align(SMALL + 1, 8).unwrap()).is_null());
        let boxed = Box::new(7u64);
        assert!(!in_reserve((&*boxed as *const u64).cast_mut().cast()));
    }
}
