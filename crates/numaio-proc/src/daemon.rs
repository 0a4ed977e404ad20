//! The placement daemon's loop: sample, decide ([`crate::policy`]), act, log, export.
//!
//! Each interval: re-read the topology (free memory and page cache per node), CPU use per
//! node from `/proc/stat`, light-sample every process and deep-sample the I/O-active ones,
//! decide, carry out the decisions within the caps, and emit one JSON line per decision and
//! one per interval. Nothing a process does can stop the loop: a process that exits, a file
//! that vanishes or a permission error becomes the outcome of that one decision.

use crate::cache::{CacheOps, FileRef};
use crate::config::Config;
use crate::error::{ProcError, ProcResult};
use crate::io_source::Sources;
use crate::metrics::{label, Metrics};
use crate::pin;
use crate::policy::{self, Action, Decision, History, NodeState, Verdict, World};
use crate::replicas::{self, ReplicaState, ReplicaSummary};

use crate::sample::{FileKey, ProcessView, ScanOptions, Scanner};
use numaio_sys::Topology;
use serde::Serialize;
use serde_json::json;
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Where the JSON lines go.
pub type Sink<'a> = Box<dyn FnMut(&serde_json::Value) + 'a>;

/// What one interval did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct IntervalSummary {
    pub iteration: u64,
    pub scanned: usize,
    pub io_active: usize,
    pub gone: usize,
    pub unreadable: usize,
    /// Processes whose /proc files did not answer in time (each also logged as an
    /// `unresponsive` event): skipped, never acted on.
    pub unresponsive: usize,
    pub residency_queries: usize,
    /// I/O-active processes by the source of their per-node counts (`ebpf`, `mount`,
    /// `estimate`).
    pub numa_io_sources: BTreeMap<&'static str, usize>,
    /// Why the collector's counts of the interval are short (its policies then decided from
    /// incomplete counts); absent when complete.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_io_incomplete: Option<String>,
    pub decisions: usize,
    pub actions: usize,
    pub action_errors: usize,
    pub cpu_secs: f64,
    pub wall_secs: f64,
    /// The replica pass, when `[replicas]` is enabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<ReplicaSummary>,
}

/// The daemon's state across intervals.
pub struct Daemon<'a> {
    pub cfg: Config,
    cache: &'a dyn CacheOps,
    scanner: Scanner,
    pub history: History,
    prev_cpu: BTreeMap<u32, (u64, u64)>,
    clock: Instant,
    iteration: u64,
    metrics: Option<Arc<Metrics>>,
    sink: Sink<'a>,
    /// Actions carried out, by kind, since start.
    pub actions_by_kind: BTreeMap<String, u64>,
    /// Test aid (`NUMAIO_DAEMON_ACT_DELAY_MS`): a pause between checking a process and
    /// acting on it, which widens the window in which it can exit mid-action.
    act_delay: Option<Duration>,
    /// Whether the last textfile write failed (its error was logged).
    textfile_failing: bool,
    /// Test aid: reads of these pids block like those of a stuck process.
    stall_pids: Vec<i32>,
    replica_state: ReplicaState,
    /// Whether the last replica pass could not list the store (its error was logged).
    replicas_failing: bool,
    /// Where exact per-node counts come from (the eBPF collector), chosen once at start.
    sources: Sources,
    /// The fallback reason last logged, so a collector that stops is said once.
    logged_fallback: Option<String>,
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// CPU time (user + system) of this process, in seconds.
pub fn self_cpu_secs() -> f64 {
    // SAFETY: getrusage writes into the zeroed struct we own.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0.0;
    }
    let t = |tv: libc::timeval| tv.tv_sec as f64 + tv.tv_usec as f64 / 1e6;
    t(ru.ru_utime) + t(ru.ru_stime)
}

impl<'a> Daemon<'a> {
    /// Counts of processes using a numaio mount come from the mount's own counters where
    /// the eBPF collector does not run (the reader lives with the caller: the mount's
    /// statistics format is the FUSE server's).
    pub fn with_mount_reader(mut self, mounts: Box<dyn crate::io_source::MountReader>) -> Self {
        let sources = std::mem::replace(&mut self.sources, Sources::new(false));
        self.sources = sources.with_mounts(mounts);
        self
    }
}

