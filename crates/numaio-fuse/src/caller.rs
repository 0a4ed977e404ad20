//! The requesting thread behind a FUSE request: its NUMA node and its process.
//!
//! A FUSE request carries the caller's thread id. The node that placement wants is the node
//! of the CPU that thread runs on (`/proc/<tid>/stat` field 39), not the node of the serving
//! thread. Reading /proc on every request would cost more than the request, so the answer is
//! cached per thread for [`NODE_TTL`]; the thread's process (`Tgid` of `/proc/<tid>/status`)
//! is read once per thread and kept while the thread's start time stays the same (a changed
//! start time means the kernel reused the thread id).

use numaio_proc::procfs;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a thread's node is trusted before /proc is read again.
pub const NODE_TTL: Duration = Duration::from_millis(100);
/// Shards of the per-thread cache, so serving threads rarely wait on each other.
const SHARDS: usize = 16;
/// Threads remembered per shard; beyond this, entries older than the TTL are dropped.
const SHARD_CAP: usize = 512;

/// Who asked: the node of the CPU the thread ran on and its process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Requester {
    pub node: u32,
    pub cpu: Option<u32>,
    pub tid: u32,
    /// The process; the thread id itself when /proc could not say.
    pub pid: u32,
    /// True when the node came from the thread's own CPU (false: the serving thread's).
    pub exact: bool,
}

#[derive(Clone, Copy)]
struct Entry {
    node: u32,
    cpu: u32,
    pid: u32,
    start_ticks: u64,
    at: Instant,
}

/// CPU → node map plus the per-thread cache.
pub struct CallerNodes {
    /// Node of each CPU (index = CPU); `u32::MAX` where the topology does not say.
    cpu_node: Vec<u32>,
    shards: Vec<Mutex<HashMap<u32, Entry>>>,
}

impl CallerNodes {
    /// Uses the live topology; a machine without NUMA information maps every CPU to node 0.
    pub fn detect() -> CallerNodes {
        let map = numaio_sys::topology::Topology::detect()
            .map(|t| t.cpu_node_map())
            .unwrap_or_default();
        Self::with_map(map.into_iter())
    }

