//! The daemon's decision core: pure functions from process views, node state and history
//! to decisions. No system calls here, so every rule is unit-tested with synthetic inputs.
//!
//! A process is a *candidate* when it reads at least `min_read_bytes_per_sec` and the
//! estimated remote share of its reads exceeds `remote_threshold`. Candidates get a plan:
//!
//! * **follow-data** (Adams, Jericho): move the process to the CPU node holding the largest
//!   share of its recent reads' cache, if that share beats the current node's by the win
//!   factor (Tofalos), the process has stayed put for `min_residence_secs`, the node is not
//!   CPU-congested and has room for the memory that moves with it.
//! * **pull-data**: migrate the remote cached pages of the files it reads to the node it runs
//!   on — but never a file that readers on other nodes use (that would ping-pong the file).
//! * **auto**: reads under 128 KiB gain nothing (Adams) and are left alone; a file shared
//!   across nodes can only be followed; otherwise the process moves when Adams's model
//!   I = M − P/F·R promises at least `min_gain` *and* it drags fewer bytes than pulling the
//!   cache would; else the data is pulled. If the chosen plan is vetoed the other is tried.
//!
//! Candidates are then served in order of remote read bytes until the per-interval caps on
//! actions and bytes are used up.
//!
//! When the world carries the machine's [`Costs`] (its `numaio probe` profile, or one built
//! from the SLIT distances), the gain of moving a process is the cost model's prediction for
//! this machine rather than the configured M and R, and every decision logs it.

use crate::config::{Config, PolicyKind};
use crate::guards::{self, Budget};
use crate::io_source::NumaIoSource;
use crate::sample::ProcessView;
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::PathBuf;

/// What the daemon knows about a node this interval.
#[derive(Debug, Clone)]
pub struct NodeState {
    pub id: u32,
    pub cpus: Vec<u32>,
    pub free_bytes: u64,
    /// Fraction of the node's CPU time busy during the last interval.
    pub cpu_util: f64,
}

/// The machine this interval.
#[derive(Debug, Clone)]
pub struct World {
    pub nodes: Vec<NodeState>,
    /// Seconds on a monotonic clock.
    pub now: f64,
    /// The machine's NUMA costs, when known.
    pub costs: Option<Costs>,
}

/// The machine's NUMA costs for predicting the gain of a move.
#[derive(Debug, Clone)]
pub struct Costs {
    pub profile: numaio_model::Profile,
    /// Where the profile came from (a saved probe, or the SLIT distances and why).
    pub source: String,
}

impl Costs {
    /// This machine's saved profile if it matches the machine, else one from SLIT distances.
    pub fn for_topology(topo: &numaio_sys::Topology) -> Costs {
        let (profile, source) = numaio_model::shipped::local_or_slit(topo);
        Costs { profile, source }
    }

    /// Predicted fraction of run time saved by moving a reader of `file_bytes` in `bs`-byte
    /// requests, with `process_bytes` of its own memory, from node `cur` to node `to` where
    /// its data is; `None` when the profile does not know the nodes.
    pub fn move_gain(
        &self,
        cur: u32,
        to: u32,
        file_bytes: u64,
        process_bytes: u64,
        bs: u64,
    ) -> Option<f64> {
        numaio_model::model::move_gain(&self.profile, cur, to, file_bytes, process_bytes, bs)
            .ok()
            .filter(|g| g.is_finite())
    }
}

impl World {
    pub(crate) fn node(&self, id: u32) -> Option<&NodeState> {
        self.nodes.iter().find(|n| n.id == id)
    }
    pub(crate) fn utils(&self) -> BTreeMap<u32, f64> {
        self.nodes
            .iter()
            .filter(|n| !n.cpus.is_empty())
            .map(|n| (n.id, n.cpu_util))
            .collect()
    }
}

/// A process identity that survives pid reuse.
pub type ProcKey = (i32, u64);

/// What the daemon did before, for residence times and sharing.
#[derive(Debug, Default, Clone)]
pub struct History {
    /// Last move of each process: (time, target node).
    pub proc_moves: HashMap<ProcKey, (f64, u32)>,
    /// Processes the daemon pinned itself (their narrow affinity is ours, not the user's).
    pub managed: HashSet<ProcKey>,
    pub file_moves: HashMap<PathBuf, f64>,
    /// Nodes that recently read each file, with the time last seen.
    pub readers: HashMap<PathBuf, BTreeMap<u32, f64>>,
}

impl History {
    /// Records which node reads which file, forgetting readers not seen for `keep` seconds.
    pub fn note_readers(&mut self, views: &[ProcessView], now: f64, keep: f64) {
        for v in views {
            let Some(node) = v.main_node else { continue };
            if v.read_bytes == 0 {
                continue;
            }
            for f in read_files(v) {
                self.readers
                    .entry(f.path.clone())
                    .or_default()
                    .insert(node, now);
            }
        }
        self.readers.retain(|_, m| {
            m.retain(|_, t| now - *t <= keep);
            !m.is_empty()
        });
        self.file_moves.retain(|_, t| now - *t <= keep.max(3600.0));
    }

    /// Records a carried-out action.
    pub fn record(&mut self, d: &Decision, now: f64) {
        match &d.action {
            Some(Action::FollowData { to, .. }) => {
                self.proc_moves.insert((d.pid, d.start_ticks), (now, *to));
                self.managed.insert((d.pid, d.start_ticks));
            }
            Some(Action::PullData { files, .. }) => {
                for f in files {
                    self.file_moves.insert(f.path.clone(), now);
                }
            }
            None => {}
        }
    }

    /// Forgets processes that no longer exist.
    pub fn retain_processes(&mut self, alive: &HashSet<ProcKey>) {
        self.proc_moves.retain(|k, _| alive.contains(k));
        self.managed.retain(|k| alive.contains(k));
    }
}

