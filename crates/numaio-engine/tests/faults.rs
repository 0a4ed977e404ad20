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
    assert!(
        e.to_string().contains(&path.display().to_string()),
        "error names the file: {e}"
    );
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EIO),
        "error keeps the errno: {e}"
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

/// Runs `work` on its own thread; fails if it takes longer than `limit` (a hang must fail
/// the test, not CI).
fn within<T: Send + 'static>(
    what: &str,
    limit: std::time::Duration,
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
        Err(_) => panic!("{what}: not finished after {limit:?}"),
    }
}

fn assert_enospc(e: &numaio_engine::EngineError, what: &str) {
    assert_eq!(
        numaio_engine::os_error(e),
        Some(libc::ENOSPC),
        "{what}: the error must carry ENOSPC: {e}"
    );
    assert!(
        e.to_string().contains("No space left on device"),
        "{what}: {e}"
    );
}

/// Writes `total` bytes in 4 KiB pieces until one fails; returns the bytes acknowledged and
/// the error.
fn write_until_error(
    f: &numaio_engine::FileHandle,
    total: usize,
    seed: u64,
) -> (usize, Option<numaio_engine::EngineError>) {
    let data = pattern(seed, total);
    let mut off = 0;
    while off < total {
        if let Err(e) = f.pwrite(&data[off..off + 4096], off as u64) {
            return (off, Some(e));
        }
        off += 4096;
    }
    (off, None)
}

#[test]
fn enospc_in_write_back_fails_a_stalled_writer_at_once_with_its_errno() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (engine, faults) = fault_engine(64);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    faults.errno.store(libc::ENOSPC, Ordering::SeqCst);
    faults.fail_writes.store(true, Ordering::SeqCst);
    let f2 = f.clone();
    let t0 = std::time::Instant::now();
    // Four times the cache: the writer must wait for a buffer the evictor cannot clean.
    let (acked, e) = within(
        "a writer stalled behind failing write-backs",
        std::time::Duration::from_secs(20),
        move || write_until_error(&f2, 4 * 64 * 4096, 11),
    );
    let e = e.expect("writes beyond the cache must fail while write-back fails");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "the error took {:?}",
        t0.elapsed()
    );
    assert_enospc(&e, "pwrite");
    assert!(acked > 0 && acked <= 64 * 4096, "acked {acked}");
    let e = f
        .fsync()
        .expect_err("fsync must report the failed write-back");
    assert_enospc(&e, "fsync");
    // Space comes back: every acknowledged byte reaches the file.
    faults.fail_writes.store(false, Ordering::SeqCst);
    f.fsync().unwrap();
    let disk = std::fs::read(&path).unwrap();
    assert!(disk[..acked] == pattern(11, 4 * 64 * 4096)[..acked]);
    engine.close().unwrap();
}

#[test]
fn enospc_reaches_fsync_with_its_errno() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (engine, faults) = fault_engine(256);
    let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
    f.pwrite(&pattern(4, 100_000), 0).unwrap();
    faults.errno.store(libc::ENOSPC, Ordering::SeqCst);
    faults.fail_writes.store(true, Ordering::SeqCst);
    let e = f.fsync().expect_err("fsync must fail");
    assert_enospc(&e, "fsync");
    assert!(e.to_string().contains(&path.display().to_string()), "{e}");
    faults.errno.store(0, Ordering::SeqCst);
    let e = f.fsync().expect_err("fsync must fail again");
    assert_eq!(numaio_engine::os_error(&e), Some(libc::EIO), "{e}");
}

