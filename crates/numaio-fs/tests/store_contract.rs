//! The `BlockStore` contract, checked the same way on every store: what is written reads
//! back, I/O past a device's end or on a missing device is an error that names the device,
//! and `sync` succeeds. Plus what only some stores promise: persistence across reopen,
//! durability of synced writes over a power cut (engine), node placement (zones, engine).

mod common;
mod engine_store;

use common::{Loop, LOOP_DEVICE};
use engine_store::EngineStore;
use numaio_engine::power_loss::{PowerLossBackend, PowerLossOptions};
use numaio_engine::{Backend, PsyncBackend};
use numaio_fs::store::{
    BlockStore, DeviceInfo, DeviceKind, FileStore, MemStore, ZoneSpec, ZoneStore,
};
use numaio_fs::{FsError, BLOCK_SIZE};
use std::path::Path;
use std::sync::Arc;

const BS: usize = BLOCK_SIZE as usize;
const DEV_BYTES: u64 = 256 * 1024;

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i.wrapping_mul(31) ^ seed.wrapping_mul(131)) as u8 | 1)
        .collect()
}

fn past_end(name: &str, e: FsError, path: &Path) {
    let msg = e.to_string();
    assert!(
        msg.contains(&path.display().to_string()),
        "{name}: error does not name {}: {msg}",
        path.display()
    );
    assert_eq!(e.errno(), libc::EIO, "{name}: {msg}");
}

/// The contract every store keeps.
fn contract(name: &str, s: &dyn BlockStore) {
    let devs = s.devices().to_vec();
    assert!(!devs.is_empty(), "{name}: no devices");
    let mut buf = vec![0u8; BS];
    for (i, d) in devs.iter().enumerate() {
        let dev = i as u16;
        let blocks = d.bytes / BLOCK_SIZE;
        assert!(blocks >= 4, "{name}: device {i} too small for the test");
        // Whole blocks at the start, the middle and the very end.
        for (k, b) in [0, blocks / 2, blocks - 1].into_iter().enumerate() {
            let data = pattern(i * 10 + k, BS);
            s.write_at(dev, b * BLOCK_SIZE, &data).unwrap();
            s.read_at(dev, b * BLOCK_SIZE, &mut buf).unwrap();
            assert_eq!(buf, data, "{name}: dev {i} block {b}");
        }
        // A partial, unaligned write leaves the rest of its block alone.
        let before = {
            s.read_at(dev, BLOCK_SIZE, &mut buf).unwrap();
            buf.clone()
        };
        let small = pattern(99 + i, 100);
        s.write_at(dev, BLOCK_SIZE + 10, &small).unwrap();
        s.read_at(dev, BLOCK_SIZE, &mut buf).unwrap();
        assert_eq!(&buf[..10], &before[..10], "{name}");
        assert_eq!(&buf[10..110], &small[..], "{name}");
        assert_eq!(&buf[110..], &before[110..], "{name}");
        // Several blocks in one call.
        let multi = pattern(7 + i, 3 * BS);
        s.write_at(dev, 2 * BLOCK_SIZE, &multi).unwrap();
        let mut big = vec![0u8; 3 * BS];
        s.read_at(dev, 2 * BLOCK_SIZE, &mut big).unwrap();
        assert_eq!(big, multi, "{name}");
        // A read that must not wait either fills the buffer as `read_at` would or says it
        // would have to wait; it never gives other bytes.
        let mut cached = vec![0u8; 3 * BS];
        if s.read_cached(dev, 2 * BLOCK_SIZE, &mut cached).unwrap() {
            assert_eq!(cached, multi, "{name}: read_cached");
        }
        assert!(
            s.read_cached(dev, d.bytes - 10, &mut [0u8; 20]).is_err()
                || !s.read_cached(dev, d.bytes - 10, &mut [0u8; 20]).unwrap(),
            "{name}: read_cached past the end"
        );
        // Empty I/O at the very end is fine; anything past it is not.
        s.read_at(dev, d.bytes, &mut []).unwrap();
        s.write_at(dev, d.bytes, &[]).unwrap();
        past_end(
            name,
            s.read_at(dev, d.bytes - 10, &mut [0u8; 20]).unwrap_err(),
            &d.path,
        );
        past_end(
            name,
            s.write_at(dev, d.bytes - 10, &[1u8; 20]).unwrap_err(),
            &d.path,
        );
        past_end(
            name,
            s.read_at(dev, u64::MAX - 5, &mut [0u8; 20]).unwrap_err(),
            &d.path,
        );
        past_end(
            name,
            s.write_at(dev, u64::MAX, &[1u8; 1]).unwrap_err(),
            &d.path,
        );
        s.sync(dev).unwrap();
        // What was synced still reads back.
        s.read_at(dev, 2 * BLOCK_SIZE, &mut big).unwrap();
        assert_eq!(big, multi, "{name}");
    }
    let missing = devs.len() as u16;
    for e in [
        s.read_at(missing, 0, &mut buf).unwrap_err(),
        s.write_at(missing, 0, &buf).unwrap_err(),
        s.sync(missing).unwrap_err(),
    ] {
        assert_eq!(e.errno(), libc::EINVAL, "{name}: {e}");
        assert!(e.to_string().contains("no device"), "{name}: {e}");
    }
    s.sync_all().unwrap();
}

