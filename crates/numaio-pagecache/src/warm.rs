//! `warm`: make a file's pages resident on chosen nodes, then verify.
//!
//! A new page-cache page is allocated under the memory policy of the task that reads it, so
//! reading under a bind policy places the pages that are not cached yet. Steps:
//!
//! 1. `--reread` only: pages cached on the wrong node are evicted (clean, unmapped ones).
//! 2. Read pass: `readahead(2)` over the pages mincore says are not cached, in file order,
//!    in big pieces (up to the device's readahead cap, 128 KiB–1 MiB), each under the task
//!    policy [`crate::readplan`] picks: a bind to the run's node for long runs, and for
//!    stretches of short runs (page interleave, weights, small stripe chunks) the policy that
//!    places most of their pages right (`MPOL_INTERLEAVE`, re-set in phase at every piece, or
//!    a bind to the commonest node). `readahead` allocates exactly the requested pages in file
//!    order (no speculative window spilling past the piece), and returns once the I/O is
//!    submitted, so one thread keeps the device busy. The thread's previous policy is
//!    restored afterwards.
//! 3. Fill pass: whatever readahead skipped (its per-call cap, a failed opportunistic
//!    allocation) is read with `pread`, planned the same way.
//! 4. Migration: pages cached on the wrong node (before we started, or placed by a mixed
//!    piece's policy off their target) are moved with `move_pages` (see [`crate::migrate`]).
//! 5. Verification: a fresh residency scan counts the pages on their target node.

use crate::error::PagecacheError;
use crate::evict::fadvise_dontneed;
use crate::file::{open_regular, OpenFile};
use crate::migrate::{move_open, MoveOptions, MoveReport};
use crate::readplan::{choose_mixed, plan_hole, Place};
use crate::residency::{
    page_span, residency_against, resident_in_range, single_memory_node, FileResidency,
    WhereOptions,
};
use crate::scan::scan;
use crate::target::Target;
use numaio_sys::{get_mempolicy, set_mempolicy, PageStatus, Policy};
use serde::Serialize;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bounds of the bytes read per call (see [`piece_bytes`]). Larger pieces were no faster on
/// the test host, and 4 MiB ones left more pages to the blocking fill pass (docs/pagecache.md).
const MIN_PIECE: u64 = 128 << 10;
const MAX_PIECE: u64 = 1 << 20;

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
    /// How misplaced pages are moved. Its `range` is the range warmed: only the pages a
    /// byte range `(offset, len)` covers are read, moved and verified.
    pub move_opts: MoveOptions,
}

/// What a warm did and the verified result.
#[derive(Debug, Clone, Serialize)]
pub struct WarmReport {
    #[serde(serialize_with = "crate::serialize_path")]
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
    // A bad target is reported before anything about the file.
    target.validate(numaio_sys::page_size() as u64)?;
    let f = open_regular(path)?;
    warm_opened(&f, target, opts)
}

/// [`warm_file`] on a file already open (e.g. by a walk).
pub fn warm_opened(
    f: &OpenFile,
    target: &Target,
    opts: WarmOptions<'_>,
) -> Result<WarmReport, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    target.validate(ps)?;
    warm_open(f, target, opts)
}

/// Bytes each target node must find room for to warm `f` (or the range of it in
/// `range`): the target's share of the pages not cached yet. An estimate made before
/// warming (pages cached on another node, which must move, are not counted);
/// empty when mincore hides the file's residency (then the whole file is counted).
pub fn warm_needs(
    f: &OpenFile,
    target: &Target,
    range: Option<(u64, u64)>,
) -> Result<std::collections::BTreeMap<u32, u64>, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let (first, end) = page_span(f.size, range, ps);
    let mut need = std::collections::BTreeMap::new();
    let mut next = first;
    let add_hole = |a: u64, b: u64, need: &mut std::collections::BTreeMap<u32, u64>| {
        let mut p = a;
        while p < b {
            let n = target.node_for_page(p, ps);
            let run = target.run_len(p, ps, b - p).max(1);
            *need.entry(n).or_insert(0u64) += run * ps;
            p += run;
        }
    };
    let truthful = crate::file::mincore_is_truthful(f);
    let scan_end = if truthful { end } else { first };
    scan(f, first, scan_end, false, |b| {
        for &p in b.pages {
            if p > next {
                add_hole(next, p, &mut need);
            }
            next = p + 1;
        }
        Ok(())
    })?;
    if next < end {
        add_hole(next, end, &mut need);
    }
    Ok(need)
}

