//! Hit ratios of the replacement policies on standard traces, driven through the same
//! `ReplacementPolicy` interface the slices use (a cache of `cap` slots, one victim per miss
//! when full). Plain LRU (one list, move to front on hit) is the reference.

use numaio_engine::policy::ArcPolicy;
use numaio_engine::{BlockKey, FileId, PolicyKind, Reclaim, ReplacementPolicy, SlotId};
use std::collections::{BTreeMap, HashMap};

/// (block, is it part of the hot set)
type Trace = Vec<(u64, bool)>;

struct Ratio {
    all: f64,
    hot: f64,
}

fn simulate(p: &dyn ReplacementPolicy, cap: usize, trace: &Trace, warmup: usize) -> Ratio {
    let mut map: HashMap<u64, SlotId> = HashMap::new();
    let mut owner: Vec<Option<u64>> = vec![None; cap];
    let mut free: Vec<SlotId> = (0..cap as SlotId).rev().collect();
    let (mut h, mut n, mut hh, mut hn) = (0u64, 0u64, 0u64, 0u64);
    for (i, &(b, hot)) in trace.iter().enumerate() {
        let hit = if let Some(&s) = map.get(&b) {
            p.on_hit(s);
            true
        } else {
            if free.is_empty() {
                let mut freed = Vec::new();
                p.evict(1, &mut |s| {
                    freed.push(s);
                    Reclaim::Freed
                });
                for s in freed {
                    if let Some(k) = owner[s as usize].take() {
                        map.remove(&k);
                    }
                    free.push(s);
                }
            }
            let s = free.pop().expect("policy freed a slot");
            owner[s as usize] = Some(b);
            map.insert(b, s);
            p.on_insert(
                s,
                BlockKey {
                    file: FileId(0),
                    block: b,
                },
            );
            false
        };
        if i >= warmup {
            n += 1;
            h += hit as u64;
            if hot {
                hn += 1;
                hh += hit as u64;
            }
        }
    }
    Ratio {
        all: h as f64 / n.max(1) as f64,
        hot: hh as f64 / hn.max(1) as f64,
    }
}

