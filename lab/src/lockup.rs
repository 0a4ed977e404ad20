//! Guest kernel lockups: a guest whose kernel reports `BUG: soft lockup` and then times out
//! or dies, and the one rerun [`crate::Scenario::retry_after_guest_lockup`] allows.
//!
//! Under multi-threaded TCG a guest CPU can stay stuck in the kernel for good: the 6.1
//! guest of a power-cut test once reported `soft lockup - CPU#1 stuck for 26s`, then 52 s,
//! then 78 s, with no output until the lab's timeout, and the same seed passed on every
//! rerun (lab/README.md, "Power cuts"). Such a run says nothing about the scenario.
//! A rerun must start from the disks as they were before the first boot, so the scenario's
//! kept images are copied aside first and copied back before the rerun.

use crate::error::{LabError, LabResult};
use crate::nodedev::Backing;
use crate::Scenario;
use std::path::{Path, PathBuf};

/// Added to the kernel command line of the rerun, so that a guest (and a test of this
/// module) can tell it from the first run in `/proc/cmdline`.
pub const RERUN_ARG: &str = "numaio_lab.rerun=1";

/// What the guest kernel prints when a CPU has not scheduled for the watchdog's threshold.
const SOFT_LOCKUP: &str = "BUG: soft lockup";

/// Whether a failed run's guest reported a soft lockup before it timed out or died.
pub fn is_guest_lockup(e: &LabError) -> bool {
    match e {
        LabError::Timeout { console_tail, .. } | LabError::GuestDied { console_tail, .. } => {
            console_tail.contains(SOFT_LOCKUP)
        }
        _ => false,
    }
}

/// The images a scenario keeps across runs: its disk image and the images behind its node
/// disks and persistent memory.
pub fn kept_images(s: &Scenario) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = s.disk_image.iter().cloned().collect();
    for b in s
        .node_disks
        .iter()
        .map(|d| &d.backing)
        .chain(s.node_pmem.iter().map(|p| &p.backing))
    {
        if let Backing::Image(p) = b {
            v.push(p.clone());
        }
    }
    v
}

/// Copies of images taken before a boot, restored with [`Snapshot::restore`].
pub struct Snapshot {
    dir: tempfile::TempDir,
    images: Vec<(PathBuf, PathBuf)>,
}

impl Snapshot {
    /// Copies each image into a private temporary directory.
    pub fn take(images: &[PathBuf]) -> LabResult<Snapshot> {
        let dir = tempfile::Builder::new()
            .prefix("numaio-lab-images-")
            .tempdir()
            .map_err(LabError::io("creating a directory for the images' copies"))?;
        let mut saved = Vec::with_capacity(images.len());
        for (i, img) in images.iter().enumerate() {
            let copy = dir.path().join(format!("{i}.img"));
            copy_file(img, &copy)?;
            saved.push((img.clone(), copy));
        }
        Ok(Snapshot { dir, images: saved })
    }

    /// Puts every image back as it was when the snapshot was taken.
    pub fn restore(&self) -> LabResult<()> {
        for (img, copy) in &self.images {
            copy_file(copy, img)?;
        }
        Ok(())
    }

    /// Where the copies are (for messages).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

fn copy_file(from: &Path, to: &Path) -> LabResult<()> {
    std::fs::copy(from, to).map_err(LabError::io(format!(
        "copying {} to {}",
        from.display(),
        to.display()
    )))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::LabTopology;

    #[test]
    fn only_a_timeout_or_death_after_a_soft_lockup_counts() {
        let tail = "[   36.821426] watchdog: BUG: soft lockup - CPU#1 stuck for 26s! [numaio:161]";
        let t = LabError::Timeout {
            secs: 120,
            phase: "started but did not finish".into(),
            console_tail: tail.into(),
        };
        assert!(is_guest_lockup(&t));
        let d = LabError::GuestDied {
            started: true,
            console_tail: tail.into(),
        };
        assert!(is_guest_lockup(&d));
        let plain = LabError::Timeout {
            secs: 120,
            phase: "started but did not finish".into(),
            console_tail: "COMMITTED 3".into(),
        };
        assert!(!is_guest_lockup(&plain));
        assert!(!is_guest_lockup(&LabError::BadDisk(tail.into())));
    }

    #[test]
    fn a_snapshot_puts_the_kept_images_back() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("disk0.img");
        let b = dir.path().join("pmem1.img");
        std::fs::write(&a, b"before a").unwrap();
        std::fs::write(&b, b"before b").unwrap();
        let s = Scenario::new(LabTopology::from_nodes(&[(1, 256), (1, 256)]), "true")
            .node_disk_image(0, a.clone())
            .node_disk(1, 1 << 20)
            .node_pmem_image(1, b.clone());
        let images = kept_images(&s);
        assert_eq!(images, vec![a.clone(), b.clone()]);
        let snap = Snapshot::take(&images).unwrap();
        std::fs::write(&a, b"after, longer than before").unwrap();
        std::fs::write(&b, b"").unwrap();
        snap.restore().unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), b"before a");
        assert_eq!(std::fs::read(&b).unwrap(), b"before b");
        let copies = snap.dir().to_path_buf();
        drop(snap);
        assert!(!copies.exists(), "the copies are removed with the snapshot");
    }
}
