//! `numaio replicate PATH... [--nodes LIST|all] [--dir DIR] [--max-memory SIZE]`, `--list`,
//! `--drop [PATH...]`: per-node copies of read-mostly files (`numaio_pagecache::replica`),
//! which `numaio run --replica` shows to a command in place of the originals.

use crate::cmd::run::parse_nodes;
use crate::cmd::where_::{pct, JsonError};
use crate::output::{human_bytes, quote};
use crate::{exit, outln, warnln};
use numaio_pagecache::{PagecacheError, Replica, ReplicaOptions, ReplicaStore};
use numaio_sys::{cpulist, Topology};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = concat!(
    "Each replica is a copy of the file in a tmpfs mounted for its node (DIR/nodeN, \
     mpol=bind:N, mounted on first use; needs root), so its pages stay on that node. A \
     replica is made for one version of the file (device, inode, size, modification and \
     change times): after the file changes, the old replica is never used again, and the \
     next replicate (or run --replica) makes a new one. A file open for writing is refused.\n\n",
    numaio_cli_support::exit_status_help!()
))]
pub struct ReplicateArgs {
    /// Files to replicate (with --drop: whose replicas to remove; none: all).
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Nodes to hold a replica: a list like 0-1,3, or `all` (every node with memory).
    /// Default: every node with CPUs and memory.
    #[arg(long, value_name = "LIST")]
    nodes: Option<String>,
    /// Where the per-node tmpfs mounts live.
    #[arg(long, value_name = "DIR", default_value = numaio_pagecache::replica::DEFAULT_DIR)]
    dir: PathBuf,
    /// The most memory the replicas on one node may take together (e.g. 4G); a replica
    /// that would not fit is refused, naming the node.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::size)]
    max_memory: Option<u64>,
    /// List the replicas (fresh: the original is unchanged since the copy).
    #[arg(long, conflicts_with_all = ["drop", "paths", "max_memory"])]
    list: bool,
    /// Remove the replicas of the PATHs (of every file when none is given) on --nodes (every
    /// node when not given); a node's tmpfs is unmounted once empty.
    #[arg(long, conflicts_with = "max_memory")]
    drop: bool,
    /// Print JSON: {"schema_version":1,"replicas":[{"original","node","replica","bytes","pages","pages_on_node","fresh","made"}],"errors":[{"path","kind","error"}]} (--drop: "dropped" instead of "replicas").
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct Doc<'a> {
    schema_version: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    replicas: Option<&'a [Replica]>,
    #[serde(skip_serializing_if = "Option::is_none")]
    dropped: Option<&'a [Replica]>,
    errors: Vec<JsonError>,
}

pub fn run(a: ReplicateArgs) -> anyhow::Result<ExitCode> {
    let store = ReplicaStore::new(&a.dir);
    let topo = Topology::detect()?;
    if a.list {
        let all = store.list()?;
        return finish(&a, Some(&all), None, Vec::new());
    }
    if a.drop {
        let nodes = match &a.nodes {
            Some(spec) => Some(parse_nodes(&topo, "--nodes", spec, |_| Ok(()))?),
            None => None,
        };
        let gone = store.remove(&a.paths, nodes.as_deref())?;
        if gone.is_empty() && !a.json {
            warnln!("no replica matched");
        }
        return finish(&a, None, Some(&gone), Vec::new());
    }
    if a.paths.is_empty() {
        return Err(crate::args::UsageError(
            "give the files to replicate, or --list or --drop".into(),
        )
        .into());
    }
    let nodes = match &a.nodes {
        Some(spec) => parse_nodes(&topo, "--nodes", spec, |n| {
            if n.has_memory() {
                Ok(())
            } else {
                Err("has no memory".into())
            }
        })?,
        None => topo
            .nodes
            .iter()
            .filter(|n| n.has_cpus() && n.has_memory())
            .map(|n| n.id)
            .collect(),
    };
    let opts = ReplicaOptions {
        max_memory: a.max_memory,
    };
    let mut made = Vec::new();
    let mut errors = Vec::new();
    for p in &a.paths {
        for &node in &nodes {
            match store.replicate(p, node, &opts) {
                Ok(r) => made.push(r),
                Err(e) => {
                    warnln!("{e}");
                    errors.push(JsonError::from(&e));
                    // Only room depends on the node: any other refusal would be repeated.
                    if !matches!(e, PagecacheError::NoRoom { .. }) {
                        break;
                    }
                }
            }
        }
    }
    if !a.json && made.is_empty() && errors.is_empty() {
        warnln!("no node to replicate on ({})", cpulist::format(&nodes));
    }
    finish(&a, Some(&made), None, errors)
}

fn finish(
    a: &ReplicateArgs,
    replicas: Option<&[Replica]>,
    dropped: Option<&[Replica]>,
    errors: Vec<JsonError>,
) -> anyhow::Result<ExitCode> {
    let failed = !errors.is_empty();
    if a.json {
        crate::output::print_json(&Doc {
            schema_version: 1,
            replicas,
            dropped,
            errors,
        })?;
    } else if a.list {
        outln!("NODE  SIZE        ON NODE  FRESH  ORIGINAL")?;
        for r in replicas.unwrap_or_default() {
            outln!(
                "{:<5} {:<11} {:>7}  {:<5}  {}",
                r.node,
                human_bytes(r.bytes),
                pct(r.pages_on_node, r.pages),
                if r.fresh { "yes" } else { "no" },
                quote(&r.original)
            )?;
        }
    } else {
        for r in replicas.unwrap_or_default() {
            outln!(
                "{}: node {} replica {} ({}, {} of {} pages on node {}{})",
                quote(&r.original),
                r.node,
                quote(&r.replica),
                human_bytes(r.bytes),
                r.pages_on_node,
                r.pages,
                r.node,
                if r.made { ", made" } else { ", already there" }
            )?;
        }
        for r in dropped.unwrap_or_default() {
            outln!(
                "dropped {} on node {} ({})",
                quote(&r.original),
                r.node,
                human_bytes(r.bytes)
            )?;
        }
    }
    Ok(exit::code(if failed { exit::ERROR } else { exit::OK }))
}
