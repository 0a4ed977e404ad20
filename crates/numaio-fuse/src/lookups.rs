//! The kernel's references to the volume's inodes: its lookup count per inode, as the FUSE
//! protocol defines it. Every reply that hands the kernel an inode (LOOKUP, CREATE, MKDIR,
//! MKNOD, SYMLINK, LINK, each READDIRPLUS entry but `.` and `..`) adds one; FORGET takes
//! back what the kernel says it dropped. The kernel keeps an inode while anything of it is
//! in use (an open file, a mapping, a cwd, a cached name), so an inode it still counts is
//! one the volume must not free.
//!
//! That makes the lookup count, not OPEN and RELEASE, what keeps an unlinked file alive: a
//! volume inode is held ([`Fs::open`]) while the kernel counts it and let go
//! ([`Fs::release`]) when the count falls to zero, and the volume frees an unlinked inode
//! when the last hold goes. With that the server needs no per-open state, and the mount can
//! let the kernel skip OPEN and RELEASE altogether (`FUSE_NO_OPEN_SUPPORT`).
//!
//! Directories are not counted: a removed directory holds no data, and the volume frees it
//! at rmdir (an open handle or a working directory inside it then finds nothing, as before
//! the kernel's count was kept), which saves a hold and a release per directory.
//!
//! A reply the kernel never took (the request was interrupted) leaves its count one too
//! high: the inode is then freed at unmount ([`Lookups::forget_all`]) or, after a crash, as
//! an orphan at the next mount, never early.

use numaio_fs::meta::Kind;
use numaio_fs::Fs;
use std::collections::HashMap;
use std::sync::Mutex;

/// Shards of the count table: lookups of different inodes rarely share a lock.
const SHARDS: usize = 16;

/// Lookup counts of the inodes the kernel holds.
pub(crate) struct Lookups {
    shards: [Mutex<HashMap<u64, u64>>; SHARDS],
}

impl Default for Lookups {
    fn default() -> Self {
        Lookups {
            shards: std::array::from_fn(|_| Mutex::new(HashMap::new())),
        }
    }
}

impl Lookups {
    fn shard(&self, ino: u64) -> std::sync::MutexGuard<'_, HashMap<u64, u64>> {
        // A poisoned shard only means a panic elsewhere while it was held; its counts are
        // still whole numbers, each change made under the lock in one step.
        self.shards[(ino as usize) % SHARDS]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Counts one more kernel reference to `ino`, about to be handed to the kernel; the
    /// first one holds the inode in `fs`. Called before the reply is sent, so a FORGET
    /// can never arrive for a count not yet made.
    pub(crate) fn remember(&self, fs: &Fs, ino: u64, kind: Kind) -> Result<(), numaio_fs::FsError> {
        if kind == Kind::Dir {
            return Ok(());
        }
        let mut s = self.shard(ino);
        let n = s.entry(ino).or_insert(0);
        if *n == 0 {
            // Under the shard's lock, so a concurrent FORGET of the same inode cannot
            // release a hold this has not taken yet.
            if let Err(e) = fs.open(ino) {
                s.remove(&ino);
                return Err(e);
            }
        }
        *s.get_mut(&ino).expect("inserted above") += 1;
        Ok(())
    }

    /// The kernel dropped `n` references to `ino`; the last lets the inode go (an unlinked
    /// one is freed). A FORGET for more than was counted (a kernel bug, or a server that
    /// restarted) ends the count at zero.
    pub(crate) fn forget(&self, fs: &Fs, ino: u64, n: u64) {
        let mut s = self.shard(ino);
        let Some(c) = s.get_mut(&ino) else {
            return;
        };
        *c = c.saturating_sub(n);
        if *c > 0 {
            return;
        }
        s.remove(&ino);
        // Outside the shard's lock: freeing waits for the file's reads and writes in flight.
        // A lookup of the inode meanwhile takes a hold of its own first (the volume counts
        // holds), and an unlinked inode has no name left to be looked up by.
        drop(s);
        if let Err(e) = fs.release(ino) {
            eprintln!("numaio mount: releasing inode {ino} after the kernel forgot it: {e}");
        }
    }

    /// Lets every inode go: the kernel sends no FORGET when it unmounts, and nothing of
    /// the mount can be in use after DESTROY.
    pub(crate) fn forget_all(&self, fs: &Fs) {
        for shard in &self.shards {
            let held: Vec<u64> = {
                let mut s = shard.lock().unwrap_or_else(|p| p.into_inner());
                s.drain().map(|(ino, _)| ino).collect()
            };
            for ino in held {
                if let Err(e) = fs.release(ino) {
                    eprintln!("numaio mount: releasing inode {ino} at unmount: {e}");
                }
            }
        }
    }

