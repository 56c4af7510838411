//! Leaving the OS page cache as the scan found it (`verify --online`): before a chunk is read,
//! which of its pages are cached already (the file range mapped and asked with `mincore`);
//! after it was checked, `POSIX_FADV_DONTNEED` on the pages that were not, so that reading the
//! whole cluster does not evict the running server's working set.

use std::fs::File;
use std::os::unix::io::AsRawFd;

/// The cache residency of one file range, one entry per OS page.
pub(crate) struct Residency {
    offset: u64,
    page_size: usize,
    cached: Vec<u8>,
}

fn os_page_size() -> usize {
    // SAFETY: sysconf only reads a system constant.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Which pages of `len` bytes at `offset` are in the page cache; `None` when it cannot be told
/// (the range is then left alone afterwards).
pub(crate) fn residency(file: &File, offset: u64, len: usize) -> Option<Residency> {
    let page_size = os_page_size();
    if len == 0 || !offset.is_multiple_of(page_size as u64) {
        return None;
    }
    let pages = len.div_ceil(page_size);
    let mut cached = vec![0u8; pages];
    let off = libc::off_t::try_from(offset).ok()?;
    // SAFETY: a read-only shared mapping of a range of an open file, never dereferenced: only
    // passed to mincore (which fills `cached`, one byte per page) and unmapped at once.
    unsafe {
        let addr = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            off,
        );
        if addr == libc::MAP_FAILED {
            return None;
        }
        let rc = libc::mincore(addr, len, cached.as_mut_ptr());
        libc::munmap(addr, len);
        if rc != 0 {
            return None;
        }
    }
    Some(Residency {
        offset,
        page_size,
        cached,
    })
}

impl Residency {
    /// Drops from the cache the runs of pages that were not cached before the read.
    pub(crate) fn drop_uncached(&self, file: &File) {
        let mut i = 0;
        while i < self.cached.len() {
            if self.cached[i] & 1 != 0 {
                i += 1;
                continue;
            }
            let start = i;
            while i < self.cached.len() && self.cached[i] & 1 == 0 {
                i += 1;
            }
            let at = self.offset + (start * self.page_size) as u64;
            let len = (i - start) * self.page_size;
            // SAFETY: posix_fadvise only takes a valid descriptor and plain integers; a hint.
            unsafe {
                libc::posix_fadvise(
                    file.as_raw_fd(),
                    at as libc::off_t,
                    len as libc::off_t,
                    libc::POSIX_FADV_DONTNEED,
                );
            }
        }
    }
}

/// Turns the kernel's read-ahead off for `file`: pages read ahead of the scan would look cached
/// to the next [`residency`] and stay.
pub(crate) fn advise_no_readahead(file: &File) {
    // SAFETY: posix_fadvise only takes a valid descriptor and plain integers; it is a hint.
    unsafe {
        libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_RANDOM);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn cached_pages(file: &File, len: usize) -> usize {
        residency(file, 0, len)
            .expect("mincore")
            .cached
            .iter()
            .filter(|b| **b & 1 != 0)
            .count()
    }

    #[test]
    fn pages_not_cached_before_are_dropped_after() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("f");
        let len = 64 * os_page_size();
        let mut f = File::create(&path).expect("create");
        f.write_all(&vec![7u8; len]).expect("write");
        f.sync_all().expect("fsync");
        drop(f);
        let f = File::open(&path).expect("open");
        // SAFETY: a hint on a valid descriptor.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        let mut buf = vec![0u8; len];
        // The first half is "the server's": read (cached) before the scan looks.
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf[..len / 2], 0).expect("read");
        let before_scan = cached_pages(&f, len);
        assert!(before_scan >= 32, "the first half is cached: {before_scan}");
        let r = residency(&f, 0, len).expect("residency");
        std::os::unix::fs::FileExt::read_exact_at(&f, &mut buf, 0).expect("read");
        assert_eq!(cached_pages(&f, len), 64, "reading cached everything");
        r.drop_uncached(&f);
        let after = cached_pages(&f, len);
        assert_eq!(after, before_scan, "only what was cached before stays");
    }
}
