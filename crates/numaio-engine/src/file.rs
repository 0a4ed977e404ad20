//! The file table: every file the engine has opened, by id and by path.

use crate::ext::Placement;
use crate::key::FileId;
use crate::slice::WriteBackError;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// How to open a file.
#[derive(Clone, Copy, Debug, Default)]
pub struct OpenOptions {
    pub write: bool,
    pub create: bool,
}

impl OpenOptions {
    /// Read-only.
    pub fn read_only() -> Self {
        OpenOptions::default()
    }
    /// Read-write, creating the file if it does not exist (the common case for writers).
    pub fn create_rw() -> Self {
        OpenOptions {
            write: true,
            create: true,
        }
    }
}

/// One opened file (shared by every handle on the same path).
pub(crate) struct FileEntry {
    pub id: FileId,
    pub path: PathBuf,
    direct_fd: Option<OwnedFd>,
    buffered_fd: OwnedFd,
    use_direct: AtomicBool,
    /// Logical length (bytes); the device may hold up to one block more until fsync.
    size: AtomicU64,
    /// First write-back error since the last fsync (reported once, like errseq).
    wb_error: Mutex<Option<WriteBackError>>,
    fell_back: AtomicBool,
    /// The block after the last chunk read (sequential detection) and the end of the
    /// readahead window already issued.
    pub seq_next: AtomicU64,
    pub ra_until: AtomicU64,
}

impl FileEntry {
    /// The descriptor data I/O goes through (O_DIRECT unless refused).
    pub fn fd(&self) -> RawFd {
        match (&self.direct_fd, self.use_direct.load(Ordering::Relaxed)) {
            (Some(fd), true) => fd.as_raw_fd(),
            _ => self.buffered_fd.as_raw_fd(),
        }
    }
    /// The buffered descriptor (metadata calls: fstat, ftruncate, fdatasync).
    pub fn meta_fd(&self) -> RawFd {
        self.buffered_fd.as_raw_fd()
    }
    pub fn len(&self) -> u64 {
        self.size.load(Ordering::Acquire)
    }
    /// The file now extends at least to `end`.
    pub fn grow_to(&self, end: u64) {
        self.size.fetch_max(end, Ordering::AcqRel);
    }
    /// Whether I/O to this file uses O_DIRECT (false after a fallback).
    pub fn direct(&self) -> bool {
        self.direct_fd.is_some() && self.use_direct.load(Ordering::Relaxed)
    }
    /// O_DIRECT was refused on first I/O: use buffered I/O from now on.
    pub fn fall_back_to_buffered(&self) {
        self.use_direct.store(false, Ordering::Relaxed);
        self.fell_back.store(true, Ordering::Relaxed);
    }
    /// True if O_DIRECT was refused (at open or on first I/O) and buffered I/O is used.
    pub fn fell_back_to_buffered(&self) -> bool {
        self.fell_back.load(Ordering::Relaxed)
    }
    pub fn record_error(&self, e: &WriteBackError) {
        let mut g = self.wb_error.lock();
        if g.is_none() {
            *g = Some(e.clone());
        }
    }
    /// The first write-back error since the last call, if any.
    pub fn take_error(&self) -> Option<WriteBackError> {
        self.wb_error.lock().take()
    }
}

#[derive(Default)]
pub(crate) struct FileTable {
    files: RwLock<Vec<Arc<FileEntry>>>,
    by_path: Mutex<HashMap<PathBuf, FileId>>,
}

impl FileTable {
    pub fn get(&self, id: FileId) -> Arc<FileEntry> {
        self.files.read()[id.0 as usize].clone()
    }

    pub fn all(&self) -> Vec<Arc<FileEntry>> {
        self.files.read().clone()
    }

    /// Opens `path` (or returns the entry of the same file already open), telling the
    /// placement and `opened` about a new file before it is used.
    pub fn open(
        &self,
        path: &Path,
        opts: OpenOptions,
        direct: bool,
        placement: &dyn Placement,
        opened: impl FnOnce(FileId, &Path) -> io::Result<()>,
    ) -> io::Result<Arc<FileEntry>> {
        let mut by_path = self.by_path.lock();
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if let Some(id) = by_path.get(&canon) {
            return Ok(self.get(*id));
        }
        let cpath = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "cannot open {}: the path contains a NUL byte",
                    path.display()
                ),
            )
        })?;
        let mut flags = libc::O_CLOEXEC
            | if opts.write {
                libc::O_RDWR
            } else {
                libc::O_RDONLY
            };
        if opts.create {
            flags |= libc::O_CREAT;
        }
        let open = |flags: i32| -> io::Result<OwnedFd> {
            // SAFETY: valid C string; the fd is owned immediately.
            let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o644) };
            if fd < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot open {}: {e}", path.display()),
                ));
            }
            // SAFETY: fd is a fresh descriptor we own.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        };
        let buffered_fd = open(flags)?;
        let mut fell_back = false;
        let direct_fd = if direct {
            match open(flags | libc::O_DIRECT) {
                Ok(fd) => Some(fd),
                Err(_) => {
                    fell_back = true;
                    None
                }
            }
        } else {
            None
        };
        let meta = std::fs::metadata(path).map_err(|e| {
            io::Error::new(e.kind(), format!("cannot stat {}: {e}", path.display()))
        })?;
        // A block device's st_size is 0: its length is where its end is.
        let len = if std::os::unix::fs::FileTypeExt::is_block_device(&meta.file_type()) {
            // SAFETY: lseek on our own open descriptor.
            let end = unsafe { libc::lseek(buffered_fd.as_raw_fd(), 0, libc::SEEK_END) };
            if end < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!("cannot find the size of {} (lseek): {e}", path.display()),
                ));
            }
            end as u64
        } else {
            meta.len()
        };
        let mut files = self.files.write();
        let id = FileId(files.len() as u32);
        opened(id, &canon)?;
        let entry = Arc::new(FileEntry {
            id,
            path: canon.clone(),
            use_direct: AtomicBool::new(direct_fd.is_some()),
            direct_fd,
            buffered_fd,
            size: AtomicU64::new(len),
            wb_error: Mutex::new(None),
            fell_back: AtomicBool::new(fell_back),
            seq_next: AtomicU64::new(u64::MAX),
            ra_until: AtomicU64::new(0),
        });
        files.push(entry.clone());
        placement.file_opened(id, &canon);
        by_path.insert(canon, id);
        Ok(entry)
    }
}
