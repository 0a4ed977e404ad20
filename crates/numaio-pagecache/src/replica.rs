//! `replicate`: a copy of a read-mostly file per node, whose pages live on that node.
//!
//! The kernel keeps one page-cache copy of a file, on the node of whoever read it first;
//! readers on the other nodes read it across the interconnect. A replica is a copy of the
//! file in a tmpfs mounted for one node with `mpol=bind:N` (under `DIR/nodeN`, mounted on
//! first use), so its pages are allocated on that node and stay there (tmpfs pages are not
//! reclaimed to disk and follow the mount's policy if swapped and read back; the copy is
//! checked with the `where` scan). `numaio run
//! --replica` binds it read-only over the original in a private mount namespace, so an
//! unmodified program reads node-local pages with `read(2)` and `mmap` alike.
//!
//! A replica is named after the version of the original it copies ([`Version`]: device,
//! inode, size, modification and change times), so a changed original never matches an
//! old replica: a new `replicate` makes a new one and removes the stale one. Next to each
//! replica a symbolic link `NAME.src` names the original (for listing and dropping).
//! Nothing here opens the original for writing.

use crate::error::PagecacheError;
use crate::file::open_regular;
use crate::migrate::{move_file, MoveOptions};
use crate::residency::{file_residency, WhereOptions};
use crate::target::Target;
use numaio_sys::Topology;
use serde::Serialize;
use std::fs::{File, Metadata};
use std::io::Write;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where replicas live unless told otherwise: one tmpfs per node below it.
pub const DEFAULT_DIR: &str = "/run/numaio/replicas";

/// The name the per-node tmpfs mounts carry in the mount table.
const MOUNT_SOURCE: &str = "numaio-replicas";

/// Bytes copied per read.
const COPY_CHUNK: usize = 1 << 20;

/// One version of a file: what a replica copies. Any write changes the change time, so a
/// file whose version is unchanged has the contents the replica was made from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Version {
    pub dev: u64,
    pub ino: u64,
    pub size: u64,
    pub mtime: (i64, i64),
    pub ctime: (i64, i64),
}

impl Version {
    /// The version of the file `m` describes.
    pub fn of(m: &Metadata) -> Version {
        Version {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// The replica's file name: `DEV_INO_SIZE_MTIME_CTIME`, times as `SECONDS.NANOSECONDS`.
    pub fn name(&self) -> String {
        format!(
            "{}_{}_{}_{}.{}_{}.{}",
            self.dev, self.ino, self.size, self.mtime.0, self.mtime.1, self.ctime.0, self.ctime.1
        )
    }

    /// The version a replica's file name stands for; `None` for any other name.
    pub fn parse(name: &str) -> Option<Version> {
        let time = |s: &str| -> Option<(i64, i64)> {
            let (a, b) = s.split_once('.')?;
            let ns: i64 = b.parse().ok()?;
            (0..1_000_000_000).contains(&ns).then_some(())?;
            Some((a.parse().ok()?, ns))
        };
        let f: Vec<&str> = name.split('_').collect();
        let [dev, ino, size, mtime, ctime] = f.as_slice() else {
            return None;
        };
        let v = Version {
            dev: dev.parse().ok()?,
            ino: ino.parse().ok()?,
            size: size.parse().ok()?,
            mtime: time(mtime)?,
            ctime: time(ctime)?,
        };
        // One spelling per version, so a name is found again exactly.
        (v.name() == name).then_some(v)
    }

    fn same_file(&self, other: &Version) -> bool {
        (self.dev, self.ino) == (other.dev, other.ino)
    }
}

/// How to replicate.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplicaOptions {
    /// The most bytes the replicas on one node may hold together (the new one included).
    pub max_memory: Option<u64>,
}

/// A replica, as made, reused or listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Replica {
    /// The file it copies (the path it was made from, made absolute).
    #[serde(serialize_with = "crate::serialize_path")]
    pub original: PathBuf,
    pub node: u32,
    /// The copy.
    #[serde(serialize_with = "crate::serialize_path")]
    pub replica: PathBuf,
    pub bytes: u64,
    /// Pages of the copy, and how many of them are on `node`.
    pub pages: u64,
    pub pages_on_node: u64,
    /// Whether the original is still the version copied.
    pub fresh: bool,
    /// Made by this call (false: an existing fresh replica was reused).
    pub made: bool,
}

