//! Placement policies: which NUMA node a block of a file belongs on.
//!
//! The engine (cache slices), the file system (block allocation) and the page-cache tools
//! (explicit node lists) all place data by these words, with this one meaning:
//!
//! | word | meaning |
//! | --- | --- |
//! | `writer-local` | the node of the thread that writes (or first touches) the block |
//! | `directory` | the node of the file's top-level directory (its *home*) |
//! | `interleave` | block `b` on place `(seed + b) mod n` |
//! | `stripe:K[:CHUNK]` | chunk `c` (CHUNK bytes, 64K when left out) on place `(seed + c mod K) mod n` |
//! | `fixed:NODE` | NUMA node NODE; a node that holds no data is an error, never clamped |
//! | `range[:BLOCKS]` | ranges of BLOCKS blocks on place `(seed + b / BLOCKS) mod n`; the whole file on its home when it has one (engine only) |
//!
//! *Places* are the ordered list of where data can go, each with its node: the cache's
//! slices in the engine, the volume's storage nodes in the file system, the listed nodes in
//! the page-cache tools. The *seed* is the file's inode number (`st_ino`) in the engine and
//! the file system, so a file's stripe starts on the same place in both; the page-cache tools
//! pass 0, so an explicit node list is used in the order given.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Default stripe chunk when `stripe:K` gives none.
pub const DEFAULT_STRIPE_CHUNK: u64 = 64 * 1024;

/// A stripe chunk is a whole number of these bytes (the smallest page and block size).
pub const CHUNK_ALIGN: u64 = 4096;

/// Default range length of `range` (blocks).
pub const DEFAULT_RANGE_BLOCKS: u64 = 1 << 18;

/// Largest node id a policy may name: the kernel's `MAX_NUMNODES` is at most 1024.
pub const MAX_NODE_ID: u32 = 1023;

/// The accepted spellings, for error messages and help texts.
pub const FORMS: &str =
    "writer-local | directory | interleave | stripe:K[:CHUNK] | fixed:NODE | range[:BLOCKS]";

/// Where the blocks of a file go. Parse with [`str::parse`]; [`fmt::Display`] writes the
/// canonical spelling, which parses back to the same policy.
///
/// The variant order is part of the file system's on-disk format (postcard encodes the
/// variant index): new variants go at the end.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PlacementPolicy {
    /// On the node of the writing thread.
    WriterLocal,
    /// On the node of the file's top-level directory.
    Directory,
    /// Block by block, round robin over the places, starting at the file's seed.
    Interleave,
    /// Chunks of `chunk` bytes round robin over `nodes` consecutive places, starting at the
    /// file's seed.
    Stripe { nodes: u32, chunk: u64 },
    /// Always on this NUMA node.
    Fixed(u32),
    /// Ranges of `range_blocks` blocks round robin over the places, starting at the file's
    /// seed; a file with a home (its device's node) stays there. The engine's default.
    Range { range_blocks: u64 },
}

/// A policy word that does not parse. Names the input and lists the accepted forms.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid placement policy {input:?}: {why} (expected {FORMS})")]
pub struct ParseError {
    /// The input, cut to 64 characters.
    pub input: String,
    /// What is wrong with it.
    pub why: String,
}

/// A policy that does not fit the places it is to be used with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    #[error("no place to put data on (no node holds storage or memory here)")]
    NoPlaces,
    #[error("fixed:{node}: node {node} holds no data here (nodes: {nodes})")]
    NoSuchNode { node: u32, nodes: String },
    #[error(
        "stripe:{width} stripes over {width} places, but there are {have} here (nodes: {nodes})"
    )]
    StripeTooWide {
        width: u32,
        have: usize,
        nodes: String,
    },
}

impl FromStr for PlacementPolicy {
    type Err = ParseError;

