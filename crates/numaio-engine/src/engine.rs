//! The engine: configuration and its builder, start-up (slices, I/O workers, evictors),
//! opening files and shutting down.

use crate::arena::PlacementCheck;
use crate::config::{EngineConfig, Resolved};
use crate::error::EngineError;
use crate::ext::{AccessHook, BlockIntegrity, Placement, Router};
use crate::file::{FileTable, OpenOptions};
use crate::gate::Gate;
use crate::handle::FileHandle;
use crate::index::IndexKind;
use crate::inner::Inner;
use crate::io::ring::Ring;
use crate::io::uring::UringBackend;
use crate::io::worker::Msg;
use crate::io::{Backend, IoPath, PsyncBackend};
use crate::placement::RangePlacement;
use crate::policy::PolicyKind;
use crate::slice::Slice;
use crate::stats::EngineStats;
use numaio_sys::{CpuSet, Topology};
use parking_lot::Mutex;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

impl EngineConfig {
    /// A builder starting from this configuration.
    pub fn into_builder(self) -> EngineBuilder {
        EngineBuilder { cfg: self }
    }
}

/// Builds an [`Engine`]: `Engine::builder().with_cache_bytes(1 << 30).build()`. Every
/// setting has the default of [`EngineConfig::default`]; `build` checks them all at once.
#[derive(Clone, Debug, Default)]
pub struct EngineBuilder {
    cfg: EngineConfig,
}

impl EngineBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Cache block size: a power of two, at least 512; O_DIRECT needs a multiple of 4096.
    pub fn with_block_size(mut self, bytes: usize) -> Self {
        self.cfg.block_size = bytes;
        self
    }
    /// Total cache size over all slices.
    pub fn with_cache_bytes(mut self, bytes: u64) -> Self {
        self.cfg.cache_bytes = bytes;
        self
    }
    /// This many slices over the nodes with memory, round robin.
    pub fn with_slices(mut self, n: usize) -> Self {
        self.cfg.slices = Some(n);
        self
    }
    /// One slice per listed node.
    pub fn with_slice_nodes(mut self, nodes: Vec<u32>) -> Self {
        self.cfg.slice_nodes = Some(nodes);
        self
    }
    pub fn with_policy(mut self, policy: PolicyKind) -> Self {
        self.cfg.policy = policy;
        self
    }
    pub fn with_index(mut self, index: IndexKind) -> Self {
        self.cfg.index = index;
        self
    }
    pub fn with_placement(mut self, p: Arc<dyn Placement>) -> Self {
        self.cfg.placement = Some(p);
        self
    }
    /// Range length of the default placement, in blocks.
    pub fn with_range_blocks(mut self, blocks: u64) -> Self {
        self.cfg.range_blocks = blocks;
        self
    }
    /// Adds an access hook (called on every cached access, in the order added).
    pub fn with_hook(mut self, h: Arc<dyn AccessHook>) -> Self {
        self.cfg.hooks.push(h);
        self
    }
    pub fn with_router(mut self, r: Arc<dyn Router>) -> Self {
        self.cfg.router = Some(r);
        self
    }
    pub fn with_integrity(mut self, i: Arc<dyn BlockIntegrity>) -> Self {
        self.cfg.integrity = Some(i);
        self
    }
    pub fn with_backend(mut self, b: Arc<dyn Backend>) -> Self {
        self.cfg.backend = Some(b);
        self
    }
    pub fn with_direct_io(mut self, on: bool) -> Self {
        self.cfg.direct_io = on;
        self
    }
    pub fn with_io_workers_per_slice(mut self, n: usize) -> Self {
        self.cfg.io_workers_per_slice = n;
        self
    }
    pub fn with_queue_depth(mut self, depth: u32) -> Self {
        self.cfg.queue_depth = depth;
        self
    }
    pub fn with_bind_memory(mut self, on: bool) -> Self {
        self.cfg.bind_memory = on;
        self
    }
    pub fn with_pin_threads(mut self, on: bool) -> Self {
        self.cfg.pin_threads = on;
        self
    }
    pub fn with_max_io_blocks(mut self, blocks: usize) -> Self {
        self.cfg.max_io_blocks = blocks;
        self
    }
    pub fn with_hit_gating(mut self, on: bool) -> Self {
        self.cfg.hit_gating = on;
        self
    }
    pub fn with_readahead(mut self, on: bool) -> Self {
        self.cfg.readahead = on;
        self
    }
    pub fn with_topology(mut self, topo: Topology) -> Self {
        self.cfg.topology = Some(topo);
        self
    }
    /// Longest wait for a free buffer, or for another request's load or write-back, before a
    /// request fails with [`EngineError::Stalled`] (default 60 s). `Duration::ZERO` makes
    /// a request that finds the cache full of pinned or dirty buffers fail at once.
    pub fn with_stall_timeout(mut self, t: Duration) -> Self {
        self.cfg.stall_timeout = t;
        self
    }
    /// Largest size a write may make a file (default [`DEFAULT_MAX_FILE_BYTES`]); writes
    /// past it fail with [`EngineError::TooLarge`] before touching the cache.
    pub fn with_max_file_bytes(mut self, bytes: u64) -> Self {
        self.cfg.max_file_bytes = bytes;
        self
    }
    /// The configuration so far (plain data).
    pub fn config(&self) -> &EngineConfig {
        &self.cfg
    }
    pub(crate) fn config_mut(&mut self) -> &mut EngineConfig {
        &mut self.cfg
    }
    /// Checks the settings and starts the engine.
    pub fn build(self) -> Result<Engine, EngineError> {
        Engine::start(self.cfg)
    }
}

