//! The daemon's replica pass (`[replicas]`): keeping per-node replicas fresh and, with
//! `auto`, making them for files that processes on several nodes read.
//!
//! A replica is named after the version of the original it copies, so a stale one is never
//! served (`numaio run --replica` binds only a replica of the current version); stale ones
//! only waste node memory, so each interval they are made again (`refresh = true`) or
//! dropped. Auto-replication works from the interval's sampled processes: a process's read
//! rate is split over the files it reads the way [`crate::locality`] splits it (by how far
//! their offsets moved, else by their cached bytes), and over nodes by where its threads
//! run. A reader's rate is its counted page-cache reads where an exact source (eBPF, a
//! numaio mount) fills its view, else `rchar`; each line's `read_source` says which (the
//! least exact of the file's readers). The split over files is always estimated: no source
//! counts reads per file.
//!
//! An auto-made replica only helps programs started with `numaio run --replica`: the daemon
//! cannot swap the file under a running program.

use crate::config::Config;
use crate::guards::{self, Budget};
use crate::io_source::NumaIoSource;
use crate::policy::{self, Verdict};
use crate::sample::{MountNs, ProcessView};
use numaio_pagecache::{PagecacheError, Replica, ReplicaOptions, ReplicaStore, Version};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// A file read from several nodes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Candidate {
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    pub path: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size_bytes: u64,
    /// Estimated read bytes per second from each node's processes.
    pub node_rates: BTreeMap<u32, f64>,
    /// The nodes reading it at least `min_read_bytes_per_sec`, fastest first.
    pub hot_nodes: Vec<u32>,
    /// The node holding the whole file in its page cache, if one does: its readers read
    /// locally already, so it gets no replica.
    pub home_node: Option<u32>,
    /// Where its readers' read counts came from: the least exact of their sources (a
    /// reader's rate is counted with an exact source, its split over files is estimated).
    pub read_source: NumaIoSource,
}

impl Candidate {
    fn hot_rate(&self) -> f64 {
        self.hot_nodes.iter().map(|n| self.node_rates[n]).sum()
    }
}

/// The files worth replicating in this interval's views, busiest first: read by processes
/// the filter admits, on at least `min_reader_nodes` nodes each above the rate threshold.
/// Only files whose path names the same file in the daemon's mount namespace count, and
/// never the replicas themselves.
pub fn candidates(cfg: &Config, views: &[ProcessView]) -> Vec<Candidate> {
    let r = &cfg.replicas;
    let store = Path::new(&r.dir);
    let mut by_file: HashMap<(u64, u64), Candidate> = HashMap::new();
    for v in views {
        if guards::filter(&cfg.filter, v.pid, &v.comm, &v.cgroup).is_err() {
            continue;
        }
        let threads: u32 = v.thread_nodes.values().sum();
        if threads == 0 {
            continue;
        }
        for (f, rate) in policy::file_read_rates(v) {
            if f.mount_ns != MountNs::Own
                || f.path.starts_with(store)
                || f.size_bytes == 0
                || f.size_bytes > r.max_file_bytes.0
            {
                continue;
            }
            let c = by_file.entry((f.dev, f.ino)).or_insert_with(|| Candidate {
                path: f.path.clone(),
                dev: f.dev,
                ino: f.ino,
                size_bytes: f.size_bytes,
                node_rates: BTreeMap::new(),
                hot_nodes: Vec::new(),
                home_node: f.nodes.iter().find_map(|(&n, &b)| {
                    (f.cached_bytes >= f.size_bytes && b >= f.cached_bytes).then_some(n)
                }),
                read_source: v.numa_io_source,
            });
            // The least exact of its readers' sources.
            c.read_source = c.read_source.max(v.numa_io_source);
            for (&node, &t) in &v.thread_nodes {
                *c.node_rates.entry(node).or_insert(0.0) += rate * t as f64 / threads as f64;
            }
        }
    }
    let min_rate = r.min_read_bytes_per_sec.0 as f64;
    let mut out: Vec<Candidate> = by_file
        .into_values()
        .filter_map(|mut c| {
            let mut hot: Vec<(u32, f64)> = c
                .node_rates
                .iter()
                .filter(|(_, &rate)| rate >= min_rate)
                .map(|(&n, &rate)| (n, rate))
                .collect();
            hot.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            c.hot_nodes = hot.into_iter().map(|(n, _)| n).collect();
            (c.hot_nodes.len() >= r.min_reader_nodes).then_some(c)
        })
        .collect();
    out.sort_by(|a, b| {
        b.hot_rate()
            .total_cmp(&a.hot_rate())
            .then(a.path.cmp(&b.path))
    });
    out
}

