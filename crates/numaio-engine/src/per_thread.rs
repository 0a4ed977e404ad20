//! Counters that each thread writes on its own cache line and a reader sums.
//!
//! A hit must not write a line another thread writes, nor pay a locked read-modify-write for
//! a statistic. Each thread takes a small *slot* number the first time it counts (handed back
//! when it exits, so numbers stay dense) and owns that slot's stripe of every
//! [`PerThreadCounter`]: its adds are a plain load and store. A reader sums the stripes, so a
//! merged value is exact. Threads beyond [`SLOTS`] live at once share one overflow stripe
//! updated with `fetch_add` (exact too, only slower).

use crate::types::Padded;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

/// Threads that get a stripe of their own.
pub(crate) const SLOTS: usize = 128;
/// The shared stripe of threads without one.
const OVERFLOW: usize = SLOTS;

static NEXT: AtomicUsize = AtomicUsize::new(0);
static FREED: Mutex<Vec<usize>> = Mutex::new(Vec::new());

/// A thread's slot; given back when the thread exits.
struct Owned(usize);

impl Owned {
    fn take() -> Owned {
        let reused = FREED.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let n = reused.unwrap_or_else(|| NEXT.fetch_add(1, Relaxed));
        Owned(n.min(OVERFLOW))
    }
}

impl Drop for Owned {
    fn drop(&mut self) {
        // The mutex orders this thread's last stores before the next owner's first load, so
        // the next owner continues from the values this one left.
        if self.0 < SLOTS {
            FREED.lock().unwrap_or_else(|p| p.into_inner()).push(self.0);
        }
    }
}

thread_local! {
    static SLOT: Owned = Owned::take();
}

/// The calling thread's slot (`OVERFLOW` while its thread-locals are being torn down).
#[inline]
pub(crate) fn thread_slot() -> usize {
    SLOT.try_with(|s| s.0).unwrap_or(OVERFLOW)
}

/// A counter with one cache-line-padded stripe per thread slot, summed when read.
#[derive(Debug)]
pub struct PerThreadCounter {
    stripes: Box<[Padded<AtomicU64>]>,
}

impl Default for PerThreadCounter {
    fn default() -> Self {
        PerThreadCounter {
            stripes: (0..=SLOTS).map(|_| Padded(AtomicU64::new(0))).collect(),
        }
    }
}

impl PerThreadCounter {
    #[inline]
    pub fn add(&self, n: u64) {
        let i = thread_slot();
        let c = &self.stripes[i];
        if i < SLOTS {
            // Only this thread writes this stripe: no locked instruction needed.
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
}
