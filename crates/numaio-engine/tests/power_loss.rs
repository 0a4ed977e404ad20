//! Power-loss test: random workloads on two files through an engine whose backend models
//! durability ([`PowerLossBackend`]); the power is cut at a random operation, a fresh engine
//! on a plain backend reopens the files, and every byte acknowledged by a completed fsync must
//! be there. Each byte may instead hold a value written after that fsync (a disk may persist
//! unsynced writes, whole or torn at sectors), never anything else.
//!
//! `NUMAIO_POWER_CUTS=N` sets the number of cut points (default 1500), `NUMAIO_POWER_SEED=S`
//! the first seed (default 1); a failure prints the seed that reproduces it alone.
//! `NUMAIO_POWER_KEEP_GOING=1` runs every seed and lists the failing ones;
//! `NUMAIO_POWER_TRACE=1` prints each operation, device write and sync.

mod common;
use common::*;
use numaio_engine::power_loss::{PowerLossBackend, PowerLossControl, PowerLossOptions};
use numaio_engine::{
    Backend, Engine, EngineConfig, FileHandle, OpenOptions, PolicyKind, PsyncBackend,
};
use numaio_testkit::{env_u64, Rng};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

const BS: usize = 4096;
/// Files span this many bytes: several times the cache, so eviction writes back constantly.
const SPAN: u64 = 48 * BS as u64;

/// What one file must look like after the cut.
#[derive(Default, Clone)]
struct FileModel {
    /// The engine's view now.
    cur: Vec<u8>,
    /// The contents at the last completed fsync.
    synced: Vec<u8>,
    /// Writes since the last completed fsync (any of them may have reached the disk).
    unsynced: Vec<(u64, Vec<u8>)>,
}

impl FileModel {
    fn write(&mut self, off: u64, data: &[u8]) {
        let end = off as usize + data.len();
        if self.cur.len() < end {
            self.cur.resize(end, 0);
        }
        self.cur[off as usize..end].copy_from_slice(data);
        self.unsynced.push((off, data.to_vec()));
    }
    fn synced_now(&mut self) {
        self.synced = self.cur.clone();
        self.unsynced.clear();
    }

    /// Checks the recovered contents; the error names the first bad byte.
    fn check(&self, name: &str, got: &[u8]) -> Result<(), Bad> {
        if got.len() < self.synced.len() {
            return Err(Bad::lost(format!(
                "{name}: recovered length {} is shorter than the {} bytes fsynced",
                got.len(),
                self.synced.len()
            )));
        }
        // Per byte: the synced value (zero past the synced end: a hole or a block's tail) ...
        let mut ok: Vec<bool> = got
            .iter()
            .enumerate()
            .map(|(i, &b)| b == self.synced.get(i).copied().unwrap_or(0))
            .collect();
        // ... or any value written since.
        for (off, data) in &self.unsynced {
            for (k, &b) in data.iter().enumerate() {
                let i = *off as usize + k;
                if i < got.len() && got[i] == b {
                    ok[i] = true;
                }
            }
        }
        if let Some(i) = ok.iter().position(|&x| !x) {
            let later: Vec<u8> = self
                .unsynced
                .iter()
                .filter(|(o, d)| (*o as usize) <= i && i < *o as usize + d.len())
                .map(|(o, d)| d[i - *o as usize])
                .collect();
            return Err(Bad::lost(format!(
                "{name}: byte {i} (block {}) is {:#04x}; fsynced value {:?}, later writes {:?}",
                i / BS,
                got[i],
                self.synced.get(i),
                later
            )));
        }
        // The device may hold up to a block past the longest write (whole-block write-back).
        let max_end = self
            .unsynced
            .iter()
            .map(|(o, d)| (o + d.len() as u64).div_ceil(BS as u64) * BS as u64)
            .max()
            .unwrap_or(0)
            .max(self.synced.len() as u64);
        if got.len() as u64 > max_end {
            // The bytes are right (zeros), only the length is wrong.
            return Err(Bad {
                msg: format!(
                    "{name}: recovered length {} is past anything written since the last \
                     fsync ({max_end}); the extra bytes are zeros",
                    got.len()
                ),
                zero_tail: true,
            });
        }
        Ok(())
    }
}

