//! Host numbers for docs/fs.md (not part of the test suite): write throughput through `Fs`
//! over an in-memory volume, and mount (recovery) time after a power cut.
//!
//!   cargo run --release -p numaio-fs --example fs_recovery [VOLUME_MIB] [FILES]

use numaio_fs::store::{CrashMode, MemStore};
use numaio_fs::*;
use std::sync::Arc;
use std::time::Instant;

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("VOLUME_MIB and FILES are whole numbers"))
        .collect();
    let mib = args.first().copied().unwrap_or(1024);
    let files = args.get(1).copied().unwrap_or(100_000);
    let half = (mib / 2) << 20;
    let store = Arc::new(MemStore::new(&[(0, half), (1, half)]));
    let o = MkfsOptions {
        group_blocks: 8192,
        ..MkfsOptions::default()
    };
    Fs::mkfs(&*store, &o).expect("mkfs");
    let fs = Fs::mount(store.clone(), MountOptions::default()).expect("mount");
    let root = Caller::root_on(0);
    // Data: 1 MiB writes from callers on both nodes into 64 files, up to 60 % of the volume.
    let chunk = vec![0x5au8; 1 << 20];
    let total = mib * 6 / 10;
    let inos: Vec<u64> = (0..64)
        .map(|i| {
            fs.create(1, format!("data{i}").as_bytes(), 0o644, &root)
                .unwrap()
                .ino
        })
        .collect();
    let t = Instant::now();
    for n in 0..total {
        let ino = inos[(n % 64) as usize];
        let c = Caller::root_on((n % 2) as u32);
        fs.write(ino, (n / 64) << 20, &chunk, &c).expect("write");
    }
    fs.sync().expect("sync");
    let secs = t.elapsed().as_secs_f64();
    println!(
        "write: {total} MiB in 1 MiB writes + sync: {secs:.2} s, {:.0} MiB/s",
        total as f64 / secs
    );
    // Metadata: many small files, committed, then a power cut and a mount.
    let t = Instant::now();
    let d = fs.mkdir(1, b"many", 0o755, &root).unwrap().ino;
    for i in 0..files {
        let f = fs
            .create(d, format!("f{i}").as_bytes(), 0o644, &root)
            .unwrap();
        fs.write(f.ino, 0, b"x", &root).unwrap();
        if i % 1000 == 999 {
            fs.sync().unwrap();
        }
    }
    fs.sync().unwrap();
    let secs = t.elapsed().as_secs_f64();
    println!(
        "create+write+commit every 1000: {files} files in {secs:.2} s ({:.0} files/s)",
        files as f64 / secs
    );
    let img = Arc::new(store.crash(CrashMode::DropUnsynced));
    let t = Instant::now();
    let fs2 = Fs::mount(img, MountOptions::default()).expect("mount after crash");
    let secs = t.elapsed().as_secs_f64();
    let info = fs2.mount_info();
    println!(
        "mount after a power cut ({mib} MiB volume, {} inodes, checkpoint seq {}, {} journal \
         records replayed): {:.3} s",
        fs2.statfs().files,
        info.checkpoint_seq,
        info.replayed,
        secs
    );
}
