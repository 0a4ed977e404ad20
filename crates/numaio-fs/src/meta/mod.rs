//! The file system's metadata, held in memory and changed only through [`Record`]s.
//!
//! Every change to the metadata (an inode's attributes, its block map, a directory entry, an
//! extended attribute) is a [`Record`]; the live file system applies each record with
//! [`Meta::apply`] and queues it for the journal, and mount replays the journal through the
//! very same function. So the state after a replay is the state that was committed, by
//! construction. A checkpoint is the whole [`Meta`] serialised.

use crate::alloc::Extent;
use crate::PlacementPolicy;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

pub mod shard;

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// What an inode is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    // Special files: the kernel gives them their behaviour; the file system only keeps the
    // inode (and a device's number). Appended, so earlier journals and checkpoints decode
    // unchanged.
    Fifo,
    Socket,
    /// A character device and its number (`rdev`).
    CharDev(u32),
    /// A block device and its number (`rdev`).
    BlockDev(u32),
}

impl Kind {
    /// The device number of a device special file, else 0.
    pub fn rdev(self) -> u32 {
        match self {
            Kind::CharDev(r) | Kind::BlockDev(r) => r,
            _ => 0,
        }
    }

    /// Whether this is a fifo, socket or device: no data blocks, no symlink target.
    pub fn is_special(self) -> bool {
        matches!(
            self,
            Kind::Fifo | Kind::Socket | Kind::CharDev(_) | Kind::BlockDev(_)
        )
    }
}

/// An inode's attributes (everything but its block map, xattrs and entries).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attr {
    pub kind: Kind,
    /// Permission bits (07777).
    pub mode: u32,
    pub uid: u32,
    pub gid: u32,
    pub nlink: u32,
    pub size: u64,
    /// Times in ns since the epoch.
    pub atime: i64,
    pub mtime: i64,
    pub ctime: i64,
    /// Placement of new blocks (inherited from the parent directory at create).
    pub policy: PlacementPolicy,
    /// Whether the policy was set on this inode through the xattr (listed by listxattr).
    pub policy_set: bool,
    /// Node of the top-level directory this inode lives under (the `directory` policy).
    pub home: Option<u32>,
    /// Parent directory (directories only; 1 for the root itself).
    pub parent: u64,
    /// Node whose device holds this inode's metadata in the checkpoint: its creator's node,
    /// or the next one when that node's checkpoint shard was full. Never changes.
    pub meta_node: u32,
}

impl Attr {
    /// A new, empty directory owned by root under `parent`, made at `now`, its metadata on
    /// `meta_node`.
    pub fn root_owned_dir(
        mode: u32,
        policy: PlacementPolicy,
        parent: u64,
        meta_node: u32,
        now: i64,
    ) -> Attr {
        Attr {
            kind: Kind::Dir,
            mode,
            uid: 0,
            gid: 0,
            nlink: 2,
            size: 0,
            atime: now,
            mtime: now,
            ctime: now,
            policy,
            policy_set: false,
            home: None,
            parent,
            meta_node,
        }
    }
}

/// A directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    pub ino: u64,
    pub kind: Kind,
    /// Readdir position: entries are listed in cookie order; cookies never repeat in a
    /// directory, so a listing resumed after inserts and deletes skips and repeats nothing.
    pub cookie: u64,
}

/// A directory's entries: a hash map for lookup, a cookie index for readdir.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Dir {
    pub entries: HashMap<Vec<u8>, Entry>,
    /// cookie → (name, inode, kind): a listing reads this alone, without hashing every
    /// name to find its entry.
    #[serde(skip)]
    pub by_cookie: BTreeMap<u64, (Vec<u8>, u64, Kind)>,
    pub next_cookie: u64,
}

impl PartialEq for Dir {
    fn eq(&self, o: &Dir) -> bool {
        self.entries == o.entries && self.next_cookie == o.next_cookie
    }
}

/// First cookie of a directory's entries; 1 and 2 are `.` and `..`.
pub const FIRST_COOKIE: u64 = 3;

