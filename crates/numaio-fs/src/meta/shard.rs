//! Checkpoint shards: the metadata cut by the node that holds each inode's metadata, so that
//! every node's device stores the inodes (and, inside directory inodes, the entries) of its
//! own node.
//!
//! Every shard also carries the volume-wide fields (`next_ino`, `last_home`) and the number
//! of shards, so that recovery can tell a complete set from a torn one without a separate
//! descriptor.

use super::{Attr, Dir, Inode, Meta};
use crate::alloc::Extent;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One node's part of a checkpoint, as written.
#[derive(Serialize)]
pub struct ShardOut<'a> {
    pub node: u32,
    pub shards: u32,
    pub next_ino: u64,
    pub last_home: Option<u32>,
    pub inodes: BTreeMap<u64, &'a Inode>,
}

/// One node's part of a checkpoint, as read back.
#[derive(Debug, Deserialize)]
pub struct Shard {
    pub node: u32,
    pub shards: u32,
    pub next_ino: u64,
    pub last_home: Option<u32>,
    pub inodes: BTreeMap<u64, Inode>,
}

/// An inode as format version 3 stored it: without unwritten runs.
#[derive(Debug, Serialize, Deserialize)]
pub struct InodeV3 {
    pub attr: Attr,
    pub extents: BTreeMap<u64, Extent>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub target: Option<Vec<u8>>,
    pub dir: Option<Dir>,
}

/// One node's part of a format version 3 checkpoint (read when upgrading a volume).
#[derive(Debug, Serialize, Deserialize)]
pub struct ShardV3 {
    pub node: u32,
    pub shards: u32,
    pub next_ino: u64,
    pub last_home: Option<u32>,
    pub inodes: BTreeMap<u64, InodeV3>,
}

impl From<ShardV3> for Shard {
    fn from(s: ShardV3) -> Shard {
        let inodes = s
            .inodes
            .into_iter()
            .map(|(ino, i)| {
                let i = Inode {
                    attr: i.attr,
                    extents: i.extents,
                    xattrs: i.xattrs,
                    target: i.target,
                    dir: i.dir.map(Box::new),
                    unwritten: BTreeMap::new(),
                    // Counted by `Meta::after_decode`, as for every decoded inode.
                    blocks: 0,
                };
                (ino, i)
            })
            .collect();
        Shard {
            node: s.node,
            shards: s.shards,
            next_ino: s.next_ino,
            last_home: s.last_home,
            inodes,
        }
    }
}

/// Cuts `meta` into one shard per node of `nodes` (ascending). An inode whose metadata node
/// is not among them (which fsck reports) goes with the first node.
pub fn split<'a>(meta: &'a Meta, nodes: &[u32]) -> Vec<ShardOut<'a>> {
    let mut out: Vec<ShardOut<'a>> = nodes
        .iter()
        .map(|&node| ShardOut {
            node,
            shards: nodes.len() as u32,
            next_ino: meta.next_ino,
            last_home: meta.last_home,
            inodes: BTreeMap::new(),
        })
        .collect();
    for (&ino, i) in &meta.inodes {
        let k = nodes.binary_search(&i.attr.meta_node).unwrap_or(0);
        if let Some(s) = out.get_mut(k) {
            s.inodes.insert(ino, i);
        }
    }
    out
}

/// Joins shards read from every node (in `nodes` order) into one metadata. The caller has
/// checked they belong to one checkpoint; an inode found twice is an error.
pub fn merge(shards: Vec<Shard>) -> Result<Meta, String> {
    let mut it = shards.into_iter();
    let Some(first) = it.next() else {
        return Err("no checkpoint shard".into());
    };
    let mut meta = Meta {
        inodes: first.inodes,
        next_ino: first.next_ino,
        last_home: first.last_home,
    };
    for s in it {
        if s.next_ino != meta.next_ino || s.last_home != meta.last_home {
            return Err(format!(
                "the shard of node {} disagrees with the first on the volume-wide fields",
                s.node
            ));
        }
        for (ino, i) in s.inodes {
            if meta.inodes.insert(ino, i).is_some() {
                return Err(format!("inode {ino} is in two shards"));
            }
        }
    }
    Ok(meta)
}
