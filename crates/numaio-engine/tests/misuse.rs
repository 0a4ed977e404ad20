//! What real programs get wrong sooner or later: closing the engine while other threads use
//! it, dropping a mutable view without committing it, panicking hooks, writes through
//! read-only handles, a full disk, pins held too long, bad offsets and settings, and two
//! engines on one file. Every test runs under a watchdog, so a hang fails the test instead of
//! blocking the run.

mod common;
use common::pattern;
use numaio_engine::{
    AccessCtx, AccessHook, Backend, Engine, EngineBuilder, EngineError, FaultBackend, FaultState,
    FileId, OpenOptions, PsyncBackend,
};
use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const BS: usize = 4096;

/// Runs `f` on its own thread and fails the test if it has not finished within `limit`.
fn watchdog<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(format!("misuse: {what}"))
        .spawn(move || {
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
            let _ = tx.send(r);
        })
        .unwrap();
    match rx.recv_timeout(limit) {
        Ok(Ok(v)) => v,
        Ok(Err(p)) => std::panic::resume_unwind(p),
        Err(_) => panic!("{what}: hung (not finished after {limit:?})"),
    }
}

/// A small engine: `slots` blocks of 4 KiB in one slice.
fn small(slots: usize) -> EngineBuilder {
    Engine::builder()
        .with_cache_bytes((slots * BS) as u64)
        .with_slices(1)
        .with_queue_depth(8)
        .with_bind_memory(false)
        .with_pin_threads(false)
}

/// The two I/O paths: the built-in io_uring ring (psync where io_uring is unavailable), and
/// a backend behind I/O worker threads.
fn both_paths(slots: usize) -> Vec<(&'static str, EngineBuilder)> {
    vec![
        ("ring", small(slots)),
        (
            "workers",
            small(slots).with_backend(Arc::new(PsyncBackend) as Arc<dyn Backend>),
        ),
    ]
}

fn faulty(slots: usize) -> (EngineBuilder, Arc<FaultState>) {
    let (fb, state) = FaultBackend::new(Arc::new(PsyncBackend) as Arc<dyn Backend>);
    (small(slots).with_backend(Arc::new(fb)), state)
}

fn block(seed: u64) -> Vec<u8> {
    pattern(seed, BS)
}

/// One writer's acknowledged blocks: block number to the seed of the last acknowledged write.
type Acked = Arc<Mutex<HashMap<u64, u64>>>;

