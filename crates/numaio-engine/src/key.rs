//! The names of cached things: files, blocks and buffer slots.

use serde::{Deserialize, Serialize};

/// A buffer slot inside one slice.
pub type SlotId = u32;

/// An opened file, numbered by the engine.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct FileId(pub u32);

/// One cached block: (file, block number in units of the engine's block size).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub struct BlockKey {
    pub file: FileId,
    pub block: u64,
}
