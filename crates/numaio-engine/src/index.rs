//! The per-slice hash index from block key to slot, with fine-grained locking.
//!
//! Two layouts, chosen by [`IndexKind`] and compared by `benches/index.rs`:
//! * `Sharded`: a few dozen `RwLock<HashMap>` shards (foyer/quick_cache style);
//! * `Buckets`: Jericho's layout — one small lock per bucket, about one bucket per two slots,
//!   each bucket a short inline vector.
//!
//! Lookups run under a shared (read) lock and pin the slot *while the lock is held*; removal
//! runs under the exclusive lock and only succeeds on an unpinned slot, so a pin can never
//! reach a slot that is being reclaimed.

use crate::hugemem::HugeArray;
use crate::key::{BlockKey, SlotId};
use crate::sync::RwLock;
use crate::types::Padded;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
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
    /// Returns `None` if the key does not map to `slot`, else `Some(decide())`.
    fn remove_if(
        &self,
        key: &BlockKey,
        slot: SlotId,
        decide: &mut dyn FnMut() -> bool,
    ) -> Option<bool>;
    fn len(&self) -> usize;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hints that `key` will be looked up soon: starts loading the memory the lookup reads,
    /// so the lookups of a run of blocks overlap their cache misses instead of paying them
    /// one after another.
    fn prefetch(&self, _key: &BlockKey) {}
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

/// A compact entry: 16 bytes, so a bucket (lock + 3 inline entries) fits one cache line.
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

#[repr(align(64))]
struct Bucket(RwLock<SmallVec<[Entry; 3]>>);

pub struct BucketIndex {
    buckets: HugeArray<Bucket>,
    mask: u64,
}

impl BucketIndex {
    pub fn new(slots: usize, node: Option<u32>) -> io::Result<Self> {
        let n = (slots / 2)
            .max(1)
            .checked_next_power_of_two()
            .ok_or_else(|| no_memory("the index buckets", usize::MAX, "too many slots"))?;
        let buckets =
            HugeArray::new(n, node, |_| Bucket(RwLock::new(SmallVec::new()))).map_err(|e| {
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
    fn bucket(&self, key: &BlockKey) -> &RwLock<SmallVec<[Entry; 3]>> {
        &self.buckets[(key_hash(key) & self.mask) as usize].0
    }
}

impl Index for BucketIndex {
    fn lookup(&self, key: &BlockKey, pin: &mut dyn FnMut(SlotId)) -> Option<SlotId> {
        let g = self.bucket(key).read();
        let s = g.iter().find(|e| e.is(key))?.slot;
        pin(s);
        Some(s)
    }
    fn insert(
        &self,
        key: BlockKey,
        slot: SlotId,
        pin: &mut dyn FnMut(SlotId),
    ) -> Result<(), SlotId> {
        let mut g = self.bucket(&key).write();
        if let Some(e) = g.iter().find(|e| e.is(&key)) {
            pin(e.slot);
            return Err(e.slot);
        }
        g.push(Entry {
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
        let mut g = self.bucket(key).write();
        let pos = g.iter().position(|e| e.is(key) && e.slot == slot)?;
        let d = decide();
        if d {
            g.swap_remove(pos);
        }
        Some(d)
    }
    fn len(&self) -> usize {
        self.buckets.iter().map(|b| b.0.read().len()).sum()
    }
    #[inline]
    fn prefetch(&self, key: &BlockKey) {
        prefetch_line(self.bucket(key));
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
