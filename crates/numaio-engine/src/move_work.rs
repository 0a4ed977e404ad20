//! Moving work to the data.
//!
//! Before a thread touches a buffer on another node, a cache can:
//! - `none`: just do it (remote access);
//! - `migrate-thread` (Jericho): restrict the thread to the CPUs of the buffer's node and yield,
//!   so the scheduler moves it there before the copy; optionally also the parent process;
//! - `first-reader` (Adams): each block remembers the node of its first reader, and later
//!   readers from other nodes are moved to that node;
//! - `forward` (SAFS, tgt): hand the request to a worker thread pinned to the buffer's node and
//!   wait for the result.
//!
//! The decision to move goes through a per-thread [`Hysteresis`] so threads that touch several
//! nodes do not bounce.

use std::cell::RefCell;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::hysteresis::{Hysteresis, HysteresisConfig};
pub use crate::types::NodeCpus;
pub use numaio_numa::moves::{FirstReaderMap, MoveWork};

/// Error moving a thread.
#[derive(Debug, thiserror::Error)]
pub enum MoveError {
    #[error("node {0} has no CPUs: cannot move a thread there")]
    NoCpus(u32),
    #[error("moving the thread to node {node}: {source}")]
    Affinity {
        node: u32,
        #[source]
        source: numaio_sys::SysError,
    },
    #[error(
        "forwarding to node {0}: no worker on that node (forwarder shut down or node has no CPUs)"
    )]
    NoWorker(u32),
    #[error("forwarded request on node {0} panicked")]
    Panicked(u32),
}

/// Restricts the calling thread to `node`'s CPUs and yields, so it resumes there (Jericho).
/// With `parent`, the parent process is restricted too, unless it is pid 1 or not ours
/// (errors on the parent are ignored: moving it is best effort).
pub fn migrate_current_thread(cpus: &NodeCpus, node: u32, parent: bool) -> Result<(), MoveError> {
    let set = cpus.cpus_of(node).ok_or(MoveError::NoCpus(node))?;
    numaio_sys::set_affinity(0, set).map_err(|source| MoveError::Affinity { node, source })?;
    // sched_setaffinity already migrates a thread off a disallowed CPU; the yield makes sure
    // the thread resumes from the target runqueue before it touches the buffer.
    // SAFETY: no arguments.
    unsafe { libc::sched_yield() };
    if parent {
        // SAFETY: no arguments.
        let ppid = unsafe { libc::getppid() };
        if ppid > 1 {
            let _ = numaio_sys::set_affinity(ppid, set);
        }
    }
    Ok(())
}

type Job = Box<dyn FnOnce() + Send + 'static>;

struct NodeQueue {
    node: u32,
    tx: SyncSender<Job>,
}

/// Per-node worker threads that run requests on the data's node (SAFS / tgt forwarding).
/// Queues are bounded: a full queue makes the caller wait (backpressure), never grow.
pub struct Forwarder {
    queues: Vec<NodeQueue>,
    handles: Vec<JoinHandle<()>>,
    forwarded: AtomicU64,
    spin: Duration,
    cpus: NodeCpus,
    accounting: Option<Arc<crate::accounting::Accounting>>,
}

impl fmt::Debug for Forwarder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Forwarder")
            .field(
                "nodes",
                &self.queues.iter().map(|q| q.node).collect::<Vec<_>>(),
            )
            .field("workers", &self.handles.len())
            .finish()
    }
}

impl Forwarder {
    /// Starts `workers_per_node` workers on each node in `nodes` that has CPUs, each pinned to
    /// its node's CPUs, with a shared queue of `queue_depth` requests per node.
    pub fn new(
        cpus: &NodeCpus,
        nodes: &[u32],
        workers_per_node: usize,
        queue_depth: usize,
    ) -> std::io::Result<Self> {
        Self::with_spin(cpus, nodes, workers_per_node, queue_depth, Duration::ZERO)
    }

