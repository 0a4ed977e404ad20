//! `numaio mount --fuse-mode`: the transport asked for is the one reported (human and
//! `--json`), and the mount serves reads and writes in it. Needs root and /dev/fuse; the
//! io-uring case also a kernel with FUSE over io_uring. Skips visibly otherwise.

use numaio_testkit::skip;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn numaio<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numaio"))
        .args(args)
        .output()
        .expect("running numaio")
}

struct Vol {
    _dir: tempfile::TempDir,
    devs: Vec<PathBuf>,
    mnt: PathBuf,
}

impl Vol {
    fn new() -> Vol {
        let dir = tempfile::tempdir().unwrap();
        let devs = vec![dir.path().join("d0"), dir.path().join("d1")];
        let mut a: Vec<std::ffi::OsString> = vec!["mkfs".into(), "--size".into(), "64M".into()];
        for d in &devs {
            a.push("--node-of".into());
            a.push(format!("{}=0", d.display()).into());
        }
        a.extend(devs.iter().map(|d| d.clone().into_os_string()));
        let o = numaio(&a);
        assert!(
            o.status.success(),
            "mkfs: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Vol {
            _dir: dir,
            devs,
            mnt,
        }
    }

    fn mount(&self, extra: &[&str]) -> Output {
        let mut a: Vec<&OsStr> = vec!["mount".as_ref()];
        a.extend(extra.iter().map(OsStr::new));
        a.extend(self.devs.iter().map(|d| d.as_os_str()));
        a.push(self.mnt.as_os_str());
        numaio(a)
    }
}

/// Unmounts on drop so a failing test never leaves a mount behind.
struct Guard<'a>(&'a Path);

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        if numaio(["umount".as_ref(), self.0.as_os_str()])
            .status
            .success()
        {
            return;
        }
        let c = std::ffi::CString::new(self.0.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path; lazy detach is the last resort.
        unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
    }
}

fn mounts_and_reports(mode: &str, reported: &str) {
    let v = Vol::new();
    let o = v.mount(&["--fuse-mode", mode, "--json"]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let g = Guard(&v.mnt);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("mount --json");
    assert_eq!(j["fuse_mode"], reported, "{j}");
    let f = v.mnt.join("f");
    std::fs::write(&f, vec![7u8; 100_000]).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), vec![7u8; 100_000]);
    drop(g);
    // Human output names the mode too.
    let o = v.mount(&["--fuse-mode", mode]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _g = Guard(&v.mnt);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("fuse mode {reported}")), "{out}");
    assert_eq!(std::fs::read(&f).unwrap(), vec![7u8; 100_000]);
}

fn can_mount() -> bool {
    numaio_testkit::is_root() && Path::new("/dev/fuse").exists()
}

#[test]
fn classic_mode_is_used_and_reported() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    mounts_and_reports("classic", "classic");
}

#[test]
fn io_uring_mode_is_used_and_reported() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        skip!(
            "FUSE over io_uring",
            "kernel without CONFIG_FUSE_IO_URING (Linux 6.14+)"
        );
    }
    mounts_and_reports("io-uring", "io_uring");
}

#[test]
fn an_unknown_mode_is_refused() {
    let o = numaio([
        "mount",
        "--fuse-mode",
        "carrier-pigeon",
        "/nonexistent",
        "/mnt",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("carrier-pigeon"));
}
