//! The file system: [`Fs`], the API the FUSE layer and the tests call.
//!
//! One mutex guards the metadata, the allocator and the journal state: every operation is
//! atomic with respect to the others, which keeps the code simple and correct; data I/O is
//! done under it too. Commits are the exception: their device writes and syncs run outside
//! it (see below), so operations go on while a commit is in flight.
//!
//! Durability (see [`crate::journal`]): metadata changes become durable at the next commit;
//! `fsync` and `sync` of anything, a directory included, commit everything pending (as
//! ext4's journal does), which is at least what POSIX asks; a mount with a commit interval
//! also commits from a thread of its own every interval. Commits are grouped: one is written at a time, and syncs
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
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

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
/// The xattrs that hold POSIX ACLs. They are refused (EOPNOTSUPP, as ext4 mounted `noacl`
/// answers) rather than stored, since nothing would enforce them; any a volume already holds
/// are neither shown nor applied.
pub const POSIX_ACL_XATTRS: [&[u8]; 2] = [b"system.posix_acl_access", b"system.posix_acl_default"];
/// `fallocate` mode: remove the range, shifting what follows (not supported).
pub const FALLOC_COLLAPSE_RANGE: u32 = 8;
/// `fallocate` mode: zero the range, allocating it (with or without [`FALLOC_KEEP_SIZE`]).
pub const FALLOC_ZERO_RANGE: u32 = 0x10;
/// `fallocate` mode: insert a hole, shifting what follows (not supported).
pub const FALLOC_INSERT_RANGE: u32 = 0x20;
/// `lseek` whence: the next offset holding data.
pub const SEEK_DATA: u32 = 3;
/// `lseek` whence: the next offset in a hole (the end of the file counts as one).
pub const SEEK_HOLE: u32 = 4;
/// Blocks allocated per step of a large allocation: the metadata bound is reserved per
/// step, as a bound for all of a huge fallocate at once could exceed a checkpoint slot.
const FILL_STEP: u64 = 4096;
/// `setxattr` flag: fail if the attribute exists.
pub const XATTR_CREATE: u32 = 1;
/// `setxattr` flag: fail if the attribute does not exist.
pub const XATTR_REPLACE: u32 = 2;
/// Entries returned by one `readdir` call at most.
pub const READDIR_BATCH: usize = 1024;

/// The commit interval `numaio mount` uses unless told otherwise, in seconds (ext4's
/// `commit=` default).
pub const DEFAULT_COMMIT_SECS: u64 = 5;
/// The longest commit interval accepted, in seconds (one day).
pub const MAX_COMMIT_SECS: u64 = 86_400;
/// Estimated bytes of queued records past which a change first commits what is queued, so
/// the records waiting for an fsync that may never come (a `tar` of many files) and the
/// memory they hold stay bounded, as ext4 commits a transaction that grew large.
const PENDING_COMMIT_BYTES: u64 = 8 << 20;

/// How to mount.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MountOptions {
    /// Replay the journal in memory only and refuse every change: nothing is written.
    pub read_only: bool,
    /// Commit everything queued this often, from a thread the `Fs` owns (stopped at
    /// unmount and drop), so a crash loses at most about this much of work nobody synced.
    /// `None`: only `fsync`, `sync` and unmount commit. Set it with
    /// [`MountOptions::with_commit_secs`]; ignored on a read-only mount.
    pub commit_interval: Option<Duration>,
}

impl MountOptions {
    /// Commits every `secs` seconds, with ext4's `commit=` semantics: 0 means the default,
    /// [`DEFAULT_COMMIT_SECS`]; at most [`MAX_COMMIT_SECS`].
    pub fn with_commit_secs(mut self, secs: u64) -> Result<MountOptions, FsError> {
        if secs > MAX_COMMIT_SECS {
            return Err(FsError::Invalid(format!(
                "commit={secs}: the commit interval is at most {MAX_COMMIT_SECS} seconds; \
                 give a smaller one (0 means the default, {DEFAULT_COMMIT_SECS})"
            )));
        }
        let secs = if secs == 0 { DEFAULT_COMMIT_SECS } else { secs };
        self.commit_interval = Some(Duration::from_secs(secs));
        Ok(self)
    }
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
    /// `atime` is the current time the caller asked for (`UTIME_NOW`, `utimes(NULL)`), not a
    /// time of its choosing: setting both times to now needs only write permission.
    pub atime_now: bool,
    /// `mtime` is the current time the caller asked for (see `atime_now`).
    pub mtime_now: bool,
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
    /// Blocks allocatable now. Blocks freed by a change not yet committed are not among
    /// them until that commit is durable (at the latest the next periodic commit).
    pub free_blocks: u64,
    /// Inodes in use.
    pub files: u64,
    /// How many more inodes fit, an estimate on the low side: what limits inodes is each
    /// node's checkpoint slot ([`FREE_INODE_BYTES`] per inode).
    pub files_free: u64,
    pub nodes: Vec<NodeUsage>,
}

