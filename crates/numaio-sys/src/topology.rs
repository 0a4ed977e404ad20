//! The machine's NUMA topology, from sysfs, a synthetic spec, or JSON.
//!
//! Sysfs layout read (relative to a root, `/` on a live system, a fixture directory in tests):
//! `sys/devices/system/node/{online,possible,nodeN/{cpulist,meminfo,distance}}`,
//! `sys/devices/system/cpu/online` and `proc/meminfo` (for kernels without NUMA).

use crate::cpulist;
use crate::error::{SysError, SysResult};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The per-node memory counters numaio uses, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemInfo {
    pub mem_total_bytes: u64,
    pub mem_free_bytes: u64,
    /// Page cache on this node (`FilePages`).
    pub file_pages_bytes: u64,
    #[serde(default)]
    pub active_file_bytes: u64,
    #[serde(default)]
    pub inactive_file_bytes: u64,
    #[serde(default)]
    pub dirty_bytes: u64,
    #[serde(default)]
    pub writeback_bytes: u64,
}

impl MemInfo {
    /// Room for new pages, in bytes: free memory plus the file cache that can be reclaimed
    /// (clean active and inactive file pages), less a reserve of 1/64 of the node for the
    /// kernel's watermarks. What warming or replicating onto the node may fill.
    pub fn room_bytes(&self) -> u64 {
        let reclaimable = (self.active_file_bytes + self.inactive_file_bytes)
            .saturating_sub(self.dirty_bytes + self.writeback_bytes);
        (self.mem_free_bytes + reclaimable).saturating_sub(self.mem_total_bytes / 64)
    }
}

/// One NUMA node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Node {
    pub id: u32,
    /// CPUs of the node; empty for a CPU-less node.
    pub cpus: Vec<u32>,
    #[serde(flatten)]
    pub mem: MemInfo,
    /// Distance to every online node, keyed by node id (JSON keys are strings).
    pub distances: BTreeMap<u32, u32>,
}

impl Node {
    pub fn has_cpus(&self) -> bool {
        !self.cpus.is_empty()
    }
    pub fn has_memory(&self) -> bool {
        self.mem.mem_total_bytes > 0
    }
}

/// The machine's NUMA topology.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Topology {
    pub nodes: Vec<Node>,
    /// Where it came from: `sysfs`, `no-numa` (one node made up from /proc), or `synthetic`.
    #[serde(default = "default_source")]
    pub source: String,
}

fn default_source() -> String {
    "synthetic".into()
}

fn read(path: &Path) -> SysResult<String> {
    std::fs::read_to_string(path).map_err(|source| SysError::Read {
        path: path.to_path_buf(),
        source,
    })
}

/// Parses meminfo lines (`Node 0 MemTotal:  123 kB` or `MemTotal:  123 kB`).
fn parse_meminfo(text: &str, path: &Path) -> SysResult<MemInfo> {
    let mut m = MemInfo::default();
    let mut seen_total = false;
    for line in text.lines() {
        let mut words: Vec<&str> = line.split_whitespace().collect();
        if words.first() == Some(&"Node") {
            words.drain(..2.min(words.len()));
        }
        if words.len() < 2 {
            continue;
        }
        let key = words[0].trim_end_matches(':');
        let Ok(val) = words[1].parse::<u64>() else {
            continue;
        };
        let bytes = if words.get(2) == Some(&"kB") {
            val * 1024
        } else {
            val
        };
        match key {
            "MemTotal" => {
                m.mem_total_bytes = bytes;
                seen_total = true;
            }
            "MemFree" => m.mem_free_bytes = bytes,
            "FilePages" => m.file_pages_bytes = bytes,
            "Active(file)" => m.active_file_bytes = bytes,
            "Inactive(file)" => m.inactive_file_bytes = bytes,
            "Dirty" => m.dirty_bytes = bytes,
            "Writeback" => m.writeback_bytes = bytes,
            // /proc/meminfo has no FilePages; Cached + Buffers is the same quantity.
            "Cached" | "Buffers" if !text.contains("FilePages") => m.file_pages_bytes += bytes,
            _ => {}
        }
    }
    if !seen_total {
        return Err(SysError::Parse {
            path: path.to_path_buf(),
            what: "no MemTotal line".into(),
        });
    }
    Ok(m)
}

impl Topology {
    /// Reads the live system's topology.
    pub fn detect() -> SysResult<Topology> {
        Self::from_root(Path::new("/"))
    }

