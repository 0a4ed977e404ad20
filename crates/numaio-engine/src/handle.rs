//! Files opened through the engine: the copying `pread`/`pwrite` paths, zero-copy
//! `get`/`put` ([`Pinned`]), `sync_range` and `fsync`.

use crate::blockio::{Seg, Segs};
use crate::engine::Inner;
use crate::error::EngineError;
use crate::file::FileEntry;
use crate::key::FileId;
use smallvec::SmallVec;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A file opened through the engine.
#[derive(Clone)]
pub struct FileHandle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) file: Arc<FileEntry>,
}

impl Inner {
    pub(crate) fn pread(&self, f: &FileEntry, buf: &mut [u8], off: u64) -> io::Result<usize> {
        let size = f.len();
        if off >= size || buf.is_empty() {
            return Ok(0);
        }
        let len = (buf.len() as u64).min(size - off) as usize;
        let bs = self.bs as u64;
        let mut done = 0usize;
        // On the stack: a 1 MiB read of 4 KiB blocks pins 256 blocks without allocating.
        let mut segs: SmallVec<[Seg; 256]> = SmallVec::new();
        while done < len {
            let cur = off + done as u64;
            let fb = cur / bs;
            let lb = (off + len as u64 - 1) / bs;
            let n = ((lb - fb + 1) as usize).min(self.chunk_blocks);
            self.acquire_into(f, fb..fb + n as u64, n, None, &mut segs)?;
            if self.cfg.readahead && f.seq_next.swap(fb + n as u64, Ordering::Relaxed) == fb {
                self.readahead(f, fb + n as u64);
            }
            for (i, s) in segs.iter().enumerate() {
                let start = if i == 0 { (cur % bs) as usize } else { 0 };
                let k = (self.bs - start).min(len - done);
                let src = self.slices[s.slice as usize].buf_ptr(s.slot);
                // SAFETY: the slot is pinned until `release`; `start + k <= bs` and
                // `done + k <= len <= buf.len()`, so both ranges are in bounds.
                unsafe {
                    std::ptr::copy_nonoverlapping(src.add(start), buf.as_mut_ptr().add(done), k)
                };
                done += k;
            }
            self.release(&segs);
        }
        Ok(len)
    }

    pub(crate) fn pwrite(&self, f: &FileEntry, buf: &[u8], off: u64) -> io::Result<usize> {
        let len = buf.len();
        if len == 0 {
            return Ok(0);
        }
        let bs = self.bs as u64;
        let end = off + len as u64;
        let mut done = 0usize;
        while done < len {
            let cur = off + done as u64;
            let fb = cur / bs;
            let lb = (end - 1) / bs;
            let n = ((lb - fb + 1) as usize).min(self.chunk_blocks);
            let segs = self.acquire(f, fb, n, Some((off, len as u64)))?;
            for (i, s) in segs.iter().enumerate() {
                let start = if i == 0 { (cur % bs) as usize } else { 0 };
                let k = (self.bs - start).min(len - done);
                let slice = &self.slices[s.slice as usize];
                let dst = slice.buf_ptr(s.slot);
                slice.begin_copy_in(s.slot);
                // SAFETY: the slot is pinned until `release`; `start + k <= bs` and
                // `done + k <= len`, so both ranges are in bounds.
                unsafe { std::ptr::copy_nonoverlapping(buf.as_ptr().add(done), dst.add(start), k) };
                slice.end_copy_in(s.slot, true);
                if s.fill {
                    slice.finish_load(s.slot, true);
                }
                done += k;
            }
            f.grow_to(off + done as u64);
            self.release(&segs);
        }
        Ok(len)
    }
}

/// Ranges pinned by [`FileHandle::get_batch`]: one zero-copy view per requested range.
/// Dropping it releases every block.
pub struct PinnedBatch<'a> {
    h: &'a FileHandle,
    segs: SmallVec<[Seg; 64]>,
    /// Per requested range: the index of its block in `segs` (`u32::MAX`: empty, past the
    /// end of the file), its offset in the block and its length.
    views: SmallVec<[(u32, u32, u32); 64]>,
}

