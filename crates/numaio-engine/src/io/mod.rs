//! The device side of the engine.
//!
//! With the built-in io_uring backend each slice has a [`ring::Ring`] that callers submit
//! into directly (the miss path). A [`Backend`] given in the configuration (fault injection,
//! power-loss simulation, psync) runs behind the slice's I/O workers instead: each worker
//! owns an [`IoQueue`] and passes it batches of vectored reads and writes. Queues must
//! complete every request fully (resubmitting after short transfers) and may stop short
//! only at end of file on a read. [`IoPath`] is the one entry point for both.

#[cfg(feature = "test-backends")]
mod fault;
#[cfg(feature = "test-backends")]
pub mod power_loss;

#[cfg(feature = "test-backends")]
pub use fault::{FaultBackend, FaultState};
pub(crate) mod ring;
pub(crate) mod uring;
pub(crate) mod worker;

use worker::{Completion, Done, Msg};

use std::io;
use std::os::fd::RawFd;
use std::sync::Arc;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoKind {
    Read,
    Write,
}

/// One vectored request on one file descriptor, handed to an [`IoQueue`] by the engine.
///
/// Its buffers are the engine's own cache buffers, so safe code cannot build one: the
/// engine makes them, and a backend that needs a request of its own (to write from a copy,
/// say) must vouch for the buffers with the `unsafe` [`IoRequest::from_raw_parts`].
///
/// ```compile_fail
/// // Safe code cannot point a request at arbitrary memory.
/// let r = numaio_engine::IoRequest {
///     kind: numaio_engine::IoKind::Read,
///     fd: 0,
///     offset: 0,
///     iovecs: vec![],
/// };
/// ```
///
/// ```compile_fail
/// // Nor run requests through a queue it implements without `unsafe`.
/// struct Q;
/// impl numaio_engine::IoQueue for Q {
///     fn run(
///         &mut self,
///         _: &mut [numaio_engine::IoRequest],
///         _: &mut dyn FnMut(usize, std::io::Result<usize>),
///     ) {
///     }
/// }
/// ```
///
/// Both are possible with `unsafe`, where the caller vouches for the buffers:
///
/// ```
/// use numaio_engine::{IoKind, IoQueue, IoRequest};
/// struct Refuse;
/// // SAFETY: every request is reported without touching its buffers.
/// unsafe impl IoQueue for Refuse {
///     fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, std::io::Result<usize>)) {
///         for i in 0..reqs.len() {
///             done(i, Err(std::io::Error::other("refused")));
///         }
///     }
/// }
/// let mut buf = [0u8; 512];
/// let iov = vec![libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }];
/// // SAFETY: `buf` outlives the request and nothing else touches it.
/// let mut reqs = [unsafe { IoRequest::from_raw_parts(IoKind::Read, 0, 0, iov) }];
/// let mut failed = 0;
/// Refuse.run(&mut reqs, &mut |_, r| failed += r.is_err() as usize);
/// assert_eq!((failed, reqs[0].len()), (1, 512));
/// ```
#[derive(Debug)]
pub struct IoRequest {
    kind: IoKind,
    fd: RawFd,
    offset: u64,
    iovecs: Vec<libc::iovec>,
}

// SAFETY: the iovecs point into slice arenas whose slots stay pinned (or into buffers owned
// by the backend that made the request) until the request completes; nothing in a request
// is tied to the thread that made it.
unsafe impl Send for IoRequest {}

impl IoRequest {
    /// A request on buffers the engine holds pinned (or LOADING) until it completes.
    pub(crate) fn new(kind: IoKind, fd: RawFd, offset: u64, iovecs: Vec<libc::iovec>) -> Self {
        IoRequest {
            kind,
            fd,
            offset,
            iovecs,
        }
    }

    /// A request on buffers of the caller's choosing.
    ///
    /// # Safety
    /// Every iovec must describe memory that stays valid (and, for a read, writable and not
    /// otherwise accessed) until the request has completed and been reported.
    pub unsafe fn from_raw_parts(
        kind: IoKind,
        fd: RawFd,
        offset: u64,
        iovecs: Vec<libc::iovec>,
    ) -> Self {
        IoRequest::new(kind, fd, offset, iovecs)
    }

