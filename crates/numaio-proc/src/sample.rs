//! Sampling processes and turning two samples into a [`ProcessView`].
//!
//! A *light* sample (stat + io) is taken of every candidate process each interval; only the
//! processes that did I/O get the *deep* look (threads, open files, mappings, numa_maps,
//! cgroup, cpuset), which is what keeps the daemon cheap with hundreds of processes.

use crate::cache::{CacheOps, FileNodes, FileRef};
use crate::error::{ProcError, ProcResult};
use crate::locality::{self, FileWeight};
use numaio_procfs::bounded::Readers;
use numaio_procfs::{Io, MappedFile, OpenFd, ProcfsError, ProcfsResult, Status};
use numaio_sys::Topology;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Stat + io of one process at one instant.
#[derive(Debug, Clone)]
pub struct LightSample {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub start_ticks: u64,
    pub kernel_thread: bool,
    /// Exited, not yet collected by its parent.
    pub zombie: bool,
    pub cpu_ticks: u64,
    /// `None` when /proc/PID/io is not readable (another user's process, not root).
    pub io: Option<Io>,
    pub at: Instant,
}

pub fn light(pid: i32) -> ProcResult<LightSample> {
    let st = numaio_procfs::read_stat(pid)?;
    let io = match numaio_procfs::read_io(pid) {
        Ok(io) => Some(io),
        Err(e) if e.is_gone() => return Err(e.into()),
        Err(_) => None,
    };
    Ok(light_from(pid, st, io))
}

fn light_from(pid: i32, st: numaio_procfs::Stat, io: Option<Io>) -> LightSample {
    LightSample {
        pid,
        ppid: st.ppid,
        kernel_thread: st.is_kernel_thread(),
        zombie: matches!(st.state, 'Z' | 'X'),
        comm: st.comm,
        start_ticks: st.start_ticks,
        cpu_ticks: st.cpu_ticks,
        io,
        at: Instant::now(),
    }
}

/// Open `/proc/PID/{stat,io}` descriptors kept across scans: re-reading a held seq file
/// with `pread` at offset 0 regenerates it without the path walk and open that dominate a
/// light sample. A held descriptor keeps pointing at *its* process: once that exits, reads
/// fail with `ESRCH`, so a reused pid is never mistaken for the old process.
struct ProcHandles {
    /// Shared with the reader thread, which takes a process's descriptors for the read
    /// and puts them back (a read given up on keeps them, closed when it returns).
    files: Arc<Mutex<HashMap<i32, Held>>>,
    cap: usize,
}

/// Held `/proc/PID/stat` and (when readable) `/proc/PID/io` descriptors of one process.
type Held = (std::fs::File, Option<std::fs::File>);

