//! The one table of FUSE operations onto `Fs`: [`serve`] answers a typed [`Request`] with a
//! typed [`Reply`] (or an errno), whatever transport it came by. The transports only
//! translate: classic turns fuser's callbacks into requests and replies into fuser's reply
//! types; io_uring decodes bytes ([`crate::request::decode`]) and encodes replies into the
//! ring entry's payload.
//!
//! File data and listings go straight into the transport's buffer through [`Output`], so a
//! READ is never copied between the volume and the kernel's buffer.

use crate::accounting::Direction;
use crate::caller::Requester;
use crate::request::Request;
use crate::{FuseMode, Observer};
use fuser::FopenFlags;
use numaio_fs::meta::Kind;
use numaio_fs::{Caller, DirEntry, FileAttr, Fs, FsError};
use std::time::Duration;

/// How long the kernel may cache attributes, entries and the absence of a name. The volume
/// is locked while mounted, so every change reaches it through this mount's kernel, which
/// updates or drops what it cached for the names and inodes a request touched: the cache
/// cannot go stale, and each expiry only costs a LOOKUP or GETATTR round trip.
pub(crate) const TTL: Duration = Duration::from_secs(60);

/// Every open keeps the kernel's cached pages of the file: all changes to the volume pass
/// through this mount (the volume is locked while mounted), so they cannot be stale, and
/// dropping them at each open would send every cached read back to the server. No FLUSH
/// at close: without the writeback cache data reaches `Fs` on each write, and durability
/// is fsync's job, so a flush would be a round trip that does nothing. With it the kernel
/// still writes the file's dirty pages back at close (it ignores this flag there).
pub(crate) const OPEN_FLAGS: u32 = FopenFlags::FOPEN_KEEP_CACHE
    .union(FopenFlags::FOPEN_NOFLUSH)
    .bits();

/// Directories are opened with the kernel's readdir cache on and kept across opens: every
/// change to a directory passes through this mount, whose kernel then drops the cached
/// listing, so a listing repeated while nothing changed is answered by the kernel (no
/// request, getdents filled as on a local file system).
pub(crate) const DIR_OPEN_FLAGS: u32 = FopenFlags::FOPEN_CACHE_DIR
    .union(FopenFlags::FOPEN_KEEP_CACHE)
    .bits();

/// Bytes of the smallest readdirplus record (`fuse_entry_out`, `fuse_dirent`, a 1-byte name,
/// padded to 8): a reply buffer of `size` bytes holds at most `size / 160` entries.
pub(crate) const DIRENTPLUS_MIN: usize = 160;

/// Who sent a request, as the transport knows it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ctx {
    /// The requesting thread's id.
    pub pid: u32,
    pub uid: u32,
    pub gid: u32,
    /// The CPU whose io_uring queue carried the request: the requester's CPU (the kernel
    /// queues a request on the queue of the CPU that issued it). `None` over /dev/fuse.
    pub cpu: Option<u32>,
    /// The transport serving the mount now (the statistics report it).
    pub mode: FuseMode,
    /// Whether serving may wait for other operations on the file, for a commit or for a
    /// device. Where not, a request that would is left unserved ([`Reply::Later`]).
    pub wait: bool,
}

/// A successful answer. Data and listings are already in the transport's [`Output`].
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Reply {
    Empty,
    Entry {
        attr: FileAttr,
        ttl: Duration,
    },
    /// A missing name, as an entry of inode 0 the kernel keeps for `ttl`, so repeated misses
    /// (path searches, the create after a failed stat) stay in the kernel.
    Negative {
        ttl: Duration,
    },
    Attr {
        attr: FileAttr,
        ttl: Duration,
    },
    Created {
        attr: FileAttr,
        ttl: Duration,
        flags: u32,
    },
    /// File handle 0 with `FOPEN_*` flags.
    Opened {
        flags: u32,
    },
    /// This many bytes of file data in [`Output::data`]'s buffer.
    Data(usize),
    /// A symlink's target, an xattr value or an xattr name list.
    Bytes(Vec<u8>),
    /// The size an xattr probe (size 0) asked for.
    Size(u32),
    Written(u32),
    Statfs(Statfs),
    Offset(u64),
    /// The entries are in the [`Output`].
    Listed,
    /// Not served, nothing done: it would wait and [`Ctx::wait`] said it must not. The
    /// transport serves it again where it may wait.
    Later,
}

