//! The kernel's writeback cache (`-o writeback_cache`) through an in-process mount, in
//! classic and in io_uring mode: what the server must get right once buffered writes stay
//! in the kernel's page cache. A write-only descriptor's partial-page write makes the kernel
//! READ the page; O_APPEND appends at the kernel's size; truncates over dirty pages shrink
//! and extend as on ext4; fsync'd data and the kernel's mtime are on the volume's
//! power-cut image; another user's write and fsync through a writable file succeed (the
//! kernel sends its cached times with that user's credentials); SEEK_DATA/SEEK_HOLE see
//! data not yet written back. Needs root and /dev/fuse
//! (io_uring mode also a kernel with FUSE over io_uring); skips visibly otherwise.

mod common;
use common::{config, mount_with, uring_ready, volume};
use numaio_fs::store::{CrashMode, MemStore};
use numaio_fs::{Caller, Fs, MountOptions};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

/// The file `name` in the root of the volume as a power cut now would leave it.
fn after_cut(store: &MemStore, name: &[u8]) -> (Vec<u8>, numaio_fs::FileAttr) {
    let cut = Arc::new(store.crash(CrashMode::DropUnsynced));
    let fs = Fs::mount(cut, MountOptions::default()).unwrap();
    let a = fs.lookup(1, name, &Caller::root_on(0)).unwrap();
    let mut buf = vec![0u8; a.size as usize];
    let n = fs.read(a.ino, 0, &mut buf).unwrap();
    assert_eq!(n, buf.len());
    (buf, a)
}

