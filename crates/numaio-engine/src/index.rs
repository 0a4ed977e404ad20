//! The per-slice hash index from block key to slot, with fine-grained locking.
//!
//! Two layouts, chosen by [`IndexKind`] and compared by `benches/index.rs`:
//! * `Sharded`: a few dozen `RwLock<HashMap>` shards (foyer/quick_cache style);
//! * `Buckets`: Jericho's layout — one small lock per bucket, about one bucket per slot, each
//!   bucket one cache line: the lock and two inline entries, more keys in an overflow list.
//!
//! Lookups run under a shared (read) lock and pin *while the lock is held*; removal runs
//! under the exclusive lock and only succeeds on an unpinned slot, so a pin can never reach a
//! slot that is being reclaimed. A hit on a loaded block in an inline entry takes no lock: it
//! pins the entry itself (a count in the entry's word) and then checks that the entry is
//! still loaded and still its key's; removal first hides a loaded entry with a CAS that
//! fails while it is pinned. Such a hit reads and writes one cache line — the bucket's —
//! instead of the bucket's and then the slot's: one memory miss, not two dependent ones.
//! Everything else (loading blocks, overflow entries, the sharded index) pins the slot's
//! state word under the lock.

use crate::hugemem::HugeArray;
use crate::key::{BlockKey, SlotId};
use crate::sync::{AtomicU32, AtomicU64, Ordering, RwLock};
use crate::types::Padded;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::io;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexKind {
    /// `shards` RwLock<HashMap> shards.
    Sharded { shards: usize },
    /// One RwLock per bucket, `slots / 2` buckets (rounded to a power of two).
    Buckets,
}

pub trait Index: Send + Sync {
    /// Finds `key`; if present calls `pin(slot)` under the shared lock and returns the slot.
    fn lookup(&self, key: &BlockKey, pin: &mut dyn FnMut(SlotId)) -> Option<SlotId>;
    /// Inserts `key -> slot` unless present; if present, pins the existing slot under the
    /// lock and returns it as `Err`.
    fn insert(
        &self,
        key: BlockKey,
        slot: SlotId,
        pin: &mut dyn FnMut(SlotId),
    ) -> Result<(), SlotId>;
    /// Under the exclusive lock: if `key` maps to `slot` and `decide()` is true, removes it.
    /// Returns `None` if the key does not map to `slot`, `Some(false)` without asking
    /// `decide` while a hit holds a pin through the entry, else `Some(decide())`.
    fn remove_if(
        &self,
        key: &BlockKey,
        slot: SlotId,
        decide: &mut dyn FnMut() -> bool,
    ) -> Option<bool>;
    /// A hit's lookup: like [`lookup`](Self::lookup), but an index that keeps pins in its
    /// entries pins a loaded block there (`Hit::Entry`: the hit touches only the index's
    /// memory) and tells whether this is the slot's first hit in eviction epoch `epoch`.
    /// Otherwise it calls `pin(slot)` under the shared lock and returns `Hit::Slot`.
    fn lookup_hit(&self, key: &BlockKey, _epoch: u32, pin: &mut dyn FnMut(SlotId)) -> Option<Hit> {
        self.lookup(key, pin).map(Hit::Slot)
    }
    /// Drops a pin taken by [`lookup_hit`](Self::lookup_hit) as `Hit::Entry`.
    fn unpin_entry(&self, _pin: EntryPin) {
        unreachable!("this index never pins through its entries")
    }
    /// Records that `key -> slot` finished loading: later hits may pin through the entry.
    fn set_ready(&self, _key: &BlockKey, _slot: SlotId) {}
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hints that `key` will be looked up soon: starts loading the memory the lookup reads,
    /// so the lookups of a run of blocks overlap their cache misses instead of paying them
    /// one after another.
    fn prefetch(&self, _key: &BlockKey) {}
    /// Where `key` would be found (an opaque position for [`lookup_hit_at`](Self::lookup_hit_at)),
    /// with that memory prefetched: a request computes the positions of all its blocks first,
    /// so their cache misses overlap, then looks them up in order.
    fn locate(&self, key: &BlockKey) -> usize {
        self.prefetch(key);
        0
    }
    /// [`lookup_hit`](Self::lookup_hit) at a position [`locate`](Self::locate) gave for `key`.
    fn lookup_hit_at(
        &self,
        _at: usize,
        key: &BlockKey,
        epoch: u32,
        pin: &mut dyn FnMut(SlotId),
    ) -> Option<Hit> {
        self.lookup_hit(key, epoch, pin)
    }
}

