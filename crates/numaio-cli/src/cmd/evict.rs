//! `numaio evict`: drop files' clean cached pages (POSIX_FADV_DONTNEED). With `--sync`, dirty
//! pages are written first (fdatasync), so nothing is lost. File contents never change.

use crate::cmd::where_::{report_error, JsonError};
use crate::output::quote;
use crate::walk::{finish, JsonDoc, Out, Selection, WalkArgs};
use numaio_pagecache::evict_open;
use serde::Serialize;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(after_help = crate::exit::HELP)]
pub struct EvictArgs {
    #[command(flatten)]
    walk: WalkArgs,
    #[command(flatten)]
    sel: Selection,
    /// Write dirty pages first (fdatasync) so they can be dropped too.
    #[arg(long)]
    sync: bool,
    /// Print JSON: {"schema_version":1,"files":[{"path","pages","resident_before","resident_after","synced"}],"total":{...},"errors":[...]}
    #[arg(long)]
    json: bool,
}

#[derive(Serialize, Default)]
struct Total {
    pages: u64,
    resident_before: u64,
    resident_after: u64,
}

#[derive(Serialize)]
struct Rest {
    total: Total,
    errors: Vec<JsonError>,
}

pub fn run(a: EvictArgs) -> anyhow::Result<ExitCode> {
    let files = a.walk.files(a.sel.batch.as_deref())?;
    let batch_failed = files.batch_failed.clone();
    let mut out = Out::new();
    let mut doc = if a.json {
        Some(JsonDoc::begin(&mut out)?)
    } else {
        None
    };
    let mut total = Total::default();
    let mut errors: Vec<JsonError> = Vec::new();
    for item in files {
        let res = item.and_then(|f| evict_open(&f, a.sync, a.sel.range));
        match res {
            Ok(r) => {
                total.pages += r.pages;
                total.resident_before += r.resident_before.unwrap_or(0);
                total.resident_after += r.resident_after.unwrap_or(0);
                match doc.as_mut() {
                    Some(d) => d.file(&mut out, &r)?,
                    None => {
                        let show =
                            |v: Option<u64>| v.map_or("unknown".to_string(), |v| v.to_string());
                        let mut s = format!(
                            "{}: {} pages, resident before {}, after {}\n",
                            quote(&r.path),
                            r.pages,
                            show(r.resident_before),
                            show(r.resident_after)
                        );
                        if r.resident_before.is_none() {
                            s += "  (the kernel hides this file's residency from this user: not the owner, no write permission)\n";
                        }
                        if let Some(left) = r.resident_after.filter(|&n| n > 0) {
                            s += &format!(
                                "  {} pages stay: mapped by a process, locked, or dirty{}\n",
                                left,
                                if a.sync { "" } else { " (try --sync)" }
                            );
                        }
                        out.push(&s)?;
                    }
                }
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(JsonError::from(&e));
            }
        }
    }
    let failed = !errors.is_empty() || batch_failed.get();
    finish(out, doc, &Rest { total, errors }, failed, true)
}
