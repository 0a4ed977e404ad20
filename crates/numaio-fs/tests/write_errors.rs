//! A write whose device I/O fails leaves no blocks mapped that its data never reached: the
//! file reads zeros there (never what the device held before), the space comes back, and
//! the volume stays consistent across a remount.

use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::store::MemStore;
use numaio_fs::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod hooked;
use hooked::Hooked;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const BS: u64 = BLOCK_SIZE;

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

/// A volume whose device writes fail once as many more as the counter says have
/// succeeded (`u64::MAX`: never fail).
fn vol() -> (Arc<MemStore>, Arc<AtomicU64>, Fs) {
    let mem = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fail_after = Arc::new(AtomicU64::new(u64::MAX));
    let left = fail_after.clone();
    let store = Hooked::new(mem.clone()).on_write(move |_, offset, data| {
        match left.load(Ordering::SeqCst) {
            0 => Err(FsError::io(
                "failing-test-device",
                format!("writing {} bytes at {offset}", data.len()),
                std::io::Error::from_raw_os_error(libc::EIO),
            )),
            u64::MAX => Ok(()),
            n => {
                left.store(n - 1, Ordering::SeqCst);
                Ok(())
            }
        }
    });
    let fs = Fs::mount(Arc::new(store), MountOptions::default()).unwrap();
    (mem, fail_after, fs)
}

fn free_blocks(fs: &Fs) -> u64 {
    fs.statfs().free_blocks
}

#[test]
fn a_failed_write_into_a_hole_leaves_the_hole() {
    let (mem, fail_after, fs) = vol();
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
        fail_after.store(after, Ordering::SeqCst);
        let e = fs
            .write(f, 3 * BS + 100, &vec![0x11; (20 * BS) as usize], &root())
            .unwrap_err();
        fail_after.store(u64::MAX, Ordering::SeqCst);
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
