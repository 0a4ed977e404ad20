//! An in-memory store with hooks on its writes and syncs, for tests that count, slow down
//! or fail device I/O under the file system.
// Each test file uses the part it needs.
#![allow(dead_code)]

use numaio_fs::store::{BlockStore, DeviceInfo, MemStore};
use numaio_fs::FsError;
use std::sync::Arc;

type WriteHook = Box<dyn Fn(u16, u64, &[u8]) -> Result<(), FsError> + Send + Sync>;
type SyncHook = Box<dyn Fn(u16) + Send + Sync>;

/// [`MemStore`] `mem`, with `on_write` run before each write (its error fails the write)
/// and `on_sync` before each sync.
pub struct Hooked {
    pub mem: Arc<MemStore>,
    on_write: WriteHook,
    on_sync: SyncHook,
}

impl Hooked {
    pub fn new(mem: Arc<MemStore>) -> Hooked {
        Hooked {
            mem,
            on_write: Box::new(|_, _, _| Ok(())),
            on_sync: Box::new(|_| {}),
        }
    }

    pub fn on_write(
        mut self,
        f: impl Fn(u16, u64, &[u8]) -> Result<(), FsError> + Send + Sync + 'static,
    ) -> Hooked {
        self.on_write = Box::new(f);
        self
    }

    pub fn on_sync(mut self, f: impl Fn(u16) + Send + Sync + 'static) -> Hooked {
        self.on_sync = Box::new(f);
        self
    }
}

impl BlockStore for Hooked {
    fn devices(&self) -> &[DeviceInfo] {
        self.mem.devices()
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        self.mem.read_at(dev, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        (self.on_write)(dev, offset, data)?;
        self.mem.write_at(dev, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        (self.on_sync)(dev);
        self.mem.sync(dev)
    }
}