/// Regular files of `DEV_BYTES` standing in for devices on node 0.
fn file_devices(dir: &Path, n: usize) -> Vec<DeviceInfo> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("dev{i}"));
            let f = std::fs::File::create(&path).unwrap();
            f.set_len(DEV_BYTES).unwrap();
            DeviceInfo {
                path,
                node: 0,
                bytes: DEV_BYTES,
                kind: DeviceKind::File,
            }
        })
        .collect()
}

#[test]
fn mem_store_keeps_the_contract() {
    let s = MemStore::new(&[(0, DEV_BYTES), (1, DEV_BYTES)]);
    contract("mem", &s);
    // Memory never waits.
    s.write_at(1, 5, b"abc").unwrap();
    let mut buf = [0u8; 3];
    assert!(s.read_cached(1, 5, &mut buf).unwrap());
    assert_eq!(&buf, b"abc");
}

#[test]
fn file_store_keeps_the_contract_and_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let devs = file_devices(dir.path(), 2);
    {
        let s = FileStore::open(&devs, false).unwrap();
        contract("file", &s);
    }
    // Read-only reopen: the data is there, writes are refused naming the device.
    let s = FileStore::open(&devs, true).unwrap();
    let mut buf = vec![0u8; 3 * BS];
    s.read_at(1, 2 * BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(buf, pattern(8, 3 * BS));
    let e = s.write_at(0, 0, &[1]).unwrap_err();
    assert_eq!(e.errno(), libc::EROFS);
    assert!(e.to_string().contains("dev0"), "{e}");
}

#[test]
fn file_store_refuses_a_device_smaller_than_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let mut devs = file_devices(dir.path(), 1);
    devs[0].bytes = DEV_BYTES * 2;
    let e = FileStore::open(&devs, false).err().unwrap().to_string();
    assert!(e.contains("dev0") && e.contains("truncated"), "{e}");
    devs[0].path = dir.path().join("missing");
    let e = FileStore::open(&devs, false).err().unwrap().to_string();
    assert!(e.contains("missing") && e.contains("opening"), "{e}");
}

#[test]
fn engine_store_keeps_the_contract_and_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let devs = file_devices(dir.path(), 2);
    {
        let s = after_close(|| {
            EngineStore::builder(&devs)
                .with_cache_bytes(4 << 20)
                .build()
        })
        .unwrap();
        assert_eq!(s.slice_of(0), Some(0));
        contract("engine", &s);
    }
    let s = FileStore::open(&devs, true).unwrap();
    let mut buf = vec![0u8; 3 * BS];
    s.read_at(1, 2 * BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(buf, pattern(8, 3 * BS), "synced data reached the device");
}

#[test]
fn engine_store_caches_each_device_on_its_nodes_slice() {
    let dir = tempfile::tempdir().unwrap();
    let mut devs = file_devices(dir.path(), 3);
    devs[1].node = 1;
    // Memory of the synthetic node 1 does not exist here: slices stay unbound.
    let topo = numaio_sys::Topology::synthetic("n0=0@1G n1=1@1G").unwrap();
    let s = EngineStore::builder(&devs)
        .with_cache_bytes(4 << 20)
        .with_topology(topo)
        .with_bind_memory(false)
        .build()
        .unwrap();
    assert_eq!(s.engine().slice_nodes(), vec![0, 1]);
    assert_eq!(
        (s.slice_of(0), s.slice_of(1), s.slice_of(2)),
        (Some(0), Some(1), Some(0))
    );
    let data = pattern(1, 8 * BS);
    s.write_at(1, 0, &data).unwrap();
    let st = s.engine().stats();
    assert_eq!(st.slices[1].dirty_blocks, 8, "{:?}", st.slices);
    assert_eq!(st.slices[0].resident_blocks, 0, "{:?}", st.slices);
    s.write_at(0, 0, &data[..2 * BS]).unwrap();
    s.write_at(2, 0, &data[..3 * BS]).unwrap();
    let st = s.engine().stats();
    assert_eq!(st.slices[0].dirty_blocks, 5, "{:?}", st.slices);
    assert_eq!(st.slices[1].dirty_blocks, 8, "{:?}", st.slices);
    s.sync_all().unwrap();
}

