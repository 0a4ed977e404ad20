//! The data files of `numaio bench`: created by the bench, or existing ones used without
//! ever losing their data.
//!
//! Rules (also in `numaio bench --help`):
//! - a missing file is created (exclusively) and filled with non-zero data; it is kept after
//!   the run so later runs can reuse it;
//! - an existing file is never extended, truncated or rewritten by a read workload: it must
//!   be at least `--size` bytes;
//! - a write workload on an existing file needs `--overwrite` (then a short file is extended);
//! - block and character devices, and anything under `/dev`, `/proc` or `/sys`, need
//!   `--allow-device` (a block device's size comes from `BLKGETSIZE64`); FIFOs, sockets and
//!   directories are always refused, since a benchmark needs a file it can seek in.

use anyhow::{bail, Context};
use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What the bench may do to its file.
#[derive(Clone, Copy, Debug, Default)]
pub struct Permissions {
    /// The workload writes.
    pub write: bool,
    /// `--overwrite`: writing an existing file (and extending it) is allowed.
    pub overwrite: bool,
    /// `--allow-device`: devices and /dev, /proc, /sys paths are allowed.
    pub allow_device: bool,
}

/// The kind of file the bench runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Regular,
    BlockDevice,
    CharDevice,
}

/// A checked bench file.
#[derive(Debug)]
pub struct BenchFile {
    pub kind: Kind,
    /// Usable bytes: the file's size (a block device's from `BLKGETSIZE64`; a character
    /// device's is unknown, so the requested size).
    pub len: u64,
    /// The bench created the file in this run.
    pub created: bool,
}

/// Checks `path` against the rules above and creates it if missing; `seed` varies the fill
/// pattern of created files.
pub fn prepare(path: &Path, size: u64, perm: Permissions, seed: u64) -> anyhow::Result<BenchFile> {
    let shown = crate::output::quote(path);
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_CLOEXEC)
        .mode(0o644)
        .open(path)
    {
        Ok(f) => {
            if let Err(e) = fill(&f, path, 0, size, seed) {
                // Ours and incomplete: leave nothing behind.
                let _ = std::fs::remove_file(path);
                return Err(e);
            }
            return Ok(BenchFile {
                kind: Kind::Regular,
                len: size,
                created: true,
            });
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(e).with_context(|| {
                format!("cannot create {shown} (choose a writable --file, or a --dir that exists)")
            })
        }
    }
    // Non-blocking, so that opening a FIFO returns at once; the type is checked on the
    // opened descriptor, so it is the type of what we will use.
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | libc::O_NOCTTY)
        .open(path)
        .with_context(|| format!("cannot open {shown}"))?;
    let meta = f
        .metadata()
        .with_context(|| format!("cannot stat {shown}"))?;
    let ft = meta.file_type();
    let refuse_always = if ft.is_dir() {
        Some("a directory")
    } else if ft.is_fifo() {
        Some("a FIFO")
    } else if ft.is_socket() {
        Some("a socket")
    } else {
        None
    };
    if let Some(what) = refuse_always {
        bail!("{shown} is {what}; bench needs a regular file or a device it can seek in (choose another --file)");
    }
    let kind = if ft.is_block_device() {
        Kind::BlockDevice
    } else if ft.is_char_device() {
        Kind::CharDevice
    } else {
        Kind::Regular
    };
    if !perm.allow_device {
        match kind {
            Kind::BlockDevice => bail!(
                "{shown} is a block device; bench refuses devices unless given --allow-device (write workloads also need --overwrite and destroy its data)"
            ),
            Kind::CharDevice => bail!(
                "{shown} is a character device; bench refuses devices unless given --allow-device"
            ),
            Kind::Regular => {
                if let Some(top) = system_tree(path) {
                    bail!("{shown} is under {top}; bench refuses files there unless given --allow-device");
                }
            }
        }
    }
    let len = match kind {
        Kind::Regular => meta.len(),
        Kind::BlockDevice => block_device_size(&f).with_context(|| {
            format!("cannot get the size of block device {shown} (BLKGETSIZE64)")
        })?,
        Kind::CharDevice => size,
    };
    if perm.write && !perm.overwrite {
        bail!(
            "{shown} exists; a write workload would overwrite its data. Pass --overwrite to allow that, or name a new --file (bench creates it)"
        );
    }
    if len < size {
        if perm.write && kind == Kind::Regular {
            drop(f);
            let w = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_CLOEXEC)
                .open(path)
                .with_context(|| format!("cannot open {shown} for writing"))?;
            fill(&w, path, len, size, seed)?;
            return Ok(BenchFile {
                kind,
                len: size,
                created: false,
            });
        }
        bail!(
            "{shown} is {len} bytes, shorter than --size {size}; pass --size {len} or less (bench never extends a file it did not create{})",
            if kind == Kind::Regular { " unless given --overwrite with a write workload" } else { "" }
        );
    }
    Ok(BenchFile {
        kind,
        len,
        created: false,
    })
}

