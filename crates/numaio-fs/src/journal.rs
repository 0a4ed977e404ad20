//! Durability of the metadata: a logical redo journal plus two checkpoint slots.
//!
//! The metadata lives in memory ([`crate::meta::Meta`]). A *commit* writes every change
//! made since the previous commit as one journal record (`[magic][len][seq][crc32c]
//! [payload]`, the payload being the postcard-encoded list of [`Record`]s) after the
//! previous record, and syncs device 0. One record per commit makes each commit atomic: a
//! torn record fails its checksum and recovery stops before it.
//!
//! When the journal is more than half full (or a commit would not fit in what is left), the
//! whole metadata is written as a *checkpoint* to the slot not holding the newest one, with
//! the sequence number of the last commit it contains: one shard per node, each on that
//! node's first device and holding the inodes whose metadata lives there
//! ([`crate::meta::shard`]). Every shard device is synced; only then does the journal start
//! again from its beginning. Records there from before the checkpoint carry
//! older sequence numbers, so recovery never mistakes them for new ones. The checksum
//! covers the volume UUID too, so nothing left by an earlier volume on the device is read.
//!
//! Recovery: the newest slot whose shards all check out and carry the same sequence number
//! (a checkpoint cut short between shards is never used), then the journal records from the
//! journal's start as long as each is whole, checks out and carries the next sequence
//! number.
//!
//! **Data in the record.** A commit that maps new blocks (or grows a file over a zeroed
//! tail) needs their data durable no later than the record. Flushing the data first and
//! the record after costs two device flushes; a commit may instead carry the contents of
//! those blocks in its record ([`Record::Data`]), with the blocks overwritten in place
//! since the previous commit (the flush may make the record durable before them), and
//! issue one flush for the record and every device written, at once, as ZFS's intent log
//! does with small writes. Only the
//! newest record can have been written without a completed flush after it (each commit
//! ends with one), so recovery writes back the data of the newest record only
//! ([`Recovered::data`], [`write_back`]): whatever of the in-place writes the cut lost is
//! restored from the record. The rule that makes that safe: once the newest record
//! carries data, nothing may make a later overwrite of those blocks durable without a
//! newer record, or a recovery would put the older contents back over data a sync had
//! acknowledged. So a sync that would flush data devices alone (a data-only `fdatasync`)
//! writes an empty record first when the newest one carries data ([`Journal::newest_data`]).

use crate::format::{self, Header, CHECKPOINT_MAGIC, FRAME_HEADER, RECORD_HEADER};
use crate::meta::shard::{self, Shard};
use crate::meta::{Meta, Record};
use crate::store::BlockStore;
use crate::{FsError, BLOCK_SIZE};
use std::path::{Path, PathBuf};

/// Where the journal stands on device 0.
#[derive(Debug, Clone)]
pub struct Journal {
    pub uuid: [u8; 16],
    pub header: Header,
    /// Bytes of the journal in use since the last checkpoint.
    pub pos: u64,
    /// Contents of the journal block holding `pos` (rewritten whole with each commit).
    tail: Vec<u8>,
    /// Slot holding the newest checkpoint.
    pub active_slot: usize,
    /// Sequence number of the last durable commit.
    pub seq: u64,
    /// Encoded size of the newest checkpoint, for the space estimate.
    pub checkpoint_bytes: u64,
    pub device: PathBuf,
    /// Whether the newest durable record carries data ([`Record::Data`]): until a newer
    /// record is durable, a recovery would write that data back.
    pub newest_data: bool,
}

/// One commit's journal blocks, ready to write at `offset` of device 0.
#[derive(Debug)]
pub struct JournalWrite {
    pub offset: u64,
    pub buf: Vec<u8>,
    seq: u64,
    first_block: u64,
    rec_len: u64,
    data: bool,
}