/// One inode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Inode {
    pub attr: Attr,
    /// Logical block → physical run; holes are absent.
    pub extents: BTreeMap<u64, Extent>,
    pub xattrs: BTreeMap<Vec<u8>, Vec<u8>>,
    pub target: Option<Vec<u8>>,
    /// Boxed: most inodes are not directories, and an unboxed table would make every inode
    /// 72 bytes larger (encoded the same).
    pub dir: Option<Box<Dir>>,
    /// Logical runs `start → length` of mapped blocks that are allocated but never written
    /// (fallocate, zero range): they read as zeros and are holes to SEEK_DATA/SEEK_HOLE.
    /// Disjoint, never adjacent, and always inside `extents`.
    pub unwritten: BTreeMap<u64, u64>,
    /// Blocks mapped by `extents`, kept with them so `st_blocks` (every GETATTR, LOOKUP and
    /// listed entry) costs no walk of a fragmented file's map. Not encoded:
    /// [`Meta::after_decode`] counts it.
    #[serde(skip)]
    blocks: u64,
}

impl Inode {
    /// Blocks mapped by the extent map (allocated, written or not).
    pub fn blocks(&self) -> u64 {
        self.blocks
    }

    /// The physical block holding logical block `lb`, if mapped.
    pub fn lookup_block(&self, lb: u64) -> Option<(u16, u64)> {
        let (&l, e) = self.extents.range(..=lb).next_back()?;
        (lb < l + e.len).then(|| (e.dev, e.start + (lb - l)))
    }

    /// Whether logical block `lb` is mapped but unwritten.
    pub fn is_unwritten(&self, lb: u64) -> bool {
        self.unwritten
            .range(..=lb)
            .next_back()
            .is_some_and(|(&l, &n)| lb < l + n)
    }

    /// The physical block holding data of logical block `lb`: `None` for a hole or an
    /// unwritten block (both read as zeros).
    pub fn data_block(&self, lb: u64) -> Option<(u16, u64)> {
        self.lookup_block(lb).filter(|_| !self.is_unwritten(lb))
    }

    /// The first logical block at or after `lb` holding data (mapped and written).
    pub fn next_data(&self, mut lb: u64) -> Option<u64> {
        loop {
            let (&l, e) = self
                .extents
                .range(..=lb)
                .next_back()
                .filter(|(&l, e)| lb < l + e.len)
                .or_else(|| self.extents.range(lb..).next())?;
            lb = lb.max(l);
            let end = l + e.len;
            // Skip the unwritten runs inside this extent.
            while lb < end {
                match self.unwritten.range(..=lb).next_back() {
                    Some((&u, &n)) if lb < u + n => lb = u + n,
                    _ => return Some(lb),
                }
            }
        }
    }

    /// The first logical block at or after `lb` holding no data (a hole or unwritten).
    pub fn next_hole(&self, mut lb: u64) -> u64 {
        loop {
            match self.extents.range(..=lb).next_back() {
                Some((&l, e)) if lb < l + e.len => {
                    if let Some((&u, &n)) = self.unwritten.range(..=lb).next_back() {
                        if lb < u + n {
                            return lb;
                        }
                    }
                    // Data up to the next unwritten run or the extent's end.
                    let end = l + e.len;
                    match self.unwritten.range(lb..end).next() {
                        Some((&u, _)) => return u,
                        None => lb = end,
                    }
                }
                _ => return lb,
            }
        }
    }
}

/// The whole metadata of a volume.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    pub inodes: BTreeMap<u64, Inode>,
    pub next_ino: u64,
    /// Node given to the newest top-level directory: the round robin of top-level
    /// directory homes goes on after it, across mounts and crashes.
    pub last_home: Option<u32>,
}

