//! Typed errors for the system layer. Each names the call or path that failed so that the
//! CLI can tell the user what to do.

use std::io;
use std::path::PathBuf;

pub type SysResult<T> = Result<T, SysError>;

#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// A system call returned an error.
    #[error("{call} failed{}: {source}", fmt_ctx(.context))]
    Syscall {
        call: &'static str,
        context: String,
        #[source]
        source: io::Error,
    },
    /// A node id outside the kernel's possible nodes.
    #[error(
        "node {node} does not exist (possible nodes: 0-{max}); run `numaio topo` to list them"
    )]
    InvalidNode { node: u32, max: u32 },
    /// A CPU id outside the kernel's possible CPUs.
    #[error("cpu {cpu} does not exist (mask holds {bits} cpus)")]
    InvalidCpu { cpu: u32, bits: usize },
    /// A sysfs/procfs file could not be read.
    #[error("cannot read {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// A sysfs/procfs file had unexpected content.
    #[error("cannot parse {}: {what}", .path.display())]
    Parse { path: PathBuf, what: String },
    /// A synthetic topology spec or a cpulist was malformed.
    #[error("invalid spec {spec:?}: {what}")]
    Spec { spec: String, what: String },
    /// An argument no system call can take (a path with a NUL byte).
    #[error("invalid argument: {what}")]
    InvalidInput { what: String },
}

fn fmt_ctx(c: &str) -> String {
    if c.is_empty() {
        String::new()
    } else {
        format!(" ({c})")
    }
}

impl SysError {
    /// Builds a [`SysError::Syscall`] from `errno`.
    pub fn last_os(call: &'static str, context: impl Into<String>) -> Self {
        SysError::Syscall {
            call,
            context: context.into(),
            source: io::Error::last_os_error(),
        }
    }

    /// Builds a [`SysError::Syscall`] from an explicit errno value.
    pub fn from_errno(call: &'static str, context: impl Into<String>, errno: i32) -> Self {
        SysError::Syscall {
            call,
            context: context.into(),
            source: io::Error::from_raw_os_error(errno),
        }
    }

    /// The errno behind a syscall error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            SysError::Syscall { source, .. } => source.raw_os_error(),
            SysError::Read { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }
}
