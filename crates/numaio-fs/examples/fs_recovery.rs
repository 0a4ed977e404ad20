//! Host numbers for docs/fs.md (not part of the test suite), on a file-backed volume (two
//! device files, labelled nodes 0 and 1, through `FileStore`) in DIR (default: the system
//! temporary directory):
//!
//! 1. sequential write throughput through `Fs` (1 MiB writes into 16 files, then one sync),
//!    and the peer: the same bytes written with `pwrite` in 1 MiB pieces into 16 plain files
//!    on the same host file system, each `fsync`ed at the end; the two alternate three times;
//! 2. many small files committed in small groups, which leaves a long journal (it stops
//!    just before the journal would be checkpointed);
//! 3. the process "crashes" (the volume is dropped without an unmount) and the volume is
//!    mounted again: the mount time is the recovery time (labels, newest checkpoint, journal
//!    replay, allocator rebuild).
//!
//!   cargo run --release -p numaio-fs --example fs_recovery [DATA_MIB] [FILES] [DIR]

use numaio_fs::store::{DeviceInfo, DeviceKind, FileStore};
use numaio_fs::*;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

const MIB: u64 = 1 << 20;
const STREAMS: u64 = 16;

fn open_volume(devs: &[DeviceInfo]) -> Fs {
    let store: Arc<dyn store::BlockStore> = Arc::new(FileStore::open(devs, false).expect("open"));
    Fs::mount(store, MountOptions::default()).expect("mount")
}

/// Writes `mib` MiB through `fs` in 1 MiB writes, round robin over `STREAMS` files, then
/// syncs; returns the seconds taken.
fn write_fs(fs: &Fs, round: u32, mib: u64) -> f64 {
    let root = Caller::root_on(0);
    let d = fs
        .mkdir(1, format!("round{round}").as_bytes(), 0o755, &root)
        .expect("mkdir")
        .ino;
    let inos: Vec<u64> = (0..STREAMS)
        .map(|i| {
            fs.create(d, format!("data{i}").as_bytes(), 0o644, &root)
                .expect("create")
                .ino
        })
        .collect();
    let chunk = vec![0x5au8; MIB as usize];
    let t = Instant::now();
    for n in 0..mib {
        let ino = inos[(n % STREAMS) as usize];
        fs.write(ino, (n / STREAMS) * MIB, &chunk, &root)
            .expect("write");
    }
    fs.sync().expect("sync");
    t.elapsed().as_secs_f64()
}

/// The peer: the same bytes with `pwrite` into `STREAMS` plain files in `dir`, each
/// `fsync`ed at the end; returns the seconds taken (the files are removed after).
fn write_plain(dir: &Path, round: u32, mib: u64) -> f64 {
    let paths: Vec<PathBuf> = (0..STREAMS)
        .map(|i| dir.join(format!("plain{round}.{i}")))
        .collect();
    let files: Vec<std::fs::File> = paths
        .iter()
        .map(|p| std::fs::File::create(p).expect("create plain file"))
        .collect();
    let chunk = vec![0x5au8; MIB as usize];
    let t = Instant::now();
    for n in 0..mib {
        files[(n % STREAMS) as usize]
            .write_all_at(&chunk, (n / STREAMS) * MIB)
            .expect("pwrite");
    }
    for f in &files {
        f.sync_all().expect("fsync");
    }
    let secs = t.elapsed().as_secs_f64();
    for p in &paths {
        let _ = std::fs::remove_file(p);
    }
    secs
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let num = |i: usize, default: u64| -> u64 {
        args.get(i).map_or(default, |a| {
            a.parse()
                .expect("DATA_MIB and FILES are whole numbers; DIR a directory")
        })
    };
    let mib = num(0, 1024);
    let files = num(1, 100_000);
    let base = args.get(2).map_or_else(std::env::temp_dir, PathBuf::from);
    let dir = tempfile::tempdir_in(&base).expect("temporary directory");
    // Three rounds of data (they stay on the volume), the metadata area, whole groups and a
    // block per small file, with room to spare.
    let dev_bytes = (3 * mib / 2 + 512) * MIB + files * 4096;
    let devs: Vec<DeviceInfo> = (0..2u32)
        .map(|node| {
            let path = dir.path().join(format!("dev{node}.img"));
            std::fs::File::create(&path)
                .and_then(|f| f.set_len(dev_bytes))
                .expect("device file");
            DeviceInfo {
                path,
                node,
                bytes: dev_bytes,
                kind: DeviceKind::File,
            }
        })
        .collect();
    {
        let store = FileStore::open(&devs, false).expect("open");
        Fs::mkfs(&store, &MkfsOptions::default()).expect("mkfs");
    }
    let fs = open_volume(&devs);
    println!(
        "host file system of {}; {mib} MiB per round, 1 MiB writes over {STREAMS} files",
        base.display()
    );
    for round in 0..3 {
        let a = write_fs(&fs, round, mib);
        let b = write_plain(dir.path(), round, mib);
        println!(
            "round {round}: numaio-fs {:.0} MiB/s ({a:.2} s) | pwrite+fsync plain files {:.0} \
             MiB/s ({b:.2} s)",
            mib as f64 / a,
            mib as f64 / b
        );
    }
    // Many small files, committed 20 at a time: the journal turns over several times and is
    // left just below the point where a checkpoint would empty it.
    let root = Caller::root_on(0);
    let d = fs.mkdir(1, b"many", 0o755, &root).expect("mkdir").ino;
    let t = Instant::now();
    let mut made = 0u64;
    loop {
        let (used, cap) = fs.journal_usage();
        let long = used + 16 * 1024 > cap / 2;
        if made >= files && long {
            break;
        }
        let f = fs
            .create(d, format!("f{made}").as_bytes(), 0o644, &root)
            .expect("create");
        fs.write(f.ino, 0, b"x", &root).expect("write");
        made += 1;
        if made.is_multiple_of(20) {
            fs.sync().expect("sync");
        }
    }
    fs.sync().expect("sync");
    let secs = t.elapsed().as_secs_f64();
    let (used, cap) = fs.journal_usage();
    println!(
        "small files: {made} created+written, committed 20 at a time, in {secs:.2} s ({:.0} \
         files/s); journal left at {} KiB of {} KiB",
        made as f64 / secs,
        used >> 10,
        cap >> 10
    );
    // The crash: no unmount, so no final checkpoint.
    drop(fs);
    let t = Instant::now();
    let fs2 = open_volume(&devs);
    let secs = t.elapsed().as_secs_f64();
    let info = fs2.mount_info();
    let st = fs2.statfs();
    println!(
        "mount after a crash: {:.3} s ({} MiB of data, {} inodes, checkpoint seq {}, {} journal \
         records replayed)",
        secs,
        ((st.total_blocks - st.free_blocks) * st.block_size) >> 20,
        st.files,
        info.checkpoint_seq,
        info.replayed
    );
    fs2.unmount().expect("unmount");
    let t = Instant::now();
    let fs3 = open_volume(&devs);
    println!(
        "mount after a clean unmount: {:.3} s ({} journal records replayed)",
        t.elapsed().as_secs_f64(),
        fs3.mount_info().replayed
    );
}