/// One metadata change. Records are applied in order; each is deterministic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Record {
    /// A new inode (`ino` must be free); a symlink carries its target.
    NewInode {
        ino: u64,
        attr: Attr,
        target: Option<Vec<u8>>,
    },
    /// Replaces an inode's attributes.
    SetAttr {
        ino: u64,
        attr: Attr,
    },
    /// Maps logical blocks `lblock..lblock + ext.len` (unmapped before) to `ext`.
    Map {
        ino: u64,
        lblock: u64,
        ext: Extent,
    },
    /// Unmaps logical blocks `from..to`; the blocks are freed.
    Unmap {
        ino: u64,
        from: u64,
        to: u64,
    },
    /// Removes an inode (no entry may point at it any more).
    DelInode {
        ino: u64,
    },
    /// Adds `name → ino` to directory `dir` under its next cookie.
    DirAdd {
        dir: u64,
        name: Vec<u8>,
        ino: u64,
        kind: Kind,
    },
    DirRemove {
        dir: u64,
        name: Vec<u8>,
    },
    SetXattr {
        ino: u64,
        name: Vec<u8>,
        value: Vec<u8>,
    },
    RemoveXattr {
        ino: u64,
        name: Vec<u8>,
    },
    /// A top-level directory was given `node` as its home: the next one starts after it.
    DirHome {
        node: u32,
    },
    // Unwritten extents (format version 4): appended, so version 3 journals decode
    // unchanged.
    /// [`Record::Map`] of blocks that are allocated but unwritten (they read as zeros).
    MapUnwritten {
        ino: u64,
        lblock: u64,
        ext: Extent,
    },
    /// Marks the mapped blocks of `from..to` unwritten (their data is dropped: zeros).
    MarkUnwritten {
        ino: u64,
        from: u64,
        to: u64,
    },
    /// Marks the blocks of `from..to` written: their data, written before, shows.
    MarkWritten {
        ino: u64,
        from: u64,
        to: u64,
    },
    // Format version 5: appended, so version 3 and 4 journals decode unchanged.
    /// The contents of whole blocks `start..` of device `dev`, carried by a journal record
    /// so that one device flush makes the record and its new data durable together
    /// (`crate::journal`, "Data in the record"). It changes no metadata: recovery writes
    /// the data of the newest record back where it belongs.
    Data {
        dev: u16,
        start: u64,
        bytes: Vec<u8>,
    },
}

impl Meta {
    /// A fresh volume's metadata: an empty root directory.
    pub fn new(root: Attr) -> Meta {
        let mut inodes = BTreeMap::new();
        inodes.insert(
            ROOT_INO,
            Inode {
                attr: root,
                extents: BTreeMap::new(),
                xattrs: BTreeMap::new(),
                target: None,
                dir: Some(Box::new(Dir {
                    next_cookie: FIRST_COOKIE,
                    ..Dir::default()
                })),
                unwritten: BTreeMap::new(),
                blocks: 0,
            },
        );
        Meta {
            inodes,
            next_ino: ROOT_INO + 1,
            last_home: None,
        }
    }

    /// Rebuilds what a checkpoint does not store (the cookie indexes, block counts).
    pub fn after_decode(&mut self) {
        for i in self.inodes.values_mut() {
            i.blocks = i
                .extents
                .values()
                .fold(0u64, |n, e| n.saturating_add(e.len));
            if let Some(d) = &mut i.dir {
                d.by_cookie = d
                    .entries
                    .iter()
                    .map(|(n, e)| (e.cookie, (n.clone(), e.ino, e.kind)))
                    .collect();
            }
        }
    }

    /// Checks what the code relies on when it computes with the decoded metadata: extents
    /// of at least one block whose ends do not overflow and that do not overlap in the file,
    /// a directory table exactly on directories, the root a directory.
    pub fn validate(&self) -> Result<(), String> {
        if self.inodes.get(&ROOT_INO).map(|i| i.attr.kind) != Some(Kind::Dir) {
            return Err("the root is missing or not a directory".into());
        }
        for (&ino, i) in &self.inodes {
            if ino == 0 || ino >= self.next_ino {
                return Err(format!("inode number {ino} out of range"));
            }
            if (i.attr.kind == Kind::Dir) != i.dir.is_some() {
                return Err(format!("inode {ino}: kind and directory table disagree"));
            }
            let mut end = 0u64;
            for (&l, e) in &i.extents {
                if e.len == 0
                    || l.checked_add(e.len).is_none()
                    || e.start.checked_add(e.len).is_none()
                    || l < end
                {
                    return Err(format!("inode {ino}: bad extent at block {l}: {e:?}"));
                }
                end = l + e.len;
            }
            let mut end = 0u64;
            for (&l, &n) in &i.unwritten {
                if n == 0 || l.checked_add(n).is_none() || l < end {
                    return Err(format!(
                        "inode {ino}: bad unwritten run at block {l} (+{n})"
                    ));
                }
                end = l + n;
            }
        }
        Ok(())
    }