    /// Inodes the kernel holds now.
    #[cfg(test)]
    fn held(&self) -> u64 {
        self.shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(|p| p.into_inner()).len() as u64)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numaio_fs::meta::ROOT_INO;
    use numaio_fs::store::MemStore;
    use numaio_fs::{Caller, MkfsOptions, MountOptions, PlacementPolicy};
    use std::sync::Arc;

    fn fs() -> Fs {
        let s = Arc::new(MemStore::new(&[(0, 16 << 20)]));
        let o = MkfsOptions::sized(
            &[(16 << 20, 0)],
            PlacementPolicy::WriterLocal,
            None,
            None,
            None,
        );
        Fs::mkfs(&*s, &o).unwrap();
        Fs::mount(s, MountOptions::default()).unwrap()
    }

    fn files_in_use(fs: &Fs) -> u64 {
        fs.statfs().files
    }

    #[test]
    fn an_unlinked_inode_lives_until_the_kernel_forgets_its_last_lookup() {
        let fs = fs();
        let l = Lookups::default();
        let c = Caller::root_on(0);
        let a = fs.create(ROOT_INO, b"f", 0o644, &c).unwrap();
        fs.write(a.ino, 0, b"kept", &c).unwrap();
        // Handed to the kernel twice (the CREATE, a LOOKUP), then unlinked.
        l.remember(&fs, a.ino, Kind::File).unwrap();
        l.remember(&fs, a.ino, Kind::File).unwrap();
        let used = files_in_use(&fs);
        fs.unlink(ROOT_INO, b"f", &c).unwrap();
        assert_eq!(files_in_use(&fs), used, "freed while the kernel holds it");
        let mut buf = [0u8; 4];
        assert_eq!(fs.read(a.ino, 0, &mut buf).unwrap(), 4);
        assert_eq!(&buf, b"kept");
        // One of two references dropped: still held.
        l.forget(&fs, a.ino, 1);
        assert_eq!(files_in_use(&fs), used);
        assert_eq!(l.held(), 1);
        // The last one: freed.
        l.forget(&fs, a.ino, 1);
        assert_eq!(files_in_use(&fs), used - 1);
        assert_eq!(l.held(), 0);
        assert!(fs.getattr(a.ino).is_err());
        // A FORGET of an inode not counted (or counted already) changes nothing.
        l.forget(&fs, a.ino, 5);
        assert_eq!(l.held(), 0);
    }

    #[test]
    fn a_linked_inode_forgotten_stays_and_can_be_remembered_again() {
        let fs = fs();
        let l = Lookups::default();
        let c = Caller::root_on(0);
        let a = fs.create(ROOT_INO, b"f", 0o644, &c).unwrap();
        l.remember(&fs, a.ino, Kind::File).unwrap();
        // More than counted: ends at zero, never below.
        l.forget(&fs, a.ino, 3);
        assert_eq!(fs.getattr(a.ino).unwrap().nlink, 1);
        l.remember(&fs, a.ino, Kind::File).unwrap();
        assert_eq!(l.held(), 1);
        // Unlinked while held, then the unmount lets everything go: freed.
        let used = files_in_use(&fs);
        fs.unlink(ROOT_INO, b"f", &c).unwrap();
        assert_eq!(files_in_use(&fs), used);
        l.forget_all(&fs);
        assert_eq!(l.held(), 0);
        assert_eq!(files_in_use(&fs), used - 1);
    }

    #[test]
    fn directories_are_not_counted_and_go_at_rmdir() {
        let fs = fs();
        let l = Lookups::default();
        let c = Caller::root_on(0);
        let d = fs.mkdir(ROOT_INO, b"d", 0o755, &c).unwrap();
        l.remember(&fs, d.ino, Kind::Dir).unwrap();
        assert_eq!(l.held(), 0);
        let used = files_in_use(&fs);
        fs.rmdir(ROOT_INO, b"d", &c).unwrap();
        assert_eq!(files_in_use(&fs), used - 1);
        l.forget(&fs, d.ino, 1);
        assert_eq!(files_in_use(&fs), used - 1);
    }

    #[test]
    fn remembering_an_inode_that_is_gone_fails_and_counts_nothing() {
        let fs = fs();
        let l = Lookups::default();
        assert!(l.remember(&fs, 999_999, Kind::File).is_err());
        assert_eq!(l.held(), 0);
    }
}