/// The files a process is evidently reading: those whose offsets moved, else every open or
/// mapped file with cached pages.
pub(crate) fn read_files(v: &ProcessView) -> Vec<&crate::sample::FileView> {
    let moved: Vec<_> = v
        .files
        .iter()
        .filter(|f| f.advanced_bytes > 0 && f.cached_bytes > 0 && !f.write_only)
        .collect();
    if !moved.is_empty() {
        return moved;
    }
    v.files
        .iter()
        .filter(|f| f.cached_bytes > 0 && !f.write_only)
        .collect()
}

/// `v`'s file read rate ([`file_read_rate`]) split over the files it reads the way the read
/// estimate splits it: by how far their offsets moved, else by their cached bytes.
pub fn file_read_rates(v: &ProcessView) -> Vec<(&crate::sample::FileView, f64)> {
    let rate = file_read_rate(v);
    if !rate.is_finite() || rate <= 0.0 {
        return Vec::new();
    }
    let files = read_files(v);
    let by_offset = files.iter().any(|f| f.advanced_bytes > 0);
    let weight = |f: &crate::sample::FileView| {
        (if by_offset {
            f.advanced_bytes
        } else {
            f.cached_bytes
        }) as f64
    };
    let total: f64 = files.iter().map(|f| weight(f)).sum();
    if total <= 0.0 {
        return Vec::new();
    }
    files
        .into_iter()
        .map(|f| (f, rate * weight(f) / total))
        .collect()
}

/// One file's share of a pull.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PullFile {
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    pub path: PathBuf,
    /// Its cached bytes not on the target node.
    pub remote_bytes: u64,
}

/// A planned action.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum Action {
    FollowData {
        to: u32,
        cpus: Vec<u32>,
        migrate_memory: bool,
    },
    PullData {
        to: u32,
        files: Vec<PullFile>,
    },
}

impl Action {
    pub fn kind(&self) -> &'static str {
        match self {
            Action::FollowData { .. } => "follow-data",
            Action::PullData { .. } => "pull-data",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// To be carried out.
    Act,
    /// Dry run: printed, not carried out.
    Advise,
    /// A guard vetoed it.
    Blocked,
    /// Not the daemon's business (excluded, pinned by the user, small reads).
    Skipped,
}

/// The numbers behind a decision.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Numbers {
    pub read_bytes: u64,
    pub read_bytes_per_sec: f64,
    pub avg_read_bytes: u64,
    pub current_node: u32,
    pub read_share: BTreeMap<u32, f64>,
    pub remote_share: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_node: Option<u32>,
    pub bytes_to_move: u64,
    pub rss_bytes: u64,
    /// F: total size of the files being read.
    pub file_bytes: u64,
    /// Adams's I = M − P/F·R for moving the process (auto).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_gain: Option<f64>,
    /// The cost model's predicted fraction of run time saved by moving the process to the
    /// node holding most of its data (weighted by how much more of its data is there).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicted_gain: Option<f64>,
    /// Where the prediction's costs came from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gain_source: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pull_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub follow_bytes: Option<u64>,
    /// Readers of shared files per node, when sharing mattered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub shared_files: Vec<PathBuf>,
    /// Bytes of the interval's file reads served from other nodes than the process's:
    /// counted when `read_source` is exact, estimated otherwise.
    pub remote_read_bytes: u64,
    /// `tofalos`: the rule that led to the decision (`bandwidth-congestion`,
    /// `cpu-congestion`, `locality`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rule: Option<&'static str>,
    /// `tofalos`: each node's load this interval, reads × read_weight + writes (bytes),
    /// after the moves decided before this one.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub node_load_bytes: BTreeMap<u32, f64>,
    /// `tofalos`: the mean of `node_load_bytes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_load_bytes: Option<f64>,
    /// `tofalos`: b, the bytes the process wrote this interval (the load that follows it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub moved_load_bytes: Option<f64>,
    /// `tofalos`: (bytes(n) − mean) + b for the target n; a move needs it ≤ 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target_surplus_bytes: Option<f64>,
    /// `tofalos`: the process's bytes read and written per node this interval.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub io_bytes_by_node: BTreeMap<u32, u64>,
}

/// One decision about one process.
#[derive(Debug, Clone, Serialize)]
pub struct Decision {
    pub pid: i32,
    #[serde(skip)]
    pub start_ticks: u64,
    pub comm: String,
    pub policy: PolicyKind,
    /// Where the per-node counts behind the decision came from (`ebpf`, `mount`,
    /// `estimate`).
    pub read_source: NumaIoSource,
    pub verdict: Verdict,
    pub action: Option<Action>,
    pub reason: String,
    pub numbers: Numbers,
}

type Plan = Result<(Action, u64, String), String>;

fn share(v: &ProcessView, n: u32) -> f64 {
    v.read_distribution.get(&n).copied().unwrap_or(0.0)
}

/// "counted" or "estimated", for reasons.
pub(crate) fn how(v: &ProcessView) -> &'static str {
    if v.numa_io_source.is_exact() {
        "counted"
    } else {
        "estimated"
    }
}

/// The share of `v`'s file reads served from nodes other than `cur`, and those bytes. With
/// an exact source: the collector's remote bytes (the data's node against the node of the
/// CPU that copied it), else its per-node counts against `cur`; otherwise the estimate.
pub fn remote_reads(v: &ProcessView, cur: u32) -> (f64, u64) {
    let ratio = |part: u64, total: u64| {
        if total == 0 {
            0.0
        } else {
            part as f64 / total as f64
        }
    };
    if v.numa_io_source.is_exact() {
        if let (Some(l), Some(r)) = (v.local_bytes, v.remote_bytes) {
            return (
                ratio(r.read_bytes, l.read_bytes + r.read_bytes),
                r.read_bytes,
            );
        }
        let total: u64 = v.numa_read_bytes.values().sum();
        let remote: u64 = v
            .numa_read_bytes
            .iter()
            .filter(|(&n, _)| n != cur)
            .map(|(_, &b)| b)
            .sum();
        return (ratio(remote, total), remote);
    }
    let s = 1.0 - share(v, cur);
    (s, (v.read_bytes as f64 * s) as u64)
}