    pub fn get(&self, ino: u64) -> Option<&Inode> {
        self.inodes.get(&ino)
    }

    fn inode_mut(&mut self, ino: u64) -> Result<&mut Inode, String> {
        self.inodes
            .get_mut(&ino)
            .ok_or_else(|| format!("inode {ino} does not exist"))
    }

    fn dir_mut(&mut self, ino: u64) -> Result<&mut Dir, String> {
        self.inode_mut(ino)?
            .dir
            .as_deref_mut()
            .ok_or_else(|| format!("inode {ino} is not a directory"))
    }

    /// Applies `r`; returns the physical extents it freed. An error means the record does
    /// not fit the state (a damaged journal): nothing is changed then.
    pub fn apply(&mut self, r: &Record) -> Result<Vec<Extent>, String> {
        match r {
            Record::NewInode { ino, attr, target } => {
                if self.inodes.contains_key(ino) || *ino == 0 || *ino == u64::MAX {
                    return Err(format!("inode {ino} created twice"));
                }
                let dir = (attr.kind == Kind::Dir).then(|| {
                    Box::new(Dir {
                        next_cookie: FIRST_COOKIE,
                        ..Dir::default()
                    })
                });
                self.inodes.insert(
                    *ino,
                    Inode {
                        attr: attr.clone(),
                        extents: BTreeMap::new(),
                        xattrs: BTreeMap::new(),
                        target: target.clone(),
                        dir,
                        unwritten: BTreeMap::new(),
                        blocks: 0,
                    },
                );
                self.next_ino = self.next_ino.max(ino + 1);
                Ok(Vec::new())
            }
            Record::SetAttr { ino, attr } => {
                let i = self.inode_mut(*ino)?;
                if i.attr.kind != attr.kind {
                    return Err(format!("inode {ino} changes kind"));
                }
                i.attr = attr.clone();
                Ok(Vec::new())
            }
            Record::Map { ino, lblock, ext } => {
                map(self.inode_mut(*ino)?, *ino, *lblock, ext)?;
                Ok(Vec::new())
            }
            Record::MapUnwritten { ino, lblock, ext } => {
                let i = self.inode_mut(*ino)?;
                map(i, *ino, *lblock, ext)?;
                mark(&mut i.unwritten, *lblock, lblock + ext.len);
                Ok(Vec::new())
            }
            Record::MarkUnwritten { ino, from, to } => {
                let i = self.inode_mut(*ino)?;
                // Only mapped blocks can be unwritten: a hole reads as zeros already.
                let runs: Vec<(u64, u64)> = mapped_runs(&i.extents, *from, *to);
                for (a, b) in runs {
                    mark(&mut i.unwritten, a, b);
                }
                Ok(Vec::new())
            }
            Record::MarkWritten { ino, from, to } => {
                let i = self.inode_mut(*ino)?;
                clear(&mut i.unwritten, *from, *to);
                Ok(Vec::new())
            }
            Record::Data { .. } => Ok(Vec::new()),
            Record::Unmap { ino, from, to } => {
                let i = self.inode_mut(*ino)?;
                clear(&mut i.unwritten, *from, *to);
                let freed = unmap(&mut i.extents, *from, *to);
                i.blocks = i.blocks.saturating_sub(freed.iter().map(|e| e.len).sum());
                Ok(freed)
            }
            Record::DelInode { ino } => {
                if *ino == ROOT_INO {
                    return Err("the root cannot be removed".into());
                }
                let i = self
                    .inodes
                    .remove(ino)
                    .ok_or_else(|| format!("inode {ino} removed twice"))?;
                Ok(i.extents.values().copied().collect())
            }
            Record::DirAdd {
                dir,
                name,
                ino,
                kind,
            } => {
                let d = self.dir_mut(*dir)?;
                if d.entries.contains_key(name) {
                    return Err(format!("directory {dir}: entry added twice"));
                }
                let cookie = d.next_cookie;
                d.next_cookie = cookie
                    .checked_add(1)
                    .ok_or_else(|| format!("directory {dir}: cookies exhausted"))?;
                d.entries.insert(
                    name.clone(),
                    Entry {
                        ino: *ino,
                        kind: *kind,
                        cookie,
                    },
                );
                d.by_cookie.insert(cookie, (name.clone(), *ino, *kind));
                Ok(Vec::new())
            }
            Record::DirRemove { dir, name } => {
                let d = self.dir_mut(*dir)?;
                let e = d
                    .entries
                    .remove(name)
                    .ok_or_else(|| format!("directory {dir}: missing entry removed"))?;
                d.by_cookie.remove(&e.cookie);
                // A hash table never shrinks by itself: a directory emptied of many entries
                // would keep their table. Halving it once it is a quarter full keeps the
                // work amortised.
                if d.entries.capacity() > 64 && d.entries.len() < d.entries.capacity() / 4 {
                    d.entries.shrink_to(d.entries.len() * 2);
                }
                Ok(Vec::new())
            }
            Record::SetXattr { ino, name, value } => {
                self.inode_mut(*ino)?
                    .xattrs
                    .insert(name.clone(), value.clone());
                Ok(Vec::new())
            }
            Record::RemoveXattr { ino, name } => {
                self.inode_mut(*ino)?
                    .xattrs
                    .remove(name)
                    .ok_or_else(|| format!("inode {ino}: missing xattr removed"))?;
                Ok(Vec::new())
            }
            Record::DirHome { node } => {
                self.last_home = Some(*node);
                Ok(Vec::new())
            }
        }
    }
}

