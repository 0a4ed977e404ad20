//! Placement rules, fallback order, goals, preallocation, and a property test of the
//! allocator against a brute-force model.

use super::*;
use crate::BLOCK_SIZE;
use proptest::prelude::*;
use std::collections::HashMap;

/// One device per node, `sizes[i]` blocks on node i, groups of at most `group` blocks.
fn volume(sizes: &[u64], group: u64) -> Allocator {
    let mut groups = Vec::new();
    for (i, &size) in sizes.iter().enumerate() {
        let mut start = 8; // room for a superblock
        while start < 8 + size {
            let blocks = group.min(8 + size - start);
            groups.push(GroupInfo {
                dev: i as u16,
                node: i as u32,
                start,
                blocks,
            });
            start += blocks;
        }
    }
    Allocator::new(groups).unwrap()
}

fn req(
    ino: u64,
    file_block: u64,
    blocks: u64,
    policy: &PlacementPolicy,
    node: u32,
) -> AllocRequest<'_> {
    AllocRequest {
        ino,
        file_block,
        blocks,
        policy,
        caller_node: node,
        home_node: None,
        goal: None,
    }
}

/// Blocks per node in an allocation.
fn per_node(got: &[Allocated]) -> BTreeMap<u32, u64> {
    let mut m = BTreeMap::new();
    for a in got {
        *m.entry(a.node).or_default() += a.extent.len;
    }
    m
}

fn end_of(got: &[Allocated]) -> Option<(u16, u64)> {
    got.last()
        .map(|a| (a.extent.dev, a.extent.start + a.extent.len))
}

fn usage_of(a: &Allocator, node: u32) -> NodeUsage {
    a.usage().into_iter().find(|u| u.node == node).unwrap()
}

const WL: PlacementPolicy = PlacementPolicy::WriterLocal;

#[test]
fn writer_local_serves_each_writer_from_its_node() {
    let a = volume(&[1000, 1000], 128);
    for node in 0..2 {
        for ino in 0..10 {
            let got = a
                .alloc(&req(ino + 100 * node as u64, 0, 37, &WL, node))
                .unwrap();
            assert_eq!(per_node(&got), BTreeMap::from([(node, 37)]));
            assert!(got.iter().all(|x| x.preferred == node));
        }
    }
    for u in a.usage() {
        assert_eq!(
            (u.free_blocks, u.fallback_blocks, u.soft_errors),
            (630, 0, 0)
        );
    }
}

#[test]
fn fallback_rotates_over_the_other_nodes_when_the_local_one_is_full() {
    // Four nodes of unequal sizes; node 1 is the smallest.
    let a = volume(&[400, 50, 300, 200], 64);
    let got = a.alloc(&req(1, 0, 50, &WL, 1)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(1, 50)]));
    assert_eq!(usage_of(&a, 1).soft_errors, 0);
    // New files (no goal) from node 1 now go elsewhere, the starting node rotating.
    let mut firsts = Vec::new();
    for ino in 2..6 {
        let got = a.alloc(&req(ino, 0, 10, &WL, 1)).unwrap();
        assert_eq!(got.len(), 1, "one node serves a small request whole");
        assert_eq!(got[0].preferred, 1);
        firsts.push(got[0].node);
    }
    assert_eq!(
        firsts,
        [2, 3, 0, 2],
        "round robin after the local node, rotating"
    );
    let u1 = usage_of(&a, 1);
    assert_eq!(
        u1.soft_errors, 4,
        "each allocation that found node 1 full records it"
    );
    assert_eq!(u1.free_blocks, 0);
    let fallback: u64 = a.usage().iter().map(|u| u.fallback_blocks).sum();
    assert_eq!(fallback, 40);
    // A file that continues on a fallback node stays there.
    let prev = a.alloc(&req(9, 0, 5, &WL, 1)).unwrap();
    let mut r = req(9, 5, 5, &WL, 1);
    r.goal = end_of(&prev);
    let next = a.alloc(&r).unwrap();
    assert_eq!(next[0].node, prev[0].node);
    assert_eq!(next[0].extent.start, prev[0].extent.start + 5);
    // Fill everything: the volume runs out only when every node is out of room.
    let free: u64 = a.usage().iter().map(|u| u.free_blocks).sum();
    assert!(matches!(
        a.alloc(&req(20, 0, free + 1, &WL, 1)),
        Err(FsError::NoSpace)
    ));
    let got = a.alloc(&req(20, 0, free, &WL, 1)).unwrap();
    assert_eq!(got.iter().map(|x| x.extent.len).sum::<u64>(), free);
    assert!(matches!(
        a.alloc(&req(21, 0, 1, &WL, 0)),
        Err(FsError::NoSpace)
    ));
}

