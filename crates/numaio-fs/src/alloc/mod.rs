//! The block allocator: allocation groups per device, placement by policy, fallback across
//! nodes.
//!
//! A volume's devices are split into allocation groups, each wholly inside one device, so
//! each group belongs to exactly one node (NUMA-aware ext4 trims each node's device to whole
//! block groups for the same reason). [`Allocator::alloc`] asks the file's
//! [`PlacementPolicy`] for the node each block should live on, then
//! searches that node's groups first and the other nodes round robin, so a full or failing
//! node never fails a write while another node has room.
//!
//! The allocator's state lives in memory: it is rebuilt at mount from the file extents
//! ([`Allocator::mark_used`]), so it needs no on-device free-space map of its own that could
//! disagree with them. Freed blocks stay unusable until [`Allocator::commit_frees`]: a block
//! freed by an operation that is not yet durable must not be handed to another file, or a
//! crash would leave the old file pointing at the new file's data.
//!
//! How blocks are chosen (NUMA-aware ext4's rules, in user space):
//!
//! * Each node's free space is one free-extent map indexed by address and by length, so a
//!   lookup at a goal, a best fit and a largest-first take are O(log n) in the number of
//!   free runs; free runs never span two groups. A request whose blocks all want one node is
//!   served as a whole, never block by block; interleave and stripe requests are cut into
//!   runs at computed chunk boundaries.
//! * On a node, blocks come from the file's preallocation there, then `req.goal` (the block
//!   after the file's previous extent) if free, then the node's stream goal (the block after
//!   the node's last allocation, so consecutive small files of different writers pack
//!   together instead of scattering over the groups), then the smallest run that holds the
//!   whole request, then the largest runs.
//! * A file that grows sequentially gets up to [`DEFAULT_PREALLOC_BLOCKS`] blocks reserved
//!   right after its allocation on that node, for its next request there. Reserved blocks
//!   are not in use and count as free; [`Allocator::release_prealloc`] returns them, and an
//!   allocation that finds nothing else free anywhere takes them back.
//! * Node order: the preferred node, then the other nodes round robin from a rotating start
//!   (nearest first when [`Allocator::with_distances`] gave distances), a file already
//!   continuing on a fallback node staying there; nodes with an I/O error
//!   ([`Allocator::node_failed`]) or found full go last. Both count as soft errors in
//!   [`NodeUsage::soft_errors`]. [`FsError::NoSpace`] only when the volume as a whole lacks
//!   the blocks, and then nothing was allocated.
//! * A writer on a node without storage is served by the nearest node with storage (by
//!   distance), else by the node its file already continues on, else round robin.

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

mod freemap;
mod placement;
mod prealloc;
#[cfg(test)]
mod tests_rules;

use crate::{FsError, PlacementPolicy};
use freemap::FreeMap;
use prealloc::Prealloc;
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

/// Blocks reserved ahead for a sequentially growing file on one node, at most (1 MiB).
pub const DEFAULT_PREALLOC_BLOCKS: u64 = 256;

/// The block allocator of one volume.
#[derive(Debug, Clone)]
pub struct Allocator {
    groups: Vec<GroupInfo>,
    /// (dev, start) → (blocks, node): the groups by address.
    group_at: BTreeMap<(u16, u64), (u64, u32)>,
    /// Node of each device (index = dev).
    dev_node: BTreeMap<u16, u32>,
    /// The nodes that hold storage, ascending.
    nodes: Vec<u32>,
    /// Free runs per node.
    free: BTreeMap<u32, FreeMap>,
    /// Freed, not yet committed: (dev, start) → len.
    pending: BTreeMap<(u16, u64), u64>,
    /// Frees covered by the commit in flight (see [`Allocator::seal_frees`]).
    sealed: BTreeMap<(u16, u64), u64>,
    prealloc: Prealloc,
    prealloc_max: u64,
    /// Per-node stream goal: the block after the node's last allocation, where the next one
    /// (of any file) starts when it is free.
    stream: BTreeMap<u32, (u16, u64)>,
    /// Per file: the logical block right after its last allocation (sequential detection).
    next_block: HashMap<u64, u64>,
    usage: BTreeMap<u32, NodeUsage>,
    /// Nodes with an I/O error recorded: tried last until [`Allocator::node_recovered`].
    failed: BTreeSet<u32>,
    /// Nodes found full: tried last among the fallbacks until blocks are freed there.
    full: BTreeSet<u32>,
    /// (from, to) → distance, when known.
    distances: BTreeMap<(u32, u32), u32>,
    /// Where the round robin over fallback nodes starts next.
    rotor: u64,
    /// Round robin for writers on nodes without storage when no distances are known.
    cpu_only_rr: u64,
    rejected_frees: u64,
}

