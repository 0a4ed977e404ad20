//! Serving concurrency: eight threads each read their own file with O_DIRECT through a
//! mount whose devices take 50 ms per read. Every request waiting for its device holds a
//! serving thread (and, over io_uring, a ring entry), so the requests served at once must
//! reach eight, in both transports: before, a mount served at most max(2, nodes) requests
//! at once over /dev/fuse and one per CPU over io_uring, so one slow read held up the rest.
//! Needs root and /dev/fuse (io_uring: a kernel with FUSE over io_uring, which it turns on);
//! skips visibly otherwise.

mod common;
use numaio_fs::store::{BlockStore, DeviceInfo, MemStore};
use numaio_fs::{Caller, Fs, FsError, MountOptions};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

const READERS: usize = 8;
const DELAY: Duration = Duration::from_millis(50);

/// A store whose reads take [`DELAY`] once armed, as a device behind dm-delay does.
struct SlowStore {
    inner: Arc<MemStore>,
    armed: AtomicBool,
}

impl BlockStore for SlowStore {
    fn devices(&self) -> &[DeviceInfo] {
        self.inner.devices()
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        if self.armed.load(Ordering::Relaxed) {
            std::thread::sleep(DELAY);
        }
        self.inner.read_at(dev, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.inner.write_at(dev, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        self.inner.sync(dev)
    }
}

fn pattern(seed: usize) -> Vec<u8> {
    (0..65536usize)
        .map(|i| ((i * 13 + seed) % 251) as u8)
        .collect()
}

/// A volume with files `f0` … `f7` of 64 KiB each.
fn populated() -> Arc<MemStore> {
    let store = common::volume();
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    let c = Caller::root_on(0);
    for i in 0..READERS {
        let a = fs.create(1, format!("f{i}").as_bytes(), 0o644, &c).unwrap();
        fs.write(a.ino, 0, &pattern(i), &c).unwrap();
    }
    fs.unmount().expect("unmount volume");
    store
}

fn concurrent_reads(mode: FuseMode) {
    let store = populated();
    let slow = Arc::new(SlowStore {
        inner: store,
        armed: AtomicBool::new(false),
    });
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let fs = Fs::mount(slow.clone(), MountOptions::default()).expect("mount volume");
    let cfg = common::config(mode).with_threads_per_node(8).unwrap();
    let m = numaio_fuse::mount(fs, &mnt, &cfg).expect("FUSE mount");
    assert_eq!(m.mode(), mode);
    // Opened first, so only the reads meet the slow device.
    let files: Vec<std::fs::File> = (0..READERS)
        .map(|i| {
            std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_DIRECT)
                .open(mnt.join(format!("f{i}")))
                .unwrap()
        })
        .collect();
    slow.armed.store(true, Ordering::Relaxed);
    let start = Arc::new(Barrier::new(READERS));
    let t0 = Instant::now();
    let readers: Vec<_> = files
        .into_iter()
        .enumerate()
        .map(|(i, mut f)| {
            let start = start.clone();
            std::thread::spawn(move || {
                // O_DIRECT wants an aligned buffer.
                let mut raw = vec![0u8; 8192];
                let at = raw.as_ptr().align_offset(4096);
                let buf = &mut raw[at..at + 4096];
                start.wait();
                f.seek(SeekFrom::Start(8192)).unwrap();
                f.read_exact(buf).unwrap();
                assert!(buf[..] == pattern(i)[8192..8192 + 4096], "f{i}: wrong data");
            })
        })
        .collect();
    for r in readers {
        r.join().expect("reader");
    }
    let took = t0.elapsed();
    slow.armed.store(false, Ordering::Relaxed);
    let most = m.in_flight_max();
    eprintln!(
        "{mode:?}: {READERS} O_DIRECT reads of {DELAY:?} each took {took:?}; at most {most} requests served at once"
    );
    m.unmount().expect("umount");
    assert!(
        most >= READERS as u64,
        "{mode:?}: at most {most} requests were served at once; {READERS} readers waited on their device"
    );
}

#[test]
fn reads_waiting_for_their_device_do_not_hold_up_each_other_classic() {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    concurrent_reads(FuseMode::Classic);
}

#[test]
fn reads_waiting_for_their_device_do_not_hold_up_each_other_io_uring() {
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    concurrent_reads(FuseMode::IoUring);
}
