//! The optional ext4 disk: files of given sizes, built without root or loop devices
//! (`truncate` + `mkfs.ext4 -d DIR`), attached as virtio `/dev/vda` and mounted on `/mnt`.

use crate::error::{LabError, LabResult};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the guest mounts the disk.
pub const GUEST_MOUNT: &str = "/mnt";

/// What a file on the disk contains.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Content {
    /// The deterministic pattern of [`pattern_fill`]: each 4 KiB page starts with its page
    /// index (u64 little endian), the other bytes are `offset % 251`.
    Pattern,
    /// Zeros. mkfs stores zero blocks as holes; reads still fill the page cache.
    Zeros,
    /// Exactly these bytes (the size is the length).
    Bytes(Vec<u8>),
}

/// One file on the disk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiskFile {
    /// Path relative to the disk's root (`data/a.bin` appears as `/mnt/data/a.bin`).
    pub path: String,
    pub size: u64,
    pub content: Content,
    /// Permission bits (owner root). 0o644 by default.
    pub mode: u32,
}

impl DiskFile {
    pub fn pattern(path: &str, size: u64) -> DiskFile {
        DiskFile {
            path: path.into(),
            size,
            content: Content::Pattern,
            mode: 0o644,
        }
    }

    pub fn zeros(path: &str, size: u64) -> DiskFile {
        DiskFile {
            content: Content::Zeros,
            ..DiskFile::pattern(path, size)
        }
    }

    pub fn bytes(path: &str, data: Vec<u8>) -> DiskFile {
        DiskFile {
            size: data.len() as u64,
            content: Content::Bytes(data),
            ..DiskFile::pattern(path, 0)
        }
    }

    /// Sets the permission bits, e.g. 0o600 for a file only root can read.
    pub fn with_mode(mut self, mode: u32) -> DiskFile {
        self.mode = mode;
        self
    }
}

/// An ext4 disk made of files.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DiskSpec {
    pub files: Vec<DiskFile>,
    /// Image size; by default the files plus 25 % and 32 MiB of room.
    pub size_mib: Option<u64>,
}

impl DiskSpec {
    pub fn new() -> DiskSpec {
        DiskSpec::default()
    }

    pub fn file(mut self, f: DiskFile) -> DiskSpec {
        self.files.push(f);
        self
    }

    pub fn size_mib(mut self, mib: u64) -> DiskSpec {
        self.size_mib = Some(mib);
        self
    }

    /// Parses the CLI form `name=SIZE` (SIZE like `64M`, `4096`, `1G`), a pattern file.
    pub fn parse_file_arg(arg: &str) -> LabResult<DiskFile> {
        let (name, size) = arg.split_once('=').ok_or_else(|| {
            LabError::BadDisk(format!(
                "{arg:?}: write a disk file as NAME=SIZE, e.g. data.bin=64M"
            ))
        })?;
        let size = numaio_sys::topology::parse_size(size).ok_or_else(|| {
            LabError::BadDisk(format!(
                "{arg:?}: {size:?} is not a size (e.g. 4096, 64K, 64M, 1G)"
            ))
        })?;
        Ok(DiskFile::pattern(name, size))
    }

    fn image_mib(&self) -> u64 {
        self.size_mib.unwrap_or_else(|| {
            let data: u64 = self
                .files
                .iter()
                .map(|f| f.size.div_ceil(4096) * 4096)
                .sum();
            let mib = data.div_ceil(1 << 20);
            mib + mib / 4 + 32 + self.files.len() as u64 / 64
        })
    }

    fn validate(&self) -> LabResult<()> {
        for f in &self.files {
            let p = Path::new(&f.path);
            if f.path.is_empty()
                || p.is_absolute()
                || p.components()
                    .any(|c| !matches!(c, std::path::Component::Normal(_)))
            {
                return Err(LabError::BadDisk(format!(
                    "file path {:?} must be relative, without `..` (it is placed under {GUEST_MOUNT})",
                    f.path
                )));
            }
            if let Content::Bytes(b) = &f.content {
                if b.len() as u64 != f.size {
                    return Err(LabError::BadDisk(format!(
                        "{}: size differs from its bytes",
                        f.path
                    )));
                }
            }
        }
        Ok(())
    }