    fn from_str(s: &str) -> Result<Self, ParseError> {
        let err = |why: String| ParseError {
            input: s.chars().take(64).collect(),
            why,
        };
        let num = |p: &str, what: &str| -> Result<u64, ParseError> {
            p.trim()
                .parse::<u64>()
                .map_err(|_| err(format!("{what} {:?} is not a whole number", short(p))))
        };
        let parts: Vec<&str> = s.trim().splitn(4, ':').collect();
        match parts.as_slice() {
            ["writer-local"] | ["writer"] => Ok(PlacementPolicy::WriterLocal),
            ["directory"] | ["dir"] => Ok(PlacementPolicy::Directory),
            ["interleave"] => Ok(PlacementPolicy::Interleave),
            ["stripe", k] | ["stripe", k, _] => {
                let k = num(k, "stripe width K")?;
                if k == 0 || k > u64::from(MAX_NODE_ID) + 1 {
                    return Err(err(format!(
                        "stripe width K must be from 1 to {}",
                        MAX_NODE_ID + 1
                    )));
                }
                let chunk = match parts.get(2) {
                    None => DEFAULT_STRIPE_CHUNK,
                    Some(c) => numaio_sys::topology::parse_size(c).ok_or_else(|| {
                        err(format!("chunk {:?} is not a size such as 64K", short(c)))
                    })?,
                };
                if chunk == 0 || chunk % CHUNK_ALIGN != 0 {
                    return Err(err(format!(
                        "chunk {chunk} must be a non-zero multiple of {CHUNK_ALIGN} bytes"
                    )));
                }
                Ok(PlacementPolicy::Stripe {
                    nodes: k as u32,
                    chunk,
                })
            }
            ["fixed", n] => {
                let n = num(n, "node")?;
                if n > u64::from(MAX_NODE_ID) {
                    return Err(err(format!("node {n} is above {MAX_NODE_ID}")));
                }
                Ok(PlacementPolicy::Fixed(n as u32))
            }
            ["range"] => Ok(PlacementPolicy::Range {
                range_blocks: DEFAULT_RANGE_BLOCKS,
            }),
            ["range", b] => match num(b, "range length")? {
                0 => Err(err("range length must be at least 1 block".into())),
                range_blocks => Ok(PlacementPolicy::Range { range_blocks }),
            },
            [word, ..] if KNOWN.contains(word) => Err(err(format!(
                "{word:?} takes other arguments than {:?}",
                short(s.trim())
            ))),
            [word, ..] => Err(err(format!("unknown policy {:?}", short(word)))),
            [] => Err(err("empty".into())),
        }
    }
}

const KNOWN: [&str; 8] = [
    "writer-local",
    "writer",
    "directory",
    "dir",
    "interleave",
    "stripe",
    "fixed",
    "range",
];

fn short(s: &str) -> String {
    s.chars().take(24).collect()
}

impl fmt::Display for PlacementPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlacementPolicy::WriterLocal => f.write_str("writer-local"),
            PlacementPolicy::Directory => f.write_str("directory"),
            PlacementPolicy::Interleave => f.write_str("interleave"),
            PlacementPolicy::Stripe { nodes, chunk } => write!(f, "stripe:{nodes}:{chunk}"),
            PlacementPolicy::Fixed(n) => write!(f, "fixed:{n}"),
            PlacementPolicy::Range { range_blocks } => write!(f, "range:{range_blocks}"),
        }
    }
}

/// The block a placement decision is about.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BlockRef {
    /// The file's seed: its inode number (0 for an explicit node list).
    pub seed: u64,
    /// Block number within the file.
    pub block: u64,
    /// The file's home node: its top-level directory's node (`directory`), or its device's
    /// node (`range` in the engine).
    pub home: Option<u32>,
    /// The node of the thread asking, if known.
    pub caller: Option<u32>,
}

/// A placement decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placed {
    /// The node the block belongs on. May be outside the places for `writer-local` and
    /// `directory` (a writer on a node without storage): the caller picks the nearest.
    pub node: u32,
    /// The place (index into the places) on `node`; None when no place is on `node`.
    pub place: Option<usize>,
    /// How many blocks from this one (at least 1) get the same answer; `u64::MAX - block`
    /// stands for the rest of the file.
    pub run: u64,
}

