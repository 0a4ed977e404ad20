//! Mounting a volume: the FUSE session, the transport (classic or io_uring), the serving
//! threads bound to their nodes, and the unmount that flushes the volume.

use crate::classic::Classic;
use crate::uring::{self, KernelSupport};
use crate::{stats, FuseMode, Observer, RequestCounts, Transport};
use numaio_fs::Fs;
use numaio_numa::moves::MoveWork;
use std::fmt;
use std::io;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};
use std::time::Duration;

/// Which transport a mount asks the kernel for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TransportChoice {
    /// io_uring where the kernel has it turned on and rings can be made, else classic.
    #[default]
    Auto,
    /// `/dev/fuse` only.
    Classic,
    /// io_uring or fail: the kernel must have it turned on
    /// ([`uring::enable_in_kernel`] turns it on).
    IoUring,
}

/// How to mount: built with the `with_*` methods, each checking its value.
#[derive(Debug, Clone)]
pub struct MountConfig {
    transport: TransportChoice,
    threads_per_node: usize,
    uring_depth: usize,
    allow_other: bool,
    default_permissions: bool,
    read_only: bool,
    fs_name: String,
    subtype: String,
    move_work: Option<(MoveWork, bool)>,
    writeback_cache: bool,
    seek_holes: bool,
    local_wakeups: bool,
}

impl Default for MountConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl MountConfig {
    /// Serving threads per NUMA node unless set: enough that requests waiting for their
    /// devices (one each) do not hold up the others of a node's busy threads.
    pub const DEFAULT_THREADS_PER_NODE: usize = 8;
    /// Serving threads per node at most.
    pub const MAX_THREADS_PER_NODE: usize = 256;

    /// Automatic transport, [`MountConfig::DEFAULT_THREADS_PER_NODE`] serving threads per
    /// node, [`uring::DEFAULT_DEPTH`] ring entries per queue, read-write, only the mounting
    /// user, the server checking permissions, file system name `numaio`, subtype `numaio`.
    pub fn new() -> MountConfig {
        MountConfig {
            transport: TransportChoice::Auto,
            threads_per_node: Self::DEFAULT_THREADS_PER_NODE,
            uring_depth: uring::DEFAULT_DEPTH,
            allow_other: false,
            default_permissions: false,
            read_only: false,
            fs_name: "numaio".into(),
            subtype: "numaio".into(),
            move_work: None,
            writeback_cache: false,
            seek_holes: true,
            local_wakeups: true,
        }
    }

    /// The transport to ask for.
    pub fn with_transport(mut self, t: TransportChoice) -> MountConfig {
        self.transport = t;
        self
    }

    /// Serving threads per NUMA node (1 to [`MountConfig::MAX_THREADS_PER_NODE`]), in
    /// either transport: each serves one request at a time, so this bounds the requests of
    /// a node served at once.
    pub fn with_threads_per_node(mut self, n: usize) -> Result<MountConfig, MountError> {
        if !(1..=Self::MAX_THREADS_PER_NODE).contains(&n) {
            return Err(MountError::Config(format!(
                "serving threads per node {n}: give 1 to {}",
                Self::MAX_THREADS_PER_NODE
            )));
        }
        self.threads_per_node = n;
        Ok(self)
    }

    /// Ring entries per io_uring queue (1 to [`uring::MAX_DEPTH`]): the requests issued on
    /// one CPU that can be in the server at once.
    pub fn with_uring_depth(mut self, depth: usize) -> Result<MountConfig, MountError> {
        if !(1..=uring::MAX_DEPTH).contains(&depth) {
            return Err(MountError::Config(format!(
                "io_uring depth {depth}: give 1 to {}",
                uring::MAX_DEPTH
            )));
        }
        self.uring_depth = depth;
        Ok(self)
    }

    /// Lets users other than the mounting one in. Without default permissions the server
    /// then checks their permissions itself (and the kernel caches no names).
    pub fn with_allow_other(mut self, on: bool) -> MountConfig {
        self.allow_other = on;
        self
    }

    /// Has the kernel check the mode bits.
    pub fn with_default_permissions(mut self, on: bool) -> MountConfig {
        self.default_permissions = on;
        self
    }

