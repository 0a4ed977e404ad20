//! The file table: every file the engine has opened, by id and by path.

use crate::error::{EngineError, WriteBackError};
use crate::ext::Placement;
use crate::key::FileId;
use numaio_sys::readahead::Readahead;
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

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

/// The descriptors of a file: buffered (metadata calls, fallback) and O_DIRECT.
struct Fds {
    buffered: OwnedFd,
    direct: Option<OwnedFd>,
}

/// One opened file (shared by every handle on the same file).
pub(crate) struct FileEntry {
    pub id: FileId,
    pub path: PathBuf,
    /// The descriptors of the first open; read-only if that open was.
    ro: Fds,
    /// Read-write descriptors once a handle opened the file for writing. The first ones
    /// stay open as long as the entry: requests in flight may still use them.
    rw: OnceLock<Fds>,
    use_direct: AtomicBool,
    /// The largest size writes may give the file.
    pub max_len: u64,
    /// Logical length (bytes); the device may hold up to one block more until fsync.
    size: AtomicU64,
    /// First write-back error since the last fsync (reported once, like errseq).
    wb_error: Mutex<Option<WriteBackError>>,
    fell_back: AtomicBool,
    /// Sequential reads of the file, in blocks.
    pub readahead: Readahead,
}

impl FileEntry {
    fn fds(&self) -> &Fds {
        self.rw.get().unwrap_or(&self.ro)
    }
    /// The descriptor data I/O goes through (O_DIRECT unless refused).
    pub fn fd(&self) -> RawFd {
        let fds = self.fds();
        match (&fds.direct, self.use_direct.load(Ordering::Relaxed)) {
            (Some(fd), true) => fd.as_raw_fd(),
            _ => fds.buffered.as_raw_fd(),
        }
    }
    /// The buffered descriptor (metadata calls: fstat, ftruncate, fdatasync).
    pub fn meta_fd(&self) -> RawFd {
        self.fds().buffered.as_raw_fd()
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
        self.fds().direct.is_some() && self.use_direct.load(Ordering::Relaxed)
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
    /// Drops this engine's advisory lock (at shutdown: handles that outlive the engine can no
    /// longer read or write, so another engine may take the file).
    pub fn unlock(&self) {
        for fds in [Some(&self.ro), self.rw.get()].into_iter().flatten() {
            let _ = lock(fds.buffered.as_raw_fd(), libc::F_UNLCK, &self.path);
        }
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
    /// By device and inode, so two paths to one file (links, bind mounts) share its entry.
    by_inode: Mutex<HashMap<(u64, u64), FileId>>,
}

/// Opens `path` with `flags`, keeping the errno.
fn open_fd(cpath: &CStr, path: &Path, flags: i32) -> Result<OwnedFd, EngineError> {
    // SAFETY: valid C string; the fd is owned immediately.
    let fd = unsafe { libc::open(cpath.as_ptr(), flags, 0o644) };
    if fd < 0 {
        return Err(EngineError::os(
            "cannot open",
            path,
            io::Error::last_os_error(),
        ));
    }
    // SAFETY: fd is a fresh descriptor we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Opens the descriptors of `path`: buffered, and O_DIRECT when asked for (None if refused).
fn open_fds(path: &Path, write: bool, create: bool, direct: bool) -> Result<Fds, EngineError> {
    let cpath = CString::new(path.as_os_str().as_bytes()).map_err(|_| {
        EngineError::os(
            "cannot open",
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "the path contains a NUL byte"),
        )
    })?;
    let mut flags = libc::O_CLOEXEC | if write { libc::O_RDWR } else { libc::O_RDONLY };
    if create {
        flags |= libc::O_CREAT;
    }
    let buffered = open_fd(&cpath, path, flags)?;
    let direct = if direct {
        open_fd(&cpath, path, flags | libc::O_DIRECT).ok()
    } else {
        None
    };
    Ok(Fds { buffered, direct })
}

/// Takes (or with `F_UNLCK` drops) this engine's advisory whole-file lock on `fd`: an
/// open-file-description lock, shared for reading and exclusive for writing, so a second
/// engine (in this process or another) cannot cache the file at the same time. OFD locks
/// are independent of `flock`, which programs may hold on the same file themselves.
fn lock(fd: RawFd, kind: i32, path: &Path) -> Result<(), EngineError> {
    // SAFETY: a zeroed flock is a valid argument; the fields that matter are set below.
    let mut l: libc::flock = unsafe { std::mem::zeroed() };
    l.l_type = kind as libc::c_short;
    l.l_whence = libc::SEEK_SET as libc::c_short;
    // SAFETY: fcntl on our own descriptor with a live flock; no other memory is passed.
    if unsafe { libc::fcntl(fd, libc::F_OFD_SETLK, &l) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    match e.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Err(EngineError::Locked {
            path: path.to_path_buf(),
        }),
        // File systems (or kernels) without OFD locks: the file is used unlocked, as any
        // program would use it there.
        Some(libc::ENOLCK) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => Ok(()),
        _ => Err(EngineError::os("cannot lock (F_OFD_SETLK)", path, e)),
    }
}

impl FileTable {
    pub fn get(&self, id: FileId) -> Arc<FileEntry> {
        self.files.read()[id.0 as usize].clone()
    }

    pub fn all(&self) -> Vec<Arc<FileEntry>> {
        self.files.read().clone()
    }

    /// Opens `path` (or returns the entry of the same file already open, opening it for
    /// writing first if `opts` asks for that and it was opened read-only), telling the
    /// placement and `opened` about a new file before it is used (and `opened` again about
    /// a file reopened for writing). `max_len` limits the size
    /// writes may give a regular file (a block device is limited by its size).
    pub fn open(
        &self,
        path: &Path,
        opts: OpenOptions,
        direct: bool,
        max_len: u64,
        placement: &dyn Placement,
        opened: impl FnOnce(FileId, &Path) -> io::Result<()>,
    ) -> Result<Arc<FileEntry>, EngineError> {
        let mut by_inode = self.by_inode.lock();
        let fds = open_fds(path, opts.write, opts.create, direct)?;
        let meta = std::fs::File::from(
            fds.buffered
                .try_clone()
                .map_err(|e| EngineError::os("cannot duplicate the descriptor of", path, e))?,
        )
        .metadata()
        .map_err(|e| EngineError::os("cannot stat", path, e))?;
        if let Some(id) = by_inode.get(&(meta.dev(), meta.ino())) {
            let entry = self.get(*id);
            if opts.write && entry.rw.get().is_none() {
                // More rights than the first open: the read-write descriptors just opened
                // join the entry; the exclusive lock moves to them.
                let ro = entry.ro.buffered.as_raw_fd();
                lock(ro, libc::F_UNLCK, path)?;
                if let Err(e) = lock(fds.buffered.as_raw_fd(), libc::F_WRLCK, path) {
                    let _ = lock(ro, libc::F_RDLCK, path);
                    return Err(e);
                }
                // Told again, now writable (a checksum store reopens its sums for writing).
                if let Err(e) = opened(entry.id, &entry.path) {
                    let _ = lock(ro, libc::F_RDLCK, path);
                    return Err(e.into());
                }
                if fds.direct.is_none() && entry.ro.direct.is_some() {
                    entry.fall_back_to_buffered();
                }
                let _ = entry.rw.set(fds);
            }
            return Ok(entry);
        }
        let write_lock = if opts.write {
            libc::F_WRLCK
        } else {
            libc::F_RDLCK
        };
        lock(fds.buffered.as_raw_fd(), write_lock, path)?;
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let fell_back = direct && fds.direct.is_none();
        // A block device's st_size is 0: its length is where its end is.
        let (len, max_len) = if meta.file_type().is_block_device() {
            // SAFETY: lseek on our own open descriptor.
            let end = unsafe { libc::lseek(fds.buffered.as_raw_fd(), 0, libc::SEEK_END) };
            if end < 0 {
                return Err(EngineError::os(
                    "cannot find the size (lseek) of",
                    path,
                    io::Error::last_os_error(),
                ));
            }
            (end as u64, end as u64)
        } else {
            (meta.len(), max_len.max(meta.len()))
        };
        let mut files = self.files.write();
        let id = FileId(files.len() as u32);
        opened(id, &canon)?;
        let entry = Arc::new(FileEntry {
            id,
            path: canon.clone(),
            use_direct: AtomicBool::new(fds.direct.is_some()),
            ro: fds,
            rw: OnceLock::new(),
            max_len,
            size: AtomicU64::new(len),
            wb_error: Mutex::new(None),
            fell_back: AtomicBool::new(fell_back),
            readahead: Readahead::new(),
        });
        if opts.write {
            let _ =
                entry.rw.set(Fds {
                    buffered: entry.ro.buffered.try_clone().map_err(|e| {
                        EngineError::os("cannot duplicate the descriptor of", path, e)
                    })?,
                    direct: match &entry.ro.direct {
                        Some(d) => Some(d.try_clone().map_err(|e| {
                            EngineError::os("cannot duplicate the descriptor of", path, e)
                        })?),
                        None => None,
                    },
                });
        }
        files.push(entry.clone());
        placement.file_opened(id, &canon);
        by_inode.insert((meta.dev(), meta.ino()), id);
        Ok(entry)
    }
}
