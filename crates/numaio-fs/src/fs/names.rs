use super::*;

fn check_name(name: &[u8]) -> Result<(), FsError> {
    if name.len() > MAX_NAME {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name.contains(&b'/') || name.contains(&0) {
        return Err(FsError::Invalid(
            "a name must be non-empty, without '/' or NUL".into(),
        ));
    }
    Ok(())
}

/// For names that create an entry: `.` and `..` always exist.
fn check_new_name(name: &[u8]) -> Result<(), FsError> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Exists);
    }
    Ok(())
}

/// For names that remove an entry.
fn check_old_name(name: &[u8]) -> Result<(), FsError> {
    check_name(name)?;
    if name == b"." || name == b".." {
        return Err(FsError::Invalid(format!(
            "{:?} cannot be removed or renamed",
            String::from_utf8_lossy(name)
        )));
    }
    Ok(())
}

/// The entries of directory `ino` after `cookie` (see [`Fs::readdir`]).
fn readdir_in(g: &Inner, ino: u64, cookie: u64, limit: usize) -> Result<Vec<DirEntry>, FsError> {
    let i = g.inode(ino)?;
    let d = i.dir.as_ref().ok_or(FsError::NotDir)?;
    let mut out = Vec::new();
    if cookie < 1 {
        out.push(DirEntry {
            name: b".".to_vec(),
            ino,
            kind: Kind::Dir,
            cookie: 1,
        });
    }
    if cookie < 2 {
        out.push(DirEntry {
            name: b"..".to_vec(),
            ino: i.attr.parent,
            kind: Kind::Dir,
            cookie: 2,
        });
    }
    for (&ck, (name, ino, kind)) in d.by_cookie.range(cookie.max(FIRST_COOKIE - 1) + 1..) {
        if out.len() >= limit {
            break;
        }
        out.push(DirEntry {
            name: name.clone(),
            ino: *ino,
            kind: *kind,
            cookie: ck,
        });
    }
    Ok(out)
}

impl Fs {
    /// Looks `name` up in directory `parent` (search permission needed).
    pub fn lookup(&self, parent: u64, name: &[u8], c: &Caller) -> Result<FileAttr, FsError> {
        let g = self.inner.lock();
        let pa = g.dir_attr(parent)?;
        access(&pa, c, 1)?;
        let ino = match name {
            b"." => parent,
            b".." => pa.parent,
            _ => {
                check_name(name)?;
                g.entry(parent, name)?.ino
            }
        };
        Ok(to_attr(ino, g.inode(ino)?))
    }

    fn new_inode(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        target: Option<Vec<u8>>,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        check_new_name(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let pa = g.dir_for_new_entry(parent, name, c)?;
        if kind == Kind::Dir && pa.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        let extra = 400 + name.len() as u64 + target.as_ref().map_or(0, |t| t.len() as u64);
        g.reserve(extra, &[parent])?;
        let meta_node = g.meta_node_for(c, parent, extra)?;
        let now = now_ns();
        let ino = g.meta.next_ino;
        let home = if kind == Kind::Dir && parent == ROOT_INO {
            let node = g.alloc.directory_home(g.meta.last_home);
            g.rec(Record::DirHome { node })?;
            Some(node)
        } else {
            pa.home
        };
        let attr = Attr {
            kind,
            // A set-group-id directory gives its group to what is made in it, and the bit
            // to its subdirectories.
            mode: if kind == Kind::Dir && pa.mode & 0o2000 != 0 {
                mode & 0o7777 | 0o2000
            } else {
                mode & 0o7777
            },
            uid: c.uid,
            gid: if pa.mode & 0o2000 != 0 { pa.gid } else { c.gid },
            nlink: if kind == Kind::Dir { 2 } else { 1 },
            size: target.as_ref().map_or(0, |t| t.len() as u64),
            atime: now,
            mtime: now,
            ctime: now,
            policy: pa.policy.clone(),
            policy_set: false,
            home,
            parent: if kind == Kind::Dir { parent } else { 0 },
            meta_node,
        };
        g.rec(Record::NewInode { ino, attr, target })?;
        g.rec(Record::DirAdd {
            dir: parent,
            name: name.to_vec(),
            ino,
            kind,
        })?;
        g.touch_dir(parent, now, if kind == Kind::Dir { 1 } else { 0 })?;
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Creates a regular file.
    pub fn create(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        self.new_inode(parent, name, Kind::File, mode, None, c)
    }

    /// Creates a fifo, socket or device special file (`kind`), or a regular file.
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: Kind,
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        if !kind.is_special() && kind != Kind::File {
            return Err(FsError::Invalid(
                "mknod makes files, fifos, sockets and devices".into(),
            ));
        }
        self.new_inode(parent, name, kind, mode, None, c)
    }

    pub fn mkdir(
        &self,
        parent: u64,
        name: &[u8],
        mode: u32,
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        self.new_inode(parent, name, Kind::Dir, mode, None, c)
    }

    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        if target.is_empty() || target.contains(&0) {
            return Err(FsError::Invalid(
                "a symlink target must be non-empty, without NUL".into(),
            ));
        }
        if target.len() > MAX_TARGET {
            return Err(FsError::NameTooLong);
        }
        self.new_inode(parent, name, Kind::Symlink, 0o777, Some(target.to_vec()), c)
    }

    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>, FsError> {
        let g = self.inner.lock();
        g.inode(ino)?
            .target
            .clone()
            .ok_or_else(|| FsError::Invalid(format!("inode {ino} is not a symlink")))
    }

