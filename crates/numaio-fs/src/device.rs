//! Finding out what the devices given to `numaio mkfs` are: their kind, size and NUMA node,
//! and refusing the ones that must not be formatted.
//!
//! A device is a block device or a regular file standing in for one. Its node comes from
//! sysfs (numaio-sys [`BlockDev::numa_node`], a partition's from its disk) unless a
//! `DEV=NODE` rule says otherwise; a device that reports no node needs a rule. Block devices
//! that are mounted, used as swap or held open exclusively by someone else are refused, and
//! so is a device given twice (also through another path, a symlink or a hard link).
//!
//! The text parsers ([`parse_swaps`] here, the mount table and `numa_node` in numaio-sys)
//! are pure functions, so they are unit tested and fuzzed without a machine that has such
//! devices.

use crate::store::{DeviceInfo, DeviceKind};
use crate::FsError;
use numaio_sys::blockdev::BlockDev;
use numaio_sys::{mountinfo, Topology};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::str::FromStr;

/// `--node-of DEV=NODE`: the device at `dev` belongs to `node`, whatever sysfs says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRule {
    pub dev: PathBuf,
    pub node: u32,
}

impl FromStr for NodeRule {
    type Err = FsError;

    fn from_str(s: &str) -> Result<NodeRule, FsError> {
        // The node is after the last '=' so a path may itself contain '='.
        let Some((dev, node)) = s.rsplit_once('=') else {
            return Err(FsError::Invalid(format!(
                "node rule {s:?}: expected DEV=NODE, e.g. /dev/nvme1n1=1"
            )));
        };
        if dev.is_empty() {
            return Err(FsError::Invalid(format!(
                "node rule {s:?}: the device path before '=' is empty"
            )));
        }
        let node = node.trim().parse::<u32>().map_err(|_| {
            FsError::Invalid(format!(
                "node rule {s:?}: {node:?} is not a node number (a non-negative integer)"
            ))
        })?;
        Ok(NodeRule {
            dev: PathBuf::from(dev),
            node,
        })
    }
}

impl fmt::Display for NodeRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.dev.display(), self.node)
    }
}

/// `stat` of a device path given by the user (opens nothing, so a FIFO cannot block).
pub(crate) fn stat_device(path: &Path) -> Result<std::fs::Metadata, FsError> {
    std::fs::metadata(path)
        .map_err(|e| FsError::io(path, "looking up the device (check the path)", e))
}

/// `BLKGETSIZE64` (`_IOR(0x12, 114, size_t)`): the size of a block device in bytes.
const BLKGETSIZE64: u64 = 0x8008_1272;

/// The size in bytes of the block device open on `f`.
pub(crate) fn block_device_size(f: &File, path: &Path) -> Result<u64, FsError> {
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to a live u64;
    // the descriptor is open for the duration of the call.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut bytes as *mut u64) };
    if r != 0 {
        return Err(FsError::io(
            path,
            "reading the block device's size (ioctl BLKGETSIZE64)",
            io::Error::last_os_error(),
        ));
    }
    Ok(bytes)
}

/// The file names in the text of `/proc/swaps` (first column, after the header), with the
/// kernel's octal escapes (`\040` for a space) decoded.
pub fn parse_swaps(text: &str) -> Vec<PathBuf> {
    text.lines()
        .filter(|l| !l.starts_with("Filename"))
        .filter_map(|l| l.split_ascii_whitespace().next())
        .map(|name| PathBuf::from(mountinfo::unescape(name)))
        .collect()
}

/// What identifies a device whatever path names it: the device number of a block device,
/// the (device, inode) of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Identity {
    Block(u64),
    File(u64, u64),
}

struct Probed {
    info: DeviceInfo,
    id: Identity,
    sysfs_node: Option<u32>,
}

