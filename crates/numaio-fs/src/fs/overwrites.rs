//! Blocks overwritten in place since the last commit, per inode, and the inodes whose
//! `fsync` waits for the next commit.
//!
//! A commit that carries data in its record ([`crate::journal`], "Data in the record")
//! issues one flush for the record and every device written, so the record can become
//! durable before writes made ahead of it. Blocks the record maps or shows (new blocks,
//! a grown file's old end) are in the record itself; a block a file already owned and
//! overwrote in place is not. As ext4's ordered mode writes a file's dirty pages before
//! the commit its `fsync` waits for, such a commit carries the overwrites of the files
//! being synced (of every file for a volume-wide sync) or flushes its data first. Other
//! files' overwrites made since the previous commit may be lost by a cut during it, as on
//! ext4, whose commits do not wait for overwrites either.

use super::inner::merge_runs;
use std::collections::{HashMap, HashSet};

/// More runs than this noted in all (after merging), and nothing is noted any more: the
/// next commit that needs them flushes its data first.
const MAX_RUNS: usize = 8192;

#[derive(Default)]
pub(super) struct Overwrites {
    /// Device runs `(dev, start, count)` each inode wrote in place.
    by_inode: HashMap<u64, Vec<(u16, u64, u64)>>,
    /// Runs in `by_inode`.
    runs: usize,
    /// Too many runs were noted: `by_inode` was dropped.
    full: bool,
    /// Inodes whose `fsync` the next commit serves.
    syncing: HashSet<u64>,
    /// A volume-wide sync waits for the next commit.
    all: bool,
}

impl Overwrites {
    /// Notes that `ino` wrote device blocks `start..start + len` of `dev` in place.
    pub(super) fn note(&mut self, ino: u64, dev: u16, start: u64, len: u64) {
        if self.full {
            return;
        }
        let v = self.by_inode.entry(ino).or_default();
        if v.last() == Some(&(dev, start, len)) {
            return;
        }
        v.push((dev, start, len));
        self.runs += 1;
        if v.len() >= 64 && v.len().is_power_of_two() {
            let before = v.len();
            *v = merge_runs(std::mem::take(v));
            self.runs -= before - v.len();
        }
        if self.runs > MAX_RUNS {
            self.by_inode = HashMap::new();
            self.runs = 0;
            self.full = true;
        }
    }

    /// The next commit serves an `fsync` of `ino`.
    pub(super) fn sync_of(&mut self, ino: u64) {
        self.syncing.insert(ino);
    }

    /// The next commit serves a volume-wide sync.
    pub(super) fn sync_all(&mut self) {
        self.all = true;
    }

    /// The runs a commit taking these must make durable no later than its record: the
    /// overwrites of the inodes being synced. `None` when they were too many to note.
    pub(super) fn to_order(&self) -> Option<Vec<(u16, u64, u64)>> {
        if self.full && (self.all || !self.syncing.is_empty()) {
            return None;
        }
        let runs = self
            .by_inode
            .iter()
            .filter(|(ino, _)| self.all || self.syncing.contains(ino))
            .flat_map(|(_, v)| v.iter().copied())
            .collect();
        Some(merge_runs(runs))
    }

    /// Puts back what a failed commit took, ahead of what was noted since.
    pub(super) fn merge_back(&mut self, taken: Overwrites) {
        self.all |= taken.all;
        self.syncing.extend(taken.syncing);
        if taken.full {
            self.by_inode = HashMap::new();
            self.runs = 0;
            self.full = true;
        }
        for (ino, v) in taken.by_inode {
            for (dev, start, len) in v {
                self.note(ino, dev, start, len);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_synced_inodes_overwrites_are_ordered() {
        let mut o = Overwrites::default();
        o.note(5, 0, 100, 2);
        o.note(5, 0, 102, 1);
        o.note(6, 1, 7, 1);
        assert_eq!(o.to_order(), Some(vec![]), "no sync waits");
        o.sync_of(5);
        assert_eq!(o.to_order(), Some(vec![(0, 100, 3)]));
        o.sync_of(9);
        assert_eq!(o.to_order(), Some(vec![(0, 100, 3)]));
        o.sync_all();
        assert_eq!(o.to_order(), Some(vec![(0, 100, 3), (1, 7, 1)]));
    }

    #[test]
    fn too_many_runs_make_a_synced_commit_flush_first() {
        let mut o = Overwrites::default();
        for b in 0..=MAX_RUNS as u64 {
            o.note(3, 0, b * 2, 1);
        }
        assert_eq!(o.to_order(), Some(vec![]), "nothing waits for them");
        o.sync_of(4);
        assert_eq!(o.to_order(), None);
        // a failed commit's state comes back whole
        let mut later = Overwrites::default();
        later.merge_back(std::mem::take(&mut o));
        assert_eq!(later.to_order(), None);
    }

    #[test]
    fn repeated_overwrites_of_the_same_blocks_stay_few() {
        let mut o = Overwrites::default();
        for _ in 0..100_000 {
            o.note(3, 0, 10, 1);
            o.note(3, 0, 11, 1);
        }
        o.sync_of(3);
        assert_eq!(o.to_order(), Some(vec![(0, 10, 2)]));
        assert!(o.runs < 100);
    }
}
