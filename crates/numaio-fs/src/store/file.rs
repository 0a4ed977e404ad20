//! Plain positional I/O on block devices and files: the store `fsck` and `mkfs` use, and the
//! reference the other stores are compared with.

use super::{check_range, device, BlockStore, DeviceInfo, DeviceKind};
use crate::FsError;
use std::fs::File;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};

/// The devices of a volume, opened for `pread`/`pwrite`; `sync` is `fdatasync`.
pub struct FileStore {
    infos: Vec<DeviceInfo>,
    files: Vec<File>,
    read_only: bool,
}

/// Opens one device: O_EXCL for a block device (so nothing mounts or formats it meanwhile),
/// and checks it is still what was probed and at least as large as `info.bytes`.
pub(crate) fn open_device(info: &DeviceInfo, read_only: bool) -> Result<File, FsError> {
    let path = &info.path;
    let block = match info.kind {
        DeviceKind::BlockDevice => true,
        DeviceKind::File => false,
        k => {
            return Err(FsError::Invalid(format!(
                "{}: a {k:?} device cannot be opened as a file or block device",
                path.display()
            )))
        }
    };
    let mut flags = libc::O_CLOEXEC | libc::O_NOCTTY;
    if block {
        flags |= libc::O_EXCL;
    } else {
        // Never wait on a FIFO put where a file was.
        flags |= libc::O_NONBLOCK;
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(!read_only)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| {
            let step = if e.raw_os_error() == Some(libc::EBUSY) {
                "opening the device exclusively: it is busy (mounted or in use); free it first"
            } else if read_only {
                "opening the device read-only"
            } else {
                "opening the device read-write"
            };
            FsError::io(path, step, e)
        })?;
    let meta = f
        .metadata()
        .map_err(|e| FsError::io(path, "fstat of the opened device", e))?;
    let ft = meta.file_type();
    let actual = if block && ft.is_block_device() {
        crate::device::block_device_size(&f, path)?
    } else if !block && ft.is_file() {
        meta.len()
    } else {
        return Err(FsError::Invalid(format!(
            "{}: expected a {}, found something else; check the path",
            path.display(),
            if block {
                "block device"
            } else {
                "regular file"
            }
        )));
    };
    if actual < info.bytes {
        return Err(FsError::Invalid(format!(
            "{}: the device holds {actual} bytes but the volume expects {}; \
             was it replaced or truncated?",
            path.display(),
            info.bytes
        )));
    }
    Ok(f)
}

impl FileStore {
    /// Opens every device of `devices` (block devices or files).
    pub fn open(devices: &[DeviceInfo], read_only: bool) -> Result<FileStore, FsError> {
        let files = devices
            .iter()
            .map(|d| open_device(d, read_only))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(FileStore {
            infos: devices.to_vec(),
            files,
            read_only,
        })
    }

    /// Whether writes are refused.
    pub fn read_only(&self) -> bool {
        self.read_only
    }
}

impl BlockStore for FileStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        check_range(info, "read", offset, buf.len())?;
        self.files[dev as usize]
            .read_exact_at(buf, offset)
            .map_err(|e| {
                FsError::io(
                    &info.path,
                    format!("read of {} bytes at {offset}", buf.len()),
                    e,
                )
            })
    }

    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        if self.read_only {
            return Err(FsError::io(
                &info.path,
                format!(
                    "write of {} bytes at {offset}: the volume is open read-only",
                    data.len()
                ),
                std::io::Error::from_raw_os_error(libc::EROFS),
            ));
        }
        check_range(info, "write", offset, data.len())?;
        self.files[dev as usize]
            .write_all_at(data, offset)
            .map_err(|e| {
                FsError::io(
                    &info.path,
                    format!("write of {} bytes at {offset}", data.len()),
                    e,
                )
            })
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        if self.read_only {
            return Ok(());
        }
        self.files[dev as usize]
            .sync_data()
            .map_err(|e| FsError::io(&info.path, "fdatasync", e))
    }
}
