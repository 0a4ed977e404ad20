//! [`PageCache`], the adapter from `numaio-pagecache` to [`crate::cache::CacheOps`]: pages
//! become bytes, and a residency that `mincore` cannot see truthfully becomes an error
//! instead of a zero.

use crate::cache::{CacheOps, FileNodes, FileRef, MoveOutcome};
use crate::error::{ProcError, ProcResult};
use numaio_pagecache::{MoveOptions, Target, WarmOptions, WhereOptions};

/// The real page cache, through `numaio-pagecache`.
#[derive(Debug, Default, Clone, Copy)]
pub struct PageCache;

impl CacheOps for PageCache {
    fn residency(&self, f: &FileRef) -> ProcResult<FileNodes> {
        residency(f)
    }
    fn move_to(&self, f: &FileRef, node: u32) -> ProcResult<MoveOutcome> {
        move_to(f, node)
    }
    fn warm(&self, f: &FileRef, node: u32) -> ProcResult<()> {
        warm(f, node)
    }
}

/// Errors name the path the user knows: the page-cache layer names what it opened, which
/// for another process's file is a `/proc` handle, so that is replaced (and kept in
/// parentheses, since it says how the file was reached).
fn err(f: &FileRef, e: impl std::fmt::Display) -> ProcError {
    let msg = e.to_string();
    let open = f.open.to_string_lossy();
    let shown = f.path.display();
    if f.open != f.path && msg.contains(&*open) {
        ProcError::Cache(msg.replace(&*open, &format!("{shown} (via {open})")))
    } else if msg.contains(&*f.path.to_string_lossy()) {
        ProcError::Cache(msg)
    } else if f.open != f.path {
        ProcError::Cache(format!("{shown} (via {open}): {msg}"))
    } else {
        ProcError::Cache(format!("{shown}: {msg}"))
    }
}

fn residency(f: &FileRef) -> ProcResult<FileNodes> {
    let r = numaio_pagecache::file_residency(&f.open, &WhereOptions::default())
        .map_err(|e| err(f, e))?;
    if !r.mincore_truthful {
        return Err(err(
            f,
            "its cache is invisible to this user (mincore needs root, the owner or write permission)",
        ));
    }
    let ps = r.page_size;
    Ok(FileNodes {
        path: f.path.clone(),
        size_bytes: r.size_bytes,
        nodes: r.nodes.iter().map(|(&n, &p)| (n, p * ps)).collect(),
    })
}

fn move_to(f: &FileRef, node: u32) -> ProcResult<MoveOutcome> {
    let r = numaio_pagecache::move_file(&f.open, &Target::Node(node), &MoveOptions::default())
        .map_err(|e| err(f, e))?;
    let ps = numaio_sys::page_size() as u64;
    Ok(MoveOutcome {
        moved_bytes: r.moved * ps,
        already_bytes: r.already * ps,
        left_bytes: (r.busy + r.mapped_by_others + r.no_memory + r.failed) * ps,
    })
}

fn warm(f: &FileRef, node: u32) -> ProcResult<()> {
    let r = numaio_pagecache::warm_file(&f.open, &Target::Node(node), WarmOptions::default())
        .map_err(|e| err(f, e))?;
    if !r.target_reached {
        return Err(err(
            f,
            format!(
                "warmed, but only {} of {} pages are on node {node}",
                r.on_target_pages, r.pages
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn errors_name_the_shown_path() {
        let f = FileRef {
            path: PathBuf::from("/tmp/x"),
            open: PathBuf::from("/proc/9/fd/3"),
        };
        let e = err(&f, "/proc/9/fd/3: open for reading: Permission denied").to_string();
        assert!(e.contains("/tmp/x (via /proc/9/fd/3): open"), "{e}");
        let e = err(&f, "no luck").to_string();
        assert!(e.contains("/tmp/x (via /proc/9/fd/3): no luck"), "{e}");
        let p = FileRef::plain(std::path::Path::new("/d/f"));
        assert_eq!(err(&p, "/d/f: gone").to_string(), "page cache: /d/f: gone");
        assert_eq!(err(&p, "gone").to_string(), "page cache: /d/f: gone");
    }
}
