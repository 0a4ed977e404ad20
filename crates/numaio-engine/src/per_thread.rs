//! Counters that each thread writes on its own cache line and a reader sums.
//!
//! A hit must not write a line another thread writes, nor pay a locked read-modify-write for
//! a statistic. Each thread takes a small *slot* number the first time it counts (handed back
//! when it exits, so numbers stay dense) and owns that slot's stripe of every
//! [`PerThreadCounter`]: its adds are a plain load and store. A reader sums the stripes, so a
//! merged value is exact. Threads beyond [`SLOTS`] live at once share one overflow stripe
//! updated with `fetch_add` (exact too, only slower).
//!
//! The hot path reads the slot from a constant-initialised thread-local `Cell` (no lazy-init
//! state to check, no destructor to register): one thread-pointer-relative load and one
//! compare. Taking a slot, the overflow stripe and giving the slot back on exit are all
//! behind that one compare, out of line.

use crate::types::Padded;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Threads that get a stripe of their own.
pub(crate) const SLOTS: usize = 128;
/// The shared stripe of threads without one.
const OVERFLOW: usize = SLOTS;
/// A thread that has not counted yet.
const UNSET: usize = usize::MAX;

static NEXT: AtomicUsize = AtomicUsize::new(0);
static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

thread_local! {
    /// The thread's slot, `UNSET` before its first add, `OVERFLOW` once its slot was given
    /// back (thread exit) or when none was free.
    static SLOT: Cell<usize> = const { Cell::new(UNSET) };
    /// Gives the slot back when the thread exits; set on the first add.
    static OWNED: Owned = const { Owned(Cell::new(UNSET)) };
}

/// A thread's slot; given back when the thread exits.
struct Owned(Cell<usize>);

impl Drop for Owned {
    fn drop(&mut self) {
        let n = self.0.get();
        // Later adds of this thread (other thread-locals' destructors) go to the shared
        // stripe: the slot may already belong to another thread.
        let _ = SLOT.try_with(|s| s.set(OVERFLOW));
        if n < SLOTS {
            // The mutex orders this thread's last stores before the next owner's first load,
            // so the next owner continues from the values this one left.
            FREED.lock().unwrap_or_else(|p| p.into_inner()).push(n);
        }
    }
}

/// Takes a slot for this thread and arranges for it to be given back; `OVERFLOW` if none
/// is free or the thread is exiting.
#[cold]
fn take_slot() -> usize {
    let reused = FREED.lock().unwrap_or_else(|p| p.into_inner()).pop();
    let n = reused
        .unwrap_or_else(|| NEXT.fetch_add(1, Relaxed))
        .min(OVERFLOW);
    // Registering the destructor fails while the thread's locals are torn down: then the
    // slot could never be given back, so the thread counts on the shared stripe instead.
    let n = match OWNED.try_with(|o| o.0.set(n)) {
        Ok(()) => n,
        Err(_) => {
            if n < SLOTS {
                FREED.lock().unwrap_or_else(|p| p.into_inner()).push(n);
            }
            OVERFLOW
        }
    };
    SLOT.set(n);
    n
}

/// The calling thread's slot (`OVERFLOW` while its thread-locals are being torn down).
#[inline]
pub(crate) fn thread_slot() -> usize {
    match SLOT.get() {
        UNSET => take_slot(),
        n => n,
    }
}

/// A counter with one cache-line-padded stripe per thread slot, summed when read.
#[derive(Debug)]
pub struct PerThreadCounter {
    /// A fixed length, so a slot below `SLOTS` indexes it without a bounds check.
    stripes: Box<[Padded<AtomicU64>; SLOTS + 1]>,
}

impl Default for PerThreadCounter {
    fn default() -> Self {
        PerThreadCounter {
            stripes: Box::new(std::array::from_fn(|_| Padded(AtomicU64::new(0)))),
        }
    }
}

impl PerThreadCounter {
    #[inline(always)]
    pub fn add(&self, n: u64) {
        let i = SLOT.get();
        if i < SLOTS {
            let c = &self.stripes[i];
            // Only this thread writes this stripe: no locked instruction needed.
            c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            self.add_slow(n);
        }
    }

    /// The first add of a thread, or one without a stripe of its own.
    #[cold]
    #[inline(never)]
    fn add_slow(&self, n: u64) {
        let i = thread_slot();
        let c = &self.stripes[i];
        if i < SLOTS {
            c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
        } else {
            c.fetch_add(n, Relaxed);
        }
    }

    /// The sum over all threads.
    pub fn get(&self) -> u64 {
        self.stripes
            .iter()
            .fold(0u64, |a, s| a.wrapping_add(s.load(Relaxed)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sums_are_exact_across_threads_and_slot_reuse() {
        let c = Arc::new(PerThreadCounter::default());
        // More threads than slots over the test's life (slots are reused as threads exit),
        // and more at once than slots in the second wave (the overflow stripe is shared).
        for wave in [8usize, SLOTS + 20] {
            let hs: Vec<_> = (0..wave)
                .map(|_| {
                    let c = c.clone();
                    std::thread::spawn(move || {
                        for _ in 0..1000 {
                            c.add(1);
                        }
                        c.add(5);
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        }
        assert_eq!(c.get(), (8 + SLOTS as u64 + 20) * 1005);
    }

    /// Adds from another thread-local's destructor: the slot may already be given back (or
    /// never taken) then, and the add must still count, on the shared stripe.
    #[test]
    fn adds_during_thread_exit_are_counted() {
        struct AddOnDrop(Arc<PerThreadCounter>);
        impl Drop for AddOnDrop {
            fn drop(&mut self) {
                self.0.add(7);
            }
        }
        thread_local! {
            static LATE: std::cell::RefCell<Option<AddOnDrop>> =
                const { std::cell::RefCell::new(None) };
        }
        let c = Arc::new(PerThreadCounter::default());
        for counted_before in [true, false] {
            let c2 = c.clone();
            std::thread::spawn(move || {
                if counted_before {
                    c2.add(1);
                }
                LATE.with(|l| *l.borrow_mut() = Some(AddOnDrop(c2)));
            })
            .join()
            .unwrap();
        }
        assert_eq!(c.get(), 1 + 7 + 7);
        // The slots of exited threads went back, and a new thread still counts exactly.
        let c2 = c.clone();
        std::thread::spawn(move || c2.add(3)).join().unwrap();
        assert_eq!(c.get(), 18);
    }
}