#[test]
fn two_nodes_spill_to_the_other_and_come_back_after_frees() {
    let a = volume(&[100, 300], 32);
    let first = a.alloc(&req(1, 0, 100, &WL, 0)).unwrap();
    assert_eq!(per_node(&first), BTreeMap::from([(0, 100)]));
    let spill = a.alloc(&req(2, 0, 30, &WL, 0)).unwrap();
    assert_eq!(per_node(&spill), BTreeMap::from([(1, 30)]));
    assert_eq!(usage_of(&a, 1).fallback_blocks, 30);
    a.free(first[0].extent);
    let again = a.alloc(&req(3, 0, 10, &WL, 0)).unwrap();
    assert_eq!(again[0].node, 1, "a pending free is not reusable yet");
    a.commit_frees();
    let back = a.alloc(&req(4, 0, 10, &WL, 0)).unwrap();
    assert_eq!(per_node(&back), BTreeMap::from([(0, 10)]));
}

#[test]
fn a_failed_node_goes_last_but_still_counts_as_room() {
    let a = volume(&[100, 100], 50);
    a.node_failed(0);
    assert_eq!(usage_of(&a, 0).soft_errors, 1);
    let got = a.alloc(&req(1, 0, 60, &WL, 0)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(1, 60)]));
    assert!(got.iter().all(|x| x.preferred == 0));
    assert_eq!(usage_of(&a, 1).fallback_blocks, 60);
    // Node 1's writers also avoid node 0 while they have room; then node 0 takes the rest.
    let got = a.alloc(&req(2, 0, 80, &WL, 1)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(0, 40), (1, 40)]));
    a.node_recovered(0);
    assert_eq!(a.alloc(&req(3, 0, 10, &WL, 0)).unwrap()[0].node, 0);
}

#[test]
fn cpu_only_writers_get_the_nearest_node_or_round_robin() {
    let groups = volume(&[200, 200], 64).groups().to_vec();
    // Node 2 has CPUs but no storage; it is nearer to node 1.
    let d = [((2, 0), 30), ((2, 1), 20), ((0, 1), 20), ((1, 0), 20)];
    let a = Allocator::new(groups.clone()).unwrap().with_distances(d);
    for ino in 0..4 {
        let got = a.alloc(&req(ino, 0, 8, &WL, 2)).unwrap();
        assert_eq!(per_node(&got), BTreeMap::from([(1, 8)]));
        assert_eq!(got[0].preferred, 1, "the nearest node is the preferred one");
    }
    assert_eq!(usage_of(&a, 1).fallback_blocks, 0);
    // Without distances: new files round robin, a growing file stays where it is.
    let a = Allocator::new(groups).unwrap();
    let nodes: Vec<u32> = (0..4)
        .map(|ino| a.alloc(&req(ino, 0, 8, &WL, 7)).unwrap()[0].node)
        .collect();
    assert_eq!(nodes, [0, 1, 0, 1]);
    let prev = a.alloc(&req(10, 0, 4, &WL, 7)).unwrap();
    let mut r = req(10, 4, 4, &WL, 7);
    r.goal = end_of(&prev);
    let next = a.alloc(&r).unwrap();
    assert_eq!(next[0].node, prev[0].node);
    assert_eq!(next[0].extent.start, prev[0].extent.start + 4);
}

#[test]
fn four_nodes_cpu_only_writer_moves_on_when_its_nearest_node_fails_or_fills() {
    // Storage on nodes 0..4 (unequal); node 4 is CPU-only, nearest to 3, then 2, then 1, 0.
    let groups = volume(&[100, 60, 80, 20], 32).groups().to_vec();
    let mut d = Vec::new();
    for a in 0..5u32 {
        for b in 0..5u32 {
            d.push(((a, b), if a == b { 10 } else { 10 + 5 * a.abs_diff(b) }));
        }
    }
    let a = Allocator::new(groups).unwrap().with_distances(d);
    let got = a.alloc(&req(1, 0, 20, &WL, 4)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(3, 20)]));
    // Node 3 is full now: the next nearest serves node 4's writers.
    let got = a.alloc(&req(2, 0, 10, &WL, 4)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(2, 10)]));
    a.node_failed(2);
    let got = a.alloc(&req(3, 0, 10, &WL, 4)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(1, 10)]));
    // Node 1's own writers spill to the nearest healthy node (0), not to failed 2.
    let got = a.alloc(&req(4, 0, 60, &WL, 1)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(0, 10), (1, 50)]));
    assert_eq!(usage_of(&a, 1).soft_errors, 1);
    assert_eq!(usage_of(&a, 2).soft_errors, 1);
}

