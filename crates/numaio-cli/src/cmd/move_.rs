//! `numaio move`: migrate files' resident pages to chosen nodes. Reads nothing new and never
//! changes file contents.
//!
//! Exit status: 0 when every resident page is on its target node, 3 when some could not be
//! moved (busy, mapped by others, no memory), 1 on errors.

use crate::cmd::warm::build_target;
use crate::cmd::where_::{nodes_text, pct, report_error, JsonError};
use crate::outln;
use crate::output::{print_json, quote};
use numaio_pagecache::{
    file_residency, move_file, FileResidency, MoveOptions, MoveReport, PagecacheError, WhereOptions,
};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["to", "interleave", "stripe", "weights"])))]
pub struct MoveArgs {
    /// Files whose cached pages to move.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Move every resident page to this node.
    #[arg(long, value_name = "N", value_parser = crate::args::node)]
    to: Option<u32>,
    /// Page-by-page round robin over these nodes (e.g. 0-3 or 0,2).
    #[arg(long, value_name = "NODES")]
    interleave: Option<String>,
    /// Chunk i of the file to node NODES[i mod K] (needs --chunk).
    #[arg(long, value_name = "NODES", requires = "chunk")]
    stripe: Option<String>,
    /// Stripe chunk size (e.g. 1M); a multiple of the page size.
    #[arg(long, value_name = "SIZE", requires = "stripe")]
    chunk: Option<String>,
    /// Weighted interleave: N:W,...
    #[arg(long, value_name = "N:W,...")]
    weights: Option<String>,
    /// Also move pages other processes map (MPOL_MF_MOVE_ALL; needs CAP_SYS_NICE).
    #[arg(long)]
    all: bool,
    /// Print JSON: {"files":[{"path","pages","resident_pages","moved","already","busy","mapped_by_others","no_memory","failed","not_resident","after":{...}}],"errors":[...]}
    #[arg(long)]
    json: bool,
}

#[derive(Serialize)]
struct FileOut {
    #[serde(flatten)]
    report: MoveReport,
    /// Residency after the move (from a fresh scan).
    after: Option<FileResidency>,
}

#[derive(Serialize)]
struct Output {
    files: Vec<FileOut>,
    errors: Vec<JsonError>,
}

pub fn run(a: MoveArgs) -> anyhow::Result<ExitCode> {
    let target = build_target(
        a.to,
        a.interleave.as_deref(),
        a.stripe.as_deref(),
        a.chunk.as_deref(),
        a.weights.as_deref(),
    )?;
    let opts = MoveOptions {
        move_all: a.all,
        ..Default::default()
    };
    let mut files = Vec::new();
    let mut errors: Vec<PagecacheError> = Vec::new();
    for path in &a.paths {
        match move_file(path, &target, &opts) {
            Ok(report) => {
                let after = file_residency(path, &WhereOptions::default()).ok();
                if !a.json {
                    let r = &report;
                    outln!(
                        "{}: {} resident of {} pages: moved {}, already in place {}, busy {}, mapped by others {}, no memory {}, failed {}",
                        quote(&r.path),
                        r.resident_pages,
                        r.pages,
                        r.moved,
                        r.already,
                        r.busy,
                        r.mapped_by_others,
                        r.no_memory,
                        r.failed
                    )?;
                    if let Some(f) = &after {
                        outln!(
                            "  now resident {} ({}){}",
                            f.resident_pages,
                            pct(f.resident_pages, f.pages),
                            nodes_text(&f.nodes, f.resident_pages)
                        )?;
                    }
                    if r.mapped_by_others > 0 && !a.all {
                        outln!("  pages mapped by other processes stay put; rerun with --all as root (CAP_SYS_NICE)")?;
                    }
                }
                files.push(FileOut { report, after });
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(e);
            }
        }
    }
    let complete = files.iter().all(|f| f.report.complete());
    if a.json {
        print_json(&Output {
            files,
            errors: errors.iter().map(JsonError::from).collect(),
        })?;
    }
    Ok(if !errors.is_empty() {
        ExitCode::FAILURE
    } else if complete {
        ExitCode::SUCCESS
    } else {
        crate::exit::code(crate::exit::PARTIAL)
    })
}
