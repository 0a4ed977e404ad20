//! Tofalos's user-space placer as a daemon policy (`policy = "tofalos"`, parameters in
//! `[tofalos]`). Pure, like [`crate::policy`]: views, node state and history in, decisions out.
//!
//! Tofalos (NTUA thesis, §6.4) samples every second each thread's bytes read and written
//! per node (his `/proc/PID/numa_io`) and each node's CPU use, then, in this order:
//!
//! 1. **Bandwidth congestion.** A node's load is reads × `read_weight` + writes, summed
//!    over the processes (his total_BW = read_BW/3 + write_BW: Optane writes at a third of
//!    its read bandwidth). A node is congested when its load per second exceeds
//!    `congestion_threshold` × `node_bandwidth` and is at least `dominance` (2) times every
//!    other node's. Its writers are moved, the biggest first, to the node with the deepest
//!    deficit — a process that wrote b bytes moves to node n only if
//!    (bytes(n) − mean) + b ≤ 0, so its future writes (new pages are allocated on the
//!    writer's node) do not make n the next congested node. The loads are updated after
//!    each move, and moving stops once the node is no longer above the mean.
//! 2. **CPU congestion** ([`guards::cpu_congested`]: over `cpu_busy_threshold` while every
//!    other node is below half of it). The busiest process of the node moves to the least
//!    busy node that passes the same bytes test.
//! 3. **Locality**, only when no node is congested: a process moves to the node it reads
//!    and writes the most bytes from and to, if those bytes beat every other node's by
//!    `win_factor` (his anti-oscillation factor).
//!
//! Tofalos placed threads; the daemon moves processes (every thread, as follow-data does),
//! so b is the process's written bytes. The counts are exact where the eBPF collector or a
//! numaio mount filled the view; otherwise reads per node are the estimate and a process's
//! writes are put on the node it runs on (Tofalos's own simplification: writes are appends,
//! and appended pages land on the writer's node). Every decision says which in
//! `read_source`. The daemon's guards apply as to the other policies: minimum residence,
//! free memory, cpusets, pinned processes, the filter and the per-interval caps.

use crate::config::{Config, PolicyKind, Tofalos};
use crate::guards;
use crate::policy::{
    follow_to, remote_reads, skip_reason, within_caps, Decision, History, Numbers, Verdict, World,
};
use crate::sample::ProcessView;
use std::collections::{BTreeMap, HashSet};

/// One process's bytes read and written per node this interval.
#[derive(Debug, Clone)]
struct Proc<'a> {
    v: &'a ProcessView,
    cur: u32,
    /// (read, written) bytes by the node of the data.
    io: BTreeMap<u32, (u64, u64)>,
    /// b: bytes it wrote.
    written: u64,
}

impl<'a> Proc<'a> {
    fn of(v: &'a ProcessView) -> Option<Proc<'a>> {
        let cur = v.main_node?;
        if v.pid <= 1 {
            return None;
        }
        let mut io: BTreeMap<u32, (u64, u64)> = BTreeMap::new();
        for (&n, &b) in &v.numa_read_bytes {
            io.entry(n).or_default().0 += b;
        }
        if v.numa_io_source.is_exact() {
            for (&n, &b) in &v.numa_write_bytes {
                io.entry(n).or_default().1 += b;
            }
        } else if v.write_bytes > 0 {
            io.entry(cur).or_default().1 += v.write_bytes;
        }
        io.retain(|_, (r, w)| *r + *w > 0);
        if io.is_empty() {
            return None;
        }
        let written = io.values().map(|(_, w)| w).sum();
        Some(Proc {
            v,
            cur,
            io,
            written,
        })
    }

    fn total(&self, n: u32) -> u64 {
        self.io.get(&n).map_or(0, |(r, w)| r + w)
    }

    fn totals(&self) -> BTreeMap<u32, u64> {
        self.io.iter().map(|(&n, (r, w))| (n, r + w)).collect()
    }
}

/// Each node's load: Σ reads × `read_weight` + writes over the processes, 0 for a node
/// without I/O.
pub fn node_loads<'a>(
    read_weight: f64,
    nodes: &[u32],
    io: impl IntoIterator<Item = &'a BTreeMap<u32, (u64, u64)>>,
) -> BTreeMap<u32, f64> {
    let mut loads: BTreeMap<u32, f64> = nodes.iter().map(|&n| (n, 0.0)).collect();
    for per_node in io {
        for (&n, &(r, w)) in per_node {
            *loads.entry(n).or_insert(0.0) += r as f64 * read_weight + w as f64;
        }
    }
    loads
}

