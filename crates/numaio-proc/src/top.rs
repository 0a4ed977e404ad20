//! What `numaio top` shows, one [`Frame`] per interval, and the state of its view
//! ([`TopState`]: sorting, filter, table, pause), kept apart from the terminal so both are
//! tested without one.
//!
//! A frame has three tables. **Nodes**: each node's page cache (`FilePages` of its meminfo),
//! the bytes per second read and written whose data lay on it, and the share of those bytes
//! asked for from a CPU of another node. **Processes**: bytes per second by node of the data,
//! remote share, the node where most threads ran. **Files**: the same per file. The counts
//! come from [`crate::io_source`]: with the eBPF collector every copy to and from the page
//! cache is counted, per thread, file and node; otherwise a numaio mount's counters (its
//! processes) or the estimate (read rate × residency of the open files, split per file by
//! how far the descriptors' offsets moved, reads only).

use crate::io_source::NumaIoSource;
use crate::locality::{self, FileWeight};
use crate::sample::ProcessView;
use numaio_sys::Topology;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// Bytes per second read and written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Rate {
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
}

impl Rate {
    pub fn total(&self) -> f64 {
        self.read_bytes_per_sec + self.write_bytes_per_sec
    }
    fn add(&mut self, r: f64, w: f64) {
        self.read_bytes_per_sec += r;
        self.write_bytes_per_sec += w;
    }
}

/// One node's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NodeRow {
    pub node: u32,
    /// The node's page cache (`FilePages`), in bytes.
    pub page_cache_bytes: u64,
    /// Bytes per second whose data lay on this node.
    #[serde(flatten)]
    pub rate: Rate,
    /// Of those, the share asked for from a CPU of another node; `null` without I/O.
    pub remote_share: Option<f64>,
}

/// One process's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProcessRow {
    pub pid: i32,
    pub comm: String,
    /// Where its counts came from.
    pub numa_io_source: NumaIoSource,
    /// The node where most of its threads ran.
    pub main_node: Option<u32>,
    /// Bytes per second in all (the estimate: `rchar` and `wchar`).
    #[serde(flatten)]
    pub rate: Rate,
    /// Bytes per second by node of the data (the estimate knows reads only).
    pub by_data_node: BTreeMap<u32, Rate>,
    /// Share of its bytes whose data lay on a node other than the asking CPU's; `null`
    /// without data.
    pub remote_share: Option<f64>,
}

/// One file's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileRow {
    /// The path as the first process using it sees it; `dev MAJ:MIN inode N` for a file
    /// the collector counted that no scanned process has open.
    pub path: String,
    pub dev: u64,
    pub ino: u64,
    pub numa_io_source: NumaIoSource,
    #[serde(flatten)]
    pub rate: Rate,
    pub by_data_node: BTreeMap<u32, Rate>,
    pub remote_share: Option<f64>,
    /// The processes whose I/O is counted here.
    pub pids: Vec<i32>,
}

/// Everything one interval shows (`numaio top --json` prints one per line).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Frame {
    /// Seconds the counts cover.
    pub interval_secs: f64,
    /// The best source in use: `ebpf`, `mount` or `estimate`.
    pub numa_io_source: NumaIoSource,
    /// Why eBPF is not counting; `null` when it is.
    pub numa_io_fallback_reason: Option<String>,
    /// Why the collector's counts of this interval are short (skipped program runs, events
    /// dropped for a full map); `null` when complete.
    pub numa_io_incomplete: Option<String>,
    pub nodes: Vec<NodeRow>,
    pub processes: Vec<ProcessRow>,
    pub files: Vec<FileRow>,
}

/// Per-node bytes and their remote part, summed.
#[derive(Default)]
struct Acc {
    by_node: BTreeMap<u32, (f64, f64, f64)>,
}