/// The replicas under one directory: `DIR/nodeN` per node.
#[derive(Debug, Clone)]
pub struct ReplicaStore {
    dir: PathBuf,
}

impl ReplicaStore {
    /// The replicas under `dir` ([`DEFAULT_DIR`] unless the user chose another).
    pub fn new(dir: impl Into<PathBuf>) -> ReplicaStore {
        ReplicaStore { dir: dir.into() }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The directory of node `node`'s replicas.
    pub fn node_dir(&self, node: u32) -> PathBuf {
        self.dir.join(format!("node{node}"))
    }

    /// A replica of `path` on node `node`: the fresh one that exists, or a new copy (a stale
    /// one of the same file on that node is removed). Refused, with nothing changed, for
    /// anything but a regular file, a file open for writing, a node without memory, and a
    /// copy that would not fit the node's room or `opts.max_memory`.
    pub fn replicate(
        &self,
        path: &Path,
        node: u32,
        opts: &ReplicaOptions,
    ) -> Result<Replica, PagecacheError> {
        let topo = Topology::detect().map_err(|e| PagecacheError::sys(path, e))?;
        let n = memory_node(&topo, node)?;
        let room = n.mem.room_bytes();
        let node_total = n.mem.mem_total_bytes;
        if std::fs::metadata(path).is_ok_and(|m| m.is_dir()) {
            return Err(PagecacheError::NotRegular {
                path: path.into(),
                kind: "a directory",
                hint: "; replicate the files in it",
            });
        }
        let f = open_regular(path)?;
        let original =
            std::path::absolute(path).map_err(|e| PagecacheError::io(path, "resolve", e))?;
        let v = Version::of(&f.meta);
        let writers = numaio_procfs::writers_of(v.dev, v.ino).unwrap_or_default();
        if !writers.is_empty() {
            return Err(PagecacheError::BeingWritten {
                path: original,
                writers,
            });
        }
        let dir = self.prepare_node(node, node_total, path)?;
        let at = dir.join(v.name());
        if at.exists() {
            return self.verified(original, node, at, false);
        }
        // Room and budget, counting what the stale copies of this file would free.
        let page = numaio_sys::page_size() as u64;
        let need = v.size.div_ceil(page) * page;
        let held: Vec<(PathBuf, Version)> = entries(&dir)?;
        let used: u64 = held
            .iter()
            .filter(|(_, o)| !o.same_file(&v))
            .map(|(_, o)| o.size.div_ceil(page) * page)
            .sum();
        if let Some(max) = opts.max_memory {
            if used + need > max {
                return Err(PagecacheError::NoRoom {
                    path: original,
                    node,
                    need,
                    room: max.saturating_sub(used),
                    what: "the replica budget (--max-memory) left",
                });
            }
        }
        if need > room {
            return Err(PagecacheError::NoRoom {
                path: original,
                node,
                need,
                room,
                what: "free memory and reclaimable file cache",
            });
        }
        copy(&f.file, &f.meta, &dir, &v.name(), path)?;
        // The original changed while it was copied: the copy may mix two versions.
        let now = std::fs::metadata(path).map(|m| Version::of(&m));
        let fd_now = f.file.metadata().map(|m| Version::of(&m));
        if now.as_ref().ok() != Some(&v) || fd_now.as_ref().ok() != Some(&v) {
            let _ = std::fs::remove_file(&at);
            return Err(PagecacheError::Replica {
                path: original,
                what: "the file changed while it was copied; replicate it once no one writes it"
                    .into(),
            });
        }
        for (old, _) in held.iter().filter(|(_, o)| o.same_file(&v) && *o != v) {
            remove_replica(old)?;
        }
        let src = with_suffix(&at, ".src");
        let _ = std::fs::remove_file(&src);
        std::os::unix::fs::symlink(&original, &src)
            .map_err(|e| PagecacheError::io(&src, "link to the original", e))?;
        match self.verified(original, node, at.clone(), true) {
            Ok(r) => Ok(r),
            Err(e) => {
                let _ = remove_replica(&at);
                Err(e)
            }
        }
    }

    /// Every replica under the store, fresh or stale, by node then name.
    pub fn list(&self) -> Result<Vec<Replica>, PagecacheError> {
        let mut out = Vec::new();
        for (node, dir) in self.node_dirs()? {
            for (at, v) in entries(&dir)? {
                out.push(describe(node, at, &v)?);
            }
        }
        Ok(out)
    }

    /// Removes the replicas of `paths` (every replica when empty) on `nodes` (every node
    /// when `None`); returns what was removed. A node's tmpfs is unmounted once it holds
    /// no replica.
    pub fn remove(
        &self,
        paths: &[PathBuf],
        nodes: Option<&[u32]>,
    ) -> Result<Vec<Replica>, PagecacheError> {
        // A path matches the replicas made from it, and those of the file it names now.
        let wanted: Vec<(PathBuf, Option<(u64, u64)>)> = paths
            .iter()
            .map(|p| {
                let abs = std::path::absolute(p).unwrap_or_else(|_| p.clone());
                let id = std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
                (abs, id)
            })
            .collect();
        let mut out = Vec::new();
        for (node, dir) in self.node_dirs()? {
            if nodes.is_some_and(|n| !n.contains(&node)) {
                continue;
            }
            for (at, v) in entries(&dir)? {
                let r = describe(node, at.clone(), &v)?;
                let hit = wanted.is_empty()
                    || wanted
                        .iter()
                        .any(|(abs, id)| *abs == r.original || *id == Some((v.dev, v.ino)));
                if hit {
                    remove_replica(&at)?;
                    out.push(r);
                }
            }
            if entries(&dir)?.is_empty() && is_our_mount(&dir) {
                numaio_sys::mount::unmount(&dir).map_err(|e| PagecacheError::sys(&dir, e))?;
                let _ = std::fs::remove_dir(&dir);
            }
        }
        Ok(out)
    }

    /// Removes the one replica `r` (as [`ReplicaStore::list`] gave it), leaving any other
    /// replica of the same original alone; its node's tmpfs is unmounted once empty.
    /// Returns whether it was there. Refuses a path that is not a replica of this store.
    pub fn remove_one(&self, r: &Replica) -> Result<bool, PagecacheError> {
        let dir = self.node_dir(r.node);
        let named = r.replica.file_name().and_then(|n| n.to_str());
        if r.replica.parent() != Some(dir.as_path()) || named.and_then(Version::parse).is_none() {
            return Err(PagecacheError::Replica {
                path: r.replica.clone(),
                what: format!(
                    "is not a replica in {}; list the store's replicas and pass one of them",
                    dir.display()
                ),
            });
        }
        let was = r.replica.exists();
        remove_replica(&r.replica)?;
        if entries(&dir)?.is_empty() && is_our_mount(&dir) {
            numaio_sys::mount::unmount(&dir).map_err(|e| PagecacheError::sys(&dir, e))?;
            let _ = std::fs::remove_dir(&dir);
        }
        Ok(was)
    }

    /// `DIR/nodeN` as a tmpfs bound to node `node`, mounted if it is not yet.
    fn prepare_node(
        &self,
        node: u32,
        node_total: u64,
        path: &Path,
    ) -> Result<PathBuf, PagecacheError> {
        let dir = self.node_dir(node);
        std::fs::create_dir_all(&dir).map_err(|e| PagecacheError::io(&dir, "create", e))?;
        if is_our_mount(&dir) {
            return Ok(dir);
        }
        // The tmpfs may grow to the node's memory; the room check keeps each copy within
        // what the node has free.
        let opts = format!("mpol=bind:{node},mode=0755,size={node_total}");
        match numaio_sys::mount::mount_tmpfs(MOUNT_SOURCE, &dir, &opts) {
            Ok(()) => Ok(dir),
            Err(e) if e.errno() == Some(libc::EPERM) => Err(PagecacheError::NeedsPrivilege {
                path: path.into(),
                what: "mounting the per-node tmpfs for replicas",
                cap: "CAP_SYS_ADMIN",
                hint: "",
            }),
            Err(e) => Err(PagecacheError::sys(&dir, e)),
        }
    }

    /// The node directories present: `(node, DIR/nodeN)`.
    fn node_dirs(&self) -> Result<Vec<(u32, PathBuf)>, PagecacheError> {
        let rd = match std::fs::read_dir(&self.dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(PagecacheError::io(&self.dir, "list", e)),
        };
        let mut out: Vec<(u32, PathBuf)> = rd
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let n = e.file_name().to_str()?.strip_prefix("node")?.parse().ok()?;
                Some((n, e.path()))
            })
            .collect();
        out.sort();
        Ok(out)
    }

    /// The replica at `at`, its pages checked to be on `node` (moved there if some are not).
    fn verified(
        &self,
        original: PathBuf,
        node: u32,
        at: PathBuf,
        made: bool,
    ) -> Result<Replica, PagecacheError> {
        let mut r = scan(&at)?;
        if r.nodes.get(&node).copied().unwrap_or(0) < r.resident_pages {
            move_file(&at, &Target::Node(node), &MoveOptions::default())?;
            r = scan(&at)?;
        }
        let on = r.nodes.get(&node).copied().unwrap_or(0);
        if on < r.pages {
            return Err(PagecacheError::Replica {
                path: at,
                what: format!(
                    "{on} of its {} pages are on node {node}, the rest elsewhere ({:?}); \
                     the node may be short of memory",
                    r.pages, r.nodes
                ),
            });
        }
        Ok(Replica {
            original,
            node,
            replica: at,
            bytes: r.size_bytes,
            pages: r.pages,
            pages_on_node: on,
            fresh: true,
            made,
        })
    }
}

