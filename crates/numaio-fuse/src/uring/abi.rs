//! The kernel's FUSE wire format as far as the io_uring transport needs it
//! (`include/uapi/linux/fuse.h`), read and written as little byte layouts so that no
//! kernel-shared memory is ever reinterpreted as a Rust struct.

/// `fuse_uring_cmd` values: the SQE's `cmd_op`.
pub const CMD_REGISTER: u32 = 1;
pub const CMD_COMMIT_AND_FETCH: u32 = 2;

/// Bytes of `fuse_uring_req_header`: in/out header area, per-op header area, ring entry info.
pub const IN_OUT_SZ: usize = 128;
pub const OP_IN_SZ: usize = 128;
pub const ENT_OFF: usize = IN_OUT_SZ + OP_IN_SZ;
pub const REQ_HEADER_SZ: usize = ENT_OFF + 32;

/// `fuse_uring_ent_in_out` fields, relative to `ENT_OFF`.
pub const ENT_COMMIT_ID: usize = 8;
pub const ENT_PAYLOAD_SZ: usize = 16;

/// Opcodes (`enum fuse_opcode`).
pub mod op {
    pub const LOOKUP: u32 = 1;
    pub const GETATTR: u32 = 3;
    pub const SETATTR: u32 = 4;
    pub const READLINK: u32 = 5;
    pub const SYMLINK: u32 = 6;
    pub const MKNOD: u32 = 8;
    pub const MKDIR: u32 = 9;
    pub const UNLINK: u32 = 10;
    pub const RMDIR: u32 = 11;
    pub const RENAME: u32 = 12;
    pub const LINK: u32 = 13;
    pub const OPEN: u32 = 14;
    pub const READ: u32 = 15;
    pub const WRITE: u32 = 16;
    pub const STATFS: u32 = 17;
    pub const RELEASE: u32 = 18;
    pub const FSYNC: u32 = 20;
    pub const SETXATTR: u32 = 21;
    pub const GETXATTR: u32 = 22;
    pub const LISTXATTR: u32 = 23;
    pub const REMOVEXATTR: u32 = 24;
    pub const FLUSH: u32 = 25;
    pub const OPENDIR: u32 = 27;
    pub const READDIR: u32 = 28;
    pub const RELEASEDIR: u32 = 29;
    pub const FSYNCDIR: u32 = 30;
    pub const ACCESS: u32 = 34;
    pub const CREATE: u32 = 35;
    pub const DESTROY: u32 = 38;
    pub const FALLOCATE: u32 = 43;
    pub const READDIRPLUS: u32 = 44;
    pub const RENAME2: u32 = 45;
    pub const LSEEK: u32 = 46;
    /// Sent by the kernel to virtiofs only (never over /dev/fuse); answered anyway.
    pub const SYNCFS: u32 = 50;
}

/// `fuse_setattr_in.valid` bits.
pub mod fattr {
    pub const MODE: u32 = 1 << 0;
    pub const UID: u32 = 1 << 1;
    pub const GID: u32 = 1 << 2;
    pub const SIZE: u32 = 1 << 3;
    pub const ATIME: u32 = 1 << 4;
    pub const MTIME: u32 = 1 << 5;
    /// The request names a file handle: ftruncate on a descriptor opened for writing.
    pub const FH: u32 = 1 << 6;
    pub const ATIME_NOW: u32 = 1 << 7;
    pub const MTIME_NOW: u32 = 1 << 8;
}

/// `fuse_in_header`, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InHeader {
    pub opcode: u32,
    pub unique: u64,
    pub nodeid: u64,
    pub uid: u32,
    pub gid: u32,
    pub pid: u32,
}

impl InHeader {
    /// Decodes the header at the start of `b` (40 bytes).
    pub fn parse(b: &[u8]) -> InHeader {
        InHeader {
            opcode: u32_at(b, 4),
            unique: u64_at(b, 8),
            nodeid: u64_at(b, 16),
            uid: u32_at(b, 24),
            gid: u32_at(b, 28),
            pid: u32_at(b, 32),
        }
    }
}

/// The little-endian u32 at `off`, or 0 past the end (a short header reads as zeros).
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map(|s| u32::from_le_bytes(s.try_into().expect("4 bytes")))
        .unwrap_or(0)
}

/// The little-endian u64 at `off`, or 0 past the end.
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    b.get(off..off + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .unwrap_or(0)
}

/// Splits a NUL-terminated name off the front of `b`: (name, rest).
pub fn cstr(b: &[u8]) -> Option<(&[u8], &[u8])> {
    let n = b.iter().position(|&c| c == 0)?;
    Some((&b[..n], &b[n + 1..]))
}

/// Writes `fuse_out_header` {len, error, unique} into the in/out area.
pub fn put_out_header(h: &mut [u8], len: u32, error: i32, unique: u64) {
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&error.to_le_bytes());
    h[8..16].copy_from_slice(&unique.to_le_bytes());
}

/// Appends little-endian fields to a reply payload.
pub struct Out<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> Out<'a> {
    pub fn new(buf: &'a mut [u8]) -> Out<'a> {
        Out { buf, len: 0 }
    }
    pub fn written(&self) -> usize {
        self.len
    }
    pub fn room(&self) -> usize {
        self.buf.len() - self.len
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf[self.len..self.len + b.len()].copy_from_slice(b);
        self.len += b.len();
        self
    }
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_le_bytes())
    }
    pub fn zeros(&mut self, n: usize) -> &mut Self {
        self.buf[self.len..self.len + n].fill(0);
        self.len += n;
        self
    }
}

/// Bytes of a `fuse_dirent` before its name.
pub const DIRENT_SZ: usize = 24;
/// Bytes of `fuse_attr`.
pub const ATTR_SZ: usize = 88;
/// Bytes of `fuse_entry_out`: nodeid, generation, two validities and their nanoseconds,
/// then `fuse_attr`.
pub const ENTRY_OUT_SZ: usize = 40 + ATTR_SZ;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_layout_matches_the_kernel() {
        // fuse_uring_req_header is 128 + 128 + sizeof(fuse_uring_ent_in_out) = 288 bytes.
        assert_eq!(REQ_HEADER_SZ, 288);
        let mut h = [0u8; 40];
        h[4..8].copy_from_slice(&15u32.to_le_bytes());
        h[8..16].copy_from_slice(&77u64.to_le_bytes());
        h[16..24].copy_from_slice(&5u64.to_le_bytes());
        h[32..36].copy_from_slice(&1234u32.to_le_bytes());
        let p = InHeader::parse(&h);
        assert_eq!((p.opcode, p.unique, p.nodeid, p.pid), (15, 77, 5, 1234));
    }

    #[test]
    fn short_input_reads_as_zero_and_names_need_a_nul() {
        assert_eq!(u32_at(&[1, 2], 0), 0);
        assert_eq!(u64_at(&[0; 12], 8), 0);
        assert_eq!(cstr(b"ab\0cd\0"), Some((&b"ab"[..], &b"cd\0"[..])));
        assert_eq!(cstr(b"ab"), None);
    }
}
