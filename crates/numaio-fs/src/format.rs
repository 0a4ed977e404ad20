//! The on-device format: device labels, the volume header, checkpoint slots and journal
//! records.
//!
//! Every structure is a small fixed header (magic, format version, payload length, crc32c)
//! followed by a postcard-encoded payload. The decoders take any bytes: lengths are checked
//! before they are used and every failure is a [`FsError::Corrupt`] that names the device
//! and the structure, never a panic.
//!
//! Layout (block size 4096):
//!
//! | where | blocks | what |
//! |---|---|---|
//! | every device, block 0 | 1 | device label |
//! | device 0, blocks 1–4 | 4 | volume header |
//! | device 0 | `checkpoint_blocks` | checkpoint slot A |
//! | device 0 | `checkpoint_blocks` | checkpoint slot B |
//! | device 0 | `journal_blocks` | journal |
//! | rest of every device | `group_blocks` each | allocation groups; a tail shorter than a group is unused |

use crate::alloc::GroupInfo;
use crate::store::BlockStore;
use crate::{FsError, PlacementPolicy, BLOCK_SIZE};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Version of the on-device format written by this code. Version 4 added unwritten
/// (preallocated) extents: an inode's `unwritten` runs in checkpoints and three journal
/// records. Version 5 added data in journal records (`Record::Data`), which recovery
/// writes back.
pub const FORMAT_VERSION: u32 = 5;
/// Oldest format version this code reads. A volume of version 3 or 4 is upgraded in place
/// by its first read-write mount or by `numaio fsck --repair` (its checkpoint is rewritten
/// in the current layout, then its labels and header): nothing else changed in between.
pub const OLDEST_VERSION: u32 = 3;
/// Magic of a device label.
pub const LABEL_MAGIC: &[u8; 8] = b"NUMAIOFS";
/// Magic of the volume header.
pub const HEADER_MAGIC: &[u8; 8] = b"NUMAIOVH";
/// Magic of a checkpoint.
pub const CHECKPOINT_MAGIC: &[u8; 8] = b"NUMAIOCP";
/// Magic of a journal record.
pub const RECORD_MAGIC: u32 = 0x4a52_4e4c; // "JRNL"
/// Blocks of the volume header on device 0 (after the label).
pub const HEADER_BLOCKS: u64 = 4;
/// Most allocation groups in a volume (the allocator keeps a little state per group).
pub const MAX_GROUPS: u64 = 1 << 24;
/// Bytes before the payload of a label, header or checkpoint: magic, version, seq, length, crc.
pub const FRAME_HEADER: usize = 8 + 4 + 8 + 8 + 4;
/// Bytes before the payload of a journal record: magic, length, seq, crc.
pub const RECORD_HEADER: usize = 4 + 4 + 8 + 4;

/// Block 0 of every device: which volume and which device of it this is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub uuid: [u8; 16],
    pub dev_index: u16,
    pub dev_count: u16,
    pub node: u32,
    pub bytes: u64,
}

/// One device as recorded in the volume header.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceEntry {
    pub node: u32,
    pub bytes: u64,
    /// The path given to mkfs, for messages only.
    pub path: PathBuf,
}

/// The volume header on device 0.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Header {
    pub uuid: [u8; 16],
    pub devices: Vec<DeviceEntry>,
    pub group_blocks: u64,
    pub policy: PlacementPolicy,
    /// First block of checkpoint slot A (slot B follows it).
    pub checkpoint_start: u64,
    pub checkpoint_blocks: u64,
    pub journal_start: u64,
    pub journal_blocks: u64,
    /// Creation time, ns since the epoch.
    pub created_ns: i64,
}

impl Header {
    /// First block after device 0's metadata area.
    pub fn meta_end(&self) -> u64 {
        self.journal_start + self.journal_blocks
    }

    /// First block on device `dev` usable for groups.
    pub fn data_start(&self, dev: usize) -> u64 {
        if dev == 0 {
            self.meta_end()
        } else if self.is_shard_dev(dev) {
            1 + 2 * self.checkpoint_blocks
        } else {
            1
        }
    }

