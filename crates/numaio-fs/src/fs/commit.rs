use super::*;
use std::time::Instant;

/// The longest a commit waits for more syncs to join it (ext4's `max_batch_time`).
const MAX_BATCH_WAIT: Duration = Duration::from_millis(15);

/// The most data a commit carries in its record in place of a device flush before the
/// record ([`crate::journal`], "Data in the record"): the small appends of a log or a
/// database's write-ahead file, which sync often. Larger writes flush first: the flush is
/// then a small part of their cost, and data in the journal fills it towards the next
/// checkpoint.
const INLINE_MAX: u64 = 256 * 1024;

/// How long after an unlinked file was last left held an allocation short of room waits
/// for such files to be let go ([`Fs::retry_for_space`]). The kernel sends their RELEASE
/// and FORGET at once; this bounds how late a loaded machine may serve them.
const ORPHAN_GRACE: Duration = Duration::from_secs(2);

/// Commits an allocation short of room tries before it fails with ENOSPC: each frees what
/// was removed before it, and files let go meanwhile wait for the next.
const SPACE_RETRIES: u32 = 3;

/// What carrying data in records may cost in checkpoints, per commit on average: a
/// checkpoint (the whole metadata) comes once half the journal is used, so a record of
/// `d` bytes costs `d / (capacity / 2)` of one. Beyond this, a commit flushes first.
const INLINE_CHECKPOINT_SHARE: u64 = 64 * 1024;

/// A bound on what the data records of `runs` add to an encoded record list: each run's
/// bytes plus its variant, device, block and length prefix (postcard varints), and what
/// the list's own length prefix may grow by.
fn inline_bound(runs: &[(u16, u64, u64)]) -> u64 {
    5 + runs
        .iter()
        .map(|&(_, _, len)| len * BLOCK_SIZE + 1 + 3 + 10 + 5)
        .sum::<u64>()
}

/// Whether a commit whose data is `runs` carries it in its record: small enough
/// ([`INLINE_MAX`]) and, with the journal's checkpoints as they are, cheap enough
/// ([`INLINE_CHECKPOINT_SHARE`]).
fn worth_inlining(journal: &Journal, runs: &[(u16, u64, u64)]) -> bool {
    let bytes: u64 = runs.iter().map(|r| r.2 * BLOCK_SIZE).sum();
    let checkpoint = u128::from(journal.checkpoint_bytes.max(BLOCK_SIZE));
    bytes > 0
        && bytes <= INLINE_MAX
        && checkpoint * u128::from(bytes) * 2
            <= u128::from(INLINE_CHECKPOINT_SHARE) * u128::from(journal.capacity())
}

/// Records and the data records after them, encoded as one list (as
/// `crate::format::encode` encodes a `Vec<Record>`).
struct WithData<'a>(&'a [Record], &'a [Record]);

impl serde::Serialize for WithData<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.0.iter().chain(self.1))
    }
}

/// The pace of recent commits, for group-commit batching (as ext4's journal batches
/// syncs). When syncs come from several threads, the threads a commit answered ask again
/// soon after it ends, while the next commit may already start with only the syncs that
/// arrived during the last one: the threads then split into groups that alternate, each
/// commit serving one group. So a commit expects as many syncs as the last commit served
/// plus those that arrived while it was written; with fewer waiting, it waits for the
/// rest, at most half a commit's time (and [`MAX_BATCH_WAIT`]) from the previous commit's
/// end. One thread syncing alone never waits.
#[derive(Default)]
pub(super) struct Pace {
    /// When the newest commit took its records, and the sync requests counted by then.
    took: Option<(Instant, u64)>,
    /// Requests that arrived between the takes of the newest commit and the one before:
    /// those the newest commit served.
    served: u64,
    /// When the newest commit became durable, and the requests that arrived while it was
    /// written.
    ended: Option<(Instant, u64)>,
    /// A moving average of how long a commit takes to write, in nanoseconds.
    avg_ns: u64,
}

