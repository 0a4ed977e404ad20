use super::*;

/// Runs of logical blocks: `(first, count)`.
type Runs = Vec<(u64, u64)>;
/// Physically contiguous runs of a file: `(first logical block, count, dev, first physical
/// block)`.
type PhysRuns = Vec<(u64, u64, u16, u64)>;

/// Part of one block to zero in place: bytes `lo..hi` of block `block` of device `dev`.
pub(super) struct Zero {
    dev: u16,
    block: u64,
    lo: usize,
    hi: usize,
}

/// A physically contiguous run of a read: bytes `lo..hi` of the file, in the blocks from
/// logical block `first` (`count` of them), at `phys` (device, first block) or in a hole
/// (or unwritten blocks) when `None`.
struct ReadRun {
    lo: u64,
    hi: u64,
    first: u64,
    count: u64,
    phys: Option<(u16, u64)>,
}

impl Inner {
    /// Bytes `lo..hi` of logical block `lb` of `ino` to zero, if that block holds written
    /// data (holes and unwritten blocks read as zeros already).
    pub(super) fn zero_in(
        &self,
        ino: u64,
        lb: u64,
        lo: usize,
        hi: usize,
    ) -> Result<Option<Zero>, FsError> {
        Ok(self
            .inode(ino)?
            .data_block(lb)
            .map(|(dev, block)| Zero { dev, block, lo, hi }))
    }

    /// The bytes after `size` in the block holding it, to zero before the file grows past
    /// `size`: a crash may have left there part of an overwrite whose size change was
    /// never committed, and a file must read zeros where it was never written.
    pub(super) fn tail_zero(&self, ino: u64, size: u64) -> Result<Option<Zero>, FsError> {
        let tail = (size % BLOCK_SIZE) as usize;
        if tail == 0 {
            return Ok(None);
        }
        self.zero_in(ino, size / BLOCK_SIZE, tail, BLOCK_SIZE as usize)
    }

    /// Unmaps the blocks past `size` (the size itself is set by the caller); returns the
    /// tail of the new last block to zero when the file shrinks into it.
    pub(super) fn truncate(&mut self, ino: u64, size: u64) -> Result<Option<Zero>, FsError> {
        let i = self.inode(ino)?;
        let old = i.attr.size;
        let keep = size.div_ceil(BLOCK_SIZE);
        let end = i.extents.iter().next_back().map_or(0, |(&l, e)| l + e.len);
        if end > keep {
            self.rec(Record::Unmap {
                ino,
                from: keep,
                to: end,
            })?;
        }
        if size < old {
            self.tail_zero(ino, size)
        } else {
            Ok(None)
        }
    }

    /// The plan of a write into `first..last` of `ino`, all mapped now: the runs of
    /// unwritten blocks it converts, and the physically contiguous runs of the range as
    /// `(first logical block, count, dev, first physical block)`.
    pub(super) fn write_plan(
        &mut self,
        ino: u64,
        first: u64,
        last: u64,
    ) -> Result<(Runs, PhysRuns), FsError> {
        let i = self.inode(ino)?;
        // Blocks first written now (new or unwritten) are written whole: zeros around the
        // data, since they must read as zeros where the write does not reach.
        let unwritten: Vec<(u64, u64)> = i
            .unwritten
            .iter()
            .filter(|(&l, &n)| l < last && l + n > first)
            .map(|(&l, &n)| (l, n))
            .collect();
        if !unwritten.is_empty() {
            self.reserve(200, &[ino])?;
        }
        let i = self.inode(ino)?;
        // Physically contiguous runs of the range: `(first logical block, count, dev,
        // first physical block)`.
        let mut runs = Vec::new();
        let mut lb = first;
        while lb < last {
            let (l, e) = i
                .extents
                .range(..=lb)
                .next_back()
                .filter(|(&l, e)| lb < l + e.len)
                .map(|(&l, e)| (l, *e))
                .ok_or_else(|| bug(format!("inode {ino} block {lb} unmapped after allocation")))?;
            let n = (l + e.len).min(last) - lb;
            runs.push((lb, n, e.dev, e.start + (lb - l)));
            lb += n;
        }
        Ok((unwritten, runs))
    }
}

