//! The read plan of `warm`: which pages to read, in which pieces, under which task policy.
//!
//! A new page-cache page is allocated under the memory policy of the task that reads it, and
//! `readahead(2)` over uncached pages allocates them one by one in file order. Reading every
//! short run of a fine-grained target (page interleave, weights, 4 KiB stripe chunks) under
//! its own bind policy costs one small I/O per run, which is slow on large files. So
//! stretches of short runs are read in big pieces under the one task policy that places the
//! most of their pages right:
//!
//! * `MPOL_INTERLEAVE` over the target's nodes: the kernel hands out pages round robin in
//!   node-id order, starting again from the lowest node after every `set_mempolicy`. Each
//!   piece starts at a page whose target is in phase with that order and re-sets the policy,
//!   so `--interleave 0-3` lands exactly (`page i on node i mod 4`);
//! * or a bind to the node most of the pattern's pages belong to.
//!
//! Pages the kernel places elsewhere (the pattern does not match the kernel's order, another
//! allocation of the task advanced the interleave, a page cached by someone else meanwhile)
//! are migrated afterwards by `warm`, and its verification stays exact. Long runs (a single
//! node, stripe chunks of 64 KiB and more) are read under a bind to their own node, in file
//! order.

use crate::target::Target;
use numaio_sys::Policy;

/// Runs shorter than this (pages) are read as part of a mixed stretch.
const SHORT_RUN: u64 = 16;
/// Bytes per `MPOL_INTERLEAVE` piece. Within a piece, anything else the thread allocates (a
/// slab page, say) takes a turn of the round robin and shifts the rest of the piece off
/// phase; re-setting the policy every 128 KiB kept that to 1.7 % of the pages in the 4-node
/// lab guest (8.5 % with 1 MiB pieces, 0.4 % with 32 KiB).
const INTERLEAVE_PIECE_BYTES: u64 = 128 << 10;
/// Longest target period (pages) for which the mixed policy is chosen page by page.
const MAX_PERIOD: u64 = 1 << 16;

/// The task policy a piece is read under.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// `MPOL_BIND` to one node.
    Bind(u32),
    /// `MPOL_INTERLEAVE` over [`Mixed::nodes`], set afresh at the piece's first page.
    Interleave,
}

/// A contiguous range of pages read with one call under one policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    pub first: u64,
    pub len: u64,
    pub place: Place,
}

/// How stretches of short runs are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mixed {
    /// `Place::Interleave` (over `nodes`) or a bind.
    pub place: Place,
    /// Sorted distinct target nodes (the kernel's interleave order).
    pub nodes: Vec<u32>,
    /// Pieces start at pages `p` with `p % period == phase`...
    pub period: u64,
    pub phase: u64,
    /// ...and are this many pages long (a multiple of `period`).
    pub piece_pages: u64,
}

