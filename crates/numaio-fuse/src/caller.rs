//! The requesting thread behind a FUSE request: its NUMA node and its process.
//!
//! A FUSE request carries the caller's thread id. The node that placement wants is the node
//! of the CPU that thread runs on (`/proc/<tid>/stat` field 39), not the node of the serving
//! thread. Reading /proc on every request would cost more than the request, so the answer is
//! cached per thread for [`NODE_TTL`]; the thread's process (`Tgid` of `/proc/<tid>/status`)
//! is read once per thread and kept while the thread's start time stays the same (a changed
//! start time means the kernel reused the thread id).

use numaio_procfs::bounded;
use std::collections::{HashMap, HashSet};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How long a thread's node is trusted before /proc is read again.
pub const NODE_TTL: Duration = Duration::from_millis(100);
/// How long a thread's process is trusted when the node comes from elsewhere (the io_uring
/// queue's CPU): only a reused thread id could change it, which takes far longer.
pub const PID_TTL: Duration = Duration::from_secs(1);
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

/// CPU → node map plus the per-thread cache; its lookups read /proc synchronously.
pub struct Cache {
    /// Node of each CPU (index = CPU); `u32::MAX` where the topology does not say.
    cpu_node: Vec<u32>,
    shards: Vec<Mutex<HashMap<u32, Entry>>>,
}

