//! Serves a mounted [`numaio_fs::Fs`] to the kernel through FUSE (the `fuser` crate).
//!
//! Every request is mapped onto the `Fs` API; errors become the errno `FsError::errno` names.
//! File data is cached once, in the kernel's page cache of the mount (no direct I/O, so mmap,
//! shared writable mmap included, works without kernel extensions); the volume's store drops
//! its copy of what a buffered reader read and of what was written once it is durable.

pub mod accounting;
pub mod caller;
pub mod memory;
pub mod move_work;
pub mod observer;
pub mod readahead;
pub mod serving;
pub mod stats;
pub mod uring;

/// The FUSE crate this server is built on, for callers that configure the mount.
pub use fuser;

pub use observer::Observer;
pub use uring::{FuseMode, RequestCounts, Transport};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyLseek,
    ReplyOpen, ReplyWrite, Request,
};
use numaio_fs::meta::Kind;
use numaio_fs::{Caller, Fs, FsError, SetAttr};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache attributes, entries and the absence of a name. The volume
/// is locked while mounted, so every change reaches it through this mount's kernel, which
/// updates or drops what it cached for the names and inodes a request touched: the cache
/// cannot go stale, and each expiry only costs a LOOKUP or GETATTR round trip.
pub(crate) const TTL: Duration = Duration::from_secs(60);

/// Every open keeps the kernel's cached pages of the file: all changes to the volume pass
/// through this mount (the volume is locked while mounted), so they cannot be stale, and
/// dropping them at each open would send every cached read back to the server. No FLUSH
/// at close: data reaches `Fs` on each write (no writeback cache) and durability is
/// fsync's job, so a flush would be a round trip that does nothing.
pub(crate) const OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_KEEP_CACHE.union(FopenFlags::FOPEN_NOFLUSH);

/// Directories are opened with the kernel's readdir cache on and kept across opens: every
/// change to a directory passes through this mount, whose kernel then drops the cached
/// listing, so a listing repeated while nothing changed is answered by the kernel (no
/// request, getdents filled as on a local file system).
pub(crate) const DIR_OPEN_FLAGS: FopenFlags =
    FopenFlags::FOPEN_CACHE_DIR.union(FopenFlags::FOPEN_KEEP_CACHE);

/// Entries with attributes fetched from `Fs` at a time for a classic readdirplus reply:
/// fuser does not tell the handler the kernel's buffer size, so batches are fetched until
/// the reply is full (a page holds about 25 entries with attributes; only the last batch's
/// overflow is looked up in vain).
const READDIRPLUS_BATCH: usize = 64;

/// Bytes of the smallest readdirplus record (`fuse_entry_out`, `fuse_dirent`, a 1-byte name,
/// padded to 8): a reply buffer of `size` bytes holds at most `size / 160` entries.
pub(crate) const DIRENTPLUS_MIN: usize = 160;

/// One readdirplus reply's entries with their attributes, starting after `offset`: what
/// both transports list, so a listing is the same in either.
/// `limit` bounds the entries to what the reply buffer can hold, so no attributes are
/// looked up in vain.
pub(crate) fn readdirplus_batch(
    fs: &Fs,
    ino: u64,
    offset: u64,
    limit: usize,
) -> Result<Vec<(numaio_fs::DirEntry, numaio_fs::FileAttr)>, FsError> {
    fs.readdir_plus(ino, offset, limit.max(1))
}

/// Lists directory `ino` after `offset` into one reply: `add` takes an entry and returns
/// true when the reply is full (that entry not added). Batches are fetched from `Fs` until
/// the reply is full or the directory ends, so every reply but the last is full: a listing
/// costs the kernel as few requests (and getdents calls) as its bytes need. An error after
/// the first batch ends the reply with what it holds; the next request reports it.
pub(crate) fn fill_readdir(
    fs: &Fs,
    ino: u64,
    offset: u64,
    mut add: impl FnMut(&numaio_fs::DirEntry) -> bool,
) -> Result<(), FsError> {
    let mut cookie = offset;
    let mut first = true;
    loop {
        let list = match fs.readdir(ino, cookie) {
            Ok(l) => l,
            Err(e) if first => return Err(e),
            Err(_) => return Ok(()),
        };
        first = false;
        let Some(last) = list.last() else {
            return Ok(());
        };
        let next = last.cookie;
        for e in &list {
            if add(e) {
                return Ok(());
            }
        }
        cookie = next;
    }
}