/// `/dev`, `/proc` or `/sys` when `path` lies in one of them (after resolving links).
fn system_tree(path: &Path) -> Option<&'static str> {
    let real = std::fs::canonicalize(path).ok()?;
    ["/dev", "/proc", "/sys"]
        .into_iter()
        .find(|top| real.starts_with(top))
}

fn block_device_size(f: &File) -> std::io::Result<u64> {
    // BLKGETSIZE64 = _IOR(0x12, 114, size_t); libc does not export it.
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    let mut bytes: u64 = 0;
    // SAFETY: BLKGETSIZE64 writes one u64 through the pointer, which points to our local.
    let r = unsafe { libc::ioctl(f.as_raw_fd(), BLKGETSIZE64 as _, &mut bytes as *mut u64) };
    if r < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(bytes)
}

/// Writes non-zero data over `[from, to)`.
fn fill(f: &File, path: &Path, from: u64, to: u64, seed: u64) -> anyhow::Result<()> {
    let chunk: Vec<u8> = (0..1u32 << 20)
        .map(|i| (i.wrapping_mul(2654435761).wrapping_add(seed as u32) >> 13) as u8 | 1)
        .collect();
    let mut off = from;
    while off < to {
        let n = ((to - off) as usize).min(chunk.len());
        f.write_all_at(&chunk[..n], off).map_err(|e| {
            anyhow::anyhow!(
                "cannot fill {} to {to} bytes: {}",
                crate::output::quote(path),
                crate::output::describe_io_error(&e)
            )
        })?;
        off += n as u64;
    }
    f.sync_all().map_err(|e| {
        anyhow::anyhow!(
            "cannot sync {}: {}",
            crate::output::quote(path),
            crate::output::describe_io_error(&e)
        )
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn perm(write: bool, overwrite: bool) -> Permissions {
        Permissions {
            write,
            overwrite,
            allow_device: false,
        }
    }

    #[test]
    fn existing_files_keep_their_data() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"IMPORTANT\n").unwrap();
        let e = prepare(&p, 1 << 20, perm(false, false), 0).unwrap_err();
        assert!(e.to_string().contains("shorter than --size"), "{e}");
        let e = prepare(&p, 4, perm(true, false), 0).unwrap_err();
        assert!(e.to_string().contains("--overwrite"), "{e}");
        let f = prepare(&p, 4, perm(false, false), 0).unwrap();
        assert!(!f.created);
        assert_eq!(f.len, 10);
        assert_eq!(std::fs::read(&p).unwrap(), b"IMPORTANT\n");
        let f = prepare(&p, 8192, perm(true, true), 0).unwrap();
        assert_eq!((f.len, f.created), (8192, false));
        let data = std::fs::read(&p).unwrap();
        assert_eq!(&data[..10], b"IMPORTANT\n", "extending keeps the start");
        assert_eq!(data.len(), 8192);
        let q = dir.path().join("new");
        let f = prepare(&q, 5000, perm(true, false), 0).unwrap();
        assert!(f.created);
        assert!(std::fs::read(&q).unwrap().iter().all(|&b| b != 0));
    }

    #[test]
    fn devices_and_system_files_need_allow_device() {
        let e = prepare(Path::new("/dev/null"), 4096, perm(false, false), 0).unwrap_err();
        assert!(e.to_string().contains("character device"), "{e}");
        let e = prepare(Path::new("/proc/self/status"), 1, perm(false, false), 0).unwrap_err();
        assert!(e.to_string().contains("under /proc"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let e = prepare(dir.path(), 1, perm(false, false), 0).unwrap_err();
        assert!(e.to_string().contains("directory"), "{e}");
        let f = prepare(
            Path::new("/dev/zero"),
            4096,
            Permissions {
                allow_device: true,
                ..Default::default()
            },
            0,
        )
        .unwrap();
        assert_eq!((f.kind, f.len), (Kind::CharDevice, 4096));
    }
}
