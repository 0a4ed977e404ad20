//! One cache slice: a node-bound buffer arena cut into block-sized slots, its hash index,
//! replacement policy, free list, dirty set, I/O queue and evictor state.
//!
//! Concurrency summary:
//! * hit: index read lock (shard/bucket) → pin (in the bucket's entry once the block is
//!   loaded, else on the slot's word) → policy `on_hit` (never slice-wide);
//! * miss: take a free slot (free-list mutex; "stalled" on a condvar if empty), insert it
//!   LOADING into the index, submit the read into the slice's I/O path; others who find the
//!   block LOADING wait on a striped condvar ("clashed");
//! * evict: the evictor thread asks the policy for victims and reclaims them under the index
//!   write lock with one CAS on the slot word (fails if pinned, loading or dirty);
//! * write-back: one writer per block at a time (the WRITEBACK bit, `writeback.rs`); `fsync`
//!   waits for write-backs others have in flight.

mod writeback;

pub(crate) use writeback::Claimed;

use crate::arena::{Arena, PlacementCheck};
use crate::error::{EngineError, WriteBackError};
use crate::hugemem::HugeArray;
use crate::index::{self, EntryPin, Hit, Index, IndexKind};
use crate::io::{IoPath, IoRequest, Pending};
use crate::key::{BlockKey, FileId, SlotId};
use crate::policy::{PolicyKind, ReplacementPolicy};
use crate::slot::{Reclaim, SlotState, ERROR, LOADING, VALID};
use crate::stats::{SliceCounters, SliceStats};
use crate::types::Padded;
use parking_lot::{Condvar, Mutex};
use std::collections::BTreeSet;
use std::io;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::task::{Poll, Waker};
use std::time::{Duration, Instant};
use writeback::FailureLatch;

const WAIT_STRIPES: usize = 64;

/// How long the evictor gets to free clean buffers before a standing write-back failure
/// fails a stalled request.
const EVICTOR_ROUND: Duration = Duration::from_millis(50);

/// Waits for another request's device I/O last at least this long, even with a zero stall
/// timeout (which is about free buffers, not about the device's latency).
const MIN_IO_WAIT: Duration = Duration::from_secs(1);

/// 32 bytes, aligned: a slot's state, key and hit stamp share one cache line.
#[repr(align(32))]
pub(crate) struct SlotMeta {
    state: SlotState,
    file: AtomicU32,
    /// The eviction epoch in which the policy last heard of a hit on this slot.
    stamp: AtomicU32,
    block: AtomicU64,
    /// Copies into the buffer under way: a write-back that overlaps one may send the device
    /// bytes other than those its checksum read, so it keeps no sum (`unchanged_since`).
    writers: AtomicU32,
}

impl SlotMeta {
    fn key(&self) -> BlockKey {
        BlockKey {
            file: FileId(self.file.load(Ordering::Acquire)),
            block: self.block.load(Ordering::Acquire),
        }
    }
    fn set_key(&self, k: BlockKey) {
        self.file.store(k.file.0, Ordering::Release);
        self.block.store(k.block, Ordering::Release);
    }
}

pub(crate) struct Slice {
    id: usize,
    node: u32,
    block_size: usize,
    arena: Arena,
    slots: HugeArray<SlotMeta>,
    /// Bumped before every eviction pass; see `note_hit`.
    epoch: AtomicU32,
    hit_gating: bool,
    index: Box<dyn Index>,
    policy: Box<dyn ReplacementPolicy>,
    free: Mutex<Vec<SlotId>>,
    free_cv: Condvar,
    free_count: AtomicUsize,
    dirty: Mutex<BTreeSet<BlockKey>>,
    waits: Vec<Padded<(Mutex<()>, Condvar)>>,
    /// Async requests waiting for a load by another request, striped like `waits`.
    load_wakers: Vec<Padded<Mutex<Vec<Waker>>>>,
    /// Async requests waiting for a free buffer, and how many there are (read without the
    /// lock by unpinning code, which then kicks the evictor).
    free_wakers: Mutex<Vec<Waker>>,
    free_waiters: AtomicUsize,
    evict_flag: Mutex<bool>,
    evict_cv: Condvar,
    evict_pending: AtomicBool,
    low: usize,
    high: usize,
    io: IoPath,
    counters: SliceCounters,
    shutdown: AtomicBool,
    /// The evictor's failed write-backs, for requests stalled for a free buffer.
    wb_failure: FailureLatch,
    /// Longest wait for a free buffer, a load or a write-back of another request.
    stall_timeout: Duration,
    /// Eviction rounds the evictor has finished: a stalled request gives up only after the
    /// evictor has had a whole round to free a buffer for it.
    evictor_rounds: AtomicU64,
}

