//! A backend that fails requests on command, for tests of error propagation (feature
//! `test-backends`).

use crate::io::{Backend, IoKind, IoQueue, IoRequest};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::sync::Arc;

/// Wraps a backend and fails requests on command: for tests of error propagation.
pub struct FaultBackend {
    inner: Arc<dyn Backend>,
    state: Arc<FaultState>,
}

/// The switches of a [`FaultBackend`], shared with the test.
#[derive(Default, Debug)]
pub struct FaultState {
    pub fail_writes: AtomicBool,
    pub fail_reads: AtomicBool,
    pub fail_sync: AtomicBool,
    /// The errno of injected failures; 0 means EIO.
    pub errno: AtomicI32,
    pub failed: AtomicU64,
}

impl FaultState {
    fn error(&self) -> io::Error {
        match self.errno.load(Ordering::SeqCst) {
            0 => io::Error::from_raw_os_error(libc::EIO),
            e => io::Error::from_raw_os_error(e),
        }
    }
}

impl FaultBackend {
    pub fn new(inner: Arc<dyn Backend>) -> (Self, Arc<FaultState>) {
        let state = Arc::new(FaultState::default());
        (
            FaultBackend {
                inner,
                state: state.clone(),
            },
            state,
        )
    }
}

struct FaultQueue {
    inner: Box<dyn IoQueue>,
    state: Arc<FaultState>,
}

// SAFETY: failed requests are reported without touching their buffers; the rest go to the
// inner queue, which keeps the contract for them.
unsafe impl IoQueue for FaultQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        let mut pass = Vec::new();
        let mut pass_idx = Vec::new();
        for (i, r) in reqs.iter_mut().enumerate() {
            let fail = match r.kind {
                IoKind::Read => self.state.fail_reads.load(Ordering::SeqCst),
                IoKind::Write => self.state.fail_writes.load(Ordering::SeqCst),
            };
            if fail {
                self.state.failed.fetch_add(1, Ordering::SeqCst);
                done(i, Err(self.state.error()));
            } else {
                pass_idx.push(i);
                pass.push(r.take());
            }
        }
        self.inner.run(&mut pass, &mut |j, r| {
            if let Some(&i) = pass_idx.get(j) {
                done(i, r)
            }
        });
    }
}

impl Backend for FaultBackend {
    fn name(&self) -> String {
        format!("fault({})", self.inner.name())
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(FaultQueue {
            inner: self.inner.queue(depth)?,
            state: self.state.clone(),
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        if self.state.fail_sync.load(Ordering::SeqCst) {
            self.state.failed.fetch_add(1, Ordering::SeqCst);
            return Err(self.state.error());
        }
        self.inner.datasync(fd)
    }
}