    /// Builds the image `work/disk.img` (files staged in `work/disk-root`).
    pub fn build(&self, work: &Path) -> LabResult<PathBuf> {
        self.validate()?;
        let root = work.join("disk-root");
        std::fs::create_dir_all(&root)
            .map_err(LabError::io(format!("creating {}", root.display())))?;
        for f in &self.files {
            let path = root.join(&f.path);
            if let Some(dir) = path.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(LabError::io(format!("creating {}", dir.display())))?;
            }
            write_file(&path, f)?;
        }
        let img = work.join("disk.img");
        let file = std::fs::File::create(&img)
            .map_err(LabError::io(format!("creating {}", img.display())))?;
        file.set_len(self.image_mib() << 20)
            .map_err(LabError::io(format!("sizing {}", img.display())))?;
        drop(file);
        let out = Command::new("mkfs.ext4")
            .args(["-q", "-F", "-b", "4096", "-L", "numaio-lab", "-d"])
            .arg(&root)
            .arg(&img)
            .output()
            .map_err(|e| LabError::MissingHostFile {
                what: "mkfs.ext4".into(),
                path: "mkfs.ext4".into(),
                hint: format!("{e}; install it with `apt-get install e2fsprogs`"),
            })?;
        if !out.status.success() {
            return Err(LabError::BadDisk(format!(
                "mkfs.ext4 failed for a {} MiB image: {}",
                self.image_mib(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        // the staged copies are no longer needed; the image holds them
        let _ = std::fs::remove_dir_all(&root);
        Ok(img)
    }
}

/// An ext4 image that outlives a run: build it once, attach it to several scenarios in
/// turn ([`crate::Scenario::disk_image`]), check it with e2fsck between them. The image
/// lives in its own temp directory, removed when the `DiskImage` is dropped (unless it was
/// opened with [`DiskImage::open`]).
#[derive(Debug)]
pub struct DiskImage {
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

/// What e2fsck said about an image after a power cut.
#[derive(Clone, Debug)]
pub struct FsckReport {
    /// Exit status of `e2fsck -f -y` (journal replay and repairs): 0 clean, 1 errors
    /// corrected, 4 errors left, 8 and up: e2fsck could not run.
    pub repair_status: i32,
    pub repair_output: String,
    /// Exit status of the read-only `e2fsck -f -n` afterwards (0: consistent).
    pub check_status: i32,
    pub check_output: String,
}

impl FsckReport {
    /// Whether the repair pass recovered the journal.
    pub fn recovered_journal(&self) -> bool {
        self.repair_output.contains("recovering journal")
    }

    /// The problems the repair pass fixed (the line before each "...? yes"), leaving out the
    /// superblock's free block and inode totals (ext4 updates those lazily, so they are
    /// stale after any unclean shutdown and the kernel recomputes them at mount) and
    /// optimisations ("extent tree could be narrower. Optimize?").
    pub fn repairs(&self) -> Vec<&str> {
        let mut out = Vec::new();
        let mut problem = "";
        for line in self.repair_output.lines() {
            let line = line.trim();
            if line.ends_with("? yes") {
                // "Fix? yes" on its own line, or after the problem on the same line
                if line.split_whitespace().count() > 2 {
                    problem = line;
                }
                let lazy_total = problem.starts_with("Free blocks count wrong (")
                    || problem.starts_with("Free inodes count wrong (");
                let optimisation = line.ends_with("Optimize? yes");
                if !lazy_total && !optimisation {
                    out.push(if problem.is_empty() { line } else { problem });
                }
                problem = "";
            } else if !line.is_empty() {
                problem = line;
            }
        }
        out
    }

    /// The file system was consistent after journal replay alone: no repairs and a clean
    /// read-only check.
    pub fn clean(&self) -> bool {
        self.repair_status <= 1 && self.repairs().is_empty() && self.check_status == 0
    }

    /// Both passes' output, for assertion messages.
    pub fn report(&self) -> String {
        format!(
            "e2fsck -f -y: status {}\n{}\ne2fsck -f -n: status {}\n{}",
            self.repair_status,
            self.repair_output.trim(),
            self.check_status,
            self.check_output.trim()
        )
    }
}

impl DiskImage {
    /// Builds the image from a spec in a fresh temp directory.
    pub fn build(spec: &DiskSpec) -> LabResult<DiskImage> {
        let dir = tempfile::Builder::new()
            .prefix("numaio-lab-disk-")
            .tempdir()
            .map_err(LabError::io("creating a temp dir for a disk image"))?;
        let path = spec.build(dir.path())?;
        Ok(DiskImage {
            path,
            _dir: Some(dir),
        })
    }

    /// Uses an existing image file (not removed on drop).
    pub fn open(path: impl Into<PathBuf>) -> LabResult<DiskImage> {
        let path = path.into();
        if !path.is_file() {
            return Err(LabError::BadDisk(format!(
                "disk image {} does not exist or is not a regular file",
                path.display()
            )));
        }
        Ok(DiskImage { path, _dir: None })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Copies the image to `path` (kept: not removed on drop), e.g. the state before a boot
    /// whose write log will be replayed onto it.
    pub fn copy_to(&self, path: impl Into<PathBuf>) -> LabResult<DiskImage> {
        let path = path.into();
        std::fs::copy(&self.path, &path).map_err(LabError::io(format!(
            "copying {} to {}",
            self.path.display(),
            path.display()
        )))?;
        Ok(DiskImage { path, _dir: None })
    }

    /// Copies the file at `path` (relative to the disk's root) out of the image with
    /// debugfs, without mounting; `Ok(false)` if the file does not exist. Run
    /// [`DiskImage::fsck`] first after a cut: debugfs does not replay the journal.
    pub fn dump_file(&self, path: &str, out: &Path) -> LabResult<bool> {
        let _ = std::fs::remove_file(out);
        let res = Command::new(find_tool("debugfs"))
            .arg("-R")
            .arg(format!(
                "dump /{} {}",
                path.trim_start_matches('/'),
                out.display()
            ))
            .arg(&self.path)
            .output()
            .map_err(|e| LabError::MissingHostFile {
                what: "debugfs".into(),
                path: "debugfs".into(),
                hint: format!("{e}; install it with `apt-get install e2fsprogs`"),
            })?;
        // debugfs exits 0 even when the file is missing; it says so on stderr
        let err = String::from_utf8_lossy(&res.stderr);
        if err.contains("File not found") {
            return Ok(false);
        }
        if !out.is_file() {
            return Err(LabError::BadDisk(format!(
                "debugfs could not copy {path} out of {}: {}",
                self.path.display(),
                err.trim()
            )));
        }
        Ok(true)
    }

    /// Runs `e2fsck -f -y` (replays the journal, repairs) and then `e2fsck -f -n` (must find
    /// nothing) on the image. Call it only while no guest uses the image.
    pub fn fsck(&self) -> LabResult<FsckReport> {
        let run = |mode: &str| -> LabResult<(i32, String)> {
            let out = Command::new(find_tool("e2fsck"))
                // extent trees that "could be narrower" are an optimisation, not damage
                .args(["-f", "-E", "no_optimize_extents", mode])
                .arg(&self.path)
                .output()
                .map_err(|e| LabError::MissingHostFile {
                    what: "e2fsck".into(),
                    path: "e2fsck".into(),
                    hint: format!("{e}; install it with `apt-get install e2fsprogs`"),
                })?;
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // killed by a signal: report it like e2fsck's "operational error"
            Ok((out.status.code().unwrap_or(8), text))
        };
        let (repair_status, repair_output) = run("-y")?;
        let (check_status, check_output) = run("-n")?;
        Ok(FsckReport {
            repair_status,
            repair_output,
            check_status,
            check_output,
        })
    }
}

/// e2fsprogs tools live in /sbin, which is not on every user's PATH.
fn find_tool(name: &str) -> PathBuf {
    ["/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from(name))
}

fn write_file(path: &Path, f: &DiskFile) -> LabResult<()> {
    use std::os::unix::fs::PermissionsExt;
    let ctx = || format!("writing {}", path.display());
    let file = std::fs::File::create(path).map_err(LabError::io(ctx()))?;
    match &f.content {
        Content::Zeros => file.set_len(f.size).map_err(LabError::io(ctx()))?,
        Content::Bytes(b) => (&file).write_all(b).map_err(LabError::io(ctx()))?,
        Content::Pattern => {
            let mut w = std::io::BufWriter::with_capacity(1 << 20, &file);
            let mut buf = vec![0u8; 1 << 20];
            let mut off = 0u64;
            while off < f.size {
                let n = (f.size - off).min(buf.len() as u64) as usize;
                pattern_fill(off, &mut buf[..n]);
                w.write_all(&buf[..n]).map_err(LabError::io(ctx()))?;
                off += n as u64;
            }
            w.flush().map_err(LabError::io(ctx()))?;
        }
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(f.mode))
        .map_err(LabError::io(format!("chmod {}", path.display())))
}

/// Fills `buf` with the pattern bytes of a file starting at `offset`.
pub fn pattern_fill(offset: u64, buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        let off = offset + i as u64;
        let in_page = off % 4096;
        *b = if in_page < 8 {
            ((off / 4096) >> (8 * in_page)) as u8
        } else {
            (off % 251) as u8
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_marks_pages() {
        let mut b = vec![0u8; 8192 + 16];
        pattern_fill(0, &mut b);
        assert_eq!(&b[4096..4104], &1u64.to_le_bytes());
        assert_eq!(b[9], 9);
        let mut c = vec![0u8; 16];
        pattern_fill(8192, &mut c);
        assert_eq!(&c[..], &b[8192..]);
    }

    #[test]
    fn fsck_report_ignores_lazy_totals() {
        let r = FsckReport {
            repair_status: 1,
            repair_output: "x: recovering journal\nPass 5: Checking group summary information\nFree blocks count wrong (249189, counted=244862).\nFix? yes\n\nFree inodes count wrong (65525, counted=65524).\nFix? yes\n".into(),
            check_status: 0,
            check_output: String::new(),
        };
        assert!(r.recovered_journal());
        assert!(r.repairs().is_empty(), "{:?}", r.repairs());
        let opt = FsckReport {
            repair_output: format!(
                "Inode 15 extent tree (at level 1) could be narrower.  Optimize? yes\n{}",
                r.repair_output
            ),
            ..r.clone()
        };
        assert!(opt.clean(), "{:?}", opt.repairs());
        assert!(r.clean());
        let bad = FsckReport {
            repair_output: format!(
                "{}Inode 12, i_size is 4096, should be 8192.  Fix? yes\nFree blocks count wrong for group #0 (1, counted=2).\nFix? yes\n",
                r.repair_output
            ),
            ..r.clone()
        };
        assert_eq!(bad.repairs().len(), 2, "{:?}", bad.repairs());
        assert!(!bad.clean());
    }

    #[test]
    fn parses_cli_files() {
        let f = DiskSpec::parse_file_arg("data.bin=64M").unwrap();
        assert_eq!(f.size, 64 << 20);
        assert!(DiskSpec::parse_file_arg("data.bin").is_err());
        assert!(DiskSpec::parse_file_arg("x=lots").is_err());
    }

    #[test]
    fn rejects_escaping_paths() {
        let d = DiskSpec::new().file(DiskFile::zeros("../x", 1));
        assert!(d.build(Path::new("/nonexistent")).is_err());
        let d = DiskSpec::new().file(DiskFile::zeros("/x", 1));
        assert!(d.build(Path::new("/nonexistent")).is_err());
    }

    #[test]
    fn builds_an_image_when_mkfs_is_present() {
        if Command::new("mkfs.ext4").arg("-V").output().is_err() {
            eprintln!("mkfs.ext4 missing; skipping");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let spec = DiskSpec::new()
            .file(DiskFile::pattern("a/p.bin", 100_000))
            .file(DiskFile::zeros("z.bin", 1 << 20).with_mode(0o600));
        let img = spec.build(dir.path()).unwrap();
        assert_eq!(
            std::fs::metadata(&img).unwrap().len(),
            spec.image_mib() << 20
        );
        // debugfs can read it back without mounting
        if let Ok(out) = Command::new("debugfs")
            .arg("-R")
            .arg("cat /a/p.bin")
            .arg(&img)
            .output()
        {
            let mut want = vec![0u8; 100_000];
            pattern_fill(0, &mut want);
            assert_eq!(out.stdout, want);
        }
    }
}