    /// Like [`new`](Self::new), but idle workers and waiting callers poll for `spin` before
    /// they sleep: a request that arrives within it avoids two futex wake-ups (the cost that
    /// dominates small forwarded requests), at the price of CPU burnt while polling.
    pub fn with_spin(
        cpus: &NodeCpus,
        nodes: &[u32],
        workers_per_node: usize,
        queue_depth: usize,
        spin: Duration,
    ) -> std::io::Result<Self> {
        let mut queues = Vec::new();
        let mut handles = Vec::new();
        for &node in nodes {
            let Some(set) = cpus.cpus_of(node).cloned() else {
                continue;
            };
            let (tx, rx) = sync_channel::<Job>(queue_depth.max(1));
            let rx = Arc::new(Mutex::new(rx));
            for w in 0..workers_per_node.max(1) {
                let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
                let set = set.clone();
                let h = std::thread::Builder::new()
                    .name(format!("numaio-fwd{node}.{w}"))
                    .spawn(move || {
                        // A worker that cannot be pinned still works, just not locally; the
                        // accounting will show it.
                        let _ = numaio_sys::set_affinity(0, &set);
                        loop {
                            let job = {
                                let g = rx.lock().unwrap_or_else(|e| e.into_inner());
                                match spin_recv(spin, || g.try_recv()) {
                                    Some(j) => Ok(j),
                                    None => g.recv(),
                                }
                            };
                            match job {
                                Ok(j) => j(),
                                Err(_) => break,
                            }
                        }
                    })?;
                handles.push(h);
            }
            queues.push(NodeQueue { node, tx });
        }
        Ok(Self {
            queues,
            handles,
            forwarded: AtomicU64::new(0),
            spin,
            cpus: cpus.clone(),
            accounting: None,
        })
    }

    pub fn nodes(&self) -> Vec<u32> {
        self.queues.iter().map(|q| q.node).collect()
    }

    /// Counts each forwarded request in `acc` (for the requesting thread).
    pub fn with_accounting(mut self, acc: Arc<crate::accounting::Accounting>) -> Self {
        self.accounting = Some(acc);
        self
    }

    /// The calling thread's node now.
    pub fn current_node(&self) -> Option<u32> {
        self.cpus.current_node()
    }

    /// Whether a request for data on `node` should be forwarded from the calling thread:
    /// the thread is elsewhere and `node` has a worker.
    pub fn should_forward(&self, node: u32) -> bool {
        self.current_node() != Some(node) && self.queues.iter().any(|q| q.node == node)
    }

    pub fn forwarded(&self) -> u64 {
        self.forwarded.load(Ordering::Relaxed)
    }

    /// Runs `f` on a worker of `node` and returns its result. Blocks until `f` has finished
    /// (or was dropped unrun), which is what makes borrowing from the caller's stack sound.
    pub fn run_on<F, R>(&self, node: u32, f: F) -> Result<R, MoveError>
    where
        F: FnOnce() -> R + Send,
        R: Send,
    {
        let q = self
            .queues
            .iter()
            .find(|q| q.node == node)
            .ok_or(MoveError::NoWorker(node))?;
        let (rtx, rrx) = sync_channel::<std::thread::Result<R>>(1);
        let job = move || {
            let r = catch_unwind(AssertUnwindSafe(f));
            let _ = rtx.send(r);
        };
        let job: Box<dyn FnOnce() + Send + '_> = Box::new(job);
        // SAFETY: we erase the lifetime of `job` to hand it to a 'static worker. This is sound
        // because this function does not return until the job has run or been dropped: the
        // receive below only returns once `rtx` (owned by the job) has sent or been dropped.
        // No path returns early after a successful send to the queue.
        let job: Job = unsafe { std::mem::transmute::<Box<dyn FnOnce() + Send + '_>, Job>(job) };
        if q.tx.send(job).is_err() {
            // The job came back inside the error and was dropped with it: nothing borrowed
            // is referenced any more.
            return Err(MoveError::NoWorker(node));
        }
        self.forwarded.fetch_add(1, Ordering::Relaxed);
        if let Some(a) = &self.accounting {
            a.record_forward();
        }
        let got = match spin_recv(self.spin, || rrx.try_recv()) {
            Some(r) => Ok(r),
            None => rrx.recv(),
        };
        match got {
            Ok(Ok(r)) => Ok(r),
            Ok(Err(_)) => Err(MoveError::Panicked(node)),
            Err(_) => Err(MoveError::NoWorker(node)),
        }
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.queues.clear(); // closes the channels; workers exit after draining
        for h in self.handles.drain(..) {
            let _ = h.join();
        }
    }
}

/// Polls `try_recv` for up to `spin`; None when nothing came (or the channel is closed: the
/// blocking receive that follows reports that).
fn spin_recv<T>(spin: Duration, try_recv: impl Fn() -> Result<T, TryRecvError>) -> Option<T> {
    if spin.is_zero() {
        return None;
    }
    let t0 = Instant::now();
    loop {
        match try_recv() {
            Ok(v) => return Some(v),
            Err(TryRecvError::Disconnected) => return None,
            Err(TryRecvError::Empty) => {}
        }
        if t0.elapsed() >= spin {
            return None;
        }
        std::hint::spin_loop();
    }
}

/// The work-moving policy of one cache, with per-thread hysteresis.
#[derive(Debug)]
pub struct Mover {
    pub mode: MoveWork,
    pub hysteresis: HysteresisConfig,
    /// Also restrict the parent process when migrating (Jericho). Default: false.
    pub move_parent: bool,
    cpus: NodeCpus,
    id: u64,
    migrations: AtomicU64,
}

thread_local! {
    static HYST: RefCell<Vec<(u64, Hysteresis)>> = const { RefCell::new(Vec::new()) };
}

static NEXT_MOVER: AtomicU64 = AtomicU64::new(1);

impl Mover {
    pub fn new(mode: MoveWork, cpus: NodeCpus, hysteresis: HysteresisConfig) -> Self {
        Self {
            mode,
            hysteresis,
            move_parent: false,
            cpus,
            id: NEXT_MOVER.fetch_add(1, Ordering::Relaxed),
            migrations: AtomicU64::new(0),
        }
    }