    pub fn kind(&self) -> IoKind {
        self.kind
    }
    pub fn fd(&self) -> RawFd {
        self.fd
    }
    /// File offset of the first byte.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// The buffers. Reading through them needs `unsafe`, and is sound only while the
    /// request has not been reported complete.
    pub fn iovecs(&self) -> &[libc::iovec] {
        &self.iovecs
    }
    pub fn len(&self) -> usize {
        self.iovecs.iter().map(|v| v.iov_len).sum()
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Moves the request out, leaving an empty one (zero bytes) in its place: for a queue
    /// that passes part of a batch on to an inner queue.
    pub fn take(&mut self) -> IoRequest {
        IoRequest {
            kind: self.kind,
            fd: self.fd,
            offset: self.offset,
            iovecs: std::mem::take(&mut self.iovecs),
        }
    }
}

/// Performs the engine's device requests for one I/O worker.
///
/// # Safety
/// The requests' buffers belong to the engine's cache. An implementation must finish every
/// access to a request's buffers (its own and the kernel's) before it reports that request
/// through `done`, and before `run` returns; it must report each request at most once and
/// must not keep a request, or pointers from it, past `run`. The engine then reuses the
/// buffers at once, so breaking this contract is a data race on them.
pub unsafe trait IoQueue: Send {
    /// Performs every request and reports each one through `done(index, result)` as soon as
    /// it completes (so a fast request never waits for a slow one in the same batch). The
    /// result is the number of bytes transferred (less than the request only for a read
    /// that reached end of file).
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>));
}

/// How a slice's requests reach the device.
pub(crate) enum IoPath {
    /// Through the slice's I/O worker threads and a [`Backend`]'s queues.
    Workers {
        tx: std::sync::mpsc::SyncSender<Msg>,
        slice: usize,
    },
    /// Straight into the slice's io_uring.
    Ring(Arc<ring::Ring>),
}

/// A blocking caller's pending request.
pub(crate) enum Pending {
    Worker(Arc<Completion>),
    Ring(ring::Ticket),
}

impl Pending {
    pub fn wait(self) -> io::Result<usize> {
        match self {
            Pending::Worker(c) => c.wait(),
            Pending::Ring(t) => t.wait(),
        }
    }
}

impl IoPath {
    fn stopped(_: usize) -> io::Error {
        crate::error::EngineError::Closed.into()
    }

    /// Queues a request a caller will wait for, or gives it back when the queue is full;
    /// it reaches the device at the latest at [`flush`](Self::flush).
    pub fn try_submit(&self, req: IoRequest) -> io::Result<Result<Pending, IoRequest>> {
        match self {
            // The workers drain their channel whether or not anyone waits: blocking is safe.
            IoPath::Workers { .. } => self.submit(req).map(Ok),
            IoPath::Ring(r) => Ok(r.try_submit_wait(req)?.map(Pending::Ring)),
        }
    }

    /// Queues a request a caller will wait for, waiting for room; only for a caller that
    /// holds no [`Pending`] (a ring's slot is free again only once its ticket is waited).
    pub fn submit(&self, req: IoRequest) -> io::Result<Pending> {
        match self {
            IoPath::Workers { tx, slice } => {
                let c = Completion::new();
                tx.send(Msg::Io(req, Done::wait(c.clone())))
                    .map_err(|_| Self::stopped(*slice))?;
                Ok(Pending::Worker(c))
            }
            IoPath::Ring(r) => Ok(Pending::Ring(r.submit_wait(req)?)),
        }
    }

    /// Queues a request whose completion runs `done` (off the caller's thread). With
    /// `block` false it fails rather than waits when the queue is full (`done` then runs
    /// here with `WouldBlock`); `done` always runs exactly once, so the loads it owns end.
    pub fn submit_call(
        &self,
        req: IoRequest,
        done: Box<dyn FnOnce(io::Result<usize>) + Send>,
        block: bool,
    ) -> bool {
        match self {
            IoPath::Workers { tx, slice } => {
                let msg = Msg::Io(req, Done::call(done));
                let err = if block {
                    match tx.send(msg) {
                        Ok(()) => return true,
                        Err(std::sync::mpsc::SendError(m)) => (m, Self::stopped(*slice)),
                    }
                } else {
                    match tx.try_send(msg) {
                        Ok(()) => return true,
                        Err(std::sync::mpsc::TrySendError::Full(m)) => (
                            m,
                            io::Error::new(io::ErrorKind::WouldBlock, "I/O queue full"),
                        ),
                        Err(std::sync::mpsc::TrySendError::Disconnected(m)) => {
                            (m, Self::stopped(*slice))
                        }
                    }
                };
                // Never drop a callback: it owns LOADING slots.
                if let (Msg::Io(_, d), e) = err {
                    d.finish(Err(e));
                }
                false
            }
            IoPath::Ring(r) => r.submit_call(req, done, block),
        }
    }

