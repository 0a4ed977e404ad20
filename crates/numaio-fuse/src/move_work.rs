//! Moving the requesting thread to its data (`--move-work migrate-thread|first-reader`).
//!
//! The modes mean what they mean in the engine: `migrate-thread` moves a thread towards the
//! node of the data it touches, `first-reader` towards the node of the block's first reader.
//! The engine's per-thread [`Hysteresis`] (kept here per requesting thread id, since one
//! serving thread serves many callers) decides when a run of remote accesses justifies a
//! move; [`decide`] then says whether this thread may be moved at all, and the move is a
//! `sched_setaffinity` of the thread to the target node's CPUs.

use crate::caller::Requester;
use numaio_numa::hysteresis::{Hysteresis, HysteresisConfig};
use numaio_numa::moves::{FirstReaderMap, MoveWork};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

const SHARDS: usize = 16;
/// Threads whose hysteresis is remembered per shard; a full shard starts over.
const SHARD_CAP: usize = 1024;

/// What is known about a thread a move is due for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadFacts {
    pub tid: u32,
    pub pid: u32,
    pub kernel_thread: bool,
    /// The thread belongs to the mount server itself.
    pub own_process: bool,
    /// CPUs in the thread's affinity now, and CPUs online.
    pub affinity_cpus: usize,
    pub online_cpus: usize,
    /// The affinity is the one this mount set at its last move of the thread.
    pub set_by_us: bool,
}

/// Why a due move was not made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// The request names no thread (kernel-initiated I/O) or its process is unknown.
    Unknown,
    Init,
    KernelThread,
    OwnProcess,
    /// Someone narrowed the thread's affinity (not this mount): theirs to decide.
    UserAffinity,
}

/// Whether a thread for which the hysteresis asks for a move may be moved. Pid 1, kernel
/// threads and the server's own threads never; a thread whose affinity is narrower than the
/// CPUs online, unless this mount set it or `override_user_affinity` is given.
pub fn decide(f: &ThreadFacts, override_user_affinity: bool) -> Result<(), Skip> {
    if f.tid == 0 || f.pid == 0 {
        return Err(Skip::Unknown);
    }
    if f.pid == 1 || f.tid == 1 {
        return Err(Skip::Init);
    }
    if f.kernel_thread {
        return Err(Skip::KernelThread);
    }
    if f.own_process {
        return Err(Skip::OwnProcess);
    }
    if f.affinity_cpus < f.online_cpus && !f.set_by_us && !override_user_affinity {
        return Err(Skip::UserAffinity);
    }
    Ok(())
}

struct ThreadState {
    hyst: Hysteresis,
    /// The CPUs this mount restricted the thread to, if it did.
    set: Option<Vec<u32>>,
}

/// The mount's thread mover.
pub struct ThreadMover {
    mode: MoveWork,
    override_user_affinity: bool,
    hysteresis: HysteresisConfig,
    node_cpus: BTreeMap<u32, Vec<u32>>,
    online_cpus: usize,
    first_readers: Option<FirstReaderMap>,
    states: Vec<Mutex<HashMap<u32, ThreadState>>>,
    moved: AtomicU64,
    skipped: AtomicU64,
}

impl ThreadMover {
    /// `mode` is `MigrateThread` or `FirstReader`; `node_cpus` are the CPUs of each node.
    pub fn new(
        mode: MoveWork,
        override_user_affinity: bool,
        hysteresis: HysteresisConfig,
        node_cpus: BTreeMap<u32, Vec<u32>>,
    ) -> ThreadMover {
        let online_cpus = node_cpus.values().map(Vec::len).sum();
        ThreadMover {
            mode,
            override_user_affinity,
            hysteresis,
            node_cpus,
            online_cpus,
            first_readers: (mode == MoveWork::FirstReader).then(|| FirstReaderMap::new(1 << 20)),
            states: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
            moved: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
        }
    }

    pub fn mode(&self) -> MoveWork {
        self.mode
    }