    /// Mounts read-only (the volume should be mounted read-only too).
    pub fn with_read_only(mut self, on: bool) -> MountConfig {
        self.read_only = on;
        self
    }

    /// The mount's source as the mount table shows it (a device path, say).
    pub fn with_fs_name(mut self, name: &str) -> Result<MountConfig, MountError> {
        self.fs_name = option_value("file system name", name)?;
        Ok(self)
    }

    /// The subtype: the mount table shows the type as `fuse.SUBTYPE`.
    pub fn with_subtype(mut self, subtype: &str) -> Result<MountConfig, MountError> {
        self.subtype = option_value("subtype", subtype)?;
        Ok(self)
    }

    /// Moves requesting threads to their data (`MigrateThread` or `FirstReader`) with the
    /// engine's default hysteresis; `override_user_affinity` also moves threads whose
    /// affinity someone else narrowed.
    pub fn with_move_work(mut self, mode: MoveWork, override_user_affinity: bool) -> MountConfig {
        self.move_work = Some((mode, override_user_affinity));
        self
    }

    /// Asks the kernel for its writeback cache (`FUSE_WRITEBACK_CACHE`): buffered writes
    /// stay in the mount's page cache and reach the volume as the kernel writes pages back
    /// (at the latest by fsync, close or unmount), and the kernel keeps the file's size,
    /// mtime and ctime, sending them in SETATTR. Needs default permissions: the kernel
    /// sends the times it keeps as chosen times, which only its own permission checks tell
    /// apart from a user's.
    pub fn with_writeback_cache(mut self, on: bool) -> MountConfig {
        self.writeback_cache = on;
        self
    }

    /// Whether SEEK_DATA/SEEK_HOLE report the volume's holes (on unless turned off). Each
    /// such lseek is then a round trip to the server, as the kernel cannot know the holes.
    /// Off, the server answers LSEEK with ENOSYS once and the kernel answers every later
    /// one itself, from the file's size (all data, no holes, as lseek(2) allows), for the
    /// whole mount: it remembers ENOSYS per connection.
    pub fn with_seek_holes(mut self, on: bool) -> MountConfig {
        self.seek_holes = on;
        self
    }

    /// Whether an io_uring ring thread keeps the callers it answers on its CPU (on unless
    /// turned off; the classic transport has no such thread). The thread waits and hands
    /// requests on under `SCHED_IDLE`, so the scheduler counts its CPU as idle and wakes
    /// the caller there instead of on another CPU, and it serves under its normal policy.
    /// Where the thread may not return from `SCHED_IDLE` (no `CAP_SYS_NICE` and a nice
    /// value below what `RLIMIT_NICE` allows) it stays under its normal policy.
    pub fn with_local_wakeups(mut self, on: bool) -> MountConfig {
        self.local_wakeups = on;
        self
    }

    pub fn transport(&self) -> TransportChoice {
        self.transport
    }
    pub fn threads_per_node(&self) -> usize {
        self.threads_per_node
    }
    pub fn uring_depth(&self) -> usize {
        self.uring_depth
    }
    pub fn allow_other(&self) -> bool {
        self.allow_other
    }
    pub fn default_permissions(&self) -> bool {
        self.default_permissions
    }
    pub fn read_only(&self) -> bool {
        self.read_only
    }
    pub fn fs_name(&self) -> &str {
        &self.fs_name
    }
    pub fn writeback_cache(&self) -> bool {
        self.writeback_cache
    }
    pub fn seek_holes(&self) -> bool {
        self.seek_holes
    }
    pub fn local_wakeups(&self) -> bool {
        self.local_wakeups
    }
}

/// A mount option's value travels in a comma-separated list to the kernel.
fn option_value(what: &str, v: &str) -> Result<String, MountError> {
    if v.is_empty() || v.contains([',', '\0']) {
        return Err(MountError::Config(format!(
            "{what} {v:?}: give a non-empty name without commas or NUL bytes"
        )));
    }
    Ok(v.to_string())
}