/// Threads write whole blocks of their own region of `w` and read `r` (larger than the
/// cache, so reads miss and load) until the engine goes away; the engine is closed or
/// dropped under them. Every thread must end with `Closed`, and every acknowledged write
/// must be on disk.
fn shutdown_under_load(close: bool) {
    for (name, b) in both_paths(32) {
        let dir = tempfile::tempdir().unwrap();
        let (wpath, rpath) = (dir.path().join("w"), dir.path().join("r"));
        std::fs::write(&rpath, pattern(1, 256 * BS)).unwrap();
        let engine = b.build().unwrap();
        let w = engine.open(&wpath, OpenOptions::create_rw()).unwrap();
        let r = engine.open(&rpath, OpenOptions::read_only()).unwrap();
        let acked: Acked = Default::default();
        let what = format!("{name}: threads using handles while the engine shuts down");
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                let (w, r, acked) = (w.clone(), r.clone(), acked.clone());
                std::thread::spawn(move || {
                    let mut buf = vec![0u8; 3 * BS];
                    for i in 0u64.. {
                        let blk = t * 64 + i % 64;
                        let seed = (t << 32) | i;
                        let res = if i % 2 == 0 {
                            w.pwrite(&block(seed), blk * BS as u64).map(|_| {
                                acked.lock().unwrap().insert(blk, seed);
                            })
                        } else {
                            r.pread(&mut buf, (i * 7 % 250) * BS as u64).map(|_| ())
                        };
                        if let Err(e) = res {
                            return e;
                        }
                    }
                    unreachable!()
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let errs = watchdog(&what, Duration::from_secs(30), move || {
            if close {
                engine.close().unwrap();
            } else {
                drop(engine);
            }
            threads
                .into_iter()
                .map(|t| t.join().unwrap())
                .collect::<Vec<_>>()
        });
        for e in &errs {
            assert!(matches!(e, EngineError::Closed), "{name}: {e:?}");
            assert_eq!(e.kind(), io::ErrorKind::NotConnected);
        }
        // Nothing more is accepted, and what was acknowledged is on the device.
        assert!(matches!(w.pwrite(b"x", 0), Err(EngineError::Closed)));
        assert!(matches!(w.fsync(), Err(EngineError::Closed)));
        assert!(matches!(w.get(0, 1), Err(EngineError::Closed)));
        assert!(matches!(r.pread(&mut [0; 8], 0), Err(EngineError::Closed)));
        let disk = std::fs::read(&wpath).unwrap();
        let acked = acked.lock().unwrap();
        assert!(!acked.is_empty(), "{name}: no write was acknowledged");
        for (&blk, &seed) in acked.iter() {
            let at = blk as usize * BS;
            assert!(
                disk.get(at..at + BS) == Some(&block(seed)[..]),
                "{name}: acknowledged block {blk} is not on disk"
            );
        }
    }
}

#[test]
fn close_under_load_fails_users_with_closed_and_keeps_every_acknowledged_write() {
    shutdown_under_load(true);
}

#[test]
fn drop_under_load_fails_users_with_closed_and_keeps_every_acknowledged_write() {
    shutdown_under_load(false);
}

#[test]
fn a_mutable_view_held_across_close_cannot_commit() {
    watchdog("commit after close", Duration::from_secs(30), || {
        for (name, b) in both_paths(16) {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("f");
            std::fs::write(&path, b"old bytes").unwrap();
            let engine = b.build().unwrap();
            let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
            let mut view = f.get_mut(0, 3).unwrap();
            for s in view.segments_mut() {
                s.copy_from_slice(b"NEW");
            }
            drop(engine);
            assert!(
                matches!(view.commit(), Err(EngineError::Closed)),
                "{name}: commit after drop"
            );
            assert!(matches!(f.pwrite(b"NEW", 0), Err(EngineError::Closed)));
            assert!(matches!(f.get_mut(0, 3), Err(EngineError::Closed)));
            assert!(matches!(
                futures_block_on(f.read_async(0, 3)),
                Err(EngineError::Closed)
            ));
            assert!(matches!(
                futures_block_on(f.get_async(0, 3)),
                Err(EngineError::Closed)
            ));
            assert!(matches!(
                futures_block_on(f.write_async(b"NEW", 0)),
                Err(EngineError::Closed)
            ));
            assert_eq!(std::fs::read(&path).unwrap(), b"old bytes", "{name}");
        }
    });
}

#[test]
fn a_mutable_view_dropped_without_commit_is_discarded_everywhere() {
    watchdog("discarded views", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let engine = small(16).build().unwrap();
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        fn scribble(f: &numaio_engine::FileHandle) -> numaio_engine::PinnedMut<'_> {
            let mut v = f.get_mut(2, 4).unwrap();
            for s in v.segments_mut() {
                s.copy_from_slice(b"XXXX");
            }
            v
        }
        let read = |f: &numaio_engine::FileHandle| {
            let mut b = [0u8; 10];
            let n = f.pread(&mut b, 0).unwrap();
            b[..n].to_vec()
        };
        // Dropped, explicitly discarded, or abandoned by a panic: the old bytes everywhere.
        drop(scribble(&f));
        assert_eq!(read(&f), b"0123456789");
        scribble(&f).discard();
        assert_eq!(read(&f), b"0123456789");
        let f2 = f.clone();
        let r = std::panic::catch_unwind(move || {
            let _v = scribble(&f2);
            panic!("caller fails while holding the view");
        });
        assert!(r.is_err());
        assert_eq!(read(&f), b"0123456789");
        assert_eq!(f.len(), 10);
        f.fsync().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"0123456789");
        // A block already dirty stays dirty with its earlier write, even if write-back ran
        // while the uncommitted changes were in the buffer.
        f.pwrite(b"ab", 0).unwrap();
        let v = scribble(&f);
        f.fsync().unwrap();
        drop(v);
        assert_eq!(read(&f), b"ab23456789");
        f.fsync().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"ab23456789");
        // Committed changes are written.
        scribble(&f).commit().unwrap();
        f.fsync().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"abXXXX6789");
        engine.close().unwrap();
        let engine = small(16).build().unwrap();
        let f = engine.open(&path, OpenOptions::read_only()).unwrap();
        assert_eq!(read(&f), b"abXXXX6789");
    });
}

