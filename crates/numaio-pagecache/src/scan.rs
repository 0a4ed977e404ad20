//! The residency scan shared by `where`, `move` and `warm`.
//!
//! `move_pages(2)` reports a page's node only if the page is present in the caller's page
//! tables, so the scan must map the file and fault pages in; it must also never read a
//! non-resident page in. Per window (1 GiB of file, so a huge file needs no huge mapping)
//! and per batch (16 MiB; 1 MiB when pages are faulted in) it:
//!
//! 1. asks `mincore(2)` which pages of the batch are resident;
//! 2. faults in only resident pages with `MADV_POPULATE_READ` (no SIGBUS if the file
//!    shrinks): one call per run of resident pages, right after the batch's `mincore`. Pages
//!    the query then finds not mapped are faulted one by one, each re-checked right before. The mapping is `MADV_RANDOM`, so a fault never starts readahead (not
//!    even async readahead on a readahead-marked page);
//! 3. asks where each of those pages is: from `/proc/self/pagemap` frame numbers when the
//!    caller may read them (root; see [`crate::pfn`]), else with `move_pages(2)` (batched,
//!    `nodes == NULL`). A page evicted after the touch is not present any more (`-ENOENT`)
//!    and is counted as evicted during the query.
//!
//! Residual race, stated honestly: a page evicted in the gap between the batch's `mincore`
//! and the fault that follows is read back in (one page, no readahead). Such
//! reads are major faults; the scan counts them from `getrusage(RUSAGE_THREAD)` and reports them (`read_in_during_query`).

