//! What unmodified programs meet on `numaio mount`: the mount options (`ro`, `allow_other`),
//! read-only and shared writable mmap, hostile mount arguments, odd names and deep paths, a
//! directory of 100,000 files and concurrent rename storms. Each test mounts its own
//! file-backed volume (root and /dev/fuse, else skipped visibly).

mod common;

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs numaio with a time limit: a command that hangs fails the test instead of blocking it.
fn numaio_cmd(args: &[&OsStr]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_numaio"));
    c.args(args).stdin(Stdio::null());
    c
}

fn run(mut c: Command) -> Output {
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting numaio");
    let t = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("{c:?} did not finish within 60 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn numaio(args: &[&OsStr]) -> Output {
    run(numaio_cmd(args))
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn can_mount() -> bool {
    if !common::is_root() {
        common::skip(numaio_testkit::needs::ROOT, "mounts a FUSE file system");
        return false;
    }
    if !Path::new("/dev/fuse").exists() {
        common::skip("fuse", "/dev/fuse is missing");
        return false;
    }
    true
}

/// A one-device volume in a temporary directory that every user may traverse.
struct Vol {
    dir: tempfile::TempDir,
    dev: PathBuf,
    mnt: PathBuf,
}

impl Vol {
    fn new() -> Vol {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let dev = dir.path().join("d0");
        let node_of = OsString::from(format!("{}=0", dev.display()));
        let o = numaio(&[
            "mkfs".as_ref(),
            "--size".as_ref(),
            "1G".as_ref(),
            "--node-of".as_ref(),
            &node_of,
            dev.as_os_str(),
        ]);
        assert!(o.status.success(), "mkfs: {}", stderr(&o));
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Vol { dir, dev, mnt }
    }

    fn try_mount(&self, opts: &str) -> Output {
        let mut a: Vec<&OsStr> = vec!["mount".as_ref()];
        if !opts.is_empty() {
            a.extend([OsStr::new("-o"), OsStr::new(opts)]);
        }
        a.extend([self.dev.as_os_str(), self.mnt.as_os_str()]);
        numaio(&a)
    }

    /// Mounts with `opts`; the guard unmounts.
    fn mount(&self, opts: &str) -> Mounted<'_> {
        let o = self.try_mount(opts);
        assert!(o.status.success(), "mount -o {opts:?}: {}", stderr(&o));
        Mounted(&self.mnt)
    }

    fn fsck_clean(&self) {
        let o = numaio(&["fsck".as_ref(), self.dev.as_os_str()]);
        assert!(
            o.status.success(),
            "fsck after umount: {}{}",
            String::from_utf8_lossy(&o.stdout),
            stderr(&o)
        );
    }
}

/// A mount that is unmounted (through `numaio umount`) on drop, so a failing test leaves none.
struct Mounted<'a>(&'a Path);

impl Mounted<'_> {
    fn umount(self) {
        let o = numaio(&["umount".as_ref(), self.0.as_os_str()]);
        assert!(o.status.success(), "umount: {}", stderr(&o));
        std::mem::forget(self);
    }
}

impl Drop for Mounted<'_> {
    fn drop(&mut self) {
        if numaio(&["umount".as_ref(), self.0.as_os_str()])
            .status
            .success()
        {
            return;
        }
        let c = std::ffi::CString::new(self.0.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; lazy detach is the last resort.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn errno_of<T: std::fmt::Debug>(r: std::io::Result<T>) -> i32 {
    r.expect_err("the operation should fail")
        .raw_os_error()
        .unwrap()
}

#[test]
fn read_only_mount_refuses_writes_and_serves_reads() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    let m = v.mount("");
    std::fs::write(v.mnt.join("a"), b"kept").unwrap();
    std::fs::create_dir(v.mnt.join("d")).unwrap();
    m.umount();

    let _m = v.mount("ro");
    let p = |n: &str| v.mnt.join(n);
    assert_eq!(std::fs::read(p("a")).unwrap(), b"kept");
    assert_eq!(errno_of(std::fs::write(p("a"), b"x")), libc::EROFS);
    assert_eq!(errno_of(std::fs::write(p("new"), b"x")), libc::EROFS);
    assert_eq!(errno_of(std::fs::create_dir(p("d2"))), libc::EROFS);
    assert_eq!(errno_of(std::fs::remove_file(p("a"))), libc::EROFS);
    assert_eq!(errno_of(std::fs::rename(p("a"), p("b"))), libc::EROFS);
    assert_eq!(errno_of(std::fs::remove_dir(p("d"))), libc::EROFS);
    assert_eq!(
        errno_of(std::fs::set_permissions(
            p("a"),
            std::fs::Permissions::from_mode(0o600)
        )),
        libc::EROFS
    );
    assert_eq!(std::fs::read(p("a")).unwrap(), b"kept");
}

/// Runs `cat PATH` as uid/gid 65534 (nobody) with no supplementary groups.
fn cat_as_nobody(path: &Path) -> Output {
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            "cat",
        ])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .expect("running setpriv (util-linux)");
    out
}

