//! Loading and attaching the programs, and reading their maps.

use crate::record::Snapshot;

/// Why the collector cannot run here, in one line (no BPF privilege, no BTF, a locked-down
/// kernel, built without clang); callers fall back to estimates and show it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    pub reason: String,
}

/// What to count; validated once by [`Collector::start`].
#[derive(Debug, Clone, Default)]
pub struct CollectorOptions {
    /// Count only these processes (all when empty).
    pub pids: Vec<i32>,
}

/// The attached programs. Dropping it (or the process ending, however it ends) detaches
/// them: every link is owned by this process's file descriptors.
#[derive(Debug)]
pub struct Collector {
    _private: (),
}

impl Collector {
    /// Loads and attaches the programs.
    pub fn start(_opts: &CollectorOptions) -> Result<Collector, Unavailable> {
        Err(Unavailable {
            reason: "the eBPF collector is not built into this binary".into(),
        })
    }

    /// Everything counted since [`Collector::start`].
    pub fn snapshot(&self) -> Result<Snapshot, Unavailable> {
        Ok(Snapshot::default())
    }
}
