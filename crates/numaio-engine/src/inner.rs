//! What every part of a running engine shares: its configuration, slices, placement,
//! backend and file table, and the gate that turns operations away once it closes. The
//! engine owns it; handles, the block I/O paths and the evictors hold it.

use crate::config::EngineConfig;
use crate::error::EngineError;
use crate::ext::Placement;
use crate::file::FileTable;
use crate::gate::{Gate, Pass};
use crate::io::Backend;
use crate::slice::Slice;
use std::sync::Arc;

pub(crate) struct Inner {
    pub cfg: EngineConfig,
    pub bs: usize,
    pub slices: Vec<Arc<Slice>>,
    pub placement: Arc<dyn Placement>,
    pub backend: Arc<dyn Backend>,
    pub files: FileTable,
    /// Most blocks one request may pin at once (keeps a tiny cache from deadlocking).
    pub chunk_blocks: usize,
    /// Refuses handle operations once the engine is closing.
    pub gate: Gate,
}

impl Inner {
    /// Admits one operation that changes a file (or makes its changes durable), or fails
    /// with [`EngineError::Closed`]; `close` waits for it before its final write-back.
    #[inline]
    pub(crate) fn enter(&self) -> Result<Pass<'_>, EngineError> {
        self.gate.enter().ok_or(EngineError::Closed)
    }

    /// Admits a read, or fails with [`EngineError::Closed`]. Reads are not waited for: one
    /// that races `close` ends on its own (its loads fail once the I/O stops), so the hit
    /// path pays a load of the flag only.
    #[inline]
    pub(crate) fn check_open(&self) -> Result<(), EngineError> {
        if self.gate.is_closed() {
            return Err(EngineError::Closed);
        }
        Ok(())
    }
}
