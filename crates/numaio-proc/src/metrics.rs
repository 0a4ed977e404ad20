//! Prometheus metrics of the daemon: an HTTP endpoint and node_exporter textfiles.
//!
//! Off by default; `--metrics 127.0.0.1:PORT` serves them, `--textfile DIR` writes them for
//! node_exporter's textfile collector. Only `GET /metrics` is answered; other paths get 404,
//! other methods 405, a request body 413. A client that asks for OpenMetrics (its `Accept`
//! names `application/openmetrics-text`, as Prometheus does) gets it; others get the classic
//! text format 0.0.4, as from node_exporter.
//!
//! Names follow Prometheus' conventions: counters end in `_total`, units are in the names
//! (`_bytes`, `_seconds`, `_ratio`), `numaio_build_info` carries the version, and the
//! daemon's own resource use comes as the standard `process_*` metrics. Per-node free memory
//! and page cache are left to node_exporter (its `meminfo_numa` collector). Series per
//! process are off by default, since pids are unbounded; when opted in they are limited to
//! the [`MAX_TOP_PROCESSES`] busiest readers.
//!
//! The endpoint runs on its own thread, so a scrape never blocks the decision loop for longer
//! than copying the counters. HTTP is hyper's HTTP/1 server on a single-threaded tokio
//! runtime: connections are served concurrently (a slow or silent client does not delay a
//! scrape), the request head is bounded in size ([`MAX_HEAD_BYTES`]) and in time
//! ([`ServeOptions::read_timeout`]), and each connection ends after one response. hyper was
//! chosen over `tiny_http` because tiny_http reads header lines without a size limit, and
//! over axum because routing one path needs no framework; with tokio limited to its `rt`,
//! `net` and `time` features it adds a dozen crates.

