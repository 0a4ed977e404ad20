//! `numaio run [--near PATH... [--warm]] [--node N | --cpunodebind NODES | --physcpubind CPUS]
//! [--membind NODES | --interleave NODES | --preferred NODE] -- CMD ARGS`: start a command on
//! the node that holds most of its input files' cache, or with numactl's bindings.
//!
//! Everything is checked before anything is applied: nodes and CPUs must exist, CPU bindings
//! need nodes with CPUs, memory policies nodes with memory. Then this process's affinity and
//! memory policy are set and the command is exec'd directly (no shell), so the command and
//! every thread and child it creates inherit both.

use crate::args::UsageError;
use crate::exit;
use crate::output::quote;
use crate::warnln;
use numaio_proc::{near, CacheOps, FileRef, PageCache};
use numaio_sys::{cpulist, CpuSet, Policy, Topology};
use serde::Serialize;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(group(
    clap::ArgGroup::new("binding")
        .required(true)
        .multiple(true)
        .args(["near", "node", "cpunodebind", "physcpubind", "membind", "interleave", "preferred"])
))]
pub struct RunArgs {
    /// Files the command will read; it starts on the node with CPUs nearest to their cache
    /// (cached bytes weighted by NUMA distance, so cache on a CPU-less node counts for the
    /// nodes next to it).
    #[arg(long, num_args = 1.., value_name = "PATH", conflicts_with_all = ["cpunodebind", "physcpubind"])]
    near: Vec<PathBuf>,
    /// Warm the --near files on the chosen node (or --node) before starting the command.
    #[arg(long, requires = "near")]
    warm: bool,
    /// Run on this node's CPUs (with --near: instead of the node the cache chose).
    #[arg(long, value_parser = crate::args::node, conflicts_with_all = ["cpunodebind", "physcpubind"])]
    node: Option<u32>,
    /// Run on the CPUs of these nodes (numactl -N): a list like 0-1,3 or `all`.
    #[arg(
        long,
        short = 'N',
        value_name = "NODES",
        conflicts_with = "physcpubind"
    )]
    cpunodebind: Option<String>,
    /// Run on these CPUs (numactl -C): a list like 0-3,8 or `all`.
    #[arg(long, short = 'C', value_name = "CPUS")]
    physcpubind: Option<String>,
    /// Allocate memory only from these nodes (numactl -m; MPOL_BIND).
    #[arg(long, short = 'm', value_name = "NODES", group = "mempolicy")]
    membind: Option<String>,
    /// Interleave memory page by page over these nodes (numactl -i; MPOL_INTERLEAVE).
    #[arg(long, short = 'i', value_name = "NODES", group = "mempolicy")]
    interleave: Option<String>,
    /// Prefer memory from this node, falling back to others (numactl -p; MPOL_PREFERRED).
    #[arg(long, short = 'p', value_name = "NODE", value_parser = crate::args::node, group = "mempolicy")]
    preferred: Option<u32>,
    /// Files the command reads through a replica on its node (see `numaio replicate`): in a
    /// mount namespace of its own, each PATH is a read-only bind mount of the replica (made
    /// now if there is no fresh one), so read(2) and mmap get node-local pages and writes
    /// to PATH fail with EROFS. Needs root and a CPU binding to one node (--node,
    /// --cpunodebind N, --physcpubind within a node, or --near).
    #[arg(long, num_args = 1.., value_name = "PATH")]
    replica: Vec<PathBuf>,
    /// Where the replicas live (as `numaio replicate --dir`).
    #[arg(long, value_name = "DIR", default_value = numaio_pagecache::replica::DEFAULT_DIR)]
    replica_dir: PathBuf,
    /// Print the plan as JSON on stderr: {node,cached_per_node,distance_cost,reason,cpus,mempolicy,mempolicy_nodes,warmed,replicas:[{original,replica,node}]}.
    #[arg(long)]
    json: bool,
    /// Say nothing before starting the command.
    #[arg(long, short)]
    quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

/// What the command will be started with.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// CPUs to restrict the command to; `None` leaves the affinity alone.
    pub cpus: Option<Vec<u32>>,
    /// `bind`, `interleave` or `preferred`; `None` leaves the memory policy alone.
    pub mempolicy: Option<&'static str>,
    pub mempolicy_nodes: Vec<u32>,
}

