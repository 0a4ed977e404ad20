//! The hit path: no allocation on a hit, counters merged from per-thread stripes that equal
//! the number of accesses exactly, and hooks told of every block once, in runs.

use numaio_engine::numa::NumaOptions;
use numaio_engine::{AccessCtx, AccessHook, Engine, FileId, OpenOptions, PolicyKind};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

const BS: usize = 4096;

/// Counts the allocations of threads that asked to be counted (the engine's own threads
/// allocate as they like; the point is what a hit costs its caller).
struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: forwards every call to the system allocator unchanged; the bookkeeping touches
// only const-initialised thread-locals without destructors, which never allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe { System.alloc(l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(p, l) }
    }
}

fn note_alloc() {
    let _ = COUNTING.try_with(|c| {
        if c.get() {
            let _ = ALLOCS.try_with(|a| a.set(a.get() + 1));
        }
    });
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// The allocations `f` makes on this thread.
fn allocations_of(f: impl FnOnce()) -> u64 {
    let before = ALLOCS.with(|a| a.get());
    COUNTING.with(|c| c.set(true));
    f();
    COUNTING.with(|c| c.set(false));
    ALLOCS.with(|a| a.get()) - before
}

fn test_file(dir: &tempfile::TempDir, blocks: usize) -> std::path::PathBuf {
    let path = dir.path().join("data");
    let data: Vec<u8> = (0..blocks * BS).map(|i| (i / 7) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    path
}

/// A cheap deterministic sequence of block numbers.
fn blocks(seed: u64, n: usize, below: u64) -> impl Iterator<Item = u64> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n).map(move |_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % below
    })
}

#[test]
fn hits_allocate_nothing_after_warm_up() {
    let dir = tempfile::tempdir().unwrap();
    let nblocks = 2048; // 8 MiB
    let path = test_file(&dir, nblocks);
    // The counter sees what it should.
    assert_eq!(
        allocations_of(|| drop(std::hint::black_box(vec![1u8; 10]))),
        1
    );
    for (policy, slices, accounting) in [
        (PolicyKind::Arc, 1, false),
        (PolicyKind::Arc, 2, true),
        (PolicyKind::SplitLru { lru_factor: 4 }, 2, false),
        (PolicyKind::Clock, 3, true),
    ] {
        let mut b = Engine::builder()
            .with_cache_bytes(4 * (nblocks * BS) as u64)
            .with_slices(slices)
            .with_range_blocks(16)
            .with_policy(policy)
            .with_direct_io(false)
            .with_queue_depth(8);
        if accounting {
            b = b.with_numa(&NumaOptions::default()).unwrap().0;
        }
        let e = b.build().unwrap();
        let f = e.open(&path, OpenOptions::read_only()).unwrap();
        let mut big = vec![0u8; 1 << 20];
        let mut small = vec![0u8; BS];
        // Warm-up: every block loaded, this thread's counters and stripes registered.
        for off in (0..nblocks * BS).step_by(1 << 20) {
            f.pread(&mut big, off as u64).unwrap();
        }
        f.pread(&mut small, 0).unwrap();
        drop(f.get(0, BS).unwrap());
        let hits_before = e.stats().hits;

        let n = allocations_of(|| {
            for b in blocks(1, 10_000, nblocks as u64) {
                assert_eq!(f.pread(&mut small, b * BS as u64).unwrap(), BS);
            }
        });
        assert_eq!(
            n, 0,
            "{policy:?}, {slices} slices: 10 000 4 KiB pread hits allocated"
        );
        let n = allocations_of(|| {
            for b in blocks(2, 10_000, nblocks as u64) {
                let p = f.get(b * BS as u64, BS).unwrap();
                assert_eq!(p.len(), BS);
            }
        });
        assert_eq!(
            n, 0,
            "{policy:?}, {slices} slices: 10 000 4 KiB get hits allocated"
        );
        let n = allocations_of(|| {
            for b in blocks(3, 1_000, (nblocks - 256) as u64) {
                assert_eq!(f.pread(&mut big, b * BS as u64).unwrap(), 1 << 20);
            }
        });
        assert_eq!(
            n, 0,
            "{policy:?}, {slices} slices: 1 000 1 MiB pread hits allocated"
        );
        // They were hits (the 1 MiB reads may be split into chunks, each block counted once).
        let st = e.stats();
        assert_eq!(st.hits - hits_before, 10_000 + 10_000 + 1_000 * 256);
        // The data is right.
        f.pread(&mut small, 5 * BS as u64).unwrap();
        assert!(small
            .iter()
            .enumerate()
            .all(|(i, &x)| x == ((5 * BS + i) / 7) as u8));
        e.close().unwrap();
    }
}

