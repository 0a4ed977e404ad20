//! Decodes one FUSE request taken from a ring entry and answers it through the same
//! `numaio_fs::Fs` calls the classic adapter makes, writing the reply into the entry's
//! payload buffer.
//!
//! Requests and replies share the payload buffer, so every handler finishes reading its
//! input (names, write data) before it writes the reply.

use super::abi::{self, fattr, op, Out};
use crate::accounting::Direction;
use crate::caller::Requester;
use crate::Observer;
use numaio_fs::meta::Kind;
use numaio_fs::{Fs, FsError, SetAttr};

/// Seconds the kernel may cache entries and attributes: the classic adapter's TTL.
const TTL_SECS: u64 = crate::TTL.as_secs();

/// What a handler produced: payload bytes of a successful reply, or a positive errno.
pub type Answer = Result<usize, i32>;

/// Serves `h` given its per-op header `op_in` and the first `in_len` bytes of `payload`.
/// `cpu` is the CPU of the worker's queue, which is the one the requesting thread issued
/// the request on: the kernel queues a request on the ring of that CPU.
#[allow(clippy::too_many_arguments)]
pub fn dispatch(
    fs: &Fs,
    obs: &Observer,
    cpu: u32,
    h: &abi::InHeader,
    op_in: &[u8],
    payload: &mut [u8],
    in_len: usize,
) -> Answer {
    // The header's pid is the requesting thread's id; the observer knows its process.
    let r: Requester = obs.requester_on_cpu(h.pid, cpu);
    let c = Observer::caller(&r, h.uid, h.gid);
    let ino = h.nodeid;
    let input = &payload[..in_len.min(payload.len())];
    // Names stay cached unless the server checks permissions (see Observer::entry_ttl).
    let ttl = obs.entry_ttl().as_secs();
    match h.opcode {
        op::LOOKUP => {
            // A missing name is answered as a negative entry (inode 0) the kernel keeps for
            // the TTL, as the classic adapter does.
            match crate::negative_lookup(fs.lookup(ino, name(input)?, &c)) {
                Ok(Some(a)) => entry(payload, ttl, Ok(a)),
                Ok(None) => {
                    let mut o = Out::new(payload);
                    o.u64(0)
                        .u64(0)
                        .u64(ttl)
                        .u64(ttl)
                        .u32(0)
                        .u32(0)
                        .zeros(abi::ATTR_SZ);
                    Ok(o.written())
                }
                Err(e) => Err(errno(e)),
            }
        }
        op::GETATTR => attr_reply(payload, fs.getattr(ino)),
        op::SETATTR => {
            let s = setattr(op_in);
            attr_reply(payload, fs.setattr(ino, &s, &c))
        }
        op::READLINK => {
            let t = fs.readlink(ino).map_err(errno)?;
            data(payload, &t)
        }
        op::SYMLINK => {
            let (n, rest) = abi::cstr(input).ok_or(libc::EINVAL)?;
            let (target, _) = abi::cstr(rest).ok_or(libc::EINVAL)?;
            let r = fs.symlink(ino, n, target, &c);
            entry(payload, ttl, r)
        }
        op::MKNOD => {
            // fuse_mknod_in: mode, rdev, umask, padding.
            let (mode, rdev, umask) = (
                abi::u32_at(op_in, 0),
                abi::u32_at(op_in, 4),
                abi::u32_at(op_in, 8),
            );
            let k = match mode & libc::S_IFMT {
                libc::S_IFREG => Kind::File,
                libc::S_IFIFO => Kind::Fifo,
                libc::S_IFSOCK => Kind::Socket,
                libc::S_IFCHR => Kind::CharDev(rdev),
                libc::S_IFBLK => Kind::BlockDev(rdev),
                _ => return Err(libc::EINVAL),
            };
            let r = fs.mknod(ino, name(input)?, k, mode & !umask & 0o7777, &c);
            entry(payload, ttl, r)
        }
        op::MKDIR => {
            let (mode, umask) = (abi::u32_at(op_in, 0), abi::u32_at(op_in, 4));
            let r = fs.mkdir(ino, name(input)?, mode & !umask, &c);
            entry(payload, ttl, r)
        }
        op::UNLINK => empty(fs.unlink(ino, name(input)?, &c)),
        op::RMDIR => empty(fs.rmdir(ino, name(input)?, &c)),
        op::RENAME | op::RENAME2 => {
            let newdir = abi::u64_at(op_in, 0);
            let flags = if h.opcode == op::RENAME2 {
                abi::u32_at(op_in, 8)
            } else {
                0
            };
            let (old, rest) = abi::cstr(input).ok_or(libc::EINVAL)?;
            let (new, _) = abi::cstr(rest).ok_or(libc::EINVAL)?;
            empty(fs.rename(ino, old, newdir, new, flags, &c))
        }
        op::LINK => {
            let old = abi::u64_at(op_in, 0);
            let n = name(input)?;
            let r = crate::link_check(fs, obs, old, &c).and_then(|()| fs.link(old, ino, n, &c));
            entry(payload, ttl, r)
        }
        op::OPEN => {
            let mask = crate::open_mask(abi::u32_at(op_in, 0) as i32);
            fs.access(ino, mask, &c)
                .and_then(|()| fs.open(ino))
                .map_err(errno)?;
            opened(payload, OPEN_FLAGS)
        }
        op::OPENDIR => {
            crate::opendir_check(fs, obs, ino, &c).map_err(errno)?;
            opened(payload, crate::DIR_OPEN_FLAGS.bits())
        }
        op::READ => {
            let (offset, size) = (abi::u64_at(op_in, 8), abi::u32_at(op_in, 16) as usize);
            let n = size.min(payload.len());
            // fuse_read_in: fh, offset, size, read_flags, lock_owner, then the open flags.
            let flags = abi::u32_at(op_in, 32) as i32;
            let got = crate::read_for(fs, ino, offset, &mut payload[..n], flags).map_err(errno)?;
            obs.account(fs, &r, ino, offset, got as u64, Direction::Read);
            Ok(got)
        }
        op::WRITE => {
            let (offset, size) = (abi::u64_at(op_in, 8), abi::u32_at(op_in, 16) as usize);
            let n = fs
                .write(ino, offset, &input[..size.min(input.len())], &c)
                .map_err(errno)?;
            obs.account(fs, &r, ino, offset, n as u64, Direction::Write);
            let mut o = Out::new(payload);
            o.u32(n as u32).u32(0);
            Ok(o.written())
        }
        op::STATFS => {
            let s = crate::Statfs::of(fs);
            let mut o = Out::new(payload);
            o.u64(s.blocks)
                .u64(s.bfree)
                .u64(s.bavail)
                .u64(s.files)
                .u64(s.ffree)
                .u32(s.bsize)
                .u32(s.namelen)
                .u32(s.frsize)
                .zeros(4 + 6 * 4);
            Ok(o.written())
        }
        op::RELEASE => empty(fs.release(ino)),
        op::RELEASEDIR | op::FLUSH | op::DESTROY => Ok(0),
        op::FSYNC => empty(fs.fsync(ino, abi::u32_at(op_in, 8) & 1 != 0)),
        op::FSYNCDIR => empty(fs.fsync_dir(ino)),
        op::SYNCFS => empty(fs.sync()),
        op::SETXATTR => {
            let (size, flags) = (abi::u32_at(op_in, 0) as usize, abi::u32_at(op_in, 4));
            let (n, value) = abi::cstr(input).ok_or(libc::EINVAL)?;
            if Observer::is_stats_xattr(ino, n) {
                return Err(libc::EPERM);
            }
            let value = value.get(..size).ok_or(libc::EINVAL)?;
            empty(fs.setxattr(ino, n, value, flags, &c))
        }
        op::GETXATTR => {
            let size = abi::u32_at(op_in, 0);
            let n = name(input)?;
            if Observer::is_stats_xattr(ino, n) {
                return xattr(payload, size, &obs.stats_json(fs, "io_uring"));
            }
            crate::getxattr_check(fs, obs, ino, n, &c).map_err(errno)?;
            let v = fs.getxattr(ino, n).map_err(errno)?;
            xattr(payload, size, &v)
        }
        op::LISTXATTR => {
            let size = abi::u32_at(op_in, 0);
            let mut v = Vec::new();
            for n in fs.listxattr(ino).map_err(errno)? {
                v.extend_from_slice(&n);
                v.push(0);
            }
            xattr(payload, size, &v)
        }
        op::REMOVEXATTR => {
            let n = name(input)?;
            if Observer::is_stats_xattr(ino, n) {
                return Err(libc::EPERM);
            }
            empty(fs.removexattr(ino, n, &c))
        }
        op::ACCESS => empty(fs.access(ino, abi::u32_at(op_in, 0), &c)),
        op::CREATE => {
            let (mode, umask) = (abi::u32_at(op_in, 4), abi::u32_at(op_in, 8));
            let a = fs
                .create(ino, name(input)?, mode & !umask, &c)
                .and_then(|a| fs.open(a.ino).map(|()| a))
                .map_err(errno)?;
            let mut o = Out::new(payload);
            put_entry(&mut o, &a, ttl);
            o.u64(0).u32(OPEN_FLAGS).u32(0);
            Ok(o.written())
        }
        op::READDIR => {
            let (offset, size) = (abi::u64_at(op_in, 8), abi::u32_at(op_in, 16) as usize);
            obs.note_listing(Some(size as u32));
            let cap = size.min(payload.len());
            let mut o = Out::new(&mut payload[..cap]);
            crate::fill_readdir(fs, ino, offset, |e| {
                let rec = (abi::DIRENT_SZ + e.name.len()).next_multiple_of(8);
                if rec > o.room() {
                    return true;
                }
                o.u64(e.ino)
                    .u64(e.cookie)
                    .u32(e.name.len() as u32)
                    .u32(mode_bits(e.kind) >> 12)
                    .bytes(&e.name)
                    .zeros(rec - abi::DIRENT_SZ - e.name.len());
                false
            })
            .map_err(errno)?;
            Ok(o.written())
        }
        op::READDIRPLUS => {
            let (offset, size) = (abi::u64_at(op_in, 8), abi::u32_at(op_in, 16) as usize);
            obs.note_listing(Some(size as u32));
            let cap = size.min(payload.len());
            let o = std::cell::RefCell::new(Out::new(&mut payload[..cap]));
            crate::fill_readdirplus(
                fs,
                ino,
                offset,
                // What the rest of the buffer can hold at most, so no attributes are looked
                // up in vain.
                || o.borrow().room() / crate::DIRENTPLUS_MIN,
                |e, a| {
                    let mut o = o.borrow_mut();
                    // fuse_direntplus: fuse_entry_out, then fuse_dirent, padded to 8 bytes.
                    let rec =
                        (abi::ENTRY_OUT_SZ + abi::DIRENT_SZ + e.name.len()).next_multiple_of(8);
                    if rec > o.room() {
                        return true;
                    }
                    put_entry(&mut o, a, ttl);
                    o.u64(e.ino)
                        .u64(e.cookie)
                        .u32(e.name.len() as u32)
                        .u32(mode_bits(e.kind) >> 12)
                        .bytes(&e.name)
                        .zeros(rec - abi::ENTRY_OUT_SZ - abi::DIRENT_SZ - e.name.len());
                    false
                },
            )
            .map_err(errno)?;
            let written = o.borrow().written();
            Ok(written)
        }
        op::FALLOCATE => {
            let (offset, length, mode) = (
                abi::u64_at(op_in, 8),
                abi::u64_at(op_in, 16),
                abi::u32_at(op_in, 24),
            );
            empty(fs.fallocate(ino, offset, length, mode, &c))
        }
        op::LSEEK => {
            // fuse_lseek_in: fh, offset, whence, padding; fuse_lseek_out: offset.
            let (offset, whence) = (abi::u64_at(op_in, 8) as i64, abi::u32_at(op_in, 16));
            let o = crate::lseek_for(fs, ino, offset, whence)?;
            let mut out = Out::new(payload);
            out.u64(o);
            Ok(out.written())
        }
        // Everything else is what the classic adapter leaves to fuser's defaults: ENOSYS.
        _ => Err(libc::ENOSYS),
    }
}

