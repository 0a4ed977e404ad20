//! `numaio mount --fuse-mode`: the transport asked for is the one reported (human and
//! `--json`), and the mount serves reads and writes in it. Needs root and /dev/fuse; the
//! io-uring case also a kernel with FUSE over io_uring. Skips visibly otherwise.

mod common;

use common::mount::{numaio_out as numaio, Unmount, Volume};
use numaio_testkit::skip;
use std::path::Path;

fn mounts_and_reports(mode: &str, reported: &str) {
    let v = Volume::new("64M");
    let o = v.mount(&["--fuse-mode", mode, "--json"]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let g = Unmount(&v.mnt);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).expect("mount --json");
    assert_eq!(j["fuse_mode"], reported, "{j}");
    let f = v.mnt.join("f");
    std::fs::write(&f, vec![7u8; 100_000]).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), vec![7u8; 100_000]);
    drop(g);
    // Human output names the mode too.
    let o = v.mount(&["--fuse-mode", mode]);
    assert!(
        o.status.success(),
        "mount: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let _g = Unmount(&v.mnt);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains(&format!("fuse mode {reported}")), "{out}");
    assert_eq!(std::fs::read(&f).unwrap(), vec![7u8; 100_000]);
}

fn can_mount() -> bool {
    numaio_testkit::is_root() && Path::new("/dev/fuse").exists()
}

#[test]
fn classic_mode_is_used_and_reported() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    mounts_and_reports("classic", "classic");
}

#[test]
fn io_uring_mode_is_used_and_reported() {
    if !can_mount() {
        skip!("root and /dev/fuse");
    }
    if !Path::new("/sys/module/fuse/parameters/enable_uring").exists() {
        skip!(
            "FUSE over io_uring",
            "kernel without CONFIG_FUSE_IO_URING (Linux 6.14+)"
        );
    }
    mounts_and_reports("io-uring", "io_uring");
}

#[test]
fn an_unknown_mode_is_refused() {
    let o = numaio([
        "mount",
        "--fuse-mode",
        "carrier-pigeon",
        "/nonexistent",
        "/mnt",
    ]);
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("carrier-pigeon"));
}
