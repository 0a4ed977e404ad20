//! The residency scan shared by `where`, `move` and `warm`.
//!
//! `move_pages(2)` reports a page's node only if the page is present in the caller's page
//! tables, so the scan must map the file and fault pages in; it must also never read a
//! non-resident page in. Per window (1 GiB of file, so a huge file needs no huge mapping)
//! and per batch (16 MiB) it:
//!
//! 1. asks `mincore(2)` which pages are resident, right before touching them, so that the
//!    window in which a page can be evicted between check and touch is one batch long;
//! 2. faults in only runs of resident pages with `MADV_POPULATE_READ` (one system call per
//!    run, no SIGBUS if the file shrinks). The mapping is `MADV_RANDOM`, so a fault never
//!    starts readahead, and the kernel's fault-around maps cached neighbours without I/O;
//! 3. asks `move_pages(2)` (batched, `nodes == NULL`) where each of those pages is. A page
//!    evicted after the touch comes back `-ENOENT` and is counted as evicted during the query.
//!
//! Residual race, stated honestly: a page evicted between step 1 and step 2 of its batch is
//! read back in by the fault (one page, no readahead). Such reads are major faults; the scan
//! counts them from `getrusage(RUSAGE_THREAD)` and reports them (`read_in_during_query`).

use crate::error::PagecacheError;
use crate::file::OpenFile;
use numaio_sys::PageStatus;
use std::os::fd::AsRawFd;

/// Bytes of file mapped at a time.
pub(crate) const WINDOW_BYTES: u64 = 1 << 30;
/// Pages checked with mincore and then touched as one batch.
pub(crate) const BATCH_PAGES: u64 = 4096;

const MADV_POPULATE_READ: libc::c_int = 22;

/// One batch of resident pages, seen while its mapping is still alive.
pub(crate) struct Batch<'a> {
    /// File page index of each page mincore reported resident.
    pub pages: &'a [u64],
    /// The address of each of those pages in our mapping.
    pub addrs: &'a [*const u8],
    /// move_pages status of each page (empty if the scan does not query).
    pub status: &'a [PageStatus],
}

/// Totals of one scan.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ScanStats {
    /// Pages mincore reported resident.
    pub mincore_resident: u64,
    /// Major faults taken while touching: pages evicted between mincore and the touch,
    /// read back in (or pages still under I/O from someone else's read).
    pub read_in: u64,
}

/// A read-only shared mapping, unmapped on drop.
struct Window {
    addr: *mut u8,
    len: usize,
}

impl Window {
    fn map(f: &OpenFile, offset: u64, len: usize) -> Result<Window, PagecacheError> {
        // SAFETY: a fresh read-only shared mapping of a file we hold open; nothing else
        // refers to the address range.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f.file.as_raw_fd(),
                offset as libc::off_t,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(PagecacheError::io(
                &f.path,
                "mmap",
                std::io::Error::last_os_error(),
            ));
        }
        let w = Window {
            addr: addr as *mut u8,
            len,
        };
        // No readahead on our faults: touching a resident page must never start I/O.
        // SAFETY: advice on our own mapping.
        unsafe { libc::madvise(addr, len, libc::MADV_RANDOM) };
        Ok(w)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the range mmap returned.
        unsafe { libc::munmap(self.addr as *mut libc::c_void, self.len) };
    }
}

fn majflt() -> u64 {
    // SAFETY: ru is valid for writes.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD on the calling thread.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) } != 0 {
        return 0;
    }
    ru.ru_majflt as u64
}

/// Pages of `f` (rounded up).
pub(crate) fn pages_of(size: u64, ps: u64) -> u64 {
    size.div_ceil(ps)
}

