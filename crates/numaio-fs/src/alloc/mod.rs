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
//! Each node's state (free map, reservations ahead, frees waiting for a commit, stream
//! goal) has its own lock, as each of Tofalos's per-node block groups is allocated on its
//! own: allocations on different nodes do not wait for each other, and the allocator is
//! used through `&self`, without the file system's volume lock. An allocation that spans
//! nodes locks them one after the other, never two at once. What an allocation reads about
//! other nodes (free space, failed, full) and the fallback rotor are atomics; the volume's
//! free count is one too, from which an allocation takes its share before it takes blocks,
//! so concurrent allocations never make one fail while the volume has room for it.
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
use parking_lot::{Mutex, MutexGuard};
use prealloc::Prealloc;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

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

/// Passes over every node an allocation makes before it gives up: more than one only when
/// concurrent allocations took the blocks it saw as it went (its share of the free space is
/// counted first, so they are somewhere), never in a serial run.
const MAX_PASSES: u32 = 64;

/// What of one node's allocation state changes: its free map, its reservations ahead, its
/// frees waiting for a commit, its stream goal. Behind the node's own lock, so allocations
/// on different nodes do not wait for each other.
#[derive(Debug, Default)]
struct NodeState {
    /// Free runs of the node.
    free: FreeMap,
    /// Blocks reserved ahead on this node, per file.
    prealloc: Prealloc,
    /// Freed, not yet committed: (dev, start) → len.
    pending: BTreeMap<(u16, u64), u64>,
    /// Frees covered by the commit in flight (see [`Allocator::seal_frees`]).
    sealed: BTreeMap<(u16, u64), u64>,
    /// The block after the node's last allocation, where the next one (of any file)
    /// starts when it is free.
    stream: Option<(u16, u64)>,
}

/// One storage node: its locked state, and what other nodes' allocations read about it
/// (free space, failed, full) as atomics, so choosing a node never takes a second lock.
#[derive(Debug)]
struct NodeSlot {
    node: u32,
    total_blocks: u64,
    state: Mutex<NodeState>,
    /// The free map's blocks plus those reserved ahead, as of the last unlock.
    free_blocks: AtomicU64,
    fallback_blocks: AtomicU64,
    soft_errors: AtomicU64,
    /// An I/O error recorded: tried last until [`Allocator::node_recovered`].
    failed: AtomicBool,
    /// Found full: tried last among the fallbacks until blocks are freed there.
    full: AtomicBool,
}

/// A node's state, locked; the node's free count is published when it is unlocked.
struct NodeGuard<'a> {
    slot: &'a NodeSlot,
    st: MutexGuard<'a, NodeState>,
}

impl std::ops::Deref for NodeGuard<'_> {
    type Target = NodeState;

    fn deref(&self) -> &NodeState {
        &self.st
    }
}

impl std::ops::DerefMut for NodeGuard<'_> {
    fn deref_mut(&mut self) -> &mut NodeState {
        &mut self.st
    }
}

impl Drop for NodeGuard<'_> {
    fn drop(&mut self) {
        // Still under the lock: the count never runs behind a later holder's.
        let n = self.st.free.total() + self.st.prealloc.reserved_on(self.slot.node);
        self.slot.free_blocks.store(n, Ordering::Release);
    }
}

