//! The daemon's configuration: a TOML file (see `dist/numaio.toml`), overridden by CLI flags.
//! Sizes may be integers (bytes) or strings with K/M/G/T suffixes.

use crate::error::{ProcError, ProcResult};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::Path;

/// Largest configuration file accepted: real ones are a few KiB; the bound keeps
/// `--config /dev/zero` or a runaway file from growing memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Longest duration (seconds) any `*_secs` setting may have: one day.
pub const MAX_SECS: f64 = 86_400.0;

/// Which way to restore locality.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PolicyKind {
    /// Move the process to its data (Adams, Jericho).
    FollowData,
    /// Move the data (page cache) to the process.
    PullData,
    /// Choose per process by cost.
    Auto,
    /// Tofalos's user-space placer: relieve nodes congested by bandwidth or CPU, else move
    /// a process to the node it moves the most bytes to and from.
    Tofalos,
}

impl std::str::FromStr for PolicyKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "follow-data" => Ok(PolicyKind::FollowData),
            "pull-data" => Ok(PolicyKind::PullData),
            "auto" => Ok(PolicyKind::Auto),
            "tofalos" => Ok(PolicyKind::Tofalos),
            _ => Err(format!(
                "unknown policy {s:?}: use follow-data, pull-data, auto or tofalos"
            )),
        }
    }
}

impl std::fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            PolicyKind::FollowData => "follow-data",
            PolicyKind::PullData => "pull-data",
            PolicyKind::Auto => "auto",
            PolicyKind::Tofalos => "tofalos",
        })
    }
}

/// A byte count written as a number or as `"256M"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bytes(pub u64);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u64),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Bytes(n)),
            Raw::S(s) => numaio_sys::topology::parse_size(&s)
                .map(Bytes)
                .ok_or_else(|| serde::de::Error::custom(format!("bad size {s:?} (use e.g. 256M)"))),
        }
    }
}

/// Which processes the daemon may touch. Empty include lists mean "all".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    pub include_pids: Vec<i32>,
    pub exclude_pids: Vec<i32>,
    /// Command names (`comm`); a trailing `*` matches a prefix.
    pub include_comms: Vec<String>,
    pub exclude_comms: Vec<String>,
    /// Cgroup path prefixes (`/system.slice/db.service`).
    pub include_cgroups: Vec<String>,
    pub exclude_cgroups: Vec<String>,
}

/// Parameters of the `auto` policy's cost model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AutoModel {
    /// M: the best improvement from local reads (Adams: 10–15 % for large files).
    pub max_gain: f64,
    /// R: the reduction factor of I = M − P/F·R. Default M, so a process as big as the file
    /// it reads gains nothing by moving (Adams's 1 GB process reading a 1 GB file).
    pub reduction: f64,
    /// Moving the process must promise at least this improvement.
    pub min_gain: f64,
    /// Reads smaller than this gained nothing in Adams's measurements (128 KiB).
    pub large_read_bytes: Bytes,
    /// Files at least this large gained the most (1 GiB).
    pub large_file_bytes: Bytes,
}

impl Default for AutoModel {
    fn default() -> Self {
        AutoModel {
            max_gain: 0.15,
            reduction: 0.15,
            min_gain: 0.02,
            large_read_bytes: Bytes(128 << 10),
            large_file_bytes: Bytes(1 << 30),
        }
    }
}

/// Where per-node I/O counts come from (`[collector]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Collector {
    /// Count each process's page-cache I/O per node exactly with the eBPF collector; where
    /// it cannot run, the daemon says why once and estimates.
    pub ebpf: bool,
    /// The Unix socket on which the daemon answers `numaio where --source collector` from
    /// the collector's counts (mode 0600; empty: not served).
    pub residency_socket: String,
}

impl Default for Collector {
    fn default() -> Self {
        Collector {
            ebpf: true,
            residency_socket: crate::residency::DEFAULT_SOCKET.into(),
        }
    }
}