/// Reads a held seq file from offset 0; `None` when it failed or the answer filled the
/// buffer (it may be cut; the caller then reads the file the normal way).
fn pread_text(f: &std::fs::File, buf: &mut [u8]) -> Option<String> {
    use std::os::unix::fs::FileExt;
    let n = f.read_at(buf, 0).ok()?;
    (n < buf.len()).then(|| String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// The light sample of `pid` through its held descriptors, or read afresh (and, with
/// `hold`, the descriptors opened for next time). Blocking: run it through [`Readers`].
fn sample_held(
    pid: i32,
    held: Option<Held>,
    hold: bool,
) -> (ProcResult<LightSample>, Option<Held>) {
    let mut buf = vec![0u8; 4096];
    if let Some((st_f, io_f)) = held {
        if let Some(st) = pread_text(&st_f, &mut buf).and_then(|t| numaio_procfs::parse_stat(&t)) {
            let io = io_f
                .as_ref()
                .and_then(|f| pread_text(f, &mut buf))
                .map(|t| numaio_procfs::parse_io(&t));
            return (Ok(light_from(pid, st, io)), Some((st_f, io_f)));
        }
        // Exited (ESRCH) or odd: drop the handles, look at the pid afresh.
    }
    let s = match light(pid) {
        Ok(s) => s,
        Err(e) => return (Err(e), None),
    };
    let held = if hold {
        std::fs::File::open(format!("/proc/{pid}/stat"))
            .ok()
            .map(|st_f| {
                let io_f =
                    s.io.and_then(|_| std::fs::File::open(format!("/proc/{pid}/io")).ok());
                (st_f, io_f)
            })
    } else {
        None
    };
    (Ok(s), held)
}

impl ProcHandles {
    fn new() -> Self {
        // Two descriptors per process, within half the soft limit on open files.
        let mut rl = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes into the struct we own.
        let soft = if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) } == 0 {
            rl.rlim_cur as usize
        } else {
            1024
        };
        ProcHandles {
            files: Arc::new(Mutex::new(HashMap::new())),
            cap: (soft / 4).min(16384),
        }
    }

    /// The light samples of `pids`, read one after another on `readers`, each within
    /// `limit` of the one before; results in the order of `pids`.
    fn sample_all(
        &self,
        readers: &Readers,
        pids: &[i32],
        limit: Duration,
        stall: &[i32],
    ) -> Vec<ProcResult<LightSample>> {
        let (files, cap, stall) = (self.files.clone(), self.cap, stall.to_vec());
        readers
            .run_each(pids, "stat", limit, move |pid| {
                if stall.contains(&pid) {
                    stall_like_a_stuck_process();
                }
                let (held, hold) = {
                    let mut m = lock(&files);
                    let h = m.remove(&pid);
                    (h, m.len() < cap)
                };
                let (r, held) = sample_held(pid, held, hold);
                if let (Ok(_), Some(h)) = (&r, held) {
                    lock(&files).insert(pid, h);
                }
                r
            })
            .into_iter()
            .map(|r| r.map_err(ProcError::from).and_then(|r| r))
            .collect()
    }

    #[cfg(test)]
    fn sample(&self, pid: i32) -> ProcResult<LightSample> {
        let r = Readers::new(1, 1);
        self.sample_all(&r, &[pid], Duration::from_secs(10), &[])
            .pop()
            .expect("one answer")
    }

    #[cfg(test)]
    fn holds(&self, pid: i32) -> bool {
        lock(&self.files).contains_key(&pid)
    }

    /// Closes the handles of processes not seen in the last scan.
    fn retain(&self, seen: &std::collections::HashSet<i32>) {
        lock(&self.files).retain(|pid, _| seen.contains(pid));
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A map of descriptors stays usable after a panic elsewhere: ignore the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The test hook behind [`ScanOptions::stall_pids`]: blocks the reader thread the way a
/// read of a stuck process's /proc file does (for an hour; the scan gives up long before).
fn stall_like_a_stuck_process() {
    std::thread::sleep(Duration::from_secs(3600));
}

/// The expensive part of a process's state.
#[derive(Debug, Clone, Default)]
pub struct Deep {
    pub status: Status,
    /// (tid, last CPU) per thread.
    pub threads: Vec<(i32, u32)>,
    pub fds: Vec<OpenFd>,
    pub mapped: Vec<MappedFile>,
    /// The inode of the process's mount namespace, when readable.
    pub mount_ns_inode: Option<u64>,
    pub memory_per_node: BTreeMap<u32, u64>,
    pub cgroup: String,
    pub cpuset: Option<Vec<u32>>,
    /// What could not be read (permission), for the user.
    pub errors: Vec<String>,
}

/// Reads the deep state; a vanished process is an error, unreadable parts are noted.
/// `numa_maps` (memory per node) is the costly part — the kernel walks the page tables —
/// and is skipped when `memory` is false.
pub fn deep(pid: i32, memory: bool) -> ProcResult<Deep> {
    Ok(deep_steps(pid, memory, &AtomicUsize::new(0))?)
}

/// The files of the deep look in the order it reads them; `step` holds the index of the
/// one being read, so a read that never returns can be named.
const DEEP_FILES: [&str; 8] = [
    "status",
    "task",
    "fd",
    "ns/mnt",
    "maps",
    "numa_maps",
    "cgroup",
    "cpuset",
];

fn deep_steps(pid: i32, memory: bool, step: &AtomicUsize) -> ProcfsResult<Deep> {
    let at = |i: usize| step.store(i, Ordering::Relaxed);
    let status = numaio_procfs::read_status(pid)?;
    let mut d = Deep {
        status,
        ..Default::default()
    };
    let note = |r: ProcfsError, d: &mut Deep| -> ProcfsResult<()> {
        if r.is_gone() {
            return Err(r);
        }
        d.errors.push(r.to_string());
        Ok(())
    };
    at(1);
    match numaio_procfs::thread_processors(pid) {
        Ok(t) => d.threads = t,
        Err(e) => note(e, &mut d)?,
    }
    at(2);
    match numaio_procfs::open_files(pid) {
        Ok(f) => d.fds = f,
        Err(e) => note(e, &mut d)?,
    }
    at(3);
    d.mount_ns_inode = numaio_procfs::mount_ns(pid);
    at(4);
    let same_ns = match (d.mount_ns_inode, own_mount_ns()) {
        (Some(a), Some(b)) => Some(a == b),
        _ => None,
    };
    match numaio_procfs::mapped_files(pid, same_ns) {
        Ok(m) => d.mapped = m,
        Err(e) => note(e, &mut d)?,
    }
    if memory {
        at(5);
        match numaio_procfs::memory_per_node(pid) {
            Ok(m) => d.memory_per_node = m,
            Err(e) => note(e, &mut d)?,
        }
    }
    at(6);
    d.cgroup = numaio_procfs::read_proc(pid, "cgroup")
        .map(|t| numaio_procfs::parse_cgroup(&t))
        .unwrap_or_else(|_| "/".into());
    at(7);
    d.cpuset = numaio_procfs::cpuset_cpus(pid);
    Ok(d)
}

/// Our own mount namespace's inode, read once: it does not change while we run.
fn own_mount_ns() -> Option<u64> {
    static OWN: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *OWN.get_or_init(numaio_procfs::own_mount_ns)
}

/// Whether a process (and so the paths it sees) lives in our mount namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MountNs {
    #[default]
    Own,
    /// Another mount namespace (a container, a systemd unit with PrivateTmp=): its paths
    /// may name other files, or none, here.
    Foreign,
    /// Its namespace could not be read (permission).
    Unknown,
}

impl MountNs {
    fn of(ns: Option<u64>) -> Self {
        match (ns, own_mount_ns()) {
            (Some(a), Some(b)) if a == b => MountNs::Own,
            (Some(_), Some(_)) => MountNs::Foreign,
            _ => MountNs::Unknown,
        }
    }
}

/// One file a process uses, with where its cache is.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileView {
    /// The path as the process sees it (relative to its mount namespace's root).
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    pub path: PathBuf,
    /// What opens this very file from here (`/proc/PID/fd/N`, `/proc/PID/map_files/...`,
    /// `/proc/PID/root/...`); `None` when it could not be resolved (see `error`).
    #[serde(skip)]
    pub open: Option<PathBuf>,
    /// Device and inode: the file's identity, whatever its path.
    pub dev: u64,
    pub ino: u64,
    /// `own`, `foreign` or `unknown`: the mount namespace the path is relative to.
    pub mount_ns: MountNs,
    /// The namespace's inode (as in `/proc/PID/ns/mnt`), for a foreign one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_ns_inode: Option<u64>,
    /// `fd`, `map` or `fd+map`.
    pub via: String,
    pub size_bytes: u64,
    pub cached_bytes: u64,
    /// Cached bytes per node.
    pub nodes: BTreeMap<u32, u64>,
    /// How far the descriptors' offsets moved during the interval.
    pub advanced_bytes: u64,
    /// Only open for writing (a log, an output): not a source of reads, left out of the
    /// read estimate.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub write_only: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl FileView {
    /// The file to hand to the page-cache operations: shown by its path, opened by its
    /// handle. `None` when no handle could be resolved; the path itself is never opened,
    /// since in another mount namespace it may be another file.
    pub fn file_ref(&self) -> Option<FileRef> {
        Some(FileRef {
            path: self.path.clone(),
            open: self.open.clone()?,
        })
    }
}

