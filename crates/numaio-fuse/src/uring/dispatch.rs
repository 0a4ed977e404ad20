//! The io_uring transport's adapter: a ring entry's bytes become a typed request through
//! the one decoder ([`crate::request::decode`]), the serving table answers it, and the reply
//! is encoded into the entry's payload buffer.
//!
//! Requests and replies share the payload buffer. Requests that carry names or data in it
//! are answered with small owned replies, encoded once the request is done with the input;
//! READ and the listings carry no input, so their data is written straight over the whole
//! payload.

use super::abi::{self, Out};
use crate::request::{self, Request};
use crate::serve::{self, Ctx, Output, Reply};
use crate::{FuseMode, Observer};
use numaio_fs::{DirEntry, FileAttr, Fs};
use std::time::Duration;

/// What a handler produced: payload bytes of a successful reply, or a positive errno.
pub type Answer = Result<usize, i32>;

/// Serves the request in a ring entry: `in_header` is `fuse_in_header`, `op_in` the per-op
/// header area, `payload` the entry's payload buffer of which the first `in_len` bytes are
/// the request's. `cpu` is the CPU of the entry's queue, the one the requesting thread
/// issued the request on. Returns the request's `unique` (0 where the header was too short
/// to have one) and the answer; `None` where `wait` is false and the request would wait
/// (see [`Ctx::wait`]): nothing was done and the entry is as it came.
#[allow(clippy::too_many_arguments)]
pub fn dispatch(
    fs: &Fs,
    obs: &Observer,
    cpu: u32,
    wait: bool,
    in_header: &[u8],
    op_in: &[u8],
    payload: &mut [u8],
    in_len: usize,
) -> Option<(u64, Answer)> {
    let opcode = abi::u32_at(in_header, 4);
    let unique = abi::u64_at(in_header, 8);
    // Only requests with names or data read the payload; the others may fill all of it.
    let in_len = if request::takes_payload(opcode) {
        in_len.min(payload.len())
    } else {
        0
    };
    let answer = {
        let (input, rest) = payload.split_at_mut(in_len);
        match request::decode(in_header, op_in, input) {
            Err(e) => Err(e),
            Ok((o, req)) => {
                let ctx = Ctx {
                    pid: o.pid,
                    uid: o.uid,
                    gid: o.gid,
                    cpu: Some(cpu),
                    mode: FuseMode::IoUring,
                    wait,
                };
                let limit = match &req {
                    Request::Readdir { size, .. } | Request::Readdirplus { size, .. } => {
                        size.map_or(0, |s| s as usize)
                    }
                    _ => rest.len(),
                };
                let mut out = PayloadOut::new(rest, limit);
                let r = serve::serve(fs, obs, &ctx, req, &mut out);
                let listed = out.len;
                r.map(|r| (r, listed))
            }
        }
    };
    if let Ok((Reply::Later, _)) = answer {
        return None;
    }
    let answer = answer.and_then(|(r, listed)| {
        // Data and listings were written after the input (which is empty for them).
        match r {
            Reply::Data(n) => {
                payload.copy_within(in_len..in_len + n, 0);
                Ok(n)
            }
            Reply::Listed => {
                payload.copy_within(in_len..in_len + listed, 0);
                Ok(listed)
            }
            r => encode(payload, &r),
        }
    });
    Some((unique, answer))
}

/// The payload after the request's input, as the table's [`Output`]: file data, or
/// listing entries up to `limit` bytes (the kernel's reply size).
struct PayloadOut<'a> {
    buf: &'a mut [u8],
    limit: usize,
    len: usize,
}

impl<'a> PayloadOut<'a> {
    fn new(buf: &'a mut [u8], limit: usize) -> PayloadOut<'a> {
        let limit = limit.min(buf.len());
        PayloadOut { buf, limit, len: 0 }
    }

    fn room(&self) -> usize {
        self.limit - self.len
    }
}

impl Output for PayloadOut<'_> {
    fn data(&mut self, size: usize) -> &mut [u8] {
        let n = size.min(self.buf.len());
        &mut self.buf[..n]
    }