impl<'a> Daemon<'a> {
    pub fn new(
        cfg: Config,
        cache: &'a dyn CacheOps,
        metrics: Option<Arc<Metrics>>,
        sink: Sink<'a>,
    ) -> Self {
        let ttl = Duration::from_secs_f64(cfg.residency_ttl_secs.max(0.0));
        let sources = Sources::new(cfg.collector.ebpf);
        Daemon {
            cfg,
            cache,
            scanner: Scanner::with_residency_ttl(ttl),
            history: History::default(),
            prev_cpu: BTreeMap::new(),
            clock: Instant::now(),
            iteration: 0,
            metrics,
            sink,
            actions_by_kind: BTreeMap::new(),
            act_delay: std::env::var("NUMAIO_DAEMON_ACT_DELAY_MS")
                .ok()
                .and_then(|v| v.parse::<u64>().ok())
                .map(Duration::from_millis),
            textfile_failing: false,
            stall_pids: Vec::new(),
            replica_state: ReplicaState::default(),
            replicas_failing: false,
            logged_fallback: sources.fallback_reason().map(String::from),
            sources,
        }
    }

    /// Whether per-node counts are counted by the eBPF collector (else estimated, and
    /// [`Daemon::fallback_reason`] says why).
    pub fn ebpf(&self) -> bool {
        self.sources.ebpf()
    }

    /// What answers residency queries from the collector's counts (or says why it cannot),
    /// for [`crate::residency::serve`].
    pub fn residency_book(&self) -> crate::residency::Book {
        crate::residency::Book::new(self.sources.cache_reader())
    }

    /// Why per-node counts are estimated rather than counted by eBPF.
    pub fn fallback_reason(&self) -> Option<&str> {
        self.sources.fallback_reason()
    }

    fn now(&self) -> f64 {
        self.clock.elapsed().as_secs_f64()
    }

    fn scan_opts(&self, deep_all: bool) -> ScanOptions {
        ScanOptions {
            pids: None,
            min_io_bytes: ((self.cfg.min_read_bytes_per_sec.0 as f64) * self.cfg.interval_secs)
                .max(1.0) as u64,
            all: false,
            deep_all,
            memory: false,
            max_files: self.cfg.max_files_per_process,
            stall_pids: self.stall_pids.clone(),
            ..Default::default()
        }
    }

    /// Busy fraction of each node's CPUs since the previous call.
    fn node_utils(&mut self, topo: &Topology) -> BTreeMap<u32, f64> {
        let cur = std::fs::read_to_string("/proc/stat")
            .map(|t| numaio_procfs::parse_proc_stat_cpus(&t))
            .unwrap_or_default();
        let mut out = BTreeMap::new();
        for n in &topo.nodes {
            let (mut busy, mut total) = (0u64, 0u64);
            for c in &n.cpus {
                if let (Some(a), Some(b)) = (self.prev_cpu.get(c), cur.get(c)) {
                    busy += b.0.saturating_sub(a.0);
                    total += b.1.saturating_sub(a.1);
                }
            }
            out.insert(
                n.id,
                if total > 0 {
                    busy as f64 / total as f64
                } else {
                    0.0
                },
            );
        }
        self.prev_cpu = cur;
        out
    }

    /// Writes the metrics textfile when one is configured.
    fn write_textfile(&self) -> ProcResult<()> {
        let (Some(m), Some(dir)) = (&self.metrics, &self.cfg.textfile_dir) else {
            return Ok(());
        };
        m.write_textfile(std::path::Path::new(dir))
            .map(|_| ())
            .map_err(|e| {
                ProcError::Invalid(format!(
                    "cannot write the metrics textfile {}/{}: {e}; give --textfile a \
                     directory the daemon can write (node_exporter's \
                     --collector.textfile.directory)",
                    dir.trim_end_matches('/'),
                    crate::metrics::TEXTFILE_NAME
                ))
            })
    }