    pub fn cpus(&self) -> &NodeCpus {
        &self.cpus
    }

    pub fn migrations(&self) -> u64 {
        self.migrations.load(Ordering::Relaxed)
    }

    /// The calling thread's node now.
    pub fn current_node(&self) -> Option<u32> {
        self.cpus.current_node()
    }

    /// Feeds the calling thread's hysteresis; returns the node to move to, if any.
    pub fn observe(&self, here: u32, target: u32) -> Option<u32> {
        HYST.with(|h| {
            let mut h = h.borrow_mut();
            let i = match h.iter().position(|(id, _)| *id == self.id) {
                Some(i) => i,
                None => {
                    if h.len() > 16 {
                        h.remove(0);
                    }
                    h.push((self.id, Hysteresis::new(self.hysteresis)));
                    h.len() - 1
                }
            };
            h[i].1.observe(here, target)
        })
    }
}

/// The work-moving and accounting hook: before each cached block access it lets the [`Mover`] move
/// the thread (migrate-thread, first-reader) and counts the access in the [`Accounting`]:
/// hit or miss per slice, bytes per buffer node, local or remote, migrations.
/// (`forward` is applied one level up, around the whole request: see [`Forwarder`].)
#[derive(Debug)]
pub struct NumaHook {
    pub mover: Mover,
    pub accounting: Arc<crate::accounting::Accounting>,
    slice_nodes: Vec<u32>,
    block_size: u64,
    first_readers: Option<FirstReaderMap>,
}

impl NumaHook {
    pub fn new(
        mover: Mover,
        accounting: Arc<crate::accounting::Accounting>,
        slice_nodes: Vec<u32>,
        block_size: u64,
    ) -> Self {
        let first_readers =
            (mover.mode == MoveWork::FirstReader).then(|| FirstReaderMap::new(1 << 20));
        Self {
            mover,
            accounting,
            slice_nodes,
            block_size,
            first_readers,
        }
    }

    pub fn slice_node(&self, slice: usize) -> u32 {
        self.slice_nodes[slice % self.slice_nodes.len()]
    }
}

impl crate::AccessHook for NumaHook {
    fn on_access(
        &self,
        file: crate::FileId,
        block: u64,
        slice: usize,
        hit: bool,
        ctx: &crate::AccessCtx,
    ) {
        let data_node = self.slice_node(slice);
        let mut here = self.mover.current_node().unwrap_or(u32::MAX);
        // Where the thread should be for this block, if the mode moves threads.
        let target = match self.mover.mode {
            MoveWork::MigrateThread => Some(data_node),
            MoveWork::FirstReader => Some(
                self.first_readers
                    .as_ref()
                    .map_or(here, |m| m.claim(file.0 as u64, block, here)),
            ),
            MoveWork::None | MoveWork::Forward => None,
        };
        let mut migrated = false;
        if let Some(target) = target {
            if here != u32::MAX {
                if let Some(t) = self.mover.observe(here, target) {
                    if migrate_current_thread(self.mover.cpus(), t, self.mover.move_parent).is_ok()
                    {
                        self.mover.migrations.fetch_add(1, Ordering::Relaxed);
                        migrated = true;
                        here = self.mover.current_node().unwrap_or(u32::MAX);
                    }
                }
            }
        }
        self.accounting
            .record_block(crate::accounting::BlockAccess {
                slice,
                hit,
                data_node,
                thread_node: here,
                bytes: self.block_size,
                write: ctx.write,
                migrated,
            });
    }

