//! Typed errors. Every variant names the path it concerns and, where there is one, what the
//! user can do about it.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum PagecacheError {
    /// The path does not exist.
    #[error("{}: no such file or directory", .path.display())]
    NotFound { path: PathBuf },
    /// The path exists but is not a regular file (FIFO, socket, device, or a directory without `-r`).
    #[error("{}: is {kind}, not a regular file{hint}", .path.display())]
    NotRegular {
        path: PathBuf,
        kind: &'static str,
        hint: &'static str,
    },
    /// The caller may not read the file or list the directory.
    #[error("{}: permission denied ({what}); run as a user who can read it, or as root", .path.display())]
    PermissionDenied { path: PathBuf, what: &'static str },
    /// Any other I/O error on the path.
    #[error("{}: {what} failed: {source}", .path.display())]
    Io {
        path: PathBuf,
        what: &'static str,
        #[source]
        source: io::Error,
    },
    /// A NUMA system call failed while working on the path.
    #[error("{}: {source}", .path.display())]
    Sys {
        path: PathBuf,
        #[source]
        source: numaio_sys::SysError,
    },
    /// The kernel hides this file's residency from the caller: for a file the caller does
    /// not own and may not write, mincore reports every page as cached, so inspecting it
    /// page by page would read it in.
    #[error("{}: the kernel hides this file's page-cache residency from this user (mincore reports every page as cached unless you own the file, may write it, or are root); numaio will not guess, nor read the file in to find out. Run as root or as the file's owner", .path.display())]
    MincoreRestricted { path: PathBuf },
    /// An operation that needs a capability the caller lacks.
    #[error("{}: {what} needs {cap}; run as root{hint}", .path.display())]
    NeedsPrivilege {
        path: PathBuf,
        what: &'static str,
        cap: &'static str,
        hint: &'static str,
    },
    /// A process has the file open for writing: a copy of it would be stale at once.
    #[error("{}: open for writing by {}; replicate it once no one writes it", .path.display(), fmt_writers(.writers))]
    BeingWritten {
        path: PathBuf,
        /// `(pid, command)` of each writer.
        writers: Vec<(i32, String)>,
    },
    /// A node has no room for what is asked of it.
    #[error("{}: node {node} has {} of {what}, and this needs {}; free memory on the node, choose another, or raise the budget", .path.display(), mib(*.room), mib(*.need))]
    NoRoom {
        path: PathBuf,
        node: u32,
        need: u64,
        room: u64,
        what: &'static str,
    },
    /// A replica could not be made as asked.
    #[error("{}: {what}", .path.display())]
    Replica { path: PathBuf, what: String },
    /// A placement target that cannot be used (bad node, empty list, bad chunk size).
    #[error("invalid target: {0}")]
    InvalidTarget(String),
    /// A glob pattern (`-i`, `-I`) that does not parse.
    #[error("bad pattern {pattern:?}: {reason}")]
    InvalidPattern { pattern: String, reason: String },
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB ({b} bytes)", b as f64 / (1u64 << 20) as f64)
}

fn fmt_writers(w: &[(i32, String)]) -> String {
    let each: Vec<String> = w
        .iter()
        .map(|(pid, comm)| format!("pid {pid} ({comm})"))
        .collect();
    each.join(", ")
}

impl PagecacheError {
    /// The path the error concerns, if any.
    pub fn path(&self) -> Option<&std::path::Path> {
        match self {
            PagecacheError::NotFound { path }
            | PagecacheError::NotRegular { path, .. }
            | PagecacheError::PermissionDenied { path, .. }
            | PagecacheError::Io { path, .. }
            | PagecacheError::Sys { path, .. }
            | PagecacheError::MincoreRestricted { path }
            | PagecacheError::NeedsPrivilege { path, .. }
            | PagecacheError::BeingWritten { path, .. }
            | PagecacheError::NoRoom { path, .. }
            | PagecacheError::Replica { path, .. } => Some(path),
            PagecacheError::InvalidTarget(_) | PagecacheError::InvalidPattern { .. } => None,
        }
    }

    /// A short machine-readable kind for JSON output.
    pub fn kind(&self) -> &'static str {
        match self {
            PagecacheError::NotFound { .. } => "not_found",
            PagecacheError::NotRegular { .. } => "not_regular",
            PagecacheError::PermissionDenied { .. } => "permission_denied",
            PagecacheError::Io { .. } => "io",
            PagecacheError::Sys { .. } => "system",
            PagecacheError::MincoreRestricted { .. } => "mincore_restricted",
            PagecacheError::NeedsPrivilege { .. } => "needs_privilege",
            PagecacheError::BeingWritten { .. } => "being_written",
            PagecacheError::NoRoom { .. } => "no_room",
            PagecacheError::Replica { .. } => "replica",
            PagecacheError::InvalidTarget(_) => "invalid_target",
            PagecacheError::InvalidPattern { .. } => "invalid_pattern",
        }
    }

    pub(crate) fn io(path: &std::path::Path, what: &'static str, e: io::Error) -> Self {
        match e.kind() {
            io::ErrorKind::NotFound => PagecacheError::NotFound { path: path.into() },
            io::ErrorKind::PermissionDenied => PagecacheError::PermissionDenied {
                path: path.into(),
                what,
            },
            _ => PagecacheError::Io {
                path: path.into(),
                what,
                source: e,
            },
        }
    }

    pub(crate) fn sys(path: &std::path::Path, e: numaio_sys::SysError) -> Self {
        PagecacheError::Sys {
            path: path.into(),
            source: e,
        }
    }
}
