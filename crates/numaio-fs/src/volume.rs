//! Opening an existing volume from its device paths, in any order.
//!
//! Each device's label says which volume it belongs to and which device of it it is, so the
//! user may list the devices in any order: they are put in the order the volume header
//! lists them. A device of another volume, a device listed twice, a device missing and a
//! device that is not a numaio-fs device are refused with a message that names it.
//!
//! An open [`Volume`] holds an exclusive lock on every device for its lifetime (`O_EXCL` for
//! block devices, through [`FileStore`], and an advisory `flock` on every device), so two
//! offline tools never change the same volume at once. A [`ZoneVolume`] does the same for a
//! volume over memory zones, or makes a fresh one in RAM.

use crate::format::{Header, Label, HEADER_BLOCKS};
use crate::store::{BlockStore, DeviceInfo, DeviceKind, FileStore, ZoneSpec, ZoneStore};
use crate::{Fs, FsError, MkfsOptions, MountOptions, PlacementPolicy, BLOCK_SIZE};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One device as found on disk: its path, kind, size and label.
#[derive(Debug, Clone)]
pub struct FoundDevice {
    pub info: DeviceInfo,
    pub label: Label,
}

/// The devices of one volume, in volume order, with the labels they carry.
#[derive(Debug, Clone)]
pub struct VolumeDevices {
    /// In volume order; `node` and `bytes` are the label's.
    pub devices: Vec<DeviceInfo>,
    pub uuid: [u8; 16],
}

fn open_ro(path: &Path) -> Result<(File, DeviceKind, u64, (u64, u64)), FsError> {
    let meta = crate::device::stat_device(path)?;
    let ft = meta.file_type();
    if !ft.is_block_device() && !ft.is_file() {
        return Err(FsError::Invalid(format!(
            "{}: neither a block device nor a regular file; give the volume's devices",
            path.display()
        )));
    }
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| FsError::io(path, "opening the device for reading", e))?;
    let fm = f
        .metadata()
        .map_err(|e| FsError::io(path, "fstat of the opened device", e))?;
    let (kind, bytes, id) = if fm.file_type().is_block_device() {
        (
            DeviceKind::BlockDevice,
            crate::device::block_device_size(&f, path)?,
            (0, fm.rdev()),
        )
    } else if fm.file_type().is_file() {
        (DeviceKind::File, fm.len(), (fm.dev(), fm.ino()))
    } else {
        return Err(FsError::Invalid(format!(
            "{}: changed while it was being opened; run the command again",
            path.display()
        )));
    };
    Ok((f, kind, bytes, id))
}

/// Reads the label of the device at `path`.
pub fn read_label(path: &Path) -> Result<FoundDevice, FsError> {
    let (f, kind, bytes, _) = open_ro(path)?;
    read_label_of(&f, path, kind, bytes)
}

fn read_label_of(
    f: &File,
    path: &Path,
    kind: DeviceKind,
    bytes: u64,
) -> Result<FoundDevice, FsError> {
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    if bytes < BLOCK_SIZE {
        return Err(FsError::Corrupt {
            device: path.to_path_buf(),
            what: format!("{bytes} bytes: too small to be a numaio-fs device"),
        });
    }
    f.read_exact_at(&mut b, 0)
        .map_err(|e| FsError::io(path, "reading the device label (block 0)", e))?;
    let label = Label::decode(&b, path).map_err(|e| FsError::Corrupt {
        device: path.to_path_buf(),
        what: format!("not a numaio-fs device, or its label is damaged ({e})"),
    })?;
    Ok(FoundDevice {
        info: DeviceInfo {
            path: path.to_path_buf(),
            node: label.node,
            bytes: label.bytes,
            kind,
        },
        label,
    })
}

/// Reads the volume header from device 0 of a volume (for messages and geometry).
pub fn read_header(dev0: &DeviceInfo) -> Result<Header, FsError> {
    let (f, _, _, _) = open_ro(&dev0.path)?;
    let mut hb = vec![0u8; (HEADER_BLOCKS * BLOCK_SIZE) as usize];
    f.read_exact_at(&mut hb, BLOCK_SIZE)
        .map_err(|e| FsError::io(&dev0.path, "reading the volume header", e))?;
    Header::decode(&hb, &dev0.path)
}