#[test]
fn goal_keeps_a_file_contiguous_and_stream_goal_packs_files() {
    let a = volume(&[1000], 1000).with_prealloc(0);
    // Three files written one after the other by one node: back to back.
    let mut starts = Vec::new();
    for ino in 1..=3 {
        let got = a.alloc(&req(ino, 0, 5, &WL, 0)).unwrap();
        assert_eq!(got.len(), 1);
        starts.push(got[0].extent.start);
    }
    assert_eq!(starts, [8, 13, 18]);
    // A hole appears before them; the stream goal still continues after the last one.
    a.free(Extent {
        dev: 0,
        start: 8,
        len: 5,
    });
    a.commit_frees();
    let got = a.alloc(&req(4, 0, 3, &WL, 0)).unwrap();
    assert_eq!(got[0].extent.start, 23);
    // File 2 continues at its goal only if that block is free; it is not (file 3), so it
    // goes to the stream; file 4 continues right after itself.
    let mut r = req(4, 3, 2, &WL, 0);
    r.goal = end_of(&got);
    assert_eq!(a.alloc(&r).unwrap()[0].extent.start, 26);
    let mut r = req(2, 5, 2, &WL, 0);
    r.goal = Some((0, 18));
    let got = a.alloc(&r).unwrap();
    assert!(got[0].extent.start != 18);
    // A goal on a free block wins over the stream: the hole at 8 is filled on request.
    let mut r = req(5, 0, 5, &WL, 0);
    r.goal = Some((0, 8));
    assert_eq!(
        a.alloc(&r).unwrap()[0].extent,
        Extent {
            dev: 0,
            start: 8,
            len: 5
        }
    );
}

#[test]
fn big_requests_take_best_fit_then_largest_runs() {
    let a = volume(&[1000], 100).with_prealloc(0);
    // Groups of 100 blocks: a 250-block request spans three groups, each a separate
    // extent (no extent crosses a group boundary... unless physically contiguous, then
    // merged in the answer).
    let got = a.alloc(&req(1, 0, 250, &WL, 0)).unwrap();
    assert_eq!(got.iter().map(|x| x.extent.len).sum::<u64>(), 250);
    assert_eq!(got.len(), 1, "contiguous across group boundaries: {got:?}");
    assert!(a.is_used(0, 8) && a.is_used(0, 257) && !a.is_used(0, 258));
}

#[test]
fn interleave_and_stripe_alternate_nodes_and_keep_each_node_contiguous() {
    let a = volume(&[1000, 1000], 256).with_prealloc(0);
    let il = PlacementPolicy::Interleave;
    let got = a.alloc(&req(3, 0, 8, &il, 0)).unwrap();
    let nodes: Vec<u32> = got.iter().map(|x| x.node).collect();
    assert_eq!(nodes, [1, 0, 1, 0, 1, 0, 1, 0], "starts at ino % nodes");
    let on0: Vec<u64> = got
        .iter()
        .filter(|x| x.node == 0)
        .map(|x| x.extent.start)
        .collect();
    assert!(
        on0.windows(2).all(|w| w[1] == w[0] + 1),
        "each node's share is contiguous: {on0:?}"
    );
    let st = PlacementPolicy::Stripe {
        nodes: 2,
        chunk: 4 * BLOCK_SIZE,
    };
    let got = a.alloc(&req(4, 0, 16, &st, 1)).unwrap();
    let runs: Vec<(u32, u64)> = got.iter().map(|x| (x.node, x.extent.len)).collect();
    assert_eq!(runs, [(0, 4), (1, 4), (0, 4), (1, 4)]);
    let got = a.alloc(&req(5, 0, 4, &st, 1)).unwrap();
    assert_eq!(got[0].node, 1, "another file starts on another node");
    // Four nodes, stripe over two: a file uses two neighbouring nodes.
    let a = volume(&[100, 100, 100, 100], 50);
    let st = PlacementPolicy::Stripe {
        nodes: 2,
        chunk: BLOCK_SIZE,
    };
    let got = a.alloc(&req(6, 0, 6, &st, 0)).unwrap();
    let nodes: Vec<u32> = got.iter().map(|x| x.node).collect();
    assert_eq!(nodes, [2, 3, 2, 3, 2, 3]);
}

