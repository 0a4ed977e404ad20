//! The kernel's readahead window of a FUSE mount. The kernel caps it at the value it offered
//! at INIT (128 KiB), so sequential reads reach the server as 128 KiB requests however large
//! the reader's reads are. The window is a property of the mount's own backing device
//! (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`), which root may raise once the mount exists:
//! with 1 MiB the kernel sends 1 MiB READs (the largest FUSE request), an eighth of the
//! round trips.

use numaio_sys::mountinfo;
use std::io;
use std::path::Path;

/// The window this mount asks for: the largest FUSE request (256 pages).
pub const READAHEAD_KB: u64 = 1024;

/// The readahead knob of the mount at `mp` (an absolute path as mountinfo shows it): the
/// `read_ahead_kb` of the topmost mount's backing device.
pub fn knob(mp: &Path) -> io::Result<String> {
    let mounts = mountinfo::read_self().map_err(io::Error::other)?;
    let m = mountinfo::topmost(&mounts, mp).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{} is not in {}", mp.display(), mountinfo::SELF_MOUNTINFO),
        )
    })?;
    Ok(format!(
        "/sys/class/bdi/{}:{}/read_ahead_kb",
        m.major, m.minor
    ))
}

/// Raises the readahead window of the mount at `mp` (an absolute path as mountinfo shows
/// it) to [`READAHEAD_KB`]; a larger window someone set is kept. Returns the window now.
pub fn raise(mp: &str) -> io::Result<u64> {
    let knob = knob(Path::new(mp))?;
    let now: u64 = std::fs::read_to_string(&knob)?
        .trim()
        .parse()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("{knob}: {e}")))?;
    if now >= READAHEAD_KB {
        return Ok(now);
    }
    std::fs::write(&knob, READAHEAD_KB.to_string())
        .map_err(|e| io::Error::new(e.kind(), format!("writing {knob}: {e}")))?;
    Ok(READAHEAD_KB)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_that_is_no_mount_is_an_error() {
        let e = raise("/nonexistent/numaio/mount").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/numaio/mount"), "{e}");
    }
}
