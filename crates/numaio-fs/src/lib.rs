//! # numaio-fs: a NUMA-aware file system store
//!
//! Jericho (JeriFS over JeriCache), NUMA-aware ext4 on persistent memory and ZonFS put NUMA
//! placement inside a file system, so that programs which just open files get it. This crate
//! is that store, in user space, over per-node block devices (or plain files standing in for
//! them) and over memory zones bound to nodes; `numaio mount` serves it through FUSE.
//!
//! Layers, bottom up:
//!
//! * [`store`]: where blocks live. A volume is a list of devices, each belonging to one NUMA
//!   node; a [`store::BlockStore`] reads, writes and syncs blocks of a device (plain file I/O,
//!   a memory zone bound to its node, or an in-memory image that can simulate a power cut
//!   for tests).
//! * [`alloc`]: the block allocator. Each device is split into allocation groups, so every
//!   group belongs to one node; a [`policy::PlacementPolicy`] (writer-local, directory,
//!   interleave, stripe, fixed) picks the node each new block should come from, and the
//!   allocator falls back to the other nodes when that node is full or failing.
//! * the format, metadata, journal and [`Fs`] API: see the modules' own documentation.
//!
//! Every operation takes a [`Caller`] (the node of the calling thread, its ids), so placement
//! decisions are testable without FUSE and without a multi-node machine.

pub mod alloc;
pub mod device;
mod error;
pub mod format;
mod fs;
pub mod fsck;
pub mod journal;
pub mod meta;
mod mkfs;
pub mod policy;
pub mod store;
pub mod volume;

pub use error::FsError;
pub use fs::*;
pub use mkfs::MkfsOptions;
pub use policy::PlacementPolicy;

/// Block size of every volume, in bytes: the page size, so that cache slots, O_DIRECT I/O and
/// memory-zone pages line up.
pub const BLOCK_SIZE: u64 = 4096;

/// Who performs an operation: decides writer-local placement and permission checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caller {
    /// NUMA node of the CPU the calling thread runs on.
    pub node: u32,
    pub uid: u32,
    pub gid: u32,
    /// Process id, for per-process accounting (0 when unknown).
    pub pid: u32,
    /// The calling thread, whose supplementary groups count in permission checks (0: none,
    /// only `gid`).
    pub tid: u32,
}

impl Caller {
    /// Root on `node`, pid 0: for tests and for tools that act on behalf of the volume.
    pub fn root_on(node: u32) -> Caller {
        Caller {
            node,
            uid: 0,
            gid: 0,
            pid: 0,
            tid: 0,
        }
    }

    /// Whether the caller belongs to group `gid`: its own gid, or one of its thread's
    /// supplementary groups, which FUSE does not pass on and are read from /proc only here,
    /// when the own gid did not match.
    pub fn in_group(&self, gid: u32) -> bool {
        self.gid == gid || (self.tid != 0 && supplementary_groups(self.tid).contains(&gid))
    }
}

/// The supplementary groups of thread `tid` (none when /proc cannot say).
fn supplementary_groups(tid: u32) -> Vec<u32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| l.strip_prefix("Groups:")).map(|g| {
                g.split_whitespace()
                    .filter_map(|x| x.parse().ok())
                    .collect()
            })
        })
        .unwrap_or_default()
}