/// Where a transport takes file data and listing entries.
pub(crate) trait Output {
    /// A buffer for up to `size` bytes of file data; it may be shorter (the transport's
    /// buffer is), and a read fills no more than it.
    fn data(&mut self, size: usize) -> &mut [u8];
    /// How many more entries with attributes fit at most, so no attributes are looked up
    /// in vain.
    fn dir_room(&self) -> usize;
    /// Adds one entry (with its attributes for readdirplus); true when the reply is full,
    /// the entry not added.
    fn dir_add(&mut self, e: &DirEntry, plus: Option<(&FileAttr, Duration)>) -> bool;
}

/// A STATFS reply, the same in both transports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Statfs {
    pub blocks: u64,
    pub bfree: u64,
    pub bavail: u64,
    /// Inodes in total: those in use and those that still fit.
    pub files: u64,
    pub ffree: u64,
    pub bsize: u32,
    pub namelen: u32,
    pub frsize: u32,
}

impl Statfs {
    pub(crate) fn of(fs: &Fs) -> Statfs {
        let s = fs.statfs();
        Statfs {
            blocks: s.total_blocks,
            bfree: s.free_blocks,
            bavail: s.free_blocks,
            files: s.files.saturating_add(s.files_free),
            ffree: s.files_free,
            bsize: s.block_size as u32,
            namelen: numaio_fs::MAX_NAME as u32,
            frsize: s.block_size as u32,
        }
    }
}

