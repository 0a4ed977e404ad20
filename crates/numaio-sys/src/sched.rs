//! The scheduling policy of the calling thread (`sched_setscheduler`): normal time sharing
//! or `SCHED_IDLE`.
//!
//! A server thread that answers a blocked caller wakes it. While the waker runs, the
//! scheduler treats the waker's CPU as busy and places the woken task on an idle CPU if
//! there is one; on a virtual machine that is an inter-processor interrupt to a halted
//! vCPU, several times the cost of the request. A CPU whose only runnable tasks are
//! `SCHED_IDLE` counts as idle for that choice (`sched_idle_cpu`), so a thread that wakes
//! others under `SCHED_IDLE` keeps them on its CPU, and they preempt it at once.

use crate::error::{SysError, SysResult};

/// A thread's scheduling policy, of those a thread may move between without privileges
/// (while its nice value is one its `RLIMIT_NICE` allows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SchedPolicy {
    /// `SCHED_OTHER`: normal time sharing, at the thread's nice value.
    Normal,
    /// `SCHED_IDLE`: runs only when nothing else on its CPU wants to, and lets its CPU
    /// count as idle where the scheduler places a woken task.
    Idle,
}

impl SchedPolicy {
    fn raw(self) -> libc::c_int {
        match self {
            SchedPolicy::Normal => libc::SCHED_OTHER,
            SchedPolicy::Idle => libc::SCHED_IDLE,
        }
    }
}

/// Sets the calling thread's policy. Going back from [`SchedPolicy::Idle`] to
/// [`SchedPolicy::Normal`] fails with `EPERM` where the thread's nice value is below what
/// its `RLIMIT_NICE` allows and it lacks `CAP_SYS_NICE`.
pub fn set_policy(policy: SchedPolicy) -> SysResult<()> {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: `param` is a valid sched_param for the duration of the call; pid 0 is the
    // calling thread.
    let r = unsafe { libc::sched_setscheduler(0, policy.raw(), &param) };
    if r != 0 {
        return Err(SysError::last_os(
            "sched_setscheduler",
            format!("the calling thread to {policy:?}"),
        ));
    }
    Ok(())
}

/// The calling thread's policy; `None` for one this module does not set (a real-time or
/// deadline policy, `SCHED_BATCH`).
pub fn policy() -> SysResult<Option<SchedPolicy>> {
    // SAFETY: no memory is passed; pid 0 is the calling thread.
    let r = unsafe { libc::sched_getscheduler(0) };
    if r < 0 {
        return Err(SysError::last_os(
            "sched_getscheduler",
            "the calling thread",
        ));
    }
    Ok(match r {
        libc::SCHED_OTHER => Some(SchedPolicy::Normal),
        libc::SCHED_IDLE => Some(SchedPolicy::Idle),
        _ => None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_moves_to_idle_and_back() {
        std::thread::spawn(|| {
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
            set_policy(SchedPolicy::Idle).unwrap();
            assert_eq!(policy().unwrap(), Some(SchedPolicy::Idle));
            match set_policy(SchedPolicy::Normal) {
                Ok(()) => assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal)),
                // Without CAP_SYS_NICE and with RLIMIT_NICE 0 the way back is refused.
                Err(e) => {
                    assert_eq!(e.errno(), Some(libc::EPERM), "{e}");
                    eprintln!("skipped the way back from SCHED_IDLE: {e}");
                }
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn the_policy_is_per_thread() {
        std::thread::spawn(|| {
            set_policy(SchedPolicy::Idle).unwrap();
            let other = std::thread::spawn(|| policy().unwrap()).join().unwrap();
            // A thread started later inherits it; one that was running does not change.
            assert_eq!(other, Some(SchedPolicy::Idle));
        })
        .join()
        .unwrap();
        assert_eq!(policy().unwrap(), Some(SchedPolicy::Normal));
    }
}
