use super::*;

pub(super) struct Inner {
    pub(super) meta: Meta,
    /// The allocator, shared with [`FsCore`](super::shared::FsCore): records free blocks
    /// through it under this lock, writes take blocks from it without this lock.
    pub(super) alloc: Arc<Allocator>,
    pub(super) journal: Journal,
    pub(super) pending: Vec<Record>,
    /// Per node, a bound on the framed size of its checkpoint shard.
    pub(super) meta_bytes: BTreeMap<u32, u64>,
    /// What the records since `meta_bytes` was last measured added to it: the bound only
    /// grows (a removal subtracts nothing), so `statfs` measures again after much of it.
    pub(super) meta_growth: u64,
    pub(super) data_dirty: BTreeSet<u16>,
    pub(super) open: HashMap<u64, u32>,
    pub(super) commits: u64,
    pub(super) nodes: Vec<u32>,
    /// Counts the changes queued since mount; a commit makes every change up to the
    /// generation it saw durable ([`Fs::durable_gen`]).
    pub(super) gen: u64,
    /// Whether a queued record needs the data written before it durable first: blocks
    /// newly mapped, a file grown over a zeroed tail, blocks unmapped around zeroed edges.
    pub(super) ordered: bool,
    /// The device blocks `(dev, start, count)` whose data the queued records need durable
    /// first (new and converted blocks, zeroed tails and edges): what a commit may carry in
    /// its record instead of flushing them first ([`crate::journal`], "Data in the record").
    pub(super) ordered_runs: Vec<(u16, u64, u64)>,
    /// Blocks overwritten in place since the last commit, and the syncs the next one
    /// serves: a commit carrying data carries the synced files' overwrites too.
    pub(super) overwrites: super::overwrites::Overwrites,
    /// The generation of each inode's newest queued change that `fdatasync` must commit
    /// (new inode, mapping, size); inodes absent have none pending.
    pub(super) datasync_gen: HashMap<u64, u64>,
    /// Index in `pending` of each inode's queued `SetAttr`: a later one replaces it, since
    /// no other record reads or writes attributes.
    pub(super) last_setattr: HashMap<u64, usize>,
    /// An estimate of what `pending` holds, in bytes (see [`PENDING_COMMIT_BYTES`]).
    pub(super) pending_bytes: u64,
    /// Per node, checkpoint-shard bytes claimed by operations that checked the room for
    /// their records and released this lock before queuing them (an allocation): counted
    /// by [`Inner::fits_on`], so operations meanwhile cannot take that room.
    pub(super) meta_claimed: BTreeMap<u32, u64>,
    /// When a link drop last left an unlinked inode held: through a mount the kernel lets
    /// go of a file closed and removed some time after `unlink` returns (its RELEASE and
    /// FORGET travel on their own), so an allocation short of room soon after waits for
    /// that space ([`Fs::retry_for_space`]).
    pub(super) orphaned_at: Option<std::time::Instant>,
}

/// `runs` of device blocks `(dev, start, count)` sorted and merged where they overlap or
/// touch.
pub(super) fn merge_runs(mut runs: Vec<(u16, u64, u64)>) -> Vec<(u16, u64, u64)> {
    runs.sort_unstable();
    let mut out: Vec<(u16, u64, u64)> = Vec::with_capacity(runs.len());
    for (dev, start, len) in runs {
        match out.last_mut() {
            Some((d, s, l)) if *d == dev && start <= *s + *l => {
                *l = (*l).max(start + len - *s);
            }
            _ => out.push((dev, start, len)),
        }
    }
    out
}

pub(super) fn bug(e: String) -> FsError {
    FsError::Invalid(format!("internal inconsistency (please report): {e}"))
}