impl Pace {
    /// How long a commit starting now, with `requests` sync requests counted so far, may
    /// still wait for more; `None` once it should go.
    fn batch_wait(&self, requests: u64) -> Option<Duration> {
        let (_, before) = self.took?;
        let (ended, during) = self.ended?;
        let expected = self.served + during;
        let waiting = requests.saturating_sub(before);
        if expected <= 1 || waiting == 0 || waiting >= expected {
            return None;
        }
        let window = Duration::from_nanos(self.avg_ns / 2).min(MAX_BATCH_WAIT);
        window.checked_sub(ended.elapsed()).filter(|w| !w.is_zero())
    }

    /// A commit takes its records now, `requests` sync requests counted.
    fn taken(&mut self, requests: u64) {
        self.served = self.took.map_or(0, |(_, before)| requests - before);
        self.took = Some((Instant::now(), requests));
    }

    /// The commit that took its records last is durable, `requests` sync requests
    /// counted.
    fn written(&mut self, requests: u64) {
        if let Some((at, before)) = self.took {
            let ns = at.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            self.avg_ns = if self.avg_ns == 0 {
                ns
            } else {
                (self.avg_ns * 7 + ns) / 8
            };
            self.ended = Some((Instant::now(), requests.saturating_sub(before)));
        }
    }
}

impl Fs {
    /// Bytes of the journal in use since the last checkpoint, and its size. A checkpoint
    /// empties it once more than half is used.
    pub fn journal_usage(&self) -> (u64, u64) {
        let g = self.inner.lock();
        (g.journal.pos, g.journal.capacity())
    }

    /// Number of commits made durable since mount (tests use it to know what must survive).
    pub fn commits(&self) -> u64 {
        self.inner.lock().commits
    }

    /// How syncs were served since mount (group commits, data-only `fdatasync`).
    pub fn sync_stats(&self) -> SyncStats {
        SyncStats {
            requests: self.sync_requests.load(Ordering::Relaxed),
            commits: self.commits(),
            data_only: self.data_only_syncs.load(Ordering::Relaxed),
            periodic: self.periodic_commits.load(Ordering::Relaxed),
            for_space: self.space_commits.load(Ordering::Relaxed),
        }
    }

    /// Runs `op` (an operation that allocates blocks); when it fails for want of space
    /// while blocks freed by uncommitted changes wait for a commit, commits (with the
    /// volume lock released: group commit) and runs it again, as ext4 retries an
    /// allocation after a journal commit. A file removed less than [`ORPHAN_GRACE`] ago
    /// and still held is waited for first: through a mount, the kernel lets go of a file
    /// closed and then removed only after `unlink` returned (its RELEASE and FORGET are
    /// sent in the background), and on ext4 that space would be free at once.
    pub(super) fn retry_for_space<T>(
        &self,
        op: impl Fn() -> Result<T, FsError>,
    ) -> Result<T, FsError> {
        let mut tries = 0;
        loop {
            match op() {
                Err(FsError::NoSpace) if tries < SPACE_RETRIES => {
                    tries += 1;
                    let (waiting, ticket) = {
                        let mut g = self.inner.lock();
                        let deadline = g.orphaned_at.map(|t| t + ORPHAN_GRACE);
                        while let Some(d) = deadline {
                            if g.alloc.frees_waiting() || !g.holds_orphans() {
                                break;
                            }
                            if self.released.wait_until(&mut g, d).timed_out() {
                                break;
                            }
                        }
                        (g.alloc.frees_waiting(), g.gen)
                    };
                    if !waiting {
                        return Err(FsError::NoSpace);
                    }
                    self.space_commits.fetch_add(1, Ordering::Relaxed);
                    self.commit_upto(ticket)?;
                }
                r => return r,
            }
        }
    }

