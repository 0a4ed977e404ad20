//! Per-process, per-thread, per-node I/O accounting of a mount.
//!
//! Every read and write a transport serves is counted as bytes per node *of the data* (the
//! node of the device holding the blocks), keyed by the requesting process and thread. The
//! counters are sharded by thread id so serving threads on different nodes rarely share a
//! lock; a snapshot merges the shards.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 64;
/// Threads tracked in all; beyond this a new thread is counted under tid 0 of its process,
/// so bytes are never lost, only the per-thread split.
pub const MAX_THREADS: usize = 65_536;

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Read,
    Write,
}

/// Bytes read and written on one node; the `local_*` part by a caller running on that node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NodeBytes {
    pub read: u64,
    pub write: u64,
    pub local_read: u64,
    pub local_write: u64,
}

impl NodeBytes {
    pub fn total(&self) -> u64 {
        self.read.saturating_add(self.write)
    }

    fn add(&mut self, dir: Direction, bytes: u64, local: bool) {
        let l = if local { bytes } else { 0 };
        match dir {
            Direction::Read => {
                self.read = self.read.saturating_add(bytes);
                self.local_read = self.local_read.saturating_add(l);
            }
            Direction::Write => {
                self.write = self.write.saturating_add(bytes);
                self.local_write = self.local_write.saturating_add(l);
            }
        }
    }

    fn merge(&mut self, o: &NodeBytes) {
        self.read = self.read.saturating_add(o.read);
        self.write = self.write.saturating_add(o.write);
        self.local_read = self.local_read.saturating_add(o.local_read);
        self.local_write = self.local_write.saturating_add(o.local_write);
    }
}

/// One thread's counters, per node (few nodes: a short list beats a map).
type PerNode = Vec<(u32, NodeBytes)>;

fn bump(v: &mut PerNode, node: u32, dir: Direction, bytes: u64, local: bool) {
    match v.iter_mut().find(|(n, _)| *n == node) {
        Some((_, b)) => b.add(dir, bytes, local),
        None => {
            let mut b = NodeBytes::default();
            b.add(dir, bytes, local);
            v.push((node, b));
        }
    }
}

/// The accounting of one mount.
pub struct Accounting {
    shards: Vec<Mutex<HashMap<(u32, u32), PerNode>>>,
    threads: AtomicUsize,
    /// Command names, read when a process is first seen (it may be gone when stats are read).
    comms: Mutex<HashMap<u32, String>>,
    comm_of: fn(u32) -> String,
}

impl Default for Accounting {
    fn default() -> Self {
        Self::new()
    }
}

/// A process's counters in a snapshot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessIo {
    pub pid: u32,
    pub comm: String,
    pub nodes: BTreeMap<u32, NodeBytes>,
    pub threads: BTreeMap<u32, BTreeMap<u32, NodeBytes>>,
}

impl ProcessIo {
    pub fn total(&self) -> u64 {
        self.nodes.values().map(NodeBytes::total).sum()
    }
}

/// Merged counters: per node over all processes, and per process.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    pub nodes: BTreeMap<u32, NodeBytes>,
    /// Sorted by total bytes, largest first (ties: lower pid first).
    pub processes: Vec<ProcessIo>,
}

impl Accounting {
    pub fn new() -> Accounting {
        Self::with_comm_reader(read_comm)
    }

    /// With another way to name processes (for tests).
    pub fn with_comm_reader(comm_of: fn(u32) -> String) -> Accounting {
        Accounting {
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            threads: AtomicUsize::new(0),
            comms: Mutex::new(HashMap::new()),
            comm_of,
        }
    }

    /// Counts `parts` (node, bytes) of one request by thread `tid` of process `pid`, which
    /// ran on `caller_node` when it asked (bytes on that node are local).
    pub fn add(&self, pid: u32, tid: u32, dir: Direction, caller_node: u32, parts: &[(u32, u64)]) {
        if parts.iter().all(|&(_, b)| b == 0) {
            return;
        }
        let shard = &self.shards[tid as usize % SHARDS];
        let mut m = lock(shard);
        let key = if m.contains_key(&(pid, tid)) {
            (pid, tid)
        } else if self.threads.load(Ordering::Relaxed) < MAX_THREADS {
            self.threads.fetch_add(1, Ordering::Relaxed);
            self.note_process(pid);
            (pid, tid)
        } else {
            // Full: the process's bytes go to its tid-0 entry, which lives in shard 0.
            drop(m);
            self.note_process(pid);
            m = lock(&self.shards[0]);
            (pid, 0)
        };
        let v = m.entry(key).or_default();
        for &(node, bytes) in parts {
            if bytes > 0 {
                bump(v, node, dir, bytes, node == caller_node);
            }
        }
    }

