//! `numaio top`: a live view of file I/O per node, per process and per file.
//!
//! Each interval the processes are sampled ([`Scanner`]) and their per-node counts taken
//! from the best source ([`numaio_proc::io_source`]); [`numaio_proc::top::Frame`] holds what
//! is shown. The terminal view is drawn with ratatui; `--once` prints one frame as text and
//! `--json` one JSON object per interval. It only reads: nothing is moved or pinned.

use crate::output::{human_bytes, quote};
use numaio_proc::io_source::{SourceChoice, Sources};
use numaio_proc::top::{Action, Frame, Key, SortKey, Table, TopState};
use numaio_proc::{PageCache, ScanOptions, Scanner};
use numaio_sys::Topology;
use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct TopArgs {
    /// Seconds between refreshes; each frame counts the I/O of one interval.
    #[arg(long, default_value_t = 2.0, value_name = "SECS", value_parser = crate::args::secs)]
    interval: f64,
    /// Print one frame as plain text after one interval, and exit (no terminal needed).
    #[arg(long)]
    once: bool,
    /// Print one JSON object per interval on stdout (one only with --once):
    /// {"interval_secs","numa_io_source":"ebpf"|"mount"|"estimate",
    /// "numa_io_fallback_reason":str|null,"sort","filter",
    /// "nodes":[{node,page_cache_bytes,read_bytes_per_sec,write_bytes_per_sec,remote_share}],
    /// "processes":[{pid,comm,numa_io_source,main_node,read_bytes_per_sec,
    /// write_bytes_per_sec,by_data_node:{"N":{read_bytes_per_sec,write_bytes_per_sec}},
    /// remote_share}],"files":[{path,dev,ino,numa_io_source,read_bytes_per_sec,
    /// write_bytes_per_sec,by_data_node,remote_share,pids}]}. Rates are bytes per second by
    /// node of the data; remote_share is the share asked for from a CPU of another node
    /// (null without I/O). Processes and files are sorted by --sort and filtered by
    /// --filter. Files come from the eBPF collector's records, else from the estimate over
    /// open files (reads only).
    #[arg(long)]
    json: bool,
    /// Stop after N intervals.
    #[arg(long, value_name = "N", value_parser = crate::args::positive)]
    count: Option<u64>,
    /// Sort processes and files by: total, read, write, remote (largest first), name or id.
    #[arg(long, default_value = "total", value_name = "KEY", value_parser = sort_parser())]
    sort: SortKey,
    /// Show only processes whose command name, or the path of one of whose files, contains
    /// TEXT (files: whose path contains it).
    #[arg(long, default_value = "", value_name = "TEXT")]
    filter: String,
    /// List files instead of processes (the view starts there; with --once, both are printed).
    #[arg(long)]
    files: bool,
    #[arg(long, default_value = "auto", value_name = "SOURCE", help = crate::cmd::sources::HELP,
          value_parser = crate::cmd::sources::parser())]
    source: SourceChoice,
}

fn sort_parser() -> impl clap::builder::TypedValueParser<Value = SortKey> {
    use clap::builder::TypedValueParser;
    // The names are checked first, so every one that gets through parses.
    clap::builder::PossibleValuesParser::new(SortKey::NAMES)
        .map(|s| s.parse::<SortKey>().unwrap_or_default())
}

/// Samples the processes and counts each interval.
struct Sampler {
    opts: ScanOptions,
    scanner: Scanner,
    sources: Sources,
    since: Instant,
}

impl Sampler {
    fn start(choice: SourceChoice) -> anyhow::Result<Sampler> {
        let sources = crate::cmd::sources::open(choice)?;
        let topo = Topology::detect()?;
        let opts = ScanOptions {
            deep_all: true,
            ..Default::default()
        };
        // Residency of large files costs seconds to query; a few seconds old is fine here.
        let mut scanner = Scanner::with_residency_ttl(Duration::from_secs(10));
        scanner.scan(&opts, &topo, &PageCache);
        let mut s = Sampler {
            opts,
            scanner,
            sources,
            since: Instant::now(),
        };
        s.sources.begin_interval();
        Ok(s)
    }

