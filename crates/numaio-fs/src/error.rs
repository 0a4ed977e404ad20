//! The file system's error type, with the errno each variant becomes at the FUSE boundary.

use std::io;
use std::path::PathBuf;

/// What went wrong in a file-system operation.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("file name too long (at most 255 bytes)")]
    NameTooLong,
    #[error("invalid argument: {0}")]
    Invalid(String),
    #[error("permission denied")]
    Permission,
    #[error("operation not permitted")]
    NotPermitted,
    /// Every node's groups are full (or failing).
    #[error("no space left on the volume")]
    NoSpace,
    #[error("no such extended attribute")]
    NoAttr,
    #[error("too many links")]
    TooManyLinks,
    #[error("file too large")]
    TooBig,
    /// The volume is mounted read-only.
    #[error("read-only file system")]
    ReadOnly,
    /// The file system does not do this (EOPNOTSUPP); says what.
    #[error("operation not supported: {0}")]
    NotSupported(String),
    /// Reading or writing a device failed; names the device and the step. The OS error is
    /// part of the message and deliberately not also exposed as `source()`: an error chain
    /// printed whole (`{:#}`) would show it twice.
    #[error("{}: {what}: {err}", device.display())]
    Io {
        device: PathBuf,
        what: String,
        err: io::Error,
    },
    /// The volume's on-device structures are damaged or belong to another volume: it is not
    /// mounted and nothing is written to it.
    #[error("{}: {what}", device.display())]
    Corrupt { device: PathBuf, what: String },
    /// An operation or mode this file system does not implement (fallocate's collapse and
    /// insert range): callers such as `posix_fallocate` fall back on EOPNOTSUPP.
    #[error("operation not supported: {0}")]
    Unsupported(String),
    /// `SEEK_DATA` or `SEEK_HOLE` at or past the end of the file, or no data after it.
    #[error("no data or hole at or after the offset (past the end of the file)")]
    NoSuchOffset,
}

impl FsError {
    /// The errno a FUSE reply carries for this error.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::NotFound => libc::ENOENT,
            FsError::Exists => libc::EEXIST,
            FsError::NotDir => libc::ENOTDIR,
            FsError::IsDir => libc::EISDIR,
            FsError::NotEmpty => libc::ENOTEMPTY,
            FsError::NameTooLong => libc::ENAMETOOLONG,
            FsError::Invalid(_) => libc::EINVAL,
            FsError::Permission => libc::EACCES,
            FsError::NotPermitted => libc::EPERM,
            FsError::NoSpace => libc::ENOSPC,
            FsError::NoAttr => libc::ENODATA,
            FsError::TooManyLinks => libc::EMLINK,
            FsError::TooBig => libc::EFBIG,
            FsError::ReadOnly => libc::EROFS,
            FsError::NotSupported(_) => libc::EOPNOTSUPP,
            FsError::Io { err, .. } => err.raw_os_error().unwrap_or(libc::EIO),
            FsError::Corrupt { .. } => libc::EUCLEAN,
            FsError::Unsupported(_) => libc::EOPNOTSUPP,
            FsError::NoSuchOffset => libc::ENXIO,
        }
    }

    /// An I/O error on `device` while doing `what`.
    pub fn io(device: impl Into<PathBuf>, what: impl Into<String>, source: io::Error) -> FsError {
        FsError::Io {
            device: device.into(),
            what: what.into(),
            err: source,
        }
    }
}

impl From<FsError> for io::Error {
    fn from(e: FsError) -> io::Error {
        io::Error::from_raw_os_error(e.errno())
    }
}