impl PinnedBatch<'_> {
    /// The number of ranges (as requested, empty ones included).
    pub fn len(&self) -> usize {
        self.views.len()
    }
    pub fn is_empty(&self) -> bool {
        self.views.is_empty()
    }
    /// The bytes of range `i` (empty past the end of the file).
    ///
    /// # Panics
    /// If `i >= self.len()`.
    pub fn get(&self, i: usize) -> &[u8] {
        let (k, start, len) = self.views[i];
        let Some(s) = self.segs.get(k as usize) else {
            return &[];
        };
        let p = self.h.inner.slices[s.slice as usize].buf_ptr(s.slot);
        // SAFETY: the slot is pinned for the lifetime of `self`, and `get_batch` checked that
        // `start + len` lies within the block.
        unsafe { std::slice::from_raw_parts(p.add(start as usize), len as usize) }
    }
    /// The ranges in request order.
    pub fn iter(&self) -> impl Iterator<Item = &[u8]> + '_ {
        (0..self.len()).map(|i| self.get(i))
    }
}

impl std::fmt::Debug for PinnedBatch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedBatch")
            .field("ranges", &self.views.len())
            .field("blocks", &self.segs.len())
            .finish()
    }
}

impl Drop for PinnedBatch<'_> {
    fn drop(&mut self) {
        self.h.inner.release(&self.segs);
    }
}

/// Blocks pinned by [`FileHandle::get`]: zero-copy views of the cache's buffers.
/// Release with [`Pinned::put`] (or drop = put clean).
pub struct Pinned<'a> {
    h: &'a FileHandle,
    segs: Segs,
    /// Offset of the range inside the first block, and the range length.
    start: usize,
    len: usize,
    write: bool,
    off: u64,
}

impl<'a> Pinned<'a> {
    /// Pinned blocks handed over by a request that pinned them.
    pub(crate) fn from_segs(
        h: &'a FileHandle,
        segs: Segs,
        off: u64,
        len: usize,
        write: bool,
    ) -> Self {
        let bs = h.inner.bs as u64;
        Pinned {
            h,
            segs,
            start: (off % bs) as usize,
            len,
            write,
            off,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The requested bytes, as one slice per cache block.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let bs = self.h.inner.bs;
        let mut left = self.len;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let st = if i == 0 { self.start } else { 0 };
            let k = (bs - st).min(left);
            left -= k;
            let p = self.h.inner.slices[s.slice as usize].buf_ptr(s.slot);
            // SAFETY: the slot is pinned for the lifetime of `self`.
            unsafe { std::slice::from_raw_parts(p.add(st), k) }
        })
    }
    /// Mutable views (only for [`FileHandle::get_mut`]).
    pub fn segments_mut(&mut self) -> impl Iterator<Item = &mut [u8]> + '_ {
        assert!(self.write, "segments_mut on a read-only get");
        let bs = self.h.inner.bs;
        let mut left = self.len;
        let inner = &self.h.inner;
        let start = self.start;
        self.segs.iter().enumerate().map(move |(i, s)| {
            let st = if i == 0 { start } else { 0 };
            let k = (bs - st).min(left);
            left -= k;
            let p = inner.slices[s.slice as usize].buf_ptr(s.slot);
            // SAFETY: the slot is pinned for the lifetime of `self`, which is borrowed mutably.
            unsafe { std::slice::from_raw_parts_mut(p.add(st), k) }
        })
    }
    /// Copies the bytes out (convenience for tests).
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }
    /// Releases the buffers; `dirty` marks them modified (write-back happens later).
    pub fn put(mut self, dirty: bool) {
        self.release(dirty);
    }
    fn release(&mut self, dirty: bool) {
        let inner = &self.h.inner;
        if self.write {
            for s in &self.segs {
                inner.slices[s.slice as usize].end_copy_in(s.slot, dirty);
            }
            if dirty {
                self.h.file.grow_to(self.off + self.len as u64);
            }
        }
        inner.release(&self.segs);
        self.segs.clear();
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        if !self.segs.is_empty() {
            self.release(false);
        }
    }
}