use crate::sample::ProcessView;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body as _, Incoming};
use hyper::header::{HeaderValue, ACCEPT, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::{ConstGauge, Gauge};
use prometheus_client::registry::Registry;
use std::convert::Infallible;
use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use numaio_numa::prometheus::encode;
pub use numaio_numa::prometheus::{label, openmetrics_to_classic, Format, Labels};

/// Most processes that may get series of their own (`metrics_top_processes`).
pub const MAX_TOP_PROCESSES: usize = 100;

/// Most files that may get series of their own (`metrics_top_files`).
pub const MAX_TOP_FILES: usize = 100;

/// Name of the file written in the textfile directory.
pub const TEXTFILE_NAME: &str = "numaio.prom";

/// The daemon's metrics.
pub struct Metrics {
    /// Served over HTTP: with the standard `process_*` metrics of the daemon itself.
    registry: Registry,
    /// Written as a textfile: node_exporter exports `process_*` for itself, so the daemon's
    /// own figures are named `numaio_daemon_*` there to avoid a clash.
    textfile_registry: Registry,
    top_processes: usize,
    top_files: usize,
    pub process_locality: Family<Labels, Gauge<f64, AtomicU64>>,
    pub process_read_rate: Family<Labels, Gauge<f64, AtomicU64>>,
    pub actions: Family<Labels, Counter>,
    pub decisions: Family<Labels, Counter>,
    pub bytes_moved: Family<Labels, Counter>,
    pub intervals: Counter,
    pub interval_cpu_seconds: Gauge<f64, AtomicU64>,
    pub interval_duration_seconds: Gauge<f64, AtomicU64>,
    pub scanned_processes: Gauge,
    pub io_active_processes: Gauge,
    pub io_active_locality: Gauge<f64, AtomicU64>,
    /// Replicas and their bytes per node (`numa_node`), set by the replica pass.
    pub replicas: Family<Labels, Gauge>,
    pub replica_bytes: Family<Labels, Gauge>,
    pub replicas_made: Family<Labels, Counter>,
    pub replicas_refreshed: Family<Labels, Counter>,
    pub replicas_dropped: Family<Labels, Counter>,
    /// I/O-active processes by the source of their per-node counts (`numa_io_source`).
    pub processes_by_source: Family<Labels, Gauge>,
    /// Counted (exact) page-cache bytes by the data's node and direction.
    pub io_bytes: Family<Labels, Counter>,
    /// Counted bytes by whether the data was on the copying CPU's node, and direction.
    pub io_locality_bytes: Family<Labels, Counter>,
    /// The busiest files: cached bytes per node, and estimated read rate.
    pub file_cached_bytes: Family<Labels, Gauge>,
    pub file_read_rate: Family<Labels, Gauge<f64, AtomicU64>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// Metrics without per-process series.
    pub fn new() -> Self {
        Self::with_top_processes(0)
    }

    /// Metrics with series for the `top` processes reading fastest (at most
    /// [`MAX_TOP_PROCESSES`]; 0 for none).
    pub fn with_top_processes(top: usize) -> Self {
        Self::with_top(top, 0)
    }

    /// Metrics with series for the `processes` reading fastest and the `files` read
    /// fastest (at most [`MAX_TOP_PROCESSES`] and [`MAX_TOP_FILES`]; 0 for none).
    pub fn with_top(processes: usize, files: usize) -> Self {
        let m = Metrics {
            registry: Registry::default(),
            textfile_registry: Registry::default(),
            top_processes: processes.min(MAX_TOP_PROCESSES),
            top_files: files.min(MAX_TOP_FILES),
            process_locality: Family::default(),
            process_read_rate: Family::default(),
            actions: Family::default(),
            decisions: Family::default(),
            bytes_moved: Family::default(),
            intervals: Counter::default(),
            interval_cpu_seconds: Gauge::default(),
            interval_duration_seconds: Gauge::default(),
            scanned_processes: Gauge::default(),
            io_active_processes: Gauge::default(),
            io_active_locality: Gauge::default(),
            replicas: Family::default(),
            replica_bytes: Family::default(),
            replicas_made: Family::default(),
            replicas_refreshed: Family::default(),
            replicas_dropped: Family::default(),
            processes_by_source: Family::default(),
            io_bytes: Family::default(),
            io_locality_bytes: Family::default(),
            file_cached_bytes: Family::default(),
            file_read_rate: Family::default(),
        };
        for source in [
            crate::io_source::NumaIoSource::Ebpf,
            crate::io_source::NumaIoSource::Mount,
            crate::io_source::NumaIoSource::Estimate,
        ] {
            let _ = m
                .processes_by_source
                .get_or_create(&label("numa_io_source", source.as_str()));
        }
        for locality in ["local", "remote"] {
            for direction in ["read", "write"] {
                let _ = m.io_locality_bytes.get_or_create(&vec![
                    ("locality".to_string(), locality.to_string()),
                    ("direction".to_string(), direction.to_string()),
                ]);
            }
        }
        // Known label values start at 0, so a rate over the first increment is not lost.
        for kind in ["follow-data", "pull-data"] {
            let _ = m.actions.get_or_create(&label("kind", kind));
        }
        for verdict in ["act", "advise", "blocked", "skipped"] {
            let _ = m.decisions.get_or_create(&label("verdict", verdict));
        }
        for kind in ["process-memory", "page-cache"] {
            let _ = m.bytes_moved.get_or_create(&label("kind", kind));
        }
        let build_info = Family::<Labels, Gauge>::default();
        build_info
            .get_or_create(&vec![
                ("version".into(), env!("CARGO_PKG_VERSION").into()),
                ("arch".into(), std::env::consts::ARCH.into()),
            ])
            .set(1);
        let mut registry = Registry::default();
        let mut textfile_registry = Registry::default();
        for reg in [&mut registry, &mut textfile_registry] {
            reg.register(
                "numaio_build_info",
                "The numaio version, as labels; always 1",
                build_info.clone(),
            );
            reg.register(
                "numaio_actions",
                "Actions carried out, by kind",
                m.actions.clone(),
            );
            reg.register(
                "numaio_decisions",
                "Decisions by verdict (act, advise, blocked, skipped)",
                m.decisions.clone(),
            );
            reg.register(
                "numaio_moved_bytes",
                "Bytes migrated, by kind (process memory or page cache)",
                m.bytes_moved.clone(),
            );
            reg.register(
                "numaio_intervals",
                "Intervals completed",
                m.intervals.clone(),
            );
            reg.register(
                "numaio_last_interval_cpu_seconds",
                "CPU time the daemon used in its last interval",
                m.interval_cpu_seconds.clone(),
            );
            reg.register(
                "numaio_last_interval_duration_seconds",
                "Wall-clock time the daemon's last interval took",
                m.interval_duration_seconds.clone(),
            );
            reg.register(
                "numaio_scanned_processes",
                "Processes sampled in the last interval",
                m.scanned_processes.clone(),
            );
            reg.register(
                "numaio_io_active_processes",
                "Processes reading above the I/O-active threshold in the last interval",
                m.io_active_processes.clone(),
            );
            reg.register(
                "numaio_io_active_read_locality_ratio",
                "Share of the I/O-active processes' file reads served from the node(s) they \
                 run on, weighted by read rate (counted where numaio_processes says so, else \
                 estimated)",
                m.io_active_locality.clone(),
            );
            reg.register(
                "numaio_processes",
                "I/O-active processes in the last interval by the source of their per-node \
                 counts: ebpf and mount are counted, estimate is residency times read rate",
                m.processes_by_source.clone(),
            );
            reg.register(
                "numaio_io_bytes",
                "Page-cache bytes the I/O-active processes read or wrote, by the node of the \
                 data (counted sources only)",
                m.io_bytes.clone(),
            );
            reg.register(
                "numaio_io_locality_bytes",
                "Page-cache bytes the I/O-active processes read or wrote, by whether the data \
                 was on the node of the CPU that copied it (counted sources only)",
                m.io_locality_bytes.clone(),
            );
            reg.register(
                "numaio_replicas",
                "Per-node replicas held in the replica store, by node (when [replicas] is on)",
                m.replicas.clone(),
            );
            reg.register(
                "numaio_replica_bytes",
                "Bytes of the per-node replicas, by node (when [replicas] is on)",
                m.replica_bytes.clone(),
            );
            reg.register(
                "numaio_replicas_made",
                "Replicas the daemon made for files read from several nodes, by node",
                m.replicas_made.clone(),
            );
            reg.register(
                "numaio_replicas_refreshed",
                "Stale replicas (their original changed) copied again, by node",
                m.replicas_refreshed.clone(),
            );
            reg.register(
                "numaio_replicas_dropped",
                "Stale replicas dropped, by node",
                m.replicas_dropped.clone(),
            );
            if m.top_processes > 0 {
                reg.register(
                    "numaio_process_read_locality_ratio",
                    "Estimated share of a process's file reads served from the node(s) it \
                     runs on (the busiest readers only)",
                    m.process_locality.clone(),
                );
                reg.register(
                    "numaio_process_read_bytes_per_second",
                    "Read rate (rchar) of a process (the busiest readers only)",
                    m.process_read_rate.clone(),
                );
            }
            if m.top_files > 0 {
                reg.register(
                    "numaio_file_cached_bytes",
                    "Cached bytes of a file on a node (the files read fastest only)",
                    m.file_cached_bytes.clone(),
                );
                reg.register(
                    "numaio_file_read_bytes_per_second",
                    "Read rate of a file by the I/O-active processes, split over the files \
                     each reads by offset advance or cached bytes (the files read fastest only)",
                    m.file_read_rate.clone(),
                );
            }
        }
        registry.register_collector(Box::new(SelfCollector { prefix: "process" }));
        textfile_registry.register_collector(Box::new(SelfCollector {
            prefix: "numaio_daemon",
        }));
        Metrics {
            registry,
            textfile_registry,
            ..m
        }
    }

    /// How many processes may get series of their own.
    pub fn top_processes(&self) -> usize {
        self.top_processes
    }

    /// How many files may get series of their own.
    pub fn top_files(&self) -> usize {
        self.top_files
    }

    /// Adds the interval's counted (exact) page-cache bytes of `views` to the per-node and
    /// local/remote counters; every node of `nodes` gets a series, 0 until counted.
    pub fn observe_io(&self, nodes: &[u32], views: &[ProcessView]) {
        let mut by_node: std::collections::BTreeMap<u32, (u64, u64)> =
            nodes.iter().map(|&n| (n, (0, 0))).collect();
        let (mut local, mut remote) = (
            numaio_numa::IoBytes::default(),
            numaio_numa::IoBytes::default(),
        );
        for v in views.iter().filter(|v| v.numa_io_source.is_exact()) {
            for (&n, &b) in &v.numa_read_bytes {
                by_node.entry(n).or_default().0 += b;
            }
            for (&n, &b) in &v.numa_write_bytes {
                by_node.entry(n).or_default().1 += b;
            }
            for (sum, part) in [(&mut local, v.local_bytes), (&mut remote, v.remote_bytes)] {
                if let Some(p) = part {
                    sum.read_bytes += p.read_bytes;
                    sum.write_bytes += p.write_bytes;
                }
            }
        }
        for (n, (r, w)) in by_node {
            for (direction, b) in [("read", r), ("write", w)] {
                self.io_bytes
                    .get_or_create(&vec![
                        ("numa_node".to_string(), n.to_string()),
                        ("direction".to_string(), direction.to_string()),
                    ])
                    .inc_by(b);
            }
        }
        for (locality, io) in [("local", local), ("remote", remote)] {
            for (direction, b) in [("read", io.read_bytes), ("write", io.write_bytes)] {
                self.io_locality_bytes
                    .get_or_create(&vec![
                        ("locality".to_string(), locality.to_string()),
                        ("direction".to_string(), direction.to_string()),
                    ])
                    .inc_by(b);
            }
        }
    }

    /// Records one interval's process views: counts and the read-weighted locality, and the
    /// per-process series of the fastest readers when they are opted in.
    pub fn observe_processes(&self, scanned: usize, views: &[ProcessView]) {
        self.scanned_processes.set(scanned as i64);
        self.io_active_processes.set(views.len() as i64);
        let (mut weighted, mut weight) = (0.0, 0.0);
        for v in views {
            if let Some(loc) = v.locality.filter(|l| l.is_finite()) {
                let w = v.read_bytes_per_sec.max(0.0);
                weighted += loc * w;
                weight += w;
            }
        }
        self.io_active_locality
            .set(if weight > 0.0 { weighted / weight } else { 0.0 });
        for source in [
            crate::io_source::NumaIoSource::Ebpf,
            crate::io_source::NumaIoSource::Mount,
            crate::io_source::NumaIoSource::Estimate,
        ] {
            self.processes_by_source
                .get_or_create(&label("numa_io_source", source.as_str()))
                .set(views.iter().filter(|v| v.numa_io_source == source).count() as i64);
        }
        self.observe_files(views);
        self.process_locality.clear();
        self.process_read_rate.clear();
        if self.top_processes == 0 {
            return;
        }
        let mut busiest: Vec<&ProcessView> = views.iter().collect();
        busiest.sort_by(|a, b| b.read_bytes_per_sec.total_cmp(&a.read_bytes_per_sec));
        for v in busiest.into_iter().take(self.top_processes) {
            let l = vec![
                ("pid".to_string(), v.pid.to_string()),
                ("comm".to_string(), v.comm.clone()),
            ];
            if let Some(loc) = v.locality {
                self.process_locality.get_or_create(&l).set(loc);
            }
            self.process_read_rate
                .get_or_create(&l)
                .set(v.read_bytes_per_sec);
        }
    }

    /// The series of the `top_files` files read fastest this interval (a file's rate summed
    /// over its readers); files that dropped out lose theirs.
    fn observe_files(&self, views: &[ProcessView]) {
        self.file_cached_bytes.clear();
        self.file_read_rate.clear();
        if self.top_files == 0 {
            return;
        }
        let mut files: std::collections::HashMap<(u64, u64), (&crate::sample::FileView, f64)> =
            std::collections::HashMap::new();
        for v in views {
            for (f, rate) in crate::policy::file_read_rates(v) {
                files.entry((f.dev, f.ino)).or_insert((f, 0.0)).1 += rate;
            }
        }
        let mut busiest: Vec<(&crate::sample::FileView, f64)> = files.into_values().collect();
        busiest.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.path.cmp(&b.0.path)));
        for (f, rate) in busiest.into_iter().take(self.top_files) {
            let path = f.path.to_string_lossy().into_owned();
            self.file_read_rate
                .get_or_create(&label("path", &path))
                .set(rate);
            for (&n, &b) in &f.nodes {
                self.file_cached_bytes
                    .get_or_create(&vec![
                        ("path".to_string(), path.clone()),
                        ("numa_node".to_string(), n.to_string()),
                    ])
                    .set(b.min(i64::MAX as u64) as i64);
            }
        }
    }

    /// Records one replica pass: the replicas held on each of `nodes` (0 where none) and
    /// the counts of what it did.
    pub fn observe_replicas(&self, nodes: &[u32], c: &crate::replicas::NodeCounts) {
        self.replicas.clear();
        self.replica_bytes.clear();
        let all: std::collections::BTreeSet<u32> = nodes
            .iter()
            .chain(c.held.keys())
            .chain(c.made.keys())
            .chain(c.refreshed.keys())
            .chain(c.dropped.keys())
            .copied()
            .collect();
        for n in &all {
            let l = label("numa_node", n);
            let (count, bytes) = c.held.get(n).copied().unwrap_or((0, 0));
            self.replicas.get_or_create(&l).set(count as i64);
            self.replica_bytes.get_or_create(&l).set(bytes as i64);
            // Known nodes start at 0, so a rate over the first increment is not lost.
            for (family, by_node) in [
                (&self.replicas_made, &c.made),
                (&self.replicas_refreshed, &c.refreshed),
                (&self.replicas_dropped, &c.dropped),
            ] {
                family
                    .get_or_create(&l)
                    .inc_by(by_node.get(n).copied().unwrap_or(0));
            }
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn render(&self) -> String {
        self.render_as(Format::OpenMetrics)
    }

    /// The metrics served over HTTP in `format`.
    pub fn render_as(&self, format: Format) -> String {
        encode(&self.registry, format)
    }

    /// The textfile's contents: classic text format, the daemon's own figures named
    /// `numaio_daemon_*`.
    pub fn render_textfile(&self) -> String {
        encode(&self.textfile_registry, Format::Classic)
    }

    /// Writes the textfile into `dir` atomically; returns its path.
    pub fn write_textfile(&self, dir: &Path) -> std::io::Result<PathBuf> {
        write_atomically(dir, TEXTFILE_NAME, &self.render_textfile())
    }
}

/// Replaces `dir/name` with `text` so that a reader sees the old or the new file whole,
/// never a part: write a temporary file in the same directory, fsync it, rename it over
/// `name`, fsync the directory. The temporary file's name does not end in `.prom`, so
/// node_exporter ignores it (and one left by a crash).
pub fn write_atomically(dir: &Path, name: &str, text: &str) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let target = dir.join(name);
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)
        // tempfile's message names its random file; the caller names the directory.
        .map_err(|e| {
            e.raw_os_error()
                .map_or(e, std::io::Error::from_raw_os_error)
        })?;
    tmp.write_all(text.as_bytes())?;
    // node_exporter usually runs as another user; the metrics hold no secrets beyond what
    // the endpoint serves.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    tmp.as_file().sync_all()?;
    tmp.persist(&target).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()?;
    Ok(target)
}

