//! The engine's configuration: every setting with its default, and the one check of them
//! all (with what is derived from them: the topology, the slices' nodes, blocks per slice)
//! that start-up and anyone who needs the slices before start-up share.

use crate::error::EngineError;
use crate::ext::{AccessHook, BlockIntegrity, Placement, Router};
use crate::index::IndexKind;
use crate::io::Backend;
use crate::policy::PolicyKind;
use numaio_sys::Topology;
use std::sync::Arc;
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
    /// Which slice caches a block; default [`RangePlacement`](crate::RangePlacement) with
    /// `range_blocks`.
    pub placement: Option<Arc<dyn Placement>>,
    pub range_blocks: u64,
    /// Called on every cached access (accounting, work moving).
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
    /// Runs the copy of `pread`/`pwrite` on the data's node (move-work `forward`).
    pub router: Option<Arc<dyn Router>>,
    /// Per-block checksums computed in write-back and verified on every load.
    pub integrity: Option<Arc<dyn BlockIntegrity>>,
    /// Longest wait for a free cache buffer (or for another request's load or write-back)
    /// before a request fails with [`EngineError::Stalled`]; zero fails at once.
    pub stall_timeout: Duration,
    /// Largest file size writes may reach (a block device is limited by its size too).
    pub max_file_bytes: u64,
}

/// The default [`EngineConfig::max_file_bytes`]: 16 TiB, the largest file of ext4 with 4 KiB
/// blocks; writes past what the file system allows would fail only at write-back.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 1 << 44;

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
            router: None,
            integrity: None,
            stall_timeout: Duration::from_secs(60),
            max_file_bytes: DEFAULT_MAX_FILE_BYTES,
        }
    }
}

impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The add-ons are trait objects: shown by name where they have one.
        f.debug_struct("EngineConfig")
            .field("block_size", &self.block_size)
            .field("cache_bytes", &self.cache_bytes)
            .field("slices", &self.slices)
            .field("slice_nodes", &self.slice_nodes)
            .field("policy", &self.policy)
            .field("index", &self.index)
            .field("placement", &self.placement.as_ref().map(|p| p.name()))
            .field("range_blocks", &self.range_blocks)
            .field("hooks", &self.hooks.len())
            .field("backend", &self.backend.as_ref().map(|b| b.name()))
            .field("direct_io", &self.direct_io)
            .field("io_workers_per_slice", &self.io_workers_per_slice)
            .field("queue_depth", &self.queue_depth)
            .field("bind_memory", &self.bind_memory)
            .field("pin_threads", &self.pin_threads)
            .field("max_io_blocks", &self.max_io_blocks)
            .field("hit_gating", &self.hit_gating)
            .field("readahead", &self.readahead)
            .field("topology", &self.topology.as_ref().map(|t| t.node_ids()))
            .field("router", &self.router.as_ref().map(|r| r.name()))
            .field("integrity", &self.integrity.as_ref().map(|i| i.name()))
            .field("stall_timeout", &self.stall_timeout)
            .field("max_file_bytes", &self.max_file_bytes)
            .finish()
    }
}

/// The node of each slice: `slice_nodes` if given, else `slices` slices over the nodes with
/// memory round robin, else one slice per node with memory (all nodes if none reports
/// memory). The one rule for every caller that needs to know the slices before start-up.
pub(crate) fn slice_nodes(
    topo: &Topology,
    slice_nodes: Option<&[u32]>,
    slices: Option<usize>,
) -> Vec<u32> {
    if let Some(v) = slice_nodes.filter(|v| !v.is_empty()) {
        return v.to_vec();
    }
    let mut mem: Vec<u32> = topo
        .nodes
        .iter()
        .filter(|n| n.has_memory())
        .map(|n| n.id)
        .collect();
    if mem.is_empty() {
        mem = topo.node_ids();
    }
    match slices {
        Some(n) => (0..n.max(1)).map(|i| mem[i % mem.len()]).collect(),
        None => mem,
    }
}

/// A configuration checked once, with everything derived from it.
pub(crate) struct Resolved {
    pub topo: Topology,
    pub nodes: Vec<u32>,
    pub slots_per_slice: usize,
}

impl EngineConfig {
    /// The topology this configuration uses (given or detected).
    pub fn topology_or_detect(&self) -> Result<Topology, EngineError> {
        match &self.topology {
            Some(t) => Ok(t.clone()),
            None => Ok(Topology::detect()?),
        }
    }

    /// The node of each slice the engine will have.
    pub fn resolve_slice_nodes(&self) -> Result<Vec<u32>, EngineError> {
        let topo = self.topology_or_detect()?;
        Ok(slice_nodes(&topo, self.slice_nodes.as_deref(), self.slices))
    }

    pub(crate) fn resolve(&self) -> Result<Resolved, EngineError> {
        let bs = self.block_size;
        if !bs.is_power_of_two() || bs < 512 {
            return Err(EngineError::Config(format!(
                "block size {bs} must be a power of two of at least 512 bytes"
            )));
        }
        for (name, v) in [
            ("max_io_blocks", self.max_io_blocks as u64),
            ("io_workers_per_slice", self.io_workers_per_slice as u64),
            ("queue_depth", u64::from(self.queue_depth)),
            ("range_blocks", self.range_blocks),
        ] {
            if v == 0 {
                return Err(EngineError::Config(format!("{name} must be at least 1")));
            }
        }
        if self.slices == Some(0) {
            return Err(EngineError::Config("slices must be at least 1".into()));
        }
        if self.max_file_bytes < bs as u64 || self.max_file_bytes > i64::MAX as u64 {
            return Err(EngineError::Config(format!(
                "max_file_bytes {} must lie between the block size ({bs}) and {}",
                self.max_file_bytes,
                i64::MAX
            )));
        }
        let topo = self.topology_or_detect()?;
        if let Some(v) = &self.slice_nodes {
            if v.is_empty() {
                return Err(EngineError::Config(
                    "slice_nodes lists no node (leave it unset for one slice per node)".into(),
                ));
            }
            let known = topo.node_ids();
            if let Some(n) = v.iter().find(|n| !known.contains(n)) {
                return Err(EngineError::Config(format!(
                    "slice node {n} does not exist on this machine (nodes: {known:?})"
                )));
            }
        }
        let nodes = slice_nodes(&topo, self.slice_nodes.as_deref(), self.slices);
        let nslices = nodes.len();
        if nslices > u16::MAX as usize {
            return Err(EngineError::Config(format!(
                "{nslices} slices are too many (at most {})",
                u16::MAX
            )));
        }
        // Arenas are prefaulted: a cache larger than the machine would be OOM-killed at start.
        // SAFETY: sysconf has no memory-safety preconditions.
        let phys = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
        let phys_bytes = (phys.max(0) as u64).saturating_mul(numaio_sys::page_size() as u64);
        if phys > 0 && self.cache_bytes > phys_bytes {
            return Err(EngineError::OutOfMemory(format!(
                "a cache of {} bytes is larger than this machine's memory ({phys_bytes} bytes); \
                 use a smaller cache",
                self.cache_bytes
            )));
        }
        let slots_per_slice =
            usize::try_from((self.cache_bytes / nslices as u64) / bs as u64).unwrap_or(usize::MAX);
        if slots_per_slice < 4 {
            return Err(EngineError::Config(format!(
                "cache of {} bytes gives fewer than 4 blocks of {bs} bytes per slice ({nslices} slices)",
                self.cache_bytes
            )));
        }
        Ok(Resolved {
            topo,
            nodes,
            slots_per_slice,
        })
    }
}
