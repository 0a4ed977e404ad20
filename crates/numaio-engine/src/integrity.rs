//! The integrity stage, after Bang's dynamic-ZFS.
//!
//! Write-back computes a checksum per block and keeps it (in memory, per `(file, block)`);
//! a block read back from the backing file is verified, and a mismatch is an error — the
//! corrupted bytes never reach the caller.
//!
//! Checksumming costs CPU on the write-back path (43 % of ZFS's write pipeline in Bang's
//! study). [`IntegrityStage::compute_while`] overlaps it with the device write: the sums are
//! computed either inline by the write-back thread, or by a worker pool while that thread
//! issues the write, with a barrier before the buffers are released. Which one is decided per
//! request by a [`DispatchRule`]:
//! - `bang`: sample the context-switch rate of the I/O threads (`/proc/self/task/TID/status`,
//!   voluntary + nonvoluntary); dispatch when it rose since the previous interval, run inline
//!   otherwise (Bang's Algorithm 4.2);
//! - `queue`: dispatch while the pool's queue is short (fewer than `max_per_worker` pending
//!   jobs per worker), inline when it is backed up;
//! - `inline` / `always`: the two fixed baselines.
//!
//! The pool grows a worker when jobs wait and no worker is idle (up to `max_workers`), and a
//! worker idle for `idle_timeout` exits (down to `min_workers`); its queue is bounded and a
//! full queue means inline work, never growth.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, RwLock};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::checksum::ChecksumKind;
use crate::sumfile::{Check, SumFile, SumHeader};

/// A block read back from the backing file does not match its checksum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("checksum mismatch in file {file} block {block}: stored {expected:#018x}, read {actual:#018x} ({kind}); the block on the backing store is corrupted, restore it from a copy")]
pub struct IntegrityError {
    pub file: u64,
    pub block: u64,
    pub expected: u64,
    pub actual: u64,
    pub kind: ChecksumKind,
}

impl IntegrityError {
    /// The errno a copying API should report (EIO, as filesystems with checksums do).
    pub fn errno(&self) -> i32 {
        libc::EIO
    }
}

/// Per-block checksums, sharded by file.
#[derive(Debug)]
pub struct ChecksumStore {
    shards: Vec<RwLock<HashMap<(u64, u64), u64>>>,
}

impl Default for ChecksumStore {
    fn default() -> Self {
        Self::new()
    }
}

impl ChecksumStore {
    const SHARDS: usize = 64;

    pub fn new() -> Self {
        Self {
            shards: (0..Self::SHARDS)
                .map(|_| RwLock::new(HashMap::new()))
                .collect(),
        }
    }

    fn shard(&self, file: u64, block: u64) -> &RwLock<HashMap<(u64, u64), u64>> {
        let h = file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ (block >> 6);
        &self.shards[(h % Self::SHARDS as u64) as usize]
    }

    pub fn get(&self, file: u64, block: u64) -> Option<u64> {
        self.shard(file, block)
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(file, block))
            .copied()
    }

    pub fn set(&self, file: u64, block: u64, sum: u64) {
        self.shard(file, block)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert((file, block), sum);
    }

    pub fn remove(&self, file: u64, block: u64) {
        self.shard(file, block)
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(file, block));
    }

    /// Forgets all blocks of `file` at or after `from` (truncate, delete).
    pub fn truncate(&self, file: u64, from: u64) {
        for s in &self.shards {
            s.write()
                .unwrap_or_else(|e| e.into_inner())
                .retain(|&(f, b), _| f != file || b < from);
        }
    }

    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| s.read().unwrap_or_else(|e| e.into_inner()).len())
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// When to hand checksum work to the pool instead of computing it inline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DispatchRule {
    Inline,
    Always,
    /// Bang: dispatch while the I/O threads' context-switch rate is rising; sampled every
    /// `interval`.
    Bang {
        interval: Duration,
    },
    /// Dispatch while fewer than `max_per_worker` jobs per worker are queued.
    Queue {
        max_per_worker: usize,
    },
}