    /// Hands queued requests to the device (the workers take theirs from the channel).
    pub fn flush(&self) {
        if let IoPath::Ring(r) = self {
            r.flush();
        }
    }

    /// Stops the `workers` I/O workers, or the ring's reaper, once what is queued is done.
    pub fn stop(&self, workers: usize) {
        match self {
            IoPath::Workers { tx, .. } => {
                for _ in 0..workers {
                    let _ = tx.send(Msg::Stop);
                }
            }
            IoPath::Ring(r) => r.stop(),
        }
    }
}

pub trait Backend: Send + Sync {
    fn name(&self) -> String;
    /// A queue for one I/O worker thread, of the given depth.
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>>;
    /// `fdatasync(fd)`.
    fn datasync(&self, fd: RawFd) -> io::Result<()>;
}

/// Advances `iov` past `done` bytes (after a short transfer).
pub(crate) fn advance(iov: &mut Vec<libc::iovec>, mut done: usize) {
    let mut drop_n = 0;
    for v in iov.iter_mut() {
        if done == 0 {
            break;
        }
        if done >= v.iov_len {
            done -= v.iov_len;
            drop_n += 1;
        } else {
            // SAFETY: pointer arithmetic within the same buffer.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(done) } as *mut _;
            v.iov_len -= done;
            done = 0;
        }
    }
    iov.drain(..drop_n);
}

/// Synchronous `preadv`/`pwritev`: the fallback when io_uring is unavailable.
#[derive(Default)]
pub struct PsyncBackend;

struct PsyncQueue;

pub(crate) fn run_sync(req: &IoRequest) -> io::Result<usize> {
    let mut iov = req.iovecs.clone();
    let total = req.len();
    let mut done = 0usize;
    while done < total {
        let n = iov.len().min(1024) as libc::c_int;
        let off = (req.offset + done as u64) as libc::off_t;
        // SAFETY: iovecs describe live buffers for the duration of the call.
        let r = unsafe {
            match req.kind {
                IoKind::Read => libc::preadv(req.fd, iov.as_ptr(), n, off),
                IoKind::Write => libc::pwritev(req.fd, iov.as_ptr(), n, off),
            }
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if r == 0 {
            if req.kind == IoKind::Read {
                break; // end of file
            }
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                "write returned 0 bytes",
            ));
        }
        done += r as usize;
        advance(&mut iov, r as usize);
    }
    Ok(done)
}

// SAFETY: each request is done with synchronous preadv/pwritev before it is reported.
unsafe impl IoQueue for PsyncQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        for (i, r) in reqs.iter().enumerate() {
            done(i, run_sync(r));
        }
    }
}

impl Backend for PsyncBackend {
    fn name(&self) -> String {
        "psync".into()
    }
    fn queue(&self, _depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(PsyncQueue))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        // SAFETY: plain syscall on a descriptor the engine owns.
        if unsafe { libc::fdatasync(fd) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn advance_skips_whole_and_partial_iovecs() {
        let mut a = [0u8; 8];
        let mut b = [0u8; 8];
        let mut iov = vec![
            libc::iovec {
                iov_base: a.as_mut_ptr() as *mut _,
                iov_len: 8,
            },
            libc::iovec {
                iov_base: b.as_mut_ptr() as *mut _,
                iov_len: 8,
            },
        ];
        advance(&mut iov, 10);
        assert_eq!(iov.len(), 1);
        assert_eq!(iov[0].iov_len, 6);
        assert_eq!(iov[0].iov_base as usize, b.as_ptr() as usize + 2);
    }
}