/// What recovery found.
#[derive(Debug)]
pub struct Recovered {
    pub meta: Meta,
    pub journal: Journal,
    /// Sequence number of the checkpoint used.
    pub checkpoint_seq: u64,
    /// Journal records replayed on top of it.
    pub replayed: u64,
    /// The [`Record::Data`] of the newest record replayed, checked to lie in the volume's
    /// data areas: to be written back ([`write_back`]) before anything else is written.
    pub data: Vec<Record>,
}

fn corrupt(device: &Path, what: String) -> FsError {
    FsError::Corrupt {
        device: device.to_path_buf(),
        what,
    }
}

impl Journal {
    pub fn capacity(&self) -> u64 {
        self.header.journal_blocks * BLOCK_SIZE
    }

    pub fn slot_capacity(&self) -> u64 {
        self.header.checkpoint_blocks * BLOCK_SIZE
    }

    /// Whether a record with a payload of `payload` bytes fits after what is there.
    pub fn fits(&self, payload: usize) -> bool {
        self.pos + (RECORD_HEADER + payload) as u64 <= self.capacity()
    }

    /// Writes the encoded records `payload` as commit `seq` (the next sequence number) and syncs
    /// device 0. The caller checked [`Journal::fits`].
    pub fn append(
        &mut self,
        store: &dyn BlockStore,
        seq: u64,
        payload: &[u8],
    ) -> Result<(), FsError> {
        let w = self.prepare(seq, payload, false);
        store.write_at(0, w.offset, &w.buf)?;
        store.sync(0)?;
        self.finish(w);
        Ok(())
    }

    /// The blocks to write for commit `seq` of `payload`, without changing the journal: a
    /// group commit writes and syncs them outside the file system's lock, then calls
    /// [`Journal::finish`]. Nothing else may be appended in between. `data`: whether the
    /// records carry data ([`Record::Data`]).
    pub fn prepare(&self, seq: u64, payload: &[u8], data: bool) -> JournalWrite {
        let rec = format::record(&self.uuid, seq, payload);
        let bs = BLOCK_SIZE as usize;
        let first_block = self.pos / BLOCK_SIZE;
        let in_block = (self.pos % BLOCK_SIZE) as usize;
        // The partial block is rewritten with the same leading bytes: a torn write of it
        // cannot damage the records already there.
        let mut buf = Vec::with_capacity((in_block + rec.len()).div_ceil(bs) * bs);
        buf.extend_from_slice(&self.tail[..in_block]);
        buf.extend_from_slice(&rec);
        let whole = buf.len().div_ceil(bs) * bs;
        buf.resize(whole, 0);
        JournalWrite {
            offset: (self.header.journal_start + first_block) * BLOCK_SIZE,
            buf,
            seq,
            first_block,
            rec_len: rec.len() as u64,
            data,
        }
    }

    /// Records that the write `w` from [`Journal::prepare`] is durable.
    pub fn finish(&mut self, w: JournalWrite) {
        let bs = BLOCK_SIZE as usize;
        self.pos += w.rec_len;
        let idx = ((self.pos / BLOCK_SIZE) - w.first_block) as usize * bs;
        self.tail = if idx + bs <= w.buf.len() {
            w.buf[idx..idx + bs].to_vec()
        } else {
            vec![0; bs]
        };
        self.seq = w.seq;
        self.newest_data = w.data;
    }

    /// Writes `meta` as checkpoint `seq` to the inactive slot of every node's shard device,
    /// syncs them all, and only then restarts the journal after it. [`FsError::NoSpace`]
    /// (before anything is written) when a node's shard does not fit in a slot.
    pub fn checkpoint(
        &mut self,
        store: &dyn BlockStore,
        meta: &Meta,
        seq: u64,
    ) -> Result<(), FsError> {
        let w = self.prepare_checkpoint(meta, seq)?;
        w.write(store)?;
        self.finish_checkpoint(w);
        Ok(())
    }

