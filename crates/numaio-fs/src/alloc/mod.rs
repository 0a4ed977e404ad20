//! The block allocator: allocation groups per device, placement by policy, fallback across
//! nodes.
//!
//! A volume's devices are split into allocation groups, each wholly inside one device, so
//! each group belongs to exactly one node (NUMA-aware ext4 trims each node's device to whole
//! block groups for the same reason). [`Allocator::alloc`] asks the file's
//! [`PlacementPolicy`](crate::PlacementPolicy) for the node each block should live on, then
//! searches that node's groups first and the other nodes round robin, so a full or failing
//! node never fails a write while another node has room.
//!
//! The allocator's state lives in memory: it is rebuilt at mount from the file extents
//! ([`Allocator::mark_used`]), so it needs no on-device free-space map of its own that could
//! disagree with them. Freed blocks stay unusable until [`Allocator::commit_frees`]: a block
//! freed by an operation that is not yet durable must not be handed to another file, or a
//! crash would leave the old file pointing at the new file's data.

use serde::{Deserialize, Serialize};

/// One allocation group: a run of blocks wholly inside one device, hence on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GroupInfo {
    /// Index of the device in the volume.
    pub dev: u16,
    /// NUMA node of the device.
    pub node: u32,
    /// First block of the group on the device (in [`BLOCK_SIZE`](crate::BLOCK_SIZE) units).
    pub start: u64,
    /// Number of blocks in the group.
    pub blocks: u64,
}

/// A run of physical blocks on one device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Extent {
    pub dev: u16,
    /// First block on the device.
    pub start: u64,
    /// Number of blocks (at least 1).
    pub len: u64,
}
