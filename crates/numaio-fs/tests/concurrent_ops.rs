//! Many threads on one volume at once, checked against a model.
//!
//! Each thread owns a directory of files that only it touches: it writes (unaligned, so
//! partial blocks are read, modified and written), truncates, renames (also out to the
//! shared directory and back), unlinks, creates, fsyncs and reads them back, and their
//! content must equal its own model exactly, while it runs, after all threads are done,
//! after a power cut taken once every thread has fsync'd (what fsync acknowledged survives),
//! and after a clean unmount and mount. All threads also share a few contended names in a
//! shared directory and its subdirectories: creates, unlinks, renames across directories,
//! hard links, mkdir/rmdir, 16-byte-aligned writes, truncates, reads and fsyncs race there.
//! Every 16-byte record written names the inode it was written to, so a read that returns
//! a record of another file (or a torn one) fails. Once quiet: every listing agrees with
//! lookups, link counts match the names, reads return exactly the size, fsck is clean, and
//! after everything is deleted and synced `statfs` shows the free blocks of the empty volume.
//!
//! The operation sequences are seeded (`NUMAIO_FS_STRESS_SEED=S` repeats one; the
//! interleaving still differs between runs). A watchdog ends the process with the threads'
//! last operations when no operation completes for 60 s.

use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::meta::Kind;
use numaio_fs::store::{CrashMode, MemStore};
use numaio_fs::*;
use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const THREADS: usize = 8;
const OPS_PER_THREAD: usize = 2000;
/// Names each thread's own directory can hold (`o0..`).
const OWNED_NAMES: usize = 6;
/// Largest size an owned file grows to.
const OWNED_MAX: u64 = 48 << 10;
/// Contended file names (`c0..`) in each contended directory.
const SHARED_NAMES: usize = 6;
/// Contended subdirectories (`d0..`) of the shared directory.
const SHARED_DIRS: usize = 3;
/// Largest offset of a contended write.
const SHARED_MAX: u64 = 48 << 10;
/// Every record is 16 bytes: inode (8), writer thread (1), MARK, sequence (4), check (2).
const REC: usize = 16;
const MARK: u8 = 0xa5;
/// No operation completed for this long: the volume hangs.
const HANG: Duration = Duration::from_secs(60);

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        // a small journal: checkpoints happen during the run
        journal_blocks: 64,
        checkpoint_blocks: 128,
    }
}

fn caller(t: usize) -> Caller {
    Caller {
        node: (t % 2) as u32,
        uid: 0,
        gid: 0,
        pid: 100 + t as u32,
        tid: 0,
    }
}

fn check16(ino: u64, thread: u8, seq: u32) -> u16 {
    let x = ino
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(u64::from(thread) << 40)
        .wrapping_add(u64::from(seq).wrapping_mul(0xff51_afd7_ed55_8ccd));
    (x >> 48) as u16
}

fn record(ino: u64, thread: u8, seq: u32) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&ino.to_le_bytes());
    r[8] = thread;
    r[9] = MARK;
    r[10..14].copy_from_slice(&seq.to_le_bytes());
    r[14..].copy_from_slice(&check16(ino, thread, seq).to_le_bytes());
    r
}

/// `len` bytes for file offset `off`: the record at every 16-byte-aligned file offset, so an
/// unaligned write holds parts of records at its ends.
fn fill(ino: u64, thread: u8, seq: u32, off: u64, len: usize) -> Vec<u8> {
    let r = record(ino, thread, seq);
    (0..len as u64)
        .map(|i| r[((off + i) % REC as u64) as usize])
        .collect()
}

/// What the 16 bytes at a file offset are: zeros, a record of `ino`, or what else.
fn describe(rec: &[u8]) -> String {
    if rec.iter().all(|&b| b == 0) {
        return "zeros".into();
    }
    if rec.len() < REC {
        return format!("a partial record {rec:02x?}");
    }
    let ino = u64::from_le_bytes(rec[..8].try_into().unwrap());
    let seq = u32::from_le_bytes(rec[10..14].try_into().unwrap());
    let check = u16::from_le_bytes(rec[14..].try_into().unwrap());
    if rec[9] == MARK && check == check16(ino, rec[8], seq) {
        format!("a record of inode {ino} (thread {}, write {seq})", rec[8])
    } else {
        format!("not a record (torn or foreign) {rec:02x?}")
    }
}

