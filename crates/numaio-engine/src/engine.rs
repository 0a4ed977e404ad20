//! The engine: slices, open files, the zero-copy `get`/`put` and copying `pread`/`pwrite`
//! paths, write-back (`sync_range`, `fsync`) and the per-slice evictor and I/O threads.

use crate::arena::PlacementCheck;
use crate::backend::{Backend, IoKind, IoRequest, PsyncBackend};
use crate::index::IndexKind;
use crate::policy::{BlockKey, FileId, PolicyKind, SlotId};
use crate::range_placement::{AccessCtx, AccessHook, Placement, RangePlacement};
use crate::slice::Slice;
use crate::slot::LOADING;
use crate::stats::{EngineStats, SliceCounters};
use crate::uring::UringBackend;
use crate::worker;
use crate::writeback::{Claimed, WriteBackError};
use numaio_sys::{CpuSet, Topology};
use parking_lot::{Mutex, RwLock};
use smallvec::SmallVec;
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How to build an engine. `EngineConfig::default()` gives one slice per node, ARC, 4 KiB
/// blocks, a 256 MiB cache, O_DIRECT through io_uring.
#[derive(Clone)]
pub struct EngineConfig {
    /// Cache block size: a power of two, at least 512; O_DIRECT needs a multiple of 4096.
    pub block_size: usize,
    /// Total cache size over all slices (rounded down to whole blocks per slice).
    pub cache_bytes: u64,
    /// Number of slices; default one per node with memory.
    pub slices: Option<usize>,
    /// The node of each slice; default: the nodes with memory, round robin.
    pub slice_nodes: Option<Vec<u32>>,
    pub policy: PolicyKind,
    pub index: IndexKind,
    /// Which slice caches a block; default [`RangePlacement`] with `range_blocks`.
    pub placement: Option<Arc<dyn Placement>>,
    pub range_blocks: u64,
    /// Called on every access (accounting, work moving: issue 6).
    pub hooks: Vec<Arc<dyn AccessHook>>,
    /// Device backend; default io_uring, or psync if io_uring is unavailable.
    pub backend: Option<Arc<dyn Backend>>,
    /// Use O_DIRECT (falls back to buffered I/O per file when refused).
    pub direct_io: bool,
    pub io_workers_per_slice: usize,
    pub queue_depth: u32,
    /// Bind slice memory to its node with mbind.
    pub bind_memory: bool,
    /// Pin I/O workers and evictors to their slice's node CPUs.
    pub pin_threads: bool,
    /// Longest coalesced write-back (and read) in blocks.
    pub max_io_blocks: usize,
    /// Tell the policy about a slot's hit at most once per eviction pass (see
    /// `Slice::note_hit`); off = every hit reaches the policy (for lock-contention studies).
    pub hit_gating: bool,
    /// Read ahead (up to two request chunks) when a file is read sequentially (off by
    /// default: applications of an engine usually know their access pattern).
    pub readahead: bool,
    /// Topology to use instead of detecting it.
    pub topology: Option<Topology>,
    /// Issue 6, move-work `forward`: `pread`/`pwrite` runs on a worker on the data's node.
    pub forwarder: Option<Arc<crate::move_work::Forwarder>>,
    /// Issue 6: per-block checksums computed in write-back and verified on read.
    pub integrity: Option<Arc<crate::integrity::IntegrityStage>>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            block_size: 4096,
            cache_bytes: 256 << 20,
            slices: None,
            slice_nodes: None,
            policy: PolicyKind::Arc,
            index: IndexKind::Buckets,
            placement: None,
            range_blocks: 16384,
            hooks: Vec::new(),
            backend: None,
            direct_io: true,
            io_workers_per_slice: 4,
            queue_depth: 64,
            bind_memory: true,
            pin_threads: true,
            max_io_blocks: 256,
            hit_gating: true,
            readahead: false,
            topology: None,
            forwarder: None,
            integrity: None,
        }
    }
}

/// One opened file (shared by every handle on the same path).
pub struct FileEntry {
    pub id: FileId,
    pub path: PathBuf,
    direct_fd: Option<OwnedFd>,
    buffered_fd: OwnedFd,
    use_direct: AtomicBool,
    /// Logical length (bytes); the device may hold up to one block more until fsync.
    size: AtomicU64,
    /// First write-back error since the last fsync (reported once, like errseq).
    wb_error: Mutex<Option<WriteBackError>>,
    fell_back: AtomicBool,
    /// The block after the last chunk read (sequential detection) and the end of the
    /// readahead window already issued.
    seq_next: AtomicU64,
    ra_until: AtomicU64,
}

impl FileEntry {
    fn fd(&self) -> RawFd {
        match (&self.direct_fd, self.use_direct.load(Ordering::Relaxed)) {
            (Some(fd), true) => fd.as_raw_fd(),
            _ => self.buffered_fd.as_raw_fd(),
        }
    }
    pub fn len(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Whether I/O to this file uses O_DIRECT (false after a fallback).
    pub fn direct(&self) -> bool {
        self.direct_fd.is_some() && self.use_direct.load(Ordering::Relaxed)
    }
    /// True if O_DIRECT was refused (at open or on first I/O) and buffered I/O is used.
    pub fn fell_back_to_buffered(&self) -> bool {
        self.fell_back.load(Ordering::Relaxed)
    }
    fn record_error(&self, e: &WriteBackError) {
        let mut g = self.wb_error.lock();
        if g.is_none() {
            *g = Some(e.clone());
        }
    }
}

pub(crate) struct Inner {
    pub cfg: EngineConfig,
    pub bs: usize,
    pub slices: Vec<Arc<Slice>>,
    placement: Arc<dyn Placement>,
    backend: Arc<dyn Backend>,
    files: RwLock<Vec<Arc<FileEntry>>>,
    by_path: Mutex<HashMap<PathBuf, FileId>>,
    /// Most blocks one request may pin at once (keeps a tiny cache from deadlocking).
    chunk_blocks: usize,
}

/// The engine. Dropping it writes back all dirty data (errors are lost; call
/// [`Engine::close`] to see them) and stops its threads.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    workers_per_slice: usize,
}

/// How to open a file.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub write: bool,
    pub create: bool,
}

impl OpenOptions {
    /// Read-write, creating the file if it does not exist (the common case for writers).
    pub fn create_rw() -> Self {
        OpenOptions {
            write: true,
            create: true,
        }
    }
}

