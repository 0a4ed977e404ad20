//! A loop block device over a temporary file, for tests of block-device paths.

use std::path::PathBuf;
use std::process::Command;

/// Requirement name for tests that attach loop devices (root and `losetup`).
pub const LOOP_DEVICE: &str = "loop-device";

/// A loop device attached to a file of the given size; detached on drop.
pub struct Loop {
    pub dev: PathBuf,
    _dir: tempfile::TempDir,
}

impl Loop {
    /// Attaches a loop device, or says why it cannot here.
    pub fn new(bytes: u64) -> Result<Loop, String> {
        if !numaio_testkit::is_root() {
            return Err("root to attach loop devices".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let img = dir.path().join("img");
        std::fs::File::create(&img)
            .and_then(|f| f.set_len(bytes))
            .map_err(|e| e.to_string())?;
        let out = Command::new("losetup")
            .arg("--find")
            .arg("--show")
            .arg(&img)
            .output()
            .map_err(|e| format!("losetup: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "losetup --find --show failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        let dev = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Ok(Loop { dev, _dir: dir })
    }
}

impl Drop for Loop {
    fn drop(&mut self) {
        let _ = Command::new("losetup").arg("-d").arg(&self.dev).status();
    }
}