#[test]
fn allow_other_lets_other_users_in() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    let m = v.mount("noallow_other");
    let f = v.mnt.join("public");
    std::fs::write(&f, b"for everyone\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    // Without allow_other the kernel lets only the mounting user in.
    let o = cat_as_nobody(&f);
    assert!(
        !o.status.success(),
        "nobody read the file without allow_other"
    );
    assert!(
        stderr(&o).contains("Permission denied"),
        "expected EACCES, got: {}",
        stderr(&o)
    );
    m.umount();

    let _m = v.mount("allow_other,default_permissions");
    let o = cat_as_nobody(&f);
    assert!(o.status.success(), "nobody could not read: {}", stderr(&o));
    assert_eq!(o.stdout, b"for everyone\n");
    // The modes still apply to that user.
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
    let o = cat_as_nobody(&f);
    assert!(!o.status.success(), "nobody read a 0600 file of root's");
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
}

/// Runs `argv` as uid/gid 65534 (nobody) with no supplementary groups.
fn as_nobody(argv: &[&OsStr]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("running setpriv (util-linux)")
}

/// The "options" of `numaio mount --json`'s report.
fn mount_json_options(o: &Output) -> Vec<String> {
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("mount --json: {e}: {}", String::from_utf8_lossy(&o.stdout)));
    v["options"]
        .as_array()
        .unwrap_or_else(|| panic!("no options in {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_root_mount_lets_other_users_in_by_default() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    let o = run(mount_cmd(&v.dev, &v.mnt, &["--json"]));
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let m = Mounted(&v.mnt);
    assert_eq!(
        mount_json_options(&o),
        ["rw", "allow_other", "default_permissions"]
    );
    std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
    let f = v.mnt.join("public");
    std::fs::write(&f, b"for everyone\n").unwrap();
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(v.mnt.join("private"), b"root's\n").unwrap();
    std::fs::set_permissions(
        v.mnt.join("private"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    let ls = as_nobody(&["ls".as_ref(), v.mnt.as_os_str()]);
    assert!(
        ls.status.success(),
        "nobody could not list: {}",
        stderr(&ls)
    );
    assert_eq!(String::from_utf8_lossy(&ls.stdout), "private\npublic\n");
    let o = cat_as_nobody(&f);
    assert!(o.status.success(), "nobody could not read: {}", stderr(&o));
    assert_eq!(o.stdout, b"for everyone\n");
    // The kernel checks the modes.
    let o = cat_as_nobody(&v.mnt.join("private"));
    assert!(!o.status.success(), "nobody read a 0600 file of root's");
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    m.umount();

    // -o noallow_other: FUSE's default, only the mounting user (root) gets in.
    let o = run(mount_cmd(
        &v.dev,
        &v.mnt,
        &["--json", "-o", "noallow_other"],
    ));
    assert!(o.status.success(), "mount: {}", stderr(&o));
    let _m = Mounted(&v.mnt);
    assert_eq!(mount_json_options(&o), ["rw", "default_permissions"]);
    let o = cat_as_nobody(&f);
    assert!(
        !o.status.success(),
        "nobody read through a noallow_other mount"
    );
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&f).unwrap(), b"for everyone\n");
}

/// The FUSE transports a test can mount with here: classic always, io-uring where the kernel
/// has it (`numaio mount --fuse-mode io-uring` turns it on as root).
fn fuse_modes() -> Vec<&'static str> {
    let mut m = vec!["classic"];
    if Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        m.push("io-uring");
    } else {
        common::skip(
            numaio_testkit::needs::IO_URING,
            "the kernel has no FUSE over io_uring: classic mode only",
        );
    }
    m
}

#[test]
fn utimensat_by_a_non_owner_is_checked_by_the_server() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    for mode in fuse_modes() {
        // allow_other alone: the kernel leaves permission checks to the server.
        let o = run(mount_cmd(
            &v.dev,
            &v.mnt,
            &[
                "--json",
                "--fuse-mode",
                mode,
                "-o",
                "allow_other,nodefault_permissions",
            ],
        ));
        assert!(o.status.success(), "mount ({mode}): {}", stderr(&o));
        let m = Mounted(&v.mnt);
        assert_eq!(mount_json_options(&o), ["rw", "allow_other"], "{mode}");
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let shared = v.mnt.join(format!("shared-{mode}"));
        let ro = v.mnt.join(format!("readonly-{mode}"));
        for (p, perm) in [(&shared, 0o666), (&ro, 0o644)] {
            std::fs::write(p, b"x").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(perm)).unwrap();
        }
        let touch = |args: &[&str], p: &Path| {
            let mut a: Vec<&OsStr> = vec!["touch".as_ref()];
            a.extend(args.iter().map(OsStr::new));
            a.push(p.as_os_str());
            as_nobody(&a)
        };
        // Both times to now (touch's utimensat(NULL)): write permission is enough.
        let o = touch(&[], &shared);
        assert!(
            o.status.success(),
            "{mode}: touch with write permission: {}",
            stderr(&o)
        );
        // A chosen time, or only one time set to now, takes ownership (EPERM).
        for args in [&["-d", "2001-02-03 04:05:06"][..], &["-a"], &["-m"]] {
            let o = touch(args, &shared);
            assert!(
                !o.status.success(),
                "{mode}: touch {args:?} as non-owner succeeded"
            );
            assert!(
                stderr(&o).contains("Operation not permitted"),
                "{mode}: touch {args:?}: {}",
                stderr(&o)
            );
        }
        // Without write permission even "now" is refused (EACCES).
        let o = touch(&[], &ro);
        assert!(
            !o.status.success(),
            "{mode}: touch without write permission succeeded"
        );
        assert!(
            stderr(&o).contains("Permission denied"),
            "{mode}: {}",
            stderr(&o)
        );
        // Root may set any time.
        let o = Command::new("touch")
            .args(["-d", "2001-02-03 04:05:06"])
            .arg(&ro)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{mode}: root's touch -d: {}",
            stderr(&o)
        );
        m.umount();
    }
}