/// Every whole record of `data` (read at `off`, a multiple of 16) is zeros or a record
/// written to `ino`.
fn check_records(ino: u64, off: u64, data: &[u8]) -> Result<(), String> {
    assert_eq!(off % REC as u64, 0);
    for (i, r) in data.chunks_exact(REC).enumerate() {
        if r.iter().all(|&b| b == 0) {
            continue;
        }
        let owner = u64::from_le_bytes(r[..8].try_into().unwrap());
        let seq = u32::from_le_bytes(r[10..14].try_into().unwrap());
        let ok = r[9] == MARK
            && (r[8] as usize) < THREADS
            && u16::from_le_bytes(r[14..].try_into().unwrap()) == check16(owner, r[8], seq);
        if !ok || owner != ino {
            return Err(format!(
                "inode {ino} at offset {}: {} where only records of inode {ino} or zeros belong",
                off + (i * REC) as u64,
                describe(r)
            ));
        }
    }
    Ok(())
}

/// The first difference of an owned file from its model, described.
fn diff(ino: u64, got: &[u8], want: &[u8]) -> Option<String> {
    if got == want {
        return None;
    }
    let at = got
        .iter()
        .zip(want)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(want.len()));
    let rec_at = at - at % REC;
    let slice = |d: &[u8]| d[rec_at.min(d.len())..(rec_at + REC).min(d.len())].to_vec();
    Some(format!(
        "inode {ino}: {} bytes, model {}; first difference at offset {at}: the file holds {} \
         where the model has {}",
        got.len(),
        want.len(),
        describe(&slice(got)),
        describe(&slice(want))
    ))
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize + 4096];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    assert_eq!(
        n as u64, size,
        "inode {ino}: a read from 0 returned {n} bytes of a {size}-byte file"
    );
    buf.truncate(n);
    buf
}

/// Progress, for the watchdog: operations completed and each thread's current one.
struct Progress {
    ops: AtomicU64,
    doing: Vec<Mutex<String>>,
    done: AtomicBool,
}

impl Progress {
    fn new() -> Progress {
        Progress {
            ops: AtomicU64::new(0),
            doing: (0..=THREADS).map(|_| Mutex::new(String::new())).collect(),
            done: AtomicBool::new(false),
        }
    }
    fn at(&self, who: usize, what: String) {
        self.ops.fetch_add(1, Ordering::Relaxed);
        *self.doing[who].lock().unwrap() = what;
    }
}

/// Ends the process when no operation completes for [`HANG`]. Written to the real stderr:
/// the test harness's capture would be lost with the process.
fn watchdog(p: Arc<Progress>, seed: u64) {
    std::thread::spawn(move || {
        let mut last = p.ops.load(Ordering::Relaxed);
        let mut since = Instant::now();
        while !p.done.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(200));
            let now = p.ops.load(Ordering::Relaxed);
            if now != last {
                last = now;
                since = Instant::now();
            } else if since.elapsed() > HANG {
                let mut e = std::io::stderr().lock();
                let _ = writeln!(
                    e,
                    "concurrent_ops: HANG: no operation completed for {} s (seed {seed}, {now} \
                     operations done); what each thread was doing:",
                    HANG.as_secs()
                );
                for (i, d) in p.doing.iter().enumerate() {
                    let who = if i == THREADS {
                        "main".to_string()
                    } else {
                        format!("thread {i}")
                    };
                    let _ = writeln!(
                        e,
                        "  {who}: {}",
                        d.lock().map(|s| s.clone()).unwrap_or_default()
                    );
                }
                std::process::exit(101);
            }
        }
    });
}

/// An error a contended operation may meet because another thread got there first.
fn racy(e: &FsError) -> bool {
    matches!(e, FsError::NotFound | FsError::Exists | FsError::NotEmpty)
}

/// A thread's own files: name → (inode, content).
type Model = BTreeMap<Vec<u8>, (u64, Vec<u8>)>;

struct Worker {
    t: usize,
    seed: u64,
    fs: Arc<Fs>,
    rng: fastrand::Rng,
    c: Caller,
    dir: u64,
    shared: u64,
    model: Model,
    seq: u32,
    op: usize,
    progress: Arc<Progress>,
    stop: Arc<AtomicBool>,
    /// Contended operations that succeeded, by kind: a run where races always lost would
    /// check nothing.
    won: BTreeMap<&'static str, u64>,
}

