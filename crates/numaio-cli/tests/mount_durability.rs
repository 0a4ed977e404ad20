//! `numaio mount` after `kill -9` of its server, and freed space while mounted: directory
//! fsync (a rename over a file, a mkdir), `sync` plus the commit interval (`-o commit=`),
//! SQLite's rollback journal; space that deleted files (and closed unlinked ones) give back
//! without an unmount, on a file volume and on a RAM zone; statvfs's inode counts. Each
//! test mounts through the real binary (root and /dev/fuse, else skipped visibly).

mod common;

use common::mount::{numaio_out, ok, Unmount};
use numaio_testkit::skip;
use std::ffi::OsStr;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const MIB: u64 = 1 << 20;

fn can_mount() -> bool {
    numaio_testkit::is_root() && Path::new("/dev/fuse").exists()
}

fn has_uring() -> bool {
    Path::new("/sys/module/fuse/parameters/enable_uring").exists()
}

/// A one-device file volume of `size` and an empty mount point.
struct Vol {
    _dir: tempfile::TempDir,
    dev: PathBuf,
    mnt: PathBuf,
}

impl Vol {
    fn new(size: &str) -> Vol {
        let dir = tempfile::tempdir().unwrap();
        let dev = dir.path().join("d0");
        ok(
            &numaio_out([
                "mkfs".as_ref(),
                "--size".as_ref(),
                size.as_ref(),
                "--node-of".as_ref(),
                OsStr::new(&format!("{}=0", dev.display())),
                dev.as_os_str(),
            ]),
            "mkfs",
        );
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Vol {
            _dir: dir,
            dev,
            mnt,
        }
    }

    /// Mounts (detached) with `-o OPTS` in `mode`; the server's pid.
    fn mount(&self, mode: &str, opts: &str) -> i32 {
        let o = numaio_out([
            "mount".as_ref(),
            "--json".as_ref(),
            "--fuse-mode".as_ref(),
            mode.as_ref(),
            "-o".as_ref(),
            opts.as_ref(),
            self.dev.as_os_str(),
            self.mnt.as_os_str(),
        ]);
        let j: serde_json::Value = serde_json::from_str(&ok(&o, "mount")).unwrap();
        j["pid"].as_i64().unwrap() as i32
    }

    /// `kill -9` of the server, a lazy unmount of the dead mount, then `numaio fsck`, which
    /// must find the volume clean.
    fn crash(&self, pid: i32) {
        // SAFETY: killing the server this test started.
        assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
        let t = Instant::now();
        while Path::new(&format!("/proc/{pid}")).exists() {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "server {pid} lives on"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let c = std::ffi::CString::new(self.mnt.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; detaching the dead mount.
        assert_eq!(
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) },
            0,
            "umount -l {}: {}",
            self.mnt.display(),
            std::io::Error::last_os_error()
        );
        let o = numaio_out(["fsck".as_ref(), self.dev.as_os_str()]);
        assert!(
            o.status.success(),
            "fsck after kill -9: {}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

fn fsync_dir(d: &Path) {
    std::fs::File::open(d)
        .unwrap()
        .sync_all()
        .unwrap_or_else(|e| panic!("fsync of directory {}: {e}", d.display()));
}

fn write_synced(p: &Path, data: &[u8]) {
    let mut f = std::fs::File::create(p).unwrap();
    f.write_all(data).unwrap();
    f.sync_all().unwrap();
}

fn durable_across_kill9(mode: &str) {
    let v = Vol::new("128M");
    let m = &v.mnt;
    // A commit interval far longer than the test: only the fsyncs make anything durable.
    let pid = v.mount(mode, "commit=3600");
    {
        let _g = Unmount(m);
        write_synced(&m.join("old"), b"old\n");
        write_synced(&m.join("new.tmp"), b"new\n");
        std::fs::rename(m.join("new.tmp"), m.join("old")).unwrap();
        fsync_dir(m);
        std::fs::create_dir(m.join("newdir")).unwrap();
        fsync_dir(m);
        v.crash(pid);
    }
    let pid = v.mount(mode, "commit=1");
    {
        let _g = Unmount(m);
        assert_eq!(std::fs::read(m.join("old")).unwrap(), b"new\n");
        assert!(!m.join("new.tmp").exists(), "new.tmp is back");
        assert!(m.join("newdir").is_dir(), "newdir is gone");
        // `numaio fs sync` commits at once.
        std::fs::write(m.join("f_fs_sync"), b"F\n").unwrap();
        let o = numaio_out([
            "fs".as_ref(),
            "sync".as_ref(),
            "--json".as_ref(),
            m.as_os_str(),
        ]);
        let j: serde_json::Value = serde_json::from_str(&ok(&o, "fs sync")).unwrap();
        assert_eq!(j["mountpoint"], m.display().to_string(), "{j}");
        // No fsync at all: `sync` cannot reach the server, the commit interval covers it.
        std::fs::write(m.join("f_sync"), b"S\n").unwrap();
        std::fs::create_dir(m.join("d_sync")).unwrap();
        // SAFETY: sync(2) takes no arguments.
        unsafe { libc::sync() };
        std::thread::sleep(Duration::from_millis(2500));
        v.crash(pid);
    }
    v.mount(mode, "commit=5");
    let _g = Unmount(m);
    assert_eq!(std::fs::read(m.join("old")).unwrap(), b"new\n");
    assert!(!m.join("new.tmp").exists());
    assert!(m.join("newdir").is_dir());
    assert_eq!(std::fs::read(m.join("f_sync")).unwrap(), b"S\n");
    assert!(m.join("d_sync").is_dir());
    assert_eq!(std::fs::read(m.join("f_fs_sync")).unwrap(), b"F\n");
}

#[test]
fn fs_sync_commits_at_once_and_refuses_what_is_not_a_mount() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    let v = Vol::new("64M");
    let m = &v.mnt;
    let o = numaio_out(["fs".as_ref(), "sync".as_ref(), m.as_os_str()]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("not the root of a running numaio mount"),
        "{err}"
    );
    let pid = v.mount("classic", "commit=3600");
    {
        let _g = Unmount(m);
        std::fs::write(m.join("a"), b"A").unwrap();
        std::fs::create_dir(m.join("b")).unwrap();
        let o = numaio_out(["fs".as_ref(), "sync".as_ref(), m.as_os_str()]);
        assert!(ok(&o, "fs sync").contains("synced"));
        v.crash(pid);
    }
    v.mount("classic", "commit=5");
    let _g = Unmount(m);
    assert_eq!(std::fs::read(m.join("a")).unwrap(), b"A");
    assert!(m.join("b").is_dir());
}

#[test]
fn directory_fsync_and_the_commit_interval_survive_kill9_classic() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    durable_across_kill9("classic");
}

#[test]
fn directory_fsync_and_the_commit_interval_survive_kill9_io_uring() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    if !has_uring() {
        skip!(
            "FUSE over io_uring",
            "kernel without CONFIG_FUSE_IO_URING (Linux 6.14+)"
        );
    }
    durable_across_kill9("io-uring");
}

