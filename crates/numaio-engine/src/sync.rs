//! Synchronisation primitives of the slot state machine and the index, swapped for loom's
//! under `--cfg numaio_loom` so the hit/miss/evict/write-back races can be model-checked
//! (tests/loom_*.rs).

#[cfg(numaio_loom)]
pub(crate) use loom::sync::atomic::{AtomicU32, AtomicU64, Ordering};
#[cfg(not(numaio_loom))]
pub(crate) use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

#[cfg(not(numaio_loom))]
pub(crate) use parking_lot::RwLock;

/// loom's `RwLock` with parking_lot's signatures (no poisoning), so the index code is the
/// same under both.
#[cfg(numaio_loom)]
pub(crate) struct RwLock<T>(loom::sync::RwLock<T>);

#[cfg(numaio_loom)]
impl<T> RwLock<T> {
    pub fn new(v: T) -> Self {
        RwLock(loom::sync::RwLock::new(v))
    }
    pub fn read(&self) -> loom::sync::RwLockReadGuard<'_, T> {
        self.0.read().unwrap()
    }
    pub fn write(&self) -> loom::sync::RwLockWriteGuard<'_, T> {
        self.0.write().unwrap()
    }
}