/// A bound on how much `r` grows the encoded metadata.
fn growth(r: &Record) -> u64 {
    match r {
        Record::NewInode { target, .. } => 160 + target.as_ref().map_or(0, |t| t.len() as u64),
        Record::DirAdd { name, .. } => 40 + name.len() as u64,
        Record::SetXattr { name, value, .. } => 20 + (name.len() + value.len()) as u64,
        Record::Map { .. }
        | Record::Unmap { .. }
        | Record::MapUnwritten { .. }
        | Record::MarkUnwritten { .. }
        | Record::MarkWritten { .. } => 32,
        Record::DirHome { .. } => 8,
        _ => 0,
    }
}

impl Inner {
    pub(super) fn inode(&self, ino: u64) -> Result<&Inode, FsError> {
        self.meta.get(ino).ok_or(FsError::NotFound)
    }

    pub(super) fn attr(&self, ino: u64) -> Result<Attr, FsError> {
        Ok(self.inode(ino)?.attr.clone())
    }

    pub(super) fn dir_attr(&self, ino: u64) -> Result<Attr, FsError> {
        let a = self.attr(ino)?;
        if a.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        Ok(a)
    }

    pub(super) fn entry(&self, dir: u64, name: &[u8]) -> Result<Entry, FsError> {
        let d = self.inode(dir)?.dir.as_ref().ok_or(FsError::NotDir)?;
        d.entries.get(name).copied().ok_or(FsError::NotFound)
    }

    /// The attributes of directory `dir` when `c` may add the entry `name` to it: the
    /// directory still linked, write and search permission, `name` not there yet.
    pub(super) fn dir_for_new_entry(
        &self,
        dir: u64,
        name: &[u8],
        c: &Caller,
    ) -> Result<Attr, FsError> {
        let a = self.dir_attr(dir)?;
        if a.nlink == 0 {
            return Err(FsError::NotFound);
        }
        access(&a, c, 3)?;
        match self.entry(dir, name) {
            Ok(_) => Err(FsError::Exists),
            Err(FsError::NotFound) => Ok(a),
            Err(e) => Err(e),
        }
    }

    /// The entry `name` of directory `dir` when `c` may remove it (write and search
    /// permission on the directory; in a sticky one, owning the directory or the entry).
    pub(super) fn entry_to_remove(
        &self,
        dir: u64,
        name: &[u8],
        c: &Caller,
    ) -> Result<Entry, FsError> {
        let a = self.dir_attr(dir)?;
        access(&a, c, 3)?;
        let e = self.entry(dir, name)?;
        self.check_sticky(&a, e.ino, c)?;
        Ok(e)
    }

    /// In a sticky directory `d` only root and the owners of `d` or of `ino` may remove or
    /// replace the entry of `ino`.
    pub(super) fn check_sticky(&self, d: &Attr, ino: u64, c: &Caller) -> Result<(), FsError> {
        if d.mode & 0o1000 == 0 || c.uid == 0 || c.uid == d.uid || c.uid == self.attr(ino)?.uid {
            Ok(())
        } else {
            Err(FsError::NotPermitted)
        }
    }

    /// Removes the entry `name` → `e` from `dir` and drops the link it held (a directory's
    /// parent loses the link of its `..`).
    pub(super) fn remove_entry(
        &mut self,
        dir: u64,
        name: &[u8],
        e: Entry,
        now: i64,
    ) -> Result<(), FsError> {
        self.rec(Record::DirRemove {
            dir,
            name: name.to_vec(),
        })?;
        self.touch_dir(dir, now, if e.kind == Kind::Dir { -1 } else { 0 })?;
        self.drop_link(e.ino, now)
    }

    /// Notes device blocks `start..start + len` of `dev` as data the queued records need
    /// durable first ([`Inner::ordered_runs`]). Many small appends note the same blocks
    /// again and again: the list is kept merged.
    pub(super) fn order_run(&mut self, dev: u16, start: u64, len: u64) {
        if self.ordered_runs.last() == Some(&(dev, start, len)) {
            return;
        }
        self.ordered_runs.push((dev, start, len));
        if self.ordered_runs.len() >= 4096 && self.ordered_runs.len().is_power_of_two() {
            self.ordered_runs = merge_runs(std::mem::take(&mut self.ordered_runs));
        }
    }

