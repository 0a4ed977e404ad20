//! `numaio topo`: the NUMA topology as a table or JSON.

use crate::output::{human_bytes, print_json};
use numaio_sys::{cpulist, Topology};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct TopoArgs {
    /// Print JSON: {"nodes":[{"id","cpus","mem_total_bytes","mem_free_bytes","file_pages_bytes","distances",...}]}
    #[arg(long)]
    json: bool,
    /// Describe a synthetic topology instead of this machine (spec `n0=0-1@1G n1=2-3@1G` or JSON).
    #[arg(long, value_name = "SPEC")]
    synthetic: Option<String>,
}

pub fn run(a: TopoArgs) -> anyhow::Result<ExitCode> {
    let topo = match &a.synthetic {
        Some(spec) => {
            check_synthetic_size(spec)?;
            Topology::synthetic(spec)
                .map_err(|e| crate::args::UsageError(format!("--synthetic: {e}")))?
        }
        None => Topology::detect()?,
    };
    if a.json {
        print_json(&topo)?;
    } else {
        crate::out!("{}", render(&topo))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Most nodes a synthetic topology may have (the kernel's largest `MAX_NUMNODES`), and the
/// longest spec: the work grows faster than the node count.
const MAX_SYNTHETIC_NODES: usize = 1024;
const MAX_SYNTHETIC_BYTES: usize = 64 << 10;

fn check_synthetic_size(spec: &str) -> anyhow::Result<()> {
    if spec.len() > MAX_SYNTHETIC_BYTES {
        crate::usage_bail!(
            "--synthetic: the spec is {} bytes; at most {MAX_SYNTHETIC_BYTES} are accepted",
            spec.len()
        );
    }
    let nodes = spec
        .split_whitespace()
        .filter(|t| t.starts_with('n') && t[1..].starts_with(|c: char| c.is_ascii_digit()))
        .count();
    if nodes > MAX_SYNTHETIC_NODES {
        crate::usage_bail!(
            "--synthetic: {nodes} nodes; at most {MAX_SYNTHETIC_NODES} are accepted"
        );
    }
    Ok(())
}

fn render(t: &Topology) -> String {
    let mut s = format!(
        "{} node(s) ({})\n{:<5} {:<16} {:>11} {:>11} {:>11} {:>11} {:>9}\n",
        t.nodes.len(),
        t.source,
        "node",
        "cpus",
        "mem total",
        "mem free",
        "file cache",
        "dirty",
        "writeback"
    );
    for n in &t.nodes {
        let cpus = if n.cpus.is_empty() {
            "-".to_string()
        } else {
            cpulist::format(&n.cpus)
        };
        s += &format!(
            "{:<5} {:<16} {:>11} {:>11} {:>11} {:>11} {:>9}\n",
            n.id,
            cpus,
            human_bytes(n.mem.mem_total_bytes),
            human_bytes(n.mem.mem_free_bytes),
            human_bytes(n.mem.file_pages_bytes),
            human_bytes(n.mem.dirty_bytes),
            human_bytes(n.mem.writeback_bytes),
        );
    }
    s += "\ndistances\n     ";
    for n in &t.nodes {
        s += &format!("{:>5}", n.id);
    }
    s += "\n";
    for n in &t.nodes {
        s += &format!("{:<5}", n.id);
        for m in &t.nodes {
            match n.distances.get(&m.id) {
                Some(d) => s += &format!("{d:>5}"),
                None => s += &format!("{:>5}", "?"),
            }
        }
        s += "\n";
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_shows_cpuless_node_and_distances() {
        let t = Topology::synthetic("n0=0-3,8@1G n2=@512M dist=10,31;31,10").unwrap();
        let out = render(&t);
        assert!(out.contains("0-3,8"), "{out}");
        assert!(out.lines().any(|l| l.starts_with("2     -")), "{out}");
        assert!(out.contains("512.0 MiB"), "{out}");
        assert!(
            out.lines()
                .any(|l| l.trim_start().starts_with("2") && l.contains("31   10")),
            "{out}"
        );
    }
}
