//! Memory zones (ZonFS): a volume whose blocks live in memory bound to a node.
//!
//! A RAM zone is anonymous memory bound to its node with `mbind(MPOL_BIND)` and prefaulted,
//! so every page is on the node before the first file is written; it is lost on unmount. A
//! persistent zone maps a persistent-memory device (`/dev/pmemN`, `/dev/daxN.M`) or a file on
//! a DAX file system `MAP_SHARED` (with `MAP_SYNC` where the kernel and file system allow it),
//! and survives unmount and reboot. There is no cache in between: no replacement list, no
//! write-back, no dirty accounting; a read or write is a copy to or from the zone.
//!
//! Writers and readers of the same range take a lock per chunk of the zone, so overlapping
//! copies never race. A persistent zone must not be truncated by another program while it
//! is mapped: the kernel would answer an access past the new end with SIGBUS.

use super::{check_range, device, BlockStore, DeviceInfo, DeviceKind};
use crate::FsError;
use numaio_sys::{MbindFlags, PageStatus, Policy};
use parking_lot::{Mutex, RwLock};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::PathBuf;
use std::ptr::NonNull;
use std::str::FromStr;

/// `MAP_SYNC` (Linux 4.15): stores to a DAX mapping are durable once flushed from the CPU
/// caches, with no page-cache write-back in between.
const MAP_SYNC: libc::c_int = 0x80000;

/// Bytes guarded by one lock: large enough that a block copy takes one or two, small enough
/// that writers of different files rarely meet.
const CHUNK: usize = 1 << 20;

/// `--zone NODE:SIZE` (RAM) or `NODE:SIZE:PATH` (persistent memory device or DAX file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneSpec {
    pub node: u32,
    /// Bytes: a non-zero multiple of the page size.
    pub bytes: u64,
    /// The persistent backing, if any.
    pub path: Option<PathBuf>,
}

impl FromStr for ZoneSpec {
    type Err = FsError;

    fn from_str(s: &str) -> Result<ZoneSpec, FsError> {
        let bad = |why: String| {
            FsError::Invalid(format!(
                "zone {s:?}: {why} (expected NODE:SIZE or NODE:SIZE:PATH, e.g. 1:4G or 0:16G:/dev/pmem0)"
            ))
        };
        let mut parts = s.splitn(3, ':');
        let node = parts.next().unwrap_or("");
        let Some(size) = parts.next() else {
            return Err(bad("no size".into()));
        };
        let path = parts.next();
        let node: u32 = node
            .trim()
            .parse()
            .map_err(|_| bad(format!("{node:?} is not a node number")))?;
        let bytes = numaio_sys::topology::parse_size(size)
            .ok_or_else(|| bad(format!("{size:?} is not a size like 512M or 4G")))?;
        let path = match path {
            Some("") => return Err(bad("the path after the second ':' is empty".into())),
            Some(p) => Some(PathBuf::from(p)),
            None => None,
        };
        let spec = ZoneSpec { node, bytes, path };
        spec.check_size().map_err(|e| bad(e.to_string()))?;
        Ok(spec)
    }
}

impl fmt::Display for ZoneSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.node, self.bytes)?;
        if let Some(p) = &self.path {
            write!(f, ":{}", p.display())?;
        }
        Ok(())
    }
}

impl ZoneSpec {
    /// Non-zero, a whole number of pages and blocks, addressable.
    fn check_size(&self) -> Result<(), String> {
        let page = numaio_sys::page_size() as u64;
        let unit = page.max(crate::BLOCK_SIZE);
        if self.bytes == 0 {
            return Err("the size is 0".into());
        }
        if !self.bytes.is_multiple_of(unit) {
            return Err(format!(
                "the size {} is not a multiple of {unit} bytes",
                self.bytes
            ));
        }
        if usize::try_from(self.bytes).is_err() || self.bytes > isize::MAX as u64 {
            return Err(format!(
                "the size {} does not fit in this machine's address space",
                self.bytes
            ));
        }
        Ok(())
    }
}