/// Parameters of the `tofalos` policy (`[tofalos]`), Tofalos's user-space placer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Tofalos {
    /// Weight of a read byte in a node's load: load = reads × read_weight + writes.
    /// Tofalos used 1/3 because Optane writes at a third of its read bandwidth.
    pub read_weight: f64,
    /// A node's load (bytes per second, after weighting) it can carry; its bandwidth
    /// congestion is judged against `congestion_threshold` of it. Absent: only the
    /// `dominance` test decides.
    pub node_bandwidth: Option<Bytes>,
    /// Fraction of `node_bandwidth` above which a node may be congested.
    pub congestion_threshold: f64,
    /// A congested node carries at least this multiple of every other node's load.
    pub dominance: f64,
    /// Below this load (bytes per second) no node counts as congested, so idle machines
    /// are left alone when `node_bandwidth` is not given.
    pub min_congested_bytes_per_sec: Bytes,
}

impl Default for Tofalos {
    fn default() -> Self {
        Tofalos {
            read_weight: 1.0 / 3.0,
            node_bandwidth: None,
            congestion_threshold: 0.8,
            dominance: 2.0,
            min_congested_bytes_per_sec: Bytes(64 << 20),
        }
    }
}

/// Per-node replicas of read-mostly files (`[replicas]`): keeping them fresh, and with
/// `auto`, making them for files read from several nodes. Off unless `enabled`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Replicas {
    pub enabled: bool,
    /// The replica store: one node-bound tmpfs per node below it.
    pub dir: String,
    /// The most bytes the replicas on one node may hold together; required with `auto`.
    pub max_memory_per_node: Option<Bytes>,
    /// A replica whose original changed is made again (true) or dropped (false).
    pub refresh: bool,
    /// Make replicas of files read from several nodes.
    pub auto: bool,
    /// A file is a candidate when processes on at least this many nodes read it.
    pub min_reader_nodes: usize,
    /// ... each node reading it at least this fast (estimated).
    pub min_read_bytes_per_sec: Bytes,
    /// Larger files are not replicated automatically.
    pub max_file_bytes: Bytes,
}

impl Default for Replicas {
    fn default() -> Self {
        Replicas {
            enabled: false,
            dir: numaio_pagecache::replica::DEFAULT_DIR.to_string(),
            max_memory_per_node: None,
            refresh: true,
            auto: false,
            min_reader_nodes: 2,
            min_read_bytes_per_sec: Bytes(1 << 20),
            max_file_bytes: Bytes(1 << 30),
        }
    }
}

impl Replicas {
    fn validate(&self) -> Result<(), String> {
        if self.dir.is_empty() || !self.dir.starts_with('/') {
            return Err(format!(
                "replicas.dir must be an absolute path such as {:?}, got {:?}",
                numaio_pagecache::replica::DEFAULT_DIR,
                self.dir
            ));
        }
        if self.max_memory_per_node == Some(Bytes(0)) {
            return Err(
                "replicas.max_memory_per_node must be above 0 (e.g. \"4G\"); leave it out for \
                 no budget beyond the node's free memory"
                    .into(),
            );
        }
        if !(2..=1024).contains(&self.min_reader_nodes) {
            return Err(format!(
                "replicas.min_reader_nodes must be in [2, 1024] (a file read from one node is \
                 already local there), got {}",
                self.min_reader_nodes
            ));
        }
        if self.max_file_bytes.0 == 0 {
            return Err("replicas.max_file_bytes must be above 0 (e.g. \"1G\")".into());
        }
        if self.auto {
            if !self.enabled {
                return Err("replicas.auto = true needs replicas.enabled = true as well".into());
            }
            if self.max_memory_per_node.is_none() {
                return Err(
                    "replicas.max_memory_per_node is required when replicas.auto = true: \
                     give the most memory the replicas may take on each node, e.g. \
                     max_memory_per_node = \"4G\""
                        .into(),
                );
            }
        }
        Ok(())
    }
}