    /// The first sample: establishes the baseline for rates and file offsets. Fails when a
    /// configured textfile cannot be written, so a wrong directory shows at start.
    pub fn baseline(&mut self) -> ProcResult<()> {
        self.write_textfile()?;
        let topo = Topology::detect()?;
        self.node_utils(&topo);
        let opts = self.scan_opts(true);
        self.scanner.scan(&opts, &topo, self.cache);
        self.sources.begin_interval();
        self.logged_fallback = self.sources.fallback_reason().map(String::from);
        (self.sink)(&json!({
            "event": "start",
            "ts": now_unix(),
            "policy": self.cfg.policy,
            "dry_run": self.cfg.dry_run,
            "interval_secs": self.cfg.interval_secs,
            "manage_pinned": self.cfg.manage_pinned,
            "nodes": topo.node_ids(),
            "numa_io_source": if self.sources.ebpf() { "ebpf" } else { "estimate" },
            "fallback_reason": self.sources.fallback_reason(),
        }));
        Ok(())
    }

    /// Whether `v`'s memory per node matters to the decision (read from `numa_maps` only
    /// for those, since it walks the process's page tables).
    fn wants_memory(&self, v: &ProcessView) -> bool {
        if self.cfg.policy == crate::config::PolicyKind::Tofalos {
            let bytes: u64 =
                v.numa_read_bytes.values().sum::<u64>() + v.numa_write_bytes.values().sum::<u64>();
            return v.interval_secs > 0.0
                && (bytes.max(v.write_bytes) as f64 / v.interval_secs)
                    >= self.cfg.min_read_bytes_per_sec.0 as f64;
        }
        policy::candidate(&self.cfg, v).is_some()
    }