/// The numactl-style requests, before checking them against the machine.
#[derive(Debug, Clone, Default)]
pub struct Request<'a> {
    pub cpu_node: Option<u32>,
    pub cpunodebind: Option<&'a str>,
    pub physcpubind: Option<&'a str>,
    pub membind: Option<&'a str>,
    pub interleave: Option<&'a str>,
    pub preferred: Option<u32>,
}

fn usage(msg: String) -> anyhow::Error {
    UsageError(msg).into()
}

fn node_list(topo: &Topology) -> String {
    cpulist::format(&topo.node_ids())
}

/// Parses a node list (`0-2,4` or `all`, where `all` means the nodes `fits` accepts) and
/// checks each node exists and `fits`, naming the flag in errors.
pub(crate) fn parse_nodes(
    topo: &Topology,
    flag: &str,
    spec: &str,
    fits: impl Fn(&numaio_sys::Node) -> Result<(), String>,
) -> anyhow::Result<Vec<u32>> {
    let spec = spec.trim();
    if spec == "all" {
        let v: Vec<u32> = topo
            .nodes
            .iter()
            .filter(|n| fits(n).is_ok())
            .map(|n| n.id)
            .collect();
        if v.is_empty() {
            return Err(usage(format!("{flag} all: no node qualifies")));
        }
        return Ok(v);
    }
    let ids = cpulist::parse(spec).map_err(|e| {
        usage(format!(
            "{flag} {spec:?}: {e} (expected a node list like 0-1,3 or `all`)"
        ))
    })?;
    if ids.is_empty() {
        return Err(usage(format!("{flag}: empty node list")));
    }
    for &id in &ids {
        let n = topo.node(id).ok_or_else(|| {
            usage(format!(
                "{flag}: node {id} does not exist (nodes {}); see `numaio topo`",
                node_list(topo)
            ))
        })?;
        fits(n).map_err(|why| usage(format!("{flag}: node {id} {why}")))?;
    }
    Ok(ids)
}

fn has_cpus(n: &numaio_sys::Node) -> Result<(), String> {
    if n.has_cpus() {
        Ok(())
    } else {
        Err(
            "has no CPUs (memory only, such as CXL memory); bind memory to it with \
             --membind or --preferred and run on a node with CPUs"
                .into(),
        )
    }
}

fn has_memory(n: &numaio_sys::Node) -> Result<(), String> {
    if n.has_memory() {
        Ok(())
    } else {
        Err("has no memory".into())
    }
}

/// Checks the requests against `topo` and the CPUs this process may use (`allowed`), and
/// returns what to apply. Nodes or CPUs that do not exist, CPU bindings to CPU-less nodes
/// and memory policies on memory-less nodes are usage errors; CPUs that exist but are
/// outside `allowed` (a cpuset, taskset) are errors.
pub fn plan(topo: &Topology, allowed: &[u32], r: &Request<'_>) -> anyhow::Result<Plan> {
    let mut p = Plan::default();
    let cpus: Option<(Vec<u32>, String)> = if let Some(n) = r.cpu_node {
        let ids = parse_nodes(topo, "--node", &n.to_string(), has_cpus)?;
        Some((nodes_cpus(topo, &ids), format!("node {n}")))
    } else if let Some(spec) = r.cpunodebind {
        let ids = parse_nodes(topo, "--cpunodebind", spec, has_cpus)?;
        Some((
            nodes_cpus(topo, &ids),
            format!("node(s) {}", cpulist::format(&ids)),
        ))
    } else if let Some(spec) = r.physcpubind {
        let all: Vec<u32> = nodes_cpus(topo, &topo.node_ids());
        let ids = if spec.trim() == "all" {
            all
        } else {
            let ids = cpulist::parse(spec.trim()).map_err(|e| {
                usage(format!(
                    "--physcpubind {spec:?}: {e} (expected a CPU list like 0-3,8 or `all`)"
                ))
            })?;
            if ids.is_empty() {
                return Err(usage("--physcpubind: empty CPU list".into()));
            }
            if let Some(bad) = ids.iter().find(|c| !all.contains(c)) {
                return Err(usage(format!(
                    "--physcpubind: CPU {bad} does not exist or is offline (CPUs {})",
                    cpulist::format(&all)
                )));
            }
            ids
        };
        Some((ids, "the given CPUs".into()))
    } else {
        None
    };
    if let Some((want, what)) = cpus {
        let usable: Vec<u32> = want
            .iter()
            .copied()
            .filter(|c| allowed.contains(c))
            .collect();
        if usable.is_empty() {
            anyhow::bail!(
                "{what}: CPUs {} are all outside the CPUs this process may use ({}); \
                 check its cpuset or taskset",
                cpulist::format(&want),
                cpulist::format(allowed)
            );
        }
        p.cpus = Some(usable);
    }
    if let Some(spec) = r.membind {
        p.mempolicy = Some("bind");
        p.mempolicy_nodes = parse_nodes(topo, "--membind", spec, has_memory)?;
    } else if let Some(spec) = r.interleave {
        p.mempolicy = Some("interleave");
        p.mempolicy_nodes = parse_nodes(topo, "--interleave", spec, has_memory)?;
    } else if let Some(n) = r.preferred {
        p.mempolicy = Some("preferred");
        p.mempolicy_nodes = parse_nodes(topo, "--preferred", &n.to_string(), has_memory)?;
    }
    Ok(p)
}