#[test]
fn directory_homes_round_robin_skip_full_nodes_and_hold_the_files() {
    let a = volume(&[100, 20, 100], 50);
    let mut last = None;
    let mut homes = |a: &Allocator, k: usize| -> Vec<u32> {
        (0..k)
            .map(|_| {
                let h = a.directory_home(last);
                last = Some(h);
                h
            })
            .collect()
    };
    assert_eq!(homes(&a, 6), [0, 1, 2, 0, 1, 2]);
    let dir = PlacementPolicy::Directory;
    let mut r = req(1, 0, 20, &dir, 0);
    r.home_node = Some(1);
    assert_eq!(per_node(&a.alloc(&r).unwrap()), BTreeMap::from([(1, 20)]));
    assert_eq!(homes(&a, 4), [0, 2, 0, 2], "node 1 is full");
    assert_eq!(
        a.directory_home(Some(0)),
        2,
        "starts after the node given last"
    );
    assert_eq!(
        a.directory_home(Some(7)),
        0,
        "a node past the last one wraps around"
    );
}

#[test]
fn fixed_node_falls_back_when_full_and_counts_it() {
    let a = volume(&[100, 30], 50);
    let fx = PlacementPolicy::Fixed(1);
    let got = a.alloc(&req(1, 0, 40, &fx, 0)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(0, 10), (1, 30)]));
    assert!(got.iter().all(|x| x.preferred == 1));
    let u0 = usage_of(&a, 0);
    let u1 = usage_of(&a, 1);
    assert_eq!((u0.fallback_blocks, u1.soft_errors), (10, 1));
}

#[test]
fn preallocation_is_reused_released_and_stolen() {
    let a = volume(&[300], 300).with_prealloc(32);
    // File 1 grows sequentially; file 2 writes in between on the same node.
    let g1 = a.alloc(&req(1, 0, 4, &WL, 0)).unwrap();
    assert_eq!(a.reserved_blocks(), 0, "a first write reserves nothing");
    let mut r = req(1, 4, 4, &WL, 0);
    r.goal = end_of(&g1);
    let g2 = a.alloc(&r).unwrap();
    assert_eq!(g2[0].extent.start, g1[0].extent.start + 4);
    assert_eq!(a.reserved_blocks(), 16, "reserved after a sequential write");
    let reserved_block = g2[0].extent.start + 4;
    assert!(!a.is_used(0, reserved_block), "reserved is not used");
    assert_eq!(
        usage_of(&a, 0).free_blocks,
        300 - 8,
        "reserved counts as free"
    );
    let other = a.alloc(&req(2, 0, 10, &WL, 0)).unwrap();
    assert!(
        other[0].extent.start >= reserved_block + 16,
        "others skip the reservation"
    );
    let mut r = req(1, 8, 6, &WL, 0);
    r.goal = end_of(&g2);
    let g3 = a.alloc(&r).unwrap();
    assert_eq!(
        g3[0].extent,
        Extent {
            dev: 0,
            start: reserved_block,
            len: 6
        }
    );
    assert_eq!(a.reserved_blocks(), 10);
    a.release_prealloc(1);
    assert_eq!(a.reserved_blocks(), 0);
    assert!(!a.is_used(0, reserved_block + 6));
    assert_eq!(usage_of(&a, 0).free_blocks, 300 - 24);

    // Steal: reservations hand their blocks to whoever needs them once nothing else is free.
    let a = volume(&[100], 100).with_prealloc(64);
    let g = a.alloc(&req(1, 0, 4, &WL, 0)).unwrap();
    let mut r = req(1, 4, 4, &WL, 0);
    r.goal = end_of(&g);
    a.alloc(&r).unwrap();
    assert_eq!(a.reserved_blocks(), 16);
    let free = usage_of(&a, 0).free_blocks;
    assert_eq!(free, 92);
    assert!(matches!(
        a.alloc(&req(2, 0, 93, &WL, 0)),
        Err(FsError::NoSpace)
    ));
    assert_eq!(
        a.reserved_blocks(),
        16,
        "a failed allocation changes nothing"
    );
    let got = a.alloc(&req(2, 0, 92, &WL, 0)).unwrap();
    assert_eq!(got.iter().map(|x| x.extent.len).sum::<u64>(), 92);
    assert_eq!(a.reserved_blocks(), 0);
    assert!((8..108).all(|b| a.is_used(0, b)));
}

