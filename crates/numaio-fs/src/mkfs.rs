//! Formatting a volume: labels, the volume header, an empty root in checkpoint A.

use crate::format::{self, DeviceEntry, Header, Label, HEADER_BLOCKS};
use crate::meta::{Attr, Meta, ROOT_INO};
use crate::store::BlockStore;
use crate::{FsError, PlacementPolicy, BLOCK_SIZE};
use std::collections::BTreeSet;

/// How to format a volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MkfsOptions {
    /// The volume's default placement (the root directory's, inherited below it).
    pub policy: PlacementPolicy,
    /// Blocks per allocation group.
    pub group_blocks: u64,
    /// Blocks of the journal on device 0.
    pub journal_blocks: u64,
    /// Blocks of each of the two checkpoint slots on device 0: the whole metadata must fit
    /// in one (about 100 bytes per inode and per directory entry, 20 per extent).
    pub checkpoint_blocks: u64,
}

impl Default for MkfsOptions {
    fn default() -> Self {
        MkfsOptions {
            policy: PlacementPolicy::WriterLocal,
            group_blocks: 32768,
            journal_blocks: 2048,
            checkpoint_blocks: 16384,
        }
    }
}

impl MkfsOptions {
    /// The geometry for devices of `(bytes, node)` each, device 0 first: the sizes given (in
    /// blocks), the rest scaled to the devices. Journal and checkpoint slots take 1/64 of
    /// device 0 each (64 blocks to 8 MiB and to 64 MiB); groups are a power of two, 128 MiB
    /// at most, small enough that the smallest device holds at least 16 after the metadata
    /// areas it carries.
    pub fn sized(
        devs: &[(u64, u32)],
        policy: PlacementPolicy,
        group_blocks: Option<u64>,
        journal_blocks: Option<u64>,
        checkpoint_blocks: Option<u64>,
    ) -> MkfsOptions {
        let d0 = devs.first().map_or(0, |d| d.0) / BLOCK_SIZE;
        let journal_blocks = journal_blocks.unwrap_or((d0 / 64).clamp(64, 2048));
        let checkpoint_blocks = checkpoint_blocks.unwrap_or((d0 / 64).clamp(64, 16384));
        let group_blocks = group_blocks.unwrap_or_else(|| {
            let meta = 1 + HEADER_BLOCKS + 2 * checkpoint_blocks + journal_blocks;
            // Device 0 holds the metadata area; the first device of every other node its
            // checkpoint slots.
            let shard_dev = |i: usize| !devs[..i].iter().any(|d| d.1 == devs[i].1);
            let smallest = devs
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let first = if i == 0 {
                        meta
                    } else if shard_dev(i) {
                        1 + 2 * checkpoint_blocks
                    } else {
                        1
                    };
                    (d.0 / BLOCK_SIZE).saturating_sub(first)
                })
                .min()
                .unwrap_or(0);
            let n = (smallest / 16).max(1);
            (1u64 << (63 - n.leading_zeros())).clamp(16, 32768)
        });
        MkfsOptions {
            policy,
            group_blocks,
            journal_blocks,
            checkpoint_blocks,
        }
    }
}

/// Current time in ns since the epoch.
pub(crate) fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(i64::MAX as u128) as i64)
        .unwrap_or(0)
}

