//! Where a process's per-node I/O counts come from, and replacing the estimate by exact
//! counts.
//!
//! [`sample`](crate::sample) estimates every process's reads per node. Two sources count
//! them exactly: the eBPF collector (`numaio-bpf`, any file system using the page cache)
//! and a numaio FUSE mount (its own files only). [`ProcessView::set_exact`] puts exact
//! counts in place of the estimate, so `ps`, `top`, the daemon's policies and its metrics
//! all read one set of fields and say which source filled them.
//!
//! [`Sources`] chooses, once, in this order: the collector when it attaches (it sees every
//! copy to and from the page cache, including the reads the kernel answers from its cache
//! on a numaio mount, which the mount never sees); else, for a process using a numaio
//! mount, the mount's counters ([`MountReader`], supplied by the front end, which knows the
//! statistics' format); else the estimate. Each [`Sources::apply`] counts one interval.

use crate::sample::ProcessView;
use numaio_numa::counters::{Fields, IoBytes, NodeIo};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Which source filled a process's per-node counts (`numa_io_source` in JSON).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum NumaIoSource {
    /// The eBPF collector: bytes copied from and to the page cache, by the node of the pages.
    Ebpf,
    /// A numaio mount's own per-process, per-node counters.
    Mount,
    /// Residency × read rate ([`crate::locality`]).
    #[default]
    Estimate,
}

impl NumaIoSource {
    pub fn as_str(self) -> &'static str {
        match self {
            NumaIoSource::Ebpf => "ebpf",
            NumaIoSource::Mount => "mount",
            NumaIoSource::Estimate => "estimate",
        }
    }

    /// Counted, not estimated.
    pub fn is_exact(self) -> bool {
        self != NumaIoSource::Estimate
    }
}

impl std::fmt::Display for NumaIoSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Exact counts for one process over one interval.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExactIo {
    /// Bytes read and written, by the node the data's pages were on.
    pub by_data_node: NodeIo,
    /// Bytes whose pages were on the node of the CPU that copied them, and on another node;
    /// `None` where the source does not know the CPU's node.
    pub local: Option<IoBytes>,
    pub remote: Option<IoBytes>,
}

impl From<&numaio_bpf::ProcessIo> for ExactIo {
    fn from(p: &numaio_bpf::ProcessIo) -> Self {
        ExactIo {
            by_data_node: p.by_data_node.clone(),
            local: Some(p.local),
            remote: Some(p.remote),
        }
    }
}

impl ProcessView {
    /// Replaces the estimated per-node reads by exact counts from `source`: `numa_io` (read
    /// and write keys for every node in `nodes`), the read distribution, and the local
    /// share (the collector's local bytes where known, else the run nodes' share).
    pub fn set_exact(&mut self, source: NumaIoSource, io: &ExactIo, nodes: &[u32]) {
        self.numa_io_source = source;
        self.numa_io_incomplete = None;
        self.numa_io = io.by_data_node.numa_io_map(nodes, Fields::ReadWrite);
        self.numa_read_bytes = io
            .by_data_node
            .iter()
            .filter(|(_, b)| b.read_bytes > 0)
            .map(|(n, b)| (n, b.read_bytes))
            .collect();
        self.numa_write_bytes = io
            .by_data_node
            .iter()
            .filter(|(_, b)| b.write_bytes > 0)
            .map(|(n, b)| (n, b.write_bytes))
            .collect();
        let total: u64 = self.numa_read_bytes.values().sum();
        self.read_distribution = if total == 0 {
            BTreeMap::new()
        } else {
            self.numa_read_bytes
                .iter()
                .map(|(&n, &b)| (n, b as f64 / total as f64))
                .collect()
        };
        self.local_bytes = io.local;
        self.remote_bytes = io.remote;
        self.locality = match (io.local, io.remote) {
            (Some(l), Some(r)) if l.read_bytes + r.read_bytes > 0 => {
                Some(l.read_bytes as f64 / (l.read_bytes + r.read_bytes) as f64)
            }
            (Some(_), Some(_)) => None,
            _ => crate::locality::local_share(&self.read_distribution, &self.run_nodes()),
        };
    }
}

/// Which source the user asked for (`--source`): `auto` takes the best one available.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SourceChoice {
    /// The eBPF collector when it attaches; else, for processes using a numaio mount, the
    /// mount's counters; else the estimate.
    #[default]
    Auto,
    /// The eBPF collector only; an error where it cannot run.
    Ebpf,
    /// The mounts' counters for processes using a numaio mount, the estimate for the rest.
    Mount,
    /// The estimate only.
    Estimate,
}