/// Where a zone's pages are, from `move_pages`.
#[derive(Debug, Clone, PartialEq)]
pub struct ZonePlacement {
    pub zone: usize,
    pub node: u32,
    pub pages: usize,
    /// Pages on the zone's node.
    pub on_node: usize,
    /// Pages on other nodes.
    pub elsewhere: usize,
    /// Pages whose node the kernel did not report (not present, or memory `move_pages`
    /// does not know, such as some DAX mappings).
    pub unknown: usize,
}

impl ZonePlacement {
    /// Percentage of the zone's pages on its node.
    pub fn percent_on_node(&self) -> f64 {
        if self.pages == 0 {
            return 100.0;
        }
        100.0 * self.on_node as f64 / self.pages as f64
    }
}

/// One mapped zone.
struct Zone {
    ptr: NonNull<u8>,
    len: usize,
    /// The backing of a persistent zone (kept open for msync's sake and for messages).
    file: Option<File>,
    locks: Vec<RwLock<()>>,
    /// Byte range written since the last sync (persistent zones only).
    dirty: Mutex<Option<(usize, usize)>>,
}

// SAFETY: the mapping is owned by the Zone and only reached through `copy_in`/`copy_out`,
// which hold the chunk locks covering the bytes they touch, so concurrent use from several
// threads never makes overlapping accesses without exclusion.
unsafe impl Send for Zone {}
// SAFETY: as above; shared references only copy under the chunk locks.
unsafe impl Sync for Zone {}

impl Drop for Zone {
    fn drop(&mut self) {
        // SAFETY: ptr/len are exactly the mapping made in `map`, unmapped only here.
        unsafe {
            libc::munmap(self.ptr.as_ptr().cast(), self.len);
        }
    }
}

impl Zone {
    fn chunks(&self, offset: usize, len: usize) -> std::ops::Range<usize> {
        if len == 0 {
            return 0..0;
        }
        offset / CHUNK..(offset + len - 1) / CHUNK + 1
    }

    /// Copies `data` to `offset`; the caller has checked the range.
    fn copy_in(&self, offset: usize, data: &[u8]) {
        // Ascending order, so two writers never wait for each other in a cycle.
        let _g: Vec<_> = self
            .chunks(offset, data.len())
            .map(|c| self.locks[c].write())
            .collect();
        // SAFETY: offset + data.len() <= self.len (checked by the caller against the zone's
        // size), the mapping is live while self is, and the write locks of every chunk the
        // range touches are held, so no other copy reads or writes these bytes meanwhile.
        // `data` cannot alias the mapping: it is a Rust slice and the mapping is never handed
        // out as one.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.as_ptr().add(offset), data.len());
        }
        if self.file.is_some() && !data.is_empty() {
            let mut d = self.dirty.lock();
            let end = offset + data.len();
            *d = Some(match *d {
                Some((a, b)) => (a.min(offset), b.max(end)),
                None => (offset, end),
            });
        }
    }

    /// Copies to `buf` from `offset`; the caller has checked the range.
    fn copy_out(&self, offset: usize, buf: &mut [u8]) {
        let _g: Vec<_> = self
            .chunks(offset, buf.len())
            .map(|c| self.locks[c].read())
            .collect();
        // SAFETY: in bounds (checked by the caller), mapping live, read locks held so no
        // writer touches these bytes; `buf` is a distinct Rust slice.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.ptr.as_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
    }
}

