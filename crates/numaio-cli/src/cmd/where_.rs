//! `numaio where`: on which nodes files' cached pages sit. Never reads uncached pages in.

use crate::output::{human_bytes, quote};
use crate::walk::{JsonDoc, Out, WalkArgs};
use crate::warnln;
use numaio_pagecache::{
    residency_of, FileResidency, OpenFile, PagecacheError, Totals, WhereOptions,
};
use numaio_proc::residency::{ask_daemon, Source, DEFAULT_SOCKET};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args)]
#[command(
    after_help = concat!("Columns (-o): RES (resident bytes), PAGES (resident pages), SIZE (file \
    size), FILE, NODES (resident pages per node, N:PAGES,...), PERCENT (resident share), \
    FILEPAGES (pages examined), SOURCE (collector or scan). Default: RES,PAGES,SIZE,NODES,FILE; -o +COL,... adds to \
    the default. Unlike fincore, -r walks directories (as in vmtouch); fincore's raw output \
    is --raw. A file with several hard links is counted once.\n\n", crate::exit_status_help!())
)]
pub struct WhereArgs {
    #[command(flatten)]
    walk: WalkArgs,
    /// Read more paths from FILE, one per line (- for stdin; -0 for NUL-separated).
    #[arg(long, value_name = "FILE")]
    batch: Option<PathBuf>,
    /// Print JSON: {"schema_version":1,"files":[{"path","size_bytes","pages","resident_pages","nodes":{"0":N}}],"total":{...},"errors":[...]}
    #[arg(long)]
    json: bool,
    /// Show a map of which node holds which part of the file: one cell per CELL bytes
    /// (e.g. --map=1M; plain --map splits each file into 64 cells).
    #[arg(long, value_name = "CELL", num_args = 0..=1, default_missing_value = "auto", require_equals = true, value_parser = map_cell)]
    map: Option<String>,
    /// Only this byte range: OFF:LEN with K/M/G suffixes; OFF: means to the end.
    #[arg(long, value_name = "OFF:LEN", value_parser = crate::args::parse_range)]
    range: Option<(u64, u64)>,
    /// Print sizes in bytes rather than in human units.
    #[arg(short = 'b', long)]
    bytes: bool,
    /// Columns to print, comma-separated (see below); +COL,... adds to the default ones.
    #[arg(short = 'o', long, value_name = "COLUMNS", value_parser = parse_columns)]
    output: Option<Columns>,
    /// Do not print the header line.
    #[arg(short = 'n', long)]
    noheadings: bool,
    /// Raw output: columns separated by one space, no alignment, no header, no total line.
    #[arg(long)]
    raw: bool,
    /// Where answers come from: collector (the numaio daemon's eBPF counts: each file is
    /// scanned once, then followed by its page-cache events; an error where the daemon
    /// cannot answer), scan (mincore and the pages' nodes, here), or auto (the collector
    /// where the daemon can answer, else a scan; --range and --map always scan).
    #[arg(long, value_name = "SOURCE", default_value = "auto", value_parser = ["auto", "collector", "scan"])]
    source: String,
    /// The daemon's residency socket (`numaio daemon --residency-socket`).
    #[arg(long, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
}

/// A column of the table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    Res,
    Pages,
    Size,
    File,
    Nodes,
    Percent,
    FilePages,
    Source,
}

const DEFAULT_COLUMNS: [Column; 5] = [
    Column::Res,
    Column::Pages,
    Column::Size,
    Column::Nodes,
    Column::File,
];

impl Column {
    fn name(self) -> &'static str {
        match self {
            Column::Res => "RES",
            Column::Pages => "PAGES",
            Column::Size => "SIZE",
            Column::File => "FILE",
            Column::Nodes => "NODES",
            Column::Percent => "PERCENT",
            Column::FilePages => "FILEPAGES",
            Column::Source => "SOURCE",
        }
    }

    /// Width of the column (its cells are padded to it; a longer value pushes the rest).
    fn width(self, bytes: bool) -> usize {
        match self {
            Column::Res | Column::Size if bytes => 14,
            Column::Res | Column::Size | Column::Pages | Column::FilePages => 10,
            Column::Percent => 7,
            Column::Source => 9,
            Column::Nodes => 16,
            Column::File => 0,
        }
    }

    fn left_aligned(self) -> bool {
        matches!(self, Column::File | Column::Nodes)
    }
}

