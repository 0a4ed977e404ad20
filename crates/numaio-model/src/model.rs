//! The bandwidth-sharing model: predicts the throughput and latency of a workload (threads
//! per node, request size, read/write mix, data placement, sharing pattern) on a profile.
//!
//! Equations (docs/model.md explains them):
//! * a thread on node i whose data is spread as fractions f_j over memory nodes reads memory
//!   at `r_ij = min(copy, mlp × 64 B / lat_ij)`; one request of `bs` bytes takes
//!   `T = overhead + cpu_per_kib × bs/1KiB + bs × Σ_j f_j / r_ij`, so its demand is `bs / T`
//!   (scaled by cpus/threads when a node has more threads than CPUs);
//! * resources: each memory controller (capacity mixed from read and write capacity as
//!   `1 / ((1−w)/C_r + w/C_w)`), each link direction on the route between the nodes, each
//!   (CPU node, memory node) pair whose bandwidth the profile gives, and, for shared files,
//!   the shared file's lines every request updates, per node holding them (capacity
//!   1 / line-transfer latency; with replicas each copy's lines are updated only by the
//!   threads that read that copy);
//! * rates are the max-min fair allocation of those capacities ([`crate::fairshare`]); an
//!   over-subscribed memory controller or node-to-memory path loses capacity by the profile's `collapse` factor;
//! * latency per request is `bs / rate`; loaded memory latency is the idle latency times the
//!   thread's demand/rate (a closed loop with a fixed number of lines in flight).

use crate::error::{ModelError, ModelResult};
use crate::fairshare::{self, Flow};
use crate::profile::{Matrix, Profile};
use serde::Serialize;
use std::fmt;
use std::str::FromStr;

/// Where the data sits.
#[derive(Debug, Clone, PartialEq)]
pub enum Placement {
    /// All data on one node (the first memory node when none is given).
    Single(Option<u32>),
    /// Each thread's data on its own node.
    Local,
    /// Interleaved evenly over all memory nodes.
    Fair,
    /// Striped over K nodes: for private files the thread's node and the K−1 after it; for a
    /// shared file the first K memory nodes.
    Stripe(usize),
    /// A fraction per node, in the order of the profile's nodes.
    Weights(Vec<f64>),
    /// Each node that reads a shared file has its own copy of it (`numaio replicate`), so every
    /// reader is local as with [`Placement::Local`], and each copy's lines (inode, page
    /// reference counts) are updated only by the threads of the node that reads it. With
    /// private files each file has readers on one node only, so this is the same as `Local`.
    /// A reader on a node without memory reads the copy on its nearest memory node, as for
    /// `Local`. The cost is memory: [`Prediction::copies`] copies of the file.
    Replica,
}

impl FromStr for Placement {
    type Err = ModelError;
    fn from_str(s: &str) -> ModelResult<Placement> {
        let bad = || {
            ModelError::BadWorkload(format!(
                "placement {s:?}: expected single, single:NODE, local, fair, stripe:K, weights:F0,F1,... or replica"
            ))
        };
        let (head, arg) = match s.split_once(':') {
            Some((h, a)) => (h, Some(a)),
            None => (s, None),
        };
        match (head, arg) {
            ("single", None) => Ok(Placement::Single(None)),
            ("single", Some(n)) => Ok(Placement::Single(Some(n.parse().map_err(|_| bad())?))),
            ("local", None) => Ok(Placement::Local),
            ("fair" | "interleave", None) => Ok(Placement::Fair),
            ("replica" | "replicas", None) => Ok(Placement::Replica),
            ("stripe", Some(k)) => match k.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(Placement::Stripe(k)),
                _ => Err(bad()),
            },
            ("weights", Some(w)) => {
                let v: Result<Vec<f64>, _> = w.split(',').map(|x| x.trim().parse()).collect();
                let v = v.map_err(|_| bad())?;
                if v.iter().any(|x| !x.is_finite() || *x < 0.0) || v.iter().sum::<f64>() <= 0.0 {
                    return Err(bad());
                }
                Ok(Placement::Weights(v))
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Placement::Single(None) => write!(f, "single"),
            Placement::Single(Some(n)) => write!(f, "single:{n}"),
            Placement::Local => write!(f, "local"),
            Placement::Fair => write!(f, "fair"),
            Placement::Replica => write!(f, "replica"),
            Placement::Stripe(k) => write!(f, "stripe:{k}"),
            Placement::Weights(w) => {
                let s: Vec<String> = w.iter().map(|x| x.to_string()).collect();
                write!(f, "weights:{}", s.join(","))
            }
        }
    }
}

