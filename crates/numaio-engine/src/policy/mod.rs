//! The replacement-policy interface shared by `arc`, `split_lru` and `clock`.
//!
//! Every method takes `&self`: each policy does its own synchronisation so that a hit never
//! takes an exclusive slice-wide lock (ARC batches hits in a striped access log, split-LRU
//! locks one of LRU_FACTOR sub-lists, CLOCK sets a reference byte).
//!
//! Eviction is driven by the slice's evictor: the policy proposes victims in its own order and
//! calls `reclaim(slot)`, which frees the slot only if it is clean and unpinned; dirty victims
//! are collected by the caller for a coalesced write-back and are left in place so they are
//! the first to go once clean.

mod arc;
mod clock;
mod dlist;
mod split_lru;

pub use arc::Arc as ArcPolicy;
pub use clock::Clock;
pub use split_lru::SplitLru;

use crate::key::{BlockKey, SlotId};
use crate::slot::Reclaim;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

pub trait ReplacementPolicy: Send + Sync {
    fn name(&self) -> &'static str;
    /// A hit on a resident slot. Must be cheap and must not take a slice-wide exclusive lock.
    fn on_hit(&self, slot: SlotId);
    /// `slot` now holds `key` (a miss was inserted).
    fn on_insert(&self, slot: SlotId, key: BlockKey);
    /// `slot` left the cache outside `evict` (failed load).
    fn on_remove(&self, slot: SlotId);
    /// Tries to free up to `want` slots; returns how many `reclaim` freed.
    fn evict(&self, want: usize, reclaim: &mut dyn FnMut(SlotId) -> Reclaim) -> usize;
    /// Slots the policy currently tracks.
    fn resident(&self) -> usize;
}

/// Which policy a cache uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum PolicyKind {
    Arc,
    /// Finer-LRU with the given LRU_FACTOR (number of sub-lists).
    SplitLru {
        lru_factor: usize,
    },
    Clock,
}

impl PolicyKind {
    pub fn build(self, slots: usize) -> Box<dyn ReplacementPolicy> {
        match self {
            PolicyKind::Arc => Box::new(ArcPolicy::new(slots)),
            PolicyKind::SplitLru { lru_factor } => Box::new(SplitLru::new(slots, lru_factor)),
            PolicyKind::Clock => Box::new(Clock::new(slots)),
        }
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PolicyKind::Arc => write!(f, "arc"),
            PolicyKind::SplitLru { lru_factor } => write!(f, "split-lru[{lru_factor}]"),
            PolicyKind::Clock => write!(f, "clock"),
        }
    }
}

impl FromStr for PolicyKind {
    type Err = String;
    /// `arc`, `clock`, `split-lru` (LRU_FACTOR 8) or `split-lru:N`.
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "arc" => Ok(PolicyKind::Arc),
            "clock" => Ok(PolicyKind::Clock),
            "split-lru" | "lru" => Ok(PolicyKind::SplitLru { lru_factor: 8 }),
            _ => {
                if let Some(n) = s.strip_prefix("split-lru:") {
                    match n.parse::<usize>() {
                        Ok(f) if f >= 1 => Ok(PolicyKind::SplitLru { lru_factor: f }),
                        _ => Err(format!(
                            "bad LRU_FACTOR in {s:?}: expected split-lru:N with N >= 1"
                        )),
                    }
                } else {
                    Err(format!(
                        "unknown policy {s:?}: expected arc, split-lru, split-lru:N or clock"
                    ))
                }
            }
        }
    }
}