/// The daemon's own CPU time, memory, descriptors and start time, read from
/// `/proc/self` at each scrape (with the `procfs` crate), named like the Prometheus client
/// libraries' process collector.
#[derive(Debug)]
struct SelfCollector {
    prefix: &'static str,
}

/// One reading of the daemon's own resource use.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SelfStats {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
    pub virtual_memory_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub start_time_seconds: f64,
}

/// Reads [`SelfStats`] of this process; `None` when `/proc/self` cannot be read.
pub fn self_stats() -> Option<SelfStats> {
    let me = procfs::process::Process::myself().ok()?;
    let stat = me.stat().ok()?;
    let ticks = procfs::ticks_per_second().max(1) as f64;
    let boot = procfs::boot_time_secs().ok()? as f64;
    let max_fds = me
        .limits()
        .ok()
        .and_then(|l| match l.max_open_files.soft_limit {
            procfs::process::LimitValue::Value(v) => Some(v),
            procfs::process::LimitValue::Unlimited => None,
        });
    Some(SelfStats {
        cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
        resident_memory_bytes: stat.rss.saturating_mul(procfs::page_size()),
        virtual_memory_bytes: stat.vsize,
        open_fds: me.fd_count().ok()? as u64,
        max_fds,
        start_time_seconds: boot + stat.starttime as f64 / ticks,
    })
}