/// Maps `lblock..lblock + ext.len` of `i` (unmapped before) to `ext`.
fn map(i: &mut Inode, ino: u64, lblock: u64, ext: &Extent) -> Result<(), String> {
    if ext.len == 0
        || lblock.checked_add(ext.len).is_none()
        || ext.start.checked_add(ext.len).is_none()
    {
        return Err(format!("inode {ino}: empty or overflowing extent"));
    }
    if let Some((&l, e)) = i.extents.range(..lblock + ext.len).next_back() {
        if l + e.len > lblock {
            return Err(format!("inode {ino}: block {lblock} mapped twice"));
        }
    }
    // Merge with the previous extent when physically contiguous.
    if let Some((&l, e)) = i.extents.range(..lblock).next_back() {
        if l + e.len == lblock && e.dev == ext.dev && e.start + e.len == ext.start {
            let merged = Extent {
                len: e.len + ext.len,
                ..*e
            };
            i.extents.insert(l, merged);
            i.blocks += ext.len;
            return Ok(());
        }
    }
    i.extents.insert(lblock, *ext);
    i.blocks += ext.len;
    Ok(())
}

/// The parts of `from..to` that `map` maps: `(first, end, extent's first logical block,
/// extent)`, in order.
fn mapped_parts(
    map: &BTreeMap<u64, Extent>,
    from: u64,
    to: u64,
) -> impl Iterator<Item = (u64, u64, u64, &Extent)> {
    let start = map
        .range(..from)
        .next_back()
        .filter(|(&l, e)| l + e.len > from)
        .map_or(from, |(&l, _)| l);
    map.range(start..to.max(start))
        .map(move |(&l, e)| (l.max(from), (l + e.len).min(to), l, e))
        .filter(|(a, b, _, _)| a < b)
}

/// The logical runs `(from, to)` of `from..to` that `map` maps.
fn mapped_runs(map: &BTreeMap<u64, Extent>, from: u64, to: u64) -> Vec<(u64, u64)> {
    mapped_parts(map, from, to)
        .map(|(a, b, _, _)| (a, b))
        .collect()
}

/// The device blocks `(dev, start, count)` that logical blocks `from..to` of a file with
/// extent map `map` are mapped to.
pub(crate) fn device_runs(map: &BTreeMap<u64, Extent>, from: u64, to: u64) -> Vec<(u16, u64, u64)> {
    mapped_parts(map, from, to)
        .map(|(a, b, l, e)| (e.dev, e.start + (a - l), b - a))
        .collect()
}