    /// Threads moved so far, and due moves that were not made.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.moved.load(Ordering::Relaxed),
            self.skipped.load(Ordering::Relaxed),
        )
    }

    /// Records an access by `r` to block `block` of inode `ino` whose data lies on
    /// `data_node`; moves the thread when due and allowed. Returns the node it was moved to.
    pub fn observe(&self, r: &Requester, ino: u64, block: u64, data_node: u32) -> Option<u32> {
        // Without the thread's own CPU there is nothing to compare the data with.
        if !r.exact || r.tid == 0 {
            return None;
        }
        let target = match self.mode {
            MoveWork::MigrateThread => data_node,
            MoveWork::FirstReader => self
                .first_readers
                .as_ref()
                .map_or(r.node, |m| m.claim(ino, block, r.node)),
            MoveWork::None | MoveWork::Forward => return None,
        };
        let shard = &self.states[r.tid as usize % SHARDS];
        let mut m = lock(shard);
        if m.len() >= SHARD_CAP && !m.contains_key(&r.tid) {
            m.clear();
        }
        let st = m.entry(r.tid).or_insert_with(|| ThreadState {
            hyst: Hysteresis::new(self.hysteresis),
            set: None,
        });
        let due = st.hyst.observe(r.node, target)?;
        let cpus = self.node_cpus.get(&due).filter(|c| !c.is_empty())?;
        let facts = facts_of(r, self.online_cpus, st.set.as_deref());
        let verdict = decide(&facts, self.override_user_affinity).and_then(|()| {
            let set = numaio_sys::mask::CpuSet::from_ids(cpus);
            numaio_sys::affinity::set_affinity(r.tid as i32, &set).map_err(|_| Skip::Unknown)
        });
        match verdict {
            Ok(()) => {
                st.set = Some(cpus.clone());
                self.moved.fetch_add(1, Ordering::Relaxed);
                Some(due)
            }
            Err(_) => {
                self.skipped.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }
}

/// `/proc/TID/stat` read on numaio-procfs's bounded readers, waiting at most `wait`: the read
/// takes locks of the requesting process, which may be exiting while it waits for this very
/// request (see `caller::CallerNodes`), so a serving thread must not block on it.
fn stat_within(tid: u32, wait: std::time::Duration) -> Option<numaio_procfs::Stat> {
    numaio_procfs::bounded::global()
        .read_stat(i32::try_from(tid).ok()?, wait)
        .ok()
}

/// Reads what [`decide`] needs about the live thread; unknown facts err on not moving.
fn facts_of(r: &Requester, online_cpus: usize, set: Option<&[u32]>) -> ThreadFacts {
    let stat = stat_within(r.tid, crate::caller::RESOLVE_WAIT);
    let affinity = numaio_sys::affinity::get_affinity(r.tid as i32)
        .map(|s| s.to_vec())
        .ok();
    ThreadFacts {
        tid: r.tid,
        // A thread whose /proc entry is gone or unreadable is treated as unknown.
        pid: if stat.is_some() { r.pid } else { 0 },
        kernel_thread: stat.as_ref().is_none_or(|s| s.is_kernel_thread()),
        own_process: r.pid == std::process::id(),
        affinity_cpus: affinity.as_ref().map_or(0, Vec::len),
        online_cpus,
        set_by_us: matches!((&affinity, set), (Some(a), Some(s)) if a.as_slice() == s),
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rule, stated independently of [`decide`]'s control flow.
    fn allowed(f: &ThreadFacts, ovr: bool) -> bool {
        let known = f.tid != 0 && f.pid != 0;
        let init = f.pid == 1 || f.tid == 1;
        let narrowed = f.affinity_cpus < f.online_cpus;
        known && !init && !f.kernel_thread && !f.own_process && (!narrowed || f.set_by_us || ovr)
    }

    #[test]
    fn decide_exhaustively() {
        let ids = [0u32, 1, 2, 500];
        let mut moves = 0;
        for &tid in &ids {
            for &pid in &ids {
                for bits in 0..32u32 {
                    let b = |i: u32| bits & (1 << i) != 0;
                    for &(aff, online) in &[(4usize, 4usize), (2, 4), (0, 4)] {
                        let f = ThreadFacts {
                            tid,
                            pid,
                            kernel_thread: b(0),
                            own_process: b(1),
                            affinity_cpus: aff,
                            online_cpus: online,
                            set_by_us: b(2),
                        };
                        let ovr = b(3);
                        let got = decide(&f, ovr);
                        assert_eq!(got.is_ok(), allowed(&f, ovr), "{f:?} override {ovr}");
                        moves += got.is_ok() as u32;
                        // The reason given is the first rule that applies.
                        if let Err(e) = got {
                            let want = if tid == 0 || pid == 0 {
                                Skip::Unknown
                            } else if pid == 1 || tid == 1 {
                                Skip::Init
                            } else if f.kernel_thread {
                                Skip::KernelThread
                            } else if f.own_process {
                                Skip::OwnProcess
                            } else {
                                Skip::UserAffinity
                            };
                            assert_eq!(e, want, "{f:?}");
                        }
                    }
                }
            }
        }
        assert!(moves > 0);
    }

    fn req(tid: u32, node: u32, exact: bool) -> Requester {
        Requester {
            node,
            cpu: Some(0),
            tid,
            pid: tid,
            exact,
        }
    }

    #[test]
    fn local_or_inexact_accesses_never_move() {
        let m = ThreadMover::new(
            MoveWork::MigrateThread,
            false,
            HysteresisConfig::jericho(),
            BTreeMap::from([(0, vec![0]), (1, vec![1])]),
        );
        for _ in 0..10 {
            assert_eq!(m.observe(&req(4242, 0, true), 1, 0, 0), None);
            assert_eq!(m.observe(&req(4242, 0, false), 1, 0, 1), None);
        }
        assert_eq!(m.counts(), (0, 0));
    }

    #[test]
    fn due_moves_of_forbidden_threads_are_skipped() {
        let m = ThreadMover::new(
            MoveWork::MigrateThread,
            false,
            HysteresisConfig::jericho(),
            BTreeMap::from([(0, vec![0]), (1, vec![1])]),
        );
        // This test's own thread: the mount server's process, so never moved.
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let r = Requester {
            pid: std::process::id(),
            ..req(tid, 0, true)
        };
        assert_eq!(m.observe(&r, 1, 0, 1), None);
        // pid 1 is never moved either.
        assert_eq!(m.observe(&req(1, 0, true), 1, 0, 1), None);
        assert_eq!(m.counts(), (0, 2));
    }

    #[test]
    fn first_reader_targets_the_first_readers_node() {
        let m = ThreadMover::new(
            MoveWork::FirstReader,
            false,
            HysteresisConfig::jericho(),
            BTreeMap::from([(0, vec![0]), (1, vec![1])]),
        );
        // Thread 1 (pid 1, never moved) reads block 7 first, from node 1.
        assert_eq!(m.observe(&req(1, 1, true), 3, 7, 0), None);
        assert_eq!(
            m.counts(),
            (0, 0),
            "the first reader is local by definition"
        );
        // A later reader on node 0 is due to go to node 1 (skipped: pid 1 again).
        m.observe(&req(1, 0, true), 3, 7, 0);
        assert_eq!(m.counts(), (0, 1));
    }
}