impl Default for DispatchRule {
    /// `queue:2` — it won the comparison in docs/engine-placement.md (measured on this host).
    fn default() -> Self {
        DispatchRule::Queue { max_per_worker: 2 }
    }
}

impl FromStr for DispatchRule {
    type Err = String;
    /// `inline`, `always`, `bang[:MILLIS]`, `queue[:N]`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = || {
            format!("invalid dispatch rule {s:?} (expected inline | always | bang[:MILLIS] | queue[:N])")
        };
        let p: Vec<&str> = s.trim().split(':').collect();
        match p.as_slice() {
            ["inline"] => Ok(DispatchRule::Inline),
            ["always"] => Ok(DispatchRule::Always),
            ["bang"] => Ok(DispatchRule::Bang {
                interval: Duration::from_millis(5),
            }),
            ["bang", ms] => Ok(DispatchRule::Bang {
                interval: Duration::from_millis(ms.parse().map_err(|_| bad())?),
            }),
            ["queue"] => Ok(DispatchRule::Queue { max_per_worker: 2 }),
            ["queue", n] => {
                let n: usize = n.parse().map_err(|_| bad())?;
                if n == 0 {
                    return Err(bad());
                }
                Ok(DispatchRule::Queue { max_per_worker: n })
            }
            _ => Err(bad()),
        }
    }
}

impl fmt::Display for DispatchRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DispatchRule::Inline => f.write_str("inline"),
            DispatchRule::Always => f.write_str("always"),
            DispatchRule::Bang { interval } => write!(f, "bang:{}", interval.as_millis()),
            DispatchRule::Queue { max_per_worker } => write!(f, "queue:{max_per_worker}"),
        }
    }
}

/// Context switches (voluntary + nonvoluntary) of one thread of this process.
pub fn thread_ctxt_switches(tid: i32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/status")).ok()?;
    let mut total = 0u64;
    let mut found = 0;
    for line in s.lines() {
        if let Some(v) = line
            .strip_prefix("voluntary_ctxt_switches:")
            .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
        {
            total += v.trim().parse::<u64>().ok()?;
            found += 1;
        }
    }
    (found == 2).then_some(total)
}

fn gettid() -> i32 {
    // SAFETY: gettid has no failure mode.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Bang's context-switch monitor (Algorithms 4.1 and 4.2) over the registered I/O threads.
#[derive(Debug)]
pub struct CtxSwitchMonitor {
    id: u64,
    interval: Duration,
    state: Mutex<MonState>,
}

#[derive(Debug)]
struct MonState {
    tids: Vec<i32>,
    last_sample: Option<Instant>,
    prev_acc: u64,
    prev_rate: f64,
    dispatch: bool,
    samples: u64,
}

impl CtxSwitchMonitor {
    pub fn new(interval: Duration) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Self {
            id: NEXT.fetch_add(1, Relaxed),
            interval,
            state: Mutex::new(MonState {
                tids: Vec::new(),
                last_sample: None,
                prev_acc: 0,
                prev_rate: 0.0,
                dispatch: false,
                samples: 0,
            }),
        }
    }

    /// Adds the calling thread to the monitored I/O threads.
    pub fn register_current(&self) {
        let tid = gettid();
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if !s.tids.contains(&tid) {
            s.tids.push(tid);
        }
    }

    /// Dispatch decision: true when the context-switch rate rose over the last interval.
    pub fn should_dispatch(&self) -> bool {
        self.should_dispatch_at(Instant::now())
    }

    fn should_dispatch_at(&self, now: Instant) -> bool {
        let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let due = match s.last_sample {
            None => true,
            Some(t) => now.saturating_duration_since(t) >= self.interval,
        };
        if !due {
            return s.dispatch;
        }
        // Threads that exited are dropped from the set.
        let mut acc = 0u64;
        let mut alive = Vec::with_capacity(s.tids.len());
        for &t in &s.tids {
            if let Some(c) = thread_ctxt_switches(t) {
                acc += c;
                alive.push(t);
            }
        }
        s.tids = alive;
        if let Some(t) = s.last_sample {
            let secs = now.saturating_duration_since(t).as_secs_f64().max(1e-6);
            let rate = acc.saturating_sub(s.prev_acc) as f64 / secs;
            let diff = rate - s.prev_rate;
            s.dispatch = diff > 0.0;
            s.prev_rate = rate;
        }
        s.prev_acc = acc;
        s.last_sample = Some(now);
        s.samples += 1;
        s.dispatch
    }
}

