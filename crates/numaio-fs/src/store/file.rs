//! Plain positional I/O on block devices and files: the store `fsck` and `mkfs` use, and the
//! reference the other stores are compared with.
//!
//! Under a FUSE mount the kernel already caches file data in the mount's page cache, so the
//! devices' own page cache would hold a second copy. With [`FileStore::cache_once`] the store
//! drops its device pages once a cache above holds the data: after a read the caller keeps
//! ([`BlockStore::forget`]) and after written data became durable (at [`BlockStore::sync`]).

use super::{check_range, device, BlockStore, DeviceInfo, DeviceKind};
use crate::FsError;
use numaio_sys::readahead::Streams;
use parking_lot::Mutex;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::sync::atomic::{AtomicBool, Ordering};

/// How many reads' lengths a sequential stream is read ahead in cache-once mode.
const READ_AHEAD_READS: u64 = 4;
/// Sequential streams followed per device: files read side by side, each its own stream.
const READ_STREAMS: usize = 16;

/// Written ranges remembered per device before the whole device is dropped at the next sync.
const MAX_RANGES: usize = 256;

/// Byte ranges of one device written since its last sync (cache-once mode only).
#[derive(Default)]
struct Written {
    ranges: Vec<(u64, u64)>,
    /// Too many ranges: drop the whole device's pages at the next sync.
    all: bool,
}

impl Written {
    fn add(&mut self, offset: u64, len: u64) {
        if self.all || len == 0 {
            return;
        }
        if let Some(last) = self.ranges.last_mut() {
            // A range that touches or overlaps the last one joins it (an append that
            // rewrites the end of the last block, a write just below the last one).
            let (end, new_end) = (last.0 + last.1, offset + len);
            if offset <= end && new_end >= last.0 {
                let start = last.0.min(offset);
                *last = (start, end.max(new_end) - start);
                return;
            }
        }
        if self.ranges.len() == MAX_RANGES {
            self.ranges.clear();
            self.all = true;
        } else {
            self.ranges.push((offset, len));
        }
    }
}

