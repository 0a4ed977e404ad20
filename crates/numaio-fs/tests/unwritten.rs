//! Unwritten (preallocated) extents: fallocate, zero range, SEEK_DATA/SEEK_HOLE, their
//! conversion on first write across power cuts, and the upgrade of format version 3 volumes.

use numaio_fs::format::{self, Label, CHECKPOINT_MAGIC, HEADER_BLOCKS, HEADER_MAGIC};
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::meta::shard::{InodeV3, ShardV3};
use numaio_fs::store::{BlockStore, CrashMode, MemStore};
use numaio_fs::*;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod hooked;
use hooked::Hooked;

const ROOT: u64 = 1;
const MIB: u64 = 1 << 20;
const BS: u64 = BLOCK_SIZE;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    }
}

fn vol() -> (Arc<MemStore>, Fs) {
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB), (1, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    (s, fs)
}

fn root() -> Caller {
    Caller::root_on(0)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size as usize);
    buf
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) | 1)
        .collect()
}

/// Fills every block of `ino` on the device with 0xEE, durably: what a preallocated block
/// may hold from an earlier file.
fn stale(s: &MemStore, fs: &Fs, ino: u64) {
    for (_, e, _) in fs.block_map(ino).unwrap() {
        s.write_at(e.dev, e.start * BS, &vec![0xEE; (e.len * BS) as usize])
            .unwrap();
        s.sync(e.dev).unwrap();
    }
}

fn clean(s: &MemStore) {
    let r = fsck(s, &FsckOptions { repair: false }).unwrap();
    assert_eq!(r.exit_code(), 0, "{:?}", r.errors);
}

fn errno(r: Result<u64, FsError>) -> i32 {
    r.err().map_or(0, |e| e.errno())
}

#[test]
fn fallocated_blocks_read_zeros_and_convert_on_first_write() {
    let (s, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    fs.fallocate(f, 0, 8 * BS, 0, &root()).unwrap();
    stale(&s, &fs, f);
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.blocks), (8 * BS, 8), "st_blocks counts them");
    assert!(read_all(&fs, f).iter().all(|&b| b == 0));
    // All unwritten: no data, a hole at 0.
    assert_eq!(errno(fs.seek(f, 0, SEEK_DATA)), libc::ENXIO);
    assert_eq!(fs.seek(f, 0, SEEK_HOLE).unwrap(), 0);
    // A partial first write zero-fills the rest of its block.
    let d = pattern(50, 3);
    fs.write(f, 2 * BS + 100, &d, &root()).unwrap();
    let all = read_all(&fs, f);
    assert_eq!(
        &all[(2 * BS + 100) as usize..(2 * BS + 150) as usize],
        &d[..]
    );
    let mut want = vec![0u8; (8 * BS) as usize];
    want[(2 * BS + 100) as usize..(2 * BS + 150) as usize].copy_from_slice(&d);
    assert!(all == want, "only the written bytes show");
    let (dev, pb) = {
        let (l, e, _) = fs.block_map(f).unwrap()[0];
        assert_eq!(l, 0);
        (e.dev, e.start + 2)
    };
    let mut raw = vec![0u8; BS as usize];
    s.read_at(dev, pb * BS, &mut raw).unwrap();
    assert_eq!(
        &raw[..100],
        &[0u8; 100][..],
        "the stale bytes were zeroed on the device"
    );
    assert_eq!(fs.seek(f, 0, SEEK_DATA).unwrap(), 2 * BS);
    assert_eq!(fs.seek(f, 2 * BS + 7, SEEK_DATA).unwrap(), 2 * BS + 7);
    assert_eq!(fs.seek(f, 2 * BS, SEEK_HOLE).unwrap(), 3 * BS);
    assert_eq!(errno(fs.seek(f, 3 * BS, SEEK_DATA)), libc::ENXIO);
    assert_eq!(fs.getattr(f).unwrap().blocks, 8);
    fs.sync().unwrap();
    // Not committed: the write into block 5 converts nothing after a power cut.
    fs.write(f, 5 * BS, &pattern(BS as usize, 9), &root())
        .unwrap();
    for mode in [CrashMode::DropUnsynced, CrashMode::Random { seed: 7 }] {
        let img = Arc::new(s.crash(mode));
        let re = Fs::mount(img.clone(), MountOptions::default()).unwrap();
        assert!(read_all(&re, f) == want, "{mode:?}: the committed state");
        assert_eq!(re.getattr(f).unwrap().blocks, 8);
        assert_eq!(re.seek(f, 0, SEEK_DATA).unwrap(), 2 * BS);
        drop(re);
        clean(&img);
    }
    // Once synced, the conversion and its data survive.
    fs.fsync(f, true).unwrap();
    want[(5 * BS) as usize..(6 * BS) as usize].copy_from_slice(&pattern(BS as usize, 9));
    let img = Arc::new(s.crash(CrashMode::DropUnsynced));
    let re = Fs::mount(img.clone(), MountOptions::default()).unwrap();
    assert!(read_all(&re, f) == want);
    assert_eq!(re.seek(f, 3 * BS, SEEK_DATA).unwrap(), 5 * BS);
    re.unmount().unwrap();
    clean(&img);
    // A checkpoint keeps the unwritten runs too.
    let re = Fs::mount(img.clone(), MountOptions::default()).unwrap();
    assert!(read_all(&re, f) == want);
    let m = re.meta_snapshot();
    assert_eq!(
        m.inodes[&f]
            .unwritten
            .iter()
            .map(|(&l, &n)| (l, n))
            .collect::<Vec<_>>(),
        [(0, 2), (3, 2), (6, 2)]
    );
}