#[test]
fn reservations_leave_a_filling_node_room() {
    let a = volume(&[100], 100).with_prealloc(64);
    let mut ends: HashMap<u64, Option<(u16, u64)>> = HashMap::new();
    for round in 0..5 {
        for ino in 1..=8u64 {
            let mut r = req(ino, round * 2, 2, &WL, 0);
            r.goal = ends.get(&ino).copied().flatten();
            let before = a.reserved_blocks();
            let got = a.alloc(&r).unwrap();
            assert_eq!(per_node(&got), BTreeMap::from([(0, 2)]));
            ends.insert(ino, end_of(&got));
            let reserved = a.reserved_blocks();
            let free = usage_of(&a, 0).free_blocks;
            if reserved > before {
                // A new reservation takes at most half the unreserved free space, so a
                // filling node does not hand its last blocks to guesses.
                assert!(
                    reserved * 2 <= free,
                    "{reserved} of {free} free blocks reserved"
                );
            }
        }
    }
}

#[test]
fn local_reservations_yield_before_blocks_go_remote() {
    let a = volume(&[40, 100], 40).with_prealloc(16);
    let g = a.alloc(&req(1, 0, 4, &WL, 0)).unwrap();
    let mut r = req(1, 4, 4, &WL, 0);
    r.goal = end_of(&g);
    a.alloc(&r).unwrap();
    assert_eq!(a.reserved_blocks(), 16);
    // Node 0 has 32 blocks left, 16 of them reserved for file 1.
    let got = a.alloc(&req(2, 0, 30, &WL, 0)).unwrap();
    assert_eq!(per_node(&got), BTreeMap::from([(0, 30)]));
    assert_eq!(a.reserved_blocks(), 0);
    assert_eq!(usage_of(&a, 0).soft_errors, 0);
}

#[test]
fn mark_used_rebuilds_state_across_group_boundaries() {
    let a = volume(&[100], 50);
    a.mark_used(Extent {
        dev: 0,
        start: 50,
        len: 20,
    })
    .unwrap();
    assert!(a.is_used(0, 57) && a.is_used(0, 69) && !a.is_used(0, 70));
    assert!(a
        .mark_used(Extent {
            dev: 0,
            start: 69,
            len: 2
        })
        .is_err());
    assert!(
        a.mark_used(Extent {
            dev: 0,
            start: 100,
            len: 9
        })
        .is_err(),
        "past the end"
    );
    assert!(a
        .mark_used(Extent {
            dev: 3,
            start: 10,
            len: 1
        })
        .is_err());
    assert_eq!(usage_of(&a, 0).free_blocks, 80);
    // Freeing it back splits at the group boundary and leaves nothing behind.
    a.free(Extent {
        dev: 0,
        start: 50,
        len: 20,
    });
    a.commit_frees();
    assert_eq!(usage_of(&a, 0).free_blocks, 100);
    // Bad frees are refused, not applied.
    a.free(Extent {
        dev: 0,
        start: 10,
        len: 1,
    });
    a.free(Extent {
        dev: 9,
        start: 10,
        len: 1,
    });
    assert_eq!(a.rejected_frees(), 2);
    assert!(a
        .free_checked(Extent {
            dev: 0,
            start: 10,
            len: 1
        })
        .is_err());
}

#[test]
fn overlapping_groups_and_split_devices_are_refused() {
    let g = |dev, node, start, blocks| GroupInfo {
        dev,
        node,
        start,
        blocks,
    };
    assert!(Allocator::new(vec![g(0, 0, 0, 10), g(0, 0, 5, 10)]).is_err());
    assert!(Allocator::new(vec![g(0, 0, 0, 10), g(0, 1, 10, 10)]).is_err());
    assert!(Allocator::new(vec![g(0, 0, 0, 0)]).is_err());
    assert!(Allocator::new(vec![g(0, 0, u64::MAX, 2)]).is_err());
    // Two devices on one node are fine.
    let a = Allocator::new(vec![g(0, 0, 0, 10), g(1, 0, 0, 10)]).unwrap();
    assert_eq!(a.nodes(), [0]);
    // An empty volume has no room but does not panic.
    let a = Allocator::new(vec![]).unwrap();
    assert!(matches!(
        a.alloc(&req(1, 0, 1, &WL, 0)),
        Err(FsError::NoSpace)
    ));
    assert_eq!(a.directory_home(Some(3)), 0);
}

