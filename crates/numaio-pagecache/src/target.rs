//! Placement targets: which node each page of a file should live on.

use crate::error::PagecacheError;
use serde::Serialize;
use std::fmt;

/// Largest node id a target may name: the kernel's `MAX_NUMNODES` is at most 1024.
pub use numaio_numa::placement::MAX_NODE_ID;
use numaio_numa::placement::{BlockRef, PlacementPolicy};

/// Most `NODE:WEIGHT` entries a weights list may have.
pub const MAX_WEIGHTS: usize = 1024;

/// Largest weight of one node (pages per cycle).
pub const MAX_WEIGHT: u32 = 1 << 20;

fn invalid(s: String) -> PagecacheError {
    PagecacheError::InvalidTarget(s)
}

/// Parses a node list such as `0-3` or `0,2` (kernel list format) whose ids are at most
/// `max_node` (also capped at [`MAX_NODE_ID`]). Pure: reads nothing from the system.
pub fn parse_node_list(s: &str, max_node: u32) -> Result<Vec<u32>, PagecacheError> {
    let v = numaio_sys::cpulist::parse_bounded(s, max_node.min(MAX_NODE_ID))
        .map_err(|e| invalid(format!("bad node list: {e}")))?;
    if v.is_empty() {
        return Err(invalid(format!("empty node list {s:?}")));
    }
    Ok(v)
}

/// Parses a stripe chunk size such as `1M` (K/M/G/T suffixes); zero is refused here, the
/// page-size multiple is checked by [`Target::check_shape`].
pub fn parse_chunk(s: &str) -> Result<u64, PagecacheError> {
    numaio_sys::topology::parse_size(s)
        .filter(|&c| c > 0)
        .ok_or_else(|| {
            invalid(format!(
                "bad --chunk size {s:?}: use a non-zero size such as 1M"
            ))
        })
}

/// Where a file's pages should go. `interleave` and `stripe` follow numaio-numa's placement
/// rule over the listed nodes with seed 0: the list is used in the order given, from its
/// first node, for every file.
/// Serialized as `{"kind":"node","node":N}`, `{"kind":"interleave","nodes":[..]}`,
/// `{"kind":"stripe","nodes":[..],"chunk":BYTES}` or `{"kind":"weights","weights":[[N,W],..]}`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Every page on one node.
    Node(u32),
    /// Page `i` on `nodes[i mod K]` (page-by-page round robin).
    Interleave(Vec<u32>),
    /// Chunk `i` (of `chunk` bytes) on `nodes[i mod K]` (ZonFS striping).
    Stripe { nodes: Vec<u32>, chunk: u64 },
    /// Weighted interleave: in each cycle of `sum(w)` pages, node `n` gets `w` consecutive pages.
    Weights(Vec<(u32, u32)>),
}

impl Target {
    /// The node page `page_index` should be on. Call [`Target::validate`] first: an empty
    /// node list or zero weights yield node 0 rather than a panic.
    pub fn node_for_page(&self, page_index: u64, page_size: u64) -> u32 {
        let listed = |policy: PlacementPolicy, nodes: &[u32]| {
            let at = BlockRef {
                block: page_index,
                ..BlockRef::default()
            };
            policy.place(nodes, page_size, &at).node
        };
        match self {
            Target::Node(n) => *n,
            Target::Interleave(nodes) => listed(PlacementPolicy::Interleave, nodes),
            Target::Stripe { nodes, chunk } => listed(
                PlacementPolicy::Stripe {
                    nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
                    chunk: *chunk,
                },
                nodes,
            ),
            Target::Weights(w) => {
                let total: u64 = w.iter().map(|&(_, w)| w as u64).sum();
                if total == 0 {
                    return 0;
                }
                let mut r = page_index % total;
                for &(n, wt) in w {
                    if r < wt as u64 {
                        return n;
                    }
                    r -= wt as u64;
                }
                0
            }
        }
    }

    /// The distinct nodes of the target, in first-use order.
    pub fn nodes(&self) -> Vec<u32> {
        let all: Vec<u32> = match self {
            Target::Node(n) => vec![*n],
            Target::Interleave(n) | Target::Stripe { nodes: n, .. } => n.clone(),
            Target::Weights(w) => w.iter().filter(|p| p.1 > 0).map(|p| p.0).collect(),
        };
        // First appearance order, deduplicated in linear time (lists can be long).
        let mut seen = std::collections::HashSet::with_capacity(all.len());
        all.into_iter().filter(|n| seen.insert(*n)).collect()
    }

