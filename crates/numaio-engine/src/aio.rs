//! The asynchronous API: `read`, `write` and `get` as futures next to the blocking calls.
//!
//! A future walks its blocks like the blocking path (lookup, pin, or take a free buffer and
//! insert it LOADING), submits its missing runs into the slices' I/O paths with a completion
//! callback instead of a blocked caller, and returns `Pending`. The callback (run by the
//! ring's reaper) ends the loads (the same `complete_load` as every other load) and wakes the
//! future's waker, so no thread sleeps per miss and one thread can keep any number of misses
//! in flight. Requests that find a block another request is loading register their waker on
//! the slot; requests that find no free buffer register it on the slice's free list.
//!
//! The futures are runtime-agnostic (std `Future` and `Waker` only) and cancellation safe:
//! whenever a future returns `Pending`, every load it inserted has been sent to the device,
//! so a future dropped at that point only unpins its blocks and the loads end on their own.
//! A write copies into the cache within one poll, so it either happens entirely or not at
//! all.
//!
//! Limits: reads copy on the polling thread (a `Router` is not consulted), and the middle
//! blocks of a write take free buffers like the blocking `pwrite` (which may wait for the
//! evictor); only the partial edge blocks, which must be read first, are awaited.

use crate::blockio::{complete_load, run_request, runs, Seg, Segs, Transfer};
use crate::error::EngineError;
use crate::ext::AccessCtx;
use crate::file::FileEntry;
use crate::handle::{FileHandle, Pinned};
use crate::index::EntryPin;
use crate::inner::Inner;
use crate::io::IoKind;
use crate::key::BlockKey;
use crate::slot::{ERROR, LOADING};
use crate::stats::SliceCounters;
use parking_lot::Mutex;
use smallvec::SmallVec;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

/// The loads one request issued: how many runs are still in flight, who to wake when the
/// last ends, and the first error.
#[derive(Default)]
struct LoadGroup {
    pending: AtomicUsize,
    waker: Mutex<Option<Waker>>,
    err: Mutex<Option<io::Error>>,
    /// The device refused O_DIRECT (EINVAL) and the file fell back to buffered I/O.
    refused_direct: AtomicBool,
}

impl LoadGroup {
    fn run_done(&self, r: io::Result<()>) {
        if let Err(e) = r {
            self.err.lock().get_or_insert(e);
        }
        if self.pending.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(w) = self.waker.lock().take() {
                w.wake();
            }
        }
    }
}

/// Pinning a run of blocks without blocking: the asynchronous twin of `acquire_into`
/// (reads only; whole-block writes are not pre-claimed).
struct Acquire {
    first: u64,
    n: usize,
    /// Blocks looked at so far in this attempt.
    walked: usize,
    segs: Segs,
    /// Inserted LOADING by us and not yet sent to the device.
    loads: SmallVec<[Transfer; 4]>,
    /// Loads sent in this attempt.
    group: Option<Arc<LoadGroup>>,
    /// Positions in `segs` of blocks another request was loading when we pinned them.
    others: SmallVec<[u32; 4]>,
    /// While waiting for a free buffer: the evictor's failure count when the wait began.
    alloc_since: Option<u64>,
    tries: u32,
}

impl Acquire {
    fn new(first: u64, n: usize) -> Self {
        Acquire {
            first,
            n,
            walked: 0,
            segs: Segs::new(),
            loads: SmallVec::new(),
            group: None,
            others: SmallVec::new(),
            alloc_since: None,
            tries: 0,
        }
    }