impl Worker {
    fn fail(&self, msg: String) -> ! {
        self.stop.store(true, Ordering::Relaxed);
        panic!(
            "thread {} operation {} (seed {}): {msg}",
            self.t, self.op, self.seed
        );
    }

    fn ok<T>(&self, r: Result<T, FsError>, what: &str) -> T {
        r.unwrap_or_else(|e| self.fail(format!("{what}: {e}")))
    }

    /// `r`, or `None` for an error a race explains; any other error fails.
    fn racy<T>(&self, r: Result<T, FsError>, what: &str) -> Option<T> {
        match r {
            Ok(v) => Some(v),
            Err(e) if racy(&e) => None,
            Err(e) => self.fail(format!("{what}: {e}")),
        }
    }

    fn won(&mut self, kind: &'static str, r: Option<()>) {
        if r.is_some() {
            *self.won.entry(kind).or_default() += 1;
        }
    }

    /// Inode `ino`, whose last name went away, is gone or has no links.
    fn gone(&self, ino: u64, how: &str) {
        if let Ok(a) = self.fs.getattr(ino) {
            if a.nlink != 0 {
                self.fail(format!("inode {ino}, {how}, still has {} links", a.nlink));
            }
        }
    }

    fn next_seq(&mut self) -> u32 {
        self.seq += 1;
        self.seq
    }

    fn owned_name(&mut self) -> Vec<u8> {
        format!("o{}", self.rng.usize(..OWNED_NAMES)).into_bytes()
    }

    fn existing_owned(&mut self) -> Option<Vec<u8>> {
        let n = self.model.len();
        (n > 0).then(|| self.model.keys().nth(self.rng.usize(..n)).unwrap().clone())
    }

    fn verify_owned(&self, name: &[u8]) {
        let (ino, want) = &self.model[name];
        let a = self.ok(
            self.fs.lookup(self.dir, name, &self.c),
            "lookup of an owned file",
        );
        if a.ino != *ino || a.size != want.len() as u64 || a.nlink != 1 {
            self.fail(format!(
                "owned {}: inode {} size {} nlink {}, model inode {ino} size {}",
                String::from_utf8_lossy(name),
                a.ino,
                a.size,
                a.nlink,
                want.len()
            ));
        }
        // a random window, and now and then the whole file
        let mut buf = vec![0u8; want.len() + 100];
        let n = self.ok(self.fs.read(*ino, 0, &mut buf), "read of an owned file");
        if let Some(d) = diff(*ino, &buf[..n], want) {
            self.fail(format!("owned {}: {d}", String::from_utf8_lossy(name)));
        }
    }