/// Bytes per second `v` read from files: with an exact source the page-cache bytes it
/// counted (pipes and sockets excluded), else `rchar`'s rate.
pub fn file_read_rate(v: &ProcessView) -> f64 {
    if v.numa_io_source.is_exact() && v.interval_secs > 0.0 {
        v.numa_read_bytes.values().sum::<u64>() as f64 / v.interval_secs
    } else {
        v.read_bytes_per_sec
    }
}

/// The follow-data action moving `v` to node `to` (its CPUs within the cpuset), with its
/// memory when enough of it is elsewhere and the target keeps `min_free_bytes` free.
/// Returns the action and the bytes it migrates.
pub(crate) fn follow_to(
    cfg: &Config,
    w: &World,
    v: &ProcessView,
    to: u32,
) -> Result<(Action, u64), String> {
    let cpus: Vec<u32> = w
        .node(to)
        .map(|n| {
            n.cpus
                .iter()
                .copied()
                .filter(|c| v.cpuset_cpus.contains(c))
                .collect()
        })
        .unwrap_or_default();
    if cpus.is_empty() {
        return Err(format!(
            "node {to} has no CPUs in the process's cpuset {}",
            numaio_sys::cpulist::format(&v.cpuset_cpus)
        ));
    }
    let remote_mem: u64 = v
        .memory_per_node
        .iter()
        .filter(|(&n, _)| n != to)
        .map(|(_, &b)| b)
        .sum();
    // A small process only moves its threads: its new memory is allocated on the new node
    // anyway (first touch), and migrating a busy process's pages costs the daemon retries
    // and TLB shootdowns out of proportion to the gain.
    let migrate = cfg.migrate_memory && remote_mem >= cfg.min_migrate_bytes.0;
    let incoming = if migrate { remote_mem } else { 0 };
    let free = w.node(to).map_or(0, |n| n.free_bytes);
    guards::free_memory(to, free, incoming, cfg.min_free_bytes.0)?;
    Ok((
        Action::FollowData {
            to,
            cpus,
            migrate_memory: migrate,
        },
        incoming,
    ))
}

fn plan_follow(cfg: &Config, w: &World, h: &History, v: &ProcessView, cur: u32) -> Plan {
    // The CPU node with the largest share the process may run on.
    let mut best: Option<(u32, f64, Vec<u32>)> = None;
    for n in &w.nodes {
        if n.cpus.is_empty() {
            continue;
        }
        let cpus: Vec<u32> = n
            .cpus
            .iter()
            .copied()
            .filter(|c| v.cpuset_cpus.contains(c))
            .collect();
        if cpus.is_empty() {
            continue;
        }
        let s = share(v, n.id);
        if best.as_ref().is_none_or(|b| s > b.1) {
            best = Some((n.id, s, cpus));
        }
    }
    let Some((to, s, _)) = best else {
        return Err("no node with CPUs in the process's cpuset".into());
    };
    if to == cur {
        return Err(format!(
            "the data is mostly on nodes the process cannot run on; node {cur} is already the best it may use"
        ));
    }
    guards::wins(s, share(v, cur), cfg.win_factor)?;
    let since = h
        .proc_moves
        .get(&(v.pid, v.start_ticks))
        .map(|(t, _)| w.now - t);
    guards::residence(since, cfg.min_residence_secs, "the process")?;
    if let Some(why) = guards::cpu_congested(to, &w.utils(), cfg.cpu_busy_threshold) {
        return Err(why);
    }
    let (action, incoming) = follow_to(cfg, w, v, to)?;
    let reason = format!(
        "{:.0} % of its reads are {} to come from node {to}'s cache, {:.0} % from node {cur} where it runs",
        s * 100.0,
        how(v),
        share(v, cur) * 100.0
    );
    Ok((action, incoming, reason))
}

/// Nodes other than `node` that recently read `path`.
fn other_readers(h: &History, path: &PathBuf, node: u32) -> BTreeSet<u32> {
    h.readers
        .get(path)
        .map(|m| m.keys().copied().filter(|&n| n != node).collect())
        .unwrap_or_default()
}

fn plan_pull(
    cfg: &Config,
    w: &World,
    h: &History,
    v: &ProcessView,
    cur: u32,
    nums: &mut Numbers,
) -> Plan {
    let Some(node) = w.node(cur) else {
        return Err(format!("node {cur} is unknown"));
    };
    let mut files = Vec::new();
    let mut notes = Vec::new();
    for f in read_files(v) {
        let remote = f.cached_bytes - f.nodes.get(&cur).copied().unwrap_or(0);
        if remote == 0 {
            continue;
        }
        let others = other_readers(h, &f.path, cur);
        if !others.is_empty() {
            nums.shared_files.push(f.path.clone());
            notes.push(format!(
                "{} is also read from node(s) {:?}: pulling it would make it ping-pong",
                f.path.display(),
                others
            ));
            continue;
        }
        let since = h.file_moves.get(&f.path).map(|t| w.now - t);
        if let Err(e) =
            guards::residence(since, cfg.min_residence_secs, &f.path.display().to_string())
        {
            notes.push(e);
            continue;
        }
        files.push(PullFile {
            path: f.path.clone(),
            remote_bytes: remote,
        });
    }
    if files.is_empty() {
        return Err(if notes.is_empty() {
            "no remote cached pages to pull".into()
        } else {
            notes.join("; ")
        });
    }
    let incoming: u64 = files.iter().map(|f| f.remote_bytes).sum();
    guards::free_memory(cur, node.free_bytes, incoming, cfg.min_free_bytes.0)?;
    let reason = format!(
        "{:.0} % of its reads are {} remote; pulling {incoming} cached bytes of {} file(s) to node {cur} where it runs",
        nums.remote_share * 100.0,
        how(v),
        files.len()
    );
    Ok((Action::PullData { to: cur, files }, incoming, reason))
}