    /// The nodes of the volume (ascending) with the device holding each one's checkpoint
    /// shard: the node's first device.
    pub fn shard_devices(&self) -> Vec<(u32, u16)> {
        let mut m: std::collections::BTreeMap<u32, u16> = std::collections::BTreeMap::new();
        for (i, d) in self.devices.iter().enumerate() {
            m.entry(d.node).or_insert(i as u16);
        }
        m.into_iter().collect()
    }

    /// Whether device `dev` holds a checkpoint shard (device 0 always does).
    pub fn is_shard_dev(&self, dev: usize) -> bool {
        dev == 0
            || self
                .devices
                .get(dev)
                .is_some_and(|d| !self.devices[..dev].iter().any(|e| e.node == d.node))
    }

    /// First block of checkpoint slot `slot` (0 = A, 1 = B) on shard device `dev`.
    pub fn slot_start(&self, dev: u16, slot: usize) -> u64 {
        let base = if dev == 0 { self.checkpoint_start } else { 1 };
        base + slot as u64 * self.checkpoint_blocks
    }

    /// Number of allocation groups, computed without listing them.
    pub fn group_count(&self) -> u64 {
        let mut n = 0u64;
        for (i, d) in self.devices.iter().enumerate() {
            let blocks = (d.bytes / BLOCK_SIZE).saturating_sub(self.data_start(i));
            n = n.saturating_add(blocks / self.group_blocks.max(1));
        }
        n
    }

    /// The allocation groups: whole groups only, so each lies on one device.
    pub fn groups(&self) -> Vec<GroupInfo> {
        let mut out = Vec::new();
        for (i, d) in self.devices.iter().enumerate() {
            let mut start = self.data_start(i);
            let end = d.bytes / BLOCK_SIZE;
            while self.group_blocks > 0 && start.saturating_add(self.group_blocks) <= end {
                out.push(GroupInfo {
                    dev: i as u16,
                    node: d.node,
                    start,
                    blocks: self.group_blocks,
                });
                start += self.group_blocks;
            }
        }
        out
    }

    /// Checks the geometry read from a device: it must describe a volume this code can use.
    pub fn check(&self, device: &Path) -> Result<(), FsError> {
        let bad = |what: String| corrupt(device, format!("volume header: {what}"));
        if self.devices.is_empty() || self.devices.len() > u16::MAX as usize {
            return Err(bad(format!("{} devices", self.devices.len())));
        }
        if self.group_blocks == 0 || self.checkpoint_blocks == 0 || self.journal_blocks == 0 {
            return Err(bad("zero-sized group, checkpoint or journal".into()));
        }
        if self.checkpoint_start != 1 + HEADER_BLOCKS {
            return Err(bad(format!(
                "checkpoint at block {}",
                self.checkpoint_start
            )));
        }
        let cp_end = self
            .checkpoint_blocks
            .checked_mul(2)
            .and_then(|b| b.checked_add(self.checkpoint_start));
        if cp_end != Some(self.journal_start) {
            return Err(bad("journal does not follow the checkpoints".into()));
        }
        match self.journal_start.checked_add(self.journal_blocks) {
            Some(end) if end.saturating_mul(BLOCK_SIZE) <= self.devices[0].bytes => {}
            _ => return Err(bad("metadata area past the end of device 0".into())),
        }
        for (i, d) in self.devices.iter().enumerate().skip(1) {
            if self.is_shard_dev(i)
                && (1 + 2 * self.checkpoint_blocks).saturating_mul(BLOCK_SIZE) > d.bytes
            {
                return Err(bad(format!(
                    "checkpoint slots past the end of device {i} ({})",
                    d.path.display()
                )));
            }
        }
        let groups = self.group_count();
        if groups == 0 {
            return Err(bad("no allocation group".into()));
        }
        if groups > MAX_GROUPS {
            return Err(bad(format!(
                "{groups} allocation groups (at most {MAX_GROUPS})"
            )));
        }
        Ok(())
    }
}

fn corrupt(device: &Path, what: String) -> FsError {
    FsError::Corrupt {
        device: device.to_path_buf(),
        what,
    }
}

