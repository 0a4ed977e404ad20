//! The direct miss path (a ring per slice that callers submit into): futures dropped while
//! their reads are in flight leave the engine sound and working, blocking and batched reads
//! from many threads return the file's bytes, and runs of adjacent missing blocks reach the
//! device as one request each.

mod common;
use common::*;
use numaio_engine::{Engine, EngineConfig, OpenOptions, PolicyKind};
use std::future::Future;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

const BS: usize = 4096;

/// An engine on the built-in io_uring backend (the direct path), or `None` (skipped
/// visibly) where io_uring is unavailable.
fn ring_engine(slots: usize, slices: usize) -> Option<Engine> {
    let e = Engine::new(EngineConfig {
        cache_bytes: (slices * slots * BS) as u64,
        slices: Some(slices),
        policy: PolicyKind::Arc,
        range_blocks: 64,
        ..Default::default()
    })
    .expect("engine starts");
    if e.backend_name() != "io_uring" {
        numaio_testkit::skipped(
            numaio_testkit::needs::IO_URING,
            "io_uring is unavailable, so the engine runs on psync workers",
        );
        return None;
    }
    Some(e)
}

fn data_file(dir: &tempfile::TempDir, blocks: usize) -> (std::path::PathBuf, Vec<u8>) {
    let path = dir.path().join("data");
    let data = pattern(11, blocks * BS);
    std::fs::write(&path, &data).unwrap();
    (path, data)
}

fn poll_once<F: Future + Unpin>(fut: &mut F) -> Poll<F::Output> {
    std::pin::Pin::new(fut).poll(&mut Context::from_waker(Waker::noop()))
}

/// Reads the whole file through the cache and compares.
fn read_all_equals(f: &numaio_engine::FileHandle, data: &[u8]) {
    let mut back = vec![0u8; data.len()];
    assert_eq!(f.pread(&mut back, 0).unwrap(), data.len());
    assert!(back == data, "data read back differs from the file");
}

#[test]
fn dropping_1000_in_flight_futures_leaves_the_engine_working() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = 4096;
    let (path, data) = data_file(&dir, blocks);
    // Two slices of 1536 blocks: 1000 loads fit in flight at once, the file does not.
    let Some(engine) = ring_engine(1536, 2) else {
        return;
    };
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    for round in 0..3usize {
        let mut futs: Vec<_> = (0..1000)
            .map(|i| {
                let b = (i * 7 + round * 1001) % blocks;
                f.get_async((b * BS) as u64, BS)
            })
            .collect();
        let mut pending = 0;
        for g in &mut futs {
            if poll_once(g).is_pending() {
                pending += 1;
            }
        }
        // Dropped with their loads in flight: the engine owns the buffers until the device
        // is done; the loads end on their own.
        drop(futs);
        eprintln!("round {round}: {pending} of 1000 futures were pending when dropped");
    }
    // Reads and copies dropped mid-flight too.
    let mut bufs = vec![vec![0u8; 2 * BS]; 200];
    {
        let mut reads: Vec<_> = bufs
            .iter_mut()
            .enumerate()
            .map(|(i, b)| f.read_into_async(b, ((i * 13 % blocks) * BS) as u64))
            .collect();
        for r in &mut reads {
            let _ = poll_once(r);
        }
    }
    // No pin or load leaked: the whole file (larger than the cache) reads back, twice.
    let t = Instant::now();
    read_all_equals(&f, &data);
    read_all_equals(&f, &data);
    assert!(t.elapsed() < Duration::from_secs(60), "reads stalled");
    // And the futures that are polled to the end agree.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for b in [0usize, 1, 777, blocks - 1] {
        let p = rt.block_on(f.get_async((b * BS) as u64, BS)).unwrap();
        assert!(p.to_vec() == data[b * BS..(b + 1) * BS]);
        p.put();
    }
    drop(f);
    engine.close().unwrap();
}

#[test]
fn engine_dropped_with_loads_in_flight_shuts_down_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = 2048;
    let (path, _) = data_file(&dir, blocks);
    for _ in 0..3 {
        let Some(engine) = ring_engine(4096, 1) else {
            return;
        };
        let f = engine.open(&path, OpenOptions::read_only()).unwrap();
        let mut futs: Vec<_> = (0..500)
            .map(|i| f.get_async(((i * 3 % blocks) * BS) as u64, BS))
            .collect();
        for g in &mut futs {
            let _ = poll_once(g);
        }
        drop(futs);
        drop(f);
        // Shutdown waits for the device to finish with every buffer before freeing them.
        drop(engine);
    }
}

#[test]
fn blocking_and_batched_reads_from_many_threads_return_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = 2048;
    let (path, data) = data_file(&dir, blocks);
    let Some(engine) = ring_engine(512, 2) else {
        return;
    };
    let f = engine.open(&path, OpenOptions::read_only()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let (f, data) = (&f, &data);
            s.spawn(move || {
                let mut rng = numaio_testkit::Rng(t * 7919 + 1);
                for _ in 0..300 {
                    // A scattered batch of 32 single-block reads ...
                    let offs: Vec<usize> = (0..32)
                        .map(|_| rng.below(blocks as u64) as usize * BS)
                        .collect();
                    let mut bufs = vec![vec![0u8; BS]; 32];
                    let mut reqs: Vec<(u64, &mut [u8])> = offs
                        .iter()
                        .zip(bufs.iter_mut())
                        .map(|(&o, b)| (o as u64, b.as_mut_slice()))
                        .collect();
                    let n = f.pread_batch(&mut reqs).unwrap();
                    assert!(n.iter().all(|&n| n == BS));
                    for (o, b) in offs.iter().zip(&bufs) {
                        assert!(b[..] == data[*o..o + BS]);
                    }
                    // ... and one long read of adjacent blocks at an odd offset.
                    let off = rng.below((data.len() - 300_000) as u64) as usize;
                    let mut buf = vec![0u8; 300_000];
                    assert_eq!(f.pread(&mut buf, off as u64).unwrap(), buf.len());
                    assert!(buf[..] == data[off..off + buf.len()]);
                }
            });
        }
    });
    drop(f);
    engine.close().unwrap();
}

#[test]
fn a_run_of_adjacent_missing_blocks_is_one_device_read() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = data_file(&dir, 1024);
    let Some(engine) = ring_engine(4096, 1) else {
        return;
    };
    let f = engine.open(&path, OpenOptions::read_only()).unwrap();
    let before = engine.stats();
    // 1 MiB sequential in 4 KiB blocks: 256 misses, one vectored read.
    let mut buf = vec![0u8; 1 << 20];
    assert_eq!(f.pread(&mut buf, 0).unwrap(), buf.len());
    assert!(buf[..] == data[..buf.len()]);
    let after = engine.stats();
    assert_eq!(after.misses - before.misses, 256);
    assert_eq!(
        after.read_ios - before.read_ios,
        1,
        "one request for the run"
    );
    assert_eq!(after.read_bytes - before.read_bytes, 1 << 20);
    drop(f);
    engine.close().unwrap();
}
