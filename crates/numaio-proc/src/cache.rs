//! The page-cache operations this crate needs, behind a small trait.
//!
//! The daemon and `ps` only need three things from the page-cache layer: where a file's
//! cached pages are, moving them to a node, and warming a file on a node. Going through
//! [`CacheOps`] keeps the decision code testable with a fake, and [`crate::PageCache`] is the
//! real implementation over `numaio-pagecache`.

use crate::error::{ProcError, ProcResult};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where a file's cached pages are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FileNodes {
    #[serde(serialize_with = "numaio_pagecache::serialize_path")]
    pub path: PathBuf,
    pub size_bytes: u64,
    /// Resident bytes per node.
    pub nodes: BTreeMap<u32, u64>,
}

impl FileNodes {
    pub fn cached_bytes(&self) -> u64 {
        self.nodes.values().sum()
    }
}

/// What moving a file's cache did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct MoveOutcome {
    pub moved_bytes: u64,
    pub already_bytes: u64,
    /// Bytes that could not be moved (busy, mapped by others, failed).
    pub left_bytes: u64,
}

/// A file to look at or act on: the path to show, and the path that opens it from here.
///
/// The two differ for another process's files: the path it sees may name another file, or
/// none, in our mount namespace, so its files are opened through `/proc/PID/fd/N`,
/// `/proc/PID/map_files/...` or `/proc/PID/root/...` while reports name the path it sees.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileRef {
    pub path: PathBuf,
    pub open: PathBuf,
}

impl FileRef {
    /// A file named by a path valid here (a command-line operand).
    pub fn plain(path: &Path) -> Self {
        FileRef {
            path: path.to_path_buf(),
            open: path.to_path_buf(),
        }
    }
}

/// Page-cache operations used by `ps`, `run --near` and the daemon. Results and errors name
/// `f.path`; the file itself is opened by `f.open`.
pub trait CacheOps {
    fn residency(&self, f: &FileRef) -> ProcResult<FileNodes>;
    fn move_to(&self, f: &FileRef, node: u32) -> ProcResult<MoveOutcome>;
    fn warm(&self, f: &FileRef, node: u32) -> ProcResult<()>;
}

/// An in-memory page cache for unit tests: residency is a table, moves rewrite it.
#[derive(Debug, Default)]
pub struct FakeCache {
    pub files: std::sync::Mutex<BTreeMap<PathBuf, FileNodes>>,
    pub moves: std::sync::Mutex<Vec<(PathBuf, u32)>>,
}

/// `(path, size, [(node, cached bytes)])` for [`FakeCache::with`].
pub type FakeFile<'a> = (&'a str, u64, &'a [(u32, u64)]);

impl FakeCache {
    pub fn with(files: &[FakeFile<'_>]) -> Self {
        let c = FakeCache::default();
        for (p, size, nodes) in files {
            c.files.lock().unwrap().insert(
                PathBuf::from(p),
                FileNodes {
                    path: PathBuf::from(p),
                    size_bytes: *size,
                    nodes: nodes.iter().copied().collect(),
                },
            );
        }
        c
    }
}

/// Fake files are found by the path shown, so tests need not know the handles.
impl CacheOps for FakeCache {
    fn residency(&self, f: &FileRef) -> ProcResult<FileNodes> {
        let path = &f.path;
        self.files
            .lock()
            .unwrap()
            .get(path)
            .cloned()
            .ok_or_else(|| ProcError::Cache(format!("{}: no such file", path.display())))
    }
    fn move_to(&self, fr: &FileRef, node: u32) -> ProcResult<MoveOutcome> {
        let path = &fr.path;
        let mut files = self.files.lock().unwrap();
        let f = files
            .get_mut(path)
            .ok_or_else(|| ProcError::Cache(format!("{}: no such file", path.display())))?;
        let total = f.cached_bytes();
        let already = f.nodes.get(&node).copied().unwrap_or(0);
        f.nodes = BTreeMap::from([(node, total)]);
        self.moves.lock().unwrap().push((path.to_path_buf(), node));
        Ok(MoveOutcome {
            moved_bytes: total - already,
            already_bytes: already,
            left_bytes: 0,
        })
    }
    fn warm(&self, fr: &FileRef, node: u32) -> ProcResult<()> {
        let path = &fr.path;
        let mut files = self.files.lock().unwrap();
        let f = files
            .get_mut(path)
            .ok_or_else(|| ProcError::Cache(format!("{}: no such file", path.display())))?;
        let have = f.cached_bytes();
        *f.nodes.entry(node).or_insert(0) += f.size_bytes.saturating_sub(have);
        Ok(())
    }
}
