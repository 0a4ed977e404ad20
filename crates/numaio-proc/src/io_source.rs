//! Where a process's per-node I/O counts come from, and replacing the estimate by exact
//! counts.
//!
//! [`sample`](crate::sample) estimates every process's reads per node. Two sources count
//! them exactly: the eBPF collector (`numaio-bpf`, any file system using the page cache)
//! and a numaio FUSE mount (its own files only). [`ProcessView::set_exact`] puts exact
//! counts in place of the estimate, so `ps`, `top`, the daemon's policies and its metrics
//! all read one set of fields and say which source filled them.

use crate::sample::ProcessView;
use numaio_numa::counters::{Fields, IoBytes, NodeIo};
use serde::Serialize;
use std::collections::BTreeMap;

/// Which source filled a process's per-node counts (`numa_io_source` in JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NumaIoSource {
    /// The eBPF collector: bytes copied from and to the page cache, by the node of the pages.
    Ebpf,
    /// A numaio mount's own per-process, per-node counters.
    Mount,
    /// Residency × read rate ([`crate::locality`]).
    #[default]
    Estimate,
}

impl NumaIoSource {
    pub fn as_str(self) -> &'static str {
        match self {
            NumaIoSource::Ebpf => "ebpf",
            NumaIoSource::Mount => "mount",
            NumaIoSource::Estimate => "estimate",
        }
    }

    /// Counted, not estimated.
    pub fn is_exact(self) -> bool {
        self != NumaIoSource::Estimate
    }
}

impl std::fmt::Display for NumaIoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exact counts for one process over one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExactIo {
    /// Bytes read and written, by the node the data's pages were on.
    pub by_data_node: NodeIo,
    /// Bytes whose pages were on the node of the CPU that copied them, and on another node;
    /// `None` where the source does not know the CPU's node.
    pub local: Option<IoBytes>,
    pub remote: Option<IoBytes>,
}

impl From<&numaio_bpf::ProcessIo> for ExactIo {
    fn from(p: &numaio_bpf::ProcessIo) -> Self {
        ExactIo {
            by_data_node: p.by_data_node.clone(),
            local: Some(p.local),
            remote: Some(p.remote),
        }
    }
}

impl ProcessView {
    /// Replaces the estimated per-node reads by exact counts from `source`: `numa_io` (read
    /// and write keys for every node in `nodes`), the read distribution, and the local
    /// share (the collector's local bytes where known, else the run nodes' share).
    pub fn set_exact(&mut self, source: NumaIoSource, io: &ExactIo, nodes: &[u32]) {
        self.numa_io_source = source;
        self.numa_io = io.by_data_node.numa_io_map(nodes, Fields::ReadWrite);
        self.numa_read_bytes = io
            .by_data_node
            .iter()
            .filter(|(_, b)| b.read_bytes > 0)
            .map(|(n, b)| (n, b.read_bytes))
            .collect();
        self.numa_write_bytes = io
            .by_data_node
            .iter()
            .filter(|(_, b)| b.write_bytes > 0)
            .map(|(n, b)| (n, b.write_bytes))
            .collect();
        let total: u64 = self.numa_read_bytes.values().sum();
        self.read_distribution = if total == 0 {
            BTreeMap::new()
        } else {
            self.numa_read_bytes
                .iter()
                .map(|(&n, &b)| (n, b as f64 / total as f64))
                .collect()
        };
        self.local_bytes = io.local;
        self.remote_bytes = io.remote;
        self.locality = match (io.local, io.remote) {
            (Some(l), Some(r)) if l.read_bytes + r.read_bytes > 0 => {
                Some(l.read_bytes as f64 / (l.read_bytes + r.read_bytes) as f64)
            }
            (Some(_), Some(_)) => None,
            _ => crate::locality::local_share(&self.read_distribution, &self.run_nodes()),
        };
    }
}

/// The exact sources a scan can use, chosen once: the eBPF collector when it can run here,
/// else the estimate, with the one-line reason kept for the user.
#[derive(Debug)]
pub struct Sources {
    collector: Option<numaio_bpf::Collector>,
    fallback_reason: Option<String>,
    last: Option<numaio_bpf::Snapshot>,
}

