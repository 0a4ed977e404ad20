//! Two numaio-fs volumes mounted through FUSE over io_uring by this one process at once,
//! with concurrent reads and writes on both, then both unmounted: nothing hangs (a watchdog
//! fails the test instead), each mount's ring served its requests, and what was fsync'd is
//! on each volume afterwards. Also: unmounting while a reader is in flight.
//! Needs root, /dev/fuse and a kernel with FUSE over io_uring; skips visibly otherwise.

mod common;
use common::volume;
use numaio_fs::store::MemStore;
use numaio_fs::{Caller, Fs, MountOptions};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Far longer than the whole test takes when nothing hangs (a few seconds).
const WATCHDOG: Duration = Duration::from_secs(60);

struct Mounted {
    bg: numaio_fuse::Mount,
    t: numaio_fuse::Transport,
    store: Arc<MemStore>,
    mnt: PathBuf,
}

fn mount(mnt: &Path) -> Mounted {
    let store = volume();
    let (bg, t, mode) = common::mount(&store, mnt, FuseMode::IoUring);
    assert_eq!(mode, FuseMode::IoUring, "{}", mnt.display());
    Mounted {
        bg,
        t,
        store,
        mnt: mnt.to_path_buf(),
    }
}

/// Runs `f` on a thread; panics if it does not finish within [`WATCHDOG`]. A hung FUSE
/// mount is aborted through fusectl so the process can exit.
fn within_watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(v) => v,
        Err(_) => {
            abort_fuse_connections();
            panic!("{what} did not finish within {WATCHDOG:?}: hung");
        }
    }
}

/// Aborts every FUSE connection of this test's file system name, so a hang ends.
fn abort_fuse_connections() {
    let dir = Path::new("/sys/fs/fuse/connections");
    let _ = std::process::Command::new("mount")
        .args(["-t", "fusectl", "none"])
        .arg(dir)
        .status();
    let mine: Vec<u32> = numaio_sys::mountinfo::read_self()
        .unwrap_or_default()
        .into_iter()
        .filter(|m| {
            m.fs_type == "fuse.numaio" && m.source.to_string_lossy().starts_with("numaio-test")
        })
        .map(|m| m.minor)
        .collect();
    for m in mine {
        let _ = std::fs::write(dir.join(m.to_string()).join("abort"), "1");
    }
}

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len as u32)
        .map(|i| (i.wrapping_mul(31).wrapping_add(seed) % 251) as u8)
        .collect()
}

/// Writes, fsyncs and reads back files on `mnt` from `threads` threads at once.
fn hammer(mnt: &Path, threads: u32, rounds: u32) {
    let hs: Vec<_> = (0..threads)
        .map(|t| {
            let mnt = mnt.to_path_buf();
            std::thread::spawn(move || {
                let f = mnt.join(format!("f{t}"));
                let data = pattern(t, 256 * 1024);
                for _ in 0..rounds {
                    let mut w = std::fs::File::create(&f).unwrap();
                    for c in data.chunks(4096) {
                        w.write_all(c).unwrap();
                    }
                    w.sync_all().unwrap();
                    drop(w);
                    let mut back = Vec::new();
                    std::fs::File::open(&f)
                        .unwrap()
                        .read_to_end(&mut back)
                        .unwrap();
                    assert!(back == data, "{}: read back differs", f.display());
                    let _ = std::fs::metadata(&f).unwrap();
                }
            })
        })
        .collect();
    for h in hs {
        h.join().expect("I/O thread");
    }
}

fn check_volume(store: &Arc<MemStore>, threads: u32) {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("remount");
    let c = Caller::root_on(0);
    for t in 0..threads {
        let a = fs.lookup(1, format!("f{t}").as_bytes(), &c).expect("file");
        let mut buf = vec![0u8; a.size as usize];
        fs.read(a.ino, 0, &mut buf).unwrap();
        assert!(buf == pattern(t, 256 * 1024), "f{t} differs on the volume");
    }
    fs.unmount().unwrap();
}

#[test]
fn two_io_uring_mounts_in_one_process_serve_and_unmount() {
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    std::fs::create_dir(&a).unwrap();
    std::fs::create_dir(&b).unwrap();
    within_watchdog("two io_uring mounts", move || {
        let ma = mount(&a);
        let mb = mount(&b);
        let (pa, pb) = (ma.mnt.clone(), mb.mnt.clone());
        let ha = std::thread::spawn(move || hammer(&pa, 3, 4));
        let hb = std::thread::spawn(move || hammer(&pb, 3, 4));
        ha.join().expect("I/O on the first mount");
        hb.join().expect("I/O on the second mount");
        for m in [&ma, &mb] {
            let n = m.t.requests();
            assert!(
                n.io_uring > 0,
                "{}: no request over the ring: {n:?}",
                m.mnt.display()
            );
        }
        let (sa, sb) = (ma.store.clone(), mb.store.clone());
        let (ta, tb) = (ma.t.clone(), mb.t.clone());
        ma.bg.unmount().expect("umount a");
        mb.bg.unmount().expect("umount b");
        assert_eq!(ta.mode(), FuseMode::Classic, "rings of a still running");
        assert_eq!(tb.mode(), FuseMode::Classic, "rings of b still running");
        check_volume(&sa, 3);
        check_volume(&sb, 3);
    });
}

#[test]
fn umount_with_a_reader_in_flight_does_not_hang() {
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("m");
    std::fs::create_dir(&mnt).unwrap();
    within_watchdog("umount under load", move || {
        let m = mount(&mnt);
        let f = m.mnt.join("big");
        let data = pattern(7, 1 << 20);
        {
            let mut w = std::fs::File::create(&f).unwrap();
            w.write_all(&data).unwrap();
            w.sync_all().unwrap();
        }
        // Readers keep requests coming until the mount goes away under them; their
        // errors (ENOTCONN, ENOENT, EBUSY) are expected, a hang is not.
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (f, stop) = (f.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let Ok(mut r) = std::fs::File::open(&f) else {
                            break;
                        };
                        let mut b = vec![0u8; 64 * 1024];
                        while let Ok(n) = r.read(&mut b) {
                            if n == 0 {
                                break;
                            }
                        }
                    }
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        let (store, t) = (m.store.clone(), m.t.clone());
        // A lazy detach, as `umount -l` does while files are open: the session ends
        // when the last reader lets go.
        let c = std::ffi::CString::new(m.mnt.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; umount2 reads it only.
        let r = unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        assert_eq!(r, 0, "umount2: {}", std::io::Error::last_os_error());
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in readers {
            h.join().expect("reader");
        }
        m.bg.wait().expect("FUSE session");
        assert_eq!(t.mode(), FuseMode::Classic, "rings still running");
        let fs = Fs::mount(store, MountOptions::default()).expect("remount");
        let a = fs
            .lookup(1, b"big", &Caller::root_on(0))
            .expect("fsync'd file");
        let mut buf = vec![0u8; a.size as usize];
        fs.read(a.ino, 0, &mut buf).unwrap();
        assert!(buf == data, "fsync'd data differs after umount");
        fs.unmount().unwrap();
    });
}
