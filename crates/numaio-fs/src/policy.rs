//! Placement policies: which node a new block of a file should come from.
//!
//! Chosen at mkfs time as the volume default and per directory (inherited by what is created
//! under it). The words and their meaning are numaio-numa's [`PlacementPolicy`], with the
//! volume's storage nodes as the places and the inode number as the file's seed:
//! `writer-local` is NUMA-aware ext4's `-o numa`, `directory` is JeriFS's directory → node
//! placement, `stripe:K:CHUNK` is ZonFS's striping, `fixed:NODE` a node of the volume.
//! `range` is the engine's cache placement and has no file-system meaning.
//!
//! The policy is stored in inodes and in the superblock (postcard): its variant order is
//! part of the on-disk format.

use crate::FsError;
use numaio_numa::placement::{ParseError, PlacementError};

pub use numaio_numa::placement::PlacementPolicy;

impl From<ParseError> for FsError {
    fn from(e: ParseError) -> Self {
        FsError::Invalid(e.to_string())
    }
}

impl From<PlacementError> for FsError {
    fn from(e: PlacementError) -> Self {
        FsError::Invalid(e.to_string())
    }
}

/// Parses a file-system placement policy: any of numaio-numa's words but `range`.
pub fn parse(s: &str) -> Result<PlacementPolicy, FsError> {
    let p: PlacementPolicy = s.parse()?;
    check_kind(&p)?;
    Ok(p)
}

/// Checks a policy against the volume's storage nodes: not `range`, a stripe over no more
/// nodes than the volume has, a fixed node that holds storage. (A stripe chunk is a multiple
/// of the block size by the parser's rule.)
pub fn check(p: &PlacementPolicy, volume_nodes: &[u32]) -> Result<(), FsError> {
    check_kind(p)?;
    p.validate(volume_nodes)?;
    Ok(())
}

fn check_kind(p: &PlacementPolicy) -> Result<(), FsError> {
    if let PlacementPolicy::Range { .. } = p {
        return Err(FsError::Invalid(format!(
            "placement {p}: range is a cache placement of the engine, not of the file \
             system (use writer-local, directory, interleave, stripe:K[:CHUNK] or fixed:NODE)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_is_refused_and_nodes_are_checked() {
        let e = parse("range:8").unwrap_err().to_string();
        assert!(e.contains("cache placement of the engine"), "{e}");
        let e = parse("fixed:x").unwrap_err().to_string();
        assert!(e.contains("expected writer-local"), "{e}");
        let nodes = [0, 1];
        assert!(check(&parse("fixed:1").unwrap(), &nodes).is_ok());
        let e = check(&parse("fixed:2").unwrap(), &nodes).unwrap_err();
        assert!(e.to_string().contains("node 2 holds no data here"), "{e}");
        assert!(check(&parse("stripe:3:8K").unwrap(), &nodes).is_err());
        assert!(check(&PlacementPolicy::Range { range_blocks: 1 }, &nodes).is_err());
    }

    /// Inodes and superblocks written before the policy moved to numaio-numa read back.
    #[test]
    fn on_disk_encoding_is_unchanged() {
        for (p, bytes) in [
            (PlacementPolicy::WriterLocal, vec![0u8]),
            (PlacementPolicy::Directory, vec![1]),
            (PlacementPolicy::Interleave, vec![2]),
            (
                PlacementPolicy::Stripe {
                    nodes: 2,
                    chunk: 65536,
                },
                vec![3, 2, 0x80, 0x80, 0x04],
            ),
            (PlacementPolicy::Fixed(3), vec![4, 3]),
        ] {
            assert_eq!(postcard::to_allocvec(&p).unwrap(), bytes, "{p}");
            assert_eq!(postcard::from_bytes::<PlacementPolicy>(&bytes).unwrap(), p);
        }
    }
}
