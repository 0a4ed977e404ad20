//! The engine's error type.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What went wrong in an engine call. Every variant names the file or setting involved;
/// [`EngineError::kind`] and [`os_error`] give the `io::ErrorKind` and errno for callers that
/// branch on them, and it converts into `io::Error` losslessly (the typed error stays inside).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// A setting is out of range; nothing was started.
    #[error("invalid engine configuration: {0}")]
    Config(String),
    /// The cache would not fit in this machine's memory.
    #[error("{0}")]
    OutOfMemory(String),
    /// A system call or device operation failed; the message names the file and the step.
    #[error("{0}")]
    Io(io::Error),
    /// Writing dirty data back failed; the data stays dirty and is retried at the next fsync.
    #[error(transparent)]
    WriteBack(#[from] WriteBackError),
    /// A block read from the device does not match its checksum; it is not returned as data.
    #[error("read of {} at offset {offset} failed its integrity check: {source}", path.display())]
    Checksum {
        path: PathBuf,
        offset: u64,
        #[source]
        source: IntegrityFailure,
    },
    /// A system call on a file failed: `op` says which step, `errno` is what the kernel
    /// returned (also in `source`).
    #[error("{op} {}: {source}", path.display())]
    Os {
        op: &'static str,
        path: PathBuf,
        errno: Option<i32>,
        #[source]
        source: io::Error,
    },
    /// The engine was closed or dropped: nothing was read or written.
    #[error("the numaio engine is closed")]
    Closed,
    /// A write through a handle opened read-only.
    #[error("{} was opened read-only", path.display())]
    ReadOnly { path: PathBuf },
    /// The request reaches past the largest offset this file may have
    /// ([`EngineBuilder::with_max_file_bytes`](crate::EngineBuilder::with_max_file_bytes), or a
    /// block device's size); nothing was written.
    #[error("{} bytes at offset {offset} of {} reach past its limit of {max} bytes", len, path.display())]
    TooLarge {
        path: PathBuf,
        offset: u64,
        len: u64,
        max: u64,
    },
    /// The range is not one the call accepts (it spans more blocks than may be pinned at
    /// once, or crosses a block where one block is required).
    #[error("invalid range of {} (offset {offset}, {len} bytes): {reason}", path.display())]
    InvalidRange {
        path: PathBuf,
        offset: u64,
        len: u64,
        reason: String,
    },
    /// No cache buffer became free within the stall timeout
    /// ([`EngineBuilder::with_stall_timeout`](crate::EngineBuilder::with_stall_timeout)):
    /// every buffer of the slice is pinned, loading or dirty and not yet written back.
    #[error(
        "slice {slice} had no free buffer for {waited:?}: every buffer is pinned or dirty; \
         release pinned buffers, check fsync errors, or use a larger cache"
    )]
    Stalled { slice: usize, waited: Duration },
    /// Another engine (in this or another process) has the file open: two caches over one
    /// file would overwrite each other's blocks.
    #[error("{} is in use by another numaio engine (advisory lock held)", path.display())]
    Locked { path: PathBuf },
}

impl EngineError {
    /// A failed system call on `path`, keeping its errno.
    pub(crate) fn os(op: &'static str, path: &Path, source: io::Error) -> Self {
        EngineError::Os {
            op,
            path: path.to_path_buf(),
            errno: os_error(&source),
            source,
        }
    }

    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            EngineError::Config(_) => io::ErrorKind::InvalidInput,
            EngineError::OutOfMemory(_) => io::ErrorKind::OutOfMemory,
            EngineError::Io(e) => e.kind(),
            EngineError::WriteBack(w) => w.kind,
            EngineError::Checksum { .. } => io::ErrorKind::InvalidData,
            EngineError::Os { source, .. } => source.kind(),
            EngineError::Closed => io::ErrorKind::NotConnected,
            EngineError::ReadOnly { .. } => io::ErrorKind::PermissionDenied,
            EngineError::TooLarge { .. } | EngineError::InvalidRange { .. } => {
                io::ErrorKind::InvalidInput
            }
            EngineError::Stalled { .. } => io::ErrorKind::TimedOut,
            EngineError::Locked { .. } => io::ErrorKind::WouldBlock,
        }
    }

    /// The errno behind the error, if a system call or the device reported one (or the
    /// errno a kernel interface would use for it: `EFBIG`, `EBADF`, `EINVAL`, `EWOULDBLOCK`).
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno()
    }

    fn errno(&self) -> Option<i32> {
        match self {
            EngineError::Io(e) => os_error(e),
            EngineError::WriteBack(w) => w.errno,
            EngineError::Checksum { .. } => Some(libc::EIO),
            EngineError::Os { errno, .. } => *errno,
            EngineError::ReadOnly { .. } => Some(libc::EBADF),
            EngineError::TooLarge { .. } => Some(libc::EFBIG),
            EngineError::InvalidRange { .. } => Some(libc::EINVAL),
            EngineError::Locked { .. } => Some(libc::EWOULDBLOCK),
            _ => None,
        }
    }
}

