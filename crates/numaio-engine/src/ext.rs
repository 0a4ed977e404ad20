//! The engine's extension points: everything the core calls but does not implement.
//!
//! * [`Placement`]: which slice caches a block;
//! * [`AccessHook`]: told of every cached access (accounting, moving the thread to the data);
//! * [`Router`]: runs a request's copy on another node (forwarding to the data's node);
//! * [`BlockIntegrity`]: checksums computed at write-back and verified on every load.
//!
//! The core knows only these traits; the implementations live in `placement`,
//! `move_work` and `integrity`, and [`crate::numa`] wires them from options.

use crate::key::FileId;
use std::io;
use std::sync::OnceLock;

/// What a placement policy may look at for one access.
#[derive(Debug, Default)]
pub struct AccessCtx {
    /// The access modifies the block.
    pub write: bool,
    node: OnceLock<Option<u32>>,
}

impl AccessCtx {
    pub fn new(write: bool) -> Self {
        AccessCtx {
            write,
            node: OnceLock::new(),
        }
    }

    /// The calling thread's NUMA node (asked once per access, only if a policy needs it).
    pub fn caller_node(&self) -> Option<u32> {
        *self
            .node
            .get_or_init(|| numaio_sys::getcpu().ok().map(|c| c.node))
    }
}

/// Chooses the slice (index into the engine's slices) that caches `block` of `file`.
/// Must be a pure function of its inputs for a given engine: a block must always be looked
/// up in the slice it was inserted into.
pub trait Placement: Send + Sync {
    fn name(&self) -> String;
    fn slice_for(&self, file: FileId, block: u64, ctx: &AccessCtx) -> usize;
    /// The slice of `block` and how many blocks from `block` on (at least 1) map to that same
    /// slice, so a request for a run of blocks asks once per range instead of once per
    /// block. The default asks [`slice_for`](Self::slice_for) and claims one block.
    fn slice_run(&self, file: FileId, block: u64, ctx: &AccessCtx) -> (usize, u64) {
        (self.slice_for(file, block, ctx), 1)
    }
    /// Called once when the engine first opens `path` as `file` (e.g. to give the file a home
    /// slice from its directory or device), before any `slice_for` for it.
    fn file_opened(&self, _file: FileId, _path: &std::path::Path) {}
}

/// Called on every cached access (hit or miss), after the slot is pinned; for accounting and
/// work-moving policies. Keep it cheap: it runs on the hit path.
pub trait AccessHook: Send + Sync {
    fn on_access(&self, file: FileId, block: u64, slice: usize, hit: bool, ctx: &AccessCtx);
    /// `count` consecutive blocks from `first`, all in `slice` and all hits (or all misses),
    /// in one call: the engine reports a request's blocks in such runs. The default calls
    /// [`on_access`](Self::on_access) for each block in order; a hook that only counts can
    /// do a run in one step.
    fn on_run(
        &self,
        file: FileId,
        first: u64,
        count: u64,
        slice: usize,
        hit: bool,
        ctx: &AccessCtx,
    ) {
        for b in first..first.saturating_add(count) {
            self.on_access(file, b, slice, hit, ctx);
        }
    }
}

/// Runs the copy of a request on another node: forwarding a request to the thread that sits
/// next to its data (SAFS, tgt) instead of moving the data or the caller.
pub trait Router: Send + Sync {
    fn name(&self) -> String;
    /// Whether work on data held by a slice on `node` should run there rather than on the
    /// calling thread.
    fn should_route(&self, node: u32) -> bool;
    /// Runs `job` on a thread of `node` and returns once it has finished (so `job` may borrow
    /// from the caller). Fails if `node` has no worker; `job` has then not run.
    fn run_on(&self, node: u32, job: &mut (dyn FnMut() + Send)) -> io::Result<()>;
}

pub use crate::error::IntegrityFailure;

/// Per-block integrity: sums computed while a block is written back, checked on every load
/// from the device.
pub trait BlockIntegrity: Send + Sync {
    fn name(&self) -> String;
    /// Called once when the engine first opens `path` as `file`, before any other call for it
    /// (a store that keeps sums of `block_size`-byte blocks beside the data opens or creates
    /// them here, writing through `backend`). An error fails the open.
    fn file_opened(
        &self,
        _file: FileId,
        _path: &std::path::Path,
        _writable: bool,
        _block_size: usize,
        _backend: &std::sync::Arc<dyn crate::io::Backend>,
    ) -> io::Result<()> {
        Ok(())
    }
    /// Before the device write of `blocks` of `file`: a durable store records that they may
    /// change. On error the write is not issued.
    fn begin_write(&self, _file: FileId, _blocks: &[u64]) -> io::Result<()> {
        Ok(())
    }
    /// `fsync` of `file`: runs `data_sync` (the data file's `fdatasync`) and makes the sums of
    /// the blocks written before it durable.
    fn sync(&self, _file: FileId, data_sync: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        data_sync()
    }
    /// Computes the sums of `blocks` while `io` (the device write of the same blocks) runs,
    /// and returns them once both are done.
    fn sum_while(&self, blocks: &[&[u8]], io: &mut dyn FnMut()) -> Vec<u64>;
    /// `block` of `file` reached the device with `sum` (ends a `begin_write`).
    fn commit(&self, file: FileId, block: u64, sum: u64);
    /// The write of `block` failed: what the device holds is unknown (ends a `begin_write`).
    fn invalidate(&self, file: FileId, block: u64);
    /// Checks a block just read from the device. A block with no known sum passes.
    fn verify(&self, file: FileId, block: u64, data: &[u8]) -> Result<(), IntegrityFailure>;
}
