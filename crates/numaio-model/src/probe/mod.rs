//! `numaio probe`: measures a machine's NUMA costs into a [`Profile`].
//!
//! Every measurement is repeated; matrices hold the median and `spread` the largest relative
//! spread ((max − min) / median) of any cell of each quantity. Buffers are bound to their node
//! and verified before timing ([`buffer`]); threads are pinned to CPUs of their node.

pub mod bandwidth;
pub mod buffer;
pub mod latency;
pub mod loaded;
pub mod migrate;
pub mod pagecache;
pub mod pin;
pub mod stats;

use crate::error::ModelResult;
use crate::hmat;
use crate::profile::{Advertised, IoPath, Matrix, Origin, Profile, ThreadLimits};
use bandwidth::Kernel;
use buffer::NodeBuffer;
use numaio_sys::Topology;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What to measure and for how long.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// Short runs (under 10 s on a 2-node, 2-core machine) with fewer repeats.
    pub quick: bool,
    /// Transparent huge pages for the latency buffers, which takes most TLB misses out of the
    /// latency; without them the latency includes the page walks.
    pub huge_pages: bool,
    /// Where the page-cache test file goes.
    pub dir: PathBuf,
    /// Root of the node directories (normally `/sys/devices/system/node`).
    pub sysfs_nodes: PathBuf,
    /// The raw HMAT table (normally `/sys/firmware/acpi/tables/HMAT`).
    pub hmat_table: PathBuf,
    /// Buffer size per node in MiB instead of a multiple of the last-level cache: for small
    /// or emulated machines, where only the shape of the answer matters.
    pub buffer_mib: Option<usize>,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        ProbeOptions {
            quick: false,
            huge_pages: true,
            dir: std::env::temp_dir(),
            sysfs_nodes: PathBuf::from("/sys/devices/system/node"),
            hmat_table: PathBuf::from("/sys/firmware/acpi/tables/HMAT"),
            buffer_mib: None,
        }
    }
}

/// Sizes and times derived from the options and the last-level cache.
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    pub latency_bytes: usize,
    pub latency_steps: u64,
    pub latency_repeats: usize,
    pub bandwidth_bytes: usize,
    pub kernel_time: Duration,
    pub bandwidth_repeats: usize,
    pub loaded_delays: &'static [u32],
    pub loaded_time: Duration,
    pub pagecache_bytes: u64,
    pub pagecache_time: Duration,
    pub move_bytes: usize,
}

/// The largest data or unified cache of CPU 0, in bytes (32 MiB when unknown).
pub fn last_level_cache() -> usize {
    let mut best = 0;
    for k in 0..8 {
        let p = format!("/sys/devices/system/cpu/cpu0/cache/index{k}/size");
        if let Some(b) = std::fs::read_to_string(p)
            .ok()
            .and_then(|s| numaio_sys::topology::parse_size(s.trim()))
        {
            best = best.max(b as usize);
        }
    }
    if best == 0 {
        32 << 20
    } else {
        best
    }
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        let llc = last_level_cache();
        if quick {
            Plan {
                latency_bytes: (4 * llc).max(64 << 20),
                latency_steps: 400_000,
                latency_repeats: 3,
                bandwidth_bytes: (4 * llc).max(128 << 20),
                kernel_time: Duration::from_millis(40),
                bandwidth_repeats: 2,
                loaded_delays: &[0, 200],
                loaded_time: Duration::from_millis(80),
                pagecache_bytes: 16 << 20,
                pagecache_time: Duration::from_millis(40),
                move_bytes: 8 << 20,
            }
        } else {
            Plan {
                latency_bytes: (8 * llc).max(256 << 20),
                latency_steps: 2_000_000,
                latency_repeats: 5,
                bandwidth_bytes: (16 * llc).max(512 << 20),
                kernel_time: Duration::from_millis(200),
                bandwidth_repeats: 3,
                loaded_delays: &[0, 20, 100, 500, 5000],
                loaded_time: Duration::from_millis(300),
                pagecache_bytes: 64 << 20,
                pagecache_time: Duration::from_millis(150),
                move_bytes: 64 << 20,
            }
        }
    }
}

struct Ctx<'a> {
    done: u32,
    total: u32,
    progress: &'a mut dyn FnMut(&str, u32, u32),
}

impl Ctx<'_> {
    fn step(&mut self, what: &str) {
        self.done += 1;
        (self.progress)(what, self.done.min(self.total), self.total);
    }
}

