//! Changes queued without an fsync are committed once they grow large, so what waits for a
//! commit (and the memory it holds) stays bounded; after a power cut the volume is at one of
//! those commits.

use numaio_fs::store::{CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;

#[test]
fn many_changes_without_fsync_are_committed_in_bounded_steps() {
    let s = Arc::new(MemStore::new(&[(0, 256 << 20)]));
    let o = MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 1024,
        journal_blocks: 2048,
        checkpoint_blocks: 8192,
    };
    Fs::mkfs(&*s, &o).unwrap();
    let fs = Fs::mount(s.clone(), MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    let d = fs.mkdir(1, b"d", 0o755, &c).unwrap().ino;
    // Long names: about 26 MB of queued records in all, never an fsync.
    let name = |i: u32| format!("{i:06}-{}", "n".repeat(240)).into_bytes();
    let n = 50_000u32;
    // `change_would_wait` says when the next change would commit first: once per bound.
    let mut due = 0;
    let start = fs.commits();
    for i in 0..n {
        let before = fs.commits();
        let would = fs.change_would_wait();
        fs.create(d, &name(i), 0o644, &c).unwrap();
        assert_eq!(would, fs.commits() > before, "create {i}");
        due += u64::from(would);
    }
    let commits = fs.commits();
    assert!(commits >= 2, "{n} creates without fsync: {commits} commits");
    assert_eq!(due, commits - start, "each of these commits was announced");
    drop(fs);
    // Power cut: everything up to the last of those commits is there, in order.
    let fs2 = Fs::mount(
        Arc::new(s.crash(CrashMode::DropUnsynced)),
        MountOptions::default(),
    )
    .unwrap();
    let d2 = fs2.lookup(1, b"d", &c).unwrap().ino;
    let mut kept = 0;
    while kept < n && fs2.lookup(d2, &name(kept), &c).is_ok() {
        kept += 1;
    }
    assert!(
        kept > 0 && kept < n,
        "{kept} of {n} creates survived the cut"
    );
    for i in kept..n {
        assert!(
            fs2.lookup(d2, &name(i), &c).is_err(),
            "create {i} after a gap"
        );
    }
}