    /// A new name `newname` in `newparent` for `ino` (not a directory).
    pub fn link(
        &self,
        ino: u64,
        newparent: u64,
        newname: &[u8],
        c: &Caller,
    ) -> Result<FileAttr, FsError> {
        check_new_name(newname)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        if a.kind == Kind::Dir {
            return Err(FsError::NotPermitted);
        }
        g.dir_for_new_entry(newparent, newname, c)?;
        if a.nlink >= MAX_LINKS {
            return Err(FsError::TooManyLinks);
        }
        if a.nlink == 0 {
            return Err(FsError::NotFound);
        }
        g.reserve(300 + newname.len() as u64, &[ino, newparent])?;
        let now = now_ns();
        a.nlink += 1;
        a.ctime = now;
        let kind = a.kind;
        g.set_attr(ino, a)?;
        g.rec(Record::DirAdd {
            dir: newparent,
            name: newname.to_vec(),
            ino,
            kind,
        })?;
        g.touch_dir(newparent, now, 0)?;
        Ok(to_attr(ino, g.inode(ino)?))
    }

    /// Removes the entry `name` (not a directory) from `parent`.
    pub fn unlink(&self, parent: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        check_old_name(name)?;
        self.writable()?;
        loop {
            let (named, _file) = self.lock_named(parent, name);
            let mut g = self.inner.lock();
            let e = g.entry_to_remove(parent, name, c)?;
            if named != Some(e.ino) {
                continue;
            }
            if e.kind == Kind::Dir {
                return Err(FsError::IsDir);
            }
            g.reserve(300 + name.len() as u64, &[parent, e.ino])?;
            return g.remove_entry(parent, name, e, now_ns());
        }
    }

    /// The inode `dir/name` names now, if any, with its lock taken exclusively: an unlink
    /// or rename that drops its last link frees its blocks, which must wait for its reads
    /// and writes in flight. The name is looked up again under the volume lock; when it
    /// names another inode by then, the caller starts over.
    fn lock_named(&self, dir: u64, name: &[u8]) -> (Option<u64>, Option<RwLockWriteGuard<'_, ()>>) {
        let named = self.inner.lock().entry(dir, name).ok().map(|e| e.ino);
        (named, named.map(|ino| self.inodes.write(ino)))
    }

    /// Removes the empty directory `name` from `parent`.
    pub fn rmdir(&self, parent: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        check_old_name(name)?;
        let mut g = self.lock_rw()?;
        let e = g.entry_to_remove(parent, name, c)?;
        if e.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        if !g
            .inode(e.ino)?
            .dir
            .as_ref()
            .is_some_and(|d| d.entries.is_empty())
        {
            return Err(FsError::NotEmpty);
        }
        g.reserve(300 + name.len() as u64, &[parent, e.ino])?;
        g.remove_entry(parent, name, e, now_ns())
    }