impl SourceChoice {
    pub const NAMES: [&'static str; 4] = ["auto", "ebpf", "mount", "estimate"];
}

impl std::str::FromStr for SourceChoice {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(SourceChoice::Auto),
            "ebpf" => Ok(SourceChoice::Ebpf),
            "mount" => Ok(SourceChoice::Mount),
            "estimate" => Ok(SourceChoice::Estimate),
            _ => Err(format!(
                "unknown source {s:?}: expected one of {}",
                SourceChoice::NAMES.join(", ")
            )),
        }
    }
}

/// One process's counters on one numaio mount, cumulative since the mount started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountProcessIo {
    /// Bytes read and written, by the node the data lies on.
    pub by_data_node: NodeIo,
    /// Of those, the bytes asked for while the caller ran on the data's node.
    pub local: IoBytes,
}

/// What one numaio mount counted per process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MountCounts {
    /// Where it is mounted (in this process's mount namespace).
    pub mountpoint: PathBuf,
    pub processes: BTreeMap<i32, MountProcessIo>,
}

/// Reads every numaio mount's counters. The front end supplies it (the statistics' format
/// belongs to the FUSE crate, which this crate does not depend on).
pub trait MountReader: std::fmt::Debug + Send {
    /// The counters of every numaio mount visible here; a mount that cannot be read is left
    /// out.
    fn read_all(&mut self) -> Vec<MountCounts>;
}

/// Where the counted snapshots come from: the collector, or snapshots handed in (replays,
/// tests).
pub trait SnapshotSource: std::fmt::Debug + Send {
    fn snapshot(&mut self) -> Result<numaio_bpf::Snapshot, numaio_bpf::Unavailable>;
}

#[derive(Debug)]
enum Counter {
    Bpf(Box<numaio_bpf::Collector>),
    Given(Box<dyn SnapshotSource>),
}

impl Counter {
    fn snapshot(&mut self) -> Result<numaio_bpf::Snapshot, numaio_bpf::Unavailable> {
        match self {
            Counter::Bpf(c) => c.snapshot(),
            Counter::Given(s) => s.snapshot(),
        }
    }
}

/// The exact sources a scan uses, chosen once, in this order: the eBPF collector when it
/// attaches (it counts every copy from and to the page cache, including reads the kernel
/// answers from its cache on a numaio mount, which the mount never sees); else, for a
/// process using a numaio mount, the mount's own counters; else the estimate. The one-line
/// reason for not counting with eBPF is kept for the user.
#[derive(Debug)]
pub struct Sources {
    counter: Option<Counter>,
    fallback_reason: Option<String>,
    last: Option<numaio_bpf::Snapshot>,
    /// What the collector counted in the last interval applied.
    delta: Option<numaio_bpf::Snapshot>,
    /// Why the collector's counts of the last interval applied are short.
    incomplete: Option<String>,
    mounts: Option<Box<dyn MountReader>>,
    /// The mounts' counters when last read, per mount and pid.
    mount_last: BTreeMap<(PathBuf, i32), MountProcessIo>,
    /// The mounts whose counts filled each process's view in the last interval applied.
    mount_of: BTreeMap<i32, Vec<PathBuf>>,
}

impl Sources {
    /// Starts the eBPF collector when `ebpf` is true; when it cannot run, remembers why.
    /// No mount source (see [`Sources::with_mounts`]).
    pub fn new(ebpf: bool) -> Sources {
        let (counter, fallback_reason) = if ebpf {
            match numaio_bpf::Collector::start(&numaio_bpf::CollectorOptions::default()) {
                Ok(c) => (Some(Counter::Bpf(Box::new(c))), None),
                Err(e) => (None, Some(e.reason)),
            }
        } else {
            (None, Some("the eBPF collector was not asked for".into()))
        };
        Sources {
            counter,
            fallback_reason,
            last: None,
            delta: None,
            incomplete: None,
            mounts: None,
            mount_last: BTreeMap::new(),
            mount_of: BTreeMap::new(),
        }
    }