impl Acc {
    fn add(&mut self, node: u32, read: f64, write: f64, remote: bool) {
        let e = self.by_node.entry(node).or_default();
        e.0 += read;
        e.1 += write;
        if remote {
            e.2 += read + write;
        }
    }
    fn rates(&self) -> BTreeMap<u32, Rate> {
        self.by_node
            .iter()
            .map(|(&n, &(r, w, _))| {
                (
                    n,
                    Rate {
                        read_bytes_per_sec: r,
                        write_bytes_per_sec: w,
                    },
                )
            })
            .collect()
    }
    fn remote_share(&self) -> Option<f64> {
        let (t, r) = self
            .by_node
            .values()
            .fold((0.0, 0.0), |(t, r), &(a, b, c)| (t + a + b, r + c));
        (t > 0.0).then(|| r / t)
    }
    fn node_remote_share(&self, node: u32) -> Option<f64> {
        let &(r, w, rem) = self.by_node.get(&node)?;
        (r + w > 0.0).then(|| rem / (r + w))
    }
}

/// The file rows being summed, and the paths the scanned processes know files by.
struct FileAcc {
    rows: BTreeMap<(u64, u64), (FileRow, Acc, BTreeSet<i32>)>,
    paths: BTreeMap<(u64, u64), String>,
}

impl FileAcc {
    fn entry(
        &mut self,
        dev: u64,
        ino: u64,
        src: NumaIoSource,
    ) -> &mut (FileRow, Acc, BTreeSet<i32>) {
        let paths = &self.paths;
        self.rows.entry((dev, ino)).or_insert_with(|| {
            (
                FileRow {
                    path: paths
                        .get(&(dev, ino))
                        .cloned()
                        .unwrap_or_else(|| identity(dev, ino)),
                    dev,
                    ino,
                    numa_io_source: src,
                    rate: Rate::default(),
                    by_data_node: BTreeMap::new(),
                    remote_share: None,
                    pids: Vec::new(),
                },
                Acc::default(),
                BTreeSet::new(),
            )
        })
    }
}

