//! loom model checks of the slot state machine's races against the real index (run with
//! `RUSTFLAGS="--cfg numaio_loom" cargo test -p numaio-engine --test loom_slot --release`).
//! Under `--cfg numaio_loom` the index's locks and the slot word are loom's, so these models
//! explore every interleaving of the code the slices run: pins under the index's shared
//! lock, inserts and reclaims under its exclusive lock.
#![cfg(numaio_loom)]

use loom::cell::UnsafeCell;
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use numaio_engine::index::{BucketIndex, EntryPin, Hit, Index, ShardedIndex};
use numaio_engine::slot::{self, Reclaim, SlotState};
use numaio_engine::{BlockKey, FileId, SlotId};

const KEY: BlockKey = BlockKey {
    file: FileId(1),
    block: 7,
};

fn valid_slot() -> SlotState {
    let s = SlotState::new_free();
    s.claim_for_load();
    s.finish_load(true);
    s.unpin();
    s
}

fn indexes() -> Vec<fn() -> Box<dyn Index>> {
    vec![|| Box::new(BucketIndex::new(2, None).unwrap()), || {
        Box::new(ShardedIndex::new(2, 2).unwrap())
    }]
}

/// A hit (lookup + pin under the shared lock) races the evictor (reclaim under the
/// exclusive lock): the hit never pins a freed slot, and reclaim never frees a pinned one.
#[test]
fn hit_never_pins_a_reclaimed_slot() {
    for build in indexes() {
        loom::model(move || {
            let st = Arc::new(valid_slot());
            let ix: std::sync::Arc<dyn Index> = std::sync::Arc::from(build());
            ix.insert(KEY, 0, &mut |_| unreachable!()).unwrap();
            let (s2, i2) = (st.clone(), ix.clone());
            let hit = thread::spawn(move || {
                let mut word = None;
                let found = i2.lookup(&KEY, &mut |_| word = Some(s2.pin()));
                match (found, word) {
                    (Some(0), Some(w)) => {
                        assert_eq!(w & slot::FREE, 0, "pinned a reclaimed slot");
                        assert_ne!(w & slot::VALID, 0);
                        s2.unpin();
                        true
                    }
                    (None, None) => false,
                    other => panic!("lookup and pin disagree: {other:?}"),
                }
            });
            let mut r = Reclaim::Busy;
            let removed = ix.remove_if(&KEY, 0, &mut || {
                r = st.try_reclaim();
                r == Reclaim::Freed
            });
            let hit = hit.join().unwrap();
            assert_eq!(removed, Some(r == Reclaim::Freed));
            assert!(r == Reclaim::Freed || r == Reclaim::Busy);
            if r == Reclaim::Freed {
                assert_eq!(st.load() & slot::FREE, slot::FREE);
                assert_eq!(ix.lookup(&KEY, &mut |_| ()), None);
            } else {
                assert!(hit, "reclaim was refused although nobody pinned");
            }
            assert_eq!(slot::pins(st.load()), 0);
        });
    }
}

/// The slot a [`Index::lookup_hit`] found and how to unpin it: through the entry, or the
/// slot's word (pinned by the `pin` closure).
fn hit_pin(ix: &dyn Index, st: &SlotState) -> Option<(SlotId, Option<EntryPin>, u64)> {
    let mut word = None;
    match ix.lookup_hit(&KEY, 0, &mut |_| word = Some(st.pin()))? {
        Hit::Entry { slot, pin, .. } => {
            assert!(word.is_none(), "an entry hit must not pin the slot too");
            Some((slot, Some(pin), st.load()))
        }
        Hit::Slot(slot) => Some((slot, None, word.expect("a slot hit pins the slot"))),
    }
}

fn hit_unpin(ix: &dyn Index, st: &SlotState, pin: Option<EntryPin>) {
    match pin {
        Some(p) => ix.unpin_entry(p),
        None => {
            st.unpin();
        }
    }
}