#[test]
fn server_checks_search_and_read_permission_on_directories() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    for mode in fuse_modes() {
        let o = run(mount_cmd(
            &v.dev,
            &v.mnt,
            &[
                "--fuse-mode",
                mode,
                "-o",
                "allow_other,nodefault_permissions",
            ],
        ));
        assert!(o.status.success(), "mount ({mode}): {}", stderr(&o));
        let m = Mounted(&v.mnt);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let d = v.mnt.join(format!("d-{mode}"));
        std::fs::create_dir(&d).unwrap();
        let f = d.join("f");
        std::fs::write(&f, b"inside\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        // Root just walked to the file, so the kernel knows the names; a 0700 directory must
        // still stop nobody, as the kernel's own checks would.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(std::fs::read(&f).unwrap(), b"inside\n");
        let o = cat_as_nobody(&f);
        assert!(
            !o.status.success(),
            "{mode}: nobody read through a 0700 directory"
        );
        assert!(
            stderr(&o).contains("Permission denied"),
            "{mode}: {}",
            stderr(&o)
        );
        let o = as_nobody(&["ls".as_ref(), d.as_os_str()]);
        assert!(
            !o.status.success(),
            "{mode}: nobody listed a 0700 directory"
        );
        // Search without read: the file is reachable, the listing is not.
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o711)).unwrap();
        let o = cat_as_nobody(&f);
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        let o = as_nobody(&["ls".as_ref(), d.as_os_str()]);
        assert!(
            !o.status.success(),
            "{mode}: nobody listed a 0711 directory"
        );
        assert!(
            stderr(&o).contains("Permission denied"),
            "{mode}: {}",
            stderr(&o)
        );
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        let o = as_nobody(&["ls".as_ref(), d.as_os_str()]);
        assert!(o.status.success(), "{mode}: {}", stderr(&o));
        assert_eq!(o.stdout, b"f\n");
        m.umount();
    }
}

#[test]
fn server_checks_execute_permission_and_set_group_id_directories() {
    if !can_mount() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let v = Vol::new();
    for mode in fuse_modes() {
        let o = run(mount_cmd(
            &v.dev,
            &v.mnt,
            &[
                "--fuse-mode",
                mode,
                "-o",
                "allow_other,nodefault_permissions",
            ],
        ));
        assert!(o.status.success(), "mount ({mode}): {}", stderr(&o));
        let m = Mounted(&v.mnt);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        // execve opens for execution: execute permission decides, not read permission.
        let exe = |name: &str, perm: u32| {
            let p = v.mnt.join(format!("{name}-{mode}"));
            std::fs::copy("/bin/true", &p).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(perm)).unwrap();
            p
        };
        let x_only = exe("x-only", 0o711);
        let o = as_nobody(&[x_only.as_os_str()]);
        assert!(
            o.status.success(),
            "{mode}: nobody could not run a 0711 program: {o:?}"
        );
        let r_only = exe("r-only", 0o704);
        let o = as_nobody(&[r_only.as_os_str()]);
        assert!(!o.status.success(), "{mode}: nobody ran a 0704 program");
        // Root may execute only what someone may.
        let plain = v.mnt.join(format!("plain-{mode}"));
        std::fs::write(&plain, b"x").unwrap();
        std::fs::set_permissions(&plain, std::fs::Permissions::from_mode(0o644)).unwrap();
        let c = std::ffi::CString::new(plain.as_os_str().as_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_ne!(unsafe { libc::access(c.as_ptr(), libc::X_OK) }, 0, "{mode}");
        // A set-group-id directory passes its group, and the bit to subdirectories.
        let sg = v.mnt.join(format!("sg-{mode}"));
        std::fs::create_dir(&sg).unwrap();
        std::os::unix::fs::chown(&sg, None, Some(4242)).unwrap();
        std::fs::set_permissions(&sg, std::fs::Permissions::from_mode(0o2775)).unwrap();
        std::fs::create_dir(sg.join("sub")).unwrap();
        std::fs::write(sg.join("file"), b"").unwrap();
        let sub = std::fs::metadata(sg.join("sub")).unwrap();
        assert_eq!((sub.mode() & 0o7777, sub.gid()), (0o2755, 4242), "{mode}");
        let file = std::fs::metadata(sg.join("file")).unwrap();
        assert_eq!((file.mode() & 0o2000, file.gid()), (0, 4242), "{mode}");
        m.umount();
    }
}

/// Runs `f` in a child process as uid/gid 65534 without supplementary groups; returns the
/// errno `f` returns (0: it succeeded).
fn errno_as_nobody(f: impl Fn() -> i32) -> i32 {
    // SAFETY: the child makes only system calls (no allocation, no locks) and then _exits.
    unsafe {
        let pid = libc::fork();
        assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
        if pid == 0 {
            let ok = libc::setgroups(0, std::ptr::null()) == 0
                && libc::setresgid(65534, 65534, 65534) == 0
                && libc::setresuid(65534, 65534, 65534) == 0;
            libc::_exit(if ok { f() } else { 255 });
        }
        let mut st = 0;
        assert_eq!(libc::waitpid(pid, &mut st, 0), pid);
        assert!(libc::WIFEXITED(st), "child status {st:#x}");
        libc::WEXITSTATUS(st)
    }
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(255)
}