/// The columns `-o` chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Columns(Vec<Column>);

/// `RES,PAGES,...` (case-insensitive); a leading `+` appends to the default columns.
pub(crate) fn parse_columns(s: &str) -> Result<Columns, String> {
    let (mut cols, list) = match s.strip_prefix('+') {
        Some(rest) => (DEFAULT_COLUMNS.to_vec(), rest),
        None => (Vec::new(), s),
    };
    for name in list.split(',') {
        let c = match name.trim().to_ascii_uppercase().as_str() {
            "RES" => Column::Res,
            "PAGES" => Column::Pages,
            "SIZE" => Column::Size,
            "FILE" => Column::File,
            "NODES" => Column::Nodes,
            "PERCENT" => Column::Percent,
            "FILEPAGES" => Column::FilePages,
            "SOURCE" => Column::Source,
            other => {
                return Err(format!(
                    "unknown column {other:?} (known: RES, PAGES, SIZE, FILE, NODES, PERCENT, FILEPAGES, SOURCE)"
                ))
            }
        };
        if !cols.contains(&c) {
            cols.push(c);
        }
    }
    Ok(Columns(cols))
}

/// How rows are printed.
pub(crate) struct Table {
    cols: Vec<Column>,
    bytes: bool,
    raw: bool,
}

impl Table {
    fn header(&self) -> String {
        let mut s = String::new();
        self.line(&mut s, |c, out| out.push_str(c.name()));
        s
    }

    #[cfg(test)]
    fn row(&self, r: &FileResidency) -> String {
        let mut s = String::new();
        self.row_into(r, Source::Scan, &mut s);
        s
    }

    /// Appends the row of `r` to `out` (no intermediate strings: this runs once per file).
    fn row_into(&self, r: &FileResidency, source: Source, out: &mut String) {
        use std::fmt::Write;
        let bytes = self.bytes;
        let size = |b: u64, out: &mut String| {
            if bytes {
                let _ = write!(out, "{b}");
            } else {
                out.push_str(&human_bytes(b));
            }
        };
        self.line(out, |c, out| match c {
            Column::Res => size(r.resident_pages * r.page_size, out),
            Column::Pages => {
                let _ = write!(out, "{}", r.resident_pages);
            }
            Column::Size => size(r.size_bytes, out),
            Column::File => out.push_str(&quote(&r.path)),
            Column::Nodes => nodes_cell(&r.nodes, out),
            Column::Percent => out.push_str(&pct(r.resident_pages, r.pages)),
            Column::FilePages => {
                let _ = write!(out, "{}", r.pages);
            }
            Column::Source => out.push_str(source.as_str()),
        });
    }

    /// Appends one line: each column's cell (written by `cell`) padded to the column's
    /// width (numbers to the right), one space between columns.
    fn line(&self, out: &mut String, mut cell: impl FnMut(Column, &mut String)) {
        let mut scratch = String::new();
        let last = self.cols.len().saturating_sub(1);
        for (i, &c) in self.cols.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            let w = if self.raw || i == last && c.left_aligned() {
                0
            } else {
                c.width(self.bytes)
            };
            scratch.clear();
            cell(c, &mut scratch);
            let pad = w.saturating_sub(scratch.chars().count());
            if c.left_aligned() {
                out.push_str(&scratch);
            }
            for _ in 0..pad {
                out.push(' ');
            }
            if !c.left_aligned() {
                out.push_str(&scratch);
            }
        }
        out.push('\n');
    }
}

/// `0:12,1:30`, or `-` when nothing is cached.
fn nodes_cell(nodes: &BTreeMap<u32, u64>, out: &mut String) {
    use std::fmt::Write;
    if nodes.is_empty() {
        out.push('-');
    }
    for (i, (n, c)) in nodes.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        let _ = write!(out, "{n}:{c}");
    }
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