    /// One interval: scan, decide, act, log.
    pub fn step(&mut self) -> ProcResult<IntervalSummary> {
        let cpu0 = self_cpu_secs();
        let t0 = Instant::now();
        self.iteration += 1;
        let topo = Topology::detect()?;
        let utils = self.node_utils(&topo);
        let opts = self.scan_opts(false);
        let mut res = self.scanner.scan(&opts, &topo, self.cache);
        // Exact counts, where the collector runs, replace the estimate before anything
        // is decided from them.
        self.sources.apply(&mut res.views, &topo.node_ids());
        let fallback = self.sources.fallback_reason().map(String::from);
        if fallback != self.logged_fallback {
            if let Some(why) = &fallback {
                (self.sink)(&json!({"event": "error", "ts": now_unix(),
                    "error": format!("per-node counts are estimated from now on: {why}")}));
            }
            self.logged_fallback = fallback;
        }
        // A candidate whose numa_maps could not be read in time (or that exited) is
        // dropped: nothing is decided about a process the scan could not see.
        let mut views = Vec::with_capacity(res.views.len());
        for mut v in std::mem::take(&mut res.views) {
            if self.wants_memory(&v) {
                match self.scanner.fill_memory(&mut v, opts.read_limit) {
                    Ok(()) => {}
                    Err(e) if e.is_gone() => {
                        res.gone += 1;
                        continue;
                    }
                    Err(e) => {
                        res.unresponsive
                            .extend(crate::sample::Unresponsive::of(&e, Some(&v.comm)));
                        continue;
                    }
                }
            }
            views.push(v);
        }
        res.views = views;
        for u in &res.unresponsive {
            (self.sink)(&json!({
                "event": "unresponsive",
                "ts": now_unix(),
                "pid": u.pid,
                "comm": u.comm,
                "file": u.file,
                "error": u.error,
            }));
        }
        let now = self.now();
        let keep = (3.0 * self.cfg.interval_secs).max(self.cfg.min_residence_secs);
        self.history.note_readers(&res.views, now, keep);
        let world = World {
            nodes: topo
                .nodes
                .iter()
                .map(|n| NodeState {
                    id: n.id,
                    cpus: n.cpus.clone(),
                    free_bytes: n.mem.mem_free_bytes,
                    cpu_util: utils.get(&n.id).copied().unwrap_or(0.0),
                })
                .collect(),
            now,
            costs: Some(policy::Costs::for_topology(&topo)),
        };
        let decisions = policy::decide(&self.cfg, &world, &res.views, &self.history);
        let mut sum = IntervalSummary {
            iteration: self.iteration,
            scanned: res.scanned,
            io_active: res.views.len(),
            gone: res.gone,
            unreadable: res.unreadable,
            unresponsive: res.unresponsive.len(),
            residency_queries: res.residency_queries,
            numa_io_sources: res.views.iter().fold(BTreeMap::new(), |mut m, v| {
                *m.entry(v.numa_io_source.as_str()).or_insert(0) += 1;
                m
            }),
            decisions: decisions.len(),
            numa_io_incomplete: self.sources.incomplete_reason().map(String::from),
            ..Default::default()
        };
        for d in &decisions {
            let outcome = if d.verdict == Verdict::Act {
                let o = self.execute(d, &res.views);
                match &o {
                    Ok(_) => {
                        sum.actions += 1;
                        self.history.record(d, now);
                        let kind = d.action.as_ref().map_or("none", |a| a.kind());
                        *self.actions_by_kind.entry(kind.to_string()).or_insert(0) += 1;
                        if let Some(m) = &self.metrics {
                            m.actions.get_or_create(&label("kind", kind)).inc();
                        }
                    }
                    Err(_) => sum.action_errors += 1,
                }
                Some(o)
            } else {
                None
            };
            if let Some(m) = &self.metrics {
                let v = serde_json::to_value(d.verdict).unwrap_or_default();
                m.decisions
                    .get_or_create(&label("verdict", v.as_str().unwrap_or("?")))
                    .inc();
            }
            let mut line = json!({
                "event": "decision",
                "ts": now_unix(),
                "iteration": self.iteration,
            });
            if let (Some(obj), Ok(serde_json::Value::Object(dv))) =
                (line.as_object_mut(), serde_json::to_value(d))
            {
                obj.extend(dv);
                match outcome {
                    Some(Ok(o)) => {
                        obj.insert("outcome".into(), json!("done"));
                        obj.insert("result".into(), o);
                    }
                    Some(Err(e)) => {
                        obj.insert(
                            "outcome".into(),
                            json!(if e.is_gone() {
                                "process-exited"
                            } else {
                                "failed"
                            }),
                        );
                        obj.insert("error".into(), json!(e.to_string()));
                    }
                    None => {}
                }
            }
            (self.sink)(&line);
        }
        if self.cfg.replicas.enabled {
            sum.replicas = self.replica_pass(&res.views, &topo.node_ids(), now);
        }
        // Forget processes that are gone.
        let alive: HashSet<(i32, u64)> = self
            .history
            .proc_moves
            .keys()
            .chain(self.history.managed.iter())
            .copied()
            .filter(|(pid, st)| {
                // One that does not answer is kept: it may well still run.
                match self
                    .scanner
                    .read_stat(*pid, numaio_procfs::bounded::DEFAULT_LIMIT)
                {
                    Ok(s) => s.start_ticks == *st,
                    Err(e) => e.is_unresponsive(),
                }
            })
            .collect();
        self.history.retain_processes(&alive);
        sum.wall_secs = t0.elapsed().as_secs_f64();
        sum.cpu_secs = self_cpu_secs() - cpu0;
        if let Some(m) = &self.metrics {
            m.observe_processes(res.scanned, &res.views);
            m.observe_io(&topo.node_ids(), &res.views);
            m.intervals.inc();
            m.interval_cpu_seconds.set(sum.cpu_secs);
            m.interval_duration_seconds.set(sum.wall_secs);
        }
        if let Err(e) = self.write_textfile() {
            // A full or read-only disk must not stop placement; say so once per outage.
            if !self.textfile_failing {
                (self.sink)(&json!({"event": "error", "ts": now_unix(), "error": e.to_string()}));
            }
            self.textfile_failing = true;
        } else {
            self.textfile_failing = false;
        }
        let mut line = json!({"event": "interval", "ts": now_unix()});
        if let (Some(obj), Ok(serde_json::Value::Object(sv))) =
            (line.as_object_mut(), serde_json::to_value(&sum))
        {
            obj.extend(sv);
        }
        (self.sink)(&line);
        Ok(sum)
    }

    /// Keeps the replicas fresh and, with `auto`, makes new ones; one `replica` line per
    /// action. A store that cannot be listed is logged once per outage and skipped.
    pub fn replica_pass(
        &mut self,
        views: &[ProcessView],
        nodes: &[u32],
        now: f64,
    ) -> Option<ReplicaSummary> {
        let iteration = self.iteration;
        let sink = &mut self.sink;
        let mut emit = |mut line: serde_json::Value| {
            if let Some(obj) = line.as_object_mut() {
                obj.insert("ts".into(), json!(now_unix()));
                obj.insert("iteration".into(), json!(iteration));
            }
            sink(&line);
        };
        match replicas::pass(&self.cfg, &mut self.replica_state, views, now, &mut emit) {
            Ok((s, counts)) => {
                self.replicas_failing = false;
                if let Some(m) = &self.metrics {
                    m.observe_replicas(nodes, &counts);
                }
                Some(s)
            }
            Err(e) => {
                if !self.replicas_failing {
                    (self.sink)(&json!({"event": "error", "ts": now_unix(),
                        "error": format!("replica pass skipped: {e}; check [replicas] dir \
                                          (the daemon needs to read and write it)")}));
                }
                self.replicas_failing = true;
                None
            }
        }
    }