/// Allocation throughput on a 1 GiB two-node volume (not part of the suite):
/// `cargo test --release -p numaio-fs --lib alloc_throughput -- --ignored --nocapture`
#[test]
#[ignore]
fn alloc_throughput() {
    let blocks_per_node = (1u64 << 30) / BLOCK_SIZE / 2;
    let il = PlacementPolicy::Interleave;
    for (size, policy) in [(1u64, &WL), (256, &WL), (256, &il)] {
        let a = volume(&[blocks_per_node, blocks_per_node], 32768);
        let mut live = std::collections::VecDeque::new();
        let mut live_blocks = 0u64;
        let mut n = 0u64;
        let t = std::time::Instant::now();
        while t.elapsed().as_secs_f64() < 1.0 {
            for _ in 0..1000 {
                let ino = n % 4096;
                let got = a
                    .alloc(&req(ino, (n / 4096) * size, size, policy, (n % 2) as u32))
                    .unwrap();
                live_blocks += size;
                live.extend(got.into_iter().map(|x| x.extent));
                n += 1;
                // Keep the volume about half full: free the oldest.
                while live_blocks > blocks_per_node {
                    let e: Extent = live.pop_front().unwrap();
                    live_blocks -= e.len;
                    a.free(e);
                }
                if n.is_multiple_of(64) {
                    a.commit_frees();
                }
            }
        }
        let s = t.elapsed().as_secs_f64();
        eprintln!(
            "{size}-block {policy} allocations: {:.0}/s ({:.0} MiB/s of blocks), with frees",
            n as f64 / s,
            (n * size * BLOCK_SIZE) as f64 / s / (1 << 20) as f64
        );
    }
}

#[derive(Debug, Clone)]
enum Op {
    Alloc {
        ino: u64,
        blocks: u64,
        policy: u8,
        node: u32,
        goal: bool,
        seq: bool,
    },
    Free {
        pick: usize,
        part: u64,
    },
    Commit,
    Release {
        ino: u64,
    },
    Fail {
        node: u32,
    },
    Mark {
        dev: u16,
        start: u64,
        len: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1..6u64, 1..24u64, 0..5u8, 0..4u32, any::<bool>(), any::<bool>()).prop_map(
            |(ino, blocks, policy, node, goal, seq)| Op::Alloc { ino, blocks, policy, node, goal, seq }
        ),
        3 => (any::<usize>(), 0..8u64).prop_map(|(pick, part)| Op::Free { pick, part }),
        1 => Just(Op::Commit),
        1 => (1..6u64).prop_map(|ino| Op::Release { ino }),
        1 => (0..3u32).prop_map(|node| Op::Fail { node }),
        1 => (0..4u16, 0..40u64, 1..6u64).prop_map(|(dev, start, len)| Op::Mark { dev, start, len }),
    ]
}

