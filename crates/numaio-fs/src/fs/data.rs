use super::*;

/// Writes blocks `(dev, block, data)` merging physically contiguous ones into one write.
fn write_blocks(
    store: &dyn BlockStore,
    dirty: &mut BTreeSet<u16>,
    blocks: Vec<(u16, u64, Vec<u8>)>,
) -> Result<(), FsError> {
    let mut run: Option<(u16, u64, u64, Vec<u8>)> = None;
    for (dev, b, data) in blocks {
        match &mut run {
            Some((d, _, next, buf)) if *d == dev && *next == b => {
                buf.extend_from_slice(&data);
                *next += 1;
            }
            _ => {
                if let Some((d, s, _, buf)) = run.take() {
                    store.write_at(d, s * BLOCK_SIZE, &buf)?;
                    dirty.insert(d);
                }
                run = Some((dev, b, b + 1, data));
            }
        }
    }
    if let Some((d, s, _, buf)) = run {
        store.write_at(d, s * BLOCK_SIZE, &buf)?;
        dirty.insert(d);
    }
    Ok(())
}

impl Fs {
    /// Zeroes the bytes after `size` in the block holding it, before the file grows past
    /// `size`: a crash may have left there part of an overwrite whose size change was
    /// never committed, and a file must read zeros where it was never written.
    pub(super) fn zero_tail(&self, g: &mut Inner, ino: u64, size: u64) -> Result<(), FsError> {
        let tail = (size % BLOCK_SIZE) as usize;
        if tail == 0 {
            return Ok(());
        }
        // An unwritten block reads as zeros whatever it holds.
        if let Some((dev, b)) = g.inode(ino)?.data_block(size / BLOCK_SIZE) {
            let mut buf = vec![0u8; BLOCK_SIZE as usize];
            self.store.read_at(dev, b * BLOCK_SIZE, &mut buf)?;
            if buf[tail..].iter().any(|&x| x != 0) {
                buf[tail..].fill(0);
                write_blocks(&*self.store, &mut g.data_dirty, vec![(dev, b, buf)])?;
            }
        }
        Ok(())
    }

    /// Frees the blocks past `size` and zeroes the tail of the last block.
    pub(super) fn truncate(&self, g: &mut Inner, ino: u64, size: u64) -> Result<(), FsError> {
        let i = g.inode(ino)?;
        let keep = size.div_ceil(BLOCK_SIZE);
        let end = i.extents.iter().next_back().map_or(0, |(&l, e)| l + e.len);
        if end > keep {
            g.rec(Record::Unmap {
                ino,
                from: keep,
                to: end,
            })?;
        }
        let tail = (size % BLOCK_SIZE) as usize;
        if tail != 0 && size < g.attr(ino)?.size {
            if let Some((dev, b)) = g.inode(ino)?.data_block(size / BLOCK_SIZE) {
                let mut buf = vec![0u8; BLOCK_SIZE as usize];
                self.store.read_at(dev, b * BLOCK_SIZE, &mut buf)?;
                buf[tail..].fill(0);
                write_blocks(&*self.store, &mut g.data_dirty, vec![(dev, b, buf)])?;
            }
        }
        Ok(())
    }

    /// Counts an open handle: an unlinked file keeps its blocks until the last release.
    pub fn open(&self, ino: u64) -> Result<(), FsError> {
        let mut g = self.inner.lock();
        g.inode(ino)?;
        *g.open.entry(ino).or_default() += 1;
        Ok(())
    }

    pub fn release(&self, ino: u64) -> Result<(), FsError> {
        let mut g = self.inner.lock();
        let g = &mut *g;
        let n = g.open.get_mut(&ino).ok_or_else(|| {
            FsError::Invalid(format!("release of inode {ino}, which is not open"))
        })?;
        *n -= 1;
        if *n == 0 {
            g.open.remove(&ino);
            if !self.read_only && g.meta.get(ino).is_some_and(|i| i.attr.nlink == 0) {
                g.rec(Record::DelInode { ino })?;
                g.alloc.release_prealloc(ino);
            }
        }
        Ok(())
    }

    /// Reads up to `buf.len()` bytes at `offset`; holes read as zeros. Returns the count
    /// (0 at or past the end).
    pub fn read(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_into(ino, offset, buf, false)
    }