/// The mean load over the nodes.
pub fn mean(loads: &BTreeMap<u32, f64>) -> f64 {
    if loads.is_empty() {
        0.0
    } else {
        loads.values().sum::<f64>() / loads.len() as f64
    }
}

/// Tofalos's condition for moving a process that wrote `b` bytes to node `n`:
/// (bytes(n) − mean) + b ≤ 0. Returns the left-hand side and whether it holds.
pub fn fits(loads: &BTreeMap<u32, f64>, n: u32, b: f64) -> (f64, bool) {
    let surplus = loads.get(&n).copied().unwrap_or(0.0) - mean(loads) + b;
    (surplus, surplus <= 0.0)
}

/// The bandwidth-congested nodes, busiest first: load per second above
/// `congestion_threshold` × `node_bandwidth` (when given) and `min_congested_bytes_per_sec`,
/// and at least `dominance` times every other node's load.
pub fn bandwidth_congested(t: &Tofalos, loads: &BTreeMap<u32, f64>, secs: f64) -> Vec<u32> {
    let secs = if secs > 0.0 { secs } else { 1.0 };
    let mut out: Vec<(u32, f64)> = loads
        .iter()
        .filter(|(&c, &l)| {
            let rate = l / secs;
            rate > 0.0
                && loads.len() >= 2
                && rate >= t.min_congested_bytes_per_sec.0 as f64
                && t.node_bandwidth
                    .is_none_or(|bw| rate > t.congestion_threshold * bw.0 as f64)
                && loads
                    .iter()
                    .filter(|(&n, _)| n != c)
                    .all(|(_, &o)| l >= t.dominance * o)
        })
        .map(|(&c, &l)| (c, l))
        .collect();
    out.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    out.into_iter().map(|(c, _)| c).collect()
}

/// The node `p` moves the most bytes from and to, if they beat every other node's by
/// `factor` (Tofalos's anti-oscillation rule); else why not.
pub fn dominant_node(io: &BTreeMap<u32, u64>, factor: f64) -> Result<u32, String> {
    let Some((&m, &top)) = io.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))) else {
        return Err("no I/O this interval".into());
    };
    match io
        .iter()
        .filter(|(&n, _)| n != m)
        .find(|(_, &b)| (top as f64) < factor * b as f64)
    {
        Some((&n, &b)) => Err(format!(
            "node {m}'s {top} bytes do not beat node {n}'s {b} by the anti-oscillation factor {factor}"
        )),
        None => Ok(m),
    }
}

