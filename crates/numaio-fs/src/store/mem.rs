//! An in-memory volume that can lose power: the store of the model-based crash tests.
//!
//! Each device keeps its durable image (as of its last `sync`) and the writes completed
//! since. [`MemStore::crash`] turns the volume into what a disk would hold after a power
//! cut: the durable image, plus, depending on [`CrashMode`], none, all or a random subset of
//! the unsynced writes (a disk may persist any of them, in any order, torn at 512-byte
//! sectors).

use super::{BlockStore, DeviceInfo, DeviceKind};
use crate::FsError;
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
    durable: Vec<u8>,
    current: Vec<u8>,
    /// Sectors written since the last sync.
    dirty: std::collections::BTreeSet<u64>,
}

/// In-memory devices with power-cut simulation.
pub struct MemStore {
    infos: Vec<DeviceInfo>,
    devs: Vec<Mutex<Dev>>,
}

const SECTOR: u64 = 512;

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
            .map(|&(_, bytes)| {
                Mutex::new(Dev {
                    durable: vec![0; bytes as usize],
                    current: vec![0; bytes as usize],
                    dirty: Default::default(),
                })
            })
            .collect();
        MemStore { infos, devs }
    }

    /// A new store holding what each device would hold after a power cut now; `self` is
    /// left as it was.
    pub fn crash(&self, mode: CrashMode) -> MemStore {
        let mut rng = match mode {
            CrashMode::Random { seed } => seed ^ 0x9e37_79b9_7f4a_7c15,
            _ => 0,
        };
        let devs = self
            .devs
            .iter()
            .map(|d| {
                let d = d.lock();
                let mut image = d.durable.clone();
                for &s in &d.dirty {
                    let keep = match mode {
                        CrashMode::DropUnsynced => false,
                        CrashMode::KeepAll => true,
                        CrashMode::Random { .. } => {
                            // splitmix64
                            rng = rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
                            let mut z = rng;
                            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                            (z ^ (z >> 31)) & 1 == 1
                        }
                    };
                    if keep {
                        let a = (s * SECTOR) as usize;
                        let b = (a + SECTOR as usize).min(image.len());
                        image[a..b].copy_from_slice(&d.current[a..b]);
                    }
                }
                Mutex::new(Dev {
                    current: image.clone(),
                    durable: image,
                    dirty: Default::default(),
                })
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
        d.current[r.clone()].copy_from_slice(data);
        if !data.is_empty() {
            let first = r.start as u64 / SECTOR;
            let last = (r.end as u64 - 1) / SECTOR;
            d.dirty.extend(first..=last);
        }
        Ok(())
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let d = self.dev(dev)?;
        let mut d = d.lock();
        let d = &mut *d;
        for &s in &d.dirty {
            let a = (s * SECTOR) as usize;
            let b = (a + SECTOR as usize).min(d.current.len());
            d.durable[a..b].copy_from_slice(&d.current[a..b]);
        }
        d.dirty.clear();
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