/// The block allocator of one volume, used through `&self`.
///
/// Locks: the layout (groups, devices' nodes, distances, node list) is fixed at
/// construction and read without one; each node's [`NodeState`] has its own lock; the
/// per-file sequential detection has one more; the rotor and the failed and full marks are
/// atomics. An operation holds at most one of these locks at a time (an allocation that
/// spans nodes locks them one after the other), and calls nothing that locks while holding
/// one, so they form no cycle with each other or with the file system's locks, taken
/// before them.
#[derive(Debug)]
pub struct Allocator {
    groups: Vec<GroupInfo>,
    /// (dev, start) → (blocks, node): the groups by address.
    group_at: BTreeMap<(u16, u64), (u64, u32)>,
    /// Node of each device (index = dev).
    dev_node: BTreeMap<u16, u32>,
    /// The nodes that hold storage, ascending.
    nodes: Vec<u32>,
    /// One per entry of `nodes`, in the same order.
    slots: Vec<NodeSlot>,
    /// (from, to) → distance, when known.
    distances: BTreeMap<(u32, u32), u32>,
    prealloc_max: u64,
    /// Free blocks (reserved ahead included) of all nodes, less those promised to
    /// allocations in flight: an allocation takes its share here first, so it fails with
    /// [`FsError::NoSpace`] only when the volume lacks room, and then before it took any.
    available: AtomicU64,
    /// Per file: the logical block right after its last allocation (sequential detection).
    next_block: Mutex<HashMap<u64, u64>>,
    /// Where the round robin over fallback nodes starts next.
    rotor: AtomicU64,
    /// Round robin for writers on nodes without storage when no distances are known.
    cpu_only_rr: AtomicU64,
    rejected_frees: AtomicU64,
}

