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
    /// local distance (so a byte on the node itself counts once). Ranks the nodes when no
    /// profile can predict read times; the lowest wins.
    pub distance_cost: BTreeMap<u32, u64>,
    pub reason: String,
    /// Predicted seconds for one thread on each CPU node to read the cached bytes once.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub predicted_secs: BTreeMap<u32, f64>,
    /// Predicted fraction of that time saved on the chosen node against the average CPU node
    /// (where an unplaced command would run on average).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_gain: Option<f64>,
    /// Where the costs came from (a saved `numaio probe` profile, or the SLIT distances).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost_source: Option<String>,
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

/// Like [`choose_node_with`], with this machine's saved profile or its SLIT distances.
pub fn choose_node(topo: &Topology, files: &[FileNodes]) -> Option<NearChoice> {
    let (profile, source) = numaio_model::shipped::local_or_slit(topo);
    choose_node_with(topo, files, Some((&profile, source.as_str())))
}

/// Predicted seconds for one thread on CPU node `cpu` to read `per` (bytes per node) once, in
/// 1 MiB requests; `None` when the profile cannot say.
fn read_secs(profile: &numaio_model::Profile, cpu: u32, per: &BTreeMap<u32, u64>) -> Option<f64> {
    let ci = profile.index(cpu)?;
    let mut total = 0.0;
    for (&node, &bytes) in per.iter().filter(|(_, &b)| b > 0) {
        let mut threads = vec![0; profile.nodes.len()];
        threads[ci] = 1;
        let w = numaio_model::Workload {
            threads_per_node: threads,
            bs: 1 << 20,
            read_fraction: 1.0,
            placement: numaio_model::Placement::Single(Some(node)),
            sharing: numaio_model::Sharing::Private,
        };
        let rate = numaio_model::predict(profile, &w).ok()?.throughput_mb_s;
        total += bytes as f64 / (rate * 1e6);
    }
    Some(total)
}