fn writeback(mode: FuseMode) {
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let cfg = config(mode)
        .with_default_permissions(true)
        .with_allow_other(true)
        .with_writeback_cache(true);
    let (bg, _t, started) = mount_with(&store, &mnt, &cfg);
    assert_eq!(started, mode);

    // A partial-page write through a write-only descriptor: the kernel reads the rest of
    // the page from the server through that descriptor.
    let p = mnt.join("wronly");
    std::fs::write(&p, vec![b'a'; 6000]).unwrap();
    // Off the kernel's page cache, so the page must be read back. This file only: dropping
    // every cache would disturb tests running beside this one.
    evict(&p);
    {
        let f = std::fs::OpenOptions::new().write(true).open(&p).unwrap();
        f.write_all_at(b"XYZ", 4100).unwrap();
        f.sync_all().unwrap();
    }
    let mut want = vec![b'a'; 6000];
    want[4100..4103].copy_from_slice(b"XYZ");
    assert_eq!(std::fs::read(&p).unwrap(), want, "{mode:?}");
    assert_eq!(
        after_cut(&store, b"wronly").0,
        want,
        "{mode:?}: fsync'd write lost"
    );

    // O_APPEND appends at the size the kernel keeps, written or not yet written back.
    let p = mnt.join("append");
    for part in [&b"one\n"[..], b"two\n", b"three\n"] {
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&p)
            .unwrap();
        f.write_all(part).unwrap();
    }
    {
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        f.write_all(b"four\n").unwrap();
        f.sync_all().unwrap();
    }
    assert_eq!(std::fs::read(&p).unwrap(), b"one\ntwo\nthree\nfour\n");
    assert_eq!(after_cut(&store, b"append").0, b"one\ntwo\nthree\nfour\n");

    // Truncates over dirty pages: shrink, extend (zeros), write past the old end.
    let p = mnt.join("trunc");
    {
        let f = std::fs::File::create(&p).unwrap();
        f.write_all_at(&[b'b'; 8000], 0).unwrap();
        f.set_len(3000).unwrap();
        f.set_len(10000).unwrap();
        f.write_all_at(b"end", 9000).unwrap();
        f.sync_all().unwrap();
    }
    let mut want = vec![0u8; 10000];
    want[..3000].fill(b'b');
    want[9000..9003].copy_from_slice(b"end");
    let mut got = Vec::new();
    std::fs::File::open(&p)
        .unwrap()
        .read_to_end(&mut got)
        .unwrap();
    assert_eq!(got, want, "{mode:?}");
    let (cut, a) = after_cut(&store, b"trunc");
    assert_eq!(cut, want, "{mode:?}: fsync'd truncate and write lost");
    // The kernel keeps the mtime of cached writes; fsync sends it to the server.
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(
        a.mtime,
        m.mtime() * 1_000_000_000 + m.mtime_nsec(),
        "{mode:?}: the kernel's mtime did not reach the volume"
    );

    // Another user writes a file it may write but does not own, fsyncs it, touches it.
    let p = mnt.join("shared");
    std::fs::write(&p, b"").unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o666)).unwrap();
    let q = p.clone();
    std::thread::spawn(move || {
        // SAFETY: setfsuid changes only this thread's file system user id.
        unsafe { libc::setfsuid(4321) };
        let mut f = std::fs::OpenOptions::new().write(true).open(&q).unwrap();
        f.write_all(b"by another user").unwrap();
        f.sync_all()
            .expect("fsync by a writer who is not the owner");
        drop(f);
        let c = std::ffi::CString::new(q.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; NULL times mean now.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), std::ptr::null(), 0) };
        assert_eq!(
            r,
            0,
            "touch by a writer: {}",
            std::io::Error::last_os_error()
        );
        let when = [libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        }; 2];
        // SAFETY: as above, with two valid timespecs.
        let r = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), when.as_ptr(), 0) };
        assert_eq!(r, -1, "a chosen time needs ownership");
    })
    .join()
    .unwrap();
    assert_eq!(after_cut(&store, b"shared").0, b"by another user");
    assert_eq!(std::fs::metadata(&p).unwrap().uid(), 0);

    // SEEK_DATA/SEEK_HOLE over data not yet written back: the file is data up to the size
    // the kernel keeps.
    {
        let f = std::fs::File::create(mnt.join("seek")).unwrap();
        f.write_all_at(&[b's'; 10000], 0).unwrap();
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        // SAFETY: lseek on an open descriptor.
        let seek = |off, whence| unsafe { libc::lseek(fd, off, whence) };
        assert_eq!(seek(0, libc::SEEK_DATA), 0, "{mode:?}");
        assert_eq!(seek(5000, libc::SEEK_DATA), 5000, "{mode:?}");
        assert_eq!(seek(0, libc::SEEK_HOLE), 10000, "{mode:?}");
        assert_eq!(seek(10000, libc::SEEK_DATA), -1, "{mode:?}");
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENXIO)
        );
    }

    // A file written and unlinked: the kernel flushes its cached times after the volume
    // freed it, and syncfs must not report that as an error.
    std::fs::write(mnt.join("gone"), b"x").unwrap();
    std::fs::remove_file(mnt.join("gone")).unwrap();
    let d = std::fs::File::open(&mnt).unwrap();
    // SAFETY: syncfs on an open descriptor.
    let r = unsafe { libc::syncfs(std::os::fd::AsRawFd::as_raw_fd(&d)) };
    assert_eq!(
        r,
        0,
        "{mode:?}: syncfs: {}",
        std::io::Error::last_os_error()
    );
    drop(d);

    // What fsync did not cover is written back by the unmount.
    {
        let mut f = std::fs::File::create(mnt.join("unsynced")).unwrap();
        f.write_all(&[b'u'; 12345]).unwrap();
    }
    bg.unmount().expect("umount");
    let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
    let a = fs.lookup(1, b"unsynced", &Caller::root_on(0)).unwrap();
    assert_eq!(a.size, 12345, "{mode:?}");
}

/// Writes `p`'s dirty pages to the server, then drops its cached pages.
fn evict(p: &Path) {
    let r = numaio_pagecache::evict_file(p, true).expect("evict the file's cached pages");
    assert_eq!(
        r.resident_after,
        Some(0),
        "{}: pages still cached",
        p.display()
    );
}

#[test]
fn writeback_cache_semantics_classic() {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    writeback(FuseMode::Classic);
}

#[test]
fn writeback_cache_semantics_io_uring() {
    if let Err(why) = uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    writeback(FuseMode::IoUring);
}

#[test]
fn writeback_cache_needs_default_permissions() {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let fs = Fs::mount(store, MountOptions::default()).unwrap();
    let cfg = config(FuseMode::Classic).with_writeback_cache(true);
    let e = numaio_fuse::mount(fs, dir.path(), &cfg).err().unwrap();
    assert!(e.to_string().contains("default_permissions"), "{e}");
}