    /// Encodes `meta` as checkpoint `seq` for the inactive slot, without writing anything:
    /// a commit encodes under the file system's lock (the metadata must not change while it
    /// is encoded), then writes with [`CheckpointWrite::write`] outside it and calls
    /// [`Journal::finish_checkpoint`]. Nothing else may be appended or checkpointed in
    /// between. [`FsError::NoSpace`] when a node's shard does not fit in a slot.
    pub fn prepare_checkpoint(&self, meta: &Meta, seq: u64) -> Result<CheckpointWrite, FsError> {
        let slot = 1 - self.active_slot;
        let shards = encode_shards(&self.header, meta, seq)?;
        let bytes = shards.iter().map(|(_, f)| f.len() as u64).sum();
        let bs = BLOCK_SIZE as usize;
        let shards = shards
            .into_iter()
            .map(|(dev, mut f)| {
                f.resize(f.len().div_ceil(bs) * bs, 0);
                (dev, self.header.slot_start(dev, slot) * BLOCK_SIZE, f)
            })
            .collect();
        Ok(CheckpointWrite {
            shards,
            bytes,
            slot,
            seq,
        })
    }

    /// Records that the checkpoint `w` is durable: the journal restarts after it.
    pub fn finish_checkpoint(&mut self, w: CheckpointWrite) {
        self.active_slot = w.slot;
        self.pos = 0;
        self.tail = vec![0; BLOCK_SIZE as usize];
        self.seq = w.seq;
        self.checkpoint_bytes = w.bytes;
        self.newest_data = false;
    }
}

/// One checkpoint's framed shards, ready to write to the inactive slot.
#[derive(Debug)]
pub struct CheckpointWrite {
    /// `(device, byte offset, framed shard padded to whole blocks)`.
    shards: Vec<(u16, u64, Vec<u8>)>,
    /// The framed bytes, without the padding.
    bytes: u64,
    slot: usize,
    seq: u64,
}

impl CheckpointWrite {
    /// Writes every shard and syncs the devices written.
    pub fn write(&self, store: &dyn BlockStore) -> Result<(), FsError> {
        for (dev, at, f) in &self.shards {
            store.write_at(*dev, *at, f)?;
        }
        for (dev, _, _) in &self.shards {
            store.sync(*dev)?;
        }
        Ok(())
    }
}

/// Bytes of the framed shard of each node of `meta` (ascending nodes).
pub fn shard_sizes(header: &Header, meta: &Meta) -> Vec<(u32, u64)> {
    let nodes: Vec<u32> = header.shard_devices().iter().map(|x| x.0).collect();
    shard::split(meta, &nodes)
        .iter()
        .map(|s| (s.node, (FRAME_HEADER + format::encode(s).len()) as u64))
        .collect()
}

/// Encodes and frames every node's shard of `meta` as checkpoint `seq`: `(device, bytes)`.
/// [`FsError::NoSpace`] when one does not fit in a slot.
pub fn encode_shards(
    header: &Header,
    meta: &Meta,
    seq: u64,
) -> Result<Vec<(u16, Vec<u8>)>, FsError> {
    let devs = header.shard_devices();
    let nodes: Vec<u32> = devs.iter().map(|x| x.0).collect();
    let cap = header.checkpoint_blocks * BLOCK_SIZE;
    let mut out = Vec::with_capacity(devs.len());
    for (s, (_, dev)) in shard::split(meta, &nodes).iter().zip(&devs) {
        let framed = format::frame(CHECKPOINT_MAGIC, &header.uuid, seq, &format::encode(s));
        if framed.len() as u64 > cap {
            return Err(FsError::NoSpace);
        }
        out.push((*dev, framed));
    }
    Ok(out)
}

/// Writes a framed shard to `slot` of shard device `dev` (not synced).
pub fn write_shard(
    store: &dyn BlockStore,
    header: &Header,
    dev: u16,
    slot: usize,
    mut framed: Vec<u8>,
) -> Result<(), FsError> {
    let bs = BLOCK_SIZE as usize;
    framed.resize(framed.len().div_ceil(bs) * bs, 0);
    store.write_at(dev, header.slot_start(dev, slot) * BLOCK_SIZE, &framed)
}

