use super::*;

/// Permission bits `want` (4 read, 2 write, 1 search/execute) on `a` for `c`; root passes all
/// but executing a file nobody may execute.
pub(super) fn access(a: &Attr, c: &Caller, want: u32) -> Result<(), FsError> {
    if c.uid == 0 {
        // Root too executes only what someone may execute (a directory it may always search).
        if want & 1 != 0 && a.kind != Kind::Dir && a.mode & 0o111 == 0 {
            return Err(FsError::Permission);
        }
        return Ok(());
    }
    let bits = if c.uid == a.uid {
        a.mode >> 6
    } else {
        let (group, other) = ((a.mode >> 3) & 7, a.mode & 7);
        // Supplementary groups are looked up only where the group's bits and the others'
        // answer differently.
        let differ = (group & want == want) != (other & want == want);
        if c.gid == a.gid || (differ && c.in_group(a.gid)) {
            group
        } else {
            other
        }
    } & 7;
    if bits & want == want {
        Ok(())
    } else {
        Err(FsError::Permission)
    }
}

pub(super) fn to_attr(ino: u64, i: &Inode) -> FileAttr {
    debug_assert_eq!(
        i.blocks(),
        i.extents.values().map(|e| e.len).sum::<u64>(),
        "inode {ino}: block count kept with the extent map"
    );
    let a = &i.attr;
    FileAttr {
        ino,
        kind: a.kind,
        mode: a.mode,
        uid: a.uid,
        gid: a.gid,
        nlink: a.nlink,
        size: a.size,
        blocks: i.blocks(),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        policy: a.policy.clone(),
        home: a.home,
        meta_node: a.meta_node,
    }
}

/// Whether change `s` by `c` clears set-user-id (and set-group-id where group execute is
/// set, or the caller is outside the file's group) on a file that is not a directory, as
/// the VFS does for a local file system: a change of owner or group, by root too; a size
/// change by anyone but root; and a change of nothing, which is how the kernel passes on
/// `chown(f, -1, -1)` and a write's privilege drop once the server handles them itself
/// (`FUSE_HANDLE_KILLPRIV_V2`: the kernel then sends no mode).
fn kills_set_ids(s: &SetAttr, c: &Caller) -> bool {
    let nothing = s.mode.is_none()
        && s.uid.is_none()
        && s.gid.is_none()
        && s.size.is_none()
        && s.atime.is_none()
        && s.mtime.is_none();
    s.uid.is_some() || s.gid.is_some() || (s.size.is_some() && c.uid != 0) || nothing
}

/// Clears set-user-id from `a`, and set-group-id where group execute is set or `c` is
/// neither root nor in the file's group (the VFS's `setattr_should_drop_sgid`): what a
/// write, truncate or chown drops.
pub(super) fn drop_set_ids(a: &mut Attr, c: &Caller) {
    a.mode &= !0o4000;
    if a.mode & 0o2010 == 0o2010 || (c.uid != 0 && !c.in_group(a.gid)) {
        a.mode &= !0o2000;
    }
}

impl Fs {
    pub fn getattr(&self, ino: u64) -> Result<FileAttr, FsError> {
        let g = self.inner.lock();
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Whether `c` may access `ino` with `mask` (4 read, 2 write, 1 execute; 0: exists).
    pub fn access(&self, ino: u64, mask: u32, c: &Caller) -> Result<(), FsError> {
        let g = self.inner.lock();
        access(&g.inode(ino)?.attr, c, mask & 7)
    }

    /// Changes mode, owner, size (truncate or extend) and times.
    ///
    /// A size change takes the inode's lock exclusively and the gate (it unmaps blocks and
    /// zeroes a tail on the device, the latter with the volume lock released); the other
    /// changes only the volume lock.
    pub fn setattr(&self, ino: u64, s: &SetAttr, c: &Caller) -> Result<FileAttr, FsError> {
        self.writable()?;
        let _file = s.size.map(|_| self.inodes.write(ino));
        let _gate = s.size.map(|_| self.gate.read());
        let mut g = self.inner.lock();
        let a = g.attr(ino)?;
        let owner = c.uid == 0 || c.uid == a.uid;
        if s.mode.is_some() && !owner {
            return Err(FsError::NotPermitted);
        }
        if let Some(uid) = s.uid {
            if c.uid != 0 && uid != a.uid {
                return Err(FsError::NotPermitted);
            }
        }
        if let Some(gid) = s.gid {
            if c.uid != 0 && (gid != a.gid && (c.uid != a.uid || !c.in_group(gid))) {
                return Err(FsError::NotPermitted);
            }
        }
        if (s.atime.is_some() || s.mtime.is_some()) && !owner {
            // As the VFS rules it: write permission lets anyone set both times to now (a
            // truncate's mtime comes with its size); any chosen time, or only one time
            // set to now, takes ownership.
            let now_only = s.atime.is_none_or(|_| s.atime_now)
                && s.mtime.is_none_or(|_| s.mtime_now)
                && ((s.atime.is_some() && s.mtime.is_some()) || s.size.is_some());
            if !now_only {
                return Err(FsError::NotPermitted);
            }
            if s.size.is_none() {
                access(&a, c, 2)?;
            }
        }
        let now = now_ns();
        if let Some(size) = s.size {
            if a.kind == Kind::Dir {
                return Err(FsError::IsDir);
            }
            if a.kind != Kind::File {
                return Err(FsError::Invalid(
                    "only regular files can be truncated".into(),
                ));
            }
            if !s.through_writable_fd {
                access(&a, c, 2)?;
            }
            if size > MAX_FILE_SIZE {
                return Err(FsError::TooBig);
            }
            g.reserve(200, &[ino])?;
            let mut zeros = Vec::new();
            if size > a.size {
                zeros.extend(g.tail_zero(ino, a.size)?);
            }
            zeros.extend(g.truncate(ino, size)?);
            g = self.zero_unlocked(g, &zeros)?;
        }
        // The attributes as they are now: others may have changed them while the volume
        // lock was released.
        let mut a = g.attr(ino)?;
        if let Some(size) = s.size {
            a.size = size;
            a.mtime = now;
        }
        if let Some(m) = s.mode {
            a.mode = m & 0o7777;
            // As the VFS rules it: set-group-id only for a member of the file's group.
            if a.mode & 0o2000 != 0 && c.uid != 0 && !c.in_group(s.gid.unwrap_or(a.gid)) {
                a.mode &= !0o2000;
            }
        }
        if kills_set_ids(s, c) && a.kind != Kind::Dir {
            drop_set_ids(&mut a, c);
        }
        if let Some(u) = s.uid {
            a.uid = u;
        }
        if let Some(gid) = s.gid {
            a.gid = gid;
        }
        if let Some(t) = s.atime {
            a.atime = t;
        }
        if let Some(t) = s.mtime {
            a.mtime = t;
        }
        a.ctime = now;
        g.reserve(200, &[ino])?;
        g.set_attr(ino, a)?;
        Ok(to_attr(ino, g.inode(ino)?))
    }
}
