#![allow(dead_code)]
use numaio_engine::{Engine, EngineConfig, PolicyKind};

/// A small engine for tests: `slots` blocks of 4 KiB per slice, `slices` slices on whatever
/// node exists (a one-node host gets several slices on node 0).
pub fn small_engine(policy: PolicyKind, slices: usize, slots: usize) -> Engine {
    let cfg = EngineConfig {
        cache_bytes: (slices * slots * 4096) as u64,
        slices: Some(slices),
        policy,
        range_blocks: 4,
        queue_depth: 8,
        ..Default::default()
    };
    Engine::new(cfg).expect("engine starts")
}

pub fn policies() -> Vec<PolicyKind> {
    vec![
        PolicyKind::Arc,
        PolicyKind::SplitLru { lru_factor: 4 },
        PolicyKind::Clock,
    ]
}

/// Deterministic pseudo-random bytes.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
