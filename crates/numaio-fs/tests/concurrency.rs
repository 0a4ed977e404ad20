//! The file system is not serialised by one lock: reads of different files overlap their
//! device I/O; stats, lookups, creates and reads of other files complete while a write or a
//! commit waits for its device. Functional claims with generous bounds, each under a
//! watchdog so that a deadlock fails the test instead of hanging it.

use numaio_fs::store::{BlockStore, DeviceInfo, MemStore};
use numaio_fs::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const BS: usize = BLOCK_SIZE as usize;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 256,
        journal_blocks: 256,
        checkpoint_blocks: 64,
    }
}

fn root() -> Caller {
    Caller::root_on(0)
}

/// A MemStore whose reads, writes or syncs take as long as a slow disk once armed; `busy`
/// counts the slow calls in flight.
struct Slow {
    mem: Arc<MemStore>,
    reads: AtomicU64,
    writes: AtomicU64,
    syncs: AtomicU64,
    busy: AtomicU64,
}

impl Slow {
    fn new(mem: Arc<MemStore>) -> Slow {
        Slow {
            mem,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            syncs: AtomicU64::new(0),
            busy: AtomicU64::new(0),
        }
    }

    fn wait(&self, ms: &AtomicU64) {
        let ms = ms.load(Ordering::SeqCst);
        if ms > 0 {
            self.busy.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(ms));
            self.busy.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl BlockStore for Slow {
    fn devices(&self) -> &[DeviceInfo] {
        self.mem.devices()
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        self.wait(&self.reads);
        self.mem.read_at(dev, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        self.wait(&self.writes);
        self.mem.write_at(dev, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        self.wait(&self.syncs);
        self.mem.sync(dev)
    }
}

fn volume() -> (Arc<Slow>, Arc<Fs>) {
    let mem = Arc::new(MemStore::new(&[(0, 32 * MIB), (1, 32 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let slow = Arc::new(Slow::new(mem));
    let fs = Fs::mount(slow.clone(), MountOptions::default()).unwrap();
    (slow, Arc::new(fs))
}

/// Runs `f` on a thread of its own and fails when it takes more than `secs`.
fn watchdog(secs: u64, f: impl FnOnce() + Send + 'static) {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        f();
        let _ = tx.send(());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        // The thread panicked: its panic is the failure to report.
        Err(mpsc::RecvTimeoutError::Disconnected) => {
            if let Err(e) = t.join() {
                std::panic::resume_unwind(e)
            }
        }
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("no answer within {secs} s: the operations deadlocked or were serialised")
        }
    }
}

fn file(fs: &Fs, name: &str, bytes: usize, fill: u8) -> u64 {
    let ino = fs
        .create(ROOT, name.as_bytes(), 0o644, &root())
        .unwrap()
        .ino;
    fs.write(ino, 0, &vec![fill; bytes], &root()).unwrap();
    ino
}

/// Waits until a slow device call is in flight.
fn until_busy(slow: &Slow) {
    let t = Instant::now();
    while slow.busy.load(Ordering::SeqCst) == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the slow call never started"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn reads_of_different_files_overlap() {
    watchdog(120, || {
        let (slow, fs) = volume();
        let inos: Vec<u64> = (0..8)
            .map(|t| file(&fs, &format!("f{t}"), 64 << 10, t as u8 + 1))
            .collect();
        fs.sync().unwrap();
        slow.reads.store(50, Ordering::SeqCst);
        const READS: usize = 5;
        let read_all = |fs: &Fs, ino: u64, fill: u8| {
            let mut buf = vec![0u8; 64 << 10];
            for _ in 0..READS {
                assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), buf.len());
                assert!(buf.iter().all(|&b| b == fill));
            }
        };
        let t = Instant::now();
        read_all(&fs, inos[0], 1);
        let one = t.elapsed();
        let t = Instant::now();
        std::thread::scope(|s| {
            for (i, &ino) in inos.iter().enumerate() {
                let fs = &fs;
                s.spawn(move || read_all(fs, ino, i as u8 + 1));
            }
        });
        let eight = t.elapsed();
        eprintln!("reads of 50 ms each: one thread {one:?}, 8 threads on 8 files {eight:?}");
        // Serialised, eight threads would take eight times as long.
        assert!(
            eight < one * 2,
            "8 threads reading 8 files took {eight:?}, one thread {one:?}: the reads were \
             serialised"
        );
    });
}

#[test]
fn other_files_are_served_while_a_write_waits_for_its_device() {
    watchdog(120, || {
        let (slow, fs) = volume();
        let a = file(&fs, "a", BS, 1);
        let b = file(&fs, "b", 3 * BS, 2);
        fs.sync().unwrap();
        slow.writes.store(2000, Ordering::SeqCst);
        let writer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.write(a, 0, &vec![9u8; 2 * BS], &root()).unwrap())
        };
        until_busy(&slow);
        let t = Instant::now();
        assert_eq!(fs.getattr(b).unwrap().size, 3 * BLOCK_SIZE);
        assert_eq!(fs.lookup(ROOT, b"b", &root()).unwrap().ino, b);
        assert!(fs.readdir(ROOT, 0).unwrap().len() >= 4);
        assert!(fs.statfs().free_blocks > 0);
        let mut buf = vec![0u8; 3 * BS];
        assert_eq!(fs.read(b, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&x| x == 2));
        fs.mkdir(ROOT, b"d", 0o755, &root()).unwrap();
        fs.rename(ROOT, b"b", ROOT, b"b2", 0, &root()).unwrap();
        let done = t.elapsed();
        assert_eq!(
            slow.busy.load(Ordering::SeqCst),
            1,
            "the write finished before the other operations ({done:?}): they waited for it"
        );
        slow.writes.store(0, Ordering::SeqCst);
        assert_eq!(writer.join().unwrap(), 2 * BS);
        let mut buf = vec![0u8; 2 * BS];
        assert_eq!(fs.read(a, 0, &mut buf).unwrap(), buf.len());
        assert!(buf.iter().all(|&x| x == 9));
    });
}

#[test]
fn a_read_of_the_file_being_written_sees_all_of_the_write_or_none() {
    watchdog(120, || {
        let (slow, fs) = volume();
        let a = file(&fs, "a", 4 * BS, 1);
        slow.writes.store(300, Ordering::SeqCst);
        let writer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.write(a, 0, &vec![7u8; 4 * BS], &root()).unwrap())
        };
        until_busy(&slow);
        slow.writes.store(0, Ordering::SeqCst);
        let mut buf = vec![0u8; 4 * BS];
        assert_eq!(fs.read(a, 0, &mut buf).unwrap(), buf.len());
        assert!(
            buf.iter().all(|&x| x == 7),
            "the read saw a write half done"
        );
        writer.join().unwrap();
    });
}

