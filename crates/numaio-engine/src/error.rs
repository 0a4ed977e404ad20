//! The engine's error type.

use crate::ext::IntegrityFailure;
use crate::slice::WriteBackError;
use std::io;
use std::path::PathBuf;

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
}

impl EngineError {
    /// The `io::ErrorKind` this error maps to.
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            EngineError::Config(_) => io::ErrorKind::InvalidInput,
            EngineError::OutOfMemory(_) => io::ErrorKind::OutOfMemory,
            EngineError::Io(e) => e.kind(),
            EngineError::WriteBack(w) => w.kind,
            EngineError::Checksum { .. } => io::ErrorKind::InvalidData,
        }
    }

    /// The errno behind the error, if a system call or the device reported one.
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            EngineError::Io(e) => os_error(e),
            EngineError::WriteBack(w) => w.errno,
            EngineError::Checksum { .. } => Some(libc::EIO),
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
