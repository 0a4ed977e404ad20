//! numaio-fs's on-device decoders (device label, volume header, journal records, checkpoint
//! payloads) and mount and fsck over an arbitrary device 0 image: errors, never a panic,
//! a hang or an unbounded allocation.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numaio_fs::format::{self, Header, Label};
use numaio_fs::fsck::{fsck, FsckOptions};
use numaio_fs::meta::{Attr, Kind, Meta, Record, ROOT_INO};
use numaio_fs::store::{BlockStore, MemStore};
use numaio_fs::{Fs, MountOptions, PlacementPolicy, SEEK_DATA, SEEK_HOLE};
use std::path::Path;
use std::sync::Arc;

fn fresh_meta() -> Meta {
    Meta::new(Attr {
        kind: Kind::Dir,
        mode: 0o755,
        uid: 0,
        gid: 0,
        nlink: 2,
        size: 0,
        atime: 0,
        mtime: 0,
        ctime: 0,
        policy: PlacementPolicy::WriterLocal,
        policy_set: true,
        home: None,
        parent: ROOT_INO,
        meta_node: 0,
    })
}

fuzz_target!(|data: &[u8]| {
    let p = Path::new("fuzz");
    let _ = Label::decode(data, p);
    if let Ok(h) = Header::decode(data, p) {
        assert!(h.group_count() > 0);
    }
    // Journal records (framed and checksummed, then as bare payloads) applied to a volume.
    let mut meta = fresh_meta();
    let mut pos = 0;
    while let Some((_, payload, len)) = format::read_record(&[0; 16], &data[pos..]) {
        if let Ok(recs) = format::decode_payload::<Vec<Record>>(payload, p, "record") {
            for r in &recs {
                let _ = meta.apply(r);
            }
        }
        pos += len;
    }
    if let Ok(recs) = format::decode_payload::<Vec<Record>>(data, p, "record") {
        for r in &recs {
            let _ = meta.apply(r);
        }
        assert!(meta.validate().is_ok());
    }
    // A checkpoint payload: applying records to it after validation must not panic.
    if let Ok(mut m) = format::decode_payload::<Meta>(data, p, "checkpoint") {
        if m.validate().is_ok() {
            m.after_decode();
            let _ = m.apply(&Record::Unmap { ino: ROOT_INO + 1, from: 0, to: u64::MAX });
        }
    }
    // The bytes as the start of device 0 of a one-device volume.
    let s = MemStore::new(&[(0, 1 << 20)]);
    let n = data.len().min(1 << 20);
    s.write_at(0, 0, &data[..n]).unwrap();
    let s = Arc::new(s);
    let _ = fsck(&*s, &FsckOptions { repair: false });
    if let Ok(fs) = Fs::mount(s, MountOptions { read_only: true, ..Default::default() }) {
        let _ = fs.statfs();
        let _ = fs.readdir(ROOT_INO, 0);
        // Reads and seeks walk the extent maps and unwritten runs as decoded.
        let inos: Vec<u64> = fs.meta_snapshot().inodes.keys().copied().take(16).collect();
        let mut buf = [0u8; 8192];
        for ino in inos {
            let _ = fs.read(ino, 4000, &mut buf);
            for off in [0, 4096, 1 << 30] {
                let _ = fs.seek(ino, off, SEEK_DATA);
                let _ = fs.seek(ino, off, SEEK_HOLE);
            }
        }
    }
});
