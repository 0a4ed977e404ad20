//! Machine profiles: the NUMA costs of one machine, measured by `numaio probe` or transcribed
//! from a publication. The on-disk format is JSON; `numaio probe --json` prints the same
//! object that `--save` writes, so a probe's output is a profile.

use crate::error::{ModelError, ModelResult};
use numaio_sys::Topology;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A matrix indexed `[cpu node][memory node]` in the order of [`Profile::nodes`]; `None`
/// where there is no value (a node without CPUs, a pair not measured or not published).
pub type Matrix = Vec<Vec<Option<f64>>>;

/// Where a profile's numbers come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Measured on this or another machine by `numaio probe`.
    #[default]
    Measured,
    /// Transcribed from a publication's text; not measured by numaio.
    Published,
}

/// Bandwidth matrices in MB/s (10^6 bytes per second), one per access mix. Mixes count the
/// bytes read plus the bytes written, as STREAM does (write-allocate reads are not counted).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    #[serde(default)]
    pub read: Option<Matrix>,
    #[serde(default)]
    pub write: Option<Matrix>,
    /// Writes with non-temporal (cache-bypassing) stores.
    #[serde(default)]
    pub write_nt: Option<Matrix>,
    #[serde(default)]
    pub rw_3_1: Option<Matrix>,
    #[serde(default)]
    pub rw_2_1: Option<Matrix>,
    #[serde(default)]
    pub rw_1_1: Option<Matrix>,
    #[serde(default)]
    pub copy: Option<Matrix>,
}

/// One point of the loaded-latency curve: the chasing thread's latency while the other CPUs
/// drive `bandwidth_mb_s` in all.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LoadedPoint {
    pub bandwidth_mb_s: f64,
    pub latency_ns: f64,
}

/// What the firmware advertises: SLIT distances and HMAT latency/bandwidth (null where the
/// machine has no such table or the value is not readable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Advertised {
    #[serde(default)]
    pub distance: Option<Matrix>,
    /// HMAT access latency in ns.
    #[serde(default)]
    pub latency_ns: Option<Matrix>,
    /// HMAT access bandwidth in MiB/s, the unit sysfs uses.
    #[serde(default)]
    pub bandwidth_mb_s: Option<Matrix>,
    /// Where the HMAT values came from (`sysfs access0`, `ACPI HMAT table`), or why absent.
    #[serde(default)]
    pub hmat_source: Option<String>,
}

/// A link between two nodes' sockets; `mb_s` is its capacity in each direction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub a: u32,
    pub b: u32,
    pub mb_s: f64,
}

/// Per-memory-node controller capacity in MB/s, in the order of [`Profile::nodes`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Controllers {
    pub read_mb_s: Vec<Option<f64>>,
    #[serde(default)]
    pub write_mb_s: Option<Vec<Option<f64>>>,
}

/// What one thread can do on its own.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ThreadLimits {
    /// Cache lines one thread keeps in flight (memory-level parallelism, prefetch included).
    pub mlp: f64,
    /// A core's copy rate from cache-resident data, MB/s: the ceiling when memory is not the limit.
    pub copy_mb_s: f64,
}

impl Default for ThreadLimits {
    fn default() -> Self {
        ThreadLimits {
            mlp: 10.0,
            copy_mb_s: 10_000.0,
        }
    }
}

/// The CPU cost of the I/O path above memory (system call, file system lookups, copies that
/// hit the CPU cache), per request and per KiB.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct IoPath {
    pub request_overhead_ns: f64,
    pub cpu_ns_per_kib: f64,
}

/// `move_pages(2)` costs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct MovePages {
    pub us_per_page: f64,
    pub mb_s: f64,
    /// From which node to which the pages went (the same node on a one-node machine: then the
    /// number is the call's own cost, no copy).
    pub from: u32,
    pub to: u32,
}

