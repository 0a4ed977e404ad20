//! FUSE over io_uring (Linux 6.14+): after INIT accepts `FUSE_OVER_IO_URING`, one queue per
//! possible CPU serves requests, each with a worker thread bound to its CPU and buffers on
//! that CPU's node. `/dev/fuse` stays served by fuser for what the kernel keeps sending
//! there (forget, interrupt), and for everything when the kernel falls back.

mod abi;
mod dispatch;
mod ring;

use crate::Observer;
use numaio_fs::Fs;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// The kernel's switch for FUSE over io_uring; present only in kernels built with it.
pub const ENABLE_URING: &str = "/sys/module/fuse/parameters/enable_uring";

/// Largest write the kernel may send; it also sizes every ring entry's payload buffer.
pub const MAX_WRITE: u32 = 1 << 20;

/// Ring entries per queue unless [`DEPTH_ENV`] says otherwise. Each entry holds a payload
/// buffer of [`MAX_WRITE`] bytes (touched only as far as requests fill it).
pub const DEFAULT_DEPTH: usize = 4;

/// Environment variable that overrides the ring entries per queue (1 to 64), read when a
/// mount is created: a knob for measuring, not a mount option.
pub const DEPTH_ENV: &str = "NUMAIO_FUSE_URING_DEPTH";

/// The ring depth `value` of [`DEPTH_ENV`] asks for: [`DEFAULT_DEPTH`] when unset or not a
/// number in 1..=64.
pub fn depth_from(value: Option<&str>) -> usize {
    value
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|d| (1..=ring::MAX_DEPTH).contains(d))
        .unwrap_or(DEFAULT_DEPTH)
}

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

/// The transport state a mount shares between the fuser adapter and the ring workers.
#[derive(Clone)]
pub struct Transport(Arc<Shared>);

struct Shared {
    want_uring: bool,
    negotiated: AtomicBool,
    payload_sz: AtomicU64,
    depth: AtomicUsize,
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
}

impl Transport {
    pub(crate) fn new(fs: Arc<Fs>, obs: Arc<Observer>, want_uring: bool) -> Transport {
        let queues = possible_cpus().len();
        let t = Transport(Arc::new(Shared {
            want_uring,
            negotiated: AtomicBool::new(false),
            payload_sz: AtomicU64::new(0),
            depth: AtomicUsize::new(depth_from(std::env::var(DEPTH_ENV).ok().as_deref())),
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

    /// Sets the ring entries per queue (clamped to 1..=64) for rings started after this.
    pub fn set_depth(&self, depth: usize) {
        self.0
            .depth
            .store(depth.clamp(1, ring::MAX_DEPTH), Ordering::Relaxed);
    }

    /// Ring entries per queue.
    pub fn depth(&self) -> usize {
        self.0.depth.load(Ordering::Relaxed)
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
    pub fn start(&self, dev: BorrowedFd<'_>) -> io::Result<FuseMode> {
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
        };
        let payload_sz = self.0.payload_sz.load(Ordering::Relaxed) as usize;
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
            };
            let stop = stop.clone();
            let h = std::thread::Builder::new()
                .name(format!("fuse-uring-{qid}"))
                .spawn(move || ring::run(spec, stop, tx))?;
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

    /// Stops the ring workers and waits for them; their references to the volume are
    /// dropped, so it can be unmounted.
    pub fn stop(&self) {
        let running = self.0.running.lock().expect("transport lock").take();
        if let Some(r) = running {
            let one = 1u64.to_ne_bytes();
            // SAFETY: writes 8 bytes from a live buffer to an eventfd this transport owns.
            unsafe { libc::write(r.stop.as_raw_fd(), one.as_ptr().cast(), one.len()) };
            for w in r.workers {
                let _ = w.join();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn depth_knob_accepts_only_1_to_64() {
        assert_eq!(depth_from(None), DEFAULT_DEPTH);
        assert_eq!(depth_from(Some("8")), 8);
        assert_eq!(depth_from(Some(" 1\n")), 1);
        assert_eq!(depth_from(Some("64")), 64);
        for bad in ["0", "65", "-1", "x", ""] {
            assert_eq!(depth_from(Some(bad)), DEFAULT_DEPTH, "{bad:?}");
        }
    }
}