/// 200 cases, or `PROPTEST_CASES` for a longer run.
fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200)
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum St {
    Used,
    Pending,
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn never_double_allocates_and_counts_match(ops in prop::collection::vec(op(), 1..120)) {
        let g = |dev, node, start, blocks| GroupInfo { dev, node, start, blocks };
        // Three nodes of unequal sizes, node 0 on two devices, groups meeting back to back.
        let groups = vec![
            g(0, 0, 2, 16), g(0, 0, 18, 16), g(1, 1, 4, 20), g(2, 0, 0, 10), g(3, 2, 1, 7),
        ];
        let a = Allocator::new(groups.clone()).unwrap().with_prealloc(8);
        let all: Vec<(u16, u64, u32)> = groups
            .iter()
            .flat_map(|g| (g.start..g.start + g.blocks).map(move |b| (g.dev, b, g.node)))
            .collect();
        let mut model: HashMap<(u16, u64), St> = HashMap::new();
        let mut live: Vec<Extent> = Vec::new();
        let mut next: HashMap<u64, (u64, Option<(u16, u64)>)> = HashMap::new();
        let policies = [
            PlacementPolicy::WriterLocal,
            PlacementPolicy::Directory,
            PlacementPolicy::Interleave,
            PlacementPolicy::Stripe { nodes: 2, chunk: 2 * BLOCK_SIZE },
            PlacementPolicy::Fixed(1),
        ];
        for op in ops {
            match op {
                Op::Alloc { ino, blocks, policy, node, goal, seq } => {
                    let (fb, g) = next.get(&ino).copied().unwrap_or((0, None));
                    let r = AllocRequest {
                        ino,
                        file_block: if seq { fb } else { fb + 3 },
                        blocks,
                        policy: &policies[policy as usize],
                        caller_node: node,
                        home_node: Some(node % 3),
                        goal: if goal { g } else { None },
                    };
                    let free = all.iter().filter(|(d, b, _)| !model.contains_key(&(*d, *b))).count() as u64;
                    let before: Vec<bool> = all.iter().map(|&(d, b, _)| a.is_used(d, b)).collect();
                    match a.alloc(&r) {
                        Ok(got) => {
                            prop_assert!(blocks <= free);
                            prop_assert_eq!(got.iter().map(|x| x.extent.len).sum::<u64>(), blocks);
                            for x in &got {
                                prop_assert_eq!(a.node_of_dev(x.extent.dev), Some(x.node));
                                for b in x.extent.start..x.extent.start + x.extent.len {
                                    let k = (x.extent.dev, b);
                                    prop_assert!(all.iter().any(|&(d, bb, _)| (d, bb) == k), "outside groups {:?}", k);
                                    prop_assert!(!model.contains_key(&k), "handed out twice or while pending: {:?}", k);
                                    model.insert(k, St::Used);
                                }
                                live.push(x.extent);
                            }
                            next.insert(ino, (r.file_block + blocks, end_of(&got)));
                        }
                        Err(FsError::NoSpace) => {
                            prop_assert!(blocks > free, "NoSpace with {} free for {}", free, blocks);
                            let after: Vec<bool> = all.iter().map(|&(d, b, _)| a.is_used(d, b)).collect();
                            prop_assert_eq!(before, after, "NoSpace changed the state");
                        }
                        Err(e) => prop_assert!(false, "unexpected {}", e),
                    }
                }
                Op::Free { pick, part } => {
                    if live.is_empty() {
                        continue;
                    }
                    let i = pick % live.len();
                    let e = live[i];
                    // Free the whole extent or a tail of it.
                    let cut = part.min(e.len - 1);
                    let freed = Extent { dev: e.dev, start: e.start + cut, len: e.len - cut };
                    if cut == 0 {
                        live.swap_remove(i);
                    } else {
                        live[i].len = cut;
                    }
                    a.free(freed);
                    for b in freed.start..freed.start + freed.len {
                        model.insert((freed.dev, b), St::Pending);
                    }
                }
                Op::Commit => {
                    a.commit_frees();
                    model.retain(|_, s| *s == St::Used);
                }
                Op::Release { ino } => a.release_prealloc(ino),
                Op::Fail { node } => a.node_failed(node),
                Op::Mark { dev, start, len } => {
                    let ok = (start..start + len).all(|b| {
                        all.iter().any(|&(d, bb, _)| (d, bb) == (dev, b)) && !model.contains_key(&(dev, b))
                    });
                    let e = Extent { dev, start, len };
                    prop_assert_eq!(a.mark_used(e).is_ok(), ok, "mark_used({:?})", e);
                    if ok {
                        for b in start..start + len {
                            model.insert((dev, b), St::Used);
                        }
                        live.push(e);
                    }
                }
            }
            prop_assert_eq!(a.rejected_frees(), 0);
            for &(d, b, _) in &all {
                prop_assert_eq!(a.is_used(d, b), model.contains_key(&(d, b)), "block {}:{}", d, b);
            }
            for u in a.usage() {
                let on: Vec<_> = all.iter().filter(|x| x.2 == u.node).collect();
                let free = on.iter().filter(|(d, b, _)| !model.contains_key(&(*d, *b))).count() as u64;
                prop_assert_eq!(u.total_blocks, on.len() as u64);
                prop_assert_eq!(u.free_blocks, free, "node {}", u.node);
            }
        }
    }
}

/// Overlapping extents among `all`, if any (as the first pair found).
fn overlap(all: &[Extent]) -> Option<(Extent, Extent)> {
    let mut v = all.to_vec();
    v.sort();
    v.windows(2)
        .find(|w| w[0].dev == w[1].dev && w[0].start + w[0].len > w[1].start)
        .map(|w| (w[0], w[1]))
}