/// What one interval's replica pass did (in the `interval` line under `replicas`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ReplicaSummary {
    /// Replicas and their bytes after the pass.
    pub replicas: usize,
    pub bytes: u64,
    pub stale: usize,
    pub refreshed: usize,
    pub dropped: usize,
    pub candidates: usize,
    pub made: usize,
    /// Copies refused for want of room or budget.
    pub no_room: usize,
    pub errors: usize,
}

/// The replica pass's state across intervals.
#[derive(Debug, Default)]
pub struct ReplicaState {
    /// When a copy of (file, node) last failed: it is not tried again for
    /// `min_residence_secs`, so a full node is not asked every interval.
    failed: HashMap<(u64, u64, u32), f64>,
}

/// Counts of what a pass did per node, for the metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodeCounts {
    pub made: BTreeMap<u32, u64>,
    pub refreshed: BTreeMap<u32, u64>,
    pub dropped: BTreeMap<u32, u64>,
    /// Replicas and bytes per node after the pass.
    pub held: BTreeMap<u32, (u64, u64)>,
}

/// One pass over the store: freshness, then (with `auto`) new replicas. Every action is
/// one line through `emit`; an error listing the store ends the pass and is returned, an
/// error of one action is that action's outcome.
pub fn pass(
    cfg: &Config,
    state: &mut ReplicaState,
    views: &[ProcessView],
    now: f64,
    emit: &mut dyn FnMut(Value),
) -> Result<(ReplicaSummary, NodeCounts), PagecacheError> {
    let store = ReplicaStore::new(&cfg.replicas.dir);
    let mut budget = Budget::new(cfg.max_actions_per_interval, cfg.max_bytes_per_interval.0);
    let mut sum = ReplicaSummary::default();
    let mut counts = NodeCounts::default();
    state
        .failed
        .retain(|_, t| now - *t < cfg.min_residence_secs);
    let mut held = freshness(cfg, &store, &mut budget, emit, &mut sum, &mut counts)?;
    if cfg.replicas.auto {
        auto(
            cfg,
            &store,
            state,
            views,
            now,
            &mut budget,
            &mut held,
            emit,
            &mut sum,
            &mut counts,
        );
    }
    for r in &held {
        let e = counts.held.entry(r.node).or_insert((0, 0));
        e.0 += 1;
        e.1 += r.bytes;
    }
    sum.replicas = held.len();
    sum.bytes = held.iter().map(|r| r.bytes).sum();
    Ok((sum, counts))
}

fn verdict(cfg: &Config) -> Verdict {
    if cfg.dry_run {
        Verdict::Advise
    } else {
        Verdict::Act
    }
}

fn line(action: &str, verdict: Verdict, path: &Path, node: u32, reason: String) -> Value {
    json!({
        "event": "replica",
        "action": action,
        "verdict": verdict,
        "path": path.to_string_lossy(),
        "node": node,
        "reason": reason,
    })
}

fn set(line: &mut Value, key: &str, v: Value) {
    if let Some(o) = line.as_object_mut() {
        o.insert(key.into(), v);
    }
}

/// Sets `outcome` (and `error`) of a failed action: `no-room` for a refusal for want of
/// memory or budget, `failed` otherwise.
fn failed(line: &mut Value, e: &PagecacheError, sum: &mut ReplicaSummary) {
    let no_room = matches!(e, PagecacheError::NoRoom { .. });
    if no_room {
        sum.no_room += 1;
    } else {
        sum.errors += 1;
    }
    set(
        line,
        "outcome",
        json!(if no_room { "no-room" } else { "failed" }),
    );
    set(line, "error", json!(e.to_string()));
}

fn made(r: &Replica) -> Value {
    json!({"replica": r.replica.to_string_lossy(), "bytes": r.bytes, "made": r.made})
}