    fn dir_room(&self) -> usize {
        self.room() / serve::DIRENTPLUS_MIN
    }

    fn dir_add(&mut self, e: &DirEntry, plus: Option<(&FileAttr, Duration)>) -> bool {
        let head = if plus.is_some() { abi::ENTRY_OUT_SZ } else { 0 } + abi::DIRENT_SZ;
        // fuse_direntplus: fuse_entry_out, then fuse_dirent, padded to 8 bytes.
        let rec = (head + e.name.len()).next_multiple_of(8);
        if rec > self.room() {
            return true;
        }
        let mut o = Out::new(&mut self.buf[self.len..self.limit]);
        if let Some((a, ttl)) = plus {
            put_entry(&mut o, a, ttl.as_secs());
        }
        o.u64(e.ino)
            .u64(e.cookie)
            .u32(e.name.len() as u32)
            .u32(serve::mode_bits(e.kind) >> 12)
            .bytes(&e.name)
            .zeros(rec - head - e.name.len());
        self.len += rec;
        false
    }
}

/// Encodes an owned reply at the start of `payload`.
fn encode(payload: &mut [u8], r: &Reply) -> Answer {
    let mut o = Out::new(payload);
    match r {
        Reply::Empty => {}
        Reply::Entry { attr, ttl } => put_entry(&mut o, attr, ttl.as_secs()),
        Reply::Negative { ttl } => {
            let ttl = ttl.as_secs();
            o.u64(0)
                .u64(0)
                .u64(ttl)
                .u64(ttl)
                .u32(0)
                .u32(0)
                .zeros(abi::ATTR_SZ);
        }
        Reply::Attr { attr, ttl } => {
            o.u64(ttl.as_secs()).u32(0).u32(0);
            put_attr(&mut o, attr);
        }
        Reply::Created { attr, ttl, flags } => {
            put_entry(&mut o, attr, ttl.as_secs());
            o.u64(0).u32(*flags).u32(0);
        }
        // fh 0, the FOPEN_* flags, no backing file.
        Reply::Opened { flags } => {
            o.u64(0).u32(*flags).u32(0);
        }
        Reply::Bytes(v) => {
            if v.len() > o.room() {
                return Err(libc::ERANGE);
            }
            o.bytes(v);
        }
        // fuse_getxattr_out: size, padding.
        Reply::Size(n) => {
            o.u32(*n).u32(0);
        }
        // fuse_write_out: size, padding.
        Reply::Written(n) => {
            o.u32(*n).u32(0);
        }
        // fuse_kstatfs: 5 u64, then bsize, namelen, frsize, padding, 6 spare u32.
        Reply::Statfs(s) => {
            o.u64(s.blocks)
                .u64(s.bfree)
                .u64(s.bavail)
                .u64(s.files)
                .u64(s.ffree)
                .u32(s.bsize)
                .u32(s.namelen)
                .u32(s.frsize)
                .zeros(4 + 6 * 4);
        }
        // fuse_lseek_out: offset.
        Reply::Offset(off) => {
            o.u64(*off);
        }
        Reply::Data(_) | Reply::Listed | Reply::Later => return Err(libc::EIO),
    }
    Ok(o.written())
}

/// `fuse_attr` of `a`, as the classic adapter's conversion produces it.
fn put_attr(o: &mut Out, a: &numaio_fs::FileAttr) {
    // Times before the epoch show as the epoch, as in the classic adapter.
    let t = |ns: i64| {
        let ns = ns.max(0) as u64;
        (ns / 1_000_000_000, (ns % 1_000_000_000) as u32)
    };
    let (at, mt, ct) = (t(a.atime), t(a.mtime), t(a.ctime));
    o.u64(a.ino)
        .u64(a.size)
        .u64(a.blocks * (numaio_fs::BLOCK_SIZE / 512))
        .u64(at.0)
        .u64(mt.0)
        .u64(ct.0)
        .u32(at.1)
        .u32(mt.1)
        .u32(ct.1)
        .u32(serve::mode_bits(a.kind) | (a.mode & 0o7777))
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u32(a.kind.rdev())
        .u32(numaio_fs::BLOCK_SIZE as u32)
        .u32(0);
}