/// A file opened through the engine.
#[derive(Clone)]
pub struct FileHandle {
    inner: Arc<Inner>,
    file: Arc<FileEntry>,
}

#[derive(Clone, Copy, Debug)]
struct Seg {
    slice: u16,
    /// The slot was inserted for a full-block overwrite: the caller fills it, then ends the load.
    fill: bool,
    slot: SlotId,
}

type Segs = SmallVec<[Seg; 4]>;

fn sys_err(what: String, e: numaio_sys::SysError) -> io::Error {
    io::Error::other(format!("{what}: {e}"))
}

impl Engine {
    pub fn new(cfg: EngineConfig) -> io::Result<Engine> {
        let bs = cfg.block_size;
        if !bs.is_power_of_two() || bs < 512 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("block size {bs} must be a power of two of at least 512 bytes"),
            ));
        }
        let topo = match &cfg.topology {
            Some(t) => t.clone(),
            None => Topology::detect()
                .map_err(|e| sys_err("cannot read the NUMA topology".into(), e))?,
        };
        let mem_nodes: Vec<u32> = {
            let v: Vec<u32> = topo
                .nodes
                .iter()
                .filter(|n| n.has_memory())
                .map(|n| n.id)
                .collect();
            if v.is_empty() {
                topo.node_ids()
            } else {
                v
            }
        };
        let nodes: Vec<u32> = match (&cfg.slice_nodes, cfg.slices) {
            (Some(v), _) if !v.is_empty() => v.clone(),
            (_, Some(n)) => (0..n.max(1))
                .map(|i| mem_nodes[i % mem_nodes.len()])
                .collect(),
            _ => mem_nodes.clone(),
        };
        let nslices = nodes.len();
        if nslices > u16::MAX as usize {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "too many slices",
            ));
        }
        // Arenas are prefaulted: a cache larger than the machine would be OOM-killed at start.
        // SAFETY: sysconf has no memory-safety preconditions.
        let phys = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        let phys_bytes = (phys.max(0) as u64).saturating_mul(numaio_sys::page_size() as u64);
        if phys > 0 && cfg.cache_bytes > phys_bytes {
            return Err(io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "a cache of {} bytes is larger than this machine's memory ({phys_bytes} bytes); \
                     use a smaller cache",
                    cfg.cache_bytes
                ),
            ));
        }
        let slots_per_slice =
            usize::try_from((cfg.cache_bytes / nslices as u64) / bs as u64).unwrap_or(usize::MAX);
        if slots_per_slice < 4 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cache of {} bytes gives fewer than 4 blocks of {bs} bytes per slice ({nslices} slices)",
                    cfg.cache_bytes
                ),
            ));
        }
        let backend: Arc<dyn Backend> = match &cfg.backend {
            Some(b) => b.clone(),
            None => {
                if UringBackend::probe().is_ok() {
                    Arc::new(UringBackend)
                } else {
                    Arc::new(PsyncBackend)
                }
            }
        };
        let placement = cfg
            .placement
            .clone()
            .unwrap_or_else(|| Arc::new(RangePlacement::new(nslices, cfg.range_blocks)));
        let mut slices = Vec::new();
        let mut rxs = Vec::new();
        for (i, &node) in nodes.iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::sync_channel(cfg.queue_depth.max(1) as usize * 4);
            slices.push(Arc::new(Slice::new(
                i,
                node,
                bs,
                slots_per_slice,
                cfg.policy,
                cfg.index,
                cfg.bind_memory,
                cfg.hit_gating,
                tx,
            )?));
            rxs.push(Arc::new(Mutex::new(rx)));
        }
        let chunk_blocks = (slots_per_slice / 16).clamp(1, cfg.max_io_blocks.max(1));
        let inner = Arc::new(Inner {
            bs,
            slices,
            placement,
            backend: backend.clone(),
            files: RwLock::new(Vec::new()),
            by_path: Mutex::new(HashMap::new()),
            chunk_blocks,
            cfg: cfg.clone(),
        });
        let workers = cfg.io_workers_per_slice.max(1);
        let mut threads = Vec::new();
        if let Err(e) = spawn_threads(&inner, &topo, &nodes, rxs, workers, &mut threads) {
            // Stop what did start: evictors see the shutdown flag, and the I/O workers see
            // their channels close once the last reference to the slices is gone.
            for s in &inner.slices {
                s.stop();
            }
            drop(inner);
            for t in threads {
                let _ = t.join();
            }
            return Err(e);
        }
        Ok(Engine {
            inner,
            threads,
            workers_per_slice: workers,
        })
    }

    /// Opens (or re-opens: same path, same cache entries) a file.
    pub fn open(&self, path: impl AsRef<Path>, opts: OpenOptions) -> io::Result<FileHandle> {
        let path = path.as_ref();
        let inner = &self.inner;
        let mut by_path = inner.by_path.lock();
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(id) = by_path.get(&canon) {
            let file = inner.files.read()[id.0 as usize].clone();
            return Ok(FileHandle {
                inner: inner.clone(),
                file,
            });
        }
        let cpath = std::ffi::CString::new(path.as_os_str().as_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))?;
        let mut flags = libc::O_CLOEXEC
            | if opts.write {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            };
        if opts.create {
            flags |= libc::O_CREAT;
        }
        let open = |flags: i32| -> io::Result<OwnedFd> {
            // SAFETY: valid C string; the fd is owned immediately.
            let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o644) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot open {}: {e}", path.display()),
                ));
            }
            // SAFETY: fd is a fresh descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let buffered_fd = open(flags)?;
        let mut fell_back = false;
        let direct_fd = if inner.cfg.direct_io && inner.bs.is_multiple_of(4096) {
            match open(flags | libc::O_DIRECT) {
                Ok(fd) => Some(fd),
                Err(_) => {
                    fell_back = true;
                    None
                }
            }
        } else {
            None
        };
        let meta = std::fs::metadata(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot stat {}: {e}", path.display()))
        })?;
        let mut files = inner.files.write();
        let id = FileId(files.len() as u32);
        let entry = Arc::new(FileEntry {
            id,
            path: canon.clone(),
            use_direct: AtomicBool::new(direct_fd.is_some()),
            direct_fd,
            buffered_fd,
            size: AtomicU64::new(meta.len()),
            wb_error: Mutex::new(None),
            fell_back: AtomicBool::new(fell_back),
            seq_next: AtomicU64::new(u64::MAX),
            ra_until: AtomicU64::new(0),
        });
        files.push(entry.clone());
        inner.placement.file_opened(id, &canon);
        by_path.insert(canon, id);
        Ok(FileHandle {
            inner: inner.clone(),
            file: entry,
        })
    }

    pub fn block_size(&self) -> usize {
        self.inner.bs
    }
    pub fn slices(&self) -> usize {
        self.inner.slices.len()
    }
    /// The NUMA node of each slice.
    pub fn slice_nodes(&self) -> Vec<u32> {
        self.inner.slices.iter().map(|s| s.node).collect()
    }
    pub fn backend_name(&self) -> String {
        self.inner.backend.name()
    }
    pub fn policy_name(&self) -> String {
        self.inner.cfg.policy.to_string()
    }
    pub fn placement_name(&self) -> String {
        self.inner.placement.name()
    }
    /// Where each slice's buffer pages really are (from the start-up move_pages query).
    pub fn placement_checks(&self) -> Vec<PlacementCheck> {
        self.inner
            .slices
            .iter()
            .map(|s| s.placement_check().clone())
            .collect()
    }
    pub fn stats(&self) -> EngineStats {
        EngineStats::from_slices(self.inner.slices.iter().map(|s| s.stats()).collect())
    }

    /// Writes back every dirty block of every file (fsync each) and stops the threads.
    pub fn close(mut self) -> io::Result<()> {
        let r = self.flush_all();
        self.stop();
        r
    }

    fn flush_all(&self) -> io::Result<()> {
        let files: Vec<Arc<FileEntry>> = self.inner.files.read().clone();
        let mut first = Ok(());
        for f in files {
            let r = self.inner.fsync(&f);
            if first.is_ok() {
                first = r;
            }
        }
        first
    }

    fn stop(&mut self) {
        for s in &self.inner.slices {
            s.stop();
            for _ in 0..self.workers_per_slice {
                let _ = s.io_tx.send(worker::Msg::Stop);
            }
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.flush_all();
            self.stop();
        }
    }
}