/// Everything `numaio ps` shows about one process, and what the daemon decides on.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ProcessView {
    pub pid: i32,
    /// Start time in clock ticks since boot: with the pid, identifies the process.
    pub start_ticks: u64,
    pub comm: String,
    pub uid: u32,
    pub cgroup: String,
    /// `own`, `foreign` or `unknown`, as for its files.
    pub mount_ns: MountNs,
    /// The inode of its mount namespace (`/proc/PID/ns/mnt`), when readable.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mount_ns_inode: Option<u64>,
    pub threads: usize,
    /// Threads per node they last ran on.
    pub thread_nodes: BTreeMap<u32, u32>,
    /// The node where most threads last ran.
    pub main_node: Option<u32>,
    pub cpus_allowed: Vec<u32>,
    pub mems_allowed: Vec<u32>,
    pub cpuset_cpus: Vec<u32>,
    /// The affinity is narrower than the cpuset (someone pinned it).
    pub pinned: bool,
    pub memory_per_node: BTreeMap<u32, u64>,
    pub rss_bytes: u64,
    pub interval_secs: f64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_bytes_per_sec: f64,
    pub write_bytes_per_sec: f64,
    /// Bytes per read system call during the interval.
    pub avg_read_bytes: u64,
    /// CPU use in percent of one CPU.
    pub cpu_percent: f64,
    pub files: Vec<FileView>,
    /// Estimated share of the interval's reads per node (see `locality`).
    pub read_distribution: BTreeMap<u32, f64>,
    /// Estimated share of reads served from the nodes the process runs on.
    pub locality: Option<f64>,
    /// Estimated read bytes per node for the interval, `numa<N>_read_bytes` as in Tofalos's
    /// `/proc/<pid>/numa_io`.
    pub numa_io: BTreeMap<String, u64>,
    #[serde(skip)]
    pub numa_read_bytes: BTreeMap<u32, u64>,
    /// Write bytes per node, where an exact source counted them.
    #[serde(skip)]
    pub numa_write_bytes: BTreeMap<u32, u64>,
    /// Which source filled `numa_io` ([`crate::io_source`]).
    pub numa_io_source: crate::io_source::NumaIoSource,
    /// Why the counted source's numbers for this interval are short (the kernel skipped
    /// runs of the collector's programs, or a full map dropped events); `None` when every
    /// event was counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub numa_io_incomplete: Option<String>,
    /// Bytes whose pages were on the node of the CPU that copied them, and on another node
    /// (an exact source that knows the CPU's node).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub local_bytes: Option<numaio_numa::IoBytes>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remote_bytes: Option<numaio_numa::IoBytes>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

