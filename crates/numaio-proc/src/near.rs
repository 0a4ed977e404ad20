//! Choosing the node to start a command on, from where its input files are cached
//! (`numaio run --near`).

use crate::cache::FileNodes;
use numaio_sys::Topology;
use serde::Serialize;
use std::collections::BTreeMap;

/// The choice and the numbers behind it.
#[derive(Debug, Clone, Serialize)]
pub struct NearChoice {
    pub node: u32,
    /// Cached bytes of the files per node.
    pub cached_per_node: BTreeMap<u32, u64>,
    pub reason: String,
}

/// The CPU node holding most of the files' cache. Ties and the nothing-cached case go to the
/// CPU node with the most free memory (where a later read would most likely stay), then the
/// lowest id. Nodes without CPUs cannot run the command; their cache counts for nothing.
pub fn choose_node(topo: &Topology, files: &[FileNodes]) -> Option<NearChoice> {
    let mut per: BTreeMap<u32, u64> = BTreeMap::new();
    for f in files {
        for (&n, &b) in &f.nodes {
            *per.entry(n).or_insert(0) += b;
        }
    }
    let cpu_nodes: Vec<&numaio_sys::Node> = topo.nodes.iter().filter(|n| n.has_cpus()).collect();
    let best = cpu_nodes.iter().max_by_key(|n| {
        (
            per.get(&n.id).copied().unwrap_or(0),
            n.mem.mem_free_bytes,
            std::cmp::Reverse(n.id),
        )
    })?;
    let cached = per.get(&best.id).copied().unwrap_or(0);
    let reason = if cached > 0 {
        format!(
            "node {} holds {cached} bytes of the files' cache, the most of any node with CPUs",
            best.id
        )
    } else {
        format!(
            "no file cache on a node with CPUs; node {} has the most free memory",
            best.id
        )
    };
    Some(NearChoice {
        node: best.id,
        cached_per_node: per,
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn f(nodes: &[(u32, u64)]) -> FileNodes {
        FileNodes {
            path: PathBuf::from("/x"),
            size_bytes: 0,
            nodes: nodes.iter().copied().collect(),
        }
    }

    #[test]
    fn most_cache_wins_cpuless_ignored() {
        let t = Topology::synthetic("n0=0@1G n1=1@1G n2=@1G").unwrap();
        let c = choose_node(&t, &[f(&[(0, 10), (1, 5)]), f(&[(1, 10), (2, 100)])]).unwrap();
        assert_eq!(c.node, 1);
        assert_eq!(c.cached_per_node[&1], 15);
    }

    #[test]
    fn nothing_cached_goes_to_most_free() {
        let mut t = Topology::synthetic("n0=0@1G n1=1@1G").unwrap();
        t.nodes[0].mem.mem_free_bytes = 10;
        t.nodes[1].mem.mem_free_bytes = 20;
        let c = choose_node(&t, &[f(&[])]).unwrap();
        assert_eq!(c.node, 1);
        assert!(c.reason.contains("free memory"));
        t.nodes[0].mem.mem_free_bytes = 20;
        assert_eq!(choose_node(&t, &[]).unwrap().node, 0);
    }
}