impl Collector for SelfCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let Some(s) = self_stats() else {
            return Ok(());
        };
        let p = self.prefix;
        let counter = ConstCounter::new(s.cpu_seconds);
        counter.encode(enc.encode_descriptor(
            &format!("{p}_cpu_seconds"),
            "Total user and system CPU time spent in seconds",
            None,
            counter.metric_type(),
        )?)?;
        let mut gauge = |name: &str, help: &str, v: f64| -> Result<(), std::fmt::Error> {
            let g = ConstGauge::new(v);
            g.encode(enc.encode_descriptor(&format!("{p}_{name}"), help, None, g.metric_type())?)
        };
        gauge(
            "resident_memory_bytes",
            "Resident memory size in bytes",
            s.resident_memory_bytes as f64,
        )?;
        gauge(
            "virtual_memory_bytes",
            "Virtual memory size in bytes",
            s.virtual_memory_bytes as f64,
        )?;
        gauge(
            "open_fds",
            "Number of open file descriptors",
            s.open_fds as f64,
        )?;
        if let Some(m) = s.max_fds {
            gauge(
                "max_fds",
                "Maximum number of open file descriptors",
                m as f64,
            )?;
        }
        gauge(
            "start_time_seconds",
            "Start time of the process since the Unix epoch in seconds",
            s.start_time_seconds,
        )
    }
}

