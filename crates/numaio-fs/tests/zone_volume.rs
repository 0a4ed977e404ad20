//! File systems over memory zones (ZonFS): a RAM zone keeps its files on its node while
//! mounted and is gone once unmapped; a persistent ("pmem") zone backed by a file keeps data
//! and the inode table across an unmap and a fresh mapping.

use numaio_fs::store::{BlockStore, DeviceKind, ZoneSpec, ZoneStore};
use numaio_fs::*;
use std::sync::Arc;

const ROOT: u64 = 1;
const ZONE_BYTES: u64 = 8 << 20;

fn opts() -> MkfsOptions {
    MkfsOptions {
        policy: PlacementPolicy::WriterLocal,
        group_blocks: 256,
        journal_blocks: 64,
        checkpoint_blocks: 64,
    }
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(37).wrapping_add(seed) ^ (i >> 12) as u8)
        .collect()
}

fn read_all(fs: &Fs, ino: u64) -> Vec<u8> {
    let size = fs.getattr(ino).unwrap().size as usize;
    let mut buf = vec![0u8; size];
    let mut done = 0;
    while done < size {
        let n = fs.read(ino, done as u64, &mut buf[done..]).unwrap();
        assert!(n > 0, "read of inode {ino} stopped at {done} of {size}");
        done += n;
    }
    buf
}

/// Writes `files` (name, content) into the root, each in a few pieces.
fn write_files(fs: &Fs, files: &[(&str, Vec<u8>)]) -> Vec<u64> {
    let c = Caller::root_on(0);
    files
        .iter()
        .map(|(name, data)| {
            let ino = fs.create(ROOT, name.as_bytes(), 0o644, &c).unwrap().ino;
            for (i, piece) in data.chunks(10_000).enumerate() {
                let n = fs.write(ino, (i * 10_000) as u64, piece, &c).unwrap();
                assert_eq!(n, piece.len());
            }
            ino
        })
        .collect()
}

fn files() -> Vec<(&'static str, Vec<u8>)> {
    vec![
        ("small", pattern(100, 1)),
        ("two-blocks", pattern(8192, 2)),
        ("big", pattern(700_000, 3)),
        ("empty", Vec::new()),
    ]
}

/// A RAM zone on node 0 (every machine has node 0). Only a missing node or no memory for
/// the zone may stop it; both are reported, never passed silently.
fn ram_zone() -> Option<ZoneStore> {
    let spec: ZoneSpec = format!("0:{ZONE_BYTES}").parse().unwrap();
    match ZoneStore::new(&[spec]) {
        Ok(s) => Some(s),
        Err(e) => {
            numaio_testkit::skipped("a RAM zone bound to node 0", &e.to_string());
            None
        }
    }
}

#[test]
fn ram_zone_volume_round_trips_files_on_its_node() {
    let Some(store) = ram_zone() else { return };
    assert_eq!(store.devices()[0].kind, DeviceKind::RamZone);
    let store = Arc::new(store);
    Fs::mkfs(&*store, &opts()).unwrap();
    let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
    let want = files();
    let inos = write_files(&fs, &want);
    fs.sync().unwrap();
    for ((name, data), ino) in want.iter().zip(&inos) {
        let a = fs
            .lookup(ROOT, name.as_bytes(), &Caller::root_on(0))
            .unwrap();
        assert_eq!(a.ino, *ino, "{name}");
        assert_eq!(a.size, data.len() as u64, "{name}");
        assert!(read_all(&fs, *ino) == *data, "{name}: content differs");
    }
    // every block a file owns is on the zone, and the zone's pages on node 0
    for ino in &inos {
        for (_, e, node) in fs.block_map(*ino).unwrap() {
            assert_eq!(node, 0, "inode {ino}: extent {e:?} on node {node}");
        }
    }
    let placement = store.placement_check().unwrap();
    assert_eq!(placement.len(), 1);
    let p = &placement[0];
    assert_eq!(p.pages as u64 * numaio_sys::page_size() as u64, ZONE_BYTES);
    assert_eq!(p.percent_on_node(), 100.0, "{p:?}");
    fs.unmount().unwrap();
}

#[test]
fn ram_zone_volume_cannot_be_reopened() {
    let Some(store) = ram_zone() else { return };
    let store = Arc::new(store);
    Fs::mkfs(&*store, &opts()).unwrap();
    let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
    write_files(&fs, &files());
    fs.unmount().unwrap();
    // Unmounted, the same mapping still holds the volume...
    let again = Fs::mount(store.clone(), MountOptions::default()).unwrap();
    assert!(again.lookup(ROOT, b"big", &Caller::root_on(0)).is_ok());
    again.unmount().unwrap();
    drop(store);
    // ...but a RAM zone mapped again is fresh memory: no label, no volume, and mount says
    // so instead of mounting garbage.
    let Some(fresh) = ram_zone() else { return };
    let e = match Fs::mount(Arc::new(fresh), MountOptions::default()) {
        Ok(_) => panic!("a new RAM zone mounted as if it held the old volume"),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(
        matches!(e, FsError::Corrupt { .. } | FsError::Invalid(_)),
        "{e:?}"
    );
    assert!(
        msg.contains("ram-zone0@node0"),
        "the error names the zone: {msg}"
    );
}

#[test]
fn pmem_zone_volume_keeps_data_and_inodes_across_a_new_mapping() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pmem.img");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(ZONE_BYTES)
        .unwrap();
    let spec: ZoneSpec = format!("0:{ZONE_BYTES}:{}", path.display())
        .parse()
        .unwrap();
    let want = files();
    let (inos, attrs) = {
        let store = Arc::new(ZoneStore::new(std::slice::from_ref(&spec)).unwrap());
        assert_eq!(store.devices()[0].kind, DeviceKind::PmemZone);
        Fs::mkfs(&*store, &opts()).unwrap();
        let fs = Fs::mount(store.clone(), MountOptions::default()).unwrap();
        let inos = write_files(&fs, &want);
        let c = Caller::root_on(0);
        let d = fs.mkdir(ROOT, b"dir", 0o750, &c).unwrap();
        fs.symlink(d.ino, b"link", b"../big", &c).unwrap();
        fs.fsync(inos[2], false).unwrap();
        let attrs: Vec<FileAttr> = inos.iter().map(|i| fs.getattr(*i).unwrap()).collect();
        fs.unmount().unwrap();
        (inos, attrs)
        // the store (the mapping) is dropped here
    };
    let store = Arc::new(ZoneStore::new(std::slice::from_ref(&spec)).unwrap());
    let report = numaio_fs::fsck::fsck(&*store, &Default::default()).unwrap();
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.files, want.len() as u64, "{report:?}");
    let fs = Fs::mount(store, MountOptions::default()).unwrap();
    let c = Caller::root_on(0);
    for (((name, data), ino), before) in want.iter().zip(&inos).zip(&attrs) {
        let a = fs.lookup(ROOT, name.as_bytes(), &c).unwrap();
        assert_eq!(a.ino, *ino, "{name}: the inode table came back");
        assert_eq!(&a, before, "{name}: attributes");
        assert!(read_all(&fs, *ino) == *data, "{name}: content differs");
    }
    let d = fs.lookup(ROOT, b"dir", &c).unwrap();
    assert_eq!(d.mode & 0o777, 0o750);
    let l = fs.lookup(d.ino, b"link", &c).unwrap();
    assert_eq!(fs.readlink(l.ino).unwrap(), b"../big");
    fs.unmount().unwrap();
}