    fn owned_op(&mut self) {
        let roll = self.rng.u32(..100);
        let Some(name) = self.existing_owned().filter(|_| roll >= 8) else {
            // create
            let name = self.owned_name();
            self.progress.at(
                self.t,
                format!("create {:?}", String::from_utf8_lossy(&name)),
            );
            match self.fs.create(self.dir, &name, 0o644, &self.c) {
                Ok(a) => {
                    if self.model.contains_key(&name) {
                        self.fail("create of an existing owned name succeeded".into());
                    }
                    self.model.insert(name, (a.ino, Vec::new()));
                }
                Err(FsError::Exists) if self.model.contains_key(&name) => {}
                Err(e) => self.fail(format!("create: {e}")),
            }
            return;
        };
        let ino = self.model[&name].0;
        let shown = String::from_utf8_lossy(&name).into_owned();
        match roll {
            8..=44 => {
                let len = self.model[&name].1.len() as u64;
                let off = self.rng.u64(..=(len + 4096).min(OWNED_MAX));
                let n = self
                    .rng
                    .usize(1..=12_000)
                    .min((OWNED_MAX + 4096 - off) as usize);
                let seq = self.next_seq();
                let data = fill(ino, self.t as u8, seq, off, n);
                self.progress
                    .at(self.t, format!("write {shown} ({ino}) {off}+{n}"));
                let w = self.ok(
                    self.fs.write(ino, off, &data, &self.c),
                    "write of an owned file",
                );
                if w != n {
                    self.fail(format!("write of {n} bytes to owned {shown} wrote {w}"));
                }
                let m = &mut self.model.get_mut(&name).unwrap().1;
                let end = off as usize + n;
                if m.len() < end {
                    m.resize(end, 0);
                }
                m[off as usize..end].copy_from_slice(&data);
            }
            45..=62 => {
                self.progress.at(self.t, format!("read {shown} ({ino})"));
                self.verify_owned(&name);
            }
            63..=72 => {
                let len = self.model[&name].1.len() as u64;
                let size = self.rng.u64(..=(len + 8192).min(OWNED_MAX));
                self.progress
                    .at(self.t, format!("truncate {shown} ({ino}) to {size}"));
                let s = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                let a = self.ok(
                    self.fs.setattr(ino, &s, &self.c),
                    "truncate of an owned file",
                );
                if a.size != size {
                    self.fail(format!(
                        "truncate of {shown} to {size} left size {}",
                        a.size
                    ));
                }
                self.model
                    .get_mut(&name)
                    .unwrap()
                    .1
                    .resize(size as usize, 0);
            }
            73..=78 => {
                let datasync = self.rng.bool();
                self.progress.at(self.t, format!("fsync {shown} ({ino})"));
                self.ok(self.fs.fsync(ino, datasync), "fsync of an owned file");
            }
            79..=86 => {
                let to = self.owned_name();
                if to == name {
                    return;
                }
                let shown_to = String::from_utf8_lossy(&to).into_owned();
                self.progress
                    .at(self.t, format!("rename {shown} -> {shown_to}"));
                self.ok(
                    self.fs.rename(self.dir, &name, self.dir, &to, 0, &self.c),
                    "rename within the own directory",
                );
                let moved = self.model.remove(&name).unwrap();
                if let Some((old, _)) = self.model.insert(to, moved) {
                    // the replaced file has no name left (nobody has it open: it may be
                    // gone already or freed later, but has no links)
                    self.gone(old, "replaced by a rename");
                }
            }
            87..=91 => {
                // out to the shared directory and back: a cross-directory rename among others
                let away = format!("t{}-{shown}", self.t).into_bytes();
                self.progress.at(
                    self.t,
                    format!("rename {shown} out to the shared directory"),
                );
                self.ok(
                    self.fs
                        .rename(self.dir, &name, self.shared, &away, 0, &self.c),
                    "rename to the shared directory",
                );
                if self.fs.lookup(self.dir, &name, &self.c).is_ok() {
                    self.fail(format!(
                        "{shown} is still in the own directory after its rename"
                    ));
                }
                let a = self.ok(
                    self.fs.lookup(self.shared, &away, &self.c),
                    "lookup after rename",
                );
                if a.ino != ino {
                    self.fail(format!("renamed {shown} is inode {}, not {ino}", a.ino));
                }
                self.ok(
                    self.fs
                        .rename(self.shared, &away, self.dir, &name, 0, &self.c),
                    "rename back from the shared directory",
                );
            }
            _ => {
                self.progress.at(self.t, format!("unlink {shown} ({ino})"));
                self.ok(
                    self.fs.unlink(self.dir, &name, &self.c),
                    "unlink of an owned file",
                );
                self.model.remove(&name);
                self.gone(ino, "unlinked");
            }
        }
    }

    /// A contended directory: the shared one or one of its subdirectories (which may not
    /// exist right now).
    fn shared_dir(&mut self) -> Option<u64> {
        let k = self.rng.usize(..=SHARED_DIRS);
        if k == SHARED_DIRS {
            return Some(self.shared);
        }
        let d = format!("d{k}").into_bytes();
        self.racy(
            self.fs.lookup(self.shared, &d, &self.c),
            "lookup of a shared directory",
        )
        .map(|a| a.ino)
    }

    fn shared_name(&mut self) -> Vec<u8> {
        format!("c{}", self.rng.usize(..SHARED_NAMES)).into_bytes()
    }

    /// Looks a contended file up and opens it (so it stays readable and writable if it is
    /// unlinked meanwhile, as the kernel holds an open file's inode).
    fn open_shared(&mut self) -> Option<u64> {
        let dir = self.shared_dir()?;
        let name = self.shared_name();
        let a = self.racy(
            self.fs.lookup(dir, &name, &self.c),
            "lookup of a shared file",
        )?;
        if a.kind != Kind::File {
            self.fail(format!(
                "shared name {} is a {:?}",
                String::from_utf8_lossy(&name),
                a.kind
            ));
        }
        self.racy(self.fs.open(a.ino), "open of a shared file")?;
        Some(a.ino)
    }