    /// Reads the topology from a directory laid out like `/` (for fixtures).
    pub fn from_root(root: &Path) -> SysResult<Topology> {
        let node_dir = root.join("sys/devices/system/node");
        if !node_dir.is_dir() {
            return Self::no_numa(root);
        }
        let online_path = node_dir.join("online");
        let ids: Vec<u32> = if online_path.exists() {
            cpulist::parse(&read(&online_path)?).map_err(|e| SysError::Parse {
                path: online_path.clone(),
                what: e.to_string(),
            })?
        } else {
            let mut ids: Vec<u32> = std::fs::read_dir(&node_dir)
                .map_err(|source| SysError::Read {
                    path: node_dir.clone(),
                    source,
                })?
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    e.file_name()
                        .to_str()?
                        .strip_prefix("node")?
                        .parse::<u32>()
                        .ok()
                })
                .collect();
            ids.sort_unstable();
            ids
        };
        if ids.is_empty() {
            return Self::no_numa(root);
        }
        let mut nodes = Vec::with_capacity(ids.len());
        for &id in &ids {
            let dir = node_dir.join(format!("node{id}"));
            let cpus_path = dir.join("cpulist");
            let cpus = cpulist::parse(&read(&cpus_path)?).map_err(|e| SysError::Parse {
                path: cpus_path.clone(),
                what: e.to_string(),
            })?;
            let mi_path = dir.join("meminfo");
            let mem = parse_meminfo(&read(&mi_path)?, &mi_path)?;
            let dist_path = dir.join("distance");
            let mut distances = BTreeMap::new();
            if let Ok(text) = read(&dist_path) {
                let vals: Vec<u32> = text
                    .split_whitespace()
                    .map(|w| w.parse::<u32>())
                    .collect::<Result<_, _>>()
                    .map_err(|_| SysError::Parse {
                        path: dist_path.clone(),
                        what: format!("non-numeric distance in {text:?}"),
                    })?;
                if vals.len() != ids.len() {
                    return Err(SysError::Parse {
                        path: dist_path,
                        what: format!("{} distances for {} online nodes", vals.len(), ids.len()),
                    });
                }
                distances = ids.iter().copied().zip(vals).collect();
            } else {
                distances.insert(id, 10);
            }
            nodes.push(Node {
                id,
                cpus,
                mem,
                distances,
            });
        }
        Ok(Topology {
            nodes,
            source: "sysfs".into(),
        })
    }

    /// A kernel without NUMA: one node 0 with every online CPU and all memory.
    fn no_numa(root: &Path) -> SysResult<Topology> {
        let cpu_online = root.join("sys/devices/system/cpu/online");
        let cpus = match read(&cpu_online) {
            Ok(s) => cpulist::parse(&s).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let cpus = if cpus.is_empty() {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (0..n as u32).collect()
        } else {
            cpus
        };
        let mi_path = root.join("proc/meminfo");
        let mem = parse_meminfo(&read(&mi_path)?, &mi_path)?;
        Ok(Topology {
            nodes: vec![Node {
                id: 0,
                cpus,
                mem,
                distances: BTreeMap::from([(0, 10)]),
            }],
            source: "no-numa".into(),
        })
    }

    /// Builds a topology from a small spec, for tests and the cost model.
    ///
    /// Whitespace-separated tokens: `nID=CPULIST@MEM` per node (CPULIST may be empty for a
    /// CPU-less node, MEM takes K/M/G/T suffixes and may be 0 for a memory-less node), and
    /// optionally `dist=R0;R1;...` where each row is comma-separated in node order. Without
    /// `dist`, distances are 10 locally and 20 remotely. Example: `n0=0-1@1G n1=2-3@1G n3=@512M`.
    /// A spec that starts with `{` is parsed as JSON in the `numaio topo --json` format.
    pub fn synthetic(spec: &str) -> SysResult<Topology> {
        let spec_t = spec.trim();
        let err = |what: String| SysError::Spec {
            spec: spec.to_string(),
            what,
        };
        if spec_t.starts_with('{') {
            let mut t: Topology =
                serde_json::from_str(spec_t).map_err(|e| err(format!("bad JSON: {e}")))?;
            t.source = "synthetic".into();
            t.validate().map_err(err)?;
            return Ok(t);
        }
        let mut nodes: Vec<Node> = Vec::new();
        let mut dist_rows: Option<Vec<Vec<u32>>> = None;
        for tok in spec_t.split_whitespace() {
            if let Some(rows) = tok.strip_prefix("dist=") {
                let parsed: Result<Vec<Vec<u32>>, _> = rows
                    .split(';')
                    .map(|r| r.split(',').map(|v| v.parse::<u32>()).collect())
                    .collect();
                dist_rows = Some(parsed.map_err(|_| err(format!("bad distance row in {tok}")))?);
                continue;
            }
            let rest = tok
                .strip_prefix('n')
                .ok_or_else(|| err(format!("token {tok:?} is neither nID=CPUS@MEM nor dist=")))?;
            let (id, rest) = rest
                .split_once('=')
                .ok_or_else(|| err(format!("token {tok:?} lacks '='")))?;
            let id: u32 = id
                .parse()
                .map_err(|_| err(format!("bad node id in {tok:?}")))?;
            let (cpus, mem) = rest.split_once('@').unwrap_or((rest, "0"));
            let cpus = cpulist::parse(cpus).map_err(|e| err(e.to_string()))?;
            let mem = parse_size(mem).ok_or_else(|| err(format!("bad memory size in {tok:?}")))?;
            nodes.push(Node {
                id,
                cpus,
                mem: MemInfo {
                    mem_total_bytes: mem,
                    mem_free_bytes: mem,
                    ..MemInfo::default()
                },
                distances: BTreeMap::new(),
            });
        }
        if nodes.is_empty() {
            return Err(err("no nodes".into()));
        }
        nodes.sort_by_key(|n| n.id);
        let ids: Vec<u32> = nodes.iter().map(|n| n.id).collect();
        if let Some(rows) = &dist_rows {
            if rows.len() != ids.len() || rows.iter().any(|r| r.len() != ids.len()) {
                return Err(err(format!(
                    "distance matrix must be {0}x{0} for {0} nodes",
                    ids.len()
                )));
            }
        }
        for (i, n) in nodes.iter_mut().enumerate() {
            n.distances = ids
                .iter()
                .enumerate()
                .map(|(j, &to)| {
                    let d = match &dist_rows {
                        Some(rows) => rows[i][j],
                        None if i == j => 10,
                        None => 20,
                    };
                    (to, d)
                })
                .collect();
        }
        let t = Topology {
            nodes,
            source: "synthetic".into(),
        };
        t.validate().map_err(err)?;
        Ok(t)
    }

    /// Checks invariants: unique ids, no CPU on two nodes, a full distance matrix.
    fn validate(&self) -> Result<(), String> {
        let ids: Vec<u32> = self.nodes.iter().map(|n| n.id).collect();
        let mut seen_ids = ids.clone();
        seen_ids.sort_unstable();
        seen_ids.dedup();
        if seen_ids.len() != ids.len() {
            return Err("duplicate node id".into());
        }
        let mut cpus: Vec<u32> = self.nodes.iter().flat_map(|n| n.cpus.clone()).collect();
        let total = cpus.len();
        cpus.sort_unstable();
        cpus.dedup();
        if cpus.len() != total {
            return Err("a CPU belongs to two nodes".into());
        }
        for n in &self.nodes {
            if !ids.iter().all(|i| n.distances.contains_key(i)) {
                return Err(format!("node {} lacks a distance to some node", n.id));
            }
        }
        Ok(())
    }

    /// Node ids in increasing order.
    pub fn node_ids(&self) -> Vec<u32> {
        self.nodes.iter().map(|n| n.id).collect()
    }

    pub fn node(&self, id: u32) -> Option<&Node> {
        self.nodes.iter().find(|n| n.id == id)
    }

    /// The node that owns `cpu`.
    pub fn cpu_to_node(&self, cpu: u32) -> Option<u32> {
        self.nodes
            .iter()
            .find(|n| n.cpus.binary_search(&cpu).is_ok())
            .map(|n| n.id)
    }

    /// The CPU→node map for every CPU of every node.
    pub fn cpu_node_map(&self) -> BTreeMap<u32, u32> {
        self.nodes
            .iter()
            .flat_map(|n| n.cpus.iter().map(move |&c| (c, n.id)))
            .collect()
    }

    /// Distance between two nodes, if both are known.
    pub fn distance(&self, from: u32, to: u32) -> Option<u32> {
        self.node(from)?.distances.get(&to).copied()
    }

    /// Whether `id` is an online node.
    pub fn has_node(&self, id: u32) -> bool {
        self.node(id).is_some()
    }
}