/// A failed check.
#[derive(Debug)]
struct Bad {
    msg: String,
    /// Only the length is wrong: the file ends past the synced length with zeros (a
    /// whole-block write-back that landed after fsync trimmed the file).
    zero_tail: bool,
}

impl Bad {
    fn lost(msg: String) -> Self {
        Bad {
            msg,
            zero_tail: false,
        }
    }
}

impl From<String> for Bad {
    fn from(msg: String) -> Self {
        Bad::lost(msg)
    }
}

#[derive(Debug, Clone, Copy)]
struct Params {
    slices: usize,
    slots: usize,
    policy: PolicyKind,
    keep_unsynced: f64,
    torn: bool,
    direct: bool,
    workers: usize,
    /// Operations run before the cut.
    cut_at: usize,
}

fn params(rng: &mut Rng) -> Params {
    let policy = match rng.below(3) {
        0 => PolicyKind::Arc,
        1 => PolicyKind::SplitLru { lru_factor: 2 },
        _ => PolicyKind::Clock,
    };
    let ops = 8 + rng.below(40) as usize;
    let (keep_unsynced, torn) = match rng.below(3) {
        0 => (0.0, false),
        1 => (0.5, false),
        _ => (0.7, true),
    };
    Params {
        slices: 1 + rng.below(2) as usize,
        slots: 8 + rng.below(16) as usize,
        policy,
        keep_unsynced,
        torn,
        direct: rng.below(4) != 0,
        workers: 1 + rng.below(3) as usize,
        cut_at: rng.below(ops as u64 + 1) as usize,
    }
}

fn engine(p: &Params, backend: Option<Arc<dyn Backend>>) -> Engine {
    Engine::new(EngineConfig {
        cache_bytes: (p.slices * p.slots * BS) as u64,
        slices: Some(p.slices),
        policy: p.policy,
        range_blocks: 4,
        queue_depth: 4,
        io_workers_per_slice: p.workers,
        bind_memory: false,
        pin_threads: false,
        direct_io: p.direct,
        backend: backend.or_else(|| Some(Arc::new(PsyncBackend))),
        ..Default::default()
    })
    .expect("engine starts")
}

/// Totals over all cut points.
#[derive(Default, Debug)]
struct Tally {
    cuts: u64,
    ops: u64,
    fsyncs: u64,
    backend_writes: u64,
    dropped: u64,
    kept: u64,
    torn: u64,
    late_writes: u64,
    overlapping_writes: u64,
    /// Cut points that failed the check while the backend saw the engine's write-back race
    /// (tolerated unless strict).
    race_failures: Vec<u64>,
}

