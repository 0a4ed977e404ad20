//! The file system: [`Fs`], the API the FUSE layer and the tests call.
//!
//! One mutex guards the metadata, the allocator and the journal state: every operation is
//! atomic with respect to the others, which keeps the code simple and correct; data I/O is
//! done under it too. Commits are the exception: their device writes and syncs run outside
//! it (see below), so operations go on while a commit is in flight.
//!
//! Durability (see [`crate::journal`]): metadata changes become durable at the next commit;
//! `fsync` and `sync` of anything commit everything pending (as ext4's journal does), which
//! is at least what POSIX asks. Commits are grouped: one is written at a time, and syncs
//! that arrive meanwhile are all covered by the next one. `fdatasync` of a file whose size
//! and block map are durable only syncs its devices. Ordered mode: a commit that maps new
//! blocks or grows a file first syncs every device that got data writes since the previous
//! commit, so committed metadata never points at unwritten blocks; one without such
//! records writes the journal first and syncs the devices after. Writes to blocks a file
//! already owns go in place (like ext4 `data=ordered`): after a crash such a block holds
//! the old or the new data of an un-synced overwrite. New blocks are written whole
//! (zero-filled around the data), so a file never shows another file's old data.

use crate::alloc::{AllocRequest, Allocator, Extent, NodeUsage};
use crate::format::{Header, Label, HEADER_BLOCKS};
use crate::journal::{self, Journal};
use crate::meta::{Attr, Entry, Inode, Kind, Meta, Record, FIRST_COOKIE, ROOT_INO};
use crate::mkfs::{now_ns, MkfsOptions};
use crate::store::BlockStore;
use crate::{Caller, FsError, PlacementPolicy, BLOCK_SIZE};
use parking_lot::Mutex;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Longest name of a directory entry, in bytes.
pub const MAX_NAME: usize = 255;
/// Longest symlink target, in bytes.
pub const MAX_TARGET: usize = 4095;
/// Largest file size.
pub const MAX_FILE_SIZE: u64 = 1 << 50;
/// Most hard links to one inode (and subdirectories of one directory).
pub const MAX_LINKS: u32 = 65000;
/// Largest extended attribute value.
pub const MAX_XATTR_VALUE: usize = 65536;
/// Bytes of extended attributes one inode holds at most, counted as ext4 counts its xattr
/// block: a 4 KiB block less its 32-byte header, each entry 16 bytes plus its name (without
/// the namespace prefix) and value, each padded to 4 bytes ([`xattr_entry_bytes`]). The
/// placement policy is an attribute of the inode, not counted. A set that would pass it fails
/// with `NoSpace` (ENOSPC), as on ext4, so the set per file, and with it the work of listing
/// or checkpointing it, stays small.
pub const XATTR_SPACE: usize = 4096 - 32;
/// The xattr that reads and sets an inode's placement policy.
pub const PLACEMENT_XATTR: &[u8] = b"user.numaio.placement";
/// `rename` flag: fail with [`FsError::Exists`] instead of replacing the target.
pub const RENAME_NOREPLACE: u32 = 1;
/// `fallocate` mode: do not change the size.
pub const FALLOC_KEEP_SIZE: u32 = 1;
/// `fallocate` mode: deallocate the range (with [`FALLOC_KEEP_SIZE`]).
pub const FALLOC_PUNCH_HOLE: u32 = 2;
/// `setxattr` flag: fail if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;
/// Entries returned by one `readdir` call at most.
pub const READDIR_BATCH: usize = 1024;

/// Estimated bytes of queued records past which a change first commits what is queued, so
/// the records waiting for an fsync that may never come (a `tar` of many files) and the
/// memory they hold stay bounded, as ext4 commits a transaction that grew large.
const PENDING_COMMIT_BYTES: u64 = 8 << 20;

/// How to mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Replay the journal in memory only and refuse every change: nothing is written.
    pub read_only: bool,
}

/// Attributes of an inode as `getattr` reports them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileAttr {
    pub ino: u64,
    pub kind: Kind,
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Blocks allocated (of [`BLOCK_SIZE`] bytes).
    pub blocks: u64,
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    pub policy: PlacementPolicy,
    pub home: Option<u32>,
    /// Node whose device holds this inode's metadata in the checkpoint.
    pub meta_node: u32,
}

/// Changes for `setattr`; `None` leaves a field alone. Times in ns since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    pub mode: Option<u32>,
    pub uid: Option<u32>,
    pub gid: Option<u32>,
    pub size: Option<u64>,
    pub atime: Option<i64>,
    pub mtime: Option<i64>,
    /// The size changes through a descriptor open for writing (ftruncate): its open checked
    /// the permission, which the file's mode need not grant any more (a file created with
    /// mode 0 stays writable through the descriptor that created it).
    pub through_writable_fd: bool,
}

/// One `readdir` entry; `cookie` resumes the listing after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    pub name: Vec<u8>,
    pub ino: u64,
    pub kind: Kind,
    pub cookie: u64,
}

/// Space of the volume, in total and per node.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatFs {
    pub block_size: u64,
    pub total_blocks: u64,
    pub free_blocks: u64,
    /// Inodes in use.
    pub files: u64,
    pub nodes: Vec<NodeUsage>,
}

/// What mount found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountInfo {
    pub checkpoint_seq: u64,
    pub replayed: u64,
    /// Unlinked inodes still open at the crash, freed at mount.
    pub orphans_freed: u64,
}

struct Inner {
    meta: Meta,
    alloc: Allocator,
    journal: Journal,
    pending: Vec<Record>,
    /// Per node, a bound on the framed size of its checkpoint shard.
    meta_bytes: BTreeMap<u32, u64>,
    data_dirty: BTreeSet<u16>,
    open: HashMap<u64, u32>,
    commits: u64,
    nodes: Vec<u32>,
    /// Counts the changes queued since mount; a commit makes every change up to the
    /// generation it saw durable ([`Fs::durable_gen`]).
    gen: u64,
    /// Whether a queued record needs the data written before it durable first: blocks
    /// newly mapped, a file grown over a zeroed tail, blocks unmapped around zeroed edges.
    ordered: bool,
    /// The generation of each inode's newest queued change that `fdatasync` must commit
    /// (new inode, mapping, size); inodes absent have none pending.
    datasync_gen: HashMap<u64, u64>,
    /// Index in `pending` of each inode's queued `SetAttr`: a later one replaces it, since
    /// no other record reads or writes attributes.
    last_setattr: HashMap<u64, usize>,
    /// An estimate of what `pending` holds, in bytes (see [`PENDING_COMMIT_BYTES`]).
    pending_bytes: u64,
}

/// A mounted volume.
pub struct Fs {
    store: Arc<dyn BlockStore>,
    read_only: bool,
    info: MountInfo,
    header: Header,
    inner: Mutex<Inner>,
    /// Held while a commit is written: syncs arriving meanwhile wait here and are covered
    /// by the next single commit (group commit). Taken before `inner`, never after.
    commit_lock: Mutex<()>,
    /// `Inner::gen` as of the newest durable commit.
    durable_gen: AtomicU64,
    sync_requests: AtomicU64,
    data_only_syncs: AtomicU64,
}

/// How `fsync`, `fdatasync` and `sync` were served since mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Calls of [`Fs::fsync`] and [`Fs::sync`].
    pub requests: u64,
    /// Journal commits written (fewer than requests when concurrent syncs shared one).
    pub commits: u64,
    /// `fdatasync` calls served by syncing the file's data devices, without a commit.
    pub data_only: u64,
}

fn bug(e: String) -> FsError {
    FsError::Invalid(format!("internal inconsistency (please report): {e}"))
}

/// A bound on how much `r` grows the encoded metadata.
fn growth(r: &Record) -> u64 {
    match r {
        Record::NewInode { target, .. } => 160 + target.as_ref().map_or(0, |t| t.len() as u64),
        Record::DirAdd { name, .. } => 40 + name.len() as u64,
        Record::SetXattr { name, value, .. } => 20 + (name.len() + value.len()) as u64,
        Record::Map { .. } | Record::Unmap { .. } => 32,
        Record::DirHome { .. } => 8,
        _ => 0,
    }
}