    /// [`Inner::order_run`] for the device blocks of logical blocks `from..to` of `ino`.
    fn order_blocks(&mut self, ino: u64, from: u64, to: u64) {
        let runs = self
            .meta
            .get(ino)
            .map(|i| crate::meta::device_runs(&i.extents, from, to))
            .unwrap_or_default();
        for (dev, start, len) in runs {
            self.order_run(dev, start, len);
        }
    }

    /// Applies `r` and queues it for the next commit; freed blocks wait for that commit.
    pub(super) fn rec(&mut self, r: Record) -> Result<(), FsError> {
        let old_size = match &r {
            Record::SetAttr { ino, .. } => self.meta.get(*ino).map(|i| i.attr.size),
            _ => None,
        };
        // The encoded bytes of the xattr a SetXattr replaces or a RemoveXattr drops (at least
        // its name and value), so the shard bound follows the set down as well as up.
        let old_xattr = match &r {
            Record::SetXattr { ino, name, .. } | Record::RemoveXattr { ino, name } => self
                .meta
                .get(*ino)
                .and_then(|i| i.xattrs.get(name))
                .map(|v| (name.len() + v.len()) as u64),
            _ => None,
        };
        let freed = self.meta.apply(&r).map_err(bug)?;
        for e in freed {
            self.alloc.free(e);
        }
        let node = match &r {
            Record::NewInode { attr, .. } => Some(attr.meta_node),
            Record::DirAdd { dir: ino, .. }
            | Record::Map { ino, .. }
            | Record::Unmap { ino, .. }
            | Record::MapUnwritten { ino, .. }
            | Record::MarkUnwritten { ino, .. }
            | Record::MarkWritten { ino, .. }
            | Record::SetXattr { ino, .. } => Some(self.node_of(*ino)),
            // What grows no inode: `DirHome` grows the volume-wide fields, which every
            // shard carries (the other records here do not grow the metadata).
            _ => None,
        };
        let g = match (&r, old_xattr) {
            // A replaced value grows the shard by what it adds, if anything.
            (Record::SetXattr { name, value, .. }, Some(old)) => {
                // (what the value's length prefix may grow by)
                (value.len() as u64).saturating_sub(old - name.len() as u64) + 4
            }
            _ => growth(&r),
        };
        self.meta_growth += g;
        match node {
            Some(n) => *self.meta_bytes.entry(n).or_default() += g,
            None => self.meta_bytes.values_mut().for_each(|b| *b += g),
        }
        if let (Record::RemoveXattr { ino, .. }, Some(old)) = (&r, old_xattr) {
            let b = self.meta_bytes.entry(self.node_of(*ino)).or_default();
            *b = b.saturating_sub(old);
        }
        self.gen += 1;
        let gen = self.gen;
        match &r {
            Record::Map { ino, ext, .. } => {
                self.order_run(ext.dev, ext.start, ext.len);
                self.ordered = true;
                self.datasync_gen.insert(*ino, gen);
            }
            Record::MarkWritten { ino, from, to } => {
                self.order_blocks(*ino, *from, *to);
                self.ordered = true;
                self.datasync_gen.insert(*ino, gen);
            }
            // Blocks that show data (newly mapped or converted) need it durable first; an
            // unmap's zeroed edges are in `ordered_runs` already (`Fs::zero_unlocked`).
            Record::Unmap { ino, .. } => {
                self.ordered = true;
                self.datasync_gen.insert(*ino, gen);
            }
            // Unwritten blocks read as zeros whatever the device holds: nothing to order.
            Record::MapUnwritten { ino, .. } | Record::MarkUnwritten { ino, .. } => {
                self.datasync_gen.insert(*ino, gen);
            }
            Record::SetAttr { ino, attr } => {
                if let Some(old) = old_size.filter(|&o| o != attr.size) {
                    if attr.size > old {
                        // The bytes written past the old end in its block show now.
                        if !old.is_multiple_of(BLOCK_SIZE) {
                            let lb = old / BLOCK_SIZE;
                            self.order_blocks(*ino, lb, lb + 1);
                        }
                        self.ordered = true;
                    }
                    self.datasync_gen.insert(*ino, gen);
                }
            }
            Record::NewInode { ino, .. } => {
                self.datasync_gen.insert(*ino, gen);
            }
            _ => {}
        }
        match r {
            Record::SetAttr { ino, attr } => {
                if let Some(&at) = self.last_setattr.get(&ino) {
                    if let Some(Record::SetAttr { ino: i, attr: a }) = self.pending.get_mut(at) {
                        if *i == ino {
                            *a = attr;
                            return Ok(());
                        }
                    }
                }
                self.queued(160);
                self.last_setattr.insert(ino, self.pending.len());
                self.pending.push(Record::SetAttr { ino, attr });
            }
            r => {
                if let Record::NewInode { ino, .. } | Record::DelInode { ino } = &r {
                    self.last_setattr.remove(ino);
                }
                self.queued(
                    64 + match &r {
                        Record::NewInode { target, .. } => {
                            96 + target.as_ref().map_or(0, |t| t.len() as u64)
                        }
                        Record::DirAdd { name, .. }
                        | Record::DirRemove { name, .. }
                        | Record::RemoveXattr { name, .. } => name.len() as u64,
                        Record::SetXattr { name, value, .. } => (name.len() + value.len()) as u64,
                        _ => 0,
                    },
                );
                self.pending.push(r);
            }
        }
        Ok(())
    }