/// Why a mount failed or did not end cleanly.
#[derive(Debug)]
pub enum MountError {
    /// A configuration value out of range.
    Config(String),
    /// io_uring was asked for and the kernel or this process cannot use it.
    UringUnavailable(String),
    /// The kernel refused the mount (needs root or access to /dev/fuse).
    Mount {
        mountpoint: PathBuf,
        source: io::Error,
    },
    /// io_uring was asked for and INIT did not accept it.
    UringRefused { mountpoint: PathBuf },
    /// io_uring was asked for and its queues could not be registered.
    UringStart {
        mountpoint: PathBuf,
        source: io::Error,
    },
    /// Starting, serving or ending the session failed.
    Session {
        mountpoint: PathBuf,
        source: io::Error,
    },
}

impl fmt::Display for MountError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MountError::Config(m) => write!(f, "{m}"),
            MountError::UringUnavailable(m) => write!(
                f,
                "FUSE over io_uring is not available: {m}: use the classic or automatic transport"
            ),
            MountError::Mount { mountpoint, source } => write!(
                f,
                "mounting FUSE at {} failed (needs root or /dev/fuse access): {source}",
                mountpoint.display()
            ),
            MountError::UringRefused { mountpoint } => write!(
                f,
                "mounting {}: the kernel did not accept FUSE over io_uring at INIT: use the classic or automatic transport",
                mountpoint.display()
            ),
            MountError::UringStart { mountpoint, source } => write!(
                f,
                "serving {} over io_uring failed: {source}",
                mountpoint.display()
            ),
            MountError::Session { mountpoint, source } => {
                write!(f, "serving {}: {source}", mountpoint.display())
            }
        }
    }
}

impl std::error::Error for MountError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            MountError::Mount { source, .. }
            | MountError::UringStart { source, .. }
            | MountError::Session { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A mounted volume, served until [`Mount::unmount`], until unmounted from outside
/// ([`Mount::wait`]), or until dropped (which unmounts).
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    transport: Transport,
    obs: Arc<Observer>,
    fs: Weak<Fs>,
    mode: FuseMode,
    mountpoint: PathBuf,
    warnings: Vec<String>,
}

