//! A numaio-fs volume (in memory) mounted through FUSE in this process, in io_uring mode and
//! in classic mode: file operations through the mount give the expected results, each mode's
//! request counter shows it served them, and what was fsync'd is on the volume after umount.
//! Needs root and /dev/fuse (and, for io_uring mode, a kernel with FUSE over io_uring);
//! skips visibly otherwise.

mod common;
use common::{mount, volume};
use numaio_fs::store::MemStore;
use numaio_fs::{Caller, Fs, MountOptions};
use numaio_fuse::FuseMode;
use numaio_testkit::skip;
use std::ffi::CString;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::Arc;

fn can_mount() -> bool {
    numaio_testkit::is_root() && Path::new("/dev/fuse").exists()
}

fn xattr_set(p: &Path, name: &str, v: &[u8]) -> std::io::Result<()> {
    let p = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    // SAFETY: NUL-terminated path and name; `v` is a live buffer of v.len() bytes.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn xattr_get(p: &Path, name: &str) -> std::io::Result<Vec<u8>> {
    let p = CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = CString::new(name).unwrap();
    let mut buf = vec![0u8; 256];
    // SAFETY: NUL-terminated path and name; `buf` is a live buffer of buf.len() bytes.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    buf.truncate(r as usize);
    Ok(buf)
}

/// The operations every mode must serve, checked against what was written.
fn exercise(mnt: &Path) {
    let d = mnt.join("dir");
    std::fs::create_dir(&d).unwrap();
    let f = d.join("a.txt");
    let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    {
        let mut w = std::fs::File::create(&f).unwrap();
        w.write_all(&data).unwrap();
        w.sync_all().unwrap();
    }
    assert_eq!(std::fs::read(&f).unwrap(), data);
    let mut r = std::fs::File::open(&f).unwrap();
    r.seek(SeekFrom::Start(123_456)).unwrap();
    let mut part = [0u8; 4096];
    r.read_exact(&mut part).unwrap();
    assert_eq!(&part[..], &data[123_456..123_456 + 4096]);
    assert_eq!(std::fs::metadata(&f).unwrap().len(), data.len() as u64);

    // readdir, rename, unlink, symlink.
    std::fs::write(d.join("b"), b"bee").unwrap();
    std::fs::rename(d.join("b"), d.join("c")).unwrap();
    std::os::unix::fs::symlink("a.txt", d.join("link")).unwrap();
    assert_eq!(
        std::fs::read_link(d.join("link")).unwrap(),
        Path::new("a.txt")
    );
    let mut names: Vec<String> = std::fs::read_dir(&d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["a.txt", "c", "link"]);
    assert_eq!(std::fs::read(d.join("c")).unwrap(), b"bee");
    std::fs::remove_file(d.join("c")).unwrap();
    std::fs::remove_file(d.join("link")).unwrap();
    assert!(!d.join("c").exists());

    // xattrs.
    xattr_set(&f, "user.k", b"value").unwrap();
    assert_eq!(xattr_get(&f, "user.k").unwrap(), b"value");
    let e = xattr_get(&f, "user.missing").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENODATA));

    // truncate and chmod (setattr).
    let g = std::fs::OpenOptions::new().write(true).open(&f).unwrap();
    g.set_len(10_000).unwrap();
    drop(g);
    assert_eq!(std::fs::metadata(&f).unwrap().len(), 10_000);
    std::fs::set_permissions(&f, std::os::unix::fs::PermissionsExt::from_mode(0o640)).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&f).unwrap().permissions())
            & 0o7777,
        0o640
    );

    // Shared writable mmap: a store through the mapping reaches the file.
    let m = d.join("mapped");
    std::fs::write(&m, vec![b'x'; 8192]).unwrap();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&m)
        .unwrap();
    // SAFETY: maps 8192 bytes of a file of that size; the mapping is used only below and
    // unmapped before the file is dropped.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            8192,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(p, libc::MAP_FAILED, "{}", std::io::Error::last_os_error());
        let s = std::slice::from_raw_parts_mut(p.cast::<u8>(), 8192);
        assert_eq!(s[100], b'x');
        s[4096..4101].copy_from_slice(b"hello");
        assert_eq!(libc::msync(p, 8192, libc::MS_SYNC), 0);
        libc::munmap(p, 8192);
    }
    file.sync_all().unwrap();
    drop(file);
    let back = std::fs::read(&m).unwrap();
    assert_eq!(&back[4096..4101], b"hello");
    assert_eq!(back[0], b'x');
}

/// The mount's readahead window was raised to 1 MiB, so sequential reads arrive as 1 MiB
/// READs rather than the kernel's default 128 KiB.
fn check_readahead(mnt: &Path) {
    let mp = mnt.canonicalize().unwrap();
    let knob = numaio_fuse::readahead::knob(&mp).expect("the mount is in mountinfo");
    let kb = std::fs::read_to_string(&knob).unwrap();
    assert!(
        kb.trim().parse::<u64>().unwrap() >= numaio_fuse::readahead::READAHEAD_KB,
        "{knob} is {kb}"
    );
}

/// After umount the volume holds the fsync'd data.
fn check_volume(store: &Arc<MemStore>) {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("remount");
    let c = Caller::root_on(0);
    let d = fs.lookup(1, b"dir", &c).expect("dir");
    let a = fs.lookup(d.ino, b"a.txt", &c).expect("a.txt");
    assert_eq!(a.size, 10_000);
    let mut buf = vec![0u8; 16];
    fs.read(a.ino, 5000, &mut buf).unwrap();
    let want: Vec<u8> = (5000..5016u32).map(|i| (i * 7 % 251) as u8).collect();
    assert_eq!(buf, want);
    assert_eq!(fs.getxattr(a.ino, b"user.k").unwrap(), b"value");
    let m = fs.lookup(d.ino, b"mapped", &c).expect("mapped");
    fs.read(m.ino, 4096, &mut buf[..5]).unwrap();
    assert_eq!(&buf[..5], b"hello");
    fs.unmount().unwrap();
}

