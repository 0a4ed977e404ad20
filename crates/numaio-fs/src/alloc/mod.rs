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

use crate::{FsError, PlacementPolicy, BLOCK_SIZE};
use std::collections::BTreeMap;

/// What an allocation is for: the file, the logical blocks, and who writes them.
#[derive(Debug, Clone)]
pub struct AllocRequest<'a> {
    pub ino: u64,
    /// First logical block of the file to place.
    pub file_block: u64,
    /// Number of blocks (at least 1).
    pub blocks: u64,
    pub policy: &'a PlacementPolicy,
    /// Node of the writing thread.
    pub caller_node: u32,
    /// For [`PlacementPolicy::Directory`]: the node of the file's top-level directory.
    pub home_node: Option<u32>,
    /// The physical block right after the file's previous extent, to stay contiguous.
    pub goal: Option<(u16, u64)>,
}

/// One piece of an allocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Allocated {
    pub extent: Extent,
    /// Node the blocks are on.
    pub node: u32,
    /// Node the policy asked for; differs from `node` after a fallback.
    pub preferred: u32,
}

/// Space on one node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeUsage {
    pub node: u32,
    pub total_blocks: u64,
    pub free_blocks: u64,
    /// Blocks allocated here although the policy asked for another node.
    pub fallback_blocks: u64,
    /// Soft errors recorded (node full or I/O error) that sent allocations elsewhere.
    pub soft_errors: u64,
}

/// The block allocator of one volume.
#[derive(Debug, Clone)]
pub struct Allocator {
    groups: Vec<GroupInfo>,
    /// Free runs per node: (dev, start) → len.
    free: BTreeMap<u32, BTreeMap<(u16, u64), u64>>,
    pending: Vec<Extent>,
    usage: BTreeMap<u32, NodeUsage>,
    failed: std::collections::BTreeSet<u32>,
    next_home: usize,
}

impl Allocator {
    /// An allocator over `groups`, all free. Fails if groups overlap or are empty.
    pub fn new(groups: Vec<GroupInfo>) -> Result<Allocator, FsError> {
        let mut free: BTreeMap<u32, BTreeMap<(u16, u64), u64>> = BTreeMap::new();
        let mut usage: BTreeMap<u32, NodeUsage> = BTreeMap::new();
        let mut sorted = groups.clone();
        sorted.sort_by_key(|g| (g.dev, g.start));
        for w in sorted.windows(2) {
            if w[0].dev == w[1].dev && w[0].start + w[0].blocks > w[1].start {
                return Err(FsError::Invalid(format!(
                    "allocation groups overlap: {w:?}"
                )));
            }
        }
        for g in &groups {
            if g.blocks == 0 {
                return Err(FsError::Invalid(format!("empty allocation group {g:?}")));
            }
            free.entry(g.node)
                .or_default()
                .insert((g.dev, g.start), g.blocks);
            let u = usage.entry(g.node).or_insert(NodeUsage {
                node: g.node,
                total_blocks: 0,
                free_blocks: 0,
                fallback_blocks: 0,
                soft_errors: 0,
            });
            u.total_blocks += g.blocks;
            u.free_blocks += g.blocks;
        }
        Ok(Allocator {
            groups,
            free,
            pending: Vec::new(),
            usage,
            failed: Default::default(),
            next_home: 0,
        })
    }

    pub fn groups(&self) -> &[GroupInfo] {
        &self.groups
    }

    /// The nodes that hold storage, ascending.
    pub fn nodes(&self) -> Vec<u32> {
        self.usage.keys().copied().collect()
    }

    /// The node of device `dev`, if the volume has it.
    pub fn node_of_dev(&self, dev: u16) -> Option<u32> {
        self.groups.iter().find(|g| g.dev == dev).map(|g| g.node)
    }

