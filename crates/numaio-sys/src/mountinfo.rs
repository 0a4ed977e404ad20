//! The mount table of the calling process's mount namespace (`/proc/self/mountinfo`).
//!
//! Each line is `ID PARENT MAJ:MIN ROOT POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER`
//! (proc(5)); the kernel writes space, tab, newline and backslash in paths as `\ooo` octal
//! escapes, so fields are separated by single spaces and a path is decoded byte for byte.
//! [`parse`] is a pure function over the text: unit tested and fuzzed (`fuzz/`), it skips
//! lines that do not parse instead of failing the whole table.

use crate::error::{SysError, SysResult};
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};

/// The mount table of this process, read from here.
pub const SELF_MOUNTINFO: &str = "/proc/self/mountinfo";

/// One mount: a line of mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub id: u32,
    pub parent: u32,
    /// The device number of the mounted file system (`st_dev` of files under it).
    pub major: u32,
    pub minor: u32,
    /// The directory of the file system that is mounted here (`/` for a whole one).
    pub root: PathBuf,
    /// Where it is mounted.
    pub point: PathBuf,
    /// The file-system type, with its subtype (`ext4`, `fuse.numaio`).
    pub fs_type: String,
    /// What was mounted: a device path, `none`, or a FUSE server's name.
    pub source: PathBuf,
}

/// The mounts in the text of a mountinfo file, in its order (later mounts lie on top of
/// earlier ones at the same point). Lines that do not parse are skipped.
pub fn parse(text: &str) -> Vec<Mount> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mount> {
    let mut f = line.split(' ');
    let id = f.next()?.parse().ok()?;
    let parent = f.next()?.parse().ok()?;
    let (major, minor) = f.next()?.split_once(':')?;
    let (major, minor) = (major.parse().ok()?, minor.parse().ok()?);
    let root = unescape(f.next()?).into();
    let point = unescape(f.next()?).into();
    let _options = f.next()?;
    // Optional fields (`shared:N`, `master:N`, ...) up to the separator.
    f.find(|&x| x == "-")?;
    let fs_type = f.next()?.to_string();
    let source = unescape(f.next()?).into();
    Some(Mount {
        id,
        parent,
        major,
        minor,
        root,
        point,
        fs_type,
        source,
    })
}

/// The mount table of this process.
pub fn read_self() -> SysResult<Vec<Mount>> {
    let text = std::fs::read_to_string(SELF_MOUNTINFO).map_err(|source| SysError::Read {
        path: SELF_MOUNTINFO.into(),
        source,
    })?;
    Ok(parse(&text))
}

/// The mount that is visible at `point`: the last one mounted there.
pub fn topmost<'a>(mounts: &'a [Mount], point: &Path) -> Option<&'a Mount> {
    mounts.iter().rev().find(|m| m.point == point)
}

/// Decodes the `\ooo` octal escapes the kernel writes in `/proc` path fields (mountinfo,
/// `/proc/swaps`); anything else, a lone or malformed backslash included, stays as it is.
pub fn unescape(s: &str) -> OsString {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u16, |v, c| v * 8 + u16::from(c - b'0')))
            .and_then(|v| u8::try_from(v).ok());
        match (b[i], oct) {
            (b'\\', Some(v)) => {
                out.push(v);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    OsString::from_vec(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/root rw
23 22 0:21 / /proc rw,relatime - proc proc rw
95 22 0:39 / /var/tmp/a\\040b rw,nosuid,nodev,relatime shared:50 - fuse.numaio numaio\\040x rw,user_id=0
96 22 0:40 / /mnt/x rw shared:51 master:2 - fuse.numaio /dev/nvme0n1 rw
97 96 0:41 /sub /mnt/x rw - fuse numaio-ram:7 rw
98 22 8:1 / /srv rw - ext4  rw
garbage
1 2 3:4 / /no-separator rw ext4 /dev/x rw
";

    #[test]
    fn parses_fields_optional_ones_and_escapes() {
        let m = parse(INFO);
        assert_eq!(m.len(), 6, "{m:#?}");
        assert_eq!(
            m[0],
            Mount {
                id: 22,
                parent: 1,
                major: 259,
                minor: 2,
                root: "/".into(),
                point: "/".into(),
                fs_type: "ext4".into(),
                source: "/dev/root".into(),
            }
        );
        assert_eq!(m[2].point, Path::new("/var/tmp/a b"));
        assert_eq!(m[2].source, Path::new("numaio x"));
        assert_eq!(m[3].fs_type, "fuse.numaio");
        assert_eq!((m[4].root.as_path(), m[4].minor), (Path::new("/sub"), 41));
        // An empty source is a field of its own, not the next one.
        assert_eq!(m[5].fs_type, "ext4");
        assert_eq!(m[5].source, Path::new(""));
    }

    #[test]
    fn the_topmost_mount_is_the_last_at_its_point() {
        let m = parse(INFO);
        let top = |p: &str| topmost(&m, Path::new(p)).map(|m| (m.major, m.minor));
        assert_eq!(top("/mnt/x"), Some((0, 41)));
        assert_eq!(top("/var/tmp/a b"), Some((0, 39)));
        assert_eq!(top("/"), Some((259, 2)));
        assert_eq!(top("/mnt"), None);
        assert!(parse("garbage\n\n1 2").is_empty());
    }

    #[test]
    fn unescapes_octal_and_keeps_what_is_no_escape() {
        assert_eq!(unescape("a\\134b\\0"), "a\\b\\0");
        assert_eq!(unescape("\\011\\012\\040"), "\t\n ");
        // 0o777 is no byte: kept as written.
        assert_eq!(unescape("\\777"), "\\777");
        assert_eq!(unescape("\\"), "\\");
        assert_eq!(unescape("\\303\\251").into_vec(), "é".as_bytes());
    }

    #[test]
    fn this_process_is_mounted_somewhere() {
        let m = read_self().unwrap();
        assert!(topmost(&m, Path::new("/")).is_some(), "{m:#?}");
    }
}
