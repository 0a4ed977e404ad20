//! Per-node placement of metadata: each inode's record lives in the checkpoint shard of its
//! creator's node (on that node's first device), spills to another node when that shard is
//! full, and a checkpoint cut short between shards recovers to the last commit.

use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::journal;
use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;

fn volume(checkpoint_blocks: u64) -> (Arc<MemStore>, Fs) {
    let s = Arc::new(MemStore::new(&[(0, 4 * MIB), (1, 4 * MIB)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 64,
        checkpoint_blocks,
    };
    Fs::mkfs(&*s, &o).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    (s, fs)
}

/// The bytes of both checkpoint slots on device `dev`.
fn slots(s: &MemStore, dev: u16) -> Vec<u8> {
    let h = Fs::check_labels(s).unwrap();
    let mut out = Vec::new();
    for slot in 0..2 {
        let mut b = vec![0u8; (h.checkpoint_blocks * BLOCK_SIZE) as usize];
        s.read_at(dev, h.slot_start(dev, slot) * BLOCK_SIZE, &mut b)
            .unwrap();
        out.extend_from_slice(&b);
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn an_inode_lives_on_its_creators_node_device() {
    let (s, fs) = volume(64);
    let on = Caller::root_on;
    let a = fs.create(ROOT, b"a", 0o644, &on(0)).unwrap();
    let b = fs.create(ROOT, b"b", 0o644, &on(1)).unwrap();
    let d = fs.mkdir(ROOT, b"d1", 0o755, &on(1)).unwrap();
    assert_eq!((a.meta_node, b.meta_node, d.meta_node), (0, 1, 1));
    // A node the volume lacks: the parent directory's node.
    let c = fs.create(d.ino, b"c", 0o644, &on(5)).unwrap();
    assert_eq!(c.meta_node, 1);
    fs.setxattr(a.ino, b"user.tag", b"MARK-OF-NODE-ZERO", 0, &on(0))
        .unwrap();
    fs.setxattr(b.ino, b"user.tag", b"MARK-OF-NODE-ONE", 0, &on(1))
        .unwrap();
    // Directory entries live with their directory: d1's on node 1.
    fs.create(d.ino, b"ENTRY-IN-D1", 0o644, &on(0)).unwrap();
    fs.unmount().unwrap();
    let (s0, s1) = (slots(&s, 0), slots(&s, 1));
    assert!(contains(&s0, b"MARK-OF-NODE-ZERO") && !contains(&s0, b"MARK-OF-NODE-ONE"));
    assert!(contains(&s1, b"MARK-OF-NODE-ONE") && !contains(&s1, b"MARK-OF-NODE-ZERO"));
    assert!(contains(&s1, b"ENTRY-IN-D1") && !contains(&s0, b"ENTRY-IN-D1"));
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.getattr(b.ino).unwrap().meta_node, 1);
    assert_eq!(
        fs.getxattr(b.ino, b"user.tag").unwrap(),
        b"MARK-OF-NODE-ONE"
    );
    let r = fsck(&*s, &FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

#[test]
fn a_full_shard_spills_to_the_other_node_and_a_full_volume_says_no_space() {
    // 4 blocks (16 KiB) a shard: room for about a hundred inodes.
    let (s, fs) = volume(4);
    let one = Caller::root_on(1);
    let mut nodes = Vec::new();
    let err = loop {
        let name = format!("f{}", nodes.len());
        match fs.create(ROOT, name.as_bytes(), 0o644, &one) {
            Ok(a) => nodes.push(a.meta_node),
            Err(e) => break e,
        }
        if nodes.len() % 10 == 0 {
            fs.sync().unwrap();
        }
    };
    assert!(matches!(err, FsError::NoSpace), "{err}");
    let spilled = nodes
        .iter()
        .position(|&n| n == 0)
        .expect("spilled to node 0");
    assert!(spilled > 20, "node 1 first: {spilled} files there");
    assert!(nodes[..spilled].iter().all(|&n| n == 1), "{nodes:?}");
    assert!(nodes[spilled..].iter().all(|&n| n == 0), "{nodes:?}");
    // Full metadata is ENOSPC; the volume stays consistent and mountable with all of it.
    fs.unmount().unwrap();
    let r = fsck(&*s, &FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.statfs().files, 1 + nodes.len() as u64);
}

#[test]
fn a_checkpoint_cut_short_between_shards_recovers_the_last_commit() {
    for keep in [0u16, 1] {
        let (s, fs) = volume(64);
        // A clean unmount puts a complete checkpoint in slot B; slot A keeps mkfs's.
        fs.create(ROOT, b"e", 0o644, &Caller::root_on(1)).unwrap();
        fs.unmount().unwrap();
        let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
        let cp = fs.mount_info().checkpoint_seq;
        assert!(cp > 0);
        let f = fs.create(ROOT, b"f", 0o644, &Caller::root_on(1)).unwrap();
        fs.write(f.ino, 0, b"committed", &Caller::root_on(1))
            .unwrap();
        fs.fsync(f.ino, false).unwrap();
        // A newer checkpoint of which only one node's shard reached its device, in slot A
        // (not the newest complete one): the other device's slot A still holds mkfs's shard.
        let h = Fs::check_labels(&*s).unwrap();
        let mut newer = fs.meta_snapshot();
        newer.inodes.remove(&f.ino);
        newer
            .inodes
            .get_mut(&ROOT)
            .unwrap()
            .dir
            .as_mut()
            .unwrap()
            .entries
            .clear();
        for (dev, framed) in journal::encode_shards(&h, &newer, 99).unwrap() {
            if dev == keep {
                journal::write_shard(&*s, &h, dev, 0, framed).unwrap();
                s.sync(dev).unwrap();
            }
        }
        let img = Arc::new(s.crash(CrashMode::DropUnsynced));
        let fs2 = Fs::mount(img.clone(), MountOptions::default()).unwrap();
        let a = fs2.lookup(ROOT, b"f", &Caller::root_on(0)).unwrap();
        let mut buf = [0u8; 9];
        fs2.read(a.ino, 0, &mut buf).unwrap();
        assert_eq!(&buf, b"committed", "only device {keep}'s shard written");
        assert_eq!(fs2.mount_info().checkpoint_seq, cp);
        assert!(fs2.lookup(ROOT, b"e", &Caller::root_on(0)).is_ok());
        let r = fsck(&*img, &FsckOptions { repair: false }).unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
    }
}