/// One iovec per run of buffers that are adjacent in memory (fewer, larger segments for
/// the device; slots handed out in order are often adjacent).
fn merged_iovecs(bufs: impl Iterator<Item = *mut u8>, bs: usize) -> Vec<libc::iovec> {
    let mut v: Vec<libc::iovec> = Vec::new();
    for p in bufs {
        if let Some(last) = v.last_mut() {
            if (last.iov_base as usize) + last.iov_len == p as usize {
                last.iov_len += bs;
                continue;
            }
        }
        v.push(libc::iovec {
            iov_base: p as *mut _,
            iov_len: bs,
        });
    }
    v
}

/// Starts each slice's I/O workers and evictor, pushing their handles as they start.
fn spawn_threads(
    inner: &Arc<Inner>,
    topo: &Topology,
    nodes: &[u32],
    rxs: Vec<Arc<Mutex<std::sync::mpsc::Receiver<worker::Msg>>>>,
    workers: usize,
    threads: &mut Vec<JoinHandle<()>>,
) -> io::Result<()> {
    let cfg = &inner.cfg;
    for (i, rx) in rxs.into_iter().enumerate() {
        let node = nodes[i];
        let cpus: Vec<u32> = if cfg.pin_threads {
            topo.node(node).map(|n| n.cpus.clone()).unwrap_or_default()
        } else {
            Vec::new()
        };
        for w in 0..workers {
            let queue = inner.backend.queue(cfg.queue_depth).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot set up an I/O queue ({}) for slice {i}: {e}",
                        inner.backend.name()
                    ),
                )
            })?;
            let rx = rx.clone();
            let cpus = cpus.clone();
            let depth = cfg.queue_depth.max(1) as usize;
            threads.push(
                std::thread::Builder::new()
                    .name(format!("numaio-io-{i}.{w}"))
                    .spawn(move || {
                        pin_self(&cpus);
                        worker::run(rx, queue, depth)
                    })
                    .map_err(|e| thread_error(&format!("numaio-io-{i}.{w}"), e))?,
            );
        }
        let inner2 = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("numaio-evict-{i}"))
                .spawn(move || {
                    pin_self(&cpus);
                    evictor(&inner2, i)
                })
                .map_err(|e| thread_error(&format!("numaio-evict-{i}"), e))?,
        );
    }
    Ok(())
}

fn thread_error(name: &str, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot start engine thread {name}: {e}"))
}

fn pin_self(cpus: &[u32]) {
    // CPU-less nodes have no CPUs to pin to; a failed pin only costs locality.
    if !cpus.is_empty() {
        let _ = numaio_sys::set_affinity(0, &CpuSet::from_ids(cpus));
    }
}

impl Inner {
    #[inline]
    fn slice_of(&self, file: FileId, block: u64, ctx: &AccessCtx) -> usize {
        if self.slices.len() == 1 {
            return 0;
        }
        self.placement
            .slice_for(file, block, ctx)
            .min(self.slices.len() - 1)
    }

    fn release(&self, segs: &[Seg]) {
        for s in segs {
            self.slices[s.slice as usize].unpin(s.slot);
        }
    }

    /// Pins blocks `first..first+n` of `f`, loading the ones that are missing.
    /// With `write_range = Some((off, len))`, blocks entirely covered are not read from the
    /// device: they come back with `fill = true` and the caller must end their load.
    fn acquire(
        &self,
        f: &FileEntry,
        first: u64,
        n: usize,
        write_range: Option<(u64, u64)>,
    ) -> io::Result<Segs> {
        self.acquire_blocks(f, first..first + n as u64, n, write_range)
    }