fn probe_one(path: &Path, mounted: &[(u32, u32)], swaps: &[PathBuf]) -> Result<Probed, FsError> {
    let invalid = |what: &str| FsError::Invalid(format!("{}: {what}", path.display()));
    // stat first: it opens nothing, so a FIFO or socket is refused without blocking.
    let meta = stat_device(path)?;
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(invalid(
            "is a directory; give a block device or a regular file",
        ));
    }
    if ft.is_fifo() {
        return Err(invalid("is a FIFO; give a block device or a regular file"));
    }
    if ft.is_socket() {
        return Err(invalid(
            "is a socket; give a block device or a regular file",
        ));
    }
    if ft.is_char_device() {
        return Err(invalid(
            "is a character device; give a block device or a regular file \
             (a /dev/daxN.M device is a memory zone: use --zone NODE:SIZE:PATH)",
        ));
    }
    let block = ft.is_block_device();
    if !block && !ft.is_file() {
        return Err(invalid("is neither a block device nor a regular file"));
    }
    if block {
        // Before opening: a mounted device may not even be openable here, and "mounted"
        // is the error that tells the user what to do.
        check_not_mounted_or_swap(path, meta.rdev(), mounted, swaps)?;
    }
    // O_NONBLOCK: should the path have been swapped for a FIFO since the stat, the open does
    // not wait for a writer.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| FsError::io(path, "opening the device for reading", e))?;
    let fmeta = f
        .metadata()
        .map_err(|e| FsError::io(path, "fstat of the opened device", e))?;
    if fmeta.file_type().is_block_device() != block || fmeta.ino() != meta.ino() {
        return Err(invalid(
            "changed while it was being probed; run the command again",
        ));
    }
    let (bytes, id, kind, (maj, min)) = if block {
        let rdev = fmeta.rdev();
        (
            block_device_size(&f, path)?,
            Identity::Block(rdev),
            DeviceKind::BlockDevice,
            (libc::major(rdev), libc::minor(rdev)),
        )
    } else {
        let dev = fmeta.dev();
        (
            fmeta.len(),
            Identity::File(dev, fmeta.ino()),
            DeviceKind::File,
            // A file's blocks live on the device holding its file system.
            (libc::major(dev), libc::minor(dev)),
        )
    };
    Ok(Probed {
        info: DeviceInfo {
            path: path.to_path_buf(),
            node: 0,
            bytes,
            kind,
        },
        id,
        sysfs_node: BlockDev {
            major: maj,
            minor: min,
        }
        .numa_node(),
    })
}

fn identity_of(path: &Path) -> io::Result<Identity> {
    let meta = std::fs::metadata(path)?;
    Ok(if meta.file_type().is_block_device() {
        Identity::Block(meta.rdev())
    } else {
        Identity::File(meta.dev(), meta.ino())
    })
}

/// Refuses a block device that is mounted or used as swap.
fn check_not_mounted_or_swap(
    path: &Path,
    rdev: u64,
    mounted: &[(u32, u32)],
    swaps: &[PathBuf],
) -> Result<(), FsError> {
    let (maj, min) = (libc::major(rdev), libc::minor(rdev));
    if mounted.contains(&(maj, min)) {
        return Err(FsError::Invalid(format!(
            "{}: device {maj}:{min} is mounted (see /proc/self/mountinfo); unmount it first",
            path.display()
        )));
    }
    for s in swaps {
        if let Ok(m) = std::fs::metadata(s) {
            if m.file_type().is_block_device() && m.rdev() == rdev {
                return Err(FsError::Invalid(format!(
                    "{}: the device is in use as swap ({}); run swapoff first",
                    path.display(),
                    s.display()
                )));
            }
        }
    }
    Ok(())
}

/// Refuses a block device held exclusively by another user (a mount, md/dm, another mkfs).
fn check_not_busy(path: &Path) -> Result<(), FsError> {
    // O_EXCL on a block device fails with EBUSY while anyone else holds it exclusively.
    match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_EXCL | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.raw_os_error() == Some(libc::EBUSY) => Err(FsError::io(
            path,
            "the device is busy (held by a mount, md/dm or another program); \
             free it first (exclusive open)",
            e,
        )),
        Err(e) => Err(FsError::io(path, "exclusive open of the device", e)),
    }
}