#[test]
fn server_checks_moves_sticky_directories_hard_links_and_user_xattrs() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    for mode in fuse_modes() {
        let o = run(mount_cmd(
            &v.dev,
            &v.mnt,
            &[
                "--fuse-mode",
                mode,
                "-o",
                "allow_other,nodefault_permissions",
            ],
        ));
        assert!(o.status.success(), "mount ({mode}): {}", stderr(&o));
        let m = Mounted(&v.mnt);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let top = v.mnt.join(format!("pub-{mode}"));
        for d in ["", "a", "b"] {
            std::fs::create_dir(top.join(d)).unwrap();
            std::fs::set_permissions(top.join(d), std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        let c = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // Moving root's directory to another parent rewrites its `..`: EACCES for nobody,
        // although both parents are writable; within one parent it may be renamed.
        std::fs::create_dir(top.join("a/roots")).unwrap();
        let (from, to, beside) = (
            c(&top.join("a/roots")),
            c(&top.join("b/roots")),
            c(&top.join("a/renamed")),
        );
        // SAFETY: NUL-terminated paths.
        let e = errno_as_nobody(|| unsafe {
            if libc::rename(from.as_ptr(), to.as_ptr()) == 0 {
                0
            } else {
                errno()
            }
        });
        assert_eq!(e, libc::EACCES, "{mode}: moved root's directory");
        // SAFETY: NUL-terminated paths.
        let e = errno_as_nobody(|| unsafe {
            if libc::rename(from.as_ptr(), beside.as_ptr()) == 0 {
                0
            } else {
                errno()
            }
        });
        assert_eq!(e, 0, "{mode}: renaming within the parent");
        // In a sticky directory nobody may remove only its own entries.
        let st = top.join("sticky");
        std::fs::create_dir(&st).unwrap();
        std::fs::set_permissions(&st, std::fs::Permissions::from_mode(0o1777)).unwrap();
        std::fs::write(st.join("roots"), b"").unwrap();
        std::fs::set_permissions(st.join("roots"), std::fs::Permissions::from_mode(0o666)).unwrap();
        let (roots, own) = (c(&st.join("roots")), c(&st.join("own")));
        // SAFETY: NUL-terminated paths.
        let e = errno_as_nobody(|| unsafe {
            if libc::unlink(roots.as_ptr()) == 0 {
                0
            } else {
                errno()
            }
        });
        assert_eq!(
            e,
            libc::EPERM,
            "{mode}: nobody removed root's file from a sticky directory"
        );
        // SAFETY: NUL-terminated paths; the descriptor is closed right away.
        let e = errno_as_nobody(|| unsafe {
            let fd = libc::open(own.as_ptr(), libc::O_CREAT | libc::O_WRONLY, 0o644);
            if fd < 0 {
                return errno();
            }
            libc::close(fd);
            if libc::rename(own.as_ptr(), roots.as_ptr()) == 0 {
                return 0;
            }
            let e = errno();
            if e == libc::EPERM && libc::unlink(own.as_ptr()) == 0 {
                return e;
            }
            255
        });
        assert_eq!(
            e,
            libc::EPERM,
            "{mode}: nobody replaced root's file in a sticky directory"
        );
        // fs.protected_hardlinks: nobody may not link root's 0600 file, may link a 0666 one.
        if std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
            .is_ok_and(|v| v.trim() == "1")
        {
            let target = top.join("roots-file");
            std::fs::write(&target, b"").unwrap();
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o600)).unwrap();
            let (t, l) = (c(&target), c(&top.join("link")));
            // SAFETY: NUL-terminated paths.
            let ln = || unsafe {
                if libc::link(t.as_ptr(), l.as_ptr()) == 0 {
                    libc::unlink(l.as_ptr());
                    0
                } else {
                    errno()
                }
            };
            assert_eq!(
                errno_as_nobody(ln),
                libc::EPERM,
                "{mode}: linked root's 0600 file"
            );
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o666)).unwrap();
            assert_eq!(errno_as_nobody(ln), 0, "{mode}: linking root's 0666 file");
        }
        // user. attributes: reading takes read permission, writing write permission, the
        // owner's included.
        let secret = top.join("secret");
        std::fs::write(&secret, b"").unwrap();
        setxattr(&secret, "user.k", b"v").unwrap();
        std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
        let (sp, name) = (c(&secret), std::ffi::CString::new("user.k").unwrap());
        // SAFETY: NUL-terminated path and name; a size probe writes nothing.
        let e = errno_as_nobody(|| unsafe {
            if libc::getxattr(sp.as_ptr(), name.as_ptr(), std::ptr::null_mut(), 0) >= 0 {
                0
            } else {
                errno()
            }
        });
        assert_eq!(
            e,
            libc::EACCES,
            "{mode}: nobody read a user. xattr of a 0600 file"
        );
        let mine = top.join("mine");
        std::fs::write(&mine, b"").unwrap();
        std::os::unix::fs::chown(&mine, Some(65534), Some(65534)).unwrap();
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o444)).unwrap();
        let mp = c(&mine);
        // SAFETY: NUL-terminated path and name; `b"v"` lives through the call.
        let set = || unsafe {
            if libc::setxattr(mp.as_ptr(), name.as_ptr(), b"v".as_ptr().cast(), 1, 0) == 0 {
                0
            } else {
                errno()
            }
        };
        assert_eq!(errno_as_nobody(set), libc::EACCES, "{mode}: owner, 0444");
        std::fs::set_permissions(&mine, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(errno_as_nobody(set), 0, "{mode}: owner, 0644");
        m.umount();
    }
}