    fn note_process(&self, pid: u32) {
        let mut c = lock(&self.comms);
        c.entry(pid).or_insert_with(|| (self.comm_of)(pid));
    }

    /// Merges the shards.
    pub fn snapshot(&self) -> Snapshot {
        let mut procs: HashMap<u32, ProcessIo> = HashMap::new();
        let mut nodes: BTreeMap<u32, NodeBytes> = BTreeMap::new();
        for s in &self.shards {
            for (&(pid, tid), v) in lock(s).iter() {
                let p = procs.entry(pid).or_insert_with(|| ProcessIo {
                    pid,
                    ..Default::default()
                });
                let t = p.threads.entry(tid).or_default();
                for (node, b) in v {
                    t.entry(*node).or_default().merge(b);
                    p.nodes.entry(*node).or_default().merge(b);
                    nodes.entry(*node).or_default().merge(b);
                }
            }
        }
        let comms = lock(&self.comms);
        let mut processes: Vec<ProcessIo> = procs
            .into_values()
            .map(|mut p| {
                p.comm = comms.get(&p.pid).cloned().unwrap_or_default();
                p
            })
            .collect();
        processes.sort_by(|a, b| b.total().cmp(&a.total()).then(a.pid.cmp(&b.pid)));
        Snapshot { nodes, processes }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Counters stay usable after a panic elsewhere: ignore the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read_comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|s| s.trim_end_matches('\n').to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn acc() -> Accounting {
        Accounting::with_comm_reader(|pid| format!("p{pid}"))
    }

    #[test]
    fn counts_per_process_thread_and_node() {
        let a = acc();
        a.add(10, 10, Direction::Write, 9, &[(0, 4096), (1, 8192)]);
        a.add(10, 11, Direction::Read, 9, &[(1, 100)]);
        a.add(20, 20, Direction::Read, 9, &[(0, 5)]);
        a.add(20, 20, Direction::Read, 9, &[(0, 0)]);
        let s = a.snapshot();
        assert_eq!(
            s.nodes[&0],
            NodeBytes {
                read: 5,
                write: 4096,
                ..NodeBytes::default()
            }
        );
        assert_eq!(
            s.nodes[&1],
            NodeBytes {
                read: 100,
                write: 8192,
                ..NodeBytes::default()
            }
        );
        assert_eq!(s.processes.len(), 2);
        let p = &s.processes[0];
        assert_eq!((p.pid, p.comm.as_str(), p.total()), (10, "p10", 12388));
        assert_eq!(
            p.threads[&11][&1],
            NodeBytes {
                read: 100,
                write: 0,
                ..NodeBytes::default()
            }
        );
        assert_eq!(
            p.threads[&10][&0],
            NodeBytes {
                read: 0,
                write: 4096,
                ..NodeBytes::default()
            }
        );
        assert_eq!(s.processes[1].pid, 20);
    }

    #[test]
    fn bytes_on_the_callers_node_are_local() {
        let a = acc();
        a.add(3, 3, Direction::Read, 1, &[(0, 10), (1, 30)]);
        a.add(3, 3, Direction::Write, 0, &[(0, 5)]);
        let s = a.snapshot();
        let t = &s.processes[0].threads[&3];
        assert_eq!((t[&0].read, t[&0].local_read), (10, 0));
        assert_eq!((t[&1].read, t[&1].local_read), (30, 30));
        assert_eq!((t[&0].write, t[&0].local_write), (5, 5));
        assert_eq!(s.nodes[&1].local_read, 30);
    }

    #[test]
    fn nothing_counted_for_empty_parts() {
        let a = acc();
        a.add(1, 1, Direction::Read, 0, &[]);
        a.add(1, 1, Direction::Read, 0, &[(0, 0)]);
        assert_eq!(a.snapshot(), Snapshot::default());
    }

    #[test]
    fn concurrent_adds_are_all_counted() {
        let a = Arc::new(acc());
        let hs: Vec<_> = (0..8u32)
            .map(|t| {
                let a = a.clone();
                std::thread::spawn(move || {
                    for i in 0..1000u32 {
                        a.add(7, t, Direction::Read, 0, &[(i % 2, 1)]);
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        let s = a.snapshot();
        assert_eq!(s.nodes[&0].read + s.nodes[&1].read, 8000);
        assert_eq!(s.processes[0].threads.len(), 8);
    }

    #[test]
    fn thread_limit_keeps_bytes_under_tid_zero() {
        let a = acc();
        a.threads.store(MAX_THREADS, Ordering::Relaxed);
        a.add(5, 99, Direction::Write, 0, &[(0, 10)]);
        a.add(5, 98, Direction::Write, 0, &[(0, 10)]);
        let s = a.snapshot();
        assert_eq!(s.processes[0].threads[&0][&0].write, 20);
        assert_eq!(s.nodes[&0].write, 20);
    }
}
