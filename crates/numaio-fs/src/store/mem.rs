//! An in-memory volume that can lose power: the store of the model-based crash tests.
//!
//! Each device keeps its durable image (as of its last `sync`) and the writes completed
//! since, in numaio-testkit's power-cut model (the engine's power-loss backend uses the same).
//! [`MemStore::crash`] turns the volume into what a disk would hold after a power cut: the
//! durable image, plus, depending on [`CrashMode`], none, all or a random subset of the
//! unsynced writes (a disk may persist any of them, in any order, torn at 512-byte sectors).

use super::{BlockStore, DeviceInfo, DeviceKind};
use crate::FsError;
use numaio_testkit::power_cut::{CutCounts, CutRule, Rng, Volatile};
use parking_lot::Mutex;

/// What survives a crash besides the synced data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Only what was synced.
    DropUnsynced,
    /// Everything written (a clean shutdown without sync).
    KeepAll,
    /// Each unsynced 512-byte sector survives with probability 1/2, chosen by `seed`.
    Random { seed: u64 },
}

struct Dev {
    /// What reads see: every write.
    current: Vec<u8>,
    /// What a power cut may leave.
    model: Volatile,
}

impl Dev {
    fn new(image: Vec<u8>) -> Dev {
        Dev {
            current: image.clone(),
            model: Volatile::new(image),
        }
    }
}

/// In-memory devices with power-cut simulation.
pub struct MemStore {
    infos: Vec<DeviceInfo>,
    devs: Vec<Mutex<Dev>>,
}

impl MemStore {
    /// Zero-filled devices of `bytes` each, on the given nodes.
    pub fn new(devices: &[(u32, u64)]) -> MemStore {
        let infos = devices
            .iter()
            .enumerate()
            .map(|(i, &(node, bytes))| DeviceInfo {
                path: format!("mem{i}").into(),
                node,
                bytes,
                kind: DeviceKind::Memory,
            })
            .collect();
        let devs = devices
            .iter()
            .map(|&(_, bytes)| Mutex::new(Dev::new(vec![0; bytes as usize])))
            .collect();
        MemStore { infos, devs }
    }

    /// A new store holding what each device would hold after a power cut now; `self` is
    /// left as it was.
    pub fn crash(&self, mode: CrashMode) -> MemStore {
        let (rule, seed) = match mode {
            CrashMode::DropUnsynced => (CutRule::DROP_UNSYNCED, 0),
            CrashMode::KeepAll => (CutRule::KEEP_ALL, 0),
            CrashMode::Random { seed } => (CutRule::TORN_SECTORS, seed),
        };
        let mut rng = Rng(seed ^ 0x9e37_79b9_7f4a_7c15);
        let mut counts = CutCounts::default();
        let devs = self
            .devs
            .iter()
            .map(|d| {
                let mut model = d.lock().model.clone();
                Mutex::new(Dev::new(model.cut(&rule, &mut rng, &mut counts).to_vec()))
            })
            .collect();
        MemStore {
            infos: self.infos.clone(),
            devs,
        }
    }

    fn dev(&self, dev: u16) -> Result<&Mutex<Dev>, FsError> {
        self.devs
            .get(dev as usize)
            .ok_or_else(|| FsError::Invalid(format!("no device {dev} in this volume")))
    }

    fn range(&self, dev: u16, offset: u64, len: usize) -> Result<std::ops::Range<usize>, FsError> {
        let size = self.infos[dev as usize].bytes;
        match offset.checked_add(len as u64) {
            Some(end) if end <= size => Ok(offset as usize..end as usize),
            _ => Err(FsError::io(
                &self.infos[dev as usize].path,
                format!("I/O of {len} bytes at {offset} past the end ({size} bytes)"),
                std::io::Error::from_raw_os_error(libc::EIO),
            )),
        }
    }
}

impl BlockStore for MemStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let d = self.dev(dev)?;
        let r = self.range(dev, offset, buf.len())?;
        buf.copy_from_slice(&d.lock().current[r]);
        Ok(())
    }

    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let d = self.dev(dev)?;
        let r = self.range(dev, offset, data.len())?;
        let mut d = d.lock();
        d.current[r].copy_from_slice(data);
        d.model.write(offset, data);
        Ok(())
    }

    fn read_cached(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<bool, FsError> {
        self.read_at(dev, offset, buf).map(|()| true)
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        self.dev(dev)?.lock().model.sync(None);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crash_keeps_what_was_synced_and_drops_the_rest() {
        let s = MemStore::new(&[(0, 8192), (1, 8192)]);
        s.write_at(0, 0, b"synced").unwrap();
        s.sync(0).unwrap();
        s.write_at(0, 4096, b"lost").unwrap();
        s.write_at(1, 0, b"lost too").unwrap();
        let c = s.crash(CrashMode::DropUnsynced);
        let mut buf = [0u8; 8];
        c.read_at(0, 0, &mut buf[..6]).unwrap();
        assert_eq!(&buf[..6], b"synced");
        c.read_at(0, 4096, &mut buf[..4]).unwrap();
        assert_eq!(&buf[..4], &[0; 4]);
        c.read_at(1, 0, &mut buf).unwrap();
        assert_eq!(buf, [0; 8]);
        let k = s.crash(CrashMode::KeepAll);
        k.read_at(1, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"lost too");
        assert!(s.read_at(0, 8190, &mut buf).is_err());
        assert!(s.read_at(2, 0, &mut buf).is_err());
    }
}
