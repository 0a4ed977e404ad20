//! The state machine of one buffer slot, packed in a single 64-bit atomic word.
//!
//! Layout: bits 0..24 pin count, then flags, and the dirty *generation* in the high 32 bits.
//! Keeping everything in one word lets a hit pin a buffer with one `fetch_add`, lets the
//! evictor reclaim it with one CAS that fails if anyone pinned it, and lets write-back clear
//! DIRTY only if no writer bumped the generation while the write was in flight.
//!
//! Pins are taken under the index shard's read lock and reclaim runs under its write lock, so
//! a reclaimed slot can never be pinned afterwards through a stale index entry.

use crate::sync::{AtomicU64, Ordering};

pub const PIN_ONE: u64 = 1;
pub const PIN_MASK: u64 = (1 << 24) - 1;
/// The buffer holds the block's data.
pub const VALID: u64 = 1 << 24;
/// A read of the block from the device is in flight (waiters are "clashed").
pub const LOADING: u64 = 1 << 25;
/// The buffer is newer than the device.
pub const DIRTY: u64 = 1 << 26;
/// The load failed; waiters return the error, the loader removes the slot.
pub const ERROR: u64 = 1 << 27;
/// Not in the index: on the free list.
pub const FREE: u64 = 1 << 28;
/// A write of the buffer to the device is in flight; only one at a time per slot, so an
/// older write can never land after a newer one.
pub const WRITEBACK: u64 = 1 << 29;
pub const GEN_SHIFT: u32 = 32;
pub const GEN_ONE: u64 = 1 << GEN_SHIFT;

/// What the evictor found when it tried to reclaim a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reclaim {
    /// The slot was clean and unpinned: it is now FREE.
    Freed,
    /// Pinned or loading: skip it this round.
    Busy,
    /// Dirty and unpinned: write it back, then it can be reclaimed.
    Dirty,
    /// Already free (stale policy entry).
    Gone,
}

/// The outcome of [`SlotState::begin_writeback`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WritebackClaim {
    /// The caller now owns the write-back of this generation.
    Claimed(u32),
    /// Another write-back of the slot is in flight.
    InFlight,
    /// Nothing to write (clean, loading or free).
    NotDirty,
}

#[derive(Debug)]
pub struct SlotState {
    word: AtomicU64,
}

impl Default for SlotState {
    fn default() -> Self {
        Self::new_free()
    }
}

impl SlotState {
    pub fn new_free() -> Self {
        SlotState {
            word: AtomicU64::new(FREE),
        }
    }

