//! What the collector counts, and its per-process sums.

use numaio_numa::counters::{IoBytes, NodeIo};
use serde::Serialize;
use std::collections::BTreeMap;

/// Bytes one thread copied from (read) and to (write) the page cache of one file, whose
/// pages were on `data_node`, while it ran on a CPU of `cpu_node`. Cumulative since the
/// collector started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct IoRecord {
    pub pid: i32,
    pub tid: i32,
    /// The file's device (`st_dev`, as user space sees it) and inode.
    pub dev: u64,
    pub ino: u64,
    pub data_node: u32,
    pub cpu_node: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// Pages of one file inserted into (misses) and removed from the page cache on `node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheRecord {
    pub dev: u64,
    pub ino: u64,
    pub node: u32,
    pub inserted_pages: u64,
    pub removed_pages: u64,
}

/// Page faults by one process on a file mapping whose page was on `data_node`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FaultRecord {
    pub pid: i32,
    pub dev: u64,
    pub ino: u64,
    pub data_node: u32,
    pub cpu_node: u32,
    pub faults: u64,
}

/// Everything the collector counted, cumulative since it started.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    pub io: Vec<IoRecord>,
    pub cache: Vec<CacheRecord>,
    pub faults: Vec<FaultRecord>,
}

/// One process's file I/O summed over its threads and files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProcessIo {
    /// Bytes by the node the data's pages were on.
    pub by_data_node: NodeIo,
    /// Bytes whose pages were on the node of the CPU that copied them.
    pub local: IoBytes,
    /// Bytes whose pages were on another node.
    pub remote: IoBytes,
}

impl Snapshot {
    /// What was counted after `earlier` (a snapshot of the same collector); records that did
    /// not change are left out.
    pub fn since(&self, earlier: &Snapshot) -> Snapshot {
        let io_key = |r: &IoRecord| (r.pid, r.tid, r.dev, r.ino, r.data_node, r.cpu_node);
        let before: BTreeMap<_, _> = earlier.io.iter().map(|r| (io_key(r), r)).collect();
        let io = self
            .io
            .iter()
            .filter_map(|r| {
                let (rb, wb) = before
                    .get(&io_key(r))
                    .map_or((0, 0), |b| (b.read_bytes, b.write_bytes));
                let d = IoRecord {
                    read_bytes: r.read_bytes.saturating_sub(rb),
                    write_bytes: r.write_bytes.saturating_sub(wb),
                    ..*r
                };
                (d.read_bytes + d.write_bytes > 0).then_some(d)
            })
            .collect();
        let cache_key = |r: &CacheRecord| (r.dev, r.ino, r.node);
        let before: BTreeMap<_, _> = earlier.cache.iter().map(|r| (cache_key(r), r)).collect();
        let cache = self
            .cache
            .iter()
            .filter_map(|r| {
                let (i, o) = before
                    .get(&cache_key(r))
                    .map_or((0, 0), |b| (b.inserted_pages, b.removed_pages));
                let d = CacheRecord {
                    inserted_pages: r.inserted_pages.saturating_sub(i),
                    removed_pages: r.removed_pages.saturating_sub(o),
                    ..*r
                };
                (d.inserted_pages + d.removed_pages > 0).then_some(d)
            })
            .collect();
        let fault_key = |r: &FaultRecord| (r.pid, r.dev, r.ino, r.data_node, r.cpu_node);
        let before: BTreeMap<_, _> = earlier.faults.iter().map(|r| (fault_key(r), r)).collect();
        let faults = self
            .faults
            .iter()
            .filter_map(|r| {
                let f = before.get(&fault_key(r)).map_or(0, |b| b.faults);
                let d = FaultRecord {
                    faults: r.faults.saturating_sub(f),
                    ..*r
                };
                (d.faults > 0).then_some(d)
            })
            .collect();
        Snapshot { io, cache, faults }
    }

    /// The I/O records summed per process.
    pub fn per_process(&self) -> BTreeMap<i32, ProcessIo> {
        let mut out: BTreeMap<i32, ProcessIo> = BTreeMap::new();
        for r in &self.io {
            let p = out.entry(r.pid).or_default();
            let bytes = IoBytes::new(r.read_bytes, r.write_bytes);
            p.by_data_node.add(r.data_node, bytes);
            let side = if r.data_node == r.cpu_node {
                &mut p.local
            } else {
                &mut p.remote
            };
            side.read_bytes += r.read_bytes;
            side.write_bytes += r.write_bytes;
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io(pid: i32, data: u32, cpu: u32, r: u64, w: u64) -> IoRecord {
        IoRecord {
            pid,
            tid: pid,
            dev: 8,
            ino: 12,
            data_node: data,
            cpu_node: cpu,
            read_bytes: r,
            write_bytes: w,
        }
    }

    #[test]
    fn per_process_splits_local_and_remote() {
        let s = Snapshot {
            io: vec![
                io(7, 0, 1, 4096, 0),
                io(7, 1, 1, 100, 50),
                io(9, 0, 0, 1, 0),
            ],
            ..Default::default()
        };
        let p = s.per_process();
        assert_eq!(p[&7].remote, IoBytes::new(4096, 0));
        assert_eq!(p[&7].local, IoBytes::new(100, 50));
        assert_eq!(p[&7].by_data_node.get(0), IoBytes::new(4096, 0));
        assert_eq!(p[&9].local, IoBytes::new(1, 0));
    }

    #[test]
    fn since_keeps_only_changes() {
        let a = Snapshot {
            io: vec![io(7, 0, 1, 4096, 0), io(8, 0, 0, 10, 0)],
            ..Default::default()
        };
        let b = Snapshot {
            io: vec![io(7, 0, 1, 8192, 0), io(8, 0, 0, 10, 0), io(9, 1, 1, 5, 0)],
            ..Default::default()
        };
        let d = b.since(&a);
        assert_eq!(d.io, vec![io(7, 0, 1, 4096, 0), io(9, 1, 1, 5, 0)]);
    }
}
