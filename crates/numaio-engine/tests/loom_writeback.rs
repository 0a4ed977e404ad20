//! loom model of the write-back protocol on one block: the evictor, `fsync` and a `pwrite`
//! race (run with
//! `RUSTFLAGS="--cfg numaio_loom" cargo test -p numaio-engine --test loom_writeback --release`).
//!
//! The slot word and its transitions are the engine's (`begin_writeback`, `end_writeback`,
//! `mark_dirty_*`); the device is modelled: a write takes the buffer's contents when it is
//! issued and lands on the "disk" later, so two writes in flight could land in either order.
//! `fsync` follows `Inner::flush_range`: claim the block, or wait for the write-back in
//! flight and look again; then "fdatasync" makes whatever has landed durable.
#![cfg(numaio_loom)]

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use numaio_engine::slot::{self, SlotState, WritebackClaim};

struct Block {
    state: SlotState,
    /// The buffer's contents: the value of the last pwrite.
    data: AtomicU64,
    /// Is the key in the slice's dirty set (the set's lock is this mutex).
    dirty_set: Mutex<bool>,
    disk: Mutex<u64>,
    /// Copies into the buffer under way (`SlotMeta::writers`).
    writers: AtomicU64,
}

impl Block {
    fn mark_dirty(&self) {
        if !self.state.mark_dirty_fast() {
            let mut d = self.dirty_set.lock().unwrap();
            if self.state.mark_dirty_locked() {
                *d = true;
            }
        }
    }
    /// One claimed write-back: issue (take the data), land, end.
    fn write_back(&self, gen: u32) {
        let v = self.data.load(Ordering::SeqCst);
        thread::yield_now(); // the write is in flight
        *self.disk.lock().unwrap() = v;
        let mut d = self.dirty_set.lock().unwrap();
        if self.state.end_writeback(gen, true) {
            *d = false;
        }
    }
}

fn dirty_block(value: u64) -> Block {
    let state = SlotState::new_free();
    state.claim_for_load();
    state.finish_load(true);
    state.unpin();
    let b = Block {
        state,
        data: AtomicU64::new(value),
        dirty_set: Mutex::new(false),
        disk: Mutex::new(0),
        writers: AtomicU64::new(0),
    };
    b.mark_dirty();
    b
}

fn model(preemptions: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(preemptions);
    b.check(f);
}

#[test]
fn evictor_fsync_and_pwrite_on_one_block() {
    model(3, || {
        let blk = Arc::new(dirty_block(1));
        let written = Arc::new(AtomicBool::new(false));

        let (b, w) = (blk.clone(), written.clone());
        let writer = thread::spawn(move || {
            b.data.store(2, Ordering::SeqCst);
            b.mark_dirty();
            w.store(true, Ordering::SeqCst);
        });

        let b = blk.clone();
        let evictor = thread::spawn(move || {
            // The evictor skips a block whose write-back is in flight.
            if let WritebackClaim::Claimed(gen) = b.state.begin_writeback() {
                b.write_back(gen);
            }
        });

        // fsync: what was written before it started must be durable when it returns.
        let must = if written.load(Ordering::SeqCst) { 2 } else { 1 };
        loop {
            match blk.state.begin_writeback() {
                WritebackClaim::Claimed(gen) => {
                    blk.write_back(gen);
                    break;
                }
                WritebackClaim::InFlight => {
                    while blk.state.load() & slot::WRITEBACK != 0 {
                        thread::yield_now();
                    }
                }
                WritebackClaim::NotDirty => break,
            }
        }
        let durable = *blk.disk.lock().unwrap();
        assert!(
            durable >= must,
            "fsync returned with {durable} on disk, {must} was written before it"
        );

        writer.join().unwrap();
        evictor.join().unwrap();
        let w = blk.state.load();
        assert_eq!(w & slot::WRITEBACK, 0);
        let in_set = *blk.dirty_set.lock().unwrap();
        assert_eq!(
            w & slot::DIRTY != 0,
            in_set,
            "dirty bit and dirty set disagree"
        );
        let disk = *blk.disk.lock().unwrap();
        if w & slot::DIRTY == 0 {
            assert_eq!(
                disk, 2,
                "the block is clean but the disk holds an older write"
            );
        }
        assert!(
            disk >= durable,
            "an older write landed after fsync returned"
        );
    });
}

