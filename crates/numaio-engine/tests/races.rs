//! Jericho's pipeline states observed end to end: concurrent misses on one block share a
//! single read ("clashed"), and a request that finds no free buffer waits ("stalled") until
//! buffers are released, without spinning.

mod common;
use common::*;
use numaio_engine::{
    Backend, Engine, EngineConfig, IoQueue, IoRequest, OpenOptions, PolicyKind, PsyncBackend,
};
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Delays every batch, so racing requests overlap the I/O; counts reads.
struct SlowBackend {
    reads: Arc<AtomicU64>,
}

struct SlowQueue {
    inner: Box<dyn IoQueue>,
    reads: Arc<AtomicU64>,
}

// SAFETY: every request goes to the inner queue, which completes it before reporting it.
unsafe impl IoQueue for SlowQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        std::thread::sleep(Duration::from_millis(150));
        let reads = reqs
            .iter()
            .filter(|r| r.kind() == numaio_engine::IoKind::Read)
            .count();
        self.reads.fetch_add(reads as u64, Ordering::SeqCst);
        self.inner.run(reqs, done)
    }
}

impl Backend for SlowBackend {
    fn name(&self) -> String {
        "slow".into()
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(SlowQueue {
            inner: PsyncBackend.queue(depth)?,
            reads: self.reads.clone(),
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        PsyncBackend.datasync(fd)
    }
}

fn slow_engine(slots: usize, reads: Arc<AtomicU64>) -> Engine {
    Engine::new(EngineConfig {
        cache_bytes: (slots * 4096) as u64,
        slices: Some(1),
        policy: PolicyKind::Clock,
        backend: Some(Arc::new(SlowBackend { reads })),
        ..Default::default()
    })
    .unwrap()
}

#[test]
fn concurrent_misses_on_one_block_share_one_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(2, 8192);
    std::fs::write(&path, &data).unwrap();
    let reads = Arc::new(AtomicU64::new(0));
    let engine = slow_engine(64, reads.clone());
    let f = engine.open(&path, OpenOptions::default()).unwrap();
    std::thread::scope(|s| {
        for _ in 0..4 {
            let f = f.clone();
            let data = &data;
            s.spawn(move || {
                let mut b = vec![0u8; 100];
                f.pread(&mut b, 10).unwrap();
                assert!(b == data[10..110]);
            });
        }
    });
    let st = engine.stats();
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "one device read for four concurrent misses: {st:?}"
    );
    assert_eq!(st.misses, 1, "{st:?}");
    assert_eq!(st.hits, 3, "{st:?}");
    assert!(
        st.clashed >= 1,
        "the others waited on the loading block: {st:?}"
    );
}

#[test]
fn request_without_free_buffer_stalls_until_buffers_are_released() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(3, 64 * 4096);
    std::fs::write(&path, &data).unwrap();
    let reads = Arc::new(AtomicU64::new(0));
    // 16 slots; `get` may pin 1 block at a time with this size, so pin 16 separately.
    let engine = slow_engine(16, reads);
    let f = engine.open(&path, OpenOptions::default()).unwrap();
    let pins: Vec<_> = (0..16u64).map(|b| f.get(b * 4096, 4096).unwrap()).collect();
    let t0 = Instant::now();
    let release_after = Duration::from_millis(400);
    std::thread::scope(|s| {
        let f2 = f.clone();
        let h = s.spawn(move || {
            let mut b = vec![0u8; 4096];
            f2.pread(&mut b, 40 * 4096).unwrap();
            (b, t0.elapsed())
        });
        std::thread::sleep(release_after);
        drop(pins);
        let (b, took) = h.join().unwrap();
        assert!(b == data[40 * 4096..41 * 4096]);
        assert!(
            took >= release_after,
            "the read must wait for a buffer, took {took:?}"
        );
    });
    assert!(engine.stats().stalled >= 1, "{:?}", engine.stats());
}

