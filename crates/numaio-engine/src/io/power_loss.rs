//! A power-loss simulator: a [`Backend`] wrapper that knows which written bytes a real disk
//! would still hold after the power went out.
//!
//! Killing a process cannot test durability: the kernel's page cache survives the kill, so a
//! missing `fdatasync` goes unnoticed. Like RocksDB's `FaultInjectionTestFS` and LazyFS,
//! [`PowerLossBackend`] keeps, per file (by device and inode, so a file written through an
//! O_DIRECT descriptor and synced through a buffered one is one file):
//!
//! * a **durable image**: the contents as of the last completed [`Backend::datasync`];
//! * the **volatile writes** completed since, in completion order.
//!
//! `datasync(fd)` folds the file's volatile writes into its durable image and takes the file's
//! current size as its durable size (so a `ftruncate` done before the sync counts).
//! [`PowerLossControl::power_cut`] then freezes everything: it waits for I/O in flight, rewrites
//! each real file to hold only its durable image (optionally plus a random subset of the
//! unsynced writes, torn at sector granularity, because a real disk may persist any of them in
//! any order), and from then on every read, write and sync through the backend fails with
//! `EIO`, so the program under test cannot sneak data to the disk after the cut.
//!
//! After the cut, open the files again with a fresh engine on a plain backend and check that
//! everything acknowledged by a completed sync is there.
//!
//! Limits, by design of a test tool:
//! * durable images live in memory: use it on test-sized files;
//! * a file is tracked from the first request that touches it; its contents at that moment
//!   are taken as durable (files prepared before the engine opened them count as synced);
//! * a write that fails is assumed to have written nothing;
//! * only I/O through the backend is seen: size changes made directly on a descriptor become
//!   durable at the next `datasync`, and are not blocked after the cut.
//!
//! ```no_run
//! use std::sync::Arc;
//! use numaio_engine::power_loss::{PowerLossBackend, PowerLossOptions};
//! use numaio_engine::{Backend, Engine, EngineConfig, OpenOptions, PsyncBackend};
//! let (backend, power) = PowerLossBackend::new(
//!     Arc::new(PsyncBackend) as Arc<dyn Backend>,
//!     PowerLossOptions::default(),
//! );
//! let engine = Engine::new(EngineConfig { backend: Some(Arc::new(backend)), ..Default::default() })?;
//! let f = engine.open("/tmp/f", OpenOptions::create_rw())?;
//! f.pwrite(b"kept", 0)?;
//! f.fsync()?;
//! f.pwrite(b"lost", 0)?;
//! let report = power.power_cut()?;
//! assert!(f.fsync().is_err()); // nothing reaches the disk after the cut
//! drop(engine);
//! assert_eq!(std::fs::read("/tmp/f")?, b"kept");
//! # Ok::<(), std::io::Error>(())
//! ```

use crate::io::{Backend, IoKind, IoQueue, IoRequest};
use numaio_testkit::power_cut::{CutCounts, CutRule, Rng, Volatile};
use parking_lot::{Mutex, RwLock};
use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// What survives a power cut besides the synced data.
#[derive(Clone, Debug)]
pub struct PowerLossOptions {
    /// Probability that an unsynced write reaches the disk anyway (0 = drop every unsynced
    /// write, the strictest check of the sync protocol; 1 = keep all of them).
    pub keep_unsynced: f64,
    /// Keep a kept unsynced write only in part: each of its sectors independently, with
    /// probability one half (a torn write).
    pub torn: bool,
    /// Sector size for torn writes (the disk's atomic unit). Default 512.
    pub sector: usize,
    /// Seed of the choices made at the cut (same seed and same history: same result).
    pub seed: u64,
    /// Also call the inner backend's `datasync` (off: the model alone decides durability,
    /// which keeps thousands of cut points fast).
    pub real_sync: bool,
    /// Print every write, sync and cut to stderr (for debugging a failing seed).
    pub trace: bool,
}

impl Default for PowerLossOptions {
    fn default() -> Self {
        PowerLossOptions {
            keep_unsynced: 0.0,
            torn: false,
            sector: 512,
            seed: 0,
            real_sync: false,
            trace: false,
        }
    }
}

