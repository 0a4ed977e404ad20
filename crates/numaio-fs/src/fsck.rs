//! Offline check (and repair) of a volume, like e2fsck.
//!
//! Checks the device labels against the volume header, loads the newest valid checkpoint
//! and replays the journal (as mount does, in memory), then checks the metadata: every
//! extent inside the allocation groups and owned by one inode only, directory entries
//! pointing at existing inodes of the right kind, every directory reachable from the root
//! exactly once with the right parent, link counts against the directory references, sizes
//! against what the inode kind allows, home nodes (each inode's and the directory round
//! robin's) among the volume's nodes, and counts the free space. Unlinked inodes (orphans
//! of files open at a crash) are counted; mount frees them.
//!
//! Nothing is written unless `repair` is set; a repair fixes link counts, dangling or
//! duplicate entries, parent pointers, doubly owned or stray extents (dropped from the
//! later owner), reconnects unreachable inodes under `/lost+found`, frees orphans, and
//! writes the result as a new checkpoint.

use crate::format::Header;
use crate::journal;
use crate::meta::{Attr, Kind, Meta, Record, ROOT_INO};
use crate::store::BlockStore;
use crate::{Fs, FsError, BLOCK_SIZE};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// What fsck may do.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FsckOptions {
    /// Fix what can be fixed and write a new checkpoint.
    pub repair: bool,
}

/// What fsck found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct FsckReport {
    /// Problems left (all problems found, without `repair`).
    pub errors: Vec<String>,
    /// Problems fixed.
    pub repaired: Vec<String>,
    pub inodes: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    /// Fifos, sockets and device files.
    pub special: u64,
    /// Unlinked inodes still holding blocks (freed by mount or by a repair).
    pub orphans: u64,
    pub total_blocks: u64,
    pub used_blocks: u64,
    pub free_blocks: u64,
    pub checkpoint_seq: u64,
    pub journal_records_replayed: u64,
    /// Blocks of data the newest journal record carries: mount writes them back where they
    /// belong (a repair does, before its checkpoint).
    pub journal_data_blocks: u64,
}

impl FsckReport {
    /// e2fsck's exit code: 0 clean, 1 errors fixed, 4 errors left.
    pub fn exit_code(&self) -> i32 {
        if !self.errors.is_empty() {
            4
        } else if !self.repaired.is_empty() {
            1
        } else {
            0
        }
    }
}

/// Checks the volume on `store`. Structures too damaged to read (labels, header, both
/// checkpoints) are reported as errors left; I/O errors are returned.
pub fn fsck(store: &dyn BlockStore, o: &FsckOptions) -> Result<FsckReport, FsError> {
    let mut r = FsckReport::default();
    let header = match Fs::check_labels(store) {
        Ok(h) => h,
        Err(e @ FsError::Io { .. }) => return Err(e),
        Err(e) => {
            r.errors.push(format!("{e}"));
            return Ok(r);
        }
    };
    let rec = match journal::recover(store, &header) {
        Ok(rec) => rec,
        Err(e @ FsError::Io { .. }) => return Err(e),
        Err(e) => {
            r.errors.push(format!("{e}"));
            return Ok(r);
        }
    };
    r.checkpoint_seq = rec.checkpoint_seq;
    r.journal_records_replayed = rec.replayed;
    r.journal_data_blocks = rec
        .data
        .iter()
        .map(|d| match d {
            Record::Data { bytes, .. } => bytes.len() as u64 / crate::BLOCK_SIZE,
            _ => 0,
        })
        .sum();
    let mut meta = rec.meta;
    let mut fixes: Vec<Record> = Vec::new();
    let mut found: Vec<String> = Vec::new();
    check(&header, &meta, &mut found, &mut fixes);
    r.inodes = meta.inodes.len() as u64;
    for i in meta.inodes.values() {
        match i.attr.kind {
            Kind::File => r.files += 1,
            Kind::Dir => r.directories += 1,
            Kind::Symlink => r.symlinks += 1,
            _ => r.special += 1,
        }
        if i.attr.nlink == 0 {
            r.orphans += 1;
        }
    }
    let groups = header.groups();
    r.total_blocks = groups.iter().fold(0u64, |n, g| n.saturating_add(g.blocks));
    count_space(&mut r, &meta);
    if !o.repair {
        r.errors = found;
        return Ok(r);
    }
    // Orphans are freed too (as mount would), then the link counts are set again.
    let mut failed = Vec::new();
    for f in &fixes {
        if let Err(e) = meta.apply(f) {
            failed.push(e);
        }
    }
    let orphans: Vec<u64> = meta
        .inodes
        .iter()
        .filter(|(_, i)| i.attr.nlink == 0)
        .map(|(&n, _)| n)
        .collect();
    for ino in orphans {
        if meta.apply(&Record::DelInode { ino }).is_ok() {
            r.repaired.push(format!("orphan inode {ino} freed"));
        }
    }
    let mut again = Vec::new();
    let mut fixes2 = Vec::new();
    check(&header, &meta, &mut again, &mut fixes2);
    // The checkpoint below retires the journal: the data of its newest record goes back
    // where it belongs first, as mount would write it.
    if !rec.data.is_empty() {
        journal::write_back(store, &rec.data)?;
        r.repaired.push(format!(
            "data of the newest journal record written back ({} runs)",
            rec.data.len()
        ));
    }
    let mut j = rec.journal;
    let seq = j.seq + 1;
    j.checkpoint(store, &meta, seq)?;
    let version = crate::format::volume_version(store)?;
    if version < crate::format::FORMAT_VERSION {
        crate::format::rewrite_labels(store, &header)?;
        found.push(format!(
            "format version {version} (upgraded to {})",
            crate::format::FORMAT_VERSION
        ));
    }
    r.repaired.extend(found);
    r.errors = again;
    r.errors
        .extend(failed.into_iter().map(|e| format!("repair failed: {e}")));
    r.inodes = meta.inodes.len() as u64;
    count_space(&mut r, &meta);
    Ok(r)
}

