//! Typed FUSE requests: what each transport turns a kernel request into before the one
//! serving table (`serve`) answers it against `Fs`.
//!
//! The classic transport builds them from fuser's already-decoded callbacks; the io_uring
//! transport decodes the kernel's bytes with [`decode`], the only reader of the wire format
//! for requests. [`decode`] checks every length against the bytes it was given and never
//! panics: a malformed request becomes an errno for the kernel.

use crate::uring::abi::{self, fattr, op};
use numaio_fs::SetAttr;

/// One request, its names and data borrowed from the transport's buffer (never copied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request<'a> {
    Lookup {
        parent: u64,
        name: &'a [u8],
    },
    Getattr {
        ino: u64,
    },
    Setattr {
        ino: u64,
        attr: SetAttr,
    },
    Readlink {
        ino: u64,
    },
    Symlink {
        parent: u64,
        name: &'a [u8],
        target: &'a [u8],
    },
    /// `mode` holds the file type bits; `umask` is applied when serving.
    Mknod {
        parent: u64,
        name: &'a [u8],
        mode: u32,
        umask: u32,
        rdev: u32,
    },
    Mkdir {
        parent: u64,
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    Unlink {
        parent: u64,
        name: &'a [u8],
    },
    Rmdir {
        parent: u64,
        name: &'a [u8],
    },
    Rename {
        parent: u64,
        name: &'a [u8],
        newparent: u64,
        newname: &'a [u8],
        flags: u32,
    },
    Link {
        ino: u64,
        newparent: u64,
        newname: &'a [u8],
    },
    /// `flags` are the open(2) flags.
    Open {
        ino: u64,
        flags: i32,
    },
    Opendir {
        ino: u64,
    },
    /// `flags` are the flags the file was opened with (`O_DIRECT` matters).
    Read {
        ino: u64,
        offset: u64,
        size: u32,
        flags: i32,
    },
    Write {
        ino: u64,
        offset: u64,
        data: &'a [u8],
    },
    Statfs,
    Release {
        ino: u64,
    },
    /// RELEASEDIR and DESTROY: nothing to do (directory handles hold nothing).
    Nothing,
    /// FLUSH, at each close where the kernel sends it: nothing to do (data reaches `Fs` on
    /// each write or at the kernel's writeback, durability is fsync's job).
    Flush,
    Fsync {
        ino: u64,
        datasync: bool,
    },
    Fsyncdir {
        ino: u64,
    },
    Syncfs,
    Setxattr {
        ino: u64,
        name: &'a [u8],
        value: &'a [u8],
        flags: u32,
    },
    /// `size` 0 asks for the value's length only.
    Getxattr {
        ino: u64,
        name: &'a [u8],
        size: u32,
    },
    Listxattr {
        ino: u64,
        size: u32,
    },
    Removexattr {
        ino: u64,
        name: &'a [u8],
    },
    Access {
        ino: u64,
        mask: u32,
    },
    Create {
        parent: u64,
        name: &'a [u8],
        mode: u32,
        umask: u32,
    },
    /// `size` is the reply buffer's size where the transport says (io_uring).
    Readdir {
        ino: u64,
        offset: u64,
        size: Option<u32>,
    },
    Readdirplus {
        ino: u64,
        offset: u64,
        size: Option<u32>,
    },
    Fallocate {
        ino: u64,
        offset: u64,
        length: u64,
        mode: u32,
    },
    /// Only `SEEK_DATA` and `SEEK_HOLE` reach a server.
    Lseek {
        ino: u64,
        offset: i64,
        whence: u32,
    },
}