impl Allocator {
    /// An allocator over `groups`, all free. Fails if groups overlap or are empty.
    pub fn new(groups: Vec<GroupInfo>) -> Result<Allocator, FsError> {
        let mut group_at = BTreeMap::new();
        let mut dev_node: BTreeMap<u16, u32> = BTreeMap::new();
        let mut totals: BTreeMap<u32, u64> = BTreeMap::new();
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
            *totals.entry(g.node).or_default() += g.blocks;
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
        let slots = totals
            .iter()
            .map(|(&node, &total_blocks)| NodeSlot {
                node,
                total_blocks,
                state: Mutex::new(NodeState::default()),
                free_blocks: AtomicU64::new(0),
                fallback_blocks: AtomicU64::new(0),
                soft_errors: AtomicU64::new(0),
                failed: AtomicBool::new(false),
                full: AtomicBool::new(false),
            })
            .collect();
        let a = Allocator {
            nodes: totals.keys().copied().collect(),
            slots,
            groups,
            group_at,
            dev_node,
            distances: BTreeMap::new(),
            prealloc_max: DEFAULT_PREALLOC_BLOCKS,
            available: AtomicU64::new(totals.values().sum()),
            next_block: Mutex::new(HashMap::new()),
            rotor: AtomicU64::new(0),
            cpu_only_rr: AtomicU64::new(0),
            rejected_frees: AtomicU64::new(0),
        };
        for g in &a.groups {
            let mut st = a.lock(g.node).expect("a group's node has a slot");
            a.insert_free(&mut st, g.dev, g.start, g.blocks);
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

    fn slot(&self, node: u32) -> Option<&NodeSlot> {
        self.nodes.binary_search(&node).ok().map(|i| &self.slots[i])
    }

    /// Locks `node`'s state (None for a node without storage). The caller holds no other
    /// lock of the allocator.
    fn lock(&self, node: u32) -> Option<NodeGuard<'_>> {
        let slot = self.slot(node)?;
        Some(NodeGuard {
            slot,
            st: slot.state.lock(),
        })
    }

    fn is_failed(&self, node: u32) -> bool {
        self.slot(node)
            .is_some_and(|s| s.failed.load(Ordering::Acquire))
    }

    fn is_full(&self, node: u32) -> bool {
        self.slot(node)
            .is_some_and(|s| s.full.load(Ordering::Acquire))
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

    /// Adds a free run to the locked node `g`, split at group boundaries so no free run
    /// spans two groups.
    fn insert_free(&self, g: &mut NodeGuard<'_>, dev: u16, start: u64, len: u64) {
        let group_at = &self.group_at;
        let joinable = |d: u16, at: u64| !group_at.contains_key(&(d, at));
        g.free.insert(dev, start, len, joinable);
        g.slot.full.store(false, Ordering::Release);
    }

    /// Free blocks on `node`, reserved ones included (as of its last unlock).
    fn free_on(&self, node: u32) -> u64 {
        self.slot(node)
            .map_or(0, |s| s.free_blocks.load(Ordering::Acquire))
    }

    /// Free blocks of the volume, reserved ones included, less those promised to
    /// allocations in flight.
    pub fn free_blocks(&self) -> u64 {
        self.available.load(Ordering::Acquire)
    }

    /// Promises `n` blocks to an allocation, or fails if the volume lacks them.
    fn take_available(&self, n: u64) -> Result<(), FsError> {
        self.available
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| a.checked_sub(n))
            .map(|_| ())
            .map_err(|_| FsError::NoSpace)
    }

    /// Marks `e` as in use (at mount, from the file extents). Fails if any block of it is
    /// outside every group or already in use.
    pub fn mark_used(&self, e: Extent) -> Result<(), String> {
        if e.len == 0 {
            return Err(format!("extent {e:?} is empty"));
        }
        let node = self
            .in_groups(&e)
            .ok_or_else(|| format!("extent {e:?} is not inside the allocation groups"))?;
        // Blocks reserved ahead are not in use: give the reservations back first.
        let owners = self
            .lock(node)
            .map(|g| g.prealloc.overlapping(e.dev, e.start, e.len))
            .unwrap_or_default();
        for ino in owners {
            self.release_prealloc(ino);
        }
        let mut g = self.lock(node).ok_or("extent on a node without storage")?;
        if !g.free.covers(e.dev, e.start, e.len) {
            return Err(format!(
                "extent {e:?} is already in use (claimed twice, or freed but not committed)"
            ));
        }
        g.free.remove_range(e.dev, e.start, e.len);
        self.available.fetch_sub(e.len, Ordering::AcqRel);
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
    fn serving_node(&self, node: u32, req: &AllocRequest) -> u32 {
        if self.nodes.binary_search(&node).is_ok() {
            return node;
        }
        // Nearest among the nodes with room and no I/O error, else nearest of all.
        let healthy: Vec<u32> = self
            .nodes
            .iter()
            .copied()
            .filter(|&n| !self.is_failed(n) && self.free_on(n) > 0)
            .collect();
        if let Some(n) = placement::nearest(&self.distances, node, &healthy, req.ino)
            .or_else(|| placement::nearest(&self.distances, node, &self.nodes, req.ino))
        {
            return n;
        }
        if let Some(n) = req.goal.and_then(|(dev, _)| self.node_of_dev(dev)) {
            return n;
        }
        let rr = self.cpu_only_rr.fetch_add(1, Ordering::Relaxed);
        self.nodes[(rr % self.nodes.len() as u64) as usize]
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
    ///
    /// Allocations of different files run side by side, each locking one node at a time.
    /// Two allocations of the same file must not (the file system holds the file's lock).
    /// The blocks are in use until freed ([`Allocator::free`], once recorded) or given back
    /// ([`Allocator::give_back`], when never recorded).
    pub fn alloc(&self, req: &AllocRequest) -> Result<Vec<Allocated>, FsError> {
        if req.blocks == 0 {
            return Ok(Vec::new());
        }
        let end = req.file_block.checked_add(req.blocks).ok_or_else(|| {
            FsError::Invalid(format!(
                "file block {} + {} overflows",
                req.file_block, req.blocks
            ))
        })?;
        self.take_available(req.blocks)?;
        let sequential =
            req.file_block > 0 && self.next_block.lock().get(&req.ino) == Some(&req.file_block);
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
            let left = self.place_run(
                req.ino,
                pref,
                run,
                goal,
                sequential,
                &mut full_noted,
                &mut out,
            );
            if left > 0 {
                // Only if concurrent allocations kept taking what this one found: give
                // everything back rather than return part of the request.
                let got: u64 = out.iter().map(|a| a.extent.len).sum();
                self.give_back_extents(out.iter().map(|a| a.extent));
                self.available.fetch_add(req.blocks - got, Ordering::AcqRel);
                return Err(FsError::NoSpace);
            }
            goal = out
                .last()
                .map(|a| (a.extent.dev, a.extent.start + a.extent.len));
            b += run;
        }
        self.next_block.lock().insert(req.ino, end);
        Ok(merge(out))
    }

    /// Places `run` blocks that want node `pref`; returns how many it could not place
    /// (0 unless concurrent allocations took the room it was counted).
    #[allow(clippy::too_many_arguments)]
    fn place_run(
        &self,
        ino: u64,
        pref: u32,
        run: u64,
        goal: Option<(u16, u64)>,
        sequential: bool,
        full_noted: &mut BTreeSet<u32>,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        // Fast path: the wanted node has the room.
        let mut left = run;
        if !self.is_failed(pref) {
            left -= self.take_on(pref, ino, left, goal, sequential, pref, out);
            if left == 0 {
                return 0;
            }
        }
        for _ in 0..MAX_PASSES {
            let rotor = self.rotor.load(Ordering::Relaxed);
            let mut order =
                placement::fallback_order(pref, &self.nodes, rotor, &self.distances, |n| {
                    self.is_failed(n) || (n != pref && self.is_full(n))
                });
            // A file that already continues on a fallback node stays there while it has
            // room, rather than following the rotation to yet another node.
            if let Some(g) = goal.and_then(|(dev, _)| self.node_of_dev(dev)) {
                if g != pref && !self.is_failed(g) && self.free_on(g) > 0 {
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
                    // Other files' reservations on the wanted node yield before the blocks
                    // go to a remote node: locality matters more than a guess at future
                    // appends.
                    left -= self.steal_on(node, ino, left, goal, pref, out);
                }
                if left == 0 {
                    break;
                }
                if node == pref && full_noted.insert(pref) {
                    self.note_full(pref);
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
            if fell_back || order.first() != Some(&pref) {
                self.rotor.fetch_add(1, Ordering::Relaxed);
            }
            if left == 0 {
                return 0;
            }
            // The blocks counted for this allocation are on a node already passed: another
            // allocation took what was here and freed or gave back elsewhere meanwhile.
            std::thread::yield_now();
        }
        left
    }

    /// Records that the wanted node `node` is full, a soft error as NUMA-aware ext4 records
    /// before trying the next node; checked under the node's lock, so a free that came
    /// meanwhile (which clears the mark under that lock) is not overwritten.
    fn note_full(&self, node: u32) {
        if let Some(g) = self.lock(node) {
            if g.free.total() == 0 && g.prealloc.reserved_on(node) == 0 {
                g.slot.full.store(true, Ordering::Release);
                g.slot.soft_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Takes back other files' reservations on `node`, one at a time, until `max` blocks
    /// are placed there or none is left; returns how many blocks were placed.
    fn steal_on(
        &self,
        node: u32,
        ino: u64,
        max: u64,
        goal: Option<(u16, u64)>,
        pref: u32,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        let Some(mut g) = self.lock(node) else {
            return 0;
        };
        let mut got = 0;
        while got < max {
            let Some(e) = g.prealloc.steal_one(node) else {
                break;
            };
            self.insert_free(&mut g, e.dev, e.start, e.len);
            got += self.take_locked(&mut g, ino, max - got, goal, false, pref, out);
        }
        got
    }

    /// Takes up to `max` blocks for `ino` on `node`; returns how many.
    #[allow(clippy::too_many_arguments)]
    fn take_on(
        &self,
        node: u32,
        ino: u64,
        max: u64,
        goal: Option<(u16, u64)>,
        sequential: bool,
        pref: u32,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        match self.lock(node) {
            Some(mut g) => self.take_locked(&mut g, ino, max, goal, sequential, pref, out),
            None => 0,
        }
    }

    /// [`Allocator::take_on`] on the locked node `g`.
    #[allow(clippy::too_many_arguments)]
    fn take_locked(
        &self,
        g: &mut NodeGuard<'_>,
        ino: u64,
        max: u64,
        goal: Option<(u16, u64)>,
        sequential: bool,
        pref: u32,
        out: &mut Vec<Allocated>,
    ) -> u64 {
        let node = g.slot.node;
        let mut got = 0;
        let mut cursor = goal.filter(|&(dev, _)| self.dev_node.get(&dev) == Some(&node));
        let mut pieces = Vec::new();
        let st = &mut *g.st;
        if let Some(e) = st.prealloc.take(ino, node, max) {
            got += e.len;
            cursor = Some((e.dev, e.start + e.len));
            pieces.push(e);
        }
        let stream = st.stream;
        let mut tried_stream = false;
        let map = &mut st.free;
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
        // Reservations never hold more than half of what is left free on the node, so a
        // filling node does not spend its last blocks on guesses that must be stolen back.
        let room = map.total() / 2;
        if sequential
            && got > 0
            && self.prealloc_max > 0
            && !st.prealloc.has(ino, node)
            && st.prealloc.reserved_on(node) < room
        {
            let ahead = max
                .next_power_of_two()
                .max(16)
                .min(self.prealloc_max)
                .min(room - st.prealloc.reserved_on(node));
            if let Some(r) = cursor.and_then(|(d, s)| st.free.take_at(d, s, ahead)) {
                cursor = Some((r.dev, r.start + r.len));
                st.prealloc.reserve(ino, node, r);
            }
        }
        if let Some(c) = cursor.filter(|_| got > 0) {
            st.stream = Some(c);
        }
        if got > 0 && node != pref {
            g.slot.fallback_blocks.fetch_add(got, Ordering::Relaxed);
        }
        out.extend(pieces.into_iter().map(|extent| Allocated {
            extent,
            node,
            preferred: pref,
        }));
        got
    }

    /// Returns blocks that [`Allocator::alloc`] handed out and nothing recorded (an
    /// operation that failed before it mapped them): free again at once, since no record,
    /// durable or not, refers to them. Blocks not in use are ignored and counted (see
    /// [`Allocator::rejected_frees`]).
    pub fn give_back(&self, got: &[Allocated]) {
        self.give_back_extents(got.iter().map(|a| a.extent));
    }

    fn give_back_extents(&self, extents: impl IntoIterator<Item = Extent>) {
        for e in extents {
            if e.len == 0 {
                continue;
            }
            let Some(node) = self.in_groups(&e) else {
                self.rejected_frees.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let Some(mut g) = self.lock(node) else {
                continue;
            };
            if g.free.overlaps(e.dev, e.start, e.len)
                || !g.prealloc.overlapping(e.dev, e.start, e.len).is_empty()
            {
                self.rejected_frees.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            self.insert_split(&mut g, e.dev, e.start, e.len);
            self.available.fetch_add(e.len, Ordering::AcqRel);
        }
    }

    /// Adds `start..start + len` of `dev` (on `g`'s node) to the free map, cut at group
    /// boundaries: an extent handed out may span groups once merged.
    fn insert_split(&self, g: &mut NodeGuard<'_>, dev: u16, start: u64, len: u64) {
        let mut at = start;
        let end = start + len;
        while at < end {
            let Some((gs, gb, _)) = self.group_of(dev, at) else {
                break;
            };
            let piece_end = (gs + gb).min(end);
            self.insert_free(g, dev, at, piece_end - at);
            at = piece_end;
        }
    }

    /// Frees `e` once the operation that freed it is durable (see [`Allocator::commit_frees`]).
    /// An extent that is not wholly in use (outside the groups, free, reserved, or already
    /// freed) is ignored and counted (see [`Allocator::rejected_frees`]); use
    /// [`Allocator::free_checked`] to hear why.
    pub fn free(&self, e: Extent) {
        if self.free_checked(e).is_err() {
            self.rejected_frees.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// [`Allocator::free`] that says why an extent cannot be freed.
    pub fn free_checked(&self, e: Extent) -> Result<(), String> {
        if e.len == 0 {
            return Ok(());
        }
        let node = self
            .in_groups(&e)
            .ok_or_else(|| format!("freeing {e:?}: not inside the allocation groups"))?;
        let mut g = self
            .lock(node)
            .ok_or_else(|| format!("freeing {e:?}: on a node without storage"))?;
        if g.free.overlaps(e.dev, e.start, e.len) {
            return Err(format!(
                "freeing {e:?}: some of its blocks are already free"
            ));
        }
        if !g.prealloc.overlapping(e.dev, e.start, e.len).is_empty() {
            return Err(format!(
                "freeing {e:?}: some of its blocks are reserved, not in use"
            ));
        }
        let end = e.start + e.len;
        let clash = [&g.pending, &g.sealed].iter().any(|m| {
            m.range(..(e.dev, end))
                .next_back()
                .is_some_and(|(&(d, s), &l)| d == e.dev && s + l > e.start)
        });
        if clash {
            return Err(format!(
                "freeing {e:?}: some of its blocks are freed already"
            ));
        }
        g.pending.insert((e.dev, e.start), e.len);
        Ok(())
    }

    /// Whether freed blocks wait for a commit (recorded or in flight) before they can be
    /// allocated again.
    pub fn frees_waiting(&self) -> bool {
        self.nodes.iter().any(|&n| {
            self.lock(n)
                .is_some_and(|g| !g.pending.is_empty() || !g.sealed.is_empty())
        })
    }

    /// Extents [`Allocator::free`] ignored because they were not in use.
    pub fn rejected_frees(&self) -> u64 {
        self.rejected_frees.load(Ordering::Relaxed)
    }

    /// Makes the blocks freed since the last call allocatable again.
    pub fn commit_frees(&self) {
        self.seal_frees();
        self.commit_sealed_frees();
    }

    /// Sets the blocks freed so far aside for the commit about to be written: frees made
    /// while it is in flight wait for the next one. The caller keeps frees out meanwhile
    /// (the file system frees and seals under its volume lock), so the set sealed is one
    /// instant's over all nodes.
    pub fn seal_frees(&self) {
        for &n in &self.nodes {
            if let Some(mut g) = self.lock(n) {
                let pending = std::mem::take(&mut g.pending);
                g.sealed.extend(pending);
            }
        }
    }

    /// Makes the blocks set aside by [`Allocator::seal_frees`] allocatable again, once the
    /// commit recording their free is durable.
    pub fn commit_sealed_frees(&self) {
        for &n in &self.nodes {
            let Some(mut g) = self.lock(n) else { continue };
            for ((dev, start), len) in std::mem::take(&mut g.sealed) {
                self.insert_split(&mut g, dev, start, len);
                self.available.fetch_add(len, Ordering::AcqRel);
            }
        }
    }

    /// Records a soft error on `node` (an I/O error writing there): later allocations try
    /// it last.
    pub fn node_failed(&self, node: u32) {
        if let Some(s) = self.slot(node) {
            s.failed.store(true, Ordering::Release);
            s.soft_errors.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Forgets the I/O error recorded on `node`: it takes its place in the order again.
    pub fn node_recovered(&self, node: u32) {
        if let Some(s) = self.slot(node) {
            s.failed.store(false, Ordering::Release);
        }
    }

    /// Returns the blocks reserved ahead for `ino` (on close, truncate, unlink).
    pub fn release_prealloc(&self, ino: u64) {
        for &n in &self.nodes {
            if let Some(mut g) = self.lock(n) {
                for (_, e) in g.prealloc.release_file(ino) {
                    self.insert_free(&mut g, e.dev, e.start, e.len);
                }
            }
        }
        self.next_block.lock().remove(&ino);
    }

    /// Blocks reserved ahead, all files and nodes together.
    pub fn reserved_blocks(&self) -> u64 {
        self.nodes
            .iter()
            .filter_map(|&n| self.lock(n).map(|g| g.prealloc.total()))
            .sum()
    }

    /// Whether block `block` of `dev` is allocated (or freed but not yet committed).
    pub fn is_used(&self, dev: u16, block: u64) -> bool {
        let Some((_, _, node)) = self.group_of(dev, block) else {
            return false;
        };
        let Some(g) = self.lock(node) else {
            return false;
        };
        g.free.containing(dev, block).is_none() && !g.prealloc.contains(dev, block)
    }

    /// Space per node; blocks reserved ahead count as free.
    pub fn usage(&self) -> Vec<NodeUsage> {
        self.slots
            .iter()
            .map(|s| NodeUsage {
                node: s.node,
                total_blocks: s.total_blocks,
                free_blocks: s.free_blocks.load(Ordering::Acquire),
                fallback_blocks: s.fallback_blocks.load(Ordering::Relaxed),
                soft_errors: s.soft_errors.load(Ordering::Relaxed),
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
            if !self.is_failed(node) && self.free_on(node) > 0 {
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
        let a = two_nodes();
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
        let a = two_nodes();
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
