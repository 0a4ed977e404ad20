//! The kernel's readahead window of a FUSE mount. The kernel caps it at the value it offered
//! at INIT (128 KiB), so sequential reads reach the server as 128 KiB requests however large
//! the reader's reads are. The window is a property of the mount's own backing device
//! (`/sys/class/bdi/MAJ:MIN/read_ahead_kb`), which root may raise once the mount exists:
//! with 1 MiB the kernel sends 1 MiB READs (the largest FUSE request), an eighth of the
//! round trips.

use std::io;

/// The window this mount asks for: the largest FUSE request (256 pages).
pub const READAHEAD_KB: u64 = 1024;

/// The `MAJ:MIN` of the topmost mount at `mp` in `/proc/self/mountinfo` text.
pub fn device_of(mountinfo: &str, mp: &str) -> Option<String> {
    // Later lines are mounted on top of earlier ones.
    mountinfo.lines().rev().find_map(|l| {
        let mut f = l.split(' ');
        let dev = f.nth(2)?;
        let point = f.nth(1)?;
        (unescape(point) == mp).then(|| dev.to_string())
    })
}

/// mountinfo writes space, tab, newline and backslash as `\ooo` octal escapes.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], oct) {
            (b'\\', Some(d)) => {
                let v = d.iter().fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
                out.push(v as u8);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Raises the readahead window of the mount at `mp` (an absolute path as mountinfo shows
/// it) to [`READAHEAD_KB`]; a larger window someone set is kept. Returns the window now.
pub fn raise(mp: &str) -> io::Result<u64> {
    let info = std::fs::read_to_string("/proc/self/mountinfo")?;
    let dev = device_of(&info, mp).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{mp} is not in /proc/self/mountinfo"),
        )
    })?;
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
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

    const INFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw
95 22 0:39 / /var/tmp/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse.numaio numaio rw,user_id=0
96 22 0:40 / /mnt/x rw shared:51 - fuse.numaio numaio rw
97 96 0:41 / /mnt/x rw shared:52 - fuse.numaio numaio rw
";

    #[test]
    fn finds_the_topmost_mount_and_unescapes_names() {
        assert_eq!(device_of(INFO, "/var/tmp/a b").as_deref(), Some("0:39"));
        assert_eq!(device_of(INFO, "/mnt/x").as_deref(), Some("0:41"));
        assert_eq!(device_of(INFO, "/").as_deref(), Some("259:2"));
        assert_eq!(device_of(INFO, "/mnt"), None);
        assert_eq!(device_of("garbage\n\n1 2", "/"), None);
        assert_eq!(unescape("a\\134b\\0"), "a\\b\\0");
    }

    #[test]
    fn a_path_that_is_no_mount_is_an_error() {
        let e = raise("/nonexistent/numaio/mount").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/numaio/mount"), "{e}");
    }
}
