//! One FUSE-over-io_uring queue: a ring thread bound to the queue's CPU, its ring entries'
//! buffers on that CPU's node, registration with the kernel, then the COMMIT_AND_FETCH loop.
//!
//! A request that may wait for a device (data, sync, and every change, which may have to
//! commit first) is served by a serving thread of the queue's node ([`Pool`]), which hands
//! the entry back with its reply: so it holds one serving thread and one entry, and the
//! queue's other entries keep being served. The requests that only read the volume's state
//! in memory (lookups, attributes, listings, opens and closes) are answered by the ring
//! thread itself ([`serves_inline`]): the hand-off would cost them two thread switches,
//! more than their work. The ring thread also tries writes and metadata changes
//! ([`tried_inline`]): a write that finds nothing to wait for (its file's lock free, no
//! commit due, any partly covered block new or in memory: `Fs::try_write`) only copies
//! into the devices' page cache, and a metadata change while no commit is due only changes
//! memory; any other goes, untouched, to a serving thread.

use super::abi;
use super::dispatch;
use super::local_wake::LocalWake;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use numaio_fs::Fs;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Ring entries per queue at most: each holds a payload buffer of the largest request.
pub const MAX_DEPTH: usize = 64;
/// Headers are 288 bytes; each gets its own 512-byte slot.
const HDR_STRIDE: usize = 512;
/// `user_data` of the stop poll; entries use their index.
const STOP: u64 = u64::MAX;
/// `user_data` of the poll that says serving threads handed entries back.
const WAKE: u64 = u64::MAX - 1;
/// The session's `/dev/fuse`, registered as the ring's only fixed file.
const DEV: types::Fixed = types::Fixed(0);

/// A request counter on its own cache line, so queues never share one.
#[repr(align(64))]
#[derive(Default)]
pub struct Counter(pub AtomicU64);

/// What a queue's ring thread needs.
pub struct QueueSpec {
    pub qid: u16,
    pub cpu: u32,
    pub payload_sz: usize,
    /// Ring entries (1..=MAX_DEPTH).
    pub depth: usize,
    pub dev: Arc<OwnedFd>,
    pub fs: Arc<Fs>,
    pub obs: Arc<crate::Observer>,
    pub served: Arc<[Counter]>,
    /// The serving threads of the queue's node.
    pub pool: Arc<Pool>,
    /// Whether the ring thread waits and hands requests on under `SCHED_IDLE`
    /// (`local_wake.rs`).
    pub local_wakeups: bool,
}

/// The serving threads of one node: they take entries the ring threads of that node's
/// queues hand them, serve them, and hand them back.
pub struct Pool {
    state: Mutex<PoolState>,
    ready: Condvar,
}

struct PoolState {
    jobs: VecDeque<(Arc<Queue>, usize)>,
    closed: bool,
}

impl Pool {
    /// Starts `threads` serving threads bound to `cpus` (the node's), named after `node`.
    pub fn start(
        node: u32,
        cpus: &[u32],
        threads: usize,
    ) -> io::Result<(Arc<Pool>, Vec<JoinHandle<()>>)> {
        let pool = Arc::new(Pool {
            state: Mutex::new(PoolState {
                jobs: VecDeque::new(),
                closed: false,
            }),
            ready: Condvar::new(),
        });
        let mut handles = Vec::with_capacity(threads);
        for i in 0..threads.max(1) {
            let (p, cpus) = (pool.clone(), cpus.to_vec());
            let h = std::thread::Builder::new()
                .name(format!("fuse-serve-{node}-{i}"))
                .spawn(move || {
                    // On the node's CPUs, so what it allocates and touches stays local; a
                    // failure costs locality, not correctness.
                    if !cpus.is_empty() {
                        let _ = numaio_sys::set_affinity(0, &numaio_sys::CpuSet::from_ids(&cpus));
                    }
                    p.run()
                });
            match h {
                Ok(h) => handles.push(h),
                Err(e) => {
                    pool.close();
                    for h in handles {
                        let _ = h.join();
                    }
                    return Err(e);
                }
            }
        }
        Ok((pool, handles))
    }

    fn push(&self, q: Arc<Queue>, entry: usize) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.jobs.push_back((q, entry));
        drop(s);
        self.ready.notify_one();
    }

    /// Ends the serving threads once their current request is served; entries not yet
    /// served are dropped (the rings are gone by then, and the connection with them).
    pub fn close(&self) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.closed = true;
        s.jobs.clear();
        drop(s);
        self.ready.notify_all();
    }

    fn run(&self) {
        loop {
            let (q, i) = {
                let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
                loop {
                    if s.closed {
                        return;
                    }
                    if let Some(j) = s.jobs.pop_front() {
                        break j;
                    }
                    s = self.ready.wait(s).unwrap_or_else(|p| p.into_inner());
                }
            };
            // Served with waiting allowed, a request is always answered.
            if let Some(commit_id) = q.serve_entry(i, true) {
                q.hand_back(i, commit_id);
            }
        }
    }
}

