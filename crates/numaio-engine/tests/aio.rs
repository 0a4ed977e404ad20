//! The async API: results equal the blocking API's, one thread keeps many misses in flight,
//! dropped futures leak nothing, and device errors reach the caller.

mod common;
use common::*;
use numaio_engine::{
    Backend, Engine, EngineConfig, FaultBackend, FileHandle, IoQueue, IoRequest, OpenOptions,
    PolicyKind, PsyncBackend,
};
use std::future::Future;
use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

/// A one-thread runtime: every future of a test is polled by this one thread.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// How many requests a [`SlowBackend`] holds, and the most it held at once.
#[derive(Default)]
struct SlowState {
    now: AtomicUsize,
    max: AtomicUsize,
    requests: AtomicUsize,
}

/// A device with a fixed latency per batch (each batch completes `delay` after the worker
/// hands it over), so overlapping misses show as time and as requests held together.
struct SlowBackend {
    delay: Duration,
    state: Arc<SlowState>,
}

struct SlowQueue {
    inner: Box<dyn IoQueue>,
    delay: Duration,
    state: Arc<SlowState>,
}

// SAFETY: the requests go to the inner queue, which keeps the contract; this one only
// sleeps before passing them on.
unsafe impl IoQueue for SlowQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        let n = reqs.len();
        let now = self.state.now.fetch_add(n, Ordering::SeqCst) + n;
        self.state.max.fetch_max(now, Ordering::SeqCst);
        self.state.requests.fetch_add(n, Ordering::SeqCst);
        std::thread::sleep(self.delay);
        self.state.now.fetch_sub(n, Ordering::SeqCst);
        self.inner.run(reqs, done);
    }
}