/// Runs `work` on its own thread and fails the test if it has not finished after `limit`
/// (a deadlock must fail CI, not hang it). The stuck thread is left behind on failure.
fn with_watchdog<T: Send + 'static>(
    what: &str,
    limit: Duration,
    work: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let _ = tx.send(r);
    });
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: not finished after {limit:?}: deadlock or livelock"),
    }
}

const BS: u64 = 4096;

/// The word written at `word` of block `block` by `writer`'s `seq`-th write: every 8-byte
/// word names its block, so a block landing at the wrong place or stale garbage is seen.
fn stamp(block: u64, writer: u64, seq: u64) -> u64 {
    (block << 32) | (writer << 24) | (seq & 0xff_ffff)
}

fn stamped(first_block: u64, blocks: u64, writer: u64, seq: u64) -> Vec<u8> {
    let mut v = Vec::with_capacity((blocks * BS) as usize);
    for b in first_block..first_block + blocks {
        for _ in 0..BS / 8 {
            v.extend_from_slice(&stamp(b, writer, seq).to_le_bytes());
        }
    }
    v
}

/// Every word of `data` (starting at file offset `off`, word aligned) names its own block.
fn check_stamps(data: &[u8], off: u64, what: &str) {
    for (i, w) in data.chunks_exact(8).enumerate() {
        let pos = off + i as u64 * 8;
        let v = u64::from_le_bytes(w.try_into().unwrap());
        assert_eq!(
            v >> 32,
            pos / BS,
            "{what}: word at offset {pos} belongs to block {} (value {v:#x})",
            v >> 32
        );
    }
}

struct RaceSetup {
    threads: u64,
    ops: u64,
    /// Blocks per write (the engine caps one acquire at cache/16 blocks).
    write_blocks: u64,
    /// Blocks in the file; writes overlap heavily when this is a few write sizes.
    file_blocks: u64,
    cache_slots: usize,
    slices: usize,
    /// Also unaligned writes (partial blocks: loads instead of fills), reads and fsyncs.
    mixed: bool,
}

fn race(setup: RaceSetup) {
    let RaceSetup {
        threads,
        ops,
        write_blocks,
        file_blocks,
        cache_slots,
        slices,
        mixed,
    } = setup;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    std::fs::write(&path, stamped(0, file_blocks, 0, 0)).unwrap();
    let engine = Arc::new(
        Engine::new(EngineConfig {
            cache_bytes: (cache_slots * slices) as u64 * BS,
            slices: Some(slices),
            policy: PolicyKind::Clock,
            range_blocks: 8,
            queue_depth: 8,
            io_workers_per_slice: 2,
            ..Default::default()
        })
        .unwrap(),
    );
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let max_write = f.max_get_bytes() as u64 / BS;
    assert!(
        write_blocks <= max_write,
        "test setup: {write_blocks} blocks > {max_write}"
    );
    let mut hs = Vec::new();
    for t in 0..threads {
        let f = f.clone();
        hs.push(std::thread::spawn(move || {
            let mut x = t.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
            for seq in 1..=ops {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let start = x % (file_blocks - write_blocks + 1);
                match if mixed { x >> 60 } else { 0 } {
                    // Read back a range: every word must name its block.
                    12 | 13 => {
                        let mut b = vec![0u8; (write_blocks * BS) as usize];
                        let n = f.pread(&mut b, start * BS).unwrap();
                        check_stamps(&b[..n], start * BS, "pread during writes");
                    }
                    14 => f.fsync().unwrap(),
                    // Unaligned: whole words, but partial first and last blocks.
                    15 => {
                        let d = stamped(start, write_blocks, t + 1, seq);
                        let cut = ((x >> 20) % (BS / 8)) * 8;
                        let len = d.len() as u64 - cut - 8 * ((x >> 40) % 8);
                        f.pwrite(&d[cut as usize..(cut + len) as usize], start * BS + cut)
                            .unwrap();
                    }
                    _ => {
                        let d = stamped(start, write_blocks, t + 1, seq);
                        f.pwrite(&d, start * BS).unwrap();
                    }
                }
            }
        }));
    }
    for h in hs {
        h.join().unwrap();
    }
    f.fsync().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert_eq!(disk.len() as u64, file_blocks * BS);
    check_stamps(&disk, 0, "file after fsync");
    let mut cached = vec![0u8; disk.len()];
    assert_eq!(f.pread(&mut cached, 0).unwrap(), disk.len());
    assert!(cached == disk, "the cache and the file differ after fsync");
    let st = engine.stats();
    if file_blocks > (cache_slots * slices) as u64 {
        assert!(st.evicted > 0, "the cache is small enough to evict: {st:?}");
    }
    assert!(st.written_back > 0, "{st:?}");
}