    /// Length in pages of the run of pages with the same target node starting at `page_index`
    /// (capped at `max`). Lets callers act on runs instead of single pages.
    pub fn run_len(&self, page_index: u64, page_size: u64, max: u64) -> u64 {
        match self {
            Target::Node(_) => max,
            Target::Stripe { chunk, .. } if *chunk >= page_size => {
                // Whole chunks at a time; a node listed twice in a row (or a one-node list)
                // continues the run into the next chunk.
                let pages_per_chunk = chunk / page_size;
                let n = self.node_for_page(page_index, page_size);
                let mut len = pages_per_chunk - page_index % pages_per_chunk;
                while len < max
                    && self.node_for_page(page_index.saturating_add(len), page_size) == n
                {
                    len = len.saturating_add(pages_per_chunk);
                }
                len.min(max)
            }
            _ => {
                let n = self.node_for_page(page_index, page_size);
                let mut len = 1;
                while len < max && self.node_for_page(page_index + len, page_size) == n {
                    len += 1;
                }
                len
            }
        }
    }

    /// Checks the target's shape (non-empty lists, chunk a multiple of `page_size`, some
    /// weight above 0), without looking at the machine.
    pub fn check_shape(&self, page_size: u64) -> Result<(), PagecacheError> {
        let bad = |s: String| Err(PagecacheError::InvalidTarget(s));
        match self {
            Target::Interleave(n) if n.is_empty() => return bad("empty node list".into()),
            Target::Stripe { nodes, .. } if nodes.is_empty() => {
                return bad("empty node list".into())
            }
            Target::Stripe { chunk, .. } if *chunk == 0 || chunk % page_size != 0 => {
                return bad(format!(
                    "stripe chunk {chunk} must be a non-zero multiple of the page size ({page_size})"
                ))
            }
            Target::Weights(w) if w.is_empty() || w.iter().all(|p| p.1 == 0) => {
                return bad("weights must name at least one node with a weight above 0".into())
            }
            _ => {}
        }
        Ok(())
    }

    /// Checks the target's shape, and that each node exists and has memory.
    pub fn validate(&self, page_size: u64) -> Result<(), PagecacheError> {
        let bad = |s: String| Err(PagecacheError::InvalidTarget(s));
        self.check_shape(page_size)?;
        let topo = numaio_sys::Topology::detect()
            .map_err(|e| PagecacheError::InvalidTarget(format!("cannot read topology: {e}")))?;
        let with_mem: Vec<u32> = topo
            .nodes
            .iter()
            .filter(|n| n.has_memory())
            .map(|n| n.id)
            .collect();
        for n in self.nodes() {
            if !with_mem.contains(&n) {
                let list: Vec<String> = with_mem.iter().map(|n| n.to_string()).collect();
                return bad(format!(
                    "node {n} does not exist or has no memory (nodes with memory: {}); run `numaio topo`",
                    list.join(",")
                ));
            }
        }
        Ok(())
    }

    /// Parses `N:W,N:W,...` for [`Target::Weights`] (nodes up to [`MAX_NODE_ID`]).
    pub fn parse_weights(s: &str) -> Result<Target, PagecacheError> {
        Self::parse_weights_bounded(s, MAX_NODE_ID)
    }

