//! Binding the serving threads to NUMA nodes.
//!
//! fuser starts its serving threads itself, one per cloned `/dev/fuse` descriptor, named
//! `fuser-<index>`, and has no per-thread start hook. So once the session runs, the mount
//! finds those threads in `/proc/self/task` by name and restricts thread `i` to the CPUs of
//! the `i`-th node (round robin): every node gets a serving thread as soon as there are at
//! least as many threads as nodes, before the mount serves ordinary requests.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The index of a fuser serving thread from its name (`fuser-<index>`).
pub fn serving_index(comm: &str) -> Option<usize> {
    let rest = comm.trim_end().strip_prefix("fuser-")?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

/// The node for serving thread `index`: round robin over the nodes that have CPUs.
pub fn node_for(index: usize, node_cpus: &BTreeMap<u32, Vec<u32>>) -> Option<u32> {
    let nodes: Vec<u32> = node_cpus
        .iter()
        .filter(|(_, c)| !c.is_empty())
        .map(|(&n, _)| n)
        .collect();
    (!nodes.is_empty()).then(|| nodes[index % nodes.len()])
}

/// One bound serving thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bound {
    pub tid: u32,
    pub index: usize,
    pub node: u32,
}

/// Waits (up to `wait`) until `expected` serving threads exist in this process, then binds
/// each to its node. Returns the threads bound; an error names the thread that could not be.
pub fn bind_serving_threads(
    expected: usize,
    node_cpus: &BTreeMap<u32, Vec<u32>>,
    wait: Duration,
) -> Result<Vec<Bound>, String> {
    let start = Instant::now();
    let found = loop {
        let found = serving_threads();
        if found.len() >= expected || start.elapsed() > wait {
            break found;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    if found.len() < expected {
        return Err(format!(
            "only {} of {expected} FUSE serving threads appeared in /proc/self/task",
            found.len()
        ));
    }
    let mut out = Vec::new();
    for (tid, index) in found {
        let Some(node) = node_for(index, node_cpus) else {
            return Err("the topology lists no node with CPUs".into());
        };
        let set = numaio_sys::mask::CpuSet::from_ids(&node_cpus[&node]);
        numaio_sys::affinity::set_affinity(tid as i32, &set).map_err(|e| {
            format!("binding serving thread {tid} (fuser-{index}) to node {node}: {e}")
        })?;
        out.push(Bound { tid, index, node });
    }
    Ok(out)
}

/// (tid, index) of this process's serving threads.
fn serving_threads() -> Vec<(u32, usize)> {
    let Ok(rd) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut v: Vec<(u32, usize)> = rd
        .filter_map(Result::ok)
        .filter_map(|e| {
            let tid: u32 = e.file_name().to_str()?.parse().ok()?;
            let comm = std::fs::read_to_string(e.path().join("comm")).ok()?;
            Some((tid, serving_index(&comm)?))
        })
        .collect();
    v.sort_by_key(|&(_, i)| i);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_names() {
        assert_eq!(serving_index("fuser-0\n"), Some(0));
        assert_eq!(serving_index("fuser-12"), Some(12));
        assert_eq!(serving_index("fuser-bg"), None);
        assert_eq!(serving_index("fuser-"), None);
        assert_eq!(serving_index("fuser-1x"), None);
        assert_eq!(serving_index("cat"), None);
        assert_eq!(serving_index("fuser-99999999999999999999999"), None);
    }

    #[test]
    fn round_robin_over_nodes_with_cpus() {
        let m = BTreeMap::from([(0, vec![0, 1]), (1, vec![]), (2, vec![2, 3])]);
        let nodes: Vec<Option<u32>> = (0..5).map(|i| node_for(i, &m)).collect();
        assert_eq!(nodes, vec![Some(0), Some(2), Some(0), Some(2), Some(0)]);
        assert_eq!(node_for(0, &BTreeMap::new()), None);
    }

    #[test]
    fn binds_named_threads_of_this_process() {
        let cpus = numaio_sys::affinity::get_affinity(0).unwrap().to_vec();
        let m = BTreeMap::from([(0u32, cpus.clone())]);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let h = std::thread::Builder::new()
            .name("fuser-0".into())
            .spawn(move || {
                let _ = rx.recv();
            })
            .unwrap();
        let bound = bind_serving_threads(1, &m, Duration::from_secs(5)).unwrap();
        assert_eq!(bound.len(), 1);
        assert_eq!((bound[0].index, bound[0].node), (0, 0));
        let got = numaio_sys::affinity::get_affinity(bound[0].tid as i32)
            .unwrap()
            .to_vec();
        assert_eq!(got, cpus);
        tx.send(()).unwrap();
        h.join().unwrap();
    }
}
