//! The bound on one inode's extended attributes (`XATTR_SPACE`, counted as ext4 counts its
//! xattr block): sets past it fail with `NoSpace` (ENOSPC), replacing and removing still
//! work at the bound, the placement policy is not counted, and what was set survives a
//! remount.

use numaio_fs::store::{CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;

const ROOT: u64 = 1;

fn vol() -> (Arc<MemStore>, Fs) {
    let s = Arc::new(MemStore::new(&[(0, 4 << 20)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 64,
        journal_blocks: 32,
        checkpoint_blocks: 64,
    };
    Fs::mkfs(&*s, &o).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    (s, fs)
}

#[test]
fn xattrs_of_one_inode_are_bounded_like_ext4s_block() {
    let (s, fs) = vol();
    let c = Caller::root_on(0);
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    // stress-ng's xattr stressor: names `user.var_N`, values `orig-value-N`, until ENOSPC.
    let name = |i: usize| format!("user.var_{i}").into_bytes();
    let value = |i: usize| format!("orig-value-{i}").into_bytes();
    let mut used = 0;
    let mut n = 0;
    loop {
        match fs.setxattr(f.ino, &name(n), &value(n), XATTR_CREATE, &c) {
            Ok(()) => {
                used += xattr_entry_bytes(&name(n), value(n).len());
                n += 1;
            }
            Err(FsError::NoSpace) => break,
            Err(e) => panic!("setxattr {n}: {e}"),
        }
        assert!(n <= XATTR_SPACE / 20, "no bound after {n} xattrs");
    }
    assert!(used <= XATTR_SPACE);
    assert!(used + xattr_entry_bytes(&name(n), value(n).len()) > XATTR_SPACE);
    // ext4 with 4 KiB blocks takes about this many of these (one block's worth).
    assert!((60..=110).contains(&n), "{n} xattrs fit");
    assert_eq!(fs.listxattr(f.ino).unwrap().len(), n);

    // At the bound: replacing with a value of the same size works, a larger one does not
    // fit, removing makes room again.
    fs.setxattr(f.ino, &name(0), &value(0), XATTR_REPLACE, &c)
        .unwrap();
    assert!(matches!(
        fs.setxattr(f.ino, &name(0), &[b'x'; 200], XATTR_REPLACE, &c),
        Err(FsError::NoSpace)
    ));
    fs.removexattr(f.ino, &name(1), &c).unwrap();
    fs.setxattr(f.ino, &name(n), &value(n), XATTR_CREATE, &c)
        .unwrap();
    // The placement policy is an inode attribute, not counted.
    fs.setxattr(f.ino, PLACEMENT_XATTR, b"fixed:0", 0, &c)
        .unwrap();

    // One value larger than the whole space never fits, on any inode.
    let g = fs.create(ROOT, b"g", 0o644, &c).unwrap();
    assert!(matches!(
        fs.setxattr(g.ino, b"user.big", &vec![7u8; XATTR_SPACE], 0, &c),
        Err(FsError::NoSpace)
    ));
    fs.setxattr(g.ino, b"user.big", &vec![7u8; XATTR_SPACE - 16 - 4], 0, &c)
        .unwrap();

    fs.sync().unwrap();
    let fs2 = Fs::mount(
        Arc::new(s.crash(CrashMode::DropUnsynced)),
        MountOptions::default(),
    )
    .unwrap();
    assert_eq!(fs2.listxattr(f.ino).unwrap().len(), n + 1);
    assert_eq!(fs2.getxattr(f.ino, &name(n)).unwrap(), value(n));
    assert_eq!(
        fs2.getxattr(g.ino, b"user.big").unwrap().len(),
        XATTR_SPACE - 20
    );
}

/// Replacing and removing xattrs over and over on a volume whose checkpoint slot is nearly
/// full keeps working: the metadata bound follows the set down as well as up.
#[test]
fn replaced_and_removed_xattrs_do_not_fill_the_metadata() {
    let (_s, fs) = vol();
    let c = Caller::root_on(0);
    let f = fs.create(ROOT, b"f", 0o644, &c).unwrap();
    for round in 0..4_000u32 {
        let v = vec![(round % 251) as u8; 1000 + (round % 3000) as usize];
        fs.setxattr(f.ino, b"user.a", &v, 0, &c).unwrap();
        if round % 7 == 0 {
            fs.removexattr(f.ino, b"user.a", &c).unwrap();
        }
        if round % 1000 == 0 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
}