    /// Marks `e` as in use (at mount, from the file extents). Fails if any block of it is
    /// outside every group or already in use.
    pub fn mark_used(&mut self, e: Extent) -> Result<(), String> {
        let node = self
            .node_of_dev(e.dev)
            .ok_or_else(|| format!("extent {e:?} is on no device of the volume"))?;
        let map = self.free.get_mut(&node).expect("node has groups");
        let found = map
            .range(..=(e.dev, e.start))
            .next_back()
            .map(|(&k, &v)| (k, v))
            .filter(|&((d, s), len)| d == e.dev && s + len >= e.start + e.len);
        let Some(((d, s), len)) = found else {
            return Err(format!(
                "extent {e:?} is outside the free space (in use twice or outside every group)"
            ));
        };
        map.remove(&(d, s));
        if e.start > s {
            map.insert((d, s), e.start - s);
        }
        let end = s + len;
        if e.start + e.len < end {
            map.insert((d, e.start + e.len), end - e.start - e.len);
        }
        self.usage.get_mut(&node).expect("node").free_blocks -= e.len;
        Ok(())
    }

    /// The node the policy wants logical block `file_block` on.
    pub fn preferred_node(&self, req: &AllocRequest, file_block: u64) -> u32 {
        let nodes = self.nodes();
        let n = nodes.len() as u64;
        match req.policy {
            PlacementPolicy::WriterLocal => req.caller_node,
            PlacementPolicy::Directory => req.home_node.unwrap_or(req.caller_node),
            PlacementPolicy::Interleave => nodes[((req.ino + file_block) % n) as usize],
            PlacementPolicy::Stripe { nodes: k, chunk } => {
                let k = (*k as u64).clamp(1, n);
                let c = file_block * BLOCK_SIZE / chunk.max(&BLOCK_SIZE);
                nodes[((req.ino + c % k) % n) as usize]
            }
            PlacementPolicy::Fixed(node) => *node,
        }
    }

    /// Allocates `req.blocks` blocks, all or nothing: each run of blocks from its preferred
    /// node when it has room, else from the other nodes in turn. Fails with
    /// [`FsError::NoSpace`] only when the whole volume lacks room.
    pub fn alloc(&mut self, req: &AllocRequest) -> Result<Vec<Allocated>, FsError> {
        let free: u64 = self.usage.values().map(|u| u.free_blocks).sum();
        if req.blocks == 0 || req.blocks > free {
            return if req.blocks == 0 {
                Ok(Vec::new())
            } else {
                Err(FsError::NoSpace)
            };
        }
        let nodes = self.nodes();
        let mut out = Vec::new();
        let mut b = req.file_block;
        let end = req.file_block + req.blocks;
        while b < end {
            let pref = self.preferred_node(req, b);
            let mut run = 1;
            while b + run < end && self.preferred_node(req, b + run) == pref {
                run += 1;
            }
            let start = nodes.iter().position(|&n| n == pref).unwrap_or(0);
            let mut order: Vec<u32> = nodes[start..]
                .iter()
                .chain(&nodes[..start])
                .copied()
                .collect();
            order.sort_by_key(|n| (*n != pref, self.failed.contains(n)));
            let mut left = run;
            for node in order {
                while left > 0 {
                    let Some(map) = self.free.get_mut(&node) else {
                        break;
                    };
                    let Some((&(dev, s), &len)) = map.iter().next() else {
                        break;
                    };
                    let take = len.min(left);
                    map.remove(&(dev, s));
                    if take < len {
                        map.insert((dev, s + take), len - take);
                    }
                    let u = self.usage.get_mut(&node).expect("node");
                    u.free_blocks -= take;
                    if node != pref {
                        u.fallback_blocks += take;
                    }
                    out.push(Allocated {
                        extent: Extent {
                            dev,
                            start: s,
                            len: take,
                        },
                        node,
                        preferred: pref,
                    });
                    left -= take;
                }
                if left == 0 {
                    break;
                }
            }
            debug_assert_eq!(left, 0, "free space was counted first");
            b += run;
        }
        Ok(out)
    }

    /// Frees `e` once the operation that freed it is durable (see [`Allocator::commit_frees`]).
    pub fn free(&mut self, e: Extent) {
        self.pending.push(e);
    }

