//! Fast node lookup from page frame numbers, for callers that may read them.
//!
//! After the scan has faulted a batch of resident pages in, `/proc/self/pagemap` gives each
//! page's frame number (PFN) in one `pread` of 8 bytes per page, and the memory blocks listed
//! under `/sys/devices/system/node/nodeN/memoryM` say which node owns which PFN range. This
//! is several times cheaper than a `move_pages` query, which looks every page up again.
//!
//! The kernel shows PFNs only to CAP_SYS_ADMIN (others read 0); without them, or when a PFN
//! falls outside every listed block, or when `NUMAIO_PAGE_QUERY=move_pages` is set, the scan
//! uses `move_pages`. The two agree by construction (both give the node of the page's
//! memory section); the lab tests compare them.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::OnceLock;

/// Sorted, merged `[start, end)` PFN ranges with their node.
#[derive(Debug)]
pub(crate) struct PfnNodes {
    ranges: Vec<(u64, u64, u32)>,
}

impl PfnNodes {
    fn load() -> Option<PfnNodes> {
        let bs = std::fs::read_to_string("/sys/devices/system/memory/block_size_bytes").ok()?;
        let bs = u64::from_str_radix(bs.trim(), 16).ok()?;
        let ps = numaio_sys::page_size() as u64;
        let pfns_per_block = bs / ps;
        if pfns_per_block == 0 {
            return None;
        }
        let mut blocks: Vec<(u64, u32)> = Vec::new();
        for e in std::fs::read_dir("/sys/devices/system/node").ok()? {
            let e = e.ok()?;
            let name = e.file_name().into_string().ok()?;
            let Some(node) = name
                .strip_prefix("node")
                .and_then(|n| n.parse::<u32>().ok())
            else {
                continue;
            };
            for m in std::fs::read_dir(e.path()).ok()? {
                let m = m.ok()?;
                let mn = m.file_name().into_string().ok()?;
                if let Some(b) = mn
                    .strip_prefix("memory")
                    .and_then(|b| b.parse::<u64>().ok())
                {
                    blocks.push((b, node));
                }
            }
        }
        Self::from_blocks(blocks, pfns_per_block)
    }

    /// The table of memory blocks `(block, node)` of `pfns_per_block` pages each. A block
    /// listed under several nodes holds memory of each (a node boundary inside the block,
    /// as with node sizes that are not multiples of the block size): its pages are left
    /// out, so move_pages answers for them.
    fn from_blocks(mut blocks: Vec<(u64, u32)>, pfns_per_block: u64) -> Option<PfnNodes> {
        blocks.sort_unstable();
        blocks.dedup();
        let shared: Vec<u64> = blocks
            .windows(2)
            .filter(|w| w[0].0 == w[1].0)
            .map(|w| w[0].0)
            .collect();
        blocks.retain(|(b, _)| !shared.contains(b));
        if blocks.is_empty() {
            return None;
        }
        let mut ranges: Vec<(u64, u64, u32)> = Vec::new();
        for (b, node) in blocks {
            let (s, e) = (b * pfns_per_block, (b + 1) * pfns_per_block);
            match ranges.last_mut() {
                Some(last) if last.1 == s && last.2 == node => last.1 = e,
                _ => ranges.push((s, e, node)),
            }
        }
        Some(PfnNodes { ranges })
    }

    /// The node table, loaded once per process (`None`: use move_pages). The environment
    /// switch is read on every call so that tests can compare both routes.
    pub(crate) fn get() -> Option<&'static PfnNodes> {
        if std::env::var("NUMAIO_PAGE_QUERY").as_deref() == Ok("move_pages") {
            return None;
        }
        static T: OnceLock<Option<PfnNodes>> = OnceLock::new();
        T.get_or_init(PfnNodes::load).as_ref()
    }

    pub(crate) fn node(&self, pfn: u64) -> Option<u32> {
        let i = self.ranges.partition_point(|r| r.1 <= pfn);
        let r = self.ranges.get(i)?;
        (r.0 <= pfn).then_some(r.2)
    }
}

/// Present bit and PFN field of a pagemap entry.
const PM_PRESENT: u64 = 1 << 63;
const PM_PFN_MASK: u64 = (1 << 55) - 1;

/// What pagemap says about one of our pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pm {
    Node(u32),
    NotPresent,
    /// PFN hidden from this caller (no CAP_SYS_ADMIN): use move_pages from now on.
    Hidden,
    /// PFN outside the known memory blocks: ask move_pages.
    Unknown,
}

/// Reads the `/proc/self/pagemap` entries of `n` pages from `addr` into `buf`.
pub(crate) fn read_pagemap(
    pagemap: &File,
    addr: usize,
    n: usize,
    buf: &mut Vec<u64>,
) -> std::io::Result<()> {
    let ps = numaio_sys::page_size();
    buf.clear();
    buf.resize(n, 0);
    // SAFETY: u64 has no invalid bit patterns; the slice covers buf exactly.
    let bytes = unsafe { std::slice::from_raw_parts_mut(buf.as_mut_ptr() as *mut u8, n * 8) };
    let mut done = 0;
    while done < bytes.len() {
        let off = (addr / ps * 8 + done) as u64;
        match pagemap.read_at(&mut bytes[done..], off) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => done += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Decodes one pagemap entry.
pub(crate) fn decode(table: &PfnNodes, entry: u64) -> Pm {
    if entry & PM_PRESENT == 0 {
        return Pm::NotPresent;
    }
    let pfn = entry & PM_PFN_MASK;
    if pfn == 0 {
        return Pm::Hidden;
    }
    table.node(pfn).map_or(Pm::Unknown, Pm::Node)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_of_two_nodes_is_left_to_move_pages() {
        // Blocks of 10 pages: 0-1 on node 0, 2 on both (the boundary inside it), 3-4 on 1.
        let t = PfnNodes::from_blocks(vec![(4, 1), (0, 0), (2, 1), (1, 0), (2, 0), (3, 1)], 10)
            .unwrap();
        assert_eq!(t.ranges, vec![(0, 20, 0), (30, 50, 1)]);
        assert_eq!(t.node(19), Some(0));
        assert_eq!(t.node(20), None);
        assert_eq!(t.node(29), None);
        assert_eq!(t.node(30), Some(1));
        assert!(PfnNodes::from_blocks(vec![(0, 0), (0, 1)], 10).is_none());
        assert!(PfnNodes::from_blocks(Vec::new(), 10).is_none());
    }

    #[test]
    fn ranges_resolve() {
        let t = PfnNodes {
            ranges: vec![(0, 100, 0), (100, 200, 1), (300, 400, 0)],
        };
        assert_eq!(t.node(0), Some(0));
        assert_eq!(t.node(99), Some(0));
        assert_eq!(t.node(100), Some(1));
        assert_eq!(t.node(250), None);
        assert_eq!(t.node(399), Some(0));
        assert_eq!(t.node(400), None);
        assert_eq!(decode(&t, 0), Pm::NotPresent);
        assert_eq!(decode(&t, PM_PRESENT), Pm::Hidden);
        assert_eq!(decode(&t, PM_PRESENT | 250), Pm::Unknown);
        assert_eq!(decode(&t, PM_PRESENT | 150), Pm::Node(1));
    }
}
