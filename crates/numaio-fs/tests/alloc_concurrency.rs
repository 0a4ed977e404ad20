//! Block allocation does not serialise writers on one lock: each node's allocator has its
//! own, and a write takes its blocks with the volume lock released. Many threads writing,
//! fallocating, punching, truncating and removing files at once, on different nodes and
//! on the same node, never get overlapping extents; after a sync every block is free or in
//! exactly one file; fsck finds nothing; a remount counts the same free space.

use numaio_fs::store::MemStore;
use numaio_fs::*;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const NODES: u32 = 3;
const THREADS: u64 = 9;
const FILES: u64 = 3;
/// Files stay below this size, so the volume has room for all of them.
const SPAN: u64 = MIB;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 256,
        journal_blocks: 256,
        checkpoint_blocks: 64,
    }
}

/// Runs `f` on a thread of its own and fails when it takes more than `secs`.
fn watchdog<T: Send + 'static>(secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let t = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(()) => t.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match t.join() {
            Ok(r) => r,
            Err(e) => std::panic::resume_unwind(e),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("no answer within {secs} s: the operations deadlocked")
        }
    }
}

/// Every extent of every file in the root directory, with the file's name.
fn extents(fs: &Fs) -> Vec<(String, alloc::Extent)> {
    let mut out = Vec::new();
    for e in fs.readdir(ROOT, 0).unwrap() {
        if e.name == b"." || e.name == b".." {
            continue;
        }
        let name = String::from_utf8_lossy(&e.name).into_owned();
        for (_, ext, _) in fs.block_map(e.ino).unwrap() {
            out.push((name.clone(), ext));
        }
    }
    out
}

/// Checks that no two extents share a block; returns the blocks they hold.
fn used_blocks(all: &[(String, alloc::Extent)]) -> u64 {
    let mut v: Vec<_> = all
        .iter()
        .map(|(n, e)| (e.dev, e.start, e.len, n))
        .collect();
    v.sort();
    for w in v.windows(2) {
        assert!(
            !(w[0].0 == w[1].0 && w[0].1 + w[0].2 > w[1].1),
            "{} and {} share blocks: {:?} {:?}",
            w[0].3,
            w[1].3,
            w[0],
            w[1]
        );
    }
    v.iter().map(|x| x.2).sum()
}

/// One thread's work on its own files, with a model of their contents.
fn writer(fs: &Fs, t: u64) -> Vec<(String, Vec<u8>)> {
    let c = Caller::root_on((t % NODES as u64) as u32);
    let mut rng = fastrand::Rng::with_seed(t);
    let name = |k: u64| format!("t{t}f{k}");
    let mut model: Vec<Vec<u8>> = vec![Vec::new(); FILES as usize];
    let mut inos: Vec<u64> = (0..FILES)
        .map(|k| fs.create(ROOT, name(k).as_bytes(), 0o644, &c).unwrap().ino)
        .collect();
    for step in 0..250u64 {
        let k = rng.usize(0..FILES as usize);
        let (ino, m) = (inos[k], &mut model[k]);
        let off = rng.u64(0..SPAN - 64 * 1024);
        let len = rng.u64(1..=64 * 1024);
        match rng.u8(0..10) {
            0..=4 => {
                let fill = (t * 31 + step) as u8 | 1;
                let data = vec![fill; len as usize];
                match fs.write(ino, off, &data, &c) {
                    Ok(n) => {
                        assert_eq!(n, data.len());
                        let end = (off + len) as usize;
                        if m.len() < end {
                            m.resize(end, 0);
                        }
                        m[off as usize..end].copy_from_slice(&data);
                    }
                    // Nothing changed: the blocks it took were given back.
                    Err(FsError::NoSpace) => {}
                    Err(e) => panic!("write: {e}"),
                }
            }
            5 => {
                let keep = rng.bool();
                let mode = if keep { FALLOC_KEEP_SIZE } else { 0 };
                match fs.fallocate(ino, off, len, mode, &c) {
                    Ok(()) => {
                        if !keep && m.len() < (off + len) as usize {
                            m.resize((off + len) as usize, 0);
                        }
                    }
                    Err(FsError::NoSpace) => {}
                    Err(e) => panic!("fallocate: {e}"),
                }
            }
            6 => {
                fs.fallocate(ino, off, len, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, &c)
                    .unwrap();
                let end = ((off + len) as usize).min(m.len());
                if (off as usize) < end {
                    m[off as usize..end].fill(0);
                }
            }
            7 => {
                let size = rng.u64(0..=m.len() as u64);
                let s = SetAttr {
                    size: Some(size),
                    ..SetAttr::default()
                };
                fs.setattr(ino, &s, &c).unwrap();
                m.truncate(size as usize);
            }
            8 => {
                fs.unlink(ROOT, name(k as u64).as_bytes(), &c).unwrap();
                inos[k] = fs
                    .create(ROOT, name(k as u64).as_bytes(), 0o644, &c)
                    .unwrap()
                    .ino;
                m.clear();
            }
            _ => fs.fsync(ino, rng.bool()).unwrap(),
        }
    }
    (0..FILES)
        .map(|k| (name(k), model[k as usize].clone()))
        .collect()
}

