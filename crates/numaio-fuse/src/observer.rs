//! What every transport reports about the requests it serves: who asked (thread, process,
//! node), the per-node accounting, thread moves, and the statistics the mount answers on its
//! root's `user.numaio.stats` xattr. Shared by both transports through the one serving table.

use crate::{accounting, caller, move_work, stats};
use numaio_fs::{Caller, Fs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The mount's request observer.
pub struct Observer {
    callers: caller::CallerNodes,
    accounting: accounting::Accounting,
    mover: OnceLock<move_work::ThreadMover>,
    mountpoint: OnceLock<String>,
    server_checks: AtomicBool,
    writeback_cache: AtomicBool,
    seek_holes: AtomicBool,
    local_wakeups: AtomicBool,
    /// The kernel's lookup counts: what keeps an unlinked inode alive.
    lookups: crate::lookups::Lookups,
    /// Whether OPEN (files) and OPENDIR are answered ENOSYS, so the kernel opens without
    /// asking (`FUSE_NO_OPEN_SUPPORT`, `FUSE_NO_OPENDIR_SUPPORT`); decided at INIT.
    no_open: AtomicBool,
    no_opendir: AtomicBool,
    /// READDIR and READDIRPLUS requests served, in either transport.
    listings: AtomicU64,
    /// The largest reply buffer such a request asked for, where the transport says.
    listing_size: AtomicU64,
    /// Requests being served now, and the most served at once so far.
    in_flight: AtomicU64,
    in_flight_max: AtomicU64,
}

/// One request being served; dropped when its reply is ready.
pub(crate) struct InFlight<'a>(&'a AtomicU64);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Default for Observer {
    fn default() -> Self {
        Self::new()
    }
}

impl Observer {
    pub fn new() -> Observer {
        Observer {
            callers: caller::CallerNodes::detect(),
            accounting: accounting::Accounting::new(),
            mover: OnceLock::new(),
            mountpoint: OnceLock::new(),
            server_checks: AtomicBool::new(false),
            writeback_cache: AtomicBool::new(false),
            seek_holes: AtomicBool::new(true),
            local_wakeups: AtomicBool::new(true),
            lookups: crate::lookups::Lookups::default(),
            no_open: AtomicBool::new(false),
            no_opendir: AtomicBool::new(false),
            listings: AtomicU64::new(0),
            listing_size: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            in_flight_max: AtomicU64::new(0),
        }
    }

