//! The emulated NUMA topology: what QEMU is asked for, and what the guest kernel will show.
//!
//! The guest kernel numbers nodes in the order the ACPI SRAT lists them: QEMU lists CPUs
//! first (in CPU index order) and memory ranges after, so nodes that have CPUs get the low
//! guest ids, in QEMU order, and CPU-less nodes follow. [`LabTopology::guest_node_id`]
//! applies that renumbering so tests can compare `numaio topo --json` with the request.

use crate::error::LabError;
use std::collections::BTreeMap;

/// Local distance, and the remote distance QEMU uses when none is given.
pub const LOCAL_DISTANCE: u32 = 10;
pub const DEFAULT_REMOTE_DISTANCE: u32 = 20;

/// One emulated node: how many CPUs (0 = CPU-less) and how much memory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabNode {
    pub cpus: u32,
    pub mem_mib: u64,
}

/// The topology of a lab guest. CPUs are given out in node order: node 0 gets CPUs
/// `0..cpus0`, node 1 the next ones, and so on (the guest sees the same CPU ids).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabTopology {
    pub nodes: Vec<LabNode>,
    /// Full N×N distance matrix in QEMU node ids; `None` = 10 local, 20 remote.
    pub distances: Option<Vec<Vec<u32>>>,
}

/// What the guest should report for one node (guest numbering).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExpectedNode {
    /// Node id as the guest kernel numbers it.
    pub id: u32,
    /// The QEMU node it comes from.
    pub qemu_id: u32,
    pub cpus: Vec<u32>,
    /// Size of the node's memory backend.
    pub mem_mib: u64,
    /// Whether the kernel image sits on this node (QEMU node 0 holds low memory), which
    /// makes its MemTotal smaller.
    pub holds_kernel: bool,
    /// Distances to every guest node, keyed by guest node id.
    pub distances: BTreeMap<u32, u32>,
}

impl ExpectedNode {
    /// Lowest acceptable guest `MemTotal` for this node, in bytes.
    ///
    /// Measured with the Debian 6.1 cloud kernel (booted with `nokaslr`, so the kernel
    /// image always sits on QEMU node 0): the kernel's node loses a roughly fixed 38–50 MiB
    /// (kernel image, early allocations: 482 of 512 MiB, 219 of 256, 975 of 1024), every
    /// other node about 1.7 % (its memmap). The bounds: kernel node at least 97 % minus
    /// 48 MiB, other nodes at least 96 %.
    pub fn mem_total_min_bytes(&self) -> u64 {
        let backend = self.mem_mib << 20;
        if self.holds_kernel {
            (backend / 100 * 97).saturating_sub(48 << 20)
        } else {
            backend / 100 * 96
        }
    }

    /// Highest acceptable guest `MemTotal`: the backend size itself.
    pub fn mem_total_max_bytes(&self) -> u64 {
        self.mem_mib * 1024 * 1024
    }

    /// Whether a guest-reported `MemTotal` fits this node's backend within the tolerance.
    pub fn mem_total_matches(&self, bytes: u64) -> bool {
        bytes >= self.mem_total_min_bytes() && bytes <= self.mem_total_max_bytes()
    }
}

impl LabTopology {
    /// `n` nodes with 1 CPU and 512 MiB each, default distances.
    pub fn uniform(n: usize) -> LabTopology {
        LabTopology {
            nodes: vec![
                LabNode {
                    cpus: 1,
                    mem_mib: 512
                };
                n
            ],
            distances: None,
        }
    }

    /// Nodes from `(cpus, mem_mib)` pairs, default distances.
    pub fn from_nodes(nodes: &[(u32, u64)]) -> LabTopology {
        LabTopology {
            nodes: nodes
                .iter()
                .map(|&(cpus, mem_mib)| LabNode { cpus, mem_mib })
                .collect(),
            distances: None,
        }
    }

    /// Sets the distance matrix (QEMU node ids, N×N).
    pub fn with_distances(mut self, matrix: Vec<Vec<u32>>) -> LabTopology {
        self.distances = Some(matrix);
        self
    }

    /// Parses a matrix written `"10,20;20,10"` (rows separated by `;`).
    pub fn parse_distances(s: &str) -> Result<Vec<Vec<u32>>, LabError> {
        s.split(';')
            .map(|row| {
                row.split(',')
                    .map(|v| {
                        v.trim().parse::<u32>().map_err(|_| {
                            LabError::BadTopology(format!(
                                "distance matrix {s:?}: {v:?} is not a number (write rows like \"10,20;20,10\")"
                            ))
                        })
                    })
                    .collect()
            })
            .collect()
    }

    pub fn total_cpus(&self) -> u32 {
        self.nodes.iter().map(|n| n.cpus).sum()
    }

