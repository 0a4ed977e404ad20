//! One FUSE-over-io_uring queue: a worker thread bound to the queue's CPU, its ring entries'
//! buffers on that CPU's node, registration with the kernel, then the COMMIT_AND_FETCH loop.

use super::abi;
use super::dispatch;
use io_uring::{cqueue, opcode, squeue, types, IoUring};
use numaio_fs::Fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Ring entries per queue at most: each holds a payload buffer of the largest request.
pub const MAX_DEPTH: usize = 64;
/// Headers are 288 bytes; each gets its own 512-byte slot.
const HDR_STRIDE: usize = 512;
/// `user_data` of the stop poll; entries use their index.
const STOP: u64 = u64::MAX;
/// The session's `/dev/fuse`, registered as the ring's only fixed file.
const DEV: types::Fixed = types::Fixed(0);

/// A request counter on its own cache line, so queues never share one.
#[repr(align(64))]
#[derive(Default)]
pub struct Counter(pub AtomicU64);

/// What a queue worker needs.
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

/// The ring is declared before the buffers so it is closed (and its commands cancelled)
/// before the buffers are unmapped (fields drop in declaration order).
struct Worker {
    ring: IoUring<squeue::Entry128, cqueue::Entry>,
    iov: Vec<[libc::iovec; 2]>,
    bufs: Buffers,
    spec: QueueSpec,
    /// Per entry, the last command sent and its commit id, to resend after EINTR/EAGAIN.
    last: Vec<(u32, u64)>,
    cqes: Vec<cqueue::Entry>,
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
        eprintln!("numaio mount: io_uring queue {} stopped: {e}", w.spec.qid);
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
        // Bound to its CPU, the worker answers on the caller's CPU: the kernel queues each
        // request on the queue of the CPU it was issued on.
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
        // Only this thread submits and waits, so the kernel may defer completion work
        // (the FUSE request copies into the entry) until it waits: no interrupting task-work
        // signal per request. Kernels without these flags get a plain ring.
        let entries = (2 * depth + 2).next_power_of_two() as u32;
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
        let mut w = Worker {
            ring,
            iov,
            bufs,
            spec,
            last: vec![(abi::CMD_REGISTER, 0); depth],
            cqes: Vec::with_capacity(2 * depth + 2),
        };
        let poll = opcode::PollAdd::new(types::Fd(stop.as_raw_fd()), libc::POLLIN as u32)
            .build()
            .user_data(STOP);
        w.push(poll.into())?;
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
            .find(|c| c.result() < 0 && c.user_data() != STOP)
        {
            return Err(io::Error::from_raw_os_error(-bad.result()));
        }
        Ok(w)
    }

    fn register_sqe(&self, i: usize) -> squeue::Entry128 {
        let e = opcode::UringCmd80::new(DEV, abi::CMD_REGISTER)
            .cmd(cmd_req(0, self.spec.qid))
            .addr(Some(self.iov[i].as_ptr() as u64))
            .build()
            .user_data(i as u64);
        with_len(e, 2)
    }

    fn commit_sqe(&self, i: usize, commit_id: u64) -> squeue::Entry128 {
        opcode::UringCmd80::new(DEV, abi::CMD_COMMIT_AND_FETCH)
            .cmd(cmd_req(commit_id, self.spec.qid))
            .build()
            .user_data(i as u64)
    }

    fn push(&mut self, sqe: squeue::Entry128) -> io::Result<()> {
        loop {
            // SAFETY: the iovecs and buffers the SQE points to belong to this worker and
            // outlive the ring, which is dropped first.
            if unsafe { self.ring.submission().push(&sqe) }.is_ok() {
                return Ok(());
            }
            self.ring.submit()?;
        }
    }

    fn serve(&mut self) -> io::Result<()> {
        let depth = self.bufs.depth;
        let mut live = depth;
        let mut first_err = None;
        loop {
            if self.cqes.is_empty() {
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
                let i = ud as usize;
                if i >= depth {
                    continue;
                }
                match -cqe.result() {
                    0 => {
                        let commit_id = self.serve_one(i);
                        self.last[i] = (abi::CMD_COMMIT_AND_FETCH, commit_id);
                        self.push(self.commit_sqe(i, commit_id))?;
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

    /// Answers the request the kernel placed in entry `i`; returns its commit id.
    fn serve_one(&mut self, i: usize) -> u64 {
        // SAFETY: the kernel completed this entry's command, so until the next command for
        // the entry is submitted it does not touch the entry's header or payload; the two
        // ranges lie inside this worker's mapping and overlap no other entry's.
        let (hdr, payload) = unsafe {
            (
                std::slice::from_raw_parts_mut(self.bufs.header_ptr(i), abi::REQ_HEADER_SZ),
                std::slice::from_raw_parts_mut(self.bufs.payload_ptr(i), self.bufs.payload_sz),
            )
        };
        let (in_out, rest) = hdr.split_at_mut(abi::IN_OUT_SZ);
        let (op_in, ent) = rest.split_at_mut(abi::OP_IN_SZ);
        let h = abi::InHeader::parse(in_out);
        let commit_id = abi::u64_at(ent, abi::ENT_COMMIT_ID);
        let in_len = abi::u32_at(ent, abi::ENT_PAYLOAD_SZ) as usize;
        let answer = dispatch::dispatch(
            &self.spec.fs,
            &self.spec.obs,
            self.spec.cpu,
            &h,
            op_in,
            payload,
            in_len,
        );
        let (error, len) = match answer {
            Ok(n) => (0, n),
            Err(e) => (-e, 0),
        };
        abi::put_out_header(in_out, (16 + len) as u32, error, h.unique);
        ent[abi::ENT_PAYLOAD_SZ..abi::ENT_PAYLOAD_SZ + 4]
            .copy_from_slice(&(len as u32).to_le_bytes());
        if let Some(c) = self.spec.served.get(self.spec.qid as usize) {
            c.0.fetch_add(1, Ordering::Relaxed);
        }
        commit_id
    }
}