/// Formats the devices of `store` as one volume; returns its header.
pub fn mkfs(store: &dyn BlockStore, o: &MkfsOptions) -> Result<Header, FsError> {
    let devs = store.devices();
    if devs.is_empty() {
        return Err(FsError::Invalid("mkfs needs at least one device".into()));
    }
    if devs.len() > u16::MAX as usize {
        return Err(FsError::Invalid(format!(
            "{} devices: a volume holds at most {}",
            devs.len(),
            u16::MAX
        )));
    }
    let mut seen = BTreeSet::new();
    for d in devs {
        if !seen.insert(&d.path) {
            return Err(FsError::Invalid(format!(
                "{} is listed twice: give each device once",
                d.path.display()
            )));
        }
    }
    if o.group_blocks == 0 || o.journal_blocks == 0 || o.checkpoint_blocks == 0 {
        return Err(FsError::Invalid(
            "group, journal and checkpoint sizes must be at least one block".into(),
        ));
    }
    let checkpoint_start = 1 + HEADER_BLOCKS;
    let journal_start = o
        .checkpoint_blocks
        .checked_mul(2)
        .and_then(|b| b.checked_add(checkpoint_start))
        .ok_or_else(|| FsError::Invalid("checkpoint size too large".into()))?;
    let meta_end = journal_start
        .checked_add(o.journal_blocks)
        .ok_or_else(|| FsError::Invalid("journal size too large".into()))?;
    for (i, d) in devs.iter().enumerate() {
        let have = d.bytes / BLOCK_SIZE;
        // The first device of each node also holds that node's checkpoint shard slots.
        let shard_dev = i > 0 && !devs[..i].iter().any(|e| e.node == d.node);
        let first = if i == 0 {
            meta_end
        } else if shard_dev {
            1 + 2 * o.checkpoint_blocks
        } else {
            1
        };
        let need = first.saturating_add(o.group_blocks);
        if have < need {
            let meta = if i == 0 {
                format!(
                    " (device 0 also holds the label, header, checkpoints and journal: \
                     {meta_end} blocks)"
                )
            } else if shard_dev {
                format!(
                    " (the first device of node {} also holds its checkpoint slots: {first} \
                     blocks)",
                    d.node
                )
            } else {
                String::new()
            };
            return Err(FsError::Invalid(format!(
                "{}: {} bytes is too small for one allocation group of {} blocks of {} bytes{meta}; \
                 use a larger device or a smaller group size",
                d.path.display(),
                d.bytes,
                o.group_blocks,
                BLOCK_SIZE
            )));
        }
    }
    let nodes: Vec<u32> = devs
        .iter()
        .map(|d| d.node)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    crate::policy::check(&o.policy, &nodes)?;
    let mut uuid = [0u8; 16];
    getrandom::fill(&mut uuid).map_err(|e| {
        FsError::io(
            "getrandom",
            "drawing the volume UUID",
            std::io::Error::other(e.to_string()),
        )
    })?;
    let now = now_ns();
    let header = Header {
        uuid,
        devices: devs
            .iter()
            .map(|d| DeviceEntry {
                node: d.node,
                bytes: d.bytes,
                path: d.path.clone(),
            })
            .collect(),
        group_blocks: o.group_blocks,
        policy: o.policy.clone(),
        checkpoint_start,
        checkpoint_blocks: o.checkpoint_blocks,
        journal_start,
        journal_blocks: o.journal_blocks,
        created_ns: now,
    };
    if header.group_count() > format::MAX_GROUPS {
        return Err(FsError::Invalid(format!(
            "{} allocation groups: at most {} (use a larger group size)",
            header.group_count(),
            format::MAX_GROUPS
        )));
    }
    let hblocks = header.to_blocks().ok_or_else(|| {
        FsError::Invalid(format!(
            "the device list does not fit the volume header ({} bytes): use fewer devices \
             or shorter paths",
            HEADER_BLOCKS * BLOCK_SIZE
        ))
    })?;
    let root = Attr {
        // The volume default shows as the root's placement xattr.
        policy_set: true,
        ..Attr::root_owned_dir(0o755, o.policy.clone(), ROOT_INO, devs[0].node, now)
    };
    let meta = Meta::new(root);
    let shards = crate::journal::encode_shards(&header, &meta, 0)?;
    let zero = vec![0u8; BLOCK_SIZE as usize];
    // The metadata area first, the labels last: a volume whose mkfs was cut short has no
    // valid labels and is not mounted.
    for (i, _) in devs.iter().enumerate() {
        store.write_at(i as u16, 0, &zero)?;
    }
    store.write_at(0, BLOCK_SIZE, &hblocks)?;
    for (dev, framed) in shards {
        crate::journal::write_shard(store, &header, dev, 0, framed)?;
        store.write_at(dev, header.slot_start(dev, 1) * BLOCK_SIZE, &zero)?;
    }
    // The whole journal is written (zeros), not only its first block: on a volume file,
    // a commit appended to never-written blocks makes its fdatasync also commit the host
    // file system's block allocation, which costs more than the commit itself.
    let chunk = vec![0u8; (256 * BLOCK_SIZE) as usize];
    let mut at = 0;
    while at < header.journal_blocks {
        let n = (header.journal_blocks - at).min(256);
        let off = (header.journal_start + at) * BLOCK_SIZE;
        store.write_at(0, off, &chunk[..(n * BLOCK_SIZE) as usize])?;
        at += n;
    }
    store.sync_all()?;
    for (i, d) in devs.iter().enumerate() {
        let label = Label {
            uuid,
            dev_index: i as u16,
            dev_count: devs.len() as u16,
            node: d.node,
            bytes: d.bytes,
        };
        store.write_at(i as u16, 0, &label.to_block())?;
    }
    store.sync_all()?;
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn geometry_scales_with_the_devices_unless_given() {
        // 16 MiB: 64-block journal and slots; 4096 - 197 metadata blocks / 16 → 128-block groups.
        let o = MkfsOptions::sized(
            &[(16 * MIB, 0)],
            PlacementPolicy::WriterLocal,
            None,
            None,
            None,
        );
        assert_eq!(
            (o.journal_blocks, o.checkpoint_blocks, o.group_blocks),
            (64, 64, 128)
        );
        // Large devices hit the caps: 8 MiB journal, 64 MiB slots, 128 MiB groups.
        let big = 1 << 40;
        let o = MkfsOptions::sized(
            &[(big, 0), (big, 1)],
            PlacementPolicy::Interleave,
            None,
            None,
            None,
        );
        assert_eq!(
            (o.journal_blocks, o.checkpoint_blocks, o.group_blocks),
            (2048, 16384, 32768)
        );
        assert_eq!(o.policy, PlacementPolicy::Interleave);
        // A second device on its own node carries checkpoint slots too: when they leave it
        // no room, groups fall to their floor and mkfs reports what does not fit.
        let o = MkfsOptions::sized(
            &[(big, 0), (8 * MIB, 1)],
            PlacementPolicy::WriterLocal,
            None,
            None,
            None,
        );
        assert_eq!(o.group_blocks, 16, "{o:?}");
        // Sizes given win.
        let o = MkfsOptions::sized(
            &[(16 * MIB, 0)],
            PlacementPolicy::WriterLocal,
            Some(32),
            Some(128),
            Some(256),
        );
        assert_eq!(
            (o.group_blocks, o.journal_blocks, o.checkpoint_blocks),
            (32, 128, 256)
        );
    }
}
