//! `evict`: drop a file's clean cached pages with `POSIX_FADV_DONTNEED`.
//!
//! The kernel drops only clean pages that no process maps; dirty pages are first written
//! with `fdatasync` when asked (`sync`), so nothing is lost either way. File contents never
//! change. `fdatasync` works on a read-only descriptor.

use crate::error::PagecacheError;
use crate::file::{open_regular, OpenFile};
use crate::residency::resident_pages_mincore;
use crate::scan::pages_of;
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
    let ps = numaio_sys::page_size() as u64;
    let before = resident_pages_mincore(&f)?;
    if sync {
        f.file
            .sync_data()
            .map_err(|e| PagecacheError::io(path, "fdatasync", e))?;
    }
    fadvise_dontneed(&f, 0, 0)?;
    let after = resident_pages_mincore(&f)?;
    Ok(EvictReport {
        path: f.path.clone(),
        pages: pages_of(f.size, ps),
        resident_before: before,
        resident_after: after,
        synced: sync,
    })
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