/// Names an index entry that holds a pin (see [`Index::lookup_hit`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntryPin(pub(crate) u32);

impl EntryPin {
    /// No entry: the pin is on the slot's own word.
    pub const NONE: EntryPin = EntryPin(u32::MAX);
}

/// How [`Index::lookup_hit`] pinned what it found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hit {
    /// Pinned through the index entry (the block is loaded); `fresh`: the slot's first hit
    /// in the given eviction epoch.
    Entry {
        slot: SlotId,
        pin: EntryPin,
        fresh: bool,
    },
    /// Pinned with the caller's `pin(slot)`.
    Slot(SlotId),
}

/// Starts loading the cache line at `p` into all cache levels (a hint: never faults).
#[inline(always)]
pub(crate) fn prefetch_line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: prefetch is a hint that never dereferences `p` architecturally, so any
        // address is allowed; SSE is part of the x86_64 baseline.
        unsafe { _mm_prefetch(p as *const i8, _MM_HINT_T0) };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A cheap multiplicative hash for block keys (keys are not attacker controlled).
#[derive(Default, Clone, Copy)]
pub struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(b as u64);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(v as u64)
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

pub fn key_hash(key: &BlockKey) -> u64 {
    let h = (key.block ^ ((key.file.0 as u64) << 40)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h ^ (h >> 29)
}

type Map = HashMap<BlockKey, SlotId, BuildHasherDefault<KeyHasher>>;

/// Builds an index for `slots` slots. Fails (never aborts) if its memory cannot be had.
pub fn build(kind: IndexKind, slots: usize, node: Option<u32>) -> io::Result<Box<dyn Index>> {
    Ok(match kind {
        IndexKind::Sharded { shards } => Box::new(ShardedIndex::new(shards, slots)?),
        IndexKind::Buckets => Box::new(BucketIndex::new(slots, node)?),
    })
}

fn no_memory(what: &str, bytes: usize, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::OutOfMemory,
        format!("cannot allocate {what} of {bytes} bytes: {e}; use a smaller cache"),
    )
}

pub struct ShardedIndex {
    shards: Vec<Padded<RwLock<Map>>>,
    mask: u64,
}

impl ShardedIndex {
    pub fn new(shards: usize, slots: usize) -> io::Result<Self> {
        let n = shards.clamp(1, 1 << 16).next_power_of_two();
        let per = slots / n + 1;
        let entry = std::mem::size_of::<(BlockKey, SlotId)>();
        let mut v = Vec::new();
        v.try_reserve_exact(n).map_err(|e| {
            no_memory(
                "the index shards",
                n * std::mem::size_of::<RwLock<Map>>(),
                e,
            )
        })?;
        for _ in 0..n {
            let mut m = Map::default();
            m.try_reserve(per)
                .map_err(|e| no_memory("an index shard", per.saturating_mul(entry), e))?;
            v.push(Padded(RwLock::new(m)));
        }
        Ok(ShardedIndex {
            shards: v,
            mask: n as u64 - 1,
        })
    }
    fn shard(&self, key: &BlockKey) -> &RwLock<Map> {
        &self.shards[((key_hash(key) >> 32) & self.mask) as usize]
    }
}

impl Index for ShardedIndex {
    fn lookup(&self, key: &BlockKey, pin: &mut dyn FnMut(SlotId)) -> Option<SlotId> {
        let g = self.shard(key).read();
        let s = *g.get(key)?;
        pin(s);
        Some(s)
    }
    fn insert(
        &self,
        key: BlockKey,
        slot: SlotId,
        pin: &mut dyn FnMut(SlotId),
    ) -> Result<(), SlotId> {
        let mut g = self.shard(&key).write();
        if let Some(&s) = g.get(&key) {
            pin(s);
            return Err(s);
        }
        g.insert(key, slot);
        Ok(())
    }
    fn remove_if(
        &self,
        key: &BlockKey,
        slot: SlotId,
        decide: &mut dyn FnMut() -> bool,
    ) -> Option<bool> {
        let mut g = self.shard(key).write();
        if g.get(key) != Some(&slot) {
            return None;
        }
        let d = decide();
        if d {
            g.remove(key);
        }
        Some(d)
    }
    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().len()).sum()
    }
}