    pub fn total_mem_mib(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_mib).sum()
    }

    /// CPU ids of QEMU node `qemu_id` (consecutive, in node order).
    pub fn cpus_of(&self, qemu_id: usize) -> Vec<u32> {
        let first: u32 = self.nodes[..qemu_id].iter().map(|n| n.cpus).sum();
        (first..first + self.nodes[qemu_id].cpus).collect()
    }

    /// Distance between two QEMU nodes.
    pub fn distance(&self, from: usize, to: usize) -> u32 {
        match &self.distances {
            Some(m) => m[from][to],
            None if from == to => LOCAL_DISTANCE,
            None => DEFAULT_REMOTE_DISTANCE,
        }
    }

    /// Checks what QEMU or the guest would reject or silently change.
    pub fn validate(&self) -> Result<(), LabError> {
        let bad = |m: String| Err(LabError::BadTopology(m));
        let n = self.nodes.len();
        if n == 0 {
            return bad("a lab guest needs at least one node".into());
        }
        if n > 8 {
            return bad(format!("{n} nodes requested; the lab supports 1 to 8"));
        }
        if self.total_cpus() == 0 {
            return bad("no node has a CPU; at least one node needs a CPU".into());
        }
        if self.nodes[0].cpus == 0 {
            // QEMU node 0 holds low memory and the kernel; keeping CPUs there keeps the
            // guest numbering simple and predictable.
            return bad("QEMU node 0 must have a CPU (put CPU-less nodes after it)".into());
        }
        if self.nodes[0].mem_mib < 128 {
            return bad(format!(
                "node 0 has {} MiB; it holds the kernel and needs at least 128 MiB",
                self.nodes[0].mem_mib
            ));
        }
        for (i, node) in self.nodes.iter().enumerate() {
            if node.mem_mib < 64 {
                return bad(format!(
                    "node {i} has {} MiB; every node needs at least 64 MiB (memory-less nodes are not supported)",
                    node.mem_mib
                ));
            }
        }
        if let Some(m) = &self.distances {
            if m.len() != n || m.iter().any(|r| r.len() != n) {
                return bad(format!(
                    "distance matrix must be {n}x{n} for {n} nodes, got {} row(s) of lengths {:?}",
                    m.len(),
                    m.iter().map(|r| r.len()).collect::<Vec<_>>()
                ));
            }
            for (i, row) in m.iter().enumerate() {
                for (j, &d) in row.iter().enumerate() {
                    if i == j && d != LOCAL_DISTANCE {
                        return bad(format!("distance {i}->{i} must be 10, got {d}"));
                    }
                    if i != j && !(11..=254).contains(&d) {
                        return bad(format!("distance {i}->{j} must be 11..=254, got {d}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Guest node id of each QEMU node (index = QEMU id): nodes with CPUs first, in QEMU
    /// order, then CPU-less nodes in QEMU order.
    pub fn guest_node_ids(&self) -> Vec<u32> {
        let mut ids = vec![0u32; self.nodes.len()];
        let mut next = 0;
        for pass_cpuful in [true, false] {
            for (i, node) in self.nodes.iter().enumerate() {
                if (node.cpus > 0) == pass_cpuful {
                    ids[i] = next;
                    next += 1;
                }
            }
        }
        ids
    }

    /// Guest node id of one QEMU node.
    pub fn guest_node_id(&self, qemu_id: usize) -> u32 {
        self.guest_node_ids()[qemu_id]
    }

    /// QEMU node id of a guest node.
    pub fn qemu_node_id(&self, guest_id: u32) -> Option<usize> {
        self.guest_node_ids().iter().position(|&g| g == guest_id)
    }

    /// The topology the guest should report, sorted by guest node id.
    pub fn expected_guest(&self) -> Vec<ExpectedNode> {
        let ids = self.guest_node_ids();
        let mut out: Vec<ExpectedNode> = (0..self.nodes.len())
            .map(|q| ExpectedNode {
                id: ids[q],
                qemu_id: q as u32,
                cpus: self.cpus_of(q),
                mem_mib: self.nodes[q].mem_mib,
                holds_kernel: q == 0,
                distances: (0..self.nodes.len())
                    .map(|r| (ids[r], self.distance(q, r)))
                    .collect(),
            })
            .collect();
        out.sort_by_key(|n| n.id);
        out
    }

    /// QEMU options for this topology (memory, CPUs, nodes, distances).
    pub fn qemu_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "-m".into(),
            format!("{}M", self.total_mem_mib()),
            "-smp".into(),
            self.total_cpus().to_string(),
        ];
        for (i, node) in self.nodes.iter().enumerate() {
            a.push("-object".into());
            a.push(format!("memory-backend-ram,size={}M,id=m{i}", node.mem_mib));
            let mut spec = format!("node,nodeid={i},memdev=m{i}");
            let cpus = self.cpus_of(i);
            match (cpus.first(), cpus.last()) {
                (Some(first), Some(last)) if first == last => spec += &format!(",cpus={first}"),
                (Some(first), Some(last)) => spec += &format!(",cpus={first}-{last}"),
                _ => {}
            }
            a.push("-numa".into());
            a.push(spec);
        }
        if self.distances.is_some() {
            for i in 0..self.nodes.len() {
                for j in 0..self.nodes.len() {
                    if i != j {
                        a.push("-numa".into());
                        a.push(format!("dist,src={i},dst={j},val={}", self.distance(i, j)));
                    }
                }
            }
        }
        a
    }

    /// QEMU options with an ACPI HMAT (`-machine hmat=on`): every node names an initiator (a
    /// CPU-less node the first node with CPUs), and each (initiator with CPUs, target) pair
    /// gets `latency_ns[i][t]` and `bandwidth_mib_s[i][t]`, indexed by QEMU node id.
    pub fn qemu_args_hmat(
        &self,
        latency_ns: &[Vec<u32>],
        bandwidth_mib_s: &[Vec<u64>],
    ) -> Vec<String> {
        let first_cpu_node = (0..self.nodes.len())
            .find(|&i| self.nodes[i].cpus > 0)
            .unwrap_or(0);
        let mut a = vec!["-machine".to_string(), "hmat=on".to_string()];
        for (k, arg) in self.qemu_args().into_iter().enumerate() {
            let node = arg
                .strip_prefix("node,nodeid=")
                .and_then(|r| r.split(',').next())
                .and_then(|id| id.parse::<usize>().ok());
            match node {
                Some(i) if k > 0 => {
                    let ini = if self.nodes[i].cpus > 0 {
                        i
                    } else {
                        first_cpu_node
                    };
                    a.push(format!("{arg},initiator={ini}"));
                }
                _ => a.push(arg),
            }
        }
        for i in (0..self.nodes.len()).filter(|&i| self.nodes[i].cpus > 0) {
            for t in 0..self.nodes.len() {
                a.push("-numa".into());
                a.push(format!(
                    "hmat-lb,initiator={i},target={t},hierarchy=memory,data-type=access-latency,latency={}",
                    latency_ns[i][t]
                ));
                a.push("-numa".into());
                a.push(format!(
                    "hmat-lb,initiator={i},target={t},hierarchy=memory,data-type=access-bandwidth,bandwidth={}M",
                    bandwidth_mib_s[i][t]
                ));
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_less_nodes_are_numbered_last() {
        let t = LabTopology::from_nodes(&[(1, 256), (2, 256), (0, 256), (1, 256)]);
        assert_eq!(t.guest_node_ids(), vec![0, 1, 3, 2]);
        assert_eq!(t.qemu_node_id(2), Some(3));
        let e = t.expected_guest();
        assert_eq!(e[2].qemu_id, 3);
        assert_eq!(e[2].cpus, vec![3]);
        assert_eq!(e[3].cpus, Vec::<u32>::new());
        assert_eq!(e[1].cpus, vec![1, 2]);
    }

    #[test]
    fn distances_are_permuted_with_the_ids() {
        let m = LabTopology::parse_distances("10,12,30,40;12,10,32,42;30,32,10,33;40,42,33,10")
            .unwrap();
        let t =
            LabTopology::from_nodes(&[(1, 256), (1, 256), (0, 256), (1, 256)]).with_distances(m);
        t.validate().unwrap();
        let e = t.expected_guest();
        // guest 2 = QEMU 3, guest 3 = QEMU 2
        assert_eq!(e[2].distances[&3], 33);
        assert_eq!(e[0].distances[&2], 40);
        assert_eq!(e[0].distances[&3], 30);
        assert_eq!(e[3].distances[&1], 32);
    }

    #[test]
    fn qemu_args_cover_cpus_and_memory() {
        let t = LabTopology::from_nodes(&[(2, 768), (0, 256)]);
        let a = t.qemu_args().join(" ");
        assert!(a.contains("-m 1024M -smp 2"), "{a}");
        assert!(a.contains("node,nodeid=0,memdev=m0,cpus=0-1"), "{a}");
        assert!(
            a.contains("node,nodeid=1,memdev=m1 ") || a.ends_with("node,nodeid=1,memdev=m1"),
            "{a}"
        );
        assert!(!a.contains("dist"), "{a}");
    }

    #[test]
    fn bad_topologies_are_rejected() {
        assert!(LabTopology::uniform(0).validate().is_err());
        assert!(LabTopology::from_nodes(&[(0, 256), (1, 256)])
            .validate()
            .is_err());
        assert!(LabTopology::from_nodes(&[(1, 0)]).validate().is_err());
        let t = LabTopology::uniform(2).with_distances(vec![vec![10, 20]]);
        assert!(t.validate().is_err());
        let t = LabTopology::uniform(2).with_distances(vec![vec![10, 5], vec![5, 10]]);
        assert!(t.validate().is_err());
        assert!(LabTopology::parse_distances("10,x;20,10").is_err());
        assert!(LabTopology::uniform(2).validate().is_ok());
    }

    #[test]
    fn memory_tolerance() {
        let e = LabTopology::uniform(2).expected_guest();
        let mib = 1024 * 1024;
        assert!(e[0].mem_total_matches(470 * mib));
        assert!(!e[0].mem_total_matches(400 * mib));
        assert!(e[1].mem_total_matches(503 * mib));
        assert!(!e[1].mem_total_matches(470 * mib));
        assert!(!e[1].mem_total_matches(513 * mib));
    }
}