    /// Counts a record of about `bytes` about to be queued in [`Inner::pending_bytes`].
    pub(super) fn queued(&mut self, bytes: u64) {
        if self.pending.is_empty() {
            // Everything queued before was committed.
            self.pending_bytes = 0;
        }
        self.pending_bytes += bytes;
    }

    pub(super) fn set_attr(&mut self, ino: u64, attr: Attr) -> Result<(), FsError> {
        self.rec(Record::SetAttr { ino, attr })
    }

    /// The node holding the metadata of `ino` (for a missing inode, the first node's).
    pub(super) fn node_of(&self, ino: u64) -> u32 {
        self.meta
            .get(ino)
            .map(|i| i.attr.meta_node)
            .or_else(|| self.meta_bytes.keys().next().copied())
            .unwrap_or(0)
    }

    /// Whether `extra` more bytes fit in `node`'s checkpoint shard.
    pub(super) fn fits_on(&mut self, node: u32, extra: u64) -> bool {
        let cap = self.journal.slot_capacity();
        let claimed = self.meta_claimed.get(&node).copied().unwrap_or(0);
        if self.meta_bytes.get(&node).copied().unwrap_or(0) + claimed + extra <= cap {
            return true;
        }
        self.measure_meta();
        self.meta_bytes.get(&node).copied().unwrap_or(0) + claimed + extra <= cap
    }

    /// [`Inner::reserve`] for `ino` that also holds the room until [`Inner::unclaim`], for
    /// an operation that releases this lock before it queues its records; returns the node
    /// to give to `unclaim`.
    pub(super) fn claim(&mut self, extra: u64, ino: u64) -> Result<u32, FsError> {
        self.reserve(extra, &[ino])?;
        let n = self.node_of(ino);
        *self.meta_claimed.entry(n).or_default() += extra;
        Ok(n)
    }

    /// Gives back room held by [`Inner::claim`] (the records, once queued, count
    /// themselves).
    pub(super) fn unclaim(&mut self, node: u32, extra: u64) {
        if let Some(c) = self.meta_claimed.get_mut(&node) {
            *c = c.saturating_sub(extra);
        }
    }

    /// Replaces the loose bound on every shard's size by its measured size.
    pub(super) fn measure_meta(&mut self) {
        self.meta_bytes = journal::shard_sizes(&self.journal.header, &self.meta)
            .into_iter()
            .collect();
        self.meta_growth = 0;
    }