/// Counters of a [`PowerLossBackend`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PowerLossStats {
    /// Writes completed (recorded as volatile).
    pub writes: u64,
    /// Bytes of those writes.
    pub write_bytes: u64,
    /// Completed `datasync` calls.
    pub syncs: u64,
    /// Requests and syncs refused with EIO after the cut.
    pub refused: u64,
    /// Writes submitted before a `datasync` of their file began that completed only after
    /// it returned: a sync that did not wait for a write in flight. Such a write can land
    /// on top of newer synced data (or past the synced end of the file). Harmless only when
    /// the sync was not meant to cover it (a range sync elsewhere in the file).
    pub late_writes: u64,
    /// Writes submitted while another write to an overlapping range of the same file was
    /// still in flight: their order on the disk is up to the device, so the older data may
    /// win.
    pub overlapping_writes: u64,
}

/// What a power cut did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CutReport {
    /// Files rewritten to their durable state.
    pub files: usize,
    /// Unsynced writes dropped entirely.
    pub dropped_writes: u64,
    /// Unsynced writes kept whole.
    pub kept_writes: u64,
    /// Unsynced writes kept in part (some sectors only).
    pub torn_writes: u64,
}

/// The model of one file.
struct FileModel {
    /// Our own descriptor (not the engine's, which may be O_DIRECT or closed at the cut).
    fd: OwnedFd,
    path: PathBuf,
    /// Its durable image and the writes completed since its last sync.
    image: Volatile,
    /// Completed syncs of this file (to spot writes that straddle one).
    syncs: u64,
    /// Writes in flight: (id, start, end).
    in_flight: Vec<(u64, u64, u64)>,
}

type FileKey = (u64, u64);

/// The switch and the model shared by a [`PowerLossBackend`], its queues and the test.
pub struct PowerLossControl {
    opts: PowerLossOptions,
    /// True once the power is cut. I/O holds the read side while it runs, so the cut (write
    /// side) waits for requests in flight and no request starts after it.
    cut: RwLock<bool>,
    files: Mutex<HashMap<FileKey, FileModel>>,
    writes: AtomicU64,
    write_bytes: AtomicU64,
    syncs: AtomicU64,
    refused: AtomicU64,
    late_writes: AtomicU64,
    overlapping_writes: AtomicU64,
    next_id: AtomicU64,
}

/// The [`Backend`] wrapper; see the [module documentation](self).
pub struct PowerLossBackend {
    inner: Arc<dyn Backend>,
    ctl: Arc<PowerLossControl>,
}

impl PowerLossBackend {
    /// Wraps `inner`; the returned control cuts the power and reads the counters.
    pub fn new(inner: Arc<dyn Backend>, opts: PowerLossOptions) -> (Self, Arc<PowerLossControl>) {
        let ctl = Arc::new(PowerLossControl {
            opts,
            cut: RwLock::new(false),
            files: Mutex::new(HashMap::new()),
            writes: AtomicU64::new(0),
            write_bytes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            late_writes: AtomicU64::new(0),
            overlapping_writes: AtomicU64::new(0),
            next_id: AtomicU64::new(0),
        });
        (
            PowerLossBackend {
                inner,
                ctl: ctl.clone(),
            },
            ctl,
        )
    }
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(libc::EIO)
}

