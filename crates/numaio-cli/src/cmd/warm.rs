//! `numaio warm`: make files' pages resident on chosen nodes, and verify it.
//!
//! Exit status: 0 when every file reached its target, 3 when some file did not (the
//! distribution says how far it got), 1 on errors, 2 on usage errors.

use crate::cmd::where_::{nodes_text, pct, report_error, JsonError};
use crate::output::{human_bytes, quote};
use crate::walk::{finish, JsonDoc, Out, Selection, WalkArgs};
use crate::warnln;
use numaio_pagecache::{
    warm_needs, warm_opened, MoveOptions, OpenFile, PagecacheError, Target, WarmOptions, WarmReport,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").args(["node", "interleave", "stripe", "weights"])))]
#[command(
    after_help = concat!("Before warming a file, warm checks that the target nodes have room \
    for the pages still to read (free + reclaimable file cache, from the nodes' meminfo) and \
    refuses the file otherwise (exit 1); --force warms anyway.\n\n", crate::exit_status_help!())
)]
pub struct WarmArgs {
    #[command(flatten)]
    walk: WalkArgs,
    #[command(flatten)]
    sel: Selection,
    /// Warm even when the target nodes look too full to hold the file.
    #[arg(long)]
    force: bool,
    /// Put every page on this node (default on a machine with one memory node: that node).
    #[arg(long, value_name = "N", value_parser = crate::args::node)]
    node: Option<u32>,
    /// Page-by-page round robin over these nodes (e.g. 0-3 or 0,2).
    #[arg(long, value_name = "NODES")]
    interleave: Option<String>,
    /// Chunk i of the file on node NODES[i mod K] (needs --chunk).
    #[arg(long, value_name = "NODES", requires = "chunk")]
    stripe: Option<String>,
    /// Stripe chunk size (e.g. 1M); a multiple of the page size.
    #[arg(long, value_name = "SIZE", requires = "stripe")]
    chunk: Option<String>,
    /// Weighted interleave: N:W,... gives node N W consecutive pages per cycle.
    #[arg(long, value_name = "N:W,...")]
    weights: Option<String>,
    /// Evict and re-read pages cached on the wrong node instead of migrating them.
    #[arg(long)]
    reread: bool,
    /// Print JSON: {"schema_version":1,"files":[{"path","target","pages","read_pages","migration":{...},"residency":{...},"on_target_pages","target_reached",...}],"errors":[...]}
    #[arg(long)]
    json: bool,
}

/// Builds a target from the shared target flags of `warm` and `move`. Node ids are bounded
/// by the kernel's possible nodes before anything is expanded; every error is a usage error.
pub(crate) fn build_target(
    node: Option<u32>,
    interleave: Option<&str>,
    stripe: Option<&str>,
    chunk: Option<&str>,
    weights: Option<&str>,
) -> anyhow::Result<Target> {
    let max_node = (numaio_sys::mask::possible_nodes().max(1) - 1) as u32;
    let page = numaio_sys::page_size() as u64;
    let usage = |e: PagecacheError| crate::args::UsageError(e.to_string());
    let t = Target::from_flags(node, interleave, stripe, chunk, weights, max_node, page)
        .map_err(usage)?;
    t.validate(page).map_err(usage)?;
    Ok(t)
}

#[derive(Serialize)]
struct Rest {
    errors: Vec<JsonError>,
}

/// Room left on each node, in bytes ([`numaio_sys::MemInfo::room_bytes`]). Decreases as
/// files are warmed.
fn node_room() -> BTreeMap<u32, i64> {
    let Ok(topo) = numaio_sys::Topology::detect() else {
        return BTreeMap::new();
    };
    topo.nodes
        .iter()
        .filter(|n| n.has_memory())
        .map(|n| (n.id, n.mem.room_bytes().min(i64::MAX as u64) as i64))
        .collect()
}

/// The target when no target flag is given: the only memory node, on a one-node machine.
fn default_target() -> anyhow::Result<Target> {
    match numaio_pagecache::single_memory_node() {
        Some(n) => Ok(Target::Node(n)),
        None => Err(crate::args::UsageError(
            "this machine has several memory nodes: choose where to warm with --node, \
             --interleave, --stripe or --weights"
                .into(),
        )
        .into()),
    }
}