impl Fs {
    /// Allocates every hole of `from..to` of `ino` (as unwritten blocks when `unwritten`);
    /// returns the volume lock and the runs allocated. The holes are found and their
    /// records queued under `inner`, but the blocks come from the allocator with `inner`
    /// released, so other operations, and allocations on other nodes, go on meanwhile: the
    /// caller's exclusive lock of the inode keeps its block map as found, and the gate,
    /// held shared, keeps a commit from taking a half-queued mapping. On failure nothing
    /// stays allocated: blocks never recorded go straight back to the allocator, and those
    /// mapped already are unmapped (nothing was written to them).
    pub(super) fn fill_holes<'a>(
        &'a self,
        mut g: MutexGuard<'a, Inner>,
        ino: u64,
        from: u64,
        to: u64,
        c: &Caller,
        unwritten: bool,
    ) -> Result<(MutexGuard<'a, Inner>, Runs), FsError> {
        let holes = g.holes(ino, from, to)?;
        let need: u64 = holes.iter().map(|h| h.1).sum();
        if need > self.alloc.free_blocks() {
            return Err(FsError::NoSpace);
        }
        g.reserve(200, &[ino])?;
        let i = g.inode(ino)?;
        let (policy, home) = (i.attr.policy.clone(), i.attr.home);
        let mut mapped = Vec::new();
        for &(l, n) in &holes {
            let mut done = 0;
            while done < n {
                let k = (n - done).min(FILL_STEP);
                let lb = l + done;
                if let Err(e) = self.map_new(&mut g, ino, lb, k, &policy, home, c, unwritten) {
                    g.unmap_runs(ino, &mapped)?;
                    return Err(e);
                }
                mapped.push((lb, k));
                done += k;
            }
        }
        Ok((g, holes))
    }

    /// Allocates and maps logical blocks `lb..lb + n` of `ino` (all unmapped), as
    /// unwritten blocks when `unwritten`, with `g` released while the allocator chooses
    /// the blocks (see [`Fs::fill_holes`]). On failure none of them stays allocated.
    #[allow(clippy::too_many_arguments)]
    fn map_new(
        &self,
        g: &mut MutexGuard<'_, Inner>,
        ino: u64,
        lb: u64,
        n: u64,
        policy: &PlacementPolicy,
        home: Option<u32>,
        c: &Caller,
        unwritten: bool,
    ) -> Result<(), FsError> {
        // The room for the records is held while the lock is released, so the records can
        // be queued whatever other operations queue meanwhile.
        let extra = n * 48 + 200;
        let meta_node = g.claim(extra, ino)?;
        let goal = lb
            .checked_sub(1)
            .and_then(|p| g.inode(ino).ok()?.lookup_block(p))
            .map(|(d, b)| (d, b + 1));
        let req = AllocRequest {
            ino,
            file_block: lb,
            blocks: n,
            policy,
            caller_node: c.node,
            home_node: home,
            goal,
        };
        let got = MutexGuard::unlocked(g, || self.alloc.alloc(&req));
        g.unclaim(meta_node, extra);
        let got = got?;
        let mut l = lb;
        for (k, a) in got.iter().enumerate() {
            let ext = a.extent;
            let r = g.rec(if unwritten {
                Record::MapUnwritten {
                    ino,
                    lblock: l,
                    ext,
                }
            } else {
                Record::Map {
                    ino,
                    lblock: l,
                    ext,
                }
            });
            if let Err(e) = r {
                self.alloc.give_back(&got[k..]);
                if l > lb {
                    g.unmap_runs(ino, &[(lb, l - lb)])?;
                }
                return Err(e);
            }
            l += ext.len;
        }
        if l != lb + n {
            if l > lb {
                g.unmap_runs(ino, &[(lb, l - lb)])?;
            }
            return Err(bug(format!("allocator returned {} of {n} blocks", l - lb)));
        }
        Ok(())
    }

    /// Zeroes `z` on its device (a read, and a write when not all zeros already); the
    /// device written goes into `dirty`. Called with no lock but the inode's and the gate.
    fn zero(&self, z: &Zero, dirty: &mut BTreeSet<u16>) -> Result<(), FsError> {
        let mut buf = vec![0u8; BLOCK_SIZE as usize];
        let at = z.block * BLOCK_SIZE;
        self.store.read_at(z.dev, at, &mut buf)?;
        if buf[z.lo..z.hi].iter().any(|&x| x != 0) {
            buf[z.lo..z.hi].fill(0);
            self.store.write_at(z.dev, at, &buf)?;
            dirty.insert(z.dev);
        }
        Ok(())
    }

    /// Zeroes every part of `zeros` with `g` released, and takes the volume lock back: the
    /// devices written are then among those the next commit syncs first. The caller holds
    /// the inode's lock exclusively and the gate.
    pub(super) fn zero_unlocked<'a>(
        &'a self,
        g: MutexGuard<'a, Inner>,
        zeros: &[Zero],
    ) -> Result<MutexGuard<'a, Inner>, FsError> {
        if zeros.is_empty() {
            return Ok(g);
        }
        drop(g);
        let mut dirty = BTreeSet::new();
        let r = zeros.iter().try_for_each(|z| self.zero(z, &mut dirty));
        let mut g = self.inner.lock();
        g.data_dirty.extend(dirty);
        for z in zeros {
            g.order_run(z.dev, z.block, 1);
        }
        r.map(|()| g)
    }

    /// Counts a hold of `ino` (an open handle; through a mount, the kernel's reference): an
    /// unlinked file keeps its blocks until the last hold is released.
    pub fn open(&self, ino: u64) -> Result<(), FsError> {
        let mut g = self.inner.lock();
        g.inode(ino)?;
        *g.open.entry(ino).or_default() += 1;
        Ok(())
    }

    /// Drops a hold of `ino` ([`Fs::open`]); the last one of an unlinked file frees it.
    pub fn release(&self, ino: u64) -> Result<(), FsError> {
        // Freeing waits for the reads and writes of the file in flight (with other handles
        // or none), whose blocks it gives back.
        let mut file = None;
        loop {
            let mut g = self.inner.lock();
            let n = *g.open.get(&ino).ok_or_else(|| {
                FsError::Invalid(format!("release of inode {ino}, which is not open"))
            })?;
            let frees =
                n == 1 && !self.read_only && g.meta.get(ino).is_some_and(|i| i.attr.nlink == 0);
            if frees && file.is_none() {
                drop(g);
                file = Some(self.inodes.write(ino));
                continue;
            }
            return self.release_locked(&mut g, ino);
        }
    }

    fn release_locked(&self, g: &mut Inner, ino: u64) -> Result<(), FsError> {
        let n = g.open.get_mut(&ino).ok_or_else(|| {
            FsError::Invalid(format!("release of inode {ino}, which is not open"))
        })?;
        *n -= 1;
        if *n == 0 {
            g.open.remove(&ino);
            if !self.read_only && g.meta.get(ino).is_some_and(|i| i.attr.nlink == 0) {
                g.rec(Record::DelInode { ino })?;
                g.alloc.release_prealloc(ino);
                self.released.notify_all();
            }
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset`; holes read as zeros. Returns the count
    /// (0 at or past the end).
    pub fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_accounted(ino, offset, buf, false).map(|r| r.0)
    }

    /// [`Fs::read`] for a caller that keeps what it reads (the page cache of a mount): the
    /// store then drops its own cached copy of the blocks read ([`BlockStore::forget`]), so
    /// they are cached once.
    pub fn read_kept(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_accounted(ino, offset, buf, true).map(|r| r.0)
    }

    /// [`Fs::read`] (or [`Fs::read_kept`] when `kept`) that also returns the bytes read
    /// from each node, as [`Fs::range_nodes`] counts them for the range read, from the same
    /// block map the read used: one pass for a read and its per-node accounting.
    ///
    /// The block map is planned (and a relatime atime update queued) under the volume lock,
    /// taken once and released for the device reads; the inode's lock, held shared throughout, keeps writes, truncates and frees
    /// of this file out meanwhile. Other files' reads and writes go on in parallel.
    pub fn read_accounted(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        kept: bool,
    ) -> Result<(usize, Vec<(u32, u64)>), FsError> {
        let _file = self.inodes.read(ino);
        let (n, runs, nodes) = {
            let mut g = self.inner.lock();
            let i = g.inode(ino)?;
            match i.attr.kind {
                Kind::Dir => return Err(FsError::IsDir),
                Kind::Symlink => return Err(FsError::Invalid("read of a symlink".into())),
                k if k.is_special() => {
                    return Err(FsError::Invalid("read of a fifo, socket or device".into()))
                }
                _ => {}
            }
            let size = i.attr.size;
            if offset >= size || buf.is_empty() {
                return Ok((0, Vec::new()));
            }
            let n = (buf.len() as u64).min(size - offset) as usize;
            let end = offset + n as u64;
            let mut runs = Vec::new();
            let mut lb = offset / BLOCK_SIZE;
            while lb * BLOCK_SIZE < end {
                // A run of logical blocks mapped contiguously (or a hole run).
                // Unwritten blocks read as zeros, like holes.
                let first = lb;
                let phys = i.data_block(lb);
                let mut count = 1;
                while (lb + count) * BLOCK_SIZE < end {
                    let p = i.data_block(lb + count);
                    let contiguous = match (phys, p) {
                        (Some((d, b)), Some((d2, b2))) => d == d2 && b2 == b + count,
                        (None, None) => true,
                        _ => false,
                    };
                    if !contiguous {
                        break;
                    }
                    count += 1;
                }
                let run_off = first * BLOCK_SIZE;
                runs.push(ReadRun {
                    lo: offset.max(run_off),
                    hi: end.min(run_off + count * BLOCK_SIZE),
                    first,
                    count,
                    phys,
                });
                lb += count;
            }
            let nodes = range_nodes_in(&g, i, offset, n as u64);
            // relatime: update atime only when it is older than the last change; under the
            // same lock, so a read takes the volume lock once.
            let mut a = i.attr.clone();
            if !self.read_only && (a.atime <= a.mtime || a.atime <= a.ctime) {
                a.atime = now_ns();
                if g.reserve(200, &[ino]).is_ok() {
                    g.set_attr(ino, a)?;
                }
            }
            (n, runs, nodes)
        };
        for r in runs {
            let run_off = r.first * BLOCK_SIZE;
            let run_end = run_off + r.count * BLOCK_SIZE;
            let dst = &mut buf[(r.lo - offset) as usize..(r.hi - offset) as usize];
            match r.phys {
                None => dst.fill(0),
                // A run whose blocks the request covers whole is read straight into the
                // caller's buffer; only partly covered blocks go through a bounce buffer.
                Some((d, b)) if r.lo == run_off && r.hi == run_end => {
                    self.store.read_at(d, b * BLOCK_SIZE, dst)?;
                }
                Some((d, b)) => {
                    let mut tmp = vec![0u8; (r.count * BLOCK_SIZE) as usize];
                    self.store.read_at(d, b * BLOCK_SIZE, &mut tmp)?;
                    dst.copy_from_slice(&tmp[(r.lo - run_off) as usize..(r.hi - run_off) as usize]);
                }
            }
            if let (true, Some((d, b))) = (kept, r.phys) {
                // Only blocks the caller got whole: a partly read block's other bytes are
                // not in the cache above.
                let first = r.lo.div_ceil(BLOCK_SIZE);
                let last = r.hi / BLOCK_SIZE;
                if last > first {
                    self.store.forget(
                        d,
                        (b + first - r.first) * BLOCK_SIZE,
                        (last - first) * BLOCK_SIZE,
                    )?;
                }
            }
        }
        Ok((n, nodes))
    }

    /// Writes `data` at `offset`; new blocks come from the allocator under the file's
    /// policy for `c`'s node. Returns the bytes written (all of them). Out of space while
    /// freed blocks wait for a commit, it commits and tries once more.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
        self.retry_for_space(|| {
            self.writable()?;
            let _file = self.inodes.write(ino);
            let _gate = self.gate.read();
            // Waiting, it never comes back without having written.
            Ok(self.write_locked(ino, offset, data, c, true)?.unwrap_or(0))
        })
    }

    /// [`Fs::write`] where it cannot have to wait for anything but the volume lock and the
    /// device's page cache: `Ok(None)`, with nothing done, where it would wait for another
    /// operation on the file, for a commit (queued records due, out of space while frees
    /// wait), or for a device read (a block only partly covered that is not in memory:
    /// [`BlockStore::read_cached`]). A caller that must not
    /// block, such as a thread that serves other requests too, tries this first and hands
    /// the write to a thread that may wait when it gets `None`.
    pub fn try_write(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        c: &Caller,
    ) -> Result<Option<usize>, FsError> {
        if !self.writable_now()? {
            return Ok(None);
        }
        let Some(_file) = self.inodes.try_write(ino) else {
            return Ok(None);
        };
        let Some(_gate) = self.gate.try_read() else {
            return Ok(None);
        };
        match self.write_locked(ino, offset, data, c, false) {
            // Nothing was done: the caller's waiting write commits and tries again.
            Err(FsError::NoSpace) => Ok(None),
            r => r,
        }
    }

    /// One write, with the inode's lock (exclusive) and the gate (shared) held by the
    /// caller: planned under the volume lock (new blocks taken from the allocator with it
    /// released, see [`Fs::fill_holes`], and mapped), written to the devices with it
    /// released, then its records queued under it again. Out of space, nothing is done.
    /// Without `wait`, `None` where a partly covered block would have to be read from its
    /// device, with nothing done but the zeroing past the old end (which the write redoes).
    fn write_locked(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
        c: &Caller,
        wait: bool,
    ) -> Result<Option<usize>, FsError> {
        let g = self.inner.lock();
        let a = g.attr(ino)?;
        match a.kind {
            Kind::Dir => return Err(FsError::IsDir),
            Kind::Symlink => return Err(FsError::Invalid("write to a symlink".into())),
            k if k.is_special() => {
                return Err(FsError::Invalid("write to a fifo, socket or device".into()))
            }
            _ => {}
        }
        if data.is_empty() {
            return Ok(Some(0));
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let first = offset / BLOCK_SIZE;
        let last = end.div_ceil(BLOCK_SIZE);
        let tail = if offset > a.size {
            g.tail_zero(ino, a.size)?
        } else {
            None
        };
        let (mut g, fresh) = self.fill_holes(g, ino, first, last, c, false)?;
        // From here on a failure unmaps the new blocks: nothing was written to them yet.
        let (unwritten, runs) = match g.write_plan(ino, first, last) {
            Ok(p) => p,
            Err(e) => {
                g.unmap_runs(ino, &fresh)?;
                return Err(e);
            }
        };
        drop(g);
        let blank = |lb: u64| {
            fresh
                .iter()
                .chain(&unwritten)
                .any(|&(l, n)| lb >= l && lb < l + n)
        };
        let mut dirty = BTreeSet::new();
        let r = tail
            .iter()
            .try_for_each(|z| self.zero(z, &mut dirty))
            .and_then(|()| self.write_runs(&runs, offset, data, blank, wait, &mut dirty));
        let mut g = self.inner.lock();
        g.data_dirty.extend(dirty);
        if let Some(z) = &tail {
            g.order_run(z.dev, z.block, 1);
        }
        match r {
            Ok(true) => {}
            // Nothing of the data was written: the new blocks go, for the waiting write.
            Ok(false) => {
                g.unmap_runs(ino, &fresh)?;
                return Ok(None);
            }
            Err(e) => {
                // The new blocks may hold part of the data or none: they go, so the file
                // reads zeros there (a hole), never what the device held before. The gate
                // kept any commit from taking their mapping without this.
                g.unmap_runs(ino, &fresh)?;
                return Err(e);
            }
        }
        // (blocks written for the first time are in `ordered_runs` as well: merged away)
        for &(_, n, dev, pb) in &runs {
            g.overwrites.note(ino, dev, pb, n);
        }
        if !unwritten.is_empty() {
            g.rec(Record::MarkWritten {
                ino,
                from: first,
                to: last,
            })?;
        }
        let mut a = g.attr(ino)?;
        let now = now_ns();
        a.size = a.size.max(end);
        a.mtime = now;
        a.ctime = now;
        // A write by someone else than root clears set-user-id and set-group-id (as the VFS
        // rules it: set-group-id without group execute stays for a member of the group).
        if c.uid != 0 {
            super::attrs::drop_set_ids(&mut a, c);
        }
        g.set_attr(ino, a)?;
        Ok(Some(data.len()))
    }

    /// The device writes of a write of `data` at `offset` into `runs` (see
    /// [`Fs::write_locked`]); `blank(lb)` tells the blocks written for the first time. A
    /// block the write covers only in part (at most its first and its last) is read and
    /// merged, or zeroed around the data where it is blank. Without `wait`, such a block
    /// must be in memory ([`BlockStore::read_cached`]): where one is not, nothing is written
    /// and the answer is `false`.
    fn write_runs(
        &self,
        runs: &[(u64, u64, u16, u64)],
        offset: u64,
        data: &[u8],
        blank: impl Fn(u64) -> bool,
        wait: bool,
        dirty: &mut BTreeSet<u16>,
    ) -> Result<bool, FsError> {
        let end = offset + data.len() as u64;
        let (first, last) = (offset / BLOCK_SIZE, (end - 1) / BLOCK_SIZE);
        let partly = |lb: u64| lb * BLOCK_SIZE < offset || (lb + 1) * BLOCK_SIZE > end;
        let place = |lb: u64| {
            runs.iter()
                .find(|&&(l, n, _, _)| lb >= l && lb < l + n)
                .map(|&(l, _, dev, pb)| (dev, (pb + lb - l) * BLOCK_SIZE))
        };
        // The edges first, so that a write that must not wait finds out before it changes
        // anything.
        let mut edges: [Option<(u16, u64, Vec<u8>)>; 2] = [None, None];
        let ends = [first, last];
        for (k, &lb) in ends.iter().enumerate() {
            if !partly(lb) || (k == 1 && last == first) {
                continue;
            }
            let Some((dev, at)) = place(lb) else {
                continue;
            };
            let mut block = vec![0u8; BLOCK_SIZE as usize];
            if !blank(lb) {
                if wait {
                    self.store.read_at(dev, at, &mut block)?;
                } else if !self.store.read_cached(dev, at, &mut block)? {
                    return Ok(false);
                }
            }
            let boff = lb * BLOCK_SIZE;
            let (lo, hi) = (offset.max(boff), end.min(boff + BLOCK_SIZE));
            block[(lo - boff) as usize..(hi - boff) as usize]
                .copy_from_slice(&data[(lo - offset) as usize..(hi - offset) as usize]);
            edges[k] = Some((dev, at, block));
        }
        // In ascending order, so a store sees one run of bytes: the first block, the blocks
        // covered whole (straight from the caller's buffer), the last block.
        let [head, tail] = edges;
        if let Some((dev, at, block)) = &head {
            self.store.write_at(*dev, *at, block)?;
        }
        for &(l, n, dev, pb) in runs {
            dirty.insert(dev);
            let lo = offset.max(l * BLOCK_SIZE);
            let hi = end.min((l + n) * BLOCK_SIZE);
            let (wa, wb) = (lo.div_ceil(BLOCK_SIZE), hi / BLOCK_SIZE);
            if wa < wb {
                let src =
                    &data[(wa * BLOCK_SIZE - offset) as usize..(wb * BLOCK_SIZE - offset) as usize];
                self.store.write_at(dev, (pb + wa - l) * BLOCK_SIZE, src)?;
            }
        }
        if let Some((dev, at, block)) = &tail {
            self.store.write_at(*dev, *at, block)?;
        }
        Ok(true)
    }

    /// Allocates (`mode` 0 or [`FALLOC_KEEP_SIZE`]: unwritten blocks, nothing is written),
    /// deallocates ([`FALLOC_PUNCH_HOLE`]`|`[`FALLOC_KEEP_SIZE`]) or zeroes
    /// ([`FALLOC_ZERO_RANGE`], with or without [`FALLOC_KEEP_SIZE`]: whole blocks become
    /// unwritten, partly covered ones are zeroed in place) `len` bytes at `offset`. Other
    /// modes (collapse, insert, unshare) are [`FsError::Unsupported`] (EOPNOTSUPP). Out of
    /// space while freed blocks wait for a commit, it commits and tries once more.
    pub fn fallocate(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        self.retry_for_space(|| self.fallocate_once(ino, offset, len, mode, c))
    }

    fn fallocate_once(
        &self,
        ino: u64,
        offset: u64,
        len: u64,
        mode: u32,
        c: &Caller,
    ) -> Result<(), FsError> {
        self.writable()?;
        let _file = self.inodes.write(ino);
        let _gate = self.gate.read();
        let mut g = self.inner.lock();
        let a = g.attr(ino)?;
        if a.kind != Kind::File {
            return Err(if a.kind == Kind::Dir {
                FsError::IsDir
            } else {
                FsError::Invalid("fallocate of a symlink".into())
            });
        }
        if len == 0 {
            return Err(FsError::Invalid("fallocate of 0 bytes".into()));
        }
        let known = FALLOC_KEEP_SIZE | FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE;
        if mode & !known != 0 || mode & FALLOC_PUNCH_HOLE != 0 && mode & FALLOC_ZERO_RANGE != 0 {
            return Err(FsError::Unsupported(format!(
                "fallocate mode {mode:#x} (supported: 0, KEEP_SIZE, PUNCH_HOLE|KEEP_SIZE, \
                 ZERO_RANGE, ZERO_RANGE|KEEP_SIZE)"
            )));
        }
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let now = now_ns();
        let keep = mode & FALLOC_KEEP_SIZE != 0;
        let punch = mode & FALLOC_PUNCH_HOLE != 0;
        let (first, last) = (offset / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        // Blocks the range covers whole, and the partly covered ones at its edges.
        let (whole_a, whole_b) = (offset.div_ceil(BLOCK_SIZE), end / BLOCK_SIZE);
        let mut edges = vec![first];
        if end % BLOCK_SIZE != 0 {
            edges.push(end / BLOCK_SIZE);
        }
        edges.dedup();
        edges.retain(|&lb| lb < whole_a || lb >= whole_b);
        let mut zeros = Vec::new();
        if !punch {
            if !keep && end > a.size {
                zeros.extend(g.tail_zero(ino, a.size)?);
            }
            // Unwritten: allocated, nothing written, read as zeros until written.
            g = self.fill_holes(g, ino, first, last, c, true)?.0;
            if mode & FALLOC_ZERO_RANGE != 0 && whole_a < whole_b {
                g.reserve(200, &[ino])?;
                g.rec(Record::MarkUnwritten {
                    ino,
                    from: whole_a,
                    to: whole_b,
                })?;
            }
        } else {
            g.reserve(400, &[ino])?;
            if whole_a < whole_b {
                g.rec(Record::Unmap {
                    ino,
                    from: whole_a,
                    to: whole_b,
                })?;
            }
        }
        let zeroes_range = mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE) != 0;
        if zeroes_range {
            // Zero the partly covered blocks at the edges in place (holes and unwritten
            // blocks read as zeros already).
            for lb in edges {
                let boff = lb * BLOCK_SIZE;
                let lo = offset.max(boff) - boff;
                let hi = end.min(boff + BLOCK_SIZE) - boff;
                zeros.extend(g.zero_in(ino, lb, lo as usize, hi as usize)?);
            }
        }
        let mut g = self.zero_unlocked(g, &zeros)?;
        let mut a = g.attr(ino)?;
        if !punch && !keep && end > a.size {
            a.size = end;
            a.mtime = now;
        }
        if zeroes_range {
            a.mtime = now;
        }
        a.ctime = now;
        g.set_attr(ino, a)
    }

    /// `lseek` with [`SEEK_DATA`] or [`SEEK_HOLE`] from `offset`: the first offset at or
    /// after it holding data, or in a hole (the end of the file is one). Unwritten blocks
    /// are holes. [`FsError::NoSuchOffset`] (ENXIO) at or past the end, or when no data
    /// follows.
    pub fn seek(&self, ino: u64, offset: u64, whence: u32) -> Result<u64, FsError> {
        let g = self.inner.lock();
        let i = g.inode(ino)?;
        match i.attr.kind {
            Kind::Dir => return Err(FsError::IsDir),
            Kind::File => {}
            _ => return Err(FsError::Invalid("seek in a symlink or special file".into())),
        }
        let size = i.attr.size;
        if offset >= size {
            return Err(FsError::NoSuchOffset);
        }
        let lb = offset / BLOCK_SIZE;
        match whence {
            SEEK_DATA => match i.next_data(lb) {
                Some(d) if d.saturating_mul(BLOCK_SIZE) < size => Ok(offset.max(d * BLOCK_SIZE)),
                _ => Err(FsError::NoSuchOffset),
            },
            SEEK_HOLE => Ok(offset
                .max(i.next_hole(lb).saturating_mul(BLOCK_SIZE))
                .min(size)),
            w => Err(FsError::Invalid(format!(
                "seek whence {w} (the kernel serves SEEK_SET, SEEK_CUR and SEEK_END itself)"
            ))),
        }
    }
}
