//! Durable per-block checksums: a sum file beside each data file the engine writes
//! (`<file>.numaio-sum`), so a later process verifies what an earlier one wrote.
//!
//! Layout: a 4096-byte header (magic, version, block size, algorithm, entry size, CRC-32C of
//! the header), then one 32-byte entry per block at `4096 + 32 * block`:
//! `stable: u64, latest: u64, state: u32, crc32c(first 20 bytes): u32`, little-endian.
//! Entries never straddle a 512-byte sector, so a sector-atomic device writes each one whole.
//!
//! Crash consistency. A block's data and its entry cannot be written atomically together, and
//! a device may persist unsynced writes in any order and tear them at sectors. So an entry is
//! either **settled** (`stable == latest`, the data on the device is known to be that block)
//! or **unsettled** (a write of the block may have been in flight: the device may hold the
//! stable version, the latest one, or a torn mix):
//!
//! 1. before the first write-back of a settled block, its entry is marked unsettled and the
//!    sum file is synced (one barrier per block per sync epoch, none for a block written back
//!    again before the next `fsync`);
//! 2. the data is written (its sum computed meanwhile), then the entry `(stable, new,
//!    unsettled)`;
//! 3. `fsync`: the data file is synced, then every block whose write-back finished before it
//!    is settled (`(new, new, settled)`) and the sum file is synced.
//!
//! On load, a settled entry must match (else it is a checksum error: corruption); an
//! unsettled one passes if either sum matches and is counted unverified otherwise (a write
//! torn by a crash is not corruption); a missing or zero entry is unverified. So a crash in
//! any window never turns acknowledged data into a checksum error, and a block that was
//! settled at the crash is still checked strictly.

use crate::io::{Backend, IoKind, IoQueue, IoRequest};
use parking_lot::{Condvar, Mutex};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// The sum file's name suffix.
pub const SUFFIX: &str = ".numaio-sum";
pub const MAGIC: &[u8; 8] = b"NUMAIOSM";
pub const VERSION: u32 = 1;
pub const HEADER_LEN: usize = 4096;
pub const ENTRY_LEN: usize = 32;
const HEADER_USED: usize = 28;

/// The sum file's header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SumHeader {
    pub block_size: u32,
    /// 1 = crc32c, 2 = xxh3.
    pub algorithm: u32,
}

/// Why a sum file header was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    #[error("too short ({0} bytes, a header has {HEADER_LEN})")]
    Short(usize),
    #[error("not a numaio checksum file (bad magic)")]
    Magic,
    #[error("unsupported version {0} (this numaio reads version {VERSION})")]
    Version(u32),
    #[error("the header's checksum does not match (the header is damaged)")]
    Crc,
    #[error("invalid field: {0}")]
    Field(String),
}

impl SumHeader {
    pub fn encode(&self) -> Vec<u8> {
        let mut h = vec![0u8; HEADER_LEN];
        h[..8].copy_from_slice(MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&self.block_size.to_le_bytes());
        h[16..20].copy_from_slice(&self.algorithm.to_le_bytes());
        h[20..24].copy_from_slice(&(ENTRY_LEN as u32).to_le_bytes());
        let crc = crc32c::crc32c(&h[..24]);
        h[24..HEADER_USED].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes a header; any input gives a header or an error, never a panic.
    pub fn decode(b: &[u8]) -> Result<SumHeader, HeaderError> {
        if b.len() < HEADER_USED {
            return Err(HeaderError::Short(b.len()));
        }
        if &b[..8] != MAGIC {
            return Err(HeaderError::Magic);
        }
        let u = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if u(8) != VERSION {
            return Err(HeaderError::Version(u(8)));
        }
        if crc32c::crc32c(&b[..24]) != u(24) {
            return Err(HeaderError::Crc);
        }
        let (block_size, algorithm, entry) = (u(12), u(16), u(20));
        if block_size == 0 || !block_size.is_power_of_two() {
            return Err(HeaderError::Field(format!(
                "block size {block_size} is not a power of two"
            )));
        }
        if !(1..=2).contains(&algorithm) {
            return Err(HeaderError::Field(format!("unknown algorithm {algorithm}")));
        }
        if entry as usize != ENTRY_LEN {
            return Err(HeaderError::Field(format!("entry size {entry}")));
        }
        Ok(SumHeader {
            block_size,
            algorithm,
        })
    }
}

/// State of a block's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntryState {
    #[default]
    None,
    Settled,
    Unsettled,
}

/// One block's entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Entry {
    pub stable: u64,
    pub latest: u64,
    pub state: EntryState,
}