/// Runs the workload of `seed` up to its cut point, cuts, reopens and verifies.
fn one_cut(seed: u64, dir: &Path, tally: &mut Tally) -> Result<(), String> {
    let mut rng = Rng(seed);
    let p = params(&mut rng);
    let paths = [dir.join("a"), dir.join("b")];
    let mut models = [FileModel::default(), FileModel::default()];
    // File b starts with content the engine did not write (counted as durable).
    let pre = pattern(seed, rng.below(6 * BS as u64) as usize);
    std::fs::write(&paths[0], b"").map_err(|e| e.to_string())?;
    std::fs::write(&paths[1], &pre).map_err(|e| e.to_string())?;
    models[1].cur = pre.clone();
    models[1].synced = pre;

    let trace = std::env::var_os("NUMAIO_POWER_TRACE").is_some();
    let (backend, power) = PowerLossBackend::new(
        Arc::new(PsyncBackend) as Arc<dyn Backend>,
        PowerLossOptions {
            keep_unsynced: p.keep_unsynced,
            torn: p.torn,
            seed,
            trace,
            ..Default::default()
        },
    );
    let e = engine(&p, Some(Arc::new(backend)));
    let files: Vec<FileHandle> = paths
        .iter()
        .map(|q| {
            e.open(q, OpenOptions::create_rw())
                .map_err(|e| e.to_string())
        })
        .collect::<Result<_, _>>()?;
    let ctx = |i: usize, what: &str| format!("{p:?} op {i} ({what})");
    for i in 0..p.cut_at {
        let which = rng.below(2) as usize;
        let (f, m) = (&files[which], &mut models[which]);
        tally.ops += 1;
        match rng.below(10) {
            // Writes of 1 byte to several blocks, at any offset.
            0..=4 => {
                let len = 1 + rng.below(3 * BS as u64 + 100) as usize;
                let off = rng.below(SPAN);
                let data = pattern(rng.next_u64(), len);
                let n = f
                    .pwrite(&data, off)
                    .map_err(|e| format!("{}: {e}", ctx(i, "pwrite")))?;
                if n != len {
                    return Err(format!("{}: short write {n} of {len}", ctx(i, "pwrite")));
                }
                if trace {
                    eprintln!("op {i}: pwrite file {which} [{off}, {})", off + len as u64);
                }
                m.write(off, &data);
            }
            5 | 6 => {
                let len = 1 + rng.below(2 * BS as u64) as usize;
                let off = rng.below(SPAN);
                let mut buf = vec![0u8; len];
                let n = f
                    .pread(&mut buf, off)
                    .map_err(|e| format!("{}: {e}", ctx(i, "pread")))?;
                let want = m
                    .cur
                    .get(off as usize..(off as usize + len).min(m.cur.len()))
                    .unwrap_or(&[]);
                if buf[..n] != *want {
                    return Err(format!("{}: read differs from the model", ctx(i, "pread")));
                }
            }
            7 => {
                // Zero-copy write of one block's range.
                let off = rng.below(SPAN);
                let len = 1 + rng.below(BS as u64 - off % BS as u64) as usize;
                let data = pattern(rng.next_u64(), len);
                let mut pin = f
                    .get_mut(off, len)
                    .map_err(|e| format!("{}: {e}", ctx(i, "get_mut")))?;
                let mut at = 0;
                for s in pin.segments_mut() {
                    s.copy_from_slice(&data[at..at + s.len()]);
                    at += s.len();
                }
                pin.commit()
                    .map_err(|e| format!("{}: {e}", ctx(i, "commit")))?;
                if trace {
                    eprintln!("op {i}: get_mut file {which} [{off}, {})", off + len as u64);
                }
                m.write(off, &data);
            }
            _ => {
                f.fsync().map_err(|e| format!("{}: {e}", ctx(i, "fsync")))?;
                m.synced_now();
                tally.fsyncs += 1;
                if trace {
                    eprintln!("op {i}: fsync file {which}");
                }
            }
        }
    }
    let report = power.power_cut().map_err(|e| e.to_string())?;
    tally.cuts += 1;
    let stats = power.stats();
    tally.backend_writes += stats.writes;
    tally.late_writes += stats.late_writes;
    tally.overlapping_writes += stats.overlapping_writes;
    tally.dropped += report.dropped_writes;
    tally.kept += report.kept_writes;
    tally.torn += report.torn_writes;
    // Nothing may get through after the cut.
    if files[0].fsync().is_ok() {
        return Err(format!("{p:?}: fsync succeeded after the power cut"));
    }
    // The dead engine lets go of the files (a crashed process's locks go with it), so the
    // fresh one may open them.
    drop(files);
    drop(e);
    if let Err(bad) = verify(&p, &paths, &models, &power) {
        // The engine's write-back race (a write-back that reaches the device after fsync
        // returned) shows as writes the backend saw overlap or outlive a sync, or as a file
        // longer than what was synced by whole zero blocks.
        let raced = stats.late_writes + stats.overlapping_writes > 0 || bad.zero_tail;
        let e = format!(
            "{}\n(the backend saw {} writes that completed after a sync which did not wait \
             for them, {} writes overlapping one in flight)",
            bad.msg, stats.late_writes, stats.overlapping_writes
        );
        if raced && !strict() {
            eprintln!("KNOWN BUG (write-back race), seed {seed}: {e}");
            tally.race_failures.push(seed);
        } else {
            return Err(e);
        }
    }
    Ok(())
}

fn verify(
    p: &Params,
    paths: &[std::path::PathBuf; 2],
    models: &[FileModel; 2],
    power: &PowerLossControl,
) -> Result<(), Bad> {
    let fresh = engine(p, None);
    for (q, m) in paths.iter().zip(models) {
        let name = format!("{p:?} {}", q.display());
        let f = fresh
            .open(q, OpenOptions::default())
            .map_err(|e| format!("{name}: reopen: {e}"))?;
        let mut got = vec![0u8; f.len() as usize];
        let n = f
            .pread(&mut got, 0)
            .map_err(|e| format!("{name}: read after the cut: {e}"))?;
        got.truncate(n);
        let disk = std::fs::read(q).map_err(|e| e.to_string())?;
        if got != disk {
            return Err(Bad::lost(format!(
                "{name}: the fresh engine reads something else than the file"
            )));
        }
        m.check(&name, &got)?;
    }
    if !power.is_cut() {
        return Err(Bad::lost("power not cut".into()));
    }
    fresh.close().map_err(|e| Bad::lost(e.to_string()))
}

