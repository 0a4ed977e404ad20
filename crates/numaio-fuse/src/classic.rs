//! The classic transport: fuser's `Filesystem` callbacks, each turned into a typed
//! [`Request`], served by [`serve::serve`], and its [`Reply`] handed to fuser's reply type.
//! INIT (asking for io_uring where wanted) and DESTROY (stopping the rings, unmounting the
//! volume) are the only callbacks with logic of their own.

use crate::request::Request;
use crate::serve::{self, Ctx, Output, Reply};
use crate::{uring, Observer, Transport};
use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLseek, ReplyOpen, ReplyWrite,
};
use numaio_fs::meta::Kind;
use numaio_fs::{Fs, SetAttr};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Entries with attributes fetched from `Fs` at a time for a classic readdirplus reply:
/// fuser does not tell the handler the kernel's buffer size, so batches are fetched until
/// the reply is full (a page holds about 25 entries with attributes; only the last batch's
/// overflow is looked up in vain).
const READDIRPLUS_BATCH: usize = 64;

thread_local! {
    /// The read handler's reply buffer, kept per serving thread: a fresh zeroed one per
    /// request cost a memset of every byte.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The FUSE face of a numaio-fs volume over /dev/fuse.
pub(crate) struct Classic {
    fs: Option<Arc<Fs>>,
    obs: Arc<Observer>,
    transport: Transport,
}

impl Classic {
    pub(crate) fn new(fs: Arc<Fs>, obs: Arc<Observer>, transport: Transport) -> Classic {
        Classic {
            fs: Some(fs),
            obs,
            transport,
        }
    }

    /// Serves one request from `req`'s sender.
    fn serve(&self, req: &fuser::Request, r: Request<'_>, out: &mut dyn Output) -> Answer {
        self.transport.count_classic();
        let Some(fs) = self.fs.as_deref() else {
            return Err(libc::ENOTCONN);
        };
        let ctx = Ctx {
            pid: req.pid(),
            uid: req.uid(),
            gid: req.gid(),
            cpu: None,
            mode: self.transport.mode(),
            wait: true,
        };
        serve::serve(fs, &self.obs, &ctx, r, out)
    }

    /// Serves a request whose reply carries no file data or entries.
    fn call(&self, req: &fuser::Request, r: Request<'_>) -> Answer {
        self.serve(req, r, &mut NoOutput)
    }
}

type Answer = Result<Reply, i32>;

/// The output of requests that put nothing in a buffer.
struct NoOutput;

impl Output for NoOutput {
    fn data(&mut self, _size: usize) -> &mut [u8] {
        &mut []
    }
    fn dir_room(&self) -> usize {
        0
    }
    fn dir_add(
        &mut self,
        _e: &numaio_fs::DirEntry,
        _p: Option<(&numaio_fs::FileAttr, Duration)>,
    ) -> bool {
        true
    }
}

/// File data into the serving thread's buffer.
struct DataOut<'a>(&'a mut Vec<u8>);

impl Output for DataOut<'_> {
    fn data(&mut self, size: usize) -> &mut [u8] {
        if self.0.len() < size {
            self.0.resize(size, 0);
        }
        &mut self.0[..size]
    }
    fn dir_room(&self) -> usize {
        0
    }
    fn dir_add(
        &mut self,
        _e: &numaio_fs::DirEntry,
        _p: Option<(&numaio_fs::FileAttr, Duration)>,
    ) -> bool {
        true
    }
}

/// Entries into fuser's directory replies.
enum DirOut<'a> {
    Plain(&'a mut ReplyDirectory),
    Plus(&'a mut ReplyDirectoryPlus),
}

impl Output for DirOut<'_> {
    fn data(&mut self, _size: usize) -> &mut [u8] {
        &mut []
    }
    fn dir_room(&self) -> usize {
        READDIRPLUS_BATCH
    }
    fn dir_add(
        &mut self,
        e: &numaio_fs::DirEntry,
        plus: Option<(&numaio_fs::FileAttr, Duration)>,
    ) -> bool {
        match (self, plus) {
            (DirOut::Plain(r), _) => r.add(
                INodeNo(e.ino),
                e.cookie,
                kind(e.kind),
                OsStr::from_bytes(&e.name),
            ),
            (DirOut::Plus(r), Some((a, ttl))) => r.add(
                INodeNo(e.ino),
                e.cookie,
                OsStr::from_bytes(&e.name),
                &ttl,
                &attr(a),
                Generation(0),
            ),
            (DirOut::Plus(_), None) => true,
        }
    }
}