fn matrix(n: usize) -> Matrix {
    vec![vec![None; n]; n]
}

/// Measures everything `numaio probe` reports. `progress` is called after each step with a
/// description, the steps done and the total.
pub fn probe(
    topo: &Topology,
    opts: &ProbeOptions,
    progress: &mut dyn FnMut(&str, u32, u32),
) -> ModelResult<Profile> {
    let mut notes = Vec::new();
    let mut plan = Plan::new(opts.quick);
    if let Some(mib) = opts.buffer_mib {
        let b = mib.max(1) << 20;
        plan.latency_bytes = b;
        plan.bandwidth_bytes = b;
        plan.pagecache_bytes = b as u64;
        plan.move_bytes = b;
        notes.push(format!(
            "buffers of {mib} MiB: smaller than the cache, so the numbers are not memory's"
        ));
    }
    let nodes = topo.node_ids();
    let n = nodes.len();
    let mut spread: BTreeMap<String, f64> = BTreeMap::new();
    let mut note_spread = |key: &str, v: &[f64]| {
        let s = stats::spread(v);
        let e = spread.entry(key.to_string()).or_insert(0.0);
        *e = e.max(s);
    };

    // CPU nodes with usable CPUs; memory nodes with room for the buffers.
    let mut cpus: Vec<Vec<u32>> = Vec::new();
    for node in &topo.nodes {
        let u = pin::usable(&node.cpus)?;
        if node.has_cpus() && u.is_empty() {
            notes.push(format!(
                "node {}: none of its CPUs is in this process's affinity mask; its row is skipped",
                node.id
            ));
        }
        cpus.push(u);
    }
    let need = plan.latency_bytes + plan.bandwidth_bytes + (64 << 20);
    let mem_ok: Vec<bool> = topo
        .nodes
        .iter()
        .map(|node| {
            if !node.has_memory() {
                return false;
            }
            let free = node.mem.mem_free_bytes as usize;
            if free != 0 && free < need {
                notes.push(format!(
                    "node {}: {} MiB free, the probe needs {} MiB; its column is skipped",
                    node.id,
                    free >> 20,
                    need >> 20
                ));
                return false;
            }
            true
        })
        .collect();
    let cpu_nodes: Vec<usize> = (0..n).filter(|&i| !cpus[i].is_empty()).collect();
    let mem_nodes: Vec<usize> = (0..n).filter(|&j| mem_ok[j]).collect();
    let cells = cpu_nodes.len() * mem_nodes.len();
    let total = (cells * (1 + Kernel::ALL.len())
        + 1
        + plan.loaded_delays.len()
        + mem_nodes.len() * (1 + cpu_nodes.len())
        + 3) as u32;
    let mut ctx = Ctx {
        done: 0,
        total,
        progress,
    };

    let mut lat = matrix(n);
    let mut bw: BTreeMap<&'static str, Matrix> =
        Kernel::ALL.iter().map(|k| (k.name(), matrix(n))).collect();
    let mut single_thread: Option<f64> = None;
    for &j in &mem_nodes {
        let lbuf = match NodeBuffer::new(plan.latency_bytes, nodes[j], opts.huge_pages) {
            Ok(b) => b,
            Err(e) => {
                notes.push(format!("node {}: skipped: {e}", nodes[j]));
                continue;
            }
        };
        let bbuf = match NodeBuffer::new(plan.bandwidth_bytes, nodes[j], true) {
            Ok(b) => b,
            Err(e) => {
                notes.push(format!("node {}: skipped: {e}", nodes[j]));
                continue;
            }
        };
        for &i in &cpu_nodes {
            let s = latency::measure(&lbuf, cpus[i][0], plan.latency_steps, plan.latency_repeats);
            note_spread("latency", &s);
            lat[i][j] = Some(stats::median(&s));
            ctx.step(&format!("latency node {} -> {}", nodes[i], nodes[j]));
            for k in Kernel::ALL {
                if k.available() {
                    let s: Vec<f64> = (0..plan.bandwidth_repeats)
                        .map(|_| bandwidth::run(&bbuf, &cpus[i], k, plan.kernel_time))
                        .collect();
                    note_spread(k.name(), &s);
                    bw.get_mut(k.name()).expect("every kernel has a matrix")[i][j] =
                        Some(stats::median(&s));
                }
                ctx.step(&format!("{} node {} -> {}", k.name(), nodes[i], nodes[j]));
            }
            if single_thread.is_none() && i == j {
                let s: Vec<f64> = (0..plan.bandwidth_repeats)
                    .map(|_| bandwidth::run(&bbuf, &cpus[i][..1], Kernel::Read, plan.kernel_time))
                    .collect();
                note_spread("read_1_thread", &s);
                single_thread = Some(stats::median(&s));
            }
        }
    }
    if single_thread.is_none() {
        if let (Some(&i), Some(&j)) = (cpu_nodes.first(), mem_nodes.first()) {
            if let Ok(b) = NodeBuffer::new(plan.bandwidth_bytes, nodes[j], true) {
                single_thread = Some(bandwidth::run(
                    &b,
                    &cpus[i][..1],
                    Kernel::Read,
                    plan.kernel_time,
                ));
            }
        }
    }
    ctx.step("single-thread bandwidth");

    // Loaded latency on the first CPU node's nearest measured memory.
    let mut loaded_pts = Vec::new();
    if let (Some(&i), Some(&j)) = (
        cpu_nodes.first(),
        mem_nodes
            .iter()
            .find(|&&j| j == cpu_nodes[0])
            .or(mem_nodes.first()),
    ) {
        let loaders: Vec<u32> = cpu_nodes
            .iter()
            .flat_map(|&k| cpus[k].iter().copied())
            .filter(|&c| c != cpus[i][0])
            .collect();
        if loaders.is_empty() {
            notes.push("loaded latency needs a second CPU to drive bandwidth; skipped".into());
        } else {
            match (
                NodeBuffer::new(plan.latency_bytes, nodes[j], opts.huge_pages),
                NodeBuffer::new(plan.bandwidth_bytes, nodes[j], true),
            ) {
                (Ok(cb), Ok(lb)) => {
                    for &d in plan.loaded_delays {
                        loaded_pts.extend(loaded::sweep(
                            &cb,
                            &lb,
                            cpus[i][0],
                            &loaders,
                            &[d],
                            plan.loaded_time,
                        ));
                        ctx.step(&format!("loaded latency, delay {d}"));
                    }
                }
                (Err(e), _) | (_, Err(e)) => notes.push(format!("loaded latency skipped: {e}")),
            }
        }
    }

    // Page-cache read cost.
    let mut pc = matrix(n);
    let mut io_path = IoPath::default();
    for &j in &mem_nodes {
        let file = match pagecache::CachedFile::create(&opts.dir, nodes[j], plan.pagecache_bytes) {
            Ok(f) => f,
            Err(e) => {
                notes.push(format!("page-cache read cost skipped: {e}"));
                break;
            }
        };
        ctx.step(&format!("page-cache file on node {}", nodes[j]));
        for &i in &cpu_nodes {
            let s: Vec<f64> = (0..plan.bandwidth_repeats)
                .filter_map(|_| {
                    file.read_rate(cpus[i][0], 1 << 20, plan.pagecache_time)
                        .ok()
                })
                .collect();
            if !s.is_empty() {
                note_spread("pagecache_read", &s);
                pc[i][j] = Some(stats::median(&s));
            }
            if i == j && io_path == IoPath::default() {
                if let (Some(big), Ok(small)) = (
                    pc[i][j],
                    file.read_rate(cpus[i][0], 4096, plan.pagecache_time),
                ) {
                    io_path = fit_io_path(small, big, single_thread);
                }
            }
            ctx.step(&format!(
                "page-cache read node {} -> {}",
                nodes[i], nodes[j]
            ));
        }
    }

    let move_pages = match (mem_nodes.first(), mem_nodes.get(1).or(mem_nodes.first())) {
        (Some(&a), Some(&b)) => match migrate::measure(nodes[a], nodes[b], plan.move_bytes) {
            Ok(m) => Some(m),
            Err(e) => {
                notes.push(format!("move_pages cost skipped: {e}"));
                None
            }
        },
        _ => None,
    };
    ctx.step("move_pages");

    let advertised = advertised(topo, opts, &mut notes);
    ctx.step("advertised SLIT/HMAT");

    let thread = match (single_thread, cpu_nodes.first()) {
        (Some(bw1), Some(&i)) => {
            match lat[i][i].or_else(|| lat[i].iter().flatten().next().copied()) {
                Some(l) => ThreadLimits {
                    mlp: bw1 * l / 64.0 / 1000.0,
                    copy_mb_s: bw1,
                },
                None => ThreadLimits::default(),
            }
        }
        _ => ThreadLimits::default(),
    };
    ctx.step("done");

    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    let when = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let keep = |m: Matrix| m.iter().flatten().any(Option::is_some).then_some(m);
    Ok(Profile {
        name: host.clone(),
        origin: Origin::Measured,
        source: format!(
            "numaio probe{} on {host}, unix time {when}",
            if opts.quick { " --quick" } else { "" }
        ),
        cpus_per_node: topo.nodes.iter().map(|x| x.cpus.len() as u32).collect(),
        nodes,
        latency_ns: keep(lat),
        bandwidth_mb_s: crate::profile::Bandwidth {
            read: bw.remove("read").and_then(keep),
            write: bw.remove("write").and_then(keep),
            write_nt: bw.remove("write_nt").and_then(keep),
            rw_3_1: bw.remove("rw_3_1").and_then(keep),
            rw_2_1: bw.remove("rw_2_1").and_then(keep),
            rw_1_1: bw.remove("rw_1_1").and_then(keep),
            copy: bw.remove("copy").and_then(keep),
        },
        loaded_latency: loaded_pts,
        advertised,
        spread,
        pagecache_read_mb_s: keep(pc),
        move_pages,
        thread,
        io_path,
        notes,
        ..Profile::default()
    })
}