/// Reads the shard in slot `slot` of shard device `dev`: `(seq, shard, framed size)`.
fn read_shard(
    store: &dyn BlockStore,
    header: &Header,
    dev: u16,
    slot: usize,
) -> Result<(u64, Shard, u64), FsError> {
    let device = store
        .devices()
        .get(dev as usize)
        .map(|d| d.path.clone())
        .unwrap_or_default();
    let what = if slot == 0 {
        "checkpoint A"
    } else {
        "checkpoint B"
    };
    let off = header.slot_start(dev, slot) * BLOCK_SIZE;
    let mut first = vec![0u8; BLOCK_SIZE as usize];
    store.read_at(dev, off, &mut first)?;
    let (_, len, _) = format::frame_header(CHECKPOINT_MAGIC, &first, &device, what)?;
    let cap = header.checkpoint_blocks * BLOCK_SIZE;
    if len > cap - FRAME_HEADER as u64 {
        return Err(corrupt(
            &device,
            format!("{what}: length {len} past the end of its slot ({cap} bytes)"),
        ));
    }
    let total = (FRAME_HEADER as u64 + len).div_ceil(BLOCK_SIZE) * BLOCK_SIZE;
    let mut all = vec![0u8; total as usize];
    store.read_at(dev, off, &mut all)?;
    let (seq, payload) =
        format::unframe(CHECKPOINT_MAGIC, Some(&header.uuid), &all, &device, what)?;
    // Version 3 shards lack the inodes' unwritten runs: read in their own layout.
    let sh: Shard = if format::frame_version(CHECKPOINT_MAGIC, &first) == Some(3) {
        format::decode_payload::<shard::ShardV3>(payload, &device, what)?.into()
    } else {
        format::decode_payload(payload, &device, what)?
    };
    Ok((seq, sh, FRAME_HEADER as u64 + len))
}

/// Reads checkpoint slot `slot` on every node: `(seq, meta, encoded size)` when every shard
/// checks out, carries the same sequence number and belongs where it was found.
pub fn read_checkpoint(
    store: &dyn BlockStore,
    header: &Header,
    slot: usize,
    device: &Path,
) -> Result<(u64, Meta, u64), FsError> {
    let what = if slot == 0 {
        "checkpoint A"
    } else {
        "checkpoint B"
    };
    let devs = header.shard_devices();
    let mut seq = None;
    let mut shards = Vec::with_capacity(devs.len());
    let mut bytes = 0;
    for &(node, dev) in &devs {
        let (s, sh, n) = read_shard(store, header, dev, slot)?;
        if *seq.get_or_insert(s) != s {
            return Err(corrupt(
                device,
                format!("{what}: shards of different checkpoints (a checkpoint cut short)"),
            ));
        }
        if sh.node != node || sh.shards as usize != devs.len() {
            return Err(corrupt(
                device,
                format!(
                    "{what}: the shard on device {dev} is node {}'s of {}, expected node \
                     {node}'s of {}",
                    sh.node,
                    sh.shards,
                    devs.len()
                ),
            ));
        }
        // An inode of a node the volume lacks is kept in the first shard (fsck reports it).
        let misplaced = |m: u32| {
            m != node && (devs.iter().any(|d| d.0 == m) || Some(node) != devs.first().map(|d| d.0))
        };
        if let Some((ino, i)) = sh.inodes.iter().find(|(_, i)| misplaced(i.attr.meta_node)) {
            return Err(corrupt(
                device,
                format!(
                    "{what}: inode {ino} of node {} in node {node}'s shard",
                    i.attr.meta_node
                ),
            ));
        }
        bytes += n;
        shards.push(sh);
    }
    let mut meta = shard::merge(shards).map_err(|e| corrupt(device, format!("{what}: {e}")))?;
    meta.validate()
        .map_err(|e| corrupt(device, format!("{what}: {e}")))?;
    meta.after_decode();
    Ok((seq.unwrap_or(0), meta, bytes))
}

