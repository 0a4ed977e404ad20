//! `numaio evict`: drop files' clean cached pages (POSIX_FADV_DONTNEED). With `--sync`, dirty
//! pages are written first (fdatasync), so nothing is lost. File contents never change.

use crate::cmd::where_::{report_error, JsonError};
use crate::outln;
use crate::output::{print_json, quote};
use numaio_pagecache::{evict_file, EvictReport, PagecacheError};
use serde::Serialize;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct EvictArgs {
    /// Files whose cached pages to drop.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Write dirty pages first (fdatasync) so they can be dropped too.
    #[arg(long)]
    sync: bool,
    /// Print JSON: {"files":[{"path","pages","resident_before","resident_after","synced"}],"total":{...},"errors":[...]}
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
struct Output {
    files: Vec<EvictReport>,
    total: Total,
    errors: Vec<JsonError>,
}

pub fn run(a: EvictArgs) -> anyhow::Result<ExitCode> {
    let mut files = Vec::new();
    let mut total = Total::default();
    let mut errors: Vec<PagecacheError> = Vec::new();
    for path in &a.paths {
        match evict_file(path, a.sync) {
            Ok(r) => {
                total.pages += r.pages;
                total.resident_before += r.resident_before.unwrap_or(0);
                total.resident_after += r.resident_after.unwrap_or(0);
                if !a.json {
                    let show = |v: Option<u64>| v.map_or("unknown".to_string(), |v| v.to_string());
                    outln!(
                        "{}: {} pages, resident before {}, after {}",
                        quote(&r.path),
                        r.pages,
                        show(r.resident_before),
                        show(r.resident_after)
                    )?;
                    if r.resident_before.is_none() {
                        outln!("  (the kernel hides this file's residency from this user: not the owner, no write permission)")?;
                    }
                    if let Some(left) = r.resident_after.filter(|&n| n > 0) {
                        outln!(
                            "  {} pages stay: mapped by a process, locked, or dirty{}",
                            left,
                            if a.sync { "" } else { " (try --sync)" }
                        )?;
                    }
                }
                files.push(r);
            }
            Err(e) => {
                report_error(&e, a.json);
                errors.push(e);
            }
        }
    }
    if a.json {
        print_json(&Output {
            files,
            total,
            errors: errors.iter().map(JsonError::from).collect(),
        })?;
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
