//! Adapter from `numaio-pagecache` to [`crate::cache::CacheOps`]: pages become bytes, and
//! a residency that `mincore` cannot see truthfully becomes an error instead of a zero.

use crate::cache::{FileNodes, MoveOutcome};
use crate::error::{ProcError, ProcResult};
use numaio_pagecache::{MoveOptions, Target, WarmOptions, WhereOptions};
use std::path::Path;

/// The page-cache errors already name the path; only add it when they do not.
fn err(path: &Path, e: impl std::fmt::Display) -> ProcError {
    let msg = e.to_string();
    if msg.contains(&*path.to_string_lossy()) {
        ProcError::Cache(msg)
    } else {
        ProcError::Cache(format!("{}: {msg}", path.display()))
    }
}

pub fn residency(path: &Path) -> ProcResult<FileNodes> {
    let r = numaio_pagecache::file_residency(path, &WhereOptions::default())
        .map_err(|e| err(path, e))?;
    if !r.mincore_truthful {
        return Err(err(
            path,
            "its cache is invisible to this user (mincore needs root, the owner or write permission)",
        ));
    }
    let ps = r.page_size;
    Ok(FileNodes {
        path: path.to_path_buf(),
        size_bytes: r.size_bytes,
        nodes: r.nodes.iter().map(|(&n, &p)| (n, p * ps)).collect(),
    })
}

pub fn move_to(path: &Path, node: u32) -> ProcResult<MoveOutcome> {
    let r = numaio_pagecache::move_file(path, &Target::Node(node), &MoveOptions::default())
        .map_err(|e| err(path, e))?;
    let ps = numaio_sys::page_size() as u64;
    Ok(MoveOutcome {
        moved_bytes: r.moved * ps,
        already_bytes: r.already * ps,
        left_bytes: (r.busy + r.mapped_by_others + r.no_memory + r.failed) * ps,
    })
}

pub fn warm(path: &Path, node: u32) -> ProcResult<()> {
    let r = numaio_pagecache::warm_file(path, &Target::Node(node), WarmOptions::default())
        .map_err(|e| err(path, e))?;
    if !r.target_reached {
        return Err(err(
            path,
            format!(
                "warmed, but only {} of {} pages are on node {node}",
                r.on_target_pages, r.pages
            ),
        ));
    }
    Ok(())
}