/// Node `node` of `topo`, if it can hold a replica (it exists and has memory).
fn memory_node(topo: &Topology, node: u32) -> Result<&numaio_sys::Node, PagecacheError> {
    let Some(n) = topo.node(node) else {
        return Err(PagecacheError::InvalidTarget(format!(
            "node {node} does not exist (nodes: {:?}); run `numaio topo` to list them",
            topo.node_ids()
        )));
    };
    if !n.has_memory() {
        return Err(PagecacheError::InvalidTarget(format!(
            "node {node} has no memory to hold a replica; choose a node with memory \
             (`numaio topo`)"
        )));
    }
    Ok(n)
}

/// The replicas in a node directory: `(path, version)`, by name.
fn entries(dir: &Path) -> Result<Vec<(PathBuf, Version)>, PagecacheError> {
    let rd = std::fs::read_dir(dir).map_err(|e| PagecacheError::io(dir, "list", e))?;
    let mut out: Vec<(PathBuf, Version)> = rd
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.path(), Version::parse(e.file_name().to_str()?)?)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(out)
}

/// A listed replica: its original from the `.src` link, fresh if that still is `v`.
fn describe(node: u32, at: PathBuf, v: &Version) -> Result<Replica, PagecacheError> {
    let original = std::fs::read_link(with_suffix(&at, ".src")).unwrap_or_default();
    let fresh = !original.as_os_str().is_empty()
        && std::fs::metadata(&original).is_ok_and(|m| Version::of(&m) == *v);
    let page = numaio_sys::page_size() as u64;
    let pages = v.size.div_ceil(page);
    let on = scan(&at)
        .map(|r| r.nodes.get(&node).copied().unwrap_or(0))
        .unwrap_or(0);
    Ok(Replica {
        original,
        node,
        replica: at,
        bytes: v.size,
        pages,
        pages_on_node: on,
        fresh,
        made: false,
    })
}

