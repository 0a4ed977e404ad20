//! `evict`: drop a file's clean cached pages with `POSIX_FADV_DONTNEED`.
//!
//! The kernel drops only clean pages that no process maps; dirty pages are first written
//! with `fdatasync` when asked (`sync`), so nothing is lost either way. File contents never
//! change. `fdatasync` works on a read-only descriptor.

use crate::error::PagecacheError;
use crate::file::{open_regular, OpenFile};
use crate::residency::{page_span, resident_in_range};
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// Resident pages before and after an eviction.
#[derive(Debug, Clone, Serialize)]
pub struct EvictReport {
    #[serde(serialize_with = "crate::serialize_path")]
    pub path: PathBuf,
    pub pages: u64,
    /// `None` when mincore hides this file's residency from the caller.
    pub resident_before: Option<u64>,
    pub resident_after: Option<u64>,
    /// Whether dirty pages were written first.
    pub synced: bool,
}

/// Evicts `path`'s clean cached pages (after writing dirty ones if `sync`).
pub fn evict_file(path: &Path, sync: bool) -> Result<EvictReport, PagecacheError> {
    let f = open_regular(path)?;
    evict_open(&f, sync, None)
}

/// [`evict_file`] on an open file, optionally only the pages a byte range `(offset, len)`
/// covers (whole pages; see [`crate::page_span`]).
pub fn evict_open(
    f: &OpenFile,
    sync: bool,
    range: Option<(u64, u64)>,
) -> Result<EvictReport, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = page_span(f.size, range, ps);
    let before = resident_in_range(f, range)?;
    if sync {
        let r = if range.is_some() {
            sync_range(f, first * ps, (end - first) * ps)
        } else {
            f.file.sync_data()
        };
        r.map_err(|e| PagecacheError::io(&f.path, "fdatasync", e))?;
    }
    if end > first {
        // len 0 means "to the end of the file", so an empty range must not get here.
        let len = if range.is_some() {
            (end - first) * ps
        } else {
            0
        };
        fadvise_dontneed(f, first * ps, len)?;
    }
    let after = resident_in_range(f, range)?;
    Ok(EvictReport {
        path: f.path.clone(),
        pages: end - first,
        resident_before: before,
        resident_after: after,
        synced: sync,
    })
}

/// Writes the dirty pages of a byte range and waits for them (data only, like fdatasync
/// for that range: the metadata a later read needs is already there for cached pages).
fn sync_range(f: &OpenFile, offset: u64, len: u64) -> std::io::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a descriptor we own; the kernel checks the range.
    let r = unsafe {
        libc::sync_file_range(
            f.file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            flags,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// `POSIX_FADV_DONTNEED` on `[offset, offset+len)`; `len == 0` means to the end of the file.
pub(crate) fn fadvise_dontneed(f: &OpenFile, offset: u64, len: u64) -> Result<(), PagecacheError> {
    // SAFETY: advice on a descriptor we own.
    let r = unsafe {
        libc::posix_fadvise(
            f.file.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        )
    };
    if r != 0 {
        return Err(PagecacheError::io(
            &f.path,
            "posix_fadvise(DONTNEED)",
            std::io::Error::from_raw_os_error(r),
        ));
    }
    Ok(())
}
