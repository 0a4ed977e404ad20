//! What the in-process mount tests share: a small in-memory volume and mounting it through
//! fuser in a chosen transport mode.

use numaio_fs::store::MemStore;
use numaio_fs::{Fs, MkfsOptions, MountOptions, PlacementPolicy};
use numaio_fuse::uring::{self, KernelSupport};
use numaio_fuse::{fuser, FuseMode, NumaFs, Transport};
use std::os::fd::AsFd;
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

/// Mounts `store` at `mnt` asking for `mode` (two serving threads on cloned fds); returns
/// the session, the transport handle and the mode the transport reports once started.
pub fn mount(
    store: &Arc<MemStore>,
    mnt: &Path,
    mode: FuseMode,
) -> (fuser::BackgroundSession, Transport, FuseMode) {
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount volume");
    // The canonical mount point, as the CLI passes it (the readahead window is found by it).
    let shown = mnt.canonicalize().expect("mount point");
    let nfs = NumaFs::with_mode(fs, mode).with_mountpoint(&shown.display().to_string());
    let t = nfs.transport();
    let mut cfg = fuser::Config::default();
    cfg.mount_options = vec![
        fuser::MountOption::FSName("numaio-test".into()),
        fuser::MountOption::Subtype("numaio".into()),
    ];
    cfg.n_threads = Some(2);
    cfg.clone_fd = true;
    let session = fuser::Session::new(nfs, mnt, &cfg).expect("FUSE mount");
    let started = t.start(session.as_fd()).expect("starting the rings");
    let bg = session.spawn().expect("spawn");
    (bg, t, started)
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