impl Request<'_> {
    /// Whether the request changes metadata only: no device I/O, so serving it waits at
    /// most for a commit that is due (and, where it frees a file's blocks, for that file's
    /// read in flight). A size change is a data operation.
    pub fn changes_metadata_only(&self) -> bool {
        match self {
            Request::Setattr { attr, .. } => attr.size.is_none(),
            r => matches!(
                r,
                Request::Mkdir { .. }
                    | Request::Mknod { .. }
                    | Request::Symlink { .. }
                    | Request::Create { .. }
                    | Request::Unlink { .. }
                    | Request::Rmdir { .. }
                    | Request::Rename { .. }
                    | Request::Link { .. }
                    | Request::Setxattr { .. }
                    | Request::Removexattr { .. }
            ),
        }
    }

    /// Whether the request places a new inode's metadata or new blocks by the requester's
    /// node (so the requester's node is worth waiting for).
    pub fn places(&self) -> bool {
        matches!(
            self,
            Request::Mkdir { .. }
                | Request::Mknod { .. }
                | Request::Symlink { .. }
                | Request::Create { .. }
                | Request::Write { .. }
                | Request::Fallocate { .. }
        )
    }
}

/// The requester and credentials from `fuse_in_header`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// The kernel's id of the request, echoed in the reply.
    pub unique: u64,
    /// The requesting thread's id.
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
}

/// Bytes of `fuse_in_header`.
pub const IN_HEADER_SZ: usize = 40;

/// Whether requests with `opcode` carry input (names, data) in the payload. Those that do
/// not (READ, READDIR, …) may have their reply written over the whole payload.
pub fn takes_payload(opcode: u32) -> bool {
    matches!(
        opcode,
        op::LOOKUP
            | op::SYMLINK
            | op::MKNOD
            | op::MKDIR
            | op::UNLINK
            | op::RMDIR
            | op::RENAME
            | op::RENAME2
            | op::LINK
            | op::WRITE
            | op::SETXATTR
            | op::GETXATTR
            | op::REMOVEXATTR
            | op::CREATE
    )
}