    /// Pins the listed blocks (any order, duplicates allowed); all missing blocks are read at
    /// once, so a list of scattered blocks becomes one batch of concurrent reads.
    fn acquire_blocks(
        &self,
        f: &FileEntry,
        blocks: impl Iterator<Item = u64> + Clone,
        n: usize,
        write_range: Option<(u64, u64)>,
    ) -> io::Result<Segs> {
        // A read that failed in *another* request (often a readahead) is retried here: the
        // failed slot is unlinked, so the retry issues its own read and reports its own error.
        let mut tries = 0;
        loop {
            match self.acquire_once(f, blocks.clone(), n, write_range) {
                Ok(s) => return Ok(s),
                Err((e, other)) => {
                    tries += 1;
                    if !other || tries >= 3 {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// One attempt of [`acquire_blocks`](Self::acquire_blocks).
    ///
    /// Deadlock freedom: a request never blocks while it holds a slot that others may wait
    /// for and that only it can complete. Reads it inserted are issued before it waits
    /// (on a clashing block or for a free buffer), so they complete on their own. What
    /// remains held are the LOADING "fill" slots of a whole-block write, which the caller ends
    /// after the copy; writes acquire their blocks in ascending order and wait for a clashing
    /// block as soon as they meet it, so a writer only ever waits for a block above every
    /// fill slot it holds and waits cannot form a cycle.
    fn acquire_once(
        &self,
        f: &FileEntry,
        blocks: impl Iterator<Item = u64>,
        n: usize,
        write_range: Option<(u64, u64)>,
    ) -> Result<Segs, (io::Error, bool)> {
        let bs = self.bs as u64;
        let ctx = AccessCtx::new(write_range.is_some());
        let mut segs: Segs = SmallVec::with_capacity(n);
        let mut loads: SmallVec<[(usize, u64, SlotId); 4]> = SmallVec::new();
        let mut err: Option<(io::Error, bool)> = None;
        for b in blocks {
            let si = self.slice_of(f.id, b, &ctx);
            let slice = &self.slices[si];
            let key = BlockKey {
                file: f.id,
                block: b,
            };
            let (slot, word) = match slice.lookup_pin(&key) {
                Some(found) => found,
                None => {
                    let slot = match slice.try_alloc() {
                        Some(s) => s,
                        None => {
                            // About to stall: let our pending reads go first.
                            if let Err(e) = self.load(f, &loads) {
                                loads.clear();
                                err = Some((e, false));
                                break;
                            }
                            loads.clear();
                            match slice.alloc() {
                                Ok(s) => s,
                                Err(e) => {
                                    err = Some((e, false));
                                    break;
                                }
                            }
                        }
                    };
                    match slice.insert_claimed(slot, key) {
                        Ok(()) => {
                            SliceCounters::add(&slice.counters.misses, 1);
                            let full = write_range.is_some_and(|(off, len)| {
                                off <= b * bs && (b + 1) * bs <= off + len
                            });
                            if !full {
                                loads.push((si, b, slot));
                            }
                            segs.push(Seg {
                                slice: si as u16,
                                fill: full,
                                slot,
                            });
                            for h in &self.cfg.hooks {
                                h.on_access(f.id, b, si, false, &ctx);
                            }
                            continue;
                        }
                        Err(existing) => existing,
                    }
                }
            };
            slice.counters.hits.add(1);
            slice.note_hit(slot);
            segs.push(Seg {
                slice: si as u16,
                fill: false,
                slot,
            });
            for h in &self.cfg.hooks {
                h.on_access(f.id, b, si, true, &ctx);
            }
            if word & LOADING != 0 {
                SliceCounters::add(&slice.counters.clashed, 1);
                if let Err(e) = self.load(f, &loads) {
                    loads.clear();
                    err = Some((e, false));
                    break;
                }
                loads.clear();
                if !slice.wait_loaded(slot) {
                    err = Some((
                        io::Error::other(format!(
                            "read of {} failed (in another request)",
                            f.path.display()
                        )),
                        true,
                    ));
                    break;
                }
            }
        }
        if err.is_none() && !loads.is_empty() {
            if let Err(e) = self.load(f, &loads) {
                err = Some((e, false));
            }
            loads.clear();
        }
        if let Some(e) = err {
            // Reads never issued and fill slots never exposed with data: fail them.
            self.abort(&segs, &loads);
            return Err(e);
        }
        Ok(segs)
    }

    fn abort(&self, segs: &Segs, loads: &[(usize, u64, SlotId)]) {
        for &(si, _, slot) in loads {
            self.slices[si].finish_load(slot, false);
        }
        for s in segs.iter().filter(|s| s.fill) {
            self.slices[s.slice as usize].finish_load(s.slot, false);
        }
        self.release(segs);
    }

    /// Reads the missing blocks, one vectored read per run of consecutive blocks of a slice.
    fn load(&self, f: &FileEntry, loads: &[(usize, u64, SlotId)]) -> io::Result<()> {
        let bs = self.bs;
        let mut runs: Vec<(usize, usize)> = Vec::new(); // (start index, len) into loads
        for (i, l) in loads.iter().enumerate() {
            match runs.last_mut() {
                Some((s, n))
                    if loads[*s].0 == l.0
                        && loads[*s].1 + *n as u64 == l.1
                        && *n < self.cfg.max_io_blocks =>
                {
                    *n += 1
                }
                _ => runs.push((i, 1)),
            }
        }
        let results = self.io_runs(f, IoKind::Read, runs.iter().map(|&(s, n)| &loads[s..s + n]))?;
        let mut first_err = None;
        for (&(s, n), r) in runs.iter().zip(results) {
            let run = &loads[s..s + n];
            let slice = &self.slices[run[0].0];
            match r {
                Ok(got) => {
                    SliceCounters::add(&slice.counters.read_ios, 1);
                    SliceCounters::add(&slice.counters.read_bytes, got as u64);
                    for (k, &(_, _, slot)) in run.iter().enumerate() {
                        // Past end of file: zeros.
                        let have = got.saturating_sub(k * bs).min(bs);
                        if have < bs {
                            // SAFETY: we own the LOADING slot's buffer.
                            unsafe {
                                std::ptr::write_bytes(slice.buf_ptr(slot).add(have), 0, bs - have)
                            };
                        }
                        if let Some(ig) = &self.cfg.integrity {
                            // SAFETY: we own the LOADING slot's buffer.
                            let data =
                                unsafe { std::slice::from_raw_parts(slice.buf_ptr(slot), bs) };
                            if let Err(e) = ig.verify(f.id.0 as u64, run[k].1, data) {
                                // A corrupted block is an error, never data.
                                slice.finish_load(slot, false);
                                if first_err.is_none() {
                                    first_err = Some(io::Error::new(
                                        io::ErrorKind::InvalidData,
                                        format!("read of {} failed: {e}", f.path.display()),
                                    ));
                                }
                                continue;
                            }
                        }
                        slice.finish_load(slot, true);
                    }
                }
                Err(e) => {
                    for &(_, _, slot) in run {
                        slice.finish_load(slot, false);
                    }
                    if first_err.is_none() {
                        first_err = Some(io::Error::new(
                            e.kind(),
                            format!("read of {} failed: {e}", f.path.display()),
                        ));
                    }
                }
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Issues one vectored request per run (all runs in flight at once), with a one-time
    /// fallback to buffered I/O if O_DIRECT is refused (EINVAL).
    fn io_runs<'a>(
        &self,
        f: &FileEntry,
        kind: IoKind,
        runs: impl Iterator<Item = &'a [(usize, u64, SlotId)]> + Clone,
    ) -> io::Result<Vec<io::Result<usize>>> {
        let bs = self.bs;
        let mut attempt = 0;
        loop {
            let fd = f.fd();
            let mut comps = Vec::new();
            for run in runs.clone() {
                let slice = &self.slices[run[0].0];
                let iovecs = merged_iovecs(run.iter().map(|&(_, _, slot)| slice.buf_ptr(slot)), bs);
                let req = IoRequest {
                    kind,
                    fd,
                    offset: run[0].1 * bs as u64,
                    iovecs,
                };
                comps.push(slice.submit(req)?);
            }
            let results: Vec<io::Result<usize>> = comps.iter().map(|c| c.wait()).collect();
            let einval = results
                .iter()
                .any(|r| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EINVAL)));
            if einval && attempt == 0 && f.direct() {
                f.use_direct.store(false, Ordering::Relaxed);
                f.fell_back.store(true, Ordering::Relaxed);
                attempt += 1;
                continue;
            }
            return Ok(results);
        }
    }

    /// Issue 6 move-work `forward` (SAFS, tgt): splits `[off, off+len)` into runs of blocks
    /// that live in one slice, and hands each run whose slice is on another node to a worker
    /// pinned there; `op(range in the caller's buffer, file offset)` does the copy.
    fn forwarded(
        &self,
        fw: &crate::move_work::Forwarder,
        f: &FileEntry,
        len: usize,
        off: u64,
        write: bool,
        mut op: impl FnMut(std::ops::Range<usize>, u64) -> io::Result<usize> + Send,
    ) -> io::Result<usize> {
        let len = if write {
            len
        } else {
            (len as u64).min(f.len().saturating_sub(off)) as usize
        };
        let bs = self.bs as u64;
        let ctx = AccessCtx::new(write);
        let mut done = 0usize;
        while done < len {
            let cur = off + done as u64;
            let end = off + len as u64;
            let b0 = cur / bs;
            let si = self.slice_of(f.id, b0, &ctx);
            let mut b = b0 + 1;
            while b * bs < end
                && ((b - b0) as usize) < self.chunk_blocks
                && self.slice_of(f.id, b, &ctx) == si
            {
                b += 1;
            }
            let k = ((b * bs).min(end) - cur) as usize;
            let node = self.slices[si].node;
            let r = done..done + k;
            let n = if fw.should_forward(node) {
                fw.run_on(node, || op(r, cur)).map_err(io::Error::other)??
            } else {
                op(r, cur)?
            };
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }

    fn pread(&self, f: &FileEntry, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let size = f.len();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let bs = self.bs as u64;
        let mut done = 0usize;
        while done < len {
            let cur = off + done as u64;
            let fb = cur / bs;
            let lb = (off + len as u64 - 1) / bs;
            let n = ((lb - fb + 1) as usize).min(self.chunk_blocks);
            let segs = self.acquire(f, fb, n, None)?;
            if self.cfg.readahead && f.seq_next.swap(fb + n as u64, Ordering::Relaxed) == fb {
                self.readahead(f, fb + n as u64);
            }
            for (i, s) in segs.iter().enumerate() {
                let start = if i == 0 { (cur % bs) as usize } else { 0 };
                let k = (self.bs - start).min(len - done);
                let src = self.slices[s.slice as usize].buf_ptr(s.slot);
                // SAFETY: pinned slot; ranges checked above.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.add(start), buf.as_mut_ptr().add(done), k)
                };
                done += k;
            }
            self.release(&segs);
        }
        Ok(len)
    }

    /// Sequential reads: keep up to two chunks read ahead of `from`, asynchronously (the
    /// I/O worker ends the loads). Never stalls: stops at the first busy slot or full queue.
    fn readahead(&self, f: &FileEntry, from: u64) {
        let bs = self.bs as u64;
        let chunk = self.chunk_blocks as u64;
        let file_blocks = f.len().div_ceil(bs);
        let start = from.max(f.ra_until.load(Ordering::Relaxed));
        let end = (from + 2 * chunk).min(file_blocks);
        if start >= end || start >= from + chunk {
            return;
        }
        f.ra_until.fetch_max(end, Ordering::Relaxed);
        let ctx = AccessCtx::new(false);
        let mut loads: Vec<(usize, u64, SlotId)> = Vec::new();
        for b in start..end {
            let si = self.slice_of(f.id, b, &ctx);
            let slice = &self.slices[si];
            let key = BlockKey {
                file: f.id,
                block: b,
            };
            if let Some((slot, _)) = slice.lookup_pin(&key) {
                slice.unpin(slot);
                continue;
            }
            let Some(slot) = slice.try_alloc() else { break };
            match slice.insert_claimed(slot, key) {
                Ok(()) => loads.push((si, b, slot)),
                Err((existing, _)) => slice.unpin(existing),
            }
        }
        let mut i = 0;
        while i < loads.len() {
            let mut j = i + 1;
            while j < loads.len()
                && loads[j].0 == loads[i].0
                && loads[j].1 == loads[j - 1].1 + 1
                && j - i < self.cfg.max_io_blocks
            {
                j += 1;
            }
            let run: Vec<SlotId> = loads[i..j].iter().map(|l| l.2).collect();
            let slice = self.slices[loads[i].0].clone();
            let iovecs = merged_iovecs(run.iter().map(|&slot| slice.buf_ptr(slot)), self.bs);
            let req = IoRequest {
                kind: IoKind::Read,
                fd: f.fd(),
                offset: loads[i].1 * bs,
                iovecs,
            };
            let s2 = slice.clone();
            let bsz = self.bs;
            // Issue 6: readahead loads are verified like demand loads.
            let ig = self.cfg.integrity.clone();
            let (fid, first) = (f.id.0 as u64, loads[i].1);
            slice.submit_async(
                req,
                Box::new(move |r| {
                    let got = r.as_ref().map_or(0, |n| *n);
                    if r.is_ok() {
                        SliceCounters::add(&s2.counters.read_ios, 1);
                        SliceCounters::add(&s2.counters.read_bytes, got as u64);
                    }
                    for (k, &slot) in run.iter().enumerate() {
                        if r.is_ok() {
                            let have = got.saturating_sub(k * bsz).min(bsz);
                            // SAFETY: we own the LOADING slot's buffer.
                            unsafe {
                                std::ptr::write_bytes(s2.buf_ptr(slot).add(have), 0, bsz - have)
                            };
                        }
                        // A corrupted block fails its load; the reader that wants it retries
                        // and gets the checksum error.
                        let ok = r.is_ok()
                            && match &ig {
                                None => true,
                                Some(ig) => {
                                    // SAFETY: we own the LOADING slot's buffer.
                                    let data = unsafe {
                                        std::slice::from_raw_parts(s2.buf_ptr(slot), bsz)
                                    };
                                    ig.verify(fid, first + k as u64, data).is_ok()
                                }
                            };
                        s2.finish_load(slot, ok);
                        s2.unpin(slot);
                    }
                }),
            );
            i = j;
        }
    }

    fn pwrite(&self, f: &FileEntry, buf: &[u8], off: u64) -> io::Result<usize> {
        let len = buf.len();
        if len == 0 {
            return Ok(0);
        }
        let bs = self.bs as u64;
        let end = off + len as u64;
        let mut done = 0usize;
        while done < len {
            let cur = off + done as u64;
            let fb = cur / bs;
            let lb = (end - 1) / bs;
            let n = ((lb - fb + 1) as usize).min(self.chunk_blocks);
            let segs = self.acquire(f, fb, n, Some((off, len as u64)))?;
            for (i, s) in segs.iter().enumerate() {
                let start = if i == 0 { (cur % bs) as usize } else { 0 };
                let k = (self.bs - start).min(len - done);
                let slice = &self.slices[s.slice as usize];
                let dst = slice.buf_ptr(s.slot);
                // SAFETY: pinned slot; ranges checked above.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(done), dst.add(start), k) };
                slice.mark_dirty(s.slot);
                if s.fill {
                    slice.finish_load(s.slot, true);
                }
                done += k;
            }
            f.size.fetch_max(off + done as u64, Ordering::AcqRel);
            self.release(&segs);
        }
        Ok(len)
    }

    /// Writes back the given dirty blocks of one slice (sorted), coalescing runs; blocks
    /// whose write-back another thread has in flight are skipped (see `writeback.rs`), and
    /// returned still pinned in `in_flight` when `keep_in_flight` is set.
    /// Returns the first error; failed blocks stay dirty.
    fn writeback(
        &self,
        si: usize,
        keys: &[BlockKey],
        keep_in_flight: bool,
    ) -> (io::Result<()>, Vec<(BlockKey, SlotId)>) {
        let slice = &self.slices[si];
        let files = self.files.read().clone();
        // Each claimed block stays pinned, so it cannot be reclaimed and reused while the
        // write is in flight.
        let Claimed {
            mine: pinned,
            in_flight,
        } = slice.claim_writeback(keys);
        let in_flight = if keep_in_flight {
            in_flight
        } else {
            for &(_, slot) in &in_flight {
                slice.unpin(slot);
            }
            Vec::new()
        };
        let mut first_err: Option<io::Error> = None;
        let mut i = 0;
        while i < pinned.len() {
            // One file at a time, so the EINVAL fallback applies per file.
            let fid = pinned[i].0.file;
            let mut j = i;
            while j < pinned.len() && pinned[j].0.file == fid {
                j += 1;
            }
            let group = &pinned[i..j];
            let f = files[fid.0 as usize].clone();
            let triples: Vec<(usize, u64, SlotId)> =
                group.iter().map(|&(k, s, _)| (si, k.block, s)).collect();
            let mut runs: Vec<(usize, usize)> = Vec::new();
            for (x, t) in triples.iter().enumerate() {
                match runs.last_mut() {
                    Some((s, n))
                        if triples[*s].1 + *n as u64 == t.1 && *n < self.cfg.max_io_blocks =>
                    {
                        *n += 1
                    }
                    _ => runs.push((x, 1)),
                }
            }
            let do_io = || match self.io_runs(
                &f,
                IoKind::Write,
                runs.iter().map(|&(s, n)| &triples[s..s + n]),
            ) {
                Ok(r) => r,
                Err(e) => runs
                    .iter()
                    .map(|_| Err(io::Error::new(e.kind(), e.to_string())))
                    .collect(),
            };
            // Issue 6: checksums are computed while the write is in flight (inline or on the
            // integrity pool) and recorded only for runs that reached the device.
            let (sums, results) = match &self.cfg.integrity {
                Some(ig) => {
                    let blocks: Vec<&[u8]> = triples
                        .iter()
                        // SAFETY: the slots are pinned for the whole write-back; a concurrent
                        // pwrite re-dirties the block, so a sum of torn data is replaced by the
                        // next write-back before the block can be dropped and read again.
                        .map(|&(_, _, slot)| unsafe {
                            std::slice::from_raw_parts(slice.buf_ptr(slot), self.bs)
                        })
                        .collect();
                    let (sums, r) = ig.compute_while(&blocks, do_io);
                    (Some(sums), r)
                }
                None => (None, do_io()),
            };
            for (&(s, n), r) in runs.iter().zip(results) {
                if let (Some(ig), Some(sums)) = (&self.cfg.integrity, &sums) {
                    for x in s..s + n {
                        if r.is_ok() {
                            ig.commit(fid.0 as u64, triples[x].1, sums[x]);
                        } else {
                            ig.invalidate(fid.0 as u64, triples[x].1);
                        }
                    }
                }
                let ok = r.is_ok();
                match r {
                    Ok(_) => {
                        SliceCounters::add(&slice.counters.write_ios, 1);
                        SliceCounters::add(&slice.counters.write_bytes, (n * self.bs) as u64);
                        SliceCounters::add(&slice.counters.written_back, n as u64);
                    }
                    Err(e) => {
                        SliceCounters::add(&slice.counters.write_errors, 1);
                        let w = WriteBackError::new(
                            format!("write-back to {} failed", f.path.display()),
                            &e,
                        );
                        f.record_error(&w);
                        if first_err.is_none() {
                            first_err = Some(w.to_io());
                        }
                    }
                }
                for &(k, slot, gen) in &group[s..s + n] {
                    slice.end_writeback(&k, slot, gen, ok);
                }
            }
            i = j;
        }
        for &(_, slot, _) in &pinned {
            slice.unpin(slot);
        }
        (first_err.map_or(Ok(()), Err), in_flight)
    }

    /// Writes back the dirty blocks of `f` in `[first, last]` from every slice, and waits
    /// for write-backs of them that other threads (the evictor, another `fsync`) have in
    /// flight: when this returns, every modification made before the call is on the device
    /// or its failure has been returned or recorded for `fsync`.
    fn flush_range(&self, f: &FileEntry, first: u64, last: u64) -> io::Result<()> {
        let mut first_err = Ok(());
        for si in 0..self.slices.len() {
            let slice = &self.slices[si];
            let mut keys: Vec<BlockKey> = {
                let d = slice.dirty.lock();
                d.range(
                    BlockKey {
                        file: f.id,
                        block: first,
                    }..=BlockKey {
                        file: f.id,
                        block: last,
                    },
                )
                .copied()
                .collect()
            };
            // A block another thread was writing may have been modified during that write
            // (or the write failed): once it ends, write what is still dirty ourselves.
            while !keys.is_empty() {
                let mut again = Vec::new();
                for chunk in keys.chunks(4096) {
                    let (r, in_flight) = self.writeback(si, chunk, true);
                    if let Err(e) = r {
                        if first_err.is_ok() {
                            first_err = Err(e);
                        }
                    }
                    for (k, slot) in in_flight {
                        slice.wait_writeback(slot);
                        slice.unpin(slot);
                        again.push(k);
                    }
                }
                keys = again;
            }
        }
        first_err
    }

    fn take_error(&self, f: &FileEntry) -> io::Result<()> {
        match f.wb_error.lock().take() {
            Some(e) => Err(e.to_io()),
            None => Ok(()),
        }
    }

    fn fsync(&self, f: &FileEntry) -> io::Result<()> {
        let r = self.flush_range(f, 0, u64::MAX);
        let recorded = self.take_error(f);
        r?;
        recorded?;
        // Whole-block writes may have extended the file past its logical end.
        let size = f.len();
        let fd = f.buffered_fd.as_raw_fd();
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our own descriptor into a live stat.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(
                e.kind(),
                format!("fsync of {}: fstat failed: {e}", f.path.display()),
            ));
        }
        if st.st_size as u64 > size {
            // SAFETY: ftruncate on our own descriptor.
            if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "fsync of {}: cannot trim the file from {} to its length of {size} bytes \
                         after whole-block writes (ftruncate: {e})",
                        f.path.display(),
                        st.st_size
                    ),
                ));
            }
        }
        self.backend.datasync(fd).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("fdatasync of {} failed: {e}", f.path.display()),
            )
        })
    }
}