/// Parses a size with an optional unit, binary whatever the spelling (`K`, `KB` and `KiB`
/// are all 1024, as in numactl and vmtouch), e.g. `512M`, `1G`, `1.5GiB`, `4096`. Fractions
/// round to the nearest byte; overflow, negatives and other units are `None`. Parsing is the
/// `parse-size` crate's (exact to 64 bits, fuzzed upstream).
pub fn parse_size(s: &str) -> Option<u64> {
    const BINARY: parse_size::Config = parse_size::Config::new().with_binary();
    let s = s.trim();
    // parse-size ignores spaces and underscores inside numbers; an empty string is no size.
    if s.is_empty() {
        return None;
    }
    // parse-size rounds a mantissa of more than 19 digits by adding one to it, which
    // overflows at u64::MAX. No size we accept needs that many digits, and every accepted size
    // stays below 10^19 bytes (8.6 EiB), so its decimal form reads back.
    const LIMIT: u64 = 10_000_000_000_000_000_000;
    if s.bytes().filter(u8::is_ascii_digit).count() > 19 {
        return None;
    }
    BINARY.parse_size(s).ok().filter(|&v| v < LIMIT)
}

/// A path under the live sysfs node directory (for callers that need extra files).
pub fn node_sysfs_dir(id: u32) -> PathBuf {
    PathBuf::from(format!("/sys/devices/system/node/node{id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn room_is_free_plus_clean_file_cache_less_the_reserve() {
        let m = MemInfo {
            mem_total_bytes: 64 << 20,
            mem_free_bytes: 10 << 20,
            active_file_bytes: 3 << 20,
            inactive_file_bytes: 5 << 20,
            dirty_bytes: 1 << 20,
            writeback_bytes: 1 << 20,
            ..MemInfo::default()
        };
        assert_eq!(m.room_bytes(), (10 + 8 - 2 - 1) << 20);
        assert_eq!(MemInfo::default().room_bytes(), 0);
    }
    use std::fs;

    fn node_meminfo(id: u32, total_kb: u64, free_kb: u64, file_kb: u64) -> String {
        format!(
            "Node {id} MemTotal:       {total_kb} kB\nNode {id} MemFree:        {free_kb} kB\n\
             Node {id} MemUsed:        1 kB\nNode {id} Active(file):   7 kB\n\
             Node {id} Inactive(file): 9 kB\nNode {id} Dirty:          3 kB\n\
             Node {id} Writeback:      0 kB\nNode {id} FilePages:      {file_kb} kB\n\
             Node {id} HugePages_Total:     0\n"
        )
    }

    /// A fixture with node ids 0, 2, 5 (gaps), node 5 CPU-less, node 2 memory-less,
    /// and cpulists with gaps.
    fn fixture() -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        let nd = d.path().join("sys/devices/system/node");
        fs::create_dir_all(&nd).unwrap();
        fs::write(nd.join("online"), "0,2,5\n").unwrap();
        fs::write(nd.join("possible"), "0-7\n").unwrap();
        let spec = [
            (0, "0-3,8-11\n", 1000, 500, 100, "10 21 31\n"),
            (2, "4-7,12-15\n", 0, 0, 0, "21 10 21\n"),
            (5, "\n", 2000, 1500, 40, "31 21 10\n"),
        ];
        for (id, cpus, total, free, file, dist) in spec {
            let n = nd.join(format!("node{id}"));
            fs::create_dir_all(&n).unwrap();
            fs::write(n.join("cpulist"), cpus).unwrap();
            fs::write(n.join("meminfo"), node_meminfo(id, total, free, file)).unwrap();
            fs::write(n.join("distance"), dist).unwrap();
        }
        d
    }

    #[test]
    fn reads_odd_sysfs_layout() {
        let d = fixture();
        let t = Topology::from_root(d.path()).unwrap();
        assert_eq!(t.source, "sysfs");
        assert_eq!(t.node_ids(), vec![0, 2, 5]);
        let n0 = t.node(0).unwrap();
        assert_eq!(n0.cpus, vec![0, 1, 2, 3, 8, 9, 10, 11]);
        assert_eq!(n0.mem.mem_total_bytes, 1000 * 1024);
        assert_eq!(n0.mem.mem_free_bytes, 500 * 1024);
        assert_eq!(n0.mem.file_pages_bytes, 100 * 1024);
        assert_eq!(n0.mem.active_file_bytes, 7 * 1024);
        assert_eq!(n0.mem.inactive_file_bytes, 9 * 1024);
        assert_eq!(n0.mem.dirty_bytes, 3 * 1024);
        let n5 = t.node(5).unwrap();
        assert!(!n5.has_cpus() && n5.has_memory());
        assert!(!t.node(2).unwrap().has_memory());
        assert_eq!(t.distance(0, 5), Some(31));
        assert_eq!(t.distance(5, 2), Some(21));
        assert_eq!(t.distance(2, 2), Some(10));
        assert_eq!(t.cpu_to_node(12), Some(2));
        assert_eq!(t.cpu_to_node(9), Some(0));
        assert_eq!(t.cpu_to_node(99), None);
        assert_eq!(t.cpu_node_map().len(), 16);
    }

    #[test]
    fn json_contract_shape() {
        let d = fixture();
        let t = Topology::from_root(d.path()).unwrap();
        let v = serde_json::to_value(&t).unwrap();
        let n = &v["nodes"][0];
        assert_eq!(n["id"], 0);
        assert_eq!(n["cpus"][4], 8);
        assert_eq!(n["mem_total_bytes"], 1000 * 1024);
        assert_eq!(n["file_pages_bytes"], 100 * 1024);
        assert_eq!(n["distances"]["5"], 31);
        // Round trip through the synthetic JSON path.
        let back = Topology::synthetic(&v.to_string()).unwrap();
        assert_eq!(back.nodes, t.nodes);
    }

    #[test]
    fn distance_row_length_mismatch_is_an_error() {
        let d = fixture();
        let p = d.path().join("sys/devices/system/node/node0/distance");
        fs::write(p, "10 20\n").unwrap();
        let e = Topology::from_root(d.path()).unwrap_err();
        assert!(e.to_string().contains("distance"), "{e}");
    }

    #[test]
    fn missing_meminfo_is_a_read_error_naming_the_path() {
        let d = fixture();
        fs::remove_file(d.path().join("sys/devices/system/node/node2/meminfo")).unwrap();
        let e = Topology::from_root(d.path()).unwrap_err();
        assert!(matches!(e, SysError::Read { .. }));
        assert!(e.to_string().contains("node2/meminfo"), "{e}");
    }

    #[test]
    fn no_numa_kernel_is_one_node() {
        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("proc")).unwrap();
        fs::create_dir_all(d.path().join("sys/devices/system/cpu")).unwrap();
        fs::write(d.path().join("sys/devices/system/cpu/online"), "0-5\n").unwrap();
        fs::write(
            d.path().join("proc/meminfo"),
            "MemTotal:  2048 kB\nMemFree: 1024 kB\nBuffers: 10 kB\nCached: 90 kB\n",
        )
        .unwrap();
        let t = Topology::from_root(d.path()).unwrap();
        assert_eq!(t.source, "no-numa");
        assert_eq!(t.nodes.len(), 1);
        assert_eq!(t.nodes[0].cpus, (0..6).collect::<Vec<_>>());
        assert_eq!(t.nodes[0].mem.file_pages_bytes, 100 * 1024);
        assert_eq!(t.distance(0, 0), Some(10));
    }

    #[test]
    fn synthetic_spec() {
        let t = Topology::synthetic("n0=0-1@1G n1=2-3@512M n3=@2G").unwrap();
        assert_eq!(t.node_ids(), vec![0, 1, 3]);
        assert_eq!(t.node(1).unwrap().mem.mem_total_bytes, 512 << 20);
        assert!(!t.node(3).unwrap().has_cpus());
        assert_eq!(t.distance(0, 3), Some(20));
        let t = Topology::synthetic("n0=0@1G n1=1@1G dist=10,40;40,10").unwrap();
        assert_eq!(t.distance(1, 0), Some(40));
        assert!(Topology::synthetic("").is_err());
        assert!(Topology::synthetic("n0=0@1G n1=0@1G").is_err());
        assert!(Topology::synthetic("n0=0@1G dist=10,20").is_err());
        assert!(Topology::synthetic("x0=0@1G").is_err());
        assert!(Topology::synthetic("n0=0@1Q").is_err());
    }

    #[test]
    fn live_system_never_crashes() {
        let t = Topology::detect().unwrap();
        assert!(!t.nodes.is_empty());
        assert!(t.nodes.iter().any(|n| n.has_cpus()));
    }

    #[test]
    fn sizes() {
        // A rounded 20-digit mantissa used to overflow inside parse-size (found by fuzzing).
        assert_eq!(parse_size(" 000.00 00018446744073709551615 00000"), None);
        assert_eq!(parse_size("18446744073709551615"), None);
        assert_eq!(parse_size("14E"), None);
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("2GiB"), Some(2 << 30));
        assert_eq!(parse_size("1x"), None);
        assert_eq!(parse_size("4k"), Some(4096));
        assert_eq!(parse_size("4KB"), Some(4096));
        assert_eq!(parse_size(" 1.5G "), Some(3 << 29));
        assert_eq!(parse_size("16E"), None, "overflow");
        for bad in ["", "-1", "nan", "inf", "1Q", "K", "1KK"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }
}