/// Mounts `fs` at `mountpoint` (an empty directory) as `cfg` says and starts serving it.
/// The mount owns the volume from here on: when the session ends (unmounted by
/// [`Mount::unmount`], by dropping the [`Mount`] or from outside) the volume is unmounted
/// (`Fs::unmount`), so what was written is durable.
pub fn mount(fs: Fs, mountpoint: &Path, cfg: &MountConfig) -> Result<Mount, MountError> {
    let explicit = cfg.transport == TransportChoice::IoUring;
    if cfg.writeback_cache && !cfg.default_permissions {
        return Err(MountError::Config(
            "writeback_cache needs default_permissions: the kernel sends the times it keeps \
             as chosen times, which only its own permission checks tell apart from a user's"
                .into(),
        ));
    }
    let want = resolve(cfg.transport)?;
    let shown = std::fs::canonicalize(mountpoint).unwrap_or_else(|_| mountpoint.to_path_buf());
    let fs = Arc::new(fs);
    let obs = Arc::new(Observer::new());
    obs.set_mountpoint(&shown.display().to_string());
    obs.set_server_checks(cfg.allow_other && !cfg.default_permissions);
    obs.set_writeback_cache(cfg.writeback_cache);
    obs.set_seek_holes(cfg.seek_holes);
    obs.set_local_wakeups(cfg.local_wakeups);
    if let Some((mode, over)) = cfg.move_work {
        obs.set_move_work(mode, over);
    }
    let transport = Transport::new(
        fs.clone(),
        obs.clone(),
        want == FuseMode::IoUring,
        cfg.uring_depth,
        cfg.threads_per_node,
    );
    let node_cpus = obs.node_cpus();
    let nodes = node_cpus.values().filter(|c| !c.is_empty()).count().max(1);
    // Serving threads per node, each on its own cloned /dev/fuse descriptor, so requests
    // from different nodes (and requests waiting for their devices) do not queue behind
    // one reader.
    let n_threads = cfg.threads_per_node * nodes;
    let mut fcfg = fuser::Config::default();
    fcfg.mount_options = vec![
        fuser::MountOption::FSName(cfg.fs_name.clone()),
        fuser::MountOption::Subtype(cfg.subtype.clone()),
    ];
    if cfg.read_only {
        fcfg.mount_options.push(fuser::MountOption::RO);
    }
    if cfg.default_permissions {
        fcfg.mount_options
            .push(fuser::MountOption::DefaultPermissions);
    }
    fcfg.n_threads = Some(n_threads);
    fcfg.clone_fd = true;
    if cfg.allow_other {
        fcfg.acl = fuser::SessionACL::All;
    }
    let weak = Arc::downgrade(&fs);
    let classic = Classic::new(fs, obs.clone(), transport.clone());
    let session =
        fuser::Session::new(classic, mountpoint, &fcfg).map_err(|source| MountError::Mount {
            mountpoint: mountpoint.to_path_buf(),
            source,
        })?;
    // The rings must be registered before the kernel serves anything once INIT took
    // io_uring; if that fails the kernel falls back to /dev/fuse.
    if explicit && !transport.is_negotiated() {
        return Err(MountError::UringRefused {
            mountpoint: mountpoint.to_path_buf(),
        });
    }
    let mut warnings = Vec::new();
    let mode = match transport.start(session.as_fd()) {
        Ok(m) => m,
        Err(source) if explicit => {
            return Err(MountError::UringStart {
                mountpoint: mountpoint.to_path_buf(),
                source,
            })
        }
        Err(e) => {
            warnings.push(format!(
                "FUSE over io_uring failed ({e}); serving through /dev/fuse"
            ));
            FuseMode::Classic
        }
    };
    let bg = session.spawn().map_err(|source| MountError::Session {
        mountpoint: mountpoint.to_path_buf(),
        source,
    })?;
    // Each serving thread on its node's CPUs; a failure costs locality, not correctness.
    if let Err(e) =
        crate::serving::bind_serving_threads(n_threads, &node_cpus, Duration::from_secs(5))
    {
        warnings.push(format!("serving threads left unbound: {e}"));
    }
    Ok(Mount {
        session: Some(bg),
        transport,
        obs,
        fs: weak,
        mode,
        mountpoint: mountpoint.to_path_buf(),
        warnings,
    })
}

impl TransportChoice {
    /// The transport a mount would ask the kernel for now; an error only where io_uring
    /// was asked for and cannot be had.
    pub fn resolve(self) -> Result<FuseMode, MountError> {
        resolve(self)
    }
}

fn resolve(t: TransportChoice) -> Result<FuseMode, MountError> {
    match t {
        TransportChoice::Classic => Ok(FuseMode::Classic),
        TransportChoice::Auto => Ok(
            if uring::kernel_support() == KernelSupport::Enabled && uring::probe_ring().is_ok() {
                FuseMode::IoUring
            } else {
                FuseMode::Classic
            },
        ),
        TransportChoice::IoUring => {
            match uring::kernel_support() {
                KernelSupport::Missing => {
                    return Err(MountError::UringUnavailable(format!(
                        "this kernel lacks it ({} is missing; it needs Linux 6.14+ with CONFIG_FUSE_IO_URING)",
                        uring::ENABLE_URING
                    )))
                }
                KernelSupport::Disabled => {
                    return Err(MountError::UringUnavailable(format!(
                        "it is turned off ({} is N; root can write Y there)",
                        uring::ENABLE_URING
                    )))
                }
                KernelSupport::Enabled => {}
            }
            uring::probe_ring().map_err(|e| {
                MountError::UringUnavailable(format!(
                    "creating an io_uring failed ({e}; is kernel.io_uring_disabled set?)"
                ))
            })?;
            Ok(FuseMode::IoUring)
        }
    }
}

impl Mount {
    /// The transport the mount started serving with.
    pub fn mode(&self) -> FuseMode {
        self.mode
    }

    /// The mount point as given.
    pub fn mountpoint(&self) -> &Path {
        &self.mountpoint
    }

    /// Requests served so far, per transport.
    pub fn requests(&self) -> RequestCounts {
        self.transport.requests()
    }

