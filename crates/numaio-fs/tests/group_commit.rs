//! Group commit and fdatasync: concurrent fsyncs share commits and every acknowledged one
//! survives a power cut; fdatasync of a file whose size and blocks are durable commits
//! nothing; repeated attribute changes queue one record.

use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

mod hooked;
use hooked::Hooked;

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

/// One device, so that a power cut (which images each device under its lock) is one
/// instant for the whole volume even while other threads commit.
fn slow_volume(delay_ms: u64) -> (Arc<MemStore>, Arc<Fs>) {
    let mem = Arc::new(MemStore::new(&[(0, 16 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    // Syncs take as long as a disk flush, so that fsyncs of several threads overlap the
    // commit in flight.
    let delay = Duration::from_millis(delay_ms);
    let store = Arc::new(Hooked::new(mem.clone()).on_sync(move |_| std::thread::sleep(delay)));
    let fs = Fs::mount(store, MountOptions::default()).unwrap();
    (mem, Arc::new(fs))
}

/// Block `i` of thread `t`'s file.
fn block(t: usize, i: usize) -> Vec<u8> {
    vec![(t * 37 + i * 11 + 1) as u8; BS]
}

/// Checks that thread `t`'s file holds at least `acked` appended blocks, each intact.
fn check_file(fs: &Fs, t: usize, acked: u64) {
    let name = format!("f{t}");
    let a = fs
        .lookup(ROOT, name.as_bytes(), &Caller::root_on(0))
        .unwrap_or_else(|e| panic!("{name}: fsync acknowledged {acked} blocks, file lost: {e}"));
    let blocks = a.size / BLOCK_SIZE;
    assert!(
        blocks >= acked,
        "{name}: {blocks} blocks after the power cut, {acked} acknowledged by fsync"
    );
    let mut buf = vec![0u8; a.size as usize];
    assert_eq!(fs.read(a.ino, 0, &mut buf).unwrap(), buf.len());
    for i in 0..blocks as usize {
        assert_eq!(
            buf[i * BS..(i + 1) * BS],
            block(t, i)[..],
            "{name}: block {i} is not what was written"
        );
    }
}

#[test]
fn concurrent_fsyncs_share_commits_and_survive_power_cuts() {
    const THREADS: usize = 8;
    const ROUNDS: usize = 25;
    let (mem, fs) = slow_volume(3);
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..THREADS).map(|_| AtomicU64::new(0)).collect());
    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let (fs, acked) = (fs.clone(), acked.clone());
            std::thread::spawn(move || {
                let c = Caller::root_on(0);
                let f = fs
                    .create(ROOT, format!("f{t}").as_bytes(), 0o644, &c)
                    .unwrap();
                for i in 0..ROUNDS {
                    fs.write(f.ino, (i * BS) as u64, &block(t, i), &c).unwrap();
                    fs.fsync(f.ino, false).unwrap();
                    acked[t].store(i as u64 + 1, Ordering::Release);
                }
            })
        })
        .collect();
    // Power cuts while the writers run: everything acknowledged before the cut is there.
    let mut cuts = 0;
    while !done.load(Ordering::Acquire) {
        let seen: Vec<u64> = acked.iter().map(|a| a.load(Ordering::Acquire)).collect();
        let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
        let after = Fs::mount(img, MountOptions::default()).unwrap();
        for (t, &n) in seen.iter().enumerate().filter(|(_, &n)| n > 0) {
            check_file(&after, t, n);
        }
        cuts += 1;
        std::thread::sleep(Duration::from_millis(7));
        done.store(workers.iter().all(|w| w.is_finished()), Ordering::Release);
    }
    for w in workers {
        w.join().unwrap();
    }
    let st = fs.sync_stats();
    eprintln!(
        "{} fsyncs, {} commits, {cuts} power cuts checked",
        st.requests, st.commits
    );
    assert_eq!(st.requests, (THREADS * ROUNDS) as u64);
    // Each commit waits for two 3 ms syncs, so threads arriving meanwhile must share one.
    assert!(
        st.commits * 4 <= st.requests * 3,
        "{} commits for {} concurrent fsyncs: they did not share commits",
        st.commits,
        st.requests
    );
    assert!(
        cuts >= 2,
        "the writers finished before a power cut was taken"
    );
    let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
    let after = Fs::mount(img, MountOptions::default()).unwrap();
    for t in 0..THREADS {
        check_file(&after, t, ROUNDS as u64);
    }
}