    /// Moves `parent/name` to `newparent/newname`, replacing what is there atomically unless
    /// `flags` has [`RENAME_NOREPLACE`].
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        if flags & !RENAME_NOREPLACE != 0 {
            return Err(FsError::Invalid(format!(
                "unsupported rename flags {flags:#x}"
            )));
        }
        check_old_name(name)?;
        check_old_name(newname)?;
        self.writable()?;
        loop {
            // A replaced target may lose its last link.
            let (named, _file) = self.lock_named(newparent, newname);
            let mut g = self.inner.lock();
            let g = &mut *g;
            let src = g.entry_to_remove(parent, name, c)?;
            let npa = g.dir_attr(newparent)?;
            access(&npa, c, 3)?;
            if src.kind == Kind::Dir && parent != newparent {
                // Its `..` changes: a directory moves to another parent only with write
                // permission on it.
                access(&g.attr(src.ino)?, c, 2)?;
            }
            let tgt = match g.entry(newparent, newname) {
                Ok(t) => Some(t),
                Err(FsError::NotFound) => None,
                Err(e) => return Err(e),
            };
            if tgt.map(|t| t.ino) != named {
                continue;
            }
            if let Some(t) = tgt {
                if flags & RENAME_NOREPLACE != 0 {
                    return Err(FsError::Exists);
                }
                if t.ino == src.ino {
                    return Ok(());
                }
                g.check_sticky(&npa, t.ino, c)?;
                match (src.kind == Kind::Dir, t.kind == Kind::Dir) {
                    (true, false) => return Err(FsError::NotDir),
                    (false, true) => return Err(FsError::IsDir),
                    (true, true) => {
                        if !g
                            .inode(t.ino)?
                            .dir
                            .as_ref()
                            .is_some_and(|d| d.entries.is_empty())
                        {
                            return Err(FsError::NotEmpty);
                        }
                    }
                    (false, false) => {}
                }
            }
            if src.kind == Kind::Dir {
                // Refuse moving a directory into its own subtree.
                let mut d = newparent;
                loop {
                    if d == src.ino {
                        return Err(FsError::Invalid(
                            "cannot move a directory into itself or its own subtree".into(),
                        ));
                    }
                    if d == ROOT_INO {
                        break;
                    }
                    d = g.attr(d)?.parent;
                }
                if tgt.is_none() && parent != newparent && npa.nlink >= MAX_LINKS {
                    return Err(FsError::TooManyLinks);
                }
            }
            g.reserve(
                800 + (name.len() + newname.len()) as u64,
                &[parent, newparent, src.ino],
            )?;
            let now = now_ns();
            if let Some(t) = tgt {
                g.remove_entry(newparent, newname, t, now)?;
            }
            g.rec(Record::DirRemove {
                dir: parent,
                name: name.to_vec(),
            })?;
            g.rec(Record::DirAdd {
                dir: newparent,
                name: newname.to_vec(),
                ino: src.ino,
                kind: src.kind,
            })?;
            let moved_dir = src.kind == Kind::Dir && parent != newparent;
            g.touch_dir(parent, now, if moved_dir { -1 } else { 0 })?;
            if parent != newparent {
                g.touch_dir(newparent, now, if moved_dir { 1 } else { 0 })?;
            }
            let mut a = g.attr(src.ino)?;
            a.ctime = now;
            if src.kind == Kind::Dir {
                a.parent = newparent;
            }
            return g.set_attr(src.ino, a);
        }
    }

    /// Entries of directory `ino` after `cookie` (0: from the start, with `.` and `..`), at
    /// most [`READDIR_BATCH`]; empty at the end.
    pub fn readdir(&self, ino: u64, cookie: u64) -> Result<Vec<DirEntry>, FsError> {
        readdir_in(&self.inner.lock(), ino, cookie, READDIR_BATCH)
    }

    /// [`Fs::readdir`] with every entry's attributes, read under the same lock (for FUSE's
    /// readdirplus: a listing followed by stats needs no lookup per entry); at most `limit`
    /// entries, as a reply buffer holds few.
    pub fn readdir_plus(
        &self,
        ino: u64,
        cookie: u64,
        limit: usize,
    ) -> Result<Vec<(DirEntry, FileAttr)>, FsError> {
        let g = self.inner.lock();
        // Only the entries asked for: a reply holds few, and each listed entry costs a copy
        // of its name.
        readdir_in(&g, ino, cookie, limit.min(READDIR_BATCH))?
            .into_iter()
            .map(|e| {
                let a = to_attr(e.ino, g.inode(e.ino)?);
                Ok((e, a))
            })
            .collect()
    }
}
