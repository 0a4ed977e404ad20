//! Counters kept per slice (relaxed atomics, padded so slices do not false-share; the one a
//! hit touches is per thread, see [`PerThreadCounter`]) and the serialisable snapshot the
//! engine reports.

pub use crate::per_thread::PerThreadCounter;
use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Default, Debug)]
#[repr(align(128))]
pub struct SliceCounters {
    /// Counted on the hit path: one stripe per thread, summed when read.
    pub hits: PerThreadCounter,
    pub misses: AtomicU64,
    /// Requests that found their block under I/O and waited for it (Jericho's "clashed").
    pub clashed: AtomicU64,
    /// Requests that found no free buffer and waited for the evictor ("stalled").
    pub stalled: AtomicU64,
    pub evicted: AtomicU64,
    pub read_ios: AtomicU64,
    pub read_bytes: AtomicU64,
    pub write_ios: AtomicU64,
    pub write_bytes: AtomicU64,
    /// Blocks written back (a write I/O may carry several).
    pub written_back: AtomicU64,
    pub write_errors: AtomicU64,
}

impl SliceCounters {
    pub fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Ordering::Relaxed);
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct SliceStats {
    pub slice: usize,
    pub node: u32,
    pub capacity_blocks: usize,
    pub free_blocks: usize,
    pub dirty_blocks: usize,
    pub resident_blocks: usize,
    pub hits: u64,
    pub misses: u64,
    pub clashed: u64,
    pub stalled: u64,
    pub evicted: u64,
    pub read_ios: u64,
    pub read_bytes: u64,
    pub write_ios: u64,
    pub write_bytes: u64,
    pub written_back: u64,
    pub write_errors: u64,
}

impl SliceStats {
    pub fn fill(&mut self, c: &SliceCounters) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        self.hits = c.hits.get();
        self.misses = l(&c.misses);
        self.clashed = l(&c.clashed);
        self.stalled = l(&c.stalled);
        self.evicted = l(&c.evicted);
        self.read_ios = l(&c.read_ios);
        self.read_bytes = l(&c.read_bytes);
        self.write_ios = l(&c.write_ios);
        self.write_bytes = l(&c.write_bytes);
        self.written_back = l(&c.written_back);
        self.write_errors = l(&c.write_errors);
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct EngineStats {
    pub hits: u64,
    pub misses: u64,
    pub hit_ratio: f64,
    pub clashed: u64,
    pub stalled: u64,
    pub evicted: u64,
    pub read_ios: u64,
    pub read_bytes: u64,
    pub write_ios: u64,
    pub write_bytes: u64,
    pub written_back: u64,
    pub write_errors: u64,
    pub slices: Vec<SliceStats>,
}

impl EngineStats {
    pub fn from_slices(slices: Vec<SliceStats>) -> Self {
        let mut s = EngineStats::default();
        for x in &slices {
            s.hits += x.hits;
            s.misses += x.misses;
            s.clashed += x.clashed;
            s.stalled += x.stalled;
            s.evicted += x.evicted;
            s.read_ios += x.read_ios;
            s.read_bytes += x.read_bytes;
            s.write_ios += x.write_ios;
            s.write_bytes += x.write_bytes;
            s.written_back += x.written_back;
            s.write_errors += x.write_errors;
        }
        let t = s.hits + s.misses;
        s.hit_ratio = if t == 0 {
            0.0
        } else {
            s.hits as f64 / t as f64
        };
        s.slices = slices;
        s
    }
}
