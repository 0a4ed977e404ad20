//! Errors of reading another process's `/proc` files. A process that exits while it is read
//! is [`ProcfsError::Gone`], which callers usually skip rather than report.

use std::path::PathBuf;

pub type ProcfsResult<T> = Result<T, ProcfsError>;

#[derive(Debug, thiserror::Error)]
pub enum ProcfsError {
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
    #[error("process {pid} does not answer: reading {} gave up ({why}); a thread of it is \
             probably stuck in the kernel (e.g. waiting on a FUSE or NFS server); it was skipped, \
             look at its state (D) and wchan with `ps -o pid,stat,wchan -p {pid}`", .path.display())]
    Unresponsive {
        pid: i32,
        path: PathBuf,
        why: String,
    },
    #[error("not reading {} of process {pid}: {stuck} earlier /proc reads are still stuck \
             (the limit); find the processes in state D (`ps -eo pid,stat,wchan`) and restart \
             numaio once they are gone", .path.display())]
    ReadersExhausted {
        pid: i32,
        path: PathBuf,
        stuck: usize,
    },
    #[error("reading {} failed on its reader thread (the read panicked)", .path.display())]
    ReaderFailed { path: PathBuf },
}

impl ProcfsError {
    /// Whether a read gave up on a time limit (or could not be tried because too many reads
    /// are stuck): the process may still exist.
    pub fn is_unresponsive(&self) -> bool {
        matches!(
            self,
            ProcfsError::Unresponsive { .. } | ProcfsError::ReadersExhausted { .. }
        )
    }

    /// Whether the process vanished.
    pub fn is_gone(&self) -> bool {
        matches!(self, ProcfsError::Gone { .. })
    }
}