/// Maps `len` bytes: anonymous, or `MAP_SHARED` of `file`.
fn map(len: usize, file: Option<&File>) -> io::Result<(NonNull<u8>, bool)> {
    let prot = libc::PROT_READ | libc::PROT_WRITE;
    let try_map = |flags: libc::c_int, fd: libc::c_int| {
        // SAFETY: a fresh mapping chosen by the kernel (addr NULL); no existing memory is
        // affected. The result is checked below.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
        if p == libc::MAP_FAILED {
            Err(io::Error::last_os_error())
        } else {
            Ok(p)
        }
    };
    let (p, synced) = match file {
        None => (
            try_map(
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
            )?,
            false,
        ),
        Some(f) => {
            let fd = f.as_raw_fd();
            // MAP_SYNC works only on DAX; elsewhere the kernel refuses it (EOPNOTSUPP or
            // EINVAL on older kernels) and a plain shared mapping plus msync does the job.
            match try_map(libc::MAP_SHARED_VALIDATE | MAP_SYNC, fd) {
                Ok(p) => (p, true),
                Err(_) => (try_map(libc::MAP_SHARED, fd)?, false),
            }
        }
    };
    // mmap never returns NULL for a NULL hint with success.
    Ok((
        NonNull::new(p.cast()).ok_or_else(|| io::Error::from_raw_os_error(libc::ENOMEM))?,
        synced,
    ))
}

/// Zones bound to their nodes, as the devices of a volume.
pub struct ZoneStore {
    infos: Vec<DeviceInfo>,
    zones: Vec<Zone>,
    map_sync: Vec<bool>,
}

impl ZoneStore {
    /// Maps every zone: RAM zones bound to their node and prefaulted, persistent zones
    /// mapped shared.
    pub fn new(specs: &[ZoneSpec]) -> Result<ZoneStore, FsError> {
        if specs.is_empty() {
            return Err(FsError::Invalid(
                "a zone volume needs at least one zone".into(),
            ));
        }
        let mut infos = Vec::with_capacity(specs.len());
        let mut zones = Vec::with_capacity(specs.len());
        let mut map_sync = Vec::with_capacity(specs.len());
        let mut backings: Vec<(String, (u64, u64))> = Vec::new();
        for (i, spec) in specs.iter().enumerate() {
            spec.check_size()
                .map_err(|e| FsError::Invalid(format!("zone {spec}: {e}")))?;
            let len = spec.bytes as usize;
            let (zone, info, synced) = match &spec.path {
                None => {
                    let name = PathBuf::from(format!("ram-zone{i}@node{}", spec.node));
                    let (ptr, _) = map(len, None).map_err(|e| {
                        FsError::io(&name, format!("mapping {len} bytes of memory"), e)
                    })?;
                    let zone = Zone {
                        ptr,
                        len,
                        file: None,
                        locks: (0..len.div_ceil(CHUNK)).map(|_| RwLock::new(())).collect(),
                        dirty: Mutex::new(None),
                    };
                    bind_and_prefault(&zone, spec.node).map_err(|e| {
                        FsError::io(
                            &name,
                            format!(
                                "binding {len} bytes to node {} (mbind MPOL_BIND) and faulting \
                                 them in; check the node exists and has that much free memory",
                                spec.node
                            ),
                            e,
                        )
                    })?;
                    let info = DeviceInfo {
                        path: name,
                        node: spec.node,
                        bytes: spec.bytes,
                        kind: DeviceKind::RamZone,
                    };
                    (zone, info, false)
                }
                Some(path) => {
                    let meta = std::fs::metadata(path)
                        .map_err(|e| FsError::io(path, "looking up the zone's backing", e))?;
                    // Two zones over the same memory would be two mappings with separate
                    // locks: copies through them could race.
                    let id = if meta.file_type().is_block_device()
                        || meta.file_type().is_char_device()
                    {
                        (0, meta.rdev())
                    } else {
                        (meta.dev(), meta.ino())
                    };
                    if let Some((other, _)) = backings.iter().find(|(_, b)| *b == id) {
                        return Err(FsError::Invalid(format!(
                            "zone {spec}: {} is already the backing of zone {other}; \
                             give each zone its own device or file",
                            path.display()
                        )));
                    }
                    backings.push((spec.to_string(), id));
                    let mut flags = libc::O_CLOEXEC | libc::O_NONBLOCK | libc::O_NOCTTY;
                    if meta.file_type().is_block_device() {
                        // Nobody mounts or formats the device while it is a zone.
                        flags |= libc::O_EXCL;
                    }
                    let f = std::fs::OpenOptions::new()
                        .read(true)
                        .write(true)
                        .custom_flags(flags)
                        .open(path)
                        .map_err(|e| {
                            FsError::io(path, "opening the zone's backing read-write", e)
                        })?;
                    let have = backing_size(&f, path)?;
                    if have < spec.bytes {
                        return Err(FsError::Invalid(format!(
                            "zone {spec}: {} holds only {have} bytes; give a size of at most that",
                            path.display()
                        )));
                    }
                    let (ptr, synced) = map(len, Some(&f))
                        .map_err(|e| FsError::io(path, format!("mapping {len} bytes shared"), e))?;
                    let zone = Zone {
                        ptr,
                        len,
                        file: Some(f),
                        locks: (0..len.div_ceil(CHUNK)).map(|_| RwLock::new(())).collect(),
                        dirty: Mutex::new(None),
                    };
                    let info = DeviceInfo {
                        path: path.clone(),
                        node: spec.node,
                        bytes: spec.bytes,
                        kind: DeviceKind::PmemZone,
                    };
                    (zone, info, synced)
                }
            };
            zones.push(zone);
            infos.push(info);
            map_sync.push(synced);
        }
        Ok(ZoneStore {
            infos,
            zones,
            map_sync,
        })
    }