    /// From explicit (cpu, node) pairs (for tests).
    pub fn with_map(pairs: impl Iterator<Item = (u32, u32)>) -> CallerNodes {
        let mut cpu_node = Vec::new();
        for (cpu, node) in pairs {
            let i = cpu as usize;
            if i >= 1 << 16 {
                continue;
            }
            if cpu_node.len() <= i {
                cpu_node.resize(i + 1, u32::MAX);
            }
            cpu_node[i] = node;
        }
        CallerNodes {
            cpu_node,
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    /// The node of `cpu`, if the topology knows it.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cpu_node
            .get(cpu as usize)
            .copied()
            .filter(|&n| n != u32::MAX)
    }

    /// The requester behind thread `tid` (0: unknown, e.g. kernel-initiated writeback).
    pub fn lookup(&self, tid: u32) -> Requester {
        self.lookup_at(tid, Instant::now(), read_stat, read_tgid)
    }

    fn lookup_at(
        &self,
        tid: u32,
        now: Instant,
        stat: impl FnOnce(u32) -> Option<(u32, u64)>,
        tgid: impl FnOnce(u32) -> Option<u32>,
    ) -> Requester {
        if tid == 0 {
            return self.fallback(0, 0);
        }
        let shard = &self.shards[tid as usize % SHARDS];
        let cached = lock(shard).get(&tid).copied();
        if let Some(e) = cached.filter(|e| now.duration_since(e.at) < NODE_TTL) {
            return Requester {
                node: e.node,
                cpu: Some(e.cpu),
                tid,
                pid: e.pid,
                exact: true,
            };
        }
        // The /proc reads happen without the lock held.
        let Some((cpu, start_ticks)) = stat(tid) else {
            let pid = cached.map_or(tid, |e| e.pid);
            return self.fallback(tid, pid);
        };
        let pid = match cached {
            Some(e) if e.start_ticks == start_ticks => e.pid,
            _ => tgid(tid).unwrap_or(tid),
        };
        let Some(node) = self.node_of_cpu(cpu) else {
            return self.fallback(tid, pid);
        };
        let mut m = lock(shard);
        if m.len() >= SHARD_CAP && !m.contains_key(&tid) {
            m.retain(|_, e| now.duration_since(e.at) < NODE_TTL);
            if m.len() >= SHARD_CAP {
                m.clear();
            }
        }
        m.insert(
            tid,
            Entry {
                node,
                cpu,
                pid,
                start_ticks,
                at: now,
            },
        );
        Requester {
            node,
            cpu: Some(cpu),
            tid,
            pid,
            exact: true,
        }
    }

    /// When /proc cannot say: the node of the CPU serving the request.
    fn fallback(&self, tid: u32, pid: u32) -> Requester {
        let (cpu, node) = serving_cpu_node();
        Requester {
            node: self.node_of_cpu(cpu).unwrap_or(node),
            cpu: None,
            tid,
            pid,
            exact: false,
        }
    }

    /// Records that `tid` was just restricted to `node`'s CPUs, so the next request does not
    /// see the node it ran on before the move.
    pub fn note_moved(&self, tid: u32, node: u32) {
        if let Some(e) = lock(&self.shards[tid as usize % SHARDS]).get_mut(&tid) {
            e.node = node;
        }
    }

    /// The CPUs of each node, as the topology lists them.
    pub fn node_cpus(&self) -> std::collections::BTreeMap<u32, Vec<u32>> {
        let mut m: std::collections::BTreeMap<u32, Vec<u32>> = Default::default();
        for (cpu, &node) in self.cpu_node.iter().enumerate() {
            if node != u32::MAX {
                m.entry(node).or_default().push(cpu as u32);
            }
        }
        m
    }

    /// Threads cached now (for tests).
    pub fn cached(&self) -> usize {
        self.shards.iter().map(|s| lock(s).len()).sum()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a cache lock leaves a usable map: ignore the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// (CPU it last ran on, start time) of thread `tid`.
fn read_stat(tid: u32) -> Option<(u32, u64)> {
    let st = procfs::read_stat(i32::try_from(tid).ok()?).ok()?;
    Some((st.processor, st.start_ticks))
}

/// The process thread `tid` belongs to.
fn read_tgid(tid: u32) -> Option<u32> {
    let s = procfs::read_status(i32::try_from(tid).ok()?).ok()?;
    u32::try_from(s.tgid).ok().filter(|&t| t > 0)
}

/// (CPU, node) the calling thread runs on now.
pub fn serving_cpu_node() -> (u32, u32) {
    let mut cpu: u32 = 0;
    let mut node: u32 = 0;
    // SAFETY: getcpu writes two u32s through valid pointers; the third argument is unused.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut u32,
            &mut node as *mut u32,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r == 0 {
        (cpu, node)
    } else {
        (0, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_nodes() -> CallerNodes {
        CallerNodes::with_map([(0, 0), (1, 0), (2, 1), (3, 1)].into_iter())
    }

    #[test]
    fn node_comes_from_the_threads_cpu_and_is_cached() {
        let c = two_nodes();
        let t0 = Instant::now();
        let r = c.lookup_at(77, t0, |_| Some((3, 10)), |_| Some(70));
        assert_eq!((r.node, r.cpu, r.pid, r.exact), (1, Some(3), 70, true));
        // Within the TTL /proc is not read again.
        let r = c.lookup_at(
            77,
            t0 + NODE_TTL / 2,
            |_| panic!("stat"),
            |_| panic!("tgid"),
        );
        assert_eq!((r.node, r.pid), (1, 70));
        // After the TTL the thread moved to node 0; the process is kept (same start time).
        let r = c.lookup_at(77, t0 + NODE_TTL * 2, |_| Some((0, 10)), |_| panic!("tgid"));
        assert_eq!((r.node, r.pid), (0, 70));
    }

    #[test]
    fn reused_thread_id_rereads_the_process() {
        let c = two_nodes();
        let t0 = Instant::now();
        c.lookup_at(5, t0, |_| Some((0, 10)), |_| Some(1000));
        let r = c.lookup_at(5, t0 + NODE_TTL * 2, |_| Some((2, 99)), |_| Some(2000));
        assert_eq!((r.node, r.pid), (1, 2000));
    }

    #[test]
    fn proc_failure_falls_back_to_the_serving_cpu() {
        let c = two_nodes();
        let r = c.lookup_at(9, Instant::now(), |_| None, |_| None);
        assert!(!r.exact);
        assert_eq!((r.tid, r.pid, r.cpu), (9, 9, None));
        // Unknown CPU in the topology: also a fallback, but the process is known.
        let r = c.lookup_at(9, Instant::now(), |_| Some((64, 1)), |_| Some(4));
        assert_eq!((r.pid, r.exact), (4, false));
        let r = c.lookup_at(0, Instant::now(), |_| panic!("stat"), |_| panic!("tgid"));
        assert_eq!((r.tid, r.pid, r.exact), (0, 0, false));
    }

    #[test]
    fn cache_is_bounded() {
        let c = two_nodes();
        let t0 = Instant::now();
        for tid in 1..=(SHARDS * SHARD_CAP * 3) as u32 {
            c.lookup_at(tid, t0, |_| Some((0, 1)), |_| Some(1));
        }
        assert!(c.cached() <= SHARDS * SHARD_CAP);
    }

    #[test]
    fn live_lookup_of_this_thread() {
        let c = CallerNodes::detect();
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let r = c.lookup(tid);
        assert_eq!(r.pid, std::process::id());
        assert_eq!(r.tid, tid);
        assert!(r.exact, "this thread's /proc entry is readable");
    }
}