impl FileHandle {
    pub fn id(&self) -> FileId {
        self.file.id
    }
    pub fn path(&self) -> &Path {
        &self.file.path
    }
    /// Logical length in bytes.
    pub fn len(&self) -> u64 {
        self.file.len()
    }
    pub fn is_empty(&self) -> bool {
        self.file.len() == 0
    }
    /// Whether this file's I/O uses O_DIRECT.
    pub fn direct(&self) -> bool {
        self.file.direct()
    }
    pub fn fell_back_to_buffered(&self) -> bool {
        self.file.fell_back_to_buffered()
    }

    /// Copies up to `buf.len()` bytes at `off` (fewer at end of file).
    pub fn pread(&self, buf: &mut [u8], off: u64) -> Result<usize, EngineError> {
        if let Some(router) = &self.inner.cfg.router {
            return self
                .inner
                .routed(&**router, &self.file, buf.len(), off, false, |r, o| {
                    Ok(self.inner.pread(&self.file, &mut buf[r], o)?)
                });
        }
        Ok(self.inner.pread(&self.file, buf, off)?)
    }
    /// Reads several small ranges at once: each `(offset, buffer)` must lie within one cache
    /// block. All missing blocks are read concurrently (one batch to the I/O workers), so one
    /// thread gets the queue depth of the batch. Returns the bytes read per range (fewer at
    /// end of file).
    pub fn pread_batch(&self, reqs: &mut [(u64, &mut [u8])]) -> Result<Vec<usize>, EngineError> {
        let inner = &self.inner;
        let bs = inner.bs as u64;
        let size = self.file.len();
        let mut out = vec![0usize; reqs.len()];
        for (i, (off, buf)) in reqs.iter().enumerate() {
            if *off % bs + buf.len() as u64 > bs {
                return Err(EngineError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "pread_batch range {i} (offset {off}, {} bytes) crosses a {bs}-byte block",
                        buf.len()
                    ),
                )));
            }
        }
        let live: Vec<usize> = (0..reqs.len())
            .filter(|&i| reqs[i].0 < size && !reqs[i].1.is_empty())
            .collect();
        for chunk in live.chunks(inner.chunk_blocks) {
            let mut segs: SmallVec<[Seg; 64]> = SmallVec::new();
            inner.acquire_into(
                &self.file,
                chunk.iter().map(|&i| reqs[i].0 / bs),
                chunk.len(),
                None,
                &mut segs,
            )?;
            for (s, &i) in segs.iter().zip(chunk) {
                let (off, buf) = &mut reqs[i];
                let k = (buf.len() as u64).min(size - *off) as usize;
                let src = inner.slices[s.slice as usize].buf_ptr(s.slot);
                // SAFETY: the slot is pinned until `release`; the range was checked to lie
                // inside one block, and `k <= buf.len()`.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add((*off % bs) as usize),
                        buf.as_mut_ptr(),
                        k,
                    )
                };
                out[i] = k;
            }
            inner.release(&segs);
        }
        Ok(out)
    }

    /// Writes `buf` at `off` into the cache (write-back later, or at fsync).
    pub fn pwrite(&self, buf: &[u8], off: u64) -> Result<usize, EngineError> {
        if let Some(router) = &self.inner.cfg.router {
            return self
                .inner
                .routed(&**router, &self.file, buf.len(), off, true, |r, o| {
                    Ok(self.inner.pwrite(&self.file, &buf[r], o)?)
                });
        }
        Ok(self.inner.pwrite(&self.file, buf, off)?)
    }

    fn pin_range(&self, off: u64, len: usize, write: bool) -> Result<Pinned<'_>, EngineError> {
        let bs = self.inner.bs as u64;
        let len = if write {
            len
        } else {
            (len as u64).min(self.len().saturating_sub(off)) as usize
        };
        if len == 0 {
            return Ok(Pinned {
                h: self,
                segs: Segs::new(),
                start: 0,
                len: 0,
                write,
                off,
            });
        }
        let fb = off / bs;
        let n = ((off + len as u64 - 1) / bs - fb + 1) as usize;
        if n > self.inner.chunk_blocks {
            return Err(self.too_many_blocks(len, n));
        }
        let segs = self.inner.acquire(&self.file, fb, n, None)?;
        if write {
            // The caller may write through the views until `put`: counted as a copy under way.
            for s in &segs {
                self.inner.slices[s.slice as usize].begin_copy_in(s.slot);
            }
        }
        Ok(Pinned {
            h: self,
            segs,
            start: (off % bs) as usize,
            len,
            write,
            off,
        })
    }

    pub(crate) fn too_many_blocks(&self, len: usize, n: usize) -> EngineError {
        EngineError::Io(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "get of {len} bytes spans {n} blocks; at most {} blocks may be pinned at once with this cache size",
                self.inner.chunk_blocks
            ),
        ))
    }

    /// Zero-copy read (Jericho's Get): pins the blocks holding `[off, off+len)` (clipped to
    /// the file's end) and returns views of the cache buffers.
    pub fn get(&self, off: u64, len: usize) -> Result<Pinned<'_>, EngineError> {
        self.pin_range(off, len, false)
    }
    /// Zero-copy write: pins the blocks (loading them so partial updates keep the rest);
    /// modify through [`Pinned::segments_mut`], then `put(true)`.
    pub fn get_mut(&self, off: u64, len: usize) -> Result<Pinned<'_>, EngineError> {
        self.pin_range(off, len, true)
    }
    /// Zero-copy reads of several small ranges at once: each `(offset, length)` must lie
    /// within one cache block, and at most [`max_get_bytes`](Self::max_get_bytes) / block
    /// size ranges may be pinned at once. All blocks are located first (their index lines
    /// fetched together, so the lookups of a batch overlap their memory misses instead of
    /// paying them one after another), then pinned; missing blocks are read concurrently.
    /// Ranges past the end of the file come back empty, ranges reaching past it are clipped.
    pub fn get_batch(&self, reqs: &[(u64, usize)]) -> Result<PinnedBatch<'_>, EngineError> {
        let inner = &self.inner;
        let bs = inner.bs as u64;
        let size = self.file.len();
        let mut views: SmallVec<[(u32, u32, u32); 64]> = SmallVec::with_capacity(reqs.len());
        let mut blocks: SmallVec<[u64; 64]> = SmallVec::new();
        for (i, &(off, len)) in reqs.iter().enumerate() {
            if off % bs + len as u64 > bs {
                return Err(EngineError::Io(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "get_batch range {i} (offset {off}, {len} bytes) of {} crosses a {bs}-byte block",
                        self.file.path.display()
                    ),
                )));
            }
            if off >= size || len == 0 {
                views.push((u32::MAX, 0, 0));
                continue;
            }
            let k = (len as u64).min(size - off) as u32;
            views.push((blocks.len() as u32, (off % bs) as u32, k));
            blocks.push(off / bs);
        }
        if blocks.len() > inner.chunk_blocks {
            return Err(self.too_many_blocks(blocks.len() * inner.bs, blocks.len()));
        }
        let mut segs = SmallVec::new();
        inner.acquire_into(
            &self.file,
            blocks.iter().copied(),
            blocks.len(),
            None,
            &mut segs,
        )?;
        Ok(PinnedBatch {
            h: self,
            segs,
            views,
        })
    }

    /// Most bytes a `get` may span (block-aligned).
    pub fn max_get_bytes(&self) -> usize {
        self.inner.chunk_blocks * self.inner.bs
    }

    /// Writes back the dirty blocks overlapping `[off, off+len)` and fdatasyncs the file.
    pub fn sync_range(&self, off: u64, len: u64) -> Result<(), EngineError> {
        if len == 0 {
            return Ok(());
        }
        let bs = self.inner.bs as u64;
        let r = self
            .inner
            .flush_range(&self.file, off / bs, (off + len - 1) / bs);
        r?;
        let fd = self.file.meta_fd();
        self.inner.backend.datasync(fd).map_err(|e| {
            EngineError::Io(io::Error::new(
                e.kind(),
                format!("fdatasync of {} failed: {e}", self.file.path.display()),
            ))
        })
    }

    /// Writes back every dirty block of the file, then fdatasync. Returns any write-back
    /// error since the last fsync; failed blocks stay dirty and are retried.
    pub fn fsync(&self) -> Result<(), EngineError> {
        Ok(self.inner.fsync(&self.file)?)
    }
}