type Job = Box<dyn FnOnce() + Send + 'static>;

struct PoolShared {
    q: Mutex<PoolQ>,
    cv: Condvar,
    min_workers: usize,
    max_workers: usize,
    queue_cap: usize,
    idle_timeout: Duration,
    spawned: AtomicU64,
    peak_workers: AtomicUsize,
}

struct PoolQ {
    jobs: VecDeque<Job>,
    workers: usize,
    idle: usize,
    shutdown: bool,
}

/// A worker pool whose size follows the load (see the module doc).
pub struct ChecksumPool {
    shared: Arc<PoolShared>,
}

impl fmt::Debug for ChecksumPool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChecksumPool")
            .field("workers", &self.workers())
            .finish()
    }
}

impl ChecksumPool {
    pub fn new(min_workers: usize, max_workers: usize, queue_cap: usize, idle: Duration) -> Self {
        let max_workers = max_workers.max(1);
        let p = Self {
            shared: Arc::new(PoolShared {
                q: Mutex::new(PoolQ {
                    jobs: VecDeque::new(),
                    workers: 0,
                    idle: 0,
                    shutdown: false,
                }),
                cv: Condvar::new(),
                min_workers: min_workers.min(max_workers),
                max_workers,
                queue_cap: queue_cap.max(1),
                idle_timeout: idle,
                spawned: AtomicU64::new(0),
                peak_workers: AtomicUsize::new(0),
            }),
        };
        for _ in 0..p.shared.min_workers {
            let mut q = p.shared.q.lock().unwrap_or_else(|e| e.into_inner());
            Self::spawn_locked(&p.shared, &mut q);
        }
        p
    }

    pub fn workers(&self) -> usize {
        self.shared
            .q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .workers
    }

    pub fn queued(&self) -> usize {
        self.shared
            .q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .jobs
            .len()
    }

    pub fn peak_workers(&self) -> usize {
        self.shared.peak_workers.load(Relaxed)
    }

    pub fn spawned(&self) -> u64 {
        self.shared.spawned.load(Relaxed)
    }

    fn spawn_locked(shared: &Arc<PoolShared>, q: &mut PoolQ) -> bool {
        let sh = shared.clone();
        let ok = std::thread::Builder::new()
            .name("numaio-cksum".into())
            .spawn(move || Self::worker(sh))
            .is_ok();
        if ok {
            q.workers += 1;
            shared.spawned.fetch_add(1, Relaxed);
            shared.peak_workers.fetch_max(q.workers, Relaxed);
        }
        ok
    }

    fn worker(sh: Arc<PoolShared>) {
        let mut q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(job) = q.jobs.pop_front() {
                drop(q);
                job();
                q = sh.q.lock().unwrap_or_else(|e| e.into_inner());
                continue;
            }
            if q.shutdown {
                break;
            }
            q.idle += 1;
            let (g, to) = sh
                .cv
                .wait_timeout(q, sh.idle_timeout)
                .unwrap_or_else(|e| e.into_inner());
            q = g;
            q.idle -= 1;
            if to.timed_out() && q.jobs.is_empty() && q.workers > sh.min_workers {
                break;
            }
        }
        q.workers -= 1;
    }

    /// Queues a job; gives it back if the queue is full (the caller then runs it inline).
    fn try_submit(&self, job: Job) -> Result<(), Job> {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        if q.shutdown || q.jobs.len() >= self.shared.queue_cap {
            return Err(job);
        }
        q.jobs.push_back(job);
        if q.idle == 0 && q.workers < self.shared.max_workers {
            Self::spawn_locked(&self.shared, &mut q);
        }
        if q.workers == 0 {
            return Err(q.jobs.pop_back().expect("just pushed"));
        }
        drop(q);
        self.shared.cv.notify_one();
        Ok(())
    }

    /// Queue length per worker (for the queue rule).
    fn load(&self) -> (usize, usize) {
        let q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        (q.jobs.len(), q.workers.max(1))
    }
}