    /// The most requests served at once so far.
    pub fn in_flight_max(&self) -> u64 {
        self.obs.in_flight_max()
    }

    /// The mount's statistics (as its root's `user.numaio.stats` xattr answers them);
    /// `None` once the volume is unmounted.
    pub fn stats(&self) -> Option<stats::Stats> {
        let fs = self.fs.upgrade()?;
        Some(self.obs.stats(&fs, self.transport.mode().as_str()))
    }

    /// A handle on the transport that outlives the mount (its counters, its mode: classic
    /// again once the rings stopped).
    pub fn transport(&self) -> Transport {
        self.transport.clone()
    }

    /// What went wrong without stopping the mount (an io_uring fallback, unbound threads).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Whether the session ended (the mount was unmounted from outside).
    pub fn is_finished(&self) -> bool {
        self.session.as_ref().is_none_or(|s| s.guard.is_finished())
    }

    /// Unmounts and waits until the volume is unmounted too.
    pub fn unmount(mut self) -> Result<(), MountError> {
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        s.umount_and_join().map_err(|source| MountError::Session {
            mountpoint: self.mountpoint.clone(),
            source,
        })
    }

    /// Waits until the mount is unmounted from outside (`fusermount -u`, `umount`), then
    /// until the volume is unmounted.
    pub fn wait(mut self) -> Result<(), MountError> {
        let Some(s) = self.session.take() else {
            return Ok(());
        };
        s.join().map_err(|source| MountError::Session {
            mountpoint: self.mountpoint.clone(),
            source,
        })
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if let Some(s) = self.session.take() {
            if let Err(e) = s.umount_and_join() {
                eprintln!(
                    "numaio mount: unmounting {} failed: {e}",
                    self.mountpoint.display()
                );
            }
        }
    }
}

/// Unmounts the volume when the session ends. Another reference may be held for a moment
/// (statistics being read), so it is waited for briefly; if one stays, the volume is at
/// least made durable.
pub(crate) fn unmount_volume(mut fs: Arc<Fs>) {
    for _ in 0..200 {
        match Arc::try_unwrap(fs) {
            Ok(fs) => {
                if let Err(e) = fs.unmount() {
                    eprintln!("numaio mount: unmounting the volume failed: {e}");
                }
                return;
            }
            Err(shared) => {
                fs = shared;
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    }
    if let Err(e) = fs.sync() {
        eprintln!("numaio mount: syncing the volume failed: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_builders_refuse_what_cannot_work() {
        let c = MountConfig::new();
        assert_eq!(c.threads_per_node(), MountConfig::DEFAULT_THREADS_PER_NODE);
        assert_eq!(c.uring_depth(), uring::DEFAULT_DEPTH);
        assert_eq!(c.transport(), TransportChoice::Auto);
        let c = c
            .with_threads_per_node(1)
            .and_then(|c| c.with_uring_depth(64))
            .and_then(|c| c.with_fs_name("/dev/nvme0n1"))
            .unwrap();
        assert_eq!((c.threads_per_node(), c.uring_depth()), (1, 64));
        assert_eq!(c.fs_name(), "/dev/nvme0n1");
        for bad in [
            MountConfig::new().with_threads_per_node(0),
            MountConfig::new().with_threads_per_node(MountConfig::MAX_THREADS_PER_NODE + 1),
            MountConfig::new().with_uring_depth(0),
            MountConfig::new().with_uring_depth(uring::MAX_DEPTH + 1),
            MountConfig::new().with_fs_name(""),
            MountConfig::new().with_fs_name("a,allow_other"),
            MountConfig::new().with_subtype("x\0y"),
        ] {
            let e = bad.unwrap_err();
            assert!(matches!(e, MountError::Config(_)), "{e}");
            assert!(e.to_string().contains("give"), "{e}");
        }
    }

    #[test]
    fn classic_is_always_available() {
        assert_eq!(
            TransportChoice::Classic.resolve().unwrap(),
            FuseMode::Classic
        );
        // Auto never fails: it falls back to classic.
        assert!(TransportChoice::Auto.resolve().is_ok());
    }
}