/// The CPU node where reading the files' cache is predicted fastest by `costs` (a profile and
/// where it came from), else the one with the least distance-weighted cost: cached bytes times
/// distance, summed over the nodes holding them, so cache on a node without CPUs (CXL or other
/// far memory) pulls the choice to the node with CPUs nearest to it. Ties and the
/// nothing-cached case go to the CPU node with the most free memory (where a later read would
/// most likely stay), then the lowest id. Nodes without CPUs cannot run the command; they count
/// only as data.
pub fn choose_node_with(
    topo: &Topology,
    files: &[FileNodes],
    costs: Option<(&numaio_model::Profile, &str)>,
) -> Option<NearChoice> {
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
    let any_cached = per.values().any(|&b| b > 0);
    let mut predicted: BTreeMap<u32, f64> = BTreeMap::new();
    if let (Some((profile, _)), true) = (costs, any_cached) {
        for n in &cpu_nodes {
            match read_secs(profile, n.id, &per) {
                Some(t) => {
                    predicted.insert(n.id, t);
                }
                None => {
                    predicted.clear();
                    break;
                }
            }
        }
    }
    // Fastest first; predicted times within 0.1 % count as a tie, settled by distance cost.
    let fastest = predicted.values().copied().fold(f64::MAX, f64::min);
    let best = cpu_nodes
        .iter()
        .filter(|n| predicted.get(&n.id).is_none_or(|&t| t <= fastest * 1.001))
        .min_by_key(|n| (cost[&n.id], std::cmp::Reverse(n.mem.mem_free_bytes), n.id))?;
    let cached = per.get(&best.id).copied().unwrap_or(0);
    let predicted_gain = (!predicted.is_empty()).then(|| {
        let mean = predicted.values().sum::<f64>() / predicted.len() as f64;
        if mean > 0.0 {
            1.0 - predicted[&best.id] / mean
        } else {
            0.0
        }
    });
    // The node holding most of the cache, to say why a node with less of it won.
    let top = per
        .iter()
        .filter(|(_, &b)| b > 0)
        .max_by_key(|(&n, &b)| (b, std::cmp::Reverse(n)));
    let far = match top {
        Some((&n, &b)) if n != best.id && topo.node(n).is_some_and(|x| !x.has_cpus()) => {
            Some(format!(
                "node {n} holds {b} bytes of the files' cache but has no CPUs; node {} is the \
                 nearest node with CPUs (distance {})",
                best.id,
                distance(topo, best.id, n)
            ))
        }
        _ => None,
    };
    let reason = if let (Some(far), None) = (&far, predicted_gain) {
        far.clone()
    } else if let Some(g) = predicted_gain {
        format!(
            "reading the files' cache is predicted fastest from node {} ({:.3} s, {:.1} % less than the average node with CPUs; costs from {})",
            best.id,
            predicted[&best.id],
            g * 100.0,
            costs.map_or("-", |c| c.1)
        )
    } else if cached > 0 || any_cached {
        format!(
            "node {} holds {cached} bytes of the files' cache, the least distance-weighted cost \
             of any node with CPUs",
            best.id
        )
    } else {
        format!(
            "no file cache on a node with CPUs; node {} has the most free memory",
            best.id
        )
    };
    let reason = match (far, predicted_gain) {
        (Some(far), Some(_)) => format!("{reason}; {far}"),
        _ => reason,
    };
    Some(NearChoice {
        node: best.id,
        cached_per_node: per,
        distance_cost: cost,
        reason,
        cost_source: predicted_gain.and(costs.map(|c| c.1.to_string())),
        predicted_secs: predicted,
        predicted_gain,
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
    fn costs_rank_nodes_by_predicted_read_time() {
        // Four nodes on a ring (distances 10 / 20 / 30): a third of the cache on each of
        // nodes 1, 2 and 3 is read fastest from node 2, next to both 1 and 3, although node 2
        // holds no more than they do; without costs the tie goes to the lowest id.
        let t = Topology::synthetic(
            "n0=0@1G n1=1@1G n2=2@1G n3=3@1G dist=10,20,30,20;20,10,20,30;30,20,10,20;20,30,20,10",
        )
        .unwrap();
        let files = [f(&[(1, 100), (2, 100), (3, 100)])];
        let p = numaio_model::Profile::from_distances(&t);
        let c = choose_node_with(&t, &files, Some((&p, "slit"))).unwrap();
        assert_eq!(c.node, 2, "{c:?}");
        assert!(c.predicted_gain.unwrap() > 0.0);
        assert_eq!(c.predicted_secs.len(), 4);
        assert!(
            c.reason.contains("predicted fastest from node 2"),
            "{}",
            c.reason
        );
        assert_eq!(c.cost_source.as_deref(), Some("slit"));
        // Without a profile the distance-weighted cost agrees: 500 for node 2, 600–700 others.
        let plain = choose_node_with(&t, &files, None).unwrap();
        assert_eq!(plain.node, 2);
        assert_eq!(plain.distance_cost[&2], 500);
        assert!(plain.predicted_gain.is_none());
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
        let c = choose_node_with(&t, &[f(&[(1, 40), (2, 50)])], None).unwrap();
        // cost(n0) = (40*20 + 50*12)/10 = 140; cost(n1) = (40*10 + 50*30)/10 = 190.
        assert_eq!(c.node, 0, "{c:?}");
        assert_eq!(c.distance_cost[&0], 140);
        assert_eq!(c.distance_cost[&1], 190);
        // With 160 on n1: cost(n0) = (160*20 + 600)/10 = 380, cost(n1) = (1600 + 1500)/10 = 310.
        let c = choose_node_with(&t, &[f(&[(1, 160), (2, 50)])], None).unwrap();
        assert_eq!(c.node, 1, "{c:?}");
    }

    /// Without a distance matrix (all zero), local counts 10 and remote 20.
    #[test]
    fn missing_distances_default() {
        let mut t = Topology::synthetic("n0=0@1G n1=1@1G").unwrap();
        for n in &mut t.nodes {
            n.distances.clear();
        }
        let c = choose_node_with(&t, &[f(&[(0, 10), (1, 30)])], None).unwrap();
        assert_eq!(c.node, 1);
        assert_eq!(c.distance_cost[&1], 10 * 2 + 30);
    }

    #[test]
    fn no_cpu_node_no_choice() {
        let t = Topology::synthetic("n0=@1G").unwrap();
        assert!(choose_node(&t, &[f(&[(0, 10)])]).is_none());
    }
}