/// Scans pages `[first, end)` of `f`. With `query`, resident pages are faulted in and their
/// nodes queried; without, only mincore is used (nothing is touched). `cb` sees each batch
/// while the mapping is alive, so it may act on the addresses (e.g. move the pages).
pub(crate) fn scan(
    f: &OpenFile,
    first: u64,
    end: u64,
    query: bool,
    mut cb: impl FnMut(&Batch) -> Result<(), PagecacheError>,
) -> Result<ScanStats, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let end = end.min(pages_of(f.size, ps));
    let mut stats = ScanStats::default();
    let win_pages = WINDOW_BYTES / ps;
    let mut vec = vec![0u8; BATCH_PAGES as usize];
    let mut pages: Vec<u64> = Vec::with_capacity(BATCH_PAGES as usize);
    let mut addrs: Vec<*const u8> = Vec::with_capacity(BATCH_PAGES as usize);
    let mut populate_ok = true;
    let mut w0 = first;
    while w0 < end {
        let w1 = (w0 + win_pages).min(end);
        let win = Window::map(f, w0 * ps, ((w1 - w0) * ps) as usize)?;
        let mut b0 = w0;
        while b0 < w1 {
            let b1 = (b0 + BATCH_PAGES).min(w1);
            let n = (b1 - b0) as usize;
            // SAFETY: inside the window (b0 >= w0, b1 <= w1).
            let base = unsafe { win.addr.add(((b0 - w0) * ps) as usize) };
            // SAFETY: base..base+n pages is mapped; vec holds n bytes.
            let r = unsafe {
                libc::mincore(base as *mut libc::c_void, n * ps as usize, vec.as_mut_ptr())
            };
            if r != 0 {
                return Err(PagecacheError::io(
                    &f.path,
                    "mincore",
                    std::io::Error::last_os_error(),
                ));
            }
            pages.clear();
            addrs.clear();
            for (i, &v) in vec[..n].iter().enumerate() {
                if v & 1 != 0 {
                    pages.push(b0 + i as u64);
                    // SAFETY: within the batch.
                    addrs.push(unsafe { base.add(i * ps as usize) } as *const u8);
                }
            }
            stats.mincore_resident += pages.len() as u64;
            let status = if query && !pages.is_empty() {
                let before = majflt();
                populate_ok = touch_runs(&vec[..n], base, ps as usize, populate_ok);
                stats.read_in += majflt().saturating_sub(before);
                numaio_sys::query_pages(0, &addrs).map_err(|e| PagecacheError::sys(&f.path, e))?
            } else {
                Vec::new()
            };
            cb(&Batch {
                pages: &pages,
                addrs: &addrs,
                status: &status,
            })?;
            b0 = b1;
        }
        drop(win);
        w0 = w1;
    }
    Ok(stats)
}

/// Faults in each run of resident pages. Returns whether MADV_POPULATE_READ is usable
/// (kernels before 5.14 lack it; then pages are touched one by one).
fn touch_runs(vec: &[u8], base: *mut u8, ps: usize, populate_ok: bool) -> bool {
    let mut ok = populate_ok;
    let mut i = 0;
    while i < vec.len() {
        if vec[i] & 1 == 0 {
            i += 1;
            continue;
        }
        let start = i;
        while i < vec.len() && vec[i] & 1 != 0 {
            i += 1;
        }
        // SAFETY: the run lies inside the batch's mapped range.
        let addr = unsafe { base.add(start * ps) };
        let len = (i - start) * ps;
        if ok {
            // SAFETY: populating our own read-only mapping; errors are reported, not raised.
            let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_READ) };
            if r == 0 {
                continue;
            }
            if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL) {
                ok = false;
            } else {
                // EFAULT (file shrank), EHWPOISON, EINTR: the query reports those pages.
                continue;
            }
        }
        for p in start..i {
            // SAFETY: the page is inside the mapping and within the file's size when the
            // scan started; a concurrent truncate could raise SIGBUS (pre-5.14 kernels only).
            unsafe { std::ptr::read_volatile(base.add(p * ps)) };
        }
    }
    ok
}