/// Runs `argv` as uid 65534 with gid 65534 and the supplementary groups `groups`.
fn as_nobody_in(groups: &str, argv: &[&OsStr]) -> Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534"])
        .arg(format!("--groups={groups}"))
        .arg("--")
        .args(argv)
        .stdin(Stdio::null())
        .output()
        .expect("running setpriv (util-linux)")
}

#[test]
fn supplementary_groups_count_in_either_kind_of_check() {
    if !can_mount() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let v = Vol::new();
    for opts in ["", "allow_other,nodefault_permissions"] {
        let m = v.mount(opts);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
        // root's file, readable by group 4242 only.
        let g = v.mnt.join("group-file");
        std::fs::write(&g, b"for the group\n").unwrap();
        std::os::unix::fs::chown(&g, None, Some(4242)).unwrap();
        std::fs::set_permissions(&g, std::fs::Permissions::from_mode(0o640)).unwrap();
        let o = as_nobody_in("4242", &["cat".as_ref(), g.as_os_str()]);
        assert!(
            o.status.success(),
            "-o {opts:?}: a member of 4242: {}",
            stderr(&o)
        );
        assert_eq!(o.stdout, b"for the group\n");
        let o = as_nobody_in("4343", &["cat".as_ref(), g.as_os_str()]);
        assert!(
            !o.status.success(),
            "-o {opts:?}: a non-member read the file"
        );
        // nobody's own file: chgrp to a group it belongs to, not to another.
        let f = v.mnt.join("own-file");
        std::fs::write(&f, b"x").unwrap();
        std::os::unix::fs::chown(&f, Some(65534), Some(65534)).unwrap();
        let o = as_nobody_in("4242", &["chgrp".as_ref(), "4242".as_ref(), f.as_os_str()]);
        assert!(o.status.success(), "-o {opts:?}: chgrp: {}", stderr(&o));
        assert_eq!(std::fs::metadata(&f).unwrap().gid(), 4242);
        let o = as_nobody_in("4242", &["chgrp".as_ref(), "4343".as_ref(), f.as_os_str()]);
        assert!(!o.status.success(), "-o {opts:?}: chgrp to a foreign group");
        // chmod g+s keeps the bit for a member of the file's group, drops it otherwise.
        let o = as_nobody_in("4242", &["chmod".as_ref(), "2644".as_ref(), f.as_os_str()]);
        assert!(o.status.success(), "-o {opts:?}: chmod: {}", stderr(&o));
        assert_eq!(
            std::fs::metadata(&f).unwrap().mode() & 0o7777,
            0o2644,
            "-o {opts:?}"
        );
        let o = as_nobody_in("4343", &["chmod".as_ref(), "2640".as_ref(), f.as_os_str()]);
        assert!(o.status.success(), "-o {opts:?}: chmod: {}", stderr(&o));
        assert_eq!(
            std::fs::metadata(&f).unwrap().mode() & 0o7777,
            0o640,
            "-o {opts:?}"
        );
        std::fs::remove_file(&f).unwrap();
        std::fs::remove_file(&g).unwrap();
        m.umount();
    }
}