/// Largest request head (request line and headers) the endpoint reads; larger requests get
/// 431 and the connection is closed. hyper's smallest read buffer is this size too.
pub const MAX_HEAD_BYTES: usize = 8 * 1024;

/// Bounds on the endpoint's clients.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    /// Time a client has to send its whole request head.
    pub read_timeout: Duration,
    /// Time a connection may stay open in all, response included (a client that never reads
    /// its response is cut off here).
    pub connection_timeout: Duration,
    /// Connections served at once; further ones are closed at once until one ends.
    pub max_connections: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            read_timeout: Duration::from_secs(3),
            connection_timeout: Duration::from_secs(10),
            max_connections: 256,
        }
    }
}

/// The endpoint's answer to one request: status code, content type and body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: &'static str,
    pub body: String,
}

const TEXT: &str = "text/plain; charset=utf-8";

/// Decides the answer to a request from its method, target path (a query string is
/// ignored), the size of its head in bytes, whether it carries a body and its `Accept`
/// header. `render` is only called for a request that gets the metrics. Pure apart from
/// `render`, so it can be fuzzed.
pub fn respond(
    method: &str,
    path: &str,
    head_bytes: usize,
    has_body: bool,
    accept: Option<&str>,
    render: impl FnOnce(Format) -> String,
) -> Reply {
    let plain = |status, body: &str| Reply {
        status,
        content_type: TEXT,
        body: format!("{body}\n"),
    };
    let path = path.split_once('?').map_or(path, |(p, _)| p);
    if head_bytes > MAX_HEAD_BYTES {
        return plain(431, "request head too large");
    }
    if path != "/metrics" {
        return plain(404, "not found; metrics are at /metrics");
    }
    if method != "GET" {
        return plain(405, "only GET is allowed");
    }
    if has_body {
        return plain(413, "a request body is not accepted");
    }
    let format = Format::from_accept(accept);
    Reply {
        status: 200,
        content_type: format.content_type(),
        body: render(format),
    }
}

/// A warning to show when the endpoint listens on an address other hosts may reach: the
/// metrics name processes and their read rates, and the endpoint has no authentication.
pub fn exposure_warning(addr: SocketAddr) -> Option<String> {
    if addr.ip().to_canonical().is_loopback() {
        return None;
    }
    Some(format!(
        "metrics endpoint listens on {addr}, which is not a loopback address: anyone who can \
         reach port {} can read the daemon's figures (and process names and pids when \
         per-process series are on); bind to 127.0.0.1 or firewall the port",
        addr.port()
    ))
}

/// Serves `metrics` on `addr` from a background thread with the default bounds; returns the
/// bound address. Warns (tracing and stderr) when `addr` is not a loopback address.
pub fn serve(metrics: Arc<Metrics>, addr: &str) -> std::io::Result<SocketAddr> {
    serve_with(metrics, addr, &ServeOptions::default())
}

/// [`serve`] with explicit bounds.
pub fn serve_with(
    metrics: Arc<Metrics>,
    addr: &str,
    opts: &ServeOptions,
) -> std::io::Result<SocketAddr> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let local = std_listener.local_addr()?;
    if let Some(w) = exposure_warning(local) {
        tracing::warn!("{w}");
        eprintln!("numaio: warning: {w}");
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()?;
    let listener = {
        let _ctx = rt.enter();
        tokio::net::TcpListener::from_std(std_listener)?
    };
    let opts = opts.clone();
    std::thread::Builder::new()
        .name("numaio-metrics".into())
        .spawn(move || rt.block_on(accept_loop(listener, metrics, opts)))?;
    Ok(local)
}

async fn accept_loop(listener: tokio::net::TcpListener, metrics: Arc<Metrics>, opts: ServeOptions) {
    let active = Arc::new(AtomicUsize::new(0));
    loop {
        let stream = match listener.accept().await {
            Ok((s, _)) => s,
            Err(_) => {
                // Out of descriptors or a connection reset before accept: wait instead of
                // spinning, the condition usually clears once connections close.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if active.load(Ordering::Relaxed) >= opts.max_connections {
            drop(stream);
            continue;
        }
        active.fetch_add(1, Ordering::Relaxed);
        let active = active.clone();
        let metrics = metrics.clone();
        let opts = opts.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req: Request<Incoming>| {
                let reply = reply_to(&metrics, &req);
                async move { Ok::<_, Infallible>(into_response(reply)) }
            });
            let conn = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(opts.read_timeout)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            // Dropping the connection on timeout closes the socket.
            let _ = tokio::time::timeout(opts.connection_timeout, conn).await;
            active.fetch_sub(1, Ordering::Relaxed);
        });
    }
}

fn reply_to(metrics: &Metrics, req: &Request<Incoming>) -> Reply {
    // hyper keeps no raw head; count it as the request line plus "name: value\r\n" lines.
    let head_bytes = req.method().as_str().len()
        + req.uri().to_string().len()
        + 12
        + req
            .headers()
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 4)
            .sum::<usize>();
    respond(
        req.method().as_str(),
        req.uri().path(),
        head_bytes,
        !req.body().is_end_stream(),
        req.headers().get(ACCEPT).and_then(|v| v.to_str().ok()),
        |f| metrics.render_as(f),
    )
}

