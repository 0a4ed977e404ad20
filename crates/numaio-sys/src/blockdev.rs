//! Block devices as sysfs shows them (`/sys/dev/block/MAJ:MIN`): the NUMA node a device is
//! attached to and its queue limits.
//!
//! A partition has neither a device nor a queue of its own: both are its disk's, one
//! directory up. [`BlockDev::sysfs_dir`] applies that rule once, for every attribute.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A block device by number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BlockDev {
    pub major: u32,
    pub minor: u32,
}

impl BlockDev {
    /// The device with number `dev` (an `st_rdev`, or the `st_dev` of a file on it).
    pub fn from_dev(dev: u64) -> BlockDev {
        BlockDev {
            major: libc::major(dev),
            minor: libc::minor(dev),
        }
    }

    /// The device holding the file system of `path` (its `st_dev`); `None` when `path`
    /// cannot be looked up.
    pub fn holding(path: &Path) -> Option<BlockDev> {
        Some(BlockDev::from_dev(std::fs::metadata(path).ok()?.dev()))
    }

    /// The sysfs directory that holds the device's attributes: its own, or for a partition
    /// its disk's.
    pub fn sysfs_dir(&self) -> PathBuf {
        let base = PathBuf::from(format!("/sys/dev/block/{}:{}", self.major, self.minor));
        if base.join("partition").exists() {
            base.join("..")
        } else {
            base
        }
    }

    /// The NUMA node the device is attached to: `None` when it reports none (`-1`, a
    /// virtual device, no such device).
    pub fn numa_node(&self) -> Option<u32> {
        let text = std::fs::read_to_string(self.sysfs_dir().join("device/numa_node")).ok()?;
        parse_numa_node(&text)
    }

    /// A queue attribute in KiB (`read_ahead_kb`, `max_sectors_kb`, ...).
    pub fn queue_kb(&self, name: &str) -> Option<u64> {
        let text = std::fs::read_to_string(self.sysfs_dir().join("queue").join(name)).ok()?;
        text.trim().parse().ok()
    }
}

/// The NUMA node of the block device that holds `path`'s file system (`None` when it
/// reports none, e.g. a virtual file system).
pub fn node_of_path(path: &Path) -> Option<u32> {
    BlockDev::holding(path)?.numa_node()
}

/// The node in the text of a sysfs `numa_node` file: `None` for `-1` (the device reports
/// none) or anything that is not a node number.
pub fn parse_numa_node(text: &str) -> Option<u32> {
    let n: i64 = text.trim().parse().ok()?;
    u32::try_from(n).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numa_node_text() {
        assert_eq!(parse_numa_node("1\n"), Some(1));
        assert_eq!(parse_numa_node("-1\n"), None);
        assert_eq!(parse_numa_node(""), None);
        assert_eq!(parse_numa_node("99999999999"), None);
    }

    #[test]
    fn a_virtual_file_system_has_no_node() {
        assert_eq!(node_of_path(Path::new("/proc/self")), None);
        assert_eq!(node_of_path(Path::new("/nonexistent/numaio")), None);
    }

    #[test]
    fn device_numbers_split_into_major_and_minor() {
        let d = BlockDev::from_dev(libc::makedev(259, 3));
        assert_eq!((d.major, d.minor), (259, 3));
        assert!(d.sysfs_dir().starts_with("/sys/dev/block/259:3"));
    }
}
