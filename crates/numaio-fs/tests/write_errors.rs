//! A write whose device I/O fails leaves no blocks mapped that its data never reached: the
//! file reads zeros there (never what the device held before), the space comes back, and
//! the volume stays consistent across a remount.

use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::store::{BlockStore, DeviceInfo, MemStore};
use numaio_fs::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const BS: u64 = BLOCK_SIZE;

/// A store whose data writes fail once `fail_after` more of them have succeeded
/// (`u64::MAX`: never).
struct Failing {
    inner: Arc<MemStore>,
    fail_after: AtomicU64,
}

impl Failing {
    fn fail_after(&self, n: u64) {
        self.fail_after.store(n, Ordering::SeqCst);
    }
}

impl BlockStore for Failing {
    fn devices(&self) -> &[DeviceInfo] {
        self.inner.devices()
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        self.inner.read_at(dev, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let left = self.fail_after.load(Ordering::SeqCst);
        if left == 0 {
            return Err(FsError::io(
                "failing-test-device",
                format!("writing {} bytes at {offset}", data.len()),
                std::io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        if left != u64::MAX {
            self.fail_after.store(left - 1, Ordering::SeqCst);
        }
        self.inner.write_at(dev, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        self.inner.sync(dev)
    }
}

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    }
}

fn root() -> Caller {
    Caller::root_on(0)
}

fn vol() -> (Arc<MemStore>, Arc<Failing>, Fs) {
    let mem = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let store = Arc::new(Failing {
        inner: mem.clone(),
        fail_after: AtomicU64::new(u64::MAX),
    });
    let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
    (mem, store, fs)
}

fn free_blocks(fs: &Fs) -> u64 {
    fs.statfs().free_blocks
}

#[test]
fn a_failed_write_into_a_hole_leaves_the_hole() {
    let (mem, store, fs) = vol();
    // Data a deleted file left on the devices.
    let old = fs.create(ROOT, b"old", 0o644, &root()).unwrap().ino;
    fs.write(old, 0, &vec![0xEE; (32 * BS) as usize], &root())
        .unwrap();
    fs.sync().unwrap();
    fs.unlink(ROOT, b"old", &root()).unwrap();
    fs.sync().unwrap();

    // A sparse file, then a write into its hole whose device writes fail partway.
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let size = SetAttr {
        size: Some(64 * BS),
        ..SetAttr::default()
    };
    fs.setattr(f, &size, &root()).unwrap();
    fs.sync().unwrap();
    let free = free_blocks(&fs);
    for after in [0, 1] {
        store.fail_after(after);
        let e = fs
            .write(f, 3 * BS + 100, &vec![0x11; (20 * BS) as usize], &root())
            .unwrap_err();
        store.fail_after(u64::MAX);
        assert_eq!(e.errno(), libc::EIO, "{e}");
        assert!(
            fs.block_map(f).unwrap().is_empty(),
            "blocks stay mapped after a failed write (fail after {after})"
        );
        assert_eq!(fs.getattr(f).unwrap().blocks, 0);
        let mut buf = vec![0xAAu8; (64 * BS) as usize];
        assert_eq!(fs.read(f, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&b| b == 0), "the hole reads zeros");
    }
    fs.sync().unwrap();
    assert_eq!(
        free_blocks(&fs),
        free,
        "the failed writes' blocks came back"
    );

    // A write that works afterwards, and a clean volume across a remount.
    fs.write(f, 0, b"ok", &root()).unwrap();
    fs.unmount().unwrap();
    let r = fsck(&*mem, &FsckOptions { repair: false }).unwrap();
    assert_eq!(r.exit_code(), 0, "{:?}", r.errors);
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let mut buf = vec![0xAAu8; (64 * BS) as usize];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), buf.len());
    assert_eq!(&buf[..2], b"ok");
    assert!(buf[2..].iter().all(|&b| b == 0));
    fs.unmount().unwrap();
}