/// The evictor of slice `si`: sleeps until the free count drops below the low watermark,
/// then frees until the high watermark, writing dirty victims back in coalesced runs.
fn evictor(inner: &Inner, si: usize) {
    let slice = &inner.slices[si];
    let mut backoff = false;
    loop {
        let t = if backoff {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(1)
        };
        if !slice.evictor_wait(t) {
            return;
        }
        backoff = false;
        let mut rounds = 0;
        while slice.free_count() < slice.high && rounds < 64 {
            rounds += 1;
            let want = slice.high - slice.free_count();
            let mut freed = Vec::new();
            let mut dirty = Vec::new();
            slice.next_epoch();
            slice.policy.evict(want, &mut |slot| {
                slice.reclaim(slot, &mut freed, &mut dirty)
            });
            slice.release_free(&freed);
            if !dirty.is_empty() {
                // Jericho/SAFS: extend each run of victims with the dirty blocks that follow
                // it, so one large write cleans the neighbourhood (walking the sorted dirty
                // set once per run end, not once per victim).
                dirty.sort();
                dirty.dedup();
                {
                    let d = slice.dirty.lock();
                    let victims = std::mem::take(&mut dirty);
                    let mut i = 0;
                    while i < victims.len() {
                        let mut j = i + 1;
                        while j < victims.len()
                            && victims[j].file == victims[i].file
                            && victims[j].block == victims[j - 1].block + 1
                        {
                            j += 1;
                        }
                        dirty.extend_from_slice(&victims[i..j]);
                        let last = victims[j - 1];
                        let room = inner
                            .cfg
                            .max_io_blocks
                            .saturating_sub((j - i) % inner.cfg.max_io_blocks.max(1));
                        let from = BlockKey {
                            file: last.file,
                            block: last.block + 1,
                        };
                        for (k, expect) in d.range(from..).take(room).zip(last.block + 1..) {
                            if k.file != last.file
                                || k.block != expect
                                || victims[j..].first() == Some(k)
                            {
                                break;
                            }
                            dirty.push(*k);
                        }
                        i = j;
                    }
                }
                dirty.sort();
                dirty.dedup();
                if let (Err(e), _) = inner.writeback(si, &dirty, false) {
                    // Requests stalled for a free buffer fail with this error at once.
                    let w = e
                        .get_ref()
                        .and_then(|x| x.downcast_ref::<WriteBackError>())
                        .cloned()
                        .unwrap_or_else(|| WriteBackError::new("write-back failed".into(), &e));
                    slice.wb_failure.report(w);
                    backoff = true;
                    break;
                }
            } else if freed.is_empty() {
                break;
            }
        }
    }
}