    /// Sends the inserted loads, one request per run, each ended by the I/O worker.
    fn submit(&mut self, inner: &Inner, f: &Arc<FileEntry>) {
        if self.loads.is_empty() {
            return;
        }
        let group = self.group.get_or_insert_with(Default::default).clone();
        let fd = f.fd();
        let runs = runs(&self.loads, inner.cfg.max_io_blocks);
        for run in runs.iter().cloned() {
            let run: Vec<Transfer> = self.loads[run].to_vec();
            let slice = inner.slices[run[0].0].clone();
            let req = run_request(&slice, IoKind::Read, fd, &run, inner.bs);
            let (file, ig, bs, g) = (
                f.clone(),
                inner.cfg.integrity.clone(),
                inner.bs,
                group.clone(),
            );
            let s2 = slice.clone();
            group.pending.fetch_add(1, Ordering::AcqRel);
            slice.submit_call(
                req,
                Box::new(move |r| {
                    if matches!(&r, Err(e) if e.raw_os_error() == Some(libc::EINVAL))
                        && file.direct()
                    {
                        file.fall_back_to_buffered();
                        g.refused_direct.store(true, Ordering::Release);
                    }
                    g.run_done(complete_load(&s2, bs, ig.as_deref(), &file, &run, r));
                }),
            );
        }
        inner.flush_runs(&self.loads, &runs);
        self.loads.clear();
    }

    /// Unpins everything (loads not yet sent are failed first, like the blocking `abort`)
    /// and starts over at the first block.
    fn reset(&mut self, inner: &Inner) {
        for &(si, _, slot) in &self.loads {
            inner.slices[si].finish_load(slot, false);
        }
        self.loads.clear();
        release(inner, &self.segs);
        self.segs.clear();
        self.others.clear();
        self.group = None;
        self.walked = 0;
        self.alloc_since = None;
    }