fn setxattr(p: &Path, name: &str, v: &[u8]) -> std::io::Result<()> {
    let p = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated path and name; `v` is a live buffer of v.len() bytes.
    let r = unsafe { libc::setxattr(p.as_ptr(), n.as_ptr(), v.as_ptr().cast(), v.len(), 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn getxattr(p: &Path, name: &str) -> std::io::Result<usize> {
    let p = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let n = std::ffi::CString::new(name).unwrap();
    // SAFETY: NUL-terminated path and name; a size probe writes nothing.
    let r = unsafe { libc::getxattr(p.as_ptr(), n.as_ptr(), std::ptr::null_mut(), 0) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

#[test]
fn posix_acls_are_refused_not_stored_and_ignored() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    for opts in ["", "allow_other,nodefault_permissions"] {
        let m = v.mount(opts);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o755)).unwrap();
        let f = v.mnt.join("f");
        std::fs::write(&f, b"secret?\n").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        // user::rw-, user:nobody:---, group::r--, mask::r--, other::r-- (ACL xattr version 2).
        let mut acl = 2u32.to_le_bytes().to_vec();
        for (tag, perm, id) in [
            (1u16, 6u16, u32::MAX),
            (2, 0, 65534),
            (4, 4, u32::MAX),
            (0x10, 4, u32::MAX),
            (0x20, 4, u32::MAX),
        ] {
            acl.extend(tag.to_le_bytes());
            acl.extend(perm.to_le_bytes());
            acl.extend(id.to_le_bytes());
        }
        assert_eq!(
            errno_of(setxattr(&f, "system.posix_acl_access", &acl)),
            libc::EOPNOTSUPP,
            "-o {opts:?}"
        );
        assert_eq!(
            errno_of(setxattr(&v.mnt, "system.posix_acl_default", &acl)),
            libc::EOPNOTSUPP
        );
        assert_eq!(
            errno_of(getxattr(&f, "system.posix_acl_access")),
            libc::ENODATA
        );
        if let Ok(o) = Command::new("setfacl")
            .args(["-m", "u:nobody:---"])
            .arg(&f)
            .output()
        {
            assert!(!o.status.success(), "setfacl succeeded");
            assert!(
                stderr(&o).contains("Operation not supported"),
                "setfacl: {}",
                stderr(&o)
            );
        }
        // Nothing stored, so the mode alone decides: nobody reads the 0644 file ...
        let o = cat_as_nobody(&f);
        assert!(o.status.success(), "-o {opts:?}: {}", stderr(&o));
        // ... and not once it is 0600.
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        let o = cat_as_nobody(&f);
        assert!(!o.status.success(), "-o {opts:?}: nobody read a 0600 file");
        assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
        std::fs::remove_file(&f).unwrap();
        m.umount();
    }
}

/// Maps `len` bytes of `f` with `prot`, shared.
fn map(f: &std::fs::File, len: usize, prot: i32) -> *mut u8 {
    // SAFETY: a fresh shared mapping of an open file; the callers unmap it before the file
    // is dropped and never touch it beyond `len`.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            prot,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    assert_ne!(
        p,
        libc::MAP_FAILED,
        "mmap: {}",
        std::io::Error::last_os_error()
    );
    p.cast()
}

#[test]
fn mmap_reads_and_shared_writes_survive_a_remount() {
    if !can_mount() {
        return;
    }
    const LEN: usize = 5 * 4096 + 123;
    let v = Vol::new();
    let m = v.mount("");
    let path = v.mnt.join("mapped");
    let data: Vec<u8> = (0..LEN).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &data).unwrap();

    // Read-only mapping: sees what write(2) wrote.
    let f = std::fs::File::open(&path).unwrap();
    let p = map(&f, LEN, libc::PROT_READ);
    // SAFETY: p maps LEN readable bytes until the munmap below.
    unsafe {
        assert_eq!(std::slice::from_raw_parts(p, LEN), &data[..]);
        libc::munmap(p.cast(), LEN);
    }
    drop(f);

    // Shared writable mapping, msync, then the change is in the file.
    let mut want = data.clone();
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let p = map(&f, LEN, libc::PROT_READ | libc::PROT_WRITE);
    for off in [0usize, 4095, 4096, 3 * 4096 + 17, LEN - 1] {
        want[off] = 0xee;
        // SAFETY: off < LEN, inside the writable mapping.
        unsafe { *p.add(off) = 0xee };
    }
    // SAFETY: p maps LEN bytes; unmapped right after.
    unsafe {
        assert_eq!(libc::msync(p.cast(), LEN, libc::MS_SYNC), 0);
        libc::munmap(p.cast(), LEN);
    }
    drop(f);
    assert_eq!(std::fs::read(&path).unwrap(), want);
    m.umount();

    let m = v.mount("");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        want,
        "mmap writes lost across a remount"
    );
    m.umount();
    v.fsck_clean();
}

/// `numaio mount DEV MNT` with the given extra leading options, as a command.
fn mount_cmd(dev: &Path, mnt: &Path, extra: &[&str]) -> Command {
    let mut a: Vec<&OsStr> = vec!["mount".as_ref()];
    a.extend(extra.iter().map(OsStr::new));
    a.extend([dev.as_os_str(), mnt.as_os_str()]);
    numaio_cmd(&a)
}

fn assert_refused(o: &Output, what: &str, names: &Path) {
    let e = stderr(o);
    assert!(!o.status.success(), "{what}: mount succeeded");
    assert!(!e.contains("panicked"), "{what}: {e}");
    assert!(
        e.contains(&names.display().to_string()),
        "{what}: the message does not name {}: {e}",
        names.display()
    );
}