/// Blocks pinned by [`FileHandle::get`]: zero-copy views of the cache's buffers.
/// Release with [`Pinned::put`] (or drop = put clean).
pub struct Pinned<'a> {
    h: &'a FileHandle,
    segs: Segs,
    /// Offset of the range inside the first block, and the range length.
    start: usize,
    len: usize,
    write: bool,
    off: u64,
}

impl Pinned<'_> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The requested bytes, as one slice per cache block.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let bs = self.h.inner.bs;
        let mut left = self.len;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let st = if i == 0 { self.start } else { 0 };
            let k = (bs - st).min(left);
            left -= k;
            let p = self.h.inner.slices[s.slice as usize].buf_ptr(s.slot);
            // SAFETY: the slot is pinned for the lifetime of `self`.
            unsafe { std::slice::from_raw_parts(p.add(st), k) }
        })
    }
    /// Mutable views (only for [`FileHandle::get_mut`]).
    pub fn segments_mut(&mut self) -> impl Iterator<Item = &mut [u8]> + '_ {
        assert!(self.write, "segments_mut on a read-only get");
        let bs = self.h.inner.bs;
        let mut left = self.len;
        let inner = &self.h.inner;
        let start = self.start;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let st = if i == 0 { start } else { 0 };
            let k = (bs - st).min(left);
            left -= k;
            let p = inner.slices[s.slice as usize].buf_ptr(s.slot);
            // SAFETY: the slot is pinned for the lifetime of `self`, which is borrowed mutably.
            unsafe { std::slice::from_raw_parts_mut(p.add(st), k) }
        })
    }
    /// Copies the bytes out (convenience for tests).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }
    /// Releases the buffers; `dirty` marks them modified (write-back happens later).
    pub fn put(mut self, dirty: bool) {
        self.release(dirty);
    }
    fn release(&mut self, dirty: bool) {
        let inner = &self.h.inner;
        if dirty && self.write {
            for s in &self.segs {
                inner.slices[s.slice as usize].mark_dirty(s.slot);
            }
            self.h
                .file
                .size
                .fetch_max(self.off + self.len as u64, Ordering::AcqRel);
        }
        inner.release(&self.segs);
        self.segs.clear();
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        if !self.segs.is_empty() {
            self.release(false);
        }
    }
}