    /// A frame of the nodes alone, before the first interval has been counted.
    fn empty(&self) -> anyhow::Result<Frame> {
        Ok(Frame::build(
            &[],
            None,
            &Topology::detect()?,
            0.0,
            self.sources.primary(),
            self.sources.fallback_reason(),
        ))
    }

    /// Counts the interval since the last frame.
    fn frame(&mut self) -> anyhow::Result<Frame> {
        let topo = Topology::detect()?;
        let res = self.scanner.scan(&self.opts, &topo, &PageCache);
        let mut views = res.views;
        self.sources.apply(&mut views, &topo.node_ids());
        let secs = self.since.elapsed().as_secs_f64();
        self.since = Instant::now();
        Ok(Frame::build(
            &views,
            self.sources.last_delta(),
            &topo,
            secs,
            self.sources.primary(),
            self.sources.fallback_reason(),
        ))
    }
}

pub fn run(a: TopArgs) -> anyhow::Result<ExitCode> {
    if !a.once && !a.json && !std::io::stdout().is_terminal() {
        crate::usage_bail!(
            "standard output is not a terminal: `numaio top` draws a live view there; use --once for a snapshot as \
             text or --json for one JSON object per interval"
        );
    }
    let interval = Duration::from_secs_f64(a.interval);
    let mut state = TopState {
        sort: a.sort,
        filter: a.filter.clone(),
        table: if a.files {
            Table::Files
        } else {
            Table::Processes
        },
        ..Default::default()
    };
    let mut sampler = Sampler::start(a.source)?;
    let rounds = if a.once { Some(1) } else { a.count };
    if a.json || a.once {
        let mut n = 0u64;
        loop {
            std::thread::sleep(interval);
            let f = sampler.frame()?;
            if a.json {
                crate::output::print_json(&json_frame(&f, &state))?;
            } else {
                crate::out!("{}", render_text(&f, &state, a.files))?;
            }
            // Each frame reaches a reader of the stream when it is made.
            crate::output::flush_out()?;
            n += 1;
            if rounds.is_some_and(|c| n >= c) {
                return Ok(ExitCode::SUCCESS);
            }
        }
    }
    interactive(&mut sampler, &mut state, interval, rounds)
}

/// The frame with its processes and files sorted and filtered as the view shows them.
fn json_frame(f: &Frame, st: &TopState) -> serde_json::Value {
    serde_json::json!({
        "interval_secs": f.interval_secs,
        "numa_io_source": f.numa_io_source,
        "numa_io_fallback_reason": f.numa_io_fallback_reason,
        "numa_io_incomplete": f.numa_io_incomplete,
        "sort": st.sort,
        "filter": st.filter,
        "nodes": f.nodes,
        "processes": f.processes_sorted(st.sort, &st.filter),
        "files": f.files_sorted(st.sort, &st.filter),
    })
}

fn rate(b: f64) -> String {
    human_bytes(b.max(0.0).round() as u64)
}

fn share(s: Option<f64>) -> String {
    s.map_or_else(|| "-".into(), |s| format!("{:.0} %", s * 100.0))
}

/// One table as text cells: the header and the rows. `left` columns are text, the others
/// numbers.
struct Cells {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    left: Vec<usize>,
}

