//! Lab errors. Each names what is missing or what failed and how to fix it.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LabError {
    #[error("qemu-system-x86_64 not found ({0}); install it with `apt-get install qemu-system-x86` (or run scripts/setup.sh)")]
    NoQemu(String),
    #[error("no guest kernel: {0}; fetch one with `scripts/setup.sh` or `numaio-lab fetch-kernel`, or pass --kernel PATH (env NUMAIO_LAB_KERNEL)")]
    NoKernel(String),
    #[error("fetching the guest kernel failed: {0}")]
    FetchKernel(String),
    #[error("{what} not found at {path}: {hint}")]
    MissingHostFile {
        what: String,
        path: PathBuf,
        hint: String,
    },
    #[error("bad lab topology: {0}")]
    BadTopology(String),
    #[error("bad disk spec: {0}")]
    BadDisk(String),
    #[error("bad node device: {0}")]
    BadNodeDevice(String),
    #[error("building the guest {what} failed: {detail}")]
    Build { what: String, detail: String },
    #[error("QEMU could not boot this guest ({status}); QEMU said:\n{stderr}\n--- console tail ---\n{console_tail}")]
    QemuFailed {
        status: String,
        stderr: String,
        console_tail: String,
    },
    #[error("the lab guest stopped before the scenario {}: kernel panic, crash or power-off\n--- console tail ---\n{console_tail}", if *started { "finished" } else { "started" })]
    GuestDied { started: bool, console_tail: String },
    #[error("lab guest timed out after {secs} s (killed); the scenario {phase}.\n--- console tail ---\n{console_tail}")]
    Timeout {
        secs: u64,
        phase: String,
        console_tail: String,
    },
    #[error("lab I/O error: {context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
}

impl LabError {
    pub(crate) fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> LabError {
        let context = context.into();
        move |source| LabError::Io { context, source }
    }

    /// The console tail, when the error carries one.
    pub fn console_tail(&self) -> Option<&str> {
        match self {
            LabError::QemuFailed { console_tail, .. }
            | LabError::Timeout { console_tail, .. }
            | LabError::GuestDied { console_tail, .. } => Some(console_tail),
            _ => None,
        }
    }
}

pub type LabResult<T> = Result<T, LabError>;
