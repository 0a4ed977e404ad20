//! What the kernel answers without the server, in both transports. Symlinks
//! (`FUSE_CACHE_SYMLINKS`): a target is read from the server once, then from the kernel's
//! cache. Opens without the server (`FUSE_NO_OPEN_SUPPORT`, `FUSE_NO_OPENDIR_SUPPORT`): once the first OPEN and OPENDIR were answered ENOSYS, opening, reading and
//! closing cached files and listing a cached directory cost no request; an unlinked file
//! still open keeps its data (read back from the volume after its cached pages were
//! dropped) and is freed only after the last close, when the kernel forgets it; after the
//! unmount no orphan is left and fsck is clean. Creates without the server's open: a new file
//! costs LOOKUP and MKNOD, no RELEASE at its close, with O_EXCL, O_TRUNC and a read-only
//! mode behaving as on ext4. Needs root and /dev/fuse (io_uring: a kernel
//! with FUSE over io_uring, which it turns on); skips visibly otherwise.

mod common;
use common::volume;
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::store::MemStore;
use numaio_fs::{Fs, MountOptions};
use numaio_fuse::{FuseMode, RequestCounts, Transport};
use numaio_testkit::skip;
use std::ffi::CString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

const FILES: usize = 50;
const ROUNDS: usize = 10;

fn total(t: &Transport) -> u64 {
    let RequestCounts {
        classic, io_uring, ..
    } = t.requests();
    classic + io_uring
}

/// Inodes in use on the mount, from statvfs.
fn inodes_in_use(p: &Path) -> u64 {
    let c = CString::new(p.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid path and a zeroed statvfs for the call to fill.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    assert_eq!(unsafe { libc::statvfs(c.as_ptr(), &mut s) }, 0, "statvfs");
    s.f_files - s.f_ffree
}

fn within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while !cond() {
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// Why `mode` cannot be mounted here, if it cannot.
fn unavailable(mode: FuseMode) -> Option<String> {
    match mode {
        FuseMode::Classic => (!(numaio_testkit::is_root() && Path::new("/dev/fuse").exists()))
            .then(|| "root and /dev/fuse".to_string()),
        FuseMode::IoUring => common::uring_ready()
            .err()
            .map(|why| format!("FUSE over io_uring ({why})")),
    }
}

/// A fresh volume mounted in `mode`: the volume, its mount point's directory (kept while the
/// mount lives), the mount point, the mount and its transport.
fn mounted(
    mode: FuseMode,
) -> (
    Arc<MemStore>,
    tempfile::TempDir,
    PathBuf,
    numaio_fuse::Mount,
    Transport,
) {
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (m, t, started) = common::mount(&store, &mnt, mode);
    assert_eq!(started, mode);
    (store, dir, mnt, m, t)
}

fn opens_and_unlinked_files(mode: FuseMode) {
    let (store, _dir, mnt, m, t) = mounted(mode);
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    for i in 0..FILES {
        std::fs::write(d.join(format!("f{i}")), format!("file {i}")).unwrap();
    }
    // A first round opens each file and lists the directory once: the first OPEN and
    // OPENDIR are answered ENOSYS, the files' pages and the listing come into the cache.
    for i in 0..FILES {
        std::fs::read(d.join(format!("f{i}"))).unwrap();
    }
    assert_eq!(std::fs::read_dir(&d).unwrap().count(), FILES);

    let before = total(&t);
    for _ in 0..ROUNDS {
        for i in 0..FILES {
            let mut s = String::new();
            std::fs::File::open(d.join(format!("f{i}")))
                .unwrap()
                .read_to_string(&mut s)
                .unwrap();
            assert_eq!(s, format!("file {i}"));
        }
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), FILES);
    }
    let cost = total(&t) - before;
    eprintln!(
        "{mode:?}: {cost} requests for {} opens and {ROUNDS} listings",
        FILES * ROUNDS
    );
    // With OPEN and RELEASE each open would cost two requests, each listing OPENDIR and
    // RELEASEDIR: over a thousand. The kernel now answers them all from its caches.
    assert!(cost < 20, "{mode:?}: {cost} requests");

    // An unlinked file still open keeps its data and its inode until the last close.
    let g = mnt.join("g");
    let data: Vec<u8> = (0..1u32 << 20).map(|i| (i % 251) as u8).collect();
    std::fs::write(&g, &data).unwrap();
    let used = inodes_in_use(&mnt);
    let mut f = std::fs::File::open(&g).unwrap();
    std::fs::remove_file(&g).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(
        inodes_in_use(&mnt),
        used,
        "{mode:?}: freed while still open"
    );
    // Drop the cached pages, so the read goes to the volume.
    // SAFETY: a valid descriptor; the advice changes nothing but the cache.
    let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    assert_eq!(r, 0);
    let before = total(&t);
    let mut back = Vec::new();
    f.read_to_end(&mut back).unwrap();
    assert!(
        total(&t) > before,
        "{mode:?}: the read was not served by the volume"
    );
    assert!(
        back == data,
        "{mode:?}: the unlinked file read back different data"
    );
    drop(f);
    assert!(
        within(Duration::from_secs(5), || inodes_in_use(&mnt) == used - 1),
        "{mode:?}: {} inodes in use 5 s after the last close, not {}",
        inodes_in_use(&mnt),
        used - 1
    );

    // Every file still named is let go at the unmount: nothing is left to free.
    m.unmount().expect("umount");
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    assert_eq!(fs.mount_info().orphans_freed, 0, "{mode:?}");
    assert_eq!(
        std::fs::read_dir(&d).map(|r| r.count()).unwrap_or(0),
        0,
        "unmounted"
    );
    fs.unmount().unwrap();
    let report = fsck(&*store, &FsckOptions::default()).expect("fsck");
    assert!(report.errors.is_empty(), "{mode:?}: {:?}", report.errors);
    assert_eq!(report.orphans, 0, "{mode:?}");
    assert_eq!(report.files, FILES as u64, "{mode:?}");
}

