//! Per-(file, node) preallocation: blocks reserved right after a sequentially growing file's
//! last allocation on a node, handed to that file's next request there, so files written in
//! small appends by several writers at once still come out contiguous.
//!
//! Reserved blocks are out of the free map but not in use: they count as free space, and an
//! allocation that finds no free block anywhere takes them back.

use super::Extent;
use std::collections::BTreeMap;

#[derive(Debug, Clone, Default)]
pub(crate) struct Prealloc {
    /// (node, ino) → the reserved run.
    by_file: BTreeMap<(u32, u64), Extent>,
    /// (dev, start) → (len, ino), to answer "is this block reserved".
    by_block: BTreeMap<(u16, u64), (u64, u64)>,
    /// Reserved blocks per node.
    per_node: BTreeMap<u32, u64>,
}

impl Prealloc {
    pub(crate) fn reserved_on(&self, node: u32) -> u64 {
        self.per_node.get(&node).copied().unwrap_or(0)
    }

    pub(crate) fn total(&self) -> u64 {
        self.per_node.values().sum()
    }

    pub(crate) fn has(&self, ino: u64, node: u32) -> bool {
        self.by_file.contains_key(&(node, ino))
    }

    /// Reserves `e` (on `node`) for `ino`; the file must hold no reservation there yet.
    pub(crate) fn reserve(&mut self, ino: u64, node: u32, e: Extent) {
        debug_assert!(!self.has(ino, node));
        self.by_file.insert((node, ino), e);
        self.by_block.insert((e.dev, e.start), (e.len, ino));
        *self.per_node.entry(node).or_default() += e.len;
    }

    /// Hands out up to `max` blocks from the front of `ino`'s reservation on `node`.
    pub(crate) fn take(&mut self, ino: u64, node: u32, max: u64) -> Option<Extent> {
        let e = self.by_file.remove(&(node, ino))?;
        self.by_block.remove(&(e.dev, e.start));
        let take = e.len.min(max);
        *self.per_node.get_mut(&node).expect("node has reservations") -= take;
        if take < e.len {
            let rest = Extent {
                dev: e.dev,
                start: e.start + take,
                len: e.len - take,
            };
            self.by_file.insert((node, ino), rest);
            self.by_block
                .insert((rest.dev, rest.start), (rest.len, ino));
        }
        Some(Extent {
            dev: e.dev,
            start: e.start,
            len: take,
        })
    }

    fn drop_entry(&mut self, ino: u64, node: u32) -> Option<Extent> {
        let e = self.by_file.remove(&(node, ino))?;
        self.by_block.remove(&(e.dev, e.start));
        *self.per_node.get_mut(&node).expect("node has reservations") -= e.len;
        Some(e)
    }

    /// Drops every reservation of `ino`, returning the runs with their nodes.
    pub(crate) fn release_file(&mut self, ino: u64) -> Vec<(u32, Extent)> {
        let nodes: Vec<u32> = self.per_node.keys().copied().collect();
        nodes
            .into_iter()
            .filter_map(|n| self.drop_entry(ino, n).map(|e| (n, e)))
            .collect()
    }

    /// Drops one reservation on `node` (stealing it back for an allocation).
    pub(crate) fn steal_one(&mut self, node: u32) -> Option<Extent> {
        let (&(_, ino), _) = self.by_file.range((node, 0)..=(node, u64::MAX)).next()?;
        self.drop_entry(ino, node)
    }

    /// The owner (ino) and node-independent run of every reservation overlapping
    /// `[start, start + len)` on `dev`.
    pub(crate) fn overlapping(&self, dev: u16, start: u64, len: u64) -> Vec<u64> {
        let mut out = Vec::new();
        if let Some((&(d, s), &(l, ino))) = self.by_block.range(..=(dev, start)).next_back() {
            if d == dev && start < s + l {
                out.push(ino);
            }
        }
        out.extend(
            self.by_block
                .range((dev, start)..(dev, start + len))
                .filter(|(&(_, s), _)| s != start)
                .map(|(_, &(_, ino))| ino),
        );
        out
    }

    /// Whether `block` of `dev` is reserved.
    pub(crate) fn contains(&self, dev: u16, block: u64) -> bool {
        !self.overlapping(dev, block, 1).is_empty()
    }
}