fn fstat(fd: RawFd) -> io::Result<libc::stat> {
    // SAFETY: fstat writes into the zeroed struct we own; any fd value is safe to pass.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// `fd` as a `File` that is never closed here: the caller owns the descriptor.
fn borrowed(fd: RawFd) -> std::mem::ManuallyDrop<std::fs::File> {
    use std::os::fd::FromRawFd;
    // SAFETY: callers keep `fd` open while the result is used, and `ManuallyDrop` never
    // closes it, so ownership stays with the caller.
    std::mem::ManuallyDrop::new(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Reads the whole file behind `fd` (positional reads, so the descriptor's offset is kept).
fn read_all(fd: RawFd, len: u64) -> io::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt;
    let f = borrowed(fd);
    let mut buf = vec![0u8; len as usize];
    let mut done = 0usize;
    while done < buf.len() {
        match f.read_at(&mut buf[done..], done as u64) {
            Ok(0) => {
                buf.truncate(done);
                break;
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(buf)
}

fn write_all(fd: RawFd, data: &[u8]) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    borrowed(fd).write_all_at(data, 0)
}

impl PowerLossControl {
    /// The model of the file behind `fd`, tracking it from now on if it is new.
    fn model(
        files: &mut HashMap<FileKey, FileModel>,
        fd: RawFd,
    ) -> io::Result<(&mut FileModel, libc::stat)> {
        let st = fstat(fd)?;
        let key = (st.st_dev, st.st_ino);
        if let std::collections::hash_map::Entry::Vacant(v) = files.entry(key) {
            // Our own open file description: the engine's may be O_DIRECT (alignment rules)
            // or closed by the time of the cut.
            let link = format!("/proc/self/fd/{fd}");
            let path = std::fs::read_link(&link).unwrap_or_else(|_| PathBuf::from(&link));
            let c = std::ffi::CString::new(link.clone()).expect("no NUL in a /proc path");
            // SAFETY: valid C string; the descriptor is owned immediately below.
            let own = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
            if own < 0 {
                let e = io::Error::last_os_error();
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "power-loss model cannot reopen {} (fd {fd}) read-write: {e}",
                        path.display()
                    ),
                ));
            }
            // SAFETY: `own` is a fresh descriptor nobody else owns.
            let own = unsafe { OwnedFd::from_raw_fd(own) };
            let durable = read_all(own.as_raw_fd(), st.st_size as u64).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "power-loss model cannot read {} to take its durable state: {e}",
                        path.display()
                    ),
                )
            })?;
            v.insert(FileModel {
                fd: own,
                path,
                image: Volatile::new(durable),
                syncs: 0,
                in_flight: Vec::new(),
            });
        }
        Ok((files.get_mut(&key).expect("inserted above"), st))
    }

    fn refuse(&self) -> io::Error {
        self.refused.fetch_add(1, Ordering::Relaxed);
        eio()
    }

    /// Whether the power has been cut.
    pub fn is_cut(&self) -> bool {
        *self.cut.read()
    }

    pub fn stats(&self) -> PowerLossStats {
        PowerLossStats {
            writes: self.writes.load(Ordering::Relaxed),
            write_bytes: self.write_bytes.load(Ordering::Relaxed),
            syncs: self.syncs.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            late_writes: self.late_writes.load(Ordering::Relaxed),
            overlapping_writes: self.overlapping_writes.load(Ordering::Relaxed),
        }
    }

    /// Paths of the files seen so far.
    pub fn files(&self) -> Vec<PathBuf> {
        self.files.lock().values().map(|m| m.path.clone()).collect()
    }

    /// Cuts the power: waits for I/O in flight, rewrites every tracked file to its durable
    /// state (plus the unsynced writes the options let survive), and makes every later
    /// request and sync fail with EIO. A second call does nothing and reports nothing.
    pub fn power_cut(&self) -> io::Result<CutReport> {
        let mut cut = self.cut.write();
        let mut report = CutReport::default();
        if *cut {
            return Ok(report);
        }
        *cut = true;
        let mut rng = Rng(self.opts.seed ^ 0x5EED_0FC0_FFEE);
        let rule = CutRule {
            keep_unsynced: self.opts.keep_unsynced,
            torn: self.opts.torn,
            sector: self.opts.sector as u64,
        };
        let mut counts = CutCounts::default();
        let mut files = self.files.lock();
        // Same seed, same choices: visit files in a fixed order.
        let mut keys: Vec<FileKey> = files.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let m = files.get_mut(&key).expect("key from the map");
            let image = m.image.cut(&rule, &mut rng, &mut counts);
            let fd = m.fd.as_raw_fd();
            let what = |e: io::Error, op: &str| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "power cut: cannot {op} {} to its durable state: {e}",
                        m.path.display()
                    ),
                )
            };
            write_all(fd, image).map_err(|e| what(e, "write"))?;
            // SAFETY: ftruncate on our own descriptor.
            if unsafe { libc::ftruncate(fd, image.len() as libc::off_t) } != 0 {
                return Err(what(io::Error::last_os_error(), "truncate"));
            }
            report.files += 1;
        }
        report.kept_writes = counts.kept;
        report.torn_writes = counts.torn;
        report.dropped_writes = counts.dropped;
        Ok(report)
    }
}