/// The CPU node in the process's cpuset holding the largest share of its reads.
fn best_share_node(w: &World, v: &ProcessView) -> Option<u32> {
    let mut best: Option<(u32, f64)> = None;
    for n in w.nodes.iter().filter(|n| !n.cpus.is_empty()) {
        if !n.cpus.iter().any(|c| v.cpuset_cpus.contains(c)) {
            continue;
        }
        let s = share(v, n.id);
        if best.is_none_or(|b| s > b.1) {
            best = Some((n.id, s));
        }
    }
    best.map(|b| b.0)
}

/// The model's gain for moving `v` from `cur` to the node with most of its data, scaled by
/// how much more of its reads that node serves than `cur` does.
fn predicted_gain(w: &World, v: &ProcessView, cur: u32, file_bytes: u64) -> Option<f64> {
    let costs = w.costs.as_ref()?;
    let to = best_share_node(w, v).filter(|&to| to != cur)?;
    let bs = v.avg_read_bytes.max(4096);
    let g = costs.move_gain(cur, to, file_bytes.max(1), v.rss_bytes, bs)?;
    Some(g * (share(v, to) - share(v, cur)).max(0.0))
}

/// Adams's model for moving the process: I = M − (P/F)·R.
pub fn follow_gain(max_gain: f64, reduction: f64, process_bytes: u64, file_bytes: u64) -> f64 {
    if file_bytes == 0 {
        return f64::NEG_INFINITY;
    }
    max_gain - process_bytes as f64 / file_bytes as f64 * reduction
}

/// Whether `v` is a candidate: I/O-active and mostly remote. Returns its node and the
/// remote share of its reads (counted where the source is exact, else estimated).
pub fn candidate(cfg: &Config, v: &ProcessView) -> Option<(u32, f64)> {
    let cur = v.main_node?;
    if v.pid <= 1
        || v.read_distribution.is_empty()
        || file_read_rate(v) < cfg.min_read_bytes_per_sec.0 as f64
    {
        return None;
    }
    let (remote_share, _) = remote_reads(v, cur);
    (remote_share > cfg.remote_threshold).then_some((cur, remote_share))
}

/// Decides, for every process view, whether and how to act.
pub fn decide(cfg: &Config, w: &World, views: &[ProcessView], h: &History) -> Vec<Decision> {
    if cfg.policy == PolicyKind::Tofalos {
        return crate::tofalos::decide(cfg, w, views, h);
    }
    let mut out: Vec<(Decision, u64)> = Vec::new();
    for v in views {
        let Some((cur, remote_share)) = candidate(cfg, v) else {
            continue;
        };
        let rf = read_files(v);
        let mut nums = Numbers {
            read_bytes: v.read_bytes,
            read_bytes_per_sec: v.read_bytes_per_sec,
            avg_read_bytes: v.avg_read_bytes,
            current_node: cur,
            read_share: v.read_distribution.clone(),
            remote_share,
            rss_bytes: v.rss_bytes,
            file_bytes: rf.iter().map(|f| f.size_bytes.max(f.cached_bytes)).sum(),
            ..Default::default()
        };
        nums.predicted_gain = predicted_gain(w, v, cur, nums.file_bytes);
        if nums.predicted_gain.is_some() {
            nums.gain_source = w.costs.as_ref().map(|c| c.source.clone());
        }
        let (_, remote_read) = remote_reads(v, cur);
        nums.remote_read_bytes = remote_read;
        let mut d = Decision::about(v, cfg.policy);
        let skip = skip_reason(cfg, h, v);
        if let Some(why) = skip {
            d.reason = why;
            d.numbers = nums;
            out.push((d, remote_read));
            continue;
        }
        let plan = match cfg.policy {
            PolicyKind::FollowData | PolicyKind::Tofalos => plan_follow(cfg, w, h, v, cur),
            PolicyKind::PullData => plan_pull(cfg, w, h, v, cur, &mut nums),
            PolicyKind::Auto => plan_auto(cfg, w, h, v, cur, &mut nums),
        };
        match plan {
            Ok((action, bytes, reason)) => {
                nums.target_node = Some(match &action {
                    Action::FollowData { to, .. } | Action::PullData { to, .. } => *to,
                });
                nums.bytes_to_move = bytes;
                d.action = Some(action);
                d.verdict = if cfg.dry_run {
                    Verdict::Advise
                } else {
                    Verdict::Act
                };
                d.reason = reason;
            }
            Err(why) if why.starts_with("skip: ") => {
                d.reason = why.trim_start_matches("skip: ").to_string();
            }
            Err(why) => {
                d.verdict = Verdict::Blocked;
                d.reason = why;
            }
        }
        d.numbers = nums;
        out.push((d, remote_read));
    }
    within_caps(cfg, out)
}

impl Decision {
    /// A decision about `v` under `policy`, skipped until a plan says otherwise.
    pub(crate) fn about(v: &ProcessView, policy: PolicyKind) -> Decision {
        Decision {
            pid: v.pid,
            start_ticks: v.start_ticks,
            comm: v.comm.clone(),
            policy,
            read_source: v.numa_io_source,
            verdict: Verdict::Skipped,
            action: None,
            reason: String::new(),
            numbers: Numbers::default(),
        }
    }
}