fn lru(cap: usize, trace: &Trace, warmup: usize) -> Ratio {
    let mut when: HashMap<u64, u64> = HashMap::new();
    let mut order: BTreeMap<u64, u64> = BTreeMap::new();
    let (mut h, mut n, mut hh, mut hn) = (0u64, 0u64, 0u64, 0u64);
    for (t, &(b, hot)) in trace.iter().enumerate() {
        let t = t as u64;
        let hit = if let Some(old) = when.insert(b, t) {
            order.remove(&old);
            true
        } else {
            if order.len() >= cap {
                let (&ot, &ok) = order.iter().next().unwrap();
                order.remove(&ot);
                when.remove(&ok);
            }
            false
        };
        order.insert(t, b);
        if t as usize >= warmup {
            n += 1;
            h += hit as u64;
            if hot {
                hn += 1;
                hh += hit as u64;
            }
        }
    }
    Ratio {
        all: h as f64 / n.max(1) as f64,
        hot: hh as f64 / hn.max(1) as f64,
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// A hot set of `hot` blocks re-read in random order, interleaved with a one-pass scan of
/// never-repeated blocks, `scan_per_hot` scan reads per hot read.
fn scan_with_hot_set(hot: u64, rounds: usize, scan_per_hot: u64) -> Trace {
    let mut r = Rng(7);
    let mut t = Trace::new();
    let mut next_scan = 1_000_000u64;
    // The application first works on its hot set (each block read twice)...
    for b in 0..hot {
        t.push((b, true));
        t.push((b, true));
    }
    // ...then keeps re-reading it while a one-pass scan streams by.
    for _ in 0..rounds {
        // Cyclic order: each hot block is re-read every hot * (1 + scan_per_hot) accesses.
        for b in 0..hot {
            let _ = r.next();
            t.push((b, true));
            for _ in 0..scan_per_hot {
                t.push((next_scan, false));
                next_scan += 1;
            }
        }
    }
    t
}

/// Skewed random reads: block = N * u^3, u uniform in [0,1) (a Zipf-like popularity curve).
fn skewed(n: u64, len: usize) -> Trace {
    let mut r = Rng(11);
    (0..len)
        .map(|_| {
            let u = (r.next() % 1_000_000) as f64 / 1_000_000.0;
            ((n as f64 * u * u * u) as u64, false)
        })
        .collect()
}

fn policies(cap: usize) -> Vec<(String, Box<dyn ReplacementPolicy>)> {
    [
        PolicyKind::Arc,
        PolicyKind::SplitLru { lru_factor: 1 },
        PolicyKind::SplitLru { lru_factor: 8 },
        PolicyKind::Clock,
    ]
    .into_iter()
    .map(|k| (k.to_string(), k.build(cap)))
    .collect()
}

#[test]
fn arc_keeps_the_hot_set_through_a_scan_where_lru_loses_it() {
    let cap = 1000;
    let trace = scan_with_hot_set(500, 12, 2);
    let warm = trace.len() / 4;
    let l = lru(cap, &trace, warm);
    let arc = ArcPolicy::new(cap);
    let a = simulate(&arc, cap, &trace, warm);
    println!(
        "scan+hot: lru hot {:.3} all {:.3}; arc hot {:.3} all {:.3}",
        l.hot, l.all, a.hot, a.all
    );
    for (name, p) in policies(cap) {
        let r = simulate(p.as_ref(), cap, &trace, warm);
        println!("scan+hot: {name} hot {:.3} all {:.3}", r.hot, r.all);
    }
    // Each hot block is re-read about every 1500 accesses: LRU (1000 slots) always loses it.
    assert!(l.hot < 0.1, "plain LRU kept the hot set? {:.3}", l.hot);
    assert!(a.hot > 0.9, "ARC lost the hot set: {:.3}", a.hot);
    // The scan did not teach ARC to favour recency: T1's target stays small.
    assert!(arc.target_t1() < cap / 2, "p = {}", arc.target_t1());
}

#[test]
fn every_policy_beats_nothing_and_tracks_lru_on_skewed_reads() {
    let cap = 1000;
    let trace = skewed(20_000, 200_000);
    let warm = 20_000;
    let l = lru(cap, &trace, warm);
    println!("skewed: lru {:.3}", l.all);
    for (name, p) in policies(cap) {
        let r = simulate(p.as_ref(), cap, &trace, warm);
        println!("skewed: {name} {:.3}", r.all);
        assert!(
            r.all > l.all * 0.9,
            "{name}: {:.3} vs lru {:.3}",
            r.all,
            l.all
        );
    }
}

#[test]
fn arc_ghost_hits_move_the_target_both_ways() {
    let key = |b| BlockKey {
        file: FileId(0),
        block: b,
    };
    let arc = ArcPolicy::new(4);
    for s in 0..4 {
        arc.on_insert(s, key(s as u64));
    }
    // Evict the LRU of T1 (block 0): it becomes a B1 ghost.
    let mut victim = None;
    assert_eq!(
        arc.evict(1, &mut |s| {
            victim = Some(s);
            Reclaim::Freed
        }),
        1
    );
    assert_eq!(victim, Some(0));
    assert_eq!(arc.target_t1(), 0);
    // A miss on block 0 hits the B1 ghost: recency was undervalued, p grows.
    arc.on_insert(0, key(0));
    assert_eq!(arc.target_t1(), 1);
    // Block 0 is now in T2; make it the only T2 entry and evict from T2 (T1 has 3 > p = 1
    // so T1 goes first: evict T1 entries until |T1| <= p, then T2).
    let mut order = Vec::new();
    arc.evict(3, &mut |s| {
        order.push(s);
        Reclaim::Freed
    });
    assert_eq!(order, vec![1, 2, 0], "T1 down to p, then T2's LRU");
    // Block 0 is a B2 ghost now: a miss on it means frequency was undervalued, p shrinks.
    arc.on_insert(0, key(0));
    assert_eq!(arc.target_t1(), 0);
}
