//! The file system's operations through `Fs`, over in-memory volumes.

use numaio_fs::meta::Kind;
use numaio_fs::store::{BlockStore, CrashMode, DeviceInfo, MemStore};
use numaio_fs::*;
use std::sync::Arc;

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

fn vol_with(devs: &[(u32, u64)], o: &MkfsOptions) -> (Arc<MemStore>, Fs) {
    let s = Arc::new(MemStore::new(devs));
    Fs::mkfs(&*s, o).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    (s, fs)
}

fn vol() -> (Arc<MemStore>, Fs) {
    vol_with(&[(0, 2 * MIB), (1, 2 * MIB)], &opts())
}

fn root() -> Caller {
    Caller::root_on(0)
}

fn user(uid: u32) -> Caller {
    Caller {
        node: 0,
        uid,
        gid: uid,
        pid: 1,
        tid: 0,
    }
}

fn remount(s: &Arc<MemStore>, mode: CrashMode) -> (Arc<MemStore>, Fs) {
    let c = Arc::new(s.crash(mode));
    let fs = Fs::mount(c.clone(), MountOptions::default()).unwrap();
    (c, fs)
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size;
    let mut buf = vec![0u8; size as usize];
    assert_eq!(fs.read(ino, 0, &mut buf).unwrap(), size as usize);
    buf
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

#[test]
fn create_write_read_and_survive_a_remount() {
    let (s, fs) = vol();
    let f = fs.create(ROOT, b"a", 0o644, &root()).unwrap();
    assert_eq!(f.kind, Kind::File);
    let data = pattern(10_000, 1);
    assert_eq!(fs.write(f.ino, 0, &data, &root()).unwrap(), data.len());
    assert_eq!(read_all(&fs, f.ino), data);
    // Unaligned overwrite in the middle (read-modify-write).
    fs.write(f.ino, 4000, b"hello", &root()).unwrap();
    let mut want = data.clone();
    want[4000..4005].copy_from_slice(b"hello");
    assert_eq!(read_all(&fs, f.ino), want);
    fs.fsync(f.ino, false).unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    let a = fs2.lookup(ROOT, b"a", &root()).unwrap();
    assert_eq!(a.ino, f.ino);
    assert_eq!(read_all(&fs2, a.ino), want);
    // Nothing after the last fsync survives a power cut.
    fs.create(ROOT, b"b", 0o644, &root()).unwrap();
    let (_, fs3) = remount(&s, CrashMode::DropUnsynced);
    assert!(matches!(
        fs3.lookup(ROOT, b"b", &root()),
        Err(FsError::NotFound)
    ));
    // A clean unmount keeps everything.
    fs.unmount().unwrap();
    let fs4 = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    fs4.lookup(ROOT, b"b", &root()).unwrap();
}

#[test]
fn holes_read_as_zeros_and_take_no_blocks() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"sparse", 0o644, &root()).unwrap();
    fs.write(f.ino, 10 * BLOCK_SIZE + 100, b"xyz", &root())
        .unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!(a.size, 10 * BLOCK_SIZE + 103);
    assert_eq!(a.blocks, 1);
    let all = read_all(&fs, f.ino);
    assert!(all[..(10 * BLOCK_SIZE + 100) as usize]
        .iter()
        .all(|&b| b == 0));
    assert_eq!(&all[(10 * BLOCK_SIZE + 100) as usize..], b"xyz");
    // Reads past the end return nothing.
    let mut buf = [1u8; 10];
    assert_eq!(fs.read(f.ino, a.size, &mut buf).unwrap(), 0);
    assert_eq!(fs.read(f.ino, a.size - 2, &mut buf).unwrap(), 2);
}

#[test]
fn truncate_shrinks_frees_and_grows_with_zeros() {
    let (_, fs) = vol();
    let free0 = fs.statfs().free_blocks;
    let f = fs.create(ROOT, b"t", 0o644, &root()).unwrap();
    fs.write(f.ino, 0, &vec![0xaa; 3 * BLOCK_SIZE as usize], &root())
        .unwrap();
    assert_eq!(fs.statfs().free_blocks, free0 - 3);
    let sa = |size| SetAttr {
        size: Some(size),
        ..Default::default()
    };
    fs.setattr(f.ino, &sa(5000), &root()).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, 2);
    // Freed blocks come back after the commit.
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free0 - 2);
    fs.setattr(f.ino, &sa(12000), &root()).unwrap();
    let all = read_all(&fs, f.ino);
    assert_eq!(all.len(), 12000);
    assert!(all[..5000].iter().all(|&b| b == 0xaa));
    assert!(all[5000..].iter().all(|&b| b == 0), "tail must be zeros");
    fs.setattr(f.ino, &sa(0), &root()).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, 0);
    let d = fs.mkdir(ROOT, b"d", 0o755, &root()).unwrap();
    assert!(matches!(
        fs.setattr(d.ino, &sa(0), &root()),
        Err(FsError::IsDir)
    ));
}

#[test]
fn fallocate_allocates_keeps_size_and_punches_holes() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap();
    fs.fallocate(f.ino, 0, 3 * BLOCK_SIZE, 0, &root()).unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (3 * BLOCK_SIZE, 3));
    assert!(read_all(&fs, f.ino).iter().all(|&b| b == 0));
    fs.fallocate(
        f.ino,
        3 * BLOCK_SIZE,
        2 * BLOCK_SIZE,
        FALLOC_KEEP_SIZE,
        &root(),
    )
    .unwrap();
    let a = fs.getattr(f.ino).unwrap();
    assert_eq!((a.size, a.blocks), (3 * BLOCK_SIZE, 5));
    fs.write(f.ino, 0, &vec![7u8; 3 * BLOCK_SIZE as usize], &root())
        .unwrap();
    // Punch from the middle of block 0 to the middle of block 2.
    fs.fallocate(
        f.ino,
        100,
        2 * BLOCK_SIZE,
        FALLOC_PUNCH_HOLE | FALLOC_KEEP_SIZE,
        &root(),
    )
    .unwrap();
    let all = read_all(&fs, f.ino);
    assert!(all[..100].iter().all(|&b| b == 7));
    assert!(all[100..(2 * BLOCK_SIZE + 100) as usize]
        .iter()
        .all(|&b| b == 0));
    assert!(all[(2 * BLOCK_SIZE + 100) as usize..]
        .iter()
        .all(|&b| b == 7));
    assert_eq!(fs.getattr(f.ino).unwrap().blocks, 4, "block 1 punched out");
    assert!(fs.fallocate(f.ino, 0, 0, 0, &root()).is_err());
    assert!(fs.fallocate(f.ino, 0, 10, 0x40, &root()).is_err());
}