#[test]
fn engine_store_synced_writes_survive_a_power_cut_unsynced_do_not() {
    let dir = tempfile::tempdir().unwrap();
    let devs = file_devices(dir.path(), 2);
    let (backend, power) = PowerLossBackend::new(
        Arc::new(PsyncBackend) as Arc<dyn Backend>,
        PowerLossOptions::default(),
    );
    let s = EngineStore::builder(&devs)
        .with_cache_bytes(4 << 20)
        .with_backend(Arc::new(backend))
        .build()
        .unwrap();
    let kept = pattern(1, 2 * BS);
    let lost = pattern(2, BS);
    s.write_at(0, 0, &kept).unwrap();
    s.write_at(1, 4 * BLOCK_SIZE, &kept).unwrap();
    s.sync(0).unwrap();
    s.sync(1).unwrap();
    // Overwrite part of a synced range and write new blocks, then lose power.
    s.write_at(0, 0, &lost).unwrap();
    s.write_at(0, 8 * BLOCK_SIZE, &lost).unwrap();
    s.write_at(1, 0, &lost).unwrap();
    power.power_cut().unwrap();
    let e = s.sync(0).unwrap_err();
    assert!(e.to_string().contains("dev0"), "{e}");
    drop(s);

    let s = FileStore::open(&devs, true).unwrap();
    let mut buf = vec![0u8; 2 * BS];
    s.read_at(0, 0, &mut buf).unwrap();
    assert_eq!(
        buf, kept,
        "dev0's synced blocks survive, the later overwrite does not"
    );
    s.read_at(1, 4 * BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(buf, kept, "dev1's synced blocks survive");
    let mut one = vec![0u8; BS];
    s.read_at(0, 8 * BLOCK_SIZE, &mut one).unwrap();
    assert_eq!(one, vec![0; BS], "an unsynced write is dropped");
    s.read_at(1, 0, &mut one).unwrap();
    assert_eq!(one, vec![0; BS], "an unsynced write is dropped");
}

#[test]
fn ram_zone_keeps_the_contract_and_lives_on_its_node() {
    let spec: ZoneSpec = format!("0:{DEV_BYTES}").parse().unwrap();
    let s = match ZoneStore::new(&[spec.clone(), spec]) {
        Ok(s) => s,
        Err(e) => panic!("a RAM zone on node 0 must map and bind here: {e}"),
    };
    assert_eq!(s.devices()[0].kind, DeviceKind::RamZone);
    contract("ram zone", &s);
    for p in s.placement_check().unwrap() {
        assert_eq!(p.pages, DEV_BYTES as usize / numaio_sys::page_size());
        assert_eq!(p.on_node, p.pages, "{p:?}");
        assert_eq!(p.percent_on_node(), 100.0);
    }
}

#[test]
fn ram_zone_on_a_missing_node_is_refused() {
    let e = ZoneStore::new(&["4000:64K".parse().unwrap()])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("node 4000") && e.contains("mbind"), "{e}");
}

#[test]
fn pmem_zone_keeps_the_contract_and_its_data() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pmem");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(DEV_BYTES)
        .unwrap();
    let spec: ZoneSpec = format!("0:{DEV_BYTES}:{}", path.display()).parse().unwrap();
    {
        let s = ZoneStore::new(std::slice::from_ref(&spec)).unwrap();
        assert_eq!(s.devices()[0].kind, DeviceKind::PmemZone);
        contract("pmem zone", &s);
    }
    // Unmapped and mapped again: the data is in the backing.
    let s = ZoneStore::new(std::slice::from_ref(&spec)).unwrap();
    let mut buf = vec![0u8; 3 * BS];
    s.read_at(0, 2 * BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(buf, pattern(7, 3 * BS));
    drop(s);
    assert_eq!(
        &std::fs::read(&path).unwrap()[2 * BS..5 * BS],
        &pattern(7, 3 * BS)[..]
    );

    // A zone larger than its backing is refused before mapping.
    let big: ZoneSpec = format!("0:{}:{}", DEV_BYTES * 2, path.display())
        .parse()
        .unwrap();
    let e = ZoneStore::new(&[big]).err().unwrap().to_string();
    assert!(e.contains("holds only") && e.contains("pmem"), "{e}");

    // The same backing twice, also through a symlink, would alias: refused.
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(&path, &link).unwrap();
    let again: ZoneSpec = format!("0:8K:{}", link.display()).parse().unwrap();
    let e = ZoneStore::new(&[spec, again]).err().unwrap().to_string();
    assert!(e.contains("already the backing"), "{e}");
}