impl ProcessView {
    /// Whether `numa_io` is counted and complete (`numa_io_exact`): an exact source that
    /// missed nothing during the interval.
    pub fn numa_io_exact(&self) -> bool {
        self.numa_io_source.is_exact() && self.numa_io_incomplete.is_none()
    }

    /// Nodes where threads ran.
    pub fn run_nodes(&self) -> Vec<u32> {
        self.thread_nodes.keys().copied().collect()
    }
}

/// Residency lookups shared by every process in one scan (readers of one file ask once),
/// and, with a time to live, across scans: querying a multi-gigabyte file costs seconds of
/// system time, far more than the rest of an interval.
/// A file's identity: device and inode.
pub type FileKey = (u64, u64);

#[derive(Default)]
pub struct ResidencyMemo {
    /// Keyed by identity, not path: one path may name different files in different mount
    /// namespaces, and one file many paths.
    memo: HashMap<FileKey, (Instant, Result<FileNodes, String>)>,
    ttl: Option<std::time::Duration>,
    pub queries: usize,
}

impl ResidencyMemo {
    pub fn with_ttl(ttl: std::time::Duration) -> Self {
        ResidencyMemo {
            ttl: Some(ttl),
            ..Default::default()
        }
    }

    pub fn get(
        &mut self,
        cache: &dyn CacheOps,
        key: FileKey,
        f: &FileRef,
    ) -> Result<FileNodes, String> {
        if let Some((_, r)) = self.memo.get(&key) {
            // Another reader may know the file by another path.
            return r.clone().map(|mut n| {
                n.path = f.path.clone();
                n
            });
        }
        self.queries += 1;
        let r = cache.residency(f).map_err(|e| e.to_string());
        self.memo.insert(key, (Instant::now(), r.clone()));
        r
    }

    /// Forgets a file (after the daemon moved its pages).
    pub fn invalidate(&mut self, key: FileKey) {
        self.memo.remove(&key);
    }

    /// Drops entries older than the time to live (all of them without one).
    fn expire(&mut self) {
        match self.ttl {
            Some(ttl) => self.memo.retain(|_, (t, _)| t.elapsed() < ttl),
            None => self.memo.clear(),
        }
        self.queries = 0;
    }
}

/// Per-process state kept between samples.
#[derive(Debug, Clone)]
pub struct Prev {
    pub light: LightSample,
    /// File offset per (fd, file identity) at the previous deep look.
    pub fd_pos: HashMap<(i32, FileKey), u64>,
    /// Whether the previous sample included the deep look (so `fd_pos` is complete).
    pub deep: bool,
}