/// Puts the devices at `paths` in volume order by their labels.
pub fn order_devices<P: AsRef<Path>>(paths: &[P]) -> Result<VolumeDevices, FsError> {
    if paths.is_empty() {
        return Err(FsError::Invalid(
            "no device given; name the volume's devices (-d DEV)".into(),
        ));
    }
    let mut found: Vec<(FoundDevice, (u64, u64))> = Vec::with_capacity(paths.len());
    for p in paths {
        let p = p.as_ref();
        let (f, kind, bytes, id) = open_ro(p)?;
        if let Some((other, _)) = found.iter().find(|(_, i)| *i == id) {
            return Err(FsError::Invalid(format!(
                "{} is the same device as {}; list each device once",
                p.display(),
                other.info.path.display()
            )));
        }
        found.push((read_label_of(&f, p, kind, bytes)?, id));
    }
    let first = &found[0].0;
    let uuid = first.label.uuid;
    let count = first.label.dev_count as usize;
    for (d, _) in &found[1..] {
        if d.label.uuid != uuid {
            return Err(FsError::Invalid(format!(
                "{} belongs to another numaio-fs volume than {} (uuid {} vs {}); give the \
                 devices of one volume",
                d.info.path.display(),
                first.info.path.display(),
                uuid_text(&d.label.uuid),
                uuid_text(&uuid)
            )));
        }
    }
    let mut slots: Vec<Option<DeviceInfo>> = vec![None; count];
    for (d, _) in &found {
        let i = d.label.dev_index as usize;
        if d.label.dev_count as usize != count || i >= count {
            return Err(FsError::Corrupt {
                device: d.info.path.clone(),
                what: format!(
                    "label says device {} of {}, but {} says the volume has {count}; run \
                     `numaio fsck`",
                    d.label.dev_index,
                    d.label.dev_count,
                    first.info.path.display()
                ),
            });
        }
        if let Some(prev) = &slots[i] {
            return Err(FsError::Invalid(format!(
                "{} and {} both carry the label of device {i} of volume {}: one is a copy; \
                 give the volume's own devices",
                prev.path.display(),
                d.info.path.display(),
                uuid_text(&uuid)
            )));
        }
        slots[i] = Some(d.info.clone());
    }
    let missing: Vec<usize> = (0..count).filter(|&i| slots[i].is_none()).collect();
    if !missing.is_empty() {
        // The header (on device 0) names the paths mkfs was given; it may itself be missing.
        let names = slots[0]
            .as_ref()
            .and_then(|d0| read_header(d0).ok())
            .map(|h| {
                missing
                    .iter()
                    .map(|&i| {
                        h.devices.get(i).map_or(format!("device {i}"), |e| {
                            format!("device {i} (formatted as {})", e.path.display())
                        })
                    })
                    .collect::<Vec<_>>()
            })
            .unwrap_or_else(|| missing.iter().map(|i| format!("device {i}")).collect());
        return Err(FsError::Invalid(format!(
            "the volume {} has {count} devices, {} given: missing {}; give all of them",
            uuid_text(&uuid),
            found.len(),
            names.join(", ")
        )));
    }
    Ok(VolumeDevices {
        devices: slots
            .into_iter()
            .map(|d| d.expect("checked above"))
            .collect(),
        uuid,
    })
}

/// The UUID in the usual 8-4-4-4-12 form.
pub fn uuid_text(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// An advisory exclusive lock on one device, released when dropped (the file closes).
struct DeviceLock {
    _file: File,
}

fn lock_device(d: &DeviceInfo) -> Result<DeviceLock, FsError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(&d.path)
        .map_err(|e| FsError::io(&d.path, "opening the device to lock it", e))?;
    // SAFETY: flock on a descriptor this function owns; no memory is passed.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        let e = std::io::Error::last_os_error();
        let what = if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            "locking the device: another numaio command has the volume open; wait for it"
        } else {
            "locking the device (flock)"
        };
        return Err(FsError::io(&d.path, what, e));
    }
    Ok(DeviceLock { _file: f })
}

/// An open volume: its devices in order, locked, and the store over them.
pub struct Volume {
    pub devices: Vec<DeviceInfo>,
    pub uuid: [u8; 16],
    pub store: Arc<FileStore>,
    _locks: Vec<DeviceLock>,
}

