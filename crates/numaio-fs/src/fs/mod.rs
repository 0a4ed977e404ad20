//! The file system: [`Fs`], the API the FUSE layer and the tests call.
//!
//! By concern: `mount.rs` (mount, unmount, format upgrade, the periodic commit thread),
//! `commit.rs` (group commit, checkpoints, fsync), `names.rs` (lookup, create, link, unlink,
//! rename, readdir), `attrs.rs` (getattr, setattr, permission checks), `data.rs` (open,
//! release, read, write, fallocate, seek), `xattr.rs`, `stat.rs` (statfs, per-node ranges,
//! block maps), `inner.rs` (the volume state and its change records), `overwrites.rs` (blocks
//! overwritten in place, which a commit syncing their file orders), `locks.rs` (the
//! per-inode locks).
//!
//! Locks, always taken in this order, none of them held across device I/O except the
//! first two, which only order the data path:
//! 1. an inode's lock (`locks.rs`), at most one per thread: shared by a read for the whole
//!    read, exclusive for a write, truncate, fallocate, or the unlink, rename or release
//!    that frees the inode's blocks;
//! 2. the data gate (`FsCore::gate`), shared by a write, truncate or fallocate from its
//!    planning until its device writes are done and its records queued, exclusive for the
//!    moment a commit takes what is queued;
//! 3. `inner`, the volume state (metadata, journal position, queued records), held only to
//!    plan an operation and to queue its records: never during device I/O;
//! 4. the allocator's own locks (`crate::alloc`): one per node for its free space, one
//!    for the per-file sequential detection, never two of them at once and never with
//!    anything taken after them. A write or fallocate finds its holes under `inner`,
//!    releases it while the allocator chooses the blocks (so writers on different nodes do
//!    not wait for each other or for the volume lock to get blocks), and takes it again to
//!    queue the mapping; the inode's lock keeps the file's block map as found meanwhile,
//!    and the gate keeps a commit out. Frees (through the records under `inner`), and the
//!    commit's sealing and release of them, still run under `inner`, so a commit seals one
//!    instant's frees of all nodes.
//!
//! `commit_lock` (one commit written at a time) comes before the gate and `inner`, and is
//! never taken with an inode lock or the gate held: a change that must commit first
//! (queued records past a bound, out of space while frees wait) does so before locking.
//! So lookups, getattr, readdir and statfs wait for no device, reads and writes of
//! different files run their I/O side by side, and a commit blocks operations only while
//! it takes the queue (and encodes a checkpoint, when one is due), not while it writes.
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
use parking_lot::{Condvar, Mutex, MutexGuard, RwLock, RwLockWriteGuard};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod attrs;
mod commit;
mod data;
mod inner;
mod locks;
mod mount;
mod names;
mod overwrites;
mod stat;
mod xattr;

use attrs::{access, to_attr};
use inner::{bug, Inner};
use mount::Committer;
use stat::range_nodes_in;
pub use xattr::xattr_entry_bytes;

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
        /// The block allocator (`Inner::alloc` is the same one): writes take blocks from
        /// it with `inner` released. Its locks come after all the others (see the lock
        /// order above).
        pub(super) alloc: Arc<Allocator>,
        /// Held while a commit is written: syncs arriving meanwhile wait here and are
        /// covered by the next single commit (group commit). Taken before `inner`, never
        /// after. It holds the pace of recent commits (see [`super::commit::Pace`]).
        pub(super) commit_lock: Mutex<super::commit::Pace>,
        /// Notified (with `inner`) when the last hold of an unlinked inode goes and its
        /// blocks wait for a commit: an allocation short of room waits on it.
        pub(super) released: Condvar,
        /// Held shared by a data operation (write, truncate, fallocate) from its planning
        /// until its device writes are done and its records queued; a commit holds it
        /// exclusively while it takes what is queued, so it never makes a record durable
        /// before the data that record exposes. Taken after an inode lock and before
        /// `inner`.
        pub(super) gate: RwLock<()>,
        /// The per-inode locks of the data path (`locks.rs`). Taken before the gate
        /// and `inner`; at most one per thread.
        pub(super) inodes: super::locks::InodeLocks,
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