    /// Carries out one decision. The pid is re-checked first so a reused pid is never moved.
    fn execute(&mut self, d: &Decision, views: &[ProcessView]) -> ProcResult<serde_json::Value> {
        let st = self
            .scanner
            .read_stat(d.pid, numaio_procfs::bounded::DEFAULT_LIMIT)?;
        // A zombie has exited; only its parent has not collected it yet.
        if st.start_ticks != d.start_ticks || matches!(st.state, 'Z' | 'X') {
            return Err(ProcError::gone(d.pid));
        }
        if let Some(t) = self.act_delay {
            std::thread::sleep(t);
            let st = self
                .scanner
                .read_stat(d.pid, numaio_procfs::bounded::DEFAULT_LIMIT)?;
            if matches!(st.state, 'Z' | 'X') {
                return Err(ProcError::gone(d.pid));
            }
        }
        match &d.action {
            Some(Action::FollowData {
                to,
                cpus,
                migrate_memory,
            }) => {
                if let Some(why) = pin::refusal(d.pid)? {
                    return Err(ProcError::Refused { pid: d.pid, why });
                }
                let aff = pin::set_process_affinity(d.pid, cpus)?;
                let steps = if *migrate_memory {
                    match pin::migrate_memory(d.pid, *to) {
                        Ok(s) => s,
                        // The process moved; its memory did not (it exited meanwhile).
                        Err(e) if e.is_gone() => Vec::new(),
                        Err(e) => return Err(e),
                    }
                } else {
                    Vec::new()
                };
                let moved: u64 = steps
                    .iter()
                    .filter(|s| s.error.is_none())
                    .map(|s| s.bytes_before)
                    .sum();
                if let Some(m) = &self.metrics {
                    m.bytes_moved
                        .get_or_create(&label("kind", "process-memory"))
                        .inc_by(moved);
                }
                Ok(json!({"affinity": aff, "memory_steps": steps}))
            }
            Some(Action::PullData { to, files }) => {
                let mut per_file = Vec::new();
                let (mut moved, mut errors) = (0u64, 0usize);
                let view = views
                    .iter()
                    .find(|v| (v.pid, v.start_ticks) == (d.pid, d.start_ticks));
                for f in files {
                    let (fr, key) = pull_target(d.pid, view, &f.path);
                    if let Some(k) = key {
                        self.scanner.memo.invalidate(k);
                    }
                    match self.cache.move_to(&fr, *to) {
                        Ok(o) => {
                            moved += o.moved_bytes;
                            per_file.push(json!({"path": f.path, "moved_bytes": o.moved_bytes,
                                "already_bytes": o.already_bytes, "left_bytes": o.left_bytes}));
                        }
                        Err(e) => {
                            errors += 1;
                            per_file.push(json!({"path": f.path, "error": e.to_string()}));
                        }
                    }
                }
                if let Some(m) = &self.metrics {
                    m.bytes_moved
                        .get_or_create(&label("kind", "page-cache"))
                        .inc_by(moved);
                }
                if errors == files.len() {
                    return Err(ProcError::Cache(format!(
                        "no file could be moved: {per_file:?}"
                    )));
                }
                Ok(json!({"moved_bytes": moved, "files": per_file}))
            }
            None => Ok(serde_json::Value::Null),
        }
    }

    /// Runs `iterations` intervals (forever if `None`) or until `stop` is set.
    pub fn run(&mut self, iterations: Option<u64>, stop: &AtomicBool) -> ProcResult<()> {
        self.run_supervised(iterations, stop, &mut NoSupervisor)
    }

