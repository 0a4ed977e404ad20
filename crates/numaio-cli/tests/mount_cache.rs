//! File data through `numaio mount` is cached once: in the mount's page cache (the kernel
//! keeps it for readers and mmap), not again in the page cache of the volume's device files.
//! Residency is read with `numaio where --json` (mincore). Needs root and /dev/fuse; skips
//! visibly.

mod common;

use common::mount::{can_mount, numaio_out, ok, Unmount, Volume};
use std::ffi::OsStr;
use std::io::Write;
use std::path::Path;

const MIB: usize = 1 << 20;
/// Pages of the 32 MiB test file.
const FILE_PAGES: u64 = (32 * MIB / 4096) as u64;
/// Pages of the file the kernel may reclaim while the test runs: other work on the machine
/// (CI downloads and builds beside the tests) presses on the page cache, and the file's
/// pages are as reclaimable as any. The claim tested is where the data is cached, so a few
/// reclaimed pages may be missing but none may be cached twice.
const RECLAIMED_PAGES: u64 = FILE_PAGES / 64;
/// What a sequential reader may leave in the devices' cache: the store reads four requests
/// (of at most 1 MiB) ahead of it, plus metadata.
const READ_AHEAD_PAGES: u64 = 4 * 256 + 64;

/// Resident pages of `paths`, summed (`numaio where --json`).
fn resident(paths: &[&Path]) -> u64 {
    let mut a: Vec<&OsStr> = vec!["where".as_ref(), "--json".as_ref()];
    a.extend(paths.iter().map(|p| p.as_os_str()));
    let v: serde_json::Value = serde_json::from_str(&ok(&numaio_out(a), "where")).unwrap();
    v["total"]["resident_pages"].as_u64().unwrap()
}

#[test]
fn file_data_is_cached_in_the_mount_not_again_in_the_devices() {
    if !can_mount("file_data_is_cached_in_the_mount_not_again_in_the_devices") {
        return;
    }
    let vol = Volume::new("64M");
    let devs: Vec<&Path> = vol.devs.iter().map(|d| d.as_path()).collect();
    let data: Vec<u8> = (0..32 * MIB).map(|i| (i % 251) as u8).collect();
    let file = vol.mnt.join("f");
    {
        ok(&vol.mount(&[]), "mount");
        let _guard = Unmount(&vol.mnt);
        let before = resident(&devs);
        let mut f = std::fs::File::create(&file).unwrap();
        f.write_all(&data).unwrap();
        f.sync_all().unwrap();
        drop(f);
        let after = resident(&devs);
        // Written and durable: the devices' pages went; the journal's commit is small.
        assert!(
            after <= before + 64,
            "device pages after a 32 MiB write and fsync: {before} → {after}"
        );
        let cached = resident(&[&file]);
        assert!(
            (FILE_PAGES - RECLAIMED_PAGES..=FILE_PAGES).contains(&cached),
            "the mount's cache holds the file: {cached} of {FILE_PAGES} pages"
        );
        ok(&vol.umount(), "umount");
    }
    // A fresh mount has nothing cached; a buffered read fills the mount's cache only.
    ok(&vol.mount(&[]), "remount");
    let _guard = Unmount(&vol.mnt);
    let before = resident(&devs);
    assert_eq!(std::fs::read(&file).unwrap(), data);
    let after = resident(&devs);
    let cached = resident(&[&file]);
    assert!(
        (FILE_PAGES - RECLAIMED_PAGES..=FILE_PAGES).contains(&cached),
        "the mount's cache holds the file after a read: {cached} of {FILE_PAGES} pages"
    );
    assert!(
        after <= before + READ_AHEAD_PAGES,
        "device pages after reading 32 MiB through the mount: {before} → {after}"
    );
    ok(&vol.umount(), "umount");
}