/// Serves `req` from `ctx` against `fs`: the one mapping of FUSE operations onto `Fs`.
/// Returns the reply or a positive errno.
pub(crate) fn serve(
    fs: &Fs,
    obs: &Observer,
    ctx: &Ctx,
    req: Request<'_>,
    out: &mut dyn Output,
) -> Result<Reply, i32> {
    // A transport that must not wait gets back what would: a size change (device I/O), a
    // metadata change while a commit is due. A write decides below, as it is tried.
    if !ctx.wait {
        let later = match &req {
            Request::Setattr { attr, .. } if attr.size.is_some() => true,
            r if r.changes_metadata_only() => fs.change_would_wait(),
            _ => false,
        };
        if later {
            return Ok(Reply::Later);
        }
    }
    let _in_flight = obs.begin_request();
    let places = req.places();
    // The requester is looked up only by requests that need it (its node, its process).
    let requester = || -> Requester {
        match ctx.cpu {
            Some(cpu) => obs.requester_on_cpu(ctx.pid, cpu),
            None if places => obs.requester_placing(ctx.pid),
            None => obs.requester(ctx.pid),
        }
    };
    let caller = || Observer::caller(&requester(), ctx.uid, ctx.gid);
    // Names stay cached unless the server checks permissions (see Observer::entry_ttl).
    let ttl = obs.entry_ttl();
    let entry = |r: Result<FileAttr, FsError>| r.map(|attr| Reply::Entry { attr, ttl });
    let r = match req {
        Request::Lookup { parent, name } => match fs.lookup(parent, name, &caller()) {
            Ok(attr) => Ok(Reply::Entry { attr, ttl }),
            Err(FsError::NotFound) => Ok(Reply::Negative { ttl }),
            Err(e) => Err(e),
        },
        Request::Getattr { ino } => fs.getattr(ino).map(|attr| Reply::Attr { attr, ttl: TTL }),
        Request::Setattr { ino, attr } if obs.writeback_cache() => {
            setattr_writeback(fs, ino, attr, &caller()).map(|attr| Reply::Attr { attr, ttl: TTL })
        }
        Request::Setattr { ino, attr } => fs
            .setattr(ino, &attr, &caller())
            .map(|attr| Reply::Attr { attr, ttl: TTL }),
        Request::Readlink { ino } => fs.readlink(ino).map(Reply::Bytes),
        Request::Symlink {
            parent,
            name,
            target,
        } => entry(fs.symlink(parent, name, target, &caller())),
        Request::Mknod {
            parent,
            name,
            mode,
            umask,
            rdev,
        } => {
            let k = match mode & libc::S_IFMT {
                libc::S_IFREG => Kind::File,
                libc::S_IFIFO => Kind::Fifo,
                libc::S_IFSOCK => Kind::Socket,
                libc::S_IFCHR => Kind::CharDev(rdev),
                libc::S_IFBLK => Kind::BlockDev(rdev),
                _ => return Err(libc::EINVAL),
            };
            entry(fs.mknod(parent, name, k, mode & !umask & 0o7777, &caller()))
        }
        Request::Mkdir {
            parent,
            name,
            mode,
            umask,
        } => entry(fs.mkdir(parent, name, mode & !umask, &caller())),
        Request::Unlink { parent, name } => fs.unlink(parent, name, &caller()).map(empty),
        Request::Rmdir { parent, name } => fs.rmdir(parent, name, &caller()).map(empty),
        Request::Rename {
            parent,
            name,
            newparent,
            newname,
            flags,
        } => fs
            .rename(parent, name, newparent, newname, flags, &caller())
            .map(empty),
        Request::Link {
            ino,
            newparent,
            newname,
        } => {
            let c = caller();
            entry(link_check(fs, obs, ino, &c).and_then(|()| fs.link(ino, newparent, newname, &c)))
        }
        // ENOSYS once, and the kernel opens every later file itself, with no OPEN and no
        // RELEASE: nothing is kept per open (the kernel's lookup count keeps an unlinked
        // file, see crate::lookups), and the kernel has checked the access mode.
        Request::Open { .. } if obs.no_open() => return Err(libc::ENOSYS),
        Request::Open { ino, flags } => fs
            .access(ino, open_mask(flags), &caller())
            .map(|()| Reply::Opened { flags: OPEN_FLAGS }),
        Request::Opendir { .. } if obs.no_opendir() => return Err(libc::ENOSYS),
        Request::Opendir { ino } => {
            // Where the server checks permissions, listing takes read permission on the
            // directory (the kernel checks it itself otherwise).
            if obs.server_checks() {
                fs.access(ino, libc::R_OK as u32, &caller())
            } else {
                Ok(())
            }
            .map(|()| Reply::Opened {
                flags: DIR_OPEN_FLAGS,
            })
        }
        Request::Read {
            ino,
            offset,
            size,
            flags,
        } => {
            let buf = out.data(size as usize);
            // One plan gives the data and the bytes per node. A reader without O_DIRECT
            // keeps what it gets in the mount's page cache, so the store drops its own copy
            // and file data is cached once; an O_DIRECT reader keeps nothing, so the
            // store's cache stays the one copy.
            let kept = flags & libc::O_DIRECT == 0;
            let (n, parts) = fs
                .read_accounted(ino, offset, buf, kept)
                .map_err(|e| e.errno())?;
            obs.account_parts(&requester(), ino, offset, Direction::Read, &parts);
            Ok(Reply::Data(n))
        }
        Request::Write { ino, offset, data } => {
            let r = requester();
            let c = Observer::caller(&r, ctx.uid, ctx.gid);
            let n = if ctx.wait {
                fs.write(ino, offset, data, &c)
            } else {
                match fs.try_write(ino, offset, data, &c) {
                    Ok(Some(n)) => Ok(n),
                    Ok(None) => return Ok(Reply::Later),
                    Err(e) => Err(e),
                }
            }
            .map_err(|e| e.errno())?;
            obs.account(fs, &r, ino, offset, n as u64, Direction::Write);
            Ok(Reply::Written(n as u32))
        }
        Request::Statfs => Ok(Reply::Statfs(Statfs::of(fs))),
        // Nothing is kept per open: the kernel's lookup count keeps the file.
        Request::Release { .. } | Request::Nothing => Ok(Reply::Empty),
        // Nothing to do at close (data reaches `Fs` on each write, or the kernel wrote its
        // dirty pages back before asking); ENOSYS has the kernel stop asking for good.
        Request::Flush => return Err(libc::ENOSYS),
        Request::Fsync { ino, datasync } => fs.fsync(ino, datasync).map(empty),
        Request::Fsyncdir { ino } => fs.fsync_dir(ino).map(empty),
        Request::Syncfs => fs.sync().map(empty),
        Request::Setxattr {
            ino,
            name,
            value,
            flags,
        } => {
            if Observer::is_stats_xattr(ino, name) {
                return Err(libc::EPERM);
            }
            fs.setxattr(ino, name, value, flags, &caller()).map(empty)
        }
        Request::Getxattr { ino, name, size } => {
            if Observer::is_stats_xattr(ino, name) {
                return xattr(size, obs.stats_json(fs, ctx.mode.as_str()));
            }
            // Where the server checks permissions, reading a `user.` attribute takes read
            // permission (the kernel checks it itself otherwise).
            if obs.server_checks() && name.starts_with(b"user.") {
                fs.access(ino, libc::R_OK as u32, &caller())
                    .map_err(|e| e.errno())?;
            }
            return xattr(size, fs.getxattr(ino, name).map_err(|e| e.errno())?);
        }
        Request::Listxattr { ino, size } => {
            let mut v = Vec::new();
            for n in fs.listxattr(ino).map_err(|e| e.errno())? {
                v.extend_from_slice(&n);
                v.push(0);
            }
            return xattr(size, v);
        }
        Request::Removexattr { ino, name } => {
            if Observer::is_stats_xattr(ino, name) {
                return Err(libc::EPERM);
            }
            fs.removexattr(ino, name, &caller()).map(empty)
        }
        Request::Access { ino, mask } => fs.access(ino, mask, &caller()).map(empty),
        // Where opens skip the server, ENOSYS once has the kernel create every later file
        // with MKNOD and open it itself: the same new inode, and no RELEASE at its close
        // (a file opened by CREATE is released to the server, one round trip per file).
        Request::Create { .. } if obs.no_open() => return Err(libc::ENOSYS),
        Request::Create {
            parent,
            name,
            mode,
            umask,
        } => fs
            .create(parent, name, mode & !umask, &caller())
            .map(|attr| Reply::Created {
                attr,
                ttl,
                flags: OPEN_FLAGS,
            }),
        Request::Readdir { ino, offset, size } => {
            obs.note_listing(size);
            fill_readdir(fs, obs, ino, offset, false, ttl, out).map(|()| Reply::Listed)
        }
        Request::Readdirplus { ino, offset, size } => {
            obs.note_listing(size);
            fill_readdir(fs, obs, ino, offset, true, ttl, out).map(|()| Reply::Listed)
        }
        Request::Fallocate {
            ino,
            offset,
            length,
            mode,
        } => fs
            .fallocate(ino, offset, length, mode, &caller())
            .map(empty),
        // ENOSYS has the kernel answer this and every later SEEK_DATA/SEEK_HOLE of the mount
        // itself, from its own size, as for a file without holes (bindfs's answer too): where
        // the mount turned hole reporting off, and under the writeback cache, where the
        // kernel sends LSEEK without writing dirty pages back first, so the volume may not
        // know the file's end yet (SEEK_DATA/SEEK_HOLE past it answered ENXIO).
        Request::Lseek { .. } if obs.writeback_cache() || !obs.seek_holes() => {
            return Err(libc::ENOSYS)
        }
        Request::Lseek {
            ino,
            offset,
            whence,
        } => {
            // The kernel sends only SEEK_DATA and SEEK_HOLE; a negative offset is past no
            // data, as on ext4.
            let offset = u64::try_from(offset).map_err(|_| libc::ENXIO)?;
            fs.seek(ino, offset, whence).map(Reply::Offset)
        }
    };
    // Every inode handed to the kernel is counted before the reply goes (crate::lookups).
    if let Ok(Reply::Entry { attr, .. } | Reply::Created { attr, .. }) = &r {
        obs.lookups()
            .remember(fs, attr.ino, attr.kind)
            .map_err(|e| e.errno())?;
    }
    r.map_err(|e| e.errno())
}