fn errno(e: FsError) -> i32 {
    e.errno()
}

fn name(input: &[u8]) -> Result<&[u8], i32> {
    abi::cstr(input).map(|(n, _)| n).ok_or(libc::EINVAL)
}

fn empty(r: Result<(), FsError>) -> Answer {
    r.map(|()| 0).map_err(errno)
}

fn data(payload: &mut [u8], d: &[u8]) -> Answer {
    if d.len() > payload.len() {
        return Err(libc::ERANGE);
    }
    payload[..d.len()].copy_from_slice(d);
    Ok(d.len())
}

/// The classic adapter's open flags: files keep the kernel's cached pages across opens
/// (every change passes through this mount, so they cannot be stale) and close sends no
/// FLUSH (data reaches `Fs` on each write).
const OPEN_FLAGS: u32 = crate::OPEN_FLAGS.bits();

fn opened(payload: &mut [u8], flags: u32) -> Answer {
    let mut o = Out::new(payload);
    // fh 0, the FOPEN_* flags, no backing file.
    o.u64(0).u32(flags).u32(0);
    Ok(o.written())
}

/// A size probe (size 0) gets the length; a too-small buffer gets ERANGE.
fn xattr(payload: &mut [u8], size: u32, v: &[u8]) -> Answer {
    if size == 0 {
        let mut o = Out::new(payload);
        o.u32(v.len() as u32).u32(0);
        Ok(o.written())
    } else if v.len() > size as usize {
        Err(libc::ERANGE)
    } else {
        data(payload, v)
    }
}