#[test]
fn rename_cases() {
    let (s, fs) = vol();
    let c = root();
    let a = fs.mkdir(ROOT, b"a", 0o755, &c).unwrap();
    let b = fs.mkdir(ROOT, b"b", 0o755, &c).unwrap();
    let f = fs.create(a.ino, b"f", 0o644, &c).unwrap();
    fs.write(f.ino, 0, b"one", &c).unwrap();
    // Within a directory, then across.
    fs.rename(a.ino, b"f", a.ino, b"g", 0, &c).unwrap();
    fs.rename(a.ino, b"g", b.ino, b"h", 0, &c).unwrap();
    assert!(fs.lookup(a.ino, b"g", &c).is_err());
    assert_eq!(fs.lookup(b.ino, b"h", &c).unwrap().ino, f.ino);
    // Over an existing file: the old target goes away.
    let t = fs.create(b.ino, b"t", 0o644, &c).unwrap();
    fs.write(t.ino, 0, b"old target", &c).unwrap();
    assert!(matches!(
        fs.rename(b.ino, b"h", b.ino, b"t", RENAME_NOREPLACE, &c),
        Err(FsError::Exists)
    ));
    fs.rename(b.ino, b"h", b.ino, b"t", 0, &c).unwrap();
    assert_eq!(fs.lookup(b.ino, b"t", &c).unwrap().ino, f.ino);
    assert!(matches!(fs.getattr(t.ino), Err(FsError::NotFound)));
    // Directories: into own subtree, over non-empty, over a file and back.
    let sub = fs.mkdir(a.ino, b"sub", 0o755, &c).unwrap();
    assert!(matches!(
        fs.rename(ROOT, b"a", sub.ino, b"x", 0, &c),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(fs.rename(ROOT, b"a", ROOT, b"a", 0, &c), Ok(())));
    assert!(matches!(
        fs.rename(ROOT, b"b", ROOT, b"a", 0, &c),
        Err(FsError::NotEmpty)
    ));
    assert!(matches!(
        fs.rename(a.ino, b"sub", b.ino, b"t", 0, &c),
        Err(FsError::NotDir)
    ));
    assert!(matches!(
        fs.rename(b.ino, b"t", a.ino, b"sub", 0, &c),
        Err(FsError::IsDir)
    ));
    // Move the dir across: link counts follow.
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 3);
    fs.rename(a.ino, b"sub", b.ino, b"sub2", 0, &c).unwrap();
    assert_eq!(fs.getattr(a.ino).unwrap().nlink, 2);
    assert_eq!(fs.getattr(b.ino).unwrap().nlink, 3);
    assert_eq!(fs.lookup(sub.ino, b"..", &c).unwrap().ino, b.ino);
    // A directory over an empty one replaces it.
    let e = fs.mkdir(ROOT, b"empty", 0o755, &c).unwrap();
    fs.rename(b.ino, b"sub2", ROOT, b"empty", 0, &c).unwrap();
    assert!(fs.getattr(e.ino).is_err());
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 5);
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(fs2.lookup(ROOT, b"empty", &c).unwrap().ino, sub.ino);
    assert_eq!(read_all(&fs2, f.ino), b"one");
    assert!(matches!(
        fs.rename(ROOT, b"nope", ROOT, b"x", 0, &c),
        Err(FsError::NotFound)
    ));
    assert!(fs.rename(ROOT, b"a", ROOT, b"z", 0x80, &c).is_err());
}

#[test]
fn hard_links_and_symlinks() {
    let (_, fs) = vol();
    let c = root();
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    fs.write(f.ino, 0, b"data", &c).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o755, &c).unwrap();
    assert_eq!(fs.link(f.ino, d.ino, b"g", &c).unwrap().nlink, 2);
    assert!(matches!(
        fs.link(d.ino, ROOT, b"dd", &c),
        Err(FsError::NotPermitted)
    ));
    assert!(matches!(
        fs.link(f.ino, d.ino, b"g", &c),
        Err(FsError::Exists)
    ));
    fs.unlink(ROOT, b"f", &c).unwrap();
    assert_eq!(fs.getattr(f.ino).unwrap().nlink, 1);
    assert_eq!(read_all(&fs, f.ino), b"data");
    fs.unlink(d.ino, b"g", &c).unwrap();
    assert!(fs.getattr(f.ino).is_err());
    let l = fs.symlink(ROOT, b"l", b"../some/where", &c).unwrap();
    assert_eq!(l.kind, Kind::Symlink);
    assert_eq!(l.size, 13);
    assert_eq!(fs.readlink(l.ino).unwrap(), b"../some/where");
    assert!(fs.readlink(d.ino).is_err());
    assert!(matches!(
        fs.symlink(ROOT, b"m", &vec![b'a'; 5000], &c),
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(fs.unlink(ROOT, b"d", &c), Err(FsError::IsDir)));
    assert!(matches!(fs.rmdir(ROOT, b"l", &c), Err(FsError::NotDir)));
    fs.create(d.ino, b"x", 0o644, &c).unwrap();
    assert!(matches!(fs.rmdir(ROOT, b"d", &c), Err(FsError::NotEmpty)));
    fs.unlink(d.ino, b"x", &c).unwrap();
    fs.rmdir(ROOT, b"d", &c).unwrap();
    assert_eq!(fs.getattr(ROOT).unwrap().nlink, 2);
    // A removed directory still open takes no new entries, by create or by link.
    let e = fs.mkdir(ROOT, b"e", 0o755, &c).unwrap();
    let h = fs.create(ROOT, b"h", 0o644, &c).unwrap();
    fs.open(e.ino).unwrap();
    fs.rmdir(ROOT, b"e", &c).unwrap();
    assert!(matches!(
        fs.create(e.ino, b"x", 0o644, &c),
        Err(FsError::NotFound)
    ));
    assert!(matches!(
        fs.link(h.ino, e.ino, b"x", &c),
        Err(FsError::NotFound)
    ));
    fs.release(e.ino).unwrap();
}

#[test]
fn names_are_bytes_up_to_255() {
    let (s, fs) = vol();
    let c = root();
    let long = vec![b'n'; 255];
    fs.create(ROOT, &long, 0o644, &c).unwrap();
    assert!(matches!(
        fs.create(ROOT, &[b'n'; 256], 0o644, &c),
        Err(FsError::NameTooLong)
    ));
    let bad_utf8 = b"caf\xe9\xff";
    fs.create(ROOT, bad_utf8, 0o644, &c).unwrap();
    assert!(fs.create(ROOT, b"a/b", 0o644, &c).is_err());
    assert!(fs.create(ROOT, b"", 0o644, &c).is_err());
    assert!(matches!(
        fs.create(ROOT, b"..", 0o644, &c),
        Err(FsError::Exists)
    ));
    assert!(matches!(
        fs.create(ROOT, bad_utf8, 0o644, &c),
        Err(FsError::Exists)
    ));
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    fs2.lookup(ROOT, bad_utf8, &c).unwrap();
    fs2.lookup(ROOT, &long, &c).unwrap();
    let names: Vec<Vec<u8>> = fs2
        .readdir(ROOT, 0)
        .unwrap()
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(
        names,
        vec![b".".to_vec(), b"..".to_vec(), long, bad_utf8.to_vec()]
    );
}

