//! Keeping the tasks a ring thread wakes on the ring's CPU.
//!
//! A ring thread is bound to its queue's CPU, and the kernel queues each request on the
//! queue of the CPU it was issued on, so a request reaches the ring thread without leaving
//! the caller's CPU. The reply would not: the commit that ends the request wakes the
//! caller while the ring thread still runs, and the scheduler then places the caller on
//! another CPU if one is idle, so every round trip paid a wake-up of an idle CPU (on a
//! 2-vCPU virtual machine, 13–20 µs of a 3 µs round trip). The same holds for a request
//! handed to a serving thread. Under `SCHED_IDLE` the ring thread's CPU counts as idle to
//! that choice, so the woken task stays there and preempts the ring thread at once.
//!
//! The ring thread therefore submits, waits and hands requests on under `SCHED_IDLE`, and
//! serves a request itself under its normal policy, so that its share of a busy CPU is
//! the normal one while it does work.

use numaio_sys::sched::{set_policy, SchedPolicy};

/// The policy a ring thread is under, and whether it switches at all.
pub(crate) struct LocalWake {
    on: bool,
    now: SchedPolicy,
}

/// Whether this process's threads may come back from `SCHED_IDLE`: tried once on a thread
/// of its own, since one that could not would stay there. Asked once per mount, before the
/// ring threads start.
pub(crate) fn may_switch() -> bool {
    std::thread::Builder::new()
        .name("fuse-uring-try".into())
        .spawn(|| set_policy(SchedPolicy::Idle).and_then(|()| set_policy(SchedPolicy::Normal)))
        .ok()
        .and_then(|h| h.join().ok())
        .is_some_and(|r| r.is_ok())
}

impl LocalWake {
    /// For the calling thread, under its normal policy: switching where `on` (which only
    /// [`may_switch`] may allow), else never.
    pub(crate) fn new(on: bool) -> LocalWake {
        LocalWake {
            on,
            now: SchedPolicy::Normal,
        }
    }

    /// Before the thread wakes someone (a commit, a hand-off) or waits.
    pub(crate) fn waking(&mut self) {
        self.set(SchedPolicy::Idle);
    }

    /// Before the thread serves a request itself.
    pub(crate) fn serving(&mut self) {
        self.set(SchedPolicy::Normal);
    }

    fn set(&mut self, p: SchedPolicy) {
        if !self.on || self.now == p {
            return;
        }
        match set_policy(p) {
            Ok(()) => self.now = p,
            Err(e) => {
                // Refused after the start's try succeeded (limits changed under us): stop
                // switching, under whichever policy the thread is now.
                eprintln!("numaio mount: io_uring ring thread stops switching policies: {e}");
                self.on = false;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaio_sys::sched::policy;

    #[test]
    fn the_thread_waits_idle_and_serves_normal() {
        std::thread::spawn(|| {
            if !may_switch() {
                eprintln!("skipped: this process's threads may not return from SCHED_IDLE");
                return;
            }
            let mut w = LocalWake::new(true);
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
            w.waking();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Idle));
            w.waking();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Idle));
            w.serving();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn turned_off_it_never_switches() {
        std::thread::spawn(|| {
            let mut w = LocalWake::new(false);
            w.waking();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
        })
        .join()
        .unwrap();
    }
}