/// `dev MAJ:MIN inode N`, for a file known only by its identity.
fn identity(dev: u64, ino: u64) -> String {
    let major = ((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff);
    let minor = (dev & 0xff) | ((dev >> 12) & !0xff);
    format!("dev {major}:{minor} inode {ino}")
}

impl Frame {
    /// Builds the frame from the interval's process views (after
    /// [`Sources::apply`](crate::io_source::Sources::apply)), the collector's records for the
    /// interval where it runs, and the topology (its nodes' page cache as read now).
    pub fn build(
        views: &[ProcessView],
        delta: Option<&numaio_bpf::Snapshot>,
        topo: &Topology,
        secs: f64,
        source: NumaIoSource,
        fallback_reason: Option<&str>,
    ) -> Frame {
        let secs = if secs > 0.0 { secs } else { 1.0 };
        let mut nodes_acc = Acc::default();
        let mut files = FileAcc {
            rows: BTreeMap::new(),
            paths: views
                .iter()
                .flat_map(|v| v.files.iter())
                .filter(|f| f.ino != 0)
                .map(|f| ((f.dev, f.ino), f.path.to_string_lossy().into_owned()))
                // The first process's path wins.
                .rev()
                .collect(),
        };
        // The collector's records: every process's I/O, file by file.
        if let Some(d) = delta {
            for r in &d.io {
                let (rd, wr) = (r.read_bytes as f64 / secs, r.write_bytes as f64 / secs);
                let remote = r.data_node != r.cpu_node;
                nodes_acc.add(r.data_node, rd, wr, remote);
                let e = files.entry(r.dev, r.ino, NumaIoSource::Ebpf);
                e.1.add(r.data_node, rd, wr, remote);
                e.2.insert(r.pid);
            }
        }
        let mut processes = Vec::with_capacity(views.len());
        for v in views {
            let exact = v.numa_io_source.is_exact();
            let run = v.run_nodes();
            let mut acc = Acc::default();
            let data_nodes: BTreeSet<u32> = v
                .numa_read_bytes
                .keys()
                .chain(v.numa_write_bytes.keys())
                .copied()
                .collect();
            for n in data_nodes {
                let rd = v.numa_read_bytes.get(&n).copied().unwrap_or(0) as f64;
                let wr = v.numa_write_bytes.get(&n).copied().unwrap_or(0) as f64;
                let per = if exact {
                    secs
                } else {
                    v.interval_secs.max(f64::EPSILON)
                };
                acc.add(n, rd / per, wr / per, !run.contains(&n));
            }
            let remote_share = match (v.local_bytes, v.remote_bytes) {
                (Some(l), Some(r)) if l.total() + r.total() > 0 => {
                    Some(r.total() as f64 / (l.total() + r.total()) as f64)
                }
                (Some(_), Some(_)) => None,
                _ => acc.remote_share(),
            };
            let rate = if exact {
                let mut t = Rate::default();
                for r in acc.rates().values() {
                    t.add(r.read_bytes_per_sec, r.write_bytes_per_sec);
                }
                t
            } else {
                Rate {
                    read_bytes_per_sec: v.read_bytes_per_sec,
                    write_bytes_per_sec: v.write_bytes_per_sec,
                }
            };
            if delta.is_none() {
                // Without the collector, nodes and files add up the processes' counts.
                for (n, r) in acc.rates() {
                    nodes_acc.add(
                        n,
                        r.read_bytes_per_sec,
                        r.write_bytes_per_sec,
                        !run.contains(&n),
                    );
                }
                if !exact {
                    estimate_files(v, &run, &mut files);
                }
            }
            processes.push(ProcessRow {
                pid: v.pid,
                comm: v.comm.clone(),
                numa_io_source: v.numa_io_source,
                main_node: v.main_node,
                rate,
                by_data_node: acc.rates(),
                remote_share,
            });
        }
        let nodes = topo
            .nodes
            .iter()
            .map(|n| NodeRow {
                node: n.id,
                page_cache_bytes: n.mem.file_pages_bytes,
                rate: nodes_acc.rates().get(&n.id).copied().unwrap_or_default(),
                remote_share: nodes_acc.node_remote_share(n.id),
            })
            .collect();
        let files = files
            .rows
            .into_values()
            .map(|(mut row, acc, pids)| {
                row.by_data_node = acc.rates();
                for r in row.by_data_node.values() {
                    row.rate.add(r.read_bytes_per_sec, r.write_bytes_per_sec);
                }
                row.remote_share = acc.remote_share();
                row.pids = pids.into_iter().collect();
                row
            })
            .filter(|r| r.rate.total() > 0.0)
            .collect();
        Frame {
            interval_secs: secs,
            numa_io_source: source,
            numa_io_fallback_reason: fallback_reason.map(str::to_owned),
            numa_io_incomplete: delta.and_then(|d| d.missed.io_reason()),
            nodes,
            processes,
            files,
        }
    }

    /// The processes matching `filter` (a substring of the command name, or of the path of
    /// one of its files; empty: all), sorted by `key`.
    pub fn processes_sorted(&self, key: SortKey, filter: &str) -> Vec<&ProcessRow> {
        let mut v: Vec<&ProcessRow> = self
            .processes
            .iter()
            .filter(|p| {
                filter.is_empty()
                    || p.comm.contains(filter)
                    || self
                        .files
                        .iter()
                        .any(|f| f.path.contains(filter) && f.pids.contains(&p.pid))
            })
            .collect();
        v.sort_by(|a, b| {
            let o = by_numbers(key, (&a.rate, a.remote_share), (&b.rate, b.remote_share))
                .unwrap_or_else(|| match key {
                    SortKey::Name => a.comm.cmp(&b.comm),
                    _ => a.pid.cmp(&b.pid),
                });
            o.then(a.pid.cmp(&b.pid))
        });
        v
    }

    /// The files matching `filter` (a substring of the path; empty: all), sorted by `key`
    /// (`id` sorts by device and inode).
    pub fn files_sorted(&self, key: SortKey, filter: &str) -> Vec<&FileRow> {
        let mut v: Vec<&FileRow> = self
            .files
            .iter()
            .filter(|f| filter.is_empty() || f.path.contains(filter))
            .collect();
        v.sort_by(|a, b| {
            let o = by_numbers(key, (&a.rate, a.remote_share), (&b.rate, b.remote_share))
                .unwrap_or_else(|| match key {
                    SortKey::Name => a.path.cmp(&b.path),
                    _ => (a.dev, a.ino).cmp(&(b.dev, b.ino)),
                });
            o.then((a.dev, a.ino).cmp(&(b.dev, b.ino)))
        });
        v
    }

    /// The nodes shown in per-node columns: every node of the machine, and any other node
    /// that data was counted on.
    pub fn node_ids(&self) -> Vec<u32> {
        let mut ids: BTreeSet<u32> = self.nodes.iter().map(|n| n.node).collect();
        for p in &self.processes {
            ids.extend(p.by_data_node.keys());
        }
        ids.into_iter().collect()
    }
}

/// Spreads a process's estimated reads over its open files, by the same weights as the
/// estimate itself ([`locality::file_shares`]) and each file's residency.
fn estimate_files(v: &ProcessView, run: &[u32], files: &mut FileAcc) {
    let read: u64 = v.numa_read_bytes.values().sum();
    if read == 0 {
        return;
    }
    let per = v.interval_secs.max(f64::EPSILON);
    let weights: Vec<FileWeight<'_>> = v
        .files
        .iter()
        .map(|f| FileWeight {
            nodes: (!f.write_only && f.error.is_none()).then_some(&f.nodes),
            advanced: f.advanced_bytes,
        })
        .collect();
    for (f, share) in v.files.iter().zip(locality::file_shares(&weights)) {
        let cached: u64 = f.nodes.values().sum();
        if share == 0.0 || cached == 0 {
            continue;
        }
        let e = files.entry(f.dev, f.ino, NumaIoSource::Estimate);
        for (&n, &b) in &f.nodes {
            let rd = read as f64 * share * b as f64 / cached as f64 / per;
            e.1.add(n, rd, 0.0, !run.contains(&n));
        }
        e.2.insert(v.pid);
    }
}

/// Two rows by a numeric key, largest first (a row without a remote share last); `None`
/// for name and id, which each table orders by its own columns.
fn by_numbers(
    key: SortKey,
    (ar, ashare): (&Rate, Option<f64>),
    (br, bshare): (&Rate, Option<f64>),
) -> Option<std::cmp::Ordering> {
    Some(match key {
        SortKey::Total => cmp_f(br.total(), ar.total()),
        SortKey::Read => cmp_f(br.read_bytes_per_sec, ar.read_bytes_per_sec),
        SortKey::Write => cmp_f(br.write_bytes_per_sec, ar.write_bytes_per_sec),
        SortKey::Remote => cmp_f(bshare.unwrap_or(-1.0), ashare.unwrap_or(-1.0)),
        SortKey::Name | SortKey::Id => return None,
    })
}

fn cmp_f(a: f64, b: f64) -> std::cmp::Ordering {
    a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
}

/// The column a table is sorted by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SortKey {
    /// Bytes per second read and written, largest first.
    #[default]
    Total,
    Read,
    Write,
    /// Remote share, largest first.
    Remote,
    /// Command name or path, ascending.
    Name,
    /// Pid, or device and inode, ascending.
    Id,
}