#[test]
fn xattrs() {
    let (s, fs) = vol();
    let c = root();
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    assert!(matches!(
        fs.getxattr(f.ino, b"user.a"),
        Err(FsError::NoAttr)
    ));
    assert!(matches!(
        fs.setxattr(f.ino, b"user.a", b"1", XATTR_REPLACE, &c),
        Err(FsError::NoAttr)
    ));
    fs.setxattr(f.ino, b"user.a", b"1", XATTR_CREATE, &c)
        .unwrap();
    assert!(matches!(
        fs.setxattr(f.ino, b"user.a", b"2", XATTR_CREATE, &c),
        Err(FsError::Exists)
    ));
    fs.setxattr(f.ino, b"user.a", b"2", XATTR_REPLACE, &c)
        .unwrap();
    fs.setxattr(f.ino, b"user.b", &[0, 1, 2], 0, &c).unwrap();
    assert_eq!(fs.getxattr(f.ino, b"user.a").unwrap(), b"2");
    assert_eq!(
        fs.listxattr(f.ino).unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    fs.removexattr(f.ino, b"user.a", &c).unwrap();
    assert!(matches!(
        fs.removexattr(f.ino, b"user.a", &c),
        Err(FsError::NoAttr)
    ));
    // Another user may not set xattrs on a file it cannot write.
    assert!(matches!(
        fs.setxattr(f.ino, b"user.c", b"x", 0, &user(1000)),
        Err(FsError::Permission)
    ));
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(fs2.getxattr(f.ino, b"user.b").unwrap(), vec![0, 1, 2]);
    assert_eq!(fs2.listxattr(f.ino).unwrap(), vec![b"user.b".to_vec()]);
    // The placement xattr is validated.
    assert_eq!(fs.getxattr(ROOT, PLACEMENT_XATTR).unwrap(), b"writer-local");
    assert!(fs
        .setxattr(ROOT, PLACEMENT_XATTR, b"fixed:7", 0, &c)
        .is_err());
    assert!(fs
        .setxattr(ROOT, PLACEMENT_XATTR, b"stripe:3:8K", 0, &c)
        .is_err());
    assert!(fs.setxattr(ROOT, PLACEMENT_XATTR, b"bogus", 0, &c).is_err());
}

#[test]
fn a_huge_directory_looks_up_and_lists_stably() {
    let o = MkfsOptions {
        checkpoint_blocks: 4096,
        journal_blocks: 256,
        ..opts()
    };
    let (s, fs) = vol_with(&[(0, 40 * MIB)], &o);
    let c = root();
    let d = fs.mkdir(ROOT, b"big", 0o755, &c).unwrap();
    let n = 100_000u32;
    for i in 0..n {
        fs.create(d.ino, format!("file-{i}").as_bytes(), 0o644, &c)
            .unwrap();
    }
    for i in (0..n).step_by(997) {
        fs.lookup(d.ino, format!("file-{i}").as_bytes(), &c)
            .unwrap();
    }
    fs.lookup(d.ino, format!("file-{}", n - 1).as_bytes(), &c)
        .unwrap();
    // List while inserting and deleting: every entry that stays is seen exactly once.
    let mut seen = std::collections::HashSet::new();
    let mut cookie = 0;
    let mut round = 0;
    loop {
        let batch = fs.readdir(d.ino, cookie).unwrap();
        if batch.is_empty() {
            break;
        }
        for e in &batch {
            assert!(seen.insert(e.name.clone()), "{:?} listed twice", e.name);
            cookie = e.cookie;
        }
        // Insert behind the listing and delete ahead of it while it runs.
        if round < 50 {
            fs.create(d.ino, format!("new-{round}").as_bytes(), 0o644, &c)
                .unwrap();
            fs.unlink(d.ino, format!("file-{}", n - 1 - round).as_bytes(), &c)
                .unwrap();
            round += 1;
        }
    }
    let gone = |i: u32| i >= n - 50;
    for i in 0..n {
        assert_eq!(
            seen.contains(format!("file-{i}").as_bytes()),
            !gone(i),
            "file-{i}"
        );
    }
    for r in 0..round {
        assert!(seen.contains(format!("new-{r}").as_bytes()), "new-{r}");
    }
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    fs2.lookup(d.ino, b"file-99000", &c).unwrap();
    assert_eq!(fs2.statfs().files, n as u64 + 2);
}

#[test]
fn permissions_and_ownership() {
    let (_, fs) = vol();
    let u = user(1000);
    assert!(matches!(
        fs.create(ROOT, b"x", 0o644, &u),
        Err(FsError::Permission)
    ));
    let d = fs.mkdir(ROOT, b"home", 0o755, &root()).unwrap();
    fs.setattr(
        d.ino,
        &SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let f = fs.create(d.ino, b"mine", 0o600, &u).unwrap();
    assert_eq!((f.uid, f.gid), (1000, 1000));
    assert!(matches!(
        fs.setattr(
            f.ino,
            &SetAttr {
                uid: Some(0),
                ..Default::default()
            },
            &u
        ),
        Err(FsError::NotPermitted)
    ));
    assert!(matches!(
        fs.setattr(
            f.ino,
            &SetAttr {
                mode: Some(0o777),
                ..Default::default()
            },
            &user(2000)
        ),
        Err(FsError::NotPermitted)
    ));
    let a = fs
        .setattr(
            f.ino,
            &SetAttr {
                mode: Some(0o640),
                ..Default::default()
            },
            &u,
        )
        .unwrap();
    assert_eq!(a.mode, 0o640);
    assert!(matches!(
        fs.access(f.ino, 4, &user(2000)),
        Err(FsError::Permission)
    ));
    fs.access(f.ino, 6, &u).unwrap();
    assert!(matches!(
        fs.unlink(d.ino, b"mine", &user(2000)),
        Err(FsError::Permission)
    ));
}

#[test]
fn timestamps_follow_changes() {
    let (_, fs) = vol();
    let c = root();
    let r0 = fs.getattr(ROOT).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2));
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    let r1 = fs.getattr(ROOT).unwrap();
    assert!(r1.mtime > r0.mtime && r1.ctime > r0.ctime);
    std::thread::sleep(std::time::Duration::from_millis(2));
    fs.write(f.ino, 0, b"x", &c).unwrap();
    let f1 = fs.getattr(f.ino).unwrap();
    assert!(f1.mtime > f.mtime);
    let t = fs
        .setattr(
            f.ino,
            &SetAttr {
                atime: Some(5),
                mtime: Some(7),
                ..Default::default()
            },
            &c,
        )
        .unwrap();
    assert_eq!((t.atime, t.mtime), (5, 7));
}

fn nodes_of(fs: &Fs, ino: u64) -> Vec<u32> {
    let mut n: Vec<u32> = fs
        .block_map(ino)
        .unwrap()
        .iter()
        .flat_map(|&(_, e, node)| std::iter::repeat_n(node, e.len as usize))
        .collect();
    n.dedup();
    n
}

