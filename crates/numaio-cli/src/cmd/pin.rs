//! `numaio pin PID --node N [--migrate-memory]`: every thread of a process onto a node's
//! CPUs (within its cpuset), optionally with its memory.

use crate::outln;
use crate::output::{escape_message, human_bytes, print_json, quote};
use numaio_sys::{cpulist, Topology};
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct PinArgs {
    /// The process to pin.
    #[arg(value_parser = crate::args::pid)]
    pid: i32,
    /// The node whose CPUs the threads are restricted to.
    #[arg(long, value_parser = crate::args::node)]
    node: u32,
    /// Also migrate the process's memory to the node (migrate_pages, most-loaded node first).
    #[arg(long)]
    migrate_memory: bool,
    /// Print JSON: {pid,comm,node,cpus,affinity:{threads_set,threads_gone,failed},
    /// memory_steps:[{from,bytes_before,pages_not_moved}],memory_per_node_before/after}.
    #[arg(long)]
    json: bool,
}

pub fn run(a: PinArgs) -> anyhow::Result<ExitCode> {
    let topo = Topology::detect()?;
    let rep = numaio_proc::pin::pin(&topo, a.pid, a.node, a.migrate_memory).map_err(|e| {
        let msg = format!("cannot pin pid {}: {e}", a.pid);
        // A process or node that does not exist, or a process never to be moved, is a
        // usage error, like a bad argument.
        if e.is_gone()
            || matches!(
                e,
                numaio_proc::ProcError::Invalid(_) | numaio_proc::ProcError::Refused { .. }
            )
        {
            anyhow::Error::new(crate::args::UsageError(msg))
        } else {
            anyhow::anyhow!(msg)
        }
    })?;
    if a.json {
        print_json(&rep)?;
    } else {
        outln!(
            "pid {} ({}): {} thread(s) pinned to node {} (cpus {}){}",
            rep.pid,
            quote(&rep.comm),
            rep.affinity.threads_set,
            rep.node,
            cpulist::format(&rep.cpus),
            if rep.affinity.threads_gone > 0 {
                format!(", {} exited meanwhile", rep.affinity.threads_gone)
            } else {
                String::new()
            }
        )?;
        for f in &rep.affinity.failed {
            outln!("  thread failed: {}", escape_message(&f.to_string()))?;
        }
        for s in &rep.memory_steps {
            match &s.error {
                Some(e) => outln!(
                    "  memory on node {}: {}",
                    s.from,
                    escape_message(&e.to_string())
                )?,
                None => outln!(
                    "  memory on node {} ({}): migrated, {} page(s) could not move",
                    s.from,
                    human_bytes(s.bytes_before),
                    s.pages_not_moved
                )?,
            }
        }
        if a.migrate_memory {
            let fmt = |m: &std::collections::BTreeMap<u32, u64>| {
                m.iter()
                    .map(|(n, b)| format!("N{n}={}", human_bytes(*b)))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            outln!(
                "  memory per node: before {}  after {}",
                fmt(&rep.memory_per_node_before),
                fmt(&rep.memory_per_node_after)
            )?;
        }
    }
    let failed =
        !rep.affinity.failed.is_empty() || rep.memory_steps.iter().any(|s| s.error.is_some());
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
