//! Where a volume's blocks live: devices, each on one NUMA node.
//!
//! [`BlockStore`] is the one interface the file system uses to reach its devices; the
//! implementations differ in what backs a device (a block device or file through plain
//! positional I/O; a memory zone bound to a node; an in-memory image for tests) but not in their contract: `write_at` may be lost until `sync` of that device
//! returns, and a completed `sync` makes every write before it durable.

mod file;
mod mem;
mod zone;

pub use file::FileStore;
pub use mem::{CrashMode, MemStore};
pub use zone::{ZonePlacement, ZoneSpec, ZoneStore};

use crate::FsError;
use std::path::PathBuf;

/// What backs a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeviceKind {
    /// A block device (`/dev/nvme0n1`, `/dev/pmem0` used as a block device).
    BlockDevice,
    /// A regular file standing in for a device.
    File,
    /// Anonymous memory bound to a node: lost on unmount.
    RamZone,
    /// A mapped persistent-memory device or file on a DAX file system: survives unmount.
    PmemZone,
    /// In-memory test image.
    Memory,
}

/// One device of a volume.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeviceInfo {
    /// Path as given by the user (for messages); I/O goes through the store's open handle.
    pub path: PathBuf,
    /// NUMA node the device belongs to.
    pub node: u32,
    /// Usable size in bytes.
    pub bytes: u64,
    pub kind: DeviceKind,
}

/// Block I/O on a volume's devices. Offsets and lengths are in bytes; the file system only
/// issues whole, aligned blocks, but implementations must not rely on it for correctness.
pub trait BlockStore: Send + Sync {
    /// The devices, in volume order (the index is the `dev` of an extent).
    fn devices(&self) -> &[DeviceInfo];
    /// Fills `buf` from `dev` at `offset`; reading past the device's end is an error.
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError>;
    /// Writes `data` to `dev` at `offset`; not durable until [`BlockStore::sync`].
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError>;
    /// Makes every write to `dev` completed before the call durable.
    fn sync(&self, dev: u16) -> Result<(), FsError>;
    /// [`BlockStore::read_at`] where it needs no wait for a device: `true` with `buf` filled
    /// where the bytes are in memory (a page-cache hit, a memory store), `false` (and `buf`
    /// unspecified) where they would have to be read from the device. The default always
    /// says they would; a caller that must not wait then hands the read to one that may.
    fn read_cached(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<bool, FsError> {
        let _ = (dev, offset, buf);
        Ok(false)
    }
    /// Drops whatever copy of `len` bytes of `dev` at `offset` is cached below the store (a
    /// kernel page cache of the device), where the store was told a cache above keeps them;
    /// the data stays on the device. The default keeps nothing to drop.
    fn forget(&self, dev: u16, offset: u64, len: u64) -> Result<(), FsError> {
        let _ = (dev, offset, len);
        Ok(())
    }
    /// Bytes of device data held in a cache of this store, per node (empty: no cache).
    fn cache_bytes(&self) -> Vec<(u32, u64)> {
        Vec::new()
    }
    /// Syncs every device.
    fn sync_all(&self) -> Result<(), FsError> {
        for dev in 0..self.devices().len() {
            self.sync(dev as u16)?;
        }
        Ok(())
    }
}

/// The device `dev` of `infos`, or an error saying the volume has no such device.
pub(crate) fn device(infos: &[DeviceInfo], dev: u16) -> Result<&DeviceInfo, FsError> {
    infos.get(dev as usize).ok_or_else(|| {
        FsError::Invalid(format!(
            "no device {dev} in this volume (it has {})",
            infos.len()
        ))
    })
}

/// Checks that `len` bytes at `offset` lie inside `info`; the error names the device and
/// the request.
pub(crate) fn check_range(
    info: &DeviceInfo,
    what: &str,
    offset: u64,
    len: usize,
) -> Result<(), FsError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= info.bytes => Ok(()),
        _ => Err(FsError::io(
            &info.path,
            format!(
                "{what} of {len} bytes at {offset} past the end ({} bytes)",
                info.bytes
            ),
            std::io::Error::from_raw_os_error(libc::EIO),
        )),
    }
}