#[test]
fn merged_counters_equal_the_accesses_of_all_threads() {
    const THREADS: usize = 6;
    const M: usize = 3_000;
    let dir = tempfile::tempdir().unwrap();
    let nblocks = 1024;
    let path = test_file(&dir, nblocks);
    let (b, parts) = Engine::builder()
        .with_cache_bytes(4 * (nblocks * BS) as u64)
        .with_slices(3)
        .with_range_blocks(8)
        .with_direct_io(false)
        .with_queue_depth(8)
        .with_numa(&NumaOptions::default())
        .unwrap();
    let e = b.build().unwrap();
    let f = e.open(&path, OpenOptions::read_only()).unwrap();
    let mut all = vec![0u8; nblocks * BS];
    f.pread(&mut all, 0).unwrap();
    let (s0, a0) = (e.stats(), parts.accounting.totals());
    std::thread::scope(|sc| {
        for t in 0..THREADS {
            let f = f.clone();
            sc.spawn(move || {
                let mut small = vec![0u8; BS];
                let mut run = vec![0u8; 16 * BS];
                for b in blocks(t as u64 + 10, M, (nblocks - 16) as u64) {
                    f.pread(&mut small, b * BS as u64).unwrap();
                    // 16 blocks over two or three ranges of 8, i.e. several slices.
                    f.pread(&mut run, b * BS as u64).unwrap();
                    drop(f.get(b * BS as u64, 2 * BS).unwrap());
                }
            });
        }
    });
    let per_thread = (M * (1 + 16 + 2)) as u64;
    let want = THREADS as u64 * per_thread;
    let (s1, a1) = (e.stats(), parts.accounting.totals());
    assert_eq!(s1.hits - s0.hits, want, "slice hit counters");
    assert_eq!(s1.misses, s0.misses, "no misses after the warm-up");
    let d = a1.since(&a0);
    assert_eq!(d.hits.iter().sum::<u64>(), want, "accounting hits: {d:?}");
    assert_eq!(d.misses.iter().sum::<u64>(), 0);
    assert_eq!(d.local_accesses + d.remote_accesses, want);
    assert_eq!(d.read_bytes.iter().sum::<u64>(), want * BS as u64);
    // Per slice, the accounting agrees with the slices' own counters.
    for (i, (x, y)) in s1.slices.iter().zip(&s0.slices).enumerate() {
        assert_eq!(d.hits[i], x.hits - y.hits, "slice {i}");
    }
    e.close().unwrap();
}

/// Records every block a hook hears of, through the default `on_run`.
#[derive(Default)]
struct Recorder {
    seen: Mutex<Vec<(u64, usize, bool)>>,
}

impl AccessHook for Recorder {
    fn on_access(&self, _f: FileId, block: u64, slice: usize, hit: bool, _c: &AccessCtx) {
        self.seen.lock().unwrap().push((block, slice, hit));
    }
}

/// Counts runs and blocks through `on_run`.
#[derive(Default)]
struct RunCounter {
    runs: AtomicU64,
    blocks: AtomicU64,
}

impl AccessHook for RunCounter {
    fn on_access(&self, _f: FileId, _b: u64, _s: usize, _h: bool, _c: &AccessCtx) {
        unreachable!("the engine reports runs");
    }
    fn on_run(&self, _f: FileId, _first: u64, count: u64, _s: usize, _h: bool, _c: &AccessCtx) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        self.blocks.fetch_add(count, Ordering::Relaxed);
    }
}