/// A buffer aligned for O_DIRECT, made from a plain vector (no allocator calls of our own).
struct Aligned {
    buf: Vec<u8>,
    start: usize,
    len: usize,
}

impl Aligned {
    const ALIGN: usize = 4096;
    fn new(len: usize) -> Self {
        let buf = vec![0u8; len + Self::ALIGN];
        let start = buf.as_ptr().align_offset(Self::ALIGN);
        Aligned { buf, start, len }
    }
    fn as_slice(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }
    fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }
}

struct PowerLossQueue {
    inner: Box<dyn IoQueue>,
    ctl: Arc<PowerLossControl>,
}

/// A write on its way through a [`PowerLossQueue`].
struct Outgoing {
    /// Our copy of the data, which is what goes to the disk.
    copy: Aligned,
    /// The file's sync count at submission.
    epoch: u64,
    /// Key in the file's in-flight list.
    id: u64,
}

// SAFETY: writes go out from the queue's own copy, taken before anything is reported; every
// request is passed to the inner queue (which keeps the contract) or failed untouched.
unsafe impl IoQueue for PowerLossQueue {
    fn run(&mut self, reqs: &mut [IoRequest], done: &mut dyn FnMut(usize, io::Result<usize>)) {
        let cut = self.ctl.cut.read();
        if *cut {
            for i in 0..reqs.len() {
                done(i, Err(self.ctl.refuse()));
            }
            return;
        }
        let mut pass_idx: Vec<usize> = Vec::with_capacity(reqs.len());
        let mut pass: Vec<IoRequest> = Vec::with_capacity(reqs.len());
        let mut outgoing: Vec<Option<Outgoing>> = Vec::with_capacity(reqs.len());
        for (i, r) in reqs.iter_mut().enumerate() {
            let mut iovecs = std::mem::take(&mut r.iovecs);
            let mut out = None;
            if r.kind == IoKind::Write {
                // Track the file before its first write lands, so the write is not taken
                // for durable contents.
                let mut files = self.ctl.files.lock();
                let m = match PowerLossControl::model(&mut files, r.fd) {
                    Ok((m, _)) => m,
                    Err(e) => {
                        // Unmodelled data must not reach the disk.
                        drop(files);
                        done(i, Err(e));
                        continue;
                    }
                };
                let len: usize = iovecs.iter().map(|v| v.iov_len).sum();
                let end = r.offset + len as u64;
                if m.in_flight.iter().any(|&(_, a, b)| a < end && r.offset < b) {
                    self.ctl.overlapping_writes.fetch_add(1, Ordering::Relaxed);
                }
                let id = self.ctl.next_id.fetch_add(1, Ordering::Relaxed);
                m.in_flight.push((id, r.offset, end));
                // The write goes out from our own copy, so what is recorded is exactly what
                // was written even if the caller's buffer changes while it is in flight.
                let mut copy = Aligned::new(len);
                let mut at = 0;
                for v in &iovecs {
                    // SAFETY: the request's iovecs describe live buffers until it completes.
                    let src =
                        unsafe { std::slice::from_raw_parts(v.iov_base as *const u8, v.iov_len) };
                    copy.as_mut_slice()[at..at + src.len()].copy_from_slice(src);
                    at += src.len();
                }
                iovecs = vec![libc::iovec {
                    iov_base: copy.as_mut_slice().as_mut_ptr() as *mut _,
                    iov_len: len,
                }];
                out = Some(Outgoing {
                    copy,
                    epoch: m.syncs,
                    id,
                });
            }
            pass_idx.push(i);
            outgoing.push(out);
            pass.push(IoRequest {
                kind: r.kind,
                fd: r.fd,
                offset: r.offset,
                iovecs,
            });
        }
        let meta: Vec<(RawFd, u64)> = pass.iter().map(|r| (r.fd, r.offset)).collect();
        let ctl = &self.ctl;
        self.inner.run(&mut pass, &mut |j, res| {
            let res = match &outgoing[j] {
                None => res,
                Some(w) => {
                    let (fd, off) = meta[j];
                    let mut files = ctl.files.lock();
                    match PowerLossControl::model(&mut files, fd) {
                        Ok((m, _)) => {
                            m.in_flight.retain(|&(id, _, _)| id != w.id);
                            if let Ok(n) = res {
                                if m.syncs != w.epoch {
                                    ctl.late_writes.fetch_add(1, Ordering::Relaxed);
                                }
                                if ctl.opts.trace {
                                    eprintln!(
                                        "power-loss: write {} [{off}, {}) done (submitted at sync {}, now {})",
                                        m.path.display(),
                                        off + n as u64,
                                        w.epoch,
                                        m.syncs
                                    );
                                }
                                m.image.write(off, &w.copy.as_slice()[..n]);
                                ctl.writes.fetch_add(1, Ordering::Relaxed);
                                ctl.write_bytes.fetch_add(n as u64, Ordering::Relaxed);
                            }
                            res
                        }
                        // Written but not modelled: report it as failed.
                        Err(e) => Err(e),
                    }
                }
            };
            done(pass_idx[j], res);
        });
        drop(outgoing);
        drop(cut);
    }
}

