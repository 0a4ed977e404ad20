//! The per-inode locks of the data path.
//!
//! A read holds its inode's lock shared for the whole read, device I/O included; a write,
//! truncate, `fallocate` and whatever may free the inode's blocks (the unlink or release
//! that deletes it) hold it exclusively. So a read never sees blocks half written by a
//! write of the same file, and the blocks a read planned to read stay the file's until it
//! is done (freed blocks are handed out again only after a commit, and the free waits for
//! the read). Operations on different files take different locks and do their device I/O
//! side by side.
//!
//! The locks are a fixed table indexed by inode number: no allocation per inode and
//! nothing to clean up. Inode numbers are handed out in sequence, so files made together
//! fall on different locks; two inodes [`SHARDS`] apart share one, which only makes them
//! wait for each other. A thread holds at most one of these locks at a time, so sharing
//! cannot deadlock.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Locks in the table.
pub(super) const SHARDS: usize = 1024;

pub(super) struct InodeLocks {
    shards: Box<[RwLock<()>]>,
}

impl InodeLocks {
    pub(super) fn new() -> InodeLocks {
        InodeLocks {
            shards: (0..SHARDS).map(|_| RwLock::new(())).collect(),
        }
    }

    fn of(&self, ino: u64) -> &RwLock<()> {
        &self.shards[(ino % SHARDS as u64) as usize]
    }

    /// Shared: reading `ino`'s data.
    pub(super) fn read(&self, ino: u64) -> RwLockReadGuard<'_, ()> {
        self.of(ino).read()
    }

    /// Exclusive: changing `ino`'s data or block map.
    pub(super) fn write(&self, ino: u64) -> RwLockWriteGuard<'_, ()> {
        self.of(ino).write()
    }

    /// [`InodeLocks::write`] if no one holds the lock now.
    pub(super) fn try_write(&self, ino: u64) -> Option<RwLockWriteGuard<'_, ()>> {
        self.of(ino).try_write()
    }
}