impl Drop for ChecksumPool {
    fn drop(&mut self) {
        let mut q = self.shared.q.lock().unwrap_or_else(|e| e.into_inner());
        q.shutdown = true;
        drop(q);
        self.shared.cv.notify_all();
    }
}

/// Counters of the integrity stage.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct IntegrityStats {
    pub requests: u64,
    pub dispatched: u64,
    pub inline: u64,
    pub blocks_summed: u64,
    pub verified: u64,
    pub unverified: u64,
    pub mismatches: u64,
    pub workers: usize,
    pub peak_workers: usize,
}

/// Settings of an integrity stage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct IntegrityConfig {
    /// Default: crc32c.
    pub kind: ChecksumKind,
    /// Default: queue:2.
    pub rule: DispatchRule,
    /// Default: 0.
    pub min_workers: usize,
    /// Default: the number of CPUs.
    pub max_workers: usize,
    /// Default: 256 jobs.
    pub queue_cap: usize,
    /// Blocks per dispatched job, so one large run spreads over several workers. Default: 16.
    pub chunk_blocks: usize,
    /// Default: 100 ms.
    pub idle_timeout: Duration,
}

impl Default for IntegrityConfig {
    fn default() -> Self {
        Self {
            kind: ChecksumKind::default(),
            rule: DispatchRule::default(),
            min_workers: 0,
            max_workers: std::thread::available_parallelism().map_or(2, |n| n.get()),
            queue_cap: 256,
            chunk_blocks: 16,
            idle_timeout: Duration::from_millis(100),
        }
    }
}

/// Checksums computed in write-back and verified on read.
pub struct IntegrityStage {
    pub config: IntegrityConfig,
    store: ChecksumStore,
    /// Durable sums of the files opened through an engine (by file id).
    sums: RwLock<HashMap<u64, Arc<SumFile>>>,
    pool: ChecksumPool,
    monitor: CtxSwitchMonitor,
    requests: AtomicU64,
    dispatched: AtomicU64,
    inline: AtomicU64,
    blocks: AtomicU64,
    verified: AtomicU64,
    unverified: AtomicU64,
    mismatches: AtomicU64,
    /// Where verified blocks and mismatches are also counted per thread (the Prometheus
    /// `checksum_verified` / `checksum_error` counters).
    accounting: Option<Arc<crate::accounting::Accounting>>,
}

impl fmt::Debug for IntegrityStage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntegrityStage")
            .field("config", &self.config)
            .field("stats", &self.stats())
            .finish()
    }
}