impl Allocator {
    /// An allocator over `groups`, all free. Fails if groups overlap or are empty.
    pub fn new(groups: Vec<GroupInfo>) -> Result<Allocator, FsError> {
        let mut group_at = BTreeMap::new();
        let mut dev_node: BTreeMap<u16, u32> = BTreeMap::new();
        let mut usage: BTreeMap<u32, NodeUsage> = BTreeMap::new();
        for g in &groups {
            if g.blocks == 0 {
                return Err(FsError::Invalid(format!("empty allocation group {g:?}")));
            }
            if g.start.checked_add(g.blocks).is_none() {
                return Err(FsError::Invalid(format!(
                    "allocation group {g:?} runs past the largest block number"
                )));
            }
            match dev_node.insert(g.dev, g.node) {
                Some(other) if other != g.node => {
                    return Err(FsError::Invalid(format!(
                        "device {} has groups on node {other} and on node {}: a device belongs \
                         to one node",
                        g.dev, g.node
                    )))
                }
                _ => {}
            }
            if group_at
                .insert((g.dev, g.start), (g.blocks, g.node))
                .is_some()
            {
                return Err(FsError::Invalid(format!(
                    "allocation groups overlap: two start at block {} of device {}",
                    g.start, g.dev
                )));
            }
            let u = usage.entry(g.node).or_insert(NodeUsage {
                node: g.node,
                total_blocks: 0,
                free_blocks: 0,
                fallback_blocks: 0,
                soft_errors: 0,
            });
            u.total_blocks += g.blocks;
        }
        let sorted: Vec<_> = group_at.iter().collect();
        for w in sorted.windows(2) {
            let ((d0, s0), (b0, _)) = w[0];
            let ((d1, s1), _) = w[1];
            if d0 == d1 && s0 + b0 > *s1 {
                return Err(FsError::Invalid(format!(
                    "allocation groups overlap on device {d0}: blocks {s0}+{b0} and {s1}"
                )));
            }
        }
        let mut a = Allocator {
            nodes: usage.keys().copied().collect(),
            groups,
            group_at,
            dev_node,
            free: BTreeMap::new(),
            pending: BTreeMap::new(),
            sealed: BTreeMap::new(),
            prealloc: Prealloc::default(),
            prealloc_max: DEFAULT_PREALLOC_BLOCKS,
            stream: BTreeMap::new(),
            next_block: HashMap::new(),
            usage,
            failed: BTreeSet::new(),
            full: BTreeSet::new(),
            distances: BTreeMap::new(),
            rotor: 0,
            cpu_only_rr: 0,
            rejected_frees: 0,
        };
        for g in a.groups.clone() {
            a.insert_free(g.node, g.dev, g.start, g.blocks);
        }
        Ok(a)
    }

    /// The node-to-node distances (`(from, to) → distance`, as in
    /// `/sys/devices/system/node/nodeN/distance`): a writer on a node without storage then
    /// gets the nearest node that has some, and fallbacks go to the nearest nodes first.
    pub fn with_distances(
        mut self,
        distances: impl IntoIterator<Item = ((u32, u32), u32)>,
    ) -> Self {
        self.distances = distances.into_iter().collect();
        self
    }

    /// At most `blocks` blocks reserved ahead per (file, node); 0 turns preallocation off.
    pub fn with_prealloc(mut self, blocks: u64) -> Self {
        self.prealloc_max = blocks;
        self
    }

    pub fn groups(&self) -> &[GroupInfo] {
        &self.groups
    }

    /// The nodes that hold storage, ascending.
    pub fn nodes(&self) -> Vec<u32> {
        self.nodes.clone()
    }

    /// The node of device `dev`, if the volume has it.
    pub fn node_of_dev(&self, dev: u16) -> Option<u32> {
        self.dev_node.get(&dev).copied()
    }