#[test]
fn writer_local_places_each_file_on_its_writers_device() {
    let (_, fs) = vol();
    let on = Caller::root_on;
    let a = fs.create(ROOT, b"a", 0o644, &on(0)).unwrap();
    let b = fs.create(ROOT, b"b", 0o644, &on(1)).unwrap();
    for i in 0..8 {
        fs.write(a.ino, i * 8192, &[1; 8192], &on(0)).unwrap();
        fs.write(b.ino, i * 8192, &[2; 8192], &on(1)).unwrap();
    }
    assert_eq!(nodes_of(&fs, a.ino), vec![0]);
    assert_eq!(nodes_of(&fs, b.ino), vec![1]);
    let per: Vec<(u32, u64)> = fs
        .statfs()
        .nodes
        .iter()
        .map(|u| (u.node, u.total_blocks - u.free_blocks))
        .collect();
    assert_eq!(per, vec![(0, 16), (1, 16)]);
    assert!(fs
        .block_map(a.ino)
        .unwrap()
        .iter()
        .all(|(_, e, _)| e.dev == 0));
}

#[test]
fn directory_and_stripe_policies_through_the_xattr() {
    let (s, fs) = vol();
    let c = root();
    fs.setxattr(ROOT, PLACEMENT_XATTR, b"directory", 0, &c)
        .unwrap();
    let d1 = fs.mkdir(ROOT, b"d1", 0o755, &c).unwrap();
    let d2 = fs.mkdir(ROOT, b"d2", 0o755, &c).unwrap();
    assert_ne!(d1.home, d2.home);
    let deep = fs.mkdir(d2.ino, b"deep", 0o755, &c).unwrap();
    assert_eq!(deep.home, d2.home);
    for (dir, home) in [(d1.ino, d1.home), (deep.ino, d2.home)] {
        for node in [0, 1] {
            let f = fs
                .create(dir, format!("f{node}").as_bytes(), 0o644, &c)
                .unwrap();
            fs.write(f.ino, 0, &[3; 20000], &Caller::root_on(node))
                .unwrap();
            assert_eq!(nodes_of(&fs, f.ino), vec![home.unwrap()]);
        }
    }
    let st = fs.mkdir(ROOT, b"striped", 0o755, &c).unwrap();
    fs.setxattr(st.ino, PLACEMENT_XATTR, b"stripe:2:8K", 0, &c)
        .unwrap();
    assert_eq!(
        fs.getxattr(st.ino, PLACEMENT_XATTR).unwrap(),
        b"stripe:2:8192"
    );
    let f = fs.create(st.ino, b"s", 0o644, &c).unwrap();
    fs.write(f.ino, 0, &[4; 8 * 4096], &c).unwrap();
    let n = nodes_of(&fs, f.ino);
    assert_eq!(n.len(), 4, "2-block chunks alternate over the nodes: {n:?}");
    // Policies persist.
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(
        fs2.getxattr(st.ino, PLACEMENT_XATTR).unwrap(),
        b"stripe:2:8192"
    );
    assert!(fs2
        .listxattr(st.ino)
        .unwrap()
        .contains(&PLACEMENT_XATTR.to_vec()));
}