/// The engine. Dropping it is [`Engine::close`] with the errors lost.
///
/// Handles ([`FileHandle`]) may outlive the engine: once it is closed every operation on
/// them fails with [`EngineError::Closed`] and nothing more is written.
pub struct Engine {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
    workers_per_slice: usize,
}

impl Engine {
    /// A builder with the default configuration.
    pub fn builder() -> EngineBuilder {
        EngineBuilder::default()
    }

    /// Starts an engine from a plain configuration (same as `cfg.into_builder().build()`).
    pub fn new(cfg: EngineConfig) -> Result<Engine, EngineError> {
        Engine::start(cfg)
    }

    fn start(cfg: EngineConfig) -> Result<Engine, EngineError> {
        let r = cfg.resolve()?;
        let bs = cfg.block_size;
        let nslices = r.nodes.len();
        // The built-in io_uring backend is driven directly (a ring per slice that callers
        // submit into); a backend given in the configuration runs behind I/O workers.
        let (backend, direct): (Arc<dyn Backend>, bool) = match &cfg.backend {
            Some(b) => (b.clone(), false),
            None => {
                if UringBackend::probe().is_ok() {
                    (Arc::new(UringBackend), true)
                } else {
                    (Arc::new(PsyncBackend), false)
                }
            }
        };
        let placement = cfg
            .placement
            .clone()
            .unwrap_or_else(|| Arc::new(RangePlacement::new(nslices, cfg.range_blocks)));
        let mut slices = Vec::new();
        let mut paths = Vec::new();
        // As many requests in flight per slice as its workers would have had.
        let depth = cfg.queue_depth.max(1) as usize * cfg.io_workers_per_slice.max(1);
        for (i, &node) in r.nodes.iter().enumerate() {
            let (io, path) = if direct {
                let ring = Ring::new(depth).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("cannot set up the io_uring of slice {i}: {e}"),
                    )
                })?;
                (IoPath::Ring(ring.clone()), SlicePath::Ring(ring))
            } else {
                let (tx, rx) = std::sync::mpsc::sync_channel(cfg.queue_depth.max(1) as usize * 4);
                (
                    IoPath::Workers { tx, slice: i },
                    SlicePath::Workers(Arc::new(Mutex::new(rx))),
                )
            };
            slices.push(Arc::new(Slice::new(
                i,
                node,
                bs,
                r.slots_per_slice,
                cfg.policy,
                cfg.index,
                cfg.bind_memory,
                cfg.hit_gating,
                io,
                cfg.stall_timeout,
            )?));
            paths.push(path);
        }
        let chunk_blocks = (r.slots_per_slice / 16).clamp(1, cfg.max_io_blocks);
        let inner = Arc::new(Inner {
            bs,
            slices,
            placement,
            backend,
            files: FileTable::default(),
            chunk_blocks,
            gate: Gate::default(),
            cfg,
        });
        let workers = if direct {
            0
        } else {
            inner.cfg.io_workers_per_slice.max(1)
        };
        let mut threads = Vec::new();
        if let Err(e) = spawn_threads(&inner, &r, paths, workers, &mut threads) {
            // Stop what did start: evictors see the shutdown flag, reapers their stop, and the
            // I/O workers see their channels close once the last reference to the slices is
            // gone.
            for s in &inner.slices {
                s.stop();
                s.stop_workers(0);
            }
            drop(inner);
            for t in threads {
                let _ = t.join();
            }
            return Err(e.into());
        }
        Ok(Engine {
            inner,
            threads,
            workers_per_slice: workers,
        })
    }

    /// Opens a file, or re-opens one already open (by any path to it: the handles share its
    /// cache entries). Opening for writing a file first opened read-only reopens it
    /// read-write; a handle opened read-only refuses writes with [`EngineError::ReadOnly`].
    ///
    /// The engine holds an advisory lock on every file it has open (shared for reading,
    /// exclusive for writing): opening a file another engine, in this process or another,
    /// has open for writing (or opening for writing one it has open) fails with
    /// [`EngineError::Locked`].
    pub fn open(
        &self,
        path: impl AsRef<Path>,
        opts: OpenOptions,
    ) -> Result<FileHandle, EngineError> {
        let inner = &self.inner;
        let direct = inner.cfg.direct_io && inner.bs.is_multiple_of(4096);
        let file = inner.files.open(
            path.as_ref(),
            opts,
            direct,
            inner.cfg.max_file_bytes,
            &*inner.placement,
            |id, p| match &inner.cfg.integrity {
                Some(ig) => ig.file_opened(id, p, opts.write, inner.bs, &inner.backend),
                None => Ok(()),
            },
        )?;
        Ok(FileHandle {
            inner: inner.clone(),
            file,
            write: opts.write,
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
        self.inner.slices.iter().map(|s| s.node()).collect()
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

    /// Shuts the engine down: refuses new handle operations (they fail with
    /// [`EngineError::Closed`]), waits for those under way, writes back every dirty block of
    /// every file (fsync each) and stops the threads. Every write acknowledged before is on
    /// the device when this returns `Ok`.
    pub fn close(mut self) -> Result<(), EngineError> {
        let r = self.shut_down();
        Ok(r?)
    }

    fn shut_down(&mut self) -> io::Result<()> {
        // Operations under way end within the stall timeout (every wait they make is bounded
        // by it); one that does not (a hook that blocks) is not waited for forever.
        let limit = self
            .inner
            .cfg
            .stall_timeout
            .saturating_add(Duration::from_secs(5));
        let drained = self.inner.gate.close(limit);
        let r = self.flush_all();
        self.stop();
        if !drained {
            r?;
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("engine closed while handle operations were still running after {limit:?}"),
            ));
        }
        r
    }

    fn flush_all(&self) -> io::Result<()> {
        let mut first = Ok(());
        for f in self.inner.files.all() {
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
            s.stop_workers(self.workers_per_slice);
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
        for f in self.inner.files.all() {
            f.unlock();
        }
    }
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("slice_nodes", &self.slice_nodes())
            .field("block_size", &self.inner.bs)
            .field("backend", &self.inner.backend.name())
            .field("policy", &self.inner.cfg.policy)
            .field("files", &self.inner.files.all().len())
            .finish()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        if !self.threads.is_empty() {
            let _ = self.shut_down();
        }
    }
}