impl From<io::Error> for EngineError {
    fn from(e: io::Error) -> Self {
        // Errors made inside the engine travel as io::Error; give back the typed one.
        if e.get_ref().is_some_and(|i| i.is::<EngineError>()) {
            if let Some(inner) = e.into_inner() {
                if let Ok(t) = inner.downcast::<EngineError>() {
                    return *t;
                }
            }
            unreachable!("checked above");
        }
        if e.get_ref().is_some_and(|i| i.is::<ReadFailed>()) {
            if let Some(inner) = e.into_inner() {
                if let Ok(r) = inner.downcast::<ReadFailed>() {
                    let ReadFailed { path, source } = *r;
                    // A read ended by the engine itself (shut down while in flight) is that
                    // error, not a failure of the file.
                    if source.get_ref().is_some_and(|i| i.is::<EngineError>()) {
                        return EngineError::from(source);
                    }
                    return EngineError::os("read of", &path, source);
                }
            }
            unreachable!("checked above");
        }
        if e.get_ref().is_some_and(|i| i.is::<WriteBackError>()) {
            let kind = e.kind();
            if let Some(inner) = e.into_inner() {
                if let Ok(w) = inner.downcast::<WriteBackError>() {
                    return EngineError::WriteBack(*w);
                }
            }
            return EngineError::Io(io::Error::from(kind));
        }
        EngineError::Io(e)
    }
}

impl From<EngineError> for io::Error {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Io(e) => e,
            e => io::Error::new(e.kind(), e),
        }
    }
}

impl From<numaio_sys::SysError> for EngineError {
    fn from(e: numaio_sys::SysError) -> Self {
        EngineError::Io(io::Error::other(format!(
            "cannot read the NUMA topology: {e}"
        )))
    }
}

/// The errno behind an engine error (an `io::Error`, an [`EngineError`] or anything that wraps
/// one): the raw OS error, or the one a write-back failure carries.
pub fn os_error(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(e) = cur {
        if let Some(io) = e.downcast_ref::<io::Error>() {
            if let Some(n) = io.raw_os_error() {
                return Some(n);
            }
            if let Some(inner) = io.get_ref() {
                cur = Some(inner);
                continue;
            }
            return None;
        }
        if let Some(t) = e.downcast_ref::<EngineError>() {
            return match t {
                EngineError::Io(io) => os_error(io),
                other => other.raw_os_error(),
            };
        }
        if let Some(w) = e.downcast_ref::<WriteBackError>() {
            return w.errno;
        }
        cur = e.source();
    }
    None
}

/// A copy of an error that has to be reported to several requests: the errno, or the
/// shutdown, survive; other errors keep their kind and message.
pub(crate) fn clone_io(e: &io::Error) -> io::Error {
    if let Some(n) = e.raw_os_error() {
        return io::Error::from_raw_os_error(n);
    }
    if matches!(
        e.get_ref().and_then(|i| i.downcast_ref::<EngineError>()),
        Some(EngineError::Closed)
    ) {
        return EngineError::Closed.into();
    }
    io::Error::new(e.kind(), e.to_string())
}

/// Why a block failed its integrity check.
pub type IntegrityFailure = Box<dyn std::error::Error + Send + Sync>;

/// A device read failed: names the file and keeps the device's error (and its errno) as the
/// source.
#[derive(Debug, thiserror::Error)]
#[error("read of {} failed: {source}", path.display())]
pub(crate) struct ReadFailed {
    pub path: std::path::PathBuf,
    pub source: io::Error,
}

/// A write-back failure, kept with its errno so that callers far from the device (a writer
/// waiting for a free buffer, the next `fsync`) can tell ENOSPC from EIO.
#[derive(Debug, Clone)]
pub struct WriteBackError {
    /// What failed, naming the file.
    pub what: String,
    /// The file whose data could not be written back, where known.
    pub path: Option<PathBuf>,
    /// The device's errno, if the failure came from a system call.
    pub errno: Option<i32>,
    pub(crate) kind: io::ErrorKind,
    cause: String,
}

impl WriteBackError {
    /// The `io::ErrorKind` of the failed operation.
    pub fn kind(&self) -> io::ErrorKind {
        self.kind
    }

    pub(crate) fn new(what: String, path: Option<&Path>, e: &io::Error) -> Self {
        WriteBackError {
            what,
            path: path.map(Path::to_path_buf),
            errno: os_error(e),
            kind: e.kind(),
            cause: e.to_string(),
        }
    }
    /// The same failure, explained from a caller's point of view.
    pub(crate) fn context(&self, what: impl fmt::Display) -> Self {
        WriteBackError {
            what: format!("{what}: {}", self.what),
            ..self.clone()
        }
    }
    /// As an `io::Error` of the original kind; [`crate::os_error`] finds the errno again.
    pub(crate) fn to_io(&self) -> io::Error {
        io::Error::new(self.kind, self.clone())
    }
}

impl fmt::Display for WriteBackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.what, self.cause)
    }
}

impl std::error::Error for WriteBackError {}