#[test]
fn overlapping_multi_block_writes_do_not_deadlock() {
    // The reported hang: two writers of 16-block writes over a file larger than the cache,
    // so writes miss and insert blocks that stay LOADING until the copy.
    with_watchdog(
        "2 writers, 16-block writes",
        Duration::from_secs(60),
        || {
            race(RaceSetup {
                threads: 2,
                ops: 400,
                write_blocks: 16,
                file_blocks: 512,
                cache_slots: 256,
                slices: 1,
                mixed: false,
            })
        },
    );
}

#[test]
fn multi_block_writers_with_eviction_do_not_deadlock() {
    with_watchdog(
        "4 writers, 16-block writes, evicting",
        Duration::from_secs(60),
        || {
            race(RaceSetup {
                threads: 4,
                ops: 300,
                write_blocks: 16,
                file_blocks: 1024,
                cache_slots: 256,
                slices: 1,
                mixed: false,
            })
        },
    );
}

#[test]
fn many_writers_on_a_small_cache_do_not_deadlock() {
    with_watchdog("8 writers, 2 slices", Duration::from_secs(60), || {
        race(RaceSetup {
            threads: 8,
            ops: 300,
            write_blocks: 4,
            file_blocks: 1024,
            cache_slots: 128,
            slices: 2,
            mixed: false,
        })
    });
}

#[test]
fn writes_reads_and_fsyncs_racing_keep_the_file_consistent() {
    with_watchdog("6 threads, mixed", Duration::from_secs(60), || {
        race(RaceSetup {
            threads: 6,
            ops: 300,
            write_blocks: 8,
            file_blocks: 1000,
            cache_slots: 160,
            slices: 2,
            mixed: true,
        })
    });
}

/// Holds the first write submitted after `hold` is set until `release`: makes one
/// write-back stay in flight while the test does other things.
#[derive(Default)]
struct HoldGate {
    hold: std::sync::atomic::AtomicBool,
    state: std::sync::Mutex<(bool, bool)>, // (holding, released)
    cv: std::sync::Condvar,
}

impl HoldGate {
    fn wait_holding(&self) {
        let g = self.state.lock().unwrap();
        let (g, t) = self
            .cv
            .wait_timeout_while(g, Duration::from_secs(10), |s| !s.0)
            .unwrap();
        assert!(!t.timed_out() && g.0, "no write was held");
    }
    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.cv.notify_all();
    }
}

struct HoldBackend(Arc<HoldGate>);

struct HoldQueue {
    inner: Box<dyn IoQueue>,
    gate: Arc<HoldGate>,
}

// SAFETY: held writes are rewritten to go out from our own copies, which outlive the inner
// queue's run; everything else goes to the inner queue unchanged.
unsafe impl IoQueue for HoldQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        let writes = reqs
            .iter()
            .any(|r| r.kind() == numaio_engine::IoKind::Write);
        // The held write's data is taken now, as a device that has fetched the buffers
        // but not yet completed would have it.
        let mut copies: Vec<Vec<u8>> = Vec::new();
        if writes && self.gate.hold.swap(false, Ordering::SeqCst) {
            for r in reqs.iter_mut() {
                // 4 KiB aligned, so an O_DIRECT write of the copy is accepted.
                let mut c = vec![0u8; r.len() + 4096];
                let at = c.as_ptr().align_offset(4096);
                let mut n = 0;
                for v in r.iovecs() {
                    // SAFETY: the engine keeps the request's buffers pinned until it completes.
                    let src =
                        unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
                    c[at + n..at + n + v.iov_len].copy_from_slice(src);
                    n += v.iov_len;
                }
                let iov = vec![libc::iovec {
                    iov_base: c[at..].as_mut_ptr() as *mut _,
                    iov_len: n,
                }];
                // SAFETY: the copy lives in `copies` until after the inner queue's run.
                *r = unsafe { IoRequest::from_raw_parts(r.kind(), r.fd(), r.offset(), iov) };
                copies.push(c);
            }
            let mut g = self.gate.state.lock().unwrap();
            g.0 = true;
            self.gate.cv.notify_all();
            while !g.1 {
                g = self.gate.cv.wait(g).unwrap();
            }
        }
        self.inner.run(reqs, done);
        drop(copies);
    }
}

