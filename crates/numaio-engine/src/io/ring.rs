//! The direct miss path: one io_uring per slice that callers submit into themselves.
//!
//! A caller takes a preallocated request slot, pushes its vectored read or write into the
//! ring's submission queue under a short lock and enters the kernel itself; nothing is sent
//! to another thread first. One reaper thread per ring (bound to the slice's node, where the
//! loads it ends touch the slice's memory) sleeps in the kernel until completions arrive and
//! dispatches them: a blocking caller parked on its slot is woken, an asynchronous request's
//! callback ends its loads (and wakes the future). Slots are reused, so a request allocates
//! nothing in the ring, and every slot is in flight independently: a completion frees its
//! slot at once, with no batch to wait for.
//!
//! Buffers stay owned by the engine until their completion is reaped: a blocking ticket
//! waits for its completion even when dropped, an asynchronous request owns its LOADING
//! slots through its callback, and the reaper stops only once nothing is in flight.

use crate::io::{advance, IoKind, IoRequest};
use io_uring::{opcode, squeue, types, IoUring};
use parking_lot::{Condvar, Mutex};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// `io_uring_enter` flag: wait for completions.
const IORING_ENTER_GETEVENTS: u32 = 1;

/// `user_data` of the no-op that wakes the reaper to stop.
const WAKE: u64 = u64::MAX;

/// Most iovecs one submission carries (the kernel's IOV_MAX); longer requests continue in a
/// resubmission.
const IOV_MAX: usize = 1024;

type Callback = Box<dyn FnOnce(io::Result<usize>) + Send>;

/// Who learns a request's result.
enum Target {
    /// The slot is free.
    Idle,
    /// A caller waits on the slot; the result is left here for it.
    Wait(Option<io::Result<usize>>),
    /// The reaper runs the callback.
    Call(Callback),
}

struct Req {
    kind: IoKind,
    fd: RawFd,
    offset: u64,
    iov: Vec<libc::iovec>,
    /// Bytes transferred so far and still to go.
    done: usize,
    left: usize,
    target: Target,
}

// SAFETY: the iovecs point into slice arenas (slots held LOADING or pinned until the request
// completes); nothing in a request is tied to the thread that made it.
unsafe impl Send for Req {}

struct Slot {
    req: Mutex<Req>,
    cv: Condvar,
}

pub(crate) struct Ring {
    uring: IoUring,
    /// Guards the submission queue (the only `SubmissionQueue` in existence while held).
    sq: Mutex<()>,
    slots: Box<[Slot]>,
    free: Mutex<Vec<u32>>,
    free_cv: Condvar,
    /// Requests the kernel owns (pushed and not yet finally completed).
    inflight: AtomicUsize,
    stopping: AtomicBool,
}

/// A blocking caller's claim on one request: [`wait`](Ticket::wait) for the result. Dropping
/// it also waits, so the request's buffers are never given back while the kernel uses them.
pub(crate) struct Ticket {
    ring: Arc<Ring>,
    idx: u32,
    waited: bool,
}

impl Ticket {
    pub fn wait(mut self) -> io::Result<usize> {
        self.waited = true;
        self.ring.wait_slot(self.idx)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.waited {
            let _ = self.ring.wait_slot(self.idx);
        }
    }
}

impl Ring {
    /// A ring with `depth` request slots (at most that many requests in flight).
    pub fn new(depth: usize) -> io::Result<Arc<Ring>> {
        let depth = depth.clamp(1, 4096);
        // One spare entry for the stop no-op; the completion queue (twice the size) never
        // overflows because at most `depth` requests and one no-op are ever in flight.
        let uring = IoUring::new((depth as u32 + 1).next_power_of_two())?;
        let slots = (0..depth)
            .map(|_| Slot {
                req: Mutex::new(Req {
                    kind: IoKind::Read,
                    fd: -1,
                    offset: 0,
                    iov: Vec::new(),
                    done: 0,
                    left: 0,
                    target: Target::Idle,
                }),
                cv: Condvar::new(),
            })
            .collect();
        Ok(Arc::new(Ring {
            uring,
            sq: Mutex::new(()),
            slots,
            free: Mutex::new((0..depth as u32).rev().collect()),
            free_cv: Condvar::new(),
            inflight: AtomicUsize::new(0),
            stopping: AtomicBool::new(false),
        }))
    }

    fn stopped(&self) -> io::Error {
        crate::error::EngineError::Closed.into()
    }