    /// The sources `choice` asks for, with `mounts` as the mount source (`None`: none).
    /// Fails, with the reason, only where `choice` is [`SourceChoice::Ebpf`] and the
    /// collector cannot run.
    pub fn choose(
        choice: SourceChoice,
        mounts: Option<Box<dyn MountReader>>,
    ) -> Result<Sources, String> {
        let mut s = Sources::new(matches!(choice, SourceChoice::Auto | SourceChoice::Ebpf));
        match choice {
            SourceChoice::Ebpf if !s.ebpf() => {
                return Err(s.fallback_reason.take().unwrap_or_default())
            }
            SourceChoice::Ebpf => {}
            SourceChoice::Mount => {
                s.fallback_reason = Some("--source mount was asked for".into());
                s.mounts = mounts;
            }
            SourceChoice::Estimate => {
                s.fallback_reason = Some("--source estimate was asked for".into());
            }
            SourceChoice::Auto => s.mounts = mounts,
        }
        Ok(s)
    }

    /// Counts from `snapshots` as if they came from the collector (a replay, or a test).
    pub fn from_snapshots(snapshots: Box<dyn SnapshotSource>) -> Sources {
        let mut s = Sources::new(false);
        s.counter = Some(Counter::Given(snapshots));
        s.fallback_reason = None;
        s
    }

    /// Adds the numaio mounts' counters as the source for processes using a mount, where
    /// the collector does not run.
    pub fn with_mounts(mut self, mounts: Box<dyn MountReader>) -> Sources {
        self.mounts = Some(mounts);
        self
    }

    /// Why counts are estimated rather than counted by eBPF (`None` when the collector runs).
    pub fn fallback_reason(&self) -> Option<&str> {
        self.fallback_reason.as_deref()
    }

    /// A reader of the collector's per-file page-cache counts, or why there is none.
    pub fn cache_reader(&self) -> Result<numaio_bpf::CacheReader, String> {
        match &self.counter {
            Some(Counter::Bpf(c)) => Ok(c.cache_reader()),
            Some(Counter::Given(_)) => Err("counts are replayed, not counted".into()),
            None => Err(self
                .fallback_reason
                .clone()
                .unwrap_or_else(|| "the eBPF collector does not run".into())),
        }
    }

    /// Whether the eBPF collector is attached.
    pub fn ebpf(&self) -> bool {
        self.counter.is_some()
    }

    /// The best source that counted the last interval applied: `ebpf` when the collector
    /// runs, else `mount` when a numaio mount counted some process, else `estimate`.
    pub fn primary(&self) -> NumaIoSource {
        if self.ebpf() {
            NumaIoSource::Ebpf
        } else if !self.mount_of.is_empty() {
            NumaIoSource::Mount
        } else {
            NumaIoSource::Estimate
        }
    }

    /// Whether numaio mounts are read for the processes using them (without the collector).
    pub fn reads_mounts(&self) -> bool {
        !self.ebpf() && self.mounts.is_some()
    }

    /// What the collector counted during the last interval applied, record by record (per
    /// thread, file and node); `None` without the collector.
    pub fn last_delta(&self) -> Option<&numaio_bpf::Snapshot> {
        self.delta.as_ref()
    }

    /// Why the collector's counts of the last interval applied are short, in one line
    /// (`numa_io_exact` is then false for every process: a skipped run belongs to nobody
    /// known); `None` when it missed nothing or does not run.
    pub fn incomplete_reason(&self) -> Option<&str> {
        self.incomplete.as_deref()
    }

    /// The mounts whose counters filled the process's view in the last interval applied.
    pub fn mounts_of(&self, pid: i32) -> &[PathBuf] {
        self.mount_of.get(&pid).map_or(&[], Vec::as_slice)
    }

    /// Starts an interval: what the sources count from now on goes to the next
    /// [`Sources::apply`].
    pub fn begin_interval(&mut self) {
        if let Some(c) = &mut self.counter {
            match c.snapshot() {
                Ok(s) => self.last = Some(s),
                Err(e) => self.stop(e.reason),
            }
        } else if let Some(m) = &mut self.mounts {
            let now = m.read_all();
            self.mount_last = mount_table(&now);
        }
    }

    /// Replaces each view's estimate by what the sources counted for its process since the
    /// interval began, and begins the next interval. With the collector every view gets its
    /// counts (zero for a process that did no page-cache I/O); without it, the views of
    /// processes a numaio mount counted, or that have a file open on one, get the mounts'
    /// counts; the others keep their estimates.
    pub fn apply(&mut self, views: &mut [ProcessView], nodes: &[u32]) {
        self.mount_of.clear();
        self.incomplete = None;
        if self.counter.is_some() {
            return self.apply_ebpf(views, nodes);
        }
        self.delta = None;
        if let Some(m) = &mut self.mounts {
            let now = m.read_all();
            self.apply_mounts(&now, views, nodes);
        }
    }