/// Adds `from..to` to the run set `runs`, merging with overlapping and adjacent runs.
pub(crate) fn mark(runs: &mut BTreeMap<u64, u64>, mut from: u64, mut to: u64) {
    if from >= to {
        return;
    }
    if let Some((&l, &n)) = runs.range(..=from).next_back() {
        if l + n >= from {
            from = l;
            to = to.max(l + n);
        }
    }
    let inside: Vec<u64> = runs.range(from..=to).map(|(&l, _)| l).collect();
    for l in inside {
        let n = runs.remove(&l).expect("key just listed");
        to = to.max(l + n);
    }
    runs.insert(from, to - from);
}

/// Removes `from..to` from the run set `runs`, splitting runs at the edges.
pub(crate) fn clear(runs: &mut BTreeMap<u64, u64>, from: u64, to: u64) {
    if from >= to {
        return;
    }
    let first = runs
        .range(..from)
        .next_back()
        .filter(|(&l, &n)| l + n > from)
        .map_or(from, |(&l, _)| l);
    let keys: Vec<u64> = runs.range(first..to).map(|(&l, _)| l).collect();
    for l in keys {
        let n = runs.remove(&l).expect("key just listed");
        if l < from {
            runs.insert(l, from - l);
        }
        if l + n > to {
            runs.insert(to, l + n - to);
        }
    }
}

