//! FUSE over io_uring (Linux 6.14+): after INIT accepts `FUSE_OVER_IO_URING`, one queue per
//! possible CPU carries requests, each with a ring thread bound to its CPU and buffers on
//! that CPU's node; the serving threads of each node answer the requests of that node's
//! queues. A ring thread waits and wakes others under `SCHED_IDLE` (`local_wake.rs`), so a
//! request's caller is woken on the CPU it issued the request from. `/dev/fuse` stays
//! served by fuser for what the kernel keeps sending there (forget, interrupt), and for
//! everything when the kernel falls back.

pub(crate) mod abi;
mod dispatch;
mod local_wake;
mod ring;

use crate::Observer;
use numaio_fs::Fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The kernel's switch for FUSE over io_uring; present only in kernels built with it.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Largest write the kernel may send; it also sizes every ring entry's payload buffer.
pub const MAX_WRITE: u32 = 1 << 20;

/// Ring entries per queue unless the mount says otherwise
/// ([`crate::MountConfig::with_uring_depth`]). Each entry holds a payload buffer of
/// [`MAX_WRITE`] bytes (touched only as far as requests fill it); an entry stays taken while
/// its request is served, so the depth bounds the requests of one CPU served at once.
pub const DEFAULT_DEPTH: usize = 8;

/// Ring entries per queue at most.
pub const MAX_DEPTH: usize = ring::MAX_DEPTH;

/// How requests travel between the kernel and this server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FuseMode {
    /// Reads and writes of `/dev/fuse`.
    Classic,
    /// io_uring commands, one queue per CPU.
    IoUring,
}

impl FuseMode {
    /// The name in `--json` output: `classic` or `io_uring`.
    pub fn as_str(self) -> &'static str {
        match self {
            FuseMode::Classic => "classic",
            FuseMode::IoUring => "io_uring",
        }
    }
}

/// What the running kernel offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelSupport {
    /// Built without FUSE over io_uring (or older than 6.14).
    Missing,
    /// Built with it, but `enable_uring` is off.
    Disabled,
    Enabled,
}

/// Reads `enable_uring`; loads the fuse module first (by opening `/dev/fuse`) if needed.
pub fn kernel_support() -> KernelSupport {
    let read = || std::fs::read_to_string(ENABLE_URING).ok();
    let v = read().or_else(|| {
        let _ = std::fs::File::open("/dev/fuse");
        read()
    });
    match v.as_deref().map(str::trim) {
        None => KernelSupport::Missing,
        Some("Y") | Some("1") => KernelSupport::Enabled,
        Some(_) => KernelSupport::Disabled,
    }
}

/// Turns `enable_uring` on (root only).
pub fn enable_in_kernel() -> io::Result<()> {
    std::fs::write(ENABLE_URING, "Y")
}

/// Whether this process may create rings with 128-byte SQEs (io_uring can be disabled by
/// `kernel.io_uring_disabled` or a seccomp filter).
pub fn probe_ring() -> io::Result<()> {
    io_uring::IoUring::<io_uring::squeue::Entry128, io_uring::cqueue::Entry>::builder()
        .build(2)
        .map(drop)
}

/// Requests served so far, per transport.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RequestCounts {
    pub classic: u64,
    pub io_uring: u64,
    /// Of those, READDIR and READDIRPLUS requests (either transport).
    pub listings: u64,
    /// The largest reply buffer a listing request asked for (io_uring only; 0 classic).
    pub listing_size: u64,
}

/// The transport state a mount shares between the classic adapter and the ring threads.
#[derive(Clone)]
pub struct Transport(Arc<Shared>);

struct Shared {
    want_uring: bool,
    negotiated: AtomicBool,
    payload_sz: AtomicU64,
    depth: usize,
    /// Serving threads per node.
    threads_per_node: usize,
    active: AtomicBool,
    classic: AtomicU64,
    served: Arc<[ring::Counter]>,
    fs: Mutex<Option<Arc<Fs>>>,
    obs: Arc<Observer>,
    running: Mutex<Option<Running>>,
}

