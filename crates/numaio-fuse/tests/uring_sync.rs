//! Directory fsync and STATFS through an in-process mount, in classic and in io_uring mode:
//! an fsync of a directory commits (a rename over a file and a mkdir are on the volume's
//! power-cut image right after it) and statvfs's inode counts are consistent, the same way
//! in both transports. Needs root and /dev/fuse (io_uring mode also a kernel with FUSE over
//! io_uring); skips visibly otherwise.

mod common;
use common::{mount, uring_ready, volume};
use numaio_fs::store::CrashMode;
use numaio_fs::{Caller, Fs, MountOptions};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

fn statvfs(p: &Path) -> libc::statvfs {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct of the right type.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(libc::statvfs(c.as_ptr(), &mut s), 0);
        s
    }
}

fn fsync_dir_and_statfs(mode: FuseMode) {
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (bg, _t, started) = mount(&store, &mnt, mode);
    assert_eq!(started, mode);
    {
        let mut f = std::fs::File::create(mnt.join("old")).unwrap();
        f.write_all(b"old").unwrap();
        f.sync_all().unwrap();
    }
    {
        let mut f = std::fs::File::create(mnt.join("new.tmp")).unwrap();
        f.write_all(b"new").unwrap();
        f.sync_all().unwrap();
    }
    std::fs::rename(mnt.join("new.tmp"), mnt.join("old")).unwrap();
    std::fs::create_dir(mnt.join("newdir")).unwrap();
    std::fs::File::open(&mnt).unwrap().sync_all().unwrap();
    // The volume as a power cut now would leave it.
    let cut = Arc::new(store.crash(CrashMode::DropUnsynced));
    let fs = Fs::mount(cut, MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    let old = fs.lookup(1, b"old", &c).unwrap();
    let mut buf = [0u8; 3];
    fs.read(old.ino, 0, &mut buf).unwrap();
    assert_eq!(&buf, b"new", "{mode:?}: the rename was not committed");
    assert!(fs.lookup(1, b"new.tmp", &c).is_err(), "{mode:?}");
    assert!(fs.lookup(1, b"newdir", &c).is_ok(), "{mode:?}");

    let s = statvfs(&mnt);
    assert!(s.f_ffree > 0 && s.f_ffree <= s.f_files, "{mode:?}");
    // The root, old, newdir.
    assert_eq!(s.f_files - s.f_ffree, 3, "{mode:?}");
    assert_eq!(s.f_bfree, s.f_bavail);
    assert!(s.f_bfree < s.f_blocks);
    assert_eq!(s.f_namemax, 255);
    bg.unmount().expect("umount");
}

#[test]
fn directory_fsync_commits_and_statfs_agrees_classic() {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    fsync_dir_and_statfs(FuseMode::Classic);
}

#[test]
fn directory_fsync_commits_and_statfs_agrees_io_uring() {
    if let Err(why) = uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    fsync_dir_and_statfs(FuseMode::IoUring);
}