/// One file in JSON: its residency, where the answer came from, and why an answer was
/// scanned where the collector was asked for first.
#[derive(Serialize)]
struct JsonFile<'a> {
    #[serde(flatten)]
    r: &'a FileResidency,
    source: Source,
    #[serde(skip_serializing_if = "Option::is_none")]
    source_note: Option<&'a str>,
    /// With the collector: whether this answer was the daemon's baseline scan of the file
    /// (its first question) rather than counted page-cache changes.
    #[serde(skip_serializing_if = "Option::is_none")]
    baseline_scanned: Option<bool>,
}

/// Files asked of the daemon at once (each keeps a descriptor open until answered).
const DAEMON_BATCH: usize = 128;

/// How long the daemon may take to answer a batch (its first answer for a file is a scan).
const DAEMON_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

#[derive(Serialize)]
struct Rest<'a> {
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
    let table = Table {
        cols: a
            .output
            .clone()
            .map_or_else(|| DEFAULT_COLUMNS.to_vec(), |c| c.0),
        bytes: a.bytes,
        raw: a.raw,
    };
    let files = a.walk.files(a.batch.as_deref())?;
    let batch_failed = files.batch_failed.clone();
    let mut ask = match a.source.as_str() {
        "scan" => false,
        // No daemon listening: nothing to ask, and rows stream as they are scanned.
        "auto" if !a.socket.exists() => false,
        _ if a.range.is_some() || a.map.is_some() => {
            if a.source == "collector" {
                crate::usage_bail!(
                    "--source collector counts whole files: --range and --map need --source scan"
                );
            }
            false
        }
        _ => true,
    };
    let mut em = Emit {
        out: Out::new(),
        doc: None,
        table,
        header_due: !a.noheadings && !a.raw,
        errors: Vec::new(),
        total: Totals::default(),
        nfiles: 0,
        row: String::new(),
    };
    if a.json {
        em.doc = Some(JsonDoc::begin(&mut em.out)?);
    }
    let mut pending: Vec<OpenFile> = Vec::new();
    for item in files {
        let f = match item {
            Ok(f) => f,
            Err(e) => {
                report_error(&e, a.json);
                em.errors.push(JsonError::from(&e));
                continue;
            }
        };
        if ask {
            pending.push(f);
            if pending.len() >= DAEMON_BATCH {
                // A daemon that answered nothing is not asked again in this run.
                ask = answer_batch(&a, cell, &mut em, std::mem::take(&mut pending))?
                    || a.source == "collector";
            }
            continue;
        }
        em.scan(&f, &a, cell, None)?;
    }
    answer_batch(&a, cell, &mut em, pending)?;
    let Emit {
        mut out,
        doc,
        errors,
        total,
        nfiles,
        ..
    } = em;
    let failed = !errors.is_empty() || batch_failed.get();
    match doc {
        Some(d) => d.end(
            &mut out,
            &Rest {
                total: &total,
                errors,
            },
        )?,
        None => {
            if nfiles > 1 && !a.raw && !a.noheadings {
                out.push(&format!(
                    "total: {} pages, {} resident ({}){}\n",
                    total.pages,
                    total.resident_pages,
                    pct(total.resident_pages, total.pages),
                    nodes_text(&total.nodes, total.resident_pages)
                ))?;
            }
            out.flush()?;
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// The output being written, and what it has summed so far.
struct Emit {
    out: Out,
    doc: Option<JsonDoc>,
    table: Table,
    /// Printed with the first row, so that a run that finds no file prints only errors.
    header_due: bool,
    errors: Vec<JsonError>,
    total: Totals,
    nfiles: u64,
    row: String,
}

impl Emit {
    /// Scans `f` here and prints it; `note` says why the collector did not answer.
    fn scan(
        &mut self,
        f: &OpenFile,
        a: &WhereArgs,
        cell: Option<u64>,
        note: Option<&str>,
    ) -> anyhow::Result<()> {
        let map_chunk = match (&a.map, cell) {
            (None, _) => None,
            (Some(_), Some(c)) => Some(c),
            (Some(_), None) => Some(auto_cell(f.size, a.range)),
        };
        let opts = WhereOptions {
            range: a.range,
            map_chunk,
            ..Default::default()
        };
        match residency_of(f, &opts) {
            Ok(r) => self.file(&r, Source::Scan, note, None),
            Err(e) => {
                report_error(&e, a.json);
                self.errors.push(JsonError::from(&e));
                Ok(())
            }
        }
    }

    /// Prints one file's residency.
    fn file(
        &mut self,
        r: &FileResidency,
        source: Source,
        note: Option<&str>,
        baseline_scanned: Option<bool>,
    ) -> anyhow::Result<()> {
        self.total.add(r);
        self.nfiles += 1;
        match self.doc.as_mut() {
            Some(d) => d.file(
                &mut self.out,
                &JsonFile {
                    r,
                    source,
                    source_note: note,
                    baseline_scanned,
                },
            )?,
            None => {
                self.row.clear();
                if self.header_due {
                    self.row += &self.table.header();
                    self.header_due = false;
                }
                self.table.row_into(r, source, &mut self.row);
                if r.map.is_some() {
                    self.row += &render_map(r);
                }
                self.out.push(&self.row)?;
            }
        }
        warn_file(r);
        Ok(())
    }
}

/// Answers `files` from the daemon where it can: with `--source auto` the rest are scanned
/// (the reason in `source_note`), with `--source collector` they are errors. Returns
/// whether the daemon answered at all.
fn answer_batch(
    a: &WhereArgs,
    cell: Option<u64>,
    em: &mut Emit,
    files: Vec<OpenFile>,
) -> anyhow::Result<bool> {
    if files.is_empty() {
        return Ok(true);
    }
    let refs: Vec<&OpenFile> = files.iter().collect();
    let (answers, answered) = match ask_daemon(&a.socket, &refs, DAEMON_TIMEOUT) {
        Ok(v) => (v, true),
        Err(why) => (vec![Err(why); files.len()], false),
    };
    for (f, ans) in files.iter().zip(answers) {
        match ans {
            Ok(c) => em.file(&c.residency, Source::Collector, None, Some(c.baseline_new))?,
            Err(why) if a.source == "auto" => em.scan(f, a, cell, Some(&why))?,
            Err(why) => {
                let msg = format!(
                    "{}: not answered from the collector: {why} (use --source scan or auto)",
                    quote(&f.path)
                );
                warnln!("{msg}");
                em.errors.push(JsonError {
                    path: Some(f.path.to_string_lossy().into_owned()),
                    kind: "collector",
                    error: msg,
                });
            }
        }
    }
    Ok(answered)
}

/// Prints an error on stderr (in JSON mode too: stdout then holds only the JSON).
pub(crate) fn report_error(e: &PagecacheError, _json: bool) {
    warnln!("{e}");
}

/// 64 cells per file (or range), whole pages each.
fn auto_cell(size: u64, range: Option<(u64, u64)>) -> u64 {
    let ps = numaio_sys::page_size() as u64;
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

/// The `--map` lines of a file (empty without --map).
fn render_map(r: &FileResidency) -> String {
    let mut s = String::new();
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
        let t = Table {
            cols: DEFAULT_COLUMNS.to_vec(),
            bytes: false,
            raw: false,
        };
        let out = t.header() + &t.row(&r) + &render_map(&r);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "       RES      PAGES       SIZE NODES            FILE"
        );
        assert_eq!(
            lines[1],
            "  32.0 KiB          8   64.0 KiB 0:4,11:4         /d/f"
        );
        // Columns line up: every cell ends where its header does.
        assert_eq!(lines[0].find("FILE"), lines[1].find("/d/f"));
        assert!(out.contains("16.0 KiB per cell"), "{out}");
        assert!(out.lines().any(|l| l.trim() == "0 0.*b"), "{out}");
        let raw = Table {
            cols: parse_columns("res,pages,file,percent").unwrap().0,
            bytes: true,
            raw: true,
        };
        assert_eq!(raw.row(&r), "32768 8 /d/f 50.0%\n");
        let plus = parse_columns("+percent").unwrap().0;
        assert_eq!(plus.len(), 6);
        assert!(parse_columns("res,bogus").is_err());
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
        let t = Table {
            cols: vec![Column::File, Column::Pages],
            bytes: false,
            raw: false,
        };
        let out = t.row(&r);
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.starts_with("$'/d/a\\n/fake: 0 B\\033[2J' "), "{out}");
    }
}
