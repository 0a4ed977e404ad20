//! Listings with attributes (readdirplus) over FUSE io_uring and over classic `/dev/fuse`:
//! a directory of 1,200 entries lists the same names, inode numbers, sizes and modes in
//! both transports, and stat of every entry after the listing is answered by the kernel
//! from what the listing carried (no LOOKUP per entry). Needs root and /dev/fuse (io_uring:
//! a kernel with FUSE over io_uring, which it turns on); skips visibly otherwise.

mod common;
use common::volume;
use numaio_fs::store::MemStore;
use numaio_fs::{Caller, Fs, MountOptions, SetAttr};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::os::unix::fs::{DirEntryExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

const ENTRIES: u32 = 1200;

/// (name, inode, size, mode) of one listed entry.
type Listed = (String, u64, u64, u32);

/// Fills `/big` on the volume directly: files of varied sizes and modes, some directories
/// and symlinks, names of varied lengths.
fn populate(store: &Arc<MemStore>) {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    let c = Caller::root_on(0);
    let big = fs.mkdir(1, b"big", 0o755, &c).expect("mkdir big");
    for i in 0..ENTRIES {
        let name = format!("e{i:05}{}", "x".repeat((i % 40) as usize));
        match i % 10 {
            0 => {
                fs.mkdir(big.ino, name.as_bytes(), 0o700 + (i % 8), &c)
                    .unwrap();
            }
            1 => {
                fs.symlink(big.ino, name.as_bytes(), b"target", &c).unwrap();
            }
            _ => {
                let a = fs
                    .create(big.ino, name.as_bytes(), 0o600 + (i % 64), &c)
                    .unwrap();
                let s = SetAttr {
                    mode: None,
                    uid: None,
                    gid: None,
                    size: Some(u64::from(i) * 97),
                    atime: None,
                    mtime: None,
                    atime_now: false,
                    mtime_now: false,
                    through_writable_fd: false,
                };
                fs.setattr(a.ino, &s, &c).unwrap();
            }
        }
    }
    fs.unmount().expect("unmount volume");
}

/// Lists `dir` (all of it first, as `ls -l` does), then stats every entry. Returns the
/// entries sorted by name and the requests the stats cost the server.
fn list_then_stat(dir: &Path, t: &numaio_fuse::Transport) -> (Vec<Listed>, u64) {
    let names: Vec<(String, u64)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (e.file_name().into_string().unwrap(), e.ino())
        })
        .collect();
    let total = |n: numaio_fuse::RequestCounts| n.classic + n.io_uring;
    let before = total(t.requests());
    let mut out: Vec<Listed> = names
        .into_iter()
        .map(|(n, ino)| {
            let m = std::fs::symlink_metadata(dir.join(&n)).unwrap();
            assert_eq!(m.ino(), ino, "{n}: readdir and stat disagree on the inode");
            (n, ino, m.size(), m.mode())
        })
        .collect();
    let stats_cost = total(t.requests()) - before;
    out.sort();
    (out, stats_cost)
}

fn listing(store: &Arc<MemStore>, mode: FuseMode) -> (Vec<Listed>, u64) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (bg, t, started) = common::mount(store, &mnt, mode);
    assert_eq!(started, mode);
    let r = list_then_stat(&mnt.join("big"), &t);
    bg.unmount().expect("umount");
    r
}

#[test]
fn readdirplus_lists_the_same_in_both_transports_and_spares_lookups() {
    if !(numaio_testkit::is_root() && Path::new("/dev/fuse").exists()) {
        skip!("root and /dev/fuse");
    }
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    let store = volume();
    populate(&store);
    let (classic, classic_cost) = listing(&store, FuseMode::Classic);
    let (ring, ring_cost) = listing(&store, FuseMode::IoUring);
    eprintln!("requests for {ENTRIES} stats after the listing: classic {classic_cost}, io_uring {ring_cost}");
    assert_eq!(classic.len(), ENTRIES as usize);
    assert_eq!(
        ring, classic,
        "the io_uring listing differs from the classic one"
    );
    let f = classic.iter().find(|e| e.0 == "e00002xx").unwrap();
    assert_eq!((f.2, f.3), (2 * 97, libc::S_IFREG | 0o602));
    // With attributes in the listing, the kernel answers the stats itself: a few requests
    // at most (the directory's own), never one LOOKUP per entry.
    for (mode, cost) in [("classic", classic_cost), ("io_uring", ring_cost)] {
        assert!(
            cost < 20,
            "{mode}: {cost} requests for {ENTRIES} stats after a listing"
        );
    }
}