fn header_line(f: &Frame, st: &TopState, interval: Option<f64>) -> String {
    let mut s = format!(
        "numaio top  interval {:.1} s  source {}",
        interval.unwrap_or(f.interval_secs),
        f.numa_io_source
    );
    s += &format!("  sort {}", st.sort.as_str());
    if !st.filter.is_empty() {
        s += &format!("  filter {}", quote(&st.filter));
    }
    if st.paused {
        s += "  [paused]";
    }
    // Last: the reason can be long, and a narrow terminal cuts the line's end.
    if let Some(r) = &f.numa_io_fallback_reason {
        s += &format!("  (eBPF not used: {})", crate::output::escape_message(r));
    }
    if let Some(r) = &f.numa_io_incomplete {
        s += &format!("  (not exact: {})", crate::output::escape_message(r));
    }
    s
}

fn node_cells(f: &Frame) -> Cells {
    Cells {
        header: ["NODE", "PAGE CACHE", "READ/s", "WRITE/s", "REMOTE"]
            .map(String::from)
            .to_vec(),
        rows: f
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.node.to_string(),
                    human_bytes(n.page_cache_bytes),
                    rate(n.rate.read_bytes_per_sec),
                    rate(n.rate.write_bytes_per_sec),
                    share(n.remote_share),
                ]
            })
            .collect(),
        left: vec![],
    }
}

fn process_cells(f: &Frame, st: &TopState) -> Cells {
    let nodes = f.node_ids();
    let mut header: Vec<String> = ["PID", "COMM", "READ/s", "WRITE/s"]
        .map(String::from)
        .to_vec();
    header.extend(nodes.iter().map(|n| format!("N{n}/s")));
    header.extend(["REMOTE", "NODE", "SOURCE"].map(String::from));
    let rows = f
        .processes_sorted(st.sort, &st.filter)
        .into_iter()
        .map(|p| {
            let mut r = vec![
                p.pid.to_string(),
                quote(&p.comm).into_owned(),
                rate(p.rate.read_bytes_per_sec),
                rate(p.rate.write_bytes_per_sec),
            ];
            r.extend(nodes.iter().map(|n| {
                p.by_data_node
                    .get(n)
                    .map_or("-".into(), |x| rate(x.total()))
            }));
            r.push(share(p.remote_share));
            r.push(p.main_node.map_or("-".into(), |n| n.to_string()));
            r.push(p.numa_io_source.to_string());
            r
        })
        .collect();
    Cells {
        header,
        rows,
        left: vec![1, 6 + nodes.len()],
    }
}

fn file_cells(f: &Frame, st: &TopState) -> Cells {
    let nodes = f.node_ids();
    let mut header: Vec<String> = ["READ/s", "WRITE/s"].map(String::from).to_vec();
    header.extend(nodes.iter().map(|n| format!("N{n}/s")));
    header.extend(["REMOTE", "PIDS", "PATH"].map(String::from));
    let rows = f
        .files_sorted(st.sort, &st.filter)
        .into_iter()
        .map(|x| {
            let mut r = vec![
                rate(x.rate.read_bytes_per_sec),
                rate(x.rate.write_bytes_per_sec),
            ];
            r.extend(nodes.iter().map(|n| {
                x.by_data_node
                    .get(n)
                    .map_or("-".into(), |y| rate(y.total()))
            }));
            r.push(share(x.remote_share));
            let mut pids: Vec<String> = x.pids.iter().take(3).map(|p| p.to_string()).collect();
            if x.pids.len() > 3 {
                pids.push("…".into());
            }
            r.push(pids.join(","));
            r.push(quote(&x.path).into_owned());
            r
        })
        .collect();
    let n = header.len();
    Cells {
        header,
        rows,
        left: vec![n - 2, n - 1],
    }
}

/// A table as aligned plain text.
fn text_table(c: &Cells) -> String {
    let cols = c.header.len();
    let width = |i: usize| {
        c.rows
            .iter()
            .map(|r| r[i].chars().count())
            .chain([c.header[i].chars().count()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..cols).map(width).collect();
    let line = |r: &[String]| {
        let cells: Vec<String> = r
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if c.left.contains(&i) {
                    format!("{v:<w$}", w = widths[i])
                } else {
                    format!("{v:>w$}", w = widths[i])
                }
            })
            .collect();
        cells.join("  ").trim_end().to_string() + "\n"
    };
    let mut s = line(&c.header);
    for r in &c.rows {
        s += &line(r);
    }
    s
}