impl Backend for SlowBackend {
    fn name(&self) -> String {
        "slow".into()
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(SlowQueue {
            inner: PsyncBackend.queue(depth)?,
            delay: self.delay,
            state: self.state.clone(),
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        PsyncBackend.datasync(fd)
    }
}

fn engine_with(slots: usize, slices: usize, backend: Option<Arc<dyn Backend>>) -> Engine {
    Engine::new(EngineConfig {
        cache_bytes: (slices * slots * 4096) as u64,
        slices: Some(slices),
        policy: PolicyKind::Arc,
        range_blocks: 4,
        queue_depth: 64,
        backend,
        ..Default::default()
    })
    .expect("engine starts")
}

fn slow_engine(slots: usize, delay: Duration) -> (Engine, Arc<SlowState>) {
    let state = Arc::new(SlowState::default());
    let b = SlowBackend {
        delay,
        state: state.clone(),
    };
    (engine_with(slots, 1, Some(Arc::new(b))), state)
}

fn data_file(dir: &tempfile::TempDir, len: usize) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.path().join("data");
    let data = pattern(7, len);
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

/// Polls `fut` once with a waker that does nothing.
fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

struct Rng(u64);
impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

#[test]
fn async_reads_equal_blocking_reads() {
    let dir = tempfile::tempdir().unwrap();
    // 4 MiB through caches of 32 blocks (every read misses often, and futures wait for free
    // buffers) and of 1024 blocks, on one and on two slices.
    let (path, data) = data_file(&dir, 4 << 20);
    for (slots, slices) in [(32, 1), (1024, 1), (64, 2)] {
        let engine = engine_with(slots, slices, None);
        let f = engine.open(&path, OpenOptions::read_only()).unwrap();
        let max = f.max_get_bytes() as u64;
        let mut rng = Rng(slots as u64 * 31 + 1);
        let reqs: Vec<(u64, usize)> = (0..400)
            .map(|_| {
                let off = rng.below(data.len() as u64 + 8192);
                (off, 1 + rng.below(3 * max) as usize)
            })
            .collect();
        let rt = runtime();
        let got: Vec<(Vec<u8>, Vec<u8>)> = rt.block_on(async {
            let mut set = tokio::task::JoinSet::new();
            for (i, &(off, len)) in reqs.iter().enumerate() {
                let f: FileHandle = f.clone();
                set.spawn(async move {
                    let v = f.read_async(off, len).await.unwrap();
                    let g = f
                        .get_async(off, len.min(f.max_get_bytes() - (off % 4096) as usize))
                        .await
                        .unwrap()
                        .to_vec();
                    (i, v, g)
                });
            }
            let mut out = vec![(Vec::new(), Vec::new()); reqs.len()];
            while let Some(r) = set.join_next().await {
                let (i, v, g) = r.unwrap();
                out[i] = (v, g);
            }
            out
        });
        for ((off, len), (v, g)) in reqs.iter().zip(&got) {
            let mut b = vec![0u8; *len];
            let n = f.pread(&mut b, *off).unwrap();
            b.truncate(n);
            assert!(
                v == &b,
                "read_async({off}, {len}) differs from pread ({slots} slots, {slices} slices)"
            );
            let s = (*off as usize).min(data.len());
            assert!(
                v[..] == data[s..s + v.len()],
                "read_async({off}, {len}) data"
            );
            assert!(g[..] == v[..g.len()], "get_async({off}) differs");
        }
        let st = engine.stats();
        assert!(st.misses > 0, "the test exercised the miss path");
        engine.close().unwrap();
    }
}

#[test]
fn async_writes_equal_blocking_writes() {
    let dir = tempfile::tempdir().unwrap();
    let (path, mut model) = data_file(&dir, 1 << 20);
    let engine = engine_with(48, 1, None);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let mut rng = Rng(99);
    let writes: Vec<(u64, Vec<u8>)> = (0..200)
        .map(|i| {
            let off = rng.below(model.len() as u64 + 20_000);
            (off, pattern(1000 + i, 1 + rng.below(40_000) as usize))
        })
        .collect();
    let rt = runtime();
    for (off, buf) in &writes {
        let n = rt.block_on(f.write_async(buf, *off)).unwrap();
        assert_eq!(n, buf.len());
        let end = *off as usize + buf.len();
        if model.len() < end {
            model.resize(end, 0);
        }
        model[*off as usize..end].copy_from_slice(buf);
    }
    let back = rt.block_on(f.read_async(0, model.len() + 100)).unwrap();
    assert!(
        back == model,
        "read_async after write_async equals the model"
    );
    f.fsync().unwrap();
    engine.close().unwrap();
    assert!(
        std::fs::read(&path).unwrap() == model,
        "the file equals the model"
    );
}

#[test]
fn concurrent_misses_overlap_on_a_slow_device() {
    const N: usize = 64;
    let delay = Duration::from_millis(100);
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = data_file(&dir, N * 8192);
    let (engine, slow) = slow_engine(4 * N, delay);
    let f = engine.open(&path, OpenOptions::read_only()).unwrap();
    let rt = runtime();
    let t = Instant::now();
    // One thread, N reads of different blocks (every other block, so no two merge).
    let got = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..N {
            let f = f.clone();
            set.spawn(async move { (i, f.read_async(i as u64 * 8192, 4096).await.unwrap()) });
        }
        let mut out = vec![Vec::new(); N];
        while let Some(r) = set.join_next().await {
            let (i, v) = r.unwrap();
            out[i] = v;
        }
        out
    });
    let took = t.elapsed();
    for (i, v) in got.iter().enumerate() {
        assert!(v[..] == data[i * 8192..i * 8192 + 4096], "block {i}");
    }
    let (requests, max) = (
        slow.requests.load(Ordering::SeqCst),
        slow.max.load(Ordering::SeqCst),
    );
    eprintln!("{N} misses on a {delay:?} device: {took:?}, {requests} requests, at most {max} held at once");
    assert_eq!(requests, N, "one device request per miss");
    assert_eq!(engine.stats().misses, N as u64);
    // Serially this takes N × delay (6.4 s); overlapped, about one delay per worker round.
    assert!(
        took < delay * 8,
        "{N} misses took {took:?}: they did not overlap"
    );
    assert!(
        max >= N / 4,
        "at most {max} requests were at the device at once"
    );
    engine.close().unwrap();
}