    fn shared_op(&mut self) {
        let roll = self.rng.u32(..100);
        match roll {
            0..=24 => {
                let Some(ino) = self.open_shared() else {
                    return;
                };
                let off = self.rng.u64(..SHARED_MAX / REC as u64) * REC as u64;
                let n = self.rng.usize(1..=256) * REC;
                let seq = self.next_seq();
                let data = fill(ino, self.t as u8, seq, off, n);
                self.progress
                    .at(self.t, format!("shared write {ino} {off}+{n}"));
                let w = self.ok(
                    self.fs.write(ino, off, &data, &self.c),
                    "write of a shared file",
                );
                if w != n {
                    self.fail(format!(
                        "write of {n} bytes to shared inode {ino} wrote {w}"
                    ));
                }
                self.ok(self.fs.release(ino), "release");
                self.won("write", Some(()));
            }
            25..=44 => {
                let Some(ino) = self.open_shared() else {
                    return;
                };
                self.progress.at(self.t, format!("shared read {ino}"));
                let size = self
                    .ok(self.fs.getattr(ino), "getattr of an open shared file")
                    .size;
                let mut buf = vec![0u8; size as usize + 8192];
                let n = self.ok(self.fs.read(ino, 0, &mut buf), "read of a shared file");
                if let Err(e) = check_records(ino, 0, &buf[..n]) {
                    self.fail(e);
                }
                self.ok(self.fs.release(ino), "release");
                self.won("read", (n > 0).then_some(()));
            }
            45..=52 => {
                let Some(ino) = self.open_shared() else {
                    return;
                };
                let size = self.rng.u64(..SHARED_MAX / REC as u64) * REC as u64;
                self.progress
                    .at(self.t, format!("shared truncate {ino} to {size}"));
                let s = SetAttr {
                    size: Some(size),
                    ..Default::default()
                };
                self.ok(
                    self.fs.setattr(ino, &s, &self.c),
                    "truncate of a shared file",
                );
                self.ok(self.fs.release(ino), "release");
                self.won("truncate", Some(()));
            }
            53..=57 => {
                let Some(ino) = self.open_shared() else {
                    return;
                };
                self.progress.at(self.t, format!("shared fsync {ino}"));
                self.ok(self.fs.fsync(ino, false), "fsync of a shared file");
                self.ok(self.fs.release(ino), "release");
            }
            58..=67 => {
                let Some(dir) = self.shared_dir() else { return };
                let name = self.shared_name();
                self.progress.at(self.t, format!("shared create in {dir}"));
                let r = self.racy(
                    self.fs.create(dir, &name, 0o644, &self.c),
                    "create of a shared file",
                );
                self.won("create", r.map(|_| ()));
            }
            68..=75 => {
                let Some(dir) = self.shared_dir() else { return };
                let name = self.shared_name();
                self.progress.at(self.t, format!("shared unlink in {dir}"));
                let r = self.racy(
                    self.fs.unlink(dir, &name, &self.c),
                    "unlink of a shared file",
                );
                self.won("unlink", r);
            }
            76..=85 => {
                let (Some(from), Some(to)) = (self.shared_dir(), self.shared_dir()) else {
                    return;
                };
                let (a, b) = (self.shared_name(), self.shared_name());
                self.progress
                    .at(self.t, format!("shared rename {from} -> {to}"));
                let r = self.racy(
                    self.fs.rename(from, &a, to, &b, 0, &self.c),
                    "rename of a shared file",
                );
                self.won(
                    if from == to {
                        "rename"
                    } else {
                        "rename-across"
                    },
                    r,
                );
            }
            86..=91 => {
                let Some(ino) = self.open_shared() else {
                    return;
                };
                if let Some(dir) = self.shared_dir() {
                    let name = self.shared_name();
                    self.progress
                        .at(self.t, format!("shared link {ino} into {dir}"));
                    let r = self.racy(
                        self.fs.link(ino, dir, &name, &self.c),
                        "link of a shared file",
                    );
                    self.won("link", r.map(|_| ()));
                }
                self.ok(self.fs.release(ino), "release");
            }
            92..=95 => {
                let d = format!("d{}", self.rng.usize(..SHARED_DIRS)).into_bytes();
                self.progress.at(self.t, "shared mkdir".into());
                let r = self.racy(self.fs.mkdir(self.shared, &d, 0o755, &self.c), "mkdir");
                self.won("mkdir", r.map(|_| ()));
            }
            96..=98 => {
                let d = format!("d{}", self.rng.usize(..SHARED_DIRS)).into_bytes();
                self.progress.at(self.t, "shared rmdir".into());
                // empty it first (as `rm -r` would), racing with whoever fills it
                if let Some(a) = self.racy(self.fs.lookup(self.shared, &d, &self.c), "lookup") {
                    let listed = self.racy(self.fs.readdir(a.ino, 0), "readdir of a shared dir");
                    for e in listed.unwrap_or_default() {
                        if e.name != b"." && e.name != b".." {
                            self.racy(self.fs.unlink(a.ino, &e.name, &self.c), "unlink");
                        }
                    }
                }
                let r = self.racy(self.fs.rmdir(self.shared, &d, &self.c), "rmdir");
                self.won("rmdir", r);
            }
            _ => {
                self.progress.at(self.t, "sync".into());
                self.ok(self.fs.sync(), "sync");
                let st = self.fs.statfs();
                if st.free_blocks > st.total_blocks {
                    self.fail(format!(
                        "statfs: {} free of {}",
                        st.free_blocks, st.total_blocks
                    ));
                }
            }
        }
    }

