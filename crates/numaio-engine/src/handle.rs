//! Files opened through the engine: the copying `pread`/`pwrite` paths, zero-copy
//! `get`/`put` ([`Pinned`]), `sync_range` and `fsync`.

use crate::blockio::{Seg, Segs};
use crate::error::EngineError;
use crate::file::FileEntry;
use crate::inner::Inner;
use crate::key::FileId;
use smallvec::SmallVec;
use std::io;
use std::path::Path;
use std::sync::Arc;

/// A file opened through the engine. Handles are cheap to clone and may be used from any
/// thread; after the engine is closed every call fails with [`EngineError::Closed`].
#[derive(Clone)]
pub struct FileHandle {
    pub(crate) inner: Arc<Inner>,
    pub(crate) file: Arc<FileEntry>,
    /// Whether this handle was opened for writing (the file may be open read-write through
    /// another handle).
    pub(crate) write: bool,
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
            if self.cfg.readahead {
                self.readahead(f, fb..fb + n as u64);
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
/// Release with [`Pinned::put`] or by dropping it.
pub struct Pinned<'a> {
    h: &'a FileHandle,
    segs: Segs,
    /// Offset of the range inside the first block, and the range length.
    start: usize,
    len: usize,
}

/// The views of `len` bytes from `start` in the first of `segs`, one per block.
fn views<'s>(
    inner: &'s Inner,
    segs: &'s [Seg],
    start: usize,
    len: usize,
) -> impl Iterator<Item = (Seg, usize, usize)> + 's {
    let bs = inner.bs;
    let mut left = len;
    segs.iter().enumerate().map(move |(i, s)| {
        let st = if i == 0 { start } else { 0 };
        let k = (bs - st).min(left);
        left -= k;
        (*s, st, k)
    })
}

/// The bytes of [`views`] as shared slices of the cache buffers.
///
/// # Safety
/// Every block of `segs` must stay pinned for `'s`, and nothing may write to the range
/// through another view meanwhile.
unsafe fn read_views<'s>(
    inner: &'s Inner,
    segs: &'s [Seg],
    start: usize,
    len: usize,
) -> impl Iterator<Item = &'s [u8]> + 's {
    views(inner, segs, start, len).map(move |(s, st, k)| {
        let p = inner.slices[s.slice as usize].buf_ptr(s.slot);
        // SAFETY: the slot is pinned for `'s` (the caller's promise); `st + k <= bs`.
        unsafe { std::slice::from_raw_parts(p.add(st), k) }
    })
}

impl<'a> Pinned<'a> {
    /// Pinned blocks handed over by a request that pinned them.
    pub(crate) fn from_segs(h: &'a FileHandle, segs: Segs, off: u64, len: usize) -> Self {
        let bs = h.inner.bs as u64;
        Pinned {
            h,
            segs,
            start: (off % bs) as usize,
            len,
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
        // SAFETY: `self` holds the pins of `segs` for as long as it is borrowed.
        unsafe { read_views(&self.h.inner, &self.segs, self.start, self.len) }
    }
    /// The requested bytes as one slice, if they lie in one cache block (a range within a
    /// block always does); `None` if they span several.
    pub fn as_slice(&self) -> Option<&[u8]> {
        match self.segs.len() {
            0 => Some(&[]),
            1 => self.segments().next(),
            _ => None,
        }
    }
    /// Copies the bytes out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }
    /// Releases the buffers (the same as dropping the view).
    pub fn put(self) {}
}

impl std::fmt::Debug for Pinned<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pinned")
            .field("path", &self.h.file.path)
            .field("len", &self.len)
            .field("blocks", &self.segs.len())
            .finish()
    }
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.h.inner.release(&self.segs);
    }
}