impl Entry {
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut e = [0u8; ENTRY_LEN];
        e[..8].copy_from_slice(&self.stable.to_le_bytes());
        e[8..16].copy_from_slice(&self.latest.to_le_bytes());
        let s: u32 = match self.state {
            EntryState::None => 0,
            EntryState::Settled => 1,
            EntryState::Unsettled => 2,
        };
        e[16..20].copy_from_slice(&s.to_le_bytes());
        let crc = crc32c::crc32c(&e[..20]);
        e[20..24].copy_from_slice(&crc.to_le_bytes());
        e
    }

    /// An all-zero entry (never written) is `None`; a damaged one is an error.
    pub fn decode(b: &[u8; ENTRY_LEN]) -> Result<Entry, String> {
        if b.iter().all(|&x| x == 0) {
            return Ok(Entry::default());
        }
        let u32at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        if crc32c::crc32c(&b[..20]) != u32at(20) {
            return Err("the entry's checksum does not match (the sum file is damaged)".into());
        }
        let state = match u32at(16) {
            0 => EntryState::None,
            1 => EntryState::Settled,
            2 => EntryState::Unsettled,
            s => return Err(format!("unknown entry state {s}")),
        };
        let u64at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Ok(Entry {
            stable: u64at(0),
            latest: u64at(8),
            state,
        })
    }
}

/// What a load's check found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    Verified,
    Unverified,
    /// A settled entry does not match: `expected` is its sum.
    Mismatch {
        expected: u64,
    },
}

/// In-memory state of a block written back during this run.
#[derive(Debug, Clone, Copy)]
struct Live {
    entry: Entry,
    /// Write-backs of the block in flight.
    in_flight: u32,
    /// Sequence number of its last finished write-back.
    seq: u64,
    /// Two write-backs overlapped, so which sum is the device's is unknown: not settled
    /// until a write-back runs alone.
    overlap: bool,
    /// Its unsettled mark is durable (no sync needed before writing it again).
    marked: bool,
    /// The `begin_write` call of its current write.
    ticket: u64,
}

#[derive(Default)]
struct LiveState {
    blocks: HashMap<u64, Live>,
    /// Blocks still being written, per `begin_write` ticket.
    active: BTreeMap<u64, usize>,
    next_ticket: u64,
}

impl LiveState {
    fn end_ticket(&mut self, t: u64) {
        if let Some(n) = self.active.get_mut(&t) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.active.remove(&t);
            }
        }
    }
}

/// The sum file of one data file.
pub struct SumFile {
    pub path: PathBuf,
    file: File,
    writable: bool,
    backend: Arc<dyn Backend>,
    queue: Mutex<Option<Box<dyn IoQueue>>>,
    live: Mutex<LiveState>,
    ended: Condvar,
    seq: AtomicU64,
    /// First failed entry write since the last sync, reported by `sync`.
    error: Mutex<Option<io::Error>>,
}

/// The sum file path of `data`.
pub fn sum_path(data: &Path) -> PathBuf {
    let mut s = data.as_os_str().to_owned();
    s.push(SUFFIX);
    PathBuf::from(s)
}