    /// Refuses an operation that would grow the checkpoint shard of a node of `inos`
    /// (those holding the inodes it changes) past what a slot holds (`extra`: a bound on
    /// what the operation adds), so a commit can always be written.
    pub(super) fn reserve(&mut self, extra: u64, inos: &[u64]) -> Result<(), FsError> {
        for &ino in inos {
            let n = self.node_of(ino);
            if !self.fits_on(n, extra) {
                return Err(FsError::NoSpace);
            }
        }
        Ok(())
    }

    /// The node for the metadata of a new inode created by `c` in directory `parent`: the
    /// caller's node when the volume has it (else the parent's), or when that node's shard
    /// is full the next node that has room, ascending and wrapping around.
    pub(super) fn meta_node_for(
        &mut self,
        c: &Caller,
        parent: u64,
        extra: u64,
    ) -> Result<u32, FsError> {
        let nodes: Vec<u32> = self.meta_bytes.keys().copied().collect();
        let want = if nodes.contains(&c.node) {
            c.node
        } else {
            self.node_of(parent)
        };
        let first = nodes.iter().position(|&n| n == want).unwrap_or(0);
        for i in 0..nodes.len() {
            let n = nodes[(first + i) % nodes.len()];
            if self.fits_on(n, extra) {
                return Ok(n);
            }
        }
        Err(FsError::NoSpace)
    }

    /// Drops one link of `ino` (a directory loses all); frees it when nothing holds it.
    pub(super) fn drop_link(&mut self, ino: u64, now: i64) -> Result<(), FsError> {
        let mut a = self.attr(ino)?;
        a.nlink = if a.kind == Kind::Dir {
            0
        } else {
            a.nlink.saturating_sub(1)
        };
        a.ctime = now;
        if a.nlink == 0 && self.open.get(&ino).copied().unwrap_or(0) == 0 {
            self.rec(Record::DelInode { ino })?;
            self.alloc.release_prealloc(ino);
        } else {
            if a.nlink == 0 {
                self.orphaned_at = Some(std::time::Instant::now());
            }
            self.set_attr(ino, a)?;
        }
        Ok(())
    }

    /// Whether an unlinked inode is still held open (its blocks come back at its last
    /// release).
    pub(super) fn holds_orphans(&self) -> bool {
        self.open
            .keys()
            .any(|&ino| self.meta.get(ino).is_some_and(|i| i.attr.nlink == 0))
    }

    pub(super) fn touch_dir(
        &mut self,
        dir: u64,
        now: i64,
        nlink_delta: i32,
    ) -> Result<(), FsError> {
        let mut a = self.attr(dir)?;
        a.mtime = now;
        a.ctime = now;
        a.nlink = a.nlink.saturating_add_signed(nlink_delta);
        self.set_attr(dir, a)
    }

    /// Unmapped runs of logical blocks in `from..to`.
    pub(super) fn holes(&self, ino: u64, from: u64, to: u64) -> Result<Vec<(u64, u64)>, FsError> {
        let i = self.inode(ino)?;
        let mut out = Vec::new();
        let mut b = from;
        let mut prev = i
            .extents
            .range(..from)
            .next_back()
            .map(|(&l, e)| l + e.len)
            .unwrap_or(0);
        if prev > b {
            b = prev.min(to);
        }
        for (&l, e) in i.extents.range(from..to) {
            if l > b {
                out.push((b, l - b));
            }
            prev = l + e.len;
            b = b.max(prev);
        }
        if b < to {
            out.push((b, to - b));
        }
        Ok(out)
    }

    /// Unmaps (and frees) the runs `(first logical block, count)` of `ino`: blocks mapped
    /// for a write that failed before their data reached the device.
    pub(super) fn unmap_runs(&mut self, ino: u64, runs: &[(u64, u64)]) -> Result<(), FsError> {
        for &(from, n) in runs {
            self.rec(Record::Unmap {
                ino,
                from,
                to: from + n,
            })?;
        }
        Ok(())
    }
}