/// Blocks used by the inodes of `meta` and free of the volume's, into `r`.
fn count_space(r: &mut FsckReport, meta: &Meta) {
    r.used_blocks = meta
        .inodes
        .values()
        .flat_map(|i| i.extents.values())
        .fold(0u64, |n, e| n.saturating_add(e.len));
    r.free_blocks = r.total_blocks.saturating_sub(r.used_blocks);
}

/// Finds problems in `meta`; pushes a description of each to `found` and the records that
/// fix it to `fixes`.
fn check(header: &Header, meta: &Meta, found: &mut Vec<String>, fixes: &mut Vec<Record>) {
    // Extents: inside the group area of their device, owned once.
    let mut owned: BTreeMap<(u16, u64), (u64, u64)> = BTreeMap::new();
    let area = |dev: u16| -> Option<(u64, u64)> {
        let d = header.devices.get(dev as usize)?;
        let start = header.data_start(dev as usize);
        let n = (d.bytes / BLOCK_SIZE).saturating_sub(start) / header.group_blocks;
        Some((start, start + n * header.group_blocks))
    };
    for (&ino, i) in &meta.inodes {
        if i.attr.kind != Kind::File && !i.extents.is_empty() {
            found.push(format!("inode {ino} ({:?}) has data blocks", i.attr.kind));
            fixes.push(Record::Unmap {
                ino,
                from: 0,
                to: u64::MAX,
            });
            continue;
        }
        for (&l, e) in &i.extents {
            let bad = |why: String, found: &mut Vec<String>, fixes: &mut Vec<Record>| {
                found.push(format!("inode {ino} block {l} ({e:?}): {why}"));
                fixes.push(Record::Unmap {
                    ino,
                    from: l,
                    to: l + e.len,
                });
            };
            let inside = area(e.dev).is_some_and(|(s, end)| {
                e.len > 0 && e.start >= s && e.start.checked_add(e.len).is_some_and(|x| x <= end)
            });
            if !inside {
                bad("outside the allocation groups".into(), found, fixes);
                continue;
            }
            let prev = owned
                .range(..(e.dev, e.start + e.len))
                .next_back()
                .filter(|(&(d, s), &(len, _))| d == e.dev && s + len > e.start)
                .map(|(_, &(_, o))| o);
            if let Some(other) = prev {
                bad(format!("blocks also owned by inode {other}"), found, fixes);
                continue;
            }
            owned.insert((e.dev, e.start), (e.len, ino));
        }
        // Unwritten runs must lie on mapped blocks; the part over a hole is dropped (it
        // reads as zeros either way).
        for (&u, &n) in &i.unwritten {
            let mut b = u;
            let end = u.saturating_add(n);
            while b < end {
                let (l, e) = match i.extents.range(..=b).next_back() {
                    Some((&l, e)) if b < l + e.len => (l, e),
                    _ => {
                        let next = i.extents.range(b..end).next().map_or(end, |(&l, _)| l);
                        found.push(format!(
                            "inode {ino}: blocks {b}..{next} marked unwritten but not mapped"
                        ));
                        fixes.push(Record::MarkWritten {
                            ino,
                            from: b,
                            to: next,
                        });
                        b = next;
                        continue;
                    }
                };
                b = l + e.len;
            }
        }
        if i.attr.kind == Kind::Symlink {
            let len = i.target.as_ref().map_or(0, |t| t.len() as u64);
            if i.target.is_none() || i.attr.size != len {
                found.push(format!(
                    "symlink {ino}: size {} but target of {len} bytes",
                    i.attr.size
                ));
                fixes.push(Record::SetAttr {
                    ino,
                    attr: Attr {
                        size: len,
                        ..i.attr.clone()
                    },
                });
            }
        }
        if (i.attr.kind == Kind::Dir) != i.dir.is_some() {
            found.push(format!("inode {ino}: kind and directory table disagree"));
        }
    }
    // Directory tree: entries, reachability, parents.
    let mut refs: HashMap<u64, u32> = HashMap::new();
    let mut subdirs: HashMap<u64, u32> = HashMap::new();
    let mut reached: HashMap<u64, u64> = HashMap::new();
    reached.insert(ROOT_INO, ROOT_INO);
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(d) = queue.pop_front() {
        let Some(dir) = meta.inodes.get(&d).and_then(|i| i.dir.as_ref()) else {
            continue;
        };
        let mut names: Vec<(&Vec<u8>, _)> = dir.entries.iter().collect();
        names.sort_by_key(|(_, e)| e.cookie);
        for (name, e) in names {
            let shown = String::from_utf8_lossy(name);
            let remove = Record::DirRemove {
                dir: d,
                name: name.clone(),
            };
            let Some(t) = meta.inodes.get(&e.ino) else {
                found.push(format!(
                    "directory {d}: entry {shown:?} points at missing inode {}",
                    e.ino
                ));
                fixes.push(remove);
                continue;
            };
            if t.attr.kind != e.kind {
                found.push(format!("directory {d}: entry {shown:?} has the wrong kind"));
                fixes.push(remove.clone());
                fixes.push(Record::DirAdd {
                    dir: d,
                    name: name.clone(),
                    ino: e.ino,
                    kind: t.attr.kind,
                });
            }
            if t.attr.kind == Kind::Dir {
                if e.ino == ROOT_INO || reached.contains_key(&e.ino) {
                    found.push(format!(
                        "directory {d}: entry {shown:?} is a second link to directory {}",
                        e.ino
                    ));
                    fixes.push(remove);
                    continue;
                }
                reached.insert(e.ino, d);
                *subdirs.entry(d).or_default() += 1;
                queue.push_back(e.ino);
                if t.attr.parent != d {
                    found.push(format!(
                        "directory {}: parent pointer {} but it is in directory {d}",
                        e.ino, t.attr.parent
                    ));
                    fixes.push(Record::SetAttr {
                        ino: e.ino,
                        attr: Attr {
                            parent: d,
                            ..t.attr.clone()
                        },
                    });
                }
            } else {
                *refs.entry(e.ino).or_default() += 1;
            }
        }
    }
    // Unreachable inodes with links: reconnect under /lost+found.
    let lost: Vec<u64> = meta
        .inodes
        .iter()
        .filter(|(&n, i)| i.attr.nlink > 0 && !reached.contains_key(&n) && !refs.contains_key(&n))
        .map(|(&n, _)| n)
        .collect();
    let mut lf_subdirs = 0;
    if !lost.is_empty() {
        let root = &meta.inodes[&ROOT_INO];
        let lf = match root
            .dir
            .as_ref()
            .and_then(|d| d.entries.get(b"lost+found".as_slice()))
        {
            Some(e) if e.kind == Kind::Dir => e.ino,
            _ => {
                let ino = meta.next_ino.max(lost.iter().max().map_or(0, |m| m + 1));
                let now = crate::mkfs::now_ns();
                fixes.push(Record::NewInode {
                    ino,
                    attr: Attr::root_owned_dir(
                        0o700,
                        root.attr.policy.clone(),
                        ROOT_INO,
                        root.attr.meta_node,
                        now,
                    ),
                    target: None,
                });
                fixes.push(Record::DirAdd {
                    dir: ROOT_INO,
                    name: b"lost+found".to_vec(),
                    ino,
                    kind: Kind::Dir,
                });
                *subdirs.entry(ROOT_INO).or_default() += 1;
                ino
            }
        };
        for &ino in &lost {
            let i = &meta.inodes[&ino];
            found.push(format!(
                "inode {ino} is in no directory (reconnected to /lost+found)"
            ));
            fixes.push(Record::DirAdd {
                dir: lf,
                name: format!("#{ino}").into_bytes(),
                ino,
                kind: i.attr.kind,
            });
            if i.attr.kind == Kind::Dir {
                lf_subdirs += 1;
                fixes.push(Record::SetAttr {
                    ino,
                    attr: Attr {
                        parent: lf,
                        ..i.attr.clone()
                    },
                });
            } else {
                *refs.entry(ino).or_default() += 1;
            }
        }
        if lf_subdirs > 0 {
            *subdirs.entry(lf).or_default() += lf_subdirs;
        }
    }
    // Link counts (after the reconnections above).
    for (&ino, i) in &meta.inodes {
        if i.attr.nlink == 0 && !reached.contains_key(&ino) && !refs.contains_key(&ino) {
            continue; // an orphan
        }
        let want = if i.attr.kind == Kind::Dir {
            2 + subdirs.get(&ino).copied().unwrap_or(0)
        } else {
            refs.get(&ino).copied().unwrap_or(0)
        };
        if i.attr.nlink != want {
            found.push(format!(
                "inode {ino}: link count {} but {want} links",
                i.attr.nlink
            ));
            // Applied after the fixes above, so it sees their attribute changes.
            fixes.push(Record::SetAttr {
                ino,
                attr: Attr {
                    nlink: want,
                    ..latest_attr(fixes, ino, &i.attr)
                },
            });
        }
    }
    // Home nodes (the `directory` policy's round robin and each inode's home) must be nodes
    // of the volume; a wrong one would send new blocks to the wrong node or nowhere.
    let nodes: BTreeSet<u32> = header.devices.iter().map(|d| d.node).collect();
    if let Some(n) = meta.last_home.filter(|n| !nodes.contains(n)) {
        let first = nodes.first().copied().unwrap_or(0);
        found.push(format!(
            "the directory round robin stands at node {n}, which the volume does not have \
             (restarted at node {first})"
        ));
        fixes.push(Record::DirHome { node: first });
    }
    let first = nodes.first().copied().unwrap_or(0);
    for (&ino, i) in &meta.inodes {
        if !nodes.contains(&i.attr.meta_node) {
            found.push(format!(
                "inode {ino}: metadata on node {}, which the volume does not have (moved to \
                 node {first})",
                i.attr.meta_node
            ));
            fixes.push(Record::SetAttr {
                ino,
                attr: Attr {
                    meta_node: first,
                    ..latest_attr(fixes, ino, &i.attr)
                },
            });
        }
        if let Some(n) = i.attr.home.filter(|n| !nodes.contains(n)) {
            found.push(format!(
                "inode {ino}: home node {n}, which the volume does not have (cleared)"
            ));
            fixes.push(Record::SetAttr {
                ino,
                attr: Attr {
                    home: None,
                    ..latest_attr(fixes, ino, &i.attr)
                },
            });
        }
    }
    if meta
        .inodes
        .keys()
        .next_back()
        .is_some_and(|&m| m >= meta.next_ino)
    {
        found.push("next inode number is below an inode in use".into());
    }
}

/// The attributes of `ino` after the fixes queued so far.
fn latest_attr(fixes: &[Record], ino: u64, base: &Attr) -> Attr {
    fixes
        .iter()
        .rev()
        .find_map(|f| match f {
            Record::SetAttr { ino: i, attr } if *i == ino => Some(attr.clone()),
            _ => None,
        })
        .unwrap_or_else(|| base.clone())
}