/// Whether the ring thread answers requests with `opcode` itself: those that never wait for
/// a device. (Freeing an unlinked file, which waits for its reads in flight, happens at
/// FORGET, which the kernel sends over /dev/fuse, not through a ring.)
pub(crate) fn serves_inline(opcode: u32) -> bool {
    use abi::op;
    matches!(
        opcode,
        op::LOOKUP
            | op::GETATTR
            | op::READLINK
            | op::OPEN
            | op::STATFS
            | op::RELEASE
            | op::GETXATTR
            | op::LISTXATTR
            | op::FLUSH
            | op::OPENDIR
            | op::READDIR
            | op::RELEASEDIR
            | op::ACCESS
            | op::READDIRPLUS
            | op::LSEEK
    )
}

/// Whether the ring thread tries requests with `opcode` itself, answering them when they
/// find nothing to wait for (else a serving thread gets them untouched): a write whose file
/// is free and whose partly covered blocks need no device read (`Fs::try_write`), and the
/// metadata changes (no device I/O) while no commit is due (`Fs::change_would_wait`; a size
/// change always goes to the pool).
pub(crate) fn tried_inline(opcode: u32) -> bool {
    use abi::op;
    matches!(
        opcode,
        op::WRITE
            | op::SETATTR
            | op::CREATE
            | op::MKDIR
            | op::MKNOD
            | op::SYMLINK
            | op::LINK
            | op::UNLINK
            | op::RMDIR
            | op::RENAME
            | op::RENAME2
            | op::SETXATTR
            | op::REMOVEXATTR
    )
}

/// What a queue's ring thread shares with the serving threads: the entries' buffers, and
/// the entries served and waiting to be committed.
pub struct Queue {
    qid: u16,
    cpu: u32,
    bufs: Buffers,
    fs: Arc<Fs>,
    obs: Arc<crate::Observer>,
    served: Arc<[Counter]>,
    /// (entry, commit id) of entries whose reply is ready.
    done: Mutex<Vec<(usize, u64)>>,
    /// An eventfd the ring thread polls: written after each hand-back.
    wake: OwnedFd,
}

impl Queue {
    /// The opcode of the request the kernel placed in entry `i`.
    fn opcode(&self, i: usize) -> u32 {
        // SAFETY: as in `serve_entry`: the entry's command completed and the ring thread,
        // which calls this, has not handed the entry to a serving thread; the 8 bytes lie
        // inside the entry's header.
        let hdr = unsafe { std::slice::from_raw_parts(self.bufs.header_ptr(i), 8) };
        abi::u32_at(hdr, 4)
    }

    /// Answers the request the kernel placed in entry `i`; returns its commit id. Where
    /// `wait` is false and the request would wait (see [`crate::serve::Ctx::wait`]), it
    /// returns `None` with the entry untouched, to be handed to a serving thread.
    fn serve_entry(&self, i: usize, wait: bool) -> Option<u64> {
        // SAFETY: the kernel completed this entry's command, so until the next command for
        // the entry is submitted it does not touch the entry's header or payload; the ring
        // thread hands an entry to one serving thread at a time and touches it again only
        // once it is handed back (`done`); the two ranges lie inside this queue's mapping,
        // which lives as long as this `Queue`, and overlap no other entry's.
        let (hdr, payload) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.bufs.header_ptr(i), abi::REQ_HEADER_SZ),
                std::slice::from_raw_parts_mut(self.bufs.payload_ptr(i), self.bufs.payload_sz),
            )
        };
        let (in_out, rest) = hdr.split_at_mut(abi::IN_OUT_SZ);
        let (op_in, ent) = rest.split_at_mut(abi::OP_IN_SZ);
        let commit_id = abi::u64_at(ent, abi::ENT_COMMIT_ID);
        let in_len = abi::u32_at(ent, abi::ENT_PAYLOAD_SZ) as usize;
        let (unique, answer) = dispatch::dispatch(
            &self.fs, &self.obs, self.cpu, wait, in_out, op_in, payload, in_len,
        )?;
        let (error, len) = match answer {
            Ok(n) => (0, n),
            Err(e) => (-e, 0),
        };
        abi::put_out_header(in_out, (16 + len) as u32, error, unique);
        ent[abi::ENT_PAYLOAD_SZ..abi::ENT_PAYLOAD_SZ + 4]
            .copy_from_slice(&(len as u32).to_le_bytes());
        if let Some(c) = self.served.get(self.qid as usize) {
            c.0.fetch_add(1, Ordering::Relaxed);
        }
        Some(commit_id)
    }

    fn hand_back(&self, i: usize, commit_id: u64) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((i, commit_id));
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a live buffer to an eventfd this queue owns. It cannot
        // fail short of the counter overflowing, which 2^64 hand-backs do not reach.
        unsafe { libc::write(self.wake.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }
}