/// Panics on every access while armed.
struct PanickingHook(AtomicBool);

impl AccessHook for PanickingHook {
    fn on_access(&self, _: FileId, _: u64, _: usize, _: bool, _: &AccessCtx) {
        if self.0.load(Ordering::SeqCst) {
            panic!("hook fails");
        }
    }
}

#[test]
fn a_panicking_hook_leaks_no_pins_and_no_loads() {
    watchdog("reads after hook panics", Duration::from_secs(60), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let data = pattern(5, 64 * BS);
        std::fs::write(&path, &data).unwrap();
        let hook = Arc::new(PanickingHook(AtomicBool::new(false)));
        let engine = small(16)
            .with_hook(hook.clone())
            .with_stall_timeout(Duration::from_secs(5))
            .build()
            .unwrap();
        let f = engine.open(&path, OpenOptions::read_only()).unwrap();
        // Warm a few blocks so the panics hit both the hit path and the miss path.
        let mut buf = vec![0u8; BS];
        for b in 0..4u64 {
            f.pread(&mut buf, b * BS as u64).unwrap();
        }
        hook.0.store(true, Ordering::SeqCst);
        for i in 0..48u64 {
            let f = f.clone();
            let r = std::panic::catch_unwind(move || {
                let mut buf = vec![0u8; BS];
                let _ = f.pread(&mut buf, (i % 32) * BS as u64);
                let _ = f.get(((i + 7) % 32) * BS as u64, 100);
            });
            assert!(r.is_err(), "the hook panics");
        }
        hook.0.store(false, Ordering::SeqCst);
        // Four times the cache: every buffer must be free to reuse.
        for round in 0..4 {
            for b in 0..64u64 {
                let at = (b * BS as u64) as usize;
                f.pread(&mut buf, at as u64)
                    .unwrap_or_else(|e| panic!("round {round} block {b}: {e}"));
                assert!(buf == data[at..at + BS], "block {b}");
            }
        }
    });
}

#[test]
fn disk_full_with_a_dirty_cache_fails_an_uncached_read_fast() {
    watchdog("read with a full disk", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let (wpath, rpath) = (dir.path().join("w"), dir.path().join("r"));
        std::fs::write(&rpath, pattern(2, 8 * BS)).unwrap();
        let (b, faults) = faulty(16);
        let engine = b.build().unwrap();
        let w = engine.open(&wpath, OpenOptions::create_rw()).unwrap();
        let r = engine.open(&rpath, OpenOptions::read_only()).unwrap();
        faults.errno.store(libc::ENOSPC, Ordering::SeqCst);
        faults.fail_writes.store(true, Ordering::SeqCst);
        let mut i = 0u64;
        let e = loop {
            if let Err(e) = w.pwrite(&block(i), i * BS as u64) {
                break e;
            }
            i += 1;
            assert!(i < 64, "writes beyond the cache must fail");
        };
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        let t = Instant::now();
        let mut buf = vec![0u8; BS];
        let e = r
            .pread(&mut buf, 5 * BS as u64)
            .expect_err("no buffer can be freed");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "took {:?}",
            t.elapsed()
        );
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
        // Space comes back: the dirty data is written and reads work again.
        faults.fail_writes.store(false, Ordering::SeqCst);
        let _ = w.fsync();
        w.fsync().unwrap();
        r.pread(&mut buf, 5 * BS as u64).unwrap();
        assert!(buf == pattern(2, 8 * BS)[5 * BS..6 * BS]);
        engine.close().unwrap();
    });
}