thread_local! {
    /// The monitors (by id) this thread has registered with, so registering costs a
    /// lock only once per thread and stage.
    static REGISTERED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Waits for `n` completions; the count lives in a Mutex so the last worker's decrement and the
/// waiter's check cannot race.
struct Latch {
    left: Mutex<usize>,
    cv: Condvar,
}

impl Latch {
    fn done(&self) {
        let mut l = self.left.lock().unwrap_or_else(|e| e.into_inner());
        *l -= 1;
        if *l == 0 {
            self.cv.notify_all();
        }
    }

    fn wait(&self) {
        let mut l = self.left.lock().unwrap_or_else(|e| e.into_inner());
        while *l > 0 {
            l = self.cv.wait(l).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Counts a job done even if it panics or is dropped unrun.
struct DoneGuard(Arc<Latch>);
impl Drop for DoneGuard {
    fn drop(&mut self) {
        self.0.done();
    }
}

impl IntegrityStage {
    pub fn new(config: IntegrityConfig) -> Self {
        let interval = match config.rule {
            DispatchRule::Bang { interval } => interval,
            _ => Duration::from_millis(5),
        };
        Self {
            pool: ChecksumPool::new(
                config.min_workers,
                config.max_workers,
                config.queue_cap,
                config.idle_timeout,
            ),
            store: ChecksumStore::new(),
            sums: RwLock::new(HashMap::new()),
            monitor: CtxSwitchMonitor::new(interval),
            config,
            requests: AtomicU64::new(0),
            dispatched: AtomicU64::new(0),
            inline: AtomicU64::new(0),
            blocks: AtomicU64::new(0),
            verified: AtomicU64::new(0),
            unverified: AtomicU64::new(0),
            mismatches: AtomicU64::new(0),
            accounting: None,
        }
    }

    /// Also counts each verification in `acc`.
    pub fn with_accounting(mut self, acc: Arc<crate::accounting::Accounting>) -> Self {
        self.accounting = Some(acc);
        self
    }

    pub fn store(&self) -> &ChecksumStore {
        &self.store
    }

    pub fn stats(&self) -> IntegrityStats {
        IntegrityStats {
            requests: self.requests.load(Relaxed),
            dispatched: self.dispatched.load(Relaxed),
            inline: self.inline.load(Relaxed),
            blocks_summed: self.blocks.load(Relaxed),
            verified: self.verified.load(Relaxed),
            unverified: self.unverified.load(Relaxed),
            mismatches: self.mismatches.load(Relaxed),
            workers: self.pool.workers(),
            peak_workers: self.pool.peak_workers(),
        }
    }

    fn decide(&self) -> bool {
        match self.config.rule {
            DispatchRule::Inline => false,
            DispatchRule::Always => true,
            DispatchRule::Bang { .. } => {
                let me = self.monitor.id;
                let new = REGISTERED.with(|r| {
                    let mut r = r.borrow_mut();
                    if r.contains(&me) {
                        false
                    } else {
                        r.push(me);
                        true
                    }
                });
                if new {
                    self.monitor.register_current();
                }
                self.monitor.should_dispatch()
            }
            DispatchRule::Queue { max_per_worker } => {
                let (q, w) = self.pool.load();
                q < max_per_worker * w
            }
        }
    }

    fn sum_file(&self, file: u64) -> Option<Arc<SumFile>> {
        self.sums
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&file)
            .cloned()
    }

    /// Records the sum of a block whose write reached the device.
    pub fn commit(&self, file: u64, block: u64, sum: u64) {
        match self.sum_file(file) {
            Some(sf) => sf.end_write(block, Some(sum)),
            None => self.store.set(file, block, sum),
        }
    }

    /// Forgets a block's sum (its write failed: the device content is unknown).
    pub fn invalidate(&self, file: u64, block: u64) {
        match self.sum_file(file) {
            Some(sf) => sf.end_write(block, None),
            None => self.store.remove(file, block),
        }
    }

    /// Computes the checksums of `blocks` — inline or on the pool, as the dispatch rule
    /// decides — while `io` runs, and returns both once both are done (the barrier).
    pub fn compute_while<R>(&self, blocks: &[&[u8]], io: impl FnOnce() -> R) -> (Vec<u64>, R) {
        self.requests.fetch_add(1, Relaxed);
        self.blocks.fetch_add(blocks.len() as u64, Relaxed);
        let kind = self.config.kind;
        let sums: Vec<AtomicU64> = (0..blocks.len()).map(|_| AtomicU64::new(0)).collect();
        let dispatch = !blocks.is_empty() && self.decide();
        let result = if dispatch {
            self.dispatched.fetch_add(1, Relaxed);
            let chunk = self.config.chunk_blocks.max(1);
            let nchunks = blocks.len().div_ceil(chunk);
            let latch = Arc::new(Latch {
                left: Mutex::new(nchunks),
                cv: Condvar::new(),
            });
            let mut inline_chunks = Vec::new();
            for (ci, (bs, ss)) in blocks.chunks(chunk).zip(sums.chunks(chunk)).enumerate() {
                let guard = DoneGuard(latch.clone());
                let job = move || {
                    let _g = guard;
                    let _ = catch_unwind(AssertUnwindSafe(|| {
                        for (b, s) in bs.iter().zip(ss) {
                            s.store(kind.compute(b), Relaxed);
                        }
                    }));
                };
                let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
                // SAFETY: the lifetime of the borrowed blocks/sums is erased to queue the job;
                // this function waits on `latch` below until every job has run or been
                // dropped (DoneGuard counts both), before `blocks` and `sums` go out of scope.
                // The wait is not skipped on any path: `io` runs inside catch_unwind.
                let job: Job =
                    unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
                if let Err(job) = self.pool.try_submit(job) {
                    inline_chunks.push((ci, job));
                }
            }
            let r = catch_unwind(AssertUnwindSafe(io));
            // Chunks the pool refused are done by this thread, after the I/O was issued.
            for (_, job) in inline_chunks {
                job();
            }
            latch.wait();
            match r {
                Ok(r) => r,
                Err(p) => std::panic::resume_unwind(p),
            }
        } else {
            self.inline.fetch_add(1, Relaxed);
            for (b, s) in blocks.iter().zip(&sums) {
                s.store(kind.compute(b), Relaxed);
            }
            io()
        };
        (sums.into_iter().map(|s| s.into_inner()).collect(), result)
    }

    /// Checks a block just read from the backing store. Blocks without a stored sum (never
    /// written through this cache) pass unverified.
    pub fn verify(
        &self,
        file: u64,
        block: u64,
        data: &[u8],
    ) -> Result<bool, crate::ext::IntegrityFailure> {
        let (expected, actual) = match self.sum_file(file) {
            Some(sf) => {
                let actual = self.config.kind.compute(data);
                match sf.check(block, actual)? {
                    Check::Verified => (actual, actual),
                    Check::Unverified => {
                        self.unverified.fetch_add(1, Relaxed);
                        return Ok(false);
                    }
                    Check::Mismatch { expected } => (expected, actual),
                }
            }
            None => {
                let Some(expected) = self.store.get(file, block) else {
                    self.unverified.fetch_add(1, Relaxed);
                    return Ok(false);
                };
                (expected, self.config.kind.compute(data))
            }
        };
        if let Some(a) = &self.accounting {
            a.record_verify(actual == expected);
        }
        if actual != expected {
            self.mismatches.fetch_add(1, Relaxed);
            return Err(Box::new(IntegrityError {
                file,
                block,
                expected,
                actual,
                kind: self.config.kind,
            }));
        }
        self.verified.fetch_add(1, Relaxed);
        Ok(true)
    }
}

impl crate::ext::BlockIntegrity for IntegrityStage {
    fn name(&self) -> String {
        self.config.kind.to_string()
    }
    fn file_opened(
        &self,
        file: crate::FileId,
        path: &std::path::Path,
        writable: bool,
        block_size: usize,
        backend: &Arc<dyn crate::Backend>,
    ) -> std::io::Result<()> {
        let header = SumHeader {
            block_size: u32::try_from(block_size).map_err(|_| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!("block size {block_size} is too large for a checksum file"),
                )
            })?,
            algorithm: match self.config.kind {
                ChecksumKind::Crc32c => 1,
                ChecksumKind::Xxh3 => 2,
            },
        };
        if let Some(sf) = SumFile::open(path, writable, header, backend.clone())? {
            self.sums
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(file.0 as u64, Arc::new(sf));
        }
        Ok(())
    }
    fn begin_write(&self, file: crate::FileId, blocks: &[u64]) -> std::io::Result<()> {
        match self.sum_file(file.0 as u64) {
            Some(sf) => sf.begin_write(blocks),
            None => Ok(()),
        }
    }
    fn sync(
        &self,
        file: crate::FileId,
        data_sync: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        match self.sum_file(file.0 as u64) {
            Some(sf) => sf.sync_with(data_sync),
            None => data_sync(),
        }
    }
    fn sum_while(&self, blocks: &[&[u8]], io: &mut dyn FnMut()) -> Vec<u64> {
        self.compute_while(blocks, io).0
    }
    fn commit(&self, file: crate::FileId, block: u64, sum: u64) {
        IntegrityStage::commit(self, file.0 as u64, block, sum)
    }
    fn invalidate(&self, file: crate::FileId, block: u64) {
        IntegrityStage::invalidate(self, file.0 as u64, block)
    }
    fn verify(
        &self,
        file: crate::FileId,
        block: u64,
        data: &[u8],
    ) -> Result<(), crate::ext::IntegrityFailure> {
        IntegrityStage::verify(self, file.0 as u64, block, data).map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileExt;

    fn cfg(rule: DispatchRule) -> IntegrityConfig {
        IntegrityConfig {
            rule,
            max_workers: 2,
            chunk_blocks: 4,
            ..Default::default()
        }
    }

    /// Computes the checksums of `blocks` (consecutive blocks of `file` from `first`) while
    /// `io` runs (typically the device write of the same run), and records them once both are
    /// done and `io` succeeded. If `io` fails the blocks' old sums are dropped: what is on the
    /// device is then unknown, and an unknown block is returned unverified rather than
    /// reported corrupt.
    fn checksum_while<R, E>(
        st: &IntegrityStage,
        file: u64,
        first: u64,
        blocks: &[&[u8]],
        io: impl FnOnce() -> Result<R, E>,
    ) -> Result<R, E> {
        let (sums, result) = st.compute_while(blocks, io);
        match &result {
            Ok(_) => {
                for (i, s) in sums.iter().enumerate() {
                    st.store.set(file, first + i as u64, *s);
                }
            }
            Err(_) => {
                for i in 0..blocks.len() {
                    st.store.remove(file, first + i as u64);
                }
            }
        }
        result
    }

    #[test]
    fn rules_compute_the_same_sums() {
        let data: Vec<Vec<u8>> = (0..37u8).map(|i| vec![i; 4096]).collect();
        let refs: Vec<&[u8]> = data.iter().map(|v| v.as_slice()).collect();
        let mut all = Vec::new();
        for rule in [
            DispatchRule::Inline,
            DispatchRule::Always,
            DispatchRule::Bang {
                interval: Duration::ZERO,
            },
            DispatchRule::Queue { max_per_worker: 1 },
        ] {
            let st = IntegrityStage::new(cfg(rule));
            let r: Result<(), ()> = checksum_while(&st, 1, 100, &refs, || Ok(()));
            r.unwrap();
            let sums: Vec<u64> = (0..37)
                .map(|i| st.store().get(1, 100 + i).unwrap())
                .collect();
            for (i, s) in sums.iter().enumerate() {
                assert_eq!(*s, ChecksumKind::Crc32c.compute(&data[i]));
            }
            all.push(sums);
            let s = st.stats();
            assert_eq!(s.requests, 1);
            assert_eq!(s.dispatched + s.inline, 1);
            if rule == DispatchRule::Always {
                assert_eq!(s.dispatched, 1);
                assert!(s.peak_workers >= 1);
            }
        }
        assert!(all.windows(2).all(|w| w[0] == w[1]));
    }

    #[test]
    fn failed_io_forgets_sums() {
        let st = IntegrityStage::new(cfg(DispatchRule::Always));
        let b = [1u8; 512];
        checksum_while(&st, 7, 0, &[&b], || Ok::<(), ()>(())).unwrap();
        assert!(st.store().get(7, 0).is_some());
        assert!(checksum_while(&st, 7, 0, &[&b], || Err::<(), _>("EIO")).is_err());
        assert_eq!(st.store().get(7, 0), None);
        assert!(!st.verify(7, 0, &[9u8; 512]).unwrap());
    }

    #[test]
    fn corrupted_block_on_backing_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let st = IntegrityStage::new(cfg(DispatchRule::default()));
        let blocks: Vec<Vec<u8>> = (0..8u8).map(|i| vec![i ^ 0x5A; 4096]).collect();
        let refs: Vec<&[u8]> = blocks.iter().map(|v| v.as_slice()).collect();
        let joined = blocks.concat();
        checksum_while(&st, 3, 0, &refs, || f.write_all_at(&joined, 0)).unwrap();
        // Read back clean.
        let mut buf = vec![0u8; 4096];
        for b in 0..8u64 {
            f.read_exact_at(&mut buf, b * 4096).unwrap();
            assert!(st.verify(3, b, &buf).unwrap());
        }
        // Corrupt one byte of block 5 behind the cache's back.
        f.write_all_at(&[0xFF], 5 * 4096 + 17).unwrap();
        f.read_exact_at(&mut buf, 5 * 4096).unwrap();
        let e = st.verify(3, 5, &buf).unwrap_err();
        let e = e.downcast_ref::<IntegrityError>().unwrap();
        assert_eq!((e.file, e.block), (3, 5));
        assert_eq!(e.errno(), libc::EIO);
        assert!(e.to_string().contains("block 5"));
        assert_eq!(st.stats().mismatches, 1);
        // Truncate forgets sums.
        st.store().truncate(3, 4);
        assert_eq!(st.store().len(), 4);
    }

    #[test]
    fn pool_grows_and_shrinks() {
        let pool = ChecksumPool::new(0, 3, 64, Duration::from_millis(20));
        let latch = Arc::new(Latch {
            left: Mutex::new(6),
            cv: Condvar::new(),
        });
        for _ in 0..6 {
            let l = latch.clone();
            pool.try_submit(Box::new(move || {
                std::thread::sleep(Duration::from_millis(30));
                l.done();
            }))
            .unwrap_or_else(|j| j());
        }
        latch.wait();
        assert!(pool.peak_workers() >= 2, "grew under load");
        assert!(pool.peak_workers() <= 3, "bounded");
        let t0 = Instant::now();
        while pool.workers() > 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(pool.workers(), 0, "idle workers exit");
    }

    #[test]
    fn full_queue_runs_inline() {
        let pool = ChecksumPool::new(1, 1, 1, Duration::from_secs(1));
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g2 = gate.clone();
        // Occupy the only worker.
        pool.try_submit(Box::new(move || {
            let mut open = g2.0.lock().unwrap();
            while !*open {
                open = g2.1.wait(open).unwrap();
            }
        }))
        .unwrap_or_else(|_| panic!("first job must queue"));
        let t0 = Instant::now();
        while pool.queued() > 0 && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(pool.try_submit(Box::new(|| ())).is_ok(), "one slot");
        assert!(pool.try_submit(Box::new(|| ())).is_err(), "queue full");
        *gate.0.lock().unwrap() = true;
        gate.1.notify_all();
    }

    #[test]
    fn bang_monitor_follows_rate() {
        let m = CtxSwitchMonitor::new(Duration::ZERO);
        m.register_current();
        let t0 = Instant::now();
        assert!(!m.should_dispatch_at(t0)); // first sample: no rate yet
                                            // Cause context switches: sleep a lot.
        for _ in 0..50 {
            std::thread::sleep(Duration::from_micros(100));
        }
        assert!(
            m.should_dispatch_at(t0 + Duration::from_millis(10)),
            "rate rose"
        );
        // Spin without switching over a longer interval: the rate falls.
        let s = Instant::now();
        while s.elapsed() < Duration::from_millis(5) {
            std::hint::spin_loop();
        }
        assert!(
            !m.should_dispatch_at(t0 + Duration::from_millis(1000)),
            "rate fell"
        );
        assert!(thread_ctxt_switches(gettid()).is_some());
        assert_eq!(thread_ctxt_switches(-5), None);
    }

    #[test]
    fn parse_rules() {
        for s in ["inline", "always", "bang:5", "queue:2"] {
            assert_eq!(s.parse::<DispatchRule>().unwrap().to_string(), s);
        }
        for s in ["", "queue:0", "bang:x", "other"] {
            assert!(s.parse::<DispatchRule>().is_err(), "{s}");
        }
    }
}
