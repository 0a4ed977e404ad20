//! loom model checks of the slot state machine's races (run with
//! `RUSTFLAGS="--cfg loom" cargo test -p numaio-engine --test loom_slot --release`).
//! The index is modelled by a lock around "is the key present", exactly as the slices use
//! it: pins under the read lock, reclaim under the write lock.
#![cfg(loom)]

use loom::sync::{Arc, Mutex, RwLock};
use loom::thread;
use numaio_engine::slot::{self, Reclaim, SlotState};

fn valid_slot() -> SlotState {
    let s = SlotState::new_free();
    s.claim_for_load();
    s.finish_load(true);
    s.unpin();
    s
}

#[test]
fn hit_never_pins_a_reclaimed_slot() {
    loom::model(|| {
        let st = Arc::new(valid_slot());
        let index = Arc::new(RwLock::new(true));
        let (s2, i2) = (st.clone(), index.clone());
        let hit = thread::spawn(move || {
            let present = i2.read().unwrap();
            if *present {
                let w = s2.pin();
                drop(present);
                assert_eq!(w & slot::FREE, 0, "pinned a reclaimed slot");
                assert_ne!(w & slot::VALID, 0);
                s2.unpin();
                true
            } else {
                false
            }
        });
        let r = {
            let mut present = index.write().unwrap();
            let r = st.try_reclaim();
            if r == Reclaim::Freed {
                *present = false;
            }
            r
        };
        let hit = hit.join().unwrap();
        assert!(r == Reclaim::Freed || r == Reclaim::Busy);
        if r == Reclaim::Freed {
            assert_eq!(st.load() & slot::FREE, slot::FREE);
        } else {
            assert!(hit, "reclaim was refused although nobody pinned");
        }
        assert_eq!(slot::pins(st.load()), 0);
    });
}

#[test]
fn concurrent_misses_share_one_load() {
    loom::model(|| {
        let slots = Arc::new([SlotState::new_free(), SlotState::new_free()]);
        let index: Arc<Mutex<Option<usize>>> = Arc::new(Mutex::new(None));
        let loads = Arc::new(loom::sync::atomic::AtomicUsize::new(0));
        let mut hs = Vec::new();
        for me in 0..2usize {
            let (slots, index, loads) = (slots.clone(), index.clone(), loads.clone());
            hs.push(thread::spawn(move || {
                slots[me].claim_for_load();
                let used = {
                    let mut ix = index.lock().unwrap();
                    match *ix {
                        Some(other) => {
                            slots[other].pin();
                            other
                        }
                        None => {
                            *ix = Some(me);
                            me
                        }
                    }
                };
                if used == me {
                    loads.fetch_add(1, loom::sync::atomic::Ordering::SeqCst);
                    slots[me].finish_load(true);
                } else {
                    slots[me].force_free_after_error();
                    slots[me].unpin();
                    // clashed: wait for the other's load
                    while slots[used].load() & slot::LOADING != 0 {
                        thread::yield_now();
                    }
                }
                assert_ne!(slots[used].load() & slot::VALID, 0);
                slots[used].unpin();
                used
            }));
        }
        let a = hs.pop().unwrap().join().unwrap();
        let b = hs.pop().unwrap().join().unwrap();
        assert_eq!(a, b, "both requests must use the same buffer");
        assert_eq!(
            loads.load(loom::sync::atomic::Ordering::SeqCst),
            1,
            "exactly one read"
        );
        assert_eq!(slot::pins(slots[a].load()), 0);
    });
}

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
        // write-back: snapshot, "I/O", clear if unchanged
        let gen = st.generation();
        let cleaned = {
            let mut d = dirty.lock().unwrap();
            let c = st.clear_dirty_if(gen);
            if c {
                *d = false;
            }
            c
        };
        writer.join().unwrap();
        let w = st.load();
        let in_set = *dirty.lock().unwrap();
        assert_eq!(
            w & slot::DIRTY != 0,
            in_set,
            "dirty flag and dirty set disagree"
        );
        if cleaned && w & slot::DIRTY == 0 {
            // Clean at the end: the written generation must be the last one.
            assert_eq!(st.generation(), gen, "a modification was lost");
        }
        assert!(w & slot::DIRTY != 0 || st.generation() == gen);
    });
}