pub fn run(a: WarmArgs) -> anyhow::Result<ExitCode> {
    let target = if a.node.is_none()
        && a.interleave.is_none()
        && a.stripe.is_none()
        && a.weights.is_none()
    {
        default_target()?
    } else {
        build_target(
            a.node,
            a.interleave.as_deref(),
            a.stripe.as_deref(),
            a.chunk.as_deref(),
            a.weights.as_deref(),
        )?
    };
    let tty = std::io::stderr().is_terminal();
    let files = a.walk.files(a.sel.batch.as_deref())?;
    let batch_failed = files.batch_failed.clone();
    let mut out = Out::new();
    let mut doc = if a.json {
        Some(JsonDoc::begin(&mut out)?)
    } else {
        None
    };
    let mut room = node_room();
    let mut errors: Vec<JsonError> = Vec::new();
    let mut all_reached = true;
    for item in files {
        let f = match item {
            Ok(f) => f,
            Err(e) => {
                report_error(&e, a.json);
                errors.push(JsonError::from(&e));
                continue;
            }
        };
        if let Err(msg) = check_room(&f, &target, a.sel.range, &mut room, a.force) {
            warnln!("{msg}");
            errors.push(JsonError {
                path: Some(f.path.to_string_lossy().into_owned()),
                kind: "no_room",
                error: msg,
            });
            continue;
        }
        let bar = if tty && f.size >= PROGRESS_MIN_BYTES {
            let b = indicatif::ProgressBar::new(f.size);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(format!("warming {}", quote(&f.path)));
            Some(b)
        } else {
            None
        };
        let mut cb = |done: u64, _total: u64| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        };
        let res = warm_opened(
            &f,
            &target,
            WarmOptions {
                reread: a.reread,
                progress: Some(&mut cb),
                move_opts: MoveOptions {
                    range: a.sel.range,
                    ..Default::default()
                },
            },
        );
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        match res {
            Ok(r) => {
                all_reached &= r.target_reached;
                match doc.as_mut() {
                    Some(d) => d.file(&mut out, &r)?,
                    None => out.push(&render(&r))?,
                }
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(JsonError::from(&e));
            }
        }
    }
    let failed = !errors.is_empty() || batch_failed.get();
    finish(out, doc, &Rest { errors }, failed, all_reached)
}

/// Checks that the target nodes have room for what `f` still needs, and books it. An
/// error message when they do not (a warning only, with `force`).
fn check_room(
    f: &OpenFile,
    target: &Target,
    range: Option<(u64, u64)>,
    room: &mut BTreeMap<u32, i64>,
    force: bool,
) -> Result<(), String> {
    let Ok(needs) = warm_needs(f, target, range) else {
        // The warm itself will report what is wrong with the file.
        return Ok(());
    };
    let mut short = Vec::new();
    for (&n, &need) in &needs {
        let Some(left) = room.get_mut(&n) else {
            continue;
        };
        if need as i64 > *left {
            short.push(format!(
                "node {n} has room for about {} (free + reclaimable file cache), {} more are needed",
                human_bytes((*left).max(0) as u64),
                human_bytes(need)
            ));
        }
        *left -= need as i64;
    }
    if short.is_empty() {
        return Ok(());
    }
    let msg = format!(
        "{}: {}; pages would be reclaimed while warming and the target not reached",
        quote(&f.path),
        short.join("; ")
    );
    if force {
        warnln!("warning: {msg} (warming anyway: --force)");
        Ok(())
    } else {
        Err(format!(
            "{msg}. Not warmed: free memory on the node, choose other nodes, warm a --range, or use --force"
        ))
    }
}

fn render(r: &WarmReport) -> String {
    let m = &r.migration;
    let mut s = format!(
        "{}: {} ({} pages) onto {} in {:.2} s: read {} pages, migrated {}, evicted for re-read {}\n",
        quote(&r.path),
        human_bytes(r.residency.size_bytes),
        r.pages,
        r.target,
        r.elapsed_secs,
        r.read_pages.map_or("?".to_string(), |n| n.to_string()),
        m.moved,
        r.evicted_for_reread,
    );
    s += &format!(
        "  resident {} ({}), on target {} ({}){}\n",
        r.residency.resident_pages,
        pct(r.residency.resident_pages, r.pages),
        r.on_target_pages,
        pct(r.on_target_pages, r.pages),
        nodes_text(&r.residency.nodes, r.residency.resident_pages)
    );
    if m.busy + m.mapped_by_others + m.no_memory + m.failed > 0 {
        s += &format!(
            "  could not migrate: {} busy, {} mapped by other processes (try move --all as root), {} no memory on the node, {} failed\n",
            m.busy, m.mapped_by_others, m.no_memory, m.failed
        );
    }
    if r.rounds > 1 {
        s += &format!(
            "  {} read-migrate-verify rounds: pages were dropped from the cache while warming\n",
            r.rounds
        );
    }
    s += if r.target_reached {
        "  target reached\n"
    } else {
        "  target NOT reached\n"
    };
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_from_flags() {
        assert_eq!(
            build_target(Some(0), None, None, None, None).unwrap(),
            Target::Node(0)
        );
        assert_eq!(
            build_target(None, None, Some("0"), Some("1M"), None).unwrap(),
            Target::Stripe {
                nodes: vec![0],
                chunk: 1 << 20
            }
        );
        assert_eq!(
            build_target(None, None, None, None, Some("0:2")).unwrap(),
            Target::Weights(vec![(0, 2)])
        );
        let e = build_target(None, Some("x"), None, None, None).unwrap_err();
        assert!(e.to_string().contains("bad node list"), "{e}");
        assert!(e.downcast_ref::<crate::args::UsageError>().is_some());
        let e = build_target(None, None, Some("0"), Some("1Q"), None).unwrap_err();
        assert!(e.to_string().contains("bad --chunk"), "{e}");
        let e = build_target(Some(4000), None, None, None, None).unwrap_err();
        assert!(e.to_string().contains("node 4000"), "{e}");
        let t = std::time::Instant::now();
        let e = build_target(None, Some("0-1048576"), None, None, None).unwrap_err();
        assert!(e.to_string().contains("above the largest allowed"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
    }
}