/// `--once`: the header, the nodes, then the processes and the files.
fn render_text(f: &Frame, st: &TopState, files_first: bool) -> String {
    let mut s = header_line(f, st, None) + "\n\n" + &text_table(&node_cells(f)) + "\n";
    let procs = process_cells(f, st);
    let files = file_cells(f, st);
    let parts = if files_first {
        [
            (&files, "no file I/O counted"),
            (&procs, "no process did file I/O"),
        ]
    } else {
        [
            (&procs, "no process did file I/O"),
            (&files, "no file I/O counted"),
        ]
    };
    for (i, (c, none)) in parts.into_iter().enumerate() {
        if i > 0 {
            s += "\n";
        }
        if c.rows.is_empty() {
            s += none;
            s += "\n";
        } else {
            s += &text_table(c);
        }
    }
    s
}

/// Restores the terminal however the view ends (return, error or panic).
struct TerminalGuard;

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

fn interactive(
    sampler: &mut Sampler,
    st: &mut TopState,
    interval: Duration,
    rounds: Option<u64>,
) -> anyhow::Result<ExitCode> {
    // A termination signal ends the loop, which restores the terminal on the way out.
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
    ] {
        signal_hook::flag::register(sig, Arc::clone(&stop))?;
    }
    let mut frame = sampler.empty()?;
    // Restores whatever part of the setup succeeded (declared first, dropped last).
    let _guard = TerminalGuard;
    // ratatui's init also installs a panic hook that restores the terminal first.
    let mut term = ratatui::try_init().map_err(|e| {
        anyhow::anyhow!("cannot set up the terminal for the live view: {e}; use --once or --json")
    })?;
    let mut next = Instant::now() + interval;
    let mut n = 0u64;
    let secs = interval.as_secs_f64();
    let input = KeyInput::open()?;
    'view: while !stop.load(Ordering::Relaxed) {
        term.draw(|fr| draw(fr, &frame, st, secs))?;
        let wait = next
            .saturating_duration_since(Instant::now())
            .min(Duration::from_millis(200));
        match input.read(wait)? {
            None => break,
            Some(keys) => {
                for k in keys {
                    if st.key(k) == Action::Quit {
                        break 'view;
                    }
                }
            }
        }
        if Instant::now() >= next {
            if !st.paused {
                frame = sampler.frame()?;
                n += 1;
                if rounds.is_some_and(|c| n >= c) {
                    term.draw(|fr| draw(fr, &frame, st, secs))?;
                    break;
                }
            }
            next = Instant::now() + interval;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Keys from the terminal, read here rather than through crossterm's event reader: that one
/// retries a read at end of file forever, so a view whose terminal went away (a closed pty,
/// a dropped ssh session) would spin instead of ending.
struct KeyInput {
    /// Standard input when it is the terminal, else `/dev/tty` (as crossterm's raw mode).
    tty: Option<std::fs::File>,
}

impl KeyInput {
    fn open() -> anyhow::Result<KeyInput> {
        if std::io::stdin().is_terminal() {
            return Ok(KeyInput { tty: None });
        }
        let tty = std::fs::File::open("/dev/tty").map_err(|e| {
            anyhow::anyhow!("cannot read keys from /dev/tty: {e}; use --once or --json")
        })?;
        Ok(KeyInput { tty: Some(tty) })
    }

    /// Waits up to `wait` for keys; `None` when the terminal hung up.
    fn read(&self, wait: Duration) -> anyhow::Result<Option<Vec<Key>>> {
        use std::os::fd::AsRawFd;
        let fd = self.tty.as_ref().map_or(0, |f| f.as_raw_fd());
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = libc::c_int::try_from(wait.as_millis()).unwrap_or(libc::c_int::MAX);
        // SAFETY: poll reads and writes the one pollfd we own.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                return Ok(Some(Vec::new()));
            }
            return Err(anyhow::anyhow!(
                "cannot wait for keys from the terminal: {e}"
            ));
        }
        if n == 0 {
            return Ok(Some(Vec::new()));
        }
        if p.revents & libc::POLLIN == 0 {
            return Ok(None);
        }
        let mut buf = [0u8; 256];
        // SAFETY: read writes at most buf.len() bytes into the buffer we own.
        let got = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
        match got {
            0 => Ok(None),
            n if n > 0 => Ok(Some(Key::decode(&buf[..n as usize]))),
            _ => {
                let e = std::io::Error::last_os_error();
                match e.kind() {
                    std::io::ErrorKind::Interrupted | std::io::ErrorKind::WouldBlock => {
                        Ok(Some(Vec::new()))
                    }
                    _ if e.raw_os_error() == Some(libc::EIO) => Ok(None),
                    _ => Err(anyhow::anyhow!("cannot read keys from the terminal: {e}")),
                }
            }
        }
    }
}