/// `fuse_entry_out` of `a`, the name and attributes valid for `ttl` seconds.
fn put_entry(o: &mut Out, a: &numaio_fs::FileAttr, ttl: u64) {
    o.u64(a.ino).u64(0).u64(ttl).u64(ttl).u32(0).u32(0);
    put_attr(o, a);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::uring::abi::op;

    /// A memory store whose reads say they might wait (the trait's default `read_cached`),
    /// as a device's would where its page cache lacks the block.
    struct MightWait(numaio_fs::store::MemStore);

    impl numaio_fs::store::BlockStore for MightWait {
        fn devices(&self) -> &[numaio_fs::store::DeviceInfo] {
            self.0.devices()
        }
        fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), numaio_fs::FsError> {
            self.0.read_at(dev, offset, buf)
        }
        fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), numaio_fs::FsError> {
            self.0.write_at(dev, offset, data)
        }
        fn sync(&self, dev: u16) -> Result<(), numaio_fs::FsError> {
            self.0.sync(dev)
        }
    }

    fn volume() -> Fs {
        use numaio_fs::store::MemStore;
        let s = std::sync::Arc::new(MightWait(MemStore::new(&[(0, 4 << 20)])));
        let o = numaio_fs::MkfsOptions {
            policy: numaio_fs::PlacementPolicy::WriterLocal,
            group_blocks: 64,
            journal_blocks: 32,
            checkpoint_blocks: 64,
        };
        Fs::mkfs(&*s, &o).unwrap();
        Fs::mount(s, numaio_fs::MountOptions::default()).unwrap()
    }

    fn header(opcode: u32, nodeid: u64) -> [u8; 40] {
        let mut h = [0u8; 40];
        h[4..8].copy_from_slice(&opcode.to_le_bytes());
        h[8..16].copy_from_slice(&1u64.to_le_bytes());
        h[16..24].copy_from_slice(&nodeid.to_le_bytes());
        h[32..36].copy_from_slice(&std::process::id().to_le_bytes());
        h
    }

    /// [`dispatch`] of a request that may wait, which is always served.
    fn served(
        fs: &Fs,
        obs: &Observer,
        h: &[u8],
        op_in: &[u8],
        payload: &mut [u8],
        in_len: usize,
    ) -> (u64, Answer) {
        dispatch(fs, obs, 0, true, h, op_in, payload, in_len).expect("served")
    }

    fn call(fs: &Fs, opcode: u32, nodeid: u64, payload: &mut [u8]) -> Answer {
        let h = header(opcode, nodeid);
        served(fs, &Observer::new(), &h, &[0u8; 128], payload, 0).1
    }

    #[test]
    fn fsyncdir_and_syncfs_commit() {
        let fs = volume();
        let c = numaio_fs::Caller::root_on(0);
        let mut payload = vec![0u8; 4096];
        fs.mkdir(1, b"d", 0o755, &c).unwrap();
        let before = fs.sync_stats();
        assert_eq!(call(&fs, op::FSYNCDIR, 1, &mut payload), Ok(0));
        let st = fs.sync_stats();
        assert_eq!(st.requests, before.requests + 1);
        assert_eq!(st.commits, before.commits + 1);
        fs.mkdir(1, b"e", 0o755, &c).unwrap();
        assert_eq!(call(&fs, op::SYNCFS, 1, &mut payload), Ok(0));
        assert_eq!(fs.sync_stats().commits, st.commits + 1);
        // A directory fsync of something else than a directory is refused.
        let f = fs.create(1, b"f", 0o644, &c).unwrap();
        assert_eq!(
            call(&fs, op::FSYNCDIR, f.ino, &mut payload),
            Err(libc::ENOTDIR)
        );
    }

    #[test]
    fn statfs_reply_is_the_shared_one() {
        let fs = volume();
        let mut payload = vec![0u8; 4096];
        let n = call(&fs, op::STATFS, 1, &mut payload).unwrap();
        // fuse_kstatfs: 5 u64, then bsize, namelen, frsize, padding, 6 spare u32.
        assert_eq!(n, 80);
        let s = crate::serve::Statfs::of(&fs);
        let u = |i: usize| abi::u64_at(&payload, i * 8);
        assert_eq!(
            (u(0), u(1), u(2), u(3), u(4)),
            (s.blocks, s.bfree, s.bavail, s.files, s.ffree)
        );
        assert!(
            s.ffree > 0 && s.ffree < s.files,
            "{} of {}",
            s.ffree,
            s.files
        );
        assert_eq!(s.files - s.ffree, 1);
        assert_eq!(abi::u32_at(&payload, 40), 4096);
        assert_eq!(abi::u32_at(&payload, 44), 255);
    }

    #[test]
    fn malformed_requests_are_errnos_and_replies_fit_the_buffer() {
        let fs = volume();
        let c = numaio_fs::Caller::root_on(0);
        let f = fs.create(1, b"f", 0o644, &c).unwrap();
        fs.write(f.ino, 0, &[7u8; 10_000], &c).unwrap();
        for i in 0..40 {
            fs.create(1, format!("entry-{i:02}").as_bytes(), 0o644, &c)
                .unwrap();
        }
        let obs = Observer::new();
        // A short in-header.
        let mut payload = vec![0u8; 4096];
        let (_, a) = served(&fs, &obs, &[0u8; 39], &[0u8; 128], &mut payload, 0);
        assert_eq!(a, Err(libc::EINVAL));
        // A READ larger than the payload buffer reads what fits.
        let mut op_in = [0u8; 128];
        op_in[16..20].copy_from_slice(&1_000_000u32.to_le_bytes());
        let mut small = vec![0u8; 512];
        let h = header(op::READ, f.ino);
        let (unique, a) = served(&fs, &obs, &h, &op_in, &mut small, 0);
        assert_eq!((unique, a), (1, Ok(512)));
        assert!(small.iter().all(|&b| b == 7));
        // A stated input length beyond the buffer, a name without its NUL.
        let h = header(op::LOOKUP, 1);
        let mut p = b"f".to_vec();
        let (_, a) = served(&fs, &obs, &h, &op_in, &mut p, 1 << 30);
        assert_eq!(a, Err(libc::EINVAL));
        let mut p = b"f\0".to_vec();
        p.resize(4096, 0);
        let (_, a) = served(&fs, &obs, &h, &op_in, &mut p, 2);
        assert_eq!(a, Ok(abi::ENTRY_OUT_SZ));
        assert_eq!(abi::u64_at(&p, 0), f.ino);
        // A listing stops at the kernel's reply size and at the buffer's end.
        for (size, buf) in [(100u32, 4096usize), (4096, 300), (0, 4096)] {
            let mut op_in = [0u8; 128];
            op_in[16..20].copy_from_slice(&size.to_le_bytes());
            let mut p = vec![0u8; buf];
            for opcode in [op::READDIR, op::READDIRPLUS] {
                let (_, a) = served(&fs, &obs, &header(opcode, 1), &op_in, &mut p, 0);
                let n = a.unwrap();
                assert!(n <= (size as usize).min(buf), "{opcode}: {n} bytes");
            }
        }
        // An xattr value larger than the buffer is ERANGE, not a panic.
        fs.setxattr(f.ino, b"user.big", &[1u8; 600], 0, &c).unwrap();
        let mut op_in = [0u8; 128];
        op_in[0..4].copy_from_slice(&4096u32.to_le_bytes());
        let mut p = b"user.big\0".to_vec();
        p.resize(300, 0);
        let (_, a) = served(&fs, &obs, &header(op::GETXATTR, f.ino), &op_in, &mut p, 9);
        assert_eq!(a, Err(libc::ERANGE));
    }

    #[test]
    fn a_write_that_would_wait_is_left_untouched_for_a_serving_thread() {
        let fs = volume();
        let c = numaio_fs::Caller::root_on(0);
        let f = fs.create(1, b"f", 0o644, &c).unwrap();
        let obs = Observer::new();
        let write = |offset: u64, size: u32| {
            let mut op_in = [0u8; 128];
            op_in[8..16].copy_from_slice(&offset.to_le_bytes());
            op_in[16..20].copy_from_slice(&size.to_le_bytes());
            op_in
        };
        fs.write(f.ino, 0, &[3u8; 4096], &c).unwrap();
        // Part of a written block needs the block read first, and this store's reads might
        // wait: not served, the entry as it came.
        let mut p = vec![4u8; 8192];
        let h = header(op::WRITE, f.ino);
        let before = fs.getattr(f.ino).unwrap();
        assert_eq!(
            dispatch(&fs, &obs, 0, false, &h, &write(10, 100), &mut p, 100),
            None
        );
        assert!(p.iter().all(|&b| b == 4));
        assert_eq!(fs.getattr(f.ino).unwrap(), before);
        // Where it may wait, it is served; whole blocks are served without waiting.
        let (_, a) = served(&fs, &obs, &h, &write(10, 100), &mut p, 100);
        assert_eq!((a, abi::u32_at(&p, 0)), (Ok(8), 100));
        let mut p = vec![6u8; 8192];
        let a = dispatch(&fs, &obs, 0, false, &h, &write(4096, 4096), &mut p, 4096);
        assert_eq!(a.map(|(_, a)| a), Some(Ok(8)));
        assert_eq!(abi::u32_at(&p, 0), 4096);
        let mut back = vec![0u8; 8192];
        assert_eq!(fs.read(f.ino, 0, &mut back).unwrap(), 8192);
        assert!(back[..10].iter().all(|&b| b == 3));
        assert!(back[10..110].iter().all(|&b| b == 4));
        assert!(back[110..4096].iter().all(|&b| b == 3));
        assert!(back[4096..].iter().all(|&b| b == 6));
    }

    #[test]
    fn metadata_changes_are_served_without_waiting_and_size_changes_are_not() {
        let fs = volume();
        let c = numaio_fs::Caller::root_on(0);
        let f = fs.create(1, b"f", 0o644, &c).unwrap();
        let obs = Observer::new();
        // MKDIR: fuse_mkdir_in (mode, umask), then the name.
        let mut op_in = [0u8; 128];
        op_in[0..4].copy_from_slice(&0o755u32.to_le_bytes());
        let mut p = b"d\0".to_vec();
        p.resize(4096, 0);
        let h = header(op::MKDIR, 1);
        let a = dispatch(&fs, &obs, 0, false, &h, &op_in, &mut p, 2);
        assert_eq!(a.map(|(_, a)| a), Some(Ok(abi::ENTRY_OUT_SZ)));
        assert_eq!(
            fs.lookup(1, b"d", &c).unwrap().kind,
            numaio_fs::meta::Kind::Dir
        );
        // SETATTR of the mode: served; of the size: left for a serving thread.
        let mut sa = [0u8; 128];
        sa[0..4].copy_from_slice(&abi::fattr::MODE.to_le_bytes());
        sa[68..72].copy_from_slice(&0o600u32.to_le_bytes());
        let h = header(op::SETATTR, f.ino);
        let mut p = vec![0u8; 4096];
        assert!(dispatch(&fs, &obs, 0, false, &h, &sa, &mut p, 0).is_some());
        assert_eq!(fs.getattr(f.ino).unwrap().mode & 0o777, 0o600);
        let mut sz = [0u8; 128];
        sz[0..4].copy_from_slice(&abi::fattr::SIZE.to_le_bytes());
        sz[16..24].copy_from_slice(&4096u64.to_le_bytes());
        assert_eq!(dispatch(&fs, &obs, 0, false, &h, &sz, &mut p, 0), None);
        assert_eq!(fs.getattr(f.ino).unwrap().size, 0);
        let (_, a) = served(&fs, &obs, &h, &sz, &mut p, 0);
        assert!(a.is_ok());
        assert_eq!(fs.getattr(f.ino).unwrap().size, 4096);
    }
}
