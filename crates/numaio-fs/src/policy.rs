//! Placement policies: which node a new block of a file should come from.
//!
//! Chosen at mkfs time as the volume default and per directory (inherited by what is created
//! under it). The names are those of the seeds: `writer-local` is NUMA-aware ext4's `-o numa`,
//! `directory` is JeriFS's directory → slice placement, `stripe:K:CHUNK` is ZonFS's striping.

use crate::FsError;
use std::fmt;
use std::str::FromStr;

/// Where new blocks of a file go.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum PlacementPolicy {
    /// On the node of the writing thread (the default).
    WriterLocal,
    /// Each top-level directory gets a node round robin; everything under it lives there.
    Directory,
    /// Block by block, round robin over the volume's nodes.
    Interleave,
    /// Chunks of `chunk` bytes round robin over `nodes` nodes.
    Stripe { nodes: u32, chunk: u64 },
    /// Always on this node.
    Fixed(u32),
}

impl PlacementPolicy {
    /// Checks the policy against the volume's nodes: a stripe over no more nodes than the
    /// volume has, a chunk that is a non-zero multiple of the block size, a fixed node that
    /// holds storage.
    pub fn validate(&self, volume_nodes: &[u32]) -> Result<(), FsError> {
        match self {
            PlacementPolicy::Stripe { nodes, chunk } => {
                if *nodes == 0 || *nodes as usize > volume_nodes.len() {
                    return Err(FsError::Invalid(format!(
                        "stripe over {nodes} nodes, but the volume has storage on {} node(s)",
                        volume_nodes.len()
                    )));
                }
                if *chunk == 0 || chunk % crate::BLOCK_SIZE != 0 {
                    return Err(FsError::Invalid(format!(
                        "stripe chunk {chunk} must be a non-zero multiple of {} bytes",
                        crate::BLOCK_SIZE
                    )));
                }
            }
            PlacementPolicy::Fixed(n) if !volume_nodes.contains(n) => {
                return Err(FsError::Invalid(format!(
                    "fixed:{n}: node {n} has no device in this volume (nodes: {volume_nodes:?})"
                )));
            }
            _ => {}
        }
        Ok(())
    }
}

impl fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementPolicy::WriterLocal => f.write_str("writer-local"),
            PlacementPolicy::Directory => f.write_str("directory"),
            PlacementPolicy::Interleave => f.write_str("interleave"),
            PlacementPolicy::Stripe { nodes, chunk } => write!(f, "stripe:{nodes}:{chunk}"),
            PlacementPolicy::Fixed(n) => write!(f, "fixed:{n}"),
        }
    }
}

impl FromStr for PlacementPolicy {
    type Err = FsError;

    /// Parses `writer-local`, `directory`, `interleave`, `stripe:K:CHUNK` (CHUNK with an
    /// optional K/M/G suffix) or `fixed:N`.
    fn from_str(s: &str) -> Result<Self, FsError> {
        let bad = |why: &str| {
            FsError::Invalid(format!(
                "placement {s:?}: {why} (expected writer-local, directory, interleave, \
                 stripe:K:CHUNK or fixed:N)"
            ))
        };
        match s.trim() {
            "writer-local" => Ok(PlacementPolicy::WriterLocal),
            "directory" => Ok(PlacementPolicy::Directory),
            "interleave" => Ok(PlacementPolicy::Interleave),
            other => {
                if let Some(n) = other.strip_prefix("fixed:") {
                    let n = n.parse::<u32>().map_err(|_| bad("node is not a number"))?;
                    return Ok(PlacementPolicy::Fixed(n));
                }
                if let Some(rest) = other.strip_prefix("stripe:") {
                    let (k, chunk) = rest.split_once(':').ok_or_else(|| bad("missing CHUNK"))?;
                    let nodes = k.parse::<u32>().map_err(|_| bad("K is not a number"))?;
                    let chunk = numaio_sys::topology::parse_size(chunk)
                        .ok_or_else(|| bad("CHUNK is not a size"))?;
                    if nodes == 0 || chunk == 0 {
                        return Err(bad("K and CHUNK must be above 0"));
                    }
                    return Ok(PlacementPolicy::Stripe { nodes, chunk });
                }
                Err(bad("unknown policy"))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_round_trip_through_their_names() {
        for s in [
            "writer-local",
            "directory",
            "interleave",
            "stripe:2:65536",
            "fixed:3",
        ] {
            let p: PlacementPolicy = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        assert_eq!(
            "stripe:4:1M".parse::<PlacementPolicy>().unwrap(),
            PlacementPolicy::Stripe {
                nodes: 4,
                chunk: 1 << 20
            }
        );
        for bad in [
            "",
            "local",
            "fixed:",
            "fixed:x",
            "stripe:0:4K",
            "stripe:2",
            "stripe:2:0",
        ] {
            assert!(bad.parse::<PlacementPolicy>().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn validation_checks_nodes_and_chunk() {
        let nodes = [0, 1];
        assert!(PlacementPolicy::Fixed(1).validate(&nodes).is_ok());
        assert!(PlacementPolicy::Fixed(2).validate(&nodes).is_err());
        let s = |k, chunk| PlacementPolicy::Stripe { nodes: k, chunk };
        assert!(s(2, 8192).validate(&nodes).is_ok());
        assert!(s(3, 8192).validate(&nodes).is_err());
        assert!(s(2, 1000).validate(&nodes).is_err());
    }
}
