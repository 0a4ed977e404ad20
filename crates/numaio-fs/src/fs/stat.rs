use super::*;

/// [`Fs::range_nodes`] of inode `i` under the volume lock `g`.
pub(super) fn range_nodes_in(g: &Inner, i: &Inode, offset: u64, len: u64) -> Vec<(u32, u64)> {
    let end = offset.saturating_add(len).min(i.attr.size);
    let mut out: Vec<(u32, u64)> = Vec::new();
    if offset >= end {
        return out;
    }
    let first = offset / BLOCK_SIZE;
    // Extents that start before the range may still cover its beginning.
    let start_key = i
        .extents
        .range(..=first)
        .next_back()
        .map_or(first, |(&l, _)| l);
    for (&l, e) in i.extents.range(start_key..) {
        let lo = (l * BLOCK_SIZE).max(offset);
        let hi = ((l + e.len) * BLOCK_SIZE).min(end);
        if l * BLOCK_SIZE >= end {
            break;
        }
        if hi <= lo {
            continue;
        }
        let node = g.alloc.node_of_dev(e.dev).unwrap_or(u32::MAX);
        match out.iter_mut().find(|(n, _)| *n == node) {
            Some(x) => x.1 += hi - lo,
            None => out.push((node, hi - lo)),
        }
    }
    out
}

impl Fs {
    pub fn statfs(&self) -> StatFs {
        let mut g = self.inner.lock();
        let nodes = g.alloc.usage();
        let cap = g.journal.slot_capacity();
        // Measuring costs an encode of the whole metadata: only once the bound may have
        // drifted by a sixteenth of a slot (thousands of files made and removed).
        if g.meta_growth > cap / 16 {
            g.measure_meta();
        }
        let files_free = g
            .meta_bytes
            .values()
            .map(|&b| cap.saturating_sub(b) / FREE_INODE_BYTES)
            .sum();
        StatFs {
            block_size: BLOCK_SIZE,
            total_blocks: nodes.iter().map(|u| u.total_blocks).sum(),
            // Less what allocations in flight were promised (the nodes' counts drop as
            // they take it): what a new allocation can get now.
            free_blocks: g.alloc.free_blocks(),
            files: g.meta.inodes.len() as u64,
            files_free,
            nodes,
        }
    }

    /// Bytes of `ino`'s range `offset..offset + len` stored on each node, clipped to the file
    /// size; holes are on no node and are left out. For per-node I/O accounting.
    pub fn range_nodes(&self, ino: u64, offset: u64, len: u64) -> Vec<(u32, u64)> {
        let g = self.inner.lock();
        match g.inode(ino) {
            Ok(i) => range_nodes_in(&g, i, offset, len),
            Err(_) => Vec::new(),
        }
    }

    /// Bytes of device data the store caches, per node (empty when it has no cache).
    pub fn cache_bytes(&self) -> Vec<(u32, u64)> {
        self.store.cache_bytes()
    }

    /// `(logical block, extent, node)` for every extent of `ino`.
    pub fn block_map(&self, ino: u64) -> Result<Vec<(u64, Extent, u32)>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        Ok(i.extents
            .iter()
            .map(|(&l, e)| (l, *e, g.alloc.node_of_dev(e.dev).unwrap_or(u32::MAX)))
            .collect())
    }

    /// A copy of the metadata (for tests and fsck).
    pub fn meta_snapshot(&self) -> Meta {
        self.inner.lock().meta.clone()
    }
}