/// Why `v` is none of the daemon's business: the filter, or an affinity its user narrowed.
pub(crate) fn skip_reason(cfg: &Config, h: &History, v: &ProcessView) -> Option<String> {
    guards::filter(&cfg.filter, v.pid, &v.comm, &v.cgroup)
        .err()
        .or_else(|| {
            (v.pinned && !cfg.manage_pinned && !h.managed.contains(&(v.pid, v.start_ticks)))
                .then(|| {
                    format!(
                    "pinned by the user (affinity {} inside cpuset {}); use --manage-pinned to move it",
                    numaio_sys::cpulist::format(&v.cpus_allowed),
                    numaio_sys::cpulist::format(&v.cpuset_cpus)
                )
                })
        })
}

/// Serves the decisions with the largest `weight` first (the biggest remote readers),
/// blocking those past the per-interval caps on actions and bytes.
pub(crate) fn within_caps(cfg: &Config, mut out: Vec<(Decision, u64)>) -> Vec<Decision> {
    out.sort_by_key(|(_, r)| std::cmp::Reverse(*r));
    let mut budget = Budget::new(cfg.max_actions_per_interval, cfg.max_bytes_per_interval.0);
    out.into_iter()
        .map(|(mut d, _)| {
            if matches!(d.verdict, Verdict::Act | Verdict::Advise) {
                if let Err(why) = budget.take(d.numbers.bytes_to_move) {
                    d.verdict = Verdict::Blocked;
                    d.reason = format!("{}; {why}", d.reason);
                }
            }
            d
        })
        .collect()
}