/// An overflow entry (a bucket's third and later keys): pinned through the slot's word.
#[derive(Clone, Copy, Debug)]
struct Entry {
    block: u64,
    file: u32,
    slot: SlotId,
}

impl Entry {
    #[inline]
    fn is(&self, key: &BlockKey) -> bool {
        self.block == key.block && self.file == key.file.0
    }
}

/// Ways per bucket: what fits one cache line beside the lock.
const WAYS: usize = 2;
/// The slot of an empty way.
const EMPTY: u32 = u32::MAX;

/// One of a bucket's inline entries. Its key and slot change only under the bucket's
/// exclusive lock; `word` (pins, `READY`, the stamp) also changes without it: a hit on a
/// loaded block pins here without taking the lock, so it reads and writes nothing outside
/// the bucket's cache line and writes only the entry's word.
struct Way {
    block: AtomicU64,
    file: AtomicU32,
    slot: AtomicU32,
    /// Bits 0..24: pins taken through this entry; `READY`; bits 32..64: the eviction epoch
    /// of the last hit the policy heard of.
    word: AtomicU64,
}

const WAY_PINS: u64 = (1 << 24) - 1;
/// The slot's load finished successfully: a hit may pin through the entry.
const READY: u64 = 1 << 24;
const STAMP_SHIFT: u32 = 32;
const NO_STAMP: u64 = (u32::MAX as u64) << STAMP_SHIFT;

impl Way {
    fn empty() -> Self {
        Way {
            block: AtomicU64::new(0),
            file: AtomicU32::new(0),
            slot: AtomicU32::new(EMPTY),
            word: AtomicU64::new(0),
        }
    }
    #[inline]
    fn is(&self, key: &BlockKey) -> bool {
        self.slot.load(Ordering::Relaxed) != EMPTY
            && self.block.load(Ordering::Relaxed) == key.block
            && self.file.load(Ordering::Relaxed) == key.file.0
    }
}

/// A bucket: the lock (guarding the overflow list and the ways' keys) and two inline ways,
/// one cache line in all.
#[repr(C, align(64))]
struct Bucket {
    // Boxed: 8 bytes here instead of a `Vec`'s 24 keep the bucket within one line.
    #[allow(clippy::box_collection)]
    lock: RwLock<Option<Box<Vec<Entry>>>>,
    ways: [Way; WAYS],
}

// The point of the layout: a bucket, its lock and its inline entries are one cache line.
#[cfg(not(numaio_loom))]
const _: () = assert!(std::mem::size_of::<Bucket>() == 64);

pub struct BucketIndex {
    buckets: HugeArray<Bucket>,
    mask: u64,
}