fn sqlite(db: &Path, sql: &str) -> String {
    let o = std::process::Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .expect("running sqlite3");
    assert!(
        o.status.success(),
        "sqlite3 {sql:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

/// Rows 1..=n, each its own transaction.
fn inserts(from: u32, to: u32, sync: &str) -> String {
    let mut s = format!("PRAGMA journal_mode=DELETE; PRAGMA synchronous={sync};");
    for i in from..=to {
        s.push_str(&format!("INSERT INTO t VALUES({i}, 'row {i}');"));
    }
    s
}

fn check_rows(db: &Path, n: u32) {
    assert_eq!(sqlite(db, "PRAGMA integrity_check;").trim(), "ok");
    let want: u64 = (1..=u64::from(n)).sum();
    assert_eq!(
        sqlite(db, "SELECT count(*), sum(id) FROM t;").trim(),
        format!("{n}|{want}")
    );
    assert!(!db.with_extension("db-journal").exists(), "a hot journal");
}

#[test]
fn sqlite_rollback_journal_keeps_committed_rows_across_kill9() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    if std::process::Command::new("sqlite3")
        .arg("-version")
        .output()
        .is_err()
    {
        skip!("sqlite3", "install it (scripts/setup.sh does)");
    }
    let v = Vol::new("128M");
    let m = &v.mnt;
    let db = m.join("t.db");
    // synchronous=EXTRA: SQLite fsyncs the directory after deleting its journal, so the
    // last commit is durable when it returns, with no help from the commit interval.
    let pid = v.mount("classic", "commit=3600");
    {
        let _g = Unmount(m);
        sqlite(
            &db,
            "PRAGMA journal_mode=DELETE; CREATE TABLE t(id INTEGER PRIMARY KEY, v TEXT);",
        );
        sqlite(&db, &inserts(1, 20, "EXTRA"));
        v.crash(pid);
    }
    // synchronous=FULL: the journal's deletion becomes durable at the next commit (as on
    // ext4, where a power cut before it rolls the last transaction back): the commit
    // interval bounds that.
    let pid = v.mount("classic", "commit=1");
    {
        let _g = Unmount(m);
        check_rows(&db, 20);
        sqlite(&db, &inserts(21, 40, "FULL"));
        std::thread::sleep(Duration::from_millis(2500));
        v.crash(pid);
    }
    v.mount("classic", "commit=5");
    let _g = Unmount(m);
    check_rows(&db, 40);
}

fn statvfs(p: &Path) -> libc::statvfs {
    let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path and a zeroed struct of the right type.
    unsafe {
        let mut s: libc::statvfs = std::mem::zeroed();
        assert_eq!(
            libc::statvfs(c.as_ptr(), &mut s),
            0,
            "statvfs {}",
            p.display()
        );
        s
    }
}

fn free_bytes(p: &Path) -> u64 {
    let s = statvfs(p);
    s.f_bavail * s.f_frsize
}

/// Writes 1 MiB pieces to `p` until ENOSPC (as `dd` does); the bytes written and the file,
/// still open.
fn fill(p: &Path) -> (u64, std::fs::File) {
    let mut f = std::fs::File::create(p).unwrap();
    let chunk = vec![0xa5u8; MIB as usize];
    let mut n = 0u64;
    loop {
        match f.write(&chunk) {
            Ok(0) => break,
            Ok(k) => n += k as u64,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => break,
            Err(e) => panic!("filling {}: {e}", p.display()),
        }
    }
    (n, f)
}

/// Waits up to `limit` for `cond`; whether it held.
fn within(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    loop {
        if cond() {
            return true;
        }
        if t.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Fill, `rm`, fill again at once: the second fill gets as much (its first ENOSPC forces
/// the commit of the free); then `rm` and, with the commit interval, statvfs shows the space
/// free again; an unlinked file still open keeps its space until closed.
fn space_comes_back(m: &Path) {
    let free0 = free_bytes(m);
    let (first, f) = fill(&m.join("a"));
    drop(f);
    assert!(first > free0 / 2, "only {first} of {free0} bytes fit");
    std::fs::remove_file(m.join("a")).unwrap();
    let (second, f) = fill(&m.join("b"));
    drop(f);
    assert!(
        second + MIB >= first,
        "after rm only {second} of {first} bytes fit again"
    );
    std::fs::remove_file(m.join("b")).unwrap();
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    assert!(
        within(Duration::from_secs(5), || free_bytes(m) + MIB >= free0),
        "statvfs shows {} of {free0} bytes free 5 s after rm",
        free_bytes(m)
    );
    // Unlinked but open: the space is the file's until the last close.
    let (n, f) = fill(&m.join("c"));
    std::fs::remove_file(m.join("c")).unwrap();
    std::thread::sleep(Duration::from_millis(2500));
    assert!(free_bytes(m) + n / 2 < free0, "freed while still open");
    drop(f);
    assert!(
        within(Duration::from_secs(5), || free_bytes(m) + MIB >= free0),
        "statvfs shows {} of {free0} bytes free 5 s after the last close",
        free_bytes(m)
    );
    let (again, f) = fill(&m.join("d"));
    drop(f);
    assert!(again + MIB >= first, "{again} < {first}");
    std::fs::remove_file(m.join("d")).unwrap();
}

fn inode_counts(m: &Path) {
    let d = m.join("inodes");
    std::fs::create_dir(&d).unwrap();
    for i in 0..10 {
        std::fs::write(d.join(format!("f{i}")), b"x").unwrap();
    }
    let s = statvfs(m);
    assert!(
        s.f_ffree <= s.f_files,
        "{} free of {}",
        s.f_ffree,
        s.f_files
    );
    assert!(s.f_favail <= s.f_files);
    // The root, the directory, its ten files.
    assert_eq!(s.f_files - s.f_ffree, 12, "inodes in use");
    std::fs::remove_dir_all(&d).unwrap();
    // Each inode is freed when the kernel forgets it, just after its unlink: a FORGET
    // the server may still be serving when statvfs asks.
    let in_use = || {
        let s = statvfs(m);
        s.f_files - s.f_ffree
    };
    assert!(
        within(Duration::from_secs(5), || in_use() == 1),
        "{} inodes in use 5 s after rm -r, not 1",
        in_use()
    );
}

fn space_on_a_file_volume(mode: &str) {
    let v = Vol::new("128M");
    v.mount(mode, "commit=1");
    let _g = Unmount(&v.mnt);
    inode_counts(&v.mnt);
    space_comes_back(&v.mnt);
}

#[test]
fn deleted_files_give_their_space_back_while_mounted_classic() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    space_on_a_file_volume("classic");
}

#[test]
fn deleted_files_give_their_space_back_while_mounted_io_uring() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    if !has_uring() {
        skip!(
            "FUSE over io_uring",
            "kernel without CONFIG_FUSE_IO_URING (Linux 6.14+)"
        );
    }
    space_on_a_file_volume("io-uring");
}

#[test]
fn deleted_files_give_their_space_back_on_a_ram_zone() {
    if !can_mount() {
        skip!(numaio_testkit::needs::ROOT, "and /dev/fuse");
    }
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("mnt");
    std::fs::create_dir(&m).unwrap();
    ok(
        &numaio_out([
            "mount".as_ref(),
            "--zone".as_ref(),
            "0:96M".as_ref(),
            "-o".as_ref(),
            "commit=1".as_ref(),
            m.as_os_str(),
        ]),
        "mount --zone 0:96M",
    );
    let _g = Unmount(&m);
    inode_counts(&m);
    space_comes_back(&m);
}

#[test]
fn a_bad_commit_interval_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    for (opt, says) in [
        ("commit=abc", "whole seconds"),
        ("commit=-1", "whole seconds"),
        ("commit=86401", "at most 86400"),
    ] {
        let o = numaio_out([
            "mount".as_ref(),
            "-o".as_ref(),
            opt.as_ref(),
            "--zone".as_ref(),
            "0:16M".as_ref(),
            dir.path().as_os_str(),
        ]);
        assert!(!o.status.success(), "{opt} accepted");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says), "{opt}: {err}");
    }
}