/// Decides for every process with I/O in `views`, in Tofalos's order (see the module).
pub fn decide(cfg: &Config, w: &World, views: &[ProcessView], h: &History) -> Vec<Decision> {
    let t = &cfg.tofalos;
    // With fewer than two nodes that have CPUs there is nowhere to move anything, and a lone
    // node's load "dominates every other node" vacuously.
    if w.nodes.iter().filter(|n| !n.cpus.is_empty()).count() < 2 {
        return Vec::new();
    }
    let procs: Vec<Proc> = views.iter().filter_map(Proc::of).collect();
    let node_ids: Vec<u32> = w.nodes.iter().map(|n| n.id).collect();
    let mut loads = node_loads(t.read_weight, &node_ids, procs.iter().map(|p| &p.io));
    let secs = views
        .iter()
        .map(|v| v.interval_secs)
        .find(|s| *s > 0.0)
        .unwrap_or(cfg.interval_secs);
    let utils = w.utils();
    let mut out: Vec<(Decision, u64)> = Vec::new();
    let mut decided: HashSet<i32> = HashSet::new();
    // Decisions taken under congestion go first, in the order they were reasoned, so the
    // caps cut the moves that assumed earlier ones.
    let mut rank = u64::MAX;

    let congested = bandwidth_congested(t, &loads, secs);
    for &c in &congested {
        let mut writers: Vec<&Proc> = procs
            .iter()
            .filter(|p| p.cur == c && p.written > 0)
            .collect();
        writers.sort_by(|a, b| b.written.cmp(&a.written).then(a.v.pid.cmp(&b.v.pid)));
        for p in writers {
            if loads[&c] <= mean(&loads) {
                break;
            }
            decided.insert(p.v.pid);
            let b = p.written as f64;
            let mut d = start(cfg, h, p, "bandwidth-congestion", &loads);
            d.numbers.moved_load_bytes = Some(b);
            if d.verdict == Verdict::Skipped {
                out.push((d, rank));
                rank -= 1;
                continue;
            }
            // The node with the deepest deficit among those the process may run on.
            let target = w
                .nodes
                .iter()
                .filter(|n| n.id != c && !congested.contains(&n.id))
                .filter(|n| n.cpus.iter().any(|x| p.v.cpuset_cpus.contains(x)))
                .min_by(|x, y| loads[&x.id].total_cmp(&loads[&y.id]).then(x.id.cmp(&y.id)))
                .map(|n| n.id);
            let plan = match target {
                None => Err(format!(
                    "node {c} is bandwidth-congested but no other node has CPUs in the process's cpuset"
                )),
                Some(n) => {
                    let (surplus, ok) = fits(&loads, n, b);
                    d.numbers.target_surplus_bytes = Some(surplus);
                    if ok {
                        move_to(cfg, w, h, p, n).map(|(a, bytes)| {
                            let why = format!(
                                "node {c} is bandwidth-congested (load {:.0} B/s, ≥ {} × every other node's); \
                                 it wrote {} bytes and node {n}, the least loaded, stays at or below the mean \
                                 with them ((bytes(n) − mean) + b = {surplus:.0} ≤ 0)",
                                loads[&c] / secs,
                                t.dominance,
                                p.written
                            );
                            (a, bytes, why)
                        })
                    } else {
                        Err(format!(
                            "node {c} is bandwidth-congested, but moving its {} written bytes to node {n}, \
                             the least loaded, would put that node above the mean ((bytes(n) − mean) + b = \
                             {surplus:.0} > 0)",
                            p.written
                        ))
                    }
                }
            };
            if let Ok((_, _, _)) = &plan {
                let n = target.unwrap_or(c);
                *loads.entry(n).or_insert(0.0) += b;
                *loads.entry(c).or_insert(0.0) -= b;
            }
            finish(cfg, &mut d, plan);
            out.push((d, rank));
            rank -= 1;
        }
    }

    let cpu_congested: Vec<u32> = utils
        .keys()
        .copied()
        .filter(|&c| guards::cpu_congested(c, &utils, cfg.cpu_busy_threshold).is_some())
        .collect();
    if congested.is_empty() {
        for &c in &cpu_congested {
            let mut busy: Vec<&Proc> = procs.iter().filter(|p| p.cur == c).collect();
            busy.sort_by(|a, b| {
                b.v.cpu_percent
                    .total_cmp(&a.v.cpu_percent)
                    .then(a.v.pid.cmp(&b.v.pid))
            });
            // One process per congested node and interval: the busiest the daemon may move.
            for p in busy {
                decided.insert(p.v.pid);
                let b = p.written as f64;
                let mut d = start(cfg, h, p, "cpu-congestion", &loads);
                d.numbers.moved_load_bytes = Some(b);
                if d.verdict == Verdict::Skipped {
                    out.push((d, rank));
                    rank -= 1;
                    continue;
                }
                let mut targets: Vec<u32> = w
                    .nodes
                    .iter()
                    .filter(|n| n.id != c && !cpu_congested.contains(&n.id))
                    .filter(|n| n.cpus.iter().any(|x| p.v.cpuset_cpus.contains(x)))
                    .map(|n| n.id)
                    .collect();
                targets.sort_by(|x, y| {
                    utils
                        .get(x)
                        .unwrap_or(&0.0)
                        .total_cmp(utils.get(y).unwrap_or(&0.0))
                        .then(x.cmp(y))
                });
                let fit = targets
                    .iter()
                    .map(|&n| (n, fits(&loads, n, b)))
                    .find(|(_, (_, ok))| *ok);
                let plan = match (fit, targets.first()) {
                    (Some((n, (surplus, _))), _) => {
                        d.numbers.target_surplus_bytes = Some(surplus);
                        move_to(cfg, w, h, p, n).map(|(a, bytes)| {
                            let why = format!(
                                "node {c} is CPU-congested ({:.0} % busy, every other node below half of that); \
                                 its busiest process moves to node {n} ({:.0} % busy), which stays at or below \
                                 the mean load with its {} written bytes ((bytes(n) − mean) + b = {surplus:.0} ≤ 0)",
                                utils[&c] * 100.0,
                                utils.get(&n).unwrap_or(&0.0) * 100.0,
                                p.written
                            );
                            (a, bytes, why)
                        })
                    }
                    (None, Some(&n)) => {
                        let (surplus, _) = fits(&loads, n, b);
                        d.numbers.target_surplus_bytes = Some(surplus);
                        Err(format!(
                            "node {c} is CPU-congested, but every other node would go above the mean load \
                             with the process's {} written bytes (node {n}: (bytes(n) − mean) + b = {surplus:.0} > 0)",
                            p.written
                        ))
                    }
                    (None, None) => Err(format!(
                        "node {c} is CPU-congested but no other node has CPUs in the process's cpuset"
                    )),
                };
                if let (Ok(_), Some((n, _))) = (&plan, fit) {
                    *loads.entry(n).or_insert(0.0) += b;
                    *loads.entry(c).or_insert(0.0) -= b;
                }
                finish(cfg, &mut d, plan);
                let blocked = d.verdict == Verdict::Blocked;
                out.push((d, rank));
                rank -= 1;
                if !blocked {
                    break;
                }
            }
        }
    }

    if congested.is_empty() && cpu_congested.is_empty() {
        for p in procs.iter().filter(|p| !decided.contains(&p.v.pid)) {
            let totals = p.totals();
            let rate = totals.values().sum::<u64>() as f64 / secs;
            if rate < cfg.min_read_bytes_per_sec.0 as f64 {
                continue;
            }
            // The node it moves most bytes with; nothing to do when that is its own.
            let Some((&m, _)) = totals.iter().max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0))) else {
                continue;
            };
            if m == p.cur {
                continue;
            }
            let mut d = start(cfg, h, p, "locality", &loads);
            let weight = totals
                .iter()
                .filter(|(&n, _)| n != p.cur)
                .map(|(_, b)| b)
                .sum();
            if d.verdict == Verdict::Skipped {
                out.push((d, weight));
                continue;
            }
            let plan = dominant_node(&totals, cfg.win_factor).and_then(|m| {
                move_to(cfg, w, h, p, m).map(|(a, bytes)| {
                    let why = format!(
                        "no node is congested; {} of its {} bytes this interval were {} on node {m}, \
                         at least {} × any other node's, {} on node {} where it runs",
                        p.total(m),
                        totals.values().sum::<u64>(),
                        crate::policy::how(p.v),
                        cfg.win_factor,
                        p.total(p.cur),
                        p.cur
                    );
                    (a, bytes, why)
                })
            });
            finish(cfg, &mut d, plan);
            out.push((d, weight));
        }
    }
    within_caps(cfg, out)
}