fn nodes_cpus(topo: &Topology, ids: &[u32]) -> Vec<u32> {
    let mut v: Vec<u32> = ids
        .iter()
        .filter_map(|&id| topo.node(id))
        .flat_map(|n| n.cpus.iter().copied())
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

pub fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::detect()?;
    let own = numaio_sys::get_affinity(0)?.to_vec();
    let mut choice = None;
    if !a.near.is_empty() {
        let cache = PageCache;
        let mut files = Vec::new();
        for p in &a.near {
            std::fs::metadata(p).map_err(|e| anyhow::anyhow!("{}: {e}", quote(p)))?;
            match cache.residency(&FileRef::plain(p)) {
                Ok(r) => files.push(r),
                // Still runnable: the choice just cannot count this file's cache.
                Err(e) if !a.quiet => warnln!("warning: {e}; its cache is not counted"),
                Err(_) => {}
            }
        }
        let mut c = near::choose_node(&topo, &files)
            .ok_or_else(|| anyhow::anyhow!("this machine has no node with CPUs"))?;
        if let Some(n) = a.node {
            c.node = n;
            c.reason = format!("node {n} chosen with --node");
        }
        choice = Some(c);
    }
    let req = Request {
        cpu_node: choice.as_ref().map(|c| c.node).or(a.node),
        cpunodebind: a.cpunodebind.as_deref(),
        physcpubind: a.physcpubind.as_deref(),
        membind: a.membind.as_deref(),
        interleave: a.interleave.as_deref(),
        preferred: a.preferred,
    };
    let plan = plan(&topo, &own, &req)?;
    if a.warm {
        if let Some(c) = &choice {
            let cache = PageCache;
            for p in &a.near {
                cache.warm(&FileRef::plain(p), c.node).map_err(|e| {
                    anyhow::anyhow!("cannot warm {} on node {}: {e}", quote(p), c.node)
                })?;
            }
        }
    }
    let replicas = make_replicas(&a, &topo, &plan)?;
    if a.json {
        let mut j = match &choice {
            Some(c) => serde_json::to_value(c)?,
            None => serde_json::json!({}),
        };
        if let Some(o) = j.as_object_mut() {
            o.insert("cpus".into(), serde_json::json!(plan.cpus));
            o.insert("mempolicy".into(), serde_json::json!(plan.mempolicy));
            o.insert(
                "mempolicy_nodes".into(),
                serde_json::json!(plan.mempolicy_nodes),
            );
            o.insert("warmed".into(), serde_json::json!(a.warm));
            if !replicas.is_empty() {
                let list: Vec<_> = replicas
                    .iter()
                    .map(|(p, r)| {
                        serde_json::json!({
                            "original": p.to_string_lossy(),
                            "replica": r.replica.to_string_lossy(),
                            "node": r.node,
                        })
                    })
                    .collect();
                o.insert("replicas".into(), serde_json::json!(list));
            }
        }
        let line = serde_json::to_string(&j)?;
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    } else if !a.quiet {
        let mut parts = Vec::new();
        if let Some(c) = &choice {
            parts.push(format!("on node {}", c.node));
        }
        if let Some(cpus) = &plan.cpus {
            parts.push(format!("cpus {}", cpulist::format(cpus)));
        }
        if let Some(m) = plan.mempolicy {
            parts.push(format!(
                "memory {m} {}",
                cpulist::format(&plan.mempolicy_nodes)
            ));
        }
        if let Some((_, r)) = replicas.first() {
            parts.push(format!("{} replica(s) on node {}", replicas.len(), r.node));
        }
        let why = choice
            .as_ref()
            .map(|c| format!(": {}", c.reason))
            .unwrap_or_default();
        warnln!("running {} ({}){why}", quote(&a.cmd[0]), parts.join(", "));
    }
    show_replicas(&replicas)?;
    apply(&plan)?;
    let err = std::process::Command::new(&a.cmd[0])
        .args(&a.cmd[1..])
        .exec();
    let code = exit::for_exec_error(&err);
    let what = if code == exit::NOT_FOUND {
        "command not found"
    } else {
        "cannot execute"
    };
    warnln!("cannot run {}: {what} ({err})", quote(&a.cmd[0]));
    Ok(exit::code(code))
}