    /// A free request slot; with `block`, waits for one (submitting what is queued first,
    /// since queued requests of our own may hold the slots we wait for).
    fn take_slot(&self, block: bool) -> Option<u32> {
        let mut free = self.free.lock();
        loop {
            if let Some(i) = free.pop() {
                return Some(i);
            }
            if !block {
                return None;
            }
            drop(free);
            self.flush();
            free = self.free.lock();
            if free.is_empty() {
                self.free_cv.wait_for(&mut free, Duration::from_millis(10));
            }
        }
    }

    fn put_slot(&self, idx: u32) {
        self.free.lock().push(idx);
        self.free_cv.notify_one();
    }

    /// Queues `req` in slot `idx` for the kernel (submitted by the next [`flush`]).
    /// On a stopped ring the target comes back with the error.
    fn push(&self, idx: u32, req: IoRequest, target: Target) -> Result<(), (io::Error, Target)> {
        // Counted before the stop flag is read, so a stopping reaper either sees this request
        // or this caller sees the flag (both sides use SeqCst).
        self.inflight.fetch_add(1, Ordering::SeqCst);
        if self.stopping.load(Ordering::SeqCst) {
            self.inflight.fetch_sub(1, Ordering::SeqCst);
            self.put_slot(idx);
            return Err((self.stopped(), target));
        }
        let mut r = self.slots[idx as usize].req.lock();
        r.kind = req.kind;
        r.fd = req.fd;
        r.offset = req.offset;
        r.done = 0;
        r.left = req.len();
        r.iov = req.iovecs;
        r.target = target;
        self.push_sqe(idx, &r);
        Ok(())
    }

    /// Puts the SQE of `r` (for what is left of it) into the submission queue.
    fn push_sqe(&self, idx: u32, r: &Req) {
        let n = r.iov.len().min(IOV_MAX) as u32;
        let off = r.offset + r.done as u64;
        let e = match r.kind {
            IoKind::Read => opcode::Readv::new(types::Fd(r.fd), r.iov.as_ptr(), n)
                .offset(off)
                .build(),
            IoKind::Write => opcode::Writev::new(types::Fd(r.fd), r.iov.as_ptr(), n)
                .offset(off)
                .build(),
        }
        .user_data(idx as u64);
        self.push_entry(&e);
    }

    fn push_entry(&self, e: &squeue::Entry) {
        let _g = self.sq.lock();
        loop {
            // SAFETY: the submission queue is only touched under `sq`, so this is the only
            // `SubmissionQueue`. The entry's iovec array and buffers belong to a slot the
            // kernel owns until its completion is reaped: the slot's `iov` is not touched
            // and its buffers are LOADING or pinned until then.
            let pushed = unsafe {
                let mut q = self.uring.submission_shared();
                let r = q.push(e).is_ok();
                q.sync();
                r
            };
            if pushed {
                return;
            }
            // Full of queued entries: hand them to the kernel to make room.
            let _ = self.uring.submitter().submit();
        }
    }

    /// Hands every queued entry to the kernel (one system call for all of them).
    pub fn flush(&self) {
        loop {
            let queued = {
                let _g = self.sq.lock();
                // SAFETY: `sq` is held, so this is the only `SubmissionQueue`. It must be
                // dropped before the lock is released: its drop stores the tail it read, which
                // would undo a concurrent push.
                let q = unsafe { self.uring.submission_shared() };
                let n = q.len();
                drop(q);
                n
            };
            if queued == 0 {
                return;
            }
            match self.uring.submitter().submit() {
                // The kernel may take fewer than were queued: go on with the rest.
                Ok(n) if n >= queued => return,
                Ok(_) => {}
                Err(e)
                    if matches!(
                        e.raw_os_error(),
                        Some(libc::EINTR | libc::EAGAIN | libc::EBUSY)
                    ) =>
                {
                    std::thread::yield_now()
                }
                // Any other error is the ring's own (the fd, the memory): leave the entries
                // queued for the next flush.
                Err(_) => return,
            }
        }
    }

    /// Queues a request for a blocking caller if a request slot is free (else gives the
    /// request back); [`flush`](Self::flush), then wait on the ticket. A ticket's slot is
    /// free again only once it is waited for, so a caller holding tickets must wait for one
    /// of them rather than for a slot (see `Inner::io_runs`).
    pub fn try_submit_wait(
        self: &Arc<Self>,
        req: IoRequest,
    ) -> io::Result<Result<Ticket, IoRequest>> {
        let Some(idx) = self.take_slot(false) else {
            return Ok(Err(req));
        };
        self.push(idx, req, Target::Wait(None))
            .map_err(|(e, _)| e)?;
        Ok(Ok(Ticket {
            ring: self.clone(),
            idx,
            waited: false,
        }))
    }

