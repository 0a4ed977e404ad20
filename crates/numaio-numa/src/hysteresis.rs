//! Hysteresis for moving threads to their data.
//!
//! Jericho moves a thread at *every* remote access and Adams at every remote hit; a thread that
//! reads data on two nodes would then bounce between them. This per-thread state machine only
//! asks for a move after K consecutive remote accesses, or when the remote share over a window
//! of accesses passes a threshold, and never twice within a cooldown (the "bound": at most one
//! move per `cooldown_accesses` accesses and per `cooldown` of time).

use std::collections::VecDeque;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, Instant};

use serde::Serialize;

/// When a run of remote accesses justifies a move.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// Move at the first remote access (Jericho, Adams).
    Immediate,
    /// Move after `k` consecutive remote accesses.
    Consecutive { k: u32 },
    /// Move when more than `threshold` (0..1) of the last `len` accesses were remote.
    Window { len: u32, threshold: f64 },
}

impl fmt::Display for Trigger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Trigger::Immediate => f.write_str("immediate"),
            Trigger::Consecutive { k } => write!(f, "consecutive:{k}"),
            Trigger::Window { len, threshold } => write!(f, "window:{len}:{threshold}"),
        }
    }
}

impl FromStr for Trigger {
    type Err = String;
    /// `immediate`, `consecutive:K`, `window:LEN:THRESHOLD`.
    fn from_str(s: &str) -> Result<Self, String> {
        let bad = |why: &str| {
            format!("invalid hysteresis trigger {s:?}: {why} (expected immediate | consecutive:K | window:LEN:THRESHOLD)")
        };
        let p: Vec<&str> = s.trim().split(':').collect();
        match p.as_slice() {
            ["immediate"] => Ok(Trigger::Immediate),
            ["consecutive", k] => {
                let k: u32 = k.parse().map_err(|_| bad("K is not a number"))?;
                if k == 0 {
                    return Err(bad("K must be >= 1"));
                }
                Ok(Trigger::Consecutive { k })
            }
            ["window", len, t] => {
                let len: u32 = len.parse().map_err(|_| bad("LEN is not a number"))?;
                let threshold: f64 = t.parse().map_err(|_| bad("THRESHOLD is not a number"))?;
                if len == 0 || !(0.0..1.0).contains(&threshold) {
                    return Err(bad("LEN must be >= 1 and 0 <= THRESHOLD < 1"));
                }
                Ok(Trigger::Window { len, threshold })
            }
            _ => Err(bad("unknown trigger")),
        }
    }
}

/// Hysteresis settings of a cache.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct HysteresisConfig {
    /// Default: `consecutive:4`.
    pub trigger: Trigger,
    /// At least this many accesses between two moves of a thread. Default: 64.
    pub cooldown_accesses: u64,
    /// At least this much time between two moves of a thread. Default: 0 (off).
    pub cooldown: Duration,
}

impl Default for HysteresisConfig {
    fn default() -> Self {
        Self {
            trigger: Trigger::Consecutive { k: 4 },
            cooldown_accesses: 64,
            cooldown: Duration::ZERO,
        }
    }
}

impl HysteresisConfig {
    /// No hysteresis at all: Jericho's rule.
    pub fn jericho() -> Self {
        Self {
            trigger: Trigger::Immediate,
            cooldown_accesses: 0,
            cooldown: Duration::ZERO,
        }
    }

    pub fn with_trigger(mut self, t: Trigger) -> Self {
        self.trigger = t;
        self
    }

    pub fn with_cooldown_accesses(mut self, n: u64) -> Self {
        self.cooldown_accesses = n;
        self
    }

    pub fn with_cooldown(mut self, d: Duration) -> Self {
        self.cooldown = d;
        self
    }
}

/// One thread's hysteresis state.
#[derive(Debug, Clone)]
pub struct Hysteresis {
    cfg: HysteresisConfig,
    /// Current run of consecutive remote accesses: (node, count) per node seen in the run.
    run: Vec<(u32, u32)>,
    run_len: u32,
    /// Last `len` accesses: the remote node, or None for a local one.
    window: VecDeque<Option<u32>>,
    accesses_since_move: u64,
    last_move: Option<Instant>,
    moves: u64,
}