impl SortKey {
    /// In the order `s` and `>` step through them.
    pub const ALL: [SortKey; 6] = [
        SortKey::Total,
        SortKey::Read,
        SortKey::Write,
        SortKey::Remote,
        SortKey::Name,
        SortKey::Id,
    ];
    pub const NAMES: [&'static str; 6] = ["total", "read", "write", "remote", "name", "id"];

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self.index()]
    }
    fn index(self) -> usize {
        Self::ALL.iter().position(|&k| k == self).unwrap_or(0)
    }
    pub fn next(self) -> SortKey {
        Self::ALL[(self.index() + 1) % Self::ALL.len()]
    }
    pub fn prev(self) -> SortKey {
        Self::ALL[(self.index() + Self::ALL.len() - 1) % Self::ALL.len()]
    }
}

impl std::str::FromStr for SortKey {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::NAMES
            .iter()
            .position(|&n| n == s)
            .map(|i| Self::ALL[i])
            .ok_or_else(|| {
                format!(
                    "unknown sort key {s:?}: expected one of {}",
                    Self::NAMES.join(", ")
                )
            })
    }
}

/// Which table the view lists below the nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Table {
    #[default]
    Processes,
    Files,
}

/// A key the view reacts to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Esc,
    Backspace,
    /// Ctrl-C: quits, as the terminal's interrupt would.
    Interrupt,
}