#[test]
fn threads_on_different_and_same_nodes_never_share_a_block_and_all_is_counted() {
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    let sizes = [600, 900, 400, 700];
    let total: u64 = sizes.iter().sum();
    let a = Arc::new(volume(&sizes, 64).with_prealloc(32));
    let il = PlacementPolicy::Interleave;
    let st = PlacementPolicy::Stripe {
        nodes: 2,
        chunk: 4 * BLOCK_SIZE,
    };
    // Eight writers: two per node (two on one node wait only for each other), each
    // appending to files of its own, freeing some, while a ninth commits the frees.
    let stop = Arc::new(AtomicBool::new(false));
    let committer = {
        let (a, stop) = (a.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                a.commit_frees();
                std::thread::yield_now();
            }
        })
    };
    let writers: Vec<_> = (0..8u64)
        .map(|t| {
            let (a, il, st) = (a.clone(), il.clone(), st.clone());
            std::thread::spawn(move || {
                let mut rng = fastrand::Rng::with_seed(t);
                let node = (t % 4) as u32;
                // Per file: its next logical block and the physical block after its last.
                let mut files: HashMap<u64, (u64, Option<(u16, u64)>)> = HashMap::new();
                let mut live: Vec<(u64, Extent)> = Vec::new();
                for step in 0..3000u64 {
                    let ino = 1000 * (t + 1) + rng.u64(0..6);
                    let policy = match step % 5 {
                        3 => &il,
                        4 => &st,
                        _ => &WL,
                    };
                    let (next, goal) = files.get(&ino).copied().unwrap_or((0, None));
                    let r = AllocRequest {
                        ino,
                        file_block: next,
                        blocks: rng.u64(1..=24),
                        policy,
                        caller_node: node,
                        home_node: None,
                        goal,
                    };
                    match a.alloc(&r) {
                        Ok(got) => {
                            let n: u64 = got.iter().map(|x| x.extent.len).sum();
                            assert_eq!(n, r.blocks, "all or nothing");
                            files.insert(ino, (next + n, end_of(&got)));
                            live.extend(got.iter().map(|x| (ino, x.extent)));
                        }
                        Err(FsError::NoSpace) => {}
                        Err(e) => panic!("{e}"),
                    }
                    // Free about as much as is allocated, so the volume fills and empties.
                    while live.len() > 12 || (rng.u8(0..4) == 0 && !live.is_empty()) {
                        let (ino, e) = live.swap_remove(rng.usize(0..live.len()));
                        a.free_checked(e).unwrap();
                        if rng.bool() {
                            a.release_prealloc(ino);
                            files.remove(&ino);
                        }
                    }
                }
                live.into_iter().map(|x| x.1).collect::<Vec<_>>()
            })
        })
        .collect();
    let mut live: Vec<Extent> = writers
        .into_iter()
        .flat_map(|w| w.join().unwrap())
        .collect();
    stop.store(true, Ordering::Relaxed);
    committer.join().unwrap();
    a.commit_frees();
    assert_eq!(overlap(&live), None, "two allocations share blocks");
    assert!(live.iter().all(|e| a.is_used(e.dev, e.start)));
    let free: u64 = a.usage().iter().map(|u| u.free_blocks).sum();
    let used: u64 = live.iter().map(|e| e.len).sum();
    assert_eq!(free + used, total, "free {free} + used {used}");
    assert_eq!(a.free_blocks(), free);
    assert_eq!(a.rejected_frees(), 0);

    // Then all at once fill the volume: one-block requests fail only once no block is
    // left anywhere, reserved ones included.
    let fillers: Vec<_> = (0..8u64)
        .map(|t| {
            let a = a.clone();
            std::thread::spawn(move || {
                let mut got = Vec::new();
                let mut next = 0;
                let mut blocks = 1 + t * 3;
                loop {
                    let r = req(50_000 + t, next, blocks, &WL, (t % 4) as u32);
                    match a.alloc(&r) {
                        Ok(g) => {
                            next += blocks;
                            got.extend(g.iter().map(|x| x.extent));
                        }
                        Err(FsError::NoSpace) if blocks > 1 => blocks = 1,
                        Err(FsError::NoSpace) => break got,
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();
    for f in fillers {
        live.extend(f.join().unwrap());
    }
    assert_eq!(overlap(&live), None, "two allocations share blocks");
    assert_eq!(live.iter().map(|e| e.len).sum::<u64>(), total);
    assert!(a.usage().iter().all(|u| u.free_blocks == 0));
    assert_eq!(a.free_blocks(), 0);
    assert_eq!(a.reserved_blocks(), 0);
}

#[test]
fn blocks_given_back_are_free_at_once_and_only_once() {
    let a = volume(&[100, 100], 32);
    let got = a.alloc(&req(1, 0, 150, &WL, 0)).unwrap();
    assert_eq!(a.free_blocks(), 50);
    // Never recorded: free again without a commit, on the nodes they came from.
    a.give_back(&got);
    assert_eq!(a.free_blocks(), 200);
    assert!(a.usage().iter().all(|u| u.free_blocks == 100));
    assert!(!a.frees_waiting());
    assert!(got.iter().all(|x| !a.is_used(x.extent.dev, x.extent.start)));
    // Blocks not in use are refused, not counted twice.
    a.give_back(&got[..1]);
    assert_eq!(a.free_blocks(), 200);
    assert_eq!(a.rejected_frees(), 1);
    assert_eq!(
        per_node(&a.alloc(&req(2, 0, 200, &WL, 1)).unwrap()),
        BTreeMap::from([(0, 100), (1, 100)])
    );
}
