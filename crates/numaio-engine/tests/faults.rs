//! Device errors reach the caller: fsync reports failed write-backs (including ones the
//! evictor attempted earlier), the dirty data is kept and written once the device recovers;
//! failed reads return errors and do not poison the cache.

mod common;
use common::*;
use numaio_engine::{
    Backend, Engine, EngineConfig, FaultBackend, OpenOptions, PolicyKind, PsyncBackend,
};
use std::sync::atomic::Ordering;
use std::sync::Arc;

fn fault_engine(slots: usize) -> (Engine, Arc<numaio_engine::FaultState>) {
    let (fb, state) = FaultBackend::new(Arc::new(PsyncBackend) as Arc<dyn Backend>);
    let cfg = EngineConfig {
        cache_bytes: (slots * 4096) as u64,
        slices: Some(1),
        policy: PolicyKind::Arc,
        backend: Some(Arc::new(fb)),
        ..Default::default()
    };
    (Engine::new(cfg).unwrap(), state)
}

#[test]
fn fsync_reports_write_error_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (engine, faults) = fault_engine(256);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    let data = pattern(3, 100_000);
    f.pwrite(&data, 0).unwrap();
    faults.fail_writes.store(true, Ordering::SeqCst);
    let e = f
        .fsync()
        .expect_err("fsync must fail while the device fails writes");
    assert_eq!(
        e.raw_os_error(),
        None,
        "error is wrapped with the path: {e}"
    );
    assert!(
        e.to_string().contains("Input/output error") || e.to_string().contains("os error 5"),
        "{e}"
    );
    assert!(faults.failed.load(Ordering::SeqCst) > 0);
    // Nothing reached the disk, the cache still has the data.
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 0);
    let mut back = vec![0; data.len()];
    f.pread(&mut back, 0).unwrap();
    assert!(back == data);
    // The device recovers: the kept dirty data is written.
    faults.fail_writes.store(false, Ordering::SeqCst);
    f.fsync().unwrap();
    assert!(std::fs::read(&path).unwrap() == data);
    engine.close().unwrap();
}

#[test]
fn fsync_reports_failed_datasync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (engine, faults) = fault_engine(64);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    f.pwrite(b"abc", 0).unwrap();
    faults.fail_sync.store(true, Ordering::SeqCst);
    assert!(f.fsync().is_err());
    faults.fail_sync.store(false, Ordering::SeqCst);
    f.fsync().unwrap();
}

#[test]
fn evictor_write_error_is_reported_by_the_next_fsync() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (engine, faults) = fault_engine(64);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    faults.fail_writes.store(true, Ordering::SeqCst);
    // Fill the cache with dirty blocks so the evictor must try to write some back.
    let data = pattern(5, 63 * 4096);
    f.pwrite(&data, 0).unwrap();
    let t0 = std::time::Instant::now();
    while engine.stats().write_errors == 0 {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the evictor never tried a write-back"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    faults.fail_writes.store(false, Ordering::SeqCst);
    let e = f
        .fsync()
        .expect_err("the evictor's failed write-back must reach fsync");
    assert!(e.to_string().contains("write-back"), "{e}");
    // Data was kept: the next fsync writes everything.
    f.fsync().unwrap();
    assert!(std::fs::read(&path).unwrap() == data);
}

#[test]
fn read_error_is_returned_and_does_not_poison_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let data = pattern(8, 50_000);
    std::fs::write(&path, &data).unwrap();
    let (engine, faults) = fault_engine(64);
    let f = engine.open(&path, OpenOptions::default()).unwrap();
    faults.fail_reads.store(true, Ordering::SeqCst);
    let mut buf = vec![0; 10_000];
    assert!(f.pread(&mut buf, 0).is_err());
    faults.fail_reads.store(false, Ordering::SeqCst);
    assert_eq!(f.pread(&mut buf, 0).unwrap(), 10_000);
    assert!(buf == data[..10_000]);
}