    /// Counts a request as being served until the guard drops.
    pub(crate) fn begin_request(&self) -> InFlight<'_> {
        let now = self.in_flight.fetch_add(1, Ordering::Relaxed) + 1;
        self.in_flight_max.fetch_max(now, Ordering::Relaxed);
        InFlight(&self.in_flight)
    }

    /// The most requests served at once so far, in either transport: how many a request
    /// waiting for its device did not hold up.
    pub fn in_flight_max(&self) -> u64 {
        self.in_flight_max.load(Ordering::Relaxed)
    }

    /// Says that other users reach the mount and the server, not the kernel, checks their
    /// permissions (`allow_other` without `default_permissions`); set before serving.
    pub fn set_server_checks(&self, on: bool) {
        self.server_checks.store(on, Ordering::Relaxed);
    }

    /// Whether the server checks permissions ([`Observer::set_server_checks`]).
    pub fn server_checks(&self) -> bool {
        self.server_checks.load(Ordering::Relaxed)
    }

    /// Says that INIT is to ask for the kernel's writeback cache; set before serving.
    pub fn set_writeback_cache(&self, on: bool) {
        self.writeback_cache.store(on, Ordering::Relaxed);
    }

    /// Whether the mount asks for the kernel's writeback cache
    /// ([`Observer::set_writeback_cache`]).
    pub fn writeback_cache(&self) -> bool {
        self.writeback_cache.load(Ordering::Relaxed)
    }

    /// Says whether LSEEK reports the volume's holes ([`MountConfig::with_seek_holes`]);
    /// set before serving.
    ///
    /// [`MountConfig::with_seek_holes`]: crate::MountConfig::with_seek_holes
    pub fn set_seek_holes(&self, on: bool) {
        self.seek_holes.store(on, Ordering::Relaxed);
    }

    /// Whether LSEEK reports the volume's holes ([`Observer::set_seek_holes`]).
    pub fn seek_holes(&self) -> bool {
        self.seek_holes.load(Ordering::Relaxed)
    }

    /// Says whether io_uring ring threads wake callers on their own CPU
    /// ([`MountConfig::with_local_wakeups`]); set before serving.
    ///
    /// [`MountConfig::with_local_wakeups`]: crate::MountConfig::with_local_wakeups
    pub fn set_local_wakeups(&self, on: bool) {
        self.local_wakeups.store(on, Ordering::Relaxed);
    }

    /// Whether ring threads wake callers on their own CPU ([`Observer::set_local_wakeups`]).
    pub fn local_wakeups(&self) -> bool {
        self.local_wakeups.load(Ordering::Relaxed)
    }

    /// The kernel's lookup counts of the volume's inodes.
    pub(crate) fn lookups(&self) -> &crate::lookups::Lookups {
        &self.lookups
    }

    /// Decides at INIT whether opens skip the server, from what the kernel offers
    /// (`files`: `FUSE_NO_OPEN_SUPPORT`, `dirs`: `FUSE_NO_OPENDIR_SUPPORT`). Only where the
    /// kernel checks permissions: where the server does, OPEN is where it checks the
    /// access mode, and OPENDIR read permission.
    pub(crate) fn negotiate_no_open(&self, files: bool, dirs: bool) {
        let kernel_checks = !self.server_checks();
        self.no_open
            .store(files && kernel_checks, Ordering::Relaxed);
        self.no_opendir
            .store(dirs && kernel_checks, Ordering::Relaxed);
    }

    /// Whether OPEN of a file is answered ENOSYS ([`Observer::negotiate_no_open`]).
    pub(crate) fn no_open(&self) -> bool {
        self.no_open.load(Ordering::Relaxed)
    }

    /// Whether OPENDIR is answered ENOSYS ([`Observer::negotiate_no_open`]).
    pub(crate) fn no_opendir(&self) -> bool {
        self.no_opendir.load(Ordering::Relaxed)
    }

    /// How long the kernel may keep a name (and the attributes that come with it). When the
    /// server checks permissions it keeps none: a path walk over a cached name asks nobody,
    /// so search permission on the directories would go unchecked.
    pub fn entry_ttl(&self) -> Duration {
        if self.server_checks() {
            Duration::ZERO
        } else {
            crate::TTL
        }
    }

    /// Sets the mount point the statistics report (once; later calls are ignored).
    pub fn set_mountpoint(&self, mp: &str) {
        let _ = self.mountpoint.set(mp.to_string());
    }

    /// The mount point set by [`Observer::set_mountpoint`], if any.
    pub fn mountpoint(&self) -> Option<&str> {
        self.mountpoint.get().map(String::as_str)
    }

    /// Moves requesting threads to their data (`MigrateThread` or `FirstReader`) with the
    /// engine's default hysteresis; set once, before the mount serves requests.
    pub fn set_move_work(&self, mode: numaio_numa::moves::MoveWork, override_user: bool) {
        use numaio_numa::moves::MoveWork;
        if matches!(mode, MoveWork::MigrateThread | MoveWork::FirstReader) {
            let _ = self.mover.set(move_work::ThreadMover::new(
                mode,
                override_user,
                numaio_numa::hysteresis::HysteresisConfig::default(),
                self.callers.node_cpus(),
            ));
        }
    }

    /// The requester behind a request from thread `tid` (its node, its process).
    pub fn requester(&self, tid: u32) -> caller::Requester {
        self.callers.lookup(tid)
    }

    /// [`Observer::requester`] for a request that places data or metadata (create, mkdir,
    /// mknod, symlink, write, fallocate): a thread not seen before is waited for longer, so
    /// its first request is placed by its own node, not the serving thread's.
    pub fn requester_placing(&self, tid: u32) -> caller::Requester {
        self.callers.lookup_placing(tid)
    }

    /// The requester behind a request from thread `tid` that arrived on the io_uring queue
    /// of `cpu`: the kernel queues a request on the queue of the CPU that issued it, so that
    /// CPU's node is the caller's and /proc is read only now and then, for the process.
    pub fn requester_on_cpu(&self, tid: u32, cpu: u32) -> caller::Requester {
        self.callers.lookup_on_cpu(tid, cpu)
    }

    /// The [`Caller`] of requester `r` with the request's credentials.
    pub fn caller(r: &caller::Requester, uid: u32, gid: u32) -> Caller {
        Caller {
            node: r.node,
            uid,
            gid,
            pid: r.pid,
            tid: r.tid,
        }
    }

    /// Counts a served read or write of `len` bytes at `offset` of `ino` for its requester,
    /// per node of the data, and lets the thread mover act on it.
    pub fn account(
        &self,
        fs: &Fs,
        r: &caller::Requester,
        ino: u64,
        offset: u64,
        len: u64,
        dir: accounting::Direction,
    ) {
        let parts = fs.range_nodes(ino, offset, len);
        self.account_parts(r, ino, offset, dir, &parts);
    }

    /// [`Observer::account`] of a range whose bytes per node (`parts`) are known already.
    pub fn account_parts(
        &self,
        r: &caller::Requester,
        ino: u64,
        offset: u64,
        dir: accounting::Direction,
        parts: &[(u32, u64)],
    ) {
        self.accounting.add(r.pid, r.tid, dir, r.node, parts);
        if let Some(m) = self.mover.get() {
            // The node holding most of the range is where the thread should be.
            if let Some(&(node, _)) = parts.iter().max_by_key(|(n, b)| (*b, u32::MAX - *n)) {
                if let Some(to) = m.observe(r, ino, offset / numaio_fs::BLOCK_SIZE, node) {
                    self.callers.note_moved(r.tid, to);
                }
            }
        }
    }

    /// Counts one READDIR or READDIRPLUS request, and the reply size it asked for where the
    /// transport knows it (fuser does not tell the classic handlers).
    pub fn note_listing(&self, size: Option<u32>) {
        self.listings.fetch_add(1, Ordering::Relaxed);
        if let Some(s) = size {
            self.listing_size.fetch_max(u64::from(s), Ordering::Relaxed);
        }
    }

    /// READDIR and READDIRPLUS requests served so far, and the largest reply size one asked
    /// for (0 when no transport said).
    pub fn listings(&self) -> (u64, u64) {
        (
            self.listings.load(Ordering::Relaxed),
            self.listing_size.load(Ordering::Relaxed),
        )
    }

    /// Whether `name` on `ino` is the virtual statistics xattr.
    pub fn is_stats_xattr(ino: u64, name: &[u8]) -> bool {
        ino == numaio_fs::meta::ROOT_INO && name == stats::STATS_XATTR
    }

    /// The mount's statistics as the JSON of [`stats::Stats`].
    pub fn stats_json(&self, fs: &Fs, fuse_mode: &str) -> Vec<u8> {
        self.stats_built(fs, fuse_mode).1
    }

    /// The mount's statistics.
    pub fn stats(&self, fs: &Fs, fuse_mode: &str) -> stats::Stats {
        self.stats_built(fs, fuse_mode).0
    }

    fn stats_built(&self, fs: &Fs, fuse_mode: &str) -> (stats::Stats, Vec<u8>) {
        let s = fs.statfs();
        let cache = fs.cache_bytes();
        let space: Vec<stats::NodeSpace> = s
            .nodes
            .iter()
            .map(|u| stats::NodeSpace {
                node: u.node,
                capacity_bytes: u.total_blocks * s.block_size,
                free_bytes: u.free_blocks * s.block_size,
                cache_bytes: cache
                    .iter()
                    .filter(|(n, _)| *n == u.node)
                    .map(|(_, b)| *b)
                    .sum(),
                misplaced_blocks: u.fallback_blocks,
            })
            .collect();
        let mover = self.mover.get();
        let (moved, skipped) = mover.map_or((0, 0), |m| m.counts());
        let moves = stats::MoveStats {
            mode: mover.map(|m| m.mode().to_string()),
            moved,
            skipped,
        };
        let snap = self.accounting.snapshot();
        let mp = self.mountpoint.get().map_or("", String::as_str);
        stats::Stats::build(mp, fuse_mode, &space, &snap, moves)
    }

    /// The CPUs of each node, as the observer places threads.
    pub fn node_cpus(&self) -> std::collections::BTreeMap<u32, Vec<u32>> {
        self.callers.node_cpus()
    }
}