    fn poll(
        &mut self,
        inner: &Inner,
        f: &Arc<FileEntry>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<()>> {
        let ctx = AccessCtx::new(false);
        let hooks = &inner.cfg.hooks[..];
        loop {
            while self.walked < self.n {
                let b = self.first + self.walked as u64;
                let si = inner.slice_of(f.id, b, &ctx);
                let slice = &inner.slices[si];
                let key = BlockKey {
                    file: f.id,
                    block: b,
                };
                let (slot, word) = match slice.lookup_pin(&key) {
                    Some(found) => found,
                    None => {
                        let slot = match slice.try_alloc() {
                            Some(s) => s,
                            None => {
                                // Never wait while holding loads only we could send.
                                self.submit(inner, f);
                                let since = *self.alloc_since.get_or_insert_with(|| {
                                    SliceCounters::add(&slice.counters().stalled, 1);
                                    slice.writeback_failures()
                                });
                                // Nor while holding pins: any number of futures may wait at
                                // once, and between them they could pin the whole cache.
                                let restart = !self.segs.is_empty();
                                if restart {
                                    self.reset(inner);
                                    self.alloc_since = Some(since);
                                }
                                match slice.poll_alloc(cx.waker(), since) {
                                    Poll::Pending => return Poll::Pending,
                                    Poll::Ready(Err(e)) => {
                                        self.reset(inner);
                                        return Poll::Ready(Err(e));
                                    }
                                    Poll::Ready(Ok(s)) if restart => {
                                        slice.release_free(&[s]);
                                        continue;
                                    }
                                    Poll::Ready(Ok(s)) => s,
                                }
                            }
                        };
                        self.alloc_since = None;
                        match slice.insert_claimed(slot, key) {
                            Ok(()) => {
                                SliceCounters::add(&slice.counters().misses, 1);
                                self.loads.push((si, b, slot));
                                self.segs.push(Seg {
                                    slice: si as u16,
                                    fill: false,
                                    slot,
                                    pin: EntryPin::NONE,
                                });
                                for h in hooks {
                                    h.on_access(f.id, b, si, false, &ctx);
                                }
                                self.walked += 1;
                                continue;
                            }
                            Err(existing) => existing,
                        }
                    }
                };
                slice.counters().hits.add(1);
                slice.note_hit(slot);
                if word & LOADING != 0 {
                    SliceCounters::add(&slice.counters().clashed, 1);
                    self.others.push(self.segs.len() as u32);
                }
                self.segs.push(Seg {
                    slice: si as u16,
                    fill: false,
                    slot,
                    pin: EntryPin::NONE,
                });
                for h in hooks {
                    h.on_access(f.id, b, si, true, &ctx);
                }
                self.walked += 1;
            }
            self.submit(inner, f);
            if let Some(g) = &self.group {
                if g.pending.load(Ordering::Acquire) != 0 {
                    *g.waker.lock() = Some(cx.waker().clone());
                    // Re-checked after registering: the last run may have ended meanwhile.
                    if g.pending.load(Ordering::Acquire) != 0 {
                        return Poll::Pending;
                    }
                }
            }
            for &i in &self.others {
                let s = self.segs[i as usize];
                if inner.slices[s.slice as usize].register_load_waker(s.slot, cx.waker()) {
                    return Poll::Pending;
                }
            }
            // Everything has ended: collect the outcome.
            let own_err = self.group.as_ref().and_then(|g| {
                let e = g.err.lock().take()?;
                Some((e, g.refused_direct.load(Ordering::Acquire)))
            });
            let other_failed = self.others.iter().any(|&i| {
                let s = self.segs[i as usize];
                inner.slices[s.slice as usize].slot_word(s.slot) & ERROR != 0
            });
            match (own_err, other_failed) {
                (None, false) => return Poll::Ready(Ok(())),
                (Some((e, refused)), _) => {
                    self.reset(inner);
                    // O_DIRECT refused on the first I/O: retried once, buffered.
                    if !(refused && self.tries == 0) {
                        return Poll::Ready(Err(e));
                    }
                }
                (None, true) => {
                    self.reset(inner);
                    // A read that failed in another request (often a readahead) is retried
                    // here, so the error we report is our own.
                    if self.tries >= 2 {
                        return Poll::Ready(Err(io::Error::other(format!(
                            "read of {} failed (in another request)",
                            f.path.display()
                        ))));
                    }
                }
            }
            self.tries += 1;
        }
    }

    /// Hands the pinned blocks over (the caller now releases them).
    fn take(&mut self) -> Segs {
        self.group = None;
        self.others.clear();
        self.walked = 0;
        std::mem::take(&mut self.segs)
    }

    fn drop_with(&mut self, inner: &Inner) {
        if !self.segs.is_empty() || !self.loads.is_empty() {
            self.reset(inner);
        }
    }
}

/// Unpins `segs`; kicks the evictor of a slice whose free list has async waiters (an unpin
/// may be what lets it free a buffer).
fn release(inner: &Inner, segs: &[Seg]) {
    inner.release(segs);
    let mut last = usize::MAX;
    for s in segs {
        let si = s.slice as usize;
        if si != last && inner.slices[si].has_free_waiters() {
            inner.slices[si].wake_evictor();
        }
        last = si;
    }
}

fn blocks_of(inner: &Inner, off: u64, len: usize) -> (u64, usize) {
    let bs = inner.bs as u64;
    let fb = off / bs;
    let n = ((off + len as u64 - 1) / bs - fb + 1) as usize;
    (fb, n)
}

/// The future of [`FileHandle::read_into_async`]: the number of bytes read.
#[must_use = "futures do nothing unless polled"]
pub struct ReadIntoFuture<'a> {
    h: &'a FileHandle,
    buf: &'a mut [u8],
    off: u64,
    /// The bytes to read (clipped at end of file when the future starts) and done so far.
    len: usize,
    done: usize,
    op: Option<Acquire>,
}

impl Future for ReadIntoFuture<'_> {
    type Output = Result<usize, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let inner = &*this.h.inner;
        let f = &this.h.file;
        let bs = inner.bs as u64;
        if inner.gate.is_closed() {
            if let Some(op) = &mut this.op {
                op.drop_with(inner);
            }
            this.op = None;
            return Poll::Ready(Err(EngineError::Closed));
        }
        loop {
            if this.done >= this.len {
                return Poll::Ready(Ok(this.done));
            }
            let cur = this.off + this.done as u64;
            let op = this.op.get_or_insert_with(|| {
                let (fb, n) = blocks_of(inner, cur, this.len - this.done);
                Acquire::new(fb, n.min(inner.chunk_blocks))
            });
            match op.poll(inner, f, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.op = None;
                    return Poll::Ready(Err(EngineError::from(e)));
                }
                Poll::Ready(Ok(())) => {}
            }
            let segs = op.take();
            this.op = None;
            for (i, s) in segs.iter().enumerate() {
                let start = if i == 0 { (cur % bs) as usize } else { 0 };
                let k = (inner.bs - start).min(this.len - this.done);
                let src = inner.slices[s.slice as usize].buf_ptr(s.slot);
                // SAFETY: the slot is pinned until `release`; `start + k <= bs` and
                // `done + k <= len <= buf.len()`, so both ranges are in bounds.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        src.add(start),
                        this.buf.as_mut_ptr().add(this.done),
                        k,
                    )
                };
                this.done += k;
            }
            release(inner, &segs);
        }
    }
}