#[test]
fn a_caller_holding_every_buffer_gets_stalled_after_the_configured_time() {
    watchdog("stalled allocation", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, pattern(3, 32 * BS)).unwrap();
        for limit in [Duration::ZERO, Duration::from_millis(300)] {
            let engine = small(16).with_stall_timeout(limit).build().unwrap();
            let f = engine.open(&path, OpenOptions::read_only()).unwrap();
            let pins: Vec<_> = (0..16u64)
                .map(|b| f.get(b * BS as u64, BS).unwrap())
                .collect();
            let t = Instant::now();
            let e = f
                .pread(&mut [0u8; 16], 20 * BS as u64)
                .expect_err("every buffer is pinned");
            let took = t.elapsed();
            assert!(
                matches!(e, EngineError::Stalled { waited, .. } if waited >= limit),
                "{e:?}"
            );
            assert_eq!(e.kind(), io::ErrorKind::TimedOut);
            assert!(
                took >= limit && took < limit + Duration::from_secs(2),
                "{took:?}"
            );
            drop(pins);
            f.pread(&mut [0u8; 16], 20 * BS as u64).unwrap();
        }
    });
}

#[test]
fn read_only_handles_refuse_writes_and_reopening_for_writing_upgrades() {
    watchdog("read-only handles", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"original").unwrap();
        let engine = small(16).build().unwrap();
        let ro = engine.open(&path, OpenOptions::read_only()).unwrap();
        assert!(!ro.writable());
        let e = ro.pwrite(b"XX", 0).unwrap_err();
        assert!(
            matches!(&e, EngineError::ReadOnly { path: p } if p.ends_with("f")),
            "{e:?}"
        );
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(matches!(
            ro.get_mut(0, 2),
            Err(EngineError::ReadOnly { .. })
        ));
        let mut b = [0u8; 8];
        ro.pread(&mut b, 0).unwrap();
        assert_eq!(&b, b"original");
        ro.fsync().unwrap();
        // The same file opened for writing (through another path to it, even): writes work
        // and reach the disk; the read-only handle still refuses them.
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let rw = engine.open(&link, OpenOptions::create_rw()).unwrap();
        assert_eq!(rw.id(), ro.id(), "one file, one cache entry");
        rw.pwrite(b"UP", 0).unwrap();
        rw.fsync().unwrap();
        assert!(matches!(
            ro.pwrite(b"XX", 0),
            Err(EngineError::ReadOnly { .. })
        ));
        ro.pread(&mut b, 0).unwrap();
        assert_eq!(&b, b"UPiginal");
        engine.close().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"UPiginal");
        // A directory opens read-only, but never for writing.
        let engine = small(16).with_direct_io(false).build().unwrap();
        let _d = engine.open(dir.path(), OpenOptions::read_only()).unwrap();
        let e = engine
            .open(dir.path(), OpenOptions::create_rw())
            .unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{e:?}");
    });
}