/// What mount found and did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MountInfo {
    pub checkpoint_seq: u64,
    pub replayed: u64,
    /// Unlinked inodes still open at the crash, freed at mount.
    pub orphans_freed: u64,
    /// The format version the volume had when this mount upgraded it to the current one.
    pub upgraded_from: Option<u32>,
}

struct Inner {
    meta: Meta,
    alloc: Allocator,
    journal: Journal,
    pending: Vec<Record>,
    /// Per node, a bound on the framed size of its checkpoint shard.
    meta_bytes: BTreeMap<u32, u64>,
    /// What the records since `meta_bytes` was last measured added to it: the bound only
    /// grows (a removal subtracts nothing), so `statfs` measures again after much of it.
    meta_growth: u64,
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

/// Checkpoint bytes counted per inode when [`StatFs::files_free`] is estimated: an empty
/// file with a name of about 60 bytes and its directory entry.
pub const FREE_INODE_BYTES: u64 = 160;

/// A mounted volume.
pub struct Fs {
    core: Arc<shared::FsCore>,
    /// The periodic commit thread ([`MountOptions::commit_interval`]).
    committer: Option<Committer>,
}

mod shared {
    use super::*;

    /// The state of a mounted volume, shared by [`Fs`] and its periodic commit thread.
    pub struct FsCore {
        pub(super) store: Arc<dyn BlockStore>,
        pub(super) read_only: bool,
        pub(super) info: MountInfo,
        pub(super) header: Header,
        pub(super) inner: Mutex<Inner>,
        /// Held while a commit is written: syncs arriving meanwhile wait here and are
        /// covered by the next single commit (group commit). Taken before `inner`, never
        /// after.
        pub(super) commit_lock: Mutex<()>,
        /// `Inner::gen` as of the newest durable commit.
        pub(super) durable_gen: AtomicU64,
        pub(super) sync_requests: AtomicU64,
        pub(super) data_only_syncs: AtomicU64,
        pub(super) periodic_commits: AtomicU64,
        pub(super) space_commits: AtomicU64,
    }
}

impl std::ops::Deref for Fs {
    type Target = shared::FsCore;

