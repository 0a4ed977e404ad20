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
    /// Per node with CPUs: the files' cached bytes times their distance from it, over the
    /// local distance (so a byte on the node itself counts once). The lowest wins.
    pub distance_cost: BTreeMap<u32, u64>,
    pub reason: String,
}

/// The SLIT distance of a node to itself; distances without a matrix default to it locally
/// and twice it remotely, as the kernel does.
const LOCAL_DISTANCE: u64 = 10;

fn distance(topo: &Topology, from: u32, to: u32) -> u64 {
    match topo.distance(from, to) {
        Some(d) if d > 0 => u64::from(d),
        _ if from == to => LOCAL_DISTANCE,
        _ => 2 * LOCAL_DISTANCE,
    }
}

/// The CPU node nearest to the files' cache: the one minimising cached bytes times distance,
/// summed over the nodes holding them. With the usual local/remote distances that is the
/// node holding most of the cache; cache on a node without CPUs (CXL or other far memory)
/// pulls the choice to the node with CPUs nearest to it. Ties and the nothing-cached case
/// go to the node with the most free memory (where a later read would most likely stay),
/// then the lowest id.
pub fn choose_node(topo: &Topology, files: &[FileNodes]) -> Option<NearChoice> {
    let mut per: BTreeMap<u32, u64> = BTreeMap::new();
    for f in files {
        for (&n, &b) in &f.nodes {
            *per.entry(n).or_insert(0) += b;
        }
    }
    let cpu_nodes: Vec<&numaio_sys::Node> = topo.nodes.iter().filter(|n| n.has_cpus()).collect();
    let cost: BTreeMap<u32, u64> = cpu_nodes
        .iter()
        .map(|c| {
            let weighted = per.iter().fold(0u128, |acc, (&n, &b)| {
                acc + u128::from(b) * u128::from(distance(topo, c.id, n))
            });
            let c_cost = weighted / u128::from(LOCAL_DISTANCE);
            (c.id, u64::try_from(c_cost).unwrap_or(u64::MAX))
        })
        .collect();
    let best = cpu_nodes
        .iter()
        .min_by_key(|n| (cost[&n.id], std::cmp::Reverse(n.mem.mem_free_bytes), n.id))?;
    let total: u64 = per.values().sum();
    let local = per.get(&best.id).copied().unwrap_or(0);
    // The node holding most of the cache, to say why a node with less of it won.
    let top = per.iter().max_by_key(|(&n, &b)| (b, std::cmp::Reverse(n)));
    let reason = match top {
        _ if total == 0 => format!(
            "no file cache on any node; node {} has the most free memory",
            best.id
        ),
        Some((&n, &b)) if n != best.id && topo.node(n).is_some_and(|x| !x.has_cpus()) => {
            format!(
                "node {n} holds {b} bytes of the files' cache but has no CPUs; node {} is the \
                 nearest node with CPUs (distance {})",
                best.id,
                distance(topo, best.id, n)
            )
        }
        _ => format!(
            "node {} holds {local} of the {total} bytes of the files' cache, the least \
             distance-weighted cost of any node with CPUs",
            best.id
        ),
    };
    Some(NearChoice {
        node: best.id,
        cached_per_node: per,
        distance_cost: cost,
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
    fn most_cache_wins_when_far_memory_is_equidistant() {
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
        assert!(c.reason.contains("free memory"), "{}", c.reason);
        t.nodes[0].mem.mem_free_bytes = 20;
        assert_eq!(choose_node(&t, &[]).unwrap().node, 0);
    }

    /// Data on a CPU-less node (CXL memory) picks the node with CPUs nearest to it, not the
    /// lowest id or the node with most free memory.
    #[test]
    fn cpuless_cache_picks_nearest_cpu_node() {
        // n2 is far memory behind n1: distance 14 from n1, 26 from n0.
        let mut t =
            Topology::synthetic("n0=0-1@4G n1=2-3@4G n2=@16G dist=10,20,26;20,10,14;26,14,10")
                .unwrap();
        t.nodes[0].mem.mem_free_bytes = 4 << 30;
        t.nodes[1].mem.mem_free_bytes = 1 << 30;
        let c = choose_node(&t, &[f(&[(2, 100 << 20)])]).unwrap();
        assert_eq!(c.node, 1, "{c:?}");
        assert!(c.reason.contains("no CPUs"), "{}", c.reason);
        assert!(c.reason.contains("distance 14"), "{}", c.reason);
        assert!(c.distance_cost[&1] < c.distance_cost[&0]);
        // Mirrored distances: the far memory sits behind n0 now.
        let t2 = Topology::synthetic("n0=0-1@4G n1=2-3@4G n2=@16G dist=10,20,14;20,10,26;14,26,10")
            .unwrap();
        assert_eq!(choose_node(&t2, &[f(&[(2, 100 << 20)])]).unwrap().node, 0);
    }

    /// Local cache outweighs a larger amount on far memory only as far as distances say.
    #[test]
    fn distance_weighs_local_against_far() {
        let t =
            Topology::synthetic("n0=0@1G n1=1@1G n2=@1G dist=10,20,12;20,10,30;12,30,10").unwrap();
        // n1 holds 40 bytes locally; n0 none, but the 50 on n2 are close to it.
        let c = choose_node(&t, &[f(&[(1, 40), (2, 50)])]).unwrap();
        // cost(n0) = (40*20 + 50*12)/10 = 140; cost(n1) = (40*10 + 50*30)/10 = 190.
        assert_eq!(c.node, 0, "{c:?}");
        assert_eq!(c.distance_cost[&0], 140);
        assert_eq!(c.distance_cost[&1], 190);
        // With 160 on n1: cost(n0) = (160*20 + 600)/10 = 380, cost(n1) = (1600 + 1500)/10 = 310.
        let c = choose_node(&t, &[f(&[(1, 160), (2, 50)])]).unwrap();
        assert_eq!(c.node, 1, "{c:?}");
    }

    /// Without a distance matrix (all zero), local counts 10 and remote 20.
    #[test]
    fn missing_distances_default() {
        let mut t = Topology::synthetic("n0=0@1G n1=1@1G").unwrap();
        for n in &mut t.nodes {
            n.distances.clear();
        }
        let c = choose_node(&t, &[f(&[(0, 10), (1, 30)])]).unwrap();
        assert_eq!(c.node, 1);
        assert_eq!(c.distance_cost[&1], 10 * 2 + 30);
    }

    #[test]
    fn no_cpu_node_no_choice() {
        let t = Topology::synthetic("n0=@1G").unwrap();
        assert!(choose_node(&t, &[f(&[(0, 10)])]).is_none());
    }
}