struct Running {
    stop: Arc<OwnedFd>,
    workers: Vec<JoinHandle<()>>,
    pools: Vec<Arc<ring::Pool>>,
    serving: Vec<JoinHandle<()>>,
}

impl Transport {
    /// `depth` ring entries per queue, `threads_per_node` serving threads per node.
    pub(crate) fn new(
        fs: Arc<Fs>,
        obs: Arc<Observer>,
        want_uring: bool,
        depth: usize,
        threads_per_node: usize,
    ) -> Transport {
        let queues = possible_cpus().len();
        let t = Transport(Arc::new(Shared {
            want_uring,
            negotiated: AtomicBool::new(false),
            payload_sz: AtomicU64::new(0),
            depth: depth.clamp(1, ring::MAX_DEPTH),
            threads_per_node: threads_per_node.max(1),
            active: AtomicBool::new(false),
            classic: AtomicU64::new(0),
            served: (0..queues).map(|_| ring::Counter::default()).collect(),
            fs: Mutex::new(Some(fs)),
            obs,
            running: Mutex::new(None),
        }));
        let shared = Arc::downgrade(&t.0);
        crate::memory::spawn_trimmer(move || {
            shared.upgrade().map(|s| {
                let r = Transport(s).requests();
                r.classic + r.io_uring
            })
        });
        t
    }

    /// Ring entries per queue.
    pub fn depth(&self) -> usize {
        self.0.depth
    }

    /// The most requests served at once so far, in either transport.
    pub fn in_flight_max(&self) -> u64 {
        self.0.obs.in_flight_max()
    }

    pub(crate) fn wants_uring(&self) -> bool {
        self.0.want_uring
    }

    /// INIT accepted io_uring; `payload_sz` is what the kernel will require of each buffer.
    pub(crate) fn negotiated(&self, payload_sz: u64) {
        self.0.payload_sz.store(payload_sz, Ordering::Relaxed);
        self.0.negotiated.store(true, Ordering::Release);
    }

    /// Whether INIT accepted FUSE over io_uring (the rings still have to be started).
    pub fn is_negotiated(&self) -> bool {
        self.0.negotiated.load(Ordering::Acquire)
    }

    pub(crate) fn count_classic(&self) {
        self.0.classic.fetch_add(1, Ordering::Relaxed);
    }

    /// The transport serving requests now.
    pub fn mode(&self) -> FuseMode {
        if self.0.active.load(Ordering::Acquire) {
            FuseMode::IoUring
        } else {
            FuseMode::Classic
        }
    }

    /// Requests served so far, per transport.
    pub fn requests(&self) -> RequestCounts {
        RequestCounts {
            classic: self.0.classic.load(Ordering::Relaxed),
            io_uring: self
                .0
                .served
                .iter()
                .map(|c| c.0.load(Ordering::Relaxed))
                .sum(),
            listings: self.0.obs.listings().0,
            listing_size: self.0.obs.listings().1,
        }
    }

