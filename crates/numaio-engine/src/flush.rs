//! Writing dirty blocks back: the evictor's coalesced runs, `sync_range` and `fsync`.
//! The per-block protocol (one write-back of a block at a time) is `slice::writeback`.

use crate::blockio::{runs, Transfer};
use crate::error::{EngineError, WriteBackError};
use crate::file::FileEntry;
use crate::inner::Inner;
use crate::io::IoKind;
use crate::key::{BlockKey, SlotId};
use crate::slice::Claimed;
use crate::stats::SliceCounters;
use std::io;

impl Inner {
    /// Writes back the given dirty blocks of one slice (sorted), coalescing runs; blocks
    /// whose write-back another thread has in flight are skipped, and returned still pinned
    /// in `in_flight` when `keep_in_flight` is set.
    /// Returns the first error; failed blocks stay dirty.
    pub(crate) fn writeback(
        &self,
        si: usize,
        keys: &[BlockKey],
        keep_in_flight: bool,
    ) -> (io::Result<()>, Vec<(BlockKey, SlotId)>) {
        let slice = &self.slices[si];
        // Each claimed block stays pinned, so it cannot be reclaimed and reused while the
        // write is in flight.
        let Claimed {
            mine: pinned,
            in_flight,
        } = slice.claim_writeback(keys);
        let in_flight = if keep_in_flight {
            in_flight
        } else {
            for &(_, slot) in &in_flight {
                slice.unpin(slot);
            }
            Vec::new()
        };
        let mut first_err: Option<io::Error> = None;
        let mut i = 0;
        while i < pinned.len() {
            // One file at a time, so the EINVAL fallback applies per file.
            let fid = pinned[i].0.file;
            let mut j = i;
            while j < pinned.len() && pinned[j].0.file == fid {
                j += 1;
            }
            let group = &pinned[i..j];
            let f = self.files.get(fid);
            let items: Vec<Transfer> = group.iter().map(|&(k, s, _)| (si, k.block, s)).collect();
            let runs = runs(&items, self.cfg.max_io_blocks);
            let do_io = || match self.io_runs(&f, IoKind::Write, &items, &runs) {
                Ok(r) => r,
                Err(e) => runs
                    .iter()
                    .map(|_| Err(crate::error::clone_io(&e)))
                    .collect(),
            };
            // Checksums are computed while the write is in flight and recorded only for runs
            // that reached the device.
            // A durable sum store marks the blocks first; if it cannot, nothing is written.
            let begun = match &self.cfg.integrity {
                Some(ig) => {
                    let blocks: Vec<u64> = items.iter().map(|&(_, b, _)| b).collect();
                    ig.begin_write(fid, &blocks)
                }
                None => Ok(()),
            };
            let (sums, results) = match (&self.cfg.integrity, begun) {
                (_, Err(e)) => (
                    None,
                    runs.iter()
                        .map(|_| Err(crate::error::clone_io(&e)))
                        .collect::<Vec<_>>(),
                ),
                (Some(ig), Ok(())) => {
                    let blocks: Vec<&[u8]> = items
                        .iter()
                        // SAFETY: the slots are pinned for the whole write-back; a concurrent
                        // copy into a block is detected below (`unchanged_since`) and its sum
                        // is not kept.
                        .map(|&(_, _, slot)| unsafe {
                            std::slice::from_raw_parts(slice.buf_ptr(slot), self.bs)
                        })
                        .collect();
                    let mut results = None;
                    let sums = ig.sum_while(&blocks, &mut || results = Some(do_io()));
                    let results = results.unwrap_or_else(|| {
                        runs.iter()
                            .map(|_| Err(io::Error::other("write-back was not issued")))
                            .collect()
                    });
                    (Some(sums), results)
                }
                (None, Ok(())) => (None, do_io()),
            };
            for (run, r) in runs.iter().zip(results) {
                let n = run.len();
                let ok = r.is_ok();
                // Every block whose write was begun ends its checksum record here, written or
                // not, and before its WRITEBACK bit clears: otherwise the next write-back of
                // the block could begin while this one's record is still pending, and the sum
                // file would have to assume two writes overlapped on the device and leave the
                // block unsettled after the next fsync. A block modified during its write may
                // differ from the sum taken of it: only the sums of blocks no copy touched
                // during the write are kept (such a copy also leaves the block dirty for
                // another write-back).
                if let (Some(ig), Some(sums)) = (&self.cfg.integrity, &sums) {
                    for (x, &(_, slot, gen)) in run.clone().zip(&group[run.clone()]) {
                        match (ok && slice.unchanged_since(slot, gen), sums.get(x)) {
                            (true, Some(&sum)) => ig.commit(fid, items[x].1, sum),
                            _ => ig.invalidate(fid, items[x].1),
                        }
                    }
                }
                for &(k, slot, gen) in &group[run.clone()] {
                    slice.end_writeback(&k, slot, gen, ok);
                }
                let c = slice.counters();
                match r {
                    Ok(_) => {
                        slice.clear_writeback_failure();
                        SliceCounters::add(&c.write_ios, 1);
                        SliceCounters::add(&c.write_bytes, (n * self.bs) as u64);
                        SliceCounters::add(&c.written_back, n as u64);
                    }
                    Err(e) => {
                        SliceCounters::add(&c.write_errors, 1);
                        let w = WriteBackError::new(
                            format!("write-back to {} failed", f.path.display()),
                            Some(&f.path),
                            &e,
                        );
                        f.record_error(&w);
                        if first_err.is_none() {
                            first_err = Some(w.to_io());
                        }
                    }
                }
            }
            i = j;
        }
        for &(_, slot, _) in &pinned {
            slice.unpin(slot);
        }
        (first_err.map_or(Ok(()), Err), in_flight)
    }