fn plan_auto(
    cfg: &Config,
    w: &World,
    h: &History,
    v: &ProcessView,
    cur: u32,
    nums: &mut Numbers,
) -> Plan {
    let m = &cfg.auto;
    if v.avg_read_bytes > 0 && v.avg_read_bytes < m.large_read_bytes.0 {
        return Err(format!(
            "skip: reads average {} bytes, below {}: Adams measured no gain from locality for small reads",
            v.avg_read_bytes, m.large_read_bytes.0
        ));
    }
    // The machine's cost model when known; Adams's I = M − P/F·R with the configured M, R else.
    let gain = nums
        .predicted_gain
        .unwrap_or_else(|| follow_gain(m.max_gain, m.reduction, v.rss_bytes, nums.file_bytes));
    nums.follow_gain = Some(if gain.is_finite() { gain } else { -1.0 });
    let shared = read_files(v)
        .iter()
        .any(|f| !other_readers(h, &f.path, cur).is_empty());
    let mem: u64 = v.memory_per_node.values().sum();
    let follow_bytes: u64 = if cfg.migrate_memory && mem >= cfg.min_migrate_bytes.0 {
        mem
    } else {
        0
    };
    let pull_bytes: u64 = read_files(v)
        .iter()
        .map(|f| f.cached_bytes - f.nodes.get(&cur).copied().unwrap_or(0))
        .sum();
    nums.follow_bytes = Some(follow_bytes);
    nums.pull_bytes = Some(pull_bytes);
    let follow_worth = gain >= m.min_gain;
    let why_choice;
    let first_follow = if shared {
        why_choice = "the file is shared with readers on other nodes, so only the process may move";
        true
    } else if follow_worth && follow_bytes < pull_bytes {
        why_choice = "moving the process drags fewer bytes than pulling the cache, and I = M - P/F*R promises a gain";
        true
    } else {
        why_choice = if follow_worth {
            "pulling the cache moves fewer bytes than moving the process"
        } else {
            "the process is too large for its files to gain by moving (I = M - P/F*R below min_gain)"
        };
        false
    };
    let (first, second) = if first_follow {
        (plan_follow(cfg, w, h, v, cur), None)
    } else {
        (
            plan_pull(cfg, w, h, v, cur, nums),
            follow_worth.then(|| plan_follow(cfg, w, h, v, cur)),
        )
    };
    if shared && !follow_worth {
        return Err(format!(
            "the file is shared across nodes (cannot pull) and moving the process gains too little (I = {gain:.3} < {})",
            m.min_gain
        ));
    }
    match (first, second) {
        (Ok((a, b, r)), _) => Ok((a, b, format!("{r} (auto: {why_choice})"))),
        (Err(e1), Some(Ok((a, b, r)))) => {
            Ok((a, b, format!("{r} (auto: pulling was vetoed: {e1})")))
        }
        (Err(e1), Some(Err(e2))) => Err(format!("pull vetoed: {e1}; follow vetoed: {e2}")),
        (Err(e1), None) => Err(e1),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::config::Filter;
    use crate::sample::FileView;

    const GB: u64 = 1 << 30;
    const MB: u64 = 1 << 20;

    /// Two nodes of two CPUs, 8 GiB free and 20 % busy each.
    pub(crate) fn world() -> World {
        World {
            nodes: vec![
                NodeState {
                    id: 0,
                    cpus: vec![0, 1],
                    free_bytes: 8 * GB,
                    cpu_util: 0.2,
                },
                NodeState {
                    id: 1,
                    cpus: vec![2, 3],
                    free_bytes: 8 * GB,
                    cpu_util: 0.2,
                },
            ],
            now: 100.0,
            costs: None,
        }
    }

    /// A reader on `node` whose one file `path` has `cache` bytes per node.
    fn reader(pid: i32, node: u32, path: &str, cache: &[(u32, u64)]) -> ProcessView {
        let nodes: BTreeMap<u32, u64> = cache.iter().copied().collect();
        let cached: u64 = nodes.values().sum();
        let total = cached as f64;
        ProcessView {
            pid,
            start_ticks: 1000 + pid as u64,
            comm: "reader".into(),
            uid: 0,
            cgroup: "/".into(),
            mount_ns: Default::default(),
            mount_ns_inode: None,
            threads: 1,
            thread_nodes: [(node, 1)].into_iter().collect(),
            main_node: Some(node),
            cpus_allowed: vec![0, 1, 2, 3],
            mems_allowed: vec![0, 1],
            cpuset_cpus: vec![0, 1, 2, 3],
            pinned: false,
            memory_per_node: [(node, 10 * MB)].into_iter().collect(),
            rss_bytes: 10 * MB,
            interval_secs: 1.0,
            read_bytes: 200 * MB,
            write_bytes: 0,
            read_bytes_per_sec: 200.0 * MB as f64,
            write_bytes_per_sec: 0.0,
            avg_read_bytes: MB,
            cpu_percent: 50.0,
            files: vec![FileView {
                path: PathBuf::from(path),
                via: "fd".into(),
                size_bytes: cached,
                cached_bytes: cached,
                nodes: nodes.clone(),
                advanced_bytes: 200 * MB,
                write_only: false,
                error: None,
                ..Default::default()
            }],
            read_distribution: nodes.iter().map(|(&n, &b)| (n, b as f64 / total)).collect(),
            locality: None,
            numa_io: BTreeMap::new(),
            numa_read_bytes: BTreeMap::new(),
            errors: vec![],
            ..Default::default()
        }
    }

    fn cfg(p: PolicyKind) -> Config {
        Config {
            policy: p,
            min_migrate_bytes: crate::config::Bytes(0),
            ..Default::default()
        }
    }

    #[test]
    fn small_process_moves_threads_only() {
        let v = reader(100, 0, "/f", &[(1, GB)]);
        let mut c = cfg(PolicyKind::FollowData);
        c.min_migrate_bytes = crate::config::Bytes(16 * MB);
        let d = decide(&c, &world(), &[v], &History::default());
        assert_eq!(
            d[0].action,
            Some(Action::FollowData {
                to: 1,
                cpus: vec![2, 3],
                migrate_memory: false
            })
        );
        assert_eq!(d[0].numbers.bytes_to_move, 0);
    }

    #[test]
    fn follow_moves_reader_to_data_node() {
        let v = reader(100, 0, "/f", &[(1, GB)]);
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[v],
            &History::default(),
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].verdict, Verdict::Act);
        assert_eq!(
            d[0].action,
            Some(Action::FollowData {
                to: 1,
                cpus: vec![2, 3],
                migrate_memory: true
            })
        );
        assert_eq!(d[0].numbers.bytes_to_move, 10 * MB);
        assert!((d[0].numbers.remote_share - 1.0).abs() < 1e-9);
    }

    #[test]
    fn local_slow_and_unknown_readers_are_not_candidates() {
        let local = reader(100, 1, "/f", &[(1, GB)]);
        let mut slow = reader(101, 0, "/f", &[(1, GB)]);
        slow.read_bytes_per_sec = 1000.0;
        let mut mixed = reader(102, 0, "/f", &[(0, 6 * MB), (1, 4 * MB)]);
        mixed.pid = 102;
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[local, slow, mixed],
            &History::default(),
        );
        assert!(d.is_empty(), "{d:?}");
    }

    #[test]
    fn dry_run_advises() {
        let mut c = cfg(PolicyKind::FollowData);
        c.dry_run = true;
        let d = decide(
            &c,
            &world(),
            &[reader(100, 0, "/f", &[(1, GB)])],
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Advise);
        assert!(d[0].action.is_some());
    }

    #[test]
    fn win_factor_blocks_near_even_split() {
        // 60 % remote: a candidate, but 0.6 < 2 × 0.4.
        let v = reader(100, 0, "/f", &[(0, 40 * MB), (1, 60 * MB)]);
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[v],
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Blocked);
        assert!(d[0].reason.contains("win factor"), "{}", d[0].reason);
    }

    #[test]
    fn residence_time_blocks_a_second_move() {
        let v = reader(100, 0, "/f", &[(1, GB)]);
        let mut h = History::default();
        h.proc_moves.insert((100, 1100), (95.0, 0));
        h.managed.insert((100, 1100));
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            std::slice::from_ref(&v),
            &h,
        );
        assert_eq!(d[0].verdict, Verdict::Blocked);
        assert!(d[0].reason.contains("minimum residence"));
        let mut w = world();
        w.now = 200.0;
        assert_eq!(
            decide(&cfg(PolicyKind::FollowData), &w, &[v], &h)[0].verdict,
            Verdict::Act
        );
    }

    #[test]
    fn congestion_and_memory_guards() {
        let v = reader(100, 0, "/f", &[(1, GB)]);
        let mut w = world();
        w.nodes[1].cpu_util = 0.95;
        w.nodes[0].cpu_util = 0.3;
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &w,
            std::slice::from_ref(&v),
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Blocked);
        assert!(d[0].reason.contains("CPU-congested"));
        let mut w = world();
        w.nodes[1].free_bytes = 70 * MB; // 70 − 10 MB < 64 MB
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &w,
            std::slice::from_ref(&v),
            &History::default(),
        );
        assert!(d[0].reason.contains("free"), "{}", d[0].reason);
        let mut c = cfg(PolicyKind::FollowData);
        c.migrate_memory = false;
        assert_eq!(
            decide(&c, &w, &[v], &History::default())[0].verdict,
            Verdict::Act
        );
    }

    #[test]
    fn cpuset_pinned_and_filters() {
        let mut v = reader(100, 0, "/f", &[(1, GB)]);
        v.cpuset_cpus = vec![0, 1];
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[v],
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Blocked);
        let mut v = reader(100, 0, "/f", &[(1, GB)]);
        v.pinned = true;
        v.cpus_allowed = vec![0];
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            std::slice::from_ref(&v),
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Skipped);
        assert!(d[0].reason.contains("--manage-pinned"));
        let mut c = cfg(PolicyKind::FollowData);
        c.manage_pinned = true;
        assert_eq!(
            decide(&c, &world(), std::slice::from_ref(&v), &History::default())[0].verdict,
            Verdict::Act
        );
        let mut c = cfg(PolicyKind::FollowData);
        c.filter = Filter {
            exclude_comms: vec!["read*".into()],
            ..Default::default()
        };
        let d = decide(&c, &world(), &[v], &History::default());
        assert_eq!(d[0].verdict, Verdict::Skipped);
        assert!(d[0].reason.contains("excluded"));
        let mut one = reader(1, 0, "/f", &[(1, GB)]);
        one.pid = 1;
        assert!(decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[one],
            &History::default()
        )
        .is_empty());
    }

    #[test]
    fn pull_moves_private_file_never_shared_one() {
        let v = reader(100, 0, "/f", &[(1, 100 * MB)]);
        let d = decide(
            &cfg(PolicyKind::PullData),
            &world(),
            std::slice::from_ref(&v),
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Act);
        assert_eq!(
            d[0].action,
            Some(Action::PullData {
                to: 0,
                files: vec![PullFile {
                    path: "/f".into(),
                    remote_bytes: 100 * MB
                }]
            })
        );
        // A second reader of /f on node 1: the file is shared, pulling is refused.
        let other = reader(101, 1, "/f", &[(1, 100 * MB)]);
        let mut h = History::default();
        h.note_readers(&[v.clone(), other.clone()], 100.0, 10.0);
        let d = decide(&cfg(PolicyKind::PullData), &world(), &[v, other], &h);
        assert_eq!(d.len(), 1, "the node-1 reader is local");
        assert_eq!(d[0].verdict, Verdict::Blocked);
        assert!(d[0].reason.contains("ping-pong"));
        assert_eq!(d[0].numbers.shared_files, vec![PathBuf::from("/f")]);
    }

    #[test]
    fn readers_expire() {
        let v = reader(100, 0, "/f", &[(1, MB)]);
        let mut h = History::default();
        h.note_readers(&[v], 100.0, 10.0);
        assert!(h.readers.contains_key(&PathBuf::from("/f")));
        h.note_readers(&[], 111.0, 10.0);
        assert!(h.readers.is_empty());
    }

    #[test]
    fn caps_serve_biggest_remote_reader_first() {
        let mut small = reader(100, 0, "/a", &[(1, GB)]);
        small.read_bytes = 10 * MB;
        let big = reader(101, 0, "/b", &[(1, GB)]);
        let mut c = cfg(PolicyKind::FollowData);
        c.max_actions_per_interval = 1;
        let d = decide(&c, &world(), &[small, big], &History::default());
        assert_eq!(d[0].pid, 101);
        assert_eq!(d[0].verdict, Verdict::Act);
        assert_eq!(d[1].verdict, Verdict::Blocked);
        assert!(d[1].reason.contains("cap"));
    }

    #[test]
    fn with_costs_the_model_predicts_and_logs_the_gain() {
        // Adams's machine: a small process reading a 4 GB file cached on the other node.
        let mut w = world();
        w.costs = Some(Costs {
            profile: numaio_model::shipped::shipped("adams").unwrap(),
            source: "adams".into(),
        });
        let v = reader(100, 0, "/f", &[(1, 4 * GB)]);
        let mut c = cfg(PolicyKind::Auto);
        c.max_bytes_per_interval = crate::config::Bytes(8 * GB);
        let d = decide(&c, &w, std::slice::from_ref(&v), &History::default());
        let g = d[0].numbers.predicted_gain.unwrap();
        // The model's remote penalty on that machine is 12.5 %: moving saves ~11 % of run time.
        assert!((0.09..0.12).contains(&g), "{g}");
        assert_eq!(d[0].numbers.follow_gain, Some(g));
        assert_eq!(d[0].numbers.gain_source.as_deref(), Some("adams"));
        assert_eq!(d[0].action.as_ref().unwrap().kind(), "follow-data");
        let line = serde_json::to_string(&d[0]).unwrap();
        assert!(line.contains("\"predicted_gain\""), "{line}");
        // A process as big as its file gains nothing from moving: the data is pulled instead.
        let mut big = v;
        big.rss_bytes = 4 * GB;
        big.memory_per_node = [(0, 4 * GB)].into_iter().collect();
        let d = decide(&c, &w, &[big], &History::default());
        assert!(d[0].numbers.predicted_gain.unwrap() < 0.0);
        assert_ne!(
            d[0].action.as_ref().map(|a| a.kind()),
            Some("follow-data"),
            "{d:?}"
        );
        // Without costs nothing is predicted (the configured M and R decide).
        let d = decide(
            &c,
            &world(),
            &[reader(100, 0, "/f", &[(1, 4 * GB)])],
            &History::default(),
        );
        assert_eq!(d[0].numbers.predicted_gain, None);
    }

    /// With exact counts the policies decide from the counted remote bytes: a reader whose
    /// estimate says local but whose counts say remote is moved, and the reverse is not.
    #[test]
    fn exact_counts_decide() {
        use crate::io_source::{ExactIo, NumaIoSource};
        use numaio_numa::IoBytes;
        // The estimate: all of /f's cache is on node 0, where the reader runs.
        let mut v = reader(100, 0, "/f", &[(0, GB)]);
        assert!(candidate(&cfg(PolicyKind::FollowData), &v).is_none());
        // The collector counted 150 MB of its reads from node 1 and 50 MB from node 0.
        let io = ExactIo {
            by_data_node: [
                (0, IoBytes::new(50 * MB, 0)),
                (1, IoBytes::new(150 * MB, 0)),
            ]
            .into_iter()
            .collect(),
            local: Some(IoBytes::new(50 * MB, 0)),
            remote: Some(IoBytes::new(150 * MB, 0)),
        };
        v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
        let d = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            std::slice::from_ref(&v),
            &History::default(),
        );
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].read_source, NumaIoSource::Ebpf);
        assert_eq!(d[0].numbers.remote_read_bytes, 150 * MB);
        assert!((d[0].numbers.remote_share - 0.75).abs() < 1e-9);
        assert!(d[0].reason.contains("counted"), "{}", d[0].reason);
        let line = serde_json::to_value(&d[0]).unwrap();
        assert_eq!(line["read_source"], "ebpf");
        // 75 % on node 1 against 25 %: beats the win factor 2, so it follows.
        assert_eq!(d[0].verdict, Verdict::Act);
        // The counted rate decides who is I/O-active: 200 MB of rchar but only 0.5 MB of
        // page-cache reads (the rest from a pipe) is below the 1 MiB/s threshold.
        let small = ExactIo {
            by_data_node: [(1, IoBytes::new(MB / 2, 0))].into_iter().collect(),
            local: Some(IoBytes::default()),
            remote: Some(IoBytes::new(MB / 2, 0)),
        };
        v.set_exact(NumaIoSource::Ebpf, &small, &[0, 1]);
        assert!(candidate(&cfg(PolicyKind::FollowData), &v).is_none());
        // An estimated view says so too.
        let e = decide(
            &cfg(PolicyKind::FollowData),
            &world(),
            &[reader(100, 0, "/f", &[(1, GB)])],
            &History::default(),
        );
        assert_eq!(e[0].read_source, NumaIoSource::Estimate);
        assert_eq!(
            serde_json::to_value(&e[0]).unwrap()["read_source"],
            "estimate"
        );
        assert!(e[0].reason.contains("estimated"), "{}", e[0].reason);
    }

    #[test]
    fn adams_model() {
        assert!((follow_gain(0.15, 0.15, GB, GB) - 0.0).abs() < 1e-12);
        assert!(follow_gain(0.15, 0.15, 10 * MB, 4 * GB) > 0.14);
        assert!(follow_gain(0.15, 0.15, 1, 0) < 0.0);
    }

    #[test]
    fn auto_small_process_large_file_follows() {
        // 10 MB process reading a 4 GB file cached on node 1: I ≈ M, and moving 10 MB of
        // process memory is far cheaper than 4 GB of cache.
        let v = reader(100, 0, "/f", &[(1, 4 * GB)]);
        let mut c = cfg(PolicyKind::Auto);
        c.max_bytes_per_interval = crate::config::Bytes(8 * GB);
        let d = decide(&c, &world(), &[v], &History::default());
        assert_eq!(
            d[0].action.as_ref().unwrap().kind(),
            "follow-data",
            "{:?}",
            d[0]
        );
        assert!(d[0].numbers.follow_gain.unwrap() > 0.14);
    }

    #[test]
    fn auto_big_process_small_file_pulls() {
        let mut v = reader(100, 0, "/f", &[(1, 50 * MB)]);
        v.rss_bytes = 2 * GB;
        v.memory_per_node = [(0, 2 * GB)].into_iter().collect();
        let d = decide(&cfg(PolicyKind::Auto), &world(), &[v], &History::default());
        assert_eq!(
            d[0].action.as_ref().unwrap().kind(),
            "pull-data",
            "{:?}",
            d[0]
        );
        assert!(d[0].numbers.follow_gain.unwrap() < 0.0);
    }

    #[test]
    fn auto_shared_file_follows_or_blocks() {
        let v = reader(100, 0, "/f", &[(1, 4 * GB)]);
        let other = reader(101, 1, "/f", &[(1, 4 * GB)]);
        let mut h = History::default();
        h.note_readers(&[v.clone(), other], 100.0, 10.0);
        let d = decide(
            &cfg(PolicyKind::Auto),
            &world(),
            std::slice::from_ref(&v),
            &h,
        );
        assert_eq!(d[0].action.as_ref().unwrap().kind(), "follow-data");
        assert!(d[0].reason.contains("shared"));
        let mut big = v;
        big.rss_bytes = 8 * GB;
        let d = decide(&cfg(PolicyKind::Auto), &world(), &[big], &h);
        assert_eq!(d[0].verdict, Verdict::Blocked);
    }

    #[test]
    fn auto_skips_small_reads() {
        let mut v = reader(100, 0, "/f", &[(1, 4 * GB)]);
        v.avg_read_bytes = 4096;
        let d = decide(&cfg(PolicyKind::Auto), &world(), &[v], &History::default());
        assert_eq!(d[0].verdict, Verdict::Skipped);
        assert!(d[0].reason.contains("small reads"));
    }

    #[test]
    fn auto_falls_back_to_follow_when_pull_vetoed() {
        let v = reader(100, 0, "/f", &[(1, 100 * MB)]);
        // Pull is cheaper (100 MB vs... make process bigger than file but gain still positive).
        let mut v2 = v.clone();
        v2.rss_bytes = 10 * MB;
        v2.memory_per_node = [(0, 200 * MB)].into_iter().collect();
        let mut w = world();
        w.nodes[0].free_bytes = 100 * MB; // node 0 cannot take 100 MB of cache
        let d = decide(&cfg(PolicyKind::Auto), &w, &[v2], &History::default());
        assert_eq!(
            d[0].action.as_ref().unwrap().kind(),
            "follow-data",
            "{:?}",
            d[0]
        );
        assert!(d[0].reason.contains("pulling was vetoed"));
    }
}