impl Slice {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        id: usize,
        node: u32,
        block_size: usize,
        nslots: usize,
        policy: PolicyKind,
        index_kind: IndexKind,
        bind: bool,
        hit_gating: bool,
        io: IoPath,
        stall_timeout: Duration,
    ) -> io::Result<Slice> {
        let nslots = nslots.max(1);
        let arena_bytes = nslots.checked_mul(block_size).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "slice {id}: {nslots} blocks of {block_size} bytes overflow the address space"
                ),
            )
        })?;
        let arena = Arena::new(arena_bytes, node, bind)?;
        let mut free = Vec::new();
        free.try_reserve_exact(nslots).map_err(|e| {
            io::Error::new(
                io::ErrorKind::OutOfMemory,
                format!(
                    "slice {id}: cannot allocate the free list of {nslots} blocks ({} bytes): {e}",
                    nslots.saturating_mul(std::mem::size_of::<SlotId>())
                ),
            )
        })?;
        free.extend((0..nslots as SlotId).rev());
        let low = (nslots / 64).max(1);
        let high = (nslots / 32).max(low + 1).min(nslots);
        Ok(Slice {
            id,
            node,
            block_size,
            arena,
            slots: HugeArray::new(nslots, bind.then_some(node), |_| SlotMeta {
                state: SlotState::new_free(),
                file: AtomicU32::new(0),
                stamp: AtomicU32::new(u32::MAX),
                block: AtomicU64::new(0),
                writers: AtomicU32::new(0),
            })
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("slice {id}: cannot allocate the table of {nslots} slots: {e}"),
                )
            })?,
            epoch: AtomicU32::new(0),
            hit_gating,
            index: index::build(index_kind, nslots, bind.then_some(node))
                .map_err(|e| io::Error::new(e.kind(), format!("slice {id}: {e}")))?,
            policy: policy.build(nslots),
            free: Mutex::new(free),
            free_cv: Condvar::new(),
            free_count: AtomicUsize::new(nslots),
            dirty: Mutex::new(BTreeSet::new()),
            waits: (0..WAIT_STRIPES)
                .map(|_| Padded((Mutex::new(()), Condvar::new())))
                .collect(),
            load_wakers: (0..WAIT_STRIPES)
                .map(|_| Padded(Mutex::new(Vec::new())))
                .collect(),
            free_wakers: Mutex::new(Vec::new()),
            free_waiters: AtomicUsize::new(0),
            evict_flag: Mutex::new(false),
            evict_cv: Condvar::new(),
            evict_pending: AtomicBool::new(false),
            low,
            high,
            io,
            counters: SliceCounters::default(),
            shutdown: AtomicBool::new(false),
            wb_failure: FailureLatch::default(),
            stall_timeout,
            evictor_rounds: AtomicU64::new(0),
        })
    }

    pub fn capacity(&self) -> usize {
        self.slots.len()
    }

    pub fn node(&self) -> u32 {
        self.node
    }

    pub fn counters(&self) -> &SliceCounters {
        &self.counters
    }

    /// Whether the evictor should keep freeing (fewer free buffers than the high watermark),
    /// and how many buffers it should free to get there.
    pub fn eviction_wanted(&self) -> usize {
        self.high.saturating_sub(self.free_count())
    }

    /// One eviction pass: asks the policy for up to `want` victims; clean ones are freed
    /// (returned to the free list), dirty ones are returned for write-back.
    pub fn evict_pass(&self, want: usize) -> (usize, Vec<BlockKey>) {
        let mut freed = Vec::new();
        let mut dirty = Vec::new();
        self.next_epoch();
        self.policy
            .evict(want, &mut |slot| self.reclaim(slot, &mut freed, &mut dirty));
        self.release_free(&freed);
        (freed.len(), dirty)
    }

    /// Extends each run of consecutive dirty `victims` with the dirty blocks that follow it
    /// (up to `max_run` blocks per run), so one large write cleans the neighbourhood
    /// (Jericho, SAFS). Walks the sorted dirty set once per run end, not once per victim.
    /// Returns the blocks to write, sorted and without duplicates.
    pub fn dirty_runs_around(&self, mut victims: Vec<BlockKey>, max_run: usize) -> Vec<BlockKey> {
        victims.sort();
        victims.dedup();
        let max_run = max_run.max(1);
        let mut out = Vec::with_capacity(victims.len());
        {
            let d = self.dirty.lock();
            let mut i = 0;
            while i < victims.len() {
                let mut j = i + 1;
                while j < victims.len()
                    && victims[j].file == victims[i].file
                    && victims[j].block == victims[j - 1].block + 1
                {
                    j += 1;
                }
                out.extend_from_slice(&victims[i..j]);
                let last = victims[j - 1];
                let room = max_run.saturating_sub((j - i) % max_run);
                let from = BlockKey {
                    file: last.file,
                    block: last.block + 1,
                };
                for (k, expect) in d.range(from..).take(room).zip(last.block + 1..) {
                    if k.file != last.file || k.block != expect || victims[j..].first() == Some(k) {
                        break;
                    }
                    out.push(*k);
                }
                i = j;
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The dirty blocks of `file` in `[first, last]`.
    pub fn dirty_in(&self, file: FileId, first: u64, last: u64) -> Vec<BlockKey> {
        let d = self.dirty.lock();
        d.range(BlockKey { file, block: first }..=BlockKey { file, block: last })
            .copied()
            .collect()
    }

    /// Latches a failed write-back of the evictor: requests stalled for a free buffer fail
    /// at once with its errno.
    pub fn report_writeback_failure(&self, e: WriteBackError) {
        self.wb_failure.report(e);
        self.wake_free_waiters();
    }

    /// The evictor finished a round (freed what it could, or found nothing to free): wakes
    /// stalled requests to look again.
    pub fn end_evictor_round(&self) {
        self.evictor_rounds.fetch_add(1, Ordering::AcqRel);
        let g = self.free.lock();
        self.free_cv.notify_all();
        drop(g);
    }

    /// A write-back of this slice succeeded: an earlier failure no longer fails stalled
    /// requests at once.
    pub fn clear_writeback_failure(&self) {
        self.wb_failure.clear();
    }

    /// Stops this slice's I/O (its `workers` I/O workers, or its ring's reaper) once what
    /// is in flight is done.
    pub fn stop_workers(&self, workers: usize) {
        self.io.stop(workers);
    }

    /// Hands requests queued by `submit*` to the device.
    pub(crate) fn flush_io(&self) {
        self.io.flush();
    }

    pub fn placement_check(&self) -> &PlacementCheck {
        &self.arena.check
    }

    /// The buffer of `slot`.
    pub fn buf_ptr(&self, slot: SlotId) -> *mut u8 {
        // SAFETY: slot < nslots, the arena holds nslots * block_size bytes.
        unsafe { self.arena.ptr().add(slot as usize * self.block_size) }
    }

    pub fn free_count(&self) -> usize {
        self.free_count.load(Ordering::Relaxed)
    }

    /// Looks `key` up and pins it. Returns the slot and its state word after pinning.
    #[inline]
    pub fn lookup_pin(&self, key: &BlockKey) -> Option<(SlotId, u64)> {
        let mut word = 0;
        let slots = &self.slots;
        let s = self
            .index
            .lookup(key, &mut |s| word = slots[s as usize].state.pin())?;
        Some((s, word))
    }

    /// Where `key` is in the index, its memory prefetched (see `Index::locate`).
    #[inline]
    pub fn locate(&self, key: &BlockKey) -> usize {
        self.index.locate(key)
    }

    /// A request's lookup at a position [`locate`](Self::locate) gave for `key`: pins `key`
    /// (through its index entry when the block is loaded, so the hit touches only the
    /// index's cache line) and tells the policy of the hit. Returns the slot, its state word
    /// (a loaded one's flags for an entry pin) and the pin to give to
    /// [`unpin_hit`](Self::unpin_hit).
    #[inline]
    pub fn lookup_hit_at(&self, at: usize, key: &BlockKey) -> Option<(SlotId, u64, EntryPin)> {
        self.lookup_hit_in(Some(at), key)
    }

    /// [`lookup_hit_at`](Self::lookup_hit_at) for a key not located first.
    #[inline]
    pub fn lookup_hit(&self, key: &BlockKey) -> Option<(SlotId, u64, EntryPin)> {
        self.lookup_hit_in(None, key)
    }

    #[inline(always)]
    fn lookup_hit_in(&self, at: Option<usize>, key: &BlockKey) -> Option<(SlotId, u64, EntryPin)> {
        let mut word = 0;
        let slots = &self.slots;
        let epoch = self.epoch.load(Ordering::Relaxed);
        let mut pin = |s: SlotId| word = slots[s as usize].state.pin();
        let hit = match at {
            Some(at) => self.index.lookup_hit_at(at, key, epoch, &mut pin),
            None => self.index.lookup_hit(key, epoch, &mut pin),
        };
        match hit? {
            Hit::Entry { slot, pin, fresh } => {
                if fresh || !self.hit_gating {
                    self.policy.on_hit(slot);
                }
                Some((slot, VALID, pin))
            }
            Hit::Slot(slot) => {
                self.note_hit(slot);
                Some((slot, word, EntryPin::NONE))
            }
        }
    }

    /// Drops a pin taken by [`lookup_hit_at`](Self::lookup_hit_at) (or on the slot's word, for
    /// `EntryPin::NONE`).
    #[inline]
    pub fn unpin_hit(&self, slot: SlotId, pin: EntryPin) {
        if pin == EntryPin::NONE {
            self.unpin(slot);
        } else {
            self.index.unpin_entry(pin);
        }
    }

    /// Tells the policy about a hit — at most once per slot per eviction epoch when gating
    /// is on (CacheLib-style: between two eviction passes the order among hits cannot
    /// matter to the next pass much, and skipping repeats keeps hot hits off the policy).
    #[inline]
    pub fn note_hit(&self, slot: SlotId) {
        if self.hit_gating {
            let e = self.epoch.load(Ordering::Relaxed);
            let st = &self.slots[slot as usize].stamp;
            if st.load(Ordering::Relaxed) == e {
                return;
            }
            st.store(e, Ordering::Relaxed);
        }
        self.policy.on_hit(slot);
    }

    /// Starts a new eviction epoch (before each eviction pass).
    fn next_epoch(&self) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
    }

    /// Queues a request whose completion runs `done` off this thread (for readahead).
    /// Fails rather than blocks if the queue is full.
    pub(crate) fn submit_async(
        &self,
        req: IoRequest,
        done: Box<dyn FnOnce(io::Result<usize>) + Send>,
    ) -> bool {
        self.io.submit_call(req, done, false)
    }

    /// Takes a free slot if one is available right now (readahead never stalls).
    pub fn try_alloc(&self) -> Option<SlotId> {
        let mut free = self.free.lock();
        let s = free.pop();
        self.free_count.store(free.len(), Ordering::Relaxed);
        let below = free.len() < self.low;
        drop(free);
        if below {
            self.wake_evictor();
        }
        s
    }

    /// Takes a free slot, waiting for the evictor if there is none ("stalled"). Fails with
    /// the device's errno if the evictor cannot write dirty buffers back (a failure while we
    /// wait, or one still standing after an eviction round), with [`EngineError::Stalled`]
    /// after the stall timeout, and with [`EngineError::Closed`] once the engine stops.
    pub fn alloc(&self) -> io::Result<SlotId> {
        let mut free = self.free.lock();
        let mut stalled_since: Option<Instant> = None;
        let failures_before = self.wb_failure.seq();
        let rounds_before = self.evictor_rounds.load(Ordering::Acquire);
        loop {
            if let Some(s) = free.pop() {
                self.free_count.store(free.len(), Ordering::Relaxed);
                let below = free.len() < self.low;
                drop(free);
                if below {
                    self.wake_evictor();
                }
                return Ok(s);
            }
            if self.shutdown.load(Ordering::Acquire) {
                return Err(EngineError::Closed.into());
            }
            let since = *stalled_since.get_or_insert_with(|| {
                SliceCounters::add(&self.counters.stalled, 1);
                Instant::now()
            });
            // A failure from before we began counts once the evictor had a round to free
            // clean buffers: with the device full, waiting would only run into the timeout.
            let standing = since.elapsed() >= EVICTOR_ROUND;
            if let Some(w) = self.wb_failure.failure(failures_before, standing) {
                return Err(w
                    .context(format_args!(
                        "no free buffer in slice {}: the dirty buffers cannot be written back \
                         (fix the device or free space on it, then fsync)",
                        self.id
                    ))
                    .to_io());
            }
            let waited = since.elapsed();
            // A round that began after this request started has finished (or the evictor
            // makes no rounds at all): it could not free a buffer in time.
            let evictor_tried = self.evictor_rounds.load(Ordering::Acquire) >= rounds_before + 2
                || waited >= self.stall_timeout.saturating_add(MIN_IO_WAIT);
            if waited >= self.stall_timeout && evictor_tried {
                return Err(EngineError::Stalled {
                    slice: self.id,
                    waited,
                }
                .into());
            }
            // The evictor frees slots and notifies; the timeout only re-kicks it after a
            // round that could not make progress (all pinned).
            self.wake_evictor_locked_free();
            let nap = self
                .stall_timeout
                .saturating_sub(waited)
                .clamp(Duration::from_millis(1), Duration::from_millis(20));
            self.free_cv.wait_for(&mut free, nap);
        }
    }

    fn wake_evictor_locked_free(&self) {
        self.evict_pending.store(true, Ordering::Release);
        *self.evict_flag.lock() = true;
        self.evict_cv.notify_one();
    }

    pub fn wake_evictor(&self) {
        if !self.evict_pending.swap(true, Ordering::AcqRel) {
            *self.evict_flag.lock() = true;
            self.evict_cv.notify_one();
        }
    }

    /// Evictor side: waits until woken (or `timeout`). Returns false on shutdown.
    pub fn evictor_wait(&self, timeout: Duration) -> bool {
        let mut g = self.evict_flag.lock();
        if !*g && !self.shutdown.load(Ordering::Acquire) {
            self.evict_cv.wait_for(&mut g, timeout);
        }
        *g = false;
        self.evict_pending.store(false, Ordering::Release);
        !self.shutdown.load(Ordering::Acquire)
    }

    pub fn stop(&self) {
        self.shutdown.store(true, Ordering::Release);
        *self.evict_flag.lock() = true;
        self.evict_cv.notify_all();
        let g = self.free.lock();
        self.free_cv.notify_all();
        drop(g);
        self.wake_free_waiters();
    }

    /// Returns slots to the free list and wakes stalled requests.
    pub fn release_free(&self, slots: &[SlotId]) {
        if slots.is_empty() {
            return;
        }
        let mut free = self.free.lock();
        free.extend_from_slice(slots);
        self.free_count.store(free.len(), Ordering::Relaxed);
        drop(free);
        self.free_cv.notify_all();
        self.wake_free_waiters();
    }

    /// The async counterpart of [`alloc`](Self::alloc): a free slot, or `Pending` with
    /// `waker` registered to be woken when buffers are freed (or the evictor fails, or the
    /// engine stops). `failures_before` is [`writeback_failures`](Self::writeback_failures)
    /// when the request started waiting.
    pub fn poll_alloc(&self, waker: &Waker, failures_before: u64) -> Poll<io::Result<SlotId>> {
        let mut free = self.free.lock();
        if let Some(s) = free.pop() {
            self.free_count.store(free.len(), Ordering::Relaxed);
            let below = free.len() < self.low;
            drop(free);
            if below {
                self.wake_evictor();
            }
            return Poll::Ready(Ok(s));
        }
        if self.shutdown.load(Ordering::Acquire) {
            return Poll::Ready(Err(EngineError::Closed.into()));
        }
        if let Some(w) = self.wb_failure.failure(failures_before, false) {
            return Poll::Ready(Err(w
                .context(format_args!(
                    "no free buffer in slice {}: the dirty buffers cannot be written back \
                     (fix the device or free space on it, then fsync)",
                    self.id
                ))
                .to_io()));
        }
        // Registered under the free-list lock, so a release that follows sees the waker.
        let mut w = self.free_wakers.lock();
        if !w.iter().any(|x| x.will_wake(waker)) {
            w.push(waker.clone());
            self.free_waiters.fetch_add(1, Ordering::Release);
        }
        drop(w);
        drop(free);
        self.wake_evictor_locked_free();
        Poll::Pending
    }

    /// The evictor failure count, for [`poll_alloc`](Self::poll_alloc).
    pub fn writeback_failures(&self) -> u64 {
        self.wb_failure.seq()
    }

    /// Whether async requests wait for a free buffer (then unpinning may let the evictor
    /// free one, so the unpinner kicks it).
    #[inline]
    pub fn has_free_waiters(&self) -> bool {
        self.free_waiters.load(Ordering::Relaxed) != 0
    }

    fn wake_free_waiters(&self) {
        if self.free_waiters.load(Ordering::Acquire) == 0 {
            return;
        }
        let wakers = std::mem::take(&mut *self.free_wakers.lock());
        self.free_waiters.fetch_sub(wakers.len(), Ordering::Release);
        for w in wakers {
            w.wake();
        }
    }

    /// Registers `waker` to be woken when the load of `slot` ends. Returns false (and
    /// registers nothing) if the slot is not LOADING any more.
    pub fn register_load_waker(&self, slot: SlotId, waker: &Waker) -> bool {
        let mut w = self.load_wakers[slot as usize % WAIT_STRIPES].0.lock();
        // Checked under the stripe lock that `finish_load` takes after clearing LOADING.
        if self.slots[slot as usize].state.load() & LOADING == 0 {
            return false;
        }
        if !w.iter().any(|x| x.will_wake(waker)) {
            w.push(waker.clone());
        }
        true
    }

    /// The state word of `slot`.
    pub fn slot_word(&self, slot: SlotId) -> u64 {
        self.slots[slot as usize].state.load()
    }

    /// Queues a request whose completion runs `done` off this thread, waiting for room if
    /// the queue is full. On stopped I/O `done` runs here with the error, so the loads it
    /// owns always end.
    pub(crate) fn submit_call(
        &self,
        req: IoRequest,
        done: Box<dyn FnOnce(io::Result<usize>) + Send>,
    ) {
        self.io.submit_call(req, done, true);
    }

    /// Claims a free slot for `key` and inserts it LOADING. `Err(existing)` if another thread
    /// inserted the key first (the existing slot is pinned; ours is returned to the free list).
    pub fn insert_claimed(&self, slot: SlotId, key: BlockKey) -> Result<(), (SlotId, u64)> {
        let meta = &self.slots[slot as usize];
        meta.set_key(key);
        meta.stamp.store(u32::MAX, Ordering::Relaxed);
        meta.state.claim_for_load();
        let mut word = 0;
        let slots = &self.slots;
        match self
            .index
            .insert(key, slot, &mut |s| word = slots[s as usize].state.pin())
        {
            Ok(()) => {
                self.policy.on_insert(slot, key);
                Ok(())
            }
            Err(existing) => {
                meta.state.force_free_after_error();
                meta.state.unpin();
                self.release_free(&[slot]);
                Err((existing, word))
            }
        }
    }

    /// Ends a load of `slot` and wakes the requests clashed on it.
    pub fn finish_load(&self, slot: SlotId, ok: bool) {
        if !ok {
            // Unlink first so no new request pins the failed slot; the evictor frees it once
            // the last pin is gone.
            let key = self.slots[slot as usize].key();
            self.index.remove_if(&key, slot, &mut || true);
        }
        self.slots[slot as usize].state.finish_load(ok);
        if ok {
            self.index.set_ready(&self.slots[slot as usize].key(), slot);
        }
        let (m, cv) = &self.waits[slot as usize % WAIT_STRIPES].0;
        let g = m.lock();
        cv.notify_all();
        drop(g);
        let wakers = std::mem::take(&mut *self.load_wakers[slot as usize % WAIT_STRIPES].0.lock());
        for w in wakers {
            w.wake();
        }
    }

    /// The condvar stripe on which waiters for `slot` (loading, write-back) sleep.
    pub(crate) fn wait_stripe(&self, slot: SlotId) -> &Padded<(Mutex<()>, Condvar)> {
        &self.waits[slot as usize % WAIT_STRIPES]
    }

    /// Waits while `slot` is LOADING ("clashed"). Returns false if the load failed; fails
    /// with [`EngineError::Stalled`] if it is still loading after the stall timeout (the
    /// caller unpins it; the load ends on its own).
    pub fn wait_loaded(&self, slot: SlotId) -> io::Result<bool> {
        let st = &self.slots[slot as usize].state;
        if st.load() & LOADING != 0 {
            let start = Instant::now();
            let (m, cv) = &self.waits[slot as usize % WAIT_STRIPES].0;
            let mut g = m.lock();
            while st.load() & LOADING != 0 {
                let waited = start.elapsed();
                if waited >= self.stall_timeout.max(MIN_IO_WAIT) {
                    return Err(EngineError::Stalled {
                        slice: self.id,
                        waited,
                    }
                    .into());
                }
                cv.wait_for(&mut g, Duration::from_millis(100));
            }
        }
        Ok(st.load() & ERROR == 0)
    }

    pub fn unpin(&self, slot: SlotId) {
        self.slots[slot as usize].state.unpin();
    }

    /// A copy into a pinned slot's buffer begins; end it with [`end_copy_in`](Self::end_copy_in).
    pub fn begin_copy_in(&self, slot: SlotId) {
        self.slots[slot as usize]
            .writers
            .fetch_add(1, Ordering::SeqCst);
    }

    /// A copy into the buffer is over: marks the block dirty if it was modified, and only
    /// then stops counting the copy, so a write-back that overlapped it sees either the copy
    /// still counted or the generation moved.
    pub fn end_copy_in(&self, slot: SlotId, modified: bool) {
        if modified {
            self.mark_dirty(slot);
        }
        self.slots[slot as usize]
            .writers
            .fetch_sub(1, Ordering::SeqCst);
    }

    /// Records a modification of a pinned slot.
    pub fn mark_dirty(&self, slot: SlotId) {
        let st = &self.slots[slot as usize].state;
        if st.mark_dirty_fast() {
            return;
        }
        let mut d = self.dirty.lock();
        if st.mark_dirty_locked() {
            d.insert(self.slots[slot as usize].key());
        }
    }

    /// Evictor callback: tries to free `slot`.
    fn reclaim(&self, slot: SlotId, freed: &mut Vec<SlotId>, dirty: &mut Vec<BlockKey>) -> Reclaim {
        let meta = &self.slots[slot as usize];
        let key = meta.key();
        let mut r = Reclaim::Busy;
        match self.index.remove_if(&key, slot, &mut || {
            r = meta.state.try_reclaim();
            r == Reclaim::Freed
        }) {
            Some(_) => {}
            // Not in the index: a failed load; nobody can pin it any more.
            None => r = meta.state.try_reclaim(),
        }
        match r {
            Reclaim::Freed => {
                freed.push(slot);
                SliceCounters::add(&self.counters.evicted, 1);
            }
            Reclaim::Dirty => dirty.push(key),
            _ => {}
        }
        r
    }

    /// Queues a request a caller waits for (blocks if the queue is full: only for a caller
    /// holding no other pending request); call [`flush_io`](Self::flush_io) before waiting.
    pub(crate) fn submit(&self, req: IoRequest) -> io::Result<Pending> {
        self.io.submit(req)
    }

    /// Like [`submit`](Self::submit), but gives the request back instead of waiting when
    /// the queue is full (for a caller that holds other pending requests).
    pub(crate) fn try_submit(&self, req: IoRequest) -> io::Result<Result<Pending, IoRequest>> {
        self.io.try_submit(req)
    }

    pub fn stats(&self) -> SliceStats {
        let mut s = SliceStats {
            slice: self.id,
            node: self.node,
            capacity_blocks: self.capacity(),
            free_blocks: self.free_count(),
            dirty_blocks: self.dirty.lock().len(),
            resident_blocks: self.policy.resident(),
            ..Default::default()
        };
        s.fill(&self.counters);
        s
    }
}