/// The daemon's settings. Every field has a default; see `dist/numaio.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub policy: PolicyKind,
    pub interval_secs: f64,
    pub dry_run: bool,
    pub manage_pinned: bool,
    /// follow-data also migrates the process's memory to the new node (Adams, numad).
    pub migrate_memory: bool,
    /// ... but only when at least this much of its memory is elsewhere; smaller processes
    /// move their threads only (their new memory is allocated locally).
    pub min_migrate_bytes: Bytes,
    /// A process is I/O-active if it read at least this many bytes per second.
    pub min_read_bytes_per_sec: Bytes,
    /// Act only when the estimated remote share of the reads exceeds this.
    pub remote_threshold: f64,
    /// The target node's share of reads must be at least this multiple of the current
    /// node's (Tofalos's anti-oscillation factor).
    pub win_factor: f64,
    /// A process or file moved is not moved again for this long.
    pub min_residence_secs: f64,
    pub max_actions_per_interval: usize,
    pub max_bytes_per_interval: Bytes,
    /// The target node must keep this much free memory after the move.
    pub min_free_bytes: Bytes,
    /// Tofalos's CPU-congestion threshold (fraction of the node's CPUs busy).
    pub cpu_busy_threshold: f64,
    pub max_files_per_process: usize,
    /// How long a file's residency answer is reused (files the daemon moves are re-read).
    pub residency_ttl_secs: f64,
    /// `127.0.0.1:PORT` to serve Prometheus metrics; off when absent.
    pub metrics: Option<String>,
    /// Directory to write `numaio.prom` into each interval for node_exporter's textfile
    /// collector; off when absent.
    pub textfile_dir: Option<String>,
    /// Processes (the fastest readers) that get metric series of their own, labelled with
    /// pid and command; 0 (the default) for none, at most 100.
    pub metrics_top_processes: usize,
    /// Files (the fastest read) that get metric series of their own, labelled with their
    /// path; 0 (the default) for none, at most 100.
    pub metrics_top_files: usize,
    /// Also append the JSON decision lines to this file.
    pub log_file: Option<String>,
    pub filter: Filter,
    pub auto: AutoModel,
    pub collector: Collector,
    pub tofalos: Tofalos,
    pub replicas: Replicas,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            policy: PolicyKind::FollowData,
            interval_secs: 2.0,
            dry_run: false,
            manage_pinned: false,
            migrate_memory: true,
            min_migrate_bytes: Bytes(16 << 20),
            min_read_bytes_per_sec: Bytes(1 << 20),
            remote_threshold: 0.5,
            win_factor: 2.0,
            min_residence_secs: 10.0,
            max_actions_per_interval: 4,
            max_bytes_per_interval: Bytes(1 << 30),
            min_free_bytes: Bytes(64 << 20),
            cpu_busy_threshold: 0.9,
            max_files_per_process: 64,
            residency_ttl_secs: 10.0,
            metrics: None,
            textfile_dir: None,
            metrics_top_processes: 0,
            metrics_top_files: 0,
            log_file: None,
            filter: Filter::default(),
            auto: AutoModel::default(),
            collector: Collector::default(),
            tofalos: Tofalos::default(),
            replicas: Replicas::default(),
        }
    }
}

impl Config {
    pub fn from_toml(text: &str, path: &Path) -> ProcResult<Config> {
        let c: Config = toml::from_str(text).map_err(|e| ProcError::Config {
            path: path.to_path_buf(),
            what: e.to_string(),
        })?;
        c.validate().map_err(|what| ProcError::Config {
            path: path.to_path_buf(),
            what,
        })?;
        Ok(c)
    }