    /// The group holding `block` of `dev`: (start, blocks, node).
    fn group_of(&self, dev: u16, block: u64) -> Option<(u64, u64, u32)> {
        self.group_at
            .range(..=(dev, block))
            .next_back()
            .filter(|(&(d, s), &(b, _))| d == dev && block < s + b)
            .map(|(&(_, s), &(b, n))| (s, b, n))
    }

    /// Whether every block of `e` lies in some group (of one node).
    fn in_groups(&self, e: &Extent) -> Option<u32> {
        let end = e.start.checked_add(e.len)?;
        let mut at = e.start;
        let mut node = None;
        while at < end {
            let (s, b, n) = self.group_of(e.dev, at)?;
            node = Some(n);
            at = s + b;
        }
        node
    }

    /// Adds a free run, split at group boundaries so no free run spans two groups.
    fn insert_free(&mut self, node: u32, dev: u16, start: u64, len: u64) {
        let group_at = &self.group_at;
        let joinable = |d: u16, at: u64| !group_at.contains_key(&(d, at));
        self.free
            .entry(node)
            .or_default()
            .insert(dev, start, len, joinable);
        self.full.remove(&node);
    }

    /// Free blocks on `node`, reserved ones included.
    fn free_on(&self, node: u32) -> u64 {
        self.free.get(&node).map_or(0, FreeMap::total) + self.prealloc.reserved_on(node)
    }

    /// Marks `e` as in use (at mount, from the file extents). Fails if any block of it is
    /// outside every group or already in use.
    pub fn mark_used(&mut self, e: Extent) -> Result<(), String> {
        if e.len == 0 {
            return Err(format!("extent {e:?} is empty"));
        }
        let node = self
            .in_groups(&e)
            .ok_or_else(|| format!("extent {e:?} is not inside the allocation groups"))?;
        // Blocks reserved ahead are not in use: give the reservations back first.
        for ino in self.prealloc.overlapping(e.dev, e.start, e.len) {
            self.release_prealloc(ino);
        }
        let map = self.free.entry(node).or_default();
        if !map.covers(e.dev, e.start, e.len) {
            return Err(format!(
                "extent {e:?} is already in use (claimed twice, or freed but not committed)"
            ));
        }
        map.remove_range(e.dev, e.start, e.len);
        Ok(())
    }

    /// The node the policy wants logical block `file_block` on.
    pub fn preferred_node(&self, req: &AllocRequest, file_block: u64) -> u32 {
        placement::policy_run(
            req.policy,
            &self.nodes,
            req.ino,
            req.caller_node,
            req.home_node,
            file_block,
            file_block + 1,
        )
        .0
    }

    /// The storage node that serves blocks wanting `node`: itself when it has storage, else
    /// the nearest one by distance, else the node the file already continues on (its goal),
    /// else the storage nodes round robin.
    fn serving_node(&mut self, node: u32, req: &AllocRequest) -> u32 {
        if self.nodes.binary_search(&node).is_ok() {
            return node;
        }
        // Nearest among the nodes with room and no I/O error, else nearest of all.
        let healthy: Vec<u32> = self
            .nodes
            .iter()
            .copied()
            .filter(|&n| !self.failed.contains(&n) && self.free_on(n) > 0)
            .collect();
        if let Some(n) = placement::nearest(&self.distances, node, &healthy, req.ino)
            .or_else(|| placement::nearest(&self.distances, node, &self.nodes, req.ino))
        {
            return n;
        }
        if let Some(n) = req.goal.and_then(|(dev, _)| self.node_of_dev(dev)) {
            return n;
        }
        let n = self.nodes[(self.cpu_only_rr % self.nodes.len() as u64) as usize];
        self.cpu_only_rr += 1;
        n
    }