#[test]
fn zone_writers_of_one_range_never_tear_each_other() {
    let spec: ZoneSpec = "0:4M".parse().unwrap();
    let s = Arc::new(ZoneStore::new(&[spec]).unwrap());
    // One range inside a lock chunk, one across the 1 MiB chunk boundary.
    let ranges = [(0u64, BS), ((1 << 20) - 2048, 2 * BS)];
    let threads: Vec<_> = (1..=4u8)
        .map(|v| {
            let s = s.clone();
            std::thread::spawn(move || {
                let mut buf = vec![0u8; 2 * BS];
                for _ in 0..2000 {
                    for &(off, len) in &ranges {
                        s.write_at(0, off, &vec![v; len]).unwrap();
                        s.read_at(0, off, &mut buf[..len]).unwrap();
                        let first = buf[0];
                        assert!(buf[..len].iter().all(|&b| b == first), "torn read at {off}");
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
}

#[test]
fn file_and_engine_stores_keep_the_contract_on_block_devices() {
    let (a, b) = match (Loop::new(DEV_BYTES), Loop::new(DEV_BYTES)) {
        (Ok(a), Ok(b)) => (a, b),
        (Err(why), _) | (_, Err(why)) => numaio_testkit::skip!(LOOP_DEVICE, "{why}"),
    };
    let devs: Vec<DeviceInfo> = [&a, &b]
        .iter()
        .map(|l| DeviceInfo {
            path: l.dev.clone(),
            node: 0,
            bytes: DEV_BYTES,
            kind: DeviceKind::BlockDevice,
        })
        .collect();
    {
        let s = FileStore::open(&devs, false).unwrap();
        contract("file on block devices", &s);
    }
    {
        let s = EngineStore::builder(&devs)
            .with_cache_bytes(4 << 20)
            .build()
            .unwrap();
        // The engine sees the whole device (a block device's st_size is 0).
        let mut buf = vec![0u8; 3 * BS];
        s.read_at(1, 2 * BLOCK_SIZE, &mut buf).unwrap();
        assert_eq!(
            buf,
            pattern(8, 3 * BS),
            "the FileStore's data reads through the engine"
        );
        // Held exclusively while the engine store lives.
        let e = FileStore::open(&devs, true).err().unwrap().to_string();
        assert!(e.contains("busy"), "{e}");
        contract("engine on block devices", &s);
    }
    let s = after_close(|| FileStore::open(&devs, true)).unwrap();
    let mut buf = vec![0u8; BS];
    s.read_at(0, DEV_BYTES - BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(
        buf,
        pattern(2, BS),
        "the engine's synced last block is on the device"
    );
}

/// Opens a block device exclusively right after a store over it was dropped: udev opens a
/// device briefly when its exclusive holder closes it, so the open may meet EBUSY for a
/// moment; it is retried for up to 2 s.
fn after_close<T>(
    open: impl Fn() -> Result<T, numaio_fs::FsError>,
) -> Result<T, numaio_fs::FsError> {
    for _ in 0..100 {
        match open() {
            Err(e) if e.to_string().contains("busy") => {
                std::thread::sleep(std::time::Duration::from_millis(20))
            }
            r => return r,
        }
    }
    open()
}

#[test]
fn pmem_zone_on_a_block_device_keeps_the_contract_and_holds_it() {
    let lo = match Loop::new(DEV_BYTES) {
        Ok(l) => l,
        Err(why) => numaio_testkit::skip!(LOOP_DEVICE, "{why}"),
    };
    let spec: ZoneSpec = format!("0:{DEV_BYTES}:{}", lo.dev.display())
        .parse()
        .unwrap();
    {
        let s = ZoneStore::new(std::slice::from_ref(&spec)).unwrap();
        contract("pmem zone on a block device", &s);
        // Held exclusively while mapped.
        let e = ZoneStore::new(std::slice::from_ref(&spec))
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("Device or resource busy"), "{e}");
    }
    let too_big: ZoneSpec = format!("0:{}:{}", DEV_BYTES * 2, lo.dev.display())
        .parse()
        .unwrap();
    let e = after_close(|| ZoneStore::new(std::slice::from_ref(&too_big)))
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("holds only"), "{e}");
    let s = after_close(|| ZoneStore::new(std::slice::from_ref(&spec))).unwrap();
    let mut buf = vec![0u8; 3 * BS];
    s.read_at(0, 2 * BLOCK_SIZE, &mut buf).unwrap();
    assert_eq!(buf, pattern(7, 3 * BS), "synced zone data is on the device");
}