/// A machine's NUMA costs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Short name (`adams`, `zonfs`, a host name).
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub origin: Origin,
    /// Where the numbers come from: the publication, or the host and time of the probe.
    #[serde(default)]
    pub source: String,
    /// Node ids; every matrix is in this order.
    pub nodes: Vec<u32>,
    /// CPUs per node (0 for a CPU-less node), used to recognise a profile of another machine.
    #[serde(default)]
    pub cpus_per_node: Vec<u32>,
    /// Idle latency in ns, `[cpu node][memory node]`; rows of CPU-less nodes are null.
    #[serde(default)]
    pub latency_ns: Option<Matrix>,
    #[serde(default)]
    pub bandwidth_mb_s: Bandwidth,
    #[serde(default)]
    pub loaded_latency: Vec<LoadedPoint>,
    #[serde(default)]
    pub advertised: Advertised,
    /// Relative spread of repeated measurements per quantity ((max − min) / median).
    #[serde(default)]
    pub spread: std::collections::BTreeMap<String, f64>,
    /// read(2) throughput of one thread from a cached file, MB/s, `[cpu node][page node]`.
    #[serde(default)]
    pub pagecache_read_mb_s: Option<Matrix>,
    #[serde(default)]
    pub move_pages: Option<MovePages>,
    #[serde(default)]
    pub controllers: Option<Controllers>,
    #[serde(default)]
    pub links: Option<Vec<Link>>,
    #[serde(default)]
    pub thread: ThreadLimits,
    #[serde(default)]
    pub io_path: IoPath,
    /// How much a memory controller's (or a node-to-memory path's) capacity falls when offered
    /// more than it can carry:
    /// capacity / (1 + collapse × (offered/capacity − 1)). 0 = no collapse.
    #[serde(default)]
    pub collapse: f64,
    /// What the probe skipped or what the publication does not give.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// How a profile relates to the machine it is used on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineMatch {
    Same,
    /// A profile from another machine; the reasons say what differs.
    Different(Vec<String>),
}