use crate::error::PagecacheError;
use crate::file::OpenFile;
use crate::pfn::{decode, read_pagemap, PfnNodes, Pm};
use numaio_sys::PageStatus;
use std::fs::File;
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
    fn map(f: &OpenFile, offset: u64, len: usize, touch: bool) -> Result<Window, PagecacheError> {
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
        if touch {
            // No readahead on our faults: touching a resident page must never start I/O.
            // A mincore-only scan faults nothing and skips the call.
            // SAFETY: advice on our own mapping.
            unsafe { libc::madvise(addr, len, libc::MADV_RANDOM) };
        }
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
    let batch_pages = if query {
        TOUCH_BATCH_PAGES
    } else {
        BATCH_PAGES
    };
    // Sized for the pages at hand: a tree of small files must not pay for a full batch.
    let batch = batch_pages.min(end.saturating_sub(first)) as usize;
    let mut vec = vec![0u8; batch];
    let mut pages: Vec<u64> = Vec::with_capacity(batch);
    let mut addrs: Vec<*const u8> = Vec::with_capacity(batch);
    let mut populate_ok = true;
    let mut status: Vec<PageStatus> = Vec::new();
    let mut pm: Vec<u64> = Vec::new();
    let mut pfn = if query { PfnPath::open() } else { None };
    let mut w0 = first;
    while w0 < end {
        let w1 = (w0 + win_pages).min(end);
        let win = Window::map(f, w0 * ps, ((w1 - w0) * ps) as usize, query)?;
        let mut b0 = w0;
        while b0 < w1 {
            let b1 = (b0 + batch_pages).min(w1);
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
            status.clear();
            if query && !pages.is_empty() {
                let before = majflt();
                populate_ok = if populate_ok {
                    touch_resident(&vec[..n], base, ps as usize)
                } else {
                    touch_runs(&vec[..n], base, ps as usize)
                };
                status = node_query(f, &mut pfn, base, n, b0, &pages, &addrs, &mut pm)?;
                // A page missed by the populate (evicted and re-cached in between): fault
                // those in one by one, each re-checked right before, and ask again.
                let missing: Vec<usize> = (0..pages.len())
                    .filter(|&i| status[i] == PageStatus::NotPresent)
                    .collect();
                if !missing.is_empty() {
                    for &i in &missing {
                        let addr = addrs[i] as *mut u8;
                        if resident_now(addr, ps as usize) {
                            populate(addr, ps as usize);
                        }
                    }
                    let mp: Vec<u64> = missing.iter().map(|&i| pages[i]).collect();
                    let ma: Vec<*const u8> = missing.iter().map(|&i| addrs[i]).collect();
                    let again = node_query(f, &mut pfn, base, n, b0, &mp, &ma, &mut pm)?;
                    for (&i, st) in missing.iter().zip(again) {
                        status[i] = st;
                    }
                }
                stats.read_in += majflt().saturating_sub(before);
            }
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

/// The pagemap route to nodes, while it works.
struct PfnPath {
    pagemap: File,
    table: &'static PfnNodes,
}

impl PfnPath {
    fn open() -> Option<PfnPath> {
        let table = PfnNodes::get()?;
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        Some(PfnPath { pagemap, table })
    }
}

/// The node of each of `pages` (at `addrs`, inside the batch at `base` of `n` pages from
/// file page `b0`): from pagemap while that route works, else from move_pages.
#[allow(clippy::too_many_arguments)]
fn node_query(
    f: &OpenFile,
    pfn: &mut Option<PfnPath>,
    base: *mut u8,
    n: usize,
    b0: u64,
    pages: &[u64],
    addrs: &[*const u8],
    pm: &mut Vec<u64>,
) -> Result<Vec<PageStatus>, PagecacheError> {
    let mut status = Vec::with_capacity(pages.len());
    if pfn_nodes(pfn, base, n, b0, pages, pm, &mut status) {
        return Ok(status);
    }
    numaio_sys::query_pages(0, addrs).map_err(|e| PagecacheError::sys(&f.path, e))
}

/// Fills `status` for the batch's resident `pages` from pagemap. Returns false when the
/// caller must ask move_pages instead (and turns the pagemap route off if PFNs are hidden).
fn pfn_nodes(
    path: &mut Option<PfnPath>,
    base: *mut u8,
    n: usize,
    b0: u64,
    pages: &[u64],
    pm: &mut Vec<u64>,
    status: &mut Vec<PageStatus>,
) -> bool {
    let Some(p) = path.as_ref() else {
        return false;
    };
    if read_pagemap(&p.pagemap, base as usize, n, pm).is_err() {
        *path = None;
        return false;
    }
    status.clear();
    for &page in pages {
        match decode(p.table, pm[(page - b0) as usize]) {
            Pm::Node(node) => status.push(PageStatus::Node(node)),
            Pm::NotPresent => status.push(PageStatus::NotPresent),
            Pm::Hidden => {
                *path = None;
                return false;
            }
            Pm::Unknown => return false,
        }
    }
    true
}

/// `MADV_POPULATE_READ` on `[addr, addr+len)`; false if the kernel lacks it (EINVAL).
/// Other errors (EFAULT when the file shrank, EHWPOISON, EINTR) are left to the query.
fn populate(addr: *mut u8, len: usize) -> bool {
    // SAFETY: populating our own read-only mapping; errors are returned, not raised.
    let r = unsafe { libc::madvise(addr as *mut libc::c_void, len, MADV_POPULATE_READ) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::EINVAL)
}

/// Pages per batch when pages are faulted in: 1 MiB of 4 KiB pages. The batch's `mincore`
/// is then immediately followed by the faults of its resident runs, so the gap in which an
/// evicted page could be read back stays that of a few system calls, while the page cache
/// is walked by `mincore` only once (a second, per-piece check cost 15 % of the scan).
pub(crate) const TOUCH_BATCH_PAGES: u64 = 256;

/// Faults in the resident pages of the batch (`vec` from the `mincore` just made): one
/// `MADV_POPULATE_READ` per run of resident pages. Returns false if MADV_POPULATE_READ is
/// missing (then [`touch_runs`] is used).
fn touch_resident(vec: &[u8], base: *mut u8, ps: usize) -> bool {
    let mut i = 0;
    while i < vec.len() {
        if vec[i] & 1 == 0 {
            i += 1;
            continue;
        }
        let mut j = i;
        while j < vec.len() && vec[j] & 1 != 0 {
            j += 1;
        }
        // SAFETY: pages i..j lie inside the batch.
        if !populate(unsafe { base.add(i * ps) }, (j - i) * ps) {
            touch_runs(vec, base, ps);
            return false;
        }
        i = j;
    }
    true
}

/// Whether the page at `addr` (in our mapping) is resident right now.
fn resident_now(addr: *mut u8, ps: usize) -> bool {
    let mut v = 0u8;
    // SAFETY: one page of our own mapping; v receives one byte.
    let r = unsafe { libc::mincore(addr as *mut libc::c_void, ps, &mut v) };
    r == 0 && v & 1 != 0
}

/// Touches every resident page by reading a byte (kernels before 5.14, which lack
/// MADV_POPULATE_READ). A concurrent truncate could raise SIGBUS here.
fn touch_runs(vec: &[u8], base: *mut u8, ps: usize) -> bool {
    for (i, &v) in vec.iter().enumerate() {
        // SAFETY: the page is inside the mapping.
        let addr = unsafe { base.add(i * ps) };
        if v & 1 != 0 && resident_now(addr, ps) {
            // SAFETY: the page is inside the mapping and was within the file's size.
            unsafe { std::ptr::read_volatile(addr) };
        }
    }
    false
}
