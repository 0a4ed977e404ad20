//! Errors of the process-locality layer. A process that exits while we look at it is
//! [`ProcError::Gone`], which callers usually skip rather than report.

use std::path::PathBuf;

pub type ProcResult<T> = Result<T, ProcError>;

#[derive(Debug, thiserror::Error)]
pub enum ProcError {
    #[error("process {pid} does not exist (it may have exited)")]
    Gone { pid: i32 },
    #[error("permission denied reading {}: run as the process's owner or as root (CAP_SYS_PTRACE)", .path.display())]
    Permission { pid: i32, path: PathBuf },
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot parse {}: {what}", .path.display())]
    Parse { path: PathBuf, what: String },
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
    /// Whether the error means the process vanished.
    pub fn is_gone(&self) -> bool {
        match self {
            ProcError::Gone { .. } => true,
            ProcError::Sys(e) => e.errno() == Some(libc::ESRCH),
            _ => false,
        }
    }
}
