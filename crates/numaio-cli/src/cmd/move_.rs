//! `numaio move`: migrate files' resident pages to chosen nodes. Reads nothing new and never
//! changes file contents.
//!
//! Exit status: 0 when every resident page is on its target node, 3 when some could not be
//! moved (busy, mapped by others, no memory), 1 on errors, 2 on usage errors.

use crate::cmd::warm::build_target;
use crate::cmd::where_::{nodes_text, pct, report_error, JsonError};
use crate::output::quote;
use crate::walk::{finish, JsonDoc, Out, Selection, WalkArgs};
use numaio_pagecache::{
    move_opened, residency_of, FileResidency, MoveOptions, MoveReport, WhereOptions,
};
use serde::Serialize;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["to", "interleave", "stripe", "weights"])))]
#[command(
    after_help = crate::exit::HELP
)]
pub struct MoveArgs {
    #[command(flatten)]
    walk: WalkArgs,
    #[command(flatten)]
    sel: Selection,
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
    /// Print JSON: {"schema_version":1,"files":[{"path","pages","resident_pages","moved","already","busy","mapped_by_others","no_memory","failed","not_resident","after":{...}}],"errors":[...]}
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
struct Rest {
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
        range: a.sel.range,
        ..Default::default()
    };
    let files = a.walk.files(a.sel.batch.as_deref())?;
    let batch_failed = files.batch_failed.clone();
    let mut out = Out::new();
    let mut doc = if a.json {
        Some(JsonDoc::begin(&mut out)?)
    } else {
        None
    };
    let mut errors: Vec<JsonError> = Vec::new();
    let mut complete = true;
    for item in files {
        let res = item.and_then(|f| {
            let report = move_opened(&f, &target, &opts)?;
            let after = residency_of(
                &f,
                &WhereOptions {
                    range: a.sel.range,
                    ..Default::default()
                },
            )
            .ok();
            Ok(FileOut { report, after })
        });
        match res {
            Ok(fo) => {
                complete &= fo.report.complete();
                match doc.as_mut() {
                    Some(d) => d.file(&mut out, &fo)?,
                    None => out.push(&render(&fo, a.all))?,
                }
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(JsonError::from(&e));
            }
        }
    }
    let failed = !errors.is_empty() || batch_failed.get();
    finish(out, doc, &Rest { errors }, failed, complete)
}

fn render(fo: &FileOut, all: bool) -> String {
    let r = &fo.report;
    let mut s = format!(
        "{}: {} resident of {} pages: moved {}, already in place {}, busy {}, mapped by others {}, no memory {}, failed {}\n",
        quote(&r.path),
        r.resident_pages,
        r.pages,
        r.moved,
        r.already,
        r.busy,
        r.mapped_by_others,
        r.no_memory,
        r.failed
    );
    if let Some(f) = &fo.after {
        s += &format!(
            "  now resident {} ({}){}\n",
            f.resident_pages,
            pct(f.resident_pages, f.pages),
            nodes_text(&f.nodes, f.resident_pages)
        );
    }
    if r.mapped_by_others > 0 && !all {
        s +=
            "  pages mapped by other processes stay put; rerun with --all as root (CAP_SYS_NICE)\n";
    }
    s
}