/// Removes logical blocks `from..to` from `map`, splitting extents at the edges; returns the
/// physical runs removed.
fn unmap(map: &mut BTreeMap<u64, Extent>, from: u64, to: u64) -> Vec<Extent> {
    let mut freed = Vec::new();
    if from >= to {
        return freed;
    }
    let first = map
        .range(..from)
        .next_back()
        .filter(|(&l, e)| l + e.len > from)
        .map(|(&l, _)| l)
        .unwrap_or(from);
    let keys: Vec<u64> = map.range(first..to).map(|(&l, _)| l).collect();
    for l in keys {
        let e = map.remove(&l).expect("key just listed");
        let end = l + e.len;
        let cut_a = from.max(l);
        let cut_b = to.min(end);
        if l < cut_a {
            map.insert(
                l,
                Extent {
                    len: cut_a - l,
                    ..e
                },
            );
        }
        if cut_b < end {
            map.insert(
                cut_b,
                Extent {
                    dev: e.dev,
                    start: e.start + (cut_b - l),
                    len: end - cut_b,
                },
            );
        }
        freed.push(Extent {
            dev: e.dev,
            start: e.start + (cut_a - l),
            len: cut_b - cut_a,
        });
    }
    freed
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A volume's metadata with the root and one empty regular file, inode 2.
    fn meta_with_a_file() -> Meta {
        let mut m = Meta::new(Attr::root_owned_dir(
            0o755,
            PlacementPolicy::WriterLocal,
            ROOT_INO,
            0,
            0,
        ));
        let mut file = m.inodes[&ROOT_INO].attr.clone();
        file.kind = Kind::File;
        m.apply(&Record::NewInode {
            ino: 2,
            attr: file,
            target: None,
        })
        .unwrap();
        m
    }

    #[test]
    fn unwritten_runs_merge_split_and_guide_seeks() {
        let mut r = BTreeMap::new();
        mark(&mut r, 10, 20);
        mark(&mut r, 20, 25);
        mark(&mut r, 5, 8);
        assert_eq!(r, BTreeMap::from([(5, 3), (10, 15)]));
        clear(&mut r, 12, 14);
        assert_eq!(r, BTreeMap::from([(5, 3), (10, 2), (14, 11)]));
        mark(&mut r, 6, 30);
        assert_eq!(r, BTreeMap::from([(5, 25)]));
        clear(&mut r, 0, 100);
        assert!(r.is_empty());
        let mut m = meta_with_a_file();
        let ext = |start, len| Extent { dev: 0, start, len };
        // Blocks 0..4 data, 4..8 unwritten (one extent 0..8), 8..10 a hole, 10..12 data.
        m.apply(&Record::Map {
            ino: 2,
            lblock: 0,
            ext: ext(100, 4),
        })
        .unwrap();
        m.apply(&Record::MapUnwritten {
            ino: 2,
            lblock: 4,
            ext: ext(104, 4),
        })
        .unwrap();
        m.apply(&Record::Map {
            ino: 2,
            lblock: 10,
            ext: ext(200, 2),
        })
        .unwrap();
        // A range over a hole marks only mapped blocks; an empty or reversed one nothing.
        m.apply(&Record::MarkUnwritten {
            ino: 2,
            from: 9,
            to: 11,
        })
        .unwrap();
        m.apply(&Record::MarkUnwritten {
            ino: 2,
            from: 11,
            to: 3,
        })
        .unwrap();
        m.validate().unwrap();
        let i = &m.inodes[&2];
        assert_eq!(i.extents.len(), 2, "the contiguous extents merged");
        assert_eq!(i.unwritten, BTreeMap::from([(4, 4), (10, 1)]));
        assert_eq!(
            (i.next_data(0), i.next_data(4), i.next_data(8)),
            (Some(0), Some(11), Some(11))
        );
        assert_eq!(i.next_data(12), None);
        assert_eq!(
            (i.next_hole(0), i.next_hole(5), i.next_hole(11)),
            (4, 5, 12)
        );
        assert_eq!((i.data_block(3), i.data_block(4)), (Some((0, 103)), None));
        m.apply(&Record::MarkWritten {
            ino: 2,
            from: 5,
            to: 6,
        })
        .unwrap();
        m.apply(&Record::Unmap {
            ino: 2,
            from: 7,
            to: 20,
        })
        .unwrap();
        assert_eq!(m.inodes[&2].unwritten, BTreeMap::from([(4, 1), (6, 1)]));
    }

    #[test]
    fn block_counts_follow_maps_unmaps_and_decoding() {
        let mut m = meta_with_a_file();
        let ext = |start, len| Extent { dev: 0, start, len };
        for (lblock, e) in [(0, ext(100, 4)), (4, ext(104, 4)), (20, ext(300, 10))] {
            m.apply(&Record::Map {
                ino: 2,
                lblock,
                ext: e,
            })
            .unwrap();
        }
        m.apply(&Record::MapUnwritten {
            ino: 2,
            lblock: 40,
            ext: ext(500, 8),
        })
        .unwrap();
        assert_eq!(m.inodes[&2].blocks(), 26);
        // A hole punched across two extents, and past the end.
        m.apply(&Record::Unmap {
            ino: 2,
            from: 6,
            to: 25,
        })
        .unwrap();
        m.apply(&Record::Unmap {
            ino: 2,
            from: 44,
            to: 1000,
        })
        .unwrap();
        let count = |m: &Meta| m.inodes[&2].extents.values().map(|e| e.len).sum::<u64>();
        assert_eq!((m.inodes[&2].blocks(), count(&m)), (15, 15));
        // Not encoded: counted again after decoding.
        let mut back = m.clone();
        for i in back.inodes.values_mut() {
            let bytes = crate::format::encode(&*i);
            *i = crate::format::decode_payload(&bytes, std::path::Path::new("t"), "inode")
                .expect("decodes");
        }
        assert_eq!(back.inodes[&2].blocks(), 0);
        back.after_decode();
        assert_eq!(back.inodes[&2].blocks(), 15);
    }

    #[test]
    fn unmap_splits_extents_at_the_edges() {
        let mut m = BTreeMap::new();
        m.insert(
            0,
            Extent {
                dev: 0,
                start: 100,
                len: 10,
            },
        );
        m.insert(
            20,
            Extent {
                dev: 1,
                start: 50,
                len: 5,
            },
        );
        let freed = unmap(&mut m, 4, 22);
        assert_eq!(
            freed,
            vec![
                Extent {
                    dev: 0,
                    start: 104,
                    len: 6
                },
                Extent {
                    dev: 1,
                    start: 50,
                    len: 2
                }
            ]
        );
        assert_eq!(m[&0].len, 4);
        assert_eq!(
            m[&22],
            Extent {
                dev: 1,
                start: 52,
                len: 3
            }
        );
    }
}
