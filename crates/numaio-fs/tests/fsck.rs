//! fsck over clean and deliberately damaged metadata.

use numaio_fs::alloc::Extent;
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::journal;
use numaio_fs::meta::{Entry, Kind, Meta};
use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;

const ROOT: u64 = 1;

fn volume() -> (Arc<MemStore>, u64, u64, u64) {
    let s = Arc::new(MemStore::new(&[(0, 2 << 20), (1, 2 << 20)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    };
    Fs::mkfs(&*s, &o).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    let d = fs.mkdir(ROOT, b"d", 0o755, &c).unwrap().ino;
    let f = fs.create(d, b"f", 0o644, &c).unwrap().ino;
    fs.write(f, 0, &[1; 10000], &c).unwrap();
    let g = fs.create(ROOT, b"g", 0o644, &c).unwrap().ino;
    fs.write(g, 0, &[2; 5000], &c).unwrap();
    fs.unmount().unwrap();
    (s, d, f, g)
}

/// Replaces the volume's metadata with `meta` (as a newer checkpoint).
fn write_meta(s: &dyn BlockStore, meta: &Meta) {
    let header = Fs::check_labels(s).unwrap();
    let mut rec = journal::recover(s, &header).unwrap();
    let seq = rec.journal.seq + 1;
    rec.journal.checkpoint(s, meta, seq).unwrap();
}

fn damage(s: &MemStore, f: impl FnOnce(&mut Meta)) {
    let (_, mut meta) = Fs::load_meta(s).unwrap();
    f(&mut meta);
    write_meta(s, &meta);
}

fn check(s: &MemStore) -> fsck::FsckReport {
    fsck(s, &FsckOptions { repair: false }).unwrap()
}

fn repair_and_recheck(s: &Arc<MemStore>) -> fsck::FsckReport {
    let r = fsck(&**s, &FsckOptions { repair: true }).unwrap();
    assert_eq!(r.exit_code(), 1, "{r:?}");
    let again = check(s);
    assert_eq!(again.exit_code(), 0, "{again:?}");
    Fs::mount(s.clone(), MountOptions::default()).unwrap();
    r
}

#[test]
fn a_fresh_and_a_used_volume_are_clean() {
    let (s, ..) = volume();
    let r = check(&s);
    assert_eq!(r.exit_code(), 0, "{r:?}");
    assert_eq!((r.files, r.directories, r.inodes), (2, 2, 4));
    assert_eq!(r.used_blocks, 3 + 2);
    assert_eq!(r.free_blocks, r.total_blocks - 5);
    let json = serde_json::to_string(&r).unwrap();
    assert!(json.contains("\"errors\":[]"), "{json}");
}

#[test]
fn wrong_link_counts_are_found_and_fixed() {
    let (s, d, f, _) = volume();
    damage(&s, |m| {
        m.inodes.get_mut(&f).unwrap().attr.nlink = 3;
        m.inodes.get_mut(&d).unwrap().attr.nlink = 7;
    });
    let r = check(&s);
    assert_eq!(r.exit_code(), 4);
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    let before = s.crash(CrashMode::KeepAll);
    // Checking alone writes nothing.
    for dev in 0..2u16 {
        let mut a = vec![0u8; 2 << 20];
        let mut b = a.clone();
        s.read_at(dev, 0, &mut a).unwrap();
        before.read_at(dev, 0, &mut b).unwrap();
        assert!(a == b);
    }
    repair_and_recheck(&s);
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.getattr(f).unwrap().nlink, 1);
    assert_eq!(fs.getattr(d).unwrap().nlink, 2);
}

#[test]
fn dangling_entries_and_lost_inodes_are_repaired() {
    let (s, d, f, g) = volume();
    damage(&s, |m| {
        // An entry to nothing, and `g` cut off from the tree.
        let root = m.inodes.get_mut(&ROOT).unwrap().dir.as_mut().unwrap();
        root.entries.remove(b"g".as_slice());
        root.entries.insert(
            b"ghost".to_vec(),
            Entry {
                ino: 999,
                kind: Kind::File,
                cookie: 99,
            },
        );
        m.after_decode();
    });
    let r = check(&s);
    assert_eq!(r.exit_code(), 4);
    repair_and_recheck(&s);
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    assert!(fs.lookup(ROOT, b"ghost", &c).is_err());
    let lf = fs.lookup(ROOT, b"lost+found", &c).unwrap();
    let back = fs.lookup(lf.ino, format!("#{g}").as_bytes(), &c).unwrap();
    assert_eq!(back.ino, g);
    let mut buf = vec![0u8; 5000];
    assert_eq!(fs.read(g, 0, &mut buf).unwrap(), 5000);
    assert!(buf.iter().all(|&b| b == 2));
    assert_eq!(fs.lookup(d, b"f", &c).unwrap().ino, f);
}

#[test]
fn doubly_owned_and_stray_extents_are_dropped_from_one_owner() {
    let (s, _, f, g) = volume();
    damage(&s, |m| {
        let e = *m.inodes[&f].extents.values().next().unwrap();
        let gi = m.inodes.get_mut(&g).unwrap();
        gi.extents.insert(10, Extent { len: 1, ..e });
        gi.extents.insert(
            20,
            Extent {
                dev: 1,
                start: 1 << 40,
                len: 1,
            },
        );
    });
    let r = check(&s);
    assert_eq!(r.errors.len(), 2, "{:?}", r.errors);
    // Mount refuses such a volume rather than hand out blocks twice.
    let e = Fs::mount(s.clone(), MountOptions::default()).err().unwrap();
    assert!(e.to_string().contains("fsck"), "{e}");
    repair_and_recheck(&s);
}

#[test]
fn orphans_are_counted_and_freed_by_repair() {
    let (s, ..) = volume();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    let t = fs.create(ROOT, b"tmp", 0o644, &c).unwrap().ino;
    fs.write(t, 0, &[3; 4096], &c).unwrap();
    fs.open(t).unwrap();
    fs.unlink(ROOT, b"tmp", &c).unwrap();
    fs.sync().unwrap();
    let img = Arc::new(s.crash(CrashMode::DropUnsynced));
    let r = check(&img);
    assert_eq!((r.exit_code(), r.orphans), (0, 1), "{r:?}");
    let r = repair_and_recheck(&img);
    assert!(r.repaired.iter().any(|x| x.contains("orphan")), "{r:?}");
    assert_eq!(check(&img).orphans, 0);
}

#[test]
fn unreadable_volumes_are_errors_left() {
    let s = MemStore::new(&[(0, 2 << 20)]);
    let r = check(&s);
    assert_eq!(r.exit_code(), 4);
    assert!(r.errors[0].contains("mem0"), "{:?}", r.errors);
}

#[test]
fn home_nodes_the_volume_lacks_are_found_and_fixed() {
    let (s, d, ..) = volume();
    damage(&s, |m| {
        m.last_home = Some(9);
        let a = &mut m.inodes.get_mut(&d).unwrap().attr;
        a.home = Some(5);
        a.meta_node = 6;
    });
    let r = check(&s);
    assert_eq!(r.exit_code(), 4);
    let want = [
        "round robin stands at node 9".to_string(),
        format!("inode {d}: metadata on node 6"),
        format!("inode {d}: home node 5"),
    ];
    assert_eq!(r.errors.len(), want.len(), "{:?}", r.errors);
    for (e, w) in r.errors.iter().zip(&want) {
        assert!(e.contains(w.as_str()), "{e:?} lacks {w:?}");
    }
    repair_and_recheck(&s);
    let (_, m) = Fs::load_meta(&*s).unwrap();
    assert_eq!(m.last_home, Some(0));
    assert_eq!(m.inodes[&d].attr.home, None);
    assert_eq!(m.inodes[&d].attr.meta_node, 0);
}

#[test]
fn unwritten_runs_over_holes_are_found_and_dropped() {
    let (s, _, f, _) = volume();
    damage(&s, |m| {
        let i = m.inodes.get_mut(&f).unwrap();
        // Block 1 is mapped: a sound unwritten block. Blocks 40..48 are a hole.
        i.unwritten.insert(1, 1);
        i.unwritten.insert(40, 8);
    });
    let r = check(&s);
    assert_eq!(r.errors.len(), 1, "{:?}", r.errors);
    assert!(
        r.errors[0].contains("blocks 40..48 marked unwritten but not mapped"),
        "{:?}",
        r.errors
    );
    repair_and_recheck(&s);
    let (_, m) = Fs::load_meta(&*s).unwrap();
    assert_eq!(
        m.inodes[&f].unwritten,
        std::collections::BTreeMap::from([(1, 1)])
    );
    // The unwritten block reads as zeros, the others keep their data.
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let mut buf = vec![0u8; 10000];
    assert_eq!(fs.read(f, 0, &mut buf).unwrap(), 10000);
    assert!(buf[..4096].iter().all(|&b| b == 1));
    assert!(buf[4096..8192].iter().all(|&b| b == 0));
    assert!(buf[8192..].iter().all(|&b| b == 1));
}