#[test]
fn open_errors_keep_errno_and_path() {
    watchdog("open errors", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let engine = small(16).build().unwrap();
        let e = engine.open(&missing, OpenOptions::read_only()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
        assert_eq!(numaio_engine::os_error(&e), Some(libc::ENOENT));
        assert!(
            matches!(&e, EngineError::Os { path, errno: Some(libc::ENOENT), .. } if path == &missing),
            "{e:?}"
        );
        let io: io::Error = e.into();
        assert_eq!(numaio_engine::os_error(&io), Some(libc::ENOENT));
        assert_eq!(io.kind(), io::ErrorKind::NotFound);
        // Shutdown, oversized and block-crossing requests each have their own variant.
        let path = dir.path().join("f");
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        f.pwrite(&vec![1u8; 64 * BS], 0).unwrap();
        let e = f.get(0, f.max_get_bytes() + BS).unwrap_err();
        assert!(matches!(e, EngineError::InvalidRange { .. }), "{e:?}");
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        let e = f.get_batch(&[(BS as u64 - 2, 4)]).unwrap_err();
        assert!(
            matches!(
                e,
                EngineError::InvalidRange {
                    offset: 4094,
                    len: 4,
                    ..
                }
            ),
            "{e:?}"
        );
        let e = f
            .pread_batch(&mut [(BS as u64 - 2, &mut [0u8; 4][..])])
            .unwrap_err();
        assert!(matches!(e, EngineError::InvalidRange { .. }), "{e:?}");
        drop(engine);
        // Device errors carry the file and the errno as fields too.
        let (b, faults) = faulty(16);
        let engine = b.build().unwrap();
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        faults.fail_reads.store(true, Ordering::SeqCst);
        let e = f.pread(&mut [0u8; 8], 0).unwrap_err();
        assert!(
            matches!(&e, EngineError::Os { path: p, errno: Some(libc::EIO), .. } if p == &path),
            "{e:?}"
        );
        faults.fail_reads.store(false, Ordering::SeqCst);
        faults.fail_sync.store(true, Ordering::SeqCst);
        let e = f.fsync().unwrap_err();
        assert!(
            matches!(&e, EngineError::Os { path: p, errno: Some(libc::EIO), .. } if p == &path),
            "{e:?}"
        );
        faults.fail_sync.store(false, Ordering::SeqCst);
        faults.fail_writes.store(true, Ordering::SeqCst);
        f.pwrite(b"x", 0).unwrap();
        let e = f.fsync().unwrap_err();
        assert!(
            matches!(&e, EngineError::WriteBack(w) if w.errno == Some(libc::EIO) && w.path.as_deref() == Some(path.as_path())),
            "{e:?}"
        );
        faults.fail_writes.store(false, Ordering::SeqCst);
        engine.close().unwrap();
    });
}

#[test]
fn offsets_and_lengths_are_checked() {
    watchdog("offset checks", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let engine = small(16).with_max_file_bytes(1 << 20).build().unwrap();
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        assert_eq!(f.max_len(), 1 << 20);
        for (off, len) in [
            (u64::MAX - 1, 3),
            (1 << 50, 3),
            (1 << 20, 1),
            ((1 << 20) - 2, 3),
        ] {
            let e = f.pwrite(&vec![7u8; len], off).unwrap_err();
            assert!(
                matches!(e, EngineError::TooLarge { offset, max: 0x100000, .. } if offset == off),
                "{e:?}"
            );
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
            assert_eq!(e.raw_os_error(), Some(libc::EFBIG));
            assert!(matches!(
                f.get_mut(off, len),
                Err(EngineError::TooLarge { .. })
            ));
            let e = futures_block_on(f.write_async(&vec![7u8; len], off)).unwrap_err();
            assert!(matches!(e, EngineError::TooLarge { .. }), "{e:?}");
        }
        assert_eq!(f.len(), 0, "nothing was written");
        f.pwrite(b"end", (1 << 20) - 3).unwrap();
        assert_eq!(f.len(), 1 << 20);
        // Reads and syncs far out are harmless.
        assert_eq!(f.pread(&mut [0u8; 8], u64::MAX - 1).unwrap(), 0);
        assert_eq!(f.get(u64::MAX - 1, 8).unwrap().len(), 0);
        f.sync_range(u64::MAX - 1, u64::MAX).unwrap();
        f.fsync().unwrap();
        engine.close().unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 20);
        // The default limit refuses what file systems refuse.
        let engine = small(16).build().unwrap();
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        assert!(matches!(
            f.pwrite(b"abc", 1 << 50),
            Err(EngineError::TooLarge { .. })
        ));
        engine.close().unwrap();
    });
}

