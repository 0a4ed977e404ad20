//! `numaio daemon`: the placement daemon. Settings come from a TOML file (`--config`, see
//! `dist/numaio.toml`) with command-line flags overriding it; see `docs/daemon.md`.

use numaio_proc::config::{Bytes, Config, PolicyKind};
use numaio_proc::daemon::{Daemon, Supervisor};
use numaio_proc::metrics::{self, Metrics};
use numaio_proc::PageCache;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct DaemonArgs {
    /// TOML configuration file (flags below override it); SIGHUP reads it again.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// follow-data (move the process), pull-data (move the cache), auto (by cost) or
    /// tofalos (Tofalos's placer: relieve congested nodes, else follow the bytes).
    #[arg(long)]
    policy: Option<PolicyKind>,
    /// Seconds between decisions (default 2; at most 3600).
    #[arg(long, value_name = "SECS", value_parser = crate::args::interval_secs)]
    interval: Option<f64>,
    /// Print the advice, take no action (like `numad -w`).
    #[arg(long)]
    dry_run: bool,
    /// Also move processes whose affinity is narrower than their cpuset.
    #[arg(long)]
    manage_pinned: bool,
    /// Serve Prometheus metrics on ADDRESS:PORT (e.g. 127.0.0.1:9477).
    #[arg(long, value_name = "ADDR:PORT")]
    metrics: Option<String>,
    /// Write the metrics to DIR/numaio.prom each interval for node_exporter's textfile
    /// collector (replaced atomically).
    #[arg(long, value_name = "DIR")]
    textfile: Option<PathBuf>,
    /// Give the N fastest-reading processes metric series of their own (pid and comm
    /// labels; 0 to 100, default 0).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=100))]
    metrics_top_processes: Option<u16>,
    /// Give the N files read fastest metric series of their own (path label; 0 to 100,
    /// default 0).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(0..=100))]
    metrics_top_files: Option<u16>,
    /// Estimate per-node I/O instead of counting it with the eBPF collector.
    #[arg(long)]
    no_ebpf: bool,
    /// Answer `numaio where --source collector` on this Unix socket (mode 0600, root and
    /// the daemon's user only; default /run/numaio/residency.sock; "off" to not serve). Only
    /// served while the eBPF collector runs.
    #[arg(long, value_name = "PATH")]
    residency_socket: Option<PathBuf>,
    /// Stop after N intervals (for tests and measurements).
    #[arg(long, value_name = "N", value_parser = crate::args::positive)]
    iterations: Option<u64>,
    /// One interval, then exit (same as --iterations 1).
    #[arg(long)]
    once: bool,
    /// Read rate (bytes/s, K/M/G suffixes) above which a process counts as I/O-active.
    #[arg(long, value_name = "SIZE", value_parser = crate::args::size)]
    min_read_rate: Option<u64>,
    /// Seconds a moved process or file stays put (0 to 86400).
    #[arg(long, value_name = "SECS", value_parser = crate::args::secs_or_zero)]
    min_residence: Option<f64>,
    /// Do not migrate a followed process's memory.
    #[arg(long)]
    no_migrate_memory: bool,
    /// Never touch this pid (repeatable).
    #[arg(long, value_name = "PID", value_parser = crate::args::pid)]
    exclude_pid: Vec<i32>,
    /// Never touch processes with this command name; `name*` matches a prefix (repeatable).
    #[arg(long, value_name = "COMM")]
    exclude_comm: Vec<String>,
    /// Only touch processes with this command name (repeatable).
    #[arg(long, value_name = "COMM")]
    include_comm: Vec<String>,
    /// Only touch this pid (repeatable).
    #[arg(long, value_name = "PID", value_parser = crate::args::pid)]
    include_pid: Vec<i32>,
    /// Never touch processes in this cgroup or below it (repeatable).
    #[arg(long, value_name = "PATH")]
    exclude_cgroup: Vec<String>,
    /// Only touch processes in this cgroup or below it (repeatable).
    #[arg(long, value_name = "PATH")]
    include_cgroup: Vec<String>,
    /// Also append the JSON lines to FILE.
    #[arg(long, value_name = "FILE")]
    log_file: Option<PathBuf>,
    /// Print one JSON line per decision and per interval (the default is a text line each).
    #[arg(long)]
    json: bool,
}