    /// Switches to `cfg` between intervals. The metrics address, the log file and the
    /// residency memo are set up once at start, so changes to them need a restart; the
    /// `reload` line names them.
    pub fn reload(&mut self, cfg: Config) {
        let mut restart_needed = Vec::new();
        if cfg.metrics != self.cfg.metrics {
            restart_needed.push("metrics");
        }
        if cfg.log_file != self.cfg.log_file {
            restart_needed.push("log_file");
        }
        if cfg.residency_ttl_secs != self.cfg.residency_ttl_secs {
            restart_needed.push("residency_ttl_secs");
        }
        if cfg.collector != self.cfg.collector {
            restart_needed.push("collector.ebpf");
        }
        if (cfg.metrics_top_processes, cfg.metrics_top_files)
            != (self.cfg.metrics_top_processes, self.cfg.metrics_top_files)
        {
            restart_needed.push("metrics_top_processes/metrics_top_files");
        }
        self.cfg = cfg;
        (self.sink)(&json!({
            "event": "reload",
            "ts": now_unix(),
            "policy": self.cfg.policy,
            "dry_run": self.cfg.dry_run,
            "interval_secs": self.cfg.interval_secs,
            "manage_pinned": self.cfg.manage_pinned,
            "restart_needed": restart_needed,
        }));
    }

    /// [`Daemon::run`], telling `sup` when the daemon is ready, that it is alive (at least
    /// every 100 ms while it waits, and after every interval), and asking it for a new
    /// configuration between intervals.
    pub fn run_supervised(
        &mut self,
        iterations: Option<u64>,
        stop: &AtomicBool,
        sup: &mut dyn Supervisor,
    ) -> ProcResult<()> {
        self.baseline()?;
        sup.ready(&self.cfg);
        let mut done = 0u64;
        let mut period = Duration::from_secs_f64(self.cfg.interval_secs);
        let mut next = Instant::now() + period;
        while !stop.load(Ordering::Relaxed) {
            if iterations.is_some_and(|n| done >= n) {
                break;
            }
            // Sleep in short slices so a signal stops or reloads us promptly.
            while Instant::now() < next && !stop.load(Ordering::Relaxed) {
                sup.alive();
                match sup.reload() {
                    Some(Ok(cfg)) => {
                        self.reload(cfg);
                        let p = Duration::from_secs_f64(self.cfg.interval_secs);
                        if p != period {
                            next = Instant::now() + p;
                            period = p;
                        }
                        sup.ready(&self.cfg);
                    }
                    Some(Err(e)) => {
                        (self.sink)(&json!({"event": "error", "ts": now_unix(),
                            "error": format!("configuration not reloaded, the old one stays: {e}")}));
                        sup.ready(&self.cfg);
                    }
                    None => {}
                }
                let left = next.saturating_duration_since(Instant::now());
                std::thread::sleep(left.min(Duration::from_millis(100)));
            }
            if stop.load(Ordering::Relaxed) {
                break;
            }
            if let Err(e) = self.step() {
                (self.sink)(&json!({"event": "error", "ts": now_unix(), "error": e.to_string()}));
            }
            sup.alive();
            done += 1;
            next += period;
            let now = Instant::now();
            if next < now {
                next = now + period;
            }
        }
        sup.stopping();
        (self.sink)(
            &json!({"event": "stop", "ts": now_unix(), "iterations": done,
            "actions": self.actions_by_kind}),
        );
        Ok(())
    }
}

/// What a service manager wants from the daemon's loop. Every method does nothing by
/// default, which is what a daemon run by hand needs.
pub trait Supervisor {
    /// The first sample is taken (or a reload was handled) and the loop is about to wait.
    fn ready(&mut self, _cfg: &Config) {}
    /// The loop is alive; a watchdog can be fed here.
    fn alive(&mut self) {}
    /// A configuration to switch to, if one was asked for; an error keeps the old one.
    fn reload(&mut self) -> Option<Result<Config, String>> {
        None
    }
    /// The loop is ending.
    fn stopping(&mut self) {}
}

/// No service manager.
pub struct NoSupervisor;

impl Supervisor for NoSupervisor {}