impl Backend for PowerLossBackend {
    fn name(&self) -> String {
        format!("power-loss({})", self.inner.name())
    }
    fn queue(&self, depth: u32) -> io::Result<Box<dyn IoQueue>> {
        Ok(Box::new(PowerLossQueue {
            inner: self.inner.queue(depth)?,
            ctl: self.ctl.clone(),
        }))
    }
    fn datasync(&self, fd: RawFd) -> io::Result<()> {
        let cut = self.ctl.cut.read();
        if *cut {
            return Err(self.ctl.refuse());
        }
        if self.ctl.opts.real_sync {
            self.inner.datasync(fd)?;
        }
        let mut files = self.ctl.files.lock();
        let (m, st) = PowerLossControl::model(&mut files, fd)?;
        // fdatasync makes the size durable too (it is needed to read the data back).
        m.image.sync(Some(st.st_size as u64));
        m.syncs += 1;
        if self.ctl.opts.trace {
            eprintln!(
                "power-loss: datasync {} -> sync {}, durable size {}",
                m.path.display(),
                m.syncs,
                st.st_size
            );
        }
        self.ctl.syncs.fetch_add(1, Ordering::Relaxed);
        drop(cut);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::io::PsyncBackend;
    use std::os::unix::fs::FileExt;

    fn write_req(fd: RawFd, off: u64, data: &mut [u8]) -> IoRequest {
        IoRequest {
            kind: IoKind::Write,
            fd,
            offset: off,
            iovecs: vec![libc::iovec {
                iov_base: data.as_mut_ptr() as *mut _,
                iov_len: data.len(),
            }],
        }
    }

    fn run(q: &mut dyn IoQueue, mut r: IoRequest) -> io::Result<usize> {
        let mut out = None;
        q.run(std::slice::from_mut(&mut r), &mut |_, res| out = Some(res));
        out.expect("request reported")
    }

    #[test]
    fn cut_keeps_synced_data_and_drops_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let fd = file.as_raw_fd();
        let (b, ctl) = PowerLossBackend::new(Arc::new(PsyncBackend), PowerLossOptions::default());
        let mut q = b.queue(4).unwrap();
        assert_eq!(
            run(&mut *q, write_req(fd, 2, &mut b"ab".to_vec())).unwrap(),
            2
        );
        b.datasync(fd).unwrap();
        assert_eq!(
            run(&mut *q, write_req(fd, 8, &mut b"XYZW".to_vec())).unwrap(),
            4
        );
        // Before the cut the file holds everything, as the page cache would.
        assert_eq!(std::fs::read(&path).unwrap(), b"01ab4567XYZW");
        let rep = ctl.power_cut().unwrap();
        assert_eq!(rep.files, 1);
        assert_eq!(rep.dropped_writes, 1);
        assert_eq!(std::fs::read(&path).unwrap(), b"01ab456789");
        // Nothing gets through afterwards.
        let e = run(&mut *q, write_req(fd, 0, &mut b"zz".to_vec())).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO));
        assert_eq!(b.datasync(fd).unwrap_err().raw_os_error(), Some(libc::EIO));
        assert_eq!(std::fs::read(&path).unwrap(), b"01ab456789");
        assert_eq!(ctl.stats().refused, 2);
        assert_eq!(ctl.stats().writes, 2);
    }

    #[test]
    fn overlapping_writes_in_flight_are_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"").unwrap();
        let f = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let (b, ctl) = PowerLossBackend::new(Arc::new(PsyncBackend), PowerLossOptions::default());
        let mut q = b.queue(2).unwrap();
        let (mut x, mut y, mut z) = (b"aaaa".to_vec(), b"bb".to_vec(), b"cc".to_vec());
        let mut batch = [
            write_req(f.as_raw_fd(), 0, &mut x),
            write_req(f.as_raw_fd(), 2, &mut y),
            write_req(f.as_raw_fd(), 4, &mut z),
        ];
        let mut ok = 0;
        q.run(&mut batch, &mut |_, r| ok += r.is_ok() as usize);
        assert_eq!(ok, 3);
        // The second overlaps the first while both are in flight; the third touches neither.
        assert_eq!(ctl.stats().overlapping_writes, 1);
        assert_eq!(ctl.stats().late_writes, 0);
        assert_eq!(std::fs::read(&path).unwrap(), b"aabbcc");
    }

    #[test]
    fn sync_through_another_descriptor_covers_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"").unwrap();
        let w = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let s = std::fs::File::open(&path).unwrap();
        let (b, ctl) = PowerLossBackend::new(Arc::new(PsyncBackend), PowerLossOptions::default());
        let mut q = b.queue(1).unwrap();
        run(&mut *q, write_req(w.as_raw_fd(), 0, &mut b"hello".to_vec())).unwrap();
        b.datasync(s.as_raw_fd()).unwrap();
        ctl.power_cut().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"hello");
    }

    #[test]
    fn truncation_before_sync_is_durable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, vec![7u8; 8192]).unwrap();
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap();
        let (b, ctl) = PowerLossBackend::new(Arc::new(PsyncBackend), PowerLossOptions::default());
        b.datasync(f.as_raw_fd()).unwrap(); // tracked at 8192 bytes
        f.set_len(100).unwrap();
        b.datasync(f.as_raw_fd()).unwrap();
        f.write_all_at(b"unsynced growth", 5000).unwrap(); // not through the backend
        ctl.power_cut().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), vec![7u8; 100]);
    }

    #[test]
    fn kept_unsynced_writes_are_whole_or_torn_at_sectors() {
        let dir = tempfile::tempdir().unwrap();
        for (torn, seed) in [(false, 1u64), (true, 2), (true, 3), (true, 4)] {
            let path = dir.path().join(format!("f{seed}"));
            std::fs::write(&path, vec![0u8; 4096]).unwrap();
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(&path)
                .unwrap();
            let (b, ctl) = PowerLossBackend::new(
                Arc::new(PsyncBackend),
                PowerLossOptions {
                    keep_unsynced: 1.0,
                    torn,
                    seed,
                    ..Default::default()
                },
            );
            let mut q = b.queue(1).unwrap();
            run(&mut *q, write_req(f.as_raw_fd(), 0, &mut vec![1u8; 4096])).unwrap();
            let rep = ctl.power_cut().unwrap();
            let disk = std::fs::read(&path).unwrap();
            assert_eq!(disk.len(), 4096);
            for s in disk.chunks(512) {
                assert!(s.iter().all(|&x| x == s[0]), "a sector is never split");
            }
            if !torn {
                assert_eq!(rep.kept_writes, 1);
                assert!(disk.iter().all(|&x| x == 1));
            } else {
                assert_eq!(rep.kept_writes + rep.torn_writes + rep.dropped_writes, 1);
            }
        }
    }
}
