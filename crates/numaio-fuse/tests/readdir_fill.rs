//! Large listings through a mount: every READDIR(PLUS) reply but the last is filled, so a
//! listing costs no more requests than its bytes over the reply size suggest, and every
//! entry is listed exactly once. Counted with the mount's request counters
//! (`Transport::requests().listings`). A repeated listing is answered from the kernel's
//! readdir cache, which a change drops. Needs root and /dev/fuse (the io_uring part: a kernel
//! with FUSE over io_uring, which it turns on); skips visibly otherwise.

mod common;
use numaio_fs::store::MemStore;
use numaio_fs::{Caller, Fs, MkfsOptions, MountOptions, PlacementPolicy};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;

const ENTRIES: usize = 6000;
/// `fuse_entry_out` + `fuse_dirent` before the name, in a READDIRPLUS record.
const PLUS_HEAD: usize = 128 + 24;

/// A volume large enough for the directory's metadata.
fn big_volume() -> Arc<MemStore> {
    let s = Arc::new(MemStore::new(&[(0, 64 << 20)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 1024,
        journal_blocks: 512,
        checkpoint_blocks: 1024,
    };
    Fs::mkfs(&*s, &o).expect("mkfs");
    s
}

/// `/big` with [`ENTRIES`] empty files, names of 2 to 80 bytes; returns name → inode.
fn populate(store: &Arc<MemStore>) -> BTreeMap<Vec<u8>, u64> {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    let c = Caller::root_on(0);
    let big = fs.mkdir(1, b"big", 0o755, &c).expect("mkdir big");
    let mut want = BTreeMap::new();
    for i in 0..ENTRIES {
        let mut name = format!("{i:x}.").into_bytes();
        let len = name.len().max(1 + (i * 7) % 80);
        name.resize(len, b'n');
        let a = fs.create(big.ino, &name, 0o644, &c).unwrap();
        want.insert(name, a.ino);
    }
    fs.unmount().expect("unmount volume");
    want
}

/// Lists `dir` with raw getdents64 calls of `buf` bytes each: (name, inode) in order.
fn getdents(dir: &Path, buf: usize) -> Vec<(Vec<u8>, u64)> {
    let p = CString::new(dir.as_os_str().as_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(p.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY) };
    assert!(fd >= 0, "open {dir:?}: {}", std::io::Error::last_os_error());
    let mut b = vec![0u8; buf];
    let mut out = Vec::new();
    loop {
        // SAFETY: getdents64 writes at most `buf` bytes into `b`.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, fd, b.as_mut_ptr(), b.len()) };
        assert!(n >= 0, "getdents64: {}", std::io::Error::last_os_error());
        if n == 0 {
            break;
        }
        let mut at = 0;
        while at < n as usize {
            // linux_dirent64: ino u64, off i64, reclen u16, type u8, name (NUL-terminated).
            let ino = u64::from_ne_bytes(b[at..at + 8].try_into().unwrap());
            let reclen = u16::from_ne_bytes(b[at + 16..at + 18].try_into().unwrap()) as usize;
            let name = &b[at + 19..at + reclen];
            let name = &name[..name.iter().position(|&c| c == 0).unwrap()];
            out.push((name.to_vec(), ino));
            at += reclen;
        }
    }
    // SAFETY: `fd` is open and owned here.
    unsafe { libc::close(fd) };
    out
}

/// Lists `/big` through a mount in `mode` with getdents buffers of `buf` bytes; checks every
/// entry once with its inode; returns (listing requests, largest reply size the transport
/// saw asked, READDIRPLUS bytes of the whole listing, largest record).
fn list(
    store: &Arc<MemStore>,
    want: &BTreeMap<Vec<u8>, u64>,
    mode: FuseMode,
    buf: usize,
) -> (u64, u64, usize, usize) {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (bg, t, started) = common::mount(store, &mnt, mode);
    assert_eq!(started, mode);
    let big = mnt.join("big");
    // Looked up first, so the count below is the listing's alone.
    std::fs::metadata(&big).unwrap();
    let before = t.requests();
    let got = getdents(&big, buf);
    let after = t.requests();
    // Listed again unchanged: the kernel's readdir cache answers, no request.
    let again = getdents(&big, buf);
    assert_eq!(
        t.requests().listings,
        after.listings,
        "{mode:?}: a repeated listing reached the server"
    );
    assert!(again == got, "{mode:?}: the cached listing differs");
    // A change through the mount drops the cached listing.
    let new = big.join("new-entry");
    std::fs::File::create(&new).unwrap();
    let with_new = getdents(&big, buf);
    assert_eq!(
        with_new.len(),
        got.len() + 1,
        "{mode:?}: listing after a create"
    );
    assert!(with_new.iter().any(|(n, _)| n.as_slice() == b"new-entry"));
    std::fs::remove_file(&new).unwrap();
    assert!(
        getdents(&big, buf) == got,
        "{mode:?}: listing after the unlink"
    );
    bg.unmount().expect("umount");

    let mut seen: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
    for (n, ino) in &got {
        if n.as_slice() == b"." || n.as_slice() == b".." {
            continue;
        }
        assert!(
            seen.insert(n.clone(), *ino).is_none(),
            "{mode:?}: {:?} listed twice",
            String::from_utf8_lossy(n)
        );
    }
    assert_eq!(
        seen.len(),
        want.len(),
        "{mode:?}, {buf}-byte getdents: entries listed"
    );
    assert!(
        seen == *want,
        "{mode:?}: listed names or inodes differ from the directory's"
    );
    let rec = |n: &[u8]| (PLUS_HEAD + n.len()).next_multiple_of(8);
    let bytes: usize = got.iter().map(|(n, _)| rec(n)).sum();
    let largest = got.iter().map(|(n, _)| rec(n)).max().unwrap();
    (
        after.listings - before.listings,
        after.listing_size,
        bytes,
        largest,
    )
}

/// Requests a listing of `bytes` needs at most with replies of `size` bytes each filled but
/// for less than one record, plus the empty reply that ends it.
fn bound(bytes: usize, size: usize, largest: usize) -> u64 {
    bytes.div_ceil(size - largest) as u64 + 1
}

#[test]
fn listings_fill_every_reply_and_list_each_entry_once() {
    if !(numaio_testkit::is_root() && Path::new("/dev/fuse").exists()) {
        skip!("root and /dev/fuse");
    }
    let store = big_volume();
    let want = populate(&store);

    // One-page getdents buffers: every kernel asks for one-page replies then.
    let (reqs, _, bytes, largest) = list(&store, &want, FuseMode::Classic, 4096);
    let most = bound(bytes, 4096, largest);
    eprintln!("classic, 4 KiB getdents: {reqs} listing requests for {bytes} bytes (bound {most})");
    assert!(reqs <= most, "classic: {reqs} READDIR(PLUS) requests for {bytes} bytes of 4 KiB replies (at most {most})");
    // glibc's buffer: kernels from 6.16 ask for replies as large as the getdents buffer
    // (fuser does not tell the classic handler the size, so they are filled batch by batch
    // until full); older ones still ask for one page.
    let (big_reqs, _, _, _) = list(&store, &want, FuseMode::Classic, 32 << 10);
    let most = bound(bytes, 32 << 10, largest);
    eprintln!("classic, 32 KiB getdents: {big_reqs} listing requests (bound {most})");
    assert!(
        big_reqs <= most || big_reqs.abs_diff(reqs) <= 1,
        "classic: {big_reqs} requests with 32 KiB getdents: neither full 32 KiB replies (at \
         most {most}) nor one-page ones ({reqs})"
    );

    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    for buf in [4096, 64 << 10] {
        let (reqs, size, bytes, largest) = list(&store, &want, FuseMode::IoUring, buf);
        let size = size as usize;
        assert!(
            size >= 4096,
            "io_uring: the kernel's reply size was not recorded ({size})"
        );
        let most = bound(bytes, size, largest);
        eprintln!("io_uring, {buf}-byte getdents: {reqs} listing requests for {bytes} bytes of {size}-byte replies (bound {most})");
        assert!(
            reqs <= most,
            "io_uring: {reqs} requests for {bytes} bytes of {size}-byte replies (at most {most})"
        );
    }
}