    /// Writes back the dirty blocks of `f` in `[first, last]` from every slice, and waits
    /// for write-backs of them that other threads (the evictor, another `fsync`) have in
    /// flight: when this returns, every modification made before the call is on the device
    /// or its failure has been returned or recorded for `fsync`.
    pub(crate) fn flush_range(&self, f: &FileEntry, first: u64, last: u64) -> io::Result<()> {
        let mut first_err = Ok(());
        for si in 0..self.slices.len() {
            let slice = &self.slices[si];
            let mut keys = slice.dirty_in(f.id, first, last);
            // A block another thread was writing may have been modified during that write
            // (or the write failed): once it ends, write what is still dirty ourselves.
            while !keys.is_empty() {
                let mut again = Vec::new();
                for chunk in keys.chunks(4096) {
                    let (r, in_flight) = self.writeback(si, chunk, true);
                    if let Err(e) = r {
                        if first_err.is_ok() {
                            first_err = Err(e);
                        }
                    }
                    for (k, slot) in in_flight {
                        let waited = slice.wait_writeback(slot);
                        slice.unpin(slot);
                        match waited {
                            Ok(()) => again.push(k),
                            Err(e) => {
                                if first_err.is_ok() {
                                    first_err = Err(e);
                                }
                            }
                        }
                    }
                }
                keys = again;
            }
        }
        first_err
    }

    pub(crate) fn fsync(&self, f: &FileEntry) -> io::Result<()> {
        let r = self.flush_range(f, 0, u64::MAX);
        let recorded = f.take_error().map_or(Ok(()), |e| Err(e.to_io()));
        r?;
        recorded?;
        // Whole-block writes may have extended the file past its logical end.
        let size = f.len();
        let fd = f.meta_fd();
        // SAFETY: a zeroed stat is a valid out-parameter.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fstat on our own descriptor into a live stat.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = io::Error::last_os_error();
            return Err(EngineError::os("fsync: fstat of", &f.path, e).into());
        }
        if st.st_size as u64 > size {
            // SAFETY: ftruncate on our own descriptor.
            if unsafe { libc::ftruncate(fd, size as libc::off_t) } != 0 {
                let e = io::Error::last_os_error();
                // The file keeps up to a block past its length until this succeeds.
                return Err(EngineError::os(
                    "fsync: cannot trim to its length after whole-block writes (ftruncate)",
                    &f.path,
                    e,
                )
                .into());
            }
        }
        let mut data_sync = || {
            self.backend
                .datasync(fd)
                .map_err(|e| EngineError::os("fdatasync of", &f.path, e).into())
        };
        match &self.cfg.integrity {
            Some(ig) => ig.sync(f.id, &mut data_sync),
            None => data_sync(),
        }
    }
}

/// The evictor of slice `si`: sleeps until the free count drops below the low watermark,
/// then frees until the high watermark, writing dirty victims back in coalesced runs.
pub(crate) fn evictor(inner: &Inner, si: usize) {
    use std::time::Duration;
    let slice = &inner.slices[si];
    let mut backoff = false;
    loop {
        let t = if backoff {
            Duration::from_millis(100)
        } else {
            Duration::from_secs(1)
        };
        if !slice.evictor_wait(t) {
            return;
        }
        backoff = false;
        let mut rounds = 0;
        loop {
            let want = slice.eviction_wanted();
            if want == 0 || rounds >= 64 {
                break;
            }
            rounds += 1;
            let (freed, victims) = slice.evict_pass(want);
            if !victims.is_empty() {
                let dirty = slice.dirty_runs_around(victims, inner.cfg.max_io_blocks);
                if let (Err(e), _) = inner.writeback(si, &dirty, false) {
                    // Requests stalled for a free buffer fail with this error at once.
                    let w = e
                        .get_ref()
                        .and_then(|x| x.downcast_ref::<WriteBackError>())
                        .cloned()
                        .unwrap_or_else(|| {
                            WriteBackError::new("write-back failed".into(), None, &e)
                        });
                    slice.report_writeback_failure(w);
                    backoff = true;
                    break;
                }
            } else if freed == 0 {
                break;
            }
        }
        slice.end_evictor_round();
    }
}
