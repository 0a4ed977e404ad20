//! What becomes durable without an fsync of the file (directory fsync, the periodic commit)
//! and when freed space comes back (the last release, a commit forced by a full volume),
//! through `Fs` over in-memory volumes that can lose power.

use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    }
}

fn vol(mo: MountOptions) -> (Arc<MemStore>, Fs) {
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB), (1, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let fs = Fs::mount(s.clone(), mo).unwrap();
    (s, fs)
}

fn c() -> Caller {
    Caller::root_on(0)
}

fn after_power_cut(s: &MemStore) -> Fs {
    let cut = Arc::new(s.crash(CrashMode::DropUnsynced));
    let fs = Fs::mount(cut.clone(), MountOptions::default()).unwrap();
    let r = fsck::fsck(&*cut, &fsck::FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "fsck after the cut: {:?}", r.errors);
    fs
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size as usize);
    buf
}

fn content(fs: &Fs, name: &[u8]) -> Option<Vec<u8>> {
    let a = fs.lookup(ROOT, name, &c()).ok()?;
    Some(read_all(fs, a.ino))
}

/// Writes `chunk`-sized pieces to a new file `name` until the volume is full; the bytes
/// written.
fn fill(fs: &Fs, name: &[u8], chunk: usize) -> u64 {
    let f = fs.create(ROOT, name, 0o644, &c()).unwrap();
    let data = vec![0x5au8; chunk];
    let mut off = 0u64;
    loop {
        match fs.write(f.ino, off, &data, &c()) {
            Ok(n) => off += n as u64,
            Err(FsError::NoSpace) => return off,
            Err(e) => panic!("filling {}: {e}", String::from_utf8_lossy(name)),
        }
    }
}

#[test]
fn a_directory_fsync_makes_a_rename_over_and_a_mkdir_durable() {
    let (s, fs) = vol(MountOptions::default());
    let old = fs.create(ROOT, b"old", 0o644, &c()).unwrap();
    fs.write(old.ino, 0, b"old content", &c()).unwrap();
    fs.fsync(old.ino, false).unwrap();
    let tmp = fs.create(ROOT, b"new.tmp", 0o644, &c()).unwrap();
    fs.write(tmp.ino, 0, b"new content", &c()).unwrap();
    fs.fsync(tmp.ino, false).unwrap();
    fs.rename(ROOT, b"new.tmp", ROOT, b"old", 0, &c()).unwrap();
    // Before the directory fsync the rename is not durable.
    let before = after_power_cut(&s);
    assert_eq!(content(&before, b"old").unwrap(), b"old content");
    assert!(content(&before, b"new.tmp").is_some());
    fs.fsync_dir(ROOT).unwrap();
    let d = fs.mkdir(ROOT, b"newdir", 0o755, &c()).unwrap();
    fs.fsync_dir(ROOT).unwrap();
    let after = after_power_cut(&s);
    assert_eq!(content(&after, b"old").unwrap(), b"new content");
    assert!(matches!(
        after.lookup(ROOT, b"new.tmp", &c()),
        Err(FsError::NotFound)
    ));
    assert_eq!(after.lookup(ROOT, b"newdir", &c()).unwrap().ino, d.ino);
    // Only directories take a directory fsync.
    assert!(matches!(fs.fsync_dir(old.ino), Err(FsError::NotFound)));
    assert!(matches!(fs.fsync_dir(tmp.ino), Err(FsError::NotDir)));
}

