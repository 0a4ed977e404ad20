//! The write-back protocol of one slice, shared by the evictor, `fsync` and `sync_range`.
//!
//! * One write-back per block at a time: a writer claims a dirty block by setting its
//!   WRITEBACK bit ([`SlotState::begin_writeback`]); a second writer finds it in flight and
//!   either skips it (the evictor) or waits for it and looks again (`fsync`). Without this, two
//!   I/O workers could write the same block and the older write could land last, after an
//!   `fsync` had returned and marked the block clean.
//! * A `pwrite` during a write-back bumps the generation, so the end of the write-back leaves
//!   the block dirty for the next one.
//! * A failed write-back of the evictor is latched per slice ([`FailureLatch`]) so that
//!   requests stalled for a free buffer fail at once with the device's errno instead of
//!   waiting for a timeout.

use super::Slice;
use crate::error::{EngineError, WriteBackError};
use crate::key::{BlockKey, SlotId};
use crate::slot::{WritebackClaim, WRITEBACK};
use parking_lot::Mutex;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Dirty blocks of one slice claimed for writing, and the ones another writer has in flight.
/// Every listed slot is pinned by the caller.
#[derive(Default)]
pub(crate) struct Claimed {
    /// `(key, slot, generation being written)`, in key order.
    pub mine: Vec<(BlockKey, SlotId, u32)>,
    /// Blocks whose write-back by another thread is in flight.
    pub in_flight: Vec<(BlockKey, SlotId)>,
}

impl Slice {
    /// Pins and claims the dirty blocks among `keys` for a write-back.
    pub(crate) fn claim_writeback(&self, keys: &[BlockKey]) -> Claimed {
        let mut c = Claimed::default();
        for k in keys {
            let Some((slot, _)) = self.lookup_pin(k) else {
                continue;
            };
            match self.slots[slot as usize].state.begin_writeback() {
                WritebackClaim::Claimed(gen) => c.mine.push((*k, slot, gen)),
                WritebackClaim::InFlight => c.in_flight.push((*k, slot)),
                WritebackClaim::NotDirty => self.unpin(slot),
            }
        }
        c.mine.sort_by_key(|p| p.0);
        c.mine.dedup_by_key(|p| p.0);
        c
    }

    /// Whether the buffer of a block being written back held generation `gen` throughout the
    /// write: no copy into it finished since it was issued (the generation is unchanged) and
    /// none is under way (a copy marks the block before it stops being counted). Asked once
    /// the write is done and while WRITEBACK is still set, so a checksum can be recorded
    /// before another write-back of the block can begin.
    pub(crate) fn unchanged_since(&self, slot: SlotId, gen: u32) -> bool {
        let m = &self.slots[slot as usize];
        m.state.generation() == gen && m.writers.load(Ordering::SeqCst) == 0
    }

    /// Ends a claimed write-back (the caller still holds its pin); wakes `fsync`s waiting
    /// for it. Returns true if the block is clean now.
    pub(crate) fn end_writeback(&self, key: &BlockKey, slot: SlotId, gen: u32, ok: bool) -> bool {
        let clean = {
            let mut d = self.dirty.lock();
            let clean = self.slots[slot as usize].state.end_writeback(gen, ok);
            if clean {
                d.remove(key);
            }
            clean
        };
        let (m, cv) = &self.wait_stripe(slot).0;
        let _g = m.lock();
        cv.notify_all();
        clean
    }

    /// Waits until no write-back of `slot` is in flight (the caller holds a pin on it), or
    /// fails with [`EngineError::Stalled`] after the stall timeout.
    pub(crate) fn wait_writeback(&self, slot: SlotId) -> io::Result<()> {
        let st = &self.slots[slot as usize].state;
        if st.load() & WRITEBACK == 0 {
            return Ok(());
        }
        let start = Instant::now();
        let (m, cv) = &self.wait_stripe(slot).0;
        let mut g = m.lock();
        while st.load() & WRITEBACK != 0 {
            let waited = start.elapsed();
            if waited >= self.stall_timeout.max(super::MIN_IO_WAIT) {
                return Err(EngineError::Stalled {
                    slice: self.id,
                    waited,
                }
                .into());
            }
            cv.wait_for(&mut g, Duration::from_millis(100));
        }
        Ok(())
    }
}

/// The evictor's last failed write-back, with a sequence number so a stalled request can
/// tell failures that happened while it waited, and whether it still stands (no write-back
/// of the evictor succeeded since).
#[derive(Default)]
pub(crate) struct FailureLatch {
    seq: AtomicU64,
    last: Mutex<Option<WriteBackError>>,
    standing: AtomicBool,
}

impl FailureLatch {
    pub fn seq(&self) -> u64 {
        self.seq.load(Ordering::Acquire)
    }
    pub fn report(&self, e: WriteBackError) {
        *self.last.lock() = Some(e);
        self.standing.store(true, Ordering::Release);
        self.seq.fetch_add(1, Ordering::AcqRel);
    }
    /// A write-back of the evictor succeeded: earlier failures no longer stand.
    pub fn clear(&self) {
        if self.standing.load(Ordering::Relaxed) {
            self.standing.store(false, Ordering::Release);
        }
    }
    /// The failure, if one was reported after sequence number `since`, or (with
    /// `or_standing`) one reported before that still stands.
    pub fn failure(&self, since: u64, or_standing: bool) -> Option<WriteBackError> {
        if self.seq() == since && !(or_standing && self.standing.load(Ordering::Acquire)) {
            return None;
        }
        self.last.lock().clone()
    }
}