    fn apply_ebpf(&mut self, views: &mut [ProcessView], nodes: &[u32]) {
        let Some(c) = &mut self.counter else { return };
        let now = match c.snapshot() {
            Ok(s) => s,
            Err(e) => {
                self.stop(e.reason);
                // The interval is counted by nobody: the views keep their estimates, and
                // the mounts (if any) take over from the next interval.
                return;
            }
        };
        let delta = match &self.last {
            Some(prev) => now.since(prev),
            None => now.clone(),
        };
        self.last = Some(now);
        let per = delta.per_process();
        self.incomplete = delta.missed.io_reason();
        self.delta = Some(delta);
        for v in views.iter_mut() {
            let io = per
                .get(&v.pid)
                .map(ExactIo::from)
                .unwrap_or_else(|| ExactIo {
                    local: Some(IoBytes::default()),
                    remote: Some(IoBytes::default()),
                    ..Default::default()
                });
            v.set_exact(NumaIoSource::Ebpf, &io, nodes);
            v.numa_io_incomplete = self.incomplete.clone();
        }
    }

    fn apply_mounts(&mut self, now: &[MountCounts], views: &mut [ProcessView], nodes: &[u32]) {
        let table = mount_table(now);
        for v in views.iter_mut() {
            let mut io = ExactIo {
                local: Some(IoBytes::default()),
                remote: Some(IoBytes::default()),
                ..Default::default()
            };
            let mut used = Vec::new();
            for m in now {
                let counted = m.processes.contains_key(&v.pid);
                let open_there = v.files.iter().any(|f| {
                    f.mount_ns != crate::sample::MountNs::Foreign
                        && f.path.starts_with(&m.mountpoint)
                });
                if !counted && !open_there {
                    continue;
                }
                used.push(m.mountpoint.clone());
                let key = (m.mountpoint.clone(), v.pid);
                let Some(cur) = table.get(&key) else { continue };
                // A process the previous read did not list did all its I/O since then.
                let d = match self.mount_last.get(&key) {
                    Some(prev) => mount_delta(cur, prev),
                    None => cur.clone(),
                };
                for (n, b) in d.by_data_node.iter() {
                    io.by_data_node.add(n, b);
                }
                let total = d.by_data_node.total();
                let local = io.local.get_or_insert_with(IoBytes::default);
                local.read_bytes += d.local.read_bytes;
                local.write_bytes += d.local.write_bytes;
                let remote = io.remote.get_or_insert_with(IoBytes::default);
                remote.read_bytes += total.read_bytes.saturating_sub(d.local.read_bytes);
                remote.write_bytes += total.write_bytes.saturating_sub(d.local.write_bytes);
            }
            if !used.is_empty() {
                v.set_exact(NumaIoSource::Mount, &io, nodes);
                self.mount_of.insert(v.pid, used);
            }
        }
        self.mount_last = table;
    }

    fn stop(&mut self, reason: String) {
        self.counter = None;
        self.last = None;
        self.delta = None;
        self.incomplete = None;
        self.fallback_reason = Some(format!("the eBPF collector stopped: {reason}"));
        // The mounts take over from here: their counts so far are not this interval's.
        if let Some(m) = &mut self.mounts {
            self.mount_last = mount_table(&m.read_all());
        }
    }
}

fn mount_table(now: &[MountCounts]) -> BTreeMap<(PathBuf, i32), MountProcessIo> {
    now.iter()
        .flat_map(|m| {
            m.processes
                .iter()
                .map(|(&pid, io)| ((m.mountpoint.clone(), pid), io.clone()))
        })
        .collect()
}