/// The node of every page of the replica at `at`: the full scan even on a machine with one
/// memory node, where `where` would answer from mincore alone.
fn scan(at: &Path) -> Result<crate::FileResidency, PagecacheError> {
    let opts = WhereOptions {
        full_scan: true,
        ..WhereOptions::default()
    };
    file_residency(at, &opts)
}

fn with_suffix(p: &Path, suffix: &str) -> PathBuf {
    let mut s = p.as_os_str().to_owned();
    s.push(suffix);
    s.into()
}

fn remove_replica(at: &Path) -> Result<(), PagecacheError> {
    match std::fs::remove_file(at) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(PagecacheError::io(at, "remove", e)),
    }
    let _ = std::fs::remove_file(with_suffix(at, ".src"));
    Ok(())
}

/// Whether `dir` is a tmpfs mounted by [`ReplicaStore`].
fn is_our_mount(dir: &Path) -> bool {
    let Ok(abs) = std::fs::canonicalize(dir) else {
        return false;
    };
    numaio_sys::mountinfo::read_self().is_ok_and(|m| {
        numaio_sys::mountinfo::topmost(&m, &abs)
            .is_some_and(|m| m.fs_type == "tmpfs" && m.source == Path::new(MOUNT_SOURCE))
    })
}

/// Copies `src` (described by `meta`) to a new file `name` in `dir`, with the original's
/// mode less write permission and, for root, its owner. A half-made copy is a hidden file,
/// gone on failure. The copy's pages follow the tmpfs's policy (bound to its node); this
/// thread keeps its own, so pages of the original that a read brings into the cache land
/// where any reader's would, not on the replica's node.
fn copy(
    src: &File,
    meta: &Metadata,
    dir: &Path,
    name: &str,
    path: &Path,
) -> Result<(), PagecacheError> {
    let at = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    let r = (|| {
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| PagecacheError::io(&tmp, "create", e))?;
        let mut buf = vec![0u8; COPY_CHUNK];
        let mut off = 0u64;
        loop {
            let n = match src.read_at(&mut buf, off) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(PagecacheError::io(path, "read", e)),
            };
            out.write_all(&buf[..n])
                .map_err(|e| PagecacheError::io(&tmp, "write", e))?;
            off += n as u64;
        }
        if crate::file::euid() == 0 {
            std::os::unix::fs::fchown(&out, Some(meta.uid()), Some(meta.gid()))
                .map_err(|e| PagecacheError::io(&tmp, "chown", e))?;
        }
        out.set_permissions(std::fs::Permissions::from_mode(meta.mode() & 0o7555))
            .map_err(|e| PagecacheError::io(&tmp, "chmod", e))?;
        std::fs::rename(&tmp, &at).map_err(|e| PagecacheError::io(&at, "rename", e))
    })();
    if r.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_existing_nodes_with_memory_hold_replicas() {
        let t = Topology::synthetic("n0=0-1@1G n1=2-3@0 n2=@2G").unwrap();
        assert_eq!(memory_node(&t, 0).unwrap().id, 0);
        assert_eq!(memory_node(&t, 2).unwrap().id, 2);
        let e = memory_node(&t, 1).unwrap_err().to_string();
        assert!(e.contains("node 1 has no memory"), "{e}");
        let e = memory_node(&t, 9).unwrap_err().to_string();
        assert!(e.contains("node 9 does not exist"), "{e}");
    }

    #[test]
    fn version_names_round_trip_and_nothing_else_parses() {
        let v = Version {
            dev: 2049,
            ino: 12,
            size: 1 << 20,
            mtime: (1_700_000_000, 5),
            ctime: (-3, 999_999_999),
        };
        assert_eq!(v.name(), "2049_12_1048576_1700000000.5_-3.999999999");
        assert_eq!(Version::parse(&v.name()), Some(v));
        for bad in [
            "",
            "x",
            "1_2_3_4.5",
            "1_2_3_4.5_6.7_8",
            "1_2_3_4.05_6.7",
            "1_2_3_4.1000000000_6.7",
            "1_2_3_4.5_6.7.src",
            ".2049_12_1_1.1_1.1.tmp-5",
            "01_2_3_4.5_6.7",
        ] {
            assert_eq!(Version::parse(bad), None, "{bad:?}");
        }
    }
}