#[test]
fn bad_mount_arguments_fail_fast_naming_the_path() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    let other = Vol::new();

    let missing = v.dir.path().join("no-such-dir");
    let o = run(mount_cmd(&v.dev, &missing, &[]));
    assert_refused(&o, "missing mount point", &missing);

    std::fs::write(v.mnt.join("x"), b"").unwrap();
    let o = run(mount_cmd(&v.dev, &v.mnt, &[]));
    assert_refused(&o, "non-empty mount point", &v.mnt);
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    std::fs::remove_file(v.mnt.join("x")).unwrap();

    let nodev = v.dir.path().join("no-such-device");
    let o = run(mount_cmd(&nodev, &v.mnt, &[]));
    assert_refused(&o, "missing device", &nodev);

    let fifo = v.dir.path().join("fifo");
    common::mkfifo(&fifo);
    let o = run(mount_cmd(&fifo, &v.mnt, &[]));
    assert_refused(&o, "FIFO as device", &fifo);

    let notvol = v.dir.path().join("zeros");
    std::fs::write(&notvol, vec![0u8; 1 << 20]).unwrap();
    let o = run(mount_cmd(&notvol, &v.mnt, &[]));
    assert_refused(&o, "not a numaio volume", &notvol);

    // Standard output a pipe its reader closed: the report is lost, so the mount is undone.
    let mut child = mount_cmd(&v.dev, &v.mnt, &["--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_refused(&out, "--json with stdout closed", &v.mnt);
    assert!(
        !is_mount(&v.mnt),
        "a mount was left at {} after its report failed",
        v.mnt.display()
    );

    let _m = v.mount("");
    // The mount point is in use.
    let o = run(mount_cmd(&other.dev, &v.mnt, &[]));
    assert_refused(&o, "mount point in use", &v.mnt);
    // The volume is already mounted elsewhere.
    let o = run(mount_cmd(&v.dev, &other.mnt, &[]));
    assert_refused(&o, "volume mounted twice", &v.dev);
    assert!(!is_mount(&other.mnt));
    // The first mount still serves.
    std::fs::write(v.mnt.join("still"), b"ok").unwrap();
    assert_eq!(std::fs::read(v.mnt.join("still")).unwrap(), b"ok");
}

fn is_mount(p: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let (Ok(a), Ok(b)) = (std::fs::metadata(p), std::fs::metadata(p.join(".."))) else {
        return false;
    };
    a.dev() != b.dev()
}

#[test]
fn odd_names_and_deep_paths() {
    if !can_mount() {
        return;
    }
    let v = Vol::new();
    let m = v.mount("");
    let root = v.mnt.clone();

    // Invalid UTF-8 names are stored and listed byte for byte.
    let bad = OsStr::from_bytes(b"inv\xff\xfe\x80lid");
    std::fs::write(root.join(bad), b"bytes").unwrap();
    std::fs::create_dir(root.join(OsStr::from_bytes(b"dir\xc3\x28"))).unwrap();
    let mut names: Vec<Vec<u8>> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().as_bytes().to_vec())
        .collect();
    names.sort();
    assert_eq!(
        names,
        vec![b"dir\xc3\x28".to_vec(), b"inv\xff\xfe\x80lid".to_vec()]
    );

    // 255 bytes is the limit for every kind of name; 256 is ENAMETOOLONG.
    let n255 = "é".repeat(127) + "x"; // 255 bytes, multi-byte characters
    assert_eq!(n255.len(), 255);
    let n256 = "y".repeat(256);
    std::fs::write(root.join(&n255), b"long").unwrap();
    assert_eq!(std::fs::read(root.join(&n255)).unwrap(), b"long");
    let long = |r: std::io::Result<()>| errno_of(r);
    assert_eq!(
        long(std::fs::write(root.join(&n256), b"")),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        long(std::fs::create_dir(root.join(&n256))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        long(std::os::unix::fs::symlink("t", root.join(&n256))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        long(std::fs::rename(root.join(&n255), root.join(&n256))),
        libc::ENAMETOOLONG
    );
    assert_eq!(
        long(std::fs::hard_link(root.join(&n255), root.join(&n256))),
        libc::ENAMETOOLONG
    );
    assert!(root.join(&n255).exists());

    // 200 levels of directories (a 2,200-byte path), a file at the bottom.
    let mut deep = root.join("deep");
    for i in 0..200 {
        deep.push(format!("level{i:04}"));
    }
    std::fs::create_dir_all(&deep).unwrap();
    std::fs::write(deep.join("bottom"), b"deep data").unwrap();
    m.umount();

    let m = v.mount("");
    assert_eq!(std::fs::read(deep.join("bottom")).unwrap(), b"deep data");
    assert_eq!(std::fs::read(root.join(bad)).unwrap(), b"bytes");
    std::fs::remove_dir_all(root.join("deep")).unwrap();
    assert!(!root.join("deep").exists());
    m.umount();
    v.fsck_clean();
}

#[test]
fn a_hundred_thousand_files_in_one_directory() {
    if !can_mount() {
        return;
    }
    // NUMAIO_MOUNT_FILES raises the count for a run by hand (1,000,000: docs/fs.md).
    let n = numaio_testkit::env_u64("NUMAIO_MOUNT_FILES", 100_000) as usize;
    let v = Vol::new();
    let m = v.mount("");
    let dir = v.mnt.join("big");
    std::fs::create_dir(&dir).unwrap();
    let t = Instant::now();
    // Two creators at once, as the kernel serves several requests in parallel.
    std::thread::scope(|s| {
        for part in 0..2 {
            let dir = &dir;
            s.spawn(move || {
                for i in (part..n).step_by(2) {
                    std::fs::File::create(dir.join(format!("f{i:07}"))).unwrap();
                }
            });
        }
    });
    let created = t.elapsed();
    let t = Instant::now();
    let mut seen = vec![false; n];
    for e in std::fs::read_dir(&dir).unwrap() {
        let name = e.unwrap().file_name();
        let i: usize = name.to_str().unwrap()[1..].parse().unwrap();
        assert!(!seen[i], "f{i:07} listed twice");
        seen[i] = true;
    }
    assert!(seen.iter().all(|&s| s), "readdir missed files");
    let listed = t.elapsed();
    eprintln!(
        "{n} files: created in {:.1} s, listed in {:.1} s",
        created.as_secs_f64(),
        listed.as_secs_f64()
    );
    m.umount();

    let m = v.mount("");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), n);
    assert!(dir.join(format!("f{:07}", n - 1)).exists());
    std::fs::remove_file(dir.join("f0000000")).unwrap();
    assert!(!dir.join("f0000000").exists());
    m.umount();
    v.fsck_clean();
}