/// The queue's headers and payloads: one mapping bound to the queue's node.
struct Buffers {
    map: numaio_sys::NodeBuffer,
    payload_sz: usize,
    depth: usize,
}

impl Buffers {
    fn new(payload_sz: usize, depth: usize, node: u32) -> io::Result<Buffers> {
        let page = numaio_sys::page_size();
        let payload_sz = payload_sz.next_multiple_of(page);
        let len = Self::headers_len(depth) + depth * payload_sz;
        let map = match numaio_sys::NodeBuffer::on_node(len, node, Default::default()) {
            Ok(m) => m,
            // Where mbind is refused (no NUMA support), the first touch by this CPU's
            // thread still makes the pages local.
            Err(_) => numaio_sys::NodeBuffer::anonymous(len).map_err(io::Error::other)?,
        };
        Ok(Buffers {
            map,
            payload_sz,
            depth,
        })
    }

    fn headers_len(depth: usize) -> usize {
        (depth * HDR_STRIDE).next_multiple_of(numaio_sys::page_size())
    }

    fn header_ptr(&self, i: usize) -> *mut u8 {
        // In bounds: i < depth and the header area is depth * HDR_STRIDE bytes.
        self.map.as_ptr().wrapping_add(i * HDR_STRIDE)
    }

    fn payload_ptr(&self, i: usize) -> *mut u8 {
        self.map
            .as_ptr()
            .wrapping_add(Self::headers_len(self.depth) + i * self.payload_sz)
    }
}

/// The ring is declared before the queue so it is closed (and its commands cancelled)
/// before the buffers can be unmapped (fields drop in declaration order; serving threads
/// still holding the queue keep the buffers until they are done).
struct Worker {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    iov: Vec<[libc::iovec; 2]>,
    q: Arc<Queue>,
    pool: Arc<Pool>,
    /// The session's `/dev/fuse`, kept open while the ring uses it.
    _dev: Arc<OwnedFd>,
    depth: usize,
    /// Per entry, the last command sent and its commit id, to resend after EINTR/EAGAIN.
    last: Vec<(u32, u64)>,
    cqes: Vec<cqueue::Entry>,
    /// The thread's policy: idle while it wakes others or waits, normal while it serves.
    wake: LocalWake,
}