    /// Parses `N:W,N:W,...` with every node at most `max_node`, at most [`MAX_WEIGHTS`]
    /// entries and weights up to [`MAX_WEIGHT`]. Pure: reads nothing from the system.
    pub fn parse_weights_bounded(s: &str, max_node: u32) -> Result<Target, PagecacheError> {
        let max_node = max_node.min(MAX_NODE_ID);
        let short = |t: &str| t.chars().take(24).collect::<String>();
        let mut w = Vec::new();
        for part in s.split(',').filter(|p| !p.trim().is_empty()) {
            if w.len() == MAX_WEIGHTS {
                return Err(invalid(format!(
                    "more than {MAX_WEIGHTS} entries in weights"
                )));
            }
            let (n, wt) = part
                .split_once(':')
                .ok_or_else(|| invalid(format!("weight {:?} is not NODE:WEIGHT", short(part))))?;
            let n: u32 = n
                .trim()
                .parse()
                .ok()
                .filter(|&n| n <= max_node)
                .ok_or_else(|| {
                    invalid(format!(
                        "bad node {:?} in weights: use a node id from 0 to {max_node}",
                        short(n)
                    ))
                })?;
            let wt: u32 = wt
                .trim()
                .parse()
                .ok()
                .filter(|&w| w <= MAX_WEIGHT)
                .ok_or_else(|| {
                    invalid(format!(
                        "bad weight {:?} in weights: use a whole number from 0 to {MAX_WEIGHT}",
                        short(wt)
                    ))
                })?;
            w.push((n, wt));
        }
        if w.is_empty() {
            return Err(invalid(format!(
                "no weights in {:?} (expected NODE:WEIGHT,...)",
                short(s)
            )));
        }
        Ok(Target::Weights(w))
    }