/// Turns the previous and current samples into a view. `max_files` bounds the residency
/// queries per process.
#[allow(clippy::too_many_arguments)]
pub fn build_view(
    prev: Option<&Prev>,
    cur: &LightSample,
    d: &Deep,
    topo: &Topology,
    cache: &dyn CacheOps,
    memo: &mut ResidencyMemo,
    max_files: usize,
) -> ProcessView {
    let (interval, dio, dcpu) = match prev {
        Some(p) if p.light.start_ticks == cur.start_ticks => {
            let secs = cur.at.duration_since(p.light.at).as_secs_f64();
            let dio = match (p.light.io, cur.io) {
                (Some(a), Some(b)) => Io {
                    rchar: b.rchar.saturating_sub(a.rchar),
                    wchar: b.wchar.saturating_sub(a.wchar),
                    syscr: b.syscr.saturating_sub(a.syscr),
                    syscw: b.syscw.saturating_sub(a.syscw),
                    read_bytes: b.read_bytes.saturating_sub(a.read_bytes),
                    write_bytes: b.write_bytes.saturating_sub(a.write_bytes),
                },
                _ => Io::default(),
            };
            (secs, dio, cur.cpu_ticks.saturating_sub(p.light.cpu_ticks))
        }
        _ => (0.0, Io::default(), 0),
    };
    let rate = |b: u64| {
        if interval > 0.0 {
            b as f64 / interval
        } else {
            0.0
        }
    };
    let mut thread_nodes: BTreeMap<u32, u32> = BTreeMap::new();
    for &(_, cpu) in &d.threads {
        if let Some(n) = topo.cpu_to_node(cpu) {
            *thread_nodes.entry(n).or_insert(0) += 1;
        }
    }
    let main_node = thread_nodes
        .iter()
        .max_by_key(|(n, c)| (**c, std::cmp::Reverse(**n)))
        .map(|(n, _)| *n);
    let all_cpus: Vec<u32> = topo.nodes.iter().flat_map(|n| n.cpus.clone()).collect();
    let cpuset = d.cpuset.clone().unwrap_or(all_cpus);
    let pinned = !d.status.cpus_allowed.is_empty()
        && d.status.cpus_allowed.len() < cpuset.len()
        && d.status.cpus_allowed.iter().all(|c| cpuset.contains(c));

    // Files: descriptors first, then mappings, merged by identity (device and inode).
    let ns = MountNs::of(d.mount_ns_inode);
    let ns_inode = d.mount_ns_inode.filter(|_| ns == MountNs::Foreign);
    let mut files: Vec<FileView> = Vec::new();
    for fd in &d.fds {
        // A descriptor opened since a complete previous look advanced from offset 0.
        let adv = match (prev, fd.pos) {
            (Some(p), Some(pos)) if p.deep => p
                .fd_pos
                .get(&(fd.fd, (fd.dev, fd.ino)))
                .map_or(pos, |&old| pos.saturating_sub(old)),
            _ => 0,
        };
        let adv = if fd.write_only { 0 } else { adv };
        if let Some(f) = files
            .iter_mut()
            .find(|f| (f.dev, f.ino) == (fd.dev, fd.ino))
        {
            f.advanced_bytes += adv;
            f.write_only &= fd.write_only;
            continue;
        }
        files.push(FileView {
            path: fd.path.clone(),
            open: Some(fd.handle.clone()),
            dev: fd.dev,
            ino: fd.ino,
            mount_ns: ns,
            mount_ns_inode: ns_inode,
            via: "fd".into(),
            advanced_bytes: adv,
            write_only: fd.write_only,
            ..Default::default()
        });
    }
    for m in &d.mapped {
        let same = |f: &&mut FileView| match &m.handle {
            Ok(_) => (f.dev, f.ino) == (m.dev, m.ino),
            // Unresolved: the inode number and path are all there is to match on.
            Err(_) => f.ino == m.ino && f.path == m.path,
        };
        if let Some(f) = files.iter_mut().find(same) {
            f.via = "fd+map".into();
            f.write_only = false;
        } else {
            files.push(FileView {
                path: m.path.clone(),
                open: m.handle.as_ref().ok().cloned(),
                dev: m.dev,
                ino: m.ino,
                mount_ns: ns,
                mount_ns_inode: ns_inode,
                via: "map".into(),
                error: m.handle.as_ref().err().cloned(),
                ..Default::default()
            });
        }
    }
    // Query the files being read first, so the cap drops the idle ones.
    files.sort_by_key(|f| std::cmp::Reverse(f.advanced_bytes));
    for (i, f) in files.iter_mut().enumerate() {
        if i >= max_files {
            f.error = Some(format!("not queried (more than {max_files} files)"));
            continue;
        }
        let Some(fr) = f.file_ref() else {
            continue;
        };
        match memo.get(cache, (f.dev, f.ino), &fr) {
            Ok(r) => {
                f.size_bytes = r.size_bytes;
                f.cached_bytes = r.cached_bytes();
                f.nodes = r.nodes;
            }
            Err(e) => f.error = Some(e),
        }
    }
    let weights: Vec<FileWeight<'_>> = files
        .iter()
        .map(|f| FileWeight {
            nodes: (!f.write_only).then_some(&f.nodes),
            advanced: f.advanced_bytes,
        })
        .collect();
    let dist = locality::read_distribution(&weights);
    let run_nodes: Vec<u32> = thread_nodes.keys().copied().collect();
    let locality = locality::local_share(&dist, &run_nodes);
    let numa_read_bytes = locality::attribute(dio.rchar, &dist);
    let numa_io = numa_read_bytes
        .iter()
        .map(|(&n, &b)| (n, numaio_numa::IoBytes::new(b, 0)))
        .collect::<numaio_numa::NodeIo>()
        .numa_io_map(&topo.node_ids(), numaio_numa::counters::Fields::Read);
    let tck = clock_ticks_per_sec();
    ProcessView {
        pid: cur.pid,
        start_ticks: cur.start_ticks,
        comm: cur.comm.clone(),
        uid: d.status.uid,
        cgroup: d.cgroup.clone(),
        mount_ns: ns,
        mount_ns_inode: d.mount_ns_inode,
        threads: d.threads.len(),
        thread_nodes,
        main_node,
        cpus_allowed: d.status.cpus_allowed.clone(),
        mems_allowed: d.status.mems_allowed.clone(),
        cpuset_cpus: cpuset,
        pinned,
        memory_per_node: d.memory_per_node.clone(),
        rss_bytes: d.status.vm_rss_bytes,
        interval_secs: interval,
        read_bytes: dio.rchar,
        write_bytes: dio.wchar,
        read_bytes_per_sec: rate(dio.rchar),
        write_bytes_per_sec: rate(dio.wchar),
        avg_read_bytes: dio.rchar.checked_div(dio.syscr).unwrap_or(0),
        cpu_percent: if interval > 0.0 {
            dcpu as f64 / tck / interval * 100.0
        } else {
            0.0
        },
        files,
        read_distribution: dist,
        locality,
        numa_io,
        numa_read_bytes,
        errors: d.errors.clone(),
        ..Default::default()
    }
}

