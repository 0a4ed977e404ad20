//! `numaio warm`: make files' pages resident on chosen nodes, and verify it.
//!
//! Exit status: 0 when every file reached its target, 3 when some file did not (the
//! distribution says how far it got), 1 on errors.

use crate::cmd::where_::{nodes_text, pct, report_error, JsonError};
use crate::output::{human_bytes, print_json, quote};
use numaio_pagecache::{warm_file, PagecacheError, Target, WarmOptions, WarmReport};
use serde::Serialize;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

/// Files at least this large get a progress bar (on a terminal).
const PROGRESS_MIN_BYTES: u64 = 64 << 20;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["node", "interleave", "stripe", "weights"])))]
pub struct WarmArgs {
    /// Files to warm.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Put every page on this node.
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
    /// Print JSON: {"files":[{"path","target","pages","read_pages","migration":{...},"residency":{...},"on_target_pages","target_reached",...}],"errors":[...]}
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
struct Output<'a> {
    files: &'a [WarmReport],
    errors: Vec<JsonError>,
}

pub fn run(a: WarmArgs) -> anyhow::Result<ExitCode> {
    let target = build_target(
        a.node,
        a.interleave.as_deref(),
        a.stripe.as_deref(),
        a.chunk.as_deref(),
        a.weights.as_deref(),
    )?;
    let tty = std::io::stderr().is_terminal();
    let mut reports = Vec::new();
    let mut errors: Vec<PagecacheError> = Vec::new();
    for path in &a.paths {
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let bar = if tty && size >= PROGRESS_MIN_BYTES {
            let b = indicatif::ProgressBar::new(size);
            if let Ok(style) = indicatif::ProgressStyle::with_template(
                "{msg} [{bar:30}] {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
            ) {
                b.set_style(style.progress_chars("=> "));
            }
            b.set_message(format!("warming {}", quote(path)));
            Some(b)
        } else {
            None
        };
        let mut cb = |done: u64, _total: u64| {
            if let Some(b) = &bar {
                b.set_position(done);
            }
        };
        let res = warm_file(
            path,
            &target,
            WarmOptions {
                reread: a.reread,
                progress: Some(&mut cb),
                ..Default::default()
            },
        );
        if let Some(b) = &bar {
            b.finish_and_clear();
        }
        match res {
            Ok(r) => {
                if !a.json {
                    crate::out!("{}", render(&r))?;
                }
                reports.push(r);
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(e);
            }
        }
    }
    if a.json {
        print_json(&Output {
            files: &reports,
            errors: errors.iter().map(JsonError::from).collect(),
        })?;
    }
    Ok(if !errors.is_empty() {
        ExitCode::FAILURE
    } else if reports.iter().all(|r| r.target_reached) {
        ExitCode::SUCCESS
    } else {
        crate::exit::code(crate::exit::PARTIAL)
    })
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