/// A hit that pins through the index entry (the one-cache-line hit) races the evictor: the
/// reclaim never frees the slot while the entry pin is held, the hit never pins a freed
/// slot, and the hit's read of the buffer happens before the evictor's reuse of it (loom's
/// `UnsafeCell` reports any unsynchronised access).
#[test]
fn entry_pinned_hit_never_races_a_reclaim() {
    for build in indexes() {
        loom::model(move || {
            let st = Arc::new(valid_slot());
            let buf = Arc::new(UnsafeCell::new(1u64));
            let ix: std::sync::Arc<dyn Index> = std::sync::Arc::from(build());
            ix.insert(KEY, 0, &mut |_| unreachable!()).unwrap();
            ix.set_ready(&KEY, 0);
            let (s2, i2, b2) = (st.clone(), ix.clone(), buf.clone());
            let hit = thread::spawn(move || match hit_pin(&*i2, &s2) {
                Some((0, pin, w)) => {
                    assert_eq!(w & slot::FREE, 0, "pinned a reclaimed slot");
                    // SAFETY (test): the pin keeps the evictor from reusing the buffer.
                    let v = b2.with(|p| unsafe { *p });
                    assert_eq!(v, 1, "read a reused buffer");
                    hit_unpin(&*i2, &s2, pin);
                    true
                }
                None => false,
                other => panic!("unexpected hit {other:?}"),
            });
            let mut r = Reclaim::Busy;
            let removed = ix.remove_if(&KEY, 0, &mut || {
                r = st.try_reclaim();
                r == Reclaim::Freed
            });
            if r == Reclaim::Freed {
                // The evictor reuses the buffer for another block.
                buf.with_mut(|p| unsafe { *p = 2 });
            }
            let hit = hit.join().unwrap();
            assert_eq!(removed, Some(r == Reclaim::Freed));
            if r == Reclaim::Freed {
                assert_eq!(ix.lookup(&KEY, &mut |_| ()), None);
            } else {
                assert!(hit, "reclaim was refused although nobody pinned");
                // Busy only while pinned; unpinned now, a second reclaim succeeds.
                let again = ix.remove_if(&KEY, 0, &mut || st.try_reclaim() == Reclaim::Freed);
                assert_eq!(again, Some(true));
            }
            assert_eq!(slot::pins(st.load()), 0);
        });
    }
}

/// A lock-free entry hit races the removal of its key and the reuse of the same entry for
/// another key (an ABA on the entry): the hit either misses, or holds its own key's slot —
/// never the other key's — and no pin is leaked.
#[test]
fn entry_hit_never_takes_a_reused_entry() {
    const OTHER: BlockKey = BlockKey {
        file: FileId(2),
        block: 9,
    };
    loom::model(|| {
        let slots = Arc::new([valid_slot(), valid_slot()]);
        // One bucket: both keys use its first entry in turn.
        let ix = std::sync::Arc::new(BucketIndex::new(1, None).unwrap());
        ix.insert(KEY, 0, &mut |_| unreachable!()).unwrap();
        ix.set_ready(&KEY, 0);
        let (s2, i2) = (slots.clone(), ix.clone());
        let hit = thread::spawn(move || {
            let mut word = None;
            match i2.lookup_hit(&KEY, 0, &mut |s| word = Some(s2[s as usize].pin())) {
                None => {}
                Some(Hit::Entry { slot, pin, .. }) => {
                    assert_eq!(slot, 0, "hit the entry of another key");
                    assert_eq!(s2[0].load() & slot::FREE, 0, "pinned a reclaimed slot");
                    i2.unpin_entry(pin);
                }
                Some(Hit::Slot(s)) => {
                    assert_eq!(s, 0, "hit the entry of another key");
                    assert_eq!(word.unwrap() & slot::FREE, 0, "pinned a reclaimed slot");
                    s2[0].unpin();
                }
            }
        });
        let removed = ix.remove_if(&KEY, 0, &mut || slots[0].try_reclaim() == Reclaim::Freed);
        if removed == Some(true) {
            ix.insert(OTHER, 1, &mut |_| unreachable!()).unwrap();
            ix.set_ready(&OTHER, 1);
        }
        hit.join().unwrap();
        assert_eq!(slot::pins(slots[0].load()), 0);
        if removed == Some(true) {
            assert_eq!(ix.lookup(&KEY, &mut |_| ()), None);
            assert_eq!(
                ix.remove_if(&OTHER, 1, &mut || true),
                Some(true),
                "a pin leaked"
            );
        } else {
            assert_eq!(removed, Some(false));
            assert_eq!(
                ix.remove_if(&KEY, 0, &mut || true),
                Some(true),
                "a pin leaked"
            );
        }
    });
}