    /// Builds a target from the command-line spellings (exactly one of `node`, `interleave`,
    /// `stripe` with `chunk`, `weights`) and checks its shape with [`Target::check_shape`].
    /// Pure: reads nothing from the system, so it suits fuzzing; [`Target::validate`] then
    /// checks the nodes against this machine.
    pub fn from_flags(
        node: Option<u32>,
        interleave: Option<&str>,
        stripe: Option<&str>,
        chunk: Option<&str>,
        weights: Option<&str>,
        max_node: u32,
        page_size: u64,
    ) -> Result<Target, PagecacheError> {
        let max_node = max_node.min(MAX_NODE_ID);
        let t = match (node, interleave, stripe, weights) {
            (Some(n), None, None, None) => {
                if n > max_node {
                    return Err(invalid(format!(
                        "node {n} does not exist: node ids go from 0 to {max_node}; run `numaio topo`"
                    )));
                }
                Target::Node(n)
            }
            (None, Some(s), None, None) => Target::Interleave(parse_node_list(s, max_node)?),
            (None, None, Some(s), None) => {
                let c = chunk.ok_or_else(|| invalid("--stripe needs --chunk SIZE".into()))?;
                Target::Stripe {
                    nodes: parse_node_list(s, max_node)?,
                    chunk: parse_chunk(c)?,
                }
            }
            (None, None, None, Some(w)) => Target::parse_weights_bounded(w, max_node)?,
            (None, None, None, None) => {
                return Err(invalid(
                    "give a target: --node, --interleave, --stripe with --chunk, or --weights"
                        .into(),
                ))
            }
            _ => return Err(invalid("give only one target".into())),
        };
        t.check_shape(page_size)?;
        Ok(t)
    }
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum TargetJson<'a> {
    Node { node: u32 },
    Interleave { nodes: &'a [u32] },
    Stripe { nodes: &'a [u32], chunk: u64 },
    Weights { weights: &'a [(u32, u32)] },
}

impl Serialize for Target {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Target::Node(n) => TargetJson::Node { node: *n },
            Target::Interleave(v) => TargetJson::Interleave { nodes: v },
            Target::Stripe { nodes, chunk } => TargetJson::Stripe {
                nodes,
                chunk: *chunk,
            },
            Target::Weights(w) => TargetJson::Weights { weights: w },
        }
        .serialize(s)
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list = |v: &[u32]| {
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Target::Node(n) => write!(f, "node {n}"),
            Target::Interleave(v) => write!(f, "interleave {}", list(v)),
            Target::Stripe { nodes, chunk } => {
                write!(f, "stripe {} in {chunk}-byte chunks", list(nodes))
            }
            Target::Weights(w) => {
                let s: Vec<String> = w.iter().map(|(n, w)| format!("{n}:{w}")).collect();
                write!(f, "weights {}", s.join(","))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stripe_runs_continue_across_chunks_of_the_same_node() {
        let ps = 4096;
        let one = Target::Stripe {
            nodes: vec![0],
            chunk: ps,
        };
        assert_eq!(one.run_len(0, ps, 64), 64);
        let twice = Target::Stripe {
            nodes: vec![1, 1, 0],
            chunk: 2 * ps,
        };
        assert_eq!(twice.run_len(1, ps, 64), 3);
        assert_eq!(twice.run_len(4, ps, 64), 2);
        assert_eq!(twice.run_len(6, ps, 64), 4);
    }

    #[test]
    fn node_for_page_follows_each_shape() {
        let ps = 4096;
        let t = Target::Interleave(vec![0, 2, 3]);
        let v: Vec<u32> = (0..6).map(|i| t.node_for_page(i, ps)).collect();
        assert_eq!(v, vec![0, 2, 3, 0, 2, 3]);
        let t = Target::Stripe {
            nodes: vec![0, 2],
            chunk: 1 << 20,
        };
        assert_eq!(t.node_for_page(0, ps), 0);
        assert_eq!(t.node_for_page(255, ps), 0);
        assert_eq!(t.node_for_page(256, ps), 2);
        assert_eq!(t.node_for_page(512, ps), 0);
        assert_eq!(t.run_len(10, ps, 10_000), 246);
        assert_eq!(t.run_len(10, ps, 5), 5);
        let t = Target::parse_weights("0:3, 1:1").unwrap();
        let v: Vec<u32> = (0..8).map(|i| t.node_for_page(i, ps)).collect();
        assert_eq!(v, vec![0, 0, 0, 1, 0, 0, 0, 1]);
        assert_eq!(t.run_len(1, ps, 100), 2);
        assert_eq!(t.nodes(), vec![0, 1]);
        assert_eq!(Target::Node(3).node_for_page(99, ps), 3);
        let j = |t: &Target| serde_json::to_string(t).unwrap();
        assert_eq!(j(&Target::Node(1)), r#"{"kind":"node","node":1}"#);
        assert_eq!(
            j(&Target::Stripe {
                nodes: vec![0, 2],
                chunk: 4096
            }),
            r#"{"kind":"stripe","nodes":[0,2],"chunk":4096}"#
        );
        assert_eq!(
            j(&Target::parse_weights("0:3,1:1").unwrap()),
            r#"{"kind":"weights","weights":[[0,3],[1,1]]}"#
        );
    }

    #[test]
    fn bad_targets_are_rejected() {
        assert!(Target::parse_weights("0=3").is_err());
        assert!(Target::parse_weights("x:1").is_err());
        assert!(Target::parse_weights("").is_err());
        assert!(Target::Interleave(vec![]).validate(4096).is_err());
        let e = Target::Stripe {
            nodes: vec![0],
            chunk: 1000,
        }
        .validate(4096)
        .unwrap_err();
        assert!(e.to_string().contains("multiple of the page size"), "{e}");
        let e = Target::Node(999).validate(4096).unwrap_err();
        assert!(e.to_string().contains("node 999"), "{e}");
        assert!(Target::Node(0).validate(4096).is_ok());
    }

    #[test]
    fn hostile_lists_are_bounded() {
        let t = std::time::Instant::now();
        let e = parse_node_list("0-1048576", 7).unwrap_err().to_string();
        assert!(e.contains("above the largest allowed, 7"), "{e}");
        assert!(parse_node_list("", 7).is_err());
        assert_eq!(parse_node_list("0,2", 7).unwrap(), vec![0, 2]);
        let long = vec!["0:1"; MAX_WEIGHTS + 1].join(",");
        assert!(Target::parse_weights(&long).is_err());
        assert!(Target::parse_weights("0:4294967295").is_err());
        assert!(Target::parse_weights_bounded("8:1", 7).is_err());
        assert!(t.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(
            Target::from_flags(None, None, Some("0-1"), Some("8K"), None, 7, 4096).unwrap(),
            Target::Stripe {
                nodes: vec![0, 1],
                chunk: 8192
            }
        );
        assert!(Target::from_flags(None, None, Some("0"), Some("0"), None, 7, 4096).is_err());
        assert!(Target::from_flags(None, None, Some("0"), None, None, 7, 4096).is_err());
        assert!(Target::from_flags(Some(8), None, None, None, None, 7, 4096).is_err());
        assert!(Target::from_flags(None, None, None, None, None, 7, 4096).is_err());
        assert!(Target::from_flags(Some(0), Some("0"), None, None, None, 7, 4096).is_err());
    }
}