/// How threads share files (ZonFS's levels).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sharing {
    /// Each thread reads its own file.
    Private,
    /// One file, each thread its own disjoint chunks.
    Medium,
    /// One file, any thread any chunk.
    High,
}

impl FromStr for Sharing {
    type Err = ModelError;
    fn from_str(s: &str) -> ModelResult<Sharing> {
        match s {
            "private" | "low" => Ok(Sharing::Private),
            "medium" => Ok(Sharing::Medium),
            "high" => Ok(Sharing::High),
            _ => Err(ModelError::BadWorkload(format!(
                "sharing {s:?}: expected private, medium or high"
            ))),
        }
    }
}

impl Sharing {
    /// Updates of one shared cache line per request: the inode's atime for a shared file, and
    /// the page's reference count as well when any thread may touch any page.
    fn shared_updates(self) -> f64 {
        match self {
            Sharing::Private => 0.0,
            Sharing::Medium => 1.0,
            Sharing::High => 2.0,
        }
    }
}

/// What runs.
#[derive(Debug, Clone, PartialEq)]
pub struct Workload {
    /// Threads per node, in the order of the profile's nodes.
    pub threads_per_node: Vec<u32>,
    /// Request size in bytes.
    pub bs: u64,
    /// Fraction of bytes read (the rest written).
    pub read_fraction: f64,
    pub placement: Placement,
    pub sharing: Sharing,
}

impl Workload {
    /// `threads` spread round robin over the profile's nodes that have CPUs.
    pub fn spread(profile: &Profile, threads: u32, placement: Placement) -> ModelResult<Workload> {
        let cpu_nodes: Vec<usize> = (0..profile.nodes.len())
            .filter(|&i| profile.has_cpus(i))
            .collect();
        if cpu_nodes.is_empty() {
            return Err(ModelError::BadWorkload(
                "the profile has no node with CPUs".into(),
            ));
        }
        let mut per = vec![0u32; profile.nodes.len()];
        for t in 0..threads as usize {
            per[cpu_nodes[t % cpu_nodes.len()]] += 1;
        }
        Ok(Workload {
            threads_per_node: per,
            bs: 4096,
            read_fraction: 1.0,
            placement,
            sharing: Sharing::Private,
        })
    }
}

/// One node's threads in a prediction.
#[derive(Debug, Clone, Serialize)]
pub struct NodeRate {
    pub node: u32,
    pub threads: u32,
    /// What one thread would reach alone, MB/s.
    pub demand_mb_s: f64,
    /// What one thread gets, MB/s.
    pub mb_s_per_thread: f64,
    /// Fraction of this node's threads' bytes on each node.
    pub data: Vec<f64>,
}

/// The model's answer.
#[derive(Debug, Clone, Serialize)]
pub struct Prediction {
    pub throughput_mb_s: f64,
    /// Mean time of one request, ns.
    pub latency_ns: f64,
    /// Mean loaded memory latency, ns.
    pub memory_latency_ns: f64,
    pub per_node: Vec<NodeRate>,
    /// Resources running at capacity, with their capacity in MB/s (ops/s for shared lines).
    pub bottlenecks: Vec<String>,
    pub notes: Vec<String>,
    /// Copies of each file kept in memory: for replicas of a shared file one per memory node
    /// that serves readers, otherwise 1. The memory used is `copies` × the file's size.
    pub copies: u32,
}

struct Resource {
    name: String,
    capacity: f64,
    /// Loses capacity when over-subscribed (memory controllers and node-to-memory paths).
    controller: bool,
}

fn get(m: &Option<Matrix>, i: usize, j: usize) -> Option<f64> {
    m.as_ref()?.get(i)?.get(j).copied().flatten()
}

/// Capacity of a resource for a mix with write fraction `w`: reads and writes time-share it.
fn mixed(read: f64, write: Option<f64>, w: f64) -> f64 {
    let write = write.unwrap_or(read);
    1.0 / ((1.0 - w) / read + w / write)
}

