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

impl IoQueue for SlowQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        std::thread::sleep(Duration::from_millis(150));
        let reads = reqs
            .iter()
            .filter(|r| r.kind == numaio_engine::IoKind::Read)
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