#[test]
fn operations_go_on_while_a_commit_syncs() {
    watchdog(120, || {
        let (slow, fs) = volume();
        let a = file(&fs, "a", BS, 1);
        slow.syncs.store(2000, Ordering::SeqCst);
        let syncer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.fsync(a, false).unwrap())
        };
        until_busy(&slow);
        let c = fs.create(ROOT, b"c", 0o644, &root()).unwrap().ino;
        fs.write(c, 0, &vec![3u8; 5 * BS], &root()).unwrap();
        fs.write(a, BS as u64, &vec![4u8; BS], &root()).unwrap();
        fs.setattr(
            c,
            &SetAttr {
                size: Some(BLOCK_SIZE + 5),
                ..SetAttr::default()
            },
            &root(),
        )
        .unwrap();
        assert_eq!(fs.getattr(c).unwrap().size, BLOCK_SIZE + 5);
        assert!(
            slow.busy.load(Ordering::SeqCst) >= 1,
            "the commit finished before the other operations: they waited for it"
        );
        slow.syncs.store(0, Ordering::SeqCst);
        syncer.join().unwrap();
        fs.sync().unwrap();
    });
}

#[test]
fn read_accounted_counts_what_range_nodes_counts() {
    let (_slow, fs) = volume();
    let a = fs.create(ROOT, b"a", 0o644, &root()).unwrap().ino;
    fs.write(a, 0, &vec![5u8; 3 * BS], &Caller::root_on(0))
        .unwrap();
    fs.write(a, 8 * BLOCK_SIZE, &vec![6u8; 2 * BS], &Caller::root_on(1))
        .unwrap();
    let mut buf = vec![0u8; 16 * BS];
    for (off, len) in [(0, 16 * BS), (100, 5 * BS), (7 * BS as u64, 3 * BS), (0, 1)] {
        let (n, nodes) = fs.read_accounted(a, off, &mut buf[..len], false).unwrap();
        assert_eq!(nodes, fs.range_nodes(a, off, len as u64), "at {off}+{len}");
        assert_eq!(
            n as u64,
            (len as u64).min(10 * BLOCK_SIZE - off.min(10 * BLOCK_SIZE))
        );
    }
    let (n, nodes) = fs.read_accounted(a, 0, &mut buf, true).unwrap();
    assert_eq!(n, 10 * BS);
    let total: u64 = nodes.iter().map(|x| x.1).sum();
    assert_eq!(total, 5 * BLOCK_SIZE);
    assert_eq!(
        fs.read_accounted(a, 1 << 30, &mut buf, false).unwrap(),
        (0, vec![])
    );
}