impl Hysteresis {
    pub fn new(cfg: HysteresisConfig) -> Self {
        Self {
            cfg,
            run: Vec::new(),
            run_len: 0,
            window: VecDeque::new(),
            // The first move is not held back by the cooldown.
            accesses_since_move: u64::MAX / 2,
            last_move: None,
            moves: 0,
        }
    }

    pub fn config(&self) -> &HysteresisConfig {
        &self.cfg
    }

    /// Moves requested so far.
    pub fn moves(&self) -> u64 {
        self.moves
    }

    /// Records an access by a thread running on `thread_node` to data on `data_node`; returns
    /// the node to move the thread to, if a move is due now. The caller performs the move
    /// (and need not report success: a failed move simply shows up as more remote accesses).
    pub fn observe(&mut self, thread_node: u32, data_node: u32) -> Option<u32> {
        self.observe_at(thread_node, data_node, Instant::now())
    }

    /// [`observe`](Self::observe) with an explicit clock, for tests.
    pub fn observe_at(&mut self, thread_node: u32, data_node: u32, now: Instant) -> Option<u32> {
        self.accesses_since_move = self.accesses_since_move.saturating_add(1);
        let remote = thread_node != data_node;
        let candidate = match self.cfg.trigger {
            Trigger::Immediate => remote.then_some(data_node),
            Trigger::Consecutive { k } => {
                if remote {
                    self.run_len += 1;
                    match self.run.iter_mut().find(|(n, _)| *n == data_node) {
                        Some(e) => e.1 += 1,
                        None => self.run.push((data_node, 1)),
                    }
                    (self.run_len >= k).then(|| majority(&self.run, data_node))
                } else {
                    self.run.clear();
                    self.run_len = 0;
                    None
                }
            }
            Trigger::Window { len, threshold } => {
                self.window.push_back(remote.then_some(data_node));
                while self.window.len() > len as usize {
                    self.window.pop_front();
                }
                if self.window.len() == len as usize {
                    let remote_n = self.window.iter().filter(|x| x.is_some()).count();
                    if remote_n as f64 > threshold * len as f64 && remote {
                        let mut counts: Vec<(u32, u32)> = Vec::new();
                        for n in self.window.iter().flatten() {
                            match counts.iter_mut().find(|(m, _)| m == n) {
                                Some(e) => e.1 += 1,
                                None => counts.push((*n, 1)),
                            }
                        }
                        Some(majority(&counts, data_node))
                    } else {
                        None
                    }
                } else {
                    None
                }
            }
        };
        let target = candidate?;
        if self.accesses_since_move < self.cfg.cooldown_accesses.max(1) {
            return None;
        }
        if let Some(t) = self.last_move {
            if now.saturating_duration_since(t) < self.cfg.cooldown {
                return None;
            }
        }
        self.moves += 1;
        self.accesses_since_move = 0;
        self.last_move = Some(now);
        self.run.clear();
        self.run_len = 0;
        self.window.clear();
        Some(target)
    }
}