#[test]
fn the_periodic_commit_makes_unsynced_changes_durable() {
    let every = Duration::from_millis(50);
    let (s, fs) = vol(MountOptions {
        commit_interval: Some(every),
        ..Default::default()
    });
    assert_eq!(fs.commit_interval(), Some(every));
    let f = fs.create(ROOT, b"f_sync", 0o644, &c()).unwrap();
    fs.write(f.ino, 0, b"S\n", &c()).unwrap();
    fs.mkdir(ROOT, b"d", 0o755, &c()).unwrap();
    let t = Instant::now();
    while fs.sync_stats().periodic == 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no periodic commit in 10 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let st = fs.sync_stats();
    assert_eq!(st.requests, 0, "nobody asked for a sync: {st:?}");
    assert!(st.commits >= 1, "{st:?}");
    let cut = after_power_cut(&s);
    assert_eq!(content(&cut, b"f_sync").unwrap(), b"S\n");
    assert!(cut.lookup(ROOT, b"d", &c()).is_ok());
    // Idle: nothing queued, so no more commits.
    std::thread::sleep(every * 2);
    let n = fs.commits();
    std::thread::sleep(every * 4);
    assert_eq!(fs.commits(), n, "commits without changes");
    // Unmount stops the thread and checkpoints; the volume is clean.
    fs.unmount().unwrap();
    let again = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(content(&again, b"f_sync").unwrap(), b"S\n");
}

#[test]
fn commit_intervals_are_validated() {
    let o = MountOptions::default().with_commit_secs(0).unwrap();
    assert_eq!(
        o.commit_interval,
        Some(Duration::from_secs(DEFAULT_COMMIT_SECS))
    );
    let o = MountOptions::default().with_commit_secs(1).unwrap();
    assert_eq!(o.commit_interval, Some(Duration::from_secs(1)));
    let e = MountOptions::default()
        .with_commit_secs(MAX_COMMIT_SECS + 1)
        .unwrap_err();
    assert!(e.to_string().contains("at most 86400"), "{e}");
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let zero = MountOptions {
        commit_interval: Some(Duration::ZERO),
        ..Default::default()
    };
    assert!(matches!(
        Fs::mount(s.clone(), zero),
        Err(FsError::Invalid(_))
    ));
    // Read-only: no thread, nothing written.
    let ro = MountOptions {
        read_only: true,
        commit_interval: Some(Duration::from_millis(10)),
    };
    assert_eq!(Fs::mount(s, ro).unwrap().commit_interval(), None);
}

#[test]
fn a_full_volume_commits_freed_blocks_and_retries() {
    let (s, fs) = vol(MountOptions::default());
    let free0 = fs.statfs().free_blocks;
    let first = fill(&fs, b"a", 64 * 1024);
    assert!(first > 2 * MIB, "only {first} bytes fit");
    fs.unlink(ROOT, b"a", &c()).unwrap();
    // Freed, not committed: not free yet.
    assert!(fs.statfs().free_blocks < 16);
    let before = fs.sync_stats();
    // The same amount again, without a sync: the first write that finds no space commits
    // the free and goes on.
    let second = fill(&fs, b"b", 64 * 1024);
    assert!(second >= first, "{second} < {first}");
    let after = fs.sync_stats();
    assert_eq!(after.requests, before.requests);
    assert!(after.for_space >= 1, "{after:?}");
    // The commit it forced is a real one: "a" is gone after a power cut.
    let cut = after_power_cut(&s);
    assert!(matches!(
        cut.lookup(ROOT, b"a", &c()),
        Err(FsError::NotFound)
    ));
    // A volume full of live data still fails, without a commit.
    let n = fs.sync_stats().for_space;
    let b = fs.lookup(ROOT, b"b", &c()).unwrap();
    assert!(matches!(
        fs.write(b.ino, second, &[1u8; 8192], &c()),
        Err(FsError::NoSpace)
    ));
    assert_eq!(fs.sync_stats().for_space, n);
    fs.unlink(ROOT, b"b", &c()).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free0);
}

#[test]
fn fallocate_on_a_full_volume_commits_freed_blocks_and_retries() {
    let (_s, fs) = vol(MountOptions::default());
    let first = fill(&fs, b"a", 64 * 1024);
    fs.unlink(ROOT, b"a", &c()).unwrap();
    let f = fs.create(ROOT, b"b", 0o644, &c()).unwrap();
    fs.fallocate(f.ino, 0, first, 0, &c()).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().size, first);
    assert!(fs.sync_stats().for_space >= 1);
}

