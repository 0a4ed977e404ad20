//! Small types shared by the engine's parts.

use numaio_sys::{CpuSet, Topology};

/// Cache-line padding so per-stripe locks do not false-share.
#[repr(align(128))]
#[derive(Debug, Default)]
pub(crate) struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// A small per-thread number, used to pick a stripe without contention.
pub(crate) fn thread_stripe() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static ID: usize = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// Maps CPUs to nodes and nodes to their CPU sets, fast enough for every request.
#[derive(Debug, Clone)]
pub struct NodeCpus {
    cpu_node: Vec<u32>,
    node_cpus: Vec<(u32, CpuSet)>,
}

impl NodeCpus {
    pub fn from_topology(topo: &Topology) -> Self {
        let max_cpu = topo
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .max()
            .unwrap_or(0);
        let mut cpu_node = vec![u32::MAX; max_cpu as usize + 1];
        let mut node_cpus = Vec::new();
        for n in &topo.nodes {
            for &c in &n.cpus {
                cpu_node[c as usize] = n.id;
            }
            if !n.cpus.is_empty() {
                node_cpus.push((n.id, CpuSet::from_ids(&n.cpus)));
            }
        }
        Self {
            cpu_node,
            node_cpus,
        }
    }

    /// Node of `cpu` (None for unknown CPUs).
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpu_node
            .get(cpu as usize)
            .copied()
            .filter(|&n| n != u32::MAX)
    }

    /// CPUs of `node` (None for CPU-less or unknown nodes).
    pub fn cpus_of(&self, node: u32) -> Option<&CpuSet> {
        self.node_cpus
            .iter()
            .find(|(n, _)| *n == node)
            .map(|(_, c)| c)
    }

    /// The node the calling thread runs on now (sched_getcpu: vDSO/rseq, no syscall).
    pub fn current_node(&self) -> Option<u32> {
        // SAFETY: no arguments; returns -1 on error.
        let cpu = unsafe { libc::sched_getcpu() };
        if cpu < 0 {
            return None;
        }
        self.node_of_cpu(cpu as u32)
    }
}