/// The decision about `p` before its plan: the numbers, or skipped when the filter or a
/// user's pinning says so.
fn start(
    cfg: &Config,
    h: &History,
    p: &Proc,
    rule: &'static str,
    loads: &BTreeMap<u32, f64>,
) -> Decision {
    let v = p.v;
    let (remote_share, remote) = remote_reads(v, p.cur);
    let mut d = Decision::about(v, PolicyKind::Tofalos);
    d.numbers = Numbers {
        read_bytes: v.read_bytes,
        read_bytes_per_sec: v.read_bytes_per_sec,
        avg_read_bytes: v.avg_read_bytes,
        current_node: p.cur,
        read_share: v.read_distribution.clone(),
        remote_share,
        remote_read_bytes: remote,
        rss_bytes: v.rss_bytes,
        rule: Some(rule),
        node_load_bytes: loads.iter().map(|(&n, &l)| (n, l.round())).collect(),
        mean_load_bytes: Some(mean(loads).round()),
        io_bytes_by_node: p.totals(),
        ..Default::default()
    };
    if let Some(why) = skip_reason(cfg, h, v) {
        d.reason = why;
    } else {
        // Not skipped: the plan decides.
        d.verdict = Verdict::Blocked;
    }
    d
}

/// The follow-data move of `p` to `to`, within the residence, CPU-congestion and memory
/// guards.
fn move_to(
    cfg: &Config,
    w: &World,
    h: &History,
    p: &Proc,
    to: u32,
) -> Result<(crate::policy::Action, u64), String> {
    let since = h
        .proc_moves
        .get(&(p.v.pid, p.v.start_ticks))
        .map(|(t, _)| w.now - t);
    guards::residence(since, cfg.min_residence_secs, "the process")?;
    if let Some(why) = guards::cpu_congested(to, &w.utils(), cfg.cpu_busy_threshold) {
        return Err(why);
    }
    follow_to(cfg, w, p.v, to)
}