#[test]
fn an_unlinked_open_file_frees_its_blocks_at_the_last_release() {
    let (_s, fs) = vol(MountOptions::default());
    let free0 = fs.statfs().free_blocks;
    let f = fs.create(ROOT, b"tmp", 0o644, &c()).unwrap();
    fs.open(f.ino).unwrap();
    fs.open(f.ino).unwrap();
    let first = fill_ino(&fs, f.ino);
    fs.unlink(ROOT, b"tmp", &c()).unwrap();
    fs.sync().unwrap();
    // Still open twice: the blocks are the file's.
    assert!(fs.statfs().free_blocks < 16);
    fs.release(f.ino).unwrap();
    fs.sync().unwrap();
    assert!(fs.statfs().free_blocks < 16);
    fs.release(f.ino).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free0);
    // And, without the sync, a writer gets them back through the forced commit.
    let g = fs.create(ROOT, b"g", 0o644, &c()).unwrap();
    fs.open(g.ino).unwrap();
    assert!(fill_ino(&fs, g.ino) >= first);
    fs.unlink(ROOT, b"g", &c()).unwrap();
    fs.release(g.ino).unwrap();
    assert!(fill(&fs, b"h", 64 * 1024) >= first);
}

fn fill_ino(fs: &Fs, ino: u64) -> u64 {
    let data = vec![7u8; 64 * 1024];
    let mut off = 0u64;
    while let Ok(n) = fs.write(ino, off, &data, &c()) {
        off += n as u64;
    }
    off
}