fn draw(fr: &mut ratatui::Frame<'_>, f: &Frame, st: &TopState, secs: f64) {
    use ratatui::layout::{Constraint, Layout};
    use ratatui::style::{Modifier, Style};
    use ratatui::text::Line;
    use ratatui::widgets::{Paragraph, Row, Table as TuiTable};
    let nodes = node_cells(f);
    let (main, title) = match st.table {
        Table::Processes => (process_cells(f, st), "processes"),
        Table::Files => (file_cells(f, st), "files"),
    };
    let [head, node_area, main_area, foot] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(nodes.rows.len() as u16 + 2),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(fr.area());
    let mut line2 = format!("{title}, sorted by {}", st.sort.as_str());
    if f.interval_secs == 0.0 {
        line2 += &format!("  (first counts in {secs:.1} s)");
    }
    fr.render_widget(
        Paragraph::new(vec![
            Line::from(header_line(f, st, Some(secs)))
                .style(Style::default().add_modifier(Modifier::BOLD)),
            Line::from(line2),
        ]),
        head,
    );
    let table = |c: &Cells, area_width: u16| {
        let last = c.header.len() - 1;
        let ws: Vec<usize> = (0..c.header.len())
            .map(|i| {
                c.rows
                    .iter()
                    .map(|r| r[i].chars().count())
                    .chain([c.header[i].chars().count()])
                    .max()
                    .unwrap_or(1)
            })
            .collect();
        // A text column at the end (the path) takes the room that is left.
        let widths = ws.iter().enumerate().map(|(i, &w)| {
            if i == last && c.left.contains(&i) {
                Constraint::Fill(1)
            } else {
                Constraint::Length(w as u16)
            }
        });
        // What the last column has left; a longer path keeps its end, the file's name.
        let room =
            usize::from(area_width).saturating_sub(ws[..last].iter().map(|w| w + 2).sum::<usize>());
        let row = |r: &[String]| {
            Row::new(r.iter().enumerate().map(|(i, v)| {
                let w = ws[i];
                if i == last && c.left.contains(&i) {
                    tail(v, room)
                } else if c.left.contains(&i) {
                    format!("{v:<w$}")
                } else {
                    format!("{v:>w$}")
                }
            }))
        };
        TuiTable::new(c.rows.iter().map(|r| row(r)), widths)
            .header(row(&c.header).style(Style::default().add_modifier(Modifier::REVERSED)))
            .column_spacing(2)
    };
    fr.render_widget(table(&nodes, node_area.width), node_area);
    if main.rows.is_empty() {
        let none = match st.table {
            Table::Processes => "no process did file I/O in the interval",
            Table::Files => "no file I/O counted in the interval",
        };
        fr.render_widget(
            Paragraph::new(vec![Line::from(main.header.join("  ")), Line::from(none)]),
            main_area,
        );
    } else {
        fr.render_widget(table(&main, main_area.width), main_area);
    }
    let foot_text = match &st.editing {
        Some(buf) => format!("filter: {}_  (Enter apply, Esc cancel)", quote(buf)),
        None => "q quit  s/</> sort  / filter  p processes  f files  space pause".into(),
    };
    fr.render_widget(Paragraph::new(foot_text), foot);
}

