//! Errors of the process-locality layer. A process that exits while we look at it is
//! [`ProcError::is_gone`], which callers usually skip rather than report.

use std::path::PathBuf;

pub type ProcResult<T> = Result<T, ProcError>;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    /// Reading the process's `/proc` files failed (it exited, did not answer, ...).
    #[error(transparent)]
    Procfs(#[from] numaio_procfs::ProcfsError),
    #[error("refusing to act on pid {pid}: {why}")]
    Refused { pid: i32, why: String },
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Sys(#[from] numaio_sys::SysError),
    #[error("page cache: {0}")]
    Cache(String),
    #[error("config {}: {what}", .path.display())]
    Config { path: PathBuf, what: String },
}

impl ProcError {
    /// The process `pid` exited (or never existed).
    pub fn gone(pid: i32) -> ProcError {
        ProcError::Procfs(numaio_procfs::ProcfsError::Gone { pid })
    }

    /// Whether a read of the process's /proc files gave up on a time limit (or could not be
    /// tried because too many reads are stuck): the process may still exist.
    pub fn is_unresponsive(&self) -> bool {
        matches!(self, ProcError::Procfs(e) if e.is_unresponsive())
    }

    /// Whether the error means the process vanished.
    pub fn is_gone(&self) -> bool {
        match self {
            ProcError::Procfs(e) => e.is_gone(),
            ProcError::Sys(e) => e.errno() == Some(libc::ESRCH),
            _ => false,
        }
    }
}