#[test]
fn a_commit_during_a_write_never_makes_the_new_blocks_durable_before_their_data() {
    watchdog(120, || {
        // One device: a power cut of the MemStore is then one instant.
        let mem = Arc::new(MemStore::new(&[(0, 16 * MIB)]));
        Fs::mkfs(&*mem, &opts()).unwrap();
        let slow = Arc::new(Slow::new(mem.clone()));
        let fs = Arc::new(Fs::mount(slow.clone(), MountOptions::default()).unwrap());
        // Every free block holds 0xff: a file that shows 0xff shows a removed file's data.
        let old = fs.create(ROOT, b"old", 0o644, &root()).unwrap().ino;
        let mut at = 0u64;
        for chunk in [64usize, 1] {
            while fs
                .write(old, at, &vec![0xffu8; chunk * BS], &root())
                .is_ok()
            {
                at += (chunk * BS) as u64;
            }
        }
        fs.unlink(ROOT, b"old", &root()).unwrap();
        fs.sync().unwrap();
        let s = fs.create(ROOT, b"s", 0o644, &root()).unwrap().ino;
        let grow = SetAttr {
            size: Some(8 * BLOCK_SIZE),
            ..SetAttr::default()
        };
        fs.setattr(s, &grow, &root()).unwrap();
        fs.sync().unwrap();
        // A write into the hole at block 3 waits for its device; a sync comes meanwhile.
        slow.writes.store(1500, Ordering::SeqCst);
        let writer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.write(s, 3 * BLOCK_SIZE, &[0x11u8; BS], &root()))
        };
        until_busy(&slow);
        slow.writes.store(0, Ordering::SeqCst);
        let syncer = {
            let fs = fs.clone();
            std::thread::spawn(move || fs.sync())
        };
        std::thread::sleep(Duration::from_millis(300));
        let cut = mem.crash(store::CrashMode::KeepAll);
        writer.join().unwrap().unwrap();
        syncer.join().unwrap().unwrap();
        let after = Fs::mount(Arc::new(cut), MountOptions::default()).unwrap();
        let mut buf = vec![0u8; 8 * BS];
        assert_eq!(after.read(s, 0, &mut buf).unwrap(), buf.len());
        let blk = &buf[3 * BS..4 * BS];
        assert!(
            blk.iter().all(|&x| x == 0) || blk.iter().all(|&x| x == 0x11),
            "block 3 after a power cut during the write: {:?}",
            &blk[..16]
        );
    });
}

/// Xorshift, seeded per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Every block of a file written by the shared threads holds one value and then, past a
/// truncate that cut into it, zeros: writes are whole blocks of one value, so anything else
/// is a torn write or another file's data.
fn check_blocks(fs: &Fs, ino: u64, what: &str) {
    let Ok(a) = fs.getattr(ino) else { return };
    let mut buf = vec![0u8; a.size as usize];
    let Ok(n) = fs.read(ino, 0, &mut buf) else {
        return;
    };
    for (i, blk) in buf[..n].chunks(BS).enumerate() {
        let v = blk[0];
        let k = blk.iter().position(|&x| x != v).unwrap_or(blk.len());
        assert!(
            blk[k..].iter().all(|&x| x == 0),
            "{what}: block {i} of inode {ino} mixes values: {:?}",
            &blk[..blk.len().min(16)]
        );
    }
}

/// After a power cut a block overwritten in place may hold old and new sectors, but never
/// bytes of another file: the own files' bytes are all at least `OWN_BYTES`.
fn check_not_foreign(fs: &Fs, ino: u64, what: &str) {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let n = fs.read(ino, 0, &mut buf).unwrap();
    if let Some(p) = buf[..n].iter().position(|&x| x >= OWN_BYTES) {
        panic!(
            "{what}: inode {ino} shows another file's byte {:#x} at {p}",
            buf[p]
        );
    }
}