#[test]
fn io_uring_mode_serves_the_file_operations() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (bg, t, mode) = mount(&store, &mnt, FuseMode::IoUring);
    assert!(t.is_negotiated(), "INIT did not accept FUSE_OVER_IO_URING");
    assert_eq!(mode, FuseMode::IoUring);
    assert_eq!(t.mode(), FuseMode::IoUring);
    check_readahead(&mnt);
    exercise(&mnt);
    let n = t.requests();
    assert!(n.io_uring > 0, "no request came over the ring: {n:?}");
    let s = bg.stats().expect("statistics while mounted");
    assert_eq!(s.fuse_mode, "io_uring");
    assert_eq!(Path::new(&s.mountpoint), mnt.canonicalize().unwrap());
    assert!(
        s.nodes.iter().map(|n| n.write_bytes).sum::<u64>() >= 300_000,
        "writes not accounted: {s:?}"
    );
    // The ring serves the requests; /dev/fuse sees at most forgets and interrupts, which
    // do not reach the volume.
    assert!(
        n.io_uring > 20 * n.classic.max(1) || n.classic == 0,
        "most requests went through /dev/fuse: {n:?}"
    );
    bg.unmount().expect("umount");
    assert_eq!(
        t.mode(),
        FuseMode::Classic,
        "rings still running after umount"
    );
    check_volume(&store);
}

#[test]
fn classic_mode_serves_the_file_operations() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    let store = volume();
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let (bg, t, mode) = mount(&store, &mnt, FuseMode::Classic);
    assert_eq!(mode, FuseMode::Classic);
    check_readahead(&mnt);
    exercise(&mnt);
    let n = t.requests();
    assert!(n.classic > 0 && n.io_uring == 0, "{n:?}");
    assert_eq!(bg.stats().expect("statistics").fuse_mode, "classic");
    bg.unmount().expect("umount");
    check_volume(&store);
}

/// A `/proc/self/task/TID/sched` field of thread `tid`, as a number.
fn sched_field(tid: i32, name: &str) -> i64 {
    let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/sched")).unwrap();
    text.lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().parse::<f64>().ok())?
        })
        .unwrap_or_else(|| panic!("no {name} in the sched file of thread {tid}")) as i64
}

/// The scheduling policy (`stat` field 41) of each of this process's ring threads.
fn ring_policies() -> Vec<i64> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc/self/task").unwrap() {
        let tid: i32 = e.unwrap().file_name().to_string_lossy().parse().unwrap();
        let comm =
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap_or_default();
        if comm.trim_end().starts_with("fuse-uring-") && comm.trim_end() != "fuse-uring-try" {
            out.push(sched_field(tid, "policy"));
        }
    }
    out
}

/// `n` statfs calls from a new thread; the thread's migrations between CPUs meanwhile.
fn statfs_migrations(mnt: &Path, n: usize) -> i64 {
    let mnt = CString::new(mnt.as_os_str().as_bytes()).unwrap();
    std::thread::spawn(move || {
        // SAFETY: gettid has no preconditions.
        let tid = unsafe { libc::gettid() };
        // SAFETY: an all-zero statfs is a valid buffer for the call to fill.
        let mut s: libc::statfs = unsafe { std::mem::zeroed() };
        let before = sched_field(tid, "se.nr_migrations");
        for _ in 0..n {
            // SAFETY: NUL-terminated path and a live statfs buffer.
            assert_eq!(unsafe { libc::statfs(mnt.as_ptr(), &mut s) }, 0);
        }
        sched_field(tid, "se.nr_migrations") - before
    })
    .join()
    .unwrap()
}

/// Ring threads wait under SCHED_IDLE, so a caller they answer is woken on the ring's CPU
/// and stays there: a serial caller hardly migrates between CPUs. With `local_wakeups`
/// off they wait under the normal policy.
#[test]
fn ring_threads_wake_their_callers_on_their_own_cpu() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    if let Err(why) = common::uring_ready() {
        skip!("FUSE over io_uring", "{why}");
    }
    const SCHED_OTHER: i64 = 0;
    const SCHED_IDLE: i64 = 5;
    const CALLS: usize = 4000;
    let mut moved = Vec::new();
    for on in [true, false] {
        let store = volume();
        let dir = tempfile::tempdir().unwrap();
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        let cfg = common::config(FuseMode::IoUring).with_local_wakeups(on);
        let (bg, t, _) = common::mount_with(&store, &mnt, &cfg);
        assert!(t.is_negotiated(), "INIT did not accept FUSE_OVER_IO_URING");
        let migrations = statfs_migrations(&mnt, CALLS);
        // Waiting for the next request, each ring thread is under its waiting policy.
        let want = if on { SCHED_IDLE } else { SCHED_OTHER };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let p = ring_policies();
            assert!(!p.is_empty(), "no ring thread found");
            if p.iter().all(|&x| x == want) {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ring threads' policies {p:?}, want all {want} (local_wakeups {on})"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        bg.unmount().expect("umount");
        moved.push(migrations);
    }
    eprintln!(
        "{CALLS} statfs calls: the caller migrated {} times with local wakeups, {} without \
         (without, it depends on whether another CPU was idle)",
        moved[0], moved[1]
    );
    assert!(
        moved[0] < (CALLS / 10) as i64,
        "with local wakeups the caller still migrated {} times in {CALLS} calls",
        moved[0]
    );
}