/// What a slice's I/O thread(s) run: a ring's reaper or the workers of a channel.
enum SlicePath {
    Ring(Arc<Ring>),
    Workers(Arc<Mutex<std::sync::mpsc::Receiver<Msg>>>),
}

/// Starts each slice's I/O threads (the ring's reaper, or `workers` I/O workers) and
/// evictor, pushing their handles as they start.
fn spawn_threads(
    inner: &Arc<Inner>,
    r: &Resolved,
    paths: Vec<SlicePath>,
    workers: usize,
    threads: &mut Vec<JoinHandle<()>>,
) -> io::Result<()> {
    let cfg = &inner.cfg;
    let topo = &r.topo;
    let nodes = &r.nodes;
    for (i, path) in paths.into_iter().enumerate() {
        let node = nodes[i];
        let cpus: Vec<u32> = if cfg.pin_threads {
            topo.node(node).map(|n| n.cpus.clone()).unwrap_or_default()
        } else {
            Vec::new()
        };
        match path {
            SlicePath::Ring(ring) => {
                let cpus = cpus.clone();
                // The reaper ends loads into the slice's memory: it runs on the slice's node.
                threads.push(
                    std::thread::Builder::new()
                        .name(format!("numaio-ring-{i}"))
                        .spawn(move || {
                            pin_self(&cpus);
                            ring.reap()
                        })
                        .map_err(|e| thread_error(&format!("numaio-ring-{i}"), e))?,
                );
            }
            SlicePath::Workers(rx) => {
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
                    let cpus = cpus.clone();
                    let rx = rx.clone();
                    let depth = cfg.queue_depth.max(1) as usize;
                    threads.push(
                        std::thread::Builder::new()
                            .name(format!("numaio-io-{i}.{w}"))
                            .spawn(move || {
                                pin_self(&cpus);
                                crate::io::worker::run(rx, queue, depth)
                            })
                            .map_err(|e| thread_error(&format!("numaio-io-{i}.{w}"), e))?,
                    );
                }
            }
        }
        let inner2 = inner.clone();
        threads.push(
            std::thread::Builder::new()
                .name(format!("numaio-evict-{i}"))
                .spawn(move || {
                    pin_self(&cpus);
                    crate::flush::evictor(&inner2, i)
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