    pub fn load(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Claims a free slot for a miss: pinned once (by the loader) and LOADING.
    /// Only the owner of a FREE slot (taken off the free list) may call this.
    pub fn claim_for_load(&self) {
        let gen = self.word.load(Ordering::Relaxed) & !((1u64 << GEN_SHIFT) - 1);
        self.word.store(gen | LOADING | PIN_ONE, Ordering::Release);
    }

    /// Pins the slot (caller holds the index shard's read lock). Returns the previous word.
    pub fn pin(&self) -> u64 {
        self.word.fetch_add(PIN_ONE, Ordering::AcqRel)
    }

    pub fn unpin(&self) -> u64 {
        let old = self.word.fetch_sub(PIN_ONE, Ordering::AcqRel);
        debug_assert!(old & PIN_MASK > 0, "unpin of an unpinned slot");
        old
    }

    /// Ends a load: VALID on success, ERROR on failure.
    pub fn finish_load(&self, ok: bool) {
        let set = if ok { VALID } else { ERROR };
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            let new = (old & !LOADING) | set;
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(o) => old = o,
            }
        }
    }

    /// Tries to reclaim (caller holds the index shard's write lock for the slot's key).
    pub fn try_reclaim(&self) -> Reclaim {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            if old & FREE != 0 {
                return Reclaim::Gone;
            }
            if old & PIN_MASK != 0 || old & LOADING != 0 {
                return Reclaim::Busy;
            }
            if old & DIRTY != 0 {
                return Reclaim::Dirty;
            }
            let new = (old & !(VALID | ERROR | PIN_MASK)) | FREE;
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return Reclaim::Freed,
                Err(o) => old = o,
            }
        }
    }

    /// Removes a failed-load slot the caller owns (still pinned by the caller; other pinners
    /// will see ERROR and unpin). Called under the shard write lock after unlinking the key.
    pub fn force_free_after_error(&self) {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            let new = (old & !(VALID | ERROR | LOADING)) | FREE;
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return,
                Err(o) => old = o,
            }
        }
    }

    /// Records a modification: bumps the generation and sets DIRTY.
    /// Returns true if the slot was clean before (the caller must add it to the dirty set,
    /// and must hold the dirty-set lock when this returns true — see `mark_dirty_fast`).
    pub fn mark_dirty_locked(&self) -> bool {
        // Two steps are fine: the fast path only bumps while DIRTY is set, and write-back
        // clears DIRTY under the same dirty-set lock the caller holds.
        self.word.fetch_add(GEN_ONE, Ordering::AcqRel);
        let old = self.word.fetch_or(DIRTY, Ordering::AcqRel);
        old & DIRTY == 0
    }

    /// Lock-free path for a slot that is already dirty: bumps the generation only if DIRTY is
    /// still set. Returns false if the slot is clean (take the dirty-set lock and use
    /// `mark_dirty_locked`).
    pub fn mark_dirty_fast(&self) -> bool {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            if old & DIRTY == 0 {
                return false;
            }
            match self.word.compare_exchange_weak(
                old,
                old.wrapping_add(GEN_ONE),
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(o) => old = o,
            }
        }
    }

    /// Claims the slot for a write-back: sets WRITEBACK if the slot is dirty, loaded and no
    /// other write-back of it is in flight. Returns the generation being written.
    pub fn begin_writeback(&self) -> WritebackClaim {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            if old & WRITEBACK != 0 {
                return WritebackClaim::InFlight;
            }
            if old & DIRTY == 0 || old & (LOADING | FREE) != 0 {
                return WritebackClaim::NotDirty;
            }
            match self.word.compare_exchange_weak(
                old,
                old | WRITEBACK,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return WritebackClaim::Claimed((old >> GEN_SHIFT) as u32),
                Err(o) => old = o,
            }
        }
    }

    /// Ends the write-back begun by [`begin_writeback`](Self::begin_writeback): clears
    /// WRITEBACK, and DIRTY too if the write succeeded and nobody modified the buffer since
    /// generation `gen` was written (a write during write-back leaves the slot dirty).
    /// Caller holds the dirty-set lock. Returns true if the slot is now clean.
    pub fn end_writeback(&self, gen: u32, ok: bool) -> bool {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            debug_assert!(old & WRITEBACK != 0, "end_writeback without a write-back");
            let clean = ok && (old >> GEN_SHIFT) as u32 == gen;
            let new = if clean {
                old & !(WRITEBACK | DIRTY)
            } else {
                old & !WRITEBACK
            };
            match self
                .word
                .compare_exchange_weak(old, new, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => return new & DIRTY == 0,
                Err(o) => old = o,
            }
        }
    }

    /// The dirty generation, read before a write-back is issued.
    pub fn generation(&self) -> u32 {
        (self.load() >> GEN_SHIFT) as u32
    }

    /// After a successful write-back of the data as of generation `gen`: clears DIRTY unless
    /// a writer modified the buffer since. Caller holds the dirty-set lock.
    /// Returns true if the slot is now clean.
    pub fn clear_dirty_if(&self, gen: u32) -> bool {
        let mut old = self.word.load(Ordering::Acquire);
        loop {
            if old & DIRTY == 0 {
                return true;
            }
            if (old >> GEN_SHIFT) as u32 != gen {
                return false;
            }
            match self.word.compare_exchange_weak(
                old,
                old & !DIRTY,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => return true,
                Err(o) => old = o,
            }
        }
    }
}

pub fn pins(word: u64) -> u64 {
    word & PIN_MASK
}