    /// Refuses a change on a read-only mount; first commits what is queued once it grew
    /// past [`PENDING_COMMIT_BYTES`]. Called before any inode lock or the gate is taken, as
    /// the commit waits for the data operations holding the gate.
    pub(super) fn writable(&self) -> Result<(), FsError> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        let ticket = {
            let g = self.inner.lock();
            if g.pending_bytes < PENDING_COMMIT_BYTES || g.pending.is_empty() {
                return Ok(());
            }
            g.gen
        };
        self.commit_upto(ticket)
    }

    /// [`Fs::writable`] for a change that must not wait: `Ok(false)` where queued records
    /// are due to be committed first.
    pub(super) fn writable_now(&self) -> Result<bool, FsError> {
        if self.read_only {
            return Err(FsError::ReadOnly);
        }
        let g = self.inner.lock();
        Ok(g.pending_bytes < PENDING_COMMIT_BYTES || g.pending.is_empty())
    }

    /// Whether a change made now would first wait for a commit (its queued records past
    /// their bound). On a read-only volume no: the change fails at once. A caller that must
    /// not block (a thread serving other requests too) makes a metadata change itself only
    /// when this is false, and otherwise hands it to a thread that may wait.
    pub fn change_would_wait(&self) -> bool {
        matches!(self.writable_now(), Ok(false))
    }

    /// [`Fs::writable`], then the volume lock, for a change that does no device I/O.
    pub(super) fn lock_rw(&self) -> Result<MutexGuard<'_, Inner>, FsError> {
        self.writable()?;
        Ok(self.inner.lock())
    }

    /// Makes everything done so far durable (a global commit, shared with concurrent
    /// syncs). `datasync` of a file whose size and block map have no change pending only
    /// syncs the devices holding its blocks: its data is written in place under metadata
    /// already durable, and fdatasync need not make the times durable.
    pub fn fsync(&self, ino: u64, datasync: bool) -> Result<(), FsError> {
        self.sync_requests.fetch_add(1, Ordering::Relaxed);
        let mut g = self.inner.lock();
        g.overwrites.sync_of(ino);
        let i = g.inode(ino)?;
        if datasync && !self.read_only {
            let need = g.datasync_gen.get(&ino).copied().unwrap_or(0);
            if need <= self.durable_gen.load(Ordering::Acquire) {
                if g.journal.newest_data {
                    // Syncing the data alone could make an overwrite of blocks whose
                    // older contents the newest record carries durable: a record must
                    // come with it ("Data in the record").
                    let ticket = g.gen;
                    drop(g);
                    return self.commit_as(ticket, true);
                }
                let devs: BTreeSet<u16> = i.extents.values().map(|e| e.dev).collect();
                drop(g);
                self.sync_devices(&devs.into_iter().collect::<Vec<_>>())?;
                self.data_only_syncs.fetch_add(1, Ordering::Relaxed);
                return Ok(());
            }
        }
        let ticket = g.gen;
        drop(g);
        self.commit_upto(ticket)
    }

    /// Makes the entries of directory `ino` durable (created, removed and renamed names):
    /// a global commit like [`Fs::fsync`]. The entries are the directory's data, so there
    /// is no data-only shortcut.
    pub fn fsync_dir(&self, ino: u64) -> Result<(), FsError> {
        if self.getattr(ino)?.kind != Kind::Dir {
            return Err(FsError::NotDir);
        }
        self.fsync(ino, false)
    }

    /// Makes everything done so far durable.
    pub fn sync(&self) -> Result<(), FsError> {
        self.sync_requests.fetch_add(1, Ordering::Relaxed);
        let ticket = {
            let mut g = self.inner.lock();
            g.overwrites.sync_all();
            g.gen
        };
        self.commit_upto(ticket)
    }
}

impl Inner {
    /// Queues a failed commit's records again, ahead of what came since, with the data
    /// devices and blocks it would have synced: nothing of it is known durable, so the
    /// next commit writes it.
    fn requeue(
        &mut self,
        records: Vec<Record>,
        devs: Vec<u16>,
        ordered: bool,
        runs: Vec<(u16, u64, u64)>,
        overwrites: super::overwrites::Overwrites,
    ) {
        let later = std::mem::replace(&mut self.pending, records);
        self.pending.extend(later);
        self.last_setattr.clear();
        self.data_dirty.extend(devs);
        self.ordered |= ordered;
        self.ordered_runs.extend(runs);
        self.overwrites.merge_back(overwrites);
    }
}