/// Two write-backs never run at once: the second claimant finds the first in flight.
#[test]
fn one_write_back_in_flight_per_block() {
    model(3, || {
        let blk = Arc::new(dirty_block(1));
        let inflight = Arc::new(AtomicU64::new(0));
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let (b, n) = (blk.clone(), inflight.clone());
                thread::spawn(move || {
                    if let WritebackClaim::Claimed(gen) = b.state.begin_writeback() {
                        assert_eq!(
                            n.fetch_add(1, Ordering::SeqCst),
                            0,
                            "two write-backs at once"
                        );
                        n.fetch_sub(1, Ordering::SeqCst);
                        let mut d = b.dirty_set.lock().unwrap();
                        if b.state.end_writeback(gen, true) {
                            *d = false;
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(blk.state.load() & (slot::DIRTY | slot::WRITEBACK), 0);
    });
}

/// The protocol before the WRITEBACK bit (snapshot the generation, write, clear DIRTY if
/// unchanged; nobody marks the write in flight): the same model finds the older write that
/// lands after `fsync` returned, so the model above is strong enough to catch the bug.
#[test]
fn the_model_finds_the_race_of_unmarked_write_backs() {
    let found = std::panic::catch_unwind(|| {
        model(3, || {
            let blk = Arc::new(dirty_block(1));
            let unmarked_write_back = |b: &Block| {
                if b.state.load() & slot::DIRTY == 0 {
                    return;
                }
                let gen = b.state.generation();
                let v = b.data.load(Ordering::SeqCst);
                thread::yield_now();
                *b.disk.lock().unwrap() = v;
                let mut d = b.dirty_set.lock().unwrap();
                if b.state.clear_dirty_if(gen) {
                    *d = false;
                }
            };
            let b = blk.clone();
            let evictor = thread::spawn(move || unmarked_write_back(&b));
            blk.data.store(2, Ordering::SeqCst);
            blk.mark_dirty();
            unmarked_write_back(&blk); // fsync
            let durable = *blk.disk.lock().unwrap();
            evictor.join().unwrap();
            assert!(
                *blk.disk.lock().unwrap() >= durable,
                "an older write landed after fsync returned"
            );
        })
    });
    assert!(
        found.is_err(),
        "loom must find the race of unmarked write-backs"
    );
}

/// A write-back that also records a checksum: the device takes the buffer at one moment and
/// the sum reads it at another (they run side by side), so a writer copying in between makes
/// them disagree. The sum may be kept only if no copy overlapped the write
/// (`Slice::unchanged_since`: same generation, and no copy under way).
fn write_back_summed(b: &Block, gen: u32, kept: &Mutex<Option<u64>>, count_writers: bool) {
    let device = b.data.load(Ordering::SeqCst);
    thread::yield_now();
    let sum = b.data.load(Ordering::SeqCst);
    *b.disk.lock().unwrap() = device;
    let mut d = b.dirty_set.lock().unwrap();
    let quiet = !count_writers || b.writers.load(Ordering::SeqCst) == 0;
    if b.state.generation() == gen && quiet {
        assert_eq!(
            sum, device,
            "a sum was kept of data other than what the device wrote"
        );
        *kept.lock().unwrap() = Some(sum);
    } else {
        *kept.lock().unwrap() = None;
    }
    if b.state.end_writeback(gen, true) {
        *d = false;
    }
}

/// A pwrite whose copy is torn as seen from outside (it stores 2, then 3), counted as a copy
/// under way from before it starts until after it has marked the block.
fn torn_pwrite(b: &Block, count_writers: bool) {
    if count_writers {
        b.writers.fetch_add(1, Ordering::SeqCst);
    }
    b.data.store(2, Ordering::SeqCst);
    thread::yield_now();
    b.data.store(3, Ordering::SeqCst);
    b.mark_dirty();
    if count_writers {
        b.writers.fetch_sub(1, Ordering::SeqCst);
    }
}

fn sums_model(count_writers: bool) {
    model(3, move || {
        let blk = Arc::new(dirty_block(1));
        let kept = Arc::new(Mutex::new(None));
        let b = blk.clone();
        let writer = thread::spawn(move || torn_pwrite(&b, count_writers));
        if let WritebackClaim::Claimed(gen) = blk.state.begin_writeback() {
            write_back_summed(&blk, gen, &kept, count_writers);
        }
        writer.join().unwrap();
        // Whatever stays dirty is written again; a kept sum always matches the disk.
        if let WritebackClaim::Claimed(gen) = blk.state.begin_writeback() {
            write_back_summed(&blk, gen, &kept, count_writers);
        }
        assert_eq!(*blk.disk.lock().unwrap(), 3);
        let last = *kept.lock().unwrap();
        if let Some(s) = last {
            assert_eq!(s, 3, "the kept sum is of an older write");
        }
    });
}

/// Writers count themselves while they copy and mark the block before they stop counting: a
/// sum taken while a copy was under way is never kept, so a checksum file cannot disagree
/// with the data the device holds.
#[test]
fn a_sum_is_kept_only_for_the_data_written() {
    sums_model(true);
}

/// With the generation alone (a writer marks the block after its copy), a write-back that
/// overlapped the copy can keep a sum of data the device did not get: the model finds it.
#[test]
fn the_model_finds_sums_of_torn_copies() {
    let found = std::panic::catch_unwind(|| sums_model(false));
    assert!(found.is_err(), "loom must find a sum kept for a torn copy");
}