#[test]
fn opens_skip_the_server_and_unlinked_files_live_until_forgotten_classic() {
    if let Some(why) = unavailable(FuseMode::Classic) {
        skip!("a classic FUSE mount", "{why}");
    }
    opens_and_unlinked_files(FuseMode::Classic);
}

#[test]
fn opens_skip_the_server_and_unlinked_files_live_until_forgotten_io_uring() {
    if let Some(why) = unavailable(FuseMode::IoUring) {
        skip!("a FUSE over io_uring mount", "{why}");
    }
    opens_and_unlinked_files(FuseMode::IoUring);
}

fn symlinks_read_once(mode: FuseMode) {
    let (_store, _dir, mnt, m, t) = mounted(mode);
    std::fs::write(mnt.join("target"), b"t").unwrap();
    let links: Vec<_> = (0..20).map(|i| mnt.join(format!("l{i}"))).collect();
    for (i, l) in links.iter().enumerate() {
        std::os::unix::fs::symlink(format!("target-{i}-{}", "x".repeat(i * 7)), l).unwrap();
        assert_eq!(
            std::fs::read_link(l).unwrap().to_str().unwrap(),
            format!("target-{i}-{}", "x".repeat(i * 7))
        );
    }
    let before = total(&t);
    for _ in 0..ROUNDS {
        for (i, l) in links.iter().enumerate() {
            let got = std::fs::read_link(l).unwrap();
            assert_eq!(
                got.to_str().unwrap(),
                format!("target-{i}-{}", "x".repeat(i * 7))
            );
        }
    }
    let cost = total(&t) - before;
    eprintln!(
        "{mode:?}: {cost} requests for {} readlinks",
        links.len() * ROUNDS
    );
    assert!(cost < 5, "{mode:?}: {cost} requests");
    // Replaced by another symlink of the same name: the new target, never the cached one.
    std::fs::remove_file(&links[0]).unwrap();
    std::os::unix::fs::symlink("elsewhere", &links[0]).unwrap();
    assert_eq!(
        std::fs::read_link(&links[0]).unwrap().to_str(),
        Some("elsewhere")
    );
    let tmp = mnt.join("tmp-link");
    std::os::unix::fs::symlink("renamed-over", &tmp).unwrap();
    std::fs::rename(&tmp, &links[1]).unwrap();
    assert_eq!(
        std::fs::read_link(&links[1]).unwrap().to_str(),
        Some("renamed-over")
    );
    m.unmount().expect("umount");
}