impl Drop for ReadIntoFuture<'_> {
    fn drop(&mut self) {
        if let Some(op) = &mut self.op {
            op.drop_with(&self.h.inner);
        }
    }
}

/// The future of [`FileHandle::read_async`]: the bytes read (fewer at end of file).
#[must_use = "futures do nothing unless polled"]
pub struct ReadFuture<'a> {
    h: &'a FileHandle,
    buf: Vec<u8>,
    off: u64,
    done: usize,
    op: Option<Acquire>,
}

impl Future for ReadFuture<'_> {
    type Output = Result<Vec<u8>, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let len = this.buf.len();
        let mut inner_fut = ReadIntoFuture {
            h: this.h,
            buf: &mut this.buf,
            off: this.off,
            len,
            done: this.done,
            op: this.op.take(),
        };
        let r = Pin::new(&mut inner_fut).poll(cx);
        this.done = inner_fut.done;
        this.op = inner_fut.op.take();
        drop(inner_fut);
        match r {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(n)) => {
                let mut v = std::mem::take(&mut this.buf);
                v.truncate(n);
                Poll::Ready(Ok(v))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
        }
    }
}

impl Drop for ReadFuture<'_> {
    fn drop(&mut self) {
        if let Some(op) = &mut self.op {
            op.drop_with(&self.h.inner);
        }
    }
}

/// The future of [`FileHandle::get_async`]: the pinned blocks.
#[must_use = "futures do nothing unless polled"]
pub struct GetFuture<'a> {
    h: &'a FileHandle,
    off: u64,
    len: usize,
    op: Option<Acquire>,
}

impl<'a> Future for GetFuture<'a> {
    type Output = Result<Pinned<'a>, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let h: &'a FileHandle = this.h;
        if h.inner.gate.is_closed() {
            if let Some(op) = &mut this.op {
                op.drop_with(&h.inner);
            }
            this.op = None;
            return Poll::Ready(Err(EngineError::Closed));
        }
        if this.len == 0 {
            return Poll::Ready(Ok(Pinned::from_segs(h, Segs::new(), this.off, 0)));
        }
        let op = match &mut this.op {
            Some(op) => op,
            None => {
                let (fb, n) = blocks_of(&h.inner, this.off, this.len);
                if n > h.inner.chunk_blocks {
                    return Poll::Ready(Err(h.too_many_blocks(this.off, this.len, n)));
                }
                this.op.insert(Acquire::new(fb, n))
            }
        };
        match op.poll(&h.inner, &h.file, cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Err(e)) => {
                this.op = None;
                Poll::Ready(Err(EngineError::from(e)))
            }
            Poll::Ready(Ok(())) => {
                let segs = op.take();
                this.op = None;
                Poll::Ready(Ok(Pinned::from_segs(h, segs, this.off, this.len)))
            }
        }
    }
}

impl Drop for GetFuture<'_> {
    fn drop(&mut self) {
        if let Some(op) = &mut self.op {
            op.drop_with(&self.h.inner);
        }
    }
}

/// The future of [`FileHandle::write_async`]: the number of bytes written into the cache.
#[must_use = "futures do nothing unless polled"]
pub struct WriteFuture<'a> {
    h: &'a FileHandle,
    buf: &'a [u8],
    off: u64,
    /// The partially covered first and last blocks, read (and pinned) before the copy.
    edges: SmallVec<[u64; 2]>,
    pinned: Segs,
    op: Option<Acquire>,
}