impl Sources {
    /// Starts the eBPF collector when `ebpf` is true; when it cannot run, remembers why.
    pub fn new(ebpf: bool) -> Sources {
        let (collector, fallback_reason) = if ebpf {
            match numaio_bpf::Collector::start(&numaio_bpf::CollectorOptions::default()) {
                Ok(c) => (Some(c), None),
                Err(e) => (None, Some(e.reason)),
            }
        } else {
            (None, Some("the eBPF collector was not asked for".into()))
        };
        Sources {
            collector,
            fallback_reason,
            last: None,
        }
    }

    /// Why counts are estimated rather than counted by eBPF (`None` when the collector runs).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// Whether the eBPF collector is attached.
    pub fn ebpf(&self) -> bool {
        self.collector.is_some()
    }

    /// Starts an interval: what the collector counts from now on goes to the next
    /// [`Sources::apply`].
    pub fn begin_interval(&mut self) {
        if let Some(c) = &self.collector {
            match c.snapshot() {
                Ok(s) => self.last = Some(s),
                Err(e) => self.stop(e.reason),
            }
        }
    }

    /// Replaces each view's estimate by what the collector counted for its process since
    /// the interval began (zero for a process that did no page-cache I/O), and begins the
    /// next interval. Without the collector the views keep their estimates.
    pub fn apply(&mut self, views: &mut [ProcessView], nodes: &[u32]) {
        let Some(c) = &self.collector else { return };
        let now = match c.snapshot() {
            Ok(s) => s,
            Err(e) => return self.stop(e.reason),
        };
        let delta = match &self.last {
            Some(prev) => now.since(prev),
            None => now.clone(),
        };
        self.last = Some(now);
        let per = delta.per_process();
        for v in views.iter_mut() {
            let io = per
                .get(&v.pid)
                .map(ExactIo::from)
                .unwrap_or_else(|| ExactIo {
                    local: Some(IoBytes::default()),
                    remote: Some(IoBytes::default()),
                    ..Default::default()
                });
            v.set_exact(NumaIoSource::Ebpf, &io, nodes);
        }
    }

    fn stop(&mut self, reason: String) {
        self.collector = None;
        self.last = None;
        self.fallback_reason = Some(format!("the eBPF collector stopped: {reason}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_counts_replace_the_estimate() {
        let mut v = ProcessView {
            pid: 42,
            thread_nodes: BTreeMap::from([(1, 1)]),
            read_distribution: BTreeMap::from([(1, 1.0)]),
            locality: Some(1.0),
            ..Default::default()
        };
        let io = ExactIo {
            by_data_node: [
                (0, IoBytes::new(3 << 20, 4096)),
                (1, IoBytes::new(1 << 20, 0)),
            ]
            .into_iter()
            .collect(),
            local: Some(IoBytes::new(1 << 20, 0)),
            remote: Some(IoBytes::new(3 << 20, 4096)),
        };
        v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
        assert_eq!(v.numa_io_source, NumaIoSource::Ebpf);
        assert_eq!(v.numa_io["numa0_read_bytes"], 3 << 20);
        assert_eq!(v.numa_io["numa0_write_bytes"], 4096);
        assert_eq!(
            v.numa_read_bytes,
            BTreeMap::from([(0, 3 << 20), (1, 1 << 20)])
        );
        assert_eq!(v.numa_write_bytes, BTreeMap::from([(0, 4096)]));
        assert_eq!(v.read_distribution[&0], 0.75);
        assert_eq!(v.locality, Some(0.25));
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["numa_io_source"], "ebpf");
        assert_eq!(j["remote_bytes"]["read_bytes"], 3 << 20);
    }

    #[test]
    fn without_cpu_nodes_the_run_nodes_decide_locality() {
        let mut v = ProcessView {
            thread_nodes: BTreeMap::from([(1, 2)]),
            ..Default::default()
        };
        let io = ExactIo {
            by_data_node: [(1, IoBytes::new(100, 0)), (0, IoBytes::new(300, 0))]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        v.set_exact(NumaIoSource::Mount, &io, &[0, 1]);
        assert_eq!(v.locality, Some(0.25));
        assert!(v.numa_io_source.is_exact());
    }
}