impl PlacementPolicy {
    /// Checks the policy against the places data can go to (`places[i]` is the node of
    /// place `i`): `fixed:NODE` names a node among them, a stripe is no wider than them.
    pub fn validate(&self, places: &[u32]) -> Result<(), PlacementError> {
        let list = || {
            let mut v: Vec<u32> = places.to_vec();
            v.sort_unstable();
            v.dedup();
            v.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(",")
        };
        if places.is_empty() {
            return Err(PlacementError::NoPlaces);
        }
        match *self {
            PlacementPolicy::Fixed(node) if !places.contains(&node) => {
                Err(PlacementError::NoSuchNode {
                    node,
                    nodes: list(),
                })
            }
            PlacementPolicy::Stripe { nodes, .. } if nodes as usize > places.len() => {
                Err(PlacementError::StripeTooWide {
                    width: nodes,
                    have: places.len(),
                    nodes: list(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Whether the answer depends on who asks first, so a user must remember decisions
    /// (the engine's sticky map; the file system's allocated blocks remember themselves).
    pub fn is_sticky(&self) -> bool {
        matches!(self, PlacementPolicy::WriterLocal)
    }

    /// Where block `at.block` of a file goes among `places`, blocks being `block_size`
    /// bytes. Pure: the same inputs always give the same answer. Call [`validate`] first;
    /// an unvalidated policy still answers (a stripe is narrowed to the places, an unknown
    /// fixed node has no place), and never panics.
    ///
    /// [`validate`]: PlacementPolicy::validate
    pub fn place(&self, places: &[u32], block_size: u64, at: &BlockRef) -> Placed {
        let rest = u64::MAX - at.block;
        let n = places.len() as u64;
        let by_index = |i: u64, run: u64| {
            let i = (i % n) as usize;
            Placed {
                node: places[i],
                place: Some(i),
                run: run.max(1),
            }
        };
        // A node chosen by name: among several places on it (several cache slices on one
        // node), the file's seed picks one, so the answer holds for the whole file.
        let on_node = |node: u32| {
            let count = places.iter().filter(|&&p| p == node).count() as u64;
            let place = (count > 0).then(|| {
                let pick = (at.seed % count) as usize;
                let mut on = (0..places.len()).filter(|&i| places[i] == node);
                on.nth(pick).unwrap_or(0)
            });
            Placed {
                node,
                place,
                run: rest.max(1),
            }
        };
        if n == 0 {
            let node = match *self {
                PlacementPolicy::Fixed(node) => node,
                _ => at.caller.or(at.home).unwrap_or(0),
            };
            return Placed {
                node,
                place: None,
                run: rest.max(1),
            };
        }
        let seeded = || by_index(at.seed, rest);
        match *self {
            PlacementPolicy::WriterLocal => at.caller.or(at.home).map_or_else(seeded, on_node),
            PlacementPolicy::Directory => at.home.or(at.caller).map_or_else(seeded, on_node),
            PlacementPolicy::Fixed(node) => on_node(node),
            PlacementPolicy::Interleave => by_index(
                at.seed.wrapping_add(at.block),
                if n == 1 { rest } else { 1 },
            ),
            PlacementPolicy::Stripe { nodes, chunk } => {
                let k = u64::from(nodes).clamp(1, n);
                let chunk_blocks = (chunk / block_size.max(1)).max(1);
                let c = at.block / chunk_blocks;
                let run = if k == 1 {
                    rest
                } else {
                    // k ≤ n: the next chunk is on another place.
                    chunk_blocks - at.block % chunk_blocks
                };
                by_index(at.seed.wrapping_add(c % k), run)
            }
            PlacementPolicy::Range { range_blocks } => match at.home {
                Some(h) => on_node(h),
                None => {
                    let rb = range_blocks.max(1);
                    by_index(at.seed.wrapping_add(at.block / rb), rb - at.block % rb)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seed: u64, block: u64) -> BlockRef {
        BlockRef {
            seed,
            block,
            ..BlockRef::default()
        }
    }

    #[test]
    fn canonical_spellings_round_trip() {
        for s in [
            "writer-local",
            "directory",
            "interleave",
            "stripe:2:65536",
            "fixed:3",
            "range:1024",
        ] {
            let p: PlacementPolicy = s.parse().unwrap();
            assert_eq!(p.to_string(), s);
        }
        let p = |s: &str| s.parse::<PlacementPolicy>().unwrap();
        assert_eq!(
            p("stripe:2:1M"),
            PlacementPolicy::Stripe {
                nodes: 2,
                chunk: 1 << 20
            }
        );
        assert_eq!(
            p(" stripe:4 "),
            PlacementPolicy::Stripe {
                nodes: 4,
                chunk: DEFAULT_STRIPE_CHUNK
            }
        );
        assert_eq!(p("writer"), PlacementPolicy::WriterLocal);
        assert_eq!(p("dir"), PlacementPolicy::Directory);
        assert_eq!(
            p("range"),
            PlacementPolicy::Range {
                range_blocks: DEFAULT_RANGE_BLOCKS
            }
        );
    }

    #[test]
    fn errors_name_the_input_and_list_the_forms() {
        for (bad, why) in [
            ("", "unknown policy"),
            ("bogus", "unknown policy \"bogus\""),
            ("stripe", "takes other arguments"),
            ("stripe:0", "from 1 to 1024"),
            ("stripe:1025", "from 1 to 1024"),
            ("stripe:x", "\"x\" is not a whole number"),
            ("stripe:2:0", "non-zero multiple of 4096"),
            ("stripe:2:1000", "non-zero multiple of 4096"),
            ("stripe:2:4K:x", "takes other arguments"),
            ("stripe:2:lots", "not a size"),
            ("fixed", "takes other arguments"),
            ("fixed:", "is not a whole number"),
            ("fixed:-1", "is not a whole number"),
            ("fixed:1024", "above 1023"),
            ("fixed:4294967296", "above 1023"),
            ("range:0", "at least 1 block"),
            ("interleave:2", "takes other arguments"),
        ] {
            let e = bad.parse::<PlacementPolicy>().unwrap_err();
            let msg = e.to_string();
            assert!(msg.contains(why), "{bad:?}: {msg}");
            assert!(msg.contains(&format!("{bad:?}")), "{bad:?}: {msg}");
            assert!(msg.contains(FORMS), "{bad:?}: {msg}");
        }
        let long = "x".repeat(10_000);
        assert!(
            long.parse::<PlacementPolicy>()
                .unwrap_err()
                .to_string()
                .len()
                < 400
        );
    }

    #[test]
    fn validation_checks_the_places() {
        let places = [0, 1];
        assert!(PlacementPolicy::Fixed(1).validate(&places).is_ok());
        let e = PlacementPolicy::Fixed(2).validate(&places).unwrap_err();
        assert_eq!(
            e.to_string(),
            "fixed:2: node 2 holds no data here (nodes: 0,1)"
        );
        let s = |k| PlacementPolicy::Stripe {
            nodes: k,
            chunk: 8192,
        };
        assert!(s(2).validate(&places).is_ok());
        assert!(s(3).validate(&places).is_err());
        // Several places on one node count as several places.
        assert!(s(3).validate(&[0, 0, 1]).is_ok());
        assert_eq!(
            PlacementPolicy::Interleave.validate(&[]),
            Err(PlacementError::NoPlaces)
        );
    }

    #[test]
    fn fixed_is_a_node_not_an_index() {
        let places = [2, 5, 7];
        let p = PlacementPolicy::Fixed(5).place(&places, 4096, &at(9, 3));
        assert_eq!((p.node, p.place), (5, Some(1)));
        // A node no place is on: no place, never a clamped one.
        let p = PlacementPolicy::Fixed(9).place(&places, 4096, &at(9, 3));
        assert_eq!((p.node, p.place), (9, None));
        // Several places on the node: the seed picks one, the same for the whole file.
        let places = [0, 0, 1, 1];
        for b in 0..10 {
            assert_eq!(
                PlacementPolicy::Fixed(1)
                    .place(&places, 4096, &at(3, b))
                    .place,
                Some(3)
            );
        }
    }

    #[test]
    fn stripe_starts_at_the_seed_and_cycles_over_k_places() {
        let places = [0, 1, 2, 3];
        let s = PlacementPolicy::Stripe {
            nodes: 2,
            chunk: 4 * 4096,
        };
        let nodes: Vec<u32> = (0..16)
            .map(|b| s.place(&places, 4096, &at(5, b)).node)
            .collect();
        // seed 5 → place 1; chunks of 4 blocks alternate over places 1 and 2.
        assert_eq!(nodes, vec![1, 1, 1, 1, 2, 2, 2, 2, 1, 1, 1, 1, 2, 2, 2, 2]);
        // Runs end at the chunk's end.
        assert_eq!(s.place(&places, 4096, &at(5, 5)).run, 3);
        // Wraps past the last place.
        assert_eq!(s.place(&places, 4096, &at(3, 4)).node, 0);
        // Width 1: the whole file on the seed's place.
        let one = PlacementPolicy::Stripe {
            nodes: 1,
            chunk: 4096,
        };
        let p = one.place(&places, 4096, &at(6, 3));
        assert_eq!((p.node, p.run), (2, u64::MAX - 3));
        // An explicit node list (seed 0) is used in the order given.
        let s = PlacementPolicy::Stripe {
            nodes: 2,
            chunk: 1 << 20,
        };
        let v: Vec<u32> = [0u64, 255, 256, 512]
            .iter()
            .map(|&b| s.place(&[0, 2], 4096, &at(0, b)).node)
            .collect();
        assert_eq!(v, vec![0, 0, 2, 0]);
        // A chunk smaller than a block counts as one block.
        assert_eq!(s.place(&[0, 2], 1 << 21, &at(0, 1)).node, 2);
    }

    #[test]
    fn interleave_range_and_the_node_words() {
        let places = [0, 1, 2, 3];
        let i = PlacementPolicy::Interleave;
        let mut counts = [0; 4];
        for b in 0..400 {
            let p = i.place(&places, 4096, &at(7, b));
            assert_eq!(p.run, 1);
            counts[p.node as usize] += 1;
        }
        assert_eq!(counts, [100; 4]);
        assert_eq!(i.place(&places, 4096, &at(1, 3)).node, 0);
        assert_eq!(i.place(&[4], 4096, &at(1, 3)).run, u64::MAX - 3);
        let r = PlacementPolicy::Range { range_blocks: 10 };
        let v: Vec<(u32, u64)> = [0u64, 9, 10, 35]
            .iter()
            .map(|&b| {
                let p = r.place(&places, 4096, &at(1, b));
                (p.node, p.run)
            })
            .collect();
        assert_eq!(v, vec![(1, 10), (1, 1), (2, 10), (0, 5)]);
        let mut home = at(1, 35);
        home.home = Some(3);
        assert_eq!(r.place(&places, 4096, &home).node, 3);
        // writer-local: the caller, then the home, then the seed.
        let w = PlacementPolicy::WriterLocal;
        let mut a = at(2, 0);
        assert_eq!(w.place(&places, 4096, &a).node, 2);
        a.home = Some(1);
        assert_eq!(w.place(&places, 4096, &a).node, 1);
        a.caller = Some(9);
        let p = w.place(&places, 4096, &a);
        assert_eq!((p.node, p.place), (9, None), "a CPU-only node is kept");
        // directory: the home, then the caller.
        let d = PlacementPolicy::Directory;
        assert_eq!(d.place(&places, 4096, &a).node, 1);
        a.home = None;
        assert_eq!(d.place(&places, 4096, &a).node, 9);
        // No places at all.
        assert_eq!(w.place(&[], 4096, &a).node, 9);
        assert_eq!(PlacementPolicy::Fixed(3).place(&[], 4096, &a).node, 3);
    }

    proptest::proptest! {
        #[test]
        fn display_parses_back(
            kind in 0u8..6,
            k in 1u32..=1024,
            chunk in 1u64..(1 << 30),
            node in 0u32..=MAX_NODE_ID,
            rb in 1u64..u64::MAX,
        ) {
            let p = match kind {
                0 => PlacementPolicy::WriterLocal,
                1 => PlacementPolicy::Directory,
                2 => PlacementPolicy::Interleave,
                3 => PlacementPolicy::Stripe { nodes: k, chunk: chunk * CHUNK_ALIGN },
                4 => PlacementPolicy::Fixed(node),
                _ => PlacementPolicy::Range { range_blocks: rb },
            };
            proptest::prop_assert_eq!(p.to_string().parse::<PlacementPolicy>(), Ok(p));
        }

        #[test]
        fn any_text_parses_or_errs_and_answers_stay_among_the_places(
            s in "\\PC{0,24}",
            places in proptest::collection::vec(0u32..4, 0..6),
            seed: u64,
            block: u64,
            bs in 1u64..(1 << 20),
        ) {
            if let Ok(p) = s.parse::<PlacementPolicy>() {
                proptest::prop_assert_eq!(p.to_string().parse::<PlacementPolicy>(), Ok(p.clone()));
                let got = p.place(&places, bs, &at(seed, block));
                proptest::prop_assert!(got.run >= 1);
                if let Some(i) = got.place {
                    proptest::prop_assert_eq!(places[i], got.node);
                }
                if p.validate(&places).is_ok() && !matches!(p, PlacementPolicy::WriterLocal | PlacementPolicy::Directory) {
                    proptest::prop_assert!(got.place.is_some());
                }
            }
        }

        /// Every block of a run gets the run's answer.
        #[test]
        fn runs_hold(
            kind in 0u8..4,
            seed in 0u64..1000,
            block in 0u64..1000,
            places in proptest::collection::vec(0u32..4, 1..6),
        ) {
            let p = match kind {
                0 => PlacementPolicy::Interleave,
                1 => PlacementPolicy::Stripe { nodes: 2.min(places.len() as u32), chunk: 3 * 4096 },
                2 => PlacementPolicy::Range { range_blocks: 7 },
                _ => PlacementPolicy::Fixed(places[0]),
            };
            let first = p.place(&places, 4096, &at(seed, block));
            for b in block..block.saturating_add(first.run).min(block + 50) {
                let x = p.place(&places, 4096, &at(seed, b));
                proptest::prop_assert_eq!((x.node, x.place), (first.node, first.place));
            }
        }
    }
}
