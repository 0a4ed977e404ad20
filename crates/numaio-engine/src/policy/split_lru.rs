//! Finer-LRU (Bang 2023): the active/inactive LRU pair is split into LRU_FACTOR sub-lists,
//! each with its own lock. A slot's sub-list is fixed for life by a hash of the slot number
//! (the kernel hashes the page frame; our slots are the frames), so a hit locks 1/LRU_FACTOR
//! of the policy. With LRU_FACTOR = 1 this is the classic single-lock two-list LRU.
//!
//! Reclaim (not described in the paper) walks the sub-lists round robin from a rotating
//! start, asking each for a share of the victims proportional to its size; each sub-list
//! first refills its inactive list from the tail of its active list (kept at least as long
//! as the active list), then scans its inactive list from the LRU end.

use super::dlist::Lists;
use super::ReplacementPolicy;
use crate::key::{BlockKey, SlotId};
use crate::slot::Reclaim;
use crate::types::Padded;
use parking_lot::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

const ACTIVE: usize = 0;
const INACTIVE: usize = 1;

pub struct SplitLru {
    factor: usize,
    subs: Vec<Padded<Sub>>,
    cursor: AtomicUsize,
}

struct Sub {
    /// Entries are slot / factor.
    lists: Mutex<Lists>,
    len: AtomicUsize,
}

impl SplitLru {
    pub fn new(slots: usize, lru_factor: usize) -> Self {
        let factor = lru_factor.max(1);
        let per = slots.div_ceil(factor).max(1);
        SplitLru {
            factor,
            subs: (0..factor)
                .map(|_| {
                    Padded(Sub {
                        lists: Mutex::new(Lists::new(per, 2)),
                        len: AtomicUsize::new(0),
                    })
                })
                .collect(),
            cursor: AtomicUsize::new(0),
        }
    }

    pub fn lru_factor(&self) -> usize {
        self.factor
    }

    fn locate(&self, slot: SlotId) -> (&Sub, u32) {
        let f = self.factor as u32;
        (&self.subs[(slot % f) as usize], slot / f)
    }

    /// Evicts up to `quota` from sub-list `k`; returns slots freed.
    fn evict_sub(
        &self,
        k: usize,
        quota: usize,
        reclaim: &mut dyn FnMut(SlotId) -> Reclaim,
    ) -> usize {
        let sub = &self.subs[k];
        let f = self.factor as u32;
        let mut l = sub.lists.lock();
        // Keep the inactive list at least as long as the active one (kernel-style aging).
        let mut moved = 0;
        while l.len(INACTIVE) < l.len(ACTIVE) && moved < quota * 2 + 8 {
            let Some(e) = l.pop_lru(ACTIVE) else { break };
            l.push_mru(INACTIVE, e);
            moved += 1;
        }
        let mut freed = 0;
        let mut cur = l.lru(INACTIVE);
        while freed < quota {
            let Some(e) = cur else { break };
            cur = l.newer(e);
            let slot = e * f + k as u32;
            match reclaim(slot) {
                Reclaim::Freed | Reclaim::Gone => {
                    l.remove(e);
                    sub.len.fetch_sub(1, Ordering::Relaxed);
                    freed += 1;
                }
                Reclaim::Busy | Reclaim::Dirty => {}
            }
        }
        freed
    }
}

impl ReplacementPolicy for SplitLru {
    fn name(&self) -> &'static str {
        "split-lru"
    }

    fn on_hit(&self, slot: SlotId) {
        let (sub, e) = self.locate(slot);
        let mut l = sub.lists.lock();
        if l.list_of(e).is_some() {
            l.move_mru(ACTIVE, e);
        }
    }

    fn on_insert(&self, slot: SlotId, _key: BlockKey) {
        let (sub, e) = self.locate(slot);
        let mut l = sub.lists.lock();
        if l.list_of(e).is_none() {
            sub.len.fetch_add(1, Ordering::Relaxed);
        }
        l.remove(e);
        l.push_mru(INACTIVE, e);
    }

    fn on_remove(&self, slot: SlotId) {
        let (sub, e) = self.locate(slot);
        if sub.lists.lock().remove(e) {
            sub.len.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn evict(&self, want: usize, reclaim: &mut dyn FnMut(SlotId) -> Reclaim) -> usize {
        let mut freed = 0;
        for _pass in 0..3 {
            let total: usize = self
                .subs
                .iter()
                .map(|s| s.len.load(Ordering::Relaxed))
                .sum();
            if total == 0 || freed >= want {
                break;
            }
            let start = self.cursor.fetch_add(1, Ordering::Relaxed);
            let before = freed;
            for i in 0..self.factor {
                if freed >= want {
                    break;
                }
                let k = (start + i) % self.factor;
                let size = self.subs[k].len.load(Ordering::Relaxed);
                if size == 0 {
                    continue;
                }
                // Share proportional to size, rounded up so small sub-lists still contribute.
                let quota = ((want - before) * size)
                    .div_ceil(total)
                    .min(want - freed)
                    .max(1);
                freed += self.evict_sub(k, quota, reclaim);
            }
            if freed == before {
                break;
            }
        }
        freed
    }

    fn resident(&self) -> usize {
        self.subs
            .iter()
            .map(|s| s.len.load(Ordering::Relaxed))
            .sum()
    }
}