impl SumFile {
    /// Opens the sum file beside `data`. A writable data file gets a new one if it has none;
    /// a read-only one without a sum file gets `None` (its blocks are unverified).
    pub fn open(
        data: &Path,
        writable: bool,
        header: SumHeader,
        backend: Arc<dyn Backend>,
    ) -> io::Result<Option<SumFile>> {
        let path = sum_path(data);
        let ctx = |e: io::Error, what: &str| {
            io::Error::new(
                e.kind(),
                format!("checksum file {}: {what}: {e}", path.display()),
            )
        };
        let mut created = false;
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .write(writable)
            .open(&path)
        {
            Ok(f) => f,
            Err(e) if e.kind() == io::ErrorKind::NotFound && !writable => return Ok(None),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                created = true;
                std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(|e| {
                        ctx(
                            e,
                            "cannot create it (turn checksums off, or make the directory \
                             writable)",
                        )
                    })?
            }
            Err(e) => return Err(ctx(e, "cannot open it")),
        };
        let sf = SumFile {
            path: path.clone(),
            file,
            writable,
            backend,
            queue: Mutex::new(None),
            live: Mutex::new(LiveState::default()),
            ended: Condvar::new(),
            seq: AtomicU64::new(1),
            error: Mutex::new(None),
        };
        let mut h = vec![0u8; HEADER_LEN];
        let n = if created {
            0
        } else {
            read_full(&sf.file, &mut h, 0).map_err(|e| ctx(e, "cannot read its header"))?
        };
        // Empty or all zero: created by numaio, which crashed before its header was durable
        // (the header's used bytes lie in one sector, so it is never half written).
        if h[..n].iter().all(|&b| b == 0) {
            if !writable {
                return Ok(None);
            }
            return match sf.write_at(&header.encode(), 0).and_then(|_| sf.sync()) {
                Ok(()) => Ok(Some(sf)),
                Err(e) => {
                    if created {
                        let _ = std::fs::remove_file(&path);
                    }
                    Err(ctx(e, "cannot write its header"))
                }
            };
        }
        let found = SumHeader::decode(&h[..n]).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "checksum file {}: {e}; numaio does not overwrite it: move it away to \
                     start over (the data's blocks are then unverified)",
                    path.display()
                ),
            )
        })?;
        if found != header {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "checksum file {} holds sums of {}-byte blocks with algorithm {}, this \
                     engine uses {}-byte blocks with algorithm {}: open with the same block \
                     size and checksum, or move the file away to start over",
                    path.display(),
                    found.block_size,
                    found.algorithm,
                    header.block_size,
                    header.algorithm
                ),
            ));
        }
        Ok(Some(sf))
    }

    /// Writes through the engine's backend, so a power-loss model sees it like data.
    fn write_at(&self, buf: &[u8], off: u64) -> io::Result<()> {
        let mut q = self.queue.lock();
        if q.is_none() {
            *q = Some(self.backend.queue(4)?);
        }
        let q = q.as_mut().expect("set above");
        let iov = vec![libc::iovec {
            iov_base: buf.as_ptr() as *mut libc::c_void,
            iov_len: buf.len(),
        }];
        let mut reqs = [IoRequest::new(
            IoKind::Write,
            self.file.as_raw_fd(),
            off,
            iov,
        )];
        let mut res = Err(io::Error::other("write not reported"));
        // The queue only reads `buf`, which outlives `run` (queues finish before returning).
        q.run(&mut reqs, &mut |_, r| res = r);
        match res {
            Ok(n) if n == buf.len() => Ok(()),
            Ok(n) => Err(io::Error::other(format!(
                "short write ({n} of {} bytes)",
                buf.len()
            ))),
            Err(e) => Err(e),
        }
    }

    fn sync(&self) -> io::Result<()> {
        self.backend.datasync(self.file.as_raw_fd())
    }

    fn entry_off(block: u64) -> u64 {
        HEADER_LEN as u64 + block * ENTRY_LEN as u64
    }

    /// The entry on disk (none past the end of the sum file).
    fn read_entry(&self, block: u64) -> io::Result<Entry> {
        let mut b = [0u8; ENTRY_LEN];
        let n = read_full(&self.file, &mut b, Self::entry_off(block))?;
        if n < ENTRY_LEN {
            return Ok(Entry::default());
        }
        Entry::decode(&b).map_err(|m| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "checksum file {} entry of block {block}: {m}",
                    self.path.display()
                ),
            )
        })
    }

    fn write_entry(&self, block: u64, e: &Entry) -> io::Result<()> {
        self.write_at(&e.encode(), Self::entry_off(block))
    }

    fn record(&self, e: io::Error) {
        let mut g = self.error.lock();
        if g.is_none() {
            *g = Some(io::Error::new(
                e.kind(),
                format!("checksum file {}: write failed: {e}", self.path.display()),
            ));
        }
    }

    /// Before a write-back of `blocks`: marks them unsettled, durably (one sum-file sync,
    /// only when a block was not yet marked since its last settle).
    pub fn begin_write(&self, blocks: &[u64]) -> io::Result<()> {
        if !self.writable {
            return Ok(());
        }
        let mut st = self.live.lock();
        let ticket = st.next_ticket;
        st.next_ticket += 1;
        let mut need_sync = Vec::new();
        let mut begun = Vec::with_capacity(blocks.len());
        let mut result = Ok(());
        for &b in blocks {
            let mut l = match st.blocks.get(&b) {
                Some(l) => *l,
                None => match self.read_entry(b) {
                    Ok(entry) => Live {
                        entry,
                        in_flight: 0,
                        seq: 0,
                        overlap: false,
                        marked: false,
                        ticket: 0,
                    },
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                },
            };
            if !l.marked {
                l.entry.state = EntryState::Unsettled;
                if let Err(e) = self.write_entry(b, &l.entry) {
                    result = Err(e);
                    break;
                }
                need_sync.push(b);
            }
            if l.in_flight > 0 {
                // Another write of the block has not ended: which sum the device holds is
                // unknown, and that write no longer holds up a sync.
                l.overlap = true;
                st.end_ticket(l.ticket);
            } else {
                l.overlap = false;
            }
            l.in_flight += 1;
            l.ticket = ticket;
            st.blocks.insert(b, l);
            begun.push(b);
        }
        *st.active.entry(ticket).or_insert(0) += begun.len();
        drop(st);
        if result.is_ok() && !need_sync.is_empty() {
            result = self.sync();
        }
        let mut st = self.live.lock();
        if result.is_ok() {
            for b in need_sync {
                if let Some(l) = st.blocks.get_mut(&b) {
                    l.marked = true;
                }
            }
            return Ok(());
        }
        for b in begun {
            if let Some(l) = st.blocks.get_mut(&b) {
                l.in_flight -= 1;
            }
        }
        st.active.remove(&ticket);
        drop(st);
        self.ended.notify_all();
        let e = result.expect_err("checked above");
        Err(io::Error::new(
            e.kind(),
            format!(
                "checksum file {}: cannot mark blocks about to be written: {e}",
                self.path.display()
            ),
        ))
    }

    /// The write-back of `block` ended: with its new sum, or failed (`None`).
    pub fn end_write(&self, block: u64, sum: Option<u64>) {
        let mut st = self.live.lock();
        let Some(mut l) = st.blocks.get(&block).copied() else {
            return;
        };
        l.in_flight = l.in_flight.saturating_sub(1);
        match sum {
            Some(s) => {
                l.entry.latest = s;
                l.seq = self.seq.fetch_add(1, Ordering::AcqRel);
            }
            // The device holds an unknown mix: never settle on the old sum.
            None => l.overlap = true,
        }
        st.blocks.insert(block, l);
        st.end_ticket(l.ticket);
        let written = match sum {
            Some(_) => self.write_entry(block, &l.entry),
            None => Ok(()),
        };
        drop(st);
        self.ended.notify_all();
        if let Err(err) = written {
            self.record(err);
        }
    }

    /// `fsync`: waits for the write-backs begun before it, runs `data_sync`, then settles the
    /// blocks written back before it and syncs the sum file.
    pub fn sync_with(&self, data_sync: &mut dyn FnMut() -> io::Result<()>) -> io::Result<()> {
        if !self.writable {
            return data_sync();
        }
        let snap = {
            let mut st = self.live.lock();
            let me = st.next_ticket;
            while st.active.keys().next().is_some_and(|&t| t < me) {
                self.ended.wait(&mut st);
            }
            self.seq.load(Ordering::Acquire)
        };
        data_sync()?;
        if let Some(e) = self.error.lock().take() {
            return Err(e);
        }
        let mut st = self.live.lock();
        let mut settled = Vec::new();
        for (&b, l) in st.blocks.iter() {
            if l.in_flight == 0 && !l.overlap && l.seq != 0 && l.seq < snap {
                let e = Entry {
                    stable: l.entry.latest,
                    latest: l.entry.latest,
                    state: EntryState::Settled,
                };
                self.write_entry(b, &e).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!("checksum file {}: write failed: {e}", self.path.display()),
                    )
                })?;
                settled.push(b);
            }
        }
        // Settled entries are read back from the sum file when needed.
        for b in settled {
            st.blocks.remove(&b);
        }
        drop(st);
        self.sync().map_err(|e| {
            io::Error::new(
                e.kind(),
                format!(
                    "fdatasync of checksum file {} failed: {e}",
                    self.path.display()
                ),
            )
        })
    }

    /// Checks a block just loaded whose sum is `actual`.
    pub fn check(&self, block: u64, actual: u64) -> io::Result<Check> {
        let cached = self.live.lock().blocks.get(&block).map(|l| l.entry);
        let e = match cached {
            Some(e) => e,
            None => self.read_entry(block)?,
        };
        Ok(match e.state {
            EntryState::None => Check::Unverified,
            EntryState::Settled if e.stable == actual => Check::Verified,
            EntryState::Settled => Check::Mismatch { expected: e.stable },
            EntryState::Unsettled if e.stable == actual || e.latest == actual => Check::Verified,
            EntryState::Unsettled => Check::Unverified,
        })
    }
}

/// Reads until `buf` is full or end of file; returns the bytes read.
fn read_full(f: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read_at(&mut buf[n..], off + n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip_and_refusals() {
        let h = SumHeader {
            block_size: 4096,
            algorithm: 1,
        };
        let b = h.encode();
        assert_eq!(SumHeader::decode(&b), Ok(h));
        assert_eq!(SumHeader::decode(&b[..10]), Err(HeaderError::Short(10)));
        let mut bad = b.clone();
        bad[0] = b'X';
        assert_eq!(SumHeader::decode(&bad), Err(HeaderError::Magic));
        let mut bad = b.clone();
        bad[13] ^= 1;
        assert_eq!(SumHeader::decode(&bad), Err(HeaderError::Crc));
    }

    #[test]
    fn entry_round_trip() {
        let e = Entry {
            stable: 7,
            latest: 9,
            state: EntryState::Unsettled,
        };
        assert_eq!(Entry::decode(&e.encode()), Ok(e));
        assert_eq!(Entry::decode(&[0; ENTRY_LEN]), Ok(Entry::default()));
        let mut b = e.encode();
        b[3] ^= 1;
        assert!(Entry::decode(&b).is_err());
        assert_eq!(512 % ENTRY_LEN, 0);
    }
}