/// `s` cut to its last `room` characters, marked with a leading `…` when cut.
fn tail(s: &str, room: usize) -> String {
    let n = s.chars().count();
    if n <= room || room == 0 {
        return s.to_string();
    }
    std::iter::once('…')
        .chain(s.chars().skip(n - room + 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaio_proc::io_source::NumaIoSource;
    use numaio_proc::sample::ProcessView;

    fn frame() -> Frame {
        let topo = Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap();
        let v = ProcessView {
            pid: 77,
            comm: "rd\u{1b}[2J".into(),
            thread_nodes: [(1, 1)].into_iter().collect(),
            main_node: Some(1),
            interval_secs: 1.0,
            read_bytes_per_sec: 2048.0,
            numa_read_bytes: [(0, 2048)].into_iter().collect(),
            ..Default::default()
        };
        Frame::build(
            &[v],
            None,
            &topo,
            1.0,
            NumaIoSource::Estimate,
            Some("no BTF"),
        )
    }

    #[test]
    fn once_text_has_header_nodes_and_processes() {
        let out = render_text(&frame(), &TopState::default(), false);
        let lines: Vec<&str> = out.lines().collect();
        assert_eq!(
            lines[0],
            "numaio top  interval 1.0 s  source estimate  sort total  (eBPF not used: no BTF)"
        );
        assert_eq!(
            lines[2], "NODE  PAGE CACHE   READ/s  WRITE/s  REMOTE",
            "{out}"
        );
        assert!(
            lines[3].trim_start().starts_with("0") && lines[3].contains("2.0 KiB"),
            "{out}"
        );
        assert!(lines[3].ends_with("100 %"), "{out}");
        assert_eq!(
            lines[4], "   1         0 B      0 B      0 B       -",
            "{out}"
        );
        assert_eq!(
            lines[6],
            "PID  COMM           READ/s  WRITE/s     N0/s  N1/s  REMOTE  NODE  SOURCE"
        );
        let p = lines.iter().find(|l| l.contains("77")).unwrap();
        assert!(
            p.contains("$'rd\\033[2J'"),
            "control characters quoted: {out}"
        );
        assert!(!out.contains('\u{1b}'), "{out}");
        assert!(out.contains("no file I/O counted"), "{out}");
    }

    #[test]
    fn long_paths_keep_their_end() {
        assert_eq!(tail("/usr/lib/locale/C.utf8/LC_CTYPE", 12), "…f8/LC_CTYPE");
        assert_eq!(tail("/a/b", 10), "/a/b");
        assert_eq!(tail("/a/bcdef", 4), "…def");
    }

    #[test]
    fn json_frame_is_sorted_and_filtered() {
        let st = TopState {
            filter: "zz".into(),
            ..Default::default()
        };
        let j = json_frame(&frame(), &st);
        assert_eq!(j["numa_io_source"], "estimate");
        assert_eq!(j["numa_io_fallback_reason"], "no BTF");
        assert_eq!(j["sort"], "total");
        assert_eq!(j["processes"].as_array().unwrap().len(), 0);
        assert_eq!(j["nodes"][0]["node"], 0);
        assert_eq!(j["nodes"][0]["read_bytes_per_sec"], 2048.0);
        let all = json_frame(&frame(), &TopState::default());
        assert_eq!(all["processes"][0]["pid"], 77);
        assert_eq!(all["processes"][0]["remote_share"], 1.0);
    }
}