    /// Whether zone `dev` got a `MAP_SYNC` mapping (a DAX backing).
    pub fn map_sync(&self, dev: u16) -> bool {
        self.map_sync.get(dev as usize).copied().unwrap_or(false)
    }

    /// Where each zone's pages are now, from `move_pages` (faults nothing in).
    pub fn placement_check(&self) -> Result<Vec<ZonePlacement>, FsError> {
        let page = numaio_sys::page_size();
        let mut out = Vec::with_capacity(self.zones.len());
        for (i, (z, info)) in self.zones.iter().zip(&self.infos).enumerate() {
            let addrs: Vec<*const u8> = (0..z.len / page)
                // SAFETY: i * page < len: an address inside the live mapping; it is only
                // passed to move_pages, never dereferenced.
                .map(|p| unsafe { z.ptr.as_ptr().add(p * page) as *const u8 })
                .collect();
            let status = numaio_sys::query_pages(0, &addrs).map_err(|e| {
                FsError::io(
                    &info.path,
                    "querying the zone's page nodes (move_pages)",
                    io::Error::other(e.to_string()),
                )
            })?;
            let mut p = ZonePlacement {
                zone: i,
                node: info.node,
                pages: status.len(),
                on_node: 0,
                elsewhere: 0,
                unknown: 0,
            };
            for s in status {
                match s {
                    PageStatus::Node(n) if n == info.node => p.on_node += 1,
                    PageStatus::Node(_) => p.elsewhere += 1,
                    _ => p.unknown += 1,
                }
            }
            out.push(p);
        }
        Ok(out)
    }
}

/// The size of a persistent zone's backing: a file's length, a block device's size, or a
/// device-DAX character device's size from sysfs.
fn backing_size(f: &File, path: &std::path::Path) -> Result<u64, FsError> {
    let meta = f
        .metadata()
        .map_err(|e| FsError::io(path, "fstat of the zone's backing", e))?;
    let ft = meta.file_type();
    if ft.is_file() {
        Ok(meta.len())
    } else if ft.is_block_device() {
        crate::device::block_device_size(f, path)
    } else if ft.is_char_device() {
        let (maj, min) = (libc::major(meta.rdev()), libc::minor(meta.rdev()));
        let sys = format!("/sys/dev/char/{maj}:{min}/size");
        std::fs::read_to_string(&sys)
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .ok_or_else(|| {
                FsError::Invalid(format!(
                    "{}: a character device that is not device DAX (no size in {sys}); \
                     give a /dev/daxN.M, a /dev/pmemN or a file",
                    path.display()
                ))
            })
    } else {
        Err(FsError::Invalid(format!(
            "{}: not a file, block device or DAX device",
            path.display()
        )))
    }
}