/// Decodes one io_uring request: `in_header` is `fuse_in_header`, `op_in` the per-op header
/// area, `payload` the request's payload bytes (names, write data). Returns the origin and
/// the request, or the errno to answer with: `EINVAL` for a malformed request (a short
/// header, a name without its NUL, data shorter than its stated size), `ENOSYS` for an
/// operation this server does not serve.
pub fn decode<'a>(
    in_header: &[u8],
    op_in: &[u8],
    payload: &'a [u8],
) -> Result<(Origin, Request<'a>), i32> {
    if in_header.len() < IN_HEADER_SZ {
        return Err(libc::EINVAL);
    }
    let h = abi::InHeader::parse(in_header);
    let origin = Origin {
        unique: h.unique,
        pid: h.pid,
        uid: h.uid,
        gid: h.gid,
    };
    let fields = Fields(op_in);
    let ino = h.nodeid;
    let name = || cstr(payload).map(|(n, _)| n);
    let two_names = || {
        let (a, rest) = cstr(payload)?;
        let (b, _) = cstr(rest)?;
        Ok::<_, i32>((a, b))
    };
    let r = match h.opcode {
        op::LOOKUP => Request::Lookup {
            parent: ino,
            name: name()?,
        },
        op::GETATTR => Request::Getattr { ino },
        op::SETATTR => Request::Setattr {
            ino,
            attr: setattr(&fields)?,
        },
        op::READLINK => Request::Readlink { ino },
        op::SYMLINK => {
            let (name, target) = two_names()?;
            Request::Symlink {
                parent: ino,
                name,
                target,
            }
        }
        // fuse_mknod_in: mode, rdev, umask, padding.
        op::MKNOD => Request::Mknod {
            parent: ino,
            name: name()?,
            mode: fields.u32(0)?,
            rdev: fields.u32(4)?,
            umask: fields.u32(8)?,
        },
        // fuse_mkdir_in: mode, umask.
        op::MKDIR => Request::Mkdir {
            parent: ino,
            name: name()?,
            mode: fields.u32(0)?,
            umask: fields.u32(4)?,
        },
        op::UNLINK => Request::Unlink {
            parent: ino,
            name: name()?,
        },
        op::RMDIR => Request::Rmdir {
            parent: ino,
            name: name()?,
        },
        // fuse_rename_in: newdir; fuse_rename2_in: newdir, flags, padding.
        op::RENAME | op::RENAME2 => {
            let (name, newname) = two_names()?;
            Request::Rename {
                parent: ino,
                name,
                newparent: fields.u64(0)?,
                newname,
                flags: if h.opcode == op::RENAME2 {
                    fields.u32(8)?
                } else {
                    0
                },
            }
        }
        // fuse_link_in: oldnodeid; the new name's directory is the header's node.
        op::LINK => Request::Link {
            ino: fields.u64(0)?,
            newparent: ino,
            newname: name()?,
        },
        // fuse_open_in: flags, open_flags.
        op::OPEN => Request::Open {
            ino,
            flags: fields.u32(0)? as i32,
        },
        op::OPENDIR => Request::Opendir { ino },
        // fuse_read_in: fh, offset, size, read_flags, lock_owner, flags (the open flags).
        op::READ => Request::Read {
            ino,
            offset: fields.u64(8)?,
            size: fields.u32(16)?,
            flags: fields.u32(32)? as i32,
        },
        // fuse_write_in: fh, offset, size, write_flags, lock_owner, flags; then the data.
        op::WRITE => {
            let size = fields.u32(16)? as usize;
            Request::Write {
                ino,
                offset: fields.u64(8)?,
                data: payload.get(..size).ok_or(libc::EINVAL)?,
            }
        }
        op::STATFS => Request::Statfs,
        op::RELEASE => Request::Release { ino },
        op::RELEASEDIR | op::DESTROY => Request::Nothing,
        op::FLUSH => Request::Flush,
        // fuse_fsync_in: fh, fsync_flags (bit 0: datasync).
        op::FSYNC => Request::Fsync {
            ino,
            datasync: fields.u32(8)? & 1 != 0,
        },
        op::FSYNCDIR => Request::Fsyncdir { ino },
        op::SYNCFS => Request::Syncfs,
        // fuse_setxattr_in: size, flags (the value's bytes follow the name).
        op::SETXATTR => {
            let size = fields.u32(0)? as usize;
            let (name, rest) = cstr(payload)?;
            Request::Setxattr {
                ino,
                name,
                value: rest.get(..size).ok_or(libc::EINVAL)?,
                flags: fields.u32(4)?,
            }
        }
        // fuse_getxattr_in: size, padding.
        op::GETXATTR => Request::Getxattr {
            ino,
            name: name()?,
            size: fields.u32(0)?,
        },
        op::LISTXATTR => Request::Listxattr {
            ino,
            size: fields.u32(0)?,
        },
        op::REMOVEXATTR => Request::Removexattr { ino, name: name()? },
        // fuse_access_in: mask, padding.
        op::ACCESS => Request::Access {
            ino,
            mask: fields.u32(0)?,
        },
        // fuse_create_in: flags, mode, umask, open_flags.
        op::CREATE => Request::Create {
            parent: ino,
            name: name()?,
            mode: fields.u32(4)?,
            umask: fields.u32(8)?,
        },
        // fuse_read_in, as for READ.
        op::READDIR => Request::Readdir {
            ino,
            offset: fields.u64(8)?,
            size: Some(fields.u32(16)?),
        },
        op::READDIRPLUS => Request::Readdirplus {
            ino,
            offset: fields.u64(8)?,
            size: Some(fields.u32(16)?),
        },
        // fuse_fallocate_in: fh, offset, length, mode, padding.
        op::FALLOCATE => Request::Fallocate {
            ino,
            offset: fields.u64(8)?,
            length: fields.u64(16)?,
            mode: fields.u32(24)?,
        },
        // fuse_lseek_in: fh, offset, whence, padding.
        op::LSEEK => Request::Lseek {
            ino,
            offset: fields.u64(8)? as i64,
            whence: fields.u32(16)?,
        },
        _ => return Err(libc::ENOSYS),
    };
    Ok((origin, r))
}

/// A per-op header: each field read must lie inside it.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn u32(&self, off: usize) -> Result<u32, i32> {
        let b = self.0.get(off..off.checked_add(4).ok_or(libc::EINVAL)?);
        b.and_then(|s| s.try_into().ok())
            .map(u32::from_le_bytes)
            .ok_or(libc::EINVAL)
    }

    fn u64(&self, off: usize) -> Result<u64, i32> {
        let b = self.0.get(off..off.checked_add(8).ok_or(libc::EINVAL)?);
        b.and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or(libc::EINVAL)
    }
}

