//! The pages of a file mapping that a pass has read, given back to the
//! kernel.
//!
//! A token plan's lengths are usually a memory-mapped `.npy` of up to 10^9
//! values. Every page a pass touches stays mapped into the process, so one
//! pass over the whole file counts the whole file in the process's
//! resident memory, although those pages are the file's page cache, which
//! the kernel shares and can drop. A pass that is done with a range gives
//! its pages back with [`Pages::release`]: the range is unmapped from this
//! process (`MADV_DONTNEED`) and stays in the page cache, from which a
//! later read maps it again.
//!
//! Only a shared mapping of a file may be given back this way: the same
//! call on anonymous or private memory would throw its contents away. So a
//! [`Pages`] is made only for bytes that `/proc/self/maps` shows inside one
//! shared file mapping, and it borrows those bytes, so the mapping cannot
//! go away while it lives.

use std::marker::PhantomData;

/// Bytes of one shared file mapping, whose pages may be given back.
#[derive(Debug)]
pub struct Pages<'a> {
    start: usize,
    end: usize,
    bytes: PhantomData<&'a [u8]>,
}

impl<'a> Pages<'a> {
    /// The memory of `values` when it lies in one shared mapping of a file;
    /// None for any other memory, or off Linux.
    pub fn of<T>(values: &'a [T]) -> Option<Pages<'a>> {
        let start = values.as_ptr() as usize;
        let end = start.checked_add(std::mem::size_of_val(values))?;
        if start == end || !shared_file_mapping(start, end) {
            return None;
        }
        Some(Pages {
            start,
            end,
            bytes: PhantomData,
        })
    }

    /// Gives back the whole pages inside `part` (values the caller has
    /// read and will not read again soon; reading them later is still
    /// correct, only slower). A part outside these pages is ignored.
    pub fn release<T>(&self, part: &[T]) {
        let a = part.as_ptr() as usize;
        let b = a.saturating_add(std::mem::size_of_val(part));
        if a < self.start || b > self.end {
            return;
        }
        let page = page_size();
        let (first, last) = (a.div_ceil(page) * page, b / page * page);
        if first < last {
            advise_dontneed(first, last - first);
        }
    }
}

#[cfg(target_os = "linux")]
fn page_size() -> usize {
    // SAFETY: sysconf only reads a constant of the system.
    #[allow(unsafe_code)]
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size)
        .ok()
        .filter(|&s| s > 0)
        .unwrap_or(4096)
}

#[cfg(target_os = "linux")]
fn advise_dontneed(start: usize, len: usize) {
    // SAFETY: [start, start + len) is whole pages of a shared file mapping
    // that a live `Pages` borrows (checked in `Pages::of`); MADV_DONTNEED
    // on such a mapping only unmaps the pages from this process, and any
    // later access maps them again from the file's page cache. A failure
    // leaves them mapped, which is harmless.
    #[allow(unsafe_code)]
    unsafe {
        libc::madvise(start as *mut libc::c_void, len, libc::MADV_DONTNEED);
    }
}

/// True when `[start, end)` lies in one mapping that `/proc/self/maps`
/// lists as shared (`s` in its permissions) and backed by a file (a path,
/// a nonzero inode).
#[cfg(target_os = "linux")]
fn shared_file_mapping(start: usize, end: usize) -> bool {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return false;
    };
    maps.lines().any(|line| {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms), Some(_offset), Some(_device), Some(inode), Some(path)) = (
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
            fields.next(),
        ) else {
            return false;
        };
        let Some((low, high)) = range.split_once('-') else {
            return false;
        };
        let (Ok(low), Ok(high)) = (
            usize::from_str_radix(low, 16),
            usize::from_str_radix(high, 16),
        ) else {
            return false;
        };
        low <= start
            && end <= high
            && perms.as_bytes().get(3) == Some(&b's')
            && inode != "0"
            && path.starts_with('/')
    })
}

#[cfg(not(target_os = "linux"))]
fn page_size() -> usize {
    4096
}

#[cfg(not(target_os = "linux"))]
fn advise_dontneed(_start: usize, _len: usize) {}

#[cfg(not(target_os = "linux"))]
fn shared_file_mapping(_start: usize, _end: usize) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn memory_that_is_not_a_shared_file_mapping_is_never_released() {
        let heap = vec![7u32; 1 << 20];
        assert!(Pages::of(&heap).is_none());
        static DATA: [u8; 8192] = [1; 8192];
        assert!(Pages::of(&DATA).is_none());
        assert!(Pages::of::<u64>(&[]).is_none());
    }
}
