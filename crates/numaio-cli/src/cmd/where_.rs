//! `numaio where`: on which nodes files' cached pages sit. Never reads uncached pages in.

use crate::output::{human_bytes, print_json, quote};
use crate::{outln, warnln};
use numaio_pagecache::{
    collect_files, file_residency, FileResidency, PagecacheError, Totals, WhereOptions,
};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
pub struct WhereArgs {
    /// Files to inspect (directories with -r).
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Walk directories recursively.
    #[arg(short = 'r', long)]
    recursive: bool,
    /// Follow symbolic links met while walking (command-line paths are always followed).
    #[arg(long)]
    follow_symlinks: bool,
    /// Print JSON: {"files":[{"path","size_bytes","pages","resident_pages","nodes":{"0":N}}],"total":{...},"errors":[...]}
    #[arg(long)]
    json: bool,
    /// Show a map of which node holds which part of the file: one cell per CELL bytes
    /// (e.g. --map=1M; plain --map splits each file into 64 cells).
    #[arg(long, value_name = "CELL", num_args = 0..=1, default_missing_value = "auto", require_equals = true, value_parser = map_cell)]
    map: Option<String>,
    /// Only this byte range: OFF:LEN with K/M/G suffixes; OFF: means to the end.
    #[arg(long, value_name = "OFF:LEN", value_parser = parse_range)]
    range: Option<(u64, u64)>,
}

/// Parses `OFF:LEN` (sizes with optional K/M/G/T suffix; an empty LEN means to the end).
pub(crate) fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (o, l) = s
        .split_once(':')
        .ok_or_else(|| format!("range {s:?} is not OFF:LEN (e.g. 1G:64M)"))?;
    let off = numaio_sys::topology::parse_size(o)
        .ok_or_else(|| format!("bad offset {o:?} in range {s:?}"))?;
    let len = if l.trim().is_empty() {
        u64::MAX
    } else {
        numaio_sys::topology::parse_size(l)
            .ok_or_else(|| format!("bad length {l:?} in range {s:?}"))?
    };
    Ok((off, len))
}

/// `auto` or a cell size from 1 byte to 1 TiB.
fn map_cell(s: &str) -> Result<String, String> {
    if s == "auto" {
        return Ok(s.into());
    }
    crate::args::parse_size_in(s, 1, 1 << 40).map(|_| s.to_string())
}

/// One error in JSON output.
#[derive(Serialize)]
pub(crate) struct JsonError {
    /// Lossy only where the name is not UTF-8, which JSON cannot hold.
    pub path: Option<String>,
    pub kind: &'static str,
    pub error: String,
}

impl From<&PagecacheError> for JsonError {
    fn from(e: &PagecacheError) -> Self {
        JsonError {
            path: e.path().map(|p| p.to_string_lossy().into_owned()),
            kind: e.kind(),
            error: e.to_string(),
        }
    }
}

#[derive(Serialize)]
struct Output<'a> {
    files: &'a [FileResidency],
    total: &'a Totals,
    errors: Vec<JsonError>,
}

