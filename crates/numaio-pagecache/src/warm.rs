//! `warm`: make a file's pages resident on chosen nodes, then verify.
//!
//! A new page-cache page is allocated under the memory policy of the task that reads it, so
//! reading under a bind policy places the pages that are not cached yet. Steps:
//!
//! 1. `--reread` only: pages cached on the wrong node are evicted (clean, unmapped ones).
//! 2. Read pass: for each target node, the thread binds itself to that node and issues
//!    `readahead(2)` over the runs of pages destined for it. `readahead` allocates exactly
//!    the requested pages (no speculative window spilling into a neighbour's stripe chunk),
//!    skips cached ones, and returns once the I/O is submitted, so one thread keeps the
//!    device busy. The thread's previous policy is restored afterwards.
//! 3. Fill pass: whatever readahead skipped (its per-call cap, a failed opportunistic
//!    allocation) is read with `pread` under the same policy.
//! 4. Migration: pages cached on the wrong node (before we started, or misplaced by the
//!    kernel's own readahead) are moved with `move_pages` (see [`crate::migrate`]).
//! 5. Verification: a fresh residency scan counts the pages on their target node.

use crate::error::PagecacheError;
use crate::evict::fadvise_dontneed;
use crate::file::{open_regular, OpenFile};
use crate::migrate::{move_open, MoveOptions, MoveReport};
use crate::residency::{residency_against, resident_pages_mincore, FileResidency, WhereOptions};
use crate::scan::{pages_of, scan};
use crate::target::Target;
use numaio_sys::{get_mempolicy, set_mempolicy, PageStatus, Policy};
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bytes per `readahead(2)` call: the kernel caps one call at the larger of the device's
/// optimal I/O size and the readahead window (128 KiB by default).
const RA_PIECE: u64 = 128 << 10;

/// Read-migrate-verify rounds at most.
const WARM_ROUNDS: u32 = 3;

/// Progress callback: `(bytes done, bytes total)` of the read pass.
pub type Progress<'a> = &'a mut dyn FnMut(u64, u64);

/// How to warm. Default: migrate misplaced pages, no progress reports.
#[derive(Default)]
pub struct WarmOptions<'a> {
    /// Evict and re-read pages cached on the wrong node instead of migrating them.
    pub reread: bool,
    /// Called as the read pass advances.
    pub progress: Option<Progress<'a>>,
    /// How misplaced pages are moved.
    pub move_opts: MoveOptions,
}

/// What a warm did and the verified result.
#[derive(Debug, Clone, Serialize)]
pub struct WarmReport {
    pub path: PathBuf,
    pub target: Target,
    pub pages: u64,
    /// Resident pages before warming (mincore; `None` when mincore hides them from the caller).
    pub resident_before: Option<u64>,
    /// Pages evicted for `--reread`.
    pub evicted_for_reread: u64,
    /// Pages read in by this warm (resident after the read passes minus before, plus
    /// evicted; `None` when mincore hides residency from the caller).
    pub read_pages: Option<u64>,
    /// The migration pass.
    pub migration: MoveReport,
    /// The verification scan.
    pub residency: FileResidency,
    /// Resident pages on their target node, per the verification.
    pub on_target_pages: u64,
    /// Every page resident and on its target node.
    pub target_reached: bool,
    /// Read-migrate-verify rounds run (more than 1 when pages vanished in between).
    pub rounds: u32,
    pub elapsed_secs: f64,
}

/// Warms `path` onto `target` and verifies the placement.
pub fn warm_file(
    path: &Path,
    target: &Target,
    opts: WarmOptions<'_>,
) -> Result<WarmReport, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    target.validate(ps)?;
    let f = open_regular(path)?;
    warm_open(&f, target, opts)
}

pub(crate) fn warm_open(
    f: &OpenFile,
    target: &Target,
    mut opts: WarmOptions<'_>,
) -> Result<WarmReport, PagecacheError> {
    let t0 = Instant::now();
    let ps = numaio_sys::page_size() as u64;
    let total = pages_of(f.size, ps);
    let before = resident_pages_mincore(f)?;
    // For a file whose residency mincore hides (not owner, no write permission), warming
    // still works: the fill pass reads the whole file and the verification is exact once
    // every page is read; only the before/after counts are unknown.
    let truthful = before.is_some();
    let evicted = if opts.reread && truthful {
        evict_misplaced(f, target)?
    } else {
        0
    };
    {
        let _restore = PolicyGuard::new().map_err(|e| PagecacheError::sys(&f.path, e))?;
        read_pass(f, target, &mut opts.progress)?;
        fill_pass(f, target, truthful)?;
    }
    let after_read = resident_pages_mincore(f)?;
    let mut migration = move_open(f, target, &opts.move_opts)?;
    let (mut residency, mut on_target) =
        residency_against(f, &WhereOptions::default(), Some(target))?;
    // Pages can vanish between the passes (memory pressure, proactive reclaim such as
    // DAMON): top up and verify again, a few times.
    let mut rounds = 1;
    while rounds < WARM_ROUNDS && !(residency.resident_pages == total && on_target == total) {
        {
            let _restore = PolicyGuard::new().map_err(|e| PagecacheError::sys(&f.path, e))?;
            fill_pass(f, target, truthful)?;
        }
        migration.absorb(move_open(f, target, &opts.move_opts)?);
        (residency, on_target) = residency_against(f, &WhereOptions::default(), Some(target))?;
        rounds += 1;
    }
    Ok(WarmReport {
        path: f.path.clone(),
        target: target.clone(),
        pages: total,
        resident_before: before,
        evicted_for_reread: evicted,
        read_pages: before
            .zip(after_read)
            .map(|(b, a)| (a + evicted).saturating_sub(b)),
        migration,
        target_reached: residency.resident_pages == total && on_target == total,
        rounds,
        on_target_pages: on_target,
        residency,
        elapsed_secs: t0.elapsed().as_secs_f64(),
    })
}

