//! What a volume's metadata costs in memory: creates N files (default 200,000) in one
//! directory through `Fs` on a two-device `FileStore` volume in DIR (default: the system
//! temporary directory), each with one 4 KiB block when `--data` is given, and prints this
//! process's VmRSS/VmHWM after mount, after the creates (nothing synced), after a sync,
//! after unlinking them all and after a sync. A measurement, not a test.
//!
//! `cargo run --release -p numaio-fs --example fs_memory [N] [DIR] [--data]`

use numaio_fs::store::{DeviceInfo, DeviceKind, FileStore};
use numaio_fs::*;
use std::sync::Arc;

fn mem() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (kb("VmRSS:"), kb("VmHWM:"))
}

fn show(what: &str, base: u64, files: u64) {
    let (rss, hwm) = mem();
    println!(
        "{what:<36} VmRSS {:>8} KiB  VmHWM {:>8} KiB  (+{} bytes per file over the mount)",
        rss,
        hwm,
        (rss.saturating_sub(base) * 1024) / files.max(1)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let data = args.iter().any(|a| a == "--data");
    let pos: Vec<&String> = args.iter().filter(|a| !a.starts_with("--")).collect();
    let files: u64 = pos.first().and_then(|a| a.parse().ok()).unwrap_or(200_000);
    let base = pos
        .get(1)
        .map(std::path::PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let dir = tempfile::tempdir_in(&base).expect("temporary directory");
    let dev_bytes = (files * 4096 * 2 / 2).max(1 << 30) + (256 << 20);
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
    let store: Arc<dyn store::BlockStore> = Arc::new(FileStore::open(&devs, false).expect("open"));
    let fs = Fs::mount(store, MountOptions::default()).expect("mount");
    let (base_rss, _) = mem();
    show("mounted", base_rss, files);
    let c = Caller::root_on(0);
    let d = fs.mkdir(1, b"big", 0o755, &c).expect("mkdir").ino;
    let block = vec![0x5au8; 4096];
    for i in 0..files {
        let a = fs
            .create(d, format!("f{i:07}").as_bytes(), 0o644, &c)
            .expect("create");
        if data {
            fs.write(a.ino, 0, &block, &c).expect("write");
        }
    }
    show(
        &format!("{files} files created, not synced"),
        base_rss,
        files,
    );
    fs.sync().expect("sync");
    show("synced", base_rss, files);
    for i in 0..files {
        fs.unlink(d, format!("f{i:07}").as_bytes(), &c)
            .expect("unlink");
    }
    show("all unlinked, not synced", base_rss, files);
    fs.sync().expect("sync");
    show("synced", base_rss, files);
    // SAFETY: malloc_trim only returns free heap memory to the kernel.
    unsafe { libc::malloc_trim(0) };
    show("malloc_trim", base_rss, files);
    fs.unmount().expect("unmount");
}