#[test]
fn directory_homes_keep_their_round_robin_across_unmounts_and_power_cuts() {
    let o = MkfsOptions {
        policy: PlacementPolicy::Directory,
        ..opts()
    };
    let s = Arc::new(MemStore::new(&[(0, 2 * MIB), (1, 2 * MIB), (2, 2 * MIB)]));
    Fs::mkfs(&*s, &o).unwrap();
    let c = root();
    let mount = |s: &Arc<MemStore>| Fs::mount(s.clone(), MountOptions::default()).unwrap();
    // One directory per mount, as `numaio fs mkdir` does.
    let mut homes = Vec::new();
    for name in [&b"a"[..], b"b", b"c", b"d"] {
        let fs = mount(&s);
        homes.push(fs.mkdir(ROOT, name, 0o755, &c).unwrap().home.unwrap());
        fs.unmount().unwrap();
    }
    assert_eq!(homes, [0, 1, 2, 0], "one directory per mount");
    // A power cut after an fsync: the recovered volume goes on after the last home given.
    let fs = mount(&s);
    let e = fs.mkdir(ROOT, b"e", 0o755, &c).unwrap();
    assert_eq!(e.home, Some(1));
    fs.fsync(e.ino, false).unwrap();
    let (s2, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(fs2.lookup(ROOT, b"e", &c).unwrap().home, Some(1));
    assert_eq!(fs2.mkdir(ROOT, b"f", 0o755, &c).unwrap().home, Some(2));
    // A directory made after the last commit is lost with its turn: its node comes again.
    drop(fs);
    let (_, fs3) = remount(&s2, CrashMode::DropUnsynced);
    assert!(fs3.lookup(ROOT, b"f", &c).is_err());
    assert_eq!(fs3.mkdir(ROOT, b"g", 0o755, &c).unwrap().home, Some(2));
    // Subdirectories take their top-level directory's home and do not turn the round robin.
    let sub = fs3.mkdir(e.ino, b"sub", 0o755, &c).unwrap();
    assert_eq!(sub.home, Some(1));
    assert_eq!(fs3.mkdir(ROOT, b"h", 0o755, &c).unwrap().home, Some(0));
    let r = fsck::fsck(&*s2, &fsck::FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
}

#[test]
fn a_full_node_spills_to_the_other_and_only_a_full_volume_fails() {
    let (_, fs) = vol();
    let st = fs.statfs();
    let node1 = st.nodes.iter().find(|u| u.node == 1).unwrap().free_blocks;
    let f = fs.create(ROOT, b"n1", 0o644, &Caller::root_on(1)).unwrap();
    let chunk = vec![9u8; 16 * 4096];
    let mut off = 0;
    // Fill node 1 and continue.
    while off < (node1 + 32) * 4096 {
        fs.write(f.ino, off, &chunk, &Caller::root_on(1)).unwrap();
        off += chunk.len() as u64;
    }
    let n = nodes_of(&fs, f.ino);
    assert_eq!(n, vec![1, 0], "node 1 first, then node 0");
    let mut err = None;
    for _ in 0..1000 {
        match fs.write(f.ino, off, &chunk, &Caller::root_on(1)) {
            Ok(_) => off += chunk.len() as u64,
            Err(e) => {
                err = Some(e);
                break;
            }
        }
    }
    assert!(matches!(err, Some(FsError::NoSpace)), "{err:?}");
    assert!(fs.statfs().free_blocks < 16);
    // The file reads back whole.
    let all = read_all(&fs, f.ino);
    assert!(all.iter().all(|&b| b == 9));
}

#[test]
fn unlinked_open_files_keep_blocks_until_release_or_mount() {
    let (s, fs) = vol();
    let c = root();
    let free0 = fs.statfs().free_blocks;
    let f = fs.create(ROOT, b"tmp", 0o644, &c).unwrap();
    fs.write(f.ino, 0, &[5; 3 * 4096], &c).unwrap();
    fs.open(f.ino).unwrap();
    fs.unlink(ROOT, b"tmp", &c).unwrap();
    assert_eq!(read_all(&fs, f.ino).len(), 3 * 4096);
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free0 - 3);
    // A crash now: mount frees the orphan.
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(fs2.mount_info().orphans_freed, 1);
    assert_eq!(fs2.statfs().free_blocks, free0);
    assert!(fs2.getattr(f.ino).is_err());
    fs.release(f.ino).unwrap();
    assert!(fs.getattr(f.ino).is_err());
    fs.sync().unwrap();
    assert_eq!(fs.statfs().free_blocks, free0);
    assert!(fs.release(f.ino).is_err());
}

/// Devices of several stores, in any order: a swapped or foreign device.
struct Mix {
    parts: Vec<(Arc<MemStore>, u16)>,
    infos: Vec<DeviceInfo>,
}

impl Mix {
    fn new(parts: Vec<(Arc<MemStore>, u16)>) -> Mix {
        let infos = parts
            .iter()
            .map(|(s, d)| s.devices()[*d as usize].clone())
            .collect();
        Mix { parts, infos }
    }
}

impl BlockStore for Mix {
    fn devices(&self) -> &[DeviceInfo] {
        &self.infos
    }
    fn read_at(&self, dev: u16, offset: u64, buf: &mut [u8]) -> Result<(), FsError> {
        let (s, d) = &self.parts[dev as usize];
        s.read_at(*d, offset, buf)
    }
    fn write_at(&self, dev: u16, offset: u64, data: &[u8]) -> Result<(), FsError> {
        let (s, d) = &self.parts[dev as usize];
        s.write_at(*d, offset, data)
    }
    fn sync(&self, dev: u16) -> Result<(), FsError> {
        let (s, d) = &self.parts[dev as usize];
        s.sync(*d)
    }
}

#[test]
fn mount_refuses_missing_swapped_and_foreign_devices() {
    let (a, fs) = vol();
    fs.unmount().unwrap();
    let (b, fs) = vol();
    fs.unmount().unwrap();
    let msg = |parts| match Fs::mount(Arc::new(Mix::new(parts)), MountOptions::default()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("mounted"),
    };
    let m = msg(vec![(a.clone(), 0)]);
    assert!(m.contains("has 2 devices"), "{m}");
    let m = msg(vec![(a.clone(), 1), (a.clone(), 0)]);
    assert!(m.contains("mem1 is device 1") && m.contains("order"), "{m}");
    let m = msg(vec![(a.clone(), 0), (b.clone(), 1)]);
    assert!(m.contains("another numaio-fs volume"), "{m}");
    let blank = Arc::new(MemStore::new(&[(0, 2 * MIB), (1, 2 * MIB)]));
    let m = msg(vec![(a.clone(), 0), (blank, 1)]);
    assert!(
        m.contains("mem1") && m.contains("not a device of the volume"),
        "{m}"
    );
    Fs::mount(
        Arc::new(Mix::new(vec![(a, 0), (a_dev1(&b), 1)])),
        MountOptions::default(),
    )
    .err()
    .unwrap();
}

fn a_dev1(s: &Arc<MemStore>) -> Arc<MemStore> {
    s.clone()
}

#[test]
fn mkfs_refuses_bad_devices() {
    let s = MemStore::new(&[(0, 2 * MIB), (1, 64 * 1024)]);
    let e = Fs::mkfs(&s, &opts()).unwrap_err().to_string();
    assert!(e.contains("mem1") && e.contains("too small"), "{e}");
    let s = MemStore::new(&[(0, 400 * 1024)]);
    let e = Fs::mkfs(&s, &opts()).unwrap_err().to_string();
    assert!(
        e.contains("mem0") && e.contains("device 0 also holds"),
        "{e}"
    );
    let s = MemStore::new(&[(0, 2 * MIB)]);
    let o = MkfsOptions {
        policy: PlacementPolicy::Fixed(3),
        ..opts()
    };
    assert!(Fs::mkfs(&s, &o).is_err());
    // A blank device is not a volume.
    let e = Fs::mount(Arc::new(s), MountOptions::default())
        .err()
        .unwrap();
    assert!(matches!(e, FsError::Corrupt { .. }), "{e}");
}

#[test]
fn read_only_mounts_write_nothing() {
    let (s, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap();
    fs.write(f.ino, 0, b"abc", &root()).unwrap();
    fs.sync().unwrap();
    let c = Arc::new(s.crash(CrashMode::DropUnsynced));
    let before = c.crash(CrashMode::KeepAll);
    let ro = Fs::mount(
        c.clone(),
        MountOptions {
            read_only: true,
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(read_all(&ro, f.ino), b"abc");
    assert!(matches!(
        ro.create(ROOT, b"g", 0o644, &root()),
        Err(FsError::ReadOnly)
    ));
    ro.unmount().unwrap();
    for dev in 0..2u16 {
        let mut x = vec![0u8; 2 * MIB as usize];
        let mut y = x.clone();
        c.read_at(dev, 0, &mut x).unwrap();
        before.read_at(dev, 0, &mut y).unwrap();
        assert!(x == y, "device {dev} changed under a read-only mount");
    }
}

#[test]
fn metadata_full_is_no_space_and_the_volume_stays_mountable() {
    let o = MkfsOptions {
        checkpoint_blocks: 4,
        journal_blocks: 4,
        ..opts()
    };
    let (s, fs) = vol_with(&[(0, 2 * MIB)], &o);
    let c = root();
    let mut made = 0;
    let err = loop {
        match fs.create(
            ROOT,
            format!("some-longer-file-name-{made}").as_bytes(),
            0o644,
            &c,
        ) {
            Ok(_) => made += 1,
            Err(e) => break e,
        }
        if made % 10 == 0 {
            fs.sync().unwrap();
        }
    };
    assert!(matches!(err, FsError::NoSpace), "{err}");
    assert!(made > 20, "{made}");
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(fs2.statfs().files, made + 1);
    fs2.unlink(ROOT, b"some-longer-file-name-0", &c).unwrap();
    fs2.create(ROOT, b"again", 0o644, &c).unwrap();
}

#[test]
fn many_commits_rotate_checkpoints_and_recover() {
    let (s, fs) = vol();
    let c = root();
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    for i in 0..300u64 {
        fs.write(f.ino, i * 100, &pattern(100, i as u8), &c)
            .unwrap();
        let mut v = i.to_string().into_bytes();
        v.resize(300, b' ');
        fs.setxattr(f.ino, b"user.i", &v, 0, &c).unwrap();
        fs.fsync(f.ino, true).unwrap();
    }
    assert_eq!(fs.commits(), 300);
    let want = read_all(&fs, f.ino);
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    assert_eq!(read_all(&fs2, f.ino), want);
    assert!(fs2.getxattr(f.ino, b"user.i").unwrap().starts_with(b"299 "));
    assert!(fs2.mount_info().checkpoint_seq > 0);
}

#[test]
fn threads_share_one_volume() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Fs>();
    let (s, fs) = vol();
    let fs = Arc::new(fs);
    let handles: Vec<_> = (0..4u32)
        .map(|t| {
            let fs = fs.clone();
            std::thread::spawn(move || {
                let c = Caller::root_on(t % 2);
                let d = fs
                    .mkdir(ROOT, format!("t{t}").as_bytes(), 0o755, &c)
                    .unwrap();
                for i in 0..20u64 {
                    let f = fs
                        .create(d.ino, format!("f{i}").as_bytes(), 0o644, &c)
                        .unwrap();
                    fs.write(f.ino, 0, &pattern(6000, (t as u8) ^ (i as u8)), &c)
                        .unwrap();
                    if i % 5 == 0 {
                        fs.fsync(f.ino, false).unwrap();
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
    fs.sync().unwrap();
    let (_, fs2) = remount(&s, CrashMode::DropUnsynced);
    for t in 0..4u32 {
        let d = fs2
            .lookup(ROOT, format!("t{t}").as_bytes(), &root())
            .unwrap();
        for i in 0..20u64 {
            let f = fs2
                .lookup(d.ino, format!("f{i}").as_bytes(), &root())
                .unwrap();
            assert_eq!(read_all(&fs2, f.ino), pattern(6000, (t as u8) ^ (i as u8)));
            assert!(nodes_of(&fs2, f.ino) == vec![t % 2]);
        }
    }
}

#[test]
fn range_nodes_counts_bytes_per_node_of_the_data() {
    let (_s, fs) = vol();
    let on0 = Caller::root_on(0);
    let on1 = Caller::root_on(1);
    let a = fs.create(ROOT, b"split", 0o644, &on0).unwrap();
    // 3 blocks from node 0, then a hole of 2 blocks, then 2 blocks from node 1.
    fs.write(a.ino, 0, &pattern(3 * 4096, 1), &on0).unwrap();
    fs.write(a.ino, 5 * 4096, &pattern(2 * 4096, 2), &on1)
        .unwrap();
    let map = fs.block_map(a.ino).unwrap();
    let node_of = |lb: u64| {
        map.iter()
            .find(|(l, e, _)| *l <= lb && lb < l + e.len)
            .unwrap()
            .2
    };
    assert_eq!(node_of(0), 0);
    let expect = |parts: &[(u32, u64)]| {
        let mut v: Vec<(u32, u64)> = Vec::new();
        for &(n, b) in parts {
            match v.iter_mut().find(|(m, _)| *m == n) {
                Some(x) => x.1 += b,
                None => v.push((n, b)),
            }
        }
        v.sort_unstable();
        v
    };
    let mut all = fs.range_nodes(a.ino, 0, u64::MAX);
    all.sort_unstable();
    assert_eq!(all, expect(&[(0, 3 * 4096), (node_of(5), 2 * 4096)]));
    // A range that starts inside the first extent and ends inside the last one.
    let mut mid = fs.range_nodes(a.ino, 4096 + 100, 5 * 4096);
    mid.sort_unstable();
    assert_eq!(
        mid,
        expect(&[(0, 2 * 4096 - 100), (node_of(5), 4096 + 100)])
    );
    // Only the hole, past the end, an unknown inode, an empty range: nothing.
    assert!(fs.range_nodes(a.ino, 3 * 4096, 2 * 4096).is_empty());
    assert!(fs.range_nodes(a.ino, 7 * 4096, 4096).is_empty());
    assert!(fs.range_nodes(9999, 0, 4096).is_empty());
    assert!(fs.range_nodes(a.ino, 0, 0).is_empty());
    // The in-memory store has no cache.
    assert!(fs.cache_bytes().is_empty());
}

#[test]
fn special_files_keep_their_kind_and_device_number() {
    let (s, fs) = vol();
    let d = fs.mkdir(ROOT, b"d", 0o777, &root()).unwrap();
    let kinds = [
        (&b"fifo"[..], Kind::Fifo),
        (b"sock", Kind::Socket),
        (b"chr", Kind::CharDev(0x0103)),
        (b"blk", Kind::BlockDev(0x0801)),
    ];
    for (name, k) in kinds {
        let a = fs.mknod(d.ino, name, k, 0o640, &user(7)).unwrap();
        assert_eq!((a.kind, a.mode & 0o7777, a.uid, a.size), (k, 0o640, 7, 0));
        assert!(matches!(
            fs.write(a.ino, 0, b"x", &root()),
            Err(FsError::Invalid(_))
        ));
    }
    assert!(matches!(
        fs.mknod(d.ino, b"dir", Kind::Dir, 0o755, &root()),
        Err(FsError::Invalid(_))
    ));
    assert!(matches!(
        fs.mknod(d.ino, b"fifo", Kind::Fifo, 0o600, &root()),
        Err(FsError::Exists)
    ));
    // Links, renames and unlinks treat them like any other inode.
    let chr = fs.lookup(d.ino, b"chr", &root()).unwrap();
    fs.link(chr.ino, ROOT, b"chr2", &root()).unwrap();
    fs.rename(d.ino, b"sock", ROOT, b"sock2", 0, &root())
        .unwrap();
    fs.unlink(d.ino, b"blk", &root()).unwrap();
    let names: Vec<(Vec<u8>, Kind)> = fs
        .readdir(d.ino, 0)
        .unwrap()
        .into_iter()
        .filter(|e| e.name != b"." && e.name != b"..")
        .map(|e| (e.name, e.kind))
        .collect();
    assert!(names.contains(&(b"fifo".to_vec(), Kind::Fifo)), "{names:?}");
    fs.sync().unwrap();
    // The journal replays them, and a checkpoint keeps them.
    let (c, fs2) = remount(&s, CrashMode::DropUnsynced);
    let a = fs2.lookup(ROOT, b"chr2", &root()).unwrap();
    assert_eq!((a.kind, a.nlink), (Kind::CharDev(0x0103), 2));
    assert_eq!(
        fs2.lookup(ROOT, b"sock2", &root()).unwrap().kind,
        Kind::Socket
    );
    assert_eq!(
        fs2.lookup(d.ino, b"fifo", &root()).unwrap().kind,
        Kind::Fifo
    );
    fs2.unmount().unwrap();
    let r = numaio_fs::fsck::fsck(&*c, &numaio_fs::fsck::FsckOptions { repair: false }).unwrap();
    assert!(r.errors.is_empty(), "{:?}", r.errors);
    assert_eq!(r.special, 3);
    let fs3 = Fs::mount(c, MountOptions::default()).unwrap();
    assert_eq!(
        fs3.lookup(d.ino, b"fifo", &root()).unwrap().kind,
        Kind::Fifo
    );
}

#[test]
fn truncate_through_a_writable_descriptor_needs_no_write_permission() {
    let (_s, fs) = vol();
    let u = user(1000);
    let d = fs.mkdir(ROOT, b"d", 0o777, &root()).unwrap();
    // Created with mode 0: only the creating descriptor may still write.
    let f = fs.create(d.ino, b"f", 0, &u).unwrap();
    fs.write(f.ino, 0, b"12345", &u).unwrap();
    let by_path = SetAttr {
        size: Some(2),
        ..Default::default()
    };
    assert!(matches!(
        fs.setattr(f.ino, &by_path, &u),
        Err(FsError::Permission)
    ));
    let by_fd = SetAttr {
        through_writable_fd: true,
        ..by_path
    };
    assert_eq!(fs.setattr(f.ino, &by_fd, &u).unwrap().size, 2);
}

#[test]
fn times_set_to_now_need_write_permission_chosen_times_need_ownership() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"shared", 0o666, &root()).unwrap();
    let ro = fs.create(ROOT, b"readonly", 0o644, &root()).unwrap();
    let now = |atime: bool, mtime: bool| SetAttr {
        atime: atime.then_some(1),
        mtime: mtime.then_some(2),
        atime_now: atime,
        mtime_now: mtime,
        ..Default::default()
    };
    let u = user(1000);
    // Both times to now: write permission is enough.
    fs.setattr(f.ino, &now(true, true), &u).unwrap();
    // Without it, or for one time only, or for a chosen time, ownership is needed.
    assert!(matches!(
        fs.setattr(ro.ino, &now(true, true), &u),
        Err(FsError::Permission)
    ));
    for s in [now(true, false), now(false, true)] {
        assert!(matches!(
            fs.setattr(f.ino, &s, &u),
            Err(FsError::NotPermitted)
        ));
    }
    let chosen = SetAttr {
        atime: Some(5),
        mtime: Some(7),
        ..Default::default()
    };
    assert!(matches!(
        fs.setattr(f.ino, &chosen, &u),
        Err(FsError::NotPermitted)
    ));
    let mixed = SetAttr {
        atime_now: true,
        ..chosen.clone()
    };
    assert!(matches!(
        fs.setattr(f.ino, &mixed, &u),
        Err(FsError::NotPermitted)
    ));
    // A truncate's mtime comes with the size its write permission covers.
    let trunc = SetAttr {
        size: Some(0),
        ..now(false, true)
    };
    fs.setattr(f.ino, &trunc, &u).unwrap();
    // The owner and root may set any time.
    let mine = fs
        .setattr(
            f.ino,
            &SetAttr {
                uid: Some(1000),
                ..Default::default()
            },
            &root(),
        )
        .unwrap();
    assert_eq!(mine.uid, 1000);
    let t = fs.setattr(f.ino, &chosen, &u).unwrap();
    assert_eq!((t.atime, t.mtime), (5, 7));
    let t = fs.setattr(ro.ino, &chosen, &root()).unwrap();
    assert_eq!((t.atime, t.mtime), (5, 7));
}

#[test]
fn posix_acl_xattrs_are_refused_and_stored_ones_ignored() {
    use numaio_fs::meta::Record;
    let (s, fs) = vol();
    let c = root();
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    // A valid ACL (version 2: user::rw-, user:65534:---, group::r--, mask::r--, other::r--).
    let mut acl = 2u32.to_le_bytes().to_vec();
    for (tag, perm, id) in [
        (1u16, 6u16, u32::MAX),
        (2, 0, 65534),
        (4, 4, u32::MAX),
        (0x10, 4, u32::MAX),
        (0x20, 4, u32::MAX),
    ] {
        acl.extend(tag.to_le_bytes());
        acl.extend(perm.to_le_bytes());
        acl.extend(id.to_le_bytes());
    }
    for name in POSIX_ACL_XATTRS {
        let e = fs.setxattr(f.ino, name, &acl, 0, &c).unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
        let e = fs.removexattr(f.ino, name, &c).unwrap_err();
        assert_eq!(e.errno(), libc::EOPNOTSUPP, "{e}");
        assert!(matches!(fs.getxattr(f.ino, name), Err(FsError::NoAttr)));
    }
    fs.setxattr(f.ino, b"user.kept", b"1", 0, &c).unwrap();
    fs.unmount().unwrap();

    // A volume written before the refusal holds an ACL: it is neither shown nor applied.
    let header = Fs::check_labels(&*s).unwrap();
    let mut rec = numaio_fs::journal::recover(&*s, &header).unwrap();
    rec.meta
        .apply(&Record::SetXattr {
            ino: f.ino,
            name: POSIX_ACL_XATTRS[0].to_vec(),
            value: acl.clone(),
        })
        .unwrap();
    let seq = rec.checkpoint_seq + rec.replayed + 1;
    rec.journal.checkpoint(&*s, &rec.meta, seq).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    assert!(fs
        .meta_snapshot()
        .get(f.ino)
        .unwrap()
        .xattrs
        .contains_key(POSIX_ACL_XATTRS[0]));
    assert!(matches!(
        fs.getxattr(f.ino, POSIX_ACL_XATTRS[0]),
        Err(FsError::NoAttr)
    ));
    assert_eq!(fs.listxattr(f.ino).unwrap(), vec![b"user.kept".to_vec()]);
    // The mode alone decides.
    fs.access(f.ino, 4, &user(65534)).unwrap();
}

#[test]
fn chmod_keeps_set_group_id_only_for_a_member_of_the_group() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap();
    let chown = |uid, gid| SetAttr {
        uid: Some(uid),
        gid: Some(gid),
        ..Default::default()
    };
    let chmod = |mode| SetAttr {
        mode: Some(mode),
        ..Default::default()
    };
    fs.setattr(f.ino, &chown(1000, 1000), &root()).unwrap();
    let a = fs.setattr(f.ino, &chmod(0o2755), &user(1000)).unwrap();
    assert_eq!(a.mode, 0o2755);
    fs.setattr(f.ino, &chown(1000, 2000), &root()).unwrap();
    let a = fs.setattr(f.ino, &chmod(0o2755), &user(1000)).unwrap();
    assert_eq!(
        a.mode, 0o755,
        "set-group-id kept for a group the caller is not in"
    );
    let a = fs.setattr(f.ino, &chmod(0o2755), &root()).unwrap();
    assert_eq!(a.mode, 0o2755);
}

#[test]
fn root_executes_only_what_someone_may_and_setgid_directories_pass_on() {
    let (_, fs) = vol();
    let f = fs.create(ROOT, b"f", 0o644, &root()).unwrap();
    assert!(matches!(
        fs.access(f.ino, 1, &root()),
        Err(FsError::Permission)
    ));
    let x = fs.create(ROOT, b"x", 0o100, &root()).unwrap();
    fs.access(x.ino, 1, &root()).unwrap();
    let d = fs.mkdir(ROOT, b"d", 0o700, &root()).unwrap();
    fs.access(d.ino, 1, &root()).unwrap();
    let sg = fs.mkdir(ROOT, b"sg", 0o777, &root()).unwrap();
    fs.setattr(
        sg.ino,
        &SetAttr {
            gid: Some(4242),
            mode: Some(0o2777),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    let sub = fs.mkdir(sg.ino, b"sub", 0o755, &user(1000)).unwrap();
    assert_eq!((sub.mode, sub.gid), (0o2755, 4242));
    let file = fs.create(sg.ino, b"file", 0o644, &user(1000)).unwrap();
    assert_eq!((file.mode, file.gid), (0o644, 4242));
}

#[test]
fn a_sticky_directory_keeps_others_entries() {
    let (_, fs) = vol();
    let st = fs.mkdir(ROOT, b"tmp", 0o777, &root()).unwrap();
    fs.setattr(
        st.ino,
        &SetAttr {
            mode: Some(0o1777),
            ..Default::default()
        },
        &root(),
    )
    .unwrap();
    fs.create(st.ino, b"roots", 0o666, &root()).unwrap();
    fs.create(st.ino, b"mine", 0o644, &user(1000)).unwrap();
    let u = user(2000);
    assert!(matches!(
        fs.unlink(st.ino, b"roots", &u),
        Err(FsError::NotPermitted)
    ));
    assert!(matches!(
        fs.rename(st.ino, b"mine", st.ino, b"moved", 0, &u),
        Err(FsError::NotPermitted)
    ));
    fs.create(st.ino, b"theirs", 0o644, &u).unwrap();
    assert!(matches!(
        fs.rename(st.ino, b"theirs", st.ino, b"roots", 0, &u),
        Err(FsError::NotPermitted)
    ));
    fs.rename(st.ino, b"theirs", st.ino, b"renamed", 0, &u)
        .unwrap();
    fs.unlink(st.ino, b"renamed", &u).unwrap();
    fs.unlink(st.ino, b"mine", &user(1000)).unwrap();
    fs.unlink(st.ino, b"roots", &root()).unwrap();
}

/// Set-user-id and set-group-id drop as the VFS drops them for a local file system: on a
/// change of owner or group (by root too), on a change of nothing (how the kernel passes on
/// `chown(f, -1, -1)` to a server that handles the bits itself), and on a write or size
/// change by anyone but root; set-group-id without group execute stays for a member of the
/// file's group; directories keep theirs.
#[test]
fn set_ids_drop_on_chown_write_and_truncate() {
    let (_s, fs) = vol();
    let mode_of = |ino| fs.getattr(ino).unwrap().mode & 0o7777;
    let file = |name: &[u8], mode: u32| {
        let f = fs.create(ROOT, name, 0o644, &root()).unwrap().ino;
        fs.write(f, 0, &[1u8; 100], &root()).unwrap();
        let s = SetAttr {
            uid: Some(1000),
            gid: Some(1000),
            ..Default::default()
        };
        fs.setattr(f, &s, &root()).unwrap();
        let m = SetAttr {
            mode: Some(mode),
            ..Default::default()
        };
        fs.setattr(f, &m, &root()).unwrap();
        assert_eq!(mode_of(f), mode);
        f
    };
    let chown = SetAttr {
        uid: Some(7),
        ..Default::default()
    };
    let f = file(b"a", 0o6755);
    fs.setattr(f, &chown, &root()).unwrap();
    assert_eq!(mode_of(f), 0o755, "root's chown");
    let f = file(b"b", 0o6745);
    fs.setattr(f, &SetAttr::default(), &root()).unwrap();
    assert_eq!(mode_of(f), 0o2745, "chown(-1, -1): no group execute, root");
    let f = file(b"c", 0o6755);
    fs.write(f, 0, b"x", &root()).unwrap();
    let t = SetAttr {
        size: Some(10),
        ..Default::default()
    };
    fs.setattr(f, &t, &root()).unwrap();
    assert_eq!(mode_of(f), 0o6755, "root's write and truncate");
    let f = file(b"d", 0o6777);
    fs.write(f, 0, b"x", &user(1000)).unwrap();
    assert_eq!(mode_of(f), 0o777, "the owner's write");
    let f = file(b"e", 0o6767);
    fs.write(f, 0, b"x", &user(1000)).unwrap();
    assert_eq!(
        mode_of(f),
        0o2767,
        "a group member's write, no group execute"
    );
    let f = file(b"g", 0o6767);
    fs.write(f, 0, b"x", &user(2000)).unwrap();
    assert_eq!(mode_of(f), 0o767, "a write from outside the group");
    let f = file(b"h", 0o6777);
    fs.setattr(f, &t, &user(1000)).unwrap();
    assert_eq!(mode_of(f), 0o777, "the owner's truncate");
    let d = fs.mkdir(ROOT, b"dir", 0o2775, &root()).unwrap().ino;
    fs.setattr(d, &chown, &root()).unwrap();
    assert_eq!(mode_of(d), 0o2775, "a directory's chown");
}

/// Writes `chunk`-sized pieces to `ino` until the volume is full; the bytes written.
fn fill(fs: &Fs, ino: u64) -> u64 {
    let chunk = vec![5u8; 64 * 1024];
    let mut off = 0;
    loop {
        match fs.write(ino, off, &chunk, &root()) {
            Ok(n) => off += n as u64,
            Err(FsError::NoSpace) => return off,
            Err(e) => panic!("filling inode {ino}: {e}"),
        }
    }
}

#[test]
fn a_full_volume_waits_for_a_file_removed_just_before_to_be_let_go() {
    // Through a mount, a file closed and removed is let go only after `unlink` returned
    // (the kernel's RELEASE and FORGET come in the background): a write short of room
    // meanwhile gets that space, as on ext4, rather than ENOSPC.
    let (_, fs) = vol();
    let c = root();
    let a = fs.create(ROOT, b"a", 0o644, &c).unwrap();
    fs.open(a.ino).unwrap();
    let first = fill(&fs, a.ino);
    assert!(first > 2 * MIB, "only {first} bytes fit");
    fs.unlink(ROOT, b"a", &c).unwrap();
    let b = fs.create(ROOT, b"b", 0o644, &c).unwrap();
    let second = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(std::time::Duration::from_millis(300));
            fs.release(a.ino).unwrap();
        });
        fill(&fs, b.ino)
    });
    assert!(
        second + 128 * 1024 >= first,
        "after the release only {second} of {first} bytes fit again"
    );
}

#[test]
fn a_file_removed_but_held_keeps_its_space_and_enospc_still_comes() {
    let (_, fs) = vol();
    let c = root();
    let a = fs.create(ROOT, b"a", 0o644, &c).unwrap();
    fs.open(a.ino).unwrap();
    let first = fill(&fs, a.ino);
    fs.unlink(ROOT, b"a", &c).unwrap();
    let b = fs.create(ROOT, b"b", 0o644, &c).unwrap();
    // Waited for no longer than the grace a removal gets, then refused.
    let t = std::time::Instant::now();
    let chunk = vec![5u8; 64 * 1024];
    assert!(matches!(
        fs.write(b.ino, 0, &chunk, &c),
        Err(FsError::NoSpace)
    ));
    let waited = t.elapsed();
    assert!(waited < std::time::Duration::from_secs(10), "{waited:?}");
    // Once the grace is over a held file costs no wait.
    let t = std::time::Instant::now();
    assert!(matches!(
        fs.write(b.ino, 0, &chunk, &c),
        Err(FsError::NoSpace)
    ));
    assert!(t.elapsed() < std::time::Duration::from_millis(500));
    fs.release(a.ino).unwrap();
    assert!(fill(&fs, b.ino) + 128 * 1024 >= first);
}
