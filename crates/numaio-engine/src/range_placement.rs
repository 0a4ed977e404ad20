//! Which slice caches a block: the [`Placement`] trait, the context it sees, and the
//! default policy, Jericho's range partitioning.
//!
//! Jericho gives each slice a fixed range of device blocks. We have no device address for a
//! file block, so each file is treated as its own run of blocks cut into ranges of
//! `range_blocks`; the ranges go to the slices round robin, starting at the slice
//! `file id mod slices` (so small files spread over the slices, as Jericho's per-directory
//! round robin does). Other policies (caller's node, file affinity, ...) live in
//! `placement.rs` (issue 6) and plug in through the same trait.

use crate::policy::FileId;
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
    /// Called once when the engine first opens `path` as `file` (e.g. to give the file a home
    /// slice from its directory or device), before any `slice_for` for it.
    fn file_opened(&self, _file: FileId, _path: &std::path::Path) {}
}

/// Called on every cached access (hit or miss), after the slot is pinned; for accounting and
/// work-moving policies. Keep it cheap: it runs on the hit path.
pub trait AccessHook: Send + Sync {
    fn on_access(&self, file: FileId, block: u64, slice: usize, hit: bool, ctx: &AccessCtx);
}

/// Jericho-style range partitioning (see the module doc).
#[derive(Debug, Clone)]
pub struct RangePlacement {
    pub slices: usize,
    pub range_blocks: u64,
}

impl RangePlacement {
    pub fn new(slices: usize, range_blocks: u64) -> Self {
        RangePlacement {
            slices: slices.max(1),
            range_blocks: range_blocks.max(1),
        }
    }
}

impl Placement for RangePlacement {
    fn name(&self) -> String {
        format!("range({} blocks)", self.range_blocks)
    }
    fn slice_for(&self, file: FileId, block: u64, _ctx: &AccessCtx) -> usize {
        ((file.0 as u64 + block / self.range_blocks) % self.slices as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_rotate_over_slices() {
        let p = RangePlacement::new(4, 8);
        let c = AccessCtx::new(false);
        let f = FileId(0);
        assert_eq!(p.slice_for(f, 0, &c), 0);
        assert_eq!(p.slice_for(f, 7, &c), 0);
        assert_eq!(p.slice_for(f, 8, &c), 1);
        assert_eq!(p.slice_for(f, 31, &c), 3);
        assert_eq!(p.slice_for(f, 32, &c), 0);
        assert_eq!(p.slice_for(FileId(1), 0, &c), 1);
    }
}