/// Splits a NUL-terminated name off the front of `b`: (name, rest); `EINVAL` without a NUL.
fn cstr(b: &[u8]) -> Result<(&[u8], &[u8]), i32> {
    abi::cstr(b).ok_or(libc::EINVAL)
}

/// `fuse_setattr_in`: valid, padding, fh, size, lock_owner, atime, mtime, ctime, atimensec,
/// mtimensec, ctimensec, mode, unused, uid, gid, unused (88 bytes).
fn setattr(f: &Fields) -> Result<SetAttr, i32> {
    let valid = f.u32(0)?;
    let has = |bit: u32| valid & bit != 0;
    let time = |now: u32, secs_off: usize, nsec_off: usize| -> Result<i64, i32> {
        if has(now) {
            return Ok(now_nanos());
        }
        let secs = f.u64(secs_off)? as i64;
        Ok(secs
            .saturating_mul(1_000_000_000)
            .saturating_add(i64::from(f.u32(nsec_off)?)))
    };
    let opt = |bit: u32, v: Result<u32, i32>| -> Result<Option<u32>, i32> {
        if has(bit) {
            v.map(Some)
        } else {
            Ok(None)
        }
    };
    Ok(SetAttr {
        mode: opt(fattr::MODE, f.u32(68))?.map(|m| m & 0o7777),
        uid: opt(fattr::UID, f.u32(76))?,
        gid: opt(fattr::GID, f.u32(80))?,
        size: if has(fattr::SIZE) {
            Some(f.u64(16)?)
        } else {
            None
        },
        atime: if has(fattr::ATIME) {
            Some(time(fattr::ATIME_NOW, 32, 56)?)
        } else {
            None
        },
        mtime: if has(fattr::MTIME) {
            Some(time(fattr::MTIME_NOW, 40, 60)?)
        } else {
            None
        },
        atime_now: has(fattr::ATIME) && has(fattr::ATIME_NOW),
        mtime_now: has(fattr::MTIME) && has(fattr::MTIME_NOW),
        through_writable_fd: has(fattr::FH),
    })
}