/// A SETATTR under the kernel's writeback cache. The kernel keeps the file's mtime and
/// sends it as a chosen time: when it writes cached times back (at fsync, close, or
/// before another SETATTR, with the credentials of whoever triggered it) and for a
/// `touch` it turned into "now" itself. Only its permission checks (which the mount's
/// default permissions make it do) tell those from a user's chosen time, so the times
/// are applied as root would; the rest of the change is checked as ever, first, so a
/// refused change sets no times.
fn setattr_writeback(
    fs: &Fs,
    ino: u64,
    attr: numaio_fs::SetAttr,
    c: &Caller,
) -> Result<FileAttr, FsError> {
    if attr.atime.is_none() && attr.mtime.is_none() {
        return fs.setattr(ino, &attr, c);
    }
    let times = numaio_fs::SetAttr {
        atime: attr.atime,
        mtime: attr.mtime,
        atime_now: attr.atime_now,
        mtime_now: attr.mtime_now,
        ..Default::default()
    };
    let rest = numaio_fs::SetAttr {
        atime: None,
        mtime: None,
        atime_now: false,
        mtime_now: false,
        ..attr
    };
    let only_times =
        rest.mode.is_none() && rest.uid.is_none() && rest.gid.is_none() && rest.size.is_none();
    if !only_times {
        fs.setattr(ino, &rest, c)?;
    }
    let root = Caller { uid: 0, ..*c };
    match fs.setattr(ino, &times, &root) {
        // The kernel may flush the cached times of a file it has just seen unlinked after
        // the volume freed it: nothing is left to set. (The kernel's reference keeps an
        // inode until it forgets it, so this is a guard, not the usual case.)
        Err(FsError::NotFound) if only_times => Ok(FileAttr {
            ino,
            kind: Kind::File,
            mode: 0,
            uid: 0,
            gid: 0,
            nlink: 0,
            size: 0,
            blocks: 0,
            atime: times.atime.unwrap_or(0),
            mtime: times.mtime.unwrap_or(0),
            ctime: times.mtime.unwrap_or(0),
            policy: numaio_fs::PlacementPolicy::WriterLocal,
            home: None,
            meta_node: 0,
        }),
        r => r,
    }
}

