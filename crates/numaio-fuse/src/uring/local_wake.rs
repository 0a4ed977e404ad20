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

impl LocalWake {
    /// For the calling thread: switching where `wanted` and a thread may come back from
    /// `SCHED_IDLE`, tried once on a thread of its own (one that could not would stay
    /// there), else never.
    pub(crate) fn start(wanted: bool) -> LocalWake {
        let on = wanted
            && std::thread::Builder::new()
                .name("fuse-uring-try".into())
                .spawn(|| {
                    set_policy(SchedPolicy::Idle).and_then(|()| set_policy(SchedPolicy::Normal))
                })
                .ok()
                .and_then(|h| h.join().ok())
                .is_some_and(|r| r.is_ok());
        LocalWake {
            on,
            now: SchedPolicy::Normal,
        }
    }

    /// Whether the thread switches policies.
    #[cfg(test)]
    pub(crate) fn is_on(&self) -> bool {
        self.on
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
            let mut w = LocalWake::start(true);
            if !w.is_on() {
                eprintln!("skipped: this thread may not return from SCHED_IDLE");
                return;
            }
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
            let mut w = LocalWake::start(false);
            assert!(!w.is_on());
            w.waking();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
        })
        .join()
        .unwrap();
    }
}