impl Profile {
    /// Reads a profile file, with the path in every error.
    pub fn load(path: &Path) -> ModelResult<Profile> {
        let text = std::fs::read_to_string(path).map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            what: "read the profile".into(),
            source: e,
        })?;
        Self::from_json(&text).map_err(|e| match e {
            ModelError::BadProfile { why, .. } => ModelError::BadProfile {
                name: path.display().to_string(),
                why,
            },
            other => other,
        })
    }

    /// Parses and checks a profile.
    pub fn from_json(text: &str) -> ModelResult<Profile> {
        let p: Profile = serde_json::from_str(text).map_err(|e| ModelError::BadProfile {
            name: "<json>".into(),
            why: e.to_string(),
        })?;
        p.validate()?;
        Ok(p)
    }

    /// Writes the profile as pretty JSON.
    pub fn save(&self, path: &Path) -> ModelResult<()> {
        let text = serde_json::to_string_pretty(self).expect("a profile always serialises");
        std::fs::write(path, text + "\n").map_err(|e| ModelError::Io {
            path: path.to_path_buf(),
            what: "write the profile".into(),
            source: e,
        })
    }

    fn bad(&self, why: String) -> ModelError {
        ModelError::BadProfile {
            name: self.name.clone(),
            why,
        }
    }

    /// Checks shapes and values: every matrix n×n, numbers finite and positive.
    pub fn validate(&self) -> ModelResult<()> {
        let n = self.nodes.len();
        if n == 0 {
            return Err(self.bad("no nodes".into()));
        }
        let mut sorted = self.nodes.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != n {
            return Err(self.bad("node ids repeat".into()));
        }
        if !self.cpus_per_node.is_empty() && self.cpus_per_node.len() != n {
            return Err(self.bad(format!(
                "cpus_per_node has {} entries for {n} nodes",
                self.cpus_per_node.len()
            )));
        }
        let check = |what: &str, m: &Option<Matrix>| -> ModelResult<()> {
            let Some(m) = m else { return Ok(()) };
            if m.len() != n || m.iter().any(|r| r.len() != n) {
                return Err(self.bad(format!("{what} is not a {n}x{n} matrix")));
            }
            if m.iter()
                .flatten()
                .flatten()
                .any(|v| !v.is_finite() || *v < 0.0)
            {
                return Err(self.bad(format!("{what} holds a negative or non-finite value")));
            }
            Ok(())
        };
        check("latency_ns", &self.latency_ns)?;
        let b = &self.bandwidth_mb_s;
        for (what, m) in [
            ("bandwidth read", &b.read),
            ("bandwidth write", &b.write),
            ("bandwidth write_nt", &b.write_nt),
            ("bandwidth rw_3_1", &b.rw_3_1),
            ("bandwidth rw_2_1", &b.rw_2_1),
            ("bandwidth rw_1_1", &b.rw_1_1),
            ("bandwidth copy", &b.copy),
            ("pagecache_read_mb_s", &self.pagecache_read_mb_s),
            ("advertised distance", &self.advertised.distance),
            ("advertised latency", &self.advertised.latency_ns),
            ("advertised bandwidth", &self.advertised.bandwidth_mb_s),
        ] {
            check(what, m)?;
        }
        if let Some(c) = &self.controllers {
            if c.read_mb_s.len() != n {
                return Err(self.bad(format!("controllers.read_mb_s needs {n} entries")));
            }
            if let Some(w) = &c.write_mb_s {
                if w.len() != n {
                    return Err(self.bad(format!("controllers.write_mb_s needs {n} entries")));
                }
            }
        }
        for l in self.links.iter().flatten() {
            if self.index(l.a).is_none() || self.index(l.b).is_none() || l.a == l.b {
                return Err(self.bad(format!("link {}-{} names an unknown node", l.a, l.b)));
            }
            if l.mb_s.is_nan() || l.mb_s <= 0.0 {
                return Err(self.bad(format!("link {}-{} has no capacity", l.a, l.b)));
            }
        }
        if self.thread.mlp.is_nan()
            || self.thread.copy_mb_s.is_nan()
            || self.thread.mlp <= 0.0
            || self.thread.copy_mb_s <= 0.0
        {
            return Err(self.bad("thread.mlp and thread.copy_mb_s must be positive".into()));
        }
        if self.collapse.is_nan() || self.collapse < 0.0 {
            return Err(self.bad("collapse must be 0 or more".into()));
        }
        Ok(())
    }

    /// Position of a node id in [`Profile::nodes`].
    pub fn index(&self, node: u32) -> Option<usize> {
        self.nodes.iter().position(|&n| n == node)
    }

    /// Whether node `i` (an index) has CPUs. Without CPU counts every node is assumed to have some.
    pub fn has_cpus(&self, i: usize) -> bool {
        !matches!(self.cpus_per_node.get(i), Some(0))
    }

    /// Whether node `j` (an index) holds memory. The probe leaves the latency column of a node
    /// without memory null, as it leaves the row of a node without CPUs; without a latency
    /// matrix every node is assumed to hold memory.
    pub fn has_memory(&self, j: usize) -> bool {
        match &self.latency_ns {
            None => true,
            Some(m) => m.iter().any(|row| row.get(j).copied().flatten().is_some()),
        }
    }

    /// Idle latency from CPU node index `i` to memory node index `j`.
    pub fn latency(&self, i: usize, j: usize) -> Option<f64> {
        self.latency_ns.as_ref()?.get(i)?.get(j).copied().flatten()
    }

    /// Compares the profile with a machine's topology: node ids and CPUs per node.
    pub fn matches(&self, topo: &Topology) -> MachineMatch {
        let mut why = Vec::new();
        let ids = topo.node_ids();
        if ids != self.nodes {
            why.push(format!(
                "the profile has nodes {:?}, this machine {:?}",
                self.nodes, ids
            ));
        } else if !self.cpus_per_node.is_empty() {
            for (i, n) in topo.nodes.iter().enumerate() {
                let have = n.cpus.len() as u32;
                if self.cpus_per_node[i] != have {
                    why.push(format!(
                        "node {} has {have} CPUs here, {} in the profile",
                        n.id, self.cpus_per_node[i]
                    ));
                }
            }
        }
        if why.is_empty() {
            MachineMatch::Same
        } else {
            MachineMatch::Different(why)
        }
    }

    /// A profile with only the SLIT distances of a machine, for ranking nodes when nothing was
    /// measured: latency is taken as proportional to distance (10 = local = 80 ns).
    pub fn from_distances(topo: &Topology) -> Profile {
        let nodes = topo.node_ids();
        let dist: Matrix = nodes
            .iter()
            .map(|&a| {
                nodes
                    .iter()
                    .map(|&b| topo.distance(a, b).map(f64::from))
                    .collect()
            })
            .collect();
        let lat: Matrix = topo
            .nodes
            .iter()
            .zip(&dist)
            .map(|(n, row)| {
                row.iter()
                    .map(|d| d.filter(|_| n.has_cpus()).map(|d| d * 8.0))
                    .collect()
            })
            .collect();
        Profile {
            name: "slit".into(),
            origin: Origin::Measured,
            source: "SLIT distances of this machine (nothing measured)".into(),
            cpus_per_node: topo.nodes.iter().map(|n| n.cpus.len() as u32).collect(),
            nodes,
            latency_ns: Some(lat),
            advertised: Advertised {
                distance: Some(dist),
                ..Advertised::default()
            },
            // A read(2) path of about 3 GB/s per thread: without it every remote byte would
            // look as costly as a bare memory load, and moves would look far more worthwhile
            // than they measure (Adams: 10-15 %).
            io_path: IoPath {
                request_overhead_ns: 0.0,
                cpu_ns_per_kib: 300.0,
            },
            notes: vec![
                "latency derived from SLIT distances: 10 = 80 ns".into(),
                "io_path assumed: 300 ns per KiB of read(2) CPU cost".into(),
            ],
            ..Profile::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_profile_parses_and_bad_shapes_are_refused() {
        let p = Profile::from_json(r#"{"nodes":[0,1],"latency_ns":[[80,120],[120,80]]}"#).unwrap();
        assert_eq!(p.latency(0, 1), Some(120.0));
        assert_eq!(p.thread, ThreadLimits::default());
        let e = Profile::from_json(r#"{"nodes":[0,1],"latency_ns":[[80,120]]}"#).unwrap_err();
        assert!(e.to_string().contains("2x2"), "{e}");
        let e = Profile::from_json(r#"{"nodes":[0,0]}"#).unwrap_err();
        assert!(e.to_string().contains("repeat"), "{e}");
        let e =
            Profile::from_json(r#"{"nodes":[0,1],"links":[{"a":0,"b":5,"mb_s":1}]}"#).unwrap_err();
        assert!(e.to_string().contains("unknown node"), "{e}");
        assert!(Profile::from_json("not json").is_err());
    }

    #[test]
    fn another_machine_is_flagged() {
        let topo = Topology::synthetic("n0=0-1@1G n1=2-3@1G").unwrap();
        let mut p = Profile::from_distances(&topo);
        assert_eq!(p.matches(&topo), MachineMatch::Same);
        p.cpus_per_node = vec![2, 4];
        assert!(matches!(p.matches(&topo), MachineMatch::Different(w) if w[0].contains("node 1")));
        p.nodes = vec![0, 1, 2];
        assert!(matches!(p.matches(&topo), MachineMatch::Different(_)));
    }

    #[test]
    fn slit_profile_has_null_rows_for_cpuless_nodes() {
        let topo = Topology::synthetic("n0=0@1G n1=@1G").unwrap();
        let p = Profile::from_distances(&topo);
        assert!(p.latency(0, 1).is_some());
        assert_eq!(p.latency(1, 0), None);
        let text = serde_json::to_string(&p).unwrap();
        assert_eq!(Profile::from_json(&text).unwrap(), p);
    }
}
