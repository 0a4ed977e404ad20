//! `numaio run --near PATH... [--warm] [--node N] -- CMD ARGS`: start a command on the node
//! that holds most of its input files' cache (optionally warming them there first).
//!
//! The command is exec'd directly (no shell) after restricting this process's CPUs to the
//! node, so CMD and every thread it creates start there.

use crate::output::quote;
use crate::warnln;
use numaio_proc::{near, CacheOps, PageCache};
use numaio_sys::{cpulist, CpuSet, Topology};
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct RunArgs {
    /// Files the command will read; it starts on the node caching most of them.
    #[arg(long, required = true, num_args = 1.., value_name = "PATH")]
    near: Vec<PathBuf>,
    /// Warm the files on the chosen node (or --node) before starting the command.
    #[arg(long)]
    warm: bool,
    /// Use this node instead of the one holding most of the cache.
    #[arg(long, value_parser = crate::args::node)]
    node: Option<u32>,
    /// Print the choice as JSON on stderr: {node,cached_per_node,reason,cpus,warmed}.
    #[arg(long)]
    json: bool,
    /// Say nothing before starting the command.
    #[arg(long, short)]
    quiet: bool,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<String>,
}

pub fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::detect()?;
    let cache = PageCache;
    let mut files = Vec::new();
    for p in &a.near {
        std::fs::metadata(p).map_err(|e| anyhow::anyhow!("{}: {e}", quote(p)))?;
        match cache.residency(p) {
            Ok(r) => files.push(r),
            // Still runnable: the choice just cannot count this file's cache.
            Err(e) if !a.quiet => warnln!("warning: {e}; its cache is not counted"),
            Err(_) => {}
        }
    }
    let mut choice = near::choose_node(&topo, &files)
        .ok_or_else(|| anyhow::anyhow!("this machine has no node with CPUs"))?;
    if let Some(n) = a.node {
        let node = topo.node(n).ok_or_else(|| {
            anyhow::anyhow!("node {n} does not exist (nodes {:?})", topo.node_ids())
        })?;
        if !node.has_cpus() {
            anyhow::bail!("node {n} has no CPUs; the command cannot run there");
        }
        choice.node = n;
        choice.reason = format!("node {n} chosen with --node");
    }
    if a.warm {
        for p in &a.near {
            cache.warm(p, choice.node).map_err(|e| {
                anyhow::anyhow!("cannot warm {} on node {}: {e}", quote(p), choice.node)
            })?;
        }
    }
    let own = numaio_sys::get_affinity(0)?;
    let node_cpus = &topo.node(choice.node).expect("chosen node exists").cpus;
    let cpus: Vec<u32> = node_cpus
        .iter()
        .copied()
        .filter(|c| own.contains(*c))
        .collect();
    if cpus.is_empty() {
        anyhow::bail!(
            "node {}'s CPUs ({}) are outside the CPUs this process may use ({own})",
            choice.node,
            cpulist::format(node_cpus)
        );
    }
    if a.json {
        let mut j = serde_json::to_value(&choice)?;
        if let Some(o) = j.as_object_mut() {
            o.insert("cpus".into(), serde_json::json!(cpus));
            o.insert("warmed".into(), serde_json::json!(a.warm));
        }
        let line = serde_json::to_string(&j)?;
        let _ = writeln!(std::io::stderr().lock(), "{line}");
    } else if !a.quiet {
        warnln!(
            "running {} on node {} (cpus {}): {}",
            quote(&a.cmd[0]),
            choice.node,
            cpulist::format(&cpus),
            choice.reason
        );
    }
    numaio_sys::set_affinity(0, &CpuSet::from_ids(&cpus))?;
    let err = std::process::Command::new(&a.cmd[0])
        .args(&a.cmd[1..])
        .exec();
    anyhow::bail!("cannot run {}: {err}", quote(&a.cmd[0]))
}