/// Blocks pinned by [`FileHandle::get_mut`] for writing in place.
///
/// Changes made through [`segments_mut`](Self::segments_mut) take effect only with
/// [`commit`](Self::commit). Dropping the view without committing (or a panic while it is
/// held) discards them: the bytes of the range are restored as they were when it was pinned,
/// and the cache and the device keep agreeing. Other readers of the same blocks may see the
/// bytes in between, as with any zero-copy buffer.
#[must_use = "changes through a PinnedMut are discarded unless it is committed"]
pub struct PinnedMut<'a> {
    h: &'a FileHandle,
    segs: Segs,
    start: usize,
    len: usize,
    off: u64,
    /// The range's bytes when it was pinned, restored by a discard.
    saved: Vec<u8>,
    /// Per block when pinned: whether it was dirty, and its dirty generation. A discard marks
    /// a block dirty again if a write-back could have sent it the changes meanwhile.
    before: SmallVec<[(bool, u32); 4]>,
}

impl PinnedMut<'_> {
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes of the range (as changed so far), one slice per cache block.
    pub fn segments(&self) -> impl Iterator<Item = &[u8]> + '_ {
        // SAFETY: `self` holds the pins of `segs` for as long as it is borrowed.
        unsafe { read_views(&self.h.inner, &self.segs, self.start, self.len) }
    }
    /// Mutable views of the range, one per cache block.
    pub fn segments_mut(&mut self) -> impl Iterator<Item = &mut [u8]> + '_ {
        let inner = &*self.h.inner;
        views(inner, &self.segs, self.start, self.len).map(move |(s, st, k)| {
            let p = inner.slices[s.slice as usize].buf_ptr(s.slot);
            // SAFETY: the slot is pinned for the lifetime of `self`, which is borrowed
            // mutably, and the views are disjoint; `st + k <= bs`.
            unsafe { std::slice::from_raw_parts_mut(p.add(st), k) }
        })
    }
    /// Copies the bytes out.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len);
        for s in self.segments() {
            v.extend_from_slice(s);
        }
        v
    }
    /// Makes the changes part of the file (written back later, or at `fsync`) and releases
    /// the buffers. After the engine was closed the changes are discarded and this fails
    /// with [`EngineError::Closed`].
    pub fn commit(mut self) -> Result<(), EngineError> {
        let h = self.h;
        let Ok(_pass) = h.inner.enter() else {
            self.discard_now();
            return Err(EngineError::Closed);
        };
        for s in &self.segs {
            h.inner.slices[s.slice as usize].end_copy_in(s.slot, true);
        }
        if !self.segs.is_empty() {
            h.file.grow_to(self.off + self.len as u64);
        }
        h.inner.release(&self.segs);
        self.segs.clear();
        Ok(())
    }
    /// Restores the range as it was when pinned and releases the buffers (the same as
    /// dropping the view).
    pub fn discard(mut self) {
        self.discard_now();
    }

    fn discard_now(&mut self) {
        if self.segs.is_empty() {
            return;
        }
        let inner = &*self.h.inner;
        let mut done = 0;
        for (i, (s, st, k)) in views(inner, &self.segs, self.start, self.len).enumerate() {
            let slice = &inner.slices[s.slice as usize];
            // SAFETY: the slot is pinned until `release` below; `st + k <= bs` and
            // `done + k <= len == saved.len()`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.saved.as_ptr().add(done),
                    slice.buf_ptr(s.slot).add(st),
                    k,
                )
            };
            done += k;
            let (was_dirty, gen) = self.before[i];
            let (dirty, now) = dirty_state(slice.slot_word(s.slot));
            slice.end_copy_in(s.slot, was_dirty || dirty || now != gen);
        }
        inner.release(&self.segs);
        self.segs.clear();
    }
}

/// Whether a slot's state word says dirty, and its dirty generation.
fn dirty_state(word: u64) -> (bool, u32) {
    (
        word & crate::slot::DIRTY != 0,
        (word >> crate::slot::GEN_SHIFT) as u32,
    )
}

impl std::fmt::Debug for PinnedMut<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PinnedMut")
            .field("path", &self.h.file.path)
            .field("offset", &self.off)
            .field("len", &self.len)
            .field("blocks", &self.segs.len())
            .finish()
    }
}