/// How traffic from node index `from` to `to` spreads over the link directions `dirs` (a→b
/// pairs): split evenly over every shortest path (in hops) at each node, as adaptive or
/// interleaved routing does. Returns `(direction index, fraction)`; empty when `from == to`
/// or the nodes are not connected.
fn route(n: usize, dirs: &[(usize, usize)], from: usize, to: usize) -> Vec<(usize, f64)> {
    if from == to {
        return Vec::new();
    }
    // Hops to `to` from every node, following directions backwards.
    let mut dist = vec![usize::MAX; n];
    dist[to] = 0;
    let mut queue = std::collections::VecDeque::from([to]);
    while let Some(v) = queue.pop_front() {
        for &(a, b) in dirs {
            if b == v && dist[a] == usize::MAX {
                dist[a] = dist[v] + 1;
                queue.push_back(a);
            }
        }
    }
    if dist[from] == usize::MAX {
        return Vec::new();
    }
    let mut share = vec![0.0; n];
    share[from] = 1.0;
    let mut out: Vec<(usize, f64)> = Vec::new();
    let mut order: Vec<usize> = (0..n).filter(|&u| dist[u] != usize::MAX).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(dist[u]));
    for u in order {
        if share[u] == 0.0 || u == to {
            continue;
        }
        let next: Vec<usize> = (0..dirs.len())
            .filter(|&k| dirs[k].0 == u && dist[dirs[k].1] + 1 == dist[u])
            .collect();
        let part = share[u] / next.len() as f64;
        for k in next {
            share[dirs[k].1] += part;
            out.push((k, part));
        }
    }
    out
}

impl Placement {
    /// Data fractions per memory node for a thread on node index `i`.
    fn fractions(&self, p: &Profile, sharing: Sharing, i: usize) -> ModelResult<Vec<f64>> {
        let n = p.nodes.len();
        let mem: Vec<usize> = (0..n).collect();
        let mut f = vec![0.0; n];
        match self {
            Placement::Single(node) => {
                let j = match node {
                    Some(id) => p.index(*id).ok_or_else(|| {
                        ModelError::BadWorkload(format!(
                            "placement single:{id}: the profile has nodes {:?}",
                            p.nodes
                        ))
                    })?,
                    None => (0..n).find(|&j| p.has_memory(j)).unwrap_or(0),
                };
                f[j] = 1.0;
            }
            Placement::Local | Placement::Replica => f[local_memory(p, i)] = 1.0,
            Placement::Fair => mem.iter().for_each(|&j| f[j] = 1.0 / n as f64),
            Placement::Stripe(k) => {
                if *k > n {
                    return Err(ModelError::BadWorkload(format!(
                        "stripe:{k} over a profile with {n} nodes"
                    )));
                }
                let start = if sharing == Sharing::Private { i } else { 0 };
                for s in 0..*k {
                    f[(start + s) % n] = 1.0 / *k as f64;
                }
            }
            Placement::Weights(w) => {
                if w.len() != n {
                    return Err(ModelError::BadWorkload(format!(
                        "weights give {} fractions for {n} nodes",
                        w.len()
                    )));
                }
                let sum: f64 = w.iter().sum();
                for (j, x) in w.iter().enumerate() {
                    f[j] = x / sum;
                }
            }
        }
        Ok(f)
    }
}

/// The memory node that serves node index `i`'s local allocations: `i` itself, or for a node
/// without memory the nearest one that has memory (lowest latency, else lowest SLIT distance,
/// then lowest index), as the kernel falls back for a memory-less node. `i` when the profile
/// cannot tell which is nearest.
fn local_memory(p: &Profile, i: usize) -> usize {
    if p.has_memory(i) {
        return i;
    }
    let nearest = |cost: &dyn Fn(usize) -> Option<f64>| {
        (0..p.nodes.len())
            .filter(|&j| j != i && p.has_memory(j))
            .filter_map(|j| Some((cost(j)?, j)))
            .min_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)))
            .map(|(_, j)| j)
    };
    nearest(&|j| p.latency(i, j))
        .or_else(|| nearest(&|j| get(&p.advertised.distance, i, j)))
        .unwrap_or(i)
}

/// A thread's memory rate from CPU node `i` to memory node `j`, MB/s.
fn memory_rate(p: &Profile, i: usize, j: usize) -> f64 {
    match p.latency(i, j).or_else(|| p.latency(i, i)) {
        Some(lat) if lat > 0.0 => (p.thread.mlp * 64.0 / lat * 1000.0).min(p.thread.copy_mb_s),
        _ => p.thread.copy_mb_s,
    }
}