/// Now, in nanoseconds since the epoch (what `UTIME_NOW` asks for).
pub(crate) fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(opcode: u32, nodeid: u64) -> [u8; IN_HEADER_SZ] {
        let mut h = [0u8; IN_HEADER_SZ];
        h[0..4].copy_from_slice(&(IN_HEADER_SZ as u32).to_le_bytes());
        h[4..8].copy_from_slice(&opcode.to_le_bytes());
        h[8..16].copy_from_slice(&9u64.to_le_bytes());
        h[16..24].copy_from_slice(&nodeid.to_le_bytes());
        h[24..28].copy_from_slice(&1000u32.to_le_bytes());
        h[28..32].copy_from_slice(&100u32.to_le_bytes());
        h[32..36].copy_from_slice(&4242u32.to_le_bytes());
        h
    }

    #[test]
    fn setattr_decodes_only_the_valid_fields() {
        let mut b = [0u8; 88];
        b[0..4].copy_from_slice(&(fattr::MODE | fattr::SIZE | fattr::MTIME).to_le_bytes());
        b[16..24].copy_from_slice(&4096u64.to_le_bytes());
        b[40..48].copy_from_slice(&3u64.to_le_bytes());
        b[60..64].copy_from_slice(&5u32.to_le_bytes());
        b[68..72].copy_from_slice(&(libc::S_IFREG | 0o640).to_le_bytes());
        let (o, r) = decode(&header(op::SETATTR, 7), &b, &[]).unwrap();
        assert_eq!((o.unique, o.pid, o.uid, o.gid), (9, 4242, 1000, 100));
        let Request::Setattr { ino: 7, attr: s } = r else {
            panic!("{r:?}")
        };
        assert_eq!(s.mode, Some(0o640));
        assert_eq!(s.size, Some(4096));
        assert_eq!(s.mtime, Some(3_000_000_005));
        assert_eq!((s.uid, s.gid, s.atime), (None, None, None));
        assert!(!s.mtime_now, "an explicit mtime is not now");
    }

    #[test]
    fn setattr_says_which_times_are_now() {
        let mut b = [0u8; 88];
        let valid = fattr::ATIME | fattr::ATIME_NOW | fattr::MTIME;
        b[0..4].copy_from_slice(&valid.to_le_bytes());
        b[40..48].copy_from_slice(&3u64.to_le_bytes());
        let (_, r) = decode(&header(op::SETATTR, 7), &b, &[]).unwrap();
        let Request::Setattr { attr: s, .. } = r else {
            panic!("{r:?}")
        };
        assert!(s.atime_now && s.atime.is_some_and(|t| t > 0));
        assert!(!s.mtime_now);
        assert_eq!(s.mtime, Some(3_000_000_000));
    }

    #[test]
    fn names_and_data_are_borrowed_and_bounded() {
        let op_in = [0u8; 128];
        let (_, r) = decode(&header(op::RENAME, 1), &op_in, b"old\0new\0").unwrap();
        assert_eq!(
            r,
            Request::Rename {
                parent: 1,
                name: b"old",
                newparent: 0,
                newname: b"new",
                flags: 0
            }
        );
        let mut w = [0u8; 128];
        w[8..16].copy_from_slice(&4096u64.to_le_bytes());
        w[16..20].copy_from_slice(&3u32.to_le_bytes());
        let (_, r) = decode(&header(op::WRITE, 5), &w, b"abcdef").unwrap();
        assert_eq!(
            r,
            Request::Write {
                ino: 5,
                offset: 4096,
                data: b"abc"
            }
        );
        // Data shorter than its stated size, a name without its NUL, a second name missing.
        assert_eq!(decode(&header(op::WRITE, 5), &w, b"ab"), Err(libc::EINVAL));
        assert_eq!(
            decode(&header(op::LOOKUP, 1), &op_in, b"abc"),
            Err(libc::EINVAL)
        );
        assert_eq!(
            decode(&header(op::SYMLINK, 1), &op_in, b"abc\0"),
            Err(libc::EINVAL)
        );
        let mut x = [0u8; 128];
        x[0..4].copy_from_slice(&10u32.to_le_bytes());
        assert_eq!(
            decode(&header(op::SETXATTR, 1), &x, b"user.k\0short"),
            Err(libc::EINVAL)
        );
    }

    #[test]
    fn truncated_and_oversized_inputs_are_errors_not_panics() {
        let full = [0xffu8; 128];
        for opcode in 0..64u32 {
            let h = header(opcode, 3);
            // A short in-header, per-op headers of every length, huge stated sizes.
            assert_eq!(
                decode(&h[..IN_HEADER_SZ - 1], &full, &[]),
                Err(libc::EINVAL)
            );
            for cut in 0..=full.len() {
                let _ = decode(&h, &full[..cut], b"n\0m\0");
                let _ = decode(&h, &full[..cut], &[]);
            }
        }
        let mut r = [0u8; 128];
        r[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            decode(&header(op::WRITE, 2), &r, &[1, 2]),
            Err(libc::EINVAL)
        );
        assert_eq!(
            decode(&header(op::READ, 2), &r[..20], &[]),
            Err(libc::EINVAL)
        );
        // INIT (26) reaches /dev/fuse only; over a ring it is not served.
        assert_eq!(decode(&header(26, 1), &r, &[]), Err(libc::ENOSYS));
    }

    #[test]
    fn only_requests_with_names_or_data_take_the_payload() {
        for opcode in [
            op::READ,
            op::READDIR,
            op::READDIRPLUS,
            op::GETATTR,
            op::LISTXATTR,
        ] {
            assert!(!takes_payload(opcode), "{opcode}");
        }
        for opcode in [op::WRITE, op::LOOKUP, op::CREATE, op::SETXATTR, op::RENAME2] {
            assert!(takes_payload(opcode), "{opcode}");
        }
    }
}