impl FileHandle {
    pub fn id(&self) -> FileId {
        self.file.id
    }
    pub fn path(&self) -> &Path {
        &self.file.path
    }
    /// Logical length in bytes.
    pub fn len(&self) -> u64 {
        self.file.len()
    }
    pub fn is_empty(&self) -> bool {
        self.file.is_empty()
    }
    /// Whether this file's I/O uses O_DIRECT.
    pub fn direct(&self) -> bool {
        self.file.direct()
    }
    pub fn fell_back_to_buffered(&self) -> bool {
        self.file.fell_back_to_buffered()
    }

    /// Copies up to `buf.len()` bytes at `off` (fewer at end of file).
    pub fn pread(&self, buf: &mut [u8], off: u64) -> io::Result<usize> {
        if let Some(fw) = &self.inner.cfg.forwarder {
            return self
                .inner
                .forwarded(fw, &self.file, buf.len(), off, false, |r, o| {
                    self.inner.pread(&self.file, &mut buf[r], o)
                });
        }
        self.inner.pread(&self.file, buf, off)
    }
    /// Reads several small ranges at once: each `(offset, buffer)` must lie within one cache
    /// block. All missing blocks are read concurrently (one batch to the I/O workers), so one
    /// thread gets the queue depth of the batch. Returns the bytes read per range (fewer at
    /// end of file).
    pub fn pread_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> io::Result<Vec<usize>> {
        let inner = &self.inner;
        let bs = inner.bs as u64;
        let size = self.file.len();
        let mut out = vec![0usize; reqs.len()];
        for (i, (off, buf)) in reqs.iter().enumerate() {
            if *off % bs + buf.len() as u64 > bs {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "pread_batch range {i} (offset {off}, {} bytes) crosses a {bs}-byte block",
                        buf.len()
                    ),
                ));
            }
        }
        let live: Vec<usize> = (0..reqs.len())
            .filter(|&i| reqs[i].0 < size && !reqs[i].1.is_empty())
            .collect();
        for chunk in live.chunks(inner.chunk_blocks) {
            let segs = inner.acquire_blocks(
                &self.file,
                chunk.iter().map(|&i| reqs[i].0 / bs),
                chunk.len(),
                None,
            )?;
            for (s, &i) in segs.iter().zip(chunk) {
                let (off, buf) = &mut reqs[i];
                let k = (buf.len() as u64).min(size - *off) as usize;
                let src = inner.slices[s.slice as usize].buf_ptr(s.slot);
                // SAFETY: pinned slot; the range lies inside one block.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add((*off % bs) as usize),
                        buf.as_mut_ptr(),
                        k,
                    )
                };
                out[i] = k;
            }
            inner.release(&segs);
        }
        Ok(out)
    }

    /// Writes `buf` at `off` into the cache (write-back later, or at fsync).
    pub fn pwrite(&self, buf: &[u8], off: u64) -> io::Result<usize> {
        if let Some(fw) = &self.inner.cfg.forwarder {
            return self
                .inner
                .forwarded(fw, &self.file, buf.len(), off, true, |r, o| {
                    self.inner.pwrite(&self.file, &buf[r], o)
                });
        }
        self.inner.pwrite(&self.file, buf, off)
    }

    fn pin_range(&self, off: u64, len: usize, write: bool) -> io::Result<Pinned<'_>> {
        let bs = self.inner.bs as u64;
        let len = if write {
            len
        } else {
            (len as u64).min(self.len().saturating_sub(off)) as usize
        };
        if len == 0 {
            return Ok(Pinned {
                h: self,
                segs: Segs::new(),
                start: 0,
                len: 0,
                write,
                off,
            });
        }
        let fb = off / bs;
        let n = ((off + len as u64 - 1) / bs - fb + 1) as usize;
        if n > self.inner.chunk_blocks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "get of {len} bytes spans {n} blocks; at most {} blocks may be pinned at once with this cache size",
                    self.inner.chunk_blocks
                ),
            ));
        }
        let segs = self.inner.acquire(&self.file, fb, n, None)?;
        Ok(Pinned {
            h: self,
            segs,
            start: (off % bs) as usize,
            len,
            write,
            off,
        })
    }

    /// Zero-copy read (Jericho's Get): pins the blocks holding `[off, off+len)` (clipped to
    /// the file's end) and returns views of the cache buffers.
    pub fn get(&self, off: u64, len: usize) -> io::Result<Pinned<'_>> {
        self.pin_range(off, len, false)
    }
    /// Zero-copy write: pins the blocks (loading them so partial updates keep the rest);
    /// modify through [`Pinned::segments_mut`], then `put(true)`.
    pub fn get_mut(&self, off: u64, len: usize) -> io::Result<Pinned<'_>> {
        self.pin_range(off, len, true)
    }
    /// Most bytes a `get` may span (block-aligned).
    pub fn max_get_bytes(&self) -> usize {
        self.inner.chunk_blocks * self.inner.bs
    }

    /// Writes back the dirty blocks overlapping `[off, off+len)` and fdatasyncs the file.
    pub fn sync_range(&self, off: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        let bs = self.inner.bs as u64;
        let r = self
            .inner
            .flush_range(&self.file, off / bs, (off + len - 1) / bs);
        r?;
        self.inner
            .backend
            .datasync(self.file.buffered_fd.as_raw_fd())
    }

    /// Writes back every dirty block of the file, then fdatasync. Returns any write-back
    /// error since the last fsync; failed blocks stay dirty and are retried.
    pub fn fsync(&self) -> io::Result<()> {
        self.inner.fsync(&self.file)
    }
}