    fn run(mut self) -> (Model, BTreeMap<&'static str, u64>) {
        for op in 0..OPS_PER_THREAD {
            if self.stop.load(Ordering::Relaxed) {
                break;
            }
            self.op = op;
            if self.rng.u32(..100) < 55 {
                self.owned_op();
            } else {
                self.shared_op();
            }
        }
        // make the own state durable: checked after a power cut
        let names: Vec<Vec<u8>> = self.model.keys().cloned().collect();
        for name in &names {
            self.progress.at(self.t, "final fsync".into());
            self.verify_owned(name);
            self.ok(self.fs.fsync(self.model[name].0, false), "final fsync");
        }
        self.ok(
            self.fs.fsync_dir(self.dir),
            "final fsync of the own directory",
        );
        (self.model, self.won)
    }
}

/// What a quiet volume holds: path → (inode, kind, size, link count, content of files).
type Snapshot = BTreeMap<String, (u64, Kind, u64, u32, Vec<u8>)>;

fn list(fs: &Fs, dir: u64) -> Vec<DirEntry> {
    let mut out = Vec::new();
    let mut cookie = 0;
    loop {
        let batch = fs.readdir(dir, cookie).unwrap();
        let Some(last) = batch.last() else { break };
        cookie = last.cookie;
        out.extend(
            batch
                .into_iter()
                .filter(|e| e.name != b"." && e.name != b".."),
        );
    }
    out
}

/// Walks the quiet volume and checks it: listings agree with lookups and have no duplicate,
/// link counts match the names (files) and subdirectories (directories), reads return
/// exactly the size, contended files hold only their own records, `statfs` counts the
/// inodes found.
fn walk_and_check(fs: &Fs, p: &Progress) -> Snapshot {
    let c = Caller::root_on(0);
    let mut snap = Snapshot::new();
    let mut names_of: BTreeMap<u64, u32> = BTreeMap::new();
    let mut subdirs: BTreeMap<u64, u32> = BTreeMap::new();
    let mut stack = vec![(ROOT, String::new())];
    let mut inodes = BTreeSet::from([ROOT]);
    while let Some((dir, path)) = stack.pop() {
        p.at(THREADS, format!("walk {path}/"));
        let entries = list(fs, dir);
        let unique: BTreeSet<&[u8]> = entries.iter().map(|e| &e.name[..]).collect();
        assert_eq!(unique.len(), entries.len(), "{path}/: a name listed twice");
        for e in &entries {
            let name = String::from_utf8_lossy(&e.name).into_owned();
            let full = format!("{path}/{name}");
            let a = fs.lookup(dir, &e.name, &c).unwrap_or_else(|err| {
                panic!(
                    "{full} is listed (inode {}) but its lookup fails: {err}",
                    e.ino
                )
            });
            assert_eq!(
                (a.ino, a.kind),
                (e.ino, e.kind),
                "{full}: listing and lookup differ"
            );
            inodes.insert(a.ino);
            let content = if a.kind == Kind::Dir {
                *subdirs.entry(dir).or_default() += 1;
                stack.push((a.ino, full.clone()));
                Vec::new()
            } else {
                *names_of.entry(a.ino).or_default() += 1;
                let data = read_all(fs, a.ino);
                // owned files hold unaligned writes, checked against the model instead
                if path.starts_with("/shared") {
                    if let Err(err) = check_records(a.ino, 0, &data) {
                        panic!("{full}: {err}");
                    }
                }
                data
            };
            snap.insert(full, (a.ino, a.kind, a.size, a.nlink, content));
        }
        // a name of the contended namespace that is not listed does not exist
        if path.starts_with("/shared") {
            for k in 0..SHARED_NAMES.max(SHARED_DIRS) {
                for n in [format!("c{k}"), format!("d{k}")] {
                    if !unique.contains(n.as_bytes()) {
                        assert!(
                            fs.lookup(dir, n.as_bytes(), &c).is_err(),
                            "{path}/{n} is found by lookup but not listed"
                        );
                    }
                }
            }
        }
    }
    for (path, (ino, kind, _, nlink, _)) in &snap {
        let want = if *kind == Kind::Dir {
            2 + subdirs.get(ino).copied().unwrap_or(0)
        } else {
            names_of[ino]
        };
        assert_eq!(
            *nlink, want,
            "{path}: link count {nlink}, {want} names refer to it"
        );
    }
    let root = fs.getattr(ROOT).unwrap();
    assert_eq!(
        root.nlink,
        2 + subdirs.get(&ROOT).copied().unwrap_or(0),
        "/: link count"
    );
    assert_eq!(
        fs.statfs().files,
        inodes.len() as u64,
        "statfs counts {} inodes in use, the tree has {}",
        fs.statfs().files,
        inodes.len()
    );
    snap
}