fn setattr(op_in: &[u8]) -> SetAttr {
    let valid = abi::u32_at(op_in, 0);
    let has = |bit: u32| valid & bit != 0;
    let time = |now: u32, secs_off: usize, nsec_off: usize| {
        if has(now) {
            now_nanos()
        } else {
            let secs = abi::u64_at(op_in, secs_off) as i64;
            secs.saturating_mul(1_000_000_000)
                .saturating_add(i64::from(abi::u32_at(op_in, nsec_off)))
        }
    };
    SetAttr {
        mode: has(fattr::MODE).then(|| abi::u32_at(op_in, 68) & 0o7777),
        uid: has(fattr::UID).then(|| abi::u32_at(op_in, 76)),
        gid: has(fattr::GID).then(|| abi::u32_at(op_in, 80)),
        size: has(fattr::SIZE).then(|| abi::u64_at(op_in, 16)),
        atime: has(fattr::ATIME).then(|| time(fattr::ATIME_NOW, 32, 56)),
        mtime: has(fattr::MTIME).then(|| time(fattr::MTIME_NOW, 40, 60)),
        atime_now: has(fattr::ATIME) && has(fattr::ATIME_NOW),
        mtime_now: has(fattr::MTIME) && has(fattr::MTIME_NOW),
        through_writable_fd: has(fattr::FH),
    }
}