pub fn run(a: WhereArgs) -> anyhow::Result<ExitCode> {
    let cell = match a.map.as_deref() {
        None | Some("auto") => None,
        Some(s) => Some(
            numaio_sys::topology::parse_size(s)
                .filter(|&c| c > 0)
                .ok_or_else(|| {
                    crate::args::UsageError(format!("bad --map cell size {s:?} (e.g. --map=1M)"))
                })?,
        ),
    };
    let mut files = Vec::new();
    let mut errors = Vec::new();
    let mut total = Totals::default();
    for item in collect_files(&a.paths, a.recursive, a.follow_symlinks) {
        let path = match item {
            Ok(p) => p,
            Err(e) => {
                report_error(&e, a.json);
                errors.push(e);
                continue;
            }
        };
        let map_chunk = match (&a.map, cell) {
            (None, _) => None,
            (Some(_), Some(c)) => Some(c),
            (Some(_), None) => Some(auto_cell(&path, a.range)),
        };
        let opts = WhereOptions {
            range: a.range,
            map_chunk,
            ..Default::default()
        };
        match file_residency(&path, &opts) {
            Ok(r) => {
                total.add(&r);
                if !a.json {
                    crate::out!("{}", render_file(&r))?;
                }
                warn_file(&r);
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
            files: &files,
            total: &total,
            errors: errors.iter().map(JsonError::from).collect(),
        })?;
    } else if files.len() > 1 {
        outln!(
            "total: {} pages, {} resident ({}){}",
            total.pages,
            total.resident_pages,
            pct(total.resident_pages, total.pages),
            nodes_text(&total.nodes, total.resident_pages)
        )?;
    }
    Ok(if errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Prints an error on stderr (in JSON mode too: stdout then holds only the JSON).
pub(crate) fn report_error(e: &PagecacheError, _json: bool) {
    warnln!("{e}");
}

/// 64 cells per file (or range), whole pages each.
fn auto_cell(path: &std::path::Path, range: Option<(u64, u64)>) -> u64 {
    let ps = numaio_sys::page_size() as u64;
    let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let len = match range {
        Some((o, l)) => l.min(size.saturating_sub(o)),
        None => size,
    };
    len.div_ceil(64).div_ceil(ps).max(1) * ps
}

fn warn_file(r: &FileResidency) {
    if !r.mincore_truthful {
        warnln!(
            "warning: {}: mincore cannot see this file's page cache for this user (not the owner, no write permission, not root); residency may read as 0. Run as the owner or root.",
            quote(&r.path)
        );
    }
    if r.evicted_during_query > 0 || r.read_in_during_query > 0 {
        warnln!(
            "note: {}: {} page(s) were evicted while being inspected (not counted); {} page(s) evicted between check and touch were read back in",
            quote(&r.path),
            r.evicted_during_query,
            r.read_in_during_query
        );
    }
}

pub(crate) fn pct(a: u64, b: u64) -> String {
    if b == 0 {
        "-".into()
    } else {
        format!("{:.1}%", a as f64 * 100.0 / b as f64)
    }
}

/// `  node 0: N (x%)  node 1: ...` relative to `of` pages.
pub(crate) fn nodes_text(nodes: &BTreeMap<u32, u64>, of: u64) -> String {
    let mut s = String::new();
    for (n, c) in nodes {
        s += &format!("  node {n}: {c} ({})", pct(*c, of));
    }
    s
}

fn render_file(r: &FileResidency) -> String {
    let mut s = format!(
        "{}: {} ({} pages{}), {} resident ({}){}\n",
        quote(&r.path),
        human_bytes(r.size_bytes),
        r.pages,
        match &r.range {
            Some(br) => format!(" in range {}+{}", br.offset, br.len),
            None => String::new(),
        },
        r.resident_pages,
        pct(r.resident_pages, r.pages),
        nodes_text(&r.nodes, r.resident_pages)
    );
    if let Some(map) = &r.map {
        let cell = map.first().map_or(0, |c| c.pages * r.page_size);
        s += &format!(
            "  map, {} per cell ('.' not cached, digit = node, '*' mixed):\n",
            human_bytes(cell)
        );
        for line in map.chunks(64) {
            let off = line[0].offset;
            let cells: String = line.iter().map(|c| c.symbol()).collect();
            s += &format!("  {:>10} {cells}\n", human_offset(off));
        }
    }
    s
}

fn human_offset(b: u64) -> String {
    if b == 0 {
        "0".into()
    } else {
        human_bytes(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_output_shows_nodes_and_map() {
        let cell = |off: u64, res: u64, nodes: &[(u32, u64)]| numaio_pagecache::MapCell {
            offset: off,
            len: 4 * 4096,
            pages: 4,
            resident_pages: res,
            nodes: nodes.iter().copied().collect(),
        };
        let r = FileResidency {
            path: "/d/f".into(),
            size_bytes: 4 * 4 * 4096,
            pages: 16,
            resident_pages: 8,
            nodes: [(0, 4), (11, 4)].into_iter().collect(),
            range: None,
            page_size: 4096,
            evicted_during_query: 0,
            read_in_during_query: 0,
            unknown_node_pages: 0,
            mincore_truthful: true,
            map: Some(vec![
                cell(0, 4, &[(0, 4)]),
                cell(16384, 0, &[]),
                cell(32768, 2, &[(0, 1), (11, 1)]),
                cell(49152, 2, &[(11, 2)]),
            ]),
        };
        let out = render_file(&r);
        assert!(out.starts_with("/d/f: 64.0 KiB (16 pages), 8 resident (50.0%)  node 0: 4 (50.0%)  node 11: 4 (50.0%)"), "{out}");
        assert!(out.contains("16.0 KiB per cell"), "{out}");
        assert!(out.lines().any(|l| l.trim() == "0 0.*b"), "{out}");
    }

    #[test]
    fn hostile_names_are_quoted() {
        let r = FileResidency {
            path: "/d/a\n/fake: 0 B\u{1b}[2J".into(),
            size_bytes: 0,
            pages: 0,
            resident_pages: 0,
            nodes: Default::default(),
            range: None,
            page_size: 4096,
            evicted_during_query: 0,
            read_in_during_query: 0,
            unknown_node_pages: 0,
            mincore_truthful: true,
            map: None,
        };
        let out = render_file(&r);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("$'/d/a\\n/fake: 0 B\\033[2J': "), "{out}");
    }

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("1M:4K"), Ok((1 << 20, 4096)));
        assert_eq!(parse_range("0:"), Ok((0, u64::MAX)));
        assert!(parse_range("12").is_err());
        assert!(parse_range("x:1").is_err());
        assert!(parse_range("1:y").is_err());
    }
}