/// `cur` less `prev`, counter by counter (a counter that went back, after a remount, counts
/// from zero).
fn mount_delta(cur: &MountProcessIo, prev: &MountProcessIo) -> MountProcessIo {
    let sub = |a: IoBytes, b: IoBytes| {
        if a.read_bytes < b.read_bytes || a.write_bytes < b.write_bytes {
            a
        } else {
            IoBytes::new(a.read_bytes - b.read_bytes, a.write_bytes - b.write_bytes)
        }
    };
    let mut by_data_node = NodeIo::new();
    for (n, b) in cur.by_data_node.iter() {
        let d = sub(b, prev.by_data_node.get(n));
        if d.total() > 0 {
            by_data_node.add(n, d);
        }
    }
    MountProcessIo {
        by_data_node,
        local: sub(cur.local, prev.local),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use numaio_bpf::{IoRecord, Snapshot, Unavailable};
    use std::collections::VecDeque;

    /// Hands out the given snapshots in turn, then fails.
    #[derive(Debug)]
    struct Replay(VecDeque<Snapshot>);

    impl SnapshotSource for Replay {
        fn snapshot(&mut self) -> Result<Snapshot, Unavailable> {
            self.0.pop_front().ok_or(Unavailable {
                reason: "the maps could not be read".into(),
            })
        }
    }

    #[derive(Debug)]
    struct FakeMounts(VecDeque<Vec<MountCounts>>);

    impl MountReader for FakeMounts {
        fn read_all(&mut self) -> Vec<MountCounts> {
            self.0.pop_front().unwrap_or_default()
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

    fn snap(io: Vec<IoRecord>) -> Snapshot {
        Snapshot {
            io,
            ..Default::default()
        }
    }

    fn estimated(pid: i32) -> ProcessView {
        ProcessView {
            pid,
            thread_nodes: BTreeMap::from([(1, 1)]),
            numa_read_bytes: BTreeMap::from([(1, 500)]),
            read_distribution: BTreeMap::from([(1, 1.0)]),
            locality: Some(1.0),
            ..Default::default()
        }
    }

    #[test]
    fn ebpf_counts_the_interval_for_every_view() {
        let before = snap(vec![rec(7, 12, 0, 1, 1000, 0)]);
        let after = snap(vec![
            rec(7, 12, 0, 1, 1000 + (4 << 20), 0),
            rec(7, 13, 1, 1, 4096, 8192),
        ]);
        let mut s = Sources::from_snapshots(Box::new(Replay(VecDeque::from([before, after]))));
        assert!(s.ebpf());
        assert_eq!(s.primary(), NumaIoSource::Ebpf);
        assert_eq!(s.fallback_reason(), None);
        s.begin_interval();
        let mut views = vec![estimated(7), estimated(8)];
        s.apply(&mut views, &[0, 1]);
        let v = &views[0];
        assert_eq!(v.numa_io_source, NumaIoSource::Ebpf);
        assert_eq!(v.numa_read_bytes, BTreeMap::from([(0, 4 << 20), (1, 4096)]));
        assert_eq!(v.numa_write_bytes, BTreeMap::from([(1, 8192)]));
        assert_eq!(v.remote_bytes, Some(IoBytes::new(4 << 20, 0)));
        assert_eq!(v.local_bytes, Some(IoBytes::new(4096, 8192)));
        // A process the collector saw do nothing did nothing: exact zeros, not its estimate.
        let idle = &views[1];
        assert_eq!(idle.numa_io_source, NumaIoSource::Ebpf);
        assert!(idle.numa_read_bytes.is_empty());
        assert_eq!(idle.numa_io["numa1_read_bytes"], 0);
        assert_eq!(idle.locality, None);
        // The interval's records stay available, file by file.
        let d = s.last_delta().unwrap();
        assert_eq!(d.io.len(), 2);
        assert_eq!(d.io[0].read_bytes, 4 << 20);
    }

    #[test]
    fn an_interval_with_skipped_runs_is_not_exact() {
        let missed = |runs: u64, io_events: u64| numaio_bpf::record::Missed {
            counted_runs: true,
            program_runs: [("nio_fx_get".to_string(), runs)]
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect(),
            io_events,
            cache_events: 0,
        };
        let with = |m| Snapshot {
            io: vec![rec(7, 12, 0, 1, 4096, 0)],
            missed: m,
            ..Default::default()
        };
        let replay = VecDeque::from([
            with(missed(2, 0)),
            with(missed(2, 0)),
            with(missed(5, 0)),
            with(missed(5, 1)),
        ]);
        let mut s = Sources::from_snapshots(Box::new(Replay(replay)));
        s.begin_interval();
        // Misses before the interval do not count against it.
        let mut views = vec![estimated(7)];
        s.apply(&mut views, &[0, 1]);
        assert!(
            views[0].numa_io_exact(),
            "{:?}",
            views[0].numa_io_incomplete
        );
        assert_eq!(s.incomplete_reason(), None);
        // Three new skipped runs: every process's counts are short, and it says how many.
        let mut views = vec![estimated(7), estimated(8)];
        s.apply(&mut views, &[0, 1]);
        for v in &views {
            assert_eq!(v.numa_io_source, NumaIoSource::Ebpf);
            assert!(!v.numa_io_exact());
            let why = v.numa_io_incomplete.as_deref().unwrap();
            assert!(why.contains("skipped 3 run(s)"), "{why}");
        }
        assert!(s.incomplete_reason().unwrap().contains("nio_fx_get 3"));
        let j = serde_json::to_value(&views[0]).unwrap();
        assert!(j["numa_io_incomplete"]
            .as_str()
            .unwrap()
            .contains("skipped 3"));
        // A full map dropping an event: short as well.
        let mut views = vec![estimated(7)];
        s.apply(&mut views, &[0, 1]);
        let why = views[0].numa_io_incomplete.as_deref().unwrap();
        assert!(why.contains("1 I/O event(s) were dropped"), "{why}");
        assert!(!why.contains("skipped"), "{why}");
    }

    #[test]
    fn a_collector_that_stops_leaves_the_estimate_and_says_why() {
        let mut s = Sources::from_snapshots(Box::new(Replay(VecDeque::from([snap(vec![])]))));
        s.begin_interval();
        let mut views = vec![estimated(7)];
        s.apply(&mut views, &[0, 1]);
        assert_eq!(views[0].numa_io_source, NumaIoSource::Estimate);
        assert_eq!(views[0].numa_read_bytes, BTreeMap::from([(1, 500)]));
        assert!(!s.ebpf());
        assert_eq!(s.primary(), NumaIoSource::Estimate);
        assert_eq!(
            s.fallback_reason(),
            Some("the eBPF collector stopped: the maps could not be read")
        );
        assert!(s.last_delta().is_none());
    }

    fn mount(mp: &str, procs: &[(i32, u32, u64, u64, u64)]) -> MountCounts {
        let mut processes: BTreeMap<i32, MountProcessIo> = BTreeMap::new();
        for &(pid, node, r, w, local_r) in procs {
            let p = processes.entry(pid).or_default();
            p.by_data_node.add(node, IoBytes::new(r, w));
            p.local.read_bytes += local_r;
        }
        MountCounts {
            mountpoint: mp.into(),
            processes,
        }
    }

    #[test]
    fn without_ebpf_the_mounts_count_their_processes_for_the_interval() {
        let reads = VecDeque::from([
            vec![mount("/mnt/n", &[(7, 0, 1000, 0, 0)])],
            vec![mount(
                "/mnt/n",
                &[(7, 0, 1000 + 3000, 200, 1000), (9, 1, 50, 0, 50)],
            )],
        ]);
        let mut s =
            Sources::choose(SourceChoice::Mount, Some(Box::new(FakeMounts(reads)))).unwrap();
        assert!(!s.ebpf() && s.reads_mounts());
        assert_eq!(s.primary(), NumaIoSource::Estimate);
        assert_eq!(s.fallback_reason(), Some("--source mount was asked for"));
        s.begin_interval();
        let mut on_mount = estimated(11);
        on_mount.files.push(crate::sample::FileView {
            path: "/mnt/n/data".into(),
            ..Default::default()
        });
        let mut views = vec![estimated(7), estimated(9), on_mount, estimated(12)];
        s.apply(&mut views, &[0, 1]);
        // Only the interval's bytes, split by the caller's node.
        let v = &views[0];
        assert_eq!(v.numa_io_source, NumaIoSource::Mount);
        assert_eq!(v.numa_io["numa0_read_bytes"], 3000);
        assert_eq!(v.numa_io["numa0_write_bytes"], 200);
        assert_eq!(v.local_bytes, Some(IoBytes::new(1000, 0)));
        assert_eq!(v.remote_bytes, Some(IoBytes::new(2000, 200)));
        assert_eq!(s.mounts_of(7), [PathBuf::from("/mnt/n")]);
        assert_eq!(s.primary(), NumaIoSource::Mount);
        // First listed during the interval: all of it is the interval's.
        assert_eq!(views[1].numa_io["numa1_read_bytes"], 50);
        assert_eq!(views[1].locality, Some(1.0));
        // A file open on the mount but nothing counted: exact zeros.
        assert_eq!(views[2].numa_io_source, NumaIoSource::Mount);
        assert_eq!(views[2].numa_io["numa0_read_bytes"], 0);
        // Not on a mount: the estimate stays.
        assert_eq!(views[3].numa_io_source, NumaIoSource::Estimate);
        assert_eq!(views[3].numa_read_bytes, BTreeMap::from([(1, 500)]));
        assert!(s.mounts_of(12).is_empty());
    }

    #[test]
    fn a_remounted_counter_counts_from_zero() {
        let mut prev = MountProcessIo::default();
        prev.by_data_node.add(0, IoBytes::new(5000, 0));
        let mut cur = MountProcessIo::default();
        cur.by_data_node.add(0, IoBytes::new(100, 0));
        cur.by_data_node.add(1, IoBytes::new(7, 0));
        let d = mount_delta(&cur, &prev);
        assert_eq!(d.by_data_node.get(0), IoBytes::new(100, 0));
        assert_eq!(d.by_data_node.get(1), IoBytes::new(7, 0));
    }

    #[test]
    fn the_choice_decides_which_sources_run() {
        assert_eq!("auto".parse(), Ok(SourceChoice::Auto));
        assert_eq!("estimate".parse(), Ok(SourceChoice::Estimate));
        assert!("bpf".parse::<SourceChoice>().unwrap_err().contains("ebpf"));
        let s = Sources::choose(
            SourceChoice::Estimate,
            Some(Box::new(FakeMounts(VecDeque::new()))),
        )
        .unwrap();
        assert_eq!(s.primary(), NumaIoSource::Estimate);
        assert!(!s.reads_mounts());
        assert!(s.fallback_reason().unwrap().contains("estimate"));
        // Asked for explicitly, eBPF either attaches or says why not.
        match Sources::choose(SourceChoice::Ebpf, None) {
            Ok(s) => assert_eq!(s.primary(), NumaIoSource::Ebpf),
            Err(why) => assert!(!why.is_empty()),
        }
        let auto = Sources::choose(
            SourceChoice::Auto,
            Some(Box::new(FakeMounts(VecDeque::new()))),
        )
        .unwrap();
        if !auto.ebpf() {
            assert!(auto.reads_mounts());
            assert!(auto.fallback_reason().is_some());
        }
    }

    #[test]
    fn exact_counts_replace_the_estimate() {
        let mut v = ProcessView {
            pid: 42,
            thread_nodes: BTreeMap::from([(1, 1)]),
            read_distribution: BTreeMap::from([(1, 1.0)]),
            locality: Some(1.0),
            ..Default::default()
        };
        let io = ExactIo {
            by_data_node: [
                (0, IoBytes::new(3 << 20, 4096)),
                (1, IoBytes::new(1 << 20, 0)),
            ]
            .into_iter()
            .collect(),
            local: Some(IoBytes::new(1 << 20, 0)),
            remote: Some(IoBytes::new(3 << 20, 4096)),
        };
        v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
        assert_eq!(v.numa_io_source, NumaIoSource::Ebpf);
        assert_eq!(v.numa_io["numa0_read_bytes"], 3 << 20);
        assert_eq!(v.numa_io["numa0_write_bytes"], 4096);
        assert_eq!(
            v.numa_read_bytes,
            BTreeMap::from([(0, 3 << 20), (1, 1 << 20)])
        );
        assert_eq!(v.numa_write_bytes, BTreeMap::from([(0, 4096)]));
        assert_eq!(v.read_distribution[&0], 0.75);
        assert_eq!(v.locality, Some(0.25));
        let j = serde_json::to_value(&v).unwrap();
        assert_eq!(j["numa_io_source"], "ebpf");
        assert_eq!(j["remote_bytes"]["read_bytes"], 3 << 20);
    }

    #[test]
    fn without_cpu_nodes_the_run_nodes_decide_locality() {
        let mut v = ProcessView {
            thread_nodes: BTreeMap::from([(1, 2)]),
            ..Default::default()
        };
        let io = ExactIo {
            by_data_node: [(1, IoBytes::new(100, 0)), (0, IoBytes::new(300, 0))]
                .into_iter()
                .collect(),
            ..Default::default()
        };
        v.set_exact(NumaIoSource::Mount, &io, &[0, 1]);
        assert_eq!(v.locality, Some(0.25));
        assert!(v.numa_io_source.is_exact());
    }
}