/// Restores the calling thread's memory policy when dropped.
struct PolicyGuard(Policy);

impl PolicyGuard {
    fn new() -> numaio_sys::SysResult<PolicyGuard> {
        Ok(PolicyGuard(get_mempolicy(None)?))
    }
}

impl Drop for PolicyGuard {
    fn drop(&mut self) {
        if set_mempolicy(&self.0).is_err() {
            let _ = set_mempolicy(&Policy::default_policy());
        }
    }
}

fn bind(f: &OpenFile, node: u32) -> Result<(), PagecacheError> {
    set_mempolicy(&Policy::bind(&[node])).map_err(|e| PagecacheError::sys(&f.path, e))
}

/// Calls `each(node, first_page, pages)` for every run of pages with one target node,
/// grouped by node so the policy changes once per node.
fn for_runs_by_node(
    target: &Target,
    first: u64,
    end: u64,
    mut each: impl FnMut(u32, u64, u64) -> Result<(), PagecacheError>,
) -> Result<(), PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    for node in target.nodes() {
        let mut p = first;
        while p < end {
            let len = target.run_len(p, ps, end - p);
            if target.node_for_page(p, ps) == node {
                each(node, p, len)?;
            }
            p += len;
        }
    }
    Ok(())
}

fn read_pass(
    f: &OpenFile,
    target: &Target,
    progress: &mut Option<Progress<'_>>,
) -> Result<(), PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let total = pages_of(f.size, ps);
    let fd = f.file.as_raw_fd();
    let mut current = None;
    let mut done = 0u64;
    for_runs_by_node(target, 0, total, |node, p, len| {
        if current != Some(node) {
            bind(f, node)?;
            current = Some(node);
        }
        let (mut off, end) = (p * ps, (p + len) * ps);
        while off < end {
            let n = RA_PIECE.min(end - off);
            // SAFETY: readahead only populates the page cache of a file we hold open.
            let r = unsafe { libc::readahead(fd, off as libc::off64_t, n as usize) };
            if r != 0 {
                let e = std::io::Error::last_os_error();
                // EINVAL: the filesystem does not support readahead; the fill pass reads.
                if e.raw_os_error() == Some(libc::EINVAL) {
                    return Ok(());
                }
                return Err(PagecacheError::io(&f.path, "readahead", e));
            }
            off += n;
            done += n;
            if let Some(cb) = progress.as_mut() {
                cb(done.min(f.size), f.size);
            }
        }
        Ok(())
    })
}

/// Reads, under the run's node policy, every page that is still not resident.
fn fill_pass(f: &OpenFile, target: &Target, truthful: bool) -> Result<(), PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let total = pages_of(f.size, ps);
    // Runs of non-resident pages, from mincore alone (all of the file if mincore lies).
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut next = 0u64;
    let scan_end = if truthful { total } else { 0 };
    scan(f, 0, scan_end, false, |b| {
        // Batches arrive in order, but only report resident pages: the gaps are the holes.
        for &p in b.pages {
            if p > next {
                holes.push((next, p - next));
            }
            next = p + 1;
        }
        Ok(())
    })?;
    if next < total {
        holes.push((next, total - next));
    }
    if holes.is_empty() {
        return Ok(());
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut current = None;
    for (start, len) in holes {
        let mut p = start;
        while p < start + len {
            let run = target.run_len(p, ps, start + len - p);
            let node = target.node_for_page(p, ps);
            if current != Some(node) {
                bind(f, node)?;
                current = Some(node);
            }
            let (mut off, end) = (p * ps, ((p + run) * ps).min(f.size));
            while off < end {
                let n = (buf.len() as u64).min(end - off) as usize;
                match f.file.read_at(&mut buf[..n], off) {
                    Ok(0) => break, // the file shrank
                    Ok(k) => off += k as u64,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(PagecacheError::io(&f.path, "read", e)),
                }
            }
            p += run;
        }
    }
    Ok(())
}

/// Evicts clean pages that are resident on a node other than their target. Returns how many
/// pages were dropped.
fn evict_misplaced(f: &OpenFile, target: &Target) -> Result<u64, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let total = pages_of(f.size, ps);
    let mut runs: Vec<(u64, u64)> = Vec::new();
    scan(f, 0, total, true, |b| {
        for (&p, &st) in b.pages.iter().zip(b.status) {
            let wrong = match st {
                PageStatus::Node(n) => n != target.node_for_page(p, ps),
                _ => false,
            };
            if wrong {
                match runs.last_mut() {
                    Some((s, l)) if *s + *l == p => *l += 1,
                    _ => runs.push((p, 1)),
                }
            }
        }
        Ok(())
    })?;
    // The scan's mapping is gone now; DONTNEED would skip pages we still mapped.
    let before = resident_pages_mincore(f)?.unwrap_or(0);
    for &(s, l) in &runs {
        fadvise_dontneed(f, s * ps, l * ps)?;
    }
    let after = resident_pages_mincore(f)?.unwrap_or(0);
    Ok(before.saturating_sub(after))
}