impl Backend for HoldBackend {
    fn name(&self) -> String {
        "hold".into()
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(HoldQueue {
            inner: PsyncBackend.queue(depth)?,
            gate: self.0.clone(),
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        PsyncBackend.datasync(fd)
    }
}

#[test]
fn an_older_write_back_never_lands_after_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let gate = Arc::new(HoldGate::default());
    let engine = Engine::new(EngineConfig {
        cache_bytes: 64 * 4096,
        slices: Some(1),
        policy: PolicyKind::Clock,
        io_workers_per_slice: 4,
        backend: Some(Arc::new(HoldBackend(gate.clone()))),
        ..Default::default()
    })
    .unwrap();
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let old = vec![b'o'; 4096];
    let new = vec![b'n'; 4096];
    f.pwrite(&old, 0).unwrap();
    // A write-back of the old data (here by a first fsync; the evictor takes the same
    // path) is in flight on one I/O worker...
    gate.hold.store(true, Ordering::SeqCst);
    let f1 = f.clone();
    let first = std::thread::spawn(move || f1.fsync());
    gate.wait_holding();
    // ...when the block is modified and fsync'd again.
    f.pwrite(&new, 0).unwrap();
    let g2 = gate.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        g2.release();
    });
    let t0 = std::time::Instant::now();
    f.fsync().unwrap();
    eprintln!(
        "DEBUG fsync took {:?}, disk now {:?}",
        t0.elapsed(),
        std::fs::read(&path).unwrap().first()
    );
    releaser.join().unwrap();
    first.join().unwrap().unwrap();
    // Whatever the order of the two writes, the data of the last fsync must be the file's.
    assert!(
        std::fs::read(&path).unwrap() == new,
        "the older write-back landed after fsync returned"
    );
    engine.close().unwrap();
    assert!(
        std::fs::read(&path).unwrap() == new,
        "the block was left clean with the older data on disk"
    );
}

#[test]
fn fsync_waits_for_the_evictors_write_back_in_flight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let gate = Arc::new(HoldGate::default());
    let slots = 64u64;
    let engine = Engine::new(EngineConfig {
        cache_bytes: slots * 4096,
        slices: Some(1),
        policy: PolicyKind::Clock,
        io_workers_per_slice: 4,
        backend: Some(Arc::new(HoldBackend(gate.clone()))),
        ..Default::default()
    })
    .unwrap();
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    // Filling the cache with dirty blocks wakes the evictor; its first write-back is held.
    gate.hold.store(true, Ordering::SeqCst);
    f.pwrite(&stamped(0, slots, 1, 1), 0).unwrap();
    gate.wait_holding();
    // Every block is modified again (all hits: nothing needs a free buffer) and fsync'd.
    let new = stamped(0, slots, 2, 2);
    f.pwrite(&new, 0).unwrap();
    let g2 = gate.clone();
    let releaser = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        g2.release();
    });
    f.fsync().unwrap();
    releaser.join().unwrap();
    // Let the evictor's held write finish before looking at the file.
    let t0 = std::time::Instant::now();
    while engine.stats().write_ios < 2 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        std::fs::read(&path).unwrap() == new,
        "the evictor's older write-back landed after fsync returned"
    );
    engine.close().unwrap();
    assert!(std::fs::read(&path).unwrap() == new);
}
