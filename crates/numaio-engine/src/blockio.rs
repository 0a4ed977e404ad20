//! The one block-I/O path: pinning blocks (hits, misses, clashes), reading missing blocks
//! in runs, finishing loads (demand and readahead alike), and writing runs back.
//!
//! Deadlock freedom (no hold-and-wait): a request never blocks while it holds a slot that
//! others may wait for and that only it can complete. Reads it inserted are issued before it
//! waits (on a clashing block or for a free buffer), so they complete on their own. What
//! remains held are the LOADING "fill" slots of a whole-block write, which the caller ends
//! after the copy; writes acquire their blocks in ascending order and wait for a clashing
//! block as soon as they meet it, so a writer only ever waits for a block above every fill
//! slot it holds and waits cannot form a cycle.

use crate::error::{EngineError, ReadFailed};
use crate::ext::{AccessCtx, BlockIntegrity};
use crate::file::FileEntry;
use crate::index::EntryPin;
use crate::inner::Inner;
use crate::io::{IoKind, IoRequest, Pending};
use crate::key::{BlockKey, SlotId};
use crate::run_lookup::{HookRuns, Located, Plan};
use crate::slice::Slice;
use crate::slot::LOADING;
use crate::stats::SliceCounters;
use smallvec::SmallVec;
use std::io;
use std::ops::Range;

/// One pinned block of a request.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Seg {
    pub slice: u16,
    /// The slot was inserted for a full-block overwrite: the caller fills it, then ends the load.
    pub fill: bool,
    pub slot: SlotId,
    /// Where the pin is held: an index entry, or `NONE` for the slot's word.
    pub pin: EntryPin,
}

pub(crate) type Segs = SmallVec<[Seg; 4]>;

/// What a request holds while it pins blocks: its pins and the loads it has not sent yet.
/// Unless kept, dropping it fails those loads and releases the pins, so no way out of the
/// request (an error, a panic in a hook) can leave a block pinned or loading for good.
struct Held<'a, A: smallvec::Array<Item = Seg>> {
    inner: &'a Inner,
    segs: &'a mut SmallVec<A>,
    loads: SmallVec<[Transfer; 4]>,
    keep: bool,
}

impl<A: smallvec::Array<Item = Seg>> Drop for Held<'_, A> {
    fn drop(&mut self) {
        if !self.keep {
            self.inner.abort(self.segs, &self.loads);
            self.segs.clear();
        }
    }
}

/// One pin, dropped unless forgotten.
struct UnpinOnDrop<'a> {
    slice: &'a Slice,
    slot: SlotId,
    pin: EntryPin,
}

impl Drop for UnpinOnDrop<'_> {
    fn drop(&mut self) {
        self.slice.unpin_hit(self.slot, self.pin);
    }
}

/// A block to move between the device and a slot: (slice, block number, slot).
pub(crate) type Transfer = (usize, u64, SlotId);

/// Splits `items` into runs of consecutive blocks of one slice, at most `max` blocks each:
/// one device request per run.
pub(crate) fn runs(items: &[Transfer], max: usize) -> Vec<Range<usize>> {
    let max = max.max(1);
    let mut out: Vec<Range<usize>> = Vec::new();
    for (i, t) in items.iter().enumerate() {
        match out.last_mut() {
            Some(r)
                if items[r.start].0 == t.0
                    && items[r.start].1 + (r.end - r.start) as u64 == t.1
                    && r.end - r.start < max =>
            {
                r.end = i + 1
            }
            _ => out.push(i..i + 1),
        }
    }
    out
}

/// The request for one run: one iovec per stretch of buffers adjacent in memory (slots
/// handed out in order often are), so the device sees few, large segments.
pub(crate) fn run_request(
    slice: &Slice,
    kind: IoKind,
    fd: i32,
    run: &[Transfer],
    bs: usize,
) -> IoRequest {
    let mut iovecs: Vec<libc::iovec> = Vec::with_capacity(1);
    for &(_, _, slot) in run {
        let p = slice.buf_ptr(slot);
        if let Some(last) = iovecs.last_mut() {
            if (last.iov_base as usize) + last.iov_len == p as usize {
                last.iov_len += bs;
                continue;
            }
        }
        iovecs.push(libc::iovec {
            iov_base: p as *mut _,
            iov_len: bs,
        });
    }
    IoRequest::new(kind, fd, run[0].1 * bs as u64, iovecs)
}

impl Inner {
    #[inline]
    pub(crate) fn slice_of(&self, file: crate::key::FileId, block: u64, ctx: &AccessCtx) -> usize {
        if self.slices.len() == 1 {
            return 0;
        }
        self.placement
            .slice_for(file, block, ctx)
            .min(self.slices.len() - 1)
    }