#[test]
fn concurrent_allocations_on_all_nodes_never_overlap_and_all_is_counted() {
    let devices: Vec<(u32, u64)> = (0..NODES).map(|n| (n, 24 * MIB)).collect();
    let mem = Arc::new(MemStore::new(&devices));
    Fs::mkfs(&*mem, &opts()).unwrap();
    let fs = Arc::new(Fs::mount(mem.clone(), MountOptions::default()).unwrap());
    let models = {
        let fs = fs.clone();
        watchdog(300, move || {
            let stop = Arc::new(AtomicBool::new(false));
            // Meanwhile, statfs and whole-volume syncs (commits that free blocks).
            let watcher = {
                let (fs, stop) = (fs.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        let s = fs.statfs();
                        assert!(s.free_blocks <= s.total_blocks);
                        fs.sync().unwrap();
                        std::thread::sleep(Duration::from_millis(2));
                    }
                })
            };
            let writers: Vec<_> = (0..THREADS)
                .map(|t| {
                    let fs = fs.clone();
                    std::thread::spawn(move || writer(&fs, t))
                })
                .collect();
            let models: Vec<_> = writers
                .into_iter()
                .flat_map(|w| w.join().unwrap())
                .collect();
            stop.store(true, Ordering::Relaxed);
            watcher.join().unwrap();
            models
        })
    };
    fs.sync().unwrap();
    let s = fs.statfs();
    let used = used_blocks(&extents(&fs));
    assert_eq!(
        s.free_blocks + used,
        s.total_blocks,
        "free {} + used {used} != total {}",
        s.free_blocks,
        s.total_blocks
    );
    for u in &s.nodes {
        assert!(
            u.free_blocks < u.total_blocks,
            "node {} got no blocks",
            u.node
        );
    }
    for (name, want) in &models {
        let ino = fs
            .lookup(ROOT, name.as_bytes(), &Caller::root_on(0))
            .unwrap()
            .ino;
        assert_eq!(fs.getattr(ino).unwrap().size, want.len() as u64, "{name}");
        let mut got = vec![0u8; want.len()];
        assert_eq!(fs.read(ino, 0, &mut got).unwrap(), want.len());
        assert!(got == *want, "{name} differs from its model");
    }
    Arc::into_inner(fs).unwrap().unmount().unwrap();
    let r = fsck::fsck(&*mem, &fsck::FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "fsck: {:?}", r.errors);
    // The allocator rebuilt from the extents at mount agrees with the one that ran.
    let fs = Fs::mount(mem.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.statfs().free_blocks, s.free_blocks);
    assert_eq!(used_blocks(&extents(&fs)), used);
}