#[test]
fn power_cut_at_random_points_keeps_every_fsynced_byte() {
    let n = env_u64("NUMAIO_POWER_CUTS", 1500);
    let first = env_u64("NUMAIO_POWER_SEED", 1);
    let keep_going = std::env::var_os("NUMAIO_POWER_KEEP_GOING").is_some();
    let root = scratch_dir();
    let mut tally = Tally::default();
    let mut failed = Vec::new();
    let t0 = Instant::now();
    for seed in first..first + n {
        let dir = root.path().join(seed.to_string());
        std::fs::create_dir(&dir).unwrap();
        if let Err(e) = one_cut(seed, &dir, &mut tally) {
            let msg = format!(
                "power cut with seed {seed} lost data: {e}\n\
                 reproduce: NUMAIO_POWER_SEED={seed} NUMAIO_POWER_CUTS=1 \
                 cargo test -p numaio-engine --test power_loss"
            );
            if !keep_going {
                panic!("{msg}");
            }
            eprintln!("{msg}");
            failed.push(seed);
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
    eprintln!(
        "power-loss: {} of {} cut points survived (seeds {first}..{}), {} operations, {} fsyncs, \
         {} device writes ({} completed after a sync that did not wait for them, {} overlapped \
         one in flight); {} cut points failed under that race {:?}; \
         unsynced writes at the cuts: {} dropped, {} kept, {} torn; {:.1} s",
        tally.cuts - tally.race_failures.len() as u64,
        tally.cuts,
        first + n,
        tally.ops,
        tally.fsyncs,
        tally.backend_writes,
        tally.late_writes,
        tally.overlapping_writes,
        tally.race_failures.len(),
        tally.race_failures,
        tally.dropped,
        tally.kept,
        tally.torn,
        t0.elapsed().as_secs_f64()
    );
    assert!(failed.is_empty(), "failing seeds: {failed:?}");
    assert_eq!(tally.cuts, n);
}

/// `NUMAIO_POWER_STRICT=0`: a cut point that fails while the symptoms of a write-back race
/// were seen (a write that overlapped another in flight or outlived a sync, or a file longer
/// than what was synced by zero bytes) is reported as a known bug instead of failing.
fn strict() -> bool {
    !matches!(std::env::var("NUMAIO_POWER_STRICT").as_deref(), Ok("0"))
}

/// Files in memory when /dev/shm is there: the backend models the disk, so a real one only
/// adds time.
fn scratch_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm")
        .or_else(|_| tempfile::tempdir())
        .expect("a scratch directory")
}

/// The harness itself must catch a missing sync: data written back by the evictor reaches
/// the file (and would survive a process kill) but not a power cut.
#[test]
fn written_back_but_unsynced_data_does_not_survive_the_cut() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f");
    let (backend, power) = PowerLossBackend::new(
        Arc::new(PsyncBackend) as Arc<dyn Backend>,
        PowerLossOptions::default(),
    );
    let p = Params {
        slices: 1,
        slots: 16,
        policy: PolicyKind::Arc,
        keep_unsynced: 0.0,
        torn: false,
        direct: true,
        workers: 4,
        cut_at: 0,
    };
    let e = engine(&p, Some(Arc::new(backend)));
    let f = e.open(&path, OpenOptions::create_rw()).unwrap();
    let len = 40 * BS;
    let mut m = FileModel::default();
    f.pwrite(&pattern(1, len), 0).unwrap();
    f.fsync().unwrap();
    m.write(0, &pattern(1, len));
    m.synced_now();
    // A cache of 16 blocks cannot hold 40 dirty ones: the evictor writes most of them back.
    f.pwrite(&pattern(2, len), 0).unwrap();
    m.write(0, &pattern(2, len));
    let t0 = Instant::now();
    while std::fs::read(&path).unwrap() == pattern(1, len) {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the evictor wrote nothing back"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let report = power.power_cut().unwrap();
    assert!(report.dropped_writes > 0, "{report:?}");
    let got = std::fs::read(&path).unwrap();
    assert!(got == pattern(1, len), "only the fsynced data is left");
    m.check("f", &got).unwrap();
    // A model that wrongly believes the second write was synced fails the check.
    let mut wrong = m.clone();
    wrong.synced_now();
    assert!(wrong.check("f", &got).is_err());
    drop(f);
    drop(e);
}

/// Delays the first write submitted after it is armed, after the power-loss backend has taken
/// its copy: a write-back that stays in flight while the test goes on.
struct SlowOnce {
    armed: Arc<std::sync::atomic::AtomicBool>,
}

struct SlowOnceQueue {
    inner: Box<dyn numaio_engine::IoQueue>,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: every request goes to the inner queue, which completes it before reporting it.
unsafe impl numaio_engine::IoQueue for SlowOnceQueue {
    fn run(
        &mut self,
        reqs: &mut [numaio_engine::IoRequest],
        done: &mut dyn FnMut(usize, std::io::Result<usize>),
    ) {
        if reqs
            .iter()
            .any(|r| r.kind() == numaio_engine::IoKind::Write)
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            std::thread::sleep(std::time::Duration::from_millis(300));
        }
        self.inner.run(reqs, done)
    }
}

impl Backend for SlowOnce {
    fn name(&self) -> String {
        "slow-once".into()
    }
    fn queue(&self, depth: u32) -> std::io::Result<Box<dyn numaio_engine::IoQueue>> {
        Ok(Box::new(SlowOnceQueue {
            inner: PsyncBackend.queue(depth)?,
            armed: self.armed.clone(),
        }))
    }
    fn datasync(&self, fd: std::os::fd::RawFd) -> std::io::Result<()> {
        PsyncBackend.datasync(fd)
    }
}

/// The evictor starts writing a block back; the block is rewritten and fsynced while that
/// write is in flight; the older write then lands on top of the synced data.
#[test]
fn fsync_waits_for_a_write_back_in_flight() {
    let dir = scratch_dir();
    let path = dir.path().join("f");
    let armed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (backend, power) = PowerLossBackend::new(
        Arc::new(SlowOnce {
            armed: armed.clone(),
        }) as Arc<dyn Backend>,
        PowerLossOptions {
            keep_unsynced: 1.0,
            ..Default::default()
        },
    );
    let p = Params {
        slices: 1,
        slots: 8,
        policy: PolicyKind::Arc,
        keep_unsynced: 1.0,
        torn: false,
        direct: true,
        workers: 4,
        cut_at: 0,
    };
    let e = engine(&p, Some(Arc::new(backend)));
    let f = e.open(&path, OpenOptions::create_rw()).unwrap();
    let mut m = FileModel::default();
    armed.store(true, std::sync::atomic::Ordering::SeqCst);
    // Eight dirty blocks in an eight-block cache: the evictor writes the oldest back (slowly).
    for b in 0..8u64 {
        let d = pattern(b, BS);
        f.pwrite(&d, b * BS as u64).unwrap();
        m.write(b * BS as u64, &d);
    }
    let t0 = Instant::now();
    while armed.load(std::sync::atomic::Ordering::SeqCst) {
        assert!(
            t0.elapsed().as_secs() < 10,
            "the evictor wrote nothing back"
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    // Rewrite every block while that write-back is in flight, and fsync.
    for b in 0..8u64 {
        let d = pattern(100 + b, BS);
        f.pwrite(&d, b * BS as u64).unwrap();
        m.write(b * BS as u64, &d);
    }
    f.fsync().unwrap();
    m.synced_now();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let stats = power.stats();
    // Even without a power cut the file now holds the older data under a clean cache.
    let disk = std::fs::read(&path).unwrap();
    let stale_blocks: Vec<usize> = (0..8)
        .filter(|&b| disk.get(b * BS..(b + 1) * BS) != Some(&m.cur[b * BS..(b + 1) * BS]))
        .collect();
    power.power_cut().unwrap();
    let got = std::fs::read(&path).unwrap();
    let check = m.check("f", &got);
    assert!(
        stale_blocks.is_empty() && check.is_ok() && stats.overlapping_writes == 0,
        "stale blocks on disk after fsync: {stale_blocks:?}; after the cut: {check:?}; {stats:?}"
    );
}