/// The node with the most accesses; ties go to `latest`, then to the lowest id.
fn majority(counts: &[(u32, u32)], latest: u32) -> u32 {
    let best = counts.iter().map(|c| c.1).max().unwrap_or(0);
    if counts.iter().any(|&(n, c)| n == latest && c == best) {
        return latest;
    }
    counts
        .iter()
        .filter(|c| c.1 == best)
        .map(|c| c.0)
        .min()
        .unwrap_or(latest)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a thread that really moves when told to.
    fn run(cfg: HysteresisConfig, start: u32, data: &[u32]) -> (u64, u64) {
        let mut h = Hysteresis::new(cfg);
        let mut node = start;
        let mut local = 0;
        for &d in data {
            if let Some(t) = h.observe(node, d) {
                node = t;
            }
            if node == d {
                local += 1;
            }
        }
        (h.moves(), local)
    }

    #[test]
    fn consecutive_moves_after_k() {
        let cfg = HysteresisConfig::default()
            .with_trigger(Trigger::Consecutive { k: 3 })
            .with_cooldown_accesses(1);
        let mut h = Hysteresis::new(cfg);
        assert_eq!(h.observe(0, 1), None);
        assert_eq!(h.observe(0, 1), None);
        assert_eq!(h.observe(0, 1), Some(1));
        // A local access resets the run.
        assert_eq!(h.observe(1, 0), None);
        assert_eq!(h.observe(1, 1), None);
        assert_eq!(h.observe(1, 0), None);
        assert_eq!(h.observe(1, 0), None);
        assert_eq!(h.observe(1, 0), Some(0));
        assert_eq!(h.moves(), 2);
    }

    #[test]
    fn consecutive_picks_majority_node() {
        let cfg = HysteresisConfig::default()
            .with_trigger(Trigger::Consecutive { k: 4 })
            .with_cooldown_accesses(1);
        let mut h = Hysteresis::new(cfg);
        assert_eq!(h.observe(0, 2), None);
        assert_eq!(h.observe(0, 2), None);
        assert_eq!(h.observe(0, 3), None);
        assert_eq!(h.observe(0, 3), Some(3), "tie goes to the latest node");
        let mut h = Hysteresis::new(cfg);
        for d in [2, 2, 2] {
            assert_eq!(h.observe(0, d), None);
        }
        assert_eq!(h.observe(0, 3), Some(2));
    }

    #[test]
    fn immediate_bounces_and_hysteresis_does_not() {
        let alternating: Vec<u32> = (0..1000).map(|i| i % 2).collect();
        let (moves, _) = run(HysteresisConfig::jericho(), 0, &alternating);
        assert!(moves >= 499, "Jericho's rule bounces: {moves}");
        let (moves, local) = run(HysteresisConfig::default(), 0, &alternating);
        assert_eq!(moves, 0);
        assert_eq!(local, 500);
    }

    #[test]
    fn cooldown_bounds_move_rate() {
        // Blocks of 8 accesses alternate between nodes: K=4 would move every 8 accesses.
        let data: Vec<u32> = (0..8000).map(|i| (i / 8) % 2).collect();
        for cool in [1u64, 16, 100, 1000] {
            let cfg = HysteresisConfig::default()
                .with_trigger(Trigger::Consecutive { k: 4 })
                .with_cooldown_accesses(cool);
            let (moves, _) = run(cfg, 0, &data);
            let bound = data.len() as u64 / cool.max(1) + 1;
            assert!(moves <= bound, "cooldown {cool}: {moves} > {bound}");
            assert!(moves > 0);
        }
    }

    #[test]
    fn time_cooldown() {
        let cfg = HysteresisConfig::jericho().with_cooldown(Duration::from_secs(10));
        let mut h = Hysteresis::new(cfg);
        let t0 = Instant::now();
        assert_eq!(h.observe_at(0, 1, t0), Some(1));
        assert_eq!(h.observe_at(1, 0, t0 + Duration::from_secs(5)), None);
        assert_eq!(h.observe_at(1, 0, t0 + Duration::from_secs(11)), Some(0));
    }

    #[test]
    fn window_threshold() {
        let cfg = HysteresisConfig::default()
            .with_trigger(Trigger::Window {
                len: 10,
                threshold: 0.7,
            })
            .with_cooldown_accesses(1);
        // 60 % remote: never moves.
        let data: Vec<u32> = (0..1000).map(|i| if i % 5 < 3 { 1 } else { 0 }).collect();
        assert_eq!(run(cfg, 0, &data).0, 0);
        // All remote: moves once, after the window fills, then stays local.
        let data = vec![1u32; 1000];
        let (moves, local) = run(cfg, 0, &data);
        assert_eq!(moves, 1);
        assert_eq!(local, 991);
    }

    #[test]
    fn parse_trigger() {
        assert_eq!(
            "consecutive:8".parse::<Trigger>().unwrap(),
            Trigger::Consecutive { k: 8 }
        );
        assert_eq!(
            "window:32:0.5".parse::<Trigger>().unwrap(),
            Trigger::Window {
                len: 32,
                threshold: 0.5
            }
        );
        assert_eq!("immediate".parse::<Trigger>().unwrap(), Trigger::Immediate);
        for bad in ["", "consecutive:0", "window:0:0.5", "window:8:1.5", "x"] {
            assert!(bad.parse::<Trigger>().is_err(), "{bad}");
        }
    }
}
