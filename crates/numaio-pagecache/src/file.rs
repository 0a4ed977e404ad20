//! Opening files for inspection and walking directories.
//!
//! Files are opened read-only (never for writing: no command changes file contents), with
//! `O_NOATIME` when the caller owns the file so that looking does not touch the atime, and
//! `O_NONBLOCK` so that a FIFO or device that slipped past the type check cannot hang us.

use crate::error::PagecacheError;
use std::collections::HashSet;
use std::fs::{File, Metadata, OpenOptions};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// A regular file opened read-only.
#[derive(Debug)]
pub struct OpenFile {
    pub path: PathBuf,
    pub file: File,
    pub size: u64,
    pub meta: Metadata,
}

fn kind_of(m: &Metadata) -> &'static str {
    let t = m.file_type();
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, m: &Metadata) -> PagecacheError {
    PagecacheError::NotRegular {
        path: path.into(),
        kind: kind_of(m),
        hint: if m.is_dir() {
            " (use -r to walk directories)"
        } else {
            ""
        },
    }
}

/// Opens `path` (following symlinks) if it is a regular file the caller can read.
pub fn open_regular(path: &Path) -> Result<OpenFile, PagecacheError> {
    open_checked(path, true, false)
}

/// Opens `path` if it is a regular file: `stat_first` checks the type before opening (else
/// only on the descriptor), `no_follow` refuses a symbolic link.
pub(crate) fn open_checked(
    path: &Path,
    stat_first: bool,
    no_follow: bool,
) -> Result<OpenFile, PagecacheError> {
    // The stat keeps us from opening devices (opening some has side effects, e.g. a tape
    // rewinds); entries a directory listed as regular files skip it.
    if stat_first {
        let m = std::fs::metadata(path).map_err(|e| PagecacheError::io(path, "stat", e))?;
        if !m.is_file() {
            return Err(not_regular(path, &m));
        }
    }
    let open = |noatime: bool| {
        let mut flags = libc::O_NONBLOCK | libc::O_CLOEXEC;
        if noatime {
            flags |= libc::O_NOATIME;
        }
        if no_follow {
            flags |= libc::O_NOFOLLOW;
        }
        OpenOptions::new().read(true).custom_flags(flags).open(path)
    };
    // O_NOATIME is allowed only to the owner (or CAP_FOWNER): EPERM otherwise.
    let file = match open(true) {
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => open(false),
        r => r,
    }
    .map_err(|e| PagecacheError::io(path, "open for reading", e))?;
    // Re-check on the descriptor: the path may have been replaced since the stat.
    let meta = file
        .metadata()
        .map_err(|e| PagecacheError::io(path, "fstat", e))?;
    if !meta.is_file() {
        return Err(not_regular(path, &meta));
    }
    Ok(OpenFile {
        path: path.into(),
        size: meta.len(),
        file,
        meta,
    })
}

/// Whether `mincore(2)` reports the true page-cache state of this file to the caller: only
/// for root, the file's owner, or a caller with write permission. For anyone else the kernel
/// reports only pages mapped in the caller's own page tables, so residency reads as zero.
pub fn mincore_is_truthful(f: &OpenFile) -> bool {
    let euid = euid();
    if euid == 0 || f.meta.uid() == euid {
        return true;
    }
    let Ok(c) = std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(f.path.as_os_str()))
    else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), libc::W_OK, libc::AT_EACCESS) == 0 }
}

/// The effective uid, asked once: it does not change while numaio runs, and asking per
/// file showed in system-call profiles of large trees.
pub(crate) fn euid() -> u32 {
    static EUID: std::sync::OnceLock<u32> = std::sync::OnceLock::new();
    // SAFETY: geteuid has no preconditions.
    *EUID.get_or_init(|| unsafe { libc::geteuid() })
}

/// Expands command-line paths into the regular files to work on, in order.
///
/// Command-line operands are followed if they are symlinks (like `find -H`); symlinks met
/// while walking a directory (`recursive`) are followed only with `follow_symlinks`. FIFOs,
/// sockets and devices met while walking are skipped silently (they hold no page cache of
/// their own); given explicitly, they are errors. Each error names its path, and the walk
/// goes on with the other paths.
pub fn collect_files(
    paths: &[PathBuf],
    recursive: bool,
    follow_symlinks: bool,
) -> Vec<Result<PathBuf, PagecacheError>> {
    let mut out = Vec::new();
    let mut seen_dirs = HashSet::new();
    for p in paths {
        match std::fs::metadata(p) {
            Err(e) => out.push(Err(PagecacheError::io(p, "stat", e))),
            Ok(m) if m.is_file() => out.push(Ok(p.clone())),
            Ok(m) if m.is_dir() && recursive => {
                walk(p, &m, follow_symlinks, &mut seen_dirs, &mut out)
            }
            Ok(m) => out.push(Err(not_regular(p, &m))),
        }
    }
    out
}

fn walk(
    dir: &Path,
    meta: &Metadata,
    follow: bool,
    seen: &mut HashSet<(u64, u64)>,
    out: &mut Vec<Result<PathBuf, PagecacheError>>,
) {
    // Guards against symlink loops when following.
    if !seen.insert((meta.dev(), meta.ino())) {
        return;
    }
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) => return out.push(Err(PagecacheError::io(dir, "list directory", e))),
    };
    let mut entries: Vec<PathBuf> = Vec::new();
    for e in rd {
        match e {
            Ok(e) => entries.push(e.path()),
            Err(e) => out.push(Err(PagecacheError::io(dir, "list directory", e))),
        }
    }
    entries.sort();
    for p in entries {
        let lm = match std::fs::symlink_metadata(&p) {
            Ok(m) => m,
            Err(e) => {
                out.push(Err(PagecacheError::io(&p, "stat", e)));
                continue;
            }
        };
        let m = if lm.file_type().is_symlink() {
            if !follow {
                continue;
            }
            match std::fs::metadata(&p) {
                Ok(m) => m,
                // A dangling link met while walking: nothing to report on.
                Err(_) => continue,
            }
        } else {
            lm
        };
        if m.is_file() {
            out.push(Ok(p));
        } else if m.is_dir() {
            walk(&p, &m, follow, seen, out);
        }
    }
}