#[test]
fn dropped_futures_leak_nothing() {
    let delay = Duration::from_millis(50);
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = data_file(&dir, 1 << 20);
    // 64 slots for a 256-block file: a leaked pin or a load that never ends would stall the
    // full read below (the engine reports a 60 s stall as an error) or hang on a clash.
    let (engine, _) = slow_engine(64, delay);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    for round in 0..3u64 {
        {
            // Reads and gets dropped while their loads are in flight.
            let mut reads: Vec<_> = (0..16)
                .map(|i| f.read_async((round * 16 + i) * 4096, 8192))
                .collect();
            let mut gets: Vec<_> = (0..8)
                .map(|i| f.get_async((100 + round * 8 + i) * 4096, 4096))
                .collect();
            for r in &mut reads {
                assert!(
                    poll_once(r).is_pending(),
                    "a miss on a slow device is pending"
                );
            }
            for g in &mut gets {
                assert!(poll_once(g).is_pending());
            }
        }
        // Dropped immediately, and again after the loads ended.
        let mut late: Vec<_> = (0..8)
            .map(|i| f.read_async((200 + round * 8 + i) * 4096, 4096))
            .collect();
        for r in &mut late {
            let _ = poll_once(r);
        }
        std::thread::sleep(delay * 3);
        drop(late);
    }
    // A write dropped while its partial edge block loads has written nothing; a completed
    // one is kept.
    let rt = runtime();
    let kept = pattern(5, 5000);
    rt.block_on(f.write_async(&kept, 10)).unwrap();
    let lost = pattern(6, 3000);
    let mut w = f.write_async(&lost, 600_000 + 100);
    assert!(poll_once(&mut w).is_pending());
    drop(w);
    let mut model = data.clone();
    model[10..5010].copy_from_slice(&kept);
    // Every block can be read again (none is pinned or loading forever), twice over the cache.
    let t = Instant::now();
    for _ in 0..2 {
        let mut back = vec![0u8; model.len()];
        assert_eq!(f.pread(&mut back, 0).unwrap(), model.len());
        assert!(back == model, "data after dropped futures");
        let back = rt.block_on(f.read_async(0, model.len())).unwrap();
        assert!(back == model);
    }
    assert!(t.elapsed() < Duration::from_secs(30), "reads stalled");
    f.fsync().unwrap();
    engine.close().unwrap();
    assert!(std::fs::read(&path).unwrap() == model);
}

#[test]
fn async_errors_propagate() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = data_file(&dir, 256 << 10);
    let (fb, faults) = FaultBackend::new(Arc::new(PsyncBackend) as Arc<dyn Backend>);
    let engine = engine_with(32, 1, Some(Arc::new(fb)));
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let rt = runtime();
    faults.fail_reads.store(true, Ordering::SeqCst);
    let e = rt.block_on(f.read_async(8192, 100)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "errno kept: {e}");
    assert!(
        e.to_string().contains(&path.display().to_string()),
        "names the file: {e}"
    );
    let mut buf = [0u8; 10];
    assert!(rt.block_on(f.read_into_async(&mut buf, 0)).is_err());
    assert!(rt.block_on(f.get_async(4096 * 20, 4096)).is_err());
    // A partial write must read its edge block first: the error is the write's.
    let e = rt
        .block_on(f.write_async(b"xyz", 4096 * 30 + 1))
        .unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EIO), "{e}");
    // Many concurrent failures on one thread all end.
    let n_err = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..32u64 {
            let f = f.clone();
            set.spawn(async move { f.read_async(i * 4096, 4096).await.is_err() });
        }
        let mut n = 0;
        while let Some(r) = set.join_next().await {
            n += r.unwrap() as usize;
        }
        n
    });
    assert_eq!(n_err, 32);
    // The failed reads did not poison the cache.
    faults.fail_reads.store(false, Ordering::SeqCst);
    let v = rt.block_on(f.read_async(0, data.len())).unwrap();
    assert!(v == data);
    engine.close().unwrap();
}