fn options(cfg: &Config) -> ReplicaOptions {
    ReplicaOptions {
        max_memory: cfg.replicas.max_memory_per_node.map(|b| b.0),
    }
}

/// Refreshes or drops every stale replica; returns the replicas held afterwards.
fn freshness(
    cfg: &Config,
    store: &ReplicaStore,
    budget: &mut Budget,
    emit: &mut dyn FnMut(Value),
    sum: &mut ReplicaSummary,
    counts: &mut NodeCounts,
) -> Result<Vec<Replica>, PagecacheError> {
    let listed = store.list()?;
    let mut held = Vec::with_capacity(listed.len());
    for r in listed {
        if r.fresh {
            held.push(r);
            continue;
        }
        sum.stale += 1;
        let v = verdict(cfg);
        let why = if r.original.as_os_str().is_empty() {
            "the replica does not name its original".to_string()
        } else if r.original.exists() {
            "the original changed since it was copied".to_string()
        } else {
            "the original is gone".to_string()
        };
        let refreshable = cfg.replicas.refresh && r.original.exists();
        if refreshable {
            let mut l = line(
                "refresh",
                v,
                &r.original,
                r.node,
                format!("{why}; refresh = true: copying it again"),
            );
            if let Err(cap) = budget.take(r.bytes) {
                set(&mut l, "verdict", json!(Verdict::Blocked));
                set(
                    &mut l,
                    "reason",
                    json!(format!(
                        "{why}; {cap}: refreshed in a later interval (the stale copy is \
                         never served)"
                    )),
                );
                emit(l);
                held.push(r);
                continue;
            }
            if v == Verdict::Advise {
                emit(l);
                held.push(r);
                continue;
            }
            match store.replicate(&r.original, r.node, &options(cfg)) {
                Ok(new) => {
                    // The original replaced by another file (a rename over it) leaves the
                    // old copy behind, not being of the same file.
                    let old_left = new.replica != r.replica
                        && r.replica.exists()
                        && store.remove_one(&r).is_err();
                    set(&mut l, "outcome", json!("done"));
                    set(&mut l, "result", made(&new));
                    if old_left {
                        set(
                            &mut l,
                            "stale_copy_left",
                            json!(r.replica.to_string_lossy()),
                        );
                    }
                    emit(l);
                    sum.refreshed += 1;
                    *counts.refreshed.entry(r.node).or_insert(0) += 1;
                    held.push(new);
                    continue;
                }
                Err(e) => {
                    failed(&mut l, &e, sum);
                    emit(l);
                    // Falls through to dropping: a stale copy only takes memory.
                }
            }
        }
        let reason = if refreshable {
            format!("{why} and it could not be copied again: dropping the stale copy")
        } else if cfg.replicas.refresh {
            format!("{why}: dropping the stale copy")
        } else {
            format!("{why}; refresh = false: dropping the stale copy")
        };
        let mut l = line("drop", v, &r.original, r.node, reason);
        set(&mut l, "replica", json!(r.replica.to_string_lossy()));
        if v == Verdict::Advise {
            emit(l);
            held.push(r);
            continue;
        }
        match store.remove_one(&r) {
            Ok(_) => {
                set(&mut l, "outcome", json!("done"));
                sum.dropped += 1;
                *counts.dropped.entry(r.node).or_insert(0) += 1;
            }
            // The copy went but its emptied tmpfs could not be unmounted.
            Err(e) if !r.replica.exists() => {
                set(&mut l, "outcome", json!("done"));
                set(&mut l, "warning", json!(e.to_string()));
                sum.dropped += 1;
                *counts.dropped.entry(r.node).or_insert(0) += 1;
            }
            Err(e) => {
                failed(&mut l, &e, sum);
                held.push(r);
            }
        }
        emit(l);
    }
    Ok(held)
}

