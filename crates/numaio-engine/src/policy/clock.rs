//! CLOCK: one reference byte per slot and a sweeping hand. A hit is a relaxed store to the
//! slot's byte (skipped if already set), so hits share no lock at all; only the evictor's hand
//! is serialised.

use super::ReplacementPolicy;
use crate::key::{BlockKey, SlotId};
use crate::slot::Reclaim;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

const ABSENT: u8 = 0;
const COLD: u8 = 1;
const REFERENCED: u8 = 2;

pub struct Clock {
    refs: Vec<AtomicU8>,
    hand: Mutex<usize>,
    resident: AtomicUsize,
}

impl Clock {
    pub fn new(slots: usize) -> Self {
        Clock {
            refs: (0..slots).map(|_| AtomicU8::new(ABSENT)).collect(),
            hand: Mutex::new(0),
            resident: AtomicUsize::new(0),
        }
    }
}

impl ReplacementPolicy for Clock {
    fn name(&self) -> &'static str {
        "clock"
    }

    fn on_hit(&self, slot: SlotId) {
        let r = &self.refs[slot as usize];
        if r.load(Ordering::Relaxed) == COLD {
            r.store(REFERENCED, Ordering::Relaxed);
        }
    }

    fn on_insert(&self, slot: SlotId, _key: BlockKey) {
        if self.refs[slot as usize].swap(COLD, Ordering::Relaxed) == ABSENT {
            self.resident.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn on_remove(&self, slot: SlotId) {
        if self.refs[slot as usize].swap(ABSENT, Ordering::Relaxed) != ABSENT {
            self.resident.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn evict(&self, want: usize, reclaim: &mut dyn FnMut(SlotId) -> Reclaim) -> usize {
        let n = self.refs.len();
        if n == 0 {
            return 0;
        }
        let mut hand = self.hand.lock();
        let mut freed = 0;
        // Two full sweeps clear every reference bit once and then find any clean victim.
        let mut budget = 2 * n + want;
        while freed < want && budget > 0 {
            budget -= 1;
            let s = *hand;
            *hand = (s + 1) % n;
            let r = &self.refs[s];
            match r.load(Ordering::Relaxed) {
                ABSENT => {}
                REFERENCED => r.store(COLD, Ordering::Relaxed),
                _ => match reclaim(s as SlotId) {
                    Reclaim::Freed | Reclaim::Gone => {
                        r.store(ABSENT, Ordering::Relaxed);
                        self.resident.fetch_sub(1, Ordering::Relaxed);
                        freed += 1;
                    }
                    Reclaim::Busy | Reclaim::Dirty => {}
                },
            }
        }
        freed
    }

    fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }
}