impl Drop for PinnedMut<'_> {
    fn drop(&mut self) {
        self.discard_now();
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
    /// Whether this handle may write (it was opened with `write`).
    pub fn writable(&self) -> bool {
        self.write
    }
    /// The largest size writes may make this file.
    pub fn max_len(&self) -> u64 {
        self.file.max_len
    }
    /// Whether this file's I/O uses O_DIRECT.
    pub fn direct(&self) -> bool {
        self.file.direct()
    }
    pub fn fell_back_to_buffered(&self) -> bool {
        self.file.fell_back_to_buffered()
    }

    /// Refuses a write through a read-only handle, or one reaching past the file's limit.
    fn check_write(&self, off: u64, len: usize) -> Result<(), EngineError> {
        if !self.write {
            return Err(EngineError::ReadOnly {
                path: self.file.path.clone(),
            });
        }
        let max = self.file.max_len;
        match off.checked_add(len as u64) {
            Some(end) if end <= max => Ok(()),
            _ => Err(EngineError::TooLarge {
                path: self.file.path.clone(),
                offset: off,
                len: len as u64,
                max,
            }),
        }
    }

    fn invalid_range(&self, offset: u64, len: usize, reason: String) -> EngineError {
        EngineError::InvalidRange {
            path: self.file.path.clone(),
            offset,
            len: len as u64,
            reason,
        }
    }

    /// Copies up to `buf.len()` bytes at `off` (fewer at end of file).
    pub fn pread(&self, buf: &mut [u8], off: u64) -> Result<usize, EngineError> {
        self.inner.check_open()?;
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
        self.inner.check_open()?;
        let inner = &self.inner;
        let bs = inner.bs as u64;
        let size = self.file.len();
        let mut out = vec![0usize; reqs.len()];
        for (i, (off, buf)) in reqs.iter().enumerate() {
            if *off % bs + buf.len() as u64 > bs {
                return Err(self.invalid_range(
                    *off,
                    buf.len(),
                    format!("range {i} of a pread_batch crosses a {bs}-byte block"),
                ));
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

    /// Writes `buf` at `off` into the cache (write-back later, or at fsync). Fails with
    /// [`EngineError::ReadOnly`] on a read-only handle and [`EngineError::TooLarge`] past
    /// [`max_len`](Self::max_len), writing nothing.
    pub fn pwrite(&self, buf: &[u8], off: u64) -> Result<usize, EngineError> {
        let _pass = self.inner.enter()?;
        self.check_write(off, buf.len())?;
        if let Some(router) = &self.inner.cfg.router {
            return self
                .inner
                .routed(&**router, &self.file, buf.len(), off, true, |r, o| {
                    Ok(self.inner.pwrite(&self.file, &buf[r], o)?)
                });
        }
        Ok(self.inner.pwrite(&self.file, buf, off)?)
    }

    /// The blocks of `[off, off+len)`, refused if more than may be pinned at once.
    fn pin_blocks(&self, off: u64, len: usize) -> Result<Segs, EngineError> {
        let bs = self.inner.bs as u64;
        let fb = off / bs;
        let n = ((off + len as u64 - 1) / bs - fb + 1) as usize;
        if n > self.inner.chunk_blocks {
            return Err(self.too_many_blocks(off, len, n));
        }
        Ok(self.inner.acquire(&self.file, fb, n, None)?)
    }

    pub(crate) fn too_many_blocks(&self, off: u64, len: usize, n: usize) -> EngineError {
        self.invalid_range(
            off,
            len,
            format!(
                "it spans {n} blocks; at most {} blocks may be pinned at once with this cache size",
                self.inner.chunk_blocks
            ),
        )
    }

    /// Zero-copy read (Jericho's Get): pins the blocks holding `[off, off+len)` (clipped to
    /// the file's end) and returns views of the cache buffers. At most
    /// [`max_get_bytes`](Self::max_get_bytes) may be pinned at once.
    pub fn get(&self, off: u64, len: usize) -> Result<Pinned<'_>, EngineError> {
        self.inner.check_open()?;
        let len = (len as u64).min(self.len().saturating_sub(off)) as usize;
        let segs = if len == 0 {
            Segs::new()
        } else {
            self.pin_blocks(off, len)?
        };
        Ok(Pinned::from_segs(self, segs, off, len))
    }

    /// Zero-copy write: pins the blocks holding `[off, off+len)` (loading them so partial
    /// updates keep the rest) for changes in place through [`PinnedMut::segments_mut`];
    /// they take effect with [`PinnedMut::commit`] and are discarded otherwise. Checked
    /// like [`pwrite`](Self::pwrite).
    pub fn get_mut(&self, off: u64, len: usize) -> Result<PinnedMut<'_>, EngineError> {
        let _pass = self.inner.enter()?;
        self.check_write(off, len)?;
        let segs = if len == 0 {
            Segs::new()
        } else {
            self.pin_blocks(off, len)?
        };
        let mut saved = Vec::with_capacity(len);
        let mut before = SmallVec::new();
        let bs = self.inner.bs as u64;
        for (s, st, k) in views(&self.inner, &segs, (off % bs) as usize, len) {
            let slice = &self.inner.slices[s.slice as usize];
            // Counted as a copy under way until commit or discard, so a write-back that
            // overlaps the changes keeps no checksum of them.
            slice.begin_copy_in(s.slot);
            before.push(dirty_state(slice.slot_word(s.slot)));
            // SAFETY: the slot is pinned; `st + k <= bs`.
            saved.extend_from_slice(unsafe {
                std::slice::from_raw_parts(slice.buf_ptr(s.slot).add(st), k)
            });
        }
        Ok(PinnedMut {
            h: self,
            segs,
            start: (off % bs) as usize,
            len,
            off,
            saved,
            before,
        })
    }

    /// Zero-copy reads of several small ranges at once: each `(offset, length)` must lie
    /// within one cache block, and at most [`max_get_bytes`](Self::max_get_bytes) / block
    /// size ranges may be pinned at once. All blocks are located first (their index lines
    /// fetched together, so the lookups of a batch overlap their memory misses instead of
    /// paying them one after another), then pinned; missing blocks are read concurrently.
    /// Ranges past the end of the file come back empty, ranges reaching past it are clipped.
    pub fn get_batch(&self, reqs: &[(u64, usize)]) -> Result<PinnedBatch<'_>, EngineError> {
        self.inner.check_open()?;
        let inner = &self.inner;
        let bs = inner.bs as u64;
        let size = self.file.len();
        let mut views: SmallVec<[(u32, u32, u32); 64]> = SmallVec::with_capacity(reqs.len());
        let mut blocks: SmallVec<[u64; 64]> = SmallVec::new();
        for (i, &(off, len)) in reqs.iter().enumerate() {
            if off % bs + len as u64 > bs {
                return Err(self.invalid_range(
                    off,
                    len,
                    format!("range {i} of a get_batch crosses a {bs}-byte block"),
                ));
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
            return Err(self.too_many_blocks(0, blocks.len() * inner.bs, blocks.len()));
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
        let _pass = self.inner.enter()?;
        if len == 0 {
            return Ok(());
        }
        let bs = self.inner.bs as u64;
        let last = off.saturating_add(len - 1) / bs;
        self.inner.flush_range(&self.file, off / bs, last)?;
        let fd = self.file.meta_fd();
        self.inner
            .backend
            .datasync(fd)
            .map_err(|e| EngineError::os("fdatasync of", &self.file.path, e))
    }

    /// Writes back every dirty block of the file, then fdatasync. Returns any write-back
    /// error since the last fsync; failed blocks stay dirty and are retried.
    pub fn fsync(&self) -> Result<(), EngineError> {
        let _pass = self.inner.enter()?;
        Ok(self.inner.fsync(&self.file)?)
    }
}

// A panic in a hook, a router or the caller's own code while a request holds blocks
// releases them on the way out (every pin and load is held by a guard), so a handle stays
// usable after `catch_unwind`.
impl std::panic::UnwindSafe for FileHandle {}
impl std::panic::RefUnwindSafe for FileHandle {}

impl std::fmt::Debug for FileHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileHandle")
            .field("path", &self.file.path)
            .field("id", &self.file.id)
            .field("writable", &self.write)
            .field("len", &self.file.len())
            .finish()
    }
}