impl shared::FsCore {
    /// Commits everything queued unless it is durable already (the periodic commit);
    /// whether a commit was needed.
    pub(super) fn commit_all(&self) -> Result<bool, FsError> {
        let ticket = self.inner.lock().gen;
        if self.durable_gen.load(Ordering::Acquire) >= ticket {
            return Ok(false);
        }
        self.commit_upto(ticket)?;
        // Counted once made: a count seen means its commit is durable.
        self.periodic_commits.fetch_add(1, Ordering::Relaxed);
        Ok(true)
    }

    /// Commits everything queued with `g` held throughout: at mount and unmount, and for a
    /// commit that needs a checkpoint (which must see no change after the commit). The
    /// caller holds `commit_lock` or owns the `Fs` alone.
    pub(super) fn commit_locked(&self, g: &mut Inner) -> Result<(), FsError> {
        if self.read_only {
            return Ok(());
        }
        let devs: Vec<u16> = g.data_dirty.iter().copied().collect();
        self.sync_devices(&devs)?;
        g.data_dirty.clear();
        g.ordered_runs.clear();
        g.overwrites = Default::default();
        if !g.pending.is_empty() || (g.journal.newest_data && !devs.is_empty()) {
            let seq = g.journal.seq + 1;
            let payload = crate::format::encode(&g.pending);
            if g.journal.fits(payload.len()) {
                g.journal.append(&*self.store, seq, &payload)?;
            } else {
                g.journal.checkpoint(&*self.store, &g.meta, seq)?;
            }
            g.pending.clear();
            g.last_setattr.clear();
            g.alloc.commit_frees();
            g.commits += 1;
            if g.journal.pos > g.journal.capacity() / 2 {
                // The commit is durable already; a checkpoint that does not fit is retried
                // at the next commit (which fails with NoSpace only if its record does not
                // fit the journal either).
                let inner = &mut *g;
                match inner.journal.checkpoint(&*self.store, &inner.meta, seq) {
                    Ok(()) | Err(FsError::NoSpace) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        g.ordered = false;
        let gen = g.gen;
        g.datasync_gen.retain(|_, v| *v > gen);
        self.durable_gen.store(gen, Ordering::Release);
        Ok(())
    }

    /// Makes every change up to generation `ticket` durable. One caller at a time writes a
    /// commit, outside the file system's lock, so operations go on meanwhile; callers that
    /// arrive during it wait for it and are then covered by it or by the next one, which
    /// takes everything queued by then: one journal write and device sync for many syncs.
    ///
    /// What is queued is taken with the data gate held exclusively, so no data operation is
    /// half done then: every block a taken record maps was written and its device is among
    /// those the commit syncs first. A commit that needs a checkpoint encodes the metadata
    /// under the lock too (it must see exactly what the commit makes durable) and writes it
    /// outside. Lock order: `commit_lock`, then `gate`, then `inner` (then the allocator's,
    /// one at a time, to seal the frees). The caller holds no inode lock that a data
    /// operation holding the gate could wait for (none does: the gate is taken after the
    /// inode lock) and not the gate itself.
    pub(super) fn commit_upto(&self, ticket: u64) -> Result<(), FsError> {
        self.commit_as(ticket, false)
    }

    /// [`FsCore::commit_upto`]; with `retire`, also when everything is durable, if the
    /// newest record carries data: a record (empty if nothing is queued) then goes with the
    /// devices' sync, so no later overwrite of that data becomes durable without one.
    pub(super) fn commit_as(&self, ticket: u64, retire: bool) -> Result<(), FsError> {
        if self.read_only {
            return Ok(());
        }
        let mut pace = self.commit_lock.lock();
        if self.durable_gen.load(Ordering::Acquire) >= ticket
            && !(retire && self.inner.lock().journal.newest_data)
        {
            return Ok(());
        }
        // Other threads are syncing too: give those about to ask a moment to join this
        // commit rather than wait for the next one.
        while let Some(wait) = pace.batch_wait(self.sync_requests.load(Ordering::Relaxed)) {
            std::thread::sleep(wait.min(Duration::from_micros(200)));
        }
        pace.taken(self.sync_requests.load(Ordering::Relaxed));
        let gate = self.gate.write();
        let mut g = self.inner.lock();
        let gen = g.gen;
        let mut journal_write = None;
        let mut checkpoint = None;
        // The data to carry in the record, if it is carried.
        let mut inline = Vec::new();
        let record = !g.pending.is_empty()
            || (g.journal.newest_data && (retire || !g.data_dirty.is_empty()));
        if record {
            let payload = crate::format::encode(&g.pending);
            let seq = g.journal.seq + 1;
            let mut size = payload.len();
            // The synced files' overwrites in place go in the record too: its one flush
            // may make it durable before them (see `overwrites.rs`).
            let carried = g.overwrites.to_order().filter(|_| g.ordered);
            if let Some(over) = carried {
                let runs = super::inner::merge_runs([g.ordered_runs.clone(), over].concat());
                let with_data = size + inline_bound(&runs) as usize;
                if worth_inlining(&g.journal, &runs) && g.journal.fits(with_data) {
                    inline = runs;
                    size = with_data;
                }
            }
            let after = g.journal.pos + (crate::format::RECORD_HEADER + size) as u64;
            if !g.journal.fits(size) {
                // The record does not fit: a checkpoint takes its place.
                checkpoint = Some(g.journal.prepare_checkpoint(&g.meta, seq)?);
            } else {
                if inline.is_empty() {
                    journal_write = Some(g.journal.prepare(seq, &payload, false));
                }
                if after > g.journal.capacity() / 2 {
                    // Empties the journal once the record is durable; one that does not fit
                    // is tried again at the next commit (which fails with NoSpace only if
                    // its record does not fit the journal either).
                    match g.journal.prepare_checkpoint(&g.meta, seq) {
                        Ok(c) => checkpoint = Some(c),
                        Err(FsError::NoSpace) => {}
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        let devs: Vec<u16> = std::mem::take(&mut g.data_dirty).into_iter().collect();
        let mut ordered = std::mem::take(&mut g.ordered);
        let runs = std::mem::take(&mut g.ordered_runs);
        let overwrites = std::mem::take(&mut g.overwrites);
        let records = std::mem::take(&mut g.pending);
        g.last_setattr.clear();
        g.alloc.seal_frees();
        drop(g);
        drop(gate);
        if !inline.is_empty() {
            // The record carries the data: read back now (a later overwrite read in part
            // is one no sync acknowledged), and one flush covers record and data.
            let w = self.data_records(&inline).map(|data| {
                let payload = crate::format::encode(&WithData(&records, &data));
                let g = self.inner.lock();
                g.journal.prepare(g.journal.seq + 1, &payload, true)
            });
            match w {
                Ok(w) => {
                    journal_write = Some(w);
                    ordered = false;
                }
                Err(e) => {
                    self.inner
                        .lock()
                        .requeue(records, devs, true, runs, overwrites);
                    return Err(e);
                }
            }
        }
        // A checkpoint in place of the record: the data it maps goes first.
        let instead = journal_write.is_none() && checkpoint.is_some();
        let r = match (&journal_write, &checkpoint) {
            (None, Some(c)) => self
                .sync_devices(&devs)
                .and_then(|()| c.write(&*self.store)),
            (w, _) => self.write_commit(&devs, ordered, w.as_ref()),
        };
        let mut g = self.inner.lock();
        match r {
            Ok(()) => {
                if let Some(w) = journal_write {
                    g.journal.finish(w);
                    g.commits += 1;
                }
                if instead {
                    if let Some(c) = checkpoint.take() {
                        g.journal.finish_checkpoint(c);
                        g.commits += 1;
                    }
                }
                g.alloc.commit_sealed_frees();
                g.datasync_gen.retain(|_, v| *v > gen);
                self.durable_gen.store(gen, Ordering::Release);
                pace.written(self.sync_requests.load(Ordering::Relaxed));
            }
            Err(e) => {
                g.requeue(
                    records,
                    devs,
                    ordered || !inline.is_empty(),
                    runs,
                    overwrites,
                );
                return Err(e);
            }
        }
        let Some(c) = checkpoint else {
            return Ok(());
        };
        // The commit is durable; the checkpoint that empties the journal after it is
        // written with the lock released too.
        drop(g);
        let r = c.write(&*self.store);
        if r.is_ok() {
            self.inner.lock().journal.finish_checkpoint(c);
        }
        r
    }

    /// The data records carrying what device blocks `runs` hold now.
    fn data_records(&self, runs: &[(u16, u64, u64)]) -> Result<Vec<Record>, FsError> {
        runs.iter()
            .map(|&(dev, start, len)| {
                let mut bytes = vec![0u8; (len * BLOCK_SIZE) as usize];
                self.store.read_at(dev, start * BLOCK_SIZE, &mut bytes)?;
                Ok(Record::Data { dev, start, bytes })
            })
            .collect()
    }

    /// The device writes of one commit. Ordered data (new blocks, zeroed tails) is synced
    /// before the journal record that points at it; when there is none, the journal goes
    /// first and one sync of device 0 covers its data and the record together.
    fn write_commit(
        &self,
        devs: &[u16],
        ordered: bool,
        w: Option<&journal::JournalWrite>,
    ) -> Result<(), FsError> {
        let Some(w) = w else {
            return self.sync_devices(devs);
        };
        let journal = || {
            self.store
                .write_at(0, w.offset, &w.buf)
                .and_then(|()| self.store.sync(0))
        };
        if ordered {
            self.sync_devices(devs)?;
            return journal();
        }
        // Nothing in the record points at unsynced data: the record and the other devices'
        // syncs go at once.
        let others: Vec<u16> = devs.iter().copied().filter(|&d| d != 0).collect();
        if others.is_empty() {
            return journal();
        }
        std::thread::scope(|s| {
            let rest = s.spawn(|| self.sync_devices(&others));
            let r = journal();
            let rest = rest.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
            r.and(rest)
        })
    }

    /// Syncs the devices `devs`, all at once: each device's flush waits on its own
    /// hardware, so a commit over several nodes' devices costs one flush, not one per device.
    pub(super) fn sync_devices(&self, devs: &[u16]) -> Result<(), FsError> {
        match devs {
            [] => Ok(()),
            [d] => self.store.sync(*d),
            [first, rest @ ..] => std::thread::scope(|s| {
                let others: Vec<_> = rest
                    .iter()
                    .map(|&d| s.spawn(move || self.store.sync(d)))
                    .collect();
                let mut r = self.store.sync(*first);
                for h in others {
                    let o = h.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
                    r = r.and(o);
                }
                r
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_syncs_from_several_threads_make_a_commit_wait() {
        let mut p = Pace::default();
        assert_eq!(p.batch_wait(1), None, "no commit yet");
        // One thread: one request per commit, none during it: never a wait.
        for r in 1..5 {
            p.taken(r);
            p.avg_ns = 40_000_000;
            p.written(r);
            assert_eq!(p.batch_wait(r + 1), None);
        }
        // Eight threads in two groups of four: a commit served four while four more
        // arrived; the next, with those four waiting, waits for the other four, at most
        // half a commit's time, capped.
        p.taken(8);
        p.avg_ns = 40_000_000;
        p.written(12);
        assert_eq!(p.served, 4);
        let w = p.batch_wait(12).expect("a wait");
        assert!(w > Duration::ZERO && w <= MAX_BATCH_WAIT, "{w:?}");
        assert!(p.batch_wait(15).is_some());
        // All eight there: it goes.
        assert_eq!(p.batch_wait(16), None);
        // Merged: the commit served all eight and none arrived meanwhile; the next goes
        // once the eight are back.
        p.taken(16);
        p.written(16);
        assert!(p.batch_wait(20).is_some());
        assert_eq!(p.batch_wait(24), None);
        // A periodic commit with no request since the take does not wait.
        assert_eq!(p.batch_wait(16), None);
        // Commits of a fast device: the wait is no longer than half a commit.
        p.avg_ns = 100_000;
        assert!(p
            .batch_wait(20)
            .is_none_or(|w| w <= Duration::from_micros(50)));
    }
}