/// Predicts a workload on a profile.
pub fn predict(p: &Profile, w: &Workload) -> ModelResult<Prediction> {
    let n = p.nodes.len();
    if w.threads_per_node.len() != n {
        return Err(ModelError::BadWorkload(format!(
            "threads given for {} nodes, the profile has {n}",
            w.threads_per_node.len()
        )));
    }
    if w.bs == 0 {
        return Err(ModelError::BadWorkload("request size 0".into()));
    }
    if !(0.0..=1.0).contains(&w.read_fraction) {
        return Err(ModelError::BadWorkload(format!(
            "read fraction {} is not within 0..1",
            w.read_fraction
        )));
    }
    for (i, &t) in w.threads_per_node.iter().enumerate() {
        if t > 0 && !p.has_cpus(i) {
            return Err(ModelError::BadWorkload(format!(
                "node {} has no CPUs to run threads",
                p.nodes[i]
            )));
        }
    }
    if w.threads_per_node.iter().all(|&t| t == 0) {
        return Err(ModelError::BadWorkload("no threads".into()));
    }
    let wf = 1.0 - w.read_fraction;
    let bw = &p.bandwidth_mb_s;
    let mut notes = Vec::new();
    if p.latency_ns.is_none() {
        notes.push("the profile has no latency matrix: threads run at thread.copy_mb_s".into());
    }

    let mut res: Vec<Resource> = Vec::new();
    // Memory controllers.
    let mut ctrl: Vec<Option<usize>> = vec![None; n];
    for (j, slot) in ctrl.iter_mut().enumerate() {
        let (cr, cw) = match &p.controllers {
            Some(c) => (c.read_mb_s[j], c.write_mb_s.as_ref().and_then(|v| v[j])),
            None => {
                let col = |m: &Option<Matrix>| {
                    (0..n)
                        .filter_map(|i| get(m, i, j))
                        .fold(None, |a: Option<f64>, v| Some(a.map_or(v, |a| a.max(v))))
                };
                (col(&bw.read), col(&bw.write))
            }
        };
        if let Some(cr) = cr {
            *slot = Some(res.len());
            res.push(Resource {
                name: format!("memory controller of node {}", p.nodes[j]),
                capacity: mixed(cr, cw, wf),
                controller: true,
            });
        }
    }
    // Link directions.
    let mut dirs: Vec<(usize, usize)> = Vec::new();
    let mut dir_res: Vec<usize> = Vec::new();
    for l in p.links.iter().flatten() {
        let (a, b) = (p.index(l.a).unwrap_or(0), p.index(l.b).unwrap_or(0));
        for (x, y) in [(a, b), (b, a)] {
            dirs.push((x, y));
            dir_res.push(res.len());
            res.push(Resource {
                name: format!("link {}->{}", p.nodes[x], p.nodes[y]),
                capacity: l.mb_s,
                controller: false,
            });
        }
    }
    // (CPU node, memory node) pairs with a published or measured bandwidth.
    let mut pair: Vec<Vec<Option<usize>>> = vec![vec![None; n]; n];
    for (i, row) in pair.iter_mut().enumerate() {
        for (j, slot) in row.iter_mut().enumerate() {
            let r = get(&bw.read, i, j);
            let wr = get(&bw.write, i, j);
            let cap = match (r, wr) {
                (Some(r), wr) if wf < 1.0 => Some(mixed(r, wr, wf)),
                (_, Some(wr)) if wf > 0.0 => Some(wr),
                _ => None,
            };
            if let Some(cap) = cap {
                *slot = Some(res.len());
                res.push(Resource {
                    name: format!("node {} -> memory of node {}", p.nodes[i], p.nodes[j]),
                    capacity: cap,
                    controller: true,
                });
            }
        }
    }
    // The shared file's lines every request updates (inode atime, page reference counts) live
    // with the data, on its node: one resource per memory node, in updates per second, each
    // update costing one line transfer from the updating threads' nodes. One file's lines
    // bounce between all its readers; a replica's lines only between the readers of that copy.
    let updates = w.sharing.shared_updates();
    let replicas = w.placement == Placement::Replica && w.sharing != Sharing::Private;
    let home: Vec<usize> = (0..n).map(|i| local_memory(p, i)).collect();
    let mut shared_line: Vec<Option<usize>> = vec![None; n];
    if updates > 0.0 {
        for (j, slot) in shared_line.iter_mut().enumerate() {
            let mut sum = 0.0;
            let mut cnt = 0.0;
            for (i, &ti) in w.threads_per_node.iter().enumerate() {
                if replicas && home[i] != j {
                    continue;
                }
                if let Some(l) = p.latency(i, j).or_else(|| p.latency(i, i)) {
                    sum += l * f64::from(ti);
                    cnt += f64::from(ti);
                }
            }
            let bounce_ns = if cnt > 0.0 { sum / cnt } else { 100.0 };
            *slot = Some(res.len());
            res.push(Resource {
                name: format!("shared file's lines on node {}", p.nodes[j]),
                capacity: 1e9 / bounce_ns,
                controller: false,
            });
        }
    }

    let copies = if replicas {
        let mut held: Vec<usize> = (0..n)
            .filter(|&i| w.threads_per_node[i] > 0)
            .map(|i| home[i])
            .collect();
        held.sort_unstable();
        held.dedup();
        held.len() as u32
    } else {
        1
    };
    if replicas && wf > 0.0 {
        notes.push(
            "replica: replicas are read-only copies (run --replica binds them read-only); \
             writes are modelled on the writer's own copy, and keeping the copies in step is \
             not modelled"
                .into(),
        );
    }

    let mut flows = Vec::new();
    let mut fracs = Vec::new();
    let mut demands = Vec::new();
    let bs = w.bs as f64;
    for (i, &t) in w.threads_per_node.iter().enumerate() {
        let f = w.placement.fractions(p, w.sharing, i)?;
        let mem_ns: f64 = (0..n)
            .filter(|&j| f[j] > 0.0)
            .map(|j| bs * 1e3 * f[j] / memory_rate(p, i, j))
            .sum();
        let req_ns =
            p.io_path.request_overhead_ns + p.io_path.cpu_ns_per_kib * bs / 1024.0 + mem_ns;
        let mut demand = bs / req_ns * 1e3;
        if let Some(&cpus) = p.cpus_per_node.get(i) {
            if t > cpus && cpus > 0 {
                demand *= f64::from(cpus) / f64::from(t);
            }
        }
        let mut uses = Vec::new();
        for j in (0..n).filter(|&j| f[j] > 0.0) {
            if let Some(c) = ctrl[j] {
                uses.push((c, f[j]));
            }
            if let Some(r) = pair[i][j] {
                uses.push((r, f[j]));
            }
            if let Some(s) = shared_line[j] {
                // Updates per second per MB/s of this thread's rate.
                uses.push((s, f[j] * updates * 1e6 / bs));
            }
            if w.read_fraction > 0.0 {
                for (k, share) in route(n, &dirs, j, i) {
                    uses.push((dir_res[k], f[j] * w.read_fraction * share));
                }
            }
            if wf > 0.0 {
                for (k, share) in route(n, &dirs, i, j) {
                    uses.push((dir_res[k], f[j] * wf * share));
                }
            }
        }
        flows.push(Flow {
            count: f64::from(t),
            demand,
            uses,
        });
        fracs.push(f);
        demands.push(demand);
    }

    let mut cap: Vec<f64> = res.iter().map(|r| r.capacity).collect();
    if p.collapse > 0.0 {
        let mut offered = vec![0.0; cap.len()];
        for f in &flows {
            for &(r, u) in &f.uses {
                offered[r] += u * f.count * f.demand;
            }
        }
        for ((c, o), r) in cap.iter_mut().zip(&offered).zip(&res) {
            if r.controller && *o > *c {
                *c /= 1.0 + p.collapse * (*o / *c - 1.0);
            }
        }
    }
    let rates = fairshare::solve(&cap, &flows);

    let mut used = vec![0.0; cap.len()];
    for (f, &x) in flows.iter().zip(&rates) {
        for &(r, u) in &f.uses {
            used[r] += u * f.count * x;
        }
    }
    let bottlenecks = res
        .iter()
        .zip(&cap)
        .zip(&used)
        .filter(|((_, &c), &u)| u >= c * 0.999 && u > 0.0)
        .map(|((r, &c), _)| format!("{} ({c:.0})", r.name))
        .collect();

    let mut total = 0.0;
    let mut lat_sum = 0.0;
    let mut mem_lat_sum = 0.0;
    let mut threads = 0.0;
    let mut per_node = Vec::new();
    for i in 0..n {
        let t = f64::from(w.threads_per_node[i]);
        let x = rates[i];
        if t > 0.0 && x > 0.0 {
            total += t * x;
            lat_sum += t * bs * 1e3 / x;
            let idle: f64 = (0..n)
                .map(|j| fracs[i][j] * p.latency(i, j).or_else(|| p.latency(i, i)).unwrap_or(0.0))
                .sum();
            mem_lat_sum += t * idle * demands[i] / x;
            threads += t;
        }
        per_node.push(NodeRate {
            node: p.nodes[i],
            threads: w.threads_per_node[i],
            demand_mb_s: demands[i],
            mb_s_per_thread: x,
            data: fracs[i].clone(),
        });
    }
    if threads == 0.0 {
        return Err(ModelError::BadWorkload(
            "no thread can make progress".into(),
        ));
    }
    Ok(Prediction {
        throughput_mb_s: total,
        latency_ns: lat_sum / threads,
        memory_latency_ns: mem_lat_sum / threads,
        per_node,
        bottlenecks,
        notes,
        copies,
    })
}