    /// Allocates `req.blocks` blocks, all or nothing: each run of blocks from its preferred
    /// node when it has room, else from the other nodes in turn. Fails with
    /// [`FsError::NoSpace`] only when the whole volume lacks room.
    ///
    /// On a node, blocks come from, in order: the file's preallocation there, `req.goal`
    /// (so a file stays contiguous across writes), the node's stream goal (so consecutive
    /// allocations of different files stay together), the smallest free run that holds the
    /// whole request, the largest free runs. A file that grows sequentially gets blocks
    /// reserved after its allocation (see [`Allocator::with_prealloc`]).
    pub fn alloc(&mut self, req: &AllocRequest) -> Result<Vec<Allocated>, FsError> {
        if req.blocks == 0 {
            return Ok(Vec::new());
        }
        let free: u64 = self.nodes.iter().map(|&n| self.free_on(n)).sum();
        if req.blocks > free {
            return Err(FsError::NoSpace);
        }
        let end = req.file_block.checked_add(req.blocks).ok_or_else(|| {
            FsError::Invalid(format!(
                "file block {} + {} overflows",
                req.file_block, req.blocks
            ))
        })?;
        let sequential =
            req.file_block > 0 && self.next_block.get(&req.ino) == Some(&req.file_block);
        let mut out: Vec<Allocated> = Vec::new();
        let mut full_noted = BTreeSet::new();
        let mut b = req.file_block;
        let mut goal = req.goal;
        while b < end {
            let (want, run) = placement::policy_run(
                req.policy,
                &self.nodes,
                req.ino,
                req.caller_node,
                req.home_node,
                b,
                end,
            );
            let pref = self.serving_node(want, req);
            self.place_run(
                req.ino,
                pref,
                run,
                goal,
                sequential,
                &mut full_noted,
                &mut out,
            );
            goal = out
                .last()
                .map(|a| (a.extent.dev, a.extent.start + a.extent.len));
            b += run;
        }
        self.next_block.insert(req.ino, end);
        Ok(merge(out))
    }

    /// Places `run` blocks that want node `pref`.
    #[allow(clippy::too_many_arguments)]
    fn place_run(
        &mut self,
        ino: u64,
        pref: u32,
        run: u64,
        goal: Option<(u16, u64)>,
        sequential: bool,
        full_noted: &mut BTreeSet<u32>,
        out: &mut Vec<Allocated>,
    ) {
        // Fast path: the wanted node has the room.
        let mut left = run;
        if !self.failed.contains(&pref) {
            left -= self.take_on(pref, ino, left, goal, sequential, pref, out);
            if left == 0 {
                return;
            }
        }
        let (failed, full) = (&self.failed, &self.full);
        let order =
            placement::fallback_order(pref, &self.nodes, self.rotor, &self.distances, |n| {
                failed.contains(&n) || (n != pref && full.contains(&n))
            });
        let mut order = order;
        // A file that already continues on a fallback node stays there while it has room,
        // rather than following the rotation to yet another node.
        if let Some(g) = goal.and_then(|(dev, _)| self.node_of_dev(dev)) {
            if g != pref && !self.failed.contains(&g) && self.free_on(g) > 0 {
                if let Some(i) = order.iter().position(|&n| n == g) {
                    let at = usize::from(order.first() == Some(&pref));
                    if i > at {
                        order.remove(i);
                        order.insert(at, g);
                    }
                }
            }
        }
        let mut fell_back = false;
        for &node in &order {
            left -= self.take_on(node, ino, left, goal, sequential, pref, out);
            if node == pref {
                // Other files' reservations on the wanted node yield before the blocks go
                // to a remote node: locality matters more than a guess at future appends.
                left -= self.steal_on(node, ino, left, goal, pref, out);
            }
            if left == 0 {
                break;
            }
            if node == pref && full_noted.insert(pref) {
                // Node full: a soft error, as NUMA-aware ext4 records before trying the next node.
                self.full.insert(pref);
                if let Some(u) = self.usage.get_mut(&pref) {
                    u.soft_errors += 1;
                }
            }
            fell_back = true;
        }
        if left > 0 {
            // Nothing free anywhere: take back blocks reserved ahead on the other nodes.
            for &node in &order {
                left -= self.steal_on(node, ino, left, goal, pref, out);
                if left == 0 {
                    break;
                }
            }
        }
        debug_assert_eq!(left, 0, "free space was counted first");
        if fell_back || order.first() != Some(&pref) {
            self.rotor = self.rotor.wrapping_add(1);
        }
    }

    /// Takes back other files' reservations on `node`, one at a time, until `max` blocks
    /// are placed there or none is left; returns how many blocks were placed.
    fn steal_on(
        &mut self,
        node: u32,
        ino: u64,
        max: u64,
        goal: Option<(u16, u64)>,
        pref: u32,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        let mut got = 0;
        while got < max {
            let Some(e) = self.prealloc.steal_one(node) else {
                break;
            };
            self.insert_free(node, e.dev, e.start, e.len);
            got += self.take_on(node, ino, max - got, goal, false, pref, out);
        }
        got
    }