/// [`fill_readdir`] with attributes: `room` says how many more entries the reply can hold
/// at most (so no attributes are looked up in vain), `add` as there.
pub(crate) fn fill_readdirplus(
    fs: &Fs,
    ino: u64,
    offset: u64,
    mut room: impl FnMut() -> usize,
    mut add: impl FnMut(&numaio_fs::DirEntry, &numaio_fs::FileAttr) -> bool,
) -> Result<(), FsError> {
    let mut cookie = offset;
    let mut first = true;
    loop {
        let limit = room();
        if limit == 0 {
            return Ok(());
        }
        let list = match readdirplus_batch(fs, ino, cookie, limit) {
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
            if add(e, a) {
                return Ok(());
            }
        }
        cookie = next;
    }
}

/// A lookup's outcome for either transport: `Ok(None)` for a missing name, which is
/// answered as a negative entry (inode 0) the kernel caches for the TTL, so repeated misses
/// (path searches, the create after a failed stat) stay in the kernel.
pub(crate) fn negative_lookup(
    r: Result<numaio_fs::FileAttr, FsError>,
) -> Result<Option<numaio_fs::FileAttr>, FsError> {
    match r {
        Ok(a) => Ok(Some(a)),
        Err(FsError::NotFound) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A STATFS reply, the same in both transports.
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

thread_local! {
    /// The classic read handler's reply buffer, kept per serving thread.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The FUSE face of a numaio-fs volume.
pub struct NumaFs {
    fs: Option<Arc<Fs>>,
    obs: Arc<Observer>,
    transport: Transport,
}

impl NumaFs {
    /// Serves `fs` over classic `/dev/fuse` only.
    pub fn new(fs: Fs) -> NumaFs {
        NumaFs::with_mode(fs, FuseMode::Classic)
    }

    /// Serves `fs`, asking the kernel at INIT for `mode`; with [`FuseMode::IoUring`] the
    /// rings start with [`Transport::start`] once the session exists.
    pub fn with_mode(fs: Fs, mode: FuseMode) -> NumaFs {
        let fs = Arc::new(fs);
        let obs = Arc::new(Observer::new());
        let transport = Transport::new(fs.clone(), obs.clone(), mode == FuseMode::IoUring);
        NumaFs {
            fs: Some(fs),
            obs,
            transport,
        }
    }

    /// The mount point, as the statistics report it.
    pub fn with_mountpoint(self, mp: &str) -> NumaFs {
        self.obs.set_mountpoint(mp);
        self
    }

    /// Has the server check permissions for other users (a mount with `allow_other` and
    /// without `default_permissions`): names are then not cached by the kernel, and opening a
    /// directory takes read permission.
    pub fn with_server_checks(self, on: bool) -> NumaFs {
        self.obs.set_server_checks(on);
        self
    }

    /// Moves requesting threads to their data (`MigrateThread` or `FirstReader`) with the
    /// engine's default hysteresis; `override_user_affinity` also moves threads whose
    /// affinity someone else narrowed.
    pub fn with_move_work(
        self,
        mode: numaio_numa::moves::MoveWork,
        override_user_affinity: bool,
    ) -> NumaFs {
        self.obs.set_move_work(mode, override_user_affinity);
        self
    }

    /// The transport serving requests now.
    pub fn fuse_mode(&self) -> FuseMode {
        self.transport.mode()
    }

    /// Requests served so far, per transport.
    pub fn requests(&self) -> RequestCounts {
        self.transport.requests()
    }

    /// A handle on the transport that stays usable after the session took this `NumaFs`.
    pub fn transport(&self) -> Transport {
        self.transport.clone()
    }

    /// The request observer (accounting, moves, statistics) every transport reports to.
    pub fn observer(&self) -> Arc<Observer> {
        self.obs.clone()
    }

    /// The mount's statistics as the JSON of [`stats::Stats`].
    pub fn stats_json(&self) -> Vec<u8> {
        self.obs
            .stats_json(self.fs_ref(), self.transport.mode().as_str())
    }

    /// The requester behind a request from thread `tid` (its node, its process).
    pub fn requester(&self, tid: u32) -> caller::Requester {
        self.obs.requester(tid)
    }

    /// The [`Caller`] for a request from thread `tid` with the given credentials: placement
    /// uses the node of the CPU the requesting thread runs on.
    pub fn caller_of(&self, tid: u32, uid: u32, gid: u32) -> Caller {
        Observer::caller(&self.requester(tid), uid, gid)
    }

    fn caller(&self, req: &Request) -> Caller {
        self.caller_of(req.pid(), req.uid(), req.gid())
    }

    /// The caller of a request that places a new inode's metadata or new blocks by its node.
    fn placing_caller(&self, req: &Request) -> Caller {
        Observer::caller(&self.obs.requester_placing(req.pid()), req.uid(), req.gid())
    }

    fn account(
        &self,
        r: &caller::Requester,
        ino: u64,
        offset: u64,
        len: u64,
        dir: accounting::Direction,
    ) {
        self.obs.account(self.fs_ref(), r, ino, offset, len, dir)
    }

    fn is_stats_xattr(ino: INodeNo, name: &OsStr) -> bool {
        Observer::is_stats_xattr(ino.0, name.as_bytes())
    }

    fn fs_ref(&self) -> &Fs {
        self.fs.as_deref().expect("volume is mounted until destroy")
    }

    fn fs(&self) -> &Fs {
        // Every classic handler but flush passes through here: the classic request count.
        self.transport.count_classic();
        self.fs_ref()
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn time(ns: i64) -> SystemTime {
    if ns >= 0 {
        UNIX_EPOCH + Duration::from_nanos(ns as u64)
    } else {
        UNIX_EPOCH
    }
}

fn kind(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Fifo => FileType::NamedPipe,
        Kind::Socket => FileType::Socket,
        Kind::CharDev(_) => FileType::CharDevice,
        Kind::BlockDev(_) => FileType::BlockDevice,
    }
}

fn attr(a: &numaio_fs::FileAttr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.blocks * (numaio_fs::BLOCK_SIZE / 512),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.kind.rdev(),
        blksize: numaio_fs::BLOCK_SIZE as u32,
        flags: 0,
    }
}

fn entry(reply: ReplyEntry, ttl: Duration, r: Result<numaio_fs::FileAttr, FsError>) {
    match r {
        Ok(a) => reply.entry(&ttl, &attr(&a), Generation(0)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// A lookup's answer, a missing name as a negative entry ([`negative_lookup`]).
fn lookup_entry(reply: ReplyEntry, ttl: Duration, r: Result<numaio_fs::FileAttr, FsError>) {
    match negative_lookup(r) {
        Ok(None) => {
            let a = FileAttr {
                ino: INodeNo(0),
                size: 0,
                blocks: 0,
                atime: UNIX_EPOCH,
                mtime: UNIX_EPOCH,
                ctime: UNIX_EPOCH,
                crtime: UNIX_EPOCH,
                kind: FileType::RegularFile,
                perm: 0,
                nlink: 0,
                uid: 0,
                gid: 0,
                rdev: 0,
                blksize: numaio_fs::BLOCK_SIZE as u32,
                flags: 0,
            };
            reply.entry(&ttl, &a, Generation(0))
        }
        Ok(Some(a)) => reply.entry(&ttl, &attr(&a), Generation(0)),
        Err(e) => reply.error(errno(&e)),
    }
}

/// The permission an OPEN with `flags` takes, in either transport: execve's open (flagged
/// `__FMODE_EXEC`) takes execute permission, not read; others their access mode.
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

/// A GETXATTR's check in either transport: where the server checks permissions, reading a
/// `user.` attribute takes read permission (the kernel checks it itself otherwise).
pub(crate) fn getxattr_check(
    fs: &Fs,
    obs: &Observer,
    ino: u64,
    name: &[u8],
    c: &Caller,
) -> Result<(), FsError> {
    if obs.server_checks() && name.starts_with(b"user.") {
        fs.access(ino, libc::R_OK as u32, c)
    } else {
        Ok(())
    }
}

/// A LINK's check in either transport where the server checks permissions: the kernel's
/// `fs.protected_hardlinks` rule, whose permission test FUSE answers with "allowed" there.
/// Someone else's file may be linked only when it is a regular file, neither set-user-id
/// nor executable set-group-id, and readable and writable by the caller.
pub(crate) fn link_check(fs: &Fs, obs: &Observer, ino: u64, c: &Caller) -> Result<(), FsError> {
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

/// An OPENDIR's check in either transport: where the server checks permissions, listing
/// takes read permission on the directory (the kernel checks it itself otherwise).
pub(crate) fn opendir_check(fs: &Fs, obs: &Observer, ino: u64, c: &Caller) -> Result<(), FsError> {
    if obs.server_checks() {
        fs.access(ino, libc::R_OK as u32, c)
    } else {
        Ok(())
    }
}

/// Reads for a READ request of a file opened with `open_flags`. Without `O_DIRECT` the kernel
/// keeps what it gets in the mount's page cache, so the volume's store drops its own copy
/// (`Fs::read_kept`): file data is cached once. An `O_DIRECT` reader keeps nothing, so the
/// store's cache (the devices' page cache) stays the one copy.
pub(crate) fn read_for(
    fs: &Fs,
    ino: u64,
    offset: u64,
    buf: &mut [u8],
    open_flags: i32,
) -> Result<usize, FsError> {
    if open_flags & libc::O_DIRECT != 0 {
        fs.read(ino, offset, buf)
    } else {
        fs.read_kept(ino, offset, buf)
    }
}

/// FUSE_LSEEK for both transports: the kernel sends only `SEEK_DATA` and `SEEK_HOLE`
/// (it serves the other whences itself); the answer is the new offset or an errno.
pub(crate) fn lseek_for(fs: &Fs, ino: u64, offset: i64, whence: u32) -> Result<u64, i32> {
    // A negative offset is past no data, as on ext4.
    let offset = u64::try_from(offset).map_err(|_| libc::ENXIO)?;
    fs.seek(ino, offset, whence).map_err(|e| e.errno())
}

fn empty(reply: ReplyEmpty, r: Result<(), FsError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

impl Filesystem for NumaFs {
    fn init(&mut self, _req: &Request, config: &mut fuser::KernelConfig) -> std::io::Result<()> {
        // Lookups and listings of one directory may run in parallel (a kernel without it
        // keeps them serial).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Every listing carries attributes (in both transports): no LOOKUP per entry for
        // `ls -l` or a stat after a readdir. Not READDIRPLUS_AUTO: with it the kernel asks
        // for attributes only in a listing's first reply, so a large directory listed before
        // it is stat'ed (as `ls -l` does) still costs a LOOKUP per later entry.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        let uring = self.transport.wants_uring()
            && config
                .add_capabilities(fuser::InitFlags::FUSE_OVER_IO_URING)
                .is_ok();
        if uring {
            // Every ring entry needs a payload buffer as large as the largest request, so
            // bound requests (and readahead, which sizes them too) to a modest size.
            let _ = config.set_max_write(uring::MAX_WRITE);
            let _ = config.set_max_readahead(uring::MAX_WRITE);
            self.transport.negotiated(u64::from(uring::MAX_WRITE));
        }
        Ok(())
    }

    fn destroy(&mut self) {
        // The ring workers hold the volume too: stop them before the final flush.
        self.transport.stop();
        if let Some(fs) = self.fs.take() {
            match Arc::try_unwrap(fs) {
                Ok(fs) => {
                    if let Err(e) = fs.unmount() {
                        eprintln!("numaio mount: unmounting the volume failed: {e}");
                    }
                }
                Err(fs) => {
                    // Still shared (a worker did not stop): at least make everything durable.
                    if let Err(e) = fs.sync() {
                        eprintln!("numaio mount: syncing the volume failed: {e}");
                    }
                }
            }
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        lookup_entry(
            reply,
            self.obs.entry_ttl(),
            self.fs()
                .lookup(parent.0, name.as_bytes(), &self.caller(req)),
        )
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.fs().getattr(ino.0) {
            Ok(a) => reply.attr(&TTL, &attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = self.fs().mkdir(
            parent.0,
            name.as_bytes(),
            mode & !umask,
            &self.placing_caller(req),
        );
        entry(reply, self.obs.entry_ttl(), r)
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let k = match mode & libc::S_IFMT {
            libc::S_IFREG => Kind::File,
            libc::S_IFIFO => Kind::Fifo,
            libc::S_IFSOCK => Kind::Socket,
            libc::S_IFCHR => Kind::CharDev(rdev),
            libc::S_IFBLK => Kind::BlockDev(rdev),
            _ => return reply.error(Errno::from_i32(libc::EINVAL)),
        };
        let r = self.fs().mknod(
            parent.0,
            name.as_bytes(),
            k,
            mode & !umask & 0o7777,
            &self.placing_caller(req),
        );
        entry(reply, self.obs.entry_ttl(), r)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs()
                .unlink(parent.0, name.as_bytes(), &self.caller(req)),
        )
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs()
                .rmdir(parent.0, name.as_bytes(), &self.caller(req)),
        )
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mask = open_mask(flags.0);
        let r = self
            .fs()
            .access(ino.0, mask, &self.caller(req))
            .and_then(|()| self.fs().open(ino.0));
        match r {
            Ok(()) => reply.opened(FileHandle(0), OPEN_FLAGS),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match opendir_check(self.fs(), &self.obs, ino.0, &self.caller(req)) {
            Ok(()) => reply.opened(FileHandle(0), DIR_OPEN_FLAGS),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = self
            .fs()
            .create(
                parent.0,
                name.as_bytes(),
                mode & !umask,
                &self.placing_caller(req),
            )
            .and_then(|a| self.fs().open(a.ino).map(|()| a));
        match r {
            Ok(a) => reply.created(
                &self.obs.entry_ttl(),
                &attr(&a),
                Generation(0),
                FileHandle(0),
                OPEN_FLAGS,
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        // A per-thread buffer: a fresh zeroed one per request cost a memset of every byte.
        READ_BUF.with_borrow_mut(|buf| {
            if buf.len() < size as usize {
                buf.resize(size as usize, 0);
            }
            let buf = &mut buf[..size as usize];
            match read_for(self.fs(), ino.0, offset, buf, flags.0) {
                Ok(n) => {
                    reply.data(&buf[..n]);
                    let r = self.requester(req.pid());
                    self.account(&r, ino.0, offset, n as u64, accounting::Direction::Read);
                }
                Err(e) => reply.error(errno(&e)),
            }
        })
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        let r = self.obs.requester_placing(req.pid());
        let c = Observer::caller(&r, req.uid(), req.gid());
        match self.fs().write(ino.0, offset, data, &c) {
            Ok(n) => {
                reply.written(n as u32);
                self.account(&r, ino.0, offset, n as u64, accounting::Direction::Write);
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs().release(ino.0))
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs().fsync(ino.0, datasync))
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.fs().fsync_dir(ino.0))
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        self.obs.note_listing(None);
        let r = fill_readdir(self.fs(), ino.0, offset, |e| {
            reply.add(
                INodeNo(e.ino),
                e.cookie,
                kind(e.kind),
                OsStr::from_bytes(&e.name),
            )
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: fuser::ReplyDirectoryPlus,
    ) {
        let ttl = self.obs.entry_ttl();
        self.obs.note_listing(None);
        let r = fill_readdirplus(
            self.fs(),
            ino.0,
            offset,
            || READDIRPLUS_BATCH,
            |e, a| {
                reply.add(
                    INodeNo(e.ino),
                    e.cookie,
                    OsStr::from_bytes(&e.name),
                    &ttl,
                    &attr(a),
                    Generation(0),
                )
            },
        );
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<fuser::TimeOrNow>,
        mtime: Option<fuser::TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let s = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(nanos),
            mtime: mtime.map(nanos),
            atime_now: matches!(atime, Some(fuser::TimeOrNow::Now)),
            mtime_now: matches!(mtime, Some(fuser::TimeOrNow::Now)),
            // The kernel names the file handle only for ftruncate, on a descriptor it opened
            // for writing.
            through_writable_fd: fh.is_some(),
        };
        match self.fs().setattr(ino.0, &s, &self.caller(req)) {
            Ok(a) => reply.attr(&TTL, &attr(&a)),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let r = self.fs().symlink(
            parent.0,
            link_name.as_bytes(),
            target.as_os_str().as_bytes(),
            &self.placing_caller(req),
        );
        entry(reply, self.obs.entry_ttl(), r)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.fs().readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = self.fs().rename(
            parent.0,
            name.as_bytes(),
            newparent.0,
            newname.as_bytes(),
            flags.bits(),
            &self.caller(req),
        );
        empty(reply, r)
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let (fs, c) = (self.fs(), self.caller(req));
        let r = link_check(fs, &self.obs, ino.0, &c)
            .and_then(|()| fs.link(ino.0, newparent.0, newname.as_bytes(), &c));
        entry(reply, self.obs.entry_ttl(), r)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        let s = Statfs::of(self.fs());
        reply.statfs(
            s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
        )
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        if Self::is_stats_xattr(ino, name) {
            return reply.error(Errno::from_i32(libc::EPERM));
        }
        let r = self.fs().setxattr(
            ino.0,
            name.as_bytes(),
            value,
            flags as u32,
            &self.caller(req),
        );
        empty(reply, r)
    }

    fn getxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: fuser::ReplyXattr,
    ) {
        if Self::is_stats_xattr(ino, name) {
            return xattr_reply(reply, size, &self.stats_json());
        }
        let (fs, c) = (self.fs(), self.caller(req));
        match getxattr_check(fs, &self.obs, ino.0, name.as_bytes(), &c)
            .and_then(|()| fs.getxattr(ino.0, name.as_bytes()))
        {
            Ok(v) => xattr_reply(reply, size, &v),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn listxattr(&self, _req: &Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        match self.fs().listxattr(ino.0) {
            Ok(names) => {
                let mut v = Vec::new();
                for n in names {
                    v.extend_from_slice(&n);
                    v.push(0);
                }
                xattr_reply(reply, size, &v)
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        if Self::is_stats_xattr(ino, name) {
            return reply.error(Errno::from_i32(libc::EPERM));
        }
        empty(
            reply,
            self.fs()
                .removexattr(ino.0, name.as_bytes(), &self.caller(req)),
        )
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs()
                .access(ino.0, mask.bits() as u32, &self.caller(req)),
        )
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = self.fs().fallocate(
            ino.0,
            offset,
            length,
            mode as u32,
            &self.placing_caller(req),
        );
        empty(reply, r)
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        match lseek_for(self.fs(), ino.0, offset, whence as u32) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(Errno::from_i32(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        // Data reaches Fs on each write; durability is fsync's job, so close has nothing to do.
        reply.ok()
    }
}

fn nanos(t: fuser::TimeOrNow) -> i64 {
    let t = match t {
        fuser::TimeOrNow::SpecificTime(t) => t,
        fuser::TimeOrNow::Now => SystemTime::now(),
    };
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => d.as_nanos() as i64,
        Err(e) => -(e.duration().as_nanos() as i64),
    }
}

/// A size probe (size 0) gets the length; a too-small buffer gets ERANGE.
fn xattr_reply(reply: fuser::ReplyXattr, size: u32, v: &[u8]) {
    if size == 0 {
        reply.size(v.len() as u32)
    } else if v.len() > size as usize {
        reply.error(Errno::from_i32(libc::ERANGE))
    } else {
        reply.data(v)
    }
}