#[test]
fn fallocate_writes_nothing_and_keep_size_stays_past_the_end() {
    let s = Arc::new(MemStore::new(&[(0, 16 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    // The bytes written through the store.
    let written = Arc::new(AtomicU64::new(0));
    let w = written.clone();
    let c = Hooked::new(s.clone()).on_write(move |_, _, data| {
        w.fetch_add(data.len() as u64, Ordering::Relaxed);
        Ok(())
    });
    let fs = Fs::mount(Arc::new(c), MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let free = fs.statfs().free_blocks;
    let before = written.load(Ordering::Relaxed);
    fs.fallocate(f, 0, 8 * MIB, 0, &root()).unwrap();
    fs.fallocate(f, 8 * MIB, 2 * MIB, FALLOC_KEEP_SIZE, &root())
        .unwrap();
    assert_eq!(written.load(Ordering::Relaxed), before, "no block written");
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.blocks), (8 * MIB, 10 * MIB / BS));
    assert_eq!(fs.statfs().free_blocks, free - 10 * MIB / BS);
    assert_eq!(fs.seek(f, 0, SEEK_HOLE).unwrap(), 0);
    assert_eq!(errno(fs.seek(f, 8 * MIB, SEEK_HOLE)), libc::ENXIO);
    // Extending the size over the preallocated blocks shows zeros.
    fs.setattr(
        f,
        &SetAttr {
            size: Some(9 * MIB),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let mut buf = vec![1u8; MIB as usize];
    assert_eq!(fs.read(f, 8 * MIB, &mut buf).unwrap(), MIB as usize);
    assert!(buf.iter().all(|&b| b == 0));
    // Truncate and punch free unwritten blocks; unlink frees the rest.
    fs.setattr(
        f,
        &SetAttr {
            size: Some(4 * MIB),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, 4 * MIB / BS);
    fs.fallocate(f, MIB, MIB, FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE, &root())
        .unwrap();
    assert_eq!(fs.getattr(f).unwrap().blocks, 3 * MIB / BS);
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free - 3 * MIB / BS);
    fs.unlink(ROOT, b"f", &root()).unwrap();
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free);
    fs.unmount().unwrap();
    clean(&s);
}

#[test]
fn zero_range_zeroes_and_unsupported_modes_are_eopnotsupp() {
    let (s, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let mut want = pattern(6 * BS as usize, 5);
    fs.write(f, 0, &want, &root()).unwrap();
    // From inside block 0 to inside block 4, keeping the size.
    let (off, len) = (100, 4 * BS + 100);
    fs.fallocate(f, off, len, FALLOC_ZERO_RANGE | FALLOC_KEEP_SIZE, &root())
        .unwrap();
    want[off as usize..(off + len) as usize].fill(0);
    assert!(read_all(&fs, f) == want);
    let a = fs.getattr(f).unwrap();
    assert_eq!((a.size, a.blocks), (6 * BS, 6), "the blocks stay allocated");
    assert_eq!(fs.seek(f, 0, SEEK_DATA).unwrap(), 0);
    assert_eq!(fs.seek(f, 0, SEEK_HOLE).unwrap(), BS);
    assert_eq!(fs.seek(f, BS, SEEK_DATA).unwrap(), 4 * BS);
    // Past the end without KEEP_SIZE: the file grows, zeros to its new end.
    fs.fallocate(f, 6 * BS - 10, 3 * BS, FALLOC_ZERO_RANGE, &root())
        .unwrap();
    want[(6 * BS - 10) as usize..].fill(0);
    want.resize((9 * BS - 10) as usize, 0);
    assert!(read_all(&fs, f) == want);
    assert_eq!(fs.getattr(f).unwrap().blocks, 9);
    // A write after the zeroing converts again; a power cut keeps the committed zeros.
    fs.sync().unwrap();
    let img = Arc::new(s.crash(CrashMode::DropUnsynced));
    let re = Fs::mount(img.clone(), MountOptions::default()).unwrap();
    assert!(read_all(&re, f) == want);
    drop(re);
    clean(&img);
    fs.write(f, 2 * BS + 1, b"x", &root()).unwrap();
    want[(2 * BS + 1) as usize] = b'x';
    assert!(read_all(&fs, f) == want);
    for mode in [
        FALLOC_COLLAPSE_RANGE,
        FALLOC_INSERT_RANGE,
        0x40,
        FALLOC_PUNCH_HOLE | FALLOC_ZERO_RANGE,
    ] {
        let e = fs.fallocate(f, 0, BS, mode, &root()).unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "mode {mode:#x}: {e}");
    }
    assert_eq!(
        fs.fallocate(f, 0, 0, 0, &root()).unwrap_err().errno(),
        libc::EINVAL
    );
}

#[test]
fn seek_data_and_hole_follow_the_extent_map() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    assert_eq!(errno(fs.seek(f, 0, SEEK_DATA)), libc::ENXIO, "empty file");
    assert_eq!(errno(fs.seek(f, 0, SEEK_HOLE)), libc::ENXIO);
    fs.write(f, 100 * BS, &pattern(BS as usize, 1), &root())
        .unwrap();
    fs.setattr(
        f,
        &SetAttr {
            size: Some(200 * BS),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    assert_eq!(fs.seek(f, 0, SEEK_DATA).unwrap(), 100 * BS);
    assert_eq!(fs.seek(f, 0, SEEK_HOLE).unwrap(), 0);
    assert_eq!(fs.seek(f, 100 * BS + 5, SEEK_HOLE).unwrap(), 101 * BS);
    assert_eq!(fs.seek(f, 100 * BS + 5, SEEK_DATA).unwrap(), 100 * BS + 5);
    assert_eq!(errno(fs.seek(f, 101 * BS, SEEK_DATA)), libc::ENXIO);
    assert_eq!(fs.seek(f, 150 * BS, SEEK_HOLE).unwrap(), 150 * BS);
    assert_eq!(errno(fs.seek(f, 200 * BS, SEEK_HOLE)), libc::ENXIO);
    // Data up to the end: the hole is the end of the file.
    let g = fs.create(ROOT, b"g", 0o644, &root()).unwrap().ino;
    fs.write(g, 0, &pattern(3 * BS as usize + 10, 2), &root())
        .unwrap();
    assert_eq!(fs.seek(g, 5, SEEK_HOLE).unwrap(), 3 * BS + 10);
    // Blocks preallocated past the end are neither.
    fs.fallocate(g, 3 * BS + 10, 8 * BS, FALLOC_KEEP_SIZE, &root())
        .unwrap();
    assert_eq!(fs.seek(g, 3 * BS, SEEK_HOLE).unwrap(), 3 * BS + 10);
    let d = fs.mkdir(ROOT, b"d", 0o755, &root()).unwrap().ino;
    assert!(fs.seek(d, 0, SEEK_DATA).is_err());
    assert_eq!(errno(fs.seek(f, 0, 0)), libc::EINVAL);
}

/// Rewrites a one-device volume's labels, header and checkpoints in format version 3, as
/// the numaio before unwritten extents wrote them.
fn make_v3(s: &MemStore) {
    let header = Fs::check_labels(s).unwrap();
    let (_, meta) = Fs::load_meta(s).unwrap();
    let bs = BS as usize;
    let mut b = vec![0u8; bs];
    s.read_at(0, 0, &mut b).unwrap();
    let label = Label::decode(&b, Path::new("mem0")).unwrap();
    let mut lb = format::frame_as(
        3,
        format::LABEL_MAGIC,
        &label.uuid,
        0,
        &format::encode(&label),
    );
    lb.resize(bs, 0);
    s.write_at(0, 0, &lb).unwrap();
    let mut hb = format::frame_as(3, HEADER_MAGIC, &header.uuid, 0, &format::encode(&header));
    hb.resize(HEADER_BLOCKS as usize * bs, 0);
    s.write_at(0, BS, &hb).unwrap();
    let shard = ShardV3 {
        node: 0,
        shards: 1,
        next_ino: meta.next_ino,
        last_home: meta.last_home,
        inodes: meta
            .inodes
            .iter()
            .map(|(&n, i)| {
                assert!(i.unwritten.is_empty());
                let i = InodeV3 {
                    attr: i.attr.clone(),
                    extents: i.extents.clone(),
                    xattrs: i.xattrs.clone(),
                    target: i.target.clone(),
                    dir: i.dir.as_deref().cloned(),
                };
                (n, i)
            })
            .collect(),
    };
    let rec = numaio_fs::journal::recover(s, &header).unwrap();
    let cp = format::frame_as(
        3,
        CHECKPOINT_MAGIC,
        &header.uuid,
        rec.journal.seq,
        &format::encode(&shard),
    );
    for slot in 0..2 {
        numaio_fs::journal::write_shard(s, &header, 0, slot, cp.clone()).unwrap();
    }
    s.sync(0).unwrap();
    assert_eq!(format::volume_version(s).unwrap(), 3);
}

fn label_version(s: &MemStore) -> u32 {
    let mut b = vec![0u8; BS as usize];
    s.read_at(0, 0, &mut b).unwrap();
    format::frame_version(format::LABEL_MAGIC, &b).unwrap()
}

#[test]
fn version_3_volumes_are_upgraded_and_others_refused_by_name() {
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB)]));
    Fs::mkfs(&*s, &opts()).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap().ino;
    let d = pattern(10_000, 4);
    fs.write(f, 0, &d, &root()).unwrap();
    fs.unmount().unwrap();
    make_v3(&s);
    // Read-only: read as it is, nothing written.
    let ro = Fs::mount(
        s.clone(),
        MountOptions {
            read_only: true,
            ..MountOptions::default()
        },
    )
    .unwrap();
    assert!(read_all(&ro, f) == d);
    assert_eq!(ro.mount_info().upgraded_from, None);
    drop(ro);
    assert_eq!(label_version(&s), 3);
    // fsck --repair upgrades, and says so.
    let copy = Arc::new(s.crash(CrashMode::KeepAll));
    let r = fsck(&*copy, &FsckOptions { repair: true }).unwrap();
    assert_eq!(r.exit_code(), 1, "{r:?}");
    assert!(
        r.repaired.iter().any(|x| x.contains("format version 3")),
        "{r:?}"
    );
    assert_eq!(label_version(&copy), format::FORMAT_VERSION);
    clean(&copy);
    // Read-write: upgraded in place before use, and durable at once.
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert_eq!(fs.mount_info().upgraded_from, Some(3));
    assert_eq!(label_version(&s), format::FORMAT_VERSION);
    let img = Arc::new(s.crash(CrashMode::DropUnsynced));
    drop(fs);
    assert_eq!(
        format::volume_version(&*img).unwrap(),
        format::FORMAT_VERSION
    );
    let re = Fs::mount(img.clone(), MountOptions::default()).unwrap();
    assert_eq!(re.mount_info().upgraded_from, None);
    assert!(read_all(&re, f) == d);
    re.fallocate(f, 0, 64 * BS, FALLOC_KEEP_SIZE, &root())
        .unwrap();
    re.unmount().unwrap();
    clean(&img);
    // Versions it cannot read: named with the device and what to do.
    for (v, hint) in [(2, "mkfs"), (9, "newer")] {
        let bad = img.crash(CrashMode::KeepAll);
        let mut b = vec![0u8; BS as usize];
        bad.read_at(0, 0, &mut b).unwrap();
        let l = Label::decode(&b, Path::new("mem0")).unwrap();
        let mut lb = format::frame_as(v, format::LABEL_MAGIC, &l.uuid, 0, &format::encode(&l));
        lb.resize(BS as usize, 0);
        bad.write_at(0, 0, &lb).unwrap();
        let e = Fs::mount(Arc::new(bad), MountOptions::default())
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("mem0") && e.contains(&format!("format version {v}")) && e.contains(hint),
            "{e}"
        );
    }
}

