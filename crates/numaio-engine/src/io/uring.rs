//! The io_uring backend: each worker owns a ring; a batch is submitted at once (so concurrent
//! misses from many threads reach the device together) and reaped with a blocking wait.
//! Short transfers are resubmitted for the remainder; a read that returns 0 is end of file.

use crate::io::{advance, Backend, IoKind, IoQueue, IoRequest};
use io_uring::{opcode, types, IoUring};
use std::io;
use std::os::fd::RawFd;

pub struct UringBackend;

impl UringBackend {
    /// Checks that io_uring works here (it is often disabled in containers).
    pub fn probe() -> io::Result<()> {
        IoUring::new(4).map(|_| ())
    }
}

struct UringQueue {
    ring: IoUring,
    depth: usize,
    /// Set once the ring failed: entries may be left in its submission queue pointing at
    /// buffers that are reused afterwards, so the ring must never be submitted again.
    poisoned: Option<io::ErrorKind>,
}

struct Pending {
    iov: Vec<libc::iovec>,
    offset: u64,
    done: usize,
    left: usize,
    result: Option<io::Result<usize>>,
    reported: bool,
}

impl UringQueue {
    fn push(&mut self, idx: usize, kind: IoKind, fd: RawFd, p: &Pending) -> io::Result<()> {
        let n = p.iov.len().min(1024) as u32;
        let off = p.offset + p.done as u64;
        let e = match kind {
            IoKind::Read => opcode::Readv::new(types::Fd(fd), p.iov.as_ptr(), n)
                .offset(off)
                .build(),
            IoKind::Write => opcode::Writev::new(types::Fd(fd), p.iov.as_ptr(), n)
                .offset(off)
                .build(),
        }
        .user_data(idx as u64);
        // SAFETY: the iovec array and the buffers live in `Pending`/the arena until the
        // completion for `idx` is reaped.
        unsafe {
            while self.ring.submission().push(&e).is_err() {
                self.ring.submit()?;
            }
        }
        Ok(())
    }
}

// SAFETY: a request is reported only after its last completion is reaped (the kernel is
// done with its buffers), and `run` returns only when nothing is in flight.
unsafe impl IoQueue for UringQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        if let Some(kind) = self.poisoned {
            for i in 0..reqs.len() {
                done(
                    i,
                    Err(io::Error::new(kind, "io_uring queue failed earlier")),
                );
            }
            return;
        }
        let mut pend: Vec<Pending> = reqs
            .iter()
            .map(|r| Pending {
                iov: r.iovecs.clone(),
                offset: r.offset,
                done: 0,
                left: r.len(),
                result: None,
                reported: false,
            })
            .collect();
        let mut inflight = 0usize;
        let mut next = 0usize;
        let mut remaining = reqs.len();
        // Requests that need resubmission after a short transfer.
        let mut again: Vec<usize> = Vec::new();
        // Set when the ring stops accepting work: nothing new is submitted, but requests
        // already in flight are still waited for, because the kernel owns their buffers until
        // their completions are reaped.
        let mut broken: Option<io::Error> = None;
        while remaining > 0 {
            while broken.is_none()
                && inflight < self.depth
                && (next < reqs.len() || !again.is_empty())
            {
                let i = if let Some(i) = again.pop() {
                    i
                } else {
                    next += 1;
                    next - 1
                };
                if pend[i].left == 0 {
                    pend[i].result = Some(Ok(0));
                    remaining -= 1;
                    continue;
                }
                if let Err(e) = self.push(i, reqs[i].kind, reqs[i].fd, &pend[i]) {
                    pend[i].result = Some(Err(e));
                    remaining -= 1;
                    continue;
                }
                inflight += 1;
            }
            // Once broken, entries still in the submission queue were never seen by the
            // kernel: wait only for those it owns.
            let owned_by_kernel = if broken.is_some() {
                inflight.saturating_sub(self.ring.submission().len())
            } else {
                inflight
            };
            if owned_by_kernel == 0 {
                break;
            }
            if let Err(e) = self.ring.submit_and_wait(1) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                // Reap what completes without the failing call; poll gently meanwhile.
                self.poisoned = Some(e.kind());
                broken.get_or_insert(e);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            let cqes: Vec<(usize, i32)> = self
                .ring
                .completion()
                .map(|c| (c.user_data() as usize, c.result()))
                .collect();
            for (i, res) in cqes {
                inflight -= 1;
                let p = &mut pend[i];
                if res == -libc::EINTR || res == -libc::EAGAIN {
                    again.push(i);
                } else if res < 0 {
                    p.result = Some(Err(io::Error::from_raw_os_error(-res)));
                    remaining -= 1;
                } else if res == 0 {
                    p.result = Some(if reqs[i].kind == IoKind::Read {
                        Ok(p.done)
                    } else {
                        Err(io::Error::new(
                            io::ErrorKind::WriteZero,
                            "write returned 0 bytes",
                        ))
                    });
                    remaining -= 1;
                } else {
                    let n = res as usize;
                    p.done += n;
                    p.left -= n.min(p.left);
                    if p.left == 0 {
                        p.result = Some(Ok(p.done));
                        remaining -= 1;
                    } else {
                        advance(&mut p.iov, n);
                        again.push(i);
                    }
                }
                if let Some(r) = pend[i].result.take() {
                    pend[i].reported = true;
                    done(i, r);
                }
            }
        }
        for (i, p) in pend.iter_mut().enumerate() {
            if !p.reported {
                let r = p.result.take();
                done(
                    i,
                    r.unwrap_or_else(|| {
                        Err(match &broken {
                            Some(e) => io::Error::new(e.kind(), format!("io_uring failed: {e}")),
                            None => io::Error::other("request not completed"),
                        })
                    }),
                );
            }
        }
    }
}

impl Backend for UringBackend {
    fn name(&self) -> String {
        "io_uring".into()
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        let depth = depth.clamp(1, 4096);
        Ok(Box::new(UringQueue {
            ring: IoUring::new(depth.next_power_of_two())?,
            depth: depth as usize,
            poisoned: None,
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        crate::io::PsyncBackend.datasync(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn read_req(fd: RawFd, offset: u64, buf: &mut [u8]) -> IoRequest {
        IoRequest {
            kind: IoKind::Read,
            fd,
            offset,
            iovecs: vec![libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut _,
                iov_len: buf.len(),
            }],
        }
    }

    #[test]
    fn batch_run_reports_every_request_including_errors() {
        if let Err(e) = UringBackend::probe() {
            numaio_testkit::skip!(numaio_testkit::needs::IO_URING, "{e}");
        }
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), vec![5u8; 8192]).unwrap();
        let file = std::fs::File::open(f.path()).unwrap();
        let mut q = UringBackend.queue(2).unwrap();
        let mut bufs: Vec<Vec<u8>> = (0..5).map(|_| vec![0u8; 4096]).collect();
        let mut reqs: Vec<IoRequest> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| read_req(file.as_raw_fd(), i as u64 * 4096, b))
            .collect();
        reqs[4].fd = -1; // EBADF
        let mut got: Vec<Option<io::Result<usize>>> = (0..5).map(|_| None).collect();
        q.run(&mut reqs, &mut |i, r| got[i] = Some(r));
        let n: Vec<_> = got[..4]
            .iter()
            .map(|r| *r.as_ref().unwrap().as_ref().unwrap())
            .collect();
        assert_eq!(n, vec![4096, 4096, 0, 0]);
        let e = got[4].as_ref().unwrap().as_ref().unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EBADF));
        assert!(bufs[..2].iter().all(|b| b.iter().all(|&x| x == 5)));
    }
}