impl Future for WriteFuture<'_> {
    type Output = Result<usize, EngineError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let inner = &*this.h.inner;
        if inner.gate.is_closed() {
            if let Some(op) = &mut this.op {
                op.drop_with(inner);
            }
            this.op = None;
            release(inner, &this.pinned);
            this.pinned.clear();
            return Poll::Ready(Err(EngineError::Closed));
        }
        while let Some(&b) = this.edges.first() {
            let op = this.op.get_or_insert_with(|| Acquire::new(b, 1));
            match op.poll(inner, &this.h.file, cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(e)) => {
                    this.op = None;
                    release(inner, &this.pinned);
                    this.pinned.clear();
                    return Poll::Ready(Err(EngineError::from(e)));
                }
                Poll::Ready(Ok(())) => {}
            }
            this.pinned.extend(op.take());
            this.op = None;
            this.edges.remove(0);
        }
        // The edge blocks are pinned, so the copy below finds them cached: it happens in
        // this poll, entirely or (on error) not at all, and is never cut by a drop.
        let r = this.h.pwrite(this.buf, this.off);
        release(inner, &this.pinned);
        this.pinned.clear();
        Poll::Ready(r)
    }
}

impl Drop for WriteFuture<'_> {
    fn drop(&mut self) {
        if let Some(op) = &mut self.op {
            op.drop_with(&self.h.inner);
        }
        release(&self.h.inner, &self.pinned);
    }
}

impl FileHandle {
    /// Reads up to `buf.len()` bytes at `off` (fewer at end of file) without blocking the
    /// thread: misses are read by the I/O workers, whose completions wake the future.
    pub fn read_into_async<'a>(&'a self, buf: &'a mut [u8], off: u64) -> ReadIntoFuture<'a> {
        let len = (buf.len() as u64).min(self.len().saturating_sub(off)) as usize;
        ReadIntoFuture {
            h: self,
            buf,
            off,
            len,
            done: 0,
            op: None,
        }
    }

    /// Reads up to `len` bytes at `off` into a new buffer (shorter at end of file); see
    /// [`read_into_async`](Self::read_into_async).
    pub fn read_async(&self, off: u64, len: usize) -> ReadFuture<'_> {
        let len = (len as u64).min(self.len().saturating_sub(off)) as usize;
        ReadFuture {
            h: self,
            buf: vec![0u8; len],
            off,
            done: 0,
            op: None,
        }
    }

    /// Zero-copy read without blocking the thread: pins the blocks holding
    /// `[off, off+len)` (clipped at end of file) once they are loaded. At most
    /// [`max_get_bytes`](Self::max_get_bytes) may be pinned at once.
    pub fn get_async(&self, off: u64, len: usize) -> GetFuture<'_> {
        let len = (len as u64).min(self.len().saturating_sub(off)) as usize;
        GetFuture {
            h: self,
            off,
            len,
            op: None,
        }
    }

    /// Writes `buf` at `off` into the cache (write-back later, or at fsync). The partially
    /// covered first and last blocks are read without blocking the thread; the copy then
    /// happens in one poll, so a dropped future has written nothing or everything.
    pub fn write_async<'a>(&'a self, buf: &'a [u8], off: u64) -> WriteFuture<'a> {
        let bs = self.inner.bs as u64;
        let mut edges = SmallVec::new();
        // A range past the file's limit reads nothing first: the copy refuses it.
        if let (false, Some(end)) = (buf.is_empty(), off.checked_add(buf.len() as u64)) {
            let (fb, lb) = (off / bs, (end - 1) / bs);
            let partial = |b: u64| !(off <= b * bs && (b + 1) * bs <= end);
            if partial(fb) {
                edges.push(fb);
            }
            if lb != fb && partial(lb) {
                edges.push(lb);
            }
        }
        WriteFuture {
            h: self,
            buf,
            off,
            edges,
            pinned: Segs::new(),
            op: None,
        }
    }
}