#[test]
fn space_freed_by_an_uncommitted_unlink_is_used_after_a_commit() {
    let (_, fs) = vol();
    let free = fs.statfs().free_blocks;
    let big = free * 7 / 10 * BS;
    let a = fs.create(ROOT, b"a", 0o644, &root()).unwrap().ino;
    fs.fallocate(a, 0, big, 0, &root()).unwrap();
    fs.unlink(ROOT, b"a", &root()).unwrap();
    // The freed blocks are allocatable only once the unlink is durable: fallocate commits.
    let commits = fs.commits();
    let b = fs.create(ROOT, b"b", 0o644, &root()).unwrap().ino;
    fs.fallocate(b, 0, big, 0, &root()).unwrap();
    assert_eq!(fs.commits(), commits + 1);
    fs.unlink(ROOT, b"b", &root()).unwrap();
    let c = fs.create(ROOT, b"c", 0o644, &root()).unwrap().ino;
    let d = pattern(big as usize, 8);
    fs.write(c, 0, &d, &root()).unwrap();
    assert!(read_all(&fs, c) == d);
    // Really full: ENOSPC, nothing to commit.
    let e = fs.fallocate(c, big, big, 0, &root()).unwrap_err();
    assert!(matches!(e, FsError::NoSpace), "{e}");
}