/// Talks to systemd when it started us (`Type=notify`): readiness, watchdog, reload. Outside
/// systemd (`NOTIFY_SOCKET` unset) every notification is a no-op, and SIGHUP still reloads.
struct Systemd<'a> {
    args: &'a DaemonArgs,
    hup: Arc<AtomicBool>,
    /// Half the watchdog period systemd asked for, as sd_watchdog_enabled(3) advises.
    watchdog: Option<Duration>,
    last_ping: Instant,
    warned: bool,
}

impl<'a> Systemd<'a> {
    fn new(args: &'a DaemonArgs, hup: Arc<AtomicBool>) -> Self {
        let mut usec = 0u64;
        let watchdog = sd_notify::watchdog_enabled(false, &mut usec)
            .then(|| Duration::from_micros(usec / 2).max(Duration::from_millis(10)));
        Systemd {
            args,
            hup,
            watchdog,
            last_ping: Instant::now(),
            warned: false,
        }
    }

    fn notify(&mut self, state: &[sd_notify::NotifyState]) {
        if let Err(e) = sd_notify::notify(false, state) {
            if !self.warned {
                let sock = std::env::var("NOTIFY_SOCKET").unwrap_or_default();
                crate::warnln!(
                    "cannot notify systemd at NOTIFY_SOCKET={sock}: {e} (the daemon goes on)"
                );
                self.warned = true;
            }
        }
    }
}

impl Supervisor for Systemd<'_> {
    fn ready(&mut self, cfg: &Config) {
        let status = format!("policy {}, every {} s", cfg.policy, cfg.interval_secs);
        self.notify(&[
            sd_notify::NotifyState::Ready,
            sd_notify::NotifyState::Status(&status),
        ]);
        self.last_ping = Instant::now();
    }

    fn alive(&mut self) {
        if let Some(half) = self.watchdog {
            if self.last_ping.elapsed() >= half {
                self.notify(&[sd_notify::NotifyState::Watchdog]);
                self.last_ping = Instant::now();
            }
        }
    }

    fn reload(&mut self) -> Option<Result<Config, String>> {
        if !self.hup.swap(false, Ordering::Relaxed) {
            return None;
        }
        let mut states = vec![sd_notify::NotifyState::Reloading];
        if let Ok(now) = sd_notify::NotifyState::monotonic_usec_now() {
            states.push(now);
        }
        self.notify(&states);
        Some(build_config(self.args).map_err(|e| format!("{e:#}")))
    }

    fn stopping(&mut self) {
        self.notify(&[sd_notify::NotifyState::Stopping]);
    }
}

fn build_config(a: &DaemonArgs) -> anyhow::Result<Config> {
    let mut c = match &a.config {
        // A configuration that cannot be used is a usage error, like a bad flag.
        Some(p) => Config::load(p).map_err(|e| crate::args::UsageError(e.to_string()))?,
        None => Config::default(),
    };
    if let Some(p) = a.policy {
        c.policy = p;
    }
    if let Some(i) = a.interval {
        c.interval_secs = i;
    }
    c.dry_run |= a.dry_run;
    c.manage_pinned |= a.manage_pinned;
    if a.no_migrate_memory {
        c.migrate_memory = false;
    }
    if let Some(m) = &a.metrics {
        c.metrics = Some(m.clone());
    }
    if let Some(d) = &a.textfile {
        c.textfile_dir = Some(d.display().to_string());
    }
    if let Some(n) = a.metrics_top_processes {
        c.metrics_top_processes = n.into();
    }
    if let Some(n) = a.metrics_top_files {
        c.metrics_top_files = n.into();
    }
    if a.no_ebpf {
        c.collector.ebpf = false;
    }
    if let Some(p) = &a.residency_socket {
        c.collector.residency_socket = if p.as_os_str() == "off" {
            String::new()
        } else {
            p.display().to_string()
        };
    }
    // A bare port binds the loopback address only.
    if let Some(port) = c.metrics.as_deref().and_then(|m| m.parse::<u16>().ok()) {
        c.metrics = Some(format!("127.0.0.1:{port}"));
    }
    if let Some(b) = a.min_read_rate {
        c.min_read_bytes_per_sec = Bytes(b);
    }
    if let Some(s) = a.min_residence {
        c.min_residence_secs = s;
    }
    c.filter.exclude_pids.extend(&a.exclude_pid);
    c.filter
        .exclude_comms
        .extend(a.exclude_comm.iter().cloned());
    c.filter
        .include_comms
        .extend(a.include_comm.iter().cloned());
    c.filter.include_pids.extend(&a.include_pid);
    c.filter
        .exclude_cgroups
        .extend(a.exclude_cgroup.iter().cloned());
    c.filter
        .include_cgroups
        .extend(a.include_cgroup.iter().cloned());
    if let Some(f) = &a.log_file {
        c.log_file = Some(f.display().to_string());
    }
    c.validate()
        .map_err(|e| crate::args::UsageError(format!("invalid setting: {e}")))?;
    Ok(c)
}