/// The improvement (fraction of run time) from moving a task that reads `file_bytes` on node
/// `data` from node `cpu` to `data`, when its own `process_bytes` must migrate with it:
/// `I = (T_stay − T_move) / T_stay` with `T_move = P / migrate rate + F / local rate`. It is
/// Adams's `I = M − (P/F) × R` with `M` the remote penalty and `R = stay rate / migrate rate`.
pub fn move_gain(
    p: &Profile,
    cpu: u32,
    data: u32,
    file_bytes: u64,
    process_bytes: u64,
    bs: u64,
) -> ModelResult<f64> {
    let (ci, di) = match (p.index(cpu), p.index(data)) {
        (Some(c), Some(d)) => (c, d),
        _ => {
            return Err(ModelError::BadWorkload(format!(
                "nodes {cpu} and {data}: the profile has nodes {:?}",
                p.nodes
            )))
        }
    };
    let one = |node: usize| -> ModelResult<f64> {
        let mut threads = vec![0; p.nodes.len()];
        threads[node] = 1;
        let w = Workload {
            threads_per_node: threads,
            bs,
            read_fraction: 1.0,
            placement: Placement::Single(Some(data)),
            sharing: Sharing::Private,
        };
        Ok(predict(p, &w)?.throughput_mb_s)
    };
    let stay = one(ci)?;
    let moved = one(di)?;
    let migrate = p
        .move_pages
        .filter(|m| m.from != m.to && m.mb_s > 0.0)
        .map(|m| m.mb_s)
        .unwrap_or_else(|| memory_rate(p, di, ci));
    let f = file_bytes as f64;
    let t_stay = f / stay;
    let t_move = process_bytes as f64 / migrate + f / moved;
    Ok((t_stay - t_move) / t_stay)
}