/// Probes the devices of a new volume: kind, size, node; refuses what must not be formatted.
///
/// Each rule must name one of `paths` (by identity, so any path to the same device works)
/// and overrides sysfs for it. Every node must exist in `topo` and have memory.
pub fn probe_devices<P: AsRef<Path>>(
    paths: &[P],
    rules: &[NodeRule],
    topo: &Topology,
) -> Result<Vec<DeviceInfo>, FsError> {
    if paths.is_empty() {
        return Err(FsError::Invalid(
            "no device given; name at least one block device or file".into(),
        ));
    }
    let mounted: Vec<(u32, u32)> = std::fs::read_to_string(mountinfo::SELF_MOUNTINFO)
        .map(|t| {
            mountinfo::parse(&t)
                .iter()
                .map(|m| (m.major, m.minor))
                .collect()
        })
        .map_err(|e| FsError::io(mountinfo::SELF_MOUNTINFO, "reading the mount table", e))?;
    // No /proc/swaps means no swap support, hence no swap device.
    let swaps = std::fs::read_to_string("/proc/swaps")
        .map(|t| parse_swaps(&t))
        .unwrap_or_default();

    let mut probed: Vec<Probed> = Vec::with_capacity(paths.len());
    for p in paths {
        let p = probe_one(p.as_ref(), &mounted, &swaps)?;
        if let Some(first) = probed.iter().find(|q| q.id == p.id) {
            return Err(FsError::Invalid(format!(
                "{} is the same device as {}; list each device once",
                p.info.path.display(),
                first.info.path.display()
            )));
        }
        probed.push(p);
    }

    let mut rule_for: Vec<Option<&NodeRule>> = vec![None; probed.len()];
    for r in rules {
        let id = identity_of(&r.dev)
            .map_err(|e| FsError::io(&r.dev, format!("node rule {r}: looking up the device"), e))?;
        let Some(i) = probed.iter().position(|p| p.id == id) else {
            return Err(FsError::Invalid(format!(
                "node rule {r}: {} is not one of the devices being formatted",
                r.dev.display()
            )));
        };
        if let Some(prev) = rule_for[i] {
            if prev.node != r.node {
                return Err(FsError::Invalid(format!(
                    "node rules {prev} and {r} give {} two different nodes",
                    probed[i].info.path.display()
                )));
            }
        }
        rule_for[i] = Some(r);
    }

    let mut out = Vec::with_capacity(probed.len());
    for (p, rule) in probed.into_iter().zip(rule_for) {
        let mut info = p.info;
        let node = match (rule, p.sysfs_node) {
            (Some(r), _) => r.node,
            (None, Some(n)) => n,
            (None, None) => {
                return Err(FsError::Invalid(format!(
                    "{}: the device reports no NUMA node (sysfs numa_node is -1 or missing); \
                     say which node it belongs to with --node-of {}=NODE",
                    info.path.display(),
                    info.path.display()
                )));
            }
        };
        match topo.node(node) {
            None => {
                return Err(FsError::Invalid(format!(
                    "{}: node {node} does not exist on this machine (nodes: {:?})",
                    info.path.display(),
                    topo.node_ids()
                )));
            }
            Some(n) if !n.has_memory() => {
                return Err(FsError::Invalid(format!(
                    "{}: node {node} has no memory, so no cache or thread can be local to \
                     it; give the device a node with memory",
                    info.path.display()
                )));
            }
            Some(_) => {}
        }
        info.node = node;
        if let Identity::Block(_) = p.id {
            check_not_busy(&info.path)?;
        }
        out.push(info);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_errors_name_the_rule() {
        let r: NodeRule = "/dev/nvme1n1=1".parse().unwrap();
        assert_eq!(r.dev, PathBuf::from("/dev/nvme1n1"));
        assert_eq!(r.node, 1);
        let r: NodeRule = "/tmp/a=b=3".parse().unwrap();
        assert_eq!(r.dev, PathBuf::from("/tmp/a=b"));
        assert_eq!(r.node, 3);
        for bad in [
            "/dev/sda",
            "=1",
            "/dev/sda=",
            "/dev/sda=-1",
            "/dev/sda=x",
            "",
        ] {
            let e = bad.parse::<NodeRule>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }

    #[test]
    fn swaps_list_file_names_with_escapes_decoded() {
        let t = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n\
                 /dev/sda2                               partition\t8388604\t\t0\t\t-2\n\
                 /swap\\040file                           file\t\t1024\t\t0\t\t-3\n";
        assert_eq!(
            parse_swaps(t),
            vec![PathBuf::from("/dev/sda2"), PathBuf::from("/swap file")]
        );
    }
}