/// A one-line human rendering of a JSON log line.
fn human(v: &serde_json::Value) -> String {
    let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
    let outcome = match v["outcome"].as_str() {
        Some(o) => format!(
            " [{o}{}]",
            v["error"]
                .as_str()
                .map_or(String::new(), |e| format!(": {e}"))
        ),
        None => String::new(),
    };
    match v["event"].as_str() {
        Some("decision") => {
            let kind = v["action"]["kind"].as_str().unwrap_or("none");
            let target = v["numbers"]["target_node"]
                .as_u64()
                .map_or(String::new(), |t| format!(" -> node {t}"));
            format!(
                "#{} {} {} pid {} ({}) on node {}{} [{}]: {}{}",
                v["iteration"],
                s("verdict"),
                kind,
                v["pid"],
                s("comm"),
                v["numbers"]["current_node"],
                target,
                s("read_source"),
                s("reason"),
                outcome
            )
        }
        Some("replica") => format!(
            "#{} {} replica {} {} on node {}: {}{}",
            v["iteration"],
            s("verdict"),
            s("action"),
            s("path"),
            v["node"],
            s("reason"),
            outcome
        ),
        Some("interval") => format!(
            "#{} scanned {} processes{}, {} I/O-active, {} decision(s), {} action(s), {:.1} ms CPU",
            v["iteration"],
            v["scanned"],
            match v["unreadable"].as_u64() {
                Some(n) if n > 0 => format!(" ({n} unreadable: run as root to see them)"),
                _ => String::new(),
            } + &match v["unresponsive"].as_u64() {
                Some(n) if n > 0 => format!(" ({n} not answering, skipped)"),
                _ => String::new(),
            },
            v["io_active"],
            v["decisions"],
            v["actions"],
            v["cpu_secs"].as_f64().unwrap_or(0.0) * 1000.0
        ),
        Some("start") => format!(
            "numaio daemon: policy {}, every {} s{}{}; per-node I/O {}",
            s("policy"),
            v["interval_secs"],
            if v["dry_run"] == true {
                ", dry run (advice only)"
            } else {
                ""
            },
            if v["manage_pinned"] == true {
                ", managing pinned processes"
            } else {
                ""
            },
            match v["fallback_reason"].as_str() {
                Some(why) => format!("estimated ({why})"),
                None => format!("counted by {}", s("numa_io_source")),
            }
        ),
        Some("reload") => format!(
            "numaio daemon: configuration reloaded: policy {}, every {} s{}{}",
            s("policy"),
            v["interval_secs"],
            if v["dry_run"] == true {
                ", dry run (advice only)"
            } else {
                ""
            },
            match v["restart_needed"].as_array() {
                Some(r) if !r.is_empty() => format!(
                    "; restart to apply {}",
                    r.iter()
                        .filter_map(|x| x.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                _ => String::new(),
            }
        ),
        Some("stop") => format!(
            "numaio daemon: stopped after {} interval(s); actions {}",
            v["iterations"], v["actions"]
        ),
        Some("error") => format!("error: {}", s("error")),
        Some("unresponsive") => format!("skipped: {}", s("error")),
        _ => v.to_string(),
    }
}

/// Raises the soft limit on open files toward the hard one: the scanner keeps two /proc
/// descriptors per process open between intervals.
fn raise_nofile_limit() {
    let mut rl = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max.min(65536);
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// Opens the log file for appending: non-blocking, so a FIFO without a reader fails at once
/// instead of hanging start-up, and only a regular file or a character device is accepted.
fn open_log(p: &std::path::Path) -> anyhow::Result<std::fs::File> {
    use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
    let shown = crate::output::quote(p);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o640)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(p)
        .map_err(|e| anyhow::anyhow!("cannot open log file {shown}: {e}"))?;
    let ft = f
        .metadata()
        .map_err(|e| anyhow::anyhow!("cannot stat log file {shown}: {e}"))?
        .file_type();
    if !(ft.is_file() || ft.is_char_device()) {
        crate::usage_bail!(
            "log file {shown} is not a regular file; give a file path for --log-file"
        );
    }
    Ok(f)
}

pub fn run(a: DaemonArgs) -> anyhow::Result<ExitCode> {
    let cfg = build_config(&a)?;
    raise_nofile_limit();
    let metrics = (cfg.metrics.is_some() || cfg.textfile_dir.is_some()).then(|| {
        Arc::new(Metrics::with_top(
            cfg.metrics_top_processes,
            cfg.metrics_top_files,
        ))
    });
    if let (Some(addr), Some(m)) = (&cfg.metrics, &metrics) {
        let bound = metrics::serve(m.clone(), addr)
            .map_err(|e| anyhow::anyhow!("cannot serve metrics on {addr}: {e}"))?;
        crate::warnln!("metrics on http://{bound}/metrics");
    }
    let mut log_file = match &cfg.log_file {
        Some(p) => Some(open_log(std::path::Path::new(p))?),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    let hup = Arc::new(AtomicBool::new(false));
    for (sig, flag) in [
        (signal_hook::consts::SIGINT, &stop),
        (signal_hook::consts::SIGTERM, &stop),
        (signal_hook::consts::SIGHUP, &hup),
    ] {
        signal_hook::flag::register(sig, flag.clone())
            .map_err(|e| anyhow::anyhow!("cannot install the handler for signal {sig}: {e}"))?;
    }
    let json = a.json;
    // The first failed write to stdout stops the daemon; main then ends quietly on a closed
    // pipe and reports any other error.
    let out_err: Arc<std::sync::Mutex<Option<std::io::Error>>> = Arc::default();
    let sink_err = out_err.clone();
    let sink_stop = stop.clone();
    let log_path = cfg.log_file.clone().unwrap_or_default();
    let mut log_warned = false;
    let sink = Box::new(move |v: &serde_json::Value| {
        let line = if json {
            v.to_string()
        } else {
            crate::output::escape_message(&human(v)).into_owned()
        };
        let mut out = std::io::stdout().lock();
        if let Err(e) = writeln!(out, "{line}").and_then(|_| out.flush()) {
            let mut slot = sink_err.lock().unwrap_or_else(|p| p.into_inner());
            slot.get_or_insert(e);
            sink_stop.store(true, Ordering::Relaxed);
        }
        if let Some(f) = log_file.as_mut() {
            if let Err(e) = writeln!(f, "{v}") {
                if !log_warned {
                    crate::warnln!("cannot write log file {log_path}: {e} (the daemon goes on)");
                    log_warned = true;
                }
            }
        }
    });
    let iterations = if a.once { Some(1) } else { a.iterations };
    let cache = PageCache;
    let mut sup = Systemd::new(&a, hup);
    let mut socket = cfg.collector.residency_socket.clone();
    let mut d = Daemon::new(cfg, &cache, metrics, sink)
        .with_mount_reader(Box::new(crate::cmd::sources::NumaioMounts));
    if !d.ebpf() {
        // Only the collector's counts answer; without it `numaio where` scans by itself, and
        // a socket would be state left on the host for nothing.
        socket.clear();
    }
    if !socket.is_empty() {
        // Residency answers are an extra: a daemon that cannot serve them still places.
        let served = numaio_proc::residency::bind(std::path::Path::new(&socket))
            .and_then(|l| numaio_proc::residency::serve(l, Arc::new(d.residency_book())));
        if let Err(e) = served {
            crate::warnln!(
                "residency queries are not served: {e} (give --residency-socket a path the \
                 daemon may create, or \"off\")"
            );
            socket.clear();
        }
    }
    let ran = d.run_supervised(iterations, &stop, &mut sup);
    drop(d);
    if !socket.is_empty() {
        // Ours, bound above; a client now finds no daemon rather than a dead socket.
        let _ = std::fs::remove_file(&socket);
    }
    ran?;
    let err = out_err.lock().unwrap_or_else(|p| p.into_inner()).take();
    if let Some(e) = err {
        return Err(crate::output::StdoutError(e).into());
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: DaemonArgs,
    }

    #[test]
    fn flags_override_config_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("n.toml");
        std::fs::write(
            &p,
            "policy = \"pull-data\"\ninterval_secs = 5.0\n[filter]\nexclude_comms = [\"x\"]\n",
        )
        .unwrap();
        let cli = Cli::parse_from([
            "d",
            "--config",
            p.to_str().unwrap(),
            "--policy",
            "auto",
            "--dry-run",
            "--exclude-comm",
            "y",
            "--min-read-rate",
            "2M",
            "--metrics",
            "9477",
            "--exclude-cgroup",
            "/system.slice",
        ]);
        let c = build_config(&cli.a).unwrap();
        assert_eq!(c.policy, PolicyKind::Auto);
        assert_eq!(c.interval_secs, 5.0);
        assert!(c.dry_run);
        assert_eq!(
            c.filter.exclude_comms,
            vec!["x".to_string(), "y".to_string()]
        );
        assert_eq!(c.min_read_bytes_per_sec, Bytes(2 << 20));
        assert_eq!(c.metrics.as_deref(), Some("127.0.0.1:9477"));
        assert_eq!(c.filter.exclude_cgroups, vec!["/system.slice".to_string()]);
        for bad in [
            ["d", "--interval", "0"],
            ["d", "--interval", "nan"],
            ["d", "--interval", "1e300"],
            ["d", "--min-residence", "inf"],
            ["d", "--iterations", "0"],
            ["d", "--exclude-pid", "-3"],
        ] {
            let e = Cli::try_parse_from(bad).err().expect("refused");
            assert_eq!(e.exit_code(), 2, "{bad:?}");
        }
        let missing = Cli::parse_from(["d", "--config", "/nonexistent/n.toml"]);
        assert!(build_config(&missing.a)
            .unwrap_err()
            .to_string()
            .contains("/nonexistent/n.toml"));
        assert!(Cli::try_parse_from(["d", "--policy", "sideways"]).is_err());
    }

    #[test]
    fn human_lines() {
        let v = serde_json::json!({"event":"decision","iteration":3,"verdict":"act","pid":42,
            "comm":"cat","reason":"because","action":{"kind":"follow-data","to":1},
            "read_source":"ebpf",
            "numbers":{"current_node":0,"target_node":1},"outcome":"process-exited",
            "error":"process 42 does not exist"});
        let h = human(&v);
        assert!(
            h.starts_with("#3 act follow-data pid 42 (cat) on node 0 -> node 1 [ebpf]: because"),
            "{h}"
        );
        assert!(
            h.ends_with("[process-exited: process 42 does not exist]"),
            "{h}"
        );
        let i = serde_json::json!({"event":"interval","iteration":2,"scanned":10,"io_active":1,
            "decisions":0,"actions":0,"cpu_secs":0.0125});
        assert!(human(&i).contains("12.5 ms CPU"));
        let i = serde_json::json!({"event":"interval","iteration":2,"scanned":10,"io_active":1,
            "decisions":0,"actions":0,"cpu_secs":0.0,"unresponsive":2});
        assert!(
            human(&i).contains("(2 not answering, skipped)"),
            "{}",
            human(&i)
        );
        let r = serde_json::json!({"event":"replica","iteration":4,"verdict":"act",
            "action":"refresh","path":"/d/f","node":1,"reason":"changed","outcome":"done"});
        assert_eq!(
            human(&r),
            "#4 act replica refresh /d/f on node 1: changed [done]"
        );
        let u = serde_json::json!({"event":"unresponsive","pid":7,"file":"/proc/7/stat",
            "error":"process 7 does not answer"});
        assert_eq!(human(&u), "skipped: process 7 does not answer");
        let st = serde_json::json!({"event":"start","policy":"tofalos","interval_secs":2.0,
            "numa_io_source":"estimate","fallback_reason":"BPF is not available: no BTF"});
        assert_eq!(
            human(&st),
            "numaio daemon: policy tofalos, every 2.0 s; per-node I/O estimated (BPF is not available: no BTF)"
        );
        let st = serde_json::json!({"event":"start","policy":"auto","interval_secs":2.0,
            "numa_io_source":"ebpf","fallback_reason":null});
        assert!(
            human(&st).ends_with("per-node I/O counted by ebpf"),
            "{}",
            human(&st)
        );
    }
}