/// Runs queue `spec.qid` until the connection ends or `stop` becomes readable. `ready` gets
/// the result of registering the entries, before any request is served.
pub fn run(spec: QueueSpec, stop: Arc<OwnedFd>, ready: std::sync::mpsc::Sender<io::Result<()>>) {
    let mut w = match Worker::start(spec, &stop) {
        Ok(w) => w,
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    let _ = ready.send(Ok(()));
    drop(ready);
    if let Err(e) = w.serve() {
        eprintln!("numaio mount: io_uring queue {} stopped: {e}", w.q.qid);
    }
}

/// The 80-byte command area: `fuse_uring_cmd_req` {flags, commit_id, qid}.
fn cmd_req(commit_id: u64, qid: u16) -> [u8; 80] {
    let mut c = [0u8; 80];
    c[8..16].copy_from_slice(&commit_id.to_le_bytes());
    c[16..18].copy_from_slice(&qid.to_le_bytes());
    c
}

/// Sets the SQE's `len` field, which `UringCmd80` does not expose (REGISTER needs the
/// iovec count there).
fn with_len(e: squeue::Entry128, len: u32) -> squeue::Entry128 {
    // SAFETY: `Entry128` is a `repr(C)` 128-byte SQE made only of integers, so any byte
    // pattern is valid; `len` is the u32 at byte 24 of `struct io_uring_sqe`.
    let mut raw: [u8; 128] = unsafe { std::mem::transmute(e) };
    raw[24..28].copy_from_slice(&len.to_ne_bytes());
    // SAFETY: as above.
    unsafe { std::mem::transmute::<[u8; 128], squeue::Entry128>(raw) }
}

impl Worker {
    fn start(spec: QueueSpec, stop: &OwnedFd) -> io::Result<Worker> {
        // Bound to its CPU, the ring thread takes requests on the caller's CPU (the kernel
        // queues each request on the queue of the CPU it was issued on) and its buffers are
        // on that CPU's node; the node's serving threads answer them.
        let cpus = numaio_sys::CpuSet::from_ids(&[spec.cpu]);
        if let Err(e) = numaio_sys::set_affinity(0, &cpus) {
            eprintln!(
                "numaio mount: io_uring queue {}: cannot bind to CPU {}: {e}",
                spec.qid, spec.cpu
            );
        }
        let node = numaio_sys::getcpu().map(|c| c.node).unwrap_or(0);
        let depth = spec.depth.clamp(1, MAX_DEPTH);
        let bufs = Buffers::new(spec.payload_sz, depth, node)?;
        // SAFETY: eventfd has no memory preconditions; the result is checked below.
        let efd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if efd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `efd` is a fresh descriptor owned by nothing else.
        let wake = unsafe { OwnedFd::from_raw_fd(efd) };
        // Only this thread submits and waits, so the kernel may defer completion work
        // (the FUSE request copies into the entry) until it waits: no interrupting task-work
        // signal per request. Kernels without these flags get a plain ring.
        let entries = (2 * depth + 4).next_power_of_two() as u32;
        let ring = match IoUring::<squeue::Entry128, cqueue::Entry>::builder()
            .setup_single_issuer()
            .setup_defer_taskrun()
            .build(entries)
        {
            Ok(r) => r,
            Err(_) => IoUring::<squeue::Entry128, cqueue::Entry>::builder().build(entries)?,
        };
        // A registered file spares each command the lookup and reference count of the
        // shared descriptor table, which every queue's thread would otherwise contend on.
        ring.submitter().register_files(&[spec.dev.as_raw_fd()])?;
        let mut iov = vec![
            [libc::iovec {
                iov_base: std::ptr::null_mut(),
                iov_len: 0,
            }; 2];
            depth
        ];
        for (i, v) in iov.iter_mut().enumerate() {
            v[0] = libc::iovec {
                iov_base: bufs.header_ptr(i).cast(),
                iov_len: abi::REQ_HEADER_SZ,
            };
            v[1] = libc::iovec {
                iov_base: bufs.payload_ptr(i).cast(),
                iov_len: bufs.payload_sz,
            };
        }
        let q = Arc::new(Queue {
            qid: spec.qid,
            cpu: spec.cpu,
            bufs,
            fs: spec.fs,
            obs: spec.obs,
            served: spec.served,
            done: Mutex::new(Vec::with_capacity(depth)),
            wake,
        });
        let mut w = Worker {
            ring,
            iov,
            q,
            pool: spec.pool,
            _dev: spec.dev,
            depth,
            last: vec![(abi::CMD_REGISTER, 0); depth],
            cqes: Vec::with_capacity(2 * depth + 4),
            wake: LocalWake::new(spec.local_wakeups),
        };
        let poll = opcode::PollAdd::new(types::Fd(stop.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(STOP);
        w.push(poll.into())?;
        w.push(w.wake_sqe())?;
        for i in 0..depth {
            w.push(w.register_sqe(i))?;
        }
        w.ring.submit()?;
        // A refused registration completes at once; a good one stays pending until a
        // request arrives (those are kept for the serving loop).
        w.cqes.extend(w.ring.completion());
        if let Some(bad) = w
            .cqes
            .iter()
            .find(|c| c.result() < 0 && c.user_data() < WAKE)
        {
            return Err(io::Error::from_raw_os_error(-bad.result()));
        }
        Ok(w)
    }

    fn wake_sqe(&self) -> squeue::Entry128 {
        opcode::PollAdd::new(types::Fd(self.q.wake.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(WAKE)
            .into()
    }

    fn register_sqe(&self, i: usize) -> squeue::Entry128 {
        let e = opcode::UringCmd80::new(DEV, abi::CMD_REGISTER)
            .cmd(cmd_req(0, self.q.qid))
            .addr(Some(self.iov[i].as_ptr() as u64))
            .build()
            .user_data(i as u64);
        with_len(e, 2)
    }

    fn commit_sqe(&self, i: usize, commit_id: u64) -> squeue::Entry128 {
        opcode::UringCmd80::new(DEV, abi::CMD_COMMIT_AND_FETCH)
            .cmd(cmd_req(commit_id, self.q.qid))
            .build()
            .user_data(i as u64)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the iovecs and buffers the SQE points to belong to this ring thread's
            // queue and outlive the ring, which is dropped first.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn serve(&mut self) -> io::Result<()> {
        let depth = self.depth;
        let mut live = depth;
        let mut first_err = None;
        loop {
            if self.cqes.is_empty() {
                // The commits submitted here wake their callers on this CPU.
                self.wake.waking();
                match self.ring.submit_and_wait(1) {
                    Ok(_) => {}
                    Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                    Err(e) => return Err(e),
                }
                self.cqes.extend(self.ring.completion());
            }
            let mut cqes = std::mem::take(&mut self.cqes);
            for cqe in cqes.drain(..) {
                let ud = cqe.user_data();
                if ud == STOP {
                    return Ok(());
                }
                if ud == WAKE {
                    self.commit_served()?;
                    continue;
                }
                let i = ud as usize;
                if i >= depth {
                    continue;
                }
                match -cqe.result() {
                    // A request: answered here when it cannot wait for a device (a
                    // write only when it finds nothing to wait for), else by a serving
                    // thread of the node.
                    0 => {
                        let op = self.q.opcode(i);
                        let here = if serves_inline(op) || tried_inline(op) {
                            self.wake.serving();
                            self.q.serve_entry(i, false)
                        } else {
                            None
                        };
                        match here {
                            Some(commit_id) => {
                                self.last[i] = (abi::CMD_COMMIT_AND_FETCH, commit_id);
                                self.push(self.commit_sqe(i, commit_id))?;
                            }
                            None => {
                                // The serving thread it wakes starts on this CPU.
                                self.wake.waking();
                                self.pool.push(self.q.clone(), i)
                            }
                        }
                    }
                    libc::EINTR | libc::EAGAIN => {
                        let sqe = match self.last[i] {
                            (abi::CMD_REGISTER, _) => self.register_sqe(i),
                            (_, id) => self.commit_sqe(i, id),
                        };
                        self.push(sqe)?;
                    }
                    e => {
                        // ENOTCONN: the file system was unmounted; ECANCELED: the ring is
                        // going away. Anything else is a real failure.
                        live -= 1;
                        if e != libc::ENOTCONN && e != libc::ECANCELED && first_err.is_none() {
                            first_err = Some(io::Error::from_raw_os_error(e));
                        }
                    }
                }
            }
            self.cqes = cqes;
            if live == 0 {
                return first_err.map_or(Ok(()), Err);
            }
        }
    }

    /// Commits the replies the serving threads handed back, each fetching the entry's next
    /// request, and polls for the next hand-back.
    fn commit_served(&mut self) -> io::Result<()> {
        let mut counter = [0u8; 8];
        // SAFETY: reads 8 bytes into a live buffer from this queue's non-blocking eventfd;
        // it is reset before the list is taken, so a later hand-back wakes the ring again.
        unsafe { libc::read(self.q.wake.as_raw_fd(), counter.as_mut_ptr().cast(), 8) };
        let done = std::mem::take(&mut *self.q.done.lock().unwrap_or_else(|p| p.into_inner()));
        for (i, commit_id) in done {
            self.last[i] = (abi::CMD_COMMIT_AND_FETCH, commit_id);
            self.push(self.commit_sqe(i, commit_id))?;
        }
        self.push(self.wake_sqe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use abi::op;

    #[test]
    fn changes_are_tried_inline_and_device_waits_go_to_the_pool() {
        for o in [
            op::WRITE,
            op::SETATTR,
            op::CREATE,
            op::UNLINK,
            op::RENAME2,
            op::SETXATTR,
        ] {
            assert!(tried_inline(o) && !serves_inline(o), "{o}");
        }
        for o in [
            op::READ,
            op::FSYNC,
            op::FSYNCDIR,
            op::SYNCFS,
            op::FALLOCATE,
            op::DESTROY,
        ] {
            assert!(!tried_inline(o) && !serves_inline(o), "{o}");
        }
    }

    #[test]
    fn requests_that_may_wait_for_a_device_go_to_the_pool() {
        for o in [
            op::READ,
            op::WRITE,
            op::FSYNC,
            op::FSYNCDIR,
            op::SYNCFS,
            op::SETATTR,
            op::CREATE,
            op::MKDIR,
            op::MKNOD,
            op::SYMLINK,
            op::LINK,
            op::UNLINK,
            op::RMDIR,
            op::RENAME,
            op::RENAME2,
            op::SETXATTR,
            op::REMOVEXATTR,
            op::FALLOCATE,
            op::DESTROY,
        ] {
            assert!(!serves_inline(o), "{o}");
        }
        for o in [
            op::LOOKUP,
            op::GETATTR,
            op::OPEN,
            op::RELEASE,
            op::READDIRPLUS,
        ] {
            assert!(serves_inline(o), "{o}");
        }
    }
}