    /// Takes up to `max` blocks for `ino` on `node`; returns how many.
    #[allow(clippy::too_many_arguments)]
    fn take_on(
        &mut self,
        node: u32,
        ino: u64,
        max: u64,
        goal: Option<(u16, u64)>,
        sequential: bool,
        pref: u32,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        let mut got = 0;
        let mut cursor = goal.filter(|&(dev, _)| self.dev_node.get(&dev) == Some(&node));
        let mut pieces = Vec::new();
        if let Some(e) = self.prealloc.take(ino, node, max) {
            got += e.len;
            cursor = Some((e.dev, e.start + e.len));
            pieces.push(e);
        }
        let stream = self.stream.get(&node).copied();
        let mut tried_stream = false;
        if let Some(map) = self.free.get_mut(&node) {
            while got < max {
                let want = max - got;
                let mut piece = cursor.and_then(|(d, s)| map.take_at(d, s, want));
                if piece.is_none() && !tried_stream {
                    tried_stream = true;
                    piece = stream.and_then(|(d, s)| map.take_at(d, s, want));
                }
                let piece = piece
                    .or_else(|| map.take_fit(want))
                    .or_else(|| map.take_largest(want));
                let Some(e) = piece else { break };
                got += e.len;
                cursor = Some((e.dev, e.start + e.len));
                pieces.push(e);
            }
            // Reserve ahead for a file that keeps growing, right after what it got.
            // Reservations never hold more than half of what is left free on the node, so
            // a filling node does not spend its last blocks on guesses that must be stolen
            // back.
            let room = map.total() / 2;
            if sequential
                && got > 0
                && self.prealloc_max > 0
                && !self.prealloc.has(ino, node)
                && self.prealloc.reserved_on(node) < room
            {
                let ahead = max
                    .next_power_of_two()
                    .max(16)
                    .min(self.prealloc_max)
                    .min(room - self.prealloc.reserved_on(node));
                if let Some(r) = cursor.and_then(|(d, s)| map.take_at(d, s, ahead)) {
                    cursor = Some((r.dev, r.start + r.len));
                    self.prealloc.reserve(ino, node, r);
                }
            }
        }
        if let Some(c) = cursor.filter(|_| got > 0) {
            self.stream.insert(node, c);
        }
        if got > 0 && node != pref {
            if let Some(u) = self.usage.get_mut(&node) {
                u.fallback_blocks += got;
            }
        }
        out.extend(pieces.into_iter().map(|extent| Allocated {
            extent,
            node,
            preferred: pref,
        }));
        got
    }

    /// Frees `e` once the operation that freed it is durable (see [`Allocator::commit_frees`]).
    /// An extent that is not wholly in use (outside the groups, free, reserved, or already
    /// freed) is ignored and counted (see [`Allocator::rejected_frees`]); use
    /// [`Allocator::free_checked`] to hear why.
    pub fn free(&mut self, e: Extent) {
        if self.free_checked(e).is_err() {
            self.rejected_frees += 1;
        }
    }

    /// [`Allocator::free`] that says why an extent cannot be freed.
    pub fn free_checked(&mut self, e: Extent) -> Result<(), String> {
        if e.len == 0 {
            return Ok(());
        }
        let node = self
            .in_groups(&e)
            .ok_or_else(|| format!("freeing {e:?}: not inside the allocation groups"))?;
        if self
            .free
            .get(&node)
            .is_some_and(|m| m.overlaps(e.dev, e.start, e.len))
        {
            return Err(format!(
                "freeing {e:?}: some of its blocks are already free"
            ));
        }
        if !self.prealloc.overlapping(e.dev, e.start, e.len).is_empty() {
            return Err(format!(
                "freeing {e:?}: some of its blocks are reserved, not in use"
            ));
        }
        let end = e.start + e.len;
        let clash = [&self.pending, &self.sealed].iter().any(|m| {
            m.range(..(e.dev, end))
                .next_back()
                .is_some_and(|(&(d, s), &l)| d == e.dev && s + l > e.start)
        });
        if clash {
            return Err(format!(
                "freeing {e:?}: some of its blocks are freed already"
            ));
        }
        self.pending.insert((e.dev, e.start), e.len);
        Ok(())
    }