    /// Reads and validates the file at `path`: a regular file of at most
    /// [`MAX_CONFIG_BYTES`]. It is opened non-blocking and checked with `fstat` before any
    /// read, so a FIFO or a device is refused instead of blocking or reading forever.
    pub fn load(path: &Path) -> ProcResult<Config> {
        let err = |what: String| ProcError::Config {
            path: path.to_path_buf(),
            what,
        };
        use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
        let f = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
            .open(path)
            .map_err(|e| err(format!("cannot open: {e}")))?;
        let meta = f.metadata().map_err(|e| err(format!("cannot stat: {e}")))?;
        let ft = meta.file_type();
        if !ft.is_file() {
            let kind = if ft.is_dir() {
                "a directory"
            } else if ft.is_fifo() {
                "a FIFO"
            } else if ft.is_socket() {
                "a socket"
            } else if ft.is_char_device() {
                "a character device"
            } else if ft.is_block_device() {
                "a block device"
            } else {
                "not a regular file"
            };
            return Err(err(format!(
                "is {kind}; give a regular TOML file (see dist/numaio.toml)"
            )));
        }
        let mut bytes = Vec::new();
        f.take(MAX_CONFIG_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| err(format!("cannot read: {e}")))?;
        if bytes.len() as u64 > MAX_CONFIG_BYTES {
            return Err(err(format!(
                "larger than {MAX_CONFIG_BYTES} bytes; a configuration is a few KiB (see dist/numaio.toml)"
            )));
        }
        let text = String::from_utf8(bytes).map_err(|e| err(format!("not UTF-8 text: {e}")))?;
        Self::from_toml(&text, path)
    }

