//! The shutdown gate: every handle operation that changes a file (or syncs it) passes it, so
//! `close` can refuse new operations and wait for the ones under way before its final
//! write-back; reads only look at the closed flag.
//!
//! An operation adds one to its thread's stripe, then reads the closed flag; `close` sets the
//! flag, then sums the stripes. Both sides use sequentially consistent operations, so either
//! the operation sees the flag (and backs out) or `close` sees the operation (and waits for
//! it): an operation that returned `Ok` is always covered by the final write-back.

use crate::types::{thread_stripe, Padded};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const STRIPES: usize = 64;

pub(crate) struct Gate {
    closed: AtomicBool,
    /// Operations under way, striped by thread so that hits on many cores do not share a
    /// counter's cache line.
    active: Box<[Padded<AtomicUsize>; STRIPES]>,
}

impl Default for Gate {
    fn default() -> Self {
        Gate {
            closed: AtomicBool::new(false),
            active: Box::new(std::array::from_fn(|_| Padded(AtomicUsize::new(0)))),
        }
    }
}

/// An operation under way; leaving the gate on drop, so a panic cannot keep `close` waiting.
pub(crate) struct Pass<'a> {
    gate: &'a Gate,
    stripe: usize,
}

impl Drop for Pass<'_> {
    fn drop(&mut self) {
        self.gate.active[self.stripe].fetch_sub(1, Ordering::SeqCst);
    }
}

impl Gate {
    /// Enters the gate, or `None` once the engine is closed.
    #[inline]
    pub fn enter(&self) -> Option<Pass<'_>> {
        let stripe = thread_stripe() % STRIPES;
        self.active[stripe].fetch_add(1, Ordering::SeqCst);
        let pass = Pass { gate: self, stripe };
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        Some(pass)
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Refuses new operations and waits up to `limit` for those under way. Returns false if
    /// some were still running at the limit.
    pub fn close(&self, limit: Duration) -> bool {
        self.closed.store(true, Ordering::SeqCst);
        let start = Instant::now();
        let mut nap = Duration::from_micros(50);
        loop {
            let busy: usize = self.active.iter().map(|a| a.load(Ordering::SeqCst)).sum();
            if busy == 0 {
                return true;
            }
            if start.elapsed() >= limit {
                return false;
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }
}