impl Mixed {
    pub fn policy(&self) -> Policy {
        match self.place {
            Place::Bind(n) => Policy::bind(&[n]),
            Place::Interleave => Policy::interleave(&self.nodes),
        }
    }
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// The period (pages) after which the target's pattern repeats.
fn period(target: &Target, ps: u64) -> u64 {
    match target {
        Target::Node(_) => 1,
        Target::Interleave(n) => n.len().max(1) as u64,
        Target::Stripe { nodes, chunk } => (nodes.len() as u64).max(1) * (chunk / ps).max(1),
        Target::Weights(w) => w.iter().map(|p| p.1 as u64).sum::<u64>().max(1),
    }
}

/// Picks the policy for stretches of short runs, reading in pieces of at most `max_piece`
/// pages. `None` when the target has no short runs worth grouping (a single node) or its
/// pattern is too long to evaluate (its short runs are then read one by one).
pub(crate) fn choose_mixed(target: &Target, ps: u64, max_piece: u64) -> Option<Mixed> {
    let mut nodes = target.nodes();
    nodes.sort_unstable();
    let l = period(target, ps);
    if nodes.len() < 2 || l > MAX_PERIOD {
        return None;
    }
    // Best bind: the node holding the most pages of one period.
    let mut count = vec![0u64; nodes.len()];
    for j in 0..l {
        let n = target.node_for_page(j, ps);
        if let Ok(i) = nodes.binary_search(&n) {
            count[i] += 1;
        }
    }
    let (bi, &bright) = count.iter().enumerate().max_by_key(|p| *p.1)?;
    let mut best = Mixed {
        place: Place::Bind(nodes[bi]),
        nodes: nodes.clone(),
        period: 1,
        phase: 0,
        piece_pages: max_piece.max(1),
    };
    let (mut best_right, mut best_period) = (bright, l);
    // Interleave: the kernel's order repeats every U pages, the target's every L, both
    // together every lcm(L, U); try each phase.
    let u = nodes.len() as u64;
    let m = l / gcd(l, u) * u;
    let il_piece = max_piece.min((INTERLEAVE_PIECE_BYTES / ps).max(1));
    if m <= il_piece {
        for phase in 0..m {
            let right = (0..m)
                .filter(|&j| target.node_for_page(phase + j, ps) == nodes[(j % u) as usize])
                .count() as u64;
            // right/m > best_right/best_period, without division.
            if right * best_period > best_right * m {
                best_right = right;
                best_period = m;
                best.place = Place::Interleave;
                best.period = m;
                best.phase = phase;
                best.piece_pages = il_piece / m * m;
            }
        }
    }
    Some(best)
}

/// The node of page `p` and how many pages from `p` (before `end`) share it, merging
/// neighbouring runs of the same node (stripe chunks of a one-node list, say).
fn merged_run(target: &Target, ps: u64, p: u64, end: u64) -> (u32, u64) {
    let node = target.node_for_page(p, ps);
    let mut len = target.run_len(p, ps, end - p);
    while p + len < end && target.node_for_page(p + len, ps) == node {
        len += target.run_len(p + len, ps, end - p - len);
    }
    (node, len)
}

/// Emits the pieces that read pages `[start, start + len)` (a hole: none of them cached),
/// in file order, each at most `max_piece` pages.
pub(crate) fn plan_hole<E>(
    target: &Target,
    ps: u64,
    mixed: Option<&Mixed>,
    max_piece: u64,
    start: u64,
    len: u64,
    emit: &mut impl FnMut(Piece) -> Result<(), E>,
) -> Result<(), E> {
    let end = start + len;
    let max_piece = max_piece.max(1);
    let mut p = start;
    let mut stretch: Option<u64> = None;
    while p < end {
        let (node, run) = merged_run(target, ps, p, end);
        if run < SHORT_RUN && mixed.is_some() {
            stretch.get_or_insert(p);
        } else {
            if let Some(s) = stretch.take() {
                flush_stretch(target, ps, mixed, max_piece, s, p, emit)?;
            }
            bind_pieces(node, max_piece, p, run, emit)?;
        }
        p += run;
    }
    if let Some(s) = stretch {
        flush_stretch(target, ps, mixed, max_piece, s, end, emit)?;
    }
    Ok(())
}

fn bind_pieces<E>(
    node: u32,
    max_piece: u64,
    first: u64,
    len: u64,
    emit: &mut impl FnMut(Piece) -> Result<(), E>,
) -> Result<(), E> {
    let mut p = first;
    while p < first + len {
        let n = max_piece.min(first + len - p);
        emit(Piece {
            first: p,
            len: n,
            place: Place::Bind(node),
        })?;
        p += n;
    }
    Ok(())
}

/// One run at a time under its own bind, for pages `[a, b)`.
fn runs_bound<E>(
    target: &Target,
    ps: u64,
    max_piece: u64,
    a: u64,
    b: u64,
    emit: &mut impl FnMut(Piece) -> Result<(), E>,
) -> Result<(), E> {
    let mut p = a;
    while p < b {
        let (node, run) = merged_run(target, ps, p, b);
        bind_pieces(node, max_piece, p, run, emit)?;
        p += run;
    }
    Ok(())
}

/// A stretch `[a, b)` of short runs: big pieces under the mixed policy, in phase.
fn flush_stretch<E>(
    target: &Target,
    ps: u64,
    mixed: Option<&Mixed>,
    max_piece: u64,
    a: u64,
    b: u64,
    emit: &mut impl FnMut(Piece) -> Result<(), E>,
) -> Result<(), E> {
    let Some(m) = mixed else {
        return runs_bound(target, ps, max_piece, a, b, emit);
    };
    if b - a < SHORT_RUN {
        return runs_bound(target, ps, max_piece, a, b, emit);
    }
    // The pages before the first in-phase page go run by run (fewer than `period`).
    let head = (m.phase + m.period - a % m.period) % m.period;
    let p0 = (a + head).min(b);
    runs_bound(target, ps, max_piece, a, p0, emit)?;
    let mut p = p0;
    while p < b {
        let n = m.piece_pages.min(b - p);
        emit(Piece {
            first: p,
            len: n,
            place: m.place,
        })?;
        p += n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const PS: u64 = 4096;

    fn pieces(t: &Target, max_piece: u64, start: u64, len: u64) -> (Option<Mixed>, Vec<Piece>) {
        let m = choose_mixed(t, PS, max_piece);
        let mut v = Vec::new();
        plan_hole::<()>(t, PS, m.as_ref(), max_piece, start, len, &mut |p| {
            v.push(p);
            Ok(())
        })
        .unwrap();
        (m, v)
    }

    /// Pieces tile the hole exactly, in file order.
    fn assert_tiles(v: &[Piece], start: u64, len: u64) {
        let mut p = start;
        for x in v {
            assert_eq!(x.first, p, "{v:?}");
            assert!(x.len > 0);
            p += x.len;
        }
        assert_eq!(p, start + len);
    }

    /// Simulates the kernel: pages of a piece go to the bound node, or round robin over the
    /// sorted nodes from the lowest one. Returns pages that land on their target.
    fn simulate(t: &Target, m: &Option<Mixed>, v: &[Piece]) -> u64 {
        let mut right = 0;
        for x in v {
            for j in 0..x.len {
                let got = match x.place {
                    Place::Bind(n) => n,
                    Place::Interleave => {
                        let nodes = &m.as_ref().unwrap().nodes;
                        nodes[(j % nodes.len() as u64) as usize]
                    }
                };
                right += (got == t.node_for_page(x.first + j, PS)) as u64;
            }
        }
        right
    }

    #[test]
    fn interleave_reads_in_big_in_phase_pieces() {
        let t = Target::Interleave(vec![0, 1, 2, 3]);
        let (m, v) = pieces(&t, 512, 3, 10_000);
        let m2 = m.clone().unwrap();
        assert_eq!(
            (m2.place, m2.period, m2.phase, m2.piece_pages),
            (Place::Interleave, 4, 0, 32)
        );
        assert_tiles(&v, 3, 10_000);
        // One bound page (3), then 32-page (128 KiB) pieces starting at multiples of 4.
        assert_eq!(
            v[0],
            Piece {
                first: 3,
                len: 1,
                place: Place::Bind(3)
            }
        );
        assert!(v[1..]
            .iter()
            .all(|p| p.first % 4 == 0 && p.place == Place::Interleave));
        assert!(v.len() <= 2 + 10_000 / 32);
        assert_eq!(simulate(&t, &m, &v), 10_000);
    }

    #[test]
    fn weights_and_unsorted_lists_pick_the_best_policy() {
        // 1:1 weights are an interleave.
        let t = Target::parse_weights("0:1,1:1").unwrap();
        let (m, v) = pieces(&t, 512, 0, 4096);
        assert_eq!(m.as_ref().unwrap().place, Place::Interleave);
        assert_eq!(simulate(&t, &m, &v), 4096);
        // 0:3,3:1: a bind to node 0 places 3 of 4; interleave [0,3] also 3 of 4 at best.
        let t = Target::parse_weights("0:3,3:1").unwrap();
        let (m, v) = pieces(&t, 512, 0, 4096);
        assert_tiles(&v, 0, 4096);
        assert_eq!(simulate(&t, &m, &v), 3072);
        assert!(v.len() <= 9, "{}", v.len());
        // A list in another order than the kernel's: still big pieces.
        let t = Target::Interleave(vec![3, 1, 0]);
        let (m, v) = pieces(&t, 510, 0, 3000);
        assert_tiles(&v, 0, 3000);
        assert!(v.len() <= 7, "{}", v.len());
        assert!(simulate(&t, &m, &v) >= 1000);
    }

    #[test]
    fn stripes_bind_long_chunks_and_group_small_ones() {
        let t = Target::Stripe {
            nodes: vec![0, 2],
            chunk: 1 << 20,
        };
        let (m, v) = pieces(&t, 128, 100, 1000);
        assert_tiles(&v, 100, 1000);
        assert_eq!(simulate(&t, &m, &v), 1000);
        assert!(v
            .iter()
            .all(|p| matches!(p.place, Place::Bind(_)) && p.len <= 128));
        // 4 KiB chunks are an interleave.
        let t = Target::Stripe {
            nodes: vec![0, 2],
            chunk: PS,
        };
        let (m, v) = pieces(&t, 128, 0, 1000);
        assert_eq!(simulate(&t, &m, &v), 1000);
        assert!(v.len() <= 2 + 1000 / 32);
        // One node, 4 KiB chunks (what the single-node host exercises): big bound pieces.
        let t = Target::Stripe {
            nodes: vec![0],
            chunk: PS,
        };
        let (m, v) = pieces(&t, 128, 0, 1000);
        assert_tiles(&v, 0, 1000);
        assert!(m.is_none() && v.len() == 8, "{v:?}");
        assert_eq!(simulate(&t, &m, &v), 1000);
        // A short hole is read run by run, exactly.
        let t = Target::Interleave(vec![0, 1]);
        let (m, v) = pieces(&t, 128, 5, 7);
        assert_tiles(&v, 5, 7);
        assert_eq!(simulate(&t, &m, &v), 7);
        assert_eq!(Target::Node(1).run_len(0, PS, 5), 5);
        let (m, v) = pieces(&Target::Node(1), 128, 0, 300);
        assert!(m.is_none());
        assert_eq!(v.len(), 3);
    }
}