/// Polls a future to completion on this thread.
fn futures_block_on<F: std::future::Future>(f: F) -> F::Output {
    struct Wake(std::thread::Thread);
    impl std::task::Wake for Wake {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Wake(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

#[test]
fn build_refuses_invalid_settings() {
    watchdog("build checks", Duration::from_secs(30), || {
        let cases: Vec<(&str, EngineBuilder)> = vec![
            ("missing node", small(16).with_slice_nodes(vec![4096])),
            ("no node", small(16).with_slice_nodes(vec![])),
            ("zero slices", small(16).with_slices(0)),
            ("zero queue depth", small(16).with_queue_depth(0)),
            ("zero workers", small(16).with_io_workers_per_slice(0)),
            ("zero range", small(16).with_range_blocks(0)),
            ("zero io blocks", small(16).with_max_io_blocks(0)),
            ("tiny max file", small(16).with_max_file_bytes(100)),
            ("odd block size", small(16).with_block_size(3000)),
        ];
        for (what, b) in cases {
            match b.build() {
                Err(e @ EngineError::Config(_)) => {
                    assert_eq!(e.kind(), io::ErrorKind::InvalidInput, "{what}")
                }
                Err(e) => panic!("{what}: {e:?}"),
                Ok(_) => panic!("{what}: built"),
            }
        }
    });
}

fn open_in(engine: &Engine, path: &Path, write: bool) -> Result<(), EngineError> {
    let opts = if write {
        OpenOptions::create_rw()
    } else {
        OpenOptions::read_only()
    };
    engine.open(path, opts).map(drop)
}

#[test]
fn two_engines_on_one_file_are_refused() {
    watchdog("two engines", Duration::from_secs(30), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"x").unwrap();
        let a = small(16).build().unwrap();
        let b = small(16).build().unwrap();
        // Readers may share a file.
        open_in(&a, &path, false).unwrap();
        open_in(&b, &path, false).unwrap();
        // A writer needs it alone, also when it was opened read-only in this engine first.
        let e = open_in(&a, &path, true).unwrap_err();
        assert!(matches!(&e, EngineError::Locked { .. }), "{e:?}");
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        drop(b);
        let f = a
            .open(&path, OpenOptions::create_rw())
            .expect("alone now: the read-only open is upgraded");
        f.pwrite(b"A", 0).unwrap();
        let b = small(16).build().unwrap();
        for write in [false, true] {
            let e = open_in(&b, &path, write).unwrap_err();
            assert!(matches!(e, EngineError::Locked { .. }), "{e:?}");
        }
        // A hard link is the same file.
        let link = dir.path().join("hard");
        std::fs::hard_link(&path, &link).unwrap();
        assert!(matches!(
            open_in(&b, &link, true),
            Err(EngineError::Locked { .. })
        ));
        assert_eq!(
            a.open(&link, OpenOptions::create_rw()).unwrap().id(),
            f.id()
        );
        a.close().unwrap();
        open_in(&b, &path, true).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"A");
    });
}

#[test]
fn reopening_for_writing_reopens_the_checksums_for_writing_too() {
    use numaio_engine::integrity::{IntegrityConfig, IntegrityStage};
    watchdog("upgrade with checksums", Duration::from_secs(60), || {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let build = |ig: &Arc<IntegrityStage>| {
            small(16)
                .with_integrity(ig.clone())
                .with_backend(Arc::new(PsyncBackend) as Arc<dyn Backend>)
                .build()
                .unwrap()
        };
        let ig = Arc::new(IntegrityStage::new(IntegrityConfig::default()));
        let engine = build(&ig);
        let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
        f.pwrite(&pattern(1, 8 * BS), 0).unwrap();
        engine.close().unwrap();
        // Read-only first (the sums open read-only), then for writing.
        let ig = Arc::new(IntegrityStage::new(IntegrityConfig::default()));
        let engine = build(&ig);
        let ro = engine.open(&path, OpenOptions::read_only()).unwrap();
        let mut buf = vec![0u8; BS];
        ro.pread(&mut buf, 0).unwrap();
        let rw = engine.open(&path, OpenOptions::create_rw()).unwrap();
        rw.pwrite(&block(9), 2 * BS as u64).unwrap();
        rw.fsync().unwrap();
        engine.close().unwrap();
        // A fresh engine verifies every block, the rewritten one included.
        let ig = Arc::new(IntegrityStage::new(IntegrityConfig::default()));
        let engine = build(&ig);
        let f = engine.open(&path, OpenOptions::read_only()).unwrap();
        let mut all = vec![0u8; 8 * BS];
        assert_eq!(f.pread(&mut all, 0).unwrap(), 8 * BS);
        let mut want = pattern(1, 8 * BS);
        want[2 * BS..3 * BS].copy_from_slice(&block(9));
        assert!(all == want);
        assert_eq!(ig.stats().mismatches, 0, "{:?}", ig.stats());
        assert!(ig.stats().verified >= 8, "{:?}", ig.stats());
    });
}