fn errno(e: i32) -> Errno {
    Errno::from_i32(e)
}

/// A reply of the wrong kind for the operation: a bug in the table, reported as EIO.
fn mismatch(r: &Reply) -> Errno {
    debug_assert!(false, "unexpected reply {r:?}");
    Errno::from_i32(libc::EIO)
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

/// The attributes of a negative entry: inode 0.
fn negative() -> FileAttr {
    FileAttr {
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
    }
}

fn flags(bits: u32) -> FopenFlags {
    FopenFlags::from_bits_retain(bits)
}

fn reply_entry(reply: ReplyEntry, r: Answer) {
    match r {
        Ok(Reply::Entry { attr: a, ttl }) => reply.entry(&ttl, &attr(&a), Generation(0)),
        Ok(Reply::Negative { ttl }) => reply.entry(&ttl, &negative(), Generation(0)),
        Ok(other) => reply.error(mismatch(&other)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_attr(reply: ReplyAttr, r: Answer) {
    match r {
        Ok(Reply::Attr { attr: a, ttl }) => reply.attr(&ttl, &attr(&a)),
        Ok(other) => reply.error(mismatch(&other)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_empty(reply: ReplyEmpty, r: Answer) {
    match r {
        Ok(Reply::Empty) => reply.ok(),
        Ok(other) => reply.error(mismatch(&other)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_open(reply: ReplyOpen, r: Answer) {
    match r {
        Ok(Reply::Opened { flags: f }) => reply.opened(FileHandle(0), flags(f)),
        Ok(other) => reply.error(mismatch(&other)),
        Err(e) => reply.error(errno(e)),
    }
}

fn reply_xattr(reply: fuser::ReplyXattr, r: Answer) {
    match r {
        Ok(Reply::Size(n)) => reply.size(n),
        Ok(Reply::Bytes(v)) => reply.data(&v),
        Ok(other) => reply.error(mismatch(&other)),
        Err(e) => reply.error(errno(e)),
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

impl Filesystem for Classic {
    fn init(
        &mut self,
        _req: &fuser::Request,
        config: &mut fuser::KernelConfig,
    ) -> std::io::Result<()> {
        // Lookups and listings of one directory may run in parallel (a kernel without it
        // keeps them serial).
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_PARALLEL_DIROPS);
        // Every listing carries attributes (in both transports): no LOOKUP per entry for
        // `ls -l` or a stat after a readdir. Not READDIRPLUS_AUTO: with it the kernel asks
        // for attributes only in a listing's first reply, so a large directory listed before
        // it is stat'ed (as `ls -l` does) still costs a LOOKUP per later entry.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_DO_READDIRPLUS);
        // The server clears set-user-id and set-group-id itself on write, truncate and chown
        // (`Fs::write`, `Fs::setattr`). Without this the kernel never marks an inode as
        // having none to clear (no `SB_NOSEC`), so every write(2) first asks for the file's
        // `security.capability`: one GETXATTR round trip per write.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_HANDLE_KILLPRIV_V2);
        // A symlink's target is kept in the kernel's page cache after its first READLINK: a
        // symlink's target never changes (replacing one makes a new inode), and every change
        // to the volume passes through this mount.
        let _ = config.add_capabilities(fuser::InitFlags::FUSE_CACHE_SYMLINKS);
        // Opens need nothing of the server where the kernel checks permissions (the
        // kernel's lookup count keeps an unlinked file, crate::lookups): OPEN and OPENDIR are
        // answered ENOSYS, and the kernel opens every later file and directory itself, with
        // no OPEN, RELEASE, OPENDIR or RELEASEDIR round trip. These flags are the kernel's
        // offer, not a request.
        let offered = config.capabilities();
        self.obs.negotiate_no_open(
            offered.contains(fuser::InitFlags::FUSE_NO_OPEN_SUPPORT),
            offered.contains(fuser::InitFlags::FUSE_NO_OPENDIR_SUPPORT),
        );
        // Asked for by the mount only: buffered writes then stay in the kernel's page
        // cache until written back. A kernel without it leaves every write a request.
        if self.obs.writeback_cache()
            && config
                .add_capabilities(fuser::InitFlags::FUSE_WRITEBACK_CACHE)
                .is_err()
        {
            self.obs.set_writeback_cache(false);
        }
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
        // The ring and serving threads hold the volume too: stop them before the final flush.
        self.transport.stop();
        if let Some(fs) = self.fs.take() {
            self.obs.lookups().forget_all(&fs);
            crate::mount::unmount_volume(fs);
        }
    }

    fn lookup(&self, req: &fuser::Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let r = Request::Lookup {
            parent: parent.0,
            name: name.as_bytes(),
        };
        reply_entry(reply, self.call(req, r))
    }

    fn getattr(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: Option<FileHandle>,
        reply: ReplyAttr,
    ) {
        reply_attr(reply, self.call(req, Request::Getattr { ino: ino.0 }))
    }

    fn mkdir(
        &self,
        req: &fuser::Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let r = Request::Mkdir {
            parent: parent.0,
            name: name.as_bytes(),
            mode,
            umask,
        };
        reply_entry(reply, self.call(req, r))
    }

    fn mknod(
        &self,
        req: &fuser::Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let r = Request::Mknod {
            parent: parent.0,
            name: name.as_bytes(),
            mode,
            umask,
            rdev,
        };
        reply_entry(reply, self.call(req, r))
    }

    fn unlink(&self, req: &fuser::Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Request::Unlink {
            parent: parent.0,
            name: name.as_bytes(),
        };
        reply_empty(reply, self.call(req, r))
    }

    fn rmdir(&self, req: &fuser::Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Request::Rmdir {
            parent: parent.0,
            name: name.as_bytes(),
        };
        reply_empty(reply, self.call(req, r))
    }

    fn open(&self, req: &fuser::Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let r = Request::Open {
            ino: ino.0,
            flags: flags.0,
        };
        reply_open(reply, self.call(req, r))
    }

    fn opendir(&self, req: &fuser::Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply_open(reply, self.call(req, Request::Opendir { ino: ino.0 }))
    }

    fn create(
        &self,
        req: &fuser::Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let r = Request::Create {
            parent: parent.0,
            name: name.as_bytes(),
            mode,
            umask,
        };
        match self.call(req, r) {
            Ok(Reply::Created {
                attr: a,
                ttl,
                flags: f,
            }) => reply.created(&ttl, &attr(&a), Generation(0), FileHandle(0), flags(f)),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let r = Request::Read {
            ino: ino.0,
            offset,
            size,
            flags: flags.0,
        };
        READ_BUF.with_borrow_mut(|buf| match self.serve(req, r, &mut DataOut(buf)) {
            Ok(Reply::Data(n)) => reply.data(&buf[..n]),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        })
    }

    fn write(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyWrite,
    ) {
        // The data stays in fuser's request buffer: `Fs::write` reads it from there.
        let r = Request::Write {
            ino: ino.0,
            offset,
            data,
        };
        match self.call(req, r) {
            Ok(Reply::Written(n)) => reply.written(n),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn release(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.call(req, Request::Release { ino: ino.0 }))
    }

    fn fsync(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        let r = Request::Fsync {
            ino: ino.0,
            datasync,
        };
        reply_empty(reply, self.call(req, r))
    }

    fn fsyncdir(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.call(req, Request::Fsyncdir { ino: ino.0 }))
    }

    fn readdir(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        // fuser does not say the kernel's buffer size: the reply is filled until full.
        let r = Request::Readdir {
            ino: ino.0,
            offset,
            size: None,
        };
        match self.serve(req, r, &mut DirOut::Plain(&mut reply)) {
            Ok(Reply::Listed) => reply.ok(),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdirplus(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let r = Request::Readdirplus {
            ino: ino.0,
            offset,
            size: None,
        };
        let a = self.serve(req, r, &mut DirOut::Plus(&mut reply));
        match a {
            Ok(Reply::Listed) => reply.ok(),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn setattr(
        &self,
        req: &fuser::Request,
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
        let attr = SetAttr {
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
        reply_attr(reply, self.call(req, Request::Setattr { ino: ino.0, attr }))
    }

    fn symlink(
        &self,
        req: &fuser::Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &std::path::Path,
        reply: ReplyEntry,
    ) {
        let r = Request::Symlink {
            parent: parent.0,
            name: link_name.as_bytes(),
            target: target.as_os_str().as_bytes(),
        };
        reply_entry(reply, self.call(req, r))
    }

    fn readlink(&self, req: &fuser::Request, ino: INodeNo, reply: ReplyData) {
        match self.call(req, Request::Readlink { ino: ino.0 }) {
            Ok(Reply::Bytes(t)) => reply.data(&t),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        req: &fuser::Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: fuser::RenameFlags,
        reply: ReplyEmpty,
    ) {
        let r = Request::Rename {
            parent: parent.0,
            name: name.as_bytes(),
            newparent: newparent.0,
            newname: newname.as_bytes(),
            flags: flags.bits(),
        };
        reply_empty(reply, self.call(req, r))
    }

    fn link(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let r = Request::Link {
            ino: ino.0,
            newparent: newparent.0,
            newname: newname.as_bytes(),
        };
        reply_entry(reply, self.call(req, r))
    }

    fn statfs(&self, req: &fuser::Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        match self.call(req, Request::Statfs) {
            Ok(Reply::Statfs(s)) => reply.statfs(
                s.blocks, s.bfree, s.bavail, s.files, s.ffree, s.bsize, s.namelen, s.frsize,
            ),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setxattr(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let r = Request::Setxattr {
            ino: ino.0,
            name: name.as_bytes(),
            value,
            flags: flags as u32,
        };
        reply_empty(reply, self.call(req, r))
    }

    fn getxattr(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: fuser::ReplyXattr,
    ) {
        let r = Request::Getxattr {
            ino: ino.0,
            name: name.as_bytes(),
            size,
        };
        reply_xattr(reply, self.call(req, r))
    }

    fn listxattr(&self, req: &fuser::Request, ino: INodeNo, size: u32, reply: fuser::ReplyXattr) {
        reply_xattr(
            reply,
            self.call(req, Request::Listxattr { ino: ino.0, size }),
        )
    }

    fn removexattr(&self, req: &fuser::Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let r = Request::Removexattr {
            ino: ino.0,
            name: name.as_bytes(),
        };
        reply_empty(reply, self.call(req, r))
    }

    fn access(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        mask: fuser::AccessFlags,
        reply: ReplyEmpty,
    ) {
        let r = Request::Access {
            ino: ino.0,
            mask: mask.bits() as u32,
        };
        reply_empty(reply, self.call(req, r))
    }

    fn fallocate(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let r = Request::Fallocate {
            ino: ino.0,
            offset,
            length,
            mode: mode as u32,
        };
        reply_empty(reply, self.call(req, r))
    }

    fn lseek(
        &self,
        req: &fuser::Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        let r = Request::Lseek {
            ino: ino.0,
            offset,
            whence: whence as u32,
        };
        match self.call(req, r) {
            Ok(Reply::Offset(o)) => reply.offset(o as i64),
            Ok(other) => reply.error(mismatch(&other)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        req: &fuser::Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: fuser::LockOwner,
        reply: ReplyEmpty,
    ) {
        reply_empty(reply, self.call(req, Request::Flush))
    }

    fn forget(&self, _req: &fuser::Request, ino: INodeNo, nlookup: u64) {
        if let Some(fs) = self.fs.as_deref() {
            self.obs.lookups().forget(fs, ino.0, nlookup);
        }
    }

    // BATCH_FORGET: fuser's default hands each inode to `forget` (its `ForgetOne` is not
    // public, so the batch cannot be taken whole).
}
