//! Atomics used by the buffer-slot state machine, swapped for loom's under `--cfg loom` so the
//! hit/miss/evict races can be model-checked (tests/loom_slot.rs).

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicU64, Ordering};