/// What an xattr of `name` with a value of `value_len` bytes takes of [`XATTR_SPACE`].
pub fn xattr_entry_bytes(name: &[u8], value_len: usize) -> usize {
    let short = [&b"user."[..], b"trusted.", b"security.", b"system."]
        .iter()
        .find_map(|p| name.strip_prefix(*p))
        .unwrap_or(name);
    16 + short.len().next_multiple_of(4) + value_len.next_multiple_of(4)
}

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > MAX_NAME {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid(
            "a name must be non-empty, without '/' or NUL".into(),
        ));
    }
    Ok(())
}

/// For names that create an entry: `.` and `..` always exist.
fn check_new_name(name: &[u8]) -> Result<(), FsError> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exists);
    }
    Ok(())
}

/// For names that remove an entry.
fn check_old_name(name: &[u8]) -> Result<(), FsError> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Invalid(format!(
            "{:?} cannot be removed or renamed",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// Permission bits `want` (4 read, 2 write, 1 search/execute) on `a` for `c`; root passes.
fn access(a: &Attr, c: &Caller, want: u32) -> Result<(), FsError> {
    if c.uid == 0 {
        return Ok(());
    }
    let bits = if c.uid == a.uid {
        a.mode >> 6
    } else if c.gid == a.gid {
        a.mode >> 3
    } else {
        a.mode
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(FsError::Permission)
    }
}

fn to_attr(ino: u64, i: &Inode) -> FileAttr {
    let a = &i.attr;
    FileAttr {
        ino,
        kind: a.kind,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size: a.size,
        blocks: i
            .extents
            .values()
            .fold(0u64, |n, e| n.saturating_add(e.len)),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        policy: a.policy.clone(),
        home: a.home,
        meta_node: a.meta_node,
    }
}

impl Inner {
    fn inode(&self, ino: u64) -> Result<&Inode, FsError> {
        self.meta.get(ino).ok_or(FsError::NotFound)
    }

    fn attr(&self, ino: u64) -> Result<Attr, FsError> {
        Ok(self.inode(ino)?.attr.clone())
    }

    fn dir_attr(&self, ino: u64) -> Result<Attr, FsError> {
        let a = self.attr(ino)?;
        if a.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        Ok(a)
    }

    fn entry(&self, dir: u64, name: &[u8]) -> Result<Entry, FsError> {
        let d = self.inode(dir)?.dir.as_ref().ok_or(FsError::NotDir)?;
        d.entries.get(name).copied().ok_or(FsError::NotFound)
    }

    /// The attributes of directory `dir` when `c` may add the entry `name` to it: the
    /// directory still linked, write and search permission, `name` not there yet.
    fn dir_for_new_entry(&self, dir: u64, name: &[u8], c: &Caller) -> Result<Attr, FsError> {
        let a = self.dir_attr(dir)?;
        if a.nlink == 0 {
            return Err(FsError::NotFound);
        }
        access(&a, c, 3)?;
        match self.entry(dir, name) {
            Ok(_) => Err(FsError::Exists),
            Err(FsError::NotFound) => Ok(a),
            Err(e) => Err(e),
        }
    }

    /// The entry `name` of directory `dir` when `c` may remove it (write and search
    /// permission on the directory).
    fn entry_to_remove(&self, dir: u64, name: &[u8], c: &Caller) -> Result<Entry, FsError> {
        let a = self.dir_attr(dir)?;
        access(&a, c, 3)?;
        self.entry(dir, name)
    }

    /// Removes the entry `name` → `e` from `dir` and drops the link it held (a directory's
    /// parent loses the link of its `..`).
    fn remove_entry(&mut self, dir: u64, name: &[u8], e: Entry, now: i64) -> Result<(), FsError> {
        self.rec(Record::DirRemove {
            dir,
            name: name.to_vec(),
        })?;
        self.touch_dir(dir, now, if e.kind == Kind::Dir { -1 } else { 0 })?;
        self.drop_link(e.ino, now)
    }

    /// Applies `r` and queues it for the next commit; freed blocks wait for that commit.
    fn rec(&mut self, r: Record) -> Result<(), FsError> {
        let old_size = match &r {
            Record::SetAttr { ino, .. } => self.meta.get(*ino).map(|i| i.attr.size),
            _ => None,
        };
        // The encoded bytes of the xattr a SetXattr replaces or a RemoveXattr drops (at least
        // its name and value), so the shard bound follows the set down as well as up.
        let old_xattr = match &r {
            Record::SetXattr { ino, name, .. } | Record::RemoveXattr { ino, name } => self
                .meta
                .get(*ino)
                .and_then(|i| i.xattrs.get(name))
                .map(|v| (name.len() + v.len()) as u64),
            _ => None,
        };
        let freed = self.meta.apply(&r).map_err(bug)?;
        for e in freed {
            self.alloc.free(e);
        }
        let node = match &r {
            Record::NewInode { attr, .. } => Some(attr.meta_node),
            Record::DirAdd { dir: ino, .. }
            | Record::Map { ino, .. }
            | Record::Unmap { ino, .. }
            | Record::SetXattr { ino, .. } => Some(self.node_of(*ino)),
            // What grows no inode: `DirHome` grows the volume-wide fields, which every
            // shard carries (the other records here do not grow the metadata).
            _ => None,
        };
        let g = match (&r, old_xattr) {
            // A replaced value grows the shard by what it adds, if anything.
            (Record::SetXattr { name, value, .. }, Some(old)) => {
                // (what the value's length prefix may grow by)
                (value.len() as u64).saturating_sub(old - name.len() as u64) + 4
            }
            _ => growth(&r),
        };
        match node {
            Some(n) => *self.meta_bytes.entry(n).or_default() += g,
            None => self.meta_bytes.values_mut().for_each(|b| *b += g),
        }
        if let (Record::RemoveXattr { ino, .. }, Some(old)) = (&r, old_xattr) {
            let b = self.meta_bytes.entry(self.node_of(*ino)).or_default();
            *b = b.saturating_sub(old);
        }
        self.gen += 1;
        let gen = self.gen;
        match &r {
            Record::Map { ino, .. } | Record::Unmap { ino, .. } => {
                self.ordered = true;
                self.datasync_gen.insert(*ino, gen);
            }
            Record::SetAttr { ino, attr } => {
                if let Some(old) = old_size.filter(|&o| o != attr.size) {
                    self.ordered |= attr.size > old;
                    self.datasync_gen.insert(*ino, gen);
                }
            }
            Record::NewInode { ino, .. } => {
                self.datasync_gen.insert(*ino, gen);
            }
            _ => {}
        }
        match r {
            Record::SetAttr { ino, attr } => {
                if let Some(&at) = self.last_setattr.get(&ino) {
                    if let Some(Record::SetAttr { ino: i, attr: a }) = self.pending.get_mut(at) {
                        if *i == ino {
                            *a = attr;
                            return Ok(());
                        }
                    }
                }
                self.queued(160);
                self.last_setattr.insert(ino, self.pending.len());
                self.pending.push(Record::SetAttr { ino, attr });
            }
            r => {
                if let Record::NewInode { ino, .. } | Record::DelInode { ino } = &r {
                    self.last_setattr.remove(ino);
                }
                self.queued(
                    64 + match &r {
                        Record::NewInode { target, .. } => {
                            96 + target.as_ref().map_or(0, |t| t.len() as u64)
                        }
                        Record::DirAdd { name, .. }
                        | Record::DirRemove { name, .. }
                        | Record::RemoveXattr { name, .. } => name.len() as u64,
                        Record::SetXattr { name, value, .. } => (name.len() + value.len()) as u64,
                        _ => 0,
                    },
                );
                self.pending.push(r);
            }
        }
        Ok(())
    }

    /// Counts a record of about `bytes` about to be queued in [`Inner::pending_bytes`].
    fn queued(&mut self, bytes: u64) {
        if self.pending.is_empty() {
            // Everything queued before was committed.
            self.pending_bytes = 0;
        }
        self.pending_bytes += bytes;
    }

    fn set_attr(&mut self, ino: u64, attr: Attr) -> Result<(), FsError> {
        self.rec(Record::SetAttr { ino, attr })
    }

    /// The node holding the metadata of `ino` (for a missing inode, the first node's).
    fn node_of(&self, ino: u64) -> u32 {
        self.meta
            .get(ino)
            .map(|i| i.attr.meta_node)
            .or_else(|| self.meta_bytes.keys().next().copied())
            .unwrap_or(0)
    }

    /// Whether `extra` more bytes fit in `node`'s checkpoint shard.
    fn fits_on(&mut self, node: u32, extra: u64) -> bool {
        let cap = self.journal.slot_capacity();
        if self.meta_bytes.get(&node).copied().unwrap_or(0) + extra <= cap {
            return true;
        }
        // The bound is loose: measure every shard again.
        self.meta_bytes = journal::shard_sizes(&self.journal.header, &self.meta)
            .into_iter()
            .collect();
        self.meta_bytes.get(&node).copied().unwrap_or(0) + extra <= cap
    }

    /// Refuses an operation that would grow the checkpoint shard of a node of `inos`
    /// (those holding the inodes it changes) past what a slot holds (`extra`: a bound on
    /// what the operation adds), so a commit can always be written.
    fn reserve(&mut self, extra: u64, inos: &[u64]) -> Result<(), FsError> {
        for &ino in inos {
            let n = self.node_of(ino);
            if !self.fits_on(n, extra) {
                return Err(FsError::NoSpace);
            }
        }
        Ok(())
    }

    /// The node for the metadata of a new inode created by `c` in directory `parent`: the
    /// caller's node when the volume has it (else the parent's), or when that node's shard
    /// is full the next node that has room, ascending and wrapping around.
    fn meta_node_for(&mut self, c: &Caller, parent: u64, extra: u64) -> Result<u32, FsError> {
        let nodes: Vec<u32> = self.meta_bytes.keys().copied().collect();
        let want = if nodes.contains(&c.node) {
            c.node
        } else {
            self.node_of(parent)
        };
        let first = nodes.iter().position(|&n| n == want).unwrap_or(0);
        for i in 0..nodes.len() {
            let n = nodes[(first + i) % nodes.len()];
            if self.fits_on(n, extra) {
                return Ok(n);
            }
        }
        Err(FsError::NoSpace)
    }

    /// Drops one link of `ino` (a directory loses all); frees it when nothing holds it.
    fn drop_link(&mut self, ino: u64, now: i64) -> Result<(), FsError> {
        let mut a = self.attr(ino)?;
        a.nlink = if a.kind == Kind::Dir {
            0
        } else {
            a.nlink.saturating_sub(1)
        };
        a.ctime = now;
        if a.nlink == 0 && self.open.get(&ino).copied().unwrap_or(0) == 0 {
            self.rec(Record::DelInode { ino })?;
            self.alloc.release_prealloc(ino);
        } else {
            self.set_attr(ino, a)?;
        }
        Ok(())
    }

    fn touch_dir(&mut self, dir: u64, now: i64, nlink_delta: i32) -> Result<(), FsError> {
        let mut a = self.attr(dir)?;
        a.mtime = now;
        a.ctime = now;
        a.nlink = a.nlink.saturating_add_signed(nlink_delta);
        self.set_attr(dir, a)
    }

    /// Allocates and maps logical blocks `lb..lb + n` of `ino` (all unmapped).
    fn allocate(&mut self, ino: u64, lb: u64, n: u64, c: &Caller) -> Result<(), FsError> {
        let i = self.inode(ino)?;
        let policy = i.attr.policy.clone();
        let home = i.attr.home;
        let goal = lb
            .checked_sub(1)
            .and_then(|p| i.lookup_block(p))
            .map(|(d, b)| (d, b + 1));
        let req = AllocRequest {
            ino,
            file_block: lb,
            blocks: n,
            policy: &policy,
            caller_node: c.node,
            home_node: home,
            goal,
        };
        let got = self.alloc.alloc(&req)?;
        let mut l = lb;
        for a in got {
            self.rec(Record::Map {
                ino,
                lblock: l,
                ext: a.extent,
            })?;
            l += a.extent.len;
        }
        if l != lb + n {
            return Err(bug(format!("allocator returned {} of {n} blocks", l - lb)));
        }
        Ok(())
    }

    /// Unmapped runs of logical blocks in `from..to`.
    fn holes(&self, ino: u64, from: u64, to: u64) -> Result<Vec<(u64, u64)>, FsError> {
        let i = self.inode(ino)?;
        let mut out = Vec::new();
        let mut b = from;
        let mut prev = i
            .extents
            .range(..from)
            .next_back()
            .map(|(&l, e)| l + e.len)
            .unwrap_or(0);
        if prev > b {
            b = prev.min(to);
        }
        for (&l, e) in i.extents.range(from..to) {
            if l > b {
                out.push((b, l - b));
            }
            prev = l + e.len;
            b = b.max(prev);
        }
        if b < to {
            out.push((b, to - b));
        }
        Ok(out)
    }

    fn free_blocks(&self) -> u64 {
        self.alloc.usage().iter().map(|u| u.free_blocks).sum()
    }

    /// Allocates every hole of `from..to`; returns the runs allocated.
    fn fill_holes(
        &mut self,
        ino: u64,
        from: u64,
        to: u64,
        c: &Caller,
    ) -> Result<Vec<(u64, u64)>, FsError> {
        let holes = self.holes(ino, from, to)?;
        let need: u64 = holes.iter().map(|h| h.1).sum();
        if need > self.free_blocks() {
            return Err(FsError::NoSpace);
        }
        self.reserve(need * 48 + 200, &[ino])?;
        for &(l, n) in &holes {
            self.allocate(ino, l, n, c)?;
        }
        Ok(holes)
    }
}

/// Writes blocks `(dev, block, data)` merging physically contiguous ones into one write.
/// The entries of directory `ino` after `cookie` (see [`Fs::readdir`]).
fn readdir_in(g: &Inner, ino: u64, cookie: u64, limit: usize) -> Result<Vec<DirEntry>, FsError> {
    let i = g.inode(ino)?;
    let d = i.dir.as_ref().ok_or(FsError::NotDir)?;
    let mut out = Vec::new();
    if cookie < 1 {
        out.push(DirEntry {
            name: b".".to_vec(),
            ino,
            kind: Kind::Dir,
            cookie: 1,
        });
    }
    if cookie < 2 {
        out.push(DirEntry {
            name: b"..".to_vec(),
            ino: i.attr.parent,
            kind: Kind::Dir,
            cookie: 2,
        });
    }
    for (&ck, (name, ino, kind)) in d.by_cookie.range(cookie.max(FIRST_COOKIE - 1) + 1..) {
        if out.len() >= limit {
            break;
        }
        out.push(DirEntry {
            name: name.clone(),
            ino: *ino,
            kind: *kind,
            cookie: ck,
        });
    }
    Ok(out)
}

fn write_blocks(
    store: &dyn BlockStore,
    dirty: &mut BTreeSet<u16>,
    blocks: Vec<(u16, u64, Vec<u8>)>,
) -> Result<(), FsError> {
    let mut run: Option<(u16, u64, u64, Vec<u8>)> = None;
    for (dev, b, data) in blocks {
        match &mut run {
            Some((d, _, next, buf)) if *d == dev && *next == b => {
                buf.extend_from_slice(&data);
                *next += 1;
            }
            _ => {
                if let Some((d, s, _, buf)) = run.take() {
                    store.write_at(d, s * BLOCK_SIZE, &buf)?;
                    dirty.insert(d);
                }
                run = Some((dev, b, b + 1, data));
            }
        }
    }
    if let Some((d, s, _, buf)) = run {
        store.write_at(d, s * BLOCK_SIZE, &buf)?;
        dirty.insert(d);
    }
    Ok(())
}

impl Fs {
    /// Formats the devices of `store` as one volume.
    pub fn mkfs(store: &dyn BlockStore, opts: &MkfsOptions) -> Result<Header, FsError> {
        crate::mkfs::mkfs(store, opts)
    }

    /// Checks the labels of every device against the volume header; returns the header.
    pub fn check_labels(store: &dyn BlockStore) -> Result<Header, FsError> {
        let devs = store.devices();
        let Some(d0) = devs.first() else {
            return Err(FsError::Invalid("no device given".into()));
        };
        let bs = BLOCK_SIZE as usize;
        let mut b = vec![0u8; bs];
        store.read_at(0, 0, &mut b)?;
        let l0 = Label::decode(&b, &d0.path)?;
        let mut hb = vec![0u8; HEADER_BLOCKS as usize * bs];
        store.read_at(0, BLOCK_SIZE, &mut hb)?;
        let header = Header::decode(&hb, &d0.path);
        if l0.dev_index != 0 {
            return Err(FsError::Invalid(format!(
                "{} is device {} of its volume, not its first device: give the devices in \
                 the order mkfs was given them",
                d0.path.display(),
                l0.dev_index
            )));
        }
        let header = header?;
        if header.uuid != l0.uuid {
            return Err(FsError::Corrupt {
                device: d0.path.clone(),
                what: "device label and volume header belong to different volumes".into(),
            });
        }
        let names = || {
            header
                .devices
                .iter()
                .map(|d| d.path.display().to_string())
                .collect::<Vec<_>>()
                .join(" ")
        };
        if devs.len() != header.devices.len() {
            return Err(FsError::Invalid(format!(
                "the volume on {} has {} devices ({}), {} given: give all of them, in mkfs order",
                d0.path.display(),
                header.devices.len(),
                names(),
                devs.len()
            )));
        }
        for (i, d) in devs.iter().enumerate() {
            let mut b = vec![0u8; bs];
            store.read_at(i as u16, 0, &mut b)?;
            let l = Label::decode(&b, &d.path).map_err(|e| FsError::Corrupt {
                device: d.path.clone(),
                what: format!(
                    "not a device of the volume on {} ({e}); give the volume's devices: {}",
                    d0.path.display(),
                    names()
                ),
            })?;
            if l.uuid != header.uuid {
                return Err(FsError::Corrupt {
                    device: d.path.clone(),
                    what: format!(
                        "belongs to another numaio-fs volume; give this volume's devices: {}",
                        names()
                    ),
                });
            }
            if l.dev_index as usize != i {
                return Err(FsError::Invalid(format!(
                    "{} is device {} of the volume (formatted as {}), given as device {i}: give \
                     the devices in mkfs order: {}",
                    d.path.display(),
                    l.dev_index,
                    header
                        .devices
                        .get(l.dev_index as usize)
                        .map_or("?".into(), |e| e.path.display().to_string()),
                    names()
                )));
            }
            if d.bytes < header.devices[i].bytes {
                return Err(FsError::Corrupt {
                    device: d.path.clone(),
                    what: format!(
                        "{} bytes, but the volume was formatted with {} bytes on it",
                        d.bytes, header.devices[i].bytes
                    ),
                });
            }
        }
        Ok(header)
    }

    /// Loads metadata and allocator from a volume without writing anything.
    fn load(store: &dyn BlockStore) -> Result<(Header, journal::Recovered, Allocator), FsError> {
        let header = Fs::check_labels(store)?;
        let rec = journal::recover(store, &header)?;
        let mut alloc = Allocator::new(header.groups())?;
        let device = rec.journal.device.clone();
        for (ino, i) in &rec.meta.inodes {
            for (l, e) in &i.extents {
                alloc.mark_used(*e).map_err(|why| FsError::Corrupt {
                    device: device.clone(),
                    what: format!("inode {ino} block {l}: {why}; run `numaio fsck --repair`"),
                })?;
            }
        }
        Ok((header, rec, alloc))
    }

    /// Mounts the volume on `store`: checks the labels, loads the newest checkpoint, replays
    /// the journal, rebuilds the allocator and frees orphans (unless read-only).
    pub fn mount(store: Arc<dyn BlockStore>, opts: MountOptions) -> Result<Fs, FsError> {
        let (header, rec, alloc) = Fs::load(&*store)?;
        let nodes = alloc.nodes();
        let info = MountInfo {
            checkpoint_seq: rec.checkpoint_seq,
            replayed: rec.replayed,
            orphans_freed: 0,
        };
        let meta_bytes = journal::shard_sizes(&rec.journal.header, &rec.meta)
            .into_iter()
            .collect();
        let mut inner = Inner {
            meta: rec.meta,
            alloc,
            journal: rec.journal,
            pending: Vec::new(),
            meta_bytes,
            data_dirty: BTreeSet::new(),
            open: HashMap::new(),
            commits: 0,
            nodes,
            gen: 0,
            ordered: false,
            datasync_gen: HashMap::new(),
            last_setattr: HashMap::new(),
            pending_bytes: 0,
        };
        let mut info = info;
        if !opts.read_only {
            // Unlinked files that were open at the crash.
            let orphans: Vec<u64> = inner
                .meta
                .inodes
                .iter()
                .filter(|(_, i)| i.attr.nlink == 0)
                .map(|(&n, _)| n)
                .collect();
            for &ino in &orphans {
                inner.rec(Record::DelInode { ino })?;
            }
            info.orphans_freed = orphans.len() as u64;
        }
        let fs = Fs {
            store,
            read_only: opts.read_only,
            info,
            header,
            inner: Mutex::new(inner),
            commit_lock: Mutex::new(()),
            durable_gen: AtomicU64::new(0),
            sync_requests: AtomicU64::new(0),
            data_only_syncs: AtomicU64::new(0),
        };
        if info.orphans_freed > 0 {
            fs.commit_locked(&mut fs.inner.lock())?;
        }
        Ok(fs)
    }

    /// The volume header (devices, geometry, default policy).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What mount found.
    pub fn mount_info(&self) -> MountInfo {
        self.info
    }

    /// Commits, writes a checkpoint and gives the volume back.
    pub fn unmount(self) -> Result<(), FsError> {
        if self.read_only {
            return Ok(());
        }
        let mut g = self.inner.lock();
        self.commit_locked(&mut g)?;
        let inner = &mut *g;
        let seq = inner.journal.seq;
        inner.journal.checkpoint(&*self.store, &inner.meta, seq)
    }

    /// Bytes of the journal in use since the last checkpoint, and its size. A checkpoint
    /// empties it once more than half is used.
    pub fn journal_usage(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.journal.pos, g.journal.capacity())
    }

    /// Number of commits made durable since mount (tests use it to know what must survive).
    pub fn commits(&self) -> u64 {
        self.inner.lock().commits
    }

    /// How syncs were served since mount (group commits, data-only `fdatasync`).
    pub fn sync_stats(&self) -> SyncStats {
        SyncStats {
            requests: self.sync_requests.load(Ordering::Relaxed),
            commits: self.commits(),
            data_only: self.data_only_syncs.load(Ordering::Relaxed),
        }
    }

    /// Commits everything queued with `g` held throughout: at mount and unmount, and for a
    /// commit that needs a checkpoint (which must see no change after the commit). The
    /// caller holds `commit_lock` or owns the `Fs` alone.
    fn commit_locked(&self, g: &mut Inner) -> Result<(), FsError> {
        if self.read_only {
            return Ok(());
        }
        while let Some(&d) = g.data_dirty.first() {
            self.store.sync(d)?;
            g.data_dirty.remove(&d);
        }
        if !g.pending.is_empty() {
            let seq = g.journal.seq + 1;
            let payload = crate::format::encode(&g.pending);
            if g.journal.fits(payload.len()) {
                g.journal.append(&*self.store, seq, &payload)?;
            } else {
                g.journal.checkpoint(&*self.store, &g.meta, seq)?;
            }
            g.pending.clear();
            g.last_setattr.clear();
            g.alloc.commit_frees();
            g.commits += 1;
            if g.journal.pos > g.journal.capacity() / 2 {
                // The commit is durable already; a checkpoint that does not fit is retried
                // at the next commit (which fails with NoSpace only if its record does not
                // fit the journal either).
                let inner = &mut *g;
                match inner.journal.checkpoint(&*self.store, &inner.meta, seq) {
                    Ok(()) | Err(FsError::NoSpace) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        g.ordered = false;
        let gen = g.gen;
        g.datasync_gen.retain(|_, v| *v > gen);
        self.durable_gen.store(gen, Ordering::Release);
        Ok(())
    }

    /// Makes every change up to generation `ticket` durable. One caller at a time writes a
    /// commit, outside the file system's lock, so operations go on meanwhile; callers that
    /// arrive during it wait for it and are then covered by it or by the next one, which
    /// takes everything queued by then: one journal write and device sync for many syncs.
    fn commit_upto(&self, ticket: u64) -> Result<(), FsError> {
        if self.read_only {
            return Ok(());
        }
        let _writer = self.commit_lock.lock();
        if self.durable_gen.load(Ordering::Acquire) >= ticket {
            return Ok(());
        }
        let mut g = self.inner.lock();
        let gen = g.gen;
        let payload = (!g.pending.is_empty()).then(|| crate::format::encode(&g.pending));
        if let Some(p) = &payload {
            let after = g.journal.pos + (crate::format::RECORD_HEADER + p.len()) as u64;
            if !g.journal.fits(p.len()) || after > g.journal.capacity() / 2 {
                return self.commit_locked(&mut g);
            }
        }
        let devs: Vec<u16> = std::mem::take(&mut g.data_dirty).into_iter().collect();
        let ordered = std::mem::take(&mut g.ordered);
        let records = std::mem::take(&mut g.pending);
        g.last_setattr.clear();
        g.alloc.seal_frees();
        let w = payload.map(|p| g.journal.prepare(g.journal.seq + 1, &p));
        drop(g);
        let r = self.write_commit(&devs, ordered, w.as_ref());
        let mut g = self.inner.lock();
        match r {
            Ok(()) => {
                if let Some(w) = w {
                    g.journal.finish(w);
                    g.commits += 1;
                }
                g.alloc.commit_sealed_frees();
                g.datasync_gen.retain(|_, v| *v > gen);
                self.durable_gen.store(gen, Ordering::Release);
                Ok(())
            }
            Err(e) => {
                // Nothing of this commit is known durable: queue it again ahead of what
                // came since, so the next commit writes it.
                let later = std::mem::replace(&mut g.pending, records);
                g.pending.extend(later);
                g.last_setattr.clear();
                g.data_dirty.extend(devs);
                g.ordered |= ordered;
                Err(e)
            }
        }
    }

    /// The device writes of one commit. Ordered data (new blocks, zeroed tails) is synced
    /// before the journal record that points at it; when there is none, the journal goes
    /// first and one sync of device 0 covers its data and the record together.
    fn write_commit(
        &self,
        devs: &[u16],
        ordered: bool,
        w: Option<&journal::JournalWrite>,
    ) -> Result<(), FsError> {
        let Some(w) = w else {
            for &d in devs {
                self.store.sync(d)?;
            }
            return Ok(());
        };
        if ordered {
            for &d in devs {
                self.store.sync(d)?;
            }
        }
        self.store.write_at(0, w.offset, &w.buf)?;
        self.store.sync(0)?;
        if !ordered {
            for &d in devs.iter().filter(|&&d| d != 0) {
                self.store.sync(d)?;
            }
        }
        Ok(())
    }

    fn lock_rw(&self) -> Result<parking_lot::MutexGuard<'_, Inner>, FsError> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        let g = self.inner.lock();
        if g.pending_bytes < PENDING_COMMIT_BYTES || g.pending.is_empty() {
            return Ok(g);
        }
        let gen = g.gen;
        drop(g);
        self.commit_upto(gen)?;
        Ok(self.inner.lock())
    }

    /// Looks `name` up in directory `parent` (search permission needed).
    pub fn lookup(&self, parent: u64, name: &[u8], c: &Caller) -> Result<FileAttr, FsError> {
        let g = self.inner.lock();
        let pa = g.dir_attr(parent)?;
        access(&pa, c, 1)?;
        let ino = match name {
            b"." => parent,
            b".." => pa.parent,
            _ => {
                check_name(name)?;
                g.entry(parent, name)?.ino
            }
        };
        Ok(to_attr(ino, g.inode(ino)?))
    }

    pub fn getattr(&self, ino: u64) -> Result<FileAttr, FsError> {
        let g = self.inner.lock();
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Whether `c` may access `ino` with `mask` (4 read, 2 write, 1 execute; 0: exists).
    pub fn access(&self, ino: u64, mask: u32, c: &Caller) -> Result<(), FsError> {
        let g = self.inner.lock();
        access(&g.inode(ino)?.attr, c, mask & 7)
    }

    /// Changes mode, owner, size (truncate or extend) and times.
    pub fn setattr(&self, ino: u64, s: &SetAttr, c: &Caller) -> Result<FileAttr, FsError> {
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        let owner = c.uid == 0 || c.uid == a.uid;
        if s.mode.is_some() && !owner {
            return Err(FsError::NotPermitted);
        }
        if let Some(uid) = s.uid {
            if c.uid != 0 && uid != a.uid {
                return Err(FsError::NotPermitted);
            }
        }
        if let Some(gid) = s.gid {
            if c.uid != 0 && (gid != a.gid && (c.uid != a.uid || gid != c.gid)) {
                return Err(FsError::NotPermitted);
            }
        }
        if (s.atime.is_some() || s.mtime.is_some()) && !owner {
            access(&a, c, 2)?;
        }
        let now = now_ns();
        if let Some(size) = s.size {
            if a.kind == Kind::Dir {
                return Err(FsError::IsDir);
            }
            if a.kind != Kind::File {
                return Err(FsError::Invalid(
                    "only regular files can be truncated".into(),
                ));
            }
            if !s.through_writable_fd {
                access(&a, c, 2)?;
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::TooBig);
            }
            g.reserve(200, &[ino])?;
            if size > a.size {
                self.zero_tail(g, ino, a.size)?;
            }
            self.truncate(g, ino, size)?;
            a = g.attr(ino)?;
            a.size = size;
            a.mtime = now;
        }
        if let Some(m) = s.mode {
            a.mode = m & 0o7777;
        }
        if let Some(u) = s.uid {
            a.uid = u;
        }
        if let Some(gid) = s.gid {
            a.gid = gid;
        }
        if let Some(t) = s.atime {
            a.atime = t;
        }
        if let Some(t) = s.mtime {
            a.mtime = t;
        }
        a.ctime = now;
        g.reserve(200, &[ino])?;
        g.set_attr(ino, a)?;
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Zeroes the bytes after `size` in the block holding it, before the file grows past
    /// `size`: a crash may have left there part of an overwrite whose size change was
    /// never committed, and a file must read zeros where it was never written.
    fn zero_tail(&self, g: &mut Inner, ino: u64, size: u64) -> Result<(), FsError> {
        let tail = (size % BLOCK_SIZE) as usize;
        if tail == 0 {
            return Ok(());
        }
        if let Some((dev, b)) = g.inode(ino)?.lookup_block(size / BLOCK_SIZE) {
            let mut buf = vec![0u8; BLOCK_SIZE as usize];
            self.store.read_at(dev, b * BLOCK_SIZE, &mut buf)?;
            if buf[tail..].iter().any(|&x| x != 0) {
                buf[tail..].fill(0);
                write_blocks(&*self.store, &mut g.data_dirty, vec![(dev, b, buf)])?;
            }
        }
        Ok(())
    }

    /// Frees the blocks past `size` and zeroes the tail of the last block.
    fn truncate(&self, g: &mut Inner, ino: u64, size: u64) -> Result<(), FsError> {
        let i = g.inode(ino)?;
        let keep = size.div_ceil(BLOCK_SIZE);
        let end = i.extents.iter().next_back().map_or(0, |(&l, e)| l + e.len);
        if end > keep {
            g.rec(Record::Unmap {
                ino,
                from: keep,
                to: end,
            })?;
        }
        let tail = (size % BLOCK_SIZE) as usize;
        if tail != 0 && size < g.attr(ino)?.size {
            if let Some((dev, b)) = g.inode(ino)?.lookup_block(size / BLOCK_SIZE) {
                let mut buf = vec![0u8; BLOCK_SIZE as usize];
                self.store.read_at(dev, b * BLOCK_SIZE, &mut buf)?;
                buf[tail..].fill(0);
                write_blocks(&*self.store, &mut g.data_dirty, vec![(dev, b, buf)])?;
            }
        }
        Ok(())
    }

    fn new_inode(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        target: Option<Vec<u8>>,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        check_new_name(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let pa = g.dir_for_new_entry(parent, name, c)?;
        if kind == Kind::Dir && pa.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        let extra = 400 + name.len() as u64 + target.as_ref().map_or(0, |t| t.len() as u64);
        g.reserve(extra, &[parent])?;
        let meta_node = g.meta_node_for(c, parent, extra)?;
        let now = now_ns();
        let ino = g.meta.next_ino;
        let home = if kind == Kind::Dir && parent == ROOT_INO {
            let node = g.alloc.directory_home(g.meta.last_home);
            g.rec(Record::DirHome { node })?;
            Some(node)
        } else {
            pa.home
        };
        let attr = Attr {
            kind,
            mode: mode & 0o7777,
            uid: c.uid,
            gid: if pa.mode & 0o2000 != 0 { pa.gid } else { c.gid },
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: target.as_ref().map_or(0, |t| t.len() as u64),
            atime: now,
            mtime: now,
            ctime: now,
            policy: pa.policy.clone(),
            policy_set: false,
            home,
            parent: if kind == Kind::Dir { parent } else { 0 },
            meta_node,
        };
        g.rec(Record::NewInode { ino, attr, target })?;
        g.rec(Record::DirAdd {
            dir: parent,
            name: name.to_vec(),
            ino,
            kind,
        })?;
        g.touch_dir(parent, now, if kind == Kind::Dir { 1 } else { 0 })?;
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Creates a regular file.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        self.new_inode(parent, name, Kind::File, mode, None, c)
    }

    /// Creates a fifo, socket or device special file (`kind`), or a regular file.
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        if !kind.is_special() && kind != Kind::File {
            return Err(FsError::Invalid(
                "mknod makes files, fifos, sockets and devices".into(),
            ));
        }
        self.new_inode(parent, name, kind, mode, None, c)
    }

    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        self.new_inode(parent, name, Kind::Dir, mode, None, c)
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        if target.is_empty() || target.contains(&0) {
            return Err(FsError::Invalid(
                "a symlink target must be non-empty, without NUL".into(),
            ));
        }
        if target.len() > MAX_TARGET {
            return Err(FsError::NameTooLong);
        }
        self.new_inode(parent, name, Kind::Symlink, 0o777, Some(target.to_vec()), c)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let g = self.inner.lock();
        g.inode(ino)?
            .target
            .clone()
            .ok_or_else(|| FsError::Invalid(format!("inode {ino} is not a symlink")))
    }

    /// A new name `newname` in `newparent` for `ino` (not a directory).
    pub fn link(
        &self,
        ino: u64,
        newparent: u64,
        newname: &[u8],
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        check_new_name(newname)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        if a.kind == Kind::Dir {
            return Err(FsError::NotPermitted);
        }
        g.dir_for_new_entry(newparent, newname, c)?;
        if a.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        if a.nlink == 0 {
            return Err(FsError::NotFound);
        }
        g.reserve(300 + newname.len() as u64, &[ino, newparent])?;
        let now = now_ns();
        a.nlink += 1;
        a.ctime = now;
        let kind = a.kind;
        g.set_attr(ino, a)?;
        g.rec(Record::DirAdd {
            dir: newparent,
            name: newname.to_vec(),
            ino,
            kind,
        })?;
        g.touch_dir(newparent, now, 0)?;
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Removes the entry `name` (not a directory) from `parent`.
    pub fn unlink(&self, parent: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        check_old_name(name)?;
        let mut g = self.lock_rw()?;
        let e = g.entry_to_remove(parent, name, c)?;
        if e.kind == Kind::Dir {
            return Err(FsError::IsDir);
        }
        g.reserve(300 + name.len() as u64, &[parent, e.ino])?;
        g.remove_entry(parent, name, e, now_ns())
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        check_old_name(name)?;
        let mut g = self.lock_rw()?;
        let e = g.entry_to_remove(parent, name, c)?;
        if e.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if !g
            .inode(e.ino)?
            .dir
            .as_ref()
            .is_some_and(|d| d.entries.is_empty())
        {
            return Err(FsError::NotEmpty);
        }
        g.reserve(300 + name.len() as u64, &[parent, e.ino])?;
        g.remove_entry(parent, name, e, now_ns())
    }

    /// Moves `parent/name` to `newparent/newname`, replacing what is there atomically unless
    /// `flags` has [`RENAME_NOREPLACE`].
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(FsError::Invalid(format!(
                "unsupported rename flags {flags:#x}"
            )));
        }
        check_old_name(name)?;
        check_old_name(newname)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let src = g.entry_to_remove(parent, name, c)?;
        let npa = g.dir_attr(newparent)?;
        access(&npa, c, 3)?;
        let tgt = match g.entry(newparent, newname) {
            Ok(t) => Some(t),
            Err(FsError::NotFound) => None,
            Err(e) => return Err(e),
        };
        if let Some(t) = tgt {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(FsError::Exists);
            }
            if t.ino == src.ino {
                return Ok(());
            }
            match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
                (true, false) => return Err(FsError::NotDir),
                (false, true) => return Err(FsError::IsDir),
                (true, true) => {
                    if !g
                        .inode(t.ino)?
                        .dir
                        .as_ref()
                        .is_some_and(|d| d.entries.is_empty())
                    {
                        return Err(FsError::NotEmpty);
                    }
                }
                (false, false) => {}
            }
        }
        if src.kind == Kind::Dir {
            // Refuse moving a directory into its own subtree.
            let mut d = newparent;
            loop {
                if d == src.ino {
                    return Err(FsError::Invalid(
                        "cannot move a directory into itself or its own subtree".into(),
                    ));
                }
                if d == ROOT_INO {
                    break;
                }
                d = g.attr(d)?.parent;
            }
            if tgt.is_none() && parent != newparent && npa.nlink >= MAX_LINKS {
                return Err(FsError::TooManyLinks);
            }
        }
        g.reserve(
            800 + (name.len() + newname.len()) as u64,
            &[parent, newparent, src.ino],
        )?;
        let now = now_ns();
        if let Some(t) = tgt {
            g.remove_entry(newparent, newname, t, now)?;
        }
        g.rec(Record::DirRemove {
            dir: parent,
            name: name.to_vec(),
        })?;
        g.rec(Record::DirAdd {
            dir: newparent,
            name: newname.to_vec(),
            ino: src.ino,
            kind: src.kind,
        })?;
        let moved_dir = src.kind == Kind::Dir && parent != newparent;
        g.touch_dir(parent, now, if moved_dir { -1 } else { 0 })?;
        if parent != newparent {
            g.touch_dir(newparent, now, if moved_dir { 1 } else { 0 })?;
        }
        let mut a = g.attr(src.ino)?;
        a.ctime = now;
        if src.kind == Kind::Dir {
            a.parent = newparent;
        }
        g.set_attr(src.ino, a)
    }

    /// Counts an open handle: an unlinked file keeps its blocks until the last release.
    pub fn open(&self, ino: u64) -> Result<(), FsError> {
        let mut g = self.inner.lock();
        g.inode(ino)?;
        *g.open.entry(ino).or_default() += 1;
        Ok(())
    }

    pub fn release(&self, ino: u64) -> Result<(), FsError> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let n = g.open.get_mut(&ino).ok_or_else(|| {
            FsError::Invalid(format!("release of inode {ino}, which is not open"))
        })?;
        *n -= 1;
        if *n == 0 {
            g.open.remove(&ino);
            if !self.read_only && g.meta.get(ino).is_some_and(|i| i.attr.nlink == 0) {
                g.rec(Record::DelInode { ino })?;
                g.alloc.release_prealloc(ino);
            }
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset`; holes read as zeros. Returns the count
    /// (0 at or past the end).
    pub fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_into(ino, offset, buf, false)
    }

    /// [`Fs::read`] for a caller that keeps what it reads (the page cache of a mount): the
    /// store then drops its own cached copy of the blocks read ([`BlockStore::forget`]), so
    /// they are cached once.
    pub fn read_kept(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_into(ino, offset, buf, true)
    }

    fn read_into(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        kept: bool,
    ) -> Result<usize, FsError> {
        let mut g = self.inner.lock();
        let i = g.inode(ino)?;
        match i.attr.kind {
            Kind::Dir => return Err(FsError::IsDir),
            Kind::Symlink => return Err(FsError::Invalid("read of a symlink".into())),
            k if k.is_special() => {
                return Err(FsError::Invalid("read of a fifo, socket or device".into()))
            }
            _ => {}
        }
        let size = i.attr.size;
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - offset) as usize;
        let end = offset + n as u64;
        let bs = BLOCK_SIZE as usize;
        let mut lb = offset / BLOCK_SIZE;
        while lb * BLOCK_SIZE < end {
            // A run of logical blocks mapped contiguously (or a hole run).
            let start = lb;
            let phys = i.lookup_block(lb);
            let mut count = 1;
            while (lb + count) * BLOCK_SIZE < end {
                let p = i.lookup_block(lb + count);
                let contiguous = match (phys, p) {
                    (Some((d, b)), Some((d2, b2))) => d == d2 && b2 == b + count,
                    (None, None) => true,
                    _ => false,
                };
                if !contiguous {
                    break;
                }
                count += 1;
            }
            let run_off = start * BLOCK_SIZE;
            let lo = offset.max(run_off);
            let hi = end.min(run_off + count * BLOCK_SIZE);
            let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
            match phys {
                None => dst.fill(0),
                // A run whose blocks the request covers whole is read straight into the
                // caller's buffer; only partly covered blocks go through a bounce buffer.
                Some((d, b)) if lo == run_off && hi == run_off + count * BLOCK_SIZE => {
                    self.store.read_at(d, b * BLOCK_SIZE, dst)?;
                }
                Some((d, b)) => {
                    let mut tmp = vec![0u8; count as usize * bs];
                    self.store.read_at(d, b * BLOCK_SIZE, &mut tmp)?;
                    dst.copy_from_slice(&tmp[(lo - run_off) as usize..(hi - run_off) as usize]);
                }
            }
            if let (true, Some((d, b))) = (kept, phys) {
                // Only blocks the caller got whole: a partly read block's other bytes are
                // not in the cache above.
                let first = lo.div_ceil(BLOCK_SIZE);
                let last = hi / BLOCK_SIZE;
                if last > first {
                    self.store.forget(
                        d,
                        (b + first - start) * BLOCK_SIZE,
                        (last - first) * BLOCK_SIZE,
                    )?;
                }
            }
            lb += count;
        }
        // relatime: update atime only when it is older than the last change.
        if !self.read_only {
            let mut a = i.attr.clone();
            if a.atime <= a.mtime || a.atime <= a.ctime {
                a.atime = now_ns();
                if g.reserve(200, &[ino]).is_ok() {
                    g.set_attr(ino, a)?;
                }
            }
        }
        Ok(n)
    }

    /// Writes `data` at `offset`; new blocks come from the allocator under the file's
    /// policy for `c`'s node. Returns the bytes written (all of them).
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let a = g.attr(ino)?;
        match a.kind {
            Kind::Dir => return Err(FsError::IsDir),
            Kind::Symlink => return Err(FsError::Invalid("write to a symlink".into())),
            k if k.is_special() => {
                return Err(FsError::Invalid("write to a fifo, socket or device".into()))
            }
            _ => {}
        }
        if data.is_empty() {
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let first = offset / BLOCK_SIZE;
        let last = end.div_ceil(BLOCK_SIZE);
        if offset > a.size {
            self.zero_tail(g, ino, a.size)?;
        }
        let fresh = g.fill_holes(ino, first, last, c)?;
        let is_fresh = |lb: u64| fresh.iter().any(|&(l, n)| lb >= l && lb < l + n);
        let bs = BLOCK_SIZE as usize;
        let mut blocks = Vec::with_capacity((last - first) as usize);
        let i = g.inode(ino)?;
        for lb in first..last {
            let (dev, pb) = i
                .lookup_block(lb)
                .ok_or_else(|| bug(format!("inode {ino} block {lb} unmapped after allocation")))?;
            let boff = lb * BLOCK_SIZE;
            let lo = offset.max(boff);
            let hi = end.min(boff + BLOCK_SIZE);
            let src = &data[(lo - offset) as usize..(hi - offset) as usize];
            let buf = if src.len() == bs {
                src.to_vec()
            } else {
                let mut buf = vec![0u8; bs];
                if !is_fresh(lb) {
                    self.store.read_at(dev, pb * BLOCK_SIZE, &mut buf)?;
                }
                buf[(lo - boff) as usize..(hi - boff) as usize].copy_from_slice(src);
                buf
            };
            blocks.push((dev, pb, buf));
        }
        write_blocks(&*self.store, &mut g.data_dirty, blocks)?;
        let mut a = g.attr(ino)?;
        let now = now_ns();
        a.size = a.size.max(end);
        a.mtime = now;
        a.ctime = now;
        // A write by someone else than root clears set-user-id and set-group-id.
        if c.uid != 0 {
            a.mode &= !0o6000;
        }
        g.set_attr(ino, a)?;
        Ok(data.len())
    }

    /// Allocates (`mode` 0 or [`FALLOC_KEEP_SIZE`]) or deallocates
    /// ([`FALLOC_PUNCH_HOLE`]`|`[`FALLOC_KEEP_SIZE`]) `len` bytes at `offset`.
    pub fn fallocate(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        if a.kind != Kind::File {
            return Err(if a.kind == Kind::Dir {
                FsError::IsDir
            } else {
                FsError::Invalid("fallocate of a symlink".into())
            });
        }
        if len == 0 {
            return Err(FsError::Invalid("fallocate of 0 bytes".into()));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let now = now_ns();
        match mode {
            0 | FALLOC_KEEP_SIZE => {
                if mode == 0 && end > a.size {
                    self.zero_tail(g, ino, a.size)?;
                }
                let fresh = g.fill_holes(ino, offset / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE), c)?;
                let i = g.inode(ino)?;
                let mut blocks = Vec::new();
                for (l, n) in fresh {
                    for lb in l..l + n {
                        let (d, b) = i.lookup_block(lb).ok_or_else(|| bug("unmapped".into()))?;
                        blocks.push((d, b, vec![0u8; BLOCK_SIZE as usize]));
                    }
                }
                write_blocks(&*self.store, &mut g.data_dirty, blocks)?;
                a = g.attr(ino)?;
                if mode == 0 && end > a.size {
                    a.size = end;
                    a.mtime = now;
                }
            }
            m if m == FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE || m == FALLOC_PUNCH_HOLE => {
                g.reserve(400, &[ino])?;
                let from = offset.div_ceil(BLOCK_SIZE);
                let to = end / BLOCK_SIZE;
                if from < to {
                    g.rec(Record::Unmap { ino, from, to })?;
                }
                // Zero the partial blocks at the edges in place.
                let mut edges = vec![offset / BLOCK_SIZE];
                if end % BLOCK_SIZE != 0 {
                    edges.push(end / BLOCK_SIZE);
                }
                edges.dedup();
                for lb in edges {
                    let boff = lb * BLOCK_SIZE;
                    let lo = offset.max(boff) - boff;
                    let hi = end.min(boff + BLOCK_SIZE) - boff;
                    if lo == 0 && hi == BLOCK_SIZE {
                        continue;
                    }
                    if let Some((d, b)) = g.inode(ino)?.lookup_block(lb) {
                        let mut buf = vec![0u8; BLOCK_SIZE as usize];
                        self.store.read_at(d, b * BLOCK_SIZE, &mut buf)?;
                        buf[lo as usize..hi as usize].fill(0);
                        write_blocks(&*self.store, &mut g.data_dirty, vec![(d, b, buf)])?;
                    }
                }
                a = g.attr(ino)?;
                a.mtime = now;
            }
            m => {
                return Err(FsError::Invalid(format!(
                    "unsupported fallocate mode {m:#x} (supported: 0, KEEP_SIZE, \
                     PUNCH_HOLE|KEEP_SIZE)"
                )))
            }
        }
        a.ctime = now;
        g.set_attr(ino, a)
    }

    /// Makes everything done so far durable (a global commit, shared with concurrent
    /// syncs). `datasync` of a file whose size and block map have no change pending only
    /// syncs the devices holding its blocks: its data is written in place under metadata
    /// already durable, and fdatasync need not make the times durable.
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<(), FsError> {
        self.sync_requests.fetch_add(1, Ordering::Relaxed);
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        if datasync && !self.read_only {
            let need = g.datasync_gen.get(&ino).copied().unwrap_or(0);
            if need <= self.durable_gen.load(Ordering::Acquire) {
                let devs: BTreeSet<u16> = i.extents.values().map(|e| e.dev).collect();
                drop(g);
                for d in devs {
                    self.store.sync(d)?;
                }
                self.data_only_syncs.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let ticket = g.gen;
        drop(g);
        self.commit_upto(ticket)
    }

    /// Makes everything done so far durable.
    pub fn sync(&self) -> Result<(), FsError> {
        self.sync_requests.fetch_add(1, Ordering::Relaxed);
        let ticket = self.inner.lock().gen;
        self.commit_upto(ticket)
    }

    /// Entries of directory `ino` after `cookie` (0: from the start, with `.` and `..`), at
    /// most [`READDIR_BATCH`]; empty at the end.
    pub fn readdir(&self, ino: u64, cookie: u64) -> Result<Vec<DirEntry>, FsError> {
        readdir_in(&self.inner.lock(), ino, cookie, READDIR_BATCH)
    }

    /// [`Fs::readdir`] with every entry's attributes, read under the same lock (for FUSE's
    /// readdirplus: a listing followed by stats needs no lookup per entry); at most `limit`
    /// entries, as a reply buffer holds few.
    pub fn readdir_plus(
        &self,
        ino: u64,
        cookie: u64,
        limit: usize,
    ) -> Result<Vec<(DirEntry, FileAttr)>, FsError> {
        let g = self.inner.lock();
        // Only the entries asked for: a reply holds few, and each listed entry costs a copy
        // of its name.
        readdir_in(&g, ino, cookie, limit.min(READDIR_BATCH))?
            .into_iter()
            .map(|e| {
                let a = to_attr(e.ino, g.inode(e.ino)?);
                Ok((e, a))
            })
            .collect()
    }

    /// Sets an extended attribute; [`PLACEMENT_XATTR`] sets the placement policy.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(FsError::Invalid("xattr names have 1 to 255 bytes".into()));
        }
        if value.len() > MAX_XATTR_VALUE {
            return Err(FsError::Invalid(format!(
                "xattr values have at most {MAX_XATTR_VALUE} bytes"
            )));
        }
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        if c.uid != 0 && c.uid != a.uid {
            access(&a, c, 2)?;
        }
        let now = now_ns();
        g.reserve(300 + (name.len() + value.len()) as u64, &[ino])?;
        if name == PLACEMENT_XATTR {
            if c.uid != 0 && c.uid != a.uid {
                return Err(FsError::NotPermitted);
            }
            let p: PlacementPolicy = std::str::from_utf8(value)
                .map_err(|_| FsError::Invalid("placement policy is not UTF-8".into()))?
                .parse()?;
            p.validate(&g.nodes)?;
            a.policy = p;
            a.policy_set = true;
            a.ctime = now;
            return g.set_attr(ino, a);
        }
        let exists = g.inode(ino)?.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(FsError::NoAttr);
        }
        let set = &g.inode(ino)?.xattrs;
        let used: usize = set.iter().map(|(n, v)| xattr_entry_bytes(n, v.len())).sum();
        let old = set
            .get(name)
            .map_or(0, |v| xattr_entry_bytes(name, v.len()));
        let after = used - old + xattr_entry_bytes(name, value.len());
        // A set already past the bound (made before it existed) may still shrink.
        if after > XATTR_SPACE && after > used {
            return Err(FsError::NoSpace);
        }
        g.rec(Record::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
        })?;
        a.ctime = now;
        g.set_attr(ino, a)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        if name == PLACEMENT_XATTR {
            return Ok(i.attr.policy.to_string().into_bytes());
        }
        i.xattrs.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        let mut out: Vec<Vec<u8>> = i.xattrs.keys().cloned().collect();
        if i.attr.policy_set {
            out.push(PLACEMENT_XATTR.to_vec());
        }
        Ok(out)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        if c.uid != 0 && c.uid != a.uid {
            access(&a, c, 2)?;
        }
        if name == PLACEMENT_XATTR {
            return Err(FsError::Invalid(
                "the placement policy cannot be removed; set another one".into(),
            ));
        }
        if !g.inode(ino)?.xattrs.contains_key(name) {
            return Err(FsError::NoAttr);
        }
        g.reserve(300, &[ino])?;
        g.rec(Record::RemoveXattr {
            ino,
            name: name.to_vec(),
        })?;
        a.ctime = now_ns();
        g.set_attr(ino, a)
    }

    pub fn statfs(&self) -> StatFs {
        let g = self.inner.lock();
        let nodes = g.alloc.usage();
        StatFs {
            block_size: BLOCK_SIZE,
            total_blocks: nodes.iter().map(|u| u.total_blocks).sum(),
            free_blocks: nodes.iter().map(|u| u.free_blocks).sum(),
            files: g.meta.inodes.len() as u64,
            nodes,
        }
    }

    /// Bytes of `ino`'s range `offset..offset + len` stored on each node, clipped to the file
    /// size; holes are on no node and are left out. For per-node I/O accounting.
    pub fn range_nodes(&self, ino: u64, offset: u64, len: u64) -> Vec<(u32, u64)> {
        let g = self.inner.lock();
        let Ok(i) = g.inode(ino) else {
            return Vec::new();
        };
        let end = offset.saturating_add(len).min(i.attr.size);
        let mut out: Vec<(u32, u64)> = Vec::new();
        if offset >= end {
            return out;
        }
        let first = offset / BLOCK_SIZE;
        // Extents that start before the range may still cover its beginning.
        let start_key = i
            .extents
            .range(..=first)
            .next_back()
            .map_or(first, |(&l, _)| l);
        for (&l, e) in i.extents.range(start_key..) {
            let lo = (l * BLOCK_SIZE).max(offset);
            let hi = ((l + e.len) * BLOCK_SIZE).min(end);
            if l * BLOCK_SIZE >= end {
                break;
            }
            if hi <= lo {
                continue;
            }
            let node = g.alloc.node_of_dev(e.dev).unwrap_or(u32::MAX);
            match out.iter_mut().find(|(n, _)| *n == node) {
                Some(x) => x.1 += hi - lo,
                None => out.push((node, hi - lo)),
            }
        }
        out
    }

    /// Bytes of device data the store caches, per node (empty when it has no cache).
    pub fn cache_bytes(&self) -> Vec<(u32, u64)> {
        self.store.cache_bytes()
    }

    /// `(logical block, extent, node)` for every extent of `ino`.
    pub fn block_map(&self, ino: u64) -> Result<Vec<(u64, Extent, u32)>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        Ok(i.extents
            .iter()
            .map(|(&l, e)| (l, *e, g.alloc.node_of_dev(e.dev).unwrap_or(u32::MAX)))
            .collect())
    }

    /// A copy of the metadata (for tests and fsck).
    pub fn meta_snapshot(&self) -> Meta {
        self.inner.lock().meta.clone()
    }

    /// Reads the whole metadata of a volume without mounting it (nothing is written).
    pub fn load_meta(store: &dyn BlockStore) -> Result<(Header, Meta), FsError> {
        let header = Fs::check_labels(store)?;
        let rec = journal::recover(store, &header)?;
        Ok((header, rec.meta))
    }
}