impl BucketIndex {
    pub fn new(slots: usize, node: Option<u32>) -> io::Result<Self> {
        // About one bucket per slot: with two inline ways, most keys live inline and hit
        // through their entry; entry pins are named by a `u32`, which bounds the count.
        let n = slots
            .max(1)
            .checked_next_power_of_two()
            .filter(|n| {
                n.checked_mul(WAYS)
                    .is_some_and(|w| w < EntryPin::NONE.0 as usize)
            })
            .ok_or_else(|| no_memory("the index buckets", usize::MAX, "too many slots"))?;
        let buckets = HugeArray::new(n, node, |_| Bucket {
            lock: RwLock::new(None),
            ways: [Way::empty(), Way::empty()],
        })
        .map_err(|e| {
            no_memory(
                "the index buckets",
                n.saturating_mul(std::mem::size_of::<Bucket>()),
                e,
            )
        })?;
        Ok(BucketIndex {
            buckets,
            mask: n as u64 - 1,
        })
    }
    #[inline]
    fn bucket_no(&self, key: &BlockKey) -> usize {
        (key_hash(key) & self.mask) as usize
    }
    /// The hit lookup in bucket `bn` (the bucket of `key`).
    #[inline(always)]
    fn hit_in_bucket(
        &self,
        bn: usize,
        key: &BlockKey,
        epoch: u32,
        pin: &mut dyn FnMut(SlotId),
    ) -> Option<Hit> {
        let b = &self.buckets[bn];
        // Without the lock: pin the entry, then check that it is loaded and still this key's.
        // A remover hides a loaded entry (clears READY) with a CAS that fails while it is
        // pinned, so a pin that saw READY holds the entry until it is dropped.
        for (i, w) in b.ways.iter().enumerate() {
            if !w.is(key) {
                continue;
            }
            // Acquire: pairs with the Release that set READY, so the key, the slot and the
            // loaded data are visible.
            let old = w.word.fetch_add(1, Ordering::Acquire);
            debug_assert!(old & WAY_PINS < WAY_PINS, "entry pin count overflow");
            if old & READY == 0 || !w.is(key) {
                // Loading, being removed, or reused for another key meanwhile.
                w.word.fetch_sub(1, Ordering::Release);
                break;
            }
            let slot = w.slot.load(Ordering::Relaxed);
            let fresh = (old >> STAMP_SHIFT) as u32 != epoch;
            if fresh {
                // Once per slot and eviction epoch: record that the policy hears of it.
                let _ = w
                    .word
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| {
                        Some((x & !NO_STAMP) | ((epoch as u64) << STAMP_SHIFT))
                    });
            }
            return Some(Hit::Entry {
                slot,
                pin: EntryPin((bn * WAYS + i) as u32),
                fresh,
            });
        }
        // Loading, overflowed, or racing a remove: pin the slot under the shared lock.
        let g = b.lock.read();
        let s = match b.ways.iter().find(|w| w.is(key)) {
            Some(w) => w.slot.load(Ordering::Relaxed),
            None => g.as_ref()?.iter().find(|e| e.is(key))?.slot,
        };
        pin(s);
        Some(Hit::Slot(s))
    }

    #[inline]
    fn way_of(&self, pin: EntryPin) -> &Way {
        let i = pin.0 as usize;
        &self.buckets[i / WAYS].ways[i % WAYS]
    }
}