/// crc32c over the volume UUID, the sequence number and the payload: a record or
/// checkpoint left behind by an earlier volume on the same device never checks out.
pub fn crc(uuid: &[u8; 16], seq: u64, payload: &[u8]) -> u32 {
    let c = crc32c::crc32c(uuid);
    let c = crc32c::crc32c_append(c, &seq.to_le_bytes());
    crc32c::crc32c_append(c, payload)
}

/// Frames `payload` as a label, header or checkpoint: `magic, version, seq, len, crc`.
pub fn frame(magic: &[u8; 8], uuid: &[u8; 16], seq: u64, payload: &[u8]) -> Vec<u8> {
    frame_as(FORMAT_VERSION, magic, uuid, seq, payload)
}

/// [`frame`] with another format version in the frame (tests forge older volumes with it).
pub fn frame_as(
    version: u32,
    magic: &[u8; 8],
    uuid: &[u8; 16],
    seq: u64,
    payload: &[u8],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(FRAME_HEADER + payload.len());
    out.extend_from_slice(magic);
    out.extend_from_slice(&version.to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc(uuid, seq, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The frame header of a label, header or checkpoint: `(seq, payload length, crc)`, after
/// checking magic and version. `what` names the structure in errors.
pub fn frame_header(
    magic: &[u8; 8],
    bytes: &[u8],
    device: &Path,
    what: &str,
) -> Result<(u64, u64, u32), FsError> {
    if bytes.len() < FRAME_HEADER {
        return Err(corrupt(device, format!("{what}: truncated")));
    }
    if &bytes[..8] != magic {
        return Err(corrupt(
            device,
            format!("{what}: bad magic (not a numaio-fs volume, or damaged)"),
        ));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version > FORMAT_VERSION {
        return Err(corrupt(
            device,
            format!(
                "{what}: numaio-fs format version {version}, newer than this numaio reads \
                 (versions {OLDEST_VERSION} to {FORMAT_VERSION}): use the newer numaio that \
                 wrote it"
            ),
        ));
    }
    if version < OLDEST_VERSION {
        return Err(corrupt(
            device,
            format!(
                "{what}: numaio-fs format version {version}, older than this numaio reads \
                 (versions {OLDEST_VERSION} to {FORMAT_VERSION}): copy the files off with the \
                 numaio that made the volume, then run `numaio mkfs` again"
            ),
        ));
    }
    let seq = u64::from_le_bytes(bytes[12..20].try_into().expect("8 bytes"));
    let len = u64::from_le_bytes(bytes[20..28].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(bytes[28..32].try_into().expect("4 bytes"));
    Ok((seq, len, crc))
}

/// The format version in the frame at the start of `bytes` (a label, header or
/// checkpoint), if it has `magic`.
pub fn frame_version(magic: &[u8; 8], bytes: &[u8]) -> Option<u32> {
    if bytes.len() < FRAME_HEADER || &bytes[..8] != magic {
        return None;
    }
    Some(u32::from_le_bytes(bytes[8..12].try_into().ok()?))
}

/// Decodes a framed structure whose payload is all in `bytes`. For labels the UUID is only
/// known after decoding, so `uuid` is `None` and the payload's own UUID is checked.
pub fn unframe<'a>(
    magic: &[u8; 8],
    uuid: Option<&[u8; 16]>,
    bytes: &'a [u8],
    device: &Path,
    what: &str,
) -> Result<(u64, &'a [u8]), FsError> {
    let (seq, len, want) = frame_header(magic, bytes, device, what)?;
    let avail = (bytes.len() - FRAME_HEADER) as u64;
    if len > avail {
        return Err(corrupt(
            device,
            format!("{what}: length {len} past the end of its area ({avail} bytes)"),
        ));
    }
    let payload = &bytes[FRAME_HEADER..FRAME_HEADER + len as usize];
    let uuid = match uuid {
        Some(u) => *u,
        None => {
            // Labels and headers start with the UUID; a payload too short has no valid crc.
            let mut u = [0u8; 16];
            if payload.len() >= 16 {
                u.copy_from_slice(&payload[..16]);
            }
            u
        }
    };
    if crc(&uuid, seq, payload) != want {
        return Err(corrupt(device, format!("{what}: checksum mismatch")));
    }
    Ok((seq, payload))
}

fn decode<'a, T: Deserialize<'a>>(
    payload: &'a [u8],
    device: &Path,
    what: &str,
) -> Result<T, FsError> {
    postcard::from_bytes(payload).map_err(|e| corrupt(device, format!("{what}: undecodable ({e})")))
}

/// Postcard encoding of a structure; encoding in-memory values cannot fail short of memory.
pub fn encode<T: Serialize>(v: &T) -> Vec<u8> {
    postcard::to_allocvec(v).expect("postcard encodes every in-memory value")
}

impl Label {
    /// The label block (exactly [`BLOCK_SIZE`] bytes).
    pub fn to_block(&self) -> Vec<u8> {
        // The UUID leads the payload (field order), which `unframe` relies on.
        let mut b = frame(LABEL_MAGIC, &self.uuid, 0, &encode(self));
        b.resize(BLOCK_SIZE as usize, 0);
        b
    }

    pub fn decode(bytes: &[u8], device: &Path) -> Result<Label, FsError> {
        let (_, payload) = unframe(LABEL_MAGIC, None, bytes, device, "device label")?;
        decode(payload, device, "device label")
    }
}

impl Header {
    /// The header blocks ([`HEADER_BLOCKS`] blocks); `None` when it does not fit.
    pub fn to_blocks(&self) -> Option<Vec<u8>> {
        let mut b = frame(HEADER_MAGIC, &self.uuid, 0, &encode(self));
        let size = (HEADER_BLOCKS * BLOCK_SIZE) as usize;
        if b.len() > size {
            return None;
        }
        b.resize(size, 0);
        Some(b)
    }

    pub fn decode(bytes: &[u8], device: &Path) -> Result<Header, FsError> {
        let (_, payload) = unframe(HEADER_MAGIC, None, bytes, device, "volume header")?;
        let h: Header = decode(payload, device, "volume header")?;
        h.check(device)?;
        Ok(h)
    }
}

/// The oldest format version among the labels and the volume header on `store` (all
/// readable, as [`crate::Fs::check_labels`] found): below [`FORMAT_VERSION`] when the
/// volume is to be upgraded.
pub fn volume_version(store: &dyn BlockStore) -> Result<u32, FsError> {
    let bs = BLOCK_SIZE as usize;
    let mut b = vec![0u8; bs];
    store.read_at(0, BLOCK_SIZE, &mut b)?;
    let mut v = frame_version(HEADER_MAGIC, &b).unwrap_or(FORMAT_VERSION);
    for dev in 0..store.devices().len() {
        store.read_at(dev as u16, 0, &mut b)?;
        v = v.min(frame_version(LABEL_MAGIC, &b).unwrap_or(FORMAT_VERSION));
    }
    Ok(v)
}

/// Rewrites every device's label and the volume header in the current format version and
/// syncs them. The caller has written the metadata as a checkpoint in the current layout
/// first, so a crash in between leaves a volume this code still reads (and upgrades again).
pub fn rewrite_labels(store: &dyn BlockStore, header: &Header) -> Result<(), FsError> {
    let devs = store.devices();
    let blocks = header.to_blocks().ok_or_else(|| {
        corrupt(
            &devs.first().map(|d| d.path.clone()).unwrap_or_default(),
            "volume header: too large to rewrite".into(),
        )
    })?;
    store.write_at(0, BLOCK_SIZE, &blocks)?;
    let mut b = vec![0u8; BLOCK_SIZE as usize];
    for (i, d) in devs.iter().enumerate() {
        store.read_at(i as u16, 0, &mut b)?;
        let l = Label::decode(&b, &d.path)?;
        store.write_at(i as u16, 0, &l.to_block())?;
    }
    for i in 0..devs.len() {
        store.sync(i as u16)?;
    }
    Ok(())
}

/// A journal record: `[magic u32][len u32][seq u64][crc32c u32][payload]`.
pub fn record(uuid: &[u8; 16], seq: u64, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(RECORD_HEADER + payload.len());
    out.extend_from_slice(&RECORD_MAGIC.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&crc(uuid, seq, payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// Reads the journal record at the start of `bytes`: `Some((seq, payload, record length))`
/// when a whole record with a good checksum is there, `None` at the end of the journal (a
/// zero or torn record, a checksum mismatch, a length past the area).
pub fn read_record<'a>(uuid: &[u8; 16], bytes: &'a [u8]) -> Option<(u64, &'a [u8], usize)> {
    if bytes.len() < RECORD_HEADER {
        return None;
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().ok()?);
    if magic != RECORD_MAGIC {
        return None;
    }
    let len = u32::from_le_bytes(bytes[4..8].try_into().ok()?) as usize;
    let seq = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let want = u32::from_le_bytes(bytes[16..20].try_into().ok()?);
    let end = RECORD_HEADER.checked_add(len)?;
    let payload = bytes.get(RECORD_HEADER..end)?;
    (crc(uuid, seq, payload) == want).then_some((seq, payload, end))
}

/// Decodes a journal or checkpoint payload with postcard.
pub fn decode_payload<'a, T: Deserialize<'a>>(
    payload: &'a [u8],
    device: &Path,
    what: &str,
) -> Result<T, FsError> {
    decode(payload, device, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            uuid: [7; 16],
            devices: vec![
                DeviceEntry {
                    node: 0,
                    bytes: 1 << 20,
                    path: "a".into(),
                },
                DeviceEntry {
                    node: 1,
                    bytes: 1 << 20,
                    path: "b".into(),
                },
            ],
            group_blocks: 16,
            policy: PlacementPolicy::WriterLocal,
            checkpoint_start: 5,
            checkpoint_blocks: 8,
            journal_start: 21,
            journal_blocks: 8,
            created_ns: 1,
        }
    }

    #[test]
    fn label_and_header_round_trip_and_reject_damage() {
        let p = Path::new("dev");
        let l = Label {
            uuid: [3; 16],
            dev_index: 1,
            dev_count: 2,
            node: 1,
            bytes: 1 << 20,
        };
        let mut b = l.to_block();
        assert_eq!(Label::decode(&b, p).unwrap(), l);
        b[40] ^= 1;
        assert!(matches!(Label::decode(&b, p), Err(FsError::Corrupt { .. })));
        let h = header();
        let b = h.to_blocks().unwrap();
        assert_eq!(Header::decode(&b, p).unwrap(), h);
        // Groups: device 0 from block 29 (256 blocks: 14 whole groups), device 1 (node 1's
        // first) after node 1's checkpoint slots, from block 17.
        let g = h.groups();
        assert_eq!(g.iter().filter(|g| g.dev == 0).count(), (256 - 29) / 16);
        assert_eq!(g.iter().filter(|g| g.dev == 1).count(), (256 - 17) / 16);
        assert_eq!(h.shard_devices(), [(0, 0), (1, 1)]);
        assert_eq!(
            (h.slot_start(0, 1), h.slot_start(1, 0), h.slot_start(1, 1)),
            (13, 1, 9)
        );
        let mut same_node = h.clone();
        same_node.devices[1].node = 0;
        assert_eq!(same_node.shard_devices(), [(0, 0)]);
        assert_eq!(same_node.data_start(1), 1);
        for n in 0..b.len().min(64) {
            assert!(Header::decode(&b[..n], p).is_err());
        }
    }

    #[test]
    fn records_stop_at_damage() {
        let u = [1; 16];
        let r = record(&u, 9, b"hello");
        assert_eq!(read_record(&u, &r), Some((9, &b"hello"[..], r.len())));
        assert_eq!(read_record(&[2; 16], &r), None);
        for n in 0..r.len() {
            assert_eq!(read_record(&u, &r[..n]), None);
        }
        let mut bad = r.clone();
        bad[4] = 0xff;
        assert_eq!(read_record(&u, &bad), None);
    }
}
