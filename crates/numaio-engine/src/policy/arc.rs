//! ARC (adaptive replacement cache) as in ZFS: T1 holds blocks seen once, T2 blocks seen
//! twice or more; B1/B2 remember the keys recently evicted from each. A miss that hits a
//! ghost list moves the target size `p` of T1 towards the list that would have kept it
//! (ARC's adaptation rule); eviction takes from T1 while it exceeds `p`. A one-pass scan only
//! ever fills T1, so the hot set in T2 survives it (scan resistance).
//!
//! Hits are not applied immediately: each thread appends the slot to its stripe of an access
//! log and the log is applied to the lists in batches of `LOG_BATCH` (and before every
//! eviction), so the single ARC lock is taken once per batch instead of once per hit.

use super::dlist::Lists;
use super::ReplacementPolicy;
use crate::key::{BlockKey, SlotId};
use crate::slot::Reclaim;
use crate::types::{thread_stripe, Padded};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

const T1: usize = 0;
const T2: usize = 1;
const B1: usize = 0;
const B2: usize = 1;
const STRIPES: usize = 16;
const LOG_BATCH: usize = 64;

pub struct Arc {
    state: Mutex<State>,
    log: Vec<Padded<Mutex<Vec<SlotId>>>>,
    resident: AtomicUsize,
}

struct State {
    c: usize,
    p: usize,
    lists: Lists,
    keys: Vec<BlockKey>,
    ghosts: Lists,
    ghost_keys: Vec<BlockKey>,
    ghost_map: HashMap<BlockKey, u32>,
    ghost_free: Vec<u32>,
    /// The last ghost hit was in B2 (ARC's tie-break when |T1| == p).
    last_b2: bool,
}

impl Arc {
    pub fn new(slots: usize) -> Self {
        let c = slots.max(1);
        let none = BlockKey {
            file: crate::FileId(u32::MAX),
            block: u64::MAX,
        };
        Arc {
            state: Mutex::new(State {
                c,
                p: 0,
                lists: Lists::new(slots, 2),
                keys: vec![none; slots],
                ghosts: Lists::new(c + 1, 2),
                ghost_keys: vec![none; c + 1],
                ghost_map: HashMap::with_capacity(c + 1),
                ghost_free: (0..(c + 1) as u32).rev().collect(),
                last_b2: false,
            }),
            log: (0..STRIPES)
                .map(|_| Padded(Mutex::new(Vec::with_capacity(LOG_BATCH))))
                .collect(),
            resident: AtomicUsize::new(0),
        }
    }

    /// The current target size of T1 (for tests and stats).
    pub fn target_t1(&self) -> usize {
        self.drain_all();
        self.state.lock().p
    }

    fn drain_all(&self) {
        let mut batch = Vec::new();
        for s in &self.log {
            batch.append(&mut s.lock());
        }
        if !batch.is_empty() {
            self.state.lock().apply_hits(&batch);
        }
    }
}

impl State {
    fn apply_hits(&mut self, slots: &[SlotId]) {
        for &s in slots {
            if self.lists.list_of(s).is_some() {
                self.lists.move_mru(T2, s);
            }
        }
    }

    fn take_ghost(&mut self, list: usize) {
        if let Some(g) = self.ghosts.pop_lru(list) {
            self.ghost_map.remove(&self.ghost_keys[g as usize]);
            self.ghost_free.push(g);
        }
    }

    fn add_ghost(&mut self, list: usize, key: BlockKey) {
        if list == B1 && self.lists.len(T1) + self.ghosts.len(B1) >= self.c {
            self.take_ghost(B1);
        }
        while self.ghosts.len(B1) + self.ghosts.len(B2) >= self.c {
            let victim = if self.ghosts.len(B2) > 0 { B2 } else { B1 };
            self.take_ghost(victim);
        }
        if let Some(old) = self.ghost_map.get(&key).copied() {
            self.ghosts.remove(old);
            self.ghost_free.push(old);
            self.ghost_map.remove(&key);
        }
        let Some(g) = self.ghost_free.pop() else {
            return;
        };
        self.ghost_keys[g as usize] = key;
        self.ghost_map.insert(key, g);
        self.ghosts.push_mru(list, g);
    }
}

impl ReplacementPolicy for Arc {
    fn name(&self) -> &'static str {
        "arc"
    }

    fn on_hit(&self, slot: SlotId) {
        let stripe = &self.log[thread_stripe() % STRIPES];
        let mut log = stripe.lock();
        log.push(slot);
        if log.len() >= LOG_BATCH {
            // Applied in place (stripe lock, then the state lock; nothing takes them the
            // other way round), so the log keeps its buffer and a hit never allocates.
            self.state.lock().apply_hits(&log);
            log.clear();
        }
    }

    fn on_insert(&self, slot: SlotId, key: BlockKey) {
        let mut st = self.state.lock();
        let st = &mut *st;
        st.keys[slot as usize] = key;
        if let Some(g) = st.ghost_map.remove(&key) {
            let (b1, b2) = (st.ghosts.len(B1).max(1), st.ghosts.len(B2).max(1));
            if st.ghosts.list_of(g) == Some(B1) {
                st.p = (st.p + (b2 / b1).max(1)).min(st.c);
                st.last_b2 = false;
            } else {
                st.p = st.p.saturating_sub((b1 / b2).max(1));
                st.last_b2 = true;
            }
            st.ghosts.remove(g);
            st.ghost_free.push(g);
            st.lists.push_mru(T2, slot);
        } else {
            st.lists.push_mru(T1, slot);
        }
        self.resident.fetch_add(1, Ordering::Relaxed);
    }

    fn on_remove(&self, slot: SlotId) {
        if self.state.lock().lists.remove(slot) {
            self.resident.fetch_sub(1, Ordering::Relaxed);
        }
    }

    fn evict(&self, want: usize, reclaim: &mut dyn FnMut(SlotId) -> Reclaim) -> usize {
        self.drain_all();
        let mut st = self.state.lock();
        let mut cur = [st.lists.lru(T1), st.lists.lru(T2)];
        let mut freed = 0;
        while freed < want {
            let t1 = st.lists.len(T1);
            let prefer_t1 = t1 > 0 && (t1 > st.p || (t1 == st.p && st.last_b2));
            let list = match (prefer_t1, cur[T1].is_some(), cur[T2].is_some()) {
                (_, false, false) => break,
                (true, true, _) | (_, true, false) => T1,
                _ => T2,
            };
            let slot = cur[list].expect("chosen list has a cursor");
            cur[list] = st.lists.newer(slot);
            match reclaim(slot) {
                Reclaim::Freed => {
                    st.lists.remove(slot);
                    self.resident.fetch_sub(1, Ordering::Relaxed);
                    let key = st.keys[slot as usize];
                    st.add_ghost(if list == T1 { B1 } else { B2 }, key);
                    freed += 1;
                }
                Reclaim::Gone => {
                    st.lists.remove(slot);
                    self.resident.fetch_sub(1, Ordering::Relaxed);
                }
                Reclaim::Busy | Reclaim::Dirty => {}
            }
        }
        freed
    }

    fn resident(&self) -> usize {
        self.resident.load(Ordering::Relaxed)
    }
}