    /// Makes the blocks freed since the last call allocatable again.
    pub fn commit_frees(&mut self) {
        for e in std::mem::take(&mut self.pending) {
            let Some(node) = self.node_of_dev(e.dev) else {
                continue;
            };
            self.free
                .entry(node)
                .or_default()
                .insert((e.dev, e.start), e.len);
            self.usage.get_mut(&node).expect("node").free_blocks += e.len;
        }
    }

    /// Records a soft error on `node` (an I/O error writing there): later allocations try
    /// it last.
    pub fn node_failed(&mut self, node: u32) {
        self.failed.insert(node);
        if let Some(u) = self.usage.get_mut(&node) {
            u.soft_errors += 1;
        }
    }

    /// Returns the blocks reserved ahead for `ino` (none are reserved by this allocator).
    pub fn release_prealloc(&mut self, _ino: u64) {}

    /// Whether block `block` of `dev` is allocated (or freed but not yet committed).
    pub fn is_used(&self, dev: u16, block: u64) -> bool {
        let Some(node) = self.node_of_dev(dev) else {
            return false;
        };
        let in_group = self
            .groups
            .iter()
            .any(|g| g.dev == dev && block >= g.start && block < g.start + g.blocks);
        let free = self.free[&node]
            .range(..=(dev, block))
            .next_back()
            .is_some_and(|(&(d, s), &len)| d == dev && block < s + len);
        in_group && !free
    }

    /// Space per node.
    pub fn usage(&self) -> Vec<NodeUsage> {
        self.usage.values().copied().collect()
    }

    /// The node for a new top-level directory under [`PlacementPolicy::Directory`]: the
    /// volume's nodes round robin.
    pub fn directory_home(&mut self) -> u32 {
        let nodes = self.nodes();
        let n = nodes[self.next_home % nodes.len()];
        self.next_home += 1;
        n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> Allocator {
        Allocator::new(vec![
            GroupInfo {
                dev: 0,
                node: 0,
                start: 10,
                blocks: 100,
            },
            GroupInfo {
                dev: 1,
                node: 1,
                start: 10,
                blocks: 100,
            },
        ])
        .unwrap()
    }

    #[test]
    fn writer_local_then_fallback_then_no_space() {
        let mut a = two_nodes();
        let p = PlacementPolicy::WriterLocal;
        let req = |blocks| AllocRequest {
            ino: 5,
            file_block: 0,
            blocks,
            policy: &p,
            caller_node: 1,
            home_node: None,
            goal: None,
        };
        let got = a.alloc(&req(60)).unwrap();
        assert!(got.iter().all(|x| x.node == 1));
        let got = a.alloc(&req(60)).unwrap();
        assert_eq!(
            got.iter()
                .filter(|x| x.node == 1)
                .map(|x| x.extent.len)
                .sum::<u64>(),
            40
        );
        assert_eq!(
            got.iter()
                .filter(|x| x.node == 0)
                .map(|x| x.extent.len)
                .sum::<u64>(),
            20
        );
        assert!(matches!(a.alloc(&req(81)), Err(FsError::NoSpace)));
        assert_eq!(
            a.alloc(&req(80))
                .unwrap()
                .iter()
                .map(|x| x.extent.len)
                .sum::<u64>(),
            80
        );
        let e = got[0].extent;
        a.free(e);
        assert!(a.is_used(e.dev, e.start));
        assert!(matches!(a.alloc(&req(1)), Err(FsError::NoSpace)));
        a.commit_frees();
        assert!(!a.is_used(e.dev, e.start));
    }

    #[test]
    fn mark_used_rejects_double_use() {
        let mut a = two_nodes();
        let e = Extent {
            dev: 0,
            start: 20,
            len: 5,
        };
        a.mark_used(e).unwrap();
        assert!(a
            .mark_used(Extent {
                dev: 0,
                start: 24,
                len: 1
            })
            .is_err());
        assert!(a
            .mark_used(Extent {
                dev: 0,
                start: 0,
                len: 1
            })
            .is_err());
        assert!(a.is_used(0, 22));
        assert!(!a.is_used(0, 25));
    }
}
