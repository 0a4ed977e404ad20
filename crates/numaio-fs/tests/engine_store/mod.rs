//! A `BlockStore` through the numaio engine: one cache slice per volume node, and every block
//! of a device cached in the slice of the device's node (JeriCache: cached data lives where
//! its device is). The file system does not serve from it; the contract test runs it to hold
//! the engine to the store's durability promise, over the engine's power-loss backend too.

use numaio_engine::{
    AccessCtx, Backend, Engine, EngineError, FileHandle, FileId, OpenOptions, Placement,
};
use numaio_fs::store::{BlockStore, DeviceInfo, FileStore};
use numaio_fs::{FsError, BLOCK_SIZE};
use numaio_sys::Topology;
use parking_lot::RwLock;
use std::collections::HashMap;
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

/// Puts every block of a device on the slice of the device's node. Files are recognised by
/// their canonical path when the engine opens them.
struct DevicePlacement {
    slice_of_path: HashMap<PathBuf, usize>,
    slice_of_file: RwLock<HashMap<FileId, usize>>,
}

impl Placement for DevicePlacement {
    fn name(&self) -> String {
        "device-node".into()
    }

    fn slice_for(&self, file: FileId, _block: u64, _ctx: &AccessCtx) -> usize {
        // Only the store's own devices are opened, each registered in file_opened first.
        self.slice_of_file.read().get(&file).copied().unwrap_or(0)
    }

    fn file_opened(&self, file: FileId, path: &std::path::Path) {
        if let Some(&s) = self.slice_of_path.get(path) {
            self.slice_of_file.write().insert(file, s);
        }
    }
}

/// How to build an [`EngineStore`]; `build` checks everything once.
pub struct EngineStoreBuilder {
    devices: Vec<DeviceInfo>,
    cache_bytes: u64,
    backend: Option<Arc<dyn Backend>>,
    topology: Option<Topology>,
    bind: bool,
}

impl EngineStoreBuilder {
    /// Total cache over all slices (default 256 MiB).
    pub fn with_cache_bytes(mut self, bytes: u64) -> Self {
        self.cache_bytes = bytes;
        self
    }
    /// The engine's device backend (default: io_uring, psync where io_uring is missing); a
    /// [`numaio_engine::power_loss::PowerLossBackend`] for crash tests.
    pub fn with_backend(mut self, backend: Arc<dyn Backend>) -> Self {
        self.backend = Some(backend);
        self
    }
    /// The topology to build slices on instead of the detected one.
    pub fn with_topology(mut self, topo: Topology) -> Self {
        self.topology = Some(topo);
        self
    }

    /// Bind each slice's memory to its node and pin its threads there (default on; off only
    /// for tests on a synthetic topology whose nodes this machine lacks).
    pub fn with_bind_memory(mut self, on: bool) -> Self {
        self.bind = on;
        self
    }

    /// Opens the devices and starts the engine.
    pub fn build(self) -> Result<EngineStore, FsError> {
        if self.devices.is_empty() {
            return Err(FsError::Invalid(
                "a volume needs at least one device".into(),
            ));
        }
        let mut nodes: Vec<u32> = self.devices.iter().map(|d| d.node).collect();
        nodes.sort_unstable();
        nodes.dedup();
        // Checks kind and size, and holds block devices exclusively while the store lives
        // (the engine's own descriptors cannot carry O_EXCL).
        let guard = FileStore::open(&self.devices, false)?;
        let mut slice_of_path = HashMap::new();
        for d in &self.devices {
            let canon = std::fs::canonicalize(&d.path)
                .map_err(|e| FsError::io(&d.path, "resolving the device path", e))?;
            let slice = nodes.binary_search(&d.node).unwrap_or(0);
            if slice_of_path.insert(canon, slice).is_some() {
                return Err(FsError::Invalid(format!(
                    "{} is listed twice in the volume",
                    d.path.display()
                )));
            }
        }
        let placement = Arc::new(DevicePlacement {
            slice_of_path,
            slice_of_file: RwLock::new(HashMap::new()),
        });
        let mut b = Engine::builder()
            .with_block_size(BLOCK_SIZE as usize)
            .with_cache_bytes(self.cache_bytes)
            .with_slice_nodes(nodes.clone())
            .with_placement(placement)
            .with_direct_io(true)
            .with_bind_memory(self.bind)
            .with_pin_threads(self.bind);
        if let Some(be) = self.backend {
            b = b.with_backend(be);
        }
        if let Some(t) = self.topology {
            b = b.with_topology(t);
        }
        let engine = b.build().map_err(|e| {
            FsError::Invalid(format!(
                "starting the cache engine with one slice on each of nodes {nodes:?}: {e}"
            ))
        })?;
        let opts = OpenOptions {
            write: true,
            create: false,
        };
        let mut handles = Vec::with_capacity(self.devices.len());
        for d in &self.devices {
            let h = engine
                .open(&d.path, opts)
                .map_err(|e| engine_error(d, "opening the device in the engine", e))?;
            handles.push(h);
        }
        Ok(EngineStore {
            handles,
            engine,
            _guard: guard,
            infos: self.devices,
        })
    }
}

