//! Move rules: how work and data are brought together, and the first-reader memory.
//!
//! Before a thread touches data on another node, a user (the engine, the FUSE server) can:
//! - `none`: just do it (remote access);
//! - `migrate-thread` (Jericho): restrict the thread to the CPUs of the data's node and yield,
//!   so the scheduler moves it there before the copy;
//! - `first-reader` (Adams): each block remembers the node of its first reader, and later
//!   readers from other nodes are moved to that node ([`FirstReaderMap`]);
//! - `forward` (SAFS, tgt): hand the request to a worker thread pinned to the data's node.
//!
//! Whether a move is due goes through a per-thread [`crate::hysteresis::Hysteresis`].

use serde::Serialize;
use std::fmt;
use std::str::FromStr;
use std::sync::Mutex;

/// How a cache brings work and data together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum MoveWork {
    #[default]
    None,
    MigrateThread,
    FirstReader,
    Forward,
}

impl FromStr for MoveWork {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" => Ok(MoveWork::None),
            "migrate-thread" | "migrate" => Ok(MoveWork::MigrateThread),
            "first-reader" => Ok(MoveWork::FirstReader),
            "forward" => Ok(MoveWork::Forward),
            o => Err(format!(
                "invalid move-work mode {o:?} (expected none | migrate-thread | first-reader | forward)"
            )),
        }
    }
}

impl fmt::Display for MoveWork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            MoveWork::None => "none",
            MoveWork::MigrateThread => "migrate-thread",
            MoveWork::FirstReader => "first-reader",
            MoveWork::Forward => "forward",
        })
    }
}

/// The first reader's node of each block (Adams), keyed by `(file, block)`. Bounded: when a
/// shard is full its content is dropped (a forgotten block simply gets a new first reader).
#[derive(Debug)]
pub struct FirstReaderMap {
    shards: Vec<Mutex<std::collections::HashMap<(u64, u64), u32>>>,
    per_shard_max: usize,
}

impl FirstReaderMap {
    /// A map holding about `capacity` blocks.
    pub fn new(capacity: usize) -> Self {
        let n = 64;
        Self {
            shards: (0..n).map(|_| Mutex::new(Default::default())).collect(),
            per_shard_max: (capacity / n).max(16),
        }
    }

    /// Records `node` as the first reader of the block unless it has one; returns the
    /// block's first reader.
    pub fn claim(&self, file: u64, block: u64, node: u32) -> u32 {
        let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ block) as usize;
        let mut m = self.shards[h % self.shards.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if m.len() >= self.per_shard_max && !m.contains_key(&(file, block)) {
            m.clear();
        }
        *m.entry((file, block)).or_insert(node)
    }

    /// Forgets the block's first reader (the block left the cache).
    pub fn forget(&self, file: u64, block: u64) {
        let h = (file.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ block) as usize;
        self.shards[h % self.shards.len()]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(file, block));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_move_work() {
        for m in ["none", "migrate-thread", "first-reader", "forward"] {
            assert_eq!(m.parse::<MoveWork>().unwrap().to_string(), m);
        }
        assert!("bogus".parse::<MoveWork>().is_err());
    }

    #[test]
    fn first_reader_claims_once() {
        let m = FirstReaderMap::new(1024);
        assert_eq!(m.claim(1, 5, 0), 0);
        assert_eq!(m.claim(1, 5, 1), 0);
        m.forget(1, 5);
        assert_eq!(m.claim(1, 5, 1), 1);
        // Bounded.
        let m = FirstReaderMap::new(64);
        for b in 0..100_000 {
            m.claim(9, b, 0);
        }
        let total: usize = m.shards.iter().map(|s| s.lock().unwrap().len()).sum();
        assert!(total <= 64 * 64);
    }
}