/// The replicas of `--replica`'s files on the one node the command will run on, made where
/// there is no fresh one: `(path as given, replica)`.
fn make_replicas(
    a: &RunArgs,
    topo: &Topology,
    plan: &Plan,
) -> anyhow::Result<Vec<(PathBuf, numaio_pagecache::Replica)>> {
    if a.replica.is_empty() {
        return Ok(Vec::new());
    }
    let mut nodes: Vec<u32> = plan
        .cpus
        .iter()
        .flatten()
        .filter_map(|&c| topo.cpu_to_node(c))
        .collect();
    nodes.dedup();
    nodes.sort_unstable();
    nodes.dedup();
    let node = match nodes.as_slice() {
        [n] => *n,
        [] => {
            return Err(usage(
                "--replica: bind the command to one node's CPUs (--node, --cpunodebind N,                  --physcpubind, or --near), so its replicas can be on that node"
                    .into(),
            ))
        }
        more => {
            return Err(usage(format!(
                "--replica: the command would run on nodes {}; bind it to one node,                  whose replicas it reads",
                cpulist::format(more)
            )))
        }
    };
    let store = numaio_pagecache::ReplicaStore::new(&a.replica_dir);
    let mut out = Vec::new();
    for p in &a.replica {
        let r = store
            .replicate(p, node, &numaio_pagecache::ReplicaOptions::default())
            .map_err(|e| anyhow::anyhow!("--replica: {e}"))?;
        out.push((p.clone(), r));
    }
    Ok(out)
}

/// Moves this process into a mount namespace of its own in which each replicated path is a
/// read-only bind mount of its replica; the exec'd command keeps the namespace.
fn show_replicas(replicas: &[(PathBuf, numaio_pagecache::Replica)]) -> anyhow::Result<()> {
    if replicas.is_empty() {
        return Ok(());
    }
    numaio_sys::mount::private_mount_namespace()
        .map_err(|e| anyhow::anyhow!("--replica: {e} (it needs root: CAP_SYS_ADMIN)"))?;
    for (p, r) in replicas {
        numaio_sys::mount::bind_read_only(&r.replica, p).map_err(|e| {
            anyhow::anyhow!("--replica: cannot show the replica at {}: {e}", quote(p))
        })?;
    }
    Ok(())
}