    /// Like [`try_submit_wait`](Self::try_submit_wait), waiting for a free slot; only for a
    /// caller that holds no ticket.
    pub fn submit_wait(self: &Arc<Self>, req: IoRequest) -> io::Result<Ticket> {
        // A blocking take always returns a slot.
        let idx = self.take_slot(true).unwrap_or_default();
        self.push(idx, req, Target::Wait(None))
            .map_err(|(e, _)| e)?;
        Ok(Ticket {
            ring: self.clone(),
            idx,
            waited: false,
        })
    }

    /// Queues a request whose completion runs `done` on the reaper. With `block` false it
    /// fails (running `done` with `WouldBlock`) rather than wait for a request slot. On a
    /// stopped ring `done` runs here with the error, so the loads it owns always end.
    pub fn submit_call(&self, req: IoRequest, done: Callback, block: bool) -> bool {
        let Some(idx) = self.take_slot(block) else {
            done(Err(io::Error::new(
                io::ErrorKind::WouldBlock,
                "I/O queue full",
            )));
            return false;
        };
        match self.push(idx, req, Target::Call(done)) {
            Ok(()) => true,
            Err((e, Target::Call(done))) => {
                done(Err(e));
                false
            }
            Err(_) => false,
        }
    }

    fn wait_slot(&self, idx: u32) -> io::Result<usize> {
        let slot = &self.slots[idx as usize];
        let mut r = slot.req.lock();
        let res = loop {
            if let Target::Wait(res) = &mut r.target {
                if let Some(res) = res.take() {
                    break res;
                }
            }
            slot.cv.wait(&mut r);
        };
        r.target = Target::Idle;
        r.iov.clear();
        drop(r);
        self.put_slot(idx);
        res
    }

    /// Asks the reaper to stop once nothing is in flight.
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.push_entry(&opcode::Nop::new().build().user_data(WAKE));
        self.flush();
    }

    /// The reaper: waits in the kernel for completions and dispatches them until stopped
    /// with nothing in flight.
    pub fn reap(&self) {
        let mut batch: Vec<(u64, i32)> = Vec::with_capacity(self.slots.len() + 1);
        loop {
            if self.stopping.load(Ordering::SeqCst) && self.inflight.load(Ordering::SeqCst) == 0 {
                return;
            }
            // Only waits: submitting here would make the reaper do the callers' block-layer
            // work and contend with them for the ring's submission lock in the kernel.
            // SAFETY: no submission and no argument pointer: a plain wait for one completion.
            let waited = unsafe {
                self.uring
                    .submitter()
                    .enter::<libc::sigset_t>(0, 1, IORING_ENTER_GETEVENTS, None)
            };
            if let Err(e) = waited {
                if e.raw_os_error() != Some(libc::EINTR) {
                    // Completions may still be reaped below; do not spin on the failing call.
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
            // SAFETY: only this thread ever reads the completion queue.
            unsafe {
                let mut cq = self.uring.completion_shared();
                cq.sync();
                batch.extend(cq.map(|c| (c.user_data(), c.result())));
            }
            let mut resubmitted = false;
            for (ud, res) in batch.drain(..) {
                if ud != WAKE {
                    resubmitted |= self.complete(ud as u32, res);
                }
            }
            if resubmitted {
                self.flush();
            }
        }
    }

    /// Ends request `idx` with `res`, or queues the rest of it again (then returns true).
    fn complete(&self, idx: u32, res: i32) -> bool {
        let Some(slot) = self.slots.get(idx as usize) else {
            return false;
        };
        let mut r = slot.req.lock();
        let result = if res == -libc::EINTR || res == -libc::EAGAIN {
            self.push_sqe(idx, &r);
            return true;
        } else if res < 0 {
            Err(io::Error::from_raw_os_error(-res))
        } else if res == 0 {
            if r.kind == IoKind::Read {
                Ok(r.done) // end of file
            } else {
                Err(io::Error::new(
                    io::ErrorKind::WriteZero,
                    "write returned 0 bytes",
                ))
            }
        } else {
            let n = res as usize;
            r.done += n;
            r.left -= n.min(r.left);
            if r.left > 0 {
                // A short transfer: the rest goes in again from where it stopped.
                advance(&mut r.iov, n);
                self.push_sqe(idx, &r);
                return true;
            }
            Ok(r.done)
        };
        self.inflight.fetch_sub(1, Ordering::SeqCst);
        match std::mem::replace(&mut r.target, Target::Idle) {
            Target::Wait(_) => {
                r.target = Target::Wait(Some(result));
                drop(r);
                slot.cv.notify_one();
            }
            Target::Call(f) => {
                r.iov.clear();
                drop(r);
                self.put_slot(idx);
                f(result);
            }
            Target::Idle => {
                drop(r);
                self.put_slot(idx);
            }
        }
        false
    }
}
