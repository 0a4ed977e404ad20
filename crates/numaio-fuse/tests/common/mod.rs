// Each test crate uses some of these helpers.
#![allow(dead_code)]

//! What the in-process mount tests share: a small in-memory volume and mounting it with
//! `numaio_fuse::mount`, as `numaio mount` does, in a chosen transport mode.

use numaio_fs::store::MemStore;
use numaio_fs::{Fs, MkfsOptions, MountOptions, PlacementPolicy};
use numaio_fuse::uring::{self, KernelSupport};
use numaio_fuse::{FuseMode, Mount, MountConfig, Transport, TransportChoice};
use std::path::Path;
use std::sync::Arc;

pub const MIB: u64 = 1 << 20;

/// A fresh writer-local volume over two 16 MiB in-memory devices on node 0.
pub fn volume() -> Arc<MemStore> {
    let s = Arc::new(MemStore::new(&[(0, 16 * MIB), (0, 16 * MIB)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 64,
        checkpoint_blocks: 64,
    };
    Fs::mkfs(&*s, &o).expect("mkfs");
    s
}

/// The tests' mount configuration in `mode` (file system name `numaio-test`).
pub fn config(mode: FuseMode) -> MountConfig {
    let t = match mode {
        FuseMode::Classic => TransportChoice::Classic,
        FuseMode::IoUring => TransportChoice::IoUring,
    };
    MountConfig::new()
        .with_transport(t)
        .with_fs_name("numaio-test")
        .expect("file system name")
}

/// Mounts `store` at `mnt` asking for `mode`; returns the mount, its transport handle and
/// the mode the mount serves in.
pub fn mount(store: &Arc<MemStore>, mnt: &Path, mode: FuseMode) -> (Mount, Transport, FuseMode) {
    mount_with(store, mnt, &config(mode))
}

/// [`mount`] with a configuration of the test's own.
pub fn mount_with(
    store: &Arc<MemStore>,
    mnt: &Path,
    cfg: &MountConfig,
) -> (Mount, Transport, FuseMode) {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    let m = numaio_fuse::mount(fs, mnt, cfg).expect("FUSE mount");
    let (t, mode) = (m.transport(), m.mode());
    (m, t, mode)
}

/// Root, /dev/fuse, FUSE over io_uring turned on (as root, turned on here if off; the
/// switch is left on, as `numaio mount --fuse-mode io-uring` leaves it) and a usable ring.
pub fn uring_ready() -> Result<(), String> {
    if !numaio_testkit::is_root() || !Path::new("/dev/fuse").exists() {
        return Err("root and /dev/fuse".into());
    }
    match uring::kernel_support() {
        KernelSupport::Missing => {
            return Err("kernel without CONFIG_FUSE_IO_URING (Linux 6.14+)".into())
        }
        KernelSupport::Disabled => uring::enable_in_kernel()
            .map_err(|e| format!("cannot set {}: {e}", uring::ENABLE_URING))?,
        KernelSupport::Enabled => {}
    }
    uring::probe_ring().map_err(|e| format!("cannot create a ring: {e}"))
}