    /// [`Fs::read`] for a caller that keeps what it reads (the page cache of a mount): the
    /// store then drops its own cached copy of the blocks read ([`BlockStore::forget`]), so
    /// they are cached once.
    pub fn read_kept(&self, ino: u64, offset: u64, buf: &mut [u8]) -> Result<usize, FsError> {
        self.read_into(ino, offset, buf, true)
    }

    fn read_into(
        &self,
        ino: u64,
        offset: u64,
        buf: &mut [u8],
        kept: bool,
    ) -> Result<usize, FsError> {
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
            return Ok(0);
        }
        let n = (buf.len() as u64).min(size - offset) as usize;
        let end = offset + n as u64;
        let bs = BLOCK_SIZE as usize;
        let mut lb = offset / BLOCK_SIZE;
        while lb * BLOCK_SIZE < end {
            // A run of logical blocks mapped contiguously (or a hole run).
            // Unwritten blocks read as zeros, like holes.
            let start = lb;
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
            let run_off = start * BLOCK_SIZE;
            let lo = offset.max(run_off);
            let hi = end.min(run_off + count * BLOCK_SIZE);
            let dst = &mut buf[(lo - offset) as usize..(hi - offset) as usize];
            match phys {
                None => dst.fill(0),
                // A run whose blocks the request covers whole is read straight into the
                // caller's buffer; only partly covered blocks go through a bounce buffer.
                Some((d, b)) if lo == run_off && hi == run_off + count * BLOCK_SIZE => {
                    self.store.read_at(d, b * BLOCK_SIZE, dst)?;
                }
                Some((d, b)) => {
                    let mut tmp = vec![0u8; count as usize * bs];
                    self.store.read_at(d, b * BLOCK_SIZE, &mut tmp)?;
                    dst.copy_from_slice(&tmp[(lo - run_off) as usize..(hi - run_off) as usize]);
                }
            }
            if let (true, Some((d, b))) = (kept, phys) {
                // Only blocks the caller got whole: a partly read block's other bytes are
                // not in the cache above.
                let first = lo.div_ceil(BLOCK_SIZE);
                let last = hi / BLOCK_SIZE;
                if last > first {
                    self.store.forget(
                        d,
                        (b + first - start) * BLOCK_SIZE,
                        (last - first) * BLOCK_SIZE,
                    )?;
                }
            }
            lb += count;
        }
        // relatime: update atime only when it is older than the last change.
        if !self.read_only {
            let mut a = i.attr.clone();
            if a.atime <= a.mtime || a.atime <= a.ctime {
                a.atime = now_ns();
                if g.reserve(200, &[ino]).is_ok() {
                    g.set_attr(ino, a)?;
                }
            }
        }
        Ok(n)
    }

    /// Writes `data` at `offset`; new blocks come from the allocator under the file's
    /// policy for `c`'s node. Returns the bytes written (all of them). Out of space while
    /// freed blocks wait for a commit, it commits and tries once more.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
        self.retry_for_space(|| self.write_once(ino, offset, data, c))
    }

    fn write_once(&self, ino: u64, offset: u64, data: &[u8], c: &Caller) -> Result<usize, FsError> {
        let mut g = self.lock_rw()?;
        let g = &mut *g;
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
            return Ok(0);
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= MAX_FILE_SIZE)
            .ok_or(FsError::TooBig)?;
        let first = offset / BLOCK_SIZE;
        let last = end.div_ceil(BLOCK_SIZE);
        if offset > a.size {
            self.zero_tail(g, ino, a.size)?;
        }
        let fresh = g.fill_holes(ino, first, last, c, false)?;
        let i = g.inode(ino)?;
        // Blocks first written now (new or unwritten) are written whole: zeros around the
        // data, since they must read as zeros where the write does not reach.
        let unwritten: Vec<(u64, u64)> = i
            .unwritten
            .iter()
            .filter(|(&l, &n)| l < last && l + n > first)
            .map(|(&l, &n)| (l, n))
            .collect();
        if !unwritten.is_empty() {
            g.reserve(200, &[ino])?;
        }
        let blank = |lb: u64| {
            fresh
                .iter()
                .chain(&unwritten)
                .any(|&(l, n)| lb >= l && lb < l + n)
        };
        let i = g.inode(ino)?;
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
        let bs = BLOCK_SIZE as usize;
        let mut edge = vec![0u8; bs];
        for (l, n, dev, pb) in runs {
            let lo = offset.max(l * BLOCK_SIZE);
            let hi = end.min((l + n) * BLOCK_SIZE);
            // Blocks the write covers whole go straight from the caller's buffer.
            let (wa, wb) = (lo.div_ceil(BLOCK_SIZE), hi / BLOCK_SIZE);
            if wa < wb {
                let src =
                    &data[(wa * BLOCK_SIZE - offset) as usize..(wb * BLOCK_SIZE - offset) as usize];
                self.store.write_at(dev, (pb + wa - l) * BLOCK_SIZE, src)?;
            }
            // At most two partly covered blocks, read (or zeroed) and merged.
            let mut partial = Vec::with_capacity(2);
            if !lo.is_multiple_of(BLOCK_SIZE) || wa >= wb {
                partial.push(lo / BLOCK_SIZE);
            }
            if !hi.is_multiple_of(BLOCK_SIZE) && (hi - 1) / BLOCK_SIZE != lo / BLOCK_SIZE {
                partial.push((hi - 1) / BLOCK_SIZE);
            }
            for b in partial {
                let boff = b * BLOCK_SIZE;
                let (blo, bhi) = (lo.max(boff), hi.min(boff + BLOCK_SIZE));
                let at = (pb + b - l) * BLOCK_SIZE;
                if blank(b) {
                    edge.fill(0);
                } else {
                    self.store.read_at(dev, at, &mut edge)?;
                }
                edge[(blo - boff) as usize..(bhi - boff) as usize]
                    .copy_from_slice(&data[(blo - offset) as usize..(bhi - offset) as usize]);
                self.store.write_at(dev, at, &edge)?;
            }
            g.data_dirty.insert(dev);
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
        // A write by someone else than root clears set-user-id and set-group-id.
        if c.uid != 0 {
            a.mode &= !0o6000;
        }
        g.set_attr(ino, a)?;
        Ok(data.len())
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
        let mut g = self.lock_rw()?;
        let g = &mut *g;
        let mut a = g.attr(ino)?;
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
        let (first, last) = (offset / BLOCK_SIZE, end.div_ceil(BLOCK_SIZE));
        // Blocks the range covers whole, and the partly covered ones at its edges.
        let (whole_a, whole_b) = (offset.div_ceil(BLOCK_SIZE), end / BLOCK_SIZE);
        let mut edges = vec![first];
        if end % BLOCK_SIZE != 0 {
            edges.push(end / BLOCK_SIZE);
        }
        edges.dedup();
        edges.retain(|&lb| lb < whole_a || lb >= whole_b);
        if mode & FALLOC_PUNCH_HOLE == 0 {
            if !keep && end > a.size {
                self.zero_tail(g, ino, a.size)?;
            }
            // Unwritten: allocated, nothing written, read as zeros until written.
            g.fill_holes(ino, first, last, c, true)?;
            if mode & FALLOC_ZERO_RANGE != 0 && whole_a < whole_b {
                g.reserve(200, &[ino])?;
                g.rec(Record::MarkUnwritten {
                    ino,
                    from: whole_a,
                    to: whole_b,
                })?;
            }
            a = g.attr(ino)?;
            if !keep && end > a.size {
                a.size = end;
                a.mtime = now;
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
            a = g.attr(ino)?;
        }
        if mode & (FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE) != 0 {
            // Zero the partly covered blocks at the edges in place (holes and unwritten
            // blocks read as zeros already).
            for lb in edges {
                let boff = lb * BLOCK_SIZE;
                let lo = offset.max(boff) - boff;
                let hi = end.min(boff + BLOCK_SIZE) - boff;
                if let Some((d, b)) = g.inode(ino)?.data_block(lb) {
                    let mut buf = vec![0u8; BLOCK_SIZE as usize];
                    self.store.read_at(d, b * BLOCK_SIZE, &mut buf)?;
                    buf[lo as usize..hi as usize].fill(0);
                    write_blocks(&*self.store, &mut g.data_dirty, vec![(d, b, buf)])?;
                }
            }
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