#[test]
fn fsync_reports_a_failed_trim_of_the_last_block() {
    // A sealed memfd refuses to shrink: the trim after a whole-block write-back fails.
    // SAFETY: memfd_create with a valid C string; the fd is owned at once.
    let fd = unsafe {
        libc::memfd_create(
            c"numaio-seal".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        )
    };
    assert!(fd >= 0, "memfd_create: {}", std::io::Error::last_os_error());
    // SAFETY: fd is a fresh descriptor we own.
    let memfd = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    // SAFETY: fcntl on our own descriptor.
    assert_eq!(
        unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) },
        0,
        "F_ADD_SEALS: {}",
        std::io::Error::last_os_error()
    );
    let (engine, _faults) = fault_engine(64);
    let f = engine
        .open(format!("/proc/self/fd/{fd}"), OpenOptions::create_rw())
        .unwrap();
    f.pwrite(b"hello", 0).unwrap();
    let e = f
        .fsync()
        .expect_err("fsync must report that the file could not be trimmed");
    assert!(e.to_string().contains("ftruncate"), "{e}");
    assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    drop(memfd);
}

/// A tmpfs of `size` mounted on a fresh directory, unmounted on drop.
struct SmallFs {
    dir: tempfile::TempDir,
}

impl SmallFs {
    fn mount(size: &str) -> Result<SmallFs, String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let target = std::ffi::CString::new(dir.path().as_os_str().as_encoded_bytes()).unwrap();
        let opts = std::ffi::CString::new(format!("size={size}")).unwrap();
        // SAFETY: valid C strings for the duration of the call.
        let r = unsafe {
            libc::mount(
                c"tmpfs".as_ptr(),
                target.as_ptr(),
                c"tmpfs".as_ptr(),
                0,
                opts.as_ptr() as *const libc::c_void,
            )
        };
        if r != 0 {
            return Err(format!(
                "cannot mount a tmpfs on {}: {}",
                dir.path().display(),
                std::io::Error::last_os_error()
            ));
        }
        Ok(SmallFs { dir })
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        let target =
            std::ffi::CString::new(self.dir.path().as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: valid C string; a lazy unmount of our own mount.
        unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) };
    }
}

#[test]
fn full_tmpfs_fails_writes_and_fsync_with_enospc_promptly() {
    let fs = match SmallFs::mount("2m") {
        Ok(fs) => fs,
        Err(why) => numaio_testkit::skip!(numaio_testkit::needs::TMPFS, "mount: {why}"),
    };
    // A cache larger than the file system: everything fits in the cache, fsync must fail.
    {
        let engine = Engine::new(EngineConfig {
            cache_bytes: 16 << 20,
            slices: Some(1),
            ..Default::default()
        })
        .unwrap();
        let f = engine
            .open(fs.dir.path().join("big"), OpenOptions::create_rw())
            .unwrap();
        let (acked, e) = write_until_error(&f, 4 << 20, 5);
        assert!(e.is_none() && acked == 4 << 20, "{e:?}");
        let t0 = std::time::Instant::now();
        let e = f.fsync().expect_err("4 MiB cannot fit a 2 MiB tmpfs");
        assert_enospc(&e, "fsync on a full tmpfs");
        assert!(t0.elapsed() < std::time::Duration::from_secs(10));
        drop(f);
        assert!(
            engine.close().is_err(),
            "close must report the unwritten data"
        );
    }
    std::fs::remove_file(fs.dir.path().join("big")).unwrap();
    // A cache smaller than the data: the writer itself must get ENOSPC.
    let path = fs.dir.path().join("f");
    let (acked, e) = within(
        "randwrite through a small cache onto a full tmpfs",
        std::time::Duration::from_secs(30),
        move || {
            let engine = Engine::new(EngineConfig {
                cache_bytes: 1 << 20,
                slices: Some(1),
                ..Default::default()
            })
            .unwrap();
            let f = engine.open(&path, OpenOptions::create_rw()).unwrap();
            let r = write_until_error(&f, 8 << 20, 6);
            drop(f);
            let _ = engine.close();
            r
        },
    );
    let e = e.expect("8 MiB cannot be written to a 2 MiB tmpfs");
    assert_enospc(&e, "pwrite on a full tmpfs");
    assert!(acked >= 1 << 20, "acked {acked}");
}