fn into_response(reply: Reply) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from(reply.body)));
    *resp.status_mut() =
        StatusCode::from_u16(reply.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(CONTENT_TYPE, HeaderValue::from_static(reply.content_type));
    if reply.status == 405 {
        h.insert(ALLOW, HeaderValue::from_static("GET"));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaio_numa::prometheus::{
        CLASSIC_CONTENT_TYPE as CLASSIC, OPENMETRICS_CONTENT_TYPE as OPENMETRICS,
    };
    use std::collections::{BTreeMap, BTreeSet};
    use std::io::{Read, Write};

    fn status(method: &str, path: &str, head: usize, body: bool) -> u16 {
        respond(method, path, head, body, None, |_| "m".into()).status
    }

    #[test]
    fn respond_routes_and_bounds() {
        assert_eq!(status("GET", "/metrics", 40, false), 200);
        assert_eq!(status("GET", "/metrics?x=1", 40, false), 200);
        assert_eq!(status("GET", "/", 40, false), 404);
        assert_eq!(status("GET", "/metrics/", 40, false), 404);
        assert_eq!(status("POST", "/x", 40, false), 404);
        assert_eq!(status("POST", "/metrics", 40, false), 405);
        assert_eq!(status("HEAD", "/metrics", 40, false), 405);
        assert_eq!(status("GET", "/metrics", 40, true), 413);
        assert_eq!(status("GET", "/metrics", MAX_HEAD_BYTES, false), 200);
        assert_eq!(status("GET", "/metrics", MAX_HEAD_BYTES + 1, false), 431);
        let r = respond("GET", "/metrics", 10, false, None, |f| format!("{f:?}"));
        assert_eq!((r.content_type, r.body.as_str()), (CLASSIC, "Classic"));
        let prom = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5";
        let r = respond("GET", "/metrics", 10, false, Some(prom), |f| {
            format!("{f:?}")
        });
        assert_eq!(
            (r.content_type, r.body.as_str()),
            (OPENMETRICS, "OpenMetrics")
        );
        let mut rendered = false;
        respond("PUT", "/metrics", 10, false, None, |_| {
            rendered = true;
            String::new()
        });
        assert!(
            !rendered,
            "metrics must only be rendered for a GET /metrics"
        );
    }

    #[test]
    fn warns_only_off_loopback() {
        let a = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(exposure_warning(a("127.0.0.1:9477")), None);
        assert_eq!(exposure_warning(a("127.0.0.2:9477")), None);
        assert_eq!(exposure_warning(a("[::1]:9477")), None);
        assert_eq!(exposure_warning(a("[::ffff:127.0.0.1]:9477")), None);
        let w = exposure_warning(a("0.0.0.0:9477")).expect("0.0.0.0 must warn");
        assert!(w.contains("0.0.0.0:9477") && w.contains("127.0.0.1"), "{w}");
        assert!(exposure_warning(a("[::]:9477")).is_some());
        assert!(exposure_warning(a("192.168.1.5:80")).is_some());
    }

    /// A parsed sample: its name and labels.
    type Sample = (String, BTreeMap<String, String>);

    fn view(pid: i32, rate: f64, locality: Option<f64>) -> ProcessView {
        ProcessView {
            pid,
            comm: format!("p{pid}"),
            read_bytes_per_sec: rate,
            locality,
            ..Default::default()
        }
    }

    /// Metrics with every family holding a sample.
    fn filled(top: usize, processes: i32) -> Metrics {
        let m = Metrics::with_top_processes(top);
        m.actions.get_or_create(&label("kind", "follow-data")).inc();
        m.decisions.get_or_create(&label("verdict", "act")).inc();
        m.bytes_moved
            .get_or_create(&label("kind", "page-cache"))
            .inc_by(4096);
        m.intervals.inc();
        m.interval_cpu_seconds.set(0.01);
        m.interval_duration_seconds.set(0.02);
        let views: Vec<ProcessView> = (1..=processes)
            .map(|p| view(p, p as f64 * 1000.0, Some(0.5)))
            .collect();
        m.observe_processes(500, &views);
        m
    }

    /// A strict reading of the classic text format: every line is a HELP, a TYPE or a
    /// sample; a family's HELP and TYPE come once, before its samples; a sample's name is
    /// its family's (the classic format has no `_total` suffix rule). Returns the type of
    /// each family and the samples as (name, labels).
    fn check_classic(text: &str) -> (BTreeMap<String, String>, Vec<Sample>) {
        let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
            .expect("prometheus-parse reads the text");
        let name_ok = |n: &str| {
            !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
                && !n.starts_with(|c: char| c.is_ascii_digit())
        };
        let mut types = BTreeMap::new();
        let mut seen_samples = BTreeSet::new();
        let mut helps = BTreeSet::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(name_ok(name) && helps.insert(name.to_string()), "{line}");
                assert!(!seen_samples.contains(name), "HELP after samples: {line}");
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, ty) = rest.split_once(' ').unwrap();
                assert!(
                    ["counter", "gauge", "histogram", "summary", "untyped"].contains(&ty),
                    "{line}"
                );
                assert!(name_ok(name), "{line}");
                assert!(!seen_samples.contains(name), "TYPE after samples: {line}");
                assert!(
                    types.insert(name.to_string(), ty.to_string()).is_none(),
                    "{line}"
                );
            } else {
                assert!(!line.starts_with('#'), "not classic text: {line:?}");
                let name = line.split(['{', ' ']).next().unwrap();
                assert!(name_ok(name), "{line}");
                assert!(types.contains_key(name), "sample without a TYPE: {line}");
                seen_samples.insert(name.to_string());
            }
        }
        let samples: Vec<_> = scrape
            .samples
            .iter()
            .map(|s| {
                assert!(
                    !matches!(s.value, prometheus_parse::Value::Untyped(_)),
                    "{} has no type",
                    s.metric
                );
                let labels = s
                    .labels
                    .iter()
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                (s.metric.clone(), labels)
            })
            .collect();
        assert_eq!(
            samples.len(),
            text.lines().filter(|l| !l.starts_with('#')).count()
        );
        (types, samples)
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        let m = filled(0, 50);
        for text in [m.render_as(Format::Classic), m.render_textfile()] {
            assert!(
                !text.contains("# EOF") && !text.contains("# UNIT"),
                "{text}"
            );
            let (types, samples) = check_classic(&text);
            for (name, ty) in &types {
                assert_eq!(
                    ty == "counter",
                    name.ends_with("_total"),
                    "{name} is a {ty}: counters and only counters end in _total"
                );
                assert!(
                    !name.contains("fraction") && !name.contains("_per_sec_"),
                    "{name}: units belong in names as _bytes, _seconds, _ratio"
                );
            }
            // No series per process and none per node by default.
            for (name, labels) in &samples {
                assert!(!labels.contains_key("pid"), "{name} has a pid label");
                assert!(
                    !labels.contains_key("node"),
                    "{name} duplicates node_exporter"
                );
            }
            let info: Vec<_> = samples
                .iter()
                .filter(|(n, _)| n == "numaio_build_info")
                .collect();
            assert_eq!(info.len(), 1, "{text}");
            assert_eq!(info[0].1["version"], env!("CARGO_PKG_VERSION"));
            assert!(text.contains("numaio_io_active_processes 50"), "{text}");
            assert!(
                text.contains("numaio_io_active_read_locality_ratio 0.5"),
                "{text}"
            );
            assert!(text.contains("numaio_moved_bytes_total{kind=\"page-cache\"} 4096"));
        }
        // The daemon's own figures: standard names over HTTP, numaio_daemon_* in the
        // textfile (node_exporter has process_* of its own).
        let served = m.render_as(Format::Classic);
        let textfile = m.render_textfile();
        for n in [
            "cpu_seconds_total",
            "resident_memory_bytes",
            "virtual_memory_bytes",
            "open_fds",
            "start_time_seconds",
        ] {
            assert!(
                served.contains(&format!("\nprocess_{n} ")),
                "process_{n}: {served}"
            );
            assert!(
                textfile.contains(&format!("\nnumaio_daemon_{n} ")),
                "{textfile}"
            );
            assert!(!textfile.contains(&format!("process_{n}")), "{textfile}");
        }
        let stats = self_stats().expect("/proc/self is readable");
        assert!(
            stats.resident_memory_bytes > 0 && stats.open_fds >= 3,
            "{stats:?}"
        );
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64();
        assert!(
            stats.start_time_seconds <= now + 1.0
                && stats.start_time_seconds > now - 86400.0 * 365.0,
            "{stats:?}"
        );
    }

    #[test]
    fn openmetrics_text_is_consistent_with_classic() {
        let m = filled(3, 5);
        let om = m.render();
        assert!(om.ends_with("# EOF\n"), "{om}");
        assert!(om.contains("# TYPE numaio_actions counter\n"), "{om}");
        assert!(
            om.contains("numaio_actions_total{kind=\"follow-data\"} 1\n"),
            "{om}"
        );
        let classic = m.render_as(Format::Classic);
        assert!(
            classic.contains("# TYPE numaio_actions_total counter\n"),
            "{classic}"
        );
        assert!(classic.contains("# HELP numaio_actions_total Actions carried out"));
        let samples = |t: &str| -> Vec<String> {
            t.lines()
                .filter(|l| !l.starts_with('#'))
                .filter(|l| !l.starts_with("process_"))
                .map(String::from)
                .collect()
        };
        assert_eq!(samples(&om), samples(&classic));
    }

    #[test]
    fn per_process_series_are_opt_in_and_bounded() {
        let count = |m: &Metrics, metric: &str| {
            check_classic(&m.render_as(Format::Classic))
                .1
                .iter()
                .filter(|(n, l)| n == metric && l.contains_key("pid"))
                .count()
        };
        let off = filled(0, 300);
        assert_eq!(count(&off, "numaio_process_read_bytes_per_second"), 0);
        let on = filled(10, 300);
        assert_eq!(count(&on, "numaio_process_read_bytes_per_second"), 10);
        assert_eq!(count(&on, "numaio_process_read_locality_ratio"), 10);
        // The busiest readers are the ones shown.
        let text = on.render_as(Format::Classic);
        assert!(
            text.contains("numaio_process_read_bytes_per_second{pid=\"300\",comm=\"p300\"} 300000"),
            "{text}"
        );
        assert!(!text.contains("pid=\"290\""), "{text}");
        let huge = filled(1_000_000, 300);
        assert_eq!(huge.top_processes(), MAX_TOP_PROCESSES);
        assert_eq!(
            count(&huge, "numaio_process_read_bytes_per_second"),
            MAX_TOP_PROCESSES
        );
        // Processes that stopped reading lose their series.
        on.observe_processes(1, &[]);
        assert_eq!(count(&on, "numaio_process_read_bytes_per_second"), 0);
    }

    /// Processes per source, counted bytes per numa_node (counted views only), and the
    /// top-N files bounded by N.
    #[test]
    fn sources_counted_bytes_and_top_files() {
        use crate::io_source::{ExactIo, NumaIoSource};
        use numaio_numa::IoBytes;
        let m = Metrics::with_top(0, 3);
        let mut counted = view(10, 5000.0, Some(0.25));
        counted.set_exact(
            NumaIoSource::Ebpf,
            &ExactIo {
                by_data_node: [(0, IoBytes::new(1000, 10)), (1, IoBytes::new(3000, 0))]
                    .into_iter()
                    .collect(),
                local: Some(IoBytes::new(1000, 10)),
                remote: Some(IoBytes::new(3000, 0)),
            },
            &[0, 1],
        );
        // An estimated view's numbers never reach the counted families.
        let mut estimated = view(11, 1e9, Some(1.0));
        estimated.numa_read_bytes = [(0, 1 << 40)].into_iter().collect();
        // Ten files read at different rates by one process each.
        let files: Vec<ProcessView> = (0..10)
            .map(|i| {
                let mut v = view(100 + i, (i + 1) as f64 * 1e6, None);
                v.files = vec![crate::sample::FileView {
                    path: format!("/data/f{i}").into(),
                    ino: i as u64 + 1,
                    size_bytes: 4096,
                    cached_bytes: 4096,
                    nodes: [(0, 4096)].into_iter().collect(),
                    advanced_bytes: 4096,
                    ..Default::default()
                }];
                v
            })
            .collect();
        let mut views = vec![counted, estimated];
        views.extend(files);
        m.observe_processes(20, &views);
        m.observe_io(&[0, 1, 2], &views);
        m.observe_io(&[0, 1, 2], &views);
        let text = m.render_as(Format::Classic);
        let (types, samples) = check_classic(&text);
        assert_eq!(types["numaio_io_bytes_total"], "counter");
        assert_eq!(types["numaio_processes"], "gauge");
        for want in [
            "numaio_processes{numa_io_source=\"ebpf\"} 1",
            "numaio_processes{numa_io_source=\"mount\"} 0",
            "numaio_processes{numa_io_source=\"estimate\"} 11",
            "numaio_io_bytes_total{numa_node=\"1\",direction=\"read\"} 6000",
            "numaio_io_bytes_total{numa_node=\"0\",direction=\"read\"} 2000",
            "numaio_io_bytes_total{numa_node=\"0\",direction=\"write\"} 20",
            "numaio_io_bytes_total{numa_node=\"2\",direction=\"read\"} 0",
            "numaio_io_locality_bytes_total{locality=\"remote\",direction=\"read\"} 6000",
            "numaio_io_locality_bytes_total{locality=\"local\",direction=\"read\"} 2000",
            "numaio_file_read_bytes_per_second{path=\"/data/f9\"} 10000000",
            "numaio_file_cached_bytes{path=\"/data/f9\",numa_node=\"0\"} 4096",
        ] {
            assert!(text.contains(want), "missing {want} in\n{text}");
        }
        // N bounds the file series: the three read fastest, nothing else.
        let paths: BTreeSet<&str> = samples
            .iter()
            .filter(|(n, _)| n.starts_with("numaio_file_"))
            .map(|(_, l)| l["path"].as_str())
            .collect();
        assert_eq!(
            paths,
            ["/data/f7", "/data/f8", "/data/f9"].into_iter().collect()
        );
        // No family uses `node` for the NUMA node.
        assert!(samples.iter().all(|(_, l)| !l.contains_key("node")));
        // Off by default.
        let off = filled(0, 5);
        assert!(!off.render_as(Format::Classic).contains("numaio_file_"));
        assert_eq!(Metrics::with_top(0, 1_000).top_files(), MAX_TOP_FILES);
    }

    /// A reader polling the file while it is rewritten sees one whole version or the other,
    /// never a mix or a truncated file.
    #[test]
    fn textfile_is_replaced_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let small = "# TYPE a gauge\na 1\n".to_string();
        let big: String = (0..20_000)
            .map(|i| format!("b{{i=\"{i}\"}} {i}\n"))
            .collect();
        let path = write_atomically(dir.path(), "t.prom", &small).unwrap();
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let reader = {
            let (stop, path, small, big) = (stop.clone(), path.clone(), small.clone(), big.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let got = std::fs::read_to_string(&path).unwrap();
                    assert!(
                        got == small || got == big,
                        "partial textfile seen: {} bytes",
                        got.len()
                    );
                    reads += 1;
                }
                reads
            })
        };
        for i in 0..200 {
            write_atomically(dir.path(), "t.prom", if i % 2 == 0 { &big } else { &small }).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
        let reads = reader.join().unwrap();
        assert!(reads > 0);
        // Only the target remains; temporary files do not end in .prom.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec!["t.prom".to_string()]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        let e = write_atomically(Path::new("/nonexistent/dir"), "t.prom", "x").unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    }

    #[test]
    fn render_and_serve() {
        let m = Arc::new(Metrics::new());
        m.actions.get_or_create(&label("kind", "follow-data")).inc();
        let addr = serve(m.clone(), "127.0.0.1:0").unwrap();
        let mut c = std::net::TcpStream::connect(addr).unwrap();
        c.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut resp = String::new();
        c.read_to_string(&mut resp).unwrap();
        assert!(resp.starts_with("HTTP/1.1 200 OK"), "{resp}");
        assert!(
            resp.contains("content-type: text/plain; version=0.0.4"),
            "{resp}"
        );
        let body = resp.split_once("\r\n\r\n").unwrap().1;
        check_classic(body);
        assert!(body.contains("numaio_actions_total{kind=\"follow-data\"} 1"));
    }
}
