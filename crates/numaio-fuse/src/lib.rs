//! Serves a mounted [`numaio_fs::Fs`] to the kernel through FUSE (the `fuser` crate).
//!
//! Every request is mapped onto the `Fs` API; errors become the errno `FsError::errno` names.
//! Data is cached by `Fs`, so the kernel page cache keeps file data too (no direct I/O):
//! this keeps mmap, shared writable mmap included, working without kernel extensions.

/// The FUSE crate this server is built on, for callers that configure the mount.
pub use fuser;

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, OpenFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen,
    ReplyWrite, Request,
};
use numaio_fs::meta::Kind;
use numaio_fs::{Caller, Fs, FsError, SetAttr};
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long the kernel may cache attributes and entries; one server owns the volume, so
/// every change passes through it and a short TTL only bounds staleness after crashes.
const TTL: Duration = Duration::from_secs(1);

/// Every open keeps the kernel's cached pages of the file: all changes to the volume pass
/// through this mount (the volume is locked while mounted), so they cannot be stale, and
/// dropping them at each open would send every cached read back to the server.
const OPEN_FLAGS: FopenFlags = FopenFlags::FOPEN_KEEP_CACHE;

/// The FUSE face of a numaio-fs volume.
pub struct NumaFs {
    fs: Option<Fs>,
}

impl NumaFs {
    pub fn new(fs: Fs) -> NumaFs {
        NumaFs { fs: Some(fs) }
    }

    fn fs(&self) -> &Fs {
        self.fs.as_ref().expect("volume is mounted until destroy")
    }
}

fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

fn caller(req: &Request) -> Caller {
    Caller {
        node: numaio_fs_node(),
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

/// Node of the CPU this serving thread runs on; the requesting thread is usually on the same
/// node when serving threads are bound per node.
fn numaio_fs_node() -> u32 {
    let mut cpu: u32 = 0;
    let mut node: u32 = 0;
    // SAFETY: getcpu writes two u32s through valid pointers; the third argument is unused.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut u32,
            &mut node as *mut u32,
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    if r == 0 {
        node
    } else {
        0
    }
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

fn entry(reply: ReplyEntry, r: Result<numaio_fs::FileAttr, FsError>) {
    match r {
        Ok(a) => reply.entry(&TTL, &attr(&a), Generation(0)),
        Err(e) => reply.error(errno(&e)),
    }
}

fn empty(reply: ReplyEmpty, r: Result<(), FsError>) {
    match r {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

impl Filesystem for NumaFs {
    fn destroy(&mut self) {
        if let Some(fs) = self.fs.take() {
            if let Err(e) = fs.unmount() {
                eprintln!("numaio mount: unmounting the volume failed: {e}");
            }
        }
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        entry(
            reply,
            self.fs().lookup(parent.0, name.as_bytes(), &caller(req)),
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
        let r = self
            .fs()
            .mkdir(parent.0, name.as_bytes(), mode & !umask, &caller(req));
        entry(reply, r)
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
            &caller(req),
        );
        entry(reply, r)
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs().unlink(parent.0, name.as_bytes(), &caller(req)),
        )
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs().rmdir(parent.0, name.as_bytes(), &caller(req)),
        )
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let mask = match flags.0 & libc::O_ACCMODE {
            libc::O_RDONLY => libc::R_OK,
            libc::O_WRONLY => libc::W_OK,
            _ => libc::R_OK | libc::W_OK,
        } as u32;
        let r = self
            .fs()
            .access(ino.0, mask, &caller(req))
            .and_then(|()| self.fs().open(ino.0));
        match r {
            Ok(()) => reply.opened(FileHandle(0), OPEN_FLAGS),
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
            .create(parent.0, name.as_bytes(), mode & !umask, &caller(req))
            .and_then(|a| self.fs().open(a.ino).map(|()| a));
        match r {
            Ok(a) => reply.created(&TTL, &attr(&a), Generation(0), FileHandle(0), OPEN_FLAGS),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<fuser::LockOwner>,
        reply: ReplyData,
    ) {
        let mut buf = vec![0u8; size as usize];
        match self.fs().read(ino.0, offset, &mut buf) {
            Ok(n) => reply.data(&buf[..n]),
            Err(e) => reply.error(errno(&e)),
        }
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
        match self.fs().write(ino.0, offset, data, &caller(req)) {
            Ok(n) => reply.written(n as u32),
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

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.fs().readdir(ino.0, offset) {
            Ok(list) => {
                for e in list {
                    if reply.add(
                        INodeNo(e.ino),
                        e.cookie,
                        kind(e.kind),
                        OsStr::from_bytes(&e.name),
                    ) {
                        break;
                    }
                }
                reply.ok()
            }
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
            // The kernel names the file handle only for ftruncate, on a descriptor it opened
            // for writing.
            through_writable_fd: fh.is_some(),
        };
        match self.fs().setattr(ino.0, &s, &caller(req)) {
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
            &caller(req),
        );
        entry(reply, r)
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
            &caller(req),
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
        let r = self
            .fs()
            .link(ino.0, newparent.0, newname.as_bytes(), &caller(req));
        entry(reply, r)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: fuser::ReplyStatfs) {
        let s = self.fs().statfs();
        reply.statfs(
            s.total_blocks,
            s.free_blocks,
            s.free_blocks,
            s.files,
            u64::from(u32::MAX),
            s.block_size as u32,
            255,
            s.block_size as u32,
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
        let r = self
            .fs()
            .setxattr(ino.0, name.as_bytes(), value, flags as u32, &caller(req));
        empty(reply, r)
    }

    fn getxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        size: u32,
        reply: fuser::ReplyXattr,
    ) {
        match self.fs().getxattr(ino.0, name.as_bytes()) {
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
        empty(
            reply,
            self.fs().removexattr(ino.0, name.as_bytes(), &caller(req)),
        )
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: fuser::AccessFlags, reply: ReplyEmpty) {
        empty(
            reply,
            self.fs().access(ino.0, mask.bits() as u32, &caller(req)),
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
        let r = self
            .fs()
            .fallocate(ino.0, offset, length, mode as u32, &caller(req));
        empty(reply, r)
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
