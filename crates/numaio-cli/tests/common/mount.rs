//! A file-backed two-device volume (both devices on node 0) for the `numaio mount` tests.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Runs the `numaio` binary with `args`, output captured.
pub fn numaio_out<I: IntoIterator<Item = S>, S: AsRef<OsStr>>(args: I) -> Output {
    Command::new(super::BIN)
        .args(args)
        .output()
        .expect("running numaio")
}

/// The stdout of a run that must have succeeded; panics with `what` and its stderr.
pub fn ok(o: &Output, what: &str) -> String {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone()).unwrap()
}

/// Whether this machine can mount (root and /dev/fuse); says `SKIPPED:` when not.
pub fn can_mount(test: &str) -> bool {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        eprintln!("SKIPPED: {test}: needs root and /dev/fuse");
        return false;
    }
    true
}

/// A volume of two device files of `size` each and an empty mount point, in a temporary
/// directory removed on drop.
pub struct Volume {
    pub dir: tempfile::TempDir,
    pub devs: Vec<PathBuf>,
    pub mnt: PathBuf,
}

impl Volume {
    pub fn new(size: &str) -> Volume {
        let dir = tempfile::tempdir().unwrap();
        let devs = vec![dir.path().join("d0"), dir.path().join("d1")];
        let mut a: Vec<OsString> = vec!["mkfs".into(), "--size".into(), size.into()];
        for d in &devs {
            a.push("--node-of".into());
            a.push(format!("{}=0", d.display()).into());
        }
        a.extend(devs.iter().map(|d| d.clone().into_os_string()));
        let o = numaio_out(&a);
        assert!(
            o.status.success(),
            "mkfs: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        let mnt = dir.path().join("mnt");
        std::fs::create_dir(&mnt).unwrap();
        Volume { dir, devs, mnt }
    }

    /// `numaio mount EXTRA... DEVS... MNT`.
    pub fn mount(&self, extra: &[&str]) -> Output {
        let mut a: Vec<&OsStr> = vec!["mount".as_ref()];
        a.extend(extra.iter().map(OsStr::new));
        a.extend(self.devs.iter().map(|d| d.as_os_str()));
        a.push(self.mnt.as_os_str());
        numaio_out(a)
    }

    pub fn umount(&self) -> Output {
        numaio_out(["umount".as_ref(), self.mnt.as_os_str()])
    }
}

/// Unmounts the mount point on drop, so a failing test never leaves a mount behind.
pub struct Unmount<'a>(pub &'a Path);

impl Drop for Unmount<'_> {
    fn drop(&mut self) {
        if numaio_out(["umount".as_ref(), self.0.as_os_str()])
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
