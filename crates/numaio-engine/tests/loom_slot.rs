//! loom model checks of the slot state machine's races against the real index (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p numaio-engine --test loom_slot --release`).
//! Under `--cfg loom` the index's locks and the slot word are loom's, so these models
//! explore every interleaving of the code the slices run: pins under the index's shared
//! lock, inserts and reclaims under its exclusive lock.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use numaio_engine::index::{BucketIndex, Index, ShardedIndex};
use numaio_engine::slot::{self, Reclaim, SlotState};
use numaio_engine::{BlockKey, FileId};

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