#[test]
fn fdatasync_of_an_overwrite_syncs_data_without_a_commit() {
    let mem = Arc::new(MemStore::new(&[(0, 8 * MIB), (1, 8 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(1);
    let f = fs.create(ROOT, b"db", 0o644, &c).unwrap();
    fs.write(f.ino, 0, &vec![1u8; 4 * BS], &c).unwrap();
    // New blocks and a new size: fdatasync must commit them.
    fs.fsync(f.ino, true).unwrap();
    let st = fs.sync_stats();
    assert_eq!((st.commits, st.data_only), (1, 0));
    // That commit carried the new blocks' data in its record (one flush), so the first
    // overwrite synced after it needs a record too: recovery would otherwise write the
    // older contents back over it.
    fs.write(f.ino, BS as u64, &vec![7u8; BS], &c).unwrap();
    fs.fsync(f.ino, true).unwrap();
    let st = fs.sync_stats();
    assert_eq!((st.commits, st.data_only), (2, 0));
    let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
    let after = Fs::mount(img, MountOptions::default()).unwrap();
    let mut buf = vec![0u8; BS];
    after.read(f.ino, BS as u64, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 7), "fdatasync'd overwrite lost");
    // Overwrites in place change only the times: no commit, the data device synced.
    fs.write(f.ino, BS as u64, &vec![2u8; BS], &c).unwrap();
    fs.fsync(f.ino, true).unwrap();
    let st = fs.sync_stats();
    assert_eq!((st.commits, st.data_only), (2, 1));
    let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
    let after = Fs::mount(img, MountOptions::default()).unwrap();
    let mut buf = vec![0u8; 4 * BS];
    after.read(f.ino, 0, &mut buf).unwrap();
    assert!(buf[..BS].iter().all(|&b| b == 1));
    assert!(
        buf[BS..2 * BS].iter().all(|&b| b == 2),
        "fdatasync'd overwrite lost"
    );
    // Growing the file is a size change: committed again.
    fs.write(f.ino, 4 * BS as u64, &[3u8; 100], &c).unwrap();
    fs.fsync(f.ino, true).unwrap();
    assert_eq!(fs.sync_stats().commits, 3);
    let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
    let after = Fs::mount(img, MountOptions::default()).unwrap();
    assert_eq!(after.getattr(f.ino).unwrap().size, 4 * BLOCK_SIZE + 100);
    // fsync (not data) still commits the times.
    fs.write(f.ino, 0, &vec![4u8; BS], &c).unwrap();
    fs.fsync(f.ino, false).unwrap();
    assert_eq!(fs.sync_stats().commits, 4);
}

#[test]
fn repeated_attribute_changes_queue_one_record() {
    let mem = Arc::new(MemStore::new(&[(0, 8 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    let f = fs.create(ROOT, b"hot", 0o644, &c).unwrap();
    fs.write(f.ino, 0, &vec![0u8; BS], &c).unwrap();
    fs.sync().unwrap();
    let (before, _) = fs.journal_usage();
    for i in 0..500u32 {
        fs.write(f.ino, 0, &i.to_le_bytes(), &c).unwrap();
    }
    fs.sync().unwrap();
    let (after, _) = fs.journal_usage();
    // One SetAttr is about 100 bytes encoded: 500 of them would be 50 KB.
    assert!(
        after - before < 1024,
        "500 overwrites took {} journal bytes",
        after - before
    );
    let want = fs.getattr(f.ino).unwrap();
    let img = Arc::new(mem.crash(CrashMode::DropUnsynced));
    let again = Fs::mount(img, MountOptions::default()).unwrap();
    let got = again.getattr(f.ino).unwrap();
    assert_eq!(
        (got.size, got.mtime, got.ctime),
        (want.size, want.mtime, want.ctime)
    );
    let mut buf = [0u8; 4];
    again.read(f.ino, 0, &mut buf).unwrap();
    assert_eq!(u32::from_le_bytes(buf), 499);
}

#[test]
fn a_commit_syncs_every_nodes_device_at_once() {
    let mem = Arc::new(MemStore::new(&[(0, 8 * MIB), (1, 8 * MIB)]));
    Fs::mkfs(&*mem, &opts()).unwrap();
    // How many syncs were in flight at once, at most.
    let in_flight = Arc::new(AtomicU64::new(0));
    let most = Arc::new(AtomicU64::new(0));
    let (i, m) = (in_flight.clone(), most.clone());
    let store = Hooked::new(mem.clone()).on_sync(move |_| {
        let now = i.fetch_add(1, Ordering::SeqCst) + 1;
        m.fetch_max(now, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(50));
        i.fetch_sub(1, Ordering::SeqCst);
    });
    let fs = Fs::mount(Arc::new(store), MountOptions::default()).unwrap();
    // Writer-local: a file written from each node has its blocks on that node's device.
    let files: Vec<u64> = (0..2u32)
        .map(|n| {
            let c = Caller::root_on(n);
            let f = fs
                .create(ROOT, format!("f{n}").as_bytes(), 0o644, &c)
                .unwrap()
                .ino;
            fs.write(f, 0, &vec![n as u8 + 1; 4 * BS], &c).unwrap();
            f
        })
        .collect();
    let devs: std::collections::BTreeSet<u16> = files
        .iter()
        .flat_map(|&f| fs.block_map(f).unwrap())
        .map(|(_, e, _)| e.dev)
        .collect();
    assert_eq!(devs.len(), 2, "one file on each device");
    most.store(0, Ordering::SeqCst);
    fs.fsync(files[0], false).unwrap();
    assert_eq!(
        most.load(Ordering::SeqCst),
        2,
        "both devices' syncs were in flight together"
    );
    // An fdatasync of data written in place syncs only the file's own device (once a
    // record without data is the newest: the commit above carried the files' data).
    fs.fsync(files[1], true).unwrap();
    fs.write(files[1], 0, &vec![9u8; BS], &Caller::root_on(1))
        .unwrap();
    most.store(0, Ordering::SeqCst);
    fs.fsync(files[1], true).unwrap();
    assert_eq!(most.load(Ordering::SeqCst), 1);
    fs.unmount().unwrap();
    let mut back = vec![0u8; BS];
    let fs = Fs::mount(mem, MountOptions::default()).unwrap();
    fs.read(files[1], 0, &mut back).unwrap();
    assert!(back.iter().all(|&b| b == 9));
}

/// A store over `mem` that, while the flag is set, images the volume at each device sync
/// as a power cut there could leave it: 64 random subsets of the unsynced sectors, plus one
/// that keeps every write to the journal and none of the others (a record carrying data
/// spans many sectors, so random cuts rarely keep it whole).
#[allow(clippy::type_complexity)]
fn cut_images(
    mem: &Arc<MemStore>,
) -> (
    Hooked,
    Arc<AtomicBool>,
    Arc<parking_lot::Mutex<Vec<MemStore>>>,
) {
    let (h, _) = Fs::load_meta(&**mem).unwrap();
    let journal = (h.journal_start * BLOCK_SIZE) as usize
        ..((h.journal_start + h.journal_blocks) * BLOCK_SIZE) as usize;
    let armed = Arc::new(AtomicBool::new(false));
    let images = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let (a, im, m) = (armed.clone(), images.clone(), mem.clone());
    let store = Hooked::new(mem.clone()).on_sync(move |_| {
        if a.load(Ordering::SeqCst) {
            let mut im = im.lock();
            let base = im.len() as u64;
            for seed in base..base + 64 {
                im.push(m.crash(CrashMode::Random { seed }));
            }
            let keep = m.crash(CrashMode::KeepAll);
            let lost = m.crash(CrashMode::DropUnsynced);
            for (dev, d) in m.devices().iter().enumerate() {
                let dev = dev as u16;
                let mut b = vec![0u8; d.bytes as usize];
                lost.read_at(dev, 0, &mut b).unwrap();
                if dev == 0 {
                    let mut j = vec![0u8; journal.len()];
                    keep.read_at(0, journal.start as u64, &mut j).unwrap();
                    b[journal.clone()].copy_from_slice(&j);
                }
                keep.write_at(dev, 0, &b).unwrap();
            }
            im.push(keep);
        }
    });
    (store, armed, images)
}

/// A power cut while an appending fsync's commit is being flushed, on either node's
/// device, with every subset of the unsynced sectors possible (64 random cuts per device
/// sync): the file is either as the fsync before left it or as this one makes it, size
/// and bytes, never a new size over stale blocks. Appends small enough go with their data
/// in the commit's record (one flush); the largest flush their data first. A record
/// carrying data spans many sectors, so random cuts rarely keep it whole: one more cut per
/// sync keeps every write to the journal and none of the others.
#[test]
fn a_cut_during_an_appending_commit_leaves_the_old_file_or_the_new() {
    for node in 0..2u32 {
        for len in [100usize, 5000, 40_000, 300_000] {
            let mem = Arc::new(MemStore::new(&[(0, 8 * MIB), (1, 8 * MIB)]));
            Fs::mkfs(&*mem, &opts()).unwrap();
            let (store, armed, images) = cut_images(&mem);
            let fs = Fs::mount(Arc::new(store), MountOptions::default()).unwrap();
            let c = Caller::root_on(node);
            let f = fs.create(ROOT, b"log", 0o644, &c).unwrap().ino;
            let old: Vec<u8> = (0..3001u32).map(|i| (i % 251) as u8).collect();
            fs.write(f, 0, &old, &c).unwrap();
            fs.fsync(f, true).unwrap();
            let more: Vec<u8> = (0..len as u32).map(|i| (i % 241) as u8 + 1).collect();
            fs.write(f, old.len() as u64, &more, &c).unwrap();
            armed.store(true, Ordering::SeqCst);
            fs.fsync(f, true).unwrap();
            armed.store(false, Ordering::SeqCst);
            let mut new = old.clone();
            new.extend_from_slice(&more);
            let images = std::mem::take(&mut *images.lock());
            assert!(!images.is_empty(), "no sync during the commit");
            let (mut olds, mut news) = (0, 0);
            for (k, img) in images.into_iter().enumerate() {
                let ctx = format!("node {node}, append of {len}, cut {k}");
                let img = Arc::new(img);
                let after = Fs::mount(img.clone(), MountOptions::default())
                    .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
                let size = after.getattr(f).unwrap().size as usize;
                let mut got = vec![0u8; size];
                after.read(f, 0, &mut got).unwrap();
                if size == new.len() {
                    assert!(got == new, "{ctx}: the new size over other bytes");
                    news += 1;
                } else {
                    assert_eq!(size, old.len(), "{ctx}: a size neither old nor new");
                    assert!(got == old, "{ctx}: the old size over other bytes");
                    olds += 1;
                }
                drop(after);
                let r = fsck::fsck(&*img, &fsck::FsckOptions { repair: false }).unwrap();
                assert!(r.errors.is_empty(), "{ctx}: fsck: {:?}", r.errors);
            }
            eprintln!(
                "node {node}, append of {len}: {olds} cuts kept the old file, {news} the new"
            );
        }
    }
}

/// A power cut during a commit that both grows a file and overwrites blocks in place
/// (here and in a second file), on either node's device: once the commit's new sizes
/// show, every overwrite the synced file made before it shows too, as on ext4 ("Data:
/// ordered mode"); after `sync`, every file's. Other overwritten sectors are old or new.
/// Small enough, the commit carries its data in the record; the largest flush first.
#[test]
fn a_cut_during_a_commit_with_appends_and_overwrites_keeps_them_in_order() {
    let pattern = |n: usize, k: u32| -> Vec<u8> {
        (0..n as u32).map(|i| ((i * 7 + k) % 253) as u8).collect()
    };
    for node in 0..2u32 {
        for len in [300usize, 40_000, 300_000] {
            for all in [false, true] {
                let mem = Arc::new(MemStore::new(&[(0, 8 * MIB), (1, 8 * MIB)]));
                Fs::mkfs(&*mem, &opts()).unwrap();
                let (store, armed, images) = cut_images(&mem);
                let fs = Fs::mount(Arc::new(store), MountOptions::default()).unwrap();
                let c = Caller::root_on(node);
                let a = fs.create(ROOT, b"a", 0o644, &c).unwrap().ino;
                let b = fs.create(ROOT, b"b", 0o644, &c).unwrap().ino;
                let old_a = pattern(3 * BS + 1000, 1);
                let old_b = pattern(2 * BS, 2);
                fs.write(a, 0, &old_a, &c).unwrap();
                fs.write(b, 0, &old_b, &c).unwrap();
                fs.fsync(a, false).unwrap();
                // in place in both files, then an append to the first
                let mut new_a = old_a.clone();
                let over_a = pattern(2 * BS, 3);
                new_a[100..100 + over_a.len()].copy_from_slice(&over_a);
                let mut new_b = old_b.clone();
                let over_b = pattern(BS + 10, 4);
                new_b[700..700 + over_b.len()].copy_from_slice(&over_b);
                fs.write(a, 100, &over_a, &c).unwrap();
                fs.write(b, 700, &over_b, &c).unwrap();
                let more = pattern(len, 5);
                fs.write(a, old_a.len() as u64, &more, &c).unwrap();
                new_a.extend_from_slice(&more);
                armed.store(true, Ordering::SeqCst);
                if all {
                    fs.sync().unwrap();
                } else {
                    fs.fsync(a, false).unwrap();
                }
                armed.store(false, Ordering::SeqCst);
                let images = std::mem::take(&mut *images.lock());
                assert!(!images.is_empty(), "no sync during the commit");
                let how = if all { "sync" } else { "fsync" };
                let (mut olds, mut news) = (0, 0);
                for (k, img) in images.into_iter().enumerate() {
                    let ctx = format!("node {node}, append of {len}, {how}, cut {k}");
                    let img = Arc::new(img);
                    let after = Fs::mount(img.clone(), MountOptions::default())
                        .unwrap_or_else(|e| panic!("{ctx}: mount: {e}"));
                    let read = |ino: u64| {
                        let mut got = vec![0u8; after.getattr(ino).unwrap().size as usize];
                        assert_eq!(after.read(ino, 0, &mut got).unwrap(), got.len());
                        got
                    };
                    let (got_a, got_b) = (read(a), read(b));
                    if got_a.len() == new_a.len() {
                        assert!(
                            got_a == new_a,
                            "{ctx}: a at the new commit over other bytes"
                        );
                        assert!(
                            !all || got_b == new_b,
                            "{ctx}: b lost an overwrite sync covers"
                        );
                        news += 1;
                    } else {
                        assert_eq!(
                            got_a.len(),
                            old_a.len(),
                            "{ctx}: a size neither old nor new"
                        );
                        olds += 1;
                    }
                    for (f, got, old, new) in
                        [("a", &got_a, &old_a, &new_a), ("b", &got_b, &old_b, &new_b)]
                    {
                        for (i, s) in got.chunks(512).enumerate() {
                            let r = i * 512..i * 512 + s.len();
                            assert!(
                                old.get(r.clone()) == Some(s) || new.get(r.clone()) == Some(s),
                                "{ctx}: {f}: sector {i} is neither old nor new"
                            );
                        }
                    }
                    drop(after);
                    let r = fsck::fsck(&*img, &fsck::FsckOptions { repair: false }).unwrap();
                    assert!(r.errors.is_empty(), "{ctx}: fsck: {:?}", r.errors);
                }
                eprintln!(
                    "node {node}, overwrites and an append of {len}, {how}: {olds} cuts before the commit, {news} after"
                );
            }
        }
    }
}