/// A hit races the end of the block's load: it either finds the block loading (and pins
/// the slot, to wait) or finds it ready and pins the entry — and then sees the loaded data.
#[test]
fn hit_during_load_sees_the_data_or_waits() {
    for build in indexes() {
        loom::model(move || {
            let st = Arc::new(SlotState::new_free());
            let buf = Arc::new(UnsafeCell::new(0u64));
            let ix: std::sync::Arc<dyn Index> = std::sync::Arc::from(build());
            st.claim_for_load();
            ix.insert(KEY, 0, &mut |_| unreachable!()).unwrap();
            let (s2, i2, b2) = (st.clone(), ix.clone(), buf.clone());
            let hit = thread::spawn(move || {
                let (slot, pin, w) = hit_pin(&*i2, &s2).expect("the key is in the index");
                assert_eq!(slot, 0);
                if pin.is_none() {
                    // Loading (or ready, for an index without entry pins): wait, as a clash.
                    while s2.load() & slot::LOADING != 0 {
                        thread::yield_now();
                    }
                } else {
                    assert_eq!(w & slot::LOADING, 0, "an entry pin on a loading block");
                }
                // SAFETY (test): the slot is loaded and pinned.
                let v = b2.with(|p| unsafe { *p });
                assert_eq!(v, 42, "read the buffer before the load finished");
                hit_unpin(&*i2, &s2, pin);
            });
            // The load: fill the buffer, end the load, publish it to entry hits.
            buf.with_mut(|p| unsafe { *p = 42 });
            st.finish_load(true);
            ix.set_ready(&KEY, 0);
            st.unpin();
            hit.join().unwrap();
            assert_eq!(slot::pins(st.load()), 0);
            assert_eq!(
                ix.remove_if(&KEY, 0, &mut || st.try_reclaim() == Reclaim::Freed),
                Some(true)
            );
        });
    }
}

/// Two misses on one block, as `Slice::insert_claimed` does them: each claims its own free
/// slot and inserts it; the loser pins the winner's slot under the index lock, returns its
/// own and waits for the load ("clashed"). Exactly one read, both use one buffer.
#[test]
fn concurrent_misses_share_one_load() {
    for build in indexes() {
        loom::model(move || {
            let slots = Arc::new([SlotState::new_free(), SlotState::new_free()]);
            let ix: std::sync::Arc<dyn Index> = std::sync::Arc::from(build());
            let loads = Arc::new(AtomicUsize::new(0));
            let mut hs = Vec::new();
            for me in 0..2u32 {
                let (slots, ix, loads) = (slots.clone(), ix.clone(), loads.clone());
                hs.push(thread::spawn(move || {
                    let mine = &slots[me as usize];
                    mine.claim_for_load();
                    let used = match ix.insert(KEY, me, &mut |s| {
                        slots[s as usize].pin();
                    }) {
                        Ok(()) => {
                            loads.fetch_add(1, Ordering::SeqCst);
                            mine.finish_load(true);
                            me
                        }
                        Err(other) => {
                            mine.force_free_after_error();
                            mine.unpin();
                            while slots[other as usize].load() & slot::LOADING != 0 {
                                thread::yield_now();
                            }
                            other
                        }
                    };
                    assert_ne!(slots[used as usize].load() & slot::VALID, 0);
                    slots[used as usize].unpin();
                    used
                }));
            }
            let a = hs.pop().unwrap().join().unwrap();
            let b = hs.pop().unwrap().join().unwrap();
            assert_eq!(a, b, "both requests must use the same buffer");
            assert_eq!(loads.load(Ordering::SeqCst), 1, "exactly one read");
            assert_eq!(slot::pins(slots[a as usize].load()), 0);
            assert_eq!(ix.lookup(&KEY, &mut |_| ()), Some(a));
        });
    }
}

/// A pwrite (fast path, or slow path under the dirty-set lock) races the end of a
/// write-back: the dirty bit and the dirty set always agree, and a block is only clean if
/// the written generation is the last one.
#[test]
fn write_during_writeback_keeps_the_block_dirty() {
    loom::model(|| {
        let st = Arc::new(valid_slot());
        // the dirty set: is the key in it
        let dirty = Arc::new(Mutex::new(false));
        {
            let mut d = dirty.lock().unwrap();
            if st.mark_dirty_locked() {
                *d = true;
            }
        }
        let (s2, d2) = (st.clone(), dirty.clone());
        let writer = thread::spawn(move || {
            if !s2.mark_dirty_fast() {
                let mut d = d2.lock().unwrap();
                if s2.mark_dirty_locked() {
                    *d = true;
                }
            }
        });
        let slot::WritebackClaim::Claimed(gen) = st.begin_writeback() else {
            panic!("a dirty block with no write-back in flight must be claimable");
        };
        let cleaned = {
            let mut d = dirty.lock().unwrap();
            let c = st.end_writeback(gen, true);
            if c {
                *d = false;
            }
            c
        };
        writer.join().unwrap();
        let w = st.load();
        assert_eq!(w & slot::WRITEBACK, 0);
        let in_set = *dirty.lock().unwrap();
        assert_eq!(
            w & slot::DIRTY != 0,
            in_set,
            "dirty flag and dirty set disagree"
        );
        if w & slot::DIRTY == 0 {
            // Clean at the end: the written generation must be the last one.
            assert!(cleaned);
            assert_eq!(st.generation(), gen, "a modification was lost");
        } else if !cleaned {
            assert_ne!(st.generation(), gen);
            assert_ne!(w & slot::DIRTY, 0);
        }
    });
}