pub(crate) fn warm_open(
    f: &OpenFile,
    target: &Target,
    mut opts: WarmOptions<'_>,
) -> Result<WarmReport, PagecacheError> {
    let t0 = Instant::now();
    let ps = numaio_sys::page_size() as u64;
    let range = opts.move_opts.range;
    let (first, end) = page_span(f.size, range, ps);
    let total = end - first;
    let where_opts = WhereOptions {
        range,
        ..Default::default()
    };
    // With one memory node, every page read lands on it: no migration, and the
    // verification needs mincore alone (the residency scan takes that route itself).
    let one_node = single_memory_node()
        .filter(|&n| target.nodes() == [n])
        .is_some();
    let before = resident_in_range(f, range)?;
    // For a file whose residency mincore hides (not owner, no write permission), warming
    // still works: the fill pass reads the whole file and the verification is exact once
    // every page is read; only the before/after counts are unknown.
    let truthful = before.is_some();
    let evicted = if opts.reread && truthful && !one_node {
        evict_misplaced(f, target, first, end)?
    } else {
        0
    };
    {
        let _restore = PolicyGuard::new().map_err(|e| PagecacheError::sys(&f.path, e))?;
        read_pass(f, target, truthful, first, end, &mut opts.progress)?;
        fill_pass(f, target, truthful, first, end)?;
    }
    let migrate = |f: &OpenFile| -> Result<MoveReport, PagecacheError> {
        if one_node {
            Ok(MoveReport {
                path: f.path.clone(),
                pages: total,
                ..Default::default()
            })
        } else {
            move_open(f, target, &opts.move_opts)
        }
    };
    let after_read = if one_node {
        None
    } else {
        resident_in_range(f, range)?
    };
    let mut migration = migrate(f)?;
    let (mut residency, mut on_target) = residency_against(f, &where_opts, Some(target))?;
    let after_read = if one_node && truthful {
        Some(residency.resident_pages)
    } else {
        after_read
    };
    if one_node {
        migration.resident_pages = residency.resident_pages;
        migration.already = residency.resident_pages;
        migration.not_resident = total - residency.resident_pages;
    }
    // Pages can vanish between the passes (memory pressure, proactive reclaim such as
    // DAMON): top up and verify again, a few times.
    let mut rounds = 1;
    while rounds < WARM_ROUNDS && !(residency.resident_pages == total && on_target == total) {
        {
            let _restore = PolicyGuard::new().map_err(|e| PagecacheError::sys(&f.path, e))?;
            fill_pass(f, target, truthful, first, end)?;
        }
        migration.absorb(migrate(f)?);
        (residency, on_target) = residency_against(f, &where_opts, Some(target))?;
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

/// How a planned piece is read.
#[derive(Clone, Copy, PartialEq, Eq)]
enum ReadOp {
    /// `readahead(2)`: submits the I/O and returns, no copy to user space.
    Readahead,
    /// `pread`: waits for the data (the fill pass, for what readahead skipped).
    Pread,
}

/// Bytes one `readahead(2)` call may read: the kernel caps a call at the larger of the
/// device's readahead window and its largest request (`read_ahead_kb`, `max_sectors_kb`),
/// so the file's block device is asked; 128 KiB (the default window) when unknown.
fn piece_bytes(f: &OpenFile, ps: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let dev = numaio_sys::blockdev::BlockDev::from_dev(f.meta.dev());
    match (
        dev.queue_kb("read_ahead_kb"),
        dev.queue_kb("max_sectors_kb"),
    ) {
        (Some(ra), Some(io)) => {
            let b = ra.max(io).saturating_mul(1024).clamp(MIN_PIECE, MAX_PIECE);
            (b / ps).max(1) * ps
        }
        _ => MIN_PIECE,
    }
}

/// Reads the holes (`(first page, pages)`, none cached) as planned by
/// [`crate::readplan`]: in file order, in big pieces, each under its task policy.
fn read_planned(
    f: &OpenFile,
    target: &Target,
    holes: &[(u64, u64)],
    op: ReadOp,
    progress: &mut Option<Progress<'_>>,
) -> Result<(), PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let piece = piece_bytes(f, ps) / ps;
    let mixed = choose_mixed(target, ps, piece);
    let fd = f.file.as_raw_fd();
    let mut buf = if op == ReadOp::Pread {
        vec![0u8; (piece * ps) as usize]
    } else {
        Vec::new()
    };
    let mut bound: Option<u32> = None;
    let mut unsupported = false;
    for &(start, len) in holes {
        plan_hole(target, ps, mixed.as_ref(), piece, start, len, &mut |pc| {
            if unsupported {
                return Ok(());
            }
            match pc.place {
                Place::Bind(n) if bound == Some(n) => {}
                Place::Bind(n) => {
                    set_mempolicy(&Policy::bind(&[n]))
                        .map_err(|e| PagecacheError::sys(&f.path, e))?;
                    bound = Some(n);
                }
                Place::Interleave => {
                    // Set afresh at every piece: the kernel restarts its round robin at the
                    // lowest node, in phase with the piece's first page.
                    let m = mixed
                        .as_ref()
                        .expect("interleave pieces come from a mixed plan");
                    set_mempolicy(&m.policy()).map_err(|e| PagecacheError::sys(&f.path, e))?;
                    bound = None;
                }
            }
            let (off, end) = (pc.first * ps, ((pc.first + pc.len) * ps).min(f.size));
            match op {
                ReadOp::Readahead => {
                    // SAFETY: readahead only populates the page cache of a file we hold open.
                    let r =
                        unsafe { libc::readahead(fd, off as libc::off64_t, (end - off) as usize) };
                    if r != 0 {
                        let e = std::io::Error::last_os_error();
                        // EINVAL: the filesystem has no readahead; the fill pass reads.
                        if e.raw_os_error() == Some(libc::EINVAL) {
                            unsupported = true;
                            return Ok(());
                        }
                        return Err(PagecacheError::io(&f.path, "readahead", e));
                    }
                }
                ReadOp::Pread => {
                    let mut o = off;
                    while o < end {
                        let n = (end - o) as usize;
                        match f.file.read_at(&mut buf[..n], o) {
                            Ok(0) => break, // the file shrank
                            Ok(k) => o += k as u64,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return Err(PagecacheError::io(&f.path, "read", e)),
                        }
                    }
                }
            }
            if let Some(cb) = progress.as_mut() {
                cb(end, f.size);
            }
            Ok(())
        })?;
    }
    if let Some(cb) = progress.as_mut() {
        cb(f.size, f.size);
    }
    Ok(())
}

/// Runs `(first page, pages)` of pages mincore reports not resident (all of the file when
/// mincore would lie to the caller).
fn holes(
    f: &OpenFile,
    truthful: bool,
    first: u64,
    total: u64,
) -> Result<Vec<(u64, u64)>, PagecacheError> {
    let mut holes: Vec<(u64, u64)> = Vec::new();
    let mut next = first;
    let scan_end = if truthful { total } else { first };
    scan(f, first, scan_end, false, |b| {
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
    Ok(holes)
}

/// Read pass: `readahead(2)` over the pages not cached yet.
fn read_pass(
    f: &OpenFile,
    target: &Target,
    truthful: bool,
    first: u64,
    end: u64,
    progress: &mut Option<Progress<'_>>,
) -> Result<(), PagecacheError> {
    let h = holes(f, truthful, first, end)?;
    read_planned(f, target, &h, ReadOp::Readahead, progress)
}

/// Fill pass: reads (with `pread`) every page that is still not resident.
fn fill_pass(
    f: &OpenFile,
    target: &Target,
    truthful: bool,
    first: u64,
    end: u64,
) -> Result<(), PagecacheError> {
    let h = holes(f, truthful, first, end)?;
    if h.is_empty() {
        return Ok(());
    }
    read_planned(f, target, &h, ReadOp::Pread, &mut None)
}

/// Evicts clean pages that are resident on a node other than their target. Returns how many
/// pages were dropped.
fn evict_misplaced(
    f: &OpenFile,
    target: &Target,
    first: u64,
    end: u64,
) -> Result<u64, PagecacheError> {
    let ps = numaio_sys::page_size() as u64;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    scan(f, first, end, true, |b| {
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
    let range = Some((first * ps, (end - first) * ps));
    let before = resident_in_range(f, range)?.unwrap_or(0);
    for &(s, l) in &runs {
        fadvise_dontneed(f, s * ps, l * ps)?;
    }
    let after = resident_in_range(f, range)?.unwrap_or(0);
    Ok(before.saturating_sub(after))
}
