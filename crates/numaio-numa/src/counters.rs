//! Per-node I/O counters and their `numa_io` text.
//!
//! Tofalos's proposed `/proc/<pid>/numa_io` reports, per NUMA node, the bytes a process read
//! and wrote whose data lay on that node: one `numa<N>_read_bytes: <u64>` and one
//! `numa<N>_write_bytes: <u64>` line per node. The engine's accounting, the file system's
//! mount statistics and the daemon's estimate all render it through [`NodeIo`]; `numaio ps
//! --json` carries the same keys as a JSON object ([`NodeIo::numa_io_map`]).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Bytes read and written on one node.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct IoBytes {
    pub read_bytes: u64,
    pub write_bytes: u64,
}

impl IoBytes {
    pub fn new(read_bytes: u64, write_bytes: u64) -> Self {
        Self {
            read_bytes,
            write_bytes,
        }
    }

    /// Read plus written bytes (saturating).
    pub fn total(&self) -> u64 {
        self.read_bytes.saturating_add(self.write_bytes)
    }
}

/// Which counters a `numa_io` rendering has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fields {
    /// `numa<N>_read_bytes` and `numa<N>_write_bytes` (measured I/O).
    ReadWrite,
    /// `numa<N>_read_bytes` only (the daemon's estimate, which knows nothing of writes).
    Read,
}

/// Node id → bytes read and written there, in ascending node order. Serialized (serde) as a
/// JSON object keyed by node id: `{"0":{"read_bytes":..,"write_bytes":..}}`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeIo(BTreeMap<u32, IoBytes>);

/// A `numa_io` text that does not parse; names the line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("numa_io line {line:?}: {why} (expected numa<N>_read_bytes: <u64> or numa<N>_write_bytes: <u64>)")]
pub struct NumaIoError {
    /// The line, cut to 64 characters.
    pub line: String,
    pub why: &'static str,
}

impl NodeIo {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `io` to `node`'s counters (saturating).
    pub fn add(&mut self, node: u32, io: IoBytes) {
        let e = self.0.entry(node).or_default();
        e.read_bytes = e.read_bytes.saturating_add(io.read_bytes);
        e.write_bytes = e.write_bytes.saturating_add(io.write_bytes);
    }

    /// `node`'s counters (zeros for a node never counted).
    pub fn get(&self, node: u32) -> IoBytes {
        self.0.get(&node).copied().unwrap_or_default()
    }

    /// The counted nodes and their counters, ascending by node.
    pub fn iter(&self) -> impl Iterator<Item = (u32, IoBytes)> + '_ {
        self.0.iter().map(|(&n, &io)| (n, io))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The sum over all nodes.
    pub fn total(&self) -> IoBytes {
        let mut t = IoBytes::default();
        for io in self.0.values() {
            t.read_bytes = t.read_bytes.saturating_add(io.read_bytes);
            t.write_bytes = t.write_bytes.saturating_add(io.write_bytes);
        }
        t
    }

    /// The `numa_io` lines for each of `nodes` in that order (a node never counted reads as
    /// zeros, as a process that did no I/O there), then any other counted node.
    pub fn numa_io_text(&self, nodes: &[u32], fields: Fields) -> String {
        let mut s = String::new();
        for (key, v) in self.numa_io_entries(nodes, fields) {
            let _ = writeln!(s, "{key}: {v}");
        }
        s
    }

    /// The same counters as a map from `numa<N>_read_bytes` / `numa<N>_write_bytes` to bytes
    /// (the `numa_io` object of `numaio ps --json`).
    pub fn numa_io_map(&self, nodes: &[u32], fields: Fields) -> BTreeMap<String, u64> {
        self.numa_io_entries(nodes, fields).collect()
    }