#[test]
fn symlink_targets_are_read_from_the_server_once_classic() {
    if let Some(why) = unavailable(FuseMode::Classic) {
        skip!("a classic FUSE mount", "{why}");
    }
    symlinks_read_once(FuseMode::Classic);
}

#[test]
fn symlink_targets_are_read_from_the_server_once_io_uring() {
    if let Some(why) = unavailable(FuseMode::IoUring) {
        skip!("a FUSE over io_uring mount", "{why}");
    }
    symlinks_read_once(FuseMode::IoUring);
}

fn creates_without_release(mode: FuseMode) {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let (_store, _dir, mnt, m, t) = mounted(mode);
    // The first create is answered ENOSYS and made again with MKNOD by the kernel.
    std::fs::write(mnt.join("first"), b"1").unwrap();
    let d = mnt.join("d");
    std::fs::create_dir(&d).unwrap();
    let new = |p: &Path| {
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o444)
            .open(p)
    };
    let before = total(&t);
    for i in 0..FILES {
        drop(new(&d.join(format!("f{i}"))).unwrap());
    }
    let cost = total(&t) - before;
    eprintln!("{mode:?}: {cost} requests for {FILES} creates");
    // LOOKUP of the new name and MKNOD: two round trips, where CREATE costs a RELEASE at
    // each close besides (three).
    assert!(
        cost <= 2 * FILES as u64 + 5,
        "{mode:?}: {cost} requests for {FILES} creates"
    );

    // As on ext4: O_EXCL refuses an existing name; the creator writes its new read-only
    // file; O_TRUNC without O_EXCL opens an existing file and empties it.
    let f = d.join("f0");
    assert_eq!(
        new(&f).unwrap_err().raw_os_error(),
        Some(libc::EEXIST),
        "{mode:?}"
    );
    let ro = d.join("ro");
    {
        use std::io::Write;
        let mut w = new(&ro).unwrap();
        w.write_all(b"written by its creator").unwrap();
    }
    let md = std::fs::metadata(&ro).unwrap();
    assert_eq!(md.permissions().mode() & 0o7777, 0o444, "{mode:?}");
    assert_eq!(md.len(), 22, "{mode:?}");
    std::fs::write(&f, b"some data").unwrap();
    drop(
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&f)
            .unwrap(),
    );
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 0, "{mode:?}");
    // What the creator wrote is on the volume, not only in the kernel's cache.
    let r = std::fs::File::open(&ro).unwrap();
    // SAFETY: a valid descriptor; the advice changes nothing but the cache.
    assert_eq!(
        unsafe { libc::posix_fadvise(r.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) },
        0
    );
    drop(r);
    assert_eq!(
        std::fs::read(&ro).unwrap(),
        b"written by its creator",
        "{mode:?}"
    );
    assert_eq!(
        std::fs::read_dir(&d).unwrap().count(),
        FILES + 1,
        "{mode:?}"
    );
    m.unmount().expect("umount");
}

#[test]
fn creates_cost_no_release_classic() {
    if let Some(why) = unavailable(FuseMode::Classic) {
        skip!("a classic FUSE mount", "{why}");
    }
    creates_without_release(FuseMode::Classic);
}

#[test]
fn creates_cost_no_release_io_uring() {
    if let Some(why) = unavailable(FuseMode::IoUring) {
        skip!("a FUSE over io_uring mount", "{why}");
    }
    creates_without_release(FuseMode::IoUring);
}
