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

    /// Parses `writer-local`, `directory`, `interleave`, `stripe:K[:CHUNK]` (CHUNK with an
    /// optional K/M/G suffix, 64K when left out) or `fixed:N`. The spelling is the engine's
    /// (one parser for both); the engine's `range` placement has no file-system meaning.
    fn from_str(s: &str) -> Result<Self, FsError> {
        use numaio_engine::placement::PlacementPolicy as Engine;
        let bad = |why: &str| {
            FsError::Invalid(format!(
                "placement {s:?}: {why} (expected writer-local, directory, interleave, \
                 stripe:K[:CHUNK] or fixed:N)"
            ))
        };
        match s.parse::<Engine>().map_err(|e| bad(&e.why))? {
            Engine::WriterLocal => Ok(PlacementPolicy::WriterLocal),
            Engine::Directory => Ok(PlacementPolicy::Directory),
            Engine::Interleave => Ok(PlacementPolicy::Interleave),
            Engine::Stripe { k, chunk } => Ok(PlacementPolicy::Stripe {
                nodes: u32::try_from(k).map_err(|_| bad("stripe width K is too large"))?,
                chunk,
            }),
            Engine::Fixed(n) => Ok(PlacementPolicy::Fixed(
                u32::try_from(n).map_err(|_| bad("node is too large"))?,
            )),
            Engine::Range { .. } => Err(bad(
                "range is a cache placement of the engine, not of the file system",
            )),
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
        assert_eq!(
            "stripe:2".parse::<PlacementPolicy>().unwrap(),
            PlacementPolicy::Stripe {
                nodes: 2,
                chunk: 64 << 10
            }
        );
        for bad in [
            "",
            "local",
            "fixed:",
            "fixed:x",
            "stripe:0:4K",
            "stripe:2:0",
            "stripe:x:4K",
            "fixed:4294967296",
            "range:8",
        ] {
            let e = bad.parse::<PlacementPolicy>().unwrap_err().to_string();
            assert!(e.contains("expected writer-local"), "{bad:?}: {e}");
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