fn finish(
    cfg: &Config,
    d: &mut Decision,
    plan: Result<(crate::policy::Action, u64, String), String>,
) {
    match plan {
        Ok((action, bytes, reason)) => {
            d.numbers.target_node = Some(match &action {
                crate::policy::Action::FollowData { to, .. }
                | crate::policy::Action::PullData { to, .. } => *to,
            });
            d.numbers.bytes_to_move = bytes;
            d.action = Some(action);
            d.verdict = if cfg.dry_run {
                Verdict::Advise
            } else {
                Verdict::Act
            };
            d.reason = reason;
        }
        Err(why) => {
            d.verdict = Verdict::Blocked;
            d.reason = why;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io_source::{ExactIo, NumaIoSource};
    use crate::policy::tests::world;
    use crate::policy::Action;
    use numaio_numa::IoBytes;

    const MB: u64 = 1 << 20;
    const GB: u64 = 1 << 30;

    fn cfg() -> Config {
        Config {
            policy: PolicyKind::Tofalos,
            ..Default::default()
        }
    }

    /// A process on `node` whose I/O over one second the eBPF collector counted: `reads` and
    /// `writes` in bytes by the data's node.
    fn proc(pid: i32, node: u32, reads: &[(u32, u64)], writes: &[(u32, u64)]) -> ProcessView {
        let mut v = ProcessView {
            pid,
            start_ticks: 1000 + pid as u64,
            comm: format!("p{pid}"),
            cgroup: "/".into(),
            threads: 1,
            thread_nodes: [(node, 1)].into_iter().collect(),
            main_node: Some(node),
            cpus_allowed: vec![0, 1, 2, 3],
            mems_allowed: vec![0, 1],
            cpuset_cpus: vec![0, 1, 2, 3],
            memory_per_node: [(node, MB)].into_iter().collect(),
            rss_bytes: MB,
            interval_secs: 1.0,
            cpu_percent: 10.0,
            ..Default::default()
        };
        let mut by: BTreeMap<u32, IoBytes> = BTreeMap::new();
        for &(n, b) in reads {
            by.entry(n).or_default().read_bytes += b;
        }
        for &(n, b) in writes {
            by.entry(n).or_default().write_bytes += b;
        }
        let (mut local, mut remote) = (IoBytes::default(), IoBytes::default());
        for (&n, x) in &by {
            let side = if n == node { &mut local } else { &mut remote };
            side.read_bytes += x.read_bytes;
            side.write_bytes += x.write_bytes;
        }
        let io = ExactIo {
            by_data_node: by.into_iter().collect(),
            local: Some(local),
            remote: Some(remote),
        };
        v.read_bytes = reads.iter().map(|r| r.1).sum();
        v.read_bytes_per_sec = v.read_bytes as f64;
        v.write_bytes = writes.iter().map(|r| r.1).sum();
        v.set_exact(NumaIoSource::Ebpf, &io, &[0, 1]);
        v
    }

    fn follow_target(d: &Decision) -> Option<u32> {
        match &d.action {
            Some(Action::FollowData { to, .. }) => Some(*to),
            _ => None,
        }
    }

    #[test]
    fn the_bytes_rule_and_congestion_test() {
        let loads: BTreeMap<u32, f64> = [(0, 400.0), (1, 10.0)].into_iter().collect();
        assert_eq!(mean(&loads), 205.0);
        // (10 − 205) + 100 = −95 ≤ 0: fits; (10 − 205) + 300 = 105 > 0: does not.
        assert_eq!(fits(&loads, 1, 100.0), (-95.0, true));
        assert_eq!(fits(&loads, 1, 300.0), (105.0, false));
        assert_eq!(fits(&loads, 1, 195.0), (0.0, true));
        let t = Tofalos {
            min_congested_bytes_per_sec: crate::config::Bytes(100),
            ..Default::default()
        };
        assert_eq!(bandwidth_congested(&t, &loads, 1.0), vec![0]);
        // Not twice every other node's load: no congestion.
        let even: BTreeMap<u32, f64> = [(0, 400.0), (1, 201.0)].into_iter().collect();
        assert!(bandwidth_congested(&t, &even, 1.0).is_empty());
        // Below the threshold of the node's bandwidth: none either.
        let with_bw = Tofalos {
            node_bandwidth: Some(crate::config::Bytes(1000)),
            ..t.clone()
        };
        assert!(bandwidth_congested(&with_bw, &loads, 1.0).is_empty());
        assert_eq!(bandwidth_congested(&with_bw, &loads, 0.25), vec![0]);
        // An idle machine is never congested.
        let idle: BTreeMap<u32, f64> = [(0, 50.0), (1, 0.0)].into_iter().collect();
        assert!(bandwidth_congested(&t, &idle, 1.0).is_empty());
        // The anti-oscillation factor.
        let io: BTreeMap<u32, u64> = [(0, 100), (1, 250)].into_iter().collect();
        assert_eq!(dominant_node(&io, 2.0), Ok(1));
        let e = dominant_node(&io, 3.0).unwrap_err();
        assert!(e.contains("anti-oscillation factor 3"), "{e}");
    }

    /// Node 0 carries 400 MiB of writes against node 1's 30 MiB of reads (10 MiB of load):
    /// the 300 MiB writer would push node 1 above the mean and stays; the 100 MiB writer
    /// moves to node 1.
    #[test]
    fn congested_node_sheds_the_writers_that_fit() {
        let big = proc(10, 0, &[], &[(0, 300 * MB)]);
        let small = proc(11, 0, &[], &[(0, 100 * MB)]);
        let reader = proc(12, 1, &[(1, 30 * MB)], &[]);
        let d = decide(&cfg(), &world(), &[big, small, reader], &History::default());
        assert_eq!(d.len(), 2, "{d:#?}");
        let by = |pid| d.iter().find(|x| x.pid == pid).unwrap();
        let (b, s) = (by(10), by(11));
        assert_eq!(b.verdict, Verdict::Blocked, "{b:#?}");
        assert!(b.reason.contains("above the mean"), "{}", b.reason);
        assert_eq!(b.numbers.rule, Some("bandwidth-congestion"));
        assert_eq!(b.numbers.moved_load_bytes, Some((300 * MB) as f64));
        assert!(b.numbers.target_surplus_bytes.unwrap() > 0.0);
        assert_eq!(s.verdict, Verdict::Act, "{s:#?}");
        assert_eq!(follow_target(s), Some(1));
        assert!(s.numbers.target_surplus_bytes.unwrap() <= 0.0);
        assert_eq!(s.read_source, NumaIoSource::Ebpf);
        let line = serde_json::to_value(s).unwrap();
        assert_eq!(line["read_source"], "ebpf");
        assert_eq!(line["numbers"]["rule"], "bandwidth-congestion");
        assert_eq!(
            line["numbers"]["node_load_bytes"]["0"],
            (400 * MB) as f64,
            "{line}"
        );
    }

    /// Once a move brings the congested node down to the mean, the rest stay.
    #[test]
    fn moves_stop_at_the_mean() {
        let views: Vec<ProcessView> = (0..4)
            .map(|i| proc(20 + i, 0, &[], &[(0, 100 * MB)]))
            .collect();
        // Loads 400 / 0, mean 200: two moves of 100 bring node 0 to 200 = the mean.
        let d = decide(&cfg(), &world(), &views, &History::default());
        let acted: Vec<_> = d.iter().filter(|x| x.verdict == Verdict::Act).collect();
        assert_eq!(acted.len(), 2, "{d:#?}");
        assert_eq!(d.len(), 2, "no line for writers never considered: {d:#?}");
        assert!(acted.iter().all(|x| follow_target(x) == Some(1)));
    }

    /// No congestion: a process follows its bytes only when one node beats every other by
    /// the anti-oscillation factor.
    #[test]
    fn locality_moves_only_past_the_factor() {
        // Loads well below min_congested_bytes_per_sec: no node is congested.
        let clear = proc(30, 0, &[(1, 9 * MB), (0, MB)], &[]);
        let close = proc(31, 0, &[(1, 6 * MB), (0, 4 * MB)], &[]);
        let local = proc(32, 1, &[(1, 5 * MB)], &[]);
        let d = decide(
            &cfg(),
            &world(),
            &[clear, close, local],
            &History::default(),
        );
        assert_eq!(d.len(), 2, "the local process needs no decision: {d:#?}");
        let by = |pid| d.iter().find(|x| x.pid == pid).unwrap();
        assert_eq!(by(30).verdict, Verdict::Act);
        assert_eq!(follow_target(by(30)), Some(1));
        assert_eq!(by(30).numbers.rule, Some("locality"));
        assert!(by(30).reason.contains("counted"), "{}", by(30).reason);
        assert_eq!(by(31).verdict, Verdict::Blocked);
        assert!(
            by(31).reason.contains("anti-oscillation"),
            "{}",
            by(31).reason
        );
        // A lower factor lets the 60/40 process move too.
        let mut c = cfg();
        c.win_factor = 1.2;
        let d = decide(
            &c,
            &world(),
            &[proc(31, 0, &[(1, 6 * MB), (0, 4 * MB)], &[])],
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Act);
        // The remote share is the collector's: 60 % remote.
        assert!((d[0].numbers.remote_share - 0.6).abs() < 1e-9);
        assert_eq!(d[0].numbers.remote_read_bytes, 6 * MB);
    }

    /// A process moved recently stays put (minimum residence), and a dry run only advises.
    #[test]
    fn residence_and_dry_run() {
        let v = proc(40, 0, &[(1, 90 * MB)], &[]);
        let mut h = History::default();
        h.proc_moves.insert((40, 1040), (95.0, 0));
        let d = decide(&cfg(), &world(), std::slice::from_ref(&v), &h);
        assert_eq!(d[0].verdict, Verdict::Blocked);
        assert!(d[0].reason.contains("minimum residence"), "{}", d[0].reason);
        let mut c = cfg();
        c.dry_run = true;
        let d = decide(&c, &world(), &[v], &History::default());
        assert_eq!(d[0].verdict, Verdict::Advise);
    }

    /// A CPU-congested node sheds its busiest process to the idle node, unless that node
    /// would go above the mean load with the process's writes.
    #[test]
    fn cpu_congestion_moves_the_busiest_process() {
        let mut w = world();
        w.nodes[0].cpu_util = 0.95;
        w.nodes[1].cpu_util = 0.3;
        let mut busy = proc(50, 0, &[(0, 20 * MB)], &[]);
        busy.cpu_percent = 90.0;
        let mut calm = proc(51, 0, &[(0, 20 * MB)], &[]);
        calm.cpu_percent = 5.0;
        let d = decide(&cfg(), &w, &[calm.clone(), busy], &History::default());
        assert_eq!(d.len(), 1, "{d:#?}");
        assert_eq!(d[0].pid, 50);
        assert_eq!(d[0].verdict, Verdict::Act);
        assert_eq!(d[0].numbers.rule, Some("cpu-congestion"));
        assert_eq!(follow_target(&d[0]), Some(1));
        // A heavy writer would overload node 1: it is refused, the next one is tried.
        let mut writer = proc(52, 0, &[], &[(0, 200 * MB)]);
        writer.cpu_percent = 95.0;
        let mut c = cfg();
        // Keep the bandwidth rule out of it.
        c.tofalos.min_congested_bytes_per_sec = crate::config::Bytes(GB);
        let d = decide(&c, &w, &[writer, calm], &History::default());
        let by = |pid| d.iter().find(|x| x.pid == pid).unwrap();
        assert_eq!(by(52).verdict, Verdict::Blocked, "{d:#?}");
        assert!(
            by(52).reason.contains("above the mean"),
            "{}",
            by(52).reason
        );
        assert_eq!(by(51).verdict, Verdict::Act);
    }

    /// With estimated counts the writes are put on the node the process runs on, and the
    /// decision says the counts were estimated.
    #[test]
    fn estimated_views_are_labelled() {
        let mut v = proc(60, 0, &[], &[]);
        v.numa_io_source = NumaIoSource::Estimate;
        v.numa_write_bytes.clear();
        v.write_bytes = 300 * MB;
        v.local_bytes = None;
        v.remote_bytes = None;
        let reader = {
            let mut r = proc(61, 1, &[(1, 3 * MB)], &[]);
            r.numa_io_source = NumaIoSource::Estimate;
            r
        };
        let d = decide(&cfg(), &world(), &[v, reader], &History::default());
        assert_eq!(d[0].pid, 60);
        assert_eq!(d[0].read_source, NumaIoSource::Estimate);
        assert_eq!(d[0].numbers.io_bytes_by_node[&0], 300 * MB);
        assert_eq!(d[0].numbers.rule, Some("bandwidth-congestion"));
        assert_eq!(
            d[0].verdict,
            Verdict::Blocked,
            "300 MiB would overload node 1"
        );
    }

    /// One node with CPUs: nowhere to move, so no decision at all, however busy it is.
    #[test]
    fn a_single_node_machine_gets_no_decisions() {
        let mut w = world();
        w.nodes.truncate(1);
        w.nodes[0].cpu_util = 0.99;
        let writer = proc(80, 0, &[], &[(0, GB)]);
        assert!(decide(&cfg(), &w, &[writer], &History::default()).is_empty());
        let lone: BTreeMap<u32, f64> = [(0, 1e12)].into_iter().collect();
        assert!(bandwidth_congested(&Tofalos::default(), &lone, 1.0).is_empty());
    }

    /// Excluded and pinned processes are skipped with their reason.
    #[test]
    fn filters_apply() {
        let mut c = cfg();
        c.filter.exclude_comms = vec!["p70".into()];
        let d = decide(
            &c,
            &world(),
            &[proc(70, 0, &[(1, 90 * MB)], &[])],
            &History::default(),
        );
        assert_eq!(d[0].verdict, Verdict::Skipped);
        assert!(d[0].reason.contains("excluded"));
    }
}