#[test]
fn rename_storm_keeps_every_file_exactly_once() {
    if !can_mount() {
        return;
    }
    const DIRS: usize = 4;
    const FILES: usize = 200;
    const THREADS: usize = 4;
    const RENAMES: usize = 1500;
    let v = Vol::new();
    let m = v.mount("");
    let dirs: Vec<PathBuf> = (0..DIRS).map(|d| v.mnt.join(format!("d{d}"))).collect();
    for d in &dirs {
        std::fs::create_dir(d).unwrap();
    }
    for i in 0..FILES {
        std::fs::write(dirs[i % DIRS].join(format!("f{i}")), i.to_string()).unwrap();
    }
    // Each thread moves random files between random directories (the files' names are unique,
    // so a rename never replaces one); a file another thread moved first is ENOENT.
    let moved: usize = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let dirs = &dirs;
                s.spawn(move || {
                    let mut rng = numaio_testkit::Rng(0x5eed + t as u64);
                    let mut ok = 0;
                    for _ in 0..RENAMES {
                        let f = format!("f{}", rng.below(FILES as u64));
                        let from = &dirs[rng.below(DIRS as u64) as usize];
                        let to = &dirs[rng.below(DIRS as u64) as usize];
                        match std::fs::rename(from.join(&f), to.join(&f)) {
                            Ok(()) => ok += 1,
                            Err(e) => assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}"),
                        }
                    }
                    ok
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum()
    });
    assert!(moved > 0, "no rename succeeded");
    let check = |root: &Path| {
        let mut found: HashMap<String, usize> = HashMap::new();
        for d in 0..DIRS {
            for e in std::fs::read_dir(root.join(format!("d{d}"))).unwrap() {
                let e = e.unwrap();
                let name = e.file_name().into_string().unwrap();
                let i: usize = name[1..].parse().unwrap();
                assert_eq!(std::fs::read_to_string(e.path()).unwrap(), i.to_string());
                *found.entry(name).or_default() += 1;
            }
        }
        assert_eq!(found.len(), FILES, "files lost");
        assert!(found.values().all(|&c| c == 1), "a file is listed twice");
    };
    check(&v.mnt);
    m.umount();
    v.fsck_clean();
    let m = v.mount("");
    check(&v.mnt);
    m.umount();
}

/// The server clears set-user-id and set-group-id itself (`FUSE_HANDLE_KILLPRIV_V2`: the
/// kernel sends no mode for it), as ext4 does: chown drops them, by root too, and so does
/// `chown(f, -1, -1)`; a write or truncate by anyone but root drops them; set-group-id
/// without group execute stays for root and for a member of the file's group; a directory
/// keeps its set-group-id.
#[test]
fn set_ids_drop_on_write_truncate_and_chown_as_on_ext4() {
    if !can_mount() {
        return;
    }
    use std::os::unix::fs::MetadataExt;
    let v = Vol::new();
    for mode in fuse_modes() {
        let o = run(mount_cmd(&v.dev, &v.mnt, &["--fuse-mode", mode]));
        assert!(o.status.success(), "mount ({mode}): {}", stderr(&o));
        let m = Mounted(&v.mnt);
        std::fs::set_permissions(&v.mnt, std::fs::Permissions::from_mode(0o777)).unwrap();
        let file = |name: &str, perm: u32| {
            let p = v.mnt.join(format!("{name}-{mode}"));
            std::fs::write(&p, vec![b'x'; 100]).unwrap();
            std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(perm)).unwrap();
            p
        };
        let perm = |p: &Path| std::fs::metadata(p).unwrap().mode() & 0o7777;
        let cpath = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
        // SAFETY (the closures below): NUL-terminated paths; only system calls in the child.
        let write = |c: &std::ffi::CString| unsafe {
            let fd = libc::open(c.as_ptr(), libc::O_WRONLY);
            if fd < 0 || libc::pwrite(fd, b"y".as_ptr().cast(), 1, 10) != 1 {
                return errno();
            }
            libc::close(fd);
            0
        };
        let truncate = |c: &std::ffi::CString| unsafe {
            if libc::truncate(c.as_ptr(), 50) != 0 {
                return errno();
            }
            0
        };
        let chown_none = |c: &std::ffi::CString| unsafe {
            if libc::chown(c.as_ptr(), u32::MAX, u32::MAX) != 0 {
                return errno();
            }
            0
        };
        let p = file("root-chown", 0o6755);
        std::os::unix::fs::chown(&p, Some(1000), Some(1000)).unwrap();
        assert_eq!(perm(&p), 0o755, "{mode}: root's chown");
        let p = file("root-chown-none", 0o6755);
        assert_eq!(chown_none(&cpath(&p)), 0);
        assert_eq!(perm(&p), 0o755, "{mode}: root's chown(-1, -1)");
        let p = file("root-chown-none-nogx", 0o6745);
        assert_eq!(chown_none(&cpath(&p)), 0);
        assert_eq!(
            perm(&p),
            0o2745,
            "{mode}: set-group-id without group execute"
        );
        let p = file("root-write", 0o6755);
        assert_eq!(write(&cpath(&p)), 0);
        assert_eq!(truncate(&cpath(&p)), 0);
        assert_eq!(perm(&p), 0o6755, "{mode}: root's write and truncate");
        for (name, before, f, after) in [
            ("nobody-write", 0o6777, 0, 0o777),
            ("nobody-write-nogx", 0o6767, 0, 0o2767),
            ("nobody-truncate", 0o6777, 1, 0o777),
            ("nobody-chown-none", 0o6755, 2, 0o755),
        ] {
            let p = file(name, before);
            let c = cpath(&p);
            let e = errno_as_nobody(|| match f {
                0 => write(&c),
                1 => truncate(&c),
                _ => chown_none(&c),
            });
            assert_eq!(e, 0, "{mode}: {name}");
            assert_eq!(perm(&p), after, "{mode}: {name}");
        }
        let d = v.mnt.join(format!("dir-{mode}"));
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o2775)).unwrap();
        std::os::unix::fs::chown(&d, Some(1000), Some(1000)).unwrap();
        assert_eq!(perm(&d), 0o2775, "{mode}: a directory's chown");
        m.umount();
    }
    v.fsck_clean();
}