    fn on_run(
        &self,
        file: crate::FileId,
        first: u64,
        count: u64,
        slice: usize,
        hit: bool,
        ctx: &crate::AccessCtx,
    ) {
        if !matches!(self.mover.mode, MoveWork::None | MoveWork::Forward) {
            // Modes that move the thread decide block by block.
            for b in first..first.saturating_add(count) {
                crate::AccessHook::on_access(self, file, b, slice, hit, ctx);
            }
            return;
        }
        // Only counting: the whole run in one step, with the same totals.
        self.accounting.record_blocks(
            crate::accounting::BlockAccess {
                slice,
                hit,
                data_node: self.slice_node(slice),
                thread_node: self.mover.current_node().unwrap_or(u32::MAX),
                bytes: self.block_size,
                write: ctx.write,
                migrated: false,
            },
            count,
        );
    }
}

impl crate::ext::Router for Forwarder {
    fn name(&self) -> String {
        "forward".into()
    }
    fn should_route(&self, node: u32) -> bool {
        self.should_forward(node)
    }
    fn run_on(&self, node: u32, job: &mut (dyn FnMut() + Send)) -> std::io::Result<()> {
        Forwarder::run_on(self, node, job).map_err(std::io::Error::other)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_cpus() -> Vec<u32> {
        numaio_sys::get_affinity(0).unwrap().to_vec()
    }

    /// A synthetic two-"node" map over the CPUs we may use (needs 2 CPUs).
    fn two_nodes() -> Option<NodeCpus> {
        let cpus = host_cpus();
        if cpus.len() < 2 {
            return None;
        }
        let spec = format!("n0={}@1G n1={}@1G", cpus[0], cpus[1]);
        numaio_sys::Topology::synthetic(&spec)
            .ok()
            .map(|t| NodeCpus::from_topology(&t))
    }

    #[test]
    fn migrate_moves_the_thread() {
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        std::thread::spawn(move || {
            for node in [1u32, 0, 1] {
                migrate_current_thread(&nc, node, false).unwrap();
                assert_eq!(nc.current_node(), Some(node));
            }
            assert!(matches!(
                migrate_current_thread(&nc, 7, false),
                Err(MoveError::NoCpus(7))
            ));
        })
        .join()
        .unwrap();
    }

    /// A hook that moves threads in `mode`, with slices on nodes 0 and 1.
    fn hook(nc: &NodeCpus, mode: MoveWork, cfg: HysteresisConfig) -> NumaHook {
        let acc = Arc::new(crate::accounting::Accounting::new(vec![0, 1], vec![0, 1]));
        NumaHook::new(Mover::new(mode, nc.clone(), cfg), acc, vec![0, 1], 4096)
    }

    #[test]
    fn mover_migrates_with_hysteresis() {
        use crate::{AccessCtx, AccessHook, FileId};
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        std::thread::spawn(move || {
            migrate_current_thread(&nc, 0, false).unwrap();
            let h = hook(&nc, MoveWork::MigrateThread, HysteresisConfig::default());
            for b in 0..100 {
                h.on_access(FileId(1), b, 1, true, &AccessCtx::new(false));
            }
            assert_eq!(h.mover.migrations(), 1);
            // K=4 remote accesses, then local.
            let c = h.accounting.thread_counters();
            assert_eq!((c.remote_accesses, c.local_accesses), (3, 97));
            assert_eq!(nc.current_node(), Some(1));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn first_reader_mode_moves_later_readers() {
        use crate::{AccessCtx, AccessHook, FileId};
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        let h = Arc::new(hook(
            &nc,
            MoveWork::FirstReader,
            HysteresisConfig::jericho(),
        ));
        let (nc2, h2) = (nc.clone(), h.clone());
        std::thread::spawn(move || {
            migrate_current_thread(&nc2, 1, false).unwrap();
            h2.on_access(FileId(1), 7, 0, false, &AccessCtx::new(false));
            assert_eq!(h2.mover.migrations(), 0, "the first reader is not moved");
        })
        .join()
        .unwrap();
        std::thread::spawn(move || {
            migrate_current_thread(&nc, 0, false).unwrap();
            h.on_access(FileId(1), 7, 0, true, &AccessCtx::new(false));
            assert_eq!(h.mover.migrations(), 1);
            assert_eq!(nc.current_node(), Some(1));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn forward_runs_on_the_node_and_borrows() {
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        let f = Forwarder::new(&nc, &[0, 1], 1, 4).unwrap();
        let src = vec![7u8; 4096];
        let mut dst = vec![0u8; 4096];
        for node in [0u32, 1] {
            let ran_on = f
                .run_on(node, || {
                    dst.copy_from_slice(&src);
                    nc.current_node()
                })
                .unwrap();
            assert_eq!(ran_on, Some(node));
        }
        assert_eq!(dst, src);
        assert_eq!(f.forwarded(), 2);
        assert!(matches!(f.run_on(5, || ()), Err(MoveError::NoWorker(5))));
        assert!(matches!(
            f.run_on(0, || panic!("boom")),
            Err(MoveError::Panicked(0))
        ));
        // Still usable after a panic.
        assert_eq!(f.run_on(0, || 41 + 1).unwrap(), 42);
    }

    #[test]
    fn forward_many_concurrent() {
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        let f = Arc::new(Forwarder::new(&nc, &[0, 1], 2, 2).unwrap());
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let f = f.clone();
                std::thread::spawn(move || {
                    let mut sum = 0u64;
                    for i in 0..500u64 {
                        sum += f.run_on((i % 2) as u32, || i * t).unwrap();
                    }
                    sum
                })
            })
            .collect();
        for (t, h) in hs.into_iter().enumerate() {
            assert_eq!(h.join().unwrap(), (0..500u64).sum::<u64>() * t as u64);
        }
        assert_eq!(f.forwarded(), 2000);
    }
    #[test]
    fn numa_hook_counts_and_migrates() {
        use crate::accounting::Accounting;
        use crate::{AccessCtx, AccessHook, FileId};
        let Some(nc) = two_nodes() else {
            numaio_testkit::skip!(numaio_testkit::needs::TWO_CPUS);
        };
        std::thread::spawn(move || {
            migrate_current_thread(&nc, 0, false).unwrap();
            let acc = Arc::new(Accounting::new(vec![0, 1], vec![0, 1]));
            let cfg = HysteresisConfig::default();
            let none = NumaHook::new(
                Mover::new(MoveWork::None, nc.clone(), cfg),
                acc.clone(),
                vec![0, 1],
                4096,
            );
            let ctx = AccessCtx::new(false);
            for b in 0..10 {
                none.on_access(FileId(0), b, (b % 2) as usize, b > 0, &ctx);
            }
            let t = acc.thread_counters();
            assert_eq!((t.local_accesses, t.remote_accesses), (5, 5));
            assert_eq!(t.read_bytes, vec![5 * 4096, 5 * 4096]);
            assert_eq!(
                (t.hits.iter().sum::<u64>(), t.misses.iter().sum::<u64>()),
                (9, 1)
            );
            let mig = NumaHook::new(
                Mover::new(MoveWork::MigrateThread, nc.clone(), cfg),
                acc.clone(),
                vec![0, 1],
                4096,
            );
            let before = acc.thread_counters();
            for b in 0..20 {
                mig.on_access(FileId(1), b, 1, true, &AccessCtx::new(true));
            }
            let d = acc.thread_counters().since(&before);
            assert_eq!(d.migrations, 1);
            assert_eq!((d.local_accesses, d.remote_accesses), (17, 3));
            assert_eq!(d.write_bytes, vec![0, 20 * 4096]);
            assert_eq!(nc.current_node(), Some(1));
        })
        .join()
        .unwrap();
    }
}