    /// Checks every number is finite and in range; the message names the field and the
    /// accepted range.
    pub fn validate(&self) -> Result<(), String> {
        fn range(name: &str, v: f64, lo: f64, lo_open: bool, hi: f64) -> Result<(), String> {
            let ok = v.is_finite() && (if lo_open { v > lo } else { v >= lo }) && v <= hi;
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "{name} must be a number in {}{lo}, {hi}], got {v}",
                    if lo_open { "(" } else { "[" }
                ))
            }
        }
        range("interval_secs", self.interval_secs, 0.0, true, 3600.0)?;
        range("remote_threshold", self.remote_threshold, 0.0, false, 1.0)?;
        range("win_factor", self.win_factor, 1.0, false, 1e6)?;
        range(
            "cpu_busy_threshold",
            self.cpu_busy_threshold,
            0.0,
            false,
            1.0,
        )?;
        range(
            "min_residence_secs",
            self.min_residence_secs,
            0.0,
            false,
            MAX_SECS,
        )?;
        range(
            "residency_ttl_secs",
            self.residency_ttl_secs,
            0.0,
            false,
            MAX_SECS,
        )?;
        range("auto.max_gain", self.auto.max_gain, 0.0, false, 1.0)?;
        range("auto.reduction", self.auto.reduction, 0.0, false, 1e6)?;
        range("auto.min_gain", self.auto.min_gain, 0.0, false, 1.0)?;
        let t = &self.tofalos;
        range("tofalos.read_weight", t.read_weight, 0.0, false, 1.0)?;
        range(
            "tofalos.congestion_threshold",
            t.congestion_threshold,
            0.0,
            true,
            1.0,
        )?;
        range("tofalos.dominance", t.dominance, 1.0, false, 1e6)?;
        if t.node_bandwidth == Some(Bytes(0)) {
            return Err(
                "tofalos.node_bandwidth must be above 0 (e.g. \"10G\"); leave it out to judge \
                 congestion by dominance alone"
                    .into(),
            );
        }
        if self.max_files_per_process > 1 << 20 {
            return Err(format!(
                "max_files_per_process must be at most {}, got {}",
                1 << 20,
                self.max_files_per_process
            ));
        }
        for (name, pids) in [
            ("filter.include_pids", &self.filter.include_pids),
            ("filter.exclude_pids", &self.filter.exclude_pids),
        ] {
            if let Some(p) = pids.iter().find(|&&p| p <= 0) {
                return Err(format!("{name} must hold process ids above 0, got {p}"));
            }
        }
        if self.metrics_top_processes > crate::metrics::MAX_TOP_PROCESSES {
            return Err(format!(
                "metrics_top_processes must be at most {}, got {}",
                crate::metrics::MAX_TOP_PROCESSES,
                self.metrics_top_processes
            ));
        }
        if self.metrics_top_files > crate::metrics::MAX_TOP_FILES {
            return Err(format!(
                "metrics_top_files must be at most {}, got {}",
                crate::metrics::MAX_TOP_FILES,
                self.metrics_top_files
            ));
        }
        self.replicas.validate()?;
        if let Some(m) = self.metrics.as_ref().filter(|m| m.parse::<u16>().is_err()) {
            m.parse::<std::net::SocketAddr>().map_err(|_| {
                format!("metrics must be ADDRESS:PORT such as 127.0.0.1:9477, got {m:?}")
            })?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses() {
        let text = include_str!("../../../dist/numaio.toml");
        let c = Config::from_toml(text, Path::new("dist/numaio.toml")).unwrap();
        assert_eq!(c.policy, PolicyKind::Auto);
        assert_eq!(c.min_free_bytes, Bytes(256 << 20));
        assert!(c.filter.exclude_comms.iter().any(|s| s == "sshd"));
    }

    #[test]
    fn sizes_and_errors() {
        let p = Path::new("t.toml");
        let c = Config::from_toml(
            "max_bytes_per_interval = \"2G\"\nmin_free_bytes = 4096\n",
            p,
        )
        .unwrap();
        assert_eq!(c.max_bytes_per_interval, Bytes(2 << 30));
        assert_eq!(c.min_free_bytes, Bytes(4096));
        assert_eq!(c.policy, PolicyKind::FollowData);
        let e = Config::from_toml("polcy = \"auto\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("polcy") && e.contains("t.toml"), "{e}");
        let e = Config::from_toml("interval_secs = 0\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("interval_secs"), "{e}");
        let e = Config::from_toml("metrics = \"localhost\"\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("metrics"), "{e}");
        let e = Config::from_toml("metrics_top_processes = 101\n", p)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("metrics_top_processes must be at most 100"),
            "{e}"
        );
        let c = Config::from_toml("metrics_top_processes = 5\ntextfile_dir = \"/x\"\n", p).unwrap();
        assert_eq!(
            (c.metrics_top_processes, c.textfile_dir.as_deref()),
            (5, Some("/x"))
        );
        assert!(Config::from_toml("min_free_bytes = \"lots\"\n", p).is_err());
        assert_eq!(
            "pull-data".parse::<PolicyKind>().unwrap(),
            PolicyKind::PullData
        );
        assert!("x".parse::<PolicyKind>().is_err());
    }

    #[test]
    fn non_finite_and_out_of_range_numbers_are_refused() {
        let p = Path::new("t.toml");
        for (text, field) in [
            ("residency_ttl_secs = inf\n", "residency_ttl_secs"),
            ("residency_ttl_secs = nan\n", "residency_ttl_secs"),
            ("residency_ttl_secs = 1e300\n", "residency_ttl_secs"),
            ("interval_secs = nan\n", "interval_secs"),
            ("interval_secs = inf\n", "interval_secs"),
            ("win_factor = nan\n", "win_factor"),
            ("win_factor = inf\n", "win_factor"),
            ("min_residence_secs = inf\n", "min_residence_secs"),
            ("min_residence_secs = -1\n", "min_residence_secs"),
            ("remote_threshold = nan\n", "remote_threshold"),
            ("[auto]\nmax_gain = inf\n", "auto.max_gain"),
            ("[auto]\nreduction = -inf\n", "auto.reduction"),
            (
                "max_files_per_process = 100000000\n",
                "max_files_per_process",
            ),
        ] {
            let e = Config::from_toml(text, p).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains("t.toml"), "{text}: {e}");
        }
        assert!(Config::from_toml("residency_ttl_secs = 0\n", p).is_ok());
    }

    #[test]
    fn replicas_section_defaults_parse_and_validation() {
        let p = Path::new("t.toml");
        let c = Config::from_toml("", p).unwrap();
        assert!(!c.replicas.enabled && !c.replicas.auto && c.replicas.refresh);
        assert_eq!(c.replicas.dir, numaio_pagecache::replica::DEFAULT_DIR);
        assert_eq!(c.replicas.min_reader_nodes, 2);
        let c = Config::from_toml(
            "[replicas]\nenabled = true\nauto = true\ndir = \"/srv/r\"\n\
             max_memory_per_node = \"2G\"\nrefresh = false\nmin_reader_nodes = 3\n\
             min_read_bytes_per_sec = \"4M\"\nmax_file_bytes = \"512M\"\n",
            p,
        )
        .unwrap();
        let r = &c.replicas;
        assert!(r.enabled && r.auto && !r.refresh);
        assert_eq!(r.dir, "/srv/r");
        assert_eq!(r.max_memory_per_node, Some(Bytes(2 << 30)));
        assert_eq!(r.min_reader_nodes, 3);
        assert_eq!(r.min_read_bytes_per_sec, Bytes(4 << 20));
        assert_eq!(r.max_file_bytes, Bytes(512 << 20));
        // Freshness alone needs no budget.
        assert!(Config::from_toml("[replicas]\nenabled = true\n", p).is_ok());
        for (text, needle) in [
            (
                "[replicas]\nenabled = true\nauto = true\n",
                "replicas.max_memory_per_node is required",
            ),
            (
                "[replicas]\nauto = true\nmax_memory_per_node = \"1G\"\n",
                "replicas.auto = true needs replicas.enabled",
            ),
            (
                "[replicas]\nmax_memory_per_node = 0\n",
                "replicas.max_memory_per_node",
            ),
            (
                "[replicas]\nmin_reader_nodes = 1\n",
                "replicas.min_reader_nodes",
            ),
            (
                "[replicas]\nmin_reader_nodes = 5000\n",
                "replicas.min_reader_nodes",
            ),
            (
                "[replicas]\nmax_file_bytes = 0\n",
                "replicas.max_file_bytes",
            ),
            ("[replicas]\ndir = \"rel/dir\"\n", "replicas.dir"),
            ("[replicas]\ndir = \"\"\n", "replicas.dir"),
            ("[replicas]\nmax_file_bytes = \"huge\"\n", "huge"),
            ("[replicas]\nenable = true\n", "enable"),
            ("[replicas]\nenabled = 1\n", "enabled"),
        ] {
            let e = Config::from_toml(text, p).unwrap_err().to_string();
            assert!(e.contains(needle) && e.contains("t.toml"), "{text}: {e}");
        }
    }

    #[test]
    fn load_refuses_fifos_devices_and_huge_files() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = std::time::Instant::now();
        let e = Config::load(&fifo).unwrap_err().to_string();
        assert!(e.contains("FIFO") && e.contains("fifo"), "{e}");
        let e = Config::load(Path::new("/dev/zero"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("character device"), "{e}");
        let e = Config::load(dir.path()).unwrap_err().to_string();
        assert!(e.contains("directory"), "{e}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_CONFIG_BYTES as usize + 1]).unwrap();
        let e = Config::load(&big).unwrap_err().to_string();
        assert!(e.contains("larger than"), "{e}");
        assert!(t.elapsed() < std::time::Duration::from_secs(5));
        let ok = dir.path().join("ok.toml");
        std::fs::write(&ok, "policy = \"auto\"\n").unwrap();
        assert_eq!(Config::load(&ok).unwrap().policy, PolicyKind::Auto);
    }
}