    fn numa_io_entries<'a>(
        &'a self,
        nodes: &'a [u32],
        fields: Fields,
    ) -> impl Iterator<Item = (String, u64)> + 'a {
        let extra = self.0.keys().copied().filter(|n| !nodes.contains(n));
        nodes.iter().copied().chain(extra).flat_map(move |n| {
            let io = self.get(n);
            let write = (fields == Fields::ReadWrite)
                .then(|| (format!("numa{n}_write_bytes"), io.write_bytes));
            std::iter::once((format!("numa{n}_read_bytes"), io.read_bytes)).chain(write)
        })
    }

    /// Parses `numa_io` text back (for tools reading it, and for tests). Blank lines are
    /// skipped; a node given twice keeps the last value of each counter.
    pub fn parse_numa_io_text(s: &str) -> Result<NodeIo, NumaIoError> {
        let mut out = NodeIo::new();
        for line in s.lines().filter(|l| !l.trim().is_empty()) {
            let bad = |why| NumaIoError {
                line: line.chars().take(64).collect(),
                why,
            };
            let (key, val) = line.split_once(':').ok_or_else(|| bad("no ':'"))?;
            let val: u64 = val
                .trim()
                .parse()
                .map_err(|_| bad("the value is not a whole number"))?;
            let rest = key
                .trim()
                .strip_prefix("numa")
                .ok_or_else(|| bad("the key does not start with numa"))?;
            let (n, kind) = rest
                .split_once('_')
                .ok_or_else(|| bad("the key has no counter name"))?;
            let n: u32 = n.parse().map_err(|_| bad("the node is not a number"))?;
            let e = out.0.entry(n).or_default();
            match kind {
                "read_bytes" => e.read_bytes = val,
                "write_bytes" => e.write_bytes = val,
                _ => return Err(bad("unknown counter")),
            }
        }
        Ok(out)
    }
}

impl FromIterator<(u32, IoBytes)> for NodeIo {
    fn from_iter<I: IntoIterator<Item = (u32, IoBytes)>>(iter: I) -> Self {
        let mut m = NodeIo::new();
        for (n, io) in iter {
            m.add(n, io);
        }
        m
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_lists_the_given_nodes_then_the_others() {
        let io: NodeIo = [(2, IoBytes::new(123, 0)), (0, IoBytes::new(0, 7))]
            .into_iter()
            .collect();
        assert_eq!(
            io.numa_io_text(&[0, 1, 2], Fields::ReadWrite),
            "numa0_read_bytes: 0\nnuma0_write_bytes: 7\nnuma1_read_bytes: 0\n\
             numa1_write_bytes: 0\nnuma2_read_bytes: 123\nnuma2_write_bytes: 0\n"
        );
        assert_eq!(
            io.numa_io_text(&[1], Fields::Read),
            "numa1_read_bytes: 0\nnuma0_read_bytes: 0\nnuma2_read_bytes: 123\n"
        );
        let m = io.numa_io_map(&[0], Fields::ReadWrite);
        assert_eq!(m["numa2_read_bytes"], 123);
        assert_eq!(m.len(), 4);
        assert_eq!(io.total(), IoBytes::new(123, 7));
    }

    #[test]
    fn text_parses_back_and_bad_lines_are_named() {
        let io: NodeIo = [(0, IoBytes::new(1, 2)), (5, IoBytes::new(3, u64::MAX))]
            .into_iter()
            .collect();
        let text = io.numa_io_text(&[], Fields::ReadWrite);
        assert_eq!(NodeIo::parse_numa_io_text(&text), Ok(io));
        for (bad, why) in [
            ("numa0_foo: 1", "unknown counter"),
            ("numaX_read_bytes: 1", "node is not a number"),
            ("numa0_read_bytes 1", "no ':'"),
            ("numa0_read_bytes: -1", "not a whole number"),
            ("node0_read_bytes: 1", "does not start with numa"),
        ] {
            let e = NodeIo::parse_numa_io_text(bad).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains(bad), "{bad}: {e}");
        }
    }

    #[test]
    fn json_is_keyed_by_node() {
        let io: NodeIo = [(1, IoBytes::new(4096, 0))].into_iter().collect();
        let j = serde_json::to_string(&io).unwrap();
        assert_eq!(j, r#"{"1":{"read_bytes":4096,"write_bytes":0}}"#);
        assert_eq!(serde_json::from_str::<NodeIo>(&j).unwrap(), io);
    }
}