/// How to reach a file the process reads: through the handle found when it was scanned (its
/// descriptor or mapping), else through the process's root, so that a file of another mount
/// namespace is never confused with the file its path names here.
fn pull_target(
    pid: i32,
    view: Option<&ProcessView>,
    path: &std::path::Path,
) -> (FileRef, Option<FileKey>) {
    if let Some(f) = view
        .into_iter()
        .flat_map(|v| v.files.iter())
        .find(|f| f.path == path && f.open.is_some())
    {
        if let Some(fr) = f.file_ref() {
            return (fr, Some((f.dev, f.ino)));
        }
    }
    let rel = path.strip_prefix("/").unwrap_or(path);
    let open = std::path::PathBuf::from(format!("/proc/{pid}/root")).join(rel);
    (
        FileRef {
            path: path.to_path_buf(),
            open,
        },
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::FakeCache;
    use std::sync::Mutex;

    /// A real child reading a file: the daemon in dry-run sees it and logs interval lines;
    /// it never acts, and it survives the child exiting.
    #[test]
    fn dry_run_loop_survives_exit() {
        let cache = FakeCache::default();
        let lines: Mutex<Vec<serde_json::Value>> = Mutex::new(Vec::new());
        let cfg = Config {
            dry_run: true,
            interval_secs: 0.2,
            min_read_bytes_per_sec: crate::config::Bytes(1),
            ..Default::default()
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do cat /proc/self/status > /dev/null; done"])
            .spawn()
            .unwrap();
        {
            let mut d = Daemon::new(
                cfg,
                &cache,
                Some(Arc::new(Metrics::new())),
                Box::new(|v| lines.lock().unwrap().push(v.clone())),
            );
            d.baseline().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let s1 = d.step().unwrap();
            assert!(s1.scanned > 0);
            assert!(s1.io_active >= 1, "{s1:?}");
            assert_eq!(
                s1.numa_io_sources.values().sum::<usize>(),
                s1.io_active,
                "{s1:?}"
            );
            child.kill().unwrap();
            child.wait().unwrap();
            let s2 = d.step().unwrap();
            assert_eq!(s2.actions, 0);
            assert!(d.actions_by_kind.is_empty());
        }
        let lines = lines.into_inner().unwrap();
        assert_eq!(lines[0]["event"], "start");
        // The start line says where per-node counts come from: counted by eBPF, or
        // estimated with the reason.
        match lines[0]["numa_io_source"].as_str() {
            Some("ebpf") => assert!(lines[0]["fallback_reason"].is_null()),
            Some("estimate") => assert!(
                !lines[0]["fallback_reason"]
                    .as_str()
                    .unwrap_or("")
                    .is_empty(),
                "{}",
                lines[0]
            ),
            other => panic!("numa_io_source {other:?} in {}", lines[0]),
        }
        for d in lines.iter().filter(|l| l["event"] == "decision") {
            assert!(
                ["ebpf", "mount", "estimate"].contains(&d["read_source"].as_str().unwrap_or("")),
                "{d}"
            );
        }
        assert_eq!(lines.iter().filter(|l| l["event"] == "interval").count(), 2);
        assert!(lines
            .iter()
            .all(|l| l["event"] != "decision" || l["verdict"] != "act"));
    }

    /// `[collector] ebpf = false` estimates, and the start line says why.
    #[test]
    fn collector_off_is_logged_at_start() {
        let cache = FakeCache::default();
        let lines: Mutex<Vec<serde_json::Value>> = Mutex::new(Vec::new());
        let mut cfg = Config::default();
        cfg.collector.ebpf = false;
        {
            let mut d = Daemon::new(
                cfg,
                &cache,
                None,
                Box::new(|v| lines.lock().unwrap().push(v.clone())),
            );
            assert!(!d.ebpf());
            d.baseline().unwrap();
        }
        let lines = lines.into_inner().unwrap();
        assert_eq!(lines[0]["numa_io_source"], "estimate");
        assert!(
            lines[0]["fallback_reason"]
                .as_str()
                .unwrap()
                .contains("not asked for"),
            "{}",
            lines[0]
        );
    }

    /// A process whose /proc files do not answer is logged as unresponsive, left out of
    /// the decisions, and the interval ends within the read limit.
    #[test]
    fn a_stuck_process_is_skipped_and_logged() {
        let cache = FakeCache::default();
        let lines: Mutex<Vec<serde_json::Value>> = Mutex::new(Vec::new());
        let cfg = Config {
            dry_run: true,
            interval_secs: 0.2,
            min_read_bytes_per_sec: crate::config::Bytes(1),
            ..Default::default()
        };
        let mut child = std::process::Command::new("sh")
            .args(["-c", "while :; do read x < /proc/self/status; done"])
            .spawn()
            .unwrap();
        let stuck = child.id() as i32;
        {
            let mut d = Daemon::new(
                cfg,
                &cache,
                None,
                Box::new(|v| lines.lock().unwrap().push(v.clone())),
            );
            d.stall_pids = vec![stuck];
            d.baseline().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let t = Instant::now();
            let s = d.step().unwrap();
            assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());
            assert_eq!(s.unresponsive, 1, "{s:?}");
            assert!(s.scanned > 0);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        let lines = lines.into_inner().unwrap();
        let u: Vec<_> = lines
            .iter()
            .filter(|l| l["event"] == "unresponsive")
            .collect();
        // The baseline scan logs nothing; the interval logs the process once.
        assert_eq!(u.len(), 1, "{lines:?}");
        assert_eq!(u[0]["pid"], stuck);
        assert_eq!(u[0]["file"], format!("/proc/{stuck}/stat"));
        assert!(lines
            .iter()
            .all(|l| l["event"] != "decision" || l["pid"] != stuck));
    }

    fn decision(pid: i32, start_ticks: u64, action: Action) -> Decision {
        Decision {
            pid,
            start_ticks,
            comm: "x".into(),
            policy: crate::config::PolicyKind::Auto,
            read_source: Default::default(),
            verdict: Verdict::Act,
            action: Some(action),
            reason: String::new(),
            numbers: Default::default(),
        }
    }

    /// Vanished files, exited and reused pids become outcomes, not daemon failures.
    #[test]
    fn execute_failures_are_outcomes() {
        let cache = FakeCache::with(&[("/present", 4096, &[(1, 4096)])]);
        let mut d = Daemon::new(Config::default(), &cache, None, Box::new(|_| {}));
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let st = numaio_procfs::read_stat(pid).unwrap().start_ticks;
        let pull = |files: &[&str]| Action::PullData {
            to: 0,
            files: files
                .iter()
                .map(|p| policy::PullFile {
                    path: p.into(),
                    remote_bytes: 4096,
                })
                .collect(),
        };
        // Every file vanished: failed.
        let e = d
            .execute(&decision(pid, st, pull(&["/gone"])), &[])
            .unwrap_err();
        assert!(e.to_string().contains("/gone"), "{e}");
        // One of two vanished: done, with the error per file.
        let r = d
            .execute(&decision(pid, st, pull(&["/gone", "/present"])), &[])
            .unwrap();
        assert_eq!(r["moved_bytes"], 4096);
        assert!(r["files"][0]["error"].is_string());
        // A reused pid (other start time) is never acted on.
        let follow = Action::FollowData {
            to: 0,
            cpus: vec![0],
            migrate_memory: false,
        };
        assert!(d
            .execute(&decision(pid, st + 1, follow.clone()), &[])
            .unwrap_err()
            .is_gone());
        // Killed but not yet collected (a zombie): gone too.
        child.kill().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(numaio_procfs::read_stat(pid).unwrap().state, 'Z');
        assert!(d
            .execute(&decision(pid, st, follow.clone()), &[])
            .unwrap_err()
            .is_gone());
        child.wait().unwrap();
        assert!(d
            .execute(&decision(pid, st, follow), &[])
            .unwrap_err()
            .is_gone());
    }

    /// A pulled file is reached through the handle its scan found; without one, through
    /// the process's root, never through the path in our own namespace.
    #[test]
    fn pull_targets_use_proc_handles() {
        let file = crate::sample::FileView {
            path: "/tmp/x".into(),
            open: Some("/proc/42/fd/3".into()),
            dev: 7,
            ino: 9,
            ..Default::default()
        };
        let v = ProcessView {
            pid: 42,
            files: vec![file],
            ..Default::default()
        };
        let (fr, key) = pull_target(42, Some(&v), std::path::Path::new("/tmp/x"));
        assert_eq!(fr.open, std::path::PathBuf::from("/proc/42/fd/3"));
        assert_eq!(fr.path, std::path::PathBuf::from("/tmp/x"));
        assert_eq!(key, Some((7, 9)));
        let (fr, key) = pull_target(42, None, std::path::Path::new("/tmp/x"));
        assert_eq!(fr.open, std::path::PathBuf::from("/proc/42/root/tmp/x"));
        assert_eq!(key, None);
    }
}