/// Per-request and per-KiB CPU cost of read(2) from the rates at 4 KiB and 1 MiB requests,
/// less the memory time a thread spends at its single-thread bandwidth.
fn fit_io_path(small_mb_s: f64, big_mb_s: f64, mem_mb_s: Option<f64>) -> IoPath {
    let (s, b) = (4096.0, 1048576.0);
    let t1 = s / small_mb_s * 1e3; // ns per request
    let t2 = b / big_mb_s * 1e3;
    let per_byte = ((t2 - t1) / (b - s)).max(0.0);
    let overhead = (t1 - per_byte * s).max(0.0);
    let mem_per_kib = mem_mb_s.map_or(0.0, |m| 1024.0 / m * 1e3);
    IoPath {
        request_overhead_ns: overhead,
        cpu_ns_per_kib: (per_byte * 1024.0 - mem_per_kib).max(0.0),
    }
}

/// SLIT distances and HMAT values; the raw table (root only) gives every pair, sysfs the
/// local pairs.
pub fn advertised(topo: &Topology, opts: &ProbeOptions, notes: &mut Vec<String>) -> Advertised {
    let nodes = topo.node_ids();
    let distance: Matrix = nodes
        .iter()
        .map(|&a| {
            nodes
                .iter()
                .map(|&b| topo.distance(a, b).map(f64::from))
                .collect()
        })
        .collect();
    let mut adv = Advertised {
        distance: Some(distance),
        ..Advertised::default()
    };
    match read_raw_hmat(&opts.hmat_table) {
        Ok(Some(entries)) => {
            let (l, b) = hmat::matrices_from_entries(&entries, &nodes);
            adv.latency_ns = Some(l);
            adv.bandwidth_mb_s = Some(b);
            adv.hmat_source = Some(format!("ACPI HMAT table {}", opts.hmat_table.display()));
            return adv;
        }
        Ok(None) => {}
        Err(why) => notes.push(why),
    }
    if let Some((l, b)) = hmat::sysfs_access0(&opts.sysfs_nodes, &nodes) {
        adv.latency_ns = Some(l);
        adv.bandwidth_mb_s = Some(b);
        adv.hmat_source = Some("sysfs access0 (local pairs only)".into());
    } else {
        adv.hmat_source = Some("none: this machine advertises no HMAT".into());
    }
    adv
}

fn read_raw_hmat(path: &Path) -> Result<Option<Vec<hmat::LbEntry>>, String> {
    match std::fs::read(path) {
        Ok(b) => hmat::parse_hmat(&b)
            .map(Some)
            .map_err(|e| format!("{}: {e}; using sysfs", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(format!(
            "{}: needs root; HMAT values only for local pairs, from sysfs",
            path.display()
        )),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_path_fit_recovers_a_linear_cost() {
        // 1 µs per request + 100 ns per KiB.
        let rate = |bs: f64| bs / (1000.0 + 100.0 * bs / 1024.0) * 1e3;
        let p = fit_io_path(rate(4096.0), rate(1048576.0), None);
        assert!((p.request_overhead_ns - 1000.0).abs() < 1e-6, "{p:?}");
        assert!((p.cpu_ns_per_kib - 100.0).abs() < 1e-6, "{p:?}");
    }
}