#[test]
fn concurrent_writers_filling_the_volume_with_syncs_do_not_deadlock() {
    let (_s, fs) = vol(MountOptions {
        commit_interval: Some(Duration::from_millis(5)),
        ..Default::default()
    });
    let fs = Arc::new(fs);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut hs = Vec::new();
    for t in 0..3u8 {
        let fs = fs.clone();
        hs.push(std::thread::spawn(move || {
            for round in 0..6 {
                let name = format!("w{t}-{round}");
                let f = fs.create(ROOT, name.as_bytes(), 0o644, &c()).unwrap();
                let data = vec![t; 32 * 1024];
                let mut off = 0;
                for _ in 0..40 {
                    match fs.write(f.ino, off, &data, &c()) {
                        Ok(n) => off += n as u64,
                        Err(FsError::NoSpace) => break,
                        Err(e) => panic!("{name}: {e}"),
                    }
                }
                if round % 2 == 0 {
                    fs.fsync(f.ino, false).unwrap();
                }
                fs.unlink(ROOT, name.as_bytes(), &c()).unwrap();
            }
        }));
    }
    let syncer = {
        let (fs, done) = (fs.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                fs.sync().unwrap();
                let _ = fs.statfs();
            }
        })
    };
    let t = Instant::now();
    for h in hs {
        while !h.is_finished() {
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "writers still running after 60 s: a deadlock"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        h.join().unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    syncer.join().unwrap();
    let fs = Arc::try_unwrap(fs).ok().expect("every thread is done");
    fs.sync().unwrap();
    let st = fs.statfs();
    assert_eq!(st.files, 1);
    fs.unmount().unwrap();
}

#[test]
fn statfs_counts_inodes_in_use_and_an_estimate_of_those_that_still_fit() {
    // One node: with several, where the directories' entries go decides the real count.
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let fs = Fs::mount(s, MountOptions::default()).unwrap();
    let st = fs.statfs();
    assert_eq!(st.files, 1, "the root");
    // A 64-block slot.
    let cap = 64 * 4096 / FREE_INODE_BYTES;
    assert!(
        st.files_free > 0 && st.files_free <= cap,
        "{} of {cap}",
        st.files_free
    );
    for i in 0..20 {
        fs.create(ROOT, format!("f{i}").as_bytes(), 0o644, &c())
            .unwrap();
    }
    let st2 = fs.statfs();
    assert_eq!(st2.files, 21);
    assert!(st2.files_free < st.files_free);
    // The estimate is on the low side: that many more files can really be made.
    let more = st2.files_free;
    for i in 0..more {
        fs.create(ROOT, format!("g{i}").as_bytes(), 0o644, &c())
            .unwrap_or_else(|e| panic!("file {i} of the {more} statfs promised: {e}"));
    }
}

#[test]
fn statfs_free_inodes_come_back_after_files_are_removed() {
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let fs = Fs::mount(s, MountOptions::default()).unwrap();
    let free0 = fs.statfs().files_free;
    // Churn: files made and removed, many times what the bound lets drift.
    for round in 0..20 {
        for i in 0..50 {
            fs.create(ROOT, format!("r{round}-{i}").as_bytes(), 0o644, &c())
                .unwrap();
        }
        for i in 0..50 {
            fs.unlink(ROOT, format!("r{round}-{i}").as_bytes(), &c())
                .unwrap();
        }
    }
    let st = fs.statfs();
    assert_eq!(st.files, 1);
    assert!(
        st.files_free * 10 >= free0 * 9,
        "{} free inodes after the churn, {free0} before",
        st.files_free
    );
}

/// A commit that maps new blocks (and grows a file over a zeroed tail) carries their data
/// in its record, so one device flush makes both durable. A cut that keeps the record but
/// none of the in-place writes (the flush had not completed) loses nothing: mount, and
/// `fsck --repair` alike, write the newest record's data back.
#[test]
fn a_record_carrying_data_restores_what_a_cut_lost_of_its_blocks() {
    let (s, fs) = vol(MountOptions::default());
    let f = fs.create(ROOT, b"log", 0o644, &c()).unwrap();
    fs.write(f.ino, 0, &[0xab; 3000], &c()).unwrap();
    fs.fsync(f.ino, true).unwrap();
    fs.write(f.ino, 3000, &[0xcd; 6000], &c()).unwrap();
    fs.fsync(f.ino, true).unwrap();
    let mut want = vec![0xab; 3000];
    want.extend_from_slice(&[0xcd; 6000]);
    assert_eq!(read_all(&fs, f.ino), want);
    // The record is durable; the blocks show what they held before the second write.
    let cut = s.crash(CrashMode::DropUnsynced);
    let bs = BLOCK_SIZE;
    for (_, e, _) in fs.block_map(f.ino).unwrap() {
        cut.write_at(e.dev, e.start * bs, &vec![0x11; (e.len * bs) as usize])
            .unwrap();
    }
    let copy = Arc::new(cut.crash(CrashMode::KeepAll));
    let look = fsck::fsck(&*copy, &fsck::FsckOptions { repair: false }).unwrap();
    assert_eq!(
        (look.journal_data_blocks, look.exit_code()),
        (3, 0),
        "a plain fsck reports the file's three blocks to write back and writes nothing"
    );
    let cut = Arc::new(cut);
    let after = Fs::mount(cut.clone(), MountOptions::default()).unwrap();
    assert!(read_all(&after, f.ino) == want, "mount wrote the data back");
    drop(after);
    let r = fsck::fsck(&*copy, &fsck::FsckOptions { repair: true }).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert!(
        r.repaired.iter().any(|x| x.contains("written back")),
        "{:?}",
        r.repaired
    );
    let again = fsck::fsck(&*copy, &fsck::FsckOptions { repair: false }).unwrap();
    assert_eq!(
        again.journal_data_blocks, 0,
        "the repair's checkpoint retired it"
    );
    let fixed = Fs::mount(copy, MountOptions::default()).unwrap();
    assert_eq!(
        read_all(&fixed, f.ino),
        want,
        "fsck --repair wrote the data back"
    );
}