fn fsck_clean(s: &MemStore, when: &str) {
    let r = fsck(s, &FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "fsck {when}: {:?}", r.errors);
}

fn remove_all(fs: &Fs, dir: u64) {
    let c = Caller::root_on(0);
    for e in list(fs, dir) {
        if e.kind == Kind::Dir {
            remove_all(fs, e.ino);
            fs.rmdir(dir, &e.name, &c).unwrap();
        } else {
            fs.unlink(dir, &e.name, &c).unwrap();
        }
    }
}

fn run_round(seed: u64) {
    let s = Arc::new(MemStore::new(&[(0, 16 * MIB), (1, 16 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    // the periodic committer is one more thread at work
    let mount = MountOptions::default().with_commit_secs(1).unwrap();
    let fs = Arc::new(Fs::mount(s.clone(), mount).unwrap());
    let empty = fs.statfs();
    let c = Caller::root_on(0);
    let shared = fs.mkdir(ROOT, b"shared", 0o755, &c).unwrap().ino;
    let dirs: Vec<u64> = (0..THREADS)
        .map(|t| {
            fs.mkdir(ROOT, format!("own{t}").as_bytes(), 0o755, &c)
                .unwrap()
                .ino
        })
        .collect();

    let progress = Arc::new(Progress::new());
    watchdog(progress.clone(), seed);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let handles: Vec<_> = (0..THREADS)
        .map(|t| {
            let w = Worker {
                t,
                seed,
                fs: fs.clone(),
                rng: fastrand::Rng::with_seed(
                    seed ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
                c: caller(t),
                dir: dirs[t],
                shared,
                model: BTreeMap::new(),
                seq: 0,
                op: 0,
                progress: progress.clone(),
                stop: stop.clone(),
                won: BTreeMap::new(),
            };
            std::thread::Builder::new()
                .name(format!("stress-{t}"))
                .spawn(move || w.run())
                .unwrap()
        })
        .collect();
    let mut models = Vec::new();
    let mut won: BTreeMap<&str, u64> = BTreeMap::new();
    let mut panics = Vec::new();
    for (t, h) in handles.into_iter().enumerate() {
        match h.join() {
            Ok((m, w)) => {
                models.push(m);
                for (k, n) in w {
                    *won.entry(k).or_default() += n;
                }
            }
            Err(e) => panics.push(format!(
                "thread {t}: {}",
                e.downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default()
            )),
        }
    }
    assert!(panics.is_empty(), "seed {seed}: {}", panics.join("\n"));
    let ops = progress.ops.load(Ordering::Relaxed);
    eprintln!(
        "seed {seed}: {THREADS} threads, {ops} operations in {:.1} s; contended ones that \
         succeeded: {won:?}",
        started.elapsed().as_secs_f64()
    );
    for kind in [
        "write",
        "read",
        "truncate",
        "create",
        "unlink",
        "rename",
        "rename-across",
        "link",
        "mkdir",
        "rmdir",
    ] {
        assert!(
            won.get(kind).copied().unwrap_or(0) > 0,
            "seed {seed}: contended {kind} never succeeded ({won:?}): the run \
             checked too little"
        );
    }

    let check_owned = |fs: &Fs, when: &str| {
        for (t, m) in models.iter().enumerate() {
            let listed: BTreeSet<Vec<u8>> = list(fs, dirs[t]).into_iter().map(|e| e.name).collect();
            let want: BTreeSet<Vec<u8>> = m.keys().cloned().collect();
            assert_eq!(listed, want, "seed {seed}, {when}: thread {t}'s directory");
            for (name, (ino, data)) in m {
                let a = fs.lookup(dirs[t], name, &c).unwrap();
                assert_eq!((a.ino, a.nlink), (*ino, 1), "seed {seed}, {when}: {name:?}");
                if let Some(d) = diff(*ino, &read_all(fs, *ino), data) {
                    panic!(
                        "seed {seed}, {when}: thread {t}'s {}: {d}",
                        String::from_utf8_lossy(name)
                    );
                }
            }
        }
    };
    progress.at(THREADS, "checks".into());
    check_owned(&fs, "all threads done");

    // A power cut now, before anything else syncs: every thread's final fsync returned, so
    // its files are there.
    {
        let cut = Arc::new(s.crash(CrashMode::DropUnsynced));
        fsck_clean(&cut, "after a power cut");
        let fs2 = Fs::mount(cut, MountOptions::default()).unwrap();
        check_owned(&fs2, "after a power cut");
        walk_and_check(&fs2, &progress);
    }

    // Synced first, so that inodes whose freeing waits for a commit are gone.
    fs.sync().unwrap();
    let snap = walk_and_check(&fs, &progress);

    // A clean unmount and mount keeps everything.
    let fs = Arc::into_inner(fs).expect("every thread has let go of the volume");
    fs.unmount().unwrap();
    fsck_clean(&s, "after unmount");
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    check_owned(&fs, "after unmount and mount");
    let again = walk_and_check(&fs, &progress);
    assert!(
        again == snap,
        "seed {seed}: the volume differs after unmount and mount"
    );

    // Everything deleted: the space of the empty volume comes back.
    remove_all(&fs, ROOT);
    fs.sync().unwrap();
    let st = fs.statfs();
    assert_eq!(
        st.files, 1,
        "seed {seed}: inodes left after deleting everything"
    );
    assert_eq!(
        st.free_blocks, empty.free_blocks,
        "seed {seed}: free blocks after deleting everything and a sync"
    );
    fs.unmount().unwrap();
    fsck_clean(&s, "after deleting everything");
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(
        fs.statfs().free_blocks,
        empty.free_blocks,
        "seed {seed}: after a remount"
    );
    progress.done.store(true, Ordering::Relaxed);
}

#[test]
fn threads_on_own_and_shared_files_keep_the_model() {
    let base = std::env::var("NUMAIO_FS_STRESS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_127u64);
    run_round(base);
    run_round(base.wrapping_add(1));
}

#[test]
fn the_checks_see_foreign_torn_and_wrong_data() {
    let mut data = fill(7, 1, 3, 0, 64);
    data.extend_from_slice(&[0; 32]);
    assert!(check_records(7, 0, &data).is_ok());
    // a record of inode 8 in inode 7
    let mut foreign = data.clone();
    foreign[16..32].copy_from_slice(&record(8, 2, 9));
    let e = check_records(7, 0, &foreign).unwrap_err();
    assert!(
        e.contains("offset 16") && e.contains("a record of inode 8"),
        "{e}"
    );
    // two writers' halves in one record
    let mut torn = data.clone();
    torn[40..46].copy_from_slice(&record(7, 4, 1)[8..14]);
    let e = check_records(7, 0, &torn).unwrap_err();
    assert!(e.contains("offset 32") && e.contains("torn"), "{e}");
    // the model check names the first difference and what is there
    let want = fill(7, 1, 3, 0, 100);
    let mut got = want.clone();
    got[48..64].fill(0);
    let d = diff(7, &got, &want).unwrap();
    assert!(
        d.contains("offset 48: the file holds zeros where the model has a record of inode 7"),
        "{d}"
    );
    assert!(diff(7, &want[..90], &want)
        .unwrap()
        .contains("90 bytes, model 100"));
    assert_eq!(diff(7, &want, &want), None);
}