fn now_nanos() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

fn mode_bits(k: Kind) -> u32 {
    match k {
        Kind::File => libc::S_IFREG,
        Kind::Dir => libc::S_IFDIR,
        Kind::Symlink => libc::S_IFLNK,
        Kind::Fifo => libc::S_IFIFO,
        Kind::Socket => libc::S_IFSOCK,
        Kind::CharDev(_) => libc::S_IFCHR,
        Kind::BlockDev(_) => libc::S_IFBLK,
    }
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
        .u32(mode_bits(a.kind) | (a.mode & 0o7777))
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

fn entry(payload: &mut [u8], ttl: u64, r: Result<numaio_fs::FileAttr, FsError>) -> Answer {
    let a = r.map_err(errno)?;
    let mut o = Out::new(payload);
    put_entry(&mut o, &a, ttl);
    Ok(o.written())
}

fn attr_reply(payload: &mut [u8], r: Result<numaio_fs::FileAttr, FsError>) -> Answer {
    let a = r.map_err(errno)?;
    let mut o = Out::new(payload);
    o.u64(TTL_SECS).u32(0).u32(0);
    put_attr(&mut o, &a);
    Ok(o.written())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setattr_decodes_only_the_valid_fields() {
        let mut b = [0u8; 88];
        b[0..4].copy_from_slice(&(fattr::MODE | fattr::SIZE | fattr::MTIME).to_le_bytes());
        b[16..24].copy_from_slice(&4096u64.to_le_bytes());
        b[40..48].copy_from_slice(&3u64.to_le_bytes());
        b[60..64].copy_from_slice(&5u32.to_le_bytes());
        b[68..72].copy_from_slice(&(libc::S_IFREG | 0o640).to_le_bytes());
        let s = setattr(&b);
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
        let s = setattr(&b);
        assert!(s.atime_now && s.atime.is_some_and(|t| t > 0));
        assert!(!s.mtime_now);
        assert_eq!(s.mtime, Some(3_000_000_000));
    }

    fn volume() -> Fs {
        use numaio_fs::store::MemStore;
        let s = std::sync::Arc::new(MemStore::new(&[(0, 4 << 20)]));
        let o = numaio_fs::MkfsOptions {
            policy: numaio_fs::PlacementPolicy::WriterLocal,
            group_blocks: 64,
            journal_blocks: 32,
            checkpoint_blocks: 64,
        };
        Fs::mkfs(&*s, &o).unwrap();
        Fs::mount(s, numaio_fs::MountOptions::default()).unwrap()
    }

    fn call(fs: &Fs, opcode: u32, nodeid: u64, payload: &mut [u8]) -> Answer {
        let h = abi::InHeader {
            opcode,
            unique: 1,
            nodeid,
            uid: 0,
            gid: 0,
            pid: std::process::id(),
        };
        dispatch(fs, &Observer::new(), 0, &h, &[0u8; 16], payload, 0)
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
        let s = crate::Statfs::of(&fs);
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
}