pub fn clock_ticks_per_sec() -> f64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// A process whose `/proc` files did not answer within the scan's limit: left out of the
/// views (nothing is decided about a process that could not be read).
#[derive(Debug, Clone, Serialize)]
pub struct Unresponsive {
    pub pid: i32,
    /// Its command name, when its `stat` was read before a later file hung.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub comm: Option<String>,
    /// The file that did not answer (`/proc/PID/maps`, ...).
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    pub file: PathBuf,
    /// The full message.
    pub error: String,
}

impl Unresponsive {
    pub(crate) fn of(e: &ProcError, comm: Option<&str>) -> Option<Self> {
        let (pid, path) = match e {
            ProcError::Procfs(
                ProcfsError::Unresponsive { pid, path, .. }
                | ProcfsError::ReadersExhausted { pid, path, .. },
            ) => (*pid, path.clone()),
            _ => return None,
        };
        Some(Unresponsive {
            pid,
            comm: comm.map(str::to_string),
            file: path,
            error: e.to_string(),
        })
    }
}

/// Options of one scan.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Only these pids (else every process).
    pub pids: Option<Vec<i32>>,
    /// A process is I/O-active if it read or wrote at least this many bytes in the interval.
    pub min_io_bytes: u64,
    /// Return every scanned process, not only the I/O-active ones.
    pub all: bool,
    /// Take the deep look at every process (so the next scan has file offsets for all).
    pub deep_all: bool,
    /// Read memory per node (`numa_maps`) for the views; the daemon reads it only for
    /// candidates ([`fill_memory`]).
    pub memory: bool,
    pub max_files: usize,
    /// How long the light sample (`stat` + `io`) of one process may take; the deep look
    /// (every other file, `numa_maps` walks the page tables) may take [`DEEP_FACTOR`] times
    /// as long. A process past it is reported in [`ScanResult::unresponsive`].
    pub read_limit: Duration,
    /// Test hook: the reads of these pids block like those of a stuck process.
    #[doc(hidden)]
    pub stall_pids: Vec<i32>,
}

/// The deep look's limit as a multiple of [`ScanOptions::read_limit`].
pub const DEEP_FACTOR: u32 = 10;

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            pids: None,
            min_io_bytes: 1,
            all: false,
            deep_all: false,
            memory: true,
            max_files: 64,
            read_limit: numaio_procfs::bounded::DEFAULT_LIMIT,
            stall_pids: Vec::new(),
        }
    }
}

/// What one scan saw.
#[derive(Debug, Default)]
pub struct ScanResult {
    pub views: Vec<ProcessView>,
    pub scanned: usize,
    pub gone: usize,
    /// Processes whose stat or io could not be read (permissions).
    pub unreadable: usize,
    /// Processes whose `/proc` files did not answer in time: not in `views`.
    pub unresponsive: Vec<Unresponsive>,
    pub residency_queries: usize,
}

/// Keeps the previous sample of each process so rates and offset movements can be computed.
pub struct Scanner {
    prev: HashMap<i32, Prev>,
    pub memo: ResidencyMemo,
    handles: ProcHandles,
    /// Every /proc read of a scan runs here, so a stuck process costs a time limit, once.
    readers: Readers,
}

impl Default for Scanner {
    fn default() -> Self {
        Scanner {
            prev: HashMap::new(),
            memo: ResidencyMemo::default(),
            handles: ProcHandles::new(),
            readers: Readers::new(1, numaio_procfs::bounded::DEFAULT_ABANDON_CAP),
        }
    }
}

impl Scanner {
    pub fn new() -> Self {
        Self::default()
    }

    /// A scanner that reuses residency answers for `ttl`.
    pub fn with_residency_ttl(ttl: std::time::Duration) -> Self {
        Scanner {
            memo: ResidencyMemo::with_ttl(ttl),
            ..Self::default()
        }
    }

    /// `/proc/PID/stat` within `limit`, on the scan's readers.
    pub fn read_stat(&self, pid: i32, limit: Duration) -> ProcResult<numaio_procfs::Stat> {
        Ok(self.readers.read_stat(pid, limit)?)
    }