/// Bytes of the threads' own files are at least this; the shared files' tags are below.
const OWN_BYTES: u8 = 0xf0;

/// A MemStore whose power cuts are one instant for all its devices: `MemStore::crash`
/// images one device after the other, so a commit or a reallocation between two of them
/// would give an image no power cut can leave.
struct OneInstant {
    mem: MemStore,
    cut: std::sync::RwLock<()>,
}

impl OneInstant {
    fn crash(&self, mode: store::CrashMode) -> MemStore {
        let _all = self.cut.write().unwrap();
        self.mem.crash(mode)
    }
}

impl BlockStore for OneInstant {
    fn devices(&self) -> &[DeviceInfo] {
        self.mem.devices()
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let _io = self.cut.read().unwrap();
        self.mem.read_at(dev, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let _io = self.cut.read().unwrap();
        self.mem.write_at(dev, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let _io = self.cut.read().unwrap();
        self.mem.sync(dev)
    }
}

#[test]
fn racing_writes_truncates_unlinks_renames_and_fsyncs_keep_the_volume_sound() {
    watchdog(300, || {
        let mem = Arc::new(OneInstant {
            mem: MemStore::new(&[(0, 32 * MIB), (1, 32 * MIB)]),
            cut: std::sync::RwLock::new(()),
        });
        Fs::mkfs(&*mem, &opts()).unwrap();
        let fs = Arc::new(Fs::mount(mem.clone(), MountOptions::default()).unwrap());
        const THREADS: u64 = 4;
        const OPS: usize = 400;
        const SHARED: u64 = 4;
        let stop_crash = Arc::new(AtomicBool::new(false));
        // Power cuts taken while the threads run: each image must check clean.
        let cutter = {
            let (mem, stop) = (mem.clone(), stop_crash.clone());
            std::thread::spawn(move || {
                let mut cuts = Vec::new();
                while !stop.load(Ordering::SeqCst) && cuts.len() < 6 {
                    std::thread::sleep(Duration::from_millis(40));
                    cuts.push(mem.crash(store::CrashMode::Random {
                        seed: cuts.len() as u64,
                    }));
                }
                cuts
            })
        };
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let fs = &fs;
                s.spawn(move || {
                    let c = Caller::root_on((t % 2) as u32);
                    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ ((t + 1) * 0x1234_5678));
                    // This thread's own file, checked against an exact model.
                    let own = format!("own{t}");
                    let mine = fs.create(ROOT, own.as_bytes(), 0o644, &c).unwrap().ino;
                    let mut model: Vec<u8> = Vec::new();
                    for i in 0..OPS {
                        let shared = format!("s{}", rng.below(SHARED));
                        let tag = (t * 59 + (i as u64 % 59) + 1) as u8;
                        match rng.below(10) {
                            0 | 1 => {
                                // Whole blocks of one value into a shared file.
                                let ino = match fs.lookup(ROOT, shared.as_bytes(), &c) {
                                    Ok(a) => a.ino,
                                    Err(FsError::NotFound) => {
                                        match fs.create(ROOT, shared.as_bytes(), 0o644, &c) {
                                            Ok(a) => a.ino,
                                            Err(FsError::Exists) => continue,
                                            Err(e) => panic!("create {shared}: {e}"),
                                        }
                                    }
                                    Err(e) => panic!("lookup {shared}: {e}"),
                                };
                                let off = rng.below(16) * BLOCK_SIZE;
                                let n = 1 + rng.below(4) as usize;
                                match fs.write(ino, off, &vec![tag; n * BS], &c) {
                                    // Unlinked and freed meanwhile.
                                    Ok(_) | Err(FsError::NotFound) => {}
                                    Err(e) => panic!("write {shared}: {e}"),
                                }
                            }
                            2 => {
                                if let Ok(a) = fs.lookup(ROOT, shared.as_bytes(), &c) {
                                    let size = Some(rng.below(20 * BLOCK_SIZE));
                                    let s = SetAttr {
                                        size,
                                        ..SetAttr::default()
                                    };
                                    match fs.setattr(a.ino, &s, &c) {
                                        Ok(_) | Err(FsError::NotFound) => {}
                                        Err(e) => panic!("truncate {shared}: {e}"),
                                    }
                                }
                            }
                            3 => match fs.unlink(ROOT, shared.as_bytes(), &c) {
                                Ok(()) | Err(FsError::NotFound) => {}
                                Err(e) => panic!("unlink {shared}: {e}"),
                            },
                            4 => {
                                let to = format!("s{}", rng.below(SHARED));
                                match fs.rename(ROOT, shared.as_bytes(), ROOT, to.as_bytes(), 0, &c)
                                {
                                    Ok(()) | Err(FsError::NotFound) => {}
                                    Err(e) => panic!("rename {shared} {to}: {e}"),
                                }
                            }
                            5 => fs.fsync(mine, rng.below(2) == 0).unwrap(),
                            6 => {
                                if let Ok(a) = fs.lookup(ROOT, shared.as_bytes(), &c) {
                                    check_blocks(fs, a.ino, "while racing");
                                }
                            }
                            7 => {
                                let size = rng.below(12 * BLOCK_SIZE) as usize;
                                let s = SetAttr {
                                    size: Some(size as u64),
                                    ..SetAttr::default()
                                };
                                fs.setattr(mine, &s, &c).unwrap();
                                model.resize(size, 0);
                            }
                            _ => {
                                let off = rng.below(10 * BLOCK_SIZE) as usize;
                                let len = 1 + rng.below(3 * BLOCK_SIZE) as usize;
                                let data: Vec<u8> = (0..len)
                                    .map(|k| OWN_BYTES | ((tag ^ k as u8) & 0xf))
                                    .collect();
                                fs.write(mine, off as u64, &data, &c).unwrap();
                                if model.len() < off + len {
                                    model.resize(off + len, 0);
                                }
                                model[off..off + len].copy_from_slice(&data);
                            }
                        }
                        if i % 50 == 0 {
                            let mut buf = vec![0u8; model.len() + 10];
                            let n = fs.read(mine, 0, &mut buf).unwrap();
                            assert_eq!(&buf[..n], &model[..], "thread {t} own file, op {i}");
                        }
                    }
                    let mut buf = vec![0u8; model.len() + 10];
                    let n = fs.read(mine, 0, &mut buf).unwrap();
                    assert_eq!(&buf[..n], &model[..], "thread {t} own file at the end");
                });
            }
        });
        stop_crash.store(true, Ordering::SeqCst);
        let cuts = cutter.join().unwrap();
        for s in 0..SHARED {
            if let Ok(a) = fs.lookup(ROOT, format!("s{s}").as_bytes(), &root()) {
                check_blocks(&fs, a.ino, "after the race");
            }
        }
        let own: Vec<(u64, Vec<u8>)> = (0..THREADS)
            .map(|t| {
                let ino = fs
                    .lookup(ROOT, format!("own{t}").as_bytes(), &root())
                    .unwrap()
                    .ino;
                let size = fs.getattr(ino).unwrap().size as usize;
                let mut buf = vec![0u8; size];
                fs.read(ino, 0, &mut buf).unwrap();
                (ino, buf)
            })
            .collect();
        Arc::into_inner(fs).unwrap().unmount().unwrap();
        let r = fsck::fsck(&*mem, &fsck::FsckOptions { repair: false }).unwrap();
        assert!(r.errors.is_empty(), "fsck after the race: {:?}", r.errors);
        assert!(!cuts.is_empty());
        for (i, cut) in cuts.into_iter().enumerate() {
            let r = fsck::fsck(&cut, &fsck::FsckOptions { repair: false }).unwrap();
            assert!(r.errors.is_empty(), "fsck of power cut {i}: {:?}", r.errors);
            let fs = Fs::mount(Arc::new(cut), MountOptions::default()).unwrap();
            for s in 0..SHARED {
                if let Ok(a) = fs.lookup(ROOT, format!("s{s}").as_bytes(), &root()) {
                    check_not_foreign(&fs, a.ino, &format!("power cut {i}"));
                }
            }
        }
        let fs = Fs::mount(mem, MountOptions::default()).unwrap();
        for (ino, data) in own {
            let mut buf = vec![0u8; data.len() + 10];
            let n = fs.read(ino, 0, &mut buf).unwrap();
            assert_eq!(&buf[..n], &data[..], "inode {ino} after remount");
        }
    });
}