/// Makes replicas of the interval's candidates on their reader nodes that lack one.
#[allow(clippy::too_many_arguments)]
fn auto(
    cfg: &Config,
    store: &ReplicaStore,
    state: &mut ReplicaState,
    views: &[ProcessView],
    now: f64,
    budget: &mut Budget,
    held: &mut Vec<Replica>,
    emit: &mut dyn FnMut(Value),
    sum: &mut ReplicaSummary,
    counts: &mut NodeCounts,
) {
    let fresh: HashSet<(u64, u64, u32)> = held
        .iter()
        .filter(|r| r.fresh)
        .filter_map(|r| {
            let v = Version::parse(r.replica.file_name()?.to_str()?)?;
            Some((v.dev, v.ino, r.node))
        })
        .collect();
    let found = candidates(cfg, views);
    sum.candidates = found.len();
    for c in found {
        for &node in &c.hot_nodes {
            let key = (c.dev, c.ino, node);
            if Some(node) == c.home_node || fresh.contains(&key) || state.failed.contains_key(&key)
            {
                continue;
            }
            let rates: BTreeMap<String, f64> = c
                .node_rates
                .iter()
                .map(|(n, r)| (n.to_string(), r.round()))
                .collect();
            let mut l = line(
                "make",
                verdict(cfg),
                &c.path,
                node,
                format!(
                    "read from {} nodes ({:?}) at least {} B/s each; node {node} has no \
                     fresh replica",
                    c.hot_nodes.len(),
                    c.hot_nodes,
                    cfg.replicas.min_read_bytes_per_sec.0
                ),
            );
            set(
                &mut l,
                "numbers",
                json!({
                    "read_source": c.read_source,
                    "read_bytes_per_sec": rates,
                    "file_bytes": c.size_bytes,
                    "home_node": c.home_node,
                }),
            );
            if let Err(cap) = budget.take(c.size_bytes) {
                set(&mut l, "verdict", json!(Verdict::Blocked));
                set(&mut l, "reason", json!(cap));
                emit(l);
                continue;
            }
            if cfg.dry_run {
                emit(l);
                continue;
            }
            // The path was the reader's; it must still name the file it read.
            let same = std::fs::metadata(&c.path).is_ok_and(|m| {
                use std::os::unix::fs::MetadataExt;
                (m.dev(), m.ino()) == (c.dev, c.ino)
            });
            if !same {
                set(&mut l, "verdict", json!(Verdict::Skipped));
                set(
                    &mut l,
                    "reason",
                    json!("the path no longer names the file its readers read"),
                );
                emit(l);
                continue;
            }
            match store.replicate(&c.path, node, &options(cfg)) {
                Ok(r) => {
                    set(&mut l, "outcome", json!("done"));
                    set(&mut l, "result", made(&r));
                    if r.made {
                        sum.made += 1;
                        *counts.made.entry(node).or_insert(0) += 1;
                    }
                    held.push(r);
                }
                Err(e) => {
                    state.failed.insert(key, now);
                    failed(&mut l, &e, sum);
                }
            }
            emit(l);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Bytes, Replicas};
    use crate::sample::FileView;

    const MB: u64 = 1 << 20;

    fn cfg() -> Config {
        Config {
            replicas: Replicas {
                enabled: true,
                auto: true,
                max_memory_per_node: Some(Bytes(1 << 30)),
                min_read_bytes_per_sec: Bytes(MB),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// A process on `nodes` (one thread each) reading `files` (path, bytes advanced) at
    /// `rate`; every file is 64 MiB, cached on node 0.
    fn reader(pid: i32, nodes: &[u32], rate: f64, files: &[(&str, u64)]) -> ProcessView {
        ProcessView {
            pid,
            comm: "reader".into(),
            thread_nodes: nodes.iter().map(|&n| (n, 1)).collect(),
            read_bytes_per_sec: rate,
            files: files
                .iter()
                .map(|&(p, adv)| FileView {
                    path: p.into(),
                    dev: 1,
                    ino: p.len() as u64,
                    mount_ns: MountNs::Own,
                    size_bytes: 64 * MB,
                    cached_bytes: 32 * MB,
                    nodes: [(0, 32 * MB)].into_iter().collect(),
                    advanced_bytes: adv,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn files_read_from_enough_nodes_are_candidates() {
        let c = cfg();
        let views = [
            reader(10, &[0], 8.0 * MB as f64, &[("/d/shared", 1)]),
            reader(
                11,
                &[1],
                4.0 * MB as f64,
                &[("/d/shared", 1), ("/d/own", 1)],
            ),
            // Too slow on node 2 to count.
            reader(12, &[2], 0.5 * MB as f64, &[("/d/shared", 1)]),
        ];
        let found = candidates(&c, &views);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.path, PathBuf::from("/d/shared"));
        assert_eq!(f.hot_nodes, vec![0, 1]);
        assert_eq!(f.node_rates[&1], 2.0 * MB as f64);
        assert_eq!(f.home_node, None, "half cached: no node has it all");
        // Three reader nodes needed: none.
        let mut c3 = cfg();
        c3.replicas.min_reader_nodes = 3;
        assert!(candidates(&c3, &views).is_empty());
        // A threshold the node-2 reader passes makes it a third.
        let mut low = c3.clone();
        low.replicas.min_read_bytes_per_sec = Bytes(MB / 4);
        assert_eq!(candidates(&low, &views)[0].hot_nodes, vec![0, 1, 2]);
    }

    /// With exact counts a reader's rate is the page-cache bytes it was counted reading (a
    /// pipe or socket read in `rchar` does not count), and the candidate says so.
    #[test]
    fn exact_counts_set_rates_and_source() {
        use crate::io_source::{ExactIo, NumaIoSource};
        use numaio_numa::IoBytes;
        let c = cfg();
        let exact = |pid, node: u32, counted: u64| {
            // rchar says 100 MiB/s; the collector counted `counted` bytes of file reads.
            let mut v = reader(pid, &[node], 100.0 * MB as f64, &[("/d/shared", 1)]);
            v.interval_secs = 1.0;
            let io = ExactIo {
                by_data_node: [(0, IoBytes::new(counted, 0))].into_iter().collect(),
                local: Some(IoBytes::default()),
                remote: Some(IoBytes::new(counted, 0)),
            };
            v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
            v
        };
        let views = [exact(10, 0, 3 * MB), exact(11, 1, 2 * MB)];
        let found = candidates(&c, &views);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].node_rates[&0], 3.0 * MB as f64);
        assert_eq!(found[0].node_rates[&1], 2.0 * MB as f64);
        assert_eq!(found[0].read_source, NumaIoSource::Ebpf);
        // One estimated reader makes the file's counts estimated.
        let mixed = [
            exact(10, 0, 3 * MB),
            reader(11, &[1], 2.0 * MB as f64, &[("/d/shared", 1)]),
        ];
        assert_eq!(
            candidates(&c, &mixed)[0].read_source,
            NumaIoSource::Estimate
        );
        // Counted reads below the threshold: no candidate however high rchar is.
        let slow = [exact(10, 0, MB / 2), exact(11, 1, MB / 2)];
        assert!(candidates(&c, &slow).is_empty());
    }

    #[test]
    fn threads_split_reads_and_exclusions_hold() {
        let c = cfg();
        // One process with threads on two nodes counts for both.
        let split = reader(10, &[0, 1], 4.0 * MB as f64, &[("/d/f", 0)]);
        let found = candidates(&c, std::slice::from_ref(&split));
        assert_eq!(found[0].hot_nodes, vec![0, 1]);
        // Too large, another mount namespace, a replica itself, an excluded command.
        let mut big = c.clone();
        big.replicas.max_file_bytes = Bytes(MB);
        assert!(candidates(&big, std::slice::from_ref(&split)).is_empty());
        let mut foreign = split.clone();
        foreign.files[0].mount_ns = MountNs::Foreign;
        assert!(candidates(&c, &[foreign]).is_empty());
        let mut replica = split.clone();
        replica.files[0].path = Path::new(&c.replicas.dir).join("node1/x");
        assert!(candidates(&c, &[replica]).is_empty());
        let mut excluded = c.clone();
        excluded.filter.exclude_comms = vec!["read*".into()];
        assert!(candidates(&excluded, std::slice::from_ref(&split)).is_empty());
        // A file wholly cached on node 0 names it as its home.
        let mut home = split.clone();
        home.files[0].cached_bytes = 64 * MB;
        home.files[0].nodes = [(0, 64 * MB)].into_iter().collect();
        assert_eq!(candidates(&c, &[home])[0].home_node, Some(0));
    }

    /// Unmounts the test store's tmpfs mounts however the test ends.
    struct Cleanup(ReplicaStore);

    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = self.0.remove(&[], None);
        }
    }

    /// A store in a temporary directory, or `None` (with a visible "skipped" line) where
    /// tmpfs cannot be mounted.
    fn root_store(test: &str) -> Option<(tempfile::TempDir, Cleanup)> {
        if !numaio_testkit::is_root() {
            numaio_testkit::skipped("root", &format!("{test} mounts the replica tmpfs"));
            return None;
        }
        let tmp = tempfile::tempdir().unwrap();
        let store = ReplicaStore::new(tmp.path().join("store"));
        Some((tmp, Cleanup(store)))
    }

    fn replicate_or_skip(store: &ReplicaStore, path: &Path, test: &str) -> Option<Replica> {
        match store.replicate(path, 0, &ReplicaOptions::default()) {
            Ok(r) => Some(r),
            Err(e @ PagecacheError::NeedsPrivilege { .. }) => {
                eprintln!("skipped: {test}: {e}");
                None
            }
            Err(e) => panic!("replicate {}: {e}", path.display()),
        }
    }

    fn store_cfg(store: &ReplicaStore) -> Config {
        Config {
            replicas: Replicas {
                enabled: true,
                dir: store.dir().to_string_lossy().into_owned(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn content(r: &Replica) -> String {
        std::fs::read_to_string(&r.replica).unwrap()
    }

    #[test]
    fn stale_replicas_are_refreshed_or_dropped() {
        let t = "stale_replicas_are_refreshed_or_dropped";
        let Some((tmp, guard)) = root_store(t) else {
            return;
        };
        let store = &guard.0;
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::write(&a, "one").unwrap();
        std::fs::write(&b, "uno").unwrap();
        let Some(old_a) = replicate_or_skip(store, &a, t) else {
            return;
        };
        replicate_or_skip(store, &b, t).unwrap();
        // Other sizes: a new version even where timestamps are coarse.
        std::fs::write(&a, "two!!").unwrap();
        std::fs::write(&b, "dos!!").unwrap();
        let mut cfg = store_cfg(store);
        let mut state = ReplicaState::default();
        let mut lines = Vec::new();

        // Dry run: advice only, nothing changes.
        cfg.dry_run = true;
        let (s, _) = pass(&cfg, &mut state, &[], 0.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!((s.stale, s.refreshed, s.replicas), (2, 0, 2), "{s:?}");
        assert!(lines
            .iter()
            .all(|l| l["verdict"] == "advise" && l["action"] == "refresh"));
        assert!(store.list().unwrap().iter().all(|r| !r.fresh));
        cfg.dry_run = false;

        // refresh = true: copied again, with the new contents; the old copy is gone.
        lines.clear();
        let metrics = crate::metrics::Metrics::new();
        let (s, counts) = pass(&cfg, &mut state, &[], 1.0, &mut |l| lines.push(l)).unwrap();
        metrics.observe_replicas(&[0], &counts);
        assert_eq!(
            (s.stale, s.refreshed, s.dropped),
            (2, 2, 0),
            "{s:?} {lines:?}"
        );
        assert_eq!((s.replicas, s.bytes), (2, 10));
        let now = store.list().unwrap();
        assert_eq!(now.len(), 2);
        assert!(now.iter().all(|r| r.fresh));
        let new_a = now.iter().find(|r| r.original == a).unwrap();
        assert_eq!(content(new_a), "two!!");
        assert!(!old_a.replica.exists());
        let l = &lines[0];
        assert_eq!(
            (&l["event"], &l["action"], &l["verdict"], &l["outcome"]),
            (
                &json!("replica"),
                &json!("refresh"),
                &json!("act"),
                &json!("done")
            )
        );
        assert_eq!(l["path"], json!(a.to_string_lossy()));
        let text = metrics.render_as(crate::metrics::Format::Classic);
        for want in [
            "numaio_replicas{numa_node=\"0\"} 2",
            "numaio_replica_bytes{numa_node=\"0\"} 10",
            "numaio_replicas_refreshed_total{numa_node=\"0\"} 2",
            "numaio_replicas_dropped_total{numa_node=\"0\"} 0",
        ] {
            assert!(text.contains(want), "{want}: {text}");
        }

        // refresh = false: a stale replica is dropped.
        std::fs::write(&a, "three!!").unwrap();
        cfg.replicas.refresh = false;
        lines.clear();
        let (s, _) = pass(&cfg, &mut state, &[], 2.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!((s.stale, s.refreshed, s.dropped, s.replicas), (1, 0, 1, 1));
        assert_eq!(lines[0]["action"], "drop");
        assert_eq!(lines[0]["outcome"], "done");
        let left = store.list().unwrap();
        assert_eq!(left.len(), 1);
        assert_eq!(left[0].original, b);

        // An original that is gone cannot be refreshed: dropped, and the empty node's
        // tmpfs is unmounted.
        std::fs::remove_file(&b).unwrap();
        cfg.replicas.refresh = true;
        lines.clear();
        let (s, _) = pass(&cfg, &mut state, &[], 3.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!((s.dropped, s.replicas), (1, 0), "{lines:?}");
        assert!(lines[0]["reason"].as_str().unwrap().contains("gone"));
        assert!(store.list().unwrap().is_empty());
        assert!(!store.node_dir(0).exists());
    }

    #[test]
    fn auto_replicates_within_the_budget_and_logs_refusals() {
        let t = "auto_replicates_within_the_budget_and_logs_refusals";
        let Some((tmp, guard)) = root_store(t) else {
            return;
        };
        let store = &guard.0;
        let f = tmp.path().join("shared");
        std::fs::write(&f, vec![7u8; 8192]).unwrap();
        // Whether tmpfs can be mounted here at all.
        if replicate_or_skip(store, &f, t).is_none() {
            return;
        }
        store.remove(&[], None).unwrap();
        let m = std::fs::metadata(&f).unwrap();
        let mut view = reader(10, &[0], 8.0 * MB as f64, &[("x", 1)]);
        {
            use std::os::unix::fs::MetadataExt;
            let file = &mut view.files[0];
            file.path = f.clone();
            (file.dev, file.ino, file.size_bytes) = (m.dev(), m.ino(), m.size());
            file.cached_bytes = 4096;
            file.nodes = [(0, 4096)].into_iter().collect();
        }
        // A second reader on node 1, slower: node 0 is served first. Node 1 may not exist
        // here; its refusal is an outcome, not an error.
        let mut other = view.clone();
        other.pid = 11;
        other.thread_nodes = [(1, 1)].into_iter().collect();
        other.read_bytes_per_sec = 2.0 * MB as f64;
        let views = [view, other];
        let mut cfg = store_cfg(store);
        cfg.replicas.auto = true;
        cfg.replicas.max_memory_per_node = Some(Bytes(4096));
        let mut state = ReplicaState::default();
        let mut lines = Vec::new();

        // Over the budget: refused, logged, not fatal.
        let (s, _) = pass(&cfg, &mut state, &views, 0.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!((s.candidates, s.made), (1, 0), "{s:?} {lines:?}");
        assert!(s.no_room >= 1, "{lines:?}");
        let l0 = &lines[0];
        assert_eq!((&l0["action"], &l0["node"]), (&json!("make"), &json!(0)));
        assert_eq!(l0["outcome"], "no-room");
        assert_eq!(l0["numbers"]["read_source"], "estimate");
        assert!(l0["error"].as_str().unwrap().contains("budget"), "{l0}");
        // Not asked again within min_residence_secs.
        lines.clear();
        let (s, _) = pass(&cfg, &mut state, &views, 1.0, &mut |l| lines.push(l)).unwrap();
        assert!(lines.is_empty() && s.made == 0, "{lines:?}");

        // With room, later: made on node 0, once.
        cfg.replicas.max_memory_per_node = Some(Bytes(1 << 20));
        lines.clear();
        let (s, counts) = pass(&cfg, &mut state, &views, 100.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!(s.made, 1, "{lines:?}");
        assert_eq!(counts.made.get(&0), Some(&1));
        assert_eq!(lines[0]["outcome"], "done");
        let held = store.list().unwrap();
        assert_eq!(held.len(), 1);
        assert_eq!((held[0].node, held[0].fresh), (0, true));
        lines.clear();
        let (s, _) = pass(&cfg, &mut state, &views, 200.0, &mut |l| lines.push(l)).unwrap();
        assert_eq!(s.made, 0);
        assert!(lines.iter().all(|l| l["node"] != 0), "{lines:?}");
    }
}