#[test]
fn hooks_hear_of_every_block_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let nblocks = 64;
    let path = test_file(&dir, nblocks);
    let rec = Arc::new(Recorder::default());
    let runs = Arc::new(RunCounter::default());
    let e = Engine::builder()
        .with_cache_bytes((8 * nblocks * BS) as u64)
        .with_slices(2)
        .with_range_blocks(4)
        .with_direct_io(false)
        .with_queue_depth(8)
        .with_hook(rec.clone())
        .with_hook(runs.clone())
        .build()
        .unwrap();
    let f = e.open(&path, OpenOptions::read_only()).unwrap();
    let mut buf = vec![0u8; 10 * BS];
    // Blocks 2..4 first (misses), then 0..10: hits 2, 3, misses elsewhere, over 3 ranges.
    f.pread(&mut buf[..2 * BS], 2 * BS as u64).unwrap();
    rec.seen.lock().unwrap().clear();
    runs.runs.store(0, Ordering::Relaxed);
    runs.blocks.store(0, Ordering::Relaxed);
    f.pread(&mut buf, 0).unwrap();
    let seen = rec.seen.lock().unwrap().clone();
    let blocks: Vec<u64> = seen.iter().map(|s| s.0).collect();
    assert_eq!(blocks, (0..10).collect::<Vec<_>>(), "{seen:?}");
    for &(b, slice, hit) in &seen {
        assert_eq!(hit, b == 2 || b == 3, "block {b}: {seen:?}");
        // Range placement: ranges of 4 blocks, round robin over 2 slices from file id mod 2.
        let want = ((f.id().0 as u64 + b / 4) % 2) as usize;
        assert_eq!(slice, want, "block {b}");
    }
    // Runs: [0,1] miss, [2,3] hit (range 0), [4..8) miss (range 1), [8,10) miss (range 2).
    assert_eq!(runs.blocks.load(Ordering::Relaxed), 10);
    assert_eq!(runs.runs.load(Ordering::Relaxed), 4);
    e.close().unwrap();
}

/// `get_batch`: each range equals the file's bytes (past the end: empty; reaching past it:
/// clipped; duplicates and ranges inside a block too), a batch of hits allocates nothing,
/// every block counts once as an access, and bad batches are refused naming the file.
#[test]
fn get_batch_matches_the_file_and_hits_allocate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let nblocks = 1024;
    let path = test_file(&dir, nblocks);
    let data = std::fs::read(&path).unwrap();
    // A file that ends inside a block, for the clipped ranges.
    let size = data.len() as u64 - 1000;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(size)
        .unwrap();
    for slices in [1, 3] {
        let e = Engine::builder()
            .with_cache_bytes(2 * (nblocks * BS) as u64)
            .with_slices(slices)
            .with_range_blocks(8)
            .with_direct_io(false)
            .with_queue_depth(8)
            .build()
            .unwrap();
        let f = e.open(&path, OpenOptions::read_only()).unwrap();
        let mut reqs: Vec<(u64, usize)> = Vec::with_capacity(40);
        for round in 0..50u64 {
            reqs.clear();
            for (k, b) in blocks(round + 10, 40, nblocks as u64 + 4).enumerate() {
                let (start, len) = match k % 4 {
                    0 => (0, BS),
                    1 => (100, 300),
                    2 => (BS - 1, 1),
                    _ => (7, 0),
                };
                reqs.push((b * BS as u64 + start as u64, len));
            }
            // A duplicate and the file's last bytes, clipped.
            reqs.push(reqs[0]);
            reqs.push((size - 10, 100));
            let before = e.stats();
            let p = f.get_batch(&reqs).unwrap();
            assert_eq!(p.len(), reqs.len());
            let mut pinned = 0;
            for (i, &(off, len)) in reqs.iter().enumerate() {
                let end = (off + len as u64).min(size).max(off);
                let want = if off >= size || len == 0 {
                    &[][..]
                } else {
                    pinned += 1;
                    &data[off as usize..end as usize]
                };
                assert_eq!(p.get(i), want, "{slices} slices, round {round}, range {i}");
            }
            drop(p);
            let after = e.stats();
            assert_eq!(
                (after.hits + after.misses) - (before.hits + before.misses),
                pinned,
                "every pinned block is one access"
            );
        }
        // All blocks are loaded now: a batch of hits allocates nothing.
        reqs.clear();
        reqs.extend(blocks(99, 32, nblocks as u64 - 1).map(|b| (b * BS as u64, BS)));
        drop(f.get_batch(&reqs).unwrap());
        let n = allocations_of(|| {
            for _ in 0..1000 {
                let p = f.get_batch(&reqs).unwrap();
                assert_eq!(p.get(31).len(), BS);
            }
        });
        assert_eq!(n, 0, "{slices} slices: 1000 get_batch of 32 hits allocated");

        let err = f.get_batch(&[(0, BS), (BS as u64 - 1, 2)]).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("range 1") && msg.contains("crosses") && msg.contains("data"),
            "{msg}"
        );
        let too_many: Vec<(u64, usize)> = (0..f.max_get_bytes() / BS + 1)
            .map(|b| ((b * BS) as u64, 1))
            .collect();
        assert!(f.get_batch(&too_many).is_err());
    }
}
