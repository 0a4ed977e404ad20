//! Adapter from `numaio-pagecache` to [`crate::cache::CacheOps`].

use crate::cache::{FileNodes, MoveOutcome};
use crate::error::{ProcError, ProcResult};
use std::path::Path;

pub fn residency(path: &Path) -> ProcResult<FileNodes> {
    Err(ProcError::Cache(format!(
        "{}: page-cache residency is not available in this build",
        path.display()
    )))
}

pub fn move_to(path: &Path, _node: u32) -> ProcResult<MoveOutcome> {
    Err(ProcError::Cache(format!(
        "{}: page-cache moves are not available in this build",
        path.display()
    )))
}

pub fn warm(path: &Path, _node: u32) -> ProcResult<()> {
    Err(ProcError::Cache(format!(
        "{}: warming is not available in this build",
        path.display()
    )))
}
