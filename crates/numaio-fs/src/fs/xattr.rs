use super::*;

/// What an xattr of `name` with a value of `value_len` bytes takes of [`XATTR_SPACE`].
pub fn xattr_entry_bytes(name: &[u8], value_len: usize) -> usize {
    let short = [&b"user."[..], b"trusted.", b"security.", b"system."]
        .iter()
        .find_map(|p| name.strip_prefix(*p))
        .unwrap_or(name);
    16 + short.len().next_multiple_of(4) + value_len.next_multiple_of(4)
}

fn refuse_acl(name: &[u8]) -> Result<(), FsError> {
    if POSIX_ACL_XATTRS.contains(&name) {
        return Err(FsError::NotSupported(
            "POSIX ACLs (numaio-fs checks the mode bits only)".into(),
        ));
    }
    Ok(())
}

impl Fs {
    /// Sets an extended attribute; [`PLACEMENT_XATTR`] sets the placement policy.
    pub fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        if name.is_empty() || name.len() > MAX_NAME {
            return Err(FsError::Invalid("xattr names have 1 to 255 bytes".into()));
        }
        if value.len() > MAX_XATTR_VALUE {
            return Err(FsError::Invalid(format!(
                "xattr values have at most {MAX_XATTR_VALUE} bytes"
            )));
        }
        refuse_acl(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        // `user.` attributes take write permission, the owner's too (as the VFS rules).
        if name.starts_with(b"user.") || (c.uid != 0 && c.uid != a.uid) {
            access(&a, c, 2)?;
        }
        let now = now_ns();
        g.reserve(300 + (name.len() + value.len()) as u64, &[ino])?;
        if name == PLACEMENT_XATTR {
            if c.uid != 0 && c.uid != a.uid {
                return Err(FsError::NotPermitted);
            }
            let p: PlacementPolicy = std::str::from_utf8(value)
                .map_err(|_| FsError::Invalid("placement policy is not UTF-8".into()))?
                .parse()?;
            crate::policy::check(&p, &g.nodes)?;
            a.policy = p;
            a.policy_set = true;
            a.ctime = now;
            return g.set_attr(ino, a);
        }
        let exists = g.inode(ino)?.xattrs.contains_key(name);
        if flags & XATTR_CREATE != 0 && exists {
            return Err(FsError::Exists);
        }
        if flags & XATTR_REPLACE != 0 && !exists {
            return Err(FsError::NoAttr);
        }
        let set = &g.inode(ino)?.xattrs;
        let used: usize = set.iter().map(|(n, v)| xattr_entry_bytes(n, v.len())).sum();
        let old = set
            .get(name)
            .map_or(0, |v| xattr_entry_bytes(name, v.len()));
        let after = used - old + xattr_entry_bytes(name, value.len());
        // A set already past the bound (made before it existed) may still shrink.
        if after > XATTR_SPACE && after > used {
            return Err(FsError::NoSpace);
        }
        g.rec(Record::SetXattr {
            ino,
            name: name.to_vec(),
            value: value.to_vec(),
        })?;
        a.ctime = now;
        g.set_attr(ino, a)
    }

    pub fn getxattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        if name == PLACEMENT_XATTR {
            return Ok(i.attr.policy.to_string().into_bytes());
        }
        if POSIX_ACL_XATTRS.contains(&name) {
            return Err(FsError::NoAttr);
        }
        i.xattrs.get(name).cloned().ok_or(FsError::NoAttr)
    }

    pub fn listxattr(&self, ino: u64) -> Result<Vec<Vec<u8>>, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        let mut out: Vec<Vec<u8>> = i
            .xattrs
            .keys()
            .filter(|n| !POSIX_ACL_XATTRS.contains(&n.as_slice()))
            .cloned()
            .collect();
        if i.attr.policy_set {
            out.push(PLACEMENT_XATTR.to_vec());
        }
        Ok(out)
    }

    pub fn removexattr(&self, ino: u64, name: &[u8], c: &Caller) -> Result<(), FsError> {
        refuse_acl(name)?;
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
        // `user.` attributes take write permission, the owner's too (as the VFS rules).
        if name.starts_with(b"user.") || (c.uid != 0 && c.uid != a.uid) {
            access(&a, c, 2)?;
        }
        if name == PLACEMENT_XATTR {
            return Err(FsError::Invalid(
                "the placement policy cannot be removed; set another one".into(),
            ));
        }
        if !g.inode(ino)?.xattrs.contains_key(name) {
            return Err(FsError::NoAttr);
        }
        g.reserve(300, &[ino])?;
        g.rec(Record::RemoveXattr {
            ino,
            name: name.to_vec(),
        })?;
        a.ctime = now_ns();
        g.set_attr(ino, a)
    }
}
