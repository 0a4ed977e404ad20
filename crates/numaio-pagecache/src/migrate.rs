//! `move`: migrate a file's resident pages to their target nodes, reading nothing new.
//!
//! The pages are mapped (only those mincore reports resident, as in the scan) and moved with
//! `move_pages(2)` and `MPOL_MF_MOVE` on our own mapping, which migrates page-cache pages that
//! no other process maps. Pages mapped by others fail with `-EACCES` unless `move_all`
//! (`MPOL_MF_MOVE_ALL`, needs CAP_SYS_NICE). `-EBUSY` pages (locked, under I/O or writeback)
//! are retried a few times. Migration copies page contents; it never changes them.

use crate::error::PagecacheError;
use crate::file::{open_regular, OpenFile};
use crate::scan::scan;
use crate::target::Target;
use numaio_sys::PageStatus;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// How to move. Default: own pages only, 3 retries of busy pages.
#[derive(Debug, Clone)]
pub struct MoveOptions {
    /// Also move pages other processes map (`MPOL_MF_MOVE_ALL`; needs CAP_SYS_NICE).
    pub move_all: bool,
    /// How often busy pages are retried before they are reported as busy.
    pub busy_retries: u32,
    /// Only the pages this byte range `(offset, len)` covers (see [`crate::page_span`]).
    pub range: Option<(u64, u64)>,
}

impl Default for MoveOptions {
    fn default() -> Self {
        MoveOptions {
            move_all: false,
            busy_retries: 3,
            range: None,
        }
    }
}

/// What a move did, in pages.
#[derive(Debug, Clone, Default, Serialize)]
pub struct MoveReport {
    #[serde(serialize_with = "crate::serialize_path")]
    pub path: PathBuf,
    pub pages: u64,
    /// Pages resident when the move looked (mincore).
    pub resident_pages: u64,
    /// Migrated to their target node.
    pub moved: u64,
    /// Already on their target node.
    pub already: u64,
    /// Still busy after the retries.
    pub busy: u64,
    /// Mapped by other processes (`-EACCES`); retry with `--all` as root.
    pub mapped_by_others: u64,
    /// The target node had no free memory (`-ENOMEM`).
    pub no_memory: u64,
    /// Any other failure.
    pub failed: u64,
    /// Not resident (never read in), including pages evicted while moving.
    pub not_resident: u64,
}

impl MoveReport {
    /// Folds in a later pass over the same file: pages moved add up; the other counts
    /// describe the file's state after the later pass.
    pub fn absorb(&mut self, later: MoveReport) {
        let moved = self.moved + later.moved;
        *self = later;
        self.moved = moved;
    }

    /// Every resident page is on its target node.
    pub fn complete(&self) -> bool {
        self.busy == 0 && self.mapped_by_others == 0 && self.no_memory == 0 && self.failed == 0
    }
}

fn move_all_denied(path: &Path) -> PagecacheError {
    PagecacheError::NeedsPrivilege {
        path: path.into(),
        what: "moving pages other processes map (--all, MPOL_MF_MOVE_ALL)",
        cap: "CAP_SYS_NICE",
        hint: ", or move without --all",
    }
}

/// Whether the effective capability set holds CAP_SYS_NICE (bit 23 of `CapEff`).
fn has_cap_sys_nice() -> bool {
    const CAP_SYS_NICE: u32 = 23;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_NICE) != 0)
}

/// Moves `path`'s resident pages to `target`.
pub fn move_file(
    path: &Path,
    target: &Target,
    opts: &MoveOptions,
) -> Result<MoveReport, PagecacheError> {
    // A bad target is reported before anything about the file.
    target.validate(numaio_sys::page_size() as u64)?;
    let f = open_regular(path)?;
    move_opened(&f, target, opts)
}

/// [`move_file`] on a file already open (e.g. by a walk).
pub fn move_opened(
    f: &OpenFile,
    target: &Target,
    opts: &MoveOptions,
) -> Result<MoveReport, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    target.validate(ps)?;
    if opts.move_all && !has_cap_sys_nice() {
        // Fail up front, not only when some page actually needs moving.
        return Err(move_all_denied(&f.path));
    }
    if !crate::file::mincore_is_truthful(f) {
        // mincore would call every page resident, and moving would read them all in.
        return Err(PagecacheError::MincoreRestricted {
            path: f.path.clone(),
        });
    }
    move_open(f, target, opts)
}

/// [`move_file`] on an open file whose target is already validated. Trusts mincore: the
/// caller checks [`crate::file::mincore_is_truthful`] unless reading pages in is fine.
pub(crate) fn move_open(
    f: &OpenFile,
    target: &Target,
    opts: &MoveOptions,
) -> Result<MoveReport, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = crate::residency::page_span(f.size, opts.range, ps);
    let total = end - first;
    let mut rep = MoveReport {
        path: f.path.clone(),
        pages: total,
        ..Default::default()
    };
    let mut addrs: Vec<*const u8> = Vec::new();
    let mut nodes: Vec<u32> = Vec::new();
    let mut gone = 0u64;
    let stats = scan(f, first, end, true, |b| {
        addrs.clear();
        nodes.clear();
        for ((&page, &addr), &st) in b.pages.iter().zip(b.addrs).zip(b.status) {
            let want = target.node_for_page(page, ps);
            match st {
                PageStatus::Node(n) if n == want => rep.already += 1,
                PageStatus::NotPresent => gone += 1,
                // Wrong node, or unknown (busy at query time): ask the kernel to move it.
                _ => {
                    addrs.push(addr);
                    nodes.push(want);
                }
            }
        }
        let mut attempt = 0;
        while !addrs.is_empty() {
            let res = numaio_sys::move_pages_to(0, &addrs, &nodes, opts.move_all).map_err(|e| {
                if opts.move_all && e.errno() == Some(libc::EPERM) {
                    move_all_denied(&f.path)
                } else {
                    PagecacheError::sys(&f.path, e)
                }
            })?;
            let mut retry_a = Vec::new();
            let mut retry_n = Vec::new();
            for ((st, &a), &want) in res.iter().zip(&addrs).zip(&nodes) {
                match *st {
                    PageStatus::Node(n) if n == want => rep.moved += 1,
                    PageStatus::Busy if attempt < opts.busy_retries => {
                        retry_a.push(a);
                        retry_n.push(want);
                    }
                    PageStatus::Busy => rep.busy += 1,
                    PageStatus::MappedByOthers => rep.mapped_by_others += 1,
                    PageStatus::NoMemory => rep.no_memory += 1,
                    PageStatus::NotPresent => gone += 1,
                    _ => rep.failed += 1,
                }
            }
            if !retry_a.is_empty() {
                attempt += 1;
                std::thread::sleep(Duration::from_millis(2 * attempt as u64));
            }
            addrs = retry_a;
            nodes = retry_n;
        }
        Ok(())
    })?;
    rep.resident_pages = stats.mincore_resident - gone;
    rep.not_resident = total - rep.resident_pages;
    Ok(rep)
}