impl Key {
    /// The keys in bytes read from a terminal in raw mode. Escape sequences (arrows,
    /// function keys) are dropped whole; a lone ESC is [`Key::Esc`]; invalid UTF-8 is skipped.
    pub fn decode(bytes: &[u8]) -> Vec<Key> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            let b = bytes[i];
            i += 1;
            match b {
                0x03 => out.push(Key::Interrupt),
                b'\r' | b'\n' => out.push(Key::Enter),
                0x7f | 0x08 => out.push(Key::Backspace),
                0x1b => match bytes.get(i) {
                    // CSI (ESC [) and SS3 (ESC O): parameters, then one final byte.
                    Some(b'[') | Some(b'O') => {
                        i += 1;
                        while i < bytes.len() && !(0x40..=0x7e).contains(&bytes[i]) {
                            i += 1;
                        }
                        i += 1;
                    }
                    _ => out.push(Key::Esc),
                },
                0x20..=0x7e => out.push(Key::Char(char::from(b))),
                0x80.. => {
                    let len = match b {
                        0xc0..=0xdf => 2,
                        0xe0..=0xef => 3,
                        0xf0..=0xf7 => 4,
                        _ => continue,
                    };
                    let end = (i - 1 + len).min(bytes.len());
                    if let Ok(s) = std::str::from_utf8(&bytes[i - 1..end]) {
                        out.extend(s.chars().map(Key::Char));
                    }
                    i = end;
                }
                _ => {}
            }
        }
        out
    }
}

/// What a key asks of the loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Nothing,
    Redraw,
    Quit,
}

/// The view's state: what is listed, how, and whether sampling is paused.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopState {
    pub sort: SortKey,
    pub filter: String,
    /// The filter being typed after `/`, until Enter (applies it) or Esc (drops it).
    pub editing: Option<String>,
    pub table: Table,
    pub paused: bool,
}