    /// Whether freed blocks wait for a commit (recorded or in flight) before they can be
    /// allocated again.
    pub fn frees_waiting(&self) -> bool {
        !self.pending.is_empty() || !self.sealed.is_empty()
    }

    /// Extents [`Allocator::free`] ignored because they were not in use.
    pub fn rejected_frees(&self) -> u64 {
        self.rejected_frees
    }

    /// Makes the blocks freed since the last call allocatable again.
    pub fn commit_frees(&mut self) {
        self.seal_frees();
        self.commit_sealed_frees();
    }

    /// Sets the blocks freed so far aside for the commit about to be written: frees made
    /// while it is in flight wait for the next one.
    pub fn seal_frees(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        self.sealed.extend(pending);
    }

    /// Makes the blocks set aside by [`Allocator::seal_frees`] allocatable again, once the
    /// commit recording their free is durable.
    pub fn commit_sealed_frees(&mut self) {
        for ((dev, start), len) in std::mem::take(&mut self.sealed) {
            // Split at group boundaries: a freed extent may span groups.
            let mut at = start;
            let end = start + len;
            while at < end {
                let Some((gs, gb, node)) = self.group_of(dev, at) else {
                    break;
                };
                let piece_end = (gs + gb).min(end);
                self.insert_free(node, dev, at, piece_end - at);
                at = piece_end;
            }
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

    /// Forgets the I/O error recorded on `node`: it takes its place in the order again.
    pub fn node_recovered(&mut self, node: u32) {
        self.failed.remove(&node);
    }

    /// Returns the blocks reserved ahead for `ino` (on close, truncate, unlink).
    pub fn release_prealloc(&mut self, ino: u64) {
        for (node, e) in self.prealloc.release_file(ino) {
            self.insert_free(node, e.dev, e.start, e.len);
        }
        self.next_block.remove(&ino);
    }

    /// Blocks reserved ahead, all files and nodes together.
    pub fn reserved_blocks(&self) -> u64 {
        self.prealloc.total()
    }

    /// Whether block `block` of `dev` is allocated (or freed but not yet committed).
    pub fn is_used(&self, dev: u16, block: u64) -> bool {
        let Some((_, _, node)) = self.group_of(dev, block) else {
            return false;
        };
        let free = self
            .free
            .get(&node)
            .is_some_and(|m| m.containing(dev, block).is_some());
        !free && !self.prealloc.contains(dev, block)
    }

    /// Space per node; blocks reserved ahead count as free.
    pub fn usage(&self) -> Vec<NodeUsage> {
        self.usage
            .values()
            .map(|u| NodeUsage {
                free_blocks: self.free_on(u.node),
                ..*u
            })
            .collect()
    }

    /// The node for a new top-level directory under [`PlacementPolicy::Directory`]: the
    /// volume's nodes round robin (ascending node ids) starting after `last` (the node the
    /// previous top-level directory got, kept in the metadata so that the round robin
    /// survives unmounts and crashes), as JeriFS does, skipping nodes that are full or have
    /// an I/O error recorded (the node with the most free space when all are). Round robin
    /// rather than "most free" so that directories spread evenly over unequal nodes instead
    /// of all landing on the biggest one until it is as empty as the others.
    pub fn directory_home(&self, last: Option<u32>) -> u32 {
        let n = self.nodes.len();
        let first = last.map_or(0, |l| self.nodes.partition_point(|&x| x <= l));
        for i in 0..n {
            let node = self.nodes[(first + i) % n];
            if !self.failed.contains(&node) && self.free_on(node) > 0 {
                return node;
            }
        }
        self.nodes
            .iter()
            .copied()
            .max_by_key(|&node| (self.free_on(node), std::cmp::Reverse(node)))
            .unwrap_or(0)
    }
}

/// Joins pieces that continue one another on the same device and node.
fn merge(pieces: Vec<Allocated>) -> Vec<Allocated> {
    let mut out: Vec<Allocated> = Vec::with_capacity(pieces.len());
    for p in pieces {
        if let Some(last) = out.last_mut() {
            if last.node == p.node
                && last.preferred == p.preferred
                && last.extent.dev == p.extent.dev
                && last.extent.start + last.extent.len == p.extent.start
            {
                last.extent.len += p.extent.len;
                continue;
            }
        }
        out.push(p);
    }
    out
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