impl Volume {
    /// Orders the devices at `paths` by their labels, locks them and opens them.
    pub fn open<P: AsRef<Path>>(paths: &[P], read_only: bool) -> Result<Volume, FsError> {
        let v = order_devices(paths)?;
        let locks = v
            .devices
            .iter()
            .map(lock_device)
            .collect::<Result<Vec<_>, _>>()?;
        let store = FileStore::open(&v.devices, read_only)?;
        Ok(Volume {
            devices: v.devices,
            uuid: v.uuid,
            store: Arc::new(store),
            _locks: locks,
        })
    }

    /// Mounts the file system on the volume (checks labels and header, replays the journal).
    pub fn mount(&self, opts: MountOptions) -> Result<Fs, FsError> {
        Fs::mount(self.store.clone(), opts)
    }

    /// The device paths, in volume order.
    pub fn paths(&self) -> Vec<PathBuf> {
        self.devices.iter().map(|d| d.path.clone()).collect()
    }
}

/// A volume over memory zones, ready to mount: a RAM volume made fresh, or a persistent one
/// (formatted by `numaio mkfs --zone`) put in volume order and locked.
pub struct ZoneVolume {
    pub devices: Vec<DeviceInfo>,
    pub store: Arc<ZoneStore>,
    _locks: Vec<DeviceLock>,
}

impl ZoneVolume {
    /// Maps RAM zones (`NODE:SIZE`, no path) bound to their nodes and formats them as a new,
    /// empty volume with `policy`; it lives as long as this value and whatever mounts it.
    pub fn create_ram(specs: &[ZoneSpec], policy: PlacementPolicy) -> Result<ZoneVolume, FsError> {
        if let Some(z) = specs.iter().find(|z| z.path.is_some()) {
            return Err(FsError::Invalid(format!(
                "zone {z}: a persistent zone cannot join a RAM volume; give only NODE:SIZE zones"
            )));
        }
        let store = ZoneStore::new(specs)?;
        let devs: Vec<(u64, u32)> = store.devices().iter().map(|d| (d.bytes, d.node)).collect();
        Fs::mkfs(&store, &MkfsOptions::sized(&devs, policy, None, None, None))?;
        Ok(ZoneVolume {
            devices: store.devices().to_vec(),
            store: Arc::new(store),
            _locks: Vec::new(),
        })
    }

    /// Opens the persistent zones of a volume (`NODE:SIZE:PATH`, any order): each must carry
    /// the label `numaio mkfs --zone` wrote, with the same node and size. Locks every backing
    /// like [`Volume::open`], so a volume is never served twice.
    pub fn open_persistent(specs: &[ZoneSpec]) -> Result<ZoneVolume, FsError> {
        let mut paths = Vec::with_capacity(specs.len());
        for z in specs {
            match &z.path {
                Some(p) => paths.push(p.clone()),
                None => {
                    return Err(FsError::Invalid(format!(
                        "zone {z}: a RAM zone cannot join a persistent volume; give \
                         NODE:SIZE:PATH for each zone"
                    )))
                }
            }
        }
        let ordered = order_devices(&paths)?;
        let locks = ordered
            .devices
            .iter()
            .map(lock_device)
            .collect::<Result<Vec<_>, _>>()?;
        let mut in_order = Vec::with_capacity(specs.len());
        for d in &ordered.devices {
            let z = specs
                .iter()
                .find(|z| z.path.as_deref() == Some(d.path.as_path()))
                .expect("every ordered device came from a spec");
            if z.node != d.node || z.bytes != d.bytes {
                return Err(FsError::Invalid(format!(
                    "zone {z}: {} was formatted as zone {}:{}; give that node and size",
                    d.path.display(),
                    d.node,
                    d.bytes
                )));
            }
            in_order.push(z.clone());
        }
        let store = ZoneStore::new(&in_order)?;
        Ok(ZoneVolume {
            devices: store.devices().to_vec(),
            store: Arc::new(store),
            _locks: locks,
        })
    }

    /// Mounts the file system on the zones (checks labels and header, replays the journal).
    pub fn mount(&self, opts: MountOptions) -> Result<Fs, FsError> {
        Fs::mount(self.store.clone(), opts)
    }
}