fn empty(_: ()) -> Reply {
    Reply::Empty
}

/// A size probe (size 0) gets the length; a too-small buffer gets ERANGE.
fn xattr(size: u32, v: Vec<u8>) -> Result<Reply, i32> {
    if size == 0 {
        Ok(Reply::Size(v.len() as u32))
    } else if v.len() > size as usize {
        Err(libc::ERANGE)
    } else {
        Ok(Reply::Bytes(v))
    }
}

/// The permission an OPEN with `flags` takes: execve's open (flagged `__FMODE_EXEC`) takes
/// execute permission, not read; others their access mode.
pub(crate) fn open_mask(flags: i32) -> u32 {
    const FMODE_EXEC: i32 = 0x20;
    if flags & FMODE_EXEC != 0 {
        return libc::X_OK as u32;
    }
    (match flags & libc::O_ACCMODE {
        libc::O_RDONLY => libc::R_OK,
        libc::O_WRONLY => libc::W_OK,
        _ => libc::R_OK | libc::W_OK,
    }) as u32
}

/// A LINK's check where the server checks permissions: the kernel's
/// `fs.protected_hardlinks` rule, whose permission test FUSE answers with "allowed" there.
/// Someone else's file may be linked only when it is a regular file, neither set-user-id
/// nor executable set-group-id, and readable and writable by the caller.
fn link_check(fs: &Fs, obs: &Observer, ino: u64, c: &Caller) -> Result<(), FsError> {
    if !obs.server_checks() || c.uid == 0 {
        return Ok(());
    }
    let protected = std::fs::read_to_string("/proc/sys/fs/protected_hardlinks")
        .map_or(true, |v| v.trim() != "0");
    let a = fs.getattr(ino)?;
    if !protected || a.uid == c.uid {
        return Ok(());
    }
    let safe = a.kind == Kind::File
        && a.mode & 0o4000 == 0
        && a.mode & 0o2010 != 0o2010
        && fs.access(ino, (libc::R_OK | libc::W_OK) as u32, c).is_ok();
    if safe {
        Ok(())
    } else {
        Err(FsError::NotPermitted)
    }
}

/// Lists directory `ino` after `offset` into one reply (`plus`: with attributes). Batches
/// are fetched from `Fs` until the reply is full or the directory ends, so every reply but
/// the last is full: a listing costs the kernel as few requests (and getdents calls) as its
/// bytes need. An error after the first batch ends the reply with what it holds; the next
/// request reports it.
fn fill_readdir(
    fs: &Fs,
    obs: &Observer,
    ino: u64,
    offset: u64,
    plus: bool,
    ttl: Duration,
    out: &mut dyn Output,
) -> Result<(), FsError> {
    let mut cookie = offset;
    let mut first = true;
    let mut first_entry = true;
    loop {
        let batch = if plus {
            let limit = out.dir_room();
            if limit == 0 {
                return Ok(());
            }
            fs.readdir_plus(ino, cookie, limit.max(1))
                .map(|l| l.into_iter().map(|(e, a)| (e, Some(a))).collect::<Vec<_>>())
        } else {
            fs.readdir(ino, cookie)
                .map(|l| l.into_iter().map(|e| (e, None)).collect::<Vec<_>>())
        };
        let list = match batch {
            Ok(l) => l,
            Err(e) if first => return Err(e),
            Err(_) => return Ok(()),
        };
        first = false;
        let Some((last, _)) = list.last() else {
            return Ok(());
        };
        let next = last.cookie;
        for (e, a) in &list {
            // The kernel takes a reference to each entry with attributes but `.` and `..`
            // (crate::lookups); counted before the entry can reach it.
            let counted = a.is_some() && e.name != b"." && e.name != b"..";
            if counted {
                if let Err(err) = obs.lookups().remember(fs, e.ino, e.kind) {
                    return if first_entry { Err(err) } else { Ok(()) };
                }
            }
            if out.dir_add(e, a.as_ref().map(|a| (a, ttl))) {
                if counted {
                    obs.lookups().forget(fs, e.ino, 1);
                }
                return Ok(());
            }
            first_entry = false;
        }
        cookie = next;
    }
}

/// The `S_IF*` type bits of `k`.
pub(crate) fn mode_bits(k: Kind) -> u32 {
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