/// Binds a RAM zone to `node` and faults every page in there.
fn bind_and_prefault(z: &Zone, node: u32) -> io::Result<()> {
    // SAFETY: the range is exactly our own fresh anonymous mapping, which nothing else uses.
    unsafe {
        numaio_sys::mbind(
            z.ptr.as_ptr(),
            z.len,
            &Policy::bind(&[node]),
            MbindFlags {
                strict: true,
                ..Default::default()
            },
        )
    }
    .map_err(|e| io::Error::other(e.to_string()))?;
    let page = numaio_sys::page_size();
    // MADV_POPULATE_WRITE (Linux 5.14) faults the whole range in one call and reports an
    // allocation failure as an error instead of a SIGBUS/OOM kill on touch.
    const MADV_POPULATE_WRITE: libc::c_int = 23;
    // SAFETY: advice on our own mapping; it changes no contents (the pages are zero).
    let r = unsafe { libc::madvise(z.ptr.as_ptr().cast(), z.len, MADV_POPULATE_WRITE) };
    if r != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
        // Older kernel: touch each page.
        for off in (0..z.len).step_by(page) {
            // SAFETY: off < len inside our mapping; no copy runs yet (the zone is not
            // shared before `new` returns), and writing the zero it already holds changes
            // nothing.
            unsafe { std::ptr::write_volatile(z.ptr.as_ptr().add(off), 0) };
        }
    }
    Ok(())
}

impl BlockStore for ZoneStore {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }

    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        check_range(info, "read", offset, buf.len())?;
        self.zones[dev as usize].copy_out(offset as usize, buf);
        Ok(())
    }

    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        check_range(info, "write", offset, data.len())?;
        self.zones[dev as usize].copy_in(offset as usize, data);
        Ok(())
    }

    fn read_cached(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<bool, FsError> {
        self.read_at(dev, offset, buf).map(|()| true)
    }

    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let info = device(&self.infos, dev)?;
        let z = &self.zones[dev as usize];
        if z.file.is_none() {
            return Ok(());
        }
        let Some((a, b)) = z.dirty.lock().take() else {
            return Ok(());
        };
        let page = numaio_sys::page_size();
        let start = a / page * page;
        let len = b - start;
        // SAFETY: [start, b) lies inside our live mapping (b <= z.len, start page aligned).
        let r = unsafe { libc::msync(z.ptr.as_ptr().add(start).cast(), len, libc::MS_SYNC) };
        if r != 0 {
            let e = io::Error::last_os_error();
            // Still dirty: the next sync retries the range.
            let mut d = z.dirty.lock();
            *d = Some(match *d {
                Some((x, y)) => (x.min(a), y.max(b)),
                None => (a, b),
            });
            return Err(FsError::io(
                &info.path,
                format!("msync(MS_SYNC) of {len} bytes at {start}"),
                e,
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_and_bad_ones_are_named() {
        let z: ZoneSpec = "1:4M".parse().unwrap();
        assert_eq!((z.node, z.bytes, z.path), (1, 4 << 20, None));
        let z: ZoneSpec = "0:8K:/dev/pmem0".parse().unwrap();
        assert_eq!(z.path, Some(PathBuf::from("/dev/pmem0")));
        assert_eq!(z.to_string(), "0:8192:/dev/pmem0");
        let z: ZoneSpec = "0:8K:/a:b".parse().unwrap();
        assert_eq!(z.path, Some(PathBuf::from("/a:b")));
        for bad in [
            "",
            "1",
            "x:4M",
            "1:",
            "1:4Q",
            "1:0",
            "1:1000",
            "1:4M:",
            "-1:4M",
            "1:99999999999999999999",
        ] {
            let e = bad.parse::<ZoneSpec>().unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{bad}: {e}");
        }
    }
}