impl Cache {
    /// From explicit (cpu, node) pairs.
    pub fn with_map(pairs: impl Iterator<Item = (u32, u32)>) -> Cache {
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
        Cache {
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

    /// The cached entry of `tid` younger than `ttl`, without touching /proc.
    fn cached_within(&self, tid: u32, now: Instant, ttl: Duration) -> Option<Requester> {
        if tid == 0 {
            return None;
        }
        let e = lock(&self.shards[tid as usize % SHARDS])
            .get(&tid)
            .copied()?;
        (now.duration_since(e.at) < ttl).then_some(Requester {
            node: e.node,
            cpu: Some(e.cpu),
            tid,
            pid: e.pid,
            exact: true,
        })
    }
}

/// How long a serving thread waits for a thread it has not seen before to be looked up;
/// past that it serves with the fallback (the thread id as process, the serving CPU's node).
pub const RESOLVE_WAIT: Duration = Duration::from_millis(20);
/// How long a request that places something (a new inode's metadata, new blocks) waits for
/// a thread it has not seen before: the resolver's two reads of a new thread (its `stat`,
/// then its `status`) give up after [`PROC_READ_LIMIT`] each, so this waits for both
/// answers, with room to spare, instead of placing by the serving thread's node, which need
/// not be the requester's. Such requests never come from a process stuck in exit (the case
/// [`RESOLVE_WAIT`] is short for).
pub const PLACE_WAIT: Duration = Duration::from_millis(2 * PROC_READ_LIMIT_MS + 100);
/// Lookups queued for the resolver at most; more are dropped (served with the fallback).
const RESOLVE_QUEUE: usize = 1024;
/// How long the resolver waits for one `/proc/TID` file. A thread whose file does not
/// answer costs this once; until that read returns, its lookups fail at once (fallback).
pub const PROC_READ_LIMIT: Duration = Duration::from_millis(PROC_READ_LIMIT_MS);
const PROC_READ_LIMIT_MS: u64 = 200;

/// The resolver's /proc readers: (CPU, start time) of a thread, and its process.
type StatFn = fn(u32) -> Option<(u32, u64)>;
type TgidFn = fn(u32) -> Option<u32>;

/// The requesting thread's node and process for the serving threads, which never read
/// /proc themselves: reading `/proc/TID/stat` takes locks of the requesting process (its
/// `exec_update_lock`), and that process may be exiting with one of its threads waiting for
/// the very request being served (a FLUSH from `close`), so a serving thread reading it can
/// wait forever, and with it the mount. A resolver thread does the reads and fills the cache;
/// a serving thread uses what is cached (refreshed behind its back when stale) and waits at
/// most [`RESOLVE_WAIT`] for a new thread. A thread is queued once until its lookup is done,
/// and the resolver's own reads give up after [`PROC_READ_LIMIT`] (numaio-procfs's bounded
/// readers), so one stuck thread cannot stall the lookups of the others.
pub struct CallerNodes {
    cache: Arc<Cache>,
    done: Arc<(Mutex<u64>, Condvar)>,
    /// Threads queued for the resolver or being looked up.
    pending: Arc<Mutex<HashSet<u32>>>,
    reads: (StatFn, TgidFn),
    resolver: OnceLock<Option<SyncSender<u32>>>,
}

impl CallerNodes {
    /// Uses the live topology; a machine without NUMA information maps every CPU to node 0.
    /// Starts the resolver and its /proc readers at once (by looking up the calling thread),
    /// so that the first request's lookup does not also wait for threads to start: on a
    /// loaded machine that start-up alone could outlast [`PLACE_WAIT`].
    pub fn detect() -> CallerNodes {
        let map = numaio_sys::topology::Topology::detect()
            .map(|t| t.cpu_node_map())
            .unwrap_or_default();
        let c = Self::with_map(map.into_iter());
        // SAFETY: gettid takes no arguments and cannot fail.
        let me = unsafe { libc::syscall(libc::SYS_gettid) };
        if let Ok(me) = u32::try_from(me) {
            c.ask(me);
        }
        c
    }

    /// From explicit (cpu, node) pairs.
    pub fn with_map(pairs: impl Iterator<Item = (u32, u32)>) -> CallerNodes {
        Self::with_reads(pairs, (read_stat, read_tgid))
    }

    fn with_reads(pairs: impl Iterator<Item = (u32, u32)>, reads: (StatFn, TgidFn)) -> CallerNodes {
        CallerNodes {
            cache: Arc::new(Cache::with_map(pairs)),
            done: Arc::new((Mutex::new(0), Condvar::new())),
            pending: Arc::new(Mutex::new(HashSet::new())),
            reads,
            resolver: OnceLock::new(),
        }
    }

    /// The requester behind thread `tid` (0: unknown, e.g. kernel-initiated writeback).
    pub fn lookup(&self, tid: u32) -> Requester {
        self.resolve(tid, NODE_TTL, RESOLVE_WAIT, |r| r)
    }

    /// [`CallerNodes::lookup`] for a request that places data or metadata: waits up to
    /// [`PLACE_WAIT`] for a thread not seen before.
    pub fn lookup_placing(&self, tid: u32) -> Requester {
        self.resolve(tid, NODE_TTL, PLACE_WAIT, |r| r)
    }

    /// The requester behind thread `tid` whose request was issued on `cpu` (the CPU of the
    /// io_uring queue it arrived on): the node is that CPU's, so the cache is needed only
    /// for the process, which it keeps for [`PID_TTL`].
    pub fn lookup_on_cpu(&self, tid: u32, cpu: u32) -> Requester {
        let Some(node) = self.cache.node_of_cpu(cpu) else {
            return self.lookup(tid);
        };
        self.resolve(tid, PID_TTL, RESOLVE_WAIT, |r| Requester {
            node,
            cpu: Some(cpu),
            exact: tid != 0,
            ..r
        })
    }

    fn resolve(
        &self,
        tid: u32,
        ttl: Duration,
        wait: Duration,
        adapt: impl Fn(Requester) -> Requester,
    ) -> Requester {
        if tid == 0 {
            return adapt(self.cache.fallback(0, 0));
        }
        let now = Instant::now();
        if let Some(r) = self.cache.cached_within(tid, now, ttl) {
            return adapt(r);
        }
        let stale = self.cache.cached_within(tid, now, Duration::MAX);
        self.ask(tid);
        if let Some(r) = stale {
            // Known thread: serve with what is known; the resolver refreshes it.
            return adapt(r);
        }
        let deadline = now + wait;
        let (m, cv) = &*self.done;
        let mut g = lock(m);
        loop {
            if let Some(r) = self.cache.cached_within(tid, Instant::now(), ttl) {
                return adapt(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return adapt(self.cache.fallback(tid, tid));
            }
            g = cv
                .wait_timeout(g, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Queues `tid` for the resolver, starting it on first use; a thread already queued
    /// (or being looked up) is not queued again.
    fn ask(&self, tid: u32) {
        let tx = self.resolver.get_or_init(|| {
            let (tx, rx) = sync_channel::<u32>(RESOLVE_QUEUE);
            let (cache, done, pending) =
                (self.cache.clone(), self.done.clone(), self.pending.clone());
            let (stat, tgid) = self.reads;
            std::thread::Builder::new()
                .name("numaio-callers".into())
                .spawn(move || {
                    // Ends when the `CallerNodes` (the sender) is dropped.
                    while let Ok(tid) = rx.recv() {
                        cache.lookup_at(tid, Instant::now(), stat, tgid);
                        lock(&pending).remove(&tid);
                        let (m, cv) = &*done;
                        *lock(m) += 1;
                        cv.notify_all();
                    }
                })
                .ok()
                .map(|_| tx)
        });
        let Some(tx) = tx else {
            return;
        };
        if !lock(&self.pending).insert(tid) {
            return;
        }
        if tx.try_send(tid).is_err() {
            // Queue full: served with the fallback; a later request asks again.
            lock(&self.pending).remove(&tid);
        }
    }

    /// Lookups the resolver has finished (for tests).
    #[cfg(test)]
    fn resolved(&self) -> u64 {
        *lock(&self.done.0)
    }

    /// The node of `cpu`, if the topology knows it.
    pub fn node_of_cpu(&self, cpu: u32) -> Option<u32> {
        self.cache.node_of_cpu(cpu)
    }

    /// Records that `tid` was just restricted to `node`'s CPUs.
    pub fn note_moved(&self, tid: u32, node: u32) {
        self.cache.note_moved(tid, node)
    }

    /// The CPUs of each node, as the topology lists them.
    pub fn node_cpus(&self) -> std::collections::BTreeMap<u32, Vec<u32>> {
        self.cache.node_cpus()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding a cache lock leaves a usable map: ignore the poison.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// (CPU it last ran on, start time) of thread `tid`.
fn read_stat(tid: u32) -> Option<(u32, u64)> {
    let st = bounded::global()
        .read_stat(i32::try_from(tid).ok()?, PROC_READ_LIMIT)
        .ok()?;
    Some((st.processor, st.start_ticks))
}

/// The process thread `tid` belongs to.
fn read_tgid(tid: u32) -> Option<u32> {
    let s = bounded::global()
        .read_status(i32::try_from(tid).ok()?, PROC_READ_LIMIT)
        .ok()?;
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

    fn two_nodes() -> Cache {
        Cache::with_map([(0, 0), (1, 0), (2, 1), (3, 1)].into_iter())
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
    fn detect_starts_the_resolver_before_the_first_request() {
        let c = CallerNodes::detect();
        assert!(
            matches!(c.resolver.get(), Some(Some(_))),
            "resolver started"
        );
        let t = Instant::now();
        while c.resolved() < 1 {
            assert!(
                t.elapsed() < Duration::from_secs(5),
                "the warm-up lookup ends"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let r = c.cache.cached_within(tid, Instant::now(), Duration::MAX);
        assert!(r.is_some_and(|r| r.exact), "this thread is cached: {r:?}");
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

    #[test]
    fn queue_cpu_gives_the_node_and_the_resolver_the_process() {
        let c = CallerNodes::with_map([(0, 0), (1, 1)].into_iter());
        // SAFETY: gettid has no arguments and cannot fail.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as u32;
        let r = c.lookup_on_cpu(tid, 1);
        assert_eq!((r.node, r.cpu, r.tid), (1, Some(1), tid));
        assert_eq!(r.pid, std::process::id());
        // Cached now: the same answer with the other queue's CPU, no wait.
        let r = c.lookup_on_cpu(tid, 0);
        assert_eq!((r.node, r.pid, r.exact), (0, std::process::id(), true));
        // tid 0 (kernel-initiated) is never exact.
        let r = c.lookup_on_cpu(0, 1);
        assert_eq!((r.node, r.pid, r.exact), (1, 0, false));
    }

    static SLOW_READS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    fn slow_stat(_: u32) -> Option<(u32, u64)> {
        SLOW_READS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
        Some((0, 1))
    }

    /// A thread asked about many times while its lookup is in flight is looked up once.
    #[test]
    fn a_thread_is_queued_once_while_pending() {
        let c = CallerNodes::with_reads([(0, 0)].into_iter(), (slow_stat, |_| Some(5)));
        for _ in 0..100 {
            c.ask(77);
        }
        let t = Instant::now();
        while c.resolved() < 1 {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
        std::thread::sleep(Duration::from_millis(400));
        assert_eq!(SLOW_READS.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(c.resolved(), 1);
        let r = c.lookup(77);
        assert_eq!((r.exact, r.pid), (true, 5));
        // Done, so no longer pending: a stale entry is queued again.
        c.ask(77);
        let t = Instant::now();
        while c.resolved() < 2 {
            assert!(t.elapsed() < Duration::from_secs(5));
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn stat_in_60ms(_: u32) -> Option<(u32, u64)> {
        std::thread::sleep(Duration::from_millis(60));
        Some((1, 1))
    }

    /// A new thread whose /proc answer takes longer than [`RESOLVE_WAIT`]: an ordinary
    /// request is served with the fallback, one that places data or metadata waits for the
    /// thread's own node.
    #[test]
    fn placing_requests_wait_for_a_new_threads_node() {
        let c = CallerNodes::with_reads([(0, 0), (1, 1)].into_iter(), (stat_in_60ms, |_| Some(5)));
        let r = c.lookup(101);
        assert!(!r.exact, "{r:?}");
        let t = Instant::now();
        let r = c.lookup_placing(202);
        assert!(r.exact, "{r:?}");
        assert_eq!((r.node, r.pid), (1, 5));
        assert!(t.elapsed() < PLACE_WAIT, "{:?}", t.elapsed());
    }

    #[test]
    fn an_unknown_thread_is_served_with_the_fallback_without_blocking() {
        let c = CallerNodes::with_map([(0, 0)].into_iter());
        let t = Instant::now();
        // No such thread: /proc has nothing, so the fallback (tid as the process).
        let r = c.lookup(i32::MAX as u32 - 7);
        assert!(!r.exact);
        assert_eq!(r.pid, i32::MAX as u32 - 7);
        assert!(t.elapsed() < RESOLVE_WAIT * 50, "{:?}", t.elapsed());
    }
}