    /// Reads memory per node for a view taken without it, within the deep look's limit.
    /// Errs when the process is gone or did not answer (then nothing may be decided about
    /// it); other failures are noted in the view.
    pub fn fill_memory(&self, v: &mut ProcessView, read_limit: Duration) -> ProcResult<()> {
        let pid = v.pid;
        let r = self
            .readers
            .run(pid, "numa_maps", read_limit * DEEP_FACTOR, move || {
                numaio_procfs::memory_per_node(pid)
            })?;
        match r {
            Ok(m) => v.memory_per_node = m,
            Err(e) if e.is_gone() => return Err(e.into()),
            Err(e) => v.errors.push(e.to_string()),
        }
        Ok(())
    }

    /// The deep look of `pid` on the scan's readers; a timeout names the file that hung.
    fn deep_within(&self, pid: i32, memory: bool, limit: Duration) -> ProcResult<Deep> {
        let step = Arc::new(AtomicUsize::new(0));
        let st = step.clone();
        let r = self
            .readers
            .run(pid, "status", limit, move || deep_steps(pid, memory, &st));
        match r {
            Ok(r) => Ok(r?),
            Err(ProcfsError::Unresponsive { pid, why, .. }) if why.starts_with("no answer") => {
                let file = DEEP_FILES[step.load(Ordering::Relaxed).min(DEEP_FILES.len() - 1)];
                Err(ProcfsError::Unresponsive {
                    pid,
                    path: PathBuf::from(format!("/proc/{pid}/{file}")),
                    why,
                }
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Samples processes; returns views of the I/O-active ones (or all, per `opts`).
    pub fn scan(
        &mut self,
        opts: &ScanOptions,
        topo: &Topology,
        cache: &dyn CacheOps,
    ) -> ScanResult {
        let pids = match &opts.pids {
            Some(p) => p.clone(),
            None => numaio_procfs::list_pids().unwrap_or_default(),
        };
        let me = std::process::id() as i32;
        let mut res = ScanResult::default();
        let mut seen = std::collections::HashSet::with_capacity(pids.len());
        self.memo.expire();
        let mut next: HashMap<i32, Prev> = HashMap::with_capacity(pids.len());
        let deep_limit = opts.read_limit * DEEP_FACTOR;
        let lights =
            self.handles
                .sample_all(&self.readers, &pids, opts.read_limit, &opts.stall_pids);
        for (pid, light) in pids.into_iter().zip(lights) {
            let cur = match light {
                Ok(s) => {
                    seen.insert(pid);
                    s
                }
                Err(e) if e.is_unresponsive() => {
                    res.unresponsive.extend(Unresponsive::of(&e, None));
                    continue;
                }
                Err(e) if e.is_gone() => {
                    res.gone += 1;
                    continue;
                }
                Err(_) => {
                    res.unreadable += 1;
                    continue;
                }
            };
            res.scanned += 1;
            if cur.kernel_thread || cur.zombie || (opts.pids.is_none() && pid == me) {
                continue;
            }
            if cur.io.is_none() {
                // Another user's process and we are not root: its I/O is invisible.
                res.unreadable += 1;
            }
            let prev = self
                .prev
                .get(&pid)
                .filter(|p| p.light.start_ticks == cur.start_ticks);
            let active = match (prev.and_then(|p| p.light.io), cur.io) {
                (Some(a), Some(b)) => {
                    b.rchar.saturating_sub(a.rchar) + b.wchar.saturating_sub(a.wchar)
                        >= opts.min_io_bytes.max(1)
                }
                _ => false,
            };
            let want_view = opts.all || active;
            let mut fd_pos = HashMap::new();
            let mut deep_done = false;
            if want_view || opts.deep_all {
                match self.deep_within(pid, want_view && opts.memory, deep_limit) {
                    Ok(d) => {
                        deep_done = true;
                        for f in &d.fds {
                            if let Some(p) = f.pos {
                                fd_pos.insert((f.fd, (f.dev, f.ino)), p);
                            }
                        }
                        if want_view {
                            res.views.push(build_view(
                                prev,
                                &cur,
                                &d,
                                topo,
                                cache,
                                &mut self.memo,
                                opts.max_files,
                            ));
                        }
                    }
                    Err(e) if e.is_gone() => {
                        res.gone += 1;
                        continue;
                    }
                    Err(e) if e.is_unresponsive() => {
                        res.unresponsive
                            .extend(Unresponsive::of(&e, Some(&cur.comm)));
                        continue;
                    }
                    Err(_) => res.unreadable += 1,
                }
            }
            next.insert(
                pid,
                Prev {
                    light: cur,
                    fd_pos,
                    deep: deep_done,
                },
            );
        }
        res.residency_queries = self.memo.queries;
        self.handles.retain(&seen);
        self.prev = next;
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::FakeCache;
    use std::io::Read;

    #[test]
    fn view_of_self_reading_a_file() {
        let topo = Topology::detect().unwrap();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &vec![7u8; 1 << 20]).unwrap();
        let path = f.path().canonicalize().unwrap();
        let node = topo.nodes[0].id;
        let cache = FakeCache::with(&[(path.to_str().unwrap(), 1 << 20, &[(node, 1 << 20)])]);
        let me = std::process::id() as i32;
        let opts = ScanOptions {
            pids: Some(vec![me]),
            all: true,
            deep_all: true,
            ..Default::default()
        };
        let mut sc = Scanner::new();
        sc.scan(&opts, &topo, &cache);
        let mut r = std::fs::File::open(&path).unwrap();
        let mut buf = vec![0u8; 1 << 20];
        r.read_exact(&mut buf).unwrap();
        let res = sc.scan(&opts, &topo, &cache);
        assert_eq!(res.views.len(), 1);
        let v = &res.views[0];
        assert_eq!(v.pid, me);
        assert!(v.read_bytes >= 1 << 20, "{}", v.read_bytes);
        let fv = v
            .files
            .iter()
            .find(|x| x.path == path)
            .expect("file listed");
        assert_eq!(fv.cached_bytes, 1 << 20);
        assert_eq!(fv.advanced_bytes, 1 << 20);
        // Offsets moved only on this file, so all reads are attributed to its node.
        assert_eq!(v.numa_read_bytes.get(&node).copied(), Some(v.read_bytes));
        assert_eq!(v.numa_io[&format!("numa{node}_read_bytes")], v.read_bytes);
        assert!(v.main_node.is_some());
        assert_eq!(v.locality, Some(1.0));
    }

    /// The real page cache: `ps`'s per-node bytes for a file equal `where`'s pages.
    #[test]
    fn real_cache_matches_where() {
        let topo = Topology::detect().unwrap();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut f, &vec![3u8; 256 << 10]).unwrap();
        let path = f.path().canonicalize().unwrap();
        let mut r = std::fs::File::open(&path).unwrap();
        let mut buf = Vec::new();
        r.read_to_end(&mut buf).unwrap();
        let me = std::process::id() as i32;
        let opts = ScanOptions {
            pids: Some(vec![me]),
            all: true,
            ..Default::default()
        };
        let res = Scanner::new().scan(&opts, &topo, &crate::PageCache);
        let fv = res.views[0]
            .files
            .iter()
            .find(|x| x.path == path)
            .expect("open file listed")
            .clone();
        let w = numaio_pagecache::file_residency(&path, &Default::default()).unwrap();
        let want: BTreeMap<u32, u64> = w
            .nodes
            .iter()
            .map(|(&n, &p)| (n, p * w.page_size))
            .collect();
        assert_eq!(fv.nodes, want, "{:?}", fv.error);
        assert_eq!(fv.size_bytes, 256 << 10);
        assert!(fv.cached_bytes > 0);
    }

    /// A process whose /proc reads block is reported, not waited for: the scan ends
    /// within the limit, the others are listed, and the next scan does not wait again.
    #[test]
    fn a_stuck_process_is_reported_and_the_scan_finishes() {
        let topo = Topology::detect().unwrap();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let stuck = child.id() as i32;
        let me = std::process::id() as i32;
        let limit = Duration::from_millis(100);
        let opts = ScanOptions {
            pids: Some(vec![stuck, me]),
            all: true,
            deep_all: true,
            read_limit: limit,
            stall_pids: vec![stuck],
            ..Default::default()
        };
        let mut sc = Scanner::new();
        for round in 0..2 {
            let t = Instant::now();
            let res = sc.scan(&opts, &topo, &crate::cache::FakeCache::default());
            let took = t.elapsed();
            assert!(
                took < limit + Duration::from_secs(2),
                "round {round}: {took:?}"
            );
            assert_eq!(res.unresponsive.len(), 1, "{:?}", res.unresponsive);
            let u = &res.unresponsive[0];
            assert_eq!(u.pid, stuck);
            assert_eq!(u.file, PathBuf::from(format!("/proc/{stuck}/stat")));
            assert!(u.error.contains(&stuck.to_string()), "{}", u.error);
            let pids: Vec<i32> = res.views.iter().map(|v| v.pid).collect();
            assert_eq!(pids, vec![me], "round {round}");
            if round == 1 {
                // Known stuck: no second wait.
                assert!(u.error.contains("stuck for"), "{}", u.error);
            }
        }
        assert_eq!(sc.readers.counts().abandoned, 1);
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Held /proc descriptors follow their process and report its exit.
    #[test]
    fn held_handles_track_exit() {
        let h = ProcHandles::new();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let a = h.sample(pid).unwrap();
        assert!(h.holds(pid));
        let b = h.sample(pid).unwrap();
        assert_eq!(a.start_ticks, b.start_ticks);
        assert_eq!(b.comm, "sleep");
        assert!(b.io.is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(matches!(h.sample(pid), Err(e) if e.is_gone()));
        assert!(!h.holds(pid));
    }
}