impl Index for BucketIndex {
    fn lookup(&self, key: &BlockKey, pin: &mut dyn FnMut(SlotId)) -> Option<SlotId> {
        let b = &self.buckets[self.bucket_no(key)];
        let g = b.lock.read();
        let s = match b.ways.iter().find(|w| w.is(key)) {
            Some(w) => w.slot.load(Ordering::Relaxed),
            None => g.as_ref()?.iter().find(|e| e.is(key))?.slot,
        };
        pin(s);
        Some(s)
    }
    #[inline]
    fn lookup_hit(&self, key: &BlockKey, epoch: u32, pin: &mut dyn FnMut(SlotId)) -> Option<Hit> {
        self.hit_in_bucket(self.bucket_no(key), key, epoch, pin)
    }
    #[inline]
    fn locate(&self, key: &BlockKey) -> usize {
        let bn = self.bucket_no(key);
        prefetch_line(&self.buckets[bn]);
        bn
    }
    #[inline]
    fn lookup_hit_at(
        &self,
        bn: usize,
        key: &BlockKey,
        epoch: u32,
        pin: &mut dyn FnMut(SlotId),
    ) -> Option<Hit> {
        // A position from another key would only cost a wrong answer, never memory safety;
        // debug builds check it.
        debug_assert_eq!(bn, self.bucket_no(key), "lookup at another key's bucket");
        self.hit_in_bucket(bn, key, epoch, pin)
    }
    #[inline]
    fn unpin_entry(&self, pin: EntryPin) {
        // Release: the caller's reads of the buffer happen before a reclaim that sees the
        // pin gone (`remove_if` loads the word with Acquire).
        let old = self.way_of(pin).word.fetch_sub(1, Ordering::Release);
        debug_assert!(old & WAY_PINS > 0, "unpin of an unpinned entry");
    }
    fn set_ready(&self, key: &BlockKey, slot: SlotId) {
        let b = &self.buckets[self.bucket_no(key)];
        let _g = b.lock.read();
        if let Some(w) = b
            .ways
            .iter()
            .find(|w| w.is(key) && w.slot.load(Ordering::Relaxed) == slot)
        {
            // Release: a hit that sees READY sees the loaded data.
            w.word.fetch_or(READY, Ordering::Release);
        }
    }
    fn insert(
        &self,
        key: BlockKey,
        slot: SlotId,
        pin: &mut dyn FnMut(SlotId),
    ) -> Result<(), SlotId> {
        let b = &self.buckets[self.bucket_no(&key)];
        let mut g = b.lock.write();
        let found = match b.ways.iter().find(|w| w.is(&key)) {
            Some(w) => Some(w.slot.load(Ordering::Relaxed)),
            None => g
                .as_ref()
                .and_then(|o| o.iter().find(|e| e.is(&key)))
                .map(|e| e.slot),
        };
        if let Some(s) = found {
            pin(s);
            return Err(s);
        }
        if let Some(w) = b
            .ways
            .iter()
            .find(|w| w.slot.load(Ordering::Relaxed) == EMPTY)
        {
            w.block.store(key.block, Ordering::Relaxed);
            w.file.store(key.file.0, Ordering::Relaxed);
            // An empty way may hold the transient pin of a hit backing off: keep the count.
            let _ = w
                .word
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |x| {
                    Some((x & WAY_PINS) | NO_STAMP)
                });
            w.slot.store(slot, Ordering::Relaxed);
            return Ok(());
        }
        g.get_or_insert_with(Default::default).push(Entry {
            block: key.block,
            file: key.file.0,
            slot,
        });
        Ok(())
    }
    fn remove_if(
        &self,
        key: &BlockKey,
        slot: SlotId,
        decide: &mut dyn FnMut() -> bool,
    ) -> Option<bool> {
        let b = &self.buckets[self.bucket_no(key)];
        let mut g = b.lock.write();
        if let Some(w) = b
            .ways
            .iter()
            .find(|w| w.is(key) && w.slot.load(Ordering::Relaxed) == slot)
        {
            // A loaded entry is hidden from lock-free hits (READY cleared) before `decide`,
            // by a CAS that fails while a hit holds it pinned: then the slot is busy and
            // `decide` is not asked. Pins on an entry that is not READY are only those of
            // hits backing off; they never use the slot.
            let mut old = w.word.load(Ordering::Acquire);
            while old & READY != 0 {
                if old & WAY_PINS != 0 {
                    return Some(false);
                }
                match w.word.compare_exchange_weak(
                    old,
                    old & !READY,
                    Ordering::AcqRel,
                    Ordering::Acquire,
                ) {
                    Ok(_) => break,
                    Err(o) => old = o,
                }
            }
            let d = decide();
            if d {
                w.slot.store(EMPTY, Ordering::Relaxed);
                w.word.fetch_and(WAY_PINS, Ordering::Relaxed);
            } else if old & READY != 0 {
                w.word.fetch_or(READY, Ordering::Release);
            }
            return Some(d);
        }
        let o = g.as_mut()?;
        let pos = o.iter().position(|e| e.is(key) && e.slot == slot)?;
        let d = decide();
        if d {
            o.swap_remove(pos);
            if o.is_empty() {
                *g = None;
            }
        }
        Some(d)
    }
    fn len(&self) -> usize {
        self.buckets
            .iter()
            .map(|b| {
                let g = b.lock.read();
                let inline = b
                    .ways
                    .iter()
                    .filter(|w| w.slot.load(Ordering::Relaxed) != EMPTY)
                    .count();
                inline + g.as_ref().map_or(0, |o| o.len())
            })
            .sum()
    }
    #[inline]
    fn prefetch(&self, key: &BlockKey) {
        prefetch_line(&self.buckets[self.bucket_no(key)]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::FileId;

    fn exercise(ix: &dyn Index) {
        let k = |b| BlockKey {
            file: FileId(1),
            block: b,
        };
        let mut pins = 0;
        for b in 0..100 {
            assert!(ix.insert(k(b), b as u32, &mut |_| pins += 1).is_ok());
        }
        assert_eq!(ix.insert(k(5), 99, &mut |_| pins += 1), Err(5));
        assert_eq!(pins, 1);
        assert_eq!(ix.lookup(&k(7), &mut |_| pins += 1), Some(7));
        assert_eq!(ix.lookup(&k(700), &mut |_| pins += 1), None);
        assert_eq!(pins, 2);
        assert_eq!(ix.remove_if(&k(7), 8, &mut || true), None);
        assert_eq!(ix.remove_if(&k(7), 7, &mut || false), Some(false));
        assert_eq!(ix.remove_if(&k(7), 7, &mut || true), Some(true));
        assert_eq!(ix.lookup(&k(7), &mut |_| ()), None);
        assert_eq!(ix.len(), 99);
    }

    #[test]
    fn sharded_and_bucket_indexes_agree() {
        exercise(&ShardedIndex::new(8, 100).unwrap());
        exercise(&BucketIndex::new(100, None).unwrap());
        exercise(&BucketIndex::new(1, None).unwrap());
    }

    #[test]
    fn loaded_inline_entries_pin_in_the_index() {
        // One bucket: keys 0 and 1 take the inline ways, key 2 overflows.
        let ix = BucketIndex::new(1, None).unwrap();
        let k = |b| BlockKey {
            file: FileId(3),
            block: b,
        };
        for b in 0..3 {
            ix.insert(k(b), b as u32 + 10, &mut |_| unreachable!())
                .unwrap();
        }
        let mut slot_pins = 0;
        // Still loading: the slot is pinned, not the entry.
        assert_eq!(
            ix.lookup_hit(&k(0), 0, &mut |_| slot_pins += 1),
            Some(Hit::Slot(10))
        );
        for b in 0..3 {
            ix.set_ready(&k(b), b as u32 + 10);
        }
        let Some(Hit::Entry { slot, pin, fresh }) =
            ix.lookup_hit(&k(1), 5, &mut |_| slot_pins += 1)
        else {
            panic!("a loaded inline entry must pin in the index");
        };
        assert_eq!((slot, fresh), (11, true));
        // The same epoch again: not fresh; another pin on the same entry.
        let Some(Hit::Entry {
            pin: pin2, fresh, ..
        }) = ix.lookup_hit(&k(1), 5, &mut |_| ())
        else {
            panic!("second entry pin");
        };
        assert!(!fresh);
        assert_eq!(pin, pin2);
        // Overflow entries pin the slot.
        assert_eq!(
            ix.lookup_hit(&k(2), 5, &mut |_| slot_pins += 1),
            Some(Hit::Slot(12))
        );
        assert_eq!(slot_pins, 2);
        // Pinned through the entry: busy, and `decide` is not asked.
        assert_eq!(ix.remove_if(&k(1), 11, &mut || unreachable!()), Some(false));
        ix.unpin_entry(pin);
        assert_eq!(ix.remove_if(&k(1), 11, &mut || unreachable!()), Some(false));
        ix.unpin_entry(pin2);
        assert_eq!(ix.remove_if(&k(1), 11, &mut || true), Some(true));
        assert_eq!(ix.lookup(&k(1), &mut |_| ()), None);
        // The freed way takes the next insert, which starts not ready.
        ix.insert(k(7), 17, &mut |_| unreachable!()).unwrap();
        assert_eq!(ix.lookup_hit(&k(7), 5, &mut |_| ()), Some(Hit::Slot(17)));
        assert_eq!(ix.len(), 3);
        assert_eq!(ix.remove_if(&k(2), 12, &mut || true), Some(true));
        assert_eq!(ix.len(), 2);
    }

    #[test]
    fn absurd_index_sizes_are_errors_not_panics() {
        // More buckets than the address space can hold: the mapping must fail cleanly.
        for slots in [usize::MAX, 1usize << 50] {
            let e = BucketIndex::new(slots, None)
                .err()
                .expect("an index this large cannot be mapped");
            assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
            assert!(e.to_string().contains("bytes"), "{e}");
        }
        let e = ShardedIndex::new(4, usize::MAX / 2)
            .err()
            .expect("shards this large cannot be allocated");
        assert_eq!(e.kind(), io::ErrorKind::OutOfMemory, "{e}");
        assert!(e.to_string().contains("index shard"), "{e}");
    }
}