/// Sets this process's affinity and memory policy; the exec'd command inherits both.
fn apply(p: &Plan) -> anyhow::Result<()> {
    if let Some(cpus) = &p.cpus {
        numaio_sys::set_affinity(0, &CpuSet::from_ids(cpus))
            .map_err(|e| anyhow::anyhow!("cannot set the CPU affinity: {e}"))?;
    }
    let policy = match p.mempolicy {
        Some("bind") => Some(Policy::bind(&p.mempolicy_nodes)),
        Some("interleave") => Some(Policy::interleave(&p.mempolicy_nodes)),
        Some("preferred") => Some(Policy::preferred(p.mempolicy_nodes[0])),
        _ => None,
    };
    if let Some(policy) = policy {
        numaio_sys::set_mempolicy(&policy).map_err(|e| {
            anyhow::anyhow!(
                "cannot set the memory policy {} {}: {e} (are the nodes within this \
                 process's cpuset, Mems_allowed in /proc/self/status?)",
                p.mempolicy.unwrap_or_default(),
                cpulist::format(&p.mempolicy_nodes)
            )
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two CPU nodes and a CPU-less memory node (CXL), plus a memory-less CPU node.
    fn topo() -> Topology {
        Topology::synthetic("n0=0-1@1G n1=2-3@1G n2=@4G n3=4-5@0").unwrap()
    }

    fn err_of(r: anyhow::Result<Plan>) -> (bool, String) {
        let e = r.unwrap_err();
        (e.downcast_ref::<UsageError>().is_some(), format!("{e:#}"))
    }

    const ALL: &[u32] = &[0, 1, 2, 3, 4, 5];

    #[test]
    fn cpunodebind_and_membind() {
        let t = topo();
        let p = plan(
            &t,
            ALL,
            &Request {
                cpunodebind: Some("0,3"),
                membind: Some("0-2"),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.cpus, Some(vec![0, 1, 4, 5]));
        assert_eq!(p.mempolicy, Some("bind"));
        assert_eq!(p.mempolicy_nodes, vec![0, 1, 2]);
        // `all` means the nodes that qualify.
        let p = plan(
            &t,
            ALL,
            &Request {
                cpunodebind: Some("all"),
                interleave: Some("all"),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.cpus, Some(vec![0, 1, 2, 3, 4, 5]));
        assert_eq!(p.mempolicy, Some("interleave"));
        assert_eq!(p.mempolicy_nodes, vec![0, 1, 2]);
    }

    #[test]
    fn preferred_and_physcpubind() {
        let t = topo();
        let p = plan(
            &t,
            ALL,
            &Request {
                physcpubind: Some("1,3-4"),
                preferred: Some(2),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.cpus, Some(vec![1, 3, 4]));
        assert_eq!(p.mempolicy, Some("preferred"));
        assert_eq!(p.mempolicy_nodes, vec![2]);
        // Only a memory policy: the affinity is left alone.
        let p = plan(
            &t,
            ALL,
            &Request {
                membind: Some("2"),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.cpus, None);
    }

    #[test]
    fn bad_nodes_and_cpus_are_usage_errors() {
        let t = topo();
        let cases: &[(Request<'_>, &str)] = &[
            (
                Request {
                    cpunodebind: Some("2"),
                    ..Default::default()
                },
                "node 2 has no CPUs",
            ),
            (
                Request {
                    cpu_node: Some(2),
                    ..Default::default()
                },
                "--node: node 2 has no CPUs",
            ),
            (
                Request {
                    cpunodebind: Some("7"),
                    ..Default::default()
                },
                "node 7 does not exist (nodes 0-3)",
            ),
            (
                Request {
                    membind: Some("3"),
                    ..Default::default()
                },
                "--membind: node 3 has no memory",
            ),
            (
                Request {
                    interleave: Some("0,9"),
                    ..Default::default()
                },
                "--interleave: node 9 does not exist",
            ),
            (
                Request {
                    preferred: Some(3),
                    ..Default::default()
                },
                "--preferred: node 3 has no memory",
            ),
            (
                Request {
                    physcpubind: Some("6"),
                    ..Default::default()
                },
                "CPU 6 does not exist",
            ),
            (
                Request {
                    membind: Some("x"),
                    ..Default::default()
                },
                "--membind \"x\"",
            ),
            (
                Request {
                    physcpubind: Some("3-1"),
                    ..Default::default()
                },
                "--physcpubind \"3-1\"",
            ),
        ];
        for (r, want) in cases {
            let (is_usage, msg) = err_of(plan(&t, ALL, r));
            assert!(is_usage, "{r:?}: not a usage error: {msg}");
            assert!(msg.contains(want), "{r:?}: {msg:?} lacks {want:?}");
        }
    }

    #[test]
    fn cpus_outside_the_allowed_set() {
        let t = topo();
        // Partly allowed: narrowed to what may be used.
        let p = plan(
            &t,
            &[1, 2],
            &Request {
                cpunodebind: Some("0"),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(p.cpus, Some(vec![1]));
        // Not at all: an error, not a usage error (the machine has them).
        let (is_usage, msg) = err_of(plan(
            &t,
            &[2, 3],
            &Request {
                cpunodebind: Some("0"),
                ..Default::default()
            },
        ));
        assert!(!is_usage, "{msg}");
        assert!(
            msg.contains("outside the CPUs this process may use (2-3)"),
            "{msg}"
        );
    }
}