    /// Starts one queue per possible CPU on `dev` (the session's `/dev/fuse`) if INIT
    /// accepted io_uring, and returns the mode in use. On an error the kernel falls back to
    /// `/dev/fuse`, so the mount keeps working in classic mode.
    pub(crate) fn start(&self, dev: BorrowedFd<'_>) -> io::Result<FuseMode> {
        // The mount exists once INIT is done: widen its readahead window (either mode).
        // Only speed depends on it, so a failure is a warning.
        if let Some(mp) = self.0.obs.mountpoint() {
            if let Err(e) = crate::readahead::raise(mp) {
                eprintln!(
                    "numaio mount: {mp}: cannot raise the readahead window to {} KiB ({e}); sequential reads reach the server in smaller requests",
                    crate::readahead::READAHEAD_KB
                );
            }
        }
        if !self.is_negotiated() {
            return Ok(FuseMode::Classic);
        }
        let fs = self
            .0
            .fs
            .lock()
            .expect("transport lock")
            .clone()
            .ok_or_else(|| io::Error::other("the volume is already unmounted"))?;
        let dev = Arc::new(dev.try_clone_to_owned()?);
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh descriptor owned by nothing else.
        let stop = Arc::new(unsafe { OwnedFd::from_raw_fd(efd) });
        let mut running = Running {
            stop: stop.clone(),
            workers: Vec::new(),
            pools: Vec::new(),
            serving: Vec::new(),
        };
        // The serving threads, per node with CPUs (one pool for all where none is known).
        let node_cpus: Vec<(u32, Vec<u32>)> = self
            .0
            .obs
            .node_cpus()
            .into_iter()
            .filter(|(_, c)| !c.is_empty())
            .collect();
        let node_cpus = if node_cpus.is_empty() {
            vec![(0, Vec::new())]
        } else {
            node_cpus
        };
        let mut pool_of_node = Vec::new();
        for (node, cpus) in &node_cpus {
            let (pool, handles) = match ring::Pool::start(*node, cpus, self.0.threads_per_node) {
                Ok(p) => p,
                Err(e) => {
                    *self.0.running.lock().expect("transport lock") = Some(running);
                    self.stop();
                    return Err(e);
                }
            };
            running.serving.extend(handles);
            running.pools.push(pool.clone());
            pool_of_node.push((*node, cpus.clone(), pool));
        }
        let pool_for = |cpu: u32| {
            pool_of_node
                .iter()
                .find(|(_, cpus, _)| cpus.contains(&cpu))
                .unwrap_or(&pool_of_node[0])
                .2
                .clone()
        };
        let payload_sz = self.0.payload_sz.load(Ordering::Relaxed) as usize;
        let local_wakeups = self.0.obs.local_wakeups() && local_wake::may_switch();
        let mut result = Ok(());
        for (qid, cpu) in possible_cpus().into_iter().enumerate() {
            let (tx, rx) = std::sync::mpsc::channel();
            let spec = ring::QueueSpec {
                qid: qid as u16,
                cpu,
                payload_sz,
                depth: self.depth(),
                dev: dev.clone(),
                fs: fs.clone(),
                obs: self.0.obs.clone(),
                served: self.0.served.clone(),
                pool: pool_for(cpu),
                local_wakeups,
            };
            let stop = stop.clone();
            let h = match std::thread::Builder::new()
                .name(format!("fuse-uring-{qid}"))
                .spawn(move || ring::run(spec, stop, tx))
            {
                Ok(h) => h,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            running.workers.push(h);
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    result = Err(io::Error::new(
                        e.kind(),
                        format!("registering io_uring queue {qid} (CPU {cpu}) with FUSE: {e}"),
                    ));
                    break;
                }
                Err(_) => {
                    result = Err(io::Error::other(format!(
                        "io_uring queue {qid} (CPU {cpu}) ended during registration"
                    )));
                    break;
                }
            }
        }
        *self.0.running.lock().expect("transport lock") = Some(running);
        match result {
            Ok(()) => {
                self.0.active.store(true, Ordering::Release);
                Ok(FuseMode::IoUring)
            }
            Err(e) => {
                self.stop();
                Err(e)
            }
        }
    }

    /// Stops the ring threads and the serving threads and waits for them; their references
    /// to the volume are dropped, so it can be unmounted.
    pub(crate) fn stop(&self) {
        let running = self.0.running.lock().expect("transport lock").take();
        if let Some(r) = running {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd this transport owns.
            unsafe { libc::write(r.stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            for w in r.workers {
                let _ = w.join();
            }
            // The rings are closed: what a serving thread still answers goes nowhere.
            for p in &r.pools {
                p.close();
            }
            for s in r.serving {
                let _ = s.join();
            }
        }
        self.0.active.store(false, Ordering::Release);
        self.0.fs.lock().expect("transport lock").take();
    }
}

/// The kernel makes one queue per possible CPU, numbered in CPU order.
fn possible_cpus() -> Vec<u32> {
    std::fs::read_to_string("/sys/devices/system/cpu/possible")
        .ok()
        .and_then(|s| numaio_sys::cpulist::parse(s.trim()).ok())
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| vec![0])
}