    pub(crate) fn release(&self, segs: &[Seg]) {
        for s in segs {
            self.slices[s.slice as usize].unpin_hit(s.slot, s.pin);
        }
    }

    /// Pins blocks `first..first+n` of `f`, loading the ones that are missing.
    /// With `write_range = Some((off, len))`, blocks entirely covered are not read from the
    /// device: they come back with `fill = true` and the caller must end their load.
    pub(crate) fn acquire(
        &self,
        f: &FileEntry,
        first: u64,
        n: usize,
        write_range: Option<(u64, u64)>,
    ) -> io::Result<Segs> {
        let mut segs = Segs::new();
        self.acquire_into(f, first..first + n as u64, n, write_range, &mut segs)?;
        Ok(segs)
    }

    /// Pins the listed blocks (any order, duplicates allowed) into `segs` (which must be
    /// empty; it is left empty on error); all missing blocks are read at once, so a list of
    /// scattered blocks becomes one batch of concurrent reads. Callers pass a `SmallVec`
    /// sized for their largest request so a hit allocates nothing.
    pub(crate) fn acquire_into<A: smallvec::Array<Item = Seg>>(
        &self,
        f: &FileEntry,
        blocks: impl Iterator<Item = u64> + Clone,
        n: usize,
        write_range: Option<(u64, u64)>,
        segs: &mut SmallVec<A>,
    ) -> io::Result<()> {
        if n == 1 {
            if let Some(block) = blocks.clone().next() {
                if self.hit_one(f, block, write_range.is_some(), segs) {
                    return Ok(());
                }
            }
        }
        // A read that failed in *another* request (often a readahead) is retried here: the
        // failed slot is unlinked, so the retry issues its own read and reports its own error.
        let mut tries = 0;
        loop {
            match self.acquire_once(f, blocks.clone(), n, write_range, segs) {
                Ok(()) => return Ok(()),
                Err((e, other)) => {
                    tries += 1;
                    if !other || tries >= 3 {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// A one-block request that hits a loaded block: the lookup, the pin, the count, and
    /// nothing else (no plan of blocks, no run bookkeeping), so a single 4 KiB hit costs no
    /// more than before runs were resolved once. Returns false, holding nothing, when the
    /// block is missing or still loading: the general path then handles it.
    #[inline(always)]
    fn hit_one<A: smallvec::Array<Item = Seg>>(
        &self,
        f: &FileEntry,
        block: u64,
        write: bool,
        segs: &mut SmallVec<A>,
    ) -> bool {
        let ctx = AccessCtx::new(write);
        let si = self.slice_of(f.id, block, &ctx);
        let slice = &self.slices[si];
        let Some((slot, word, pin)) = slice.lookup_hit(&BlockKey { file: f.id, block }) else {
            return false;
        };
        if word & LOADING != 0 {
            // Waiting for the load (and counting the clash) is the general path's job.
            slice.unpin_hit(slot, pin);
            return false;
        }
        slice.counters().hits.add(1);
        if !self.cfg.hooks.is_empty() {
            // A panicking hook must not leave the block pinned.
            let unpin = UnpinOnDrop { slice, slot, pin };
            for h in &self.cfg.hooks {
                h.on_run(f.id, block, 1, si, true, &ctx);
            }
            std::mem::forget(unpin);
        }
        segs.clear();
        segs.push(Seg {
            slice: si as u16,
            fill: false,
            slot,
            pin,
        });
        true
    }

    /// One attempt of [`acquire_into`](Self::acquire_into); see the module doc for why
    /// it cannot deadlock. The flag in the error tells a failure seen in another request.
    ///
    /// The hit path is the lookup, the pin and the policy's note only: every block's slice
    /// and index position are resolved (and prefetched) before the first lookup, so a run's
    /// lookups overlap their cache misses; hits are counted once per request and slice (on
    /// the thread's own counter stripe), and the hooks hear of runs of blocks, not blocks.
    /// Out of line: its plan of up to 256 blocks stays off the stack of a one-block hit.
    #[inline(never)]
    fn acquire_once<A: smallvec::Array<Item = Seg>>(
        &self,
        f: &FileEntry,
        blocks: impl Iterator<Item = u64> + Clone,
        n: usize,
        write_range: Option<(u64, u64)>,
        segs: &mut SmallVec<A>,
    ) -> Result<(), (io::Error, bool)> {
        let bs = self.bs as u64;
        let ctx = AccessCtx::new(write_range.is_some());
        let mut hook_runs = HookRuns::new(&self.cfg.hooks, f.id, &ctx);
        segs.clear();
        segs.reserve(n);
        let mut plan = Plan::new();
        self.locate_blocks(f, blocks, n, &ctx, &mut plan);
        // Pins and unsent loads are given back by this guard on every way out that does not
        // hand them to the caller, a panicking hook included.
        let mut held = Held {
            inner: self,
            segs,
            loads: SmallVec::new(),
            keep: false,
        };
        let mut err: Option<(io::Error, bool)> = None;
        // Hits of the current slice not yet added to its counter.
        let mut hits: (usize, u64) = (0, 0);
        for loc in &plan {
            let (b, si) = (loc.block, loc.slice as usize);
            let slice = &self.slices[si];
            let key = BlockKey {
                file: f.id,
                block: b,
            };
            let found = if loc.at == Located::UNLOCATED {
                slice.lookup_hit(&key)
            } else {
                slice.lookup_hit_at(loc.at as usize, &key)
            };
            let (slot, word, pin) = match found {
                Some(found) => found,
                None => {
                    let slot = match slice.try_alloc() {
                        Some(s) => s,
                        None => {
                            // About to stall: let our pending reads go first.
                            if let Err(e) = self.load(f, &held.loads) {
                                held.loads.clear();
                                err = Some((e, false));
                                break;
                            }
                            held.loads.clear();
                            match slice.alloc() {
                                Ok(s) => s,
                                Err(e) => {
                                    err = Some((e, false));
                                    break;
                                }
                            }
                        }
                    };
                    match slice.insert_claimed(slot, key) {
                        Ok(()) => {
                            SliceCounters::add(&slice.counters().misses, 1);
                            let full = write_range.is_some_and(|(off, len)| {
                                off <= b * bs && (b + 1) * bs <= off + len
                            });
                            if !full {
                                held.loads.push((si, b, slot));
                            }
                            held.segs.push(Seg {
                                slice: si as u16,
                                fill: full,
                                slot,
                                pin: EntryPin::NONE,
                            });
                            hook_runs.note(b, si, false);
                            continue;
                        }
                        Err((existing, word)) => {
                            slice.note_hit(existing);
                            (existing, word, EntryPin::NONE)
                        }
                    }
                }
            };
            if hits.0 != si && hits.1 > 0 {
                self.slices[hits.0].counters().hits.add(hits.1);
                hits.1 = 0;
            }
            hits = (si, hits.1 + 1);
            held.segs.push(Seg {
                slice: si as u16,
                fill: false,
                slot,
                pin,
            });
            hook_runs.note(b, si, true);
            if word & LOADING != 0 {
                SliceCounters::add(&slice.counters().clashed, 1);
                if let Err(e) = self.load(f, &held.loads) {
                    held.loads.clear();
                    err = Some((e, false));
                    break;
                }
                held.loads.clear();
                match slice.wait_loaded(slot) {
                    Ok(true) => {}
                    Ok(false) => {
                        err = Some((
                            io::Error::other(format!(
                                "read of {} failed (in another request)",
                                f.path.display()
                            )),
                            true,
                        ));
                        break;
                    }
                    Err(e) => {
                        err = Some((e, false));
                        break;
                    }
                }
            }
        }
        if hits.1 > 0 {
            self.slices[hits.0].counters().hits.add(hits.1);
        }
        hook_runs.flush();
        if err.is_none() && !held.loads.is_empty() {
            if let Err(e) = self.load(f, &held.loads) {
                err = Some((e, false));
            }
            held.loads.clear();
        }
        if let Some(e) = err {
            // Reads never issued and fill slots never exposed with data: `held` fails them.
            return Err(e);
        }
        held.keep = true;
        Ok(())
    }

    /// Fails the loads never sent and the fill slots never exposed with data, and unpins.
    fn abort(&self, segs: &[Seg], loads: &[Transfer]) {
        for &(si, _, slot) in loads {
            self.slices[si].finish_load(slot, false);
        }
        for s in segs.iter().filter(|s| s.fill) {
            self.slices[s.slice as usize].finish_load(s.slot, false);
        }
        self.release(segs);
    }

    /// Reads the missing blocks, one vectored read per run, all runs in flight at once.
    fn load(&self, f: &FileEntry, loads: &[Transfer]) -> io::Result<()> {
        if loads.is_empty() {
            return Ok(());
        }
        let runs = runs(loads, self.cfg.max_io_blocks);
        let results = self.io_runs(f, IoKind::Read, loads, &runs)?;
        let mut first_err = None;
        for (run, r) in runs.into_iter().zip(results) {
            let run = &loads[run];
            let slice = &self.slices[run[0].0];
            let ig = self.cfg.integrity.as_deref();
            if let Err(e) = complete_load(slice, self.bs, ig, f, run, r) {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }

    /// Issues one vectored request per run (all runs in flight at once), with a one-time
    /// fallback to buffered I/O if O_DIRECT is refused (EINVAL).
    pub(crate) fn io_runs(
        &self,
        f: &FileEntry,
        kind: IoKind,
        items: &[Transfer],
        runs: &[Range<usize>],
    ) -> io::Result<Vec<io::Result<usize>>> {
        let mut attempt = 0;
        loop {
            let fd = f.fd();
            let mut results: Vec<Option<io::Result<usize>>> =
                (0..runs.len()).map(|_| None).collect();
            let mut pending: std::collections::VecDeque<(usize, Pending)> = Default::default();
            let mut queued = Ok(());
            'runs: for (k, run) in runs.iter().enumerate() {
                let run = &items[run.clone()];
                let slice = &self.slices[run[0].0];
                let mut req = run_request(slice, kind, fd, run, self.bs);
                loop {
                    let r = if pending.is_empty() {
                        slice.submit(req).map(Ok)
                    } else {
                        slice.try_submit(req)
                    };
                    match r {
                        Ok(Ok(p)) => {
                            pending.push_back((k, p));
                            break;
                        }
                        // The queue is full: never wait for room while holding requests of
                        // our own (their slots free up only when we wait for them), so wait
                        // for the oldest one first.
                        Ok(Err(back)) => {
                            req = back;
                            self.flush_runs(items, runs);
                            if let Some((j, p)) = pending.pop_front() {
                                results[j] = Some(p.wait());
                            }
                        }
                        Err(e) => {
                            queued = Err(e);
                            break 'runs;
                        }
                    }
                }
            }
            // All runs enter the kernel together: one system call per slice, not per run.
            self.flush_runs(items, runs);
            // Requests already queued are waited for even on error: their buffers are ours
            // again only once the device is done with them.
            for (j, p) in pending {
                results[j] = Some(p.wait());
            }
            // Runs that never reached the queue fail with its error, so that every caller ends
            // every load it owns (a LOADING slot left behind would stall its readers).
            let results: Vec<io::Result<usize>> = results
                .into_iter()
                .map(|r| {
                    r.unwrap_or_else(|| {
                        Err(match &queued {
                            Err(e) => crate::error::clone_io(e),
                            Ok(()) => io::Error::other("request not submitted"),
                        })
                    })
                })
                .collect();
            let einval = results
                .iter()
                .any(|r| matches!(r, Err(e) if e.raw_os_error() == Some(libc::EINVAL)));
            if einval && attempt == 0 && f.direct() {
                f.fall_back_to_buffered();
                attempt += 1;
                continue;
            }
            return Ok(results);
        }
    }

    /// Hands the queued requests of the slices of `runs` to the device.
    pub(crate) fn flush_runs(&self, items: &[Transfer], runs: &[Range<usize>]) {
        let mut last = usize::MAX;
        for run in runs {
            let si = items[run.start].0;
            if si != last {
                self.slices[si].flush_io();
                last = si;
            }
        }
    }

    /// Sequential reads: the read of `blocks` continues a stream, so keep up to two chunks
    /// read ahead of it (`numaio_sys::readahead`), asynchronously (the I/O worker ends the
    /// loads). Never stalls: stops at the first busy slot or full queue.
    pub(crate) fn readahead(&self, f: &FileEntry, blocks: Range<u64>) {
        let window = 2 * self.chunk_blocks as u64;
        let file_blocks = f.len().div_ceil(self.bs as u64);
        let Some(ahead) = f
            .readahead
            .advance(blocks.start, blocks.end, window, file_blocks)
        else {
            return;
        };
        let (start, end) = (ahead.start, ahead.end);
        let ctx = AccessCtx::new(false);
        let mut loads: Vec<Transfer> = Vec::new();
        for b in start..end {
            let si = self.slice_of(f.id, b, &ctx);
            let slice = &self.slices[si];
            let key = BlockKey {
                file: f.id,
                block: b,
            };
            if let Some((slot, _)) = slice.lookup_pin(&key) {
                slice.unpin(slot);
                continue;
            }
            let Some(slot) = slice.try_alloc() else { break };
            match slice.insert_claimed(slot, key) {
                Ok(()) => loads.push((si, b, slot)),
                Err((existing, _)) => slice.unpin(existing),
            }
        }
        if loads.is_empty() {
            return;
        }
        let file = self.files.get(f.id);
        let runs = runs(&loads, self.cfg.max_io_blocks);
        for run in runs.iter().cloned() {
            let run: Vec<Transfer> = loads[run].to_vec();
            let slice = self.slices[run[0].0].clone();
            let req = run_request(&slice, IoKind::Read, f.fd(), &run, self.bs);
            let (file, ig, bs) = (file.clone(), self.cfg.integrity.clone(), self.bs);
            let s2 = slice.clone();
            slice.submit_async(
                req,
                Box::new(move |r| {
                    // A block that fails here fails its load; a reader that wants it retries
                    // and gets the error itself.
                    let _ = complete_load(&s2, bs, ig.as_deref(), &file, &run, r);
                    for &(_, _, slot) in &run {
                        s2.unpin(slot);
                    }
                }),
            );
        }
        self.flush_runs(&loads, &runs);
    }

    /// Runs `op(range of the caller's buffer, file offset)` over `[off, off+len)` one run of
    /// blocks of one slice at a time, each on the slice's node when the router says so.
    pub(crate) fn routed(
        &self,
        router: &dyn crate::ext::Router,
        f: &FileEntry,
        len: usize,
        off: u64,
        write: bool,
        mut op: impl FnMut(Range<usize>, u64) -> Result<usize, EngineError> + Send,
    ) -> Result<usize, EngineError> {
        let len = if write {
            len
        } else {
            (len as u64).min(f.len().saturating_sub(off)) as usize
        };
        let bs = self.bs as u64;
        let ctx = AccessCtx::new(write);
        let mut done = 0usize;
        while done < len {
            let cur = off + done as u64;
            let end = off + len as u64;
            let b0 = cur / bs;
            let si = self.slice_of(f.id, b0, &ctx);
            let mut b = b0 + 1;
            while b * bs < end
                && ((b - b0) as usize) < self.chunk_blocks
                && self.slice_of(f.id, b, &ctx) == si
            {
                b += 1;
            }
            let k = ((b * bs).min(end) - cur) as usize;
            let node = self.slices[si].node();
            let r = done..done + k;
            let n = if router.should_route(node) {
                let mut out = None;
                router.run_on(node, &mut || out = Some(op(r.clone(), cur)))?;
                out.unwrap_or(Ok(0))?
            } else {
                op(r, cur)?
            };
            if n == 0 {
                break;
            }
            done += n;
        }
        Ok(done)
    }
}

/// Ends the loads of one run read from the device (demand loads and readahead alike):
/// counts the read, zero-fills what lies past the end of file, verifies each block's
/// checksum and publishes it, or fails it. Returns the first error, naming the file.
pub(crate) fn complete_load(
    slice: &Slice,
    bs: usize,
    integrity: Option<&dyn BlockIntegrity>,
    f: &FileEntry,
    run: &[Transfer],
    result: io::Result<usize>,
) -> io::Result<()> {
    let got = match result {
        Ok(n) => n.min(run.len() * bs),
        Err(e) => {
            for &(_, _, slot) in run {
                slice.finish_load(slot, false);
            }
            return Err(io::Error::new(
                e.kind(),
                ReadFailed {
                    path: f.path.clone(),
                    source: e,
                },
            ));
        }
    };
    SliceCounters::add(&slice.counters().read_ios, 1);
    SliceCounters::add(&slice.counters().read_bytes, got as u64);
    let mut first_err = None;
    for (k, &(_, block, slot)) in run.iter().enumerate() {
        let have = got.saturating_sub(k * bs).min(bs);
        if have < bs {
            // SAFETY: the slot is LOADING and owned by this load; `have < bs` stays inside
            // its buffer of `bs` bytes.
            unsafe { std::ptr::write_bytes(slice.buf_ptr(slot).add(have), 0, bs - have) };
        }
        if let Some(ig) = integrity {
            // SAFETY: the slot is LOADING: nobody else reads or writes its buffer until
            // `finish_load` below publishes it.
            let data = unsafe { std::slice::from_raw_parts(slice.buf_ptr(slot), bs) };
            // A panicking check fails the block like a mismatch: the load must end either way.
            let verified = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                ig.verify(f.id, block, data)
            }))
            .unwrap_or_else(|_| Err("the integrity check panicked".into()));
            if let Err(source) = verified {
                // A corrupted block is an error, never data.
                slice.finish_load(slot, false);
                first_err.get_or_insert_with(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidData,
                        EngineError::Checksum {
                            path: f.path.clone(),
                            offset: block * bs as u64,
                            source,
                        },
                    )
                });
                continue;
            }
        }
        slice.finish_load(slot, true);
    }
    first_err.map_or(Ok(()), Err)
}