    fn deref(&self) -> &shared::FsCore {
        &self.core
    }
}

/// The thread that commits every interval; stopped and joined on drop.
struct Committer {
    every: Duration,
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Committer {
    fn start(core: Arc<shared::FsCore>, every: Duration) -> Result<Committer, FsError> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("numaio-fs-commit".into())
            .spawn(move || {
                let mut failing = false;
                loop {
                    {
                        let mut stopped = s.0.lock();
                        if !*stopped {
                            s.1.wait_for(&mut stopped, every);
                        }
                        if *stopped {
                            return;
                        }
                    }
                    match core.commit_all() {
                        Ok(_) => failing = false,
                        // Nobody waits on this commit: say so once, and try again at the
                        // next interval (the next fsync reports the error to its caller).
                        Err(e) if !failing => {
                            failing = true;
                            eprintln!(
                                "numaio-fs: the periodic commit failed: {e}; retrying every {} s",
                                every.as_secs_f64()
                            );
                        }
                        Err(_) => {}
                    }
                }
            })
            .map_err(|e| {
                FsError::Invalid(format!(
                    "starting the periodic commit thread failed ({e}): mount without a \
                     commit interval or free some threads"
                ))
            })?;
        Ok(Committer {
            every,
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        *self.stop.0.lock() = true;
        self.stop.1.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// How `fsync`, `fdatasync` and `sync` were served since mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SyncStats {
    /// Calls of [`Fs::fsync`], [`Fs::fsync_dir`] and [`Fs::sync`].
    pub requests: u64,
    /// Journal commits written (fewer than requests when concurrent syncs shared one).
    pub commits: u64,
    /// `fdatasync` calls served by syncing the file's data devices, without a commit.
    pub data_only: u64,
    /// Commits the periodic commit thread wrote.
    pub periodic: u64,
    /// Commits forced by an allocation that found no space while freed blocks waited for
    /// a commit.
    pub for_space: u64,
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
        Record::Map { .. }
        | Record::Unmap { .. }
        | Record::MapUnwritten { .. }
        | Record::MarkUnwritten { .. }
        | Record::MarkWritten { .. } => 32,
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

/// Permission bits `want` (4 read, 2 write, 1 search/execute) on `a` for `c`; root passes all
/// but executing a file nobody may execute.
fn access(a: &Attr, c: &Caller, want: u32) -> Result<(), FsError> {
    if c.uid == 0 {
        // Root too executes only what someone may execute (a directory it may always search).
        if want & 1 != 0 && a.kind != Kind::Dir && a.mode & 0o111 == 0 {
            return Err(FsError::Permission);
        }
        return Ok(());
    }
    let bits = if c.uid == a.uid {
        a.mode >> 6
    } else {
        let (group, other) = ((a.mode >> 3) & 7, a.mode & 7);
        // Supplementary groups are looked up only where the group's bits and the others'
        // answer differently.
        let differ = (group & want == want) != (other & want == want);
        if c.gid == a.gid || (differ && c.in_group(a.gid)) {
            group
        } else {
            other
        }
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(FsError::Permission)
    }
}

fn refuse_acl(name: &[u8]) -> Result<(), FsError> {
    if POSIX_ACL_XATTRS.contains(&name) {
        return Err(FsError::NotSupported(
            "POSIX ACLs (numaio-fs checks the mode bits only)".into(),
        ));
    }
    Ok(())
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
    /// permission on the directory; in a sticky one, owning the directory or the entry).
    fn entry_to_remove(&self, dir: u64, name: &[u8], c: &Caller) -> Result<Entry, FsError> {
        let a = self.dir_attr(dir)?;
        access(&a, c, 3)?;
        let e = self.entry(dir, name)?;
        self.check_sticky(&a, e.ino, c)?;
        Ok(e)
    }

    /// In a sticky directory `d` only root and the owners of `d` or of `ino` may remove or
    /// replace the entry of `ino`.
    fn check_sticky(&self, d: &Attr, ino: u64, c: &Caller) -> Result<(), FsError> {
        if d.mode & 0o1000 == 0 || c.uid == 0 || c.uid == d.uid || c.uid == self.attr(ino)?.uid {
            Ok(())
        } else {
            Err(FsError::NotPermitted)
        }
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
            | Record::MapUnwritten { ino, .. }
            | Record::MarkUnwritten { ino, .. }
            | Record::MarkWritten { ino, .. }
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
        self.meta_growth += g;
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
            // Blocks that show data (newly mapped or converted) need it durable first.
            Record::Map { ino, .. }
            | Record::Unmap { ino, .. }
            | Record::MarkWritten { ino, .. } => {
                self.ordered = true;
                self.datasync_gen.insert(*ino, gen);
            }
            // Unwritten blocks read as zeros whatever the device holds: nothing to order.
            Record::MapUnwritten { ino, .. } | Record::MarkUnwritten { ino, .. } => {
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
        self.measure_meta();
        self.meta_bytes.get(&node).copied().unwrap_or(0) + extra <= cap
    }

    /// Replaces the loose bound on every shard's size by its measured size.
    fn measure_meta(&mut self) {
        self.meta_bytes = journal::shard_sizes(&self.journal.header, &self.meta)
            .into_iter()
            .collect();
        self.meta_growth = 0;
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

    /// Allocates and maps logical blocks `lb..lb + n` of `ino` (all unmapped), as unwritten
    /// blocks when `unwritten`.
    fn allocate(
        &mut self,
        ino: u64,
        lb: u64,
        n: u64,
        c: &Caller,
        unwritten: bool,
    ) -> Result<(), FsError> {
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
            let (lblock, ext) = (l, a.extent);
            self.rec(if unwritten {
                Record::MapUnwritten { ino, lblock, ext }
            } else {
                Record::Map { ino, lblock, ext }
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

    /// Allocates every hole of `from..to` (as unwritten blocks when `unwritten`); returns
    /// the runs allocated.
    fn fill_holes(
        &mut self,
        ino: u64,
        from: u64,
        to: u64,
        c: &Caller,
        unwritten: bool,
    ) -> Result<Vec<(u64, u64)>, FsError> {
        let holes = self.holes(ino, from, to)?;
        let need: u64 = holes.iter().map(|h| h.1).sum();
        if need > self.free_blocks() {
            return Err(FsError::NoSpace);
        }
        self.reserve(200, &[ino])?;
        for &(l, n) in &holes {
            let mut done = 0;
            while done < n {
                let k = (n - done).min(FILL_STEP);
                self.reserve(k * 48 + 200, &[ino])?;
                self.allocate(ino, l + done, k, c, unwritten)?;
                done += k;
            }
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
        if opts.commit_interval.is_some_and(|d| d.is_zero()) {
            return Err(FsError::Invalid(
                "a commit interval of 0: give at least 1 second (MountOptions::with_commit_secs)"
                    .into(),
            ));
        }
        let (header, rec, alloc) = Fs::load(&*store)?;
        let nodes = alloc.nodes();
        let info = MountInfo {
            checkpoint_seq: rec.checkpoint_seq,
            replayed: rec.replayed,
            orphans_freed: 0,
            upgraded_from: None,
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
            meta_growth: 0,
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
        let mut core = shared::FsCore {
            store,
            read_only: opts.read_only,
            info,
            header,
            inner: Mutex::new(inner),
            commit_lock: Mutex::new(()),
            durable_gen: AtomicU64::new(0),
            sync_requests: AtomicU64::new(0),
            data_only_syncs: AtomicU64::new(0),
            periodic_commits: AtomicU64::new(0),
            space_commits: AtomicU64::new(0),
        };
        if info.orphans_freed > 0 {
            core.commit_locked(&mut core.inner.lock())?;
        }
        if !opts.read_only {
            core.info.upgraded_from = core.upgrade_format()?;
        }
        let core = Arc::new(core);
        let committer = match opts.commit_interval {
            Some(every) if !opts.read_only => Some(Committer::start(core.clone(), every)?),
            _ => None,
        };
        Ok(Fs { core, committer })
    }

    /// How often everything queued is committed without being asked, if at all.
    pub fn commit_interval(&self) -> Option<Duration> {
        self.committer.as_ref().map(|c| c.every)
    }

    /// The volume header (devices, geometry, default policy).
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// What mount found.
    pub fn mount_info(&self) -> MountInfo {
        self.info
    }

    /// Stops the periodic commits, commits, writes a checkpoint and gives the volume back.
    pub fn unmount(self) -> Result<(), FsError> {
        let Fs { core, committer } = self;
        drop(committer);
        if core.read_only {
            return Ok(());
        }
        let mut g = core.inner.lock();
        core.commit_locked(&mut g)?;
        let inner = &mut *g;
        let seq = inner.journal.seq;
        inner.journal.checkpoint(&*core.store, &inner.meta, seq)
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
            periodic: self.periodic_commits.load(Ordering::Relaxed),
            for_space: self.space_commits.load(Ordering::Relaxed),
        }
    }

    /// Runs `op` (an operation that allocates blocks); when it fails for want of space
    /// while blocks freed by uncommitted changes wait for a commit, commits (with the
    /// volume lock released: group commit) and runs it once more.
    fn retry_for_space<T>(&self, op: impl Fn() -> Result<T, FsError>) -> Result<T, FsError> {
        match op() {
            Err(FsError::NoSpace) => {
                let (waiting, ticket) = {
                    let g = self.inner.lock();
                    (g.alloc.frees_waiting(), g.gen)
                };
                if !waiting {
                    return Err(FsError::NoSpace);
                }
                self.space_commits.fetch_add(1, Ordering::Relaxed);
                self.commit_upto(ticket)?;
                op()
            }
            r => r,
        }
    }
}

impl shared::FsCore {
    /// Upgrades a volume of an older format version in place: the metadata is written as a
    /// checkpoint in the current layout, then the labels and header. Returns the version it
    /// had, `None` when it was current.
    fn upgrade_format(&self) -> Result<Option<u32>, FsError> {
        let v = crate::format::volume_version(&*self.store)?;
        if v >= crate::format::FORMAT_VERSION {
            return Ok(None);
        }
        let mut g = self.inner.lock();
        self.commit_locked(&mut g)?;
        // A newer sequence number than the old checkpoint's, so recovery prefers this one.
        let inner = &mut *g;
        let seq = inner.journal.seq + 1;
        inner.journal.checkpoint(&*self.store, &inner.meta, seq)?;
        crate::format::rewrite_labels(&*self.store, &self.header)?;
        Ok(Some(v))
    }

    /// Commits everything queued unless it is durable already (the periodic commit);
    /// whether a commit was needed.
    fn commit_all(&self) -> Result<bool, FsError> {
        let ticket = self.inner.lock().gen;
        if self.durable_gen.load(Ordering::Acquire) >= ticket {
            return Ok(false);
        }
        self.periodic_commits.fetch_add(1, Ordering::Relaxed);
        self.commit_upto(ticket)?;
        Ok(true)
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
}

impl Fs {
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
            if c.uid != 0 && (gid != a.gid && (c.uid != a.uid || !c.in_group(gid))) {
                return Err(FsError::NotPermitted);
            }
        }
        if (s.atime.is_some() || s.mtime.is_some()) && !owner {
            // As the VFS rules it: write permission lets anyone set both times to now (a
            // truncate's mtime comes with its size); any chosen time, or only one time
            // set to now, takes ownership.
            let now_only = s.atime.is_none_or(|_| s.atime_now)
                && s.mtime.is_none_or(|_| s.mtime_now)
                && ((s.atime.is_some() && s.mtime.is_some()) || s.size.is_some());
            if !now_only {
                return Err(FsError::NotPermitted);
            }
            if s.size.is_none() {
                access(&a, c, 2)?;
            }
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
            // As the VFS rules it: set-group-id only for a member of the file's group.
            if a.mode & 0o2000 != 0 && c.uid != 0 && !c.in_group(s.gid.unwrap_or(a.gid)) {
                a.mode &= !0o2000;
            }
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
        // An unwritten block reads as zeros whatever it holds.
        if let Some((dev, b)) = g.inode(ino)?.data_block(size / BLOCK_SIZE) {
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
            if let Some((dev, b)) = g.inode(ino)?.data_block(size / BLOCK_SIZE) {
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
            // A set-group-id directory gives its group to what is made in it, and the bit
            // to its subdirectories.
            mode: if kind == Kind::Dir && pa.mode & 0o2000 != 0 {
                mode & 0o7777 | 0o2000
            } else {
                mode & 0o7777
            },
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
        if src.kind == Kind::Dir && parent != newparent {
            // Its `..` changes: a directory moves to another parent only with write
            // permission on it.
            access(&g.attr(src.ino)?, c, 2)?;
        }
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
            g.check_sticky(&npa, t.ino, c)?;
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
            // Unwritten blocks read as zeros, like holes.
            let start = lb;
            let phys = i.data_block(lb);
            let mut count = 1;
            while (lb + count) * BLOCK_SIZE < end {
                let p = i.data_block(lb + count);
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
    /// policy for `c`'s node. Returns the bytes written (all of them). Out of space while
    /// freed blocks wait for a commit, it commits and tries once more.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
        self.retry_for_space(|| self.write_once(ino, offset, data, c))
    }

    fn write_once(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
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
        let fresh = g.fill_holes(ino, first, last, c, false)?;
        let i = g.inode(ino)?;
        // Blocks first written now (new or unwritten) are written whole: zeros around the
        // data, since they must read as zeros where the write does not reach.
        let unwritten: Vec<(u64, u64)> = i
            .unwritten
            .iter()
            .filter(|(&l, &n)| l < last && l + n > first)
            .map(|(&l, &n)| (l, n))
            .collect();
        if !unwritten.is_empty() {
            g.reserve(200, &[ino])?;
        }
        let blank = |lb: u64| {
            fresh
                .iter()
                .chain(&unwritten)
                .any(|&(l, n)| lb >= l && lb < l + n)
        };
        let i = g.inode(ino)?;
        // Physically contiguous runs of the range: `(first logical block, count, dev,
        // first physical block)`.
        let mut runs = Vec::new();
        let mut lb = first;
        while lb < last {
            let (l, e) = i
                .extents
                .range(..=lb)
                .next_back()
                .filter(|(&l, e)| lb < l + e.len)
                .map(|(&l, e)| (l, *e))
                .ok_or_else(|| bug(format!("inode {ino} block {lb} unmapped after allocation")))?;
            let n = (l + e.len).min(last) - lb;
            runs.push((lb, n, e.dev, e.start + (lb - l)));
            lb += n;
        }
        let bs = BLOCK_SIZE as usize;
        let mut edge = vec![0u8; bs];
        for (l, n, dev, pb) in runs {
            let lo = offset.max(l * BLOCK_SIZE);
            let hi = end.min((l + n) * BLOCK_SIZE);
            // Blocks the write covers whole go straight from the caller's buffer.
            let (wa, wb) = (lo.div_ceil(BLOCK_SIZE), hi / BLOCK_SIZE);
            if wa < wb {
                let src =
                    &data[(wa * BLOCK_SIZE - offset) as usize..(wb * BLOCK_SIZE - offset) as usize];
                self.store.write_at(dev, (pb + wa - l) * BLOCK_SIZE, src)?;
            }
            // At most two partly covered blocks, read (or zeroed) and merged.
            let mut partial = Vec::with_capacity(2);
            if !lo.is_multiple_of(BLOCK_SIZE) || wa >= wb {
                partial.push(lo / BLOCK_SIZE);
            }
            if !hi.is_multiple_of(BLOCK_SIZE) && (hi - 1) / BLOCK_SIZE != lo / BLOCK_SIZE {
                partial.push((hi - 1) / BLOCK_SIZE);
            }
            for b in partial {
                let boff = b * BLOCK_SIZE;
                let (blo, bhi) = (lo.max(boff), hi.min(boff + BLOCK_SIZE));
                let at = (pb + b - l) * BLOCK_SIZE;
                if blank(b) {
                    edge.fill(0);
                } else {
                    self.store.read_at(dev, at, &mut edge)?;
                }
                edge[(blo - boff) as usize..(bhi - boff) as usize]
                    .copy_from_slice(&data[(blo - offset) as usize..(bhi - offset) as usize]);
                self.store.write_at(dev, at, &edge)?;
            }
            g.data_dirty.insert(dev);
        }
        if !unwritten.is_empty() {
            g.rec(Record::MarkWritten {
                ino,
                from: first,
                to: last,
            })?;
        }
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

    /// Allocates (`mode` 0 or [`FALLOC_KEEP_SIZE`]: unwritten blocks, nothing is written),
    /// deallocates ([`FALLOC_PUNCH_HOLE`]`|`[`FALLOC_KEEP_SIZE`]) or zeroes
    /// ([`FALLOC_ZERO_RANGE`], with or without [`FALLOC_KEEP_SIZE`]: whole blocks become
    /// unwritten, partly covered ones are zeroed in place) `len` bytes at `offset`. Other
    /// modes (collapse, insert, unshare) are [`FsError::Unsupported`] (EOPNOTSUPP). Out of
    /// space while freed blocks wait for a commit, it commits and tries once more.
    pub fn fallocate(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        self.retry_for_space(|| self.fallocate_once(ino, offset, len, mode, c))
    }

    fn fallocate_once(
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
        let known = FALLOC_KEEP_SIZE | FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE;
        if mode & !known != 0 || mode & FALLOC_PUNCH_HOLE != 0 && mode & FALLOC_ZERO_RANGE != 0 {
            return Err(FsError::Unsupported(format!(
                "fallocate mode {mode:#x} (supported: 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, \
                 ZERO_RANGE, ZERO_RANGE|KEEP_SIZE)"
            )));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let now = now_ns();
        let keep = mode & FALLOC_KEEP_SIZE != 0;
        let (first, last) = (offset / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        // Blocks the range covers whole, and the partly covered ones at its edges.
        let (whole_a, whole_b) = (offset.div_ceil(BLOCK_SIZE), end / BLOCK_SIZE);
        let mut edges = vec![first];
        if end % BLOCK_SIZE != 0 {
            edges.push(end / BLOCK_SIZE);
        }
        edges.dedup();
        edges.retain(|&lb| lb < whole_a || lb >= whole_b);
        if mode & FALLOC_PUNCH_HOLE == 0 {
            if !keep && end > a.size {
                self.zero_tail(g, ino, a.size)?;
            }
            // Unwritten: allocated, nothing written, read as zeros until written.
            g.fill_holes(ino, first, last, c, true)?;
            if mode & FALLOC_ZERO_RANGE != 0 && whole_a < whole_b {
                g.reserve(200, &[ino])?;
                g.rec(Record::MarkUnwritten {
                    ino,
                    from: whole_a,
                    to: whole_b,
                })?;
            }
            a = g.attr(ino)?;
            if !keep && end > a.size {
                a.size = end;
                a.mtime = now;
            }
        } else {
            g.reserve(400, &[ino])?;
            if whole_a < whole_b {
                g.rec(Record::Unmap {
                    ino,
                    from: whole_a,
                    to: whole_b,
                })?;
            }
            a = g.attr(ino)?;
        }
        if mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE) != 0 {
            // Zero the partly covered blocks at the edges in place (holes and unwritten
            // blocks read as zeros already).
            for lb in edges {
                let boff = lb * BLOCK_SIZE;
                let lo = offset.max(boff) - boff;
                let hi = end.min(boff + BLOCK_SIZE) - boff;
                if let Some((d, b)) = g.inode(ino)?.data_block(lb) {
                    let mut buf = vec![0u8; BLOCK_SIZE as usize];
                    self.store.read_at(d, b * BLOCK_SIZE, &mut buf)?;
                    buf[lo as usize..hi as usize].fill(0);
                    write_blocks(&*self.store, &mut g.data_dirty, vec![(d, b, buf)])?;
                }
            }
            a.mtime = now;
        }
        a.ctime = now;
        g.set_attr(ino, a)
    }

    /// `lseek` with [`SEEK_DATA`] or [`SEEK_HOLE`] from `offset`: the first offset at or
    /// after it holding data, or in a hole (the end of the file is one). Unwritten blocks
    /// are holes. [`FsError::NoSuchOffset`] (ENXIO) at or past the end, or when no data
    /// follows.
    pub fn seek(&self, ino: u64, offset: u64, whence: u32) -> Result<u64, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        match i.attr.kind {
            Kind::Dir => return Err(FsError::IsDir),
            Kind::File => {}
            _ => return Err(FsError::Invalid("seek in a symlink or special file".into())),
        }
        let size = i.attr.size;
        if offset >= size {
            return Err(FsError::NoSuchOffset);
        }
        let lb = offset / BLOCK_SIZE;
        match whence {
            SEEK_DATA => match i.next_data(lb) {
                Some(d) if d.saturating_mul(BLOCK_SIZE) < size => Ok(offset.max(d * BLOCK_SIZE)),
                _ => Err(FsError::NoSuchOffset),
            },
            SEEK_HOLE => Ok(offset
                .max(i.next_hole(lb).saturating_mul(BLOCK_SIZE))
                .min(size)),
            w => Err(FsError::Invalid(format!(
                "seek whence {w} (the kernel serves SEEK_SET, SEEK_CUR and SEEK_END itself)"
            ))),
        }
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

    /// Makes the entries of directory `ino` durable (created, removed and renamed names):
    /// a global commit like [`Fs::fsync`]. The entries are the directory's data, so there
    /// is no data-only shortcut.
    pub fn fsync_dir(&self, ino: u64) -> Result<(), FsError> {
        if self.getattr(ino)?.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        self.fsync(ino, false)
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
        refuse_acl(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        // `user.` attributes take write permission, the owner's too (as the VFS rules).
        if name.starts_with(b"user.") || (c.uid != 0 && c.uid != a.uid) {
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
            crate::policy::check(&p, &g.nodes)?;
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
        if POSIX_ACL_XATTRS.contains(&name) {
            return Err(FsError::NoAttr);
        }
        i.xattrs.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        let mut out: Vec<Vec<u8>> = i
            .xattrs
            .keys()
            .filter(|n| !POSIX_ACL_XATTRS.contains(&n.as_slice()))
            .cloned()
            .collect();
        if i.attr.policy_set {
            out.push(PLACEMENT_XATTR.to_vec());
        }
        Ok(out)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        refuse_acl(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        // `user.` attributes take write permission, the owner's too (as the VFS rules).
        if name.starts_with(b"user.") || (c.uid != 0 && c.uid != a.uid) {
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
        let mut g = self.inner.lock();
        let nodes = g.alloc.usage();
        let cap = g.journal.slot_capacity();
        // Measuring costs an encode of the whole metadata: only once the bound may have
        // drifted by a sixteenth of a slot (thousands of files made and removed).
        if g.meta_growth > cap / 16 {
            g.measure_meta();
        }
        let files_free = g
            .meta_bytes
            .values()
            .map(|&b| cap.saturating_sub(b) / FREE_INODE_BYTES)
            .sum();
        StatFs {
            block_size: BLOCK_SIZE,
            total_blocks: nodes.iter().map(|u| u.total_blocks).sum(),
            free_blocks: nodes.iter().map(|u| u.free_blocks).sum(),
            files: g.meta.inodes.len() as u64,
            files_free,
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
