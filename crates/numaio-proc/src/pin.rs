//! Moving a process to a node: thread affinity, and optionally its memory.
//!
//! Affinity is set on every thread (`/proc/PID/task/*`); threads created later inherit the
//! creator's mask. Threads can appear while we work, so the task list is re-read until a
//! pass finds nothing new. Memory moves with `migrate_pages(2)` one source node at a time,
//! the node holding most of the process's memory first, as numad does: each call is a
//! bounded batch and the biggest win comes first if the process exits midway.

use crate::error::{ProcError, ProcResult};

use numaio_sys::{CpuSet, NodeMask, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

/// Why a process must not be touched, or `None` if it may be.
pub fn refusal(pid: i32) -> ProcResult<Option<String>> {
    if pid <= 1 {
        return Ok(Some("pid 1 (init) and pid <= 0 are never moved".into()));
    }
    let st = numaio_procfs::read_stat(pid)?;
    if st.is_kernel_thread() {
        return Ok(Some(format!("{} is a kernel thread", st.comm)));
    }
    Ok(None)
}

/// The CPUs of `node` the process may use: the node's CPUs within the cpuset.
pub fn target_cpus(topo: &Topology, node: u32, cpuset: Option<&[u32]>) -> ProcResult<Vec<u32>> {
    let n = topo.node(node).ok_or_else(|| {
        ProcError::Invalid(format!(
            "node {node} does not exist (nodes: {:?}); run `numaio topo`",
            topo.node_ids()
        ))
    })?;
    if n.cpus.is_empty() {
        return Err(ProcError::Invalid(format!(
            "node {node} has no CPUs; a process cannot run there"
        )));
    }
    let cpus: Vec<u32> = match cpuset {
        Some(set) => n.cpus.iter().copied().filter(|c| set.contains(c)).collect(),
        None => n.cpus.clone(),
    };
    if cpus.is_empty() {
        return Err(ProcError::Invalid(format!(
            "node {node}'s CPUs ({}) are all outside the process's cpuset",
            numaio_sys::cpulist::format(&n.cpus)
        )));
    }
    Ok(cpus)
}

/// Result of setting the affinity of every thread.
#[derive(Debug, Clone, Default, Serialize)]
pub struct AffinityReport {
    pub threads_set: usize,
    /// Threads that exited while we worked.
    pub threads_gone: usize,
    pub failed: Vec<String>,
}

/// Sets the affinity of every thread of `pid` to `cpus`.
pub fn set_process_affinity(pid: i32, cpus: &[u32]) -> ProcResult<AffinityReport> {
    let set = CpuSet::from_ids(cpus);
    let mut done: Vec<i32> = Vec::new();
    let mut rep = AffinityReport::default();
    for _pass in 0..4 {
        let tids = numaio_procfs::list_tids(pid)?;
        let new: Vec<i32> = tids.into_iter().filter(|t| !done.contains(t)).collect();
        if new.is_empty() {
            break;
        }
        for tid in new {
            done.push(tid);
            match numaio_sys::set_affinity(tid, &set) {
                Ok(()) => rep.threads_set += 1,
                Err(e) if e.errno() == Some(libc::ESRCH) => rep.threads_gone += 1,
                Err(e) => rep.failed.push(e.to_string()),
            }
        }
    }
    if rep.threads_set == 0 {
        if let Some(f) = rep.failed.first() {
            return Err(ProcError::Invalid(format!(
                "could not set the affinity of any thread of pid {pid}: {f} (moving another user's process needs CAP_SYS_NICE)"
            )));
        }
        return Err(ProcError::gone(pid));
    }
    Ok(rep)
}

/// One `migrate_pages` call.
#[derive(Debug, Clone, Serialize)]
pub struct MigrateStep {
    pub from: u32,
    pub bytes_before: u64,
    /// Pages the kernel could not move (its return value).
    pub pages_not_moved: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The order in which to migrate: every node but `to` holding memory, most-loaded first.
pub fn migration_order(per_node: &BTreeMap<u32, u64>, to: u32) -> Vec<(u32, u64)> {
    let mut v: Vec<(u32, u64)> = per_node
        .iter()
        .filter(|(&n, &b)| n != to && b > 0)
        .map(|(&n, &b)| (n, b))
        .collect();
    v.sort_by_key(|&(n, b)| (std::cmp::Reverse(b), n));
    v
}

/// Migrates the memory of `pid` to node `to`, one source node at a time.
pub fn migrate_memory(pid: i32, to: u32) -> ProcResult<Vec<MigrateStep>> {
    let per_node = numaio_procfs::memory_per_node(pid)?;
    let mut steps = Vec::new();
    for (from, bytes) in migration_order(&per_node, to) {
        let r = numaio_sys::migrate_pages(
            pid,
            &NodeMask::from_ids(&[from]),
            &NodeMask::from_ids(&[to]),
        );
        match r {
            Ok(left) => steps.push(MigrateStep {
                from,
                bytes_before: bytes,
                pages_not_moved: left,
                error: None,
            }),
            Err(e) if e.errno() == Some(libc::ESRCH) => return Err(ProcError::gone(pid)),
            Err(e) => steps.push(MigrateStep {
                from,
                bytes_before: bytes,
                pages_not_moved: 0,
                error: Some(e.to_string()),
            }),
        }
    }
    Ok(steps)
}

/// What `pin` did.
#[derive(Debug, Clone, Serialize)]
pub struct PinReport {
    pub pid: i32,
    pub comm: String,
    pub node: u32,
    pub cpus: Vec<u32>,
    pub affinity: AffinityReport,
    pub memory_steps: Vec<MigrateStep>,
    pub memory_per_node_before: BTreeMap<u32, u64>,
    pub memory_per_node_after: BTreeMap<u32, u64>,
}

/// Pins every thread of `pid` to `node`'s CPUs (within its cpuset) and optionally migrates
/// its memory there.
pub fn pin(topo: &Topology, pid: i32, node: u32, migrate: bool) -> ProcResult<PinReport> {
    if let Some(why) = refusal(pid)? {
        return Err(ProcError::Refused { pid, why });
    }
    let st = numaio_procfs::read_stat(pid)?;
    if matches!(st.state, 'Z' | 'X') {
        return Err(ProcError::gone(pid));
    }
    let cpuset = numaio_procfs::cpuset_cpus(pid);
    let cpus = target_cpus(topo, node, cpuset.as_deref())?;
    if migrate {
        let status = numaio_procfs::read_status(pid)?;
        if !status.mems_allowed.is_empty() && !status.mems_allowed.contains(&node) {
            return Err(ProcError::Invalid(format!(
                "pid {pid} may not use memory of node {node} (its cpuset allows nodes {})",
                numaio_sys::cpulist::format(&status.mems_allowed)
            )));
        }
    }
    let before = numaio_procfs::memory_per_node(pid).unwrap_or_default();
    let affinity = set_process_affinity(pid, &cpus)?;
    let memory_steps = if migrate {
        migrate_memory(pid, node)?
    } else {
        Vec::new()
    };
    let after = if migrate {
        numaio_procfs::memory_per_node(pid).unwrap_or_default()
    } else {
        before.clone()
    };
    Ok(PinReport {
        pid,
        comm: st.comm,
        node,
        cpus,
        affinity,
        memory_steps,
        memory_per_node_before: before,
        memory_per_node_after: after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_most_loaded_first_skipping_target() {
        let m: BTreeMap<u32, u64> = [(0, 10), (1, 500), (2, 0), (3, 70)].into_iter().collect();
        assert_eq!(migration_order(&m, 0), vec![(1, 500), (3, 70)]);
        assert_eq!(migration_order(&m, 1), vec![(3, 70), (0, 10)]);
    }

    #[test]
    fn target_cpus_respects_cpuset() {
        let t = Topology::synthetic("n0=0-1@1G n1=2-3@1G n2=@1G").unwrap();
        assert_eq!(target_cpus(&t, 1, None).unwrap(), vec![2, 3]);
        assert_eq!(target_cpus(&t, 1, Some(&[0, 1, 3])).unwrap(), vec![3]);
        assert!(target_cpus(&t, 1, Some(&[0, 1])).is_err());
        assert!(target_cpus(&t, 2, None)
            .unwrap_err()
            .to_string()
            .contains("no CPUs"));
        assert!(target_cpus(&t, 7, None)
            .unwrap_err()
            .to_string()
            .contains("does not exist"));
    }

    #[test]
    fn refuses_init_and_kernel_threads() {
        assert!(refusal(1).unwrap().is_some());
        assert!(refusal(0).unwrap().is_some());
        assert!(refusal(2).unwrap().unwrap().contains("kernel thread"));
        assert!(refusal(std::process::id() as i32).unwrap().is_none());
        let t = Topology::synthetic("n0=0-1@1G").unwrap();
        assert!(matches!(
            pin(&t, 1, 0, false),
            Err(ProcError::Refused { .. })
        ));
    }

    #[test]
    fn pin_a_child_process() {
        let topo = Topology::detect().unwrap();
        let node = topo.nodes.iter().find(|n| n.has_cpus()).unwrap().id;
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let cpus = target_cpus(&topo, node, numaio_procfs::cpuset_cpus(pid).as_deref()).unwrap();
        let first = vec![cpus[0]];
        set_process_affinity(pid, &first).unwrap();
        assert_eq!(numaio_procfs::read_status(pid).unwrap().cpus_allowed, first);
        let rep = pin(&topo, pid, node, true).unwrap();
        assert_eq!(rep.affinity.threads_set, 1);
        assert_eq!(numaio_procfs::read_status(pid).unwrap().cpus_allowed, cpus);
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(pin(&topo, pid, node, false).unwrap_err().is_gone());
    }
}
