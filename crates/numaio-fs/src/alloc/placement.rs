//! From a policy to nodes: which node each logical block of a request wants, as runs of
//! blocks that want the same node (computed arithmetically, not block by block), and which
//! storage node serves a node that has none (a CPU-only writer, a fixed node without a
//! device).

use crate::{PlacementPolicy, BLOCK_SIZE};
use numaio_numa::placement::BlockRef;
use std::collections::BTreeMap;

/// The node the policy wants `file_block` on, and how many blocks from `file_block` (up to
/// `end`) want that same node: numaio-numa's rule, over the volume's storage nodes, seeded by
/// the inode number. The node may have no storage (a writer on a CPU-only node).
pub(crate) fn policy_run(
    policy: &PlacementPolicy,
    nodes: &[u32],
    ino: u64,
    caller_node: u32,
    home_node: Option<u32>,
    file_block: u64,
    end: u64,
) -> (u32, u64) {
    let at = BlockRef {
        seed: ino,
        block: file_block,
        home: home_node,
        caller: Some(caller_node),
    };
    let p = policy.place(nodes, BLOCK_SIZE, &at);
    (p.node, p.run.min(end.saturating_sub(file_block)).max(1))
}

/// The storage node nearest to `node` by the distance table, ties spread by `spread`; None
/// when the table says nothing about `node`.
pub(crate) fn nearest(
    distances: &BTreeMap<(u32, u32), u32>,
    node: u32,
    storage: &[u32],
    spread: u64,
) -> Option<u32> {
    let best = storage
        .iter()
        .filter_map(|&s| distances.get(&(node, s)).copied())
        .min()?;
    let tied: Vec<u32> = storage
        .iter()
        .copied()
        .filter(|&s| distances.get(&(node, s)) == Some(&best))
        .collect();
    Some(tied[(spread % tied.len() as u64) as usize])
}

/// The order in which nodes are tried for blocks that want `pref`: `pref` first, then the
/// others round robin starting at a rotating point (nearest first when distances are
/// known), nodes with a recorded soft error last.
pub(crate) fn fallback_order(
    pref: u32,
    nodes: &[u32],
    rotor: u64,
    distances: &BTreeMap<(u32, u32), u32>,
    demoted: impl Fn(u32) -> bool,
) -> Vec<u32> {
    let at = nodes.iter().position(|&n| n == pref).unwrap_or(0);
    let mut others: Vec<u32> = nodes[at..]
        .iter()
        .chain(&nodes[..at])
        .copied()
        .filter(|&n| n != pref)
        .collect();
    if !others.is_empty() {
        let r = (rotor % others.len() as u64) as usize;
        others.rotate_left(r);
    }
    if !distances.is_empty() {
        others.sort_by_key(|&n| distances.get(&(pref, n)).copied().unwrap_or(u32::MAX));
    }
    let mut order = Vec::with_capacity(nodes.len());
    if nodes.contains(&pref) {
        order.push(pref);
    }
    order.extend(others);
    // Stable: the order above holds within the healthy and within the demoted nodes.
    order.sort_by_key(|&n| demoted(n));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_computed_per_policy() {
        let nodes = [0, 1, 2, 3];
        let run = |p: &PlacementPolicy, ino, b, end| policy_run(p, &nodes, ino, 2, Some(1), b, end);
        assert_eq!(run(&PlacementPolicy::WriterLocal, 7, 10, 100), (2, 90));
        assert_eq!(run(&PlacementPolicy::Directory, 7, 0, 5), (1, 5));
        assert_eq!(run(&PlacementPolicy::Fixed(3), 7, 0, 5), (3, 5));
        assert_eq!(run(&PlacementPolicy::Interleave, 1, 0, 5), (1, 1));
        assert_eq!(run(&PlacementPolicy::Interleave, 1, 3, 5), (0, 1));
        let s = PlacementPolicy::Stripe {
            nodes: 2,
            chunk: 4 * BLOCK_SIZE,
        };
        assert_eq!(run(&s, 5, 0, 100), (1, 4));
        assert_eq!(run(&s, 5, 5, 100), (2, 3));
        assert_eq!(run(&s, 5, 8, 10), (1, 2));
        let one = PlacementPolicy::Stripe {
            nodes: 1,
            chunk: BLOCK_SIZE,
        };
        assert_eq!(run(&one, 6, 3, 50), (2, 47));
    }

    #[test]
    fn fallback_rotates_and_demotes() {
        let nodes = [0, 1, 2, 3];
        let none = BTreeMap::new();
        assert_eq!(fallback_order(1, &nodes, 0, &none, |_| false), [1, 2, 3, 0]);
        assert_eq!(fallback_order(1, &nodes, 1, &none, |_| false), [1, 3, 0, 2]);
        assert_eq!(
            fallback_order(1, &nodes, 0, &none, |n| n == 1 || n == 2),
            [3, 0, 1, 2]
        );
        let mut d = BTreeMap::new();
        for a in 0..4u32 {
            for b in 0..4u32 {
                d.insert((a, b), if a == b { 10 } else { 20 + 10 * a.abs_diff(b) });
            }
        }
        assert_eq!(fallback_order(1, &nodes, 0, &d, |_| false), [1, 2, 0, 3]);
        assert_eq!(fallback_order(1, &nodes, 1, &d, |_| false), [1, 0, 2, 3]);
        assert_eq!(nearest(&d, 3, &[0, 1], 0), Some(1));
        assert_eq!(nearest(&d, 9, &[0, 1], 0), None);
    }
}