impl TopState {
    /// q quits; s or > next sort column, < previous; / edits the filter (Enter applies,
    /// Esc cancels, an empty filter shows all); p processes, f files; space pauses.
    pub fn key(&mut self, k: Key) -> Action {
        if k == Key::Interrupt {
            return Action::Quit;
        }
        if let Some(buf) = &mut self.editing {
            match k {
                Key::Char(c) if !c.is_control() => buf.push(c),
                Key::Backspace => {
                    buf.pop();
                }
                Key::Enter => self.filter = self.editing.take().unwrap_or_default(),
                Key::Esc => self.editing = None,
                _ => return Action::Nothing,
            }
            return Action::Redraw;
        }
        match k {
            Key::Char('q') | Key::Char('Q') => return Action::Quit,
            Key::Char('s') | Key::Char('>') => self.sort = self.sort.next(),
            Key::Char('<') => self.sort = self.sort.prev(),
            Key::Char('/') => self.editing = Some(self.filter.clone()),
            Key::Char('p') => self.table = Table::Processes,
            Key::Char('f') => self.table = Table::Files,
            Key::Char(' ') => self.paused = !self.paused,
            Key::Esc if !self.filter.is_empty() => self.filter.clear(),
            _ => return Action::Nothing,
        }
        Action::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_source::ExactIo;
    use crate::sample::FileView;
    use numaio_bpf::{IoRecord, Snapshot};
    use numaio_numa::IoBytes;

    fn topo() -> Topology {
        Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap()
    }

    fn view(pid: i32, comm: &str, run: u32) -> ProcessView {
        ProcessView {
            pid,
            comm: comm.into(),
            thread_nodes: BTreeMap::from([(run, 1)]),
            main_node: Some(run),
            interval_secs: 2.0,
            ..Default::default()
        }
    }

    fn file(path: &str, ino: u64, nodes: &[(u32, u64)], advanced: u64) -> FileView {
        FileView {
            path: path.into(),
            dev: 2049,
            ino,
            via: "fd".into(),
            nodes: nodes.iter().copied().collect(),
            cached_bytes: nodes.iter().map(|x| x.1).sum(),
            advanced_bytes: advanced,
            ..Default::default()
        }
    }

    fn rec(pid: i32, ino: u64, data: u32, cpu: u32, r: u64, w: u64) -> IoRecord {
        IoRecord {
            pid,
            tid: pid,
            dev: 2049,
            ino,
            data_node: data,
            cpu_node: cpu,
            read_bytes: r,
            write_bytes: w,
        }
    }

    #[test]
    fn ebpf_records_fill_nodes_processes_and_files() {
        let delta = Snapshot {
            io: vec![
                rec(7, 12, 0, 1, 8 << 20, 0),
                rec(7, 13, 1, 1, 2 << 20, 2 << 20),
                // A process the scan did not list still counts for its node and file.
                rec(9, 14, 0, 0, 4 << 20, 0),
            ],
            ..Default::default()
        };
        let mut v = view(7, "reader", 1);
        v.files = vec![file("/data/big", 12, &[(0, 1 << 30)], 0)];
        let per = delta.per_process();
        v.set_exact(NumaIoSource::Ebpf, &ExactIo::from(&per[&7]), &[0, 1]);
        let f = Frame::build(&[v], Some(&delta), &topo(), 2.0, NumaIoSource::Ebpf, None);
        assert_eq!(f.nodes.len(), 2);
        let n0 = &f.nodes[0];
        assert_eq!(n0.rate.read_bytes_per_sec, (6 << 20) as f64);
        // 8 MiB of node 0's 12 MiB were read from node 1.
        assert_eq!(n0.remote_share, Some(8.0 / 12.0));
        assert_eq!(f.nodes[1].rate.write_bytes_per_sec, (1 << 20) as f64);
        assert_eq!(f.nodes[1].remote_share, Some(0.0));
        assert_eq!(n0.page_cache_bytes, 0);
        let p = &f.processes[0];
        assert_eq!(p.by_data_node[&0].read_bytes_per_sec, (4 << 20) as f64);
        assert_eq!(p.rate.total(), (6 << 20) as f64);
        assert_eq!(p.remote_share, Some(8.0 / 12.0));
        let big = f.files.iter().find(|x| x.ino == 12).unwrap();
        assert_eq!(big.path, "/data/big");
        assert_eq!(big.pids, vec![7]);
        assert_eq!(big.remote_share, Some(1.0));
        let unknown = f.files.iter().find(|x| x.ino == 14).unwrap();
        assert_eq!(unknown.path, "dev 8:1 inode 14");
        let j = serde_json::to_value(&f).unwrap();
        assert_eq!(j["numa_io_source"], "ebpf");
        assert_eq!(j["nodes"][0]["read_bytes_per_sec"], (6 << 20) as f64);
        assert_eq!(
            j["processes"][0]["by_data_node"]["1"]["write_bytes_per_sec"],
            (1 << 20) as f64
        );
        assert_eq!(j["files"][0]["numa_io_source"], "ebpf");
    }

    #[test]
    fn the_estimate_spreads_reads_over_open_files() {
        let mut v = view(5, "cat", 0);
        v.read_bytes_per_sec = 1000.0;
        v.files = vec![
            file("/a", 1, &[(0, 4096)], 3000),
            file("/b", 2, &[(1, 4096)], 1000),
        ];
        v.numa_read_bytes = BTreeMap::from([(0, 1500), (1, 500)]);
        v.locality = Some(0.75);
        let f = Frame::build(
            &[v],
            None,
            &topo(),
            2.0,
            NumaIoSource::Estimate,
            Some("no BTF"),
        );
        assert_eq!(f.numa_io_fallback_reason.as_deref(), Some("no BTF"));
        let p = &f.processes[0];
        assert_eq!(p.rate.read_bytes_per_sec, 1000.0);
        assert_eq!(p.by_data_node[&0].read_bytes_per_sec, 750.0);
        assert_eq!(p.remote_share, Some(0.25));
        assert_eq!(f.nodes[1].remote_share, Some(1.0));
        assert_eq!(f.nodes[0].remote_share, Some(0.0));
        let a = f.files.iter().find(|x| x.path == "/a").unwrap();
        assert_eq!(a.rate.read_bytes_per_sec, 750.0);
        assert_eq!(a.numa_io_source, NumaIoSource::Estimate);
        let b = f.files.iter().find(|x| x.path == "/b").unwrap();
        assert_eq!(b.by_data_node[&1].read_bytes_per_sec, 250.0);
        assert_eq!(b.remote_share, Some(1.0));
    }

    #[test]
    fn sorting_and_filtering() {
        let mut views = vec![view(1, "alpha", 0), view(2, "beta", 0), view(3, "gamma", 1)];
        for (v, (r, w)) in views.iter_mut().zip([(10, 0), (5, 50), (30, 0)]) {
            v.set_exact(
                NumaIoSource::Mount,
                &ExactIo {
                    by_data_node: [(0, IoBytes::new(r, w))].into_iter().collect(),
                    ..Default::default()
                },
                &[0, 1],
            );
            v.files = vec![file(&format!("/d/{}", v.comm), v.pid as u64, &[(0, 10)], 1)];
        }
        let f = Frame::build(&views, None, &topo(), 1.0, NumaIoSource::Mount, None);
        let pids =
            |k, flt| -> Vec<i32> { f.processes_sorted(k, flt).iter().map(|p| p.pid).collect() };
        assert_eq!(pids(SortKey::Total, ""), vec![2, 3, 1]);
        assert_eq!(pids(SortKey::Read, ""), vec![3, 1, 2]);
        assert_eq!(pids(SortKey::Write, ""), vec![2, 1, 3]);
        // gamma runs on node 1, its data is on node 0.
        assert_eq!(pids(SortKey::Remote, ""), vec![3, 1, 2]);
        assert_eq!(pids(SortKey::Name, ""), vec![1, 2, 3]);
        assert_eq!(pids(SortKey::Id, "a"), vec![1, 2, 3]);
        assert_eq!(pids(SortKey::Total, "mm"), vec![3]);
        assert_eq!(
            f.files_sorted(SortKey::Name, "").len(),
            0,
            "mount counts have no files"
        );
    }

    #[test]
    fn keys_drive_the_view() {
        let mut s = TopState::default();
        assert_eq!(s.key(Key::Char('s')), Action::Redraw);
        assert_eq!(s.sort, SortKey::Read);
        s.key(Key::Char('<'));
        s.key(Key::Char('<'));
        assert_eq!(s.sort, SortKey::Id);
        s.key(Key::Char('>'));
        assert_eq!(s.sort, SortKey::Total);
        s.key(Key::Char('/'));
        for c in "catq".chars() {
            assert_eq!(s.key(Key::Char(c)), Action::Redraw, "typing does not quit");
        }
        s.key(Key::Backspace);
        assert_eq!(s.filter, "");
        s.key(Key::Enter);
        assert_eq!(s.filter, "cat");
        assert_eq!(s.editing, None);
        s.key(Key::Char('/'));
        s.key(Key::Char('x'));
        s.key(Key::Esc);
        assert_eq!(s.filter, "cat");
        s.key(Key::Esc);
        assert_eq!(s.filter, "");
        s.key(Key::Char('f'));
        assert_eq!(s.table, Table::Files);
        s.key(Key::Char('p'));
        assert_eq!(s.table, Table::Processes);
        s.key(Key::Char(' '));
        assert!(s.paused);
        assert_eq!(s.key(Key::Char('z')), Action::Nothing);
        assert_eq!(s.key(Key::Char('q')), Action::Quit);
        assert_eq!(TopState::default().key(Key::Interrupt), Action::Quit);
        assert_eq!("remote".parse(), Ok(SortKey::Remote));
        assert!("size".parse::<SortKey>().is_err());
    }

    #[test]
    fn terminal_bytes_decode_to_keys() {
        assert_eq!(
            Key::decode(b"q/ab\r\x7f\x03"),
            vec![
                Key::Char('q'),
                Key::Char('/'),
                Key::Char('a'),
                Key::Char('b'),
                Key::Enter,
                Key::Backspace,
                Key::Interrupt,
            ]
        );
        // An arrow key (CSI A), an F1 (SS3 P) and a lone ESC.
        assert_eq!(
            Key::decode(b"\x1b[Ax\x1bOP\x1b"),
            vec![Key::Char('x'), Key::Esc]
        );
        assert_eq!(Key::decode("é".as_bytes()), vec![Key::Char('é')]);
        // Anything else decodes without panicking.
        for a in 0..=255u8 {
            for b in [0u8, b'[', 0x80, 0xc3, 0xff] {
                let _ = Key::decode(&[a, b]);
                let _ = Key::decode(&[0x1b, a, b]);
            }
        }
    }
}