/// Node indices ranked for a thread on `cpu` by the model's single-thread rate to each memory
/// node (best first); used to pick where data or a task should go.
pub fn rank_memory_nodes(p: &Profile, cpu: usize) -> Vec<(u32, f64)> {
    let mut v: Vec<(u32, f64)> = (0..p.nodes.len())
        .map(|j| (p.nodes[j], memory_rate(p, cpu, j)))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_node() -> Profile {
        Profile::from_json(
            r#"{"nodes":[0,1],"cpus_per_node":[4,4],"latency_ns":[[80,160],[160,80]],
                "controllers":{"read_mb_s":[20000,20000]},
                "links":[{"a":0,"b":1,"mb_s":8000}],
                "thread":{"mlp":10,"copy_mb_s":6000}}"#,
        )
        .unwrap()
    }

    #[test]
    fn placements_parse_and_print() {
        for s in [
            "single",
            "single:2",
            "local",
            "fair",
            "stripe:4",
            "weights:1,3",
            "replica",
        ] {
            assert_eq!(s.parse::<Placement>().unwrap().to_string(), s);
        }
        assert_eq!("replicas".parse::<Placement>().unwrap(), Placement::Replica);
        for s in [
            "stripe:0",
            "stripe",
            "weights:",
            "weights:-1,2",
            "nowhere",
            "single:x",
            "replica:2",
        ] {
            assert!(s.parse::<Placement>().is_err(), "{s}");
        }
        assert!("any".parse::<Sharing>().is_err());
    }

    #[test]
    fn local_beats_remote_and_link_limits_remote() {
        let p = two_node();
        let mut w = Workload::spread(&p, 8, Placement::Local).unwrap();
        let local = predict(&p, &w).unwrap();
        // 4 threads per node at 6000 MB/s (copy-bound) = 24000 > 20000 controller: capped.
        assert!((local.throughput_mb_s - 40000.0).abs() < 1.0, "{local:?}");
        w.placement = Placement::Single(Some(0));
        let single = predict(&p, &w).unwrap();
        // Node 1's threads cross one link direction (8000); node 0's get the controller's rest.
        assert!((single.throughput_mb_s - 20000.0).abs() < 1.0, "{single:?}");
        assert!(single.bottlenecks.iter().any(|b| b.contains("link 0->1")));
        assert!(single.latency_ns > local.latency_ns);
    }

    #[test]
    fn bad_workloads_are_refused() {
        let p = two_node();
        let mut w = Workload::spread(&p, 2, Placement::Stripe(3)).unwrap();
        assert!(predict(&p, &w).is_err());
        w.placement = Placement::Single(Some(7));
        assert!(predict(&p, &w).is_err());
        w.placement = Placement::Local;
        w.read_fraction = 1.5;
        assert!(predict(&p, &w).is_err());
        w.read_fraction = 1.0;
        w.threads_per_node = vec![1];
        assert!(predict(&p, &w).is_err());
    }

    #[test]
    fn move_gain_falls_with_process_size() {
        let p = two_node();
        let g0 = move_gain(&p, 1, 0, 1 << 30, 0, 1 << 20).unwrap();
        let g1 = move_gain(&p, 1, 0, 1 << 30, 256 << 20, 1 << 20).unwrap();
        let g2 = move_gain(&p, 1, 0, 1 << 30, 512 << 20, 1 << 20).unwrap();
        assert!(g0 > g1 && g1 > g2, "{g0} {g1} {g2}");
        // Linear in P/F.
        assert!(((g0 - g1) - (g1 - g2)).abs() < 1e-9);
    }

    /// Adams's 2-node profile, 8 threads per node, `bs`-byte reads of one file.
    fn adams(placement: Placement, sharing: Sharing, bs: u64) -> Prediction {
        let p = crate::shipped::shipped("adams").unwrap();
        let mut w = Workload::spread(&p, 16, placement).unwrap();
        assert_eq!(w.threads_per_node, vec![8, 8]);
        w.sharing = sharing;
        w.bs = bs;
        predict(&p, &w).unwrap()
    }

    #[test]
    fn replicas_keep_shared_lines_on_each_node() {
        // At 512 B a request costs 215 ns of read path and 53 ns of memory: 1907 MB/s per
        // thread, so every node's 8 threads want 15.3 GB/s and the shared lines (2 updates per
        // request, 3906.25 updates/s per MB/s) are what limits.
        let per_mb_s = 2.0 * 1e6 / 512.0;
        let (single, local, replica) = (
            adams(Placement::Single(None), Sharing::High, 512),
            adams(Placement::Local, Sharing::High, 512),
            adams(Placement::Replica, Sharing::High, 512),
        );
        // One file: its lines on node 0 bounce between all 16 threads, at their mean latency
        // to node 0, (66.8 + 108.8) / 2 = 87.8 ns.
        let one = 1e9 / 87.8 / per_mb_s;
        assert!(
            (single.throughput_mb_s - one).abs() < 1e-6 * one,
            "{single:?}"
        );
        // Local: each node's lines still bounce between all readers of the one file.
        assert!(
            (local.throughput_mb_s - 2.0 * one).abs() < 1e-6 * one,
            "{local:?}"
        );
        // Replicas: each copy's lines bounce between its own node's threads only (66.8 ns).
        let own = 2.0 * 1e9 / 66.8 / per_mb_s;
        assert!(
            (replica.throughput_mb_s - own).abs() < 1e-6 * own,
            "{replica:?}"
        );
        assert!(replica
            .bottlenecks
            .iter()
            .all(|b| b.contains("shared file's lines")));
        assert_eq!(replica.per_node[0].data, vec![1.0, 0.0]);
        assert_eq!(replica.per_node[1].data, vec![0.0, 1.0]);
        assert_eq!((single.copies, local.copies, replica.copies), (1, 1, 2));

        // At 1 MiB the lines do not limit: replicas gain nothing over Local, but every reader
        // is local, unlike Single's (node 1's reads cross QPI at 108.8 ns).
        for sharing in [Sharing::Medium, Sharing::High] {
            let single = adams(Placement::Single(None), sharing, 1 << 20);
            let local = adams(Placement::Local, sharing, 1 << 20);
            let replica = adams(Placement::Replica, sharing, 1 << 20);
            assert!(replica.throughput_mb_s >= local.throughput_mb_s * (1.0 - 1e-12));
            assert!((replica.throughput_mb_s - local.throughput_mb_s).abs() < 1e-6);
            assert!(replica.throughput_mb_s > single.throughput_mb_s * 1.05);
            assert_eq!(replica.copies, 2);
        }
    }

    #[test]
    fn replicas_of_private_files_are_local() {
        for bs in [512, 4096, 1 << 20] {
            let local = adams(Placement::Local, Sharing::Private, bs);
            let replica = adams(Placement::Replica, Sharing::Private, bs);
            assert_eq!(replica.throughput_mb_s, local.throughput_mb_s);
            assert_eq!(replica.latency_ns, local.latency_ns);
            assert_eq!(replica.memory_latency_ns, local.memory_latency_ns);
            assert_eq!(replica.bottlenecks, local.bottlenecks);
            for (r, l) in replica.per_node.iter().zip(&local.per_node) {
                assert_eq!(r.mb_s_per_thread, l.mb_s_per_thread);
                assert_eq!(r.data, l.data);
            }
            // Each private file has readers on one node: one copy is enough.
            assert_eq!(replica.copies, 1);
        }
    }

    #[test]
    fn replica_copies_count_the_nodes_that_read() {
        let p = two_node();
        let mut w = Workload::spread(&p, 8, Placement::Replica).unwrap();
        w.sharing = Sharing::Medium;
        assert_eq!(predict(&p, &w).unwrap().copies, 2);
        w.threads_per_node = vec![4, 0];
        assert_eq!(predict(&p, &w).unwrap().copies, 1);
        w.sharing = Sharing::Private;
        w.threads_per_node = vec![4, 4];
        assert_eq!(predict(&p, &w).unwrap().copies, 1);
        w.placement = Placement::Fair;
        w.sharing = Sharing::High;
        assert_eq!(predict(&p, &w).unwrap().copies, 1);
        w.placement = Placement::Replica;
        w.read_fraction = 0.5;
        let pred = predict(&p, &w).unwrap();
        assert!(pred.notes.iter().any(|n| n.contains("in step")), "{pred:?}");
    }

    #[test]
    fn a_node_without_memory_reads_its_nearest_memory() {
        // Node 2 has CPUs but no memory (null latency column); node 1 is nearer to it.
        let p = Profile::from_json(
            r#"{"nodes":[0,1,2],"cpus_per_node":[4,4,4],
                "latency_ns":[[80,160,null],[160,80,null],[170,120,null]],
                "thread":{"mlp":10,"copy_mb_s":6000}}"#,
        )
        .unwrap();
        assert!(p.has_memory(1) && !p.has_memory(2));
        let mut w = Workload::spread(&p, 3, Placement::Replica).unwrap();
        w.sharing = Sharing::High;
        let replica = predict(&p, &w).unwrap();
        assert_eq!(replica.per_node[2].data, vec![0.0, 1.0, 0.0]);
        // Nodes 1 and 2 read the same copy on node 1.
        assert_eq!(replica.copies, 2);
        w.placement = Placement::Local;
        assert_eq!(
            predict(&p, &w).unwrap().per_node[2].data,
            vec![0.0, 1.0, 0.0]
        );
        // Without latencies the SLIT distances decide.
        let p = Profile::from_json(
            r#"{"nodes":[0,1,2],"latency_ns":[[80,160,null],[160,80,null],[null,null,null]],
                "advertised":{"distance":[[10,20,30],[20,10,20],[17,21,10]]}}"#,
        )
        .unwrap();
        assert_eq!(local_memory(&p, 2), 0);
        assert_eq!(local_memory(&p, 1), 1);
    }
}