/// A volume's devices behind the numaio engine's per-node cache.
pub struct EngineStore {
    // Handles go before the engine: dropping the engine writes back what they left dirty.
    handles: Vec<FileHandle>,
    engine: Engine,
    _guard: FileStore,
    infos: Vec<DeviceInfo>,
}

fn engine_error(d: &DeviceInfo, what: impl Into<String>, e: EngineError) -> FsError {
    FsError::io(&d.path, what, io::Error::from(e))
}

impl EngineStore {
    /// A builder for a store over `devices` (probed by `device::probe_devices` or read from
    /// a superblock).
    pub fn builder(devices: &[DeviceInfo]) -> EngineStoreBuilder {
        EngineStoreBuilder {
            devices: devices.to_vec(),
            cache_bytes: 256 << 20,
            backend: None,
            topology: None,
            bind: true,
        }
    }

    /// The engine, for statistics and placement checks of its slices.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The slice that caches `dev`'s blocks.
    pub fn slice_of(&self, dev: u16) -> Option<usize> {
        let node = self.infos.get(dev as usize)?.node;
        self.engine.slice_nodes().iter().position(|&n| n == node)
    }
}

impl BlockStore for EngineStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn cache_bytes(&self) -> Vec<(u32, u64)> {
        let bs = self.engine.block_size() as u64;
        self.engine
            .stats()
            .slices
            .iter()
            .map(|s| (s.node, s.resident_blocks as u64 * bs))
            .collect()
    }

    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        check_range(info, "read", offset, buf.len())?;
        let len = buf.len();
        let what = || format!("read of {len} bytes at {offset} through the cache");
        let n = self.handles[dev as usize]
            .pread(buf, offset)
            .map_err(|e| engine_error(info, what(), e))?;
        if n != len {
            return Err(FsError::io(
                &info.path,
                format!("{}: short read ({n} bytes)", what()),
                io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        Ok(())
    }

    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        let what = || {
            format!(
                "write of {} bytes at {offset} through the cache",
                data.len()
            )
        };
        check_range(info, "write", offset, data.len())?;
        let n = self.handles[dev as usize]
            .pwrite(data, offset)
            .map_err(|e| engine_error(info, what(), e))?;
        if n != data.len() {
            return Err(FsError::io(
                &info.path,
                format!("{}: short write ({n} bytes)", what()),
                io::Error::from_raw_os_error(libc::EIO),
            ));
        }
        Ok(())
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        self.handles[dev as usize]
            .fsync()
            .map_err(|e| engine_error(info, "fsync through the cache", e))
    }
}

/// The device `dev` of `infos`, or an error saying the volume has no such device.
fn device(infos: &[DeviceInfo], dev: u16) -> Result<&DeviceInfo, FsError> {
    infos.get(dev as usize).ok_or_else(|| {
        FsError::Invalid(format!(
            "no device {dev} in this volume (it has {})",
            infos.len()
        ))
    })
}

/// Checks that `len` bytes at `offset` lie inside `info`, as every store does.
fn check_range(info: &DeviceInfo, what: &str, offset: u64, len: usize) -> Result<(), FsError> {
    match offset.checked_add(len as u64) {
        Some(end) if end <= info.bytes => Ok(()),
        _ => Err(FsError::io(
            &info.path,
            format!(
                "{what} of {len} bytes at {offset} past the end ({} bytes)",
                info.bytes
            ),
            io::Error::from_raw_os_error(libc::EIO),
        )),
    }
}