/// The devices of a volume, opened for `pread`/`pwrite`; `sync` is `fdatasync`.
pub struct FileStore {
    infos: Vec<DeviceInfo>,
    files: Vec<File>,
    read_only: bool,
    cache_once: AtomicBool,
    written: Vec<Mutex<Written>>,
    /// Per device, its sequential readers' streams in bytes (cache-once mode's own
    /// readahead): files read side by side each keep a stream.
    read_ahead: Vec<Streams>,
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
            written: files.iter().map(|_| Mutex::default()).collect(),
            read_ahead: files.iter().map(|_| Streams::new(READ_STREAMS)).collect(),
            infos: devices.to_vec(),
            files,
            read_only,
            cache_once: AtomicBool::new(false),
        })
    }

    /// A page cache above the store (a FUSE mount's) keeps what callers read and write: from
    /// now on drop device pages it holds too, so the data is cached once.
    ///
    /// Also replaces the devices' own readahead (`POSIX_FADV_RANDOM`), whose pages would be a
    /// second copy nobody drops, with one of the store's (`numaio_sys::readahead`): a read
    /// that starts where an earlier one on its device ended (one of up to [`READ_STREAMS`]
    /// streams per device, so files read side by side each keep theirs) keeps up to the next four reads'
    /// length requested in the background (`POSIX_FADV_WILLNEED`), topped up once half of it
    /// is read, which the next reads then take and drop. What is left over when a stream
    /// ends is that stretch.
    pub fn cache_once(&self, on: bool) -> Result<(), FsError> {
        self.cache_once.store(on, Ordering::Relaxed);
        let advice = if on {
            libc::POSIX_FADV_RANDOM
        } else {
            libc::POSIX_FADV_NORMAL
        };
        (0..self.files.len()).try_for_each(|dev| self.advise(dev as u16, 0, 0, advice))
    }

    /// `posix_fadvise(advice)` of a range of `dev`.
    fn advise(&self, dev: u16, offset: u64, len: u64, advice: libc::c_int) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
            return Ok(());
        };
        let f = &self.files[dev as usize];
        // SAFETY: an advisory call on a descriptor this store owns; no memory is passed.
        let r = unsafe { libc::posix_fadvise(f.as_raw_fd(), off, n, advice) };
        if r != 0 {
            return Err(FsError::io(
                &info.path,
                format!("advising the kernel about {len} bytes at {offset} (posix_fadvise)"),
                std::io::Error::from_raw_os_error(r),
            ));
        }
        Ok(())
    }

    /// `posix_fadvise(DONTNEED)`: clean pages of the range leave the device's page cache
    /// (dirty ones are only queued for write-back, and dropped at a later call).
    fn drop_pages(&self, dev: u16, offset: u64, len: u64) -> Result<(), FsError> {
        self.advise(dev, offset, len, libc::POSIX_FADV_DONTNEED)
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
            })?;
        if self.cache_once.load(Ordering::Relaxed) {
            let len = buf.len() as u64;
            // Keep READ_AHEAD_READS requests' worth in flight ahead of a stream.
            let window = len.saturating_mul(READ_AHEAD_READS);
            let ahead =
                self.read_ahead[dev as usize].advance(offset, offset + len, window, info.bytes);
            if let Some(r) = ahead {
                self.advise(dev, r.start, r.end - r.start, libc::POSIX_FADV_WILLNEED)?;
            }
        }
        Ok(())
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
            })?;
        if self.cache_once.load(Ordering::Relaxed) {
            self.written[dev as usize]
                .lock()
                .add(offset, data.len() as u64);
        }
        Ok(())
    }

    fn forget(&self, dev: u16, offset: u64, len: u64) -> Result<(), FsError> {
        if !self.cache_once.load(Ordering::Relaxed) {
            return Ok(());
        }
        self.drop_pages(dev, offset, len)
    }

    fn read_cached(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<bool, FsError> {
        let info = device(&self.infos, dev)?;
        check_range(info, "read", offset, buf.len())?;
        let off = libc::off_t::try_from(offset)
            .map_err(|_| FsError::Invalid(format!("read at {offset}: offset too large")))?;
        let iov = libc::iovec {
            iov_base: buf.as_mut_ptr().cast(),
            iov_len: buf.len(),
        };
        // SAFETY: `iov` describes `buf`, which is live and writable for the call; the file
        // stays open for as long as `self`.
        let n = unsafe {
            libc::preadv2(
                self.files[dev as usize].as_raw_fd(),
                &iov,
                1,
                off,
                libc::RWF_NOWAIT,
            )
        };
        match n {
            // All of it from the page cache; a short read means the rest is not there.
            n if n >= 0 => Ok(n as usize == buf.len()),
            _ => {
                let e = std::io::Error::last_os_error();
                match e.raw_os_error() {
                    // Not cached, or a kernel or file without RWF_NOWAIT reads.
                    Some(libc::EAGAIN) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(false),
                    _ => Err(FsError::io(
                        &info.path,
                        format!("read of {} bytes at {offset} (RWF_NOWAIT)", buf.len()),
                        e,
                    )),
                }
            }
        }
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        if self.read_only {
            return Ok(());
        }
        // Ranges written before the sync are durable after it: their pages are clean and
        // can go. Taken before, so writes racing with the sync stay for the next one.
        let written = self
            .cache_once
            .load(Ordering::Relaxed)
            .then(|| std::mem::take(&mut *self.written[dev as usize].lock()));
        self.files[dev as usize]
            .sync_data()
            .map_err(|e| FsError::io(&info.path, "fdatasync", e))?;
        match written {
            Some(w) if w.all => self.drop_pages(dev, 0, 0),
            Some(w) => w
                .ranges
                .iter()
                .try_for_each(|&(off, len)| self.drop_pages(dev, off, len)),
            None => Ok(()),
        }
    }
}