/// Loads the metadata: newest valid checkpoint, then the journal.
pub fn recover(store: &dyn BlockStore, header: &Header) -> Result<Recovered, FsError> {
    let device = store
        .devices()
        .first()
        .map(|d| d.path.clone())
        .unwrap_or_default();
    let a = read_checkpoint(store, header, 0, &device);
    let b = read_checkpoint(store, header, 1, &device);
    let (slot, (cp_seq, mut meta, cp_bytes)) = match (a, b) {
        (Ok(a), Ok(b)) => {
            if b.0 > a.0 {
                (1, b)
            } else {
                (0, a)
            }
        }
        (Ok(a), Err(_)) => (0, a),
        (Err(_), Ok(b)) => (1, b),
        (Err(ea), Err(eb)) => {
            return Err(corrupt(
                &device,
                format!(
                    "no valid checkpoint ({ea}; {eb}); run `numaio fsck` on the volume \
                     (it cannot rebuild lost metadata: restore from a backup)"
                ),
            ))
        }
    };
    let jbytes = header.journal_blocks * BLOCK_SIZE;
    let mut j = vec![0u8; jbytes as usize];
    store.read_at(0, header.journal_start * BLOCK_SIZE, &mut j)?;
    let mut pos = 0usize;
    let mut seq = cp_seq;
    let mut replayed = 0;
    let mut data = Vec::new();
    while let Some((s, payload, len)) = format::read_record(&header.uuid, &j[pos..]) {
        if s != seq + 1 {
            break;
        }
        let records: Vec<Record> =
            format::decode_payload(payload, &device, &format!("journal record {s}"))?;
        data.clear();
        for r in &records {
            if let Record::Data { dev, start, bytes } = r {
                check_data(header, *dev, *start, bytes.len())
                    .map_err(|e| corrupt(&device, format!("journal record {s}: {e}")))?;
                data.push(r.clone());
            }
            meta.apply(r).map_err(|e| {
                corrupt(
                    &device,
                    format!("journal record {s} does not fit the metadata: {e}"),
                )
            })?;
        }
        pos += len;
        seq = s;
        replayed += 1;
    }
    let bs = BLOCK_SIZE as usize;
    let tb = pos / bs * bs;
    let mut tail = vec![0u8; bs];
    let keep = pos - tb;
    tail[..keep].copy_from_slice(&j[tb..pos]);
    Ok(Recovered {
        meta,
        checkpoint_seq: cp_seq,
        replayed,
        journal: Journal {
            newest_data: !data.is_empty(),
            uuid: header.uuid,
            header: header.clone(),
            pos: pos as u64,
            tail,
            active_slot: slot,
            seq,
            checkpoint_bytes: cp_bytes,
            device,
        },
        data,
    })
}

/// Why `len` bytes of data for blocks `start..` of device `dev` cannot be written back, if
/// they cannot: whole blocks, inside the device's data area.
fn check_data(header: &Header, dev: u16, start: u64, len: usize) -> Result<(), String> {
    let d = header
        .devices
        .get(dev as usize)
        .ok_or_else(|| format!("data for device {dev}, which the volume lacks"))?;
    let bs = BLOCK_SIZE as usize;
    if len == 0 || !len.is_multiple_of(bs) {
        return Err(format!("data of {len} bytes, not whole blocks"));
    }
    let end = start.checked_add((len / bs) as u64);
    if start < header.data_start(dev as usize) || end.is_none_or(|e| e > d.bytes / BLOCK_SIZE) {
        return Err(format!(
            "data for blocks {start}.. of device {dev}, outside its data area"
        ));
    }
    Ok(())
}

/// Writes back the data of the newest journal record ([`Recovered::data`]) and syncs the
/// devices written: the blocks then hold what that record made durable, whatever of the
/// in-place writes a power cut lost. Writing it again is harmless.
pub fn write_back(store: &dyn BlockStore, data: &[Record]) -> Result<(), FsError> {
    let mut devs = std::collections::BTreeSet::new();
    for r in data {
        if let Record::Data { dev, start, bytes } = r {
            store.write_at(*dev, start * BLOCK_SIZE, bytes)?;
            devs.insert(*dev);
        }
    }
    for d in devs {
        store.sync(d)?;
    }
    Ok(())
}
