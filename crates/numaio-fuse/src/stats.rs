//! The statistics a mount answers as the virtual xattr [`STATS_XATTR`] of its root directory,
//! which `numaio fs stat MOUNTPOINT` reads. The JSON schema is fixed: tools rely on it.

use crate::accounting::{NodeBytes, Snapshot};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The virtual xattr of a mount's root that holds [`Stats`] as JSON. It is not listed and
/// cannot be set or removed.
pub const STATS_XATTR: &[u8] = b"user.numaio.stats";
/// Processes listed, largest total first.
pub const TOP_PROCESSES: usize = 50;
/// The kernel's limit on an xattr value (XATTR_SIZE_MAX); the JSON stays under it.
pub const MAX_BYTES: usize = 64 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    pub mountpoint: String,
    /// `classic` (/dev/fuse) or `io_uring`.
    pub fuse_mode: String,
    pub nodes: Vec<NodeStats>,
    pub processes: Vec<ProcessStats>,
    pub moves: MoveStats,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStats {
    pub node: u32,
    pub capacity_bytes: u64,
    pub used_bytes: u64,
    pub free_bytes: u64,
    /// Device data held in the store's cache slice of this node.
    pub cache_bytes: u64,
    /// Bytes read/written through the mount whose data lies on this node.
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Blocks allocated on this node although their policy chose another one (fallback),
    /// since the volume was mounted.
    pub misplaced_blocks: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeIo {
    pub node: u32,
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Of those, the bytes asked for while the caller ran on this node.
    #[serde(default)]
    pub local_read_bytes: u64,
    #[serde(default)]
    pub local_write_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadStats {
    pub tid: u32,
    pub nodes: Vec<NodeIo>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessStats {
    pub pid: u32,
    pub comm: String,
    pub nodes: Vec<NodeIo>,
    pub threads: Vec<ThreadStats>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveStats {
    /// `migrate-thread`, `first-reader`, or null when the mount moves no threads.
    pub mode: Option<String>,
    pub moved: u64,
    pub skipped: u64,
}

/// Space per node, as the store reports it.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeSpace {
    pub node: u32,
    pub capacity_bytes: u64,
    pub free_bytes: u64,
    pub cache_bytes: u64,
    pub misplaced_blocks: u64,
}

fn node_io(m: &BTreeMap<u32, NodeBytes>) -> Vec<NodeIo> {
    m.iter()
        .map(|(&node, b)| NodeIo {
            node,
            read_bytes: b.read,
            write_bytes: b.write,
            local_read_bytes: b.local_read,
            local_write_bytes: b.local_write,
        })
        .collect()
}

impl ProcessStats {
    /// The process's bytes per node of the data, for the `numa_io` text.
    pub fn node_io(&self) -> numaio_numa::NodeIo {
        self.nodes
            .iter()
            .map(|x| {
                (
                    x.node,
                    numaio_numa::IoBytes::new(x.read_bytes, x.write_bytes),
                )
            })
            .collect()
    }
}

impl Stats {
    /// The mount's nodes, in the order of [`Stats::nodes`].
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.node).collect()
    }

    /// Builds the statistics from the store's space and the accounting, trimmed so that the
    /// JSON stays under [`MAX_BYTES`]: the top [`TOP_PROCESSES`] processes, and fewer threads
    /// (then fewer processes) per process where it would not fit.
    pub fn build(
        mountpoint: &str,
        fuse_mode: &str,
        space: &[NodeSpace],
        acc: &Snapshot,
        moves: MoveStats,
    ) -> (Stats, Vec<u8>) {
        let mut nodes: Vec<NodeStats> = space
            .iter()
            .map(|s| {
                let io = acc.nodes.get(&s.node).copied().unwrap_or_default();
                NodeStats {
                    node: s.node,
                    capacity_bytes: s.capacity_bytes,
                    used_bytes: s.capacity_bytes.saturating_sub(s.free_bytes),
                    free_bytes: s.free_bytes,
                    cache_bytes: s.cache_bytes,
                    read_bytes: io.read,
                    write_bytes: io.write,
                    misplaced_blocks: s.misplaced_blocks,
                }
            })
            .collect();
        // Data on a node the store does not list (cannot happen on a sane volume) still shows.
        for (&n, b) in &acc.nodes {
            if !nodes.iter().any(|x| x.node == n) {
                nodes.push(NodeStats {
                    node: n,
                    capacity_bytes: 0,
                    used_bytes: 0,
                    free_bytes: 0,
                    cache_bytes: 0,
                    read_bytes: b.read,
                    write_bytes: b.write,
                    misplaced_blocks: 0,
                });
            }
        }
        nodes.sort_by_key(|n| n.node);
        let mut max_procs = TOP_PROCESSES;
        let mut max_threads = 64usize;
        loop {
            let processes = acc
                .processes
                .iter()
                .take(max_procs)
                .map(|p| {
                    let mut threads: Vec<(u64, ThreadStats)> = p
                        .threads
                        .iter()
                        .map(|(&tid, m)| {
                            let total = m.values().map(NodeBytes::total).sum();
                            (
                                total,
                                ThreadStats {
                                    tid,
                                    nodes: node_io(m),
                                },
                            )
                        })
                        .collect();
                    threads.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.tid.cmp(&b.1.tid)));
                    ProcessStats {
                        pid: p.pid,
                        comm: p.comm.clone(),
                        nodes: node_io(&p.nodes),
                        threads: threads
                            .into_iter()
                            .take(max_threads)
                            .map(|(_, t)| t)
                            .collect(),
                    }
                })
                .collect();
            let s = Stats {
                mountpoint: mountpoint.to_string(),
                fuse_mode: fuse_mode.to_string(),
                nodes: nodes.clone(),
                processes,
                moves: moves.clone(),
            };
            let json = serde_json::to_vec(&s).unwrap_or_default();
            if json.len() < MAX_BYTES || (max_procs == 0 && max_threads == 0) {
                return (s, json);
            }
            if max_threads > 0 {
                max_threads /= 2;
            } else {
                max_procs /= 2;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::accounting::{Accounting, Direction};

    fn moves() -> MoveStats {
        MoveStats {
            mode: None,
            moved: 0,
            skipped: 0,
        }
    }

    #[test]
    fn schema_fields_and_totals() {
        let a = Accounting::with_comm_reader(|_| "dd".into());
        a.add(42, 43, Direction::Write, 0, &[(0, 8192)]);
        let space = [
            NodeSpace {
                node: 0,
                capacity_bytes: 100,
                free_bytes: 60,
                cache_bytes: 7,
                misplaced_blocks: 2,
            },
            NodeSpace {
                node: 1,
                capacity_bytes: 100,
                free_bytes: 100,
                ..Default::default()
            },
        ];
        let (s, json) = Stats::build("/mnt", "classic", &space, &a.snapshot(), moves());
        let v: serde_json::Value = serde_json::from_slice(&json).unwrap();
        assert_eq!(v["mountpoint"], "/mnt");
        assert_eq!(v["fuse_mode"], "classic");
        assert_eq!(v["nodes"][0]["used_bytes"], 40);
        assert_eq!(v["nodes"][0]["write_bytes"], 8192);
        assert_eq!(v["nodes"][0]["cache_bytes"], 7);
        assert_eq!(v["nodes"][0]["misplaced_blocks"], 2);
        assert_eq!(v["nodes"][1]["write_bytes"], 0);
        assert_eq!(v["processes"][0]["pid"], 42);
        assert_eq!(v["processes"][0]["comm"], "dd");
        assert_eq!(v["processes"][0]["threads"][0]["tid"], 43);
        assert_eq!(
            v["processes"][0]["threads"][0]["nodes"][0]["write_bytes"],
            8192
        );
        assert!(v["moves"]["mode"].is_null());
        let back: Stats = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, s);
    }

    #[test]
    fn many_processes_and_threads_stay_under_the_xattr_limit() {
        let a = Accounting::with_comm_reader(|p| "x".repeat(15) + &p.to_string());
        for pid in 1..=200u32 {
            for tid in 0..100u32 {
                a.add(
                    pid,
                    pid * 1000 + tid,
                    Direction::Read,
                    0,
                    &[(0, 1), (1, 2), (2, 3)],
                );
            }
        }
        let (s, json) = Stats::build("/m", "classic", &[], &a.snapshot(), moves());
        assert!(json.len() < MAX_BYTES, "{}", json.len());
        assert!(s.processes.len() <= TOP_PROCESSES && !s.processes.is_empty());
    }
}
