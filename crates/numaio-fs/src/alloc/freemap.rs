//! The free-extent map of one node: free runs indexed both by address (to find the run at a
//! goal, to coalesce neighbours) and by length (best fit), so every lookup is O(log n) in the
//! number of free runs.

use super::Extent;
use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Default)]
pub(crate) struct FreeMap {
    /// (dev, start) → len.
    by_start: BTreeMap<(u16, u64), u64>,
    /// (len, dev, start), for best fit and largest-first.
    by_len: BTreeSet<(u64, u16, u64)>,
    total: u64,
}

impl FreeMap {
    /// Free blocks in the map.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    fn add_raw(&mut self, dev: u16, start: u64, len: u64) {
        debug_assert!(len > 0);
        self.by_start.insert((dev, start), len);
        self.by_len.insert((len, dev, start));
        self.total += len;
    }

    fn del_raw(&mut self, dev: u16, start: u64) -> u64 {
        let len = self
            .by_start
            .remove(&(dev, start))
            .expect("free run is in the map");
        self.by_len.remove(&(len, dev, start));
        self.total -= len;
        len
    }

    /// The free run holding `block`, as (start, len).
    pub(crate) fn containing(&self, dev: u16, block: u64) -> Option<(u64, u64)> {
        self.by_start
            .range(..=(dev, block))
            .next_back()
            .filter(|(&(d, s), &len)| d == dev && block < s + len)
            .map(|(&(_, s), &len)| (s, len))
    }

    /// Whether any block of `[start, start + len)` is free.
    pub(crate) fn overlaps(&self, dev: u16, start: u64, len: u64) -> bool {
        if self.containing(dev, start).is_some() {
            return true;
        }
        self.by_start
            .range((dev, start)..(dev, start + len))
            .next()
            .is_some()
    }

    /// Whether every block of `[start, start + len)` is free (possibly over several runs that
    /// meet at group boundaries).
    pub(crate) fn covers(&self, dev: u16, start: u64, len: u64) -> bool {
        let end = start + len;
        let mut at = start;
        while at < end {
            match self.containing(dev, at) {
                Some((s, l)) => at = s + l,
                None => return false,
            }
        }
        true
    }

    /// Adds a free run that overlaps nothing in the map, merging it with its neighbours
    /// unless they meet at a point where `joinable` says no (a group boundary).
    pub(crate) fn insert(
        &mut self,
        dev: u16,
        mut start: u64,
        mut len: u64,
        joinable: impl Fn(u16, u64) -> bool,
    ) {
        if len == 0 {
            return;
        }
        debug_assert!(
            !self.overlaps(dev, start, len),
            "double free of {dev}:{start}+{len}"
        );
        if joinable(dev, start) {
            if let Some((s, l)) = self
                .containing(dev, start.wrapping_sub(1))
                .filter(|_| start > 0)
            {
                if s + l == start {
                    self.del_raw(dev, s);
                    start = s;
                    len += l;
                }
            }
        }
        let end = start + len;
        if joinable(dev, end) {
            if let Some(&l) = self.by_start.get(&(dev, end)) {
                self.del_raw(dev, end);
                len += l;
            }
        }
        self.add_raw(dev, start, len);
    }

    /// Removes `[start, start + len)`, which must be free (see [`FreeMap::covers`]).
    pub(crate) fn remove_range(&mut self, dev: u16, start: u64, len: u64) {
        let end = start + len;
        let mut at = start;
        while at < end {
            let (s, l) = self.containing(dev, at).expect("range is free");
            self.del_raw(dev, s);
            if s < at {
                self.add_raw(dev, s, at - s);
            }
            let run_end = s + l;
            if run_end > end {
                self.add_raw(dev, end, run_end - end);
            }
            at = run_end.min(end);
        }
    }

    /// Takes up to `max` blocks starting exactly at `start`, if that block is free.
    pub(crate) fn take_at(&mut self, dev: u16, start: u64, max: u64) -> Option<Extent> {
        let (s, l) = self.containing(dev, start)?;
        let take = (s + l - start).min(max);
        if take == 0 {
            return None;
        }
        self.remove_range(dev, start, take);
        Some(Extent {
            dev,
            start,
            len: take,
        })
    }

    /// Takes `n` blocks from the start of the smallest run that holds them all (best fit).
    pub(crate) fn take_fit(&mut self, n: u64) -> Option<Extent> {
        let &(len, dev, start) = self.by_len.range((n, 0, 0)..).next()?;
        debug_assert!(len >= n);
        self.del_raw(dev, start);
        if len > n {
            self.add_raw(dev, start + n, len - n);
        }
        Some(Extent { dev, start, len: n })
    }

    /// Takes up to `max` blocks from the start of the largest run.
    pub(crate) fn take_largest(&mut self, max: u64) -> Option<Extent> {
        let &(longest, _, _) = self.by_len.iter().next_back()?;
        // Of the longest runs, the lowest address: a fresh volume fills front to back.
        let &(len, dev, start) = self.by_len.range((longest, 0, 0)..).next()?;
        let take = len.min(max);
        self.del_raw(dev, start);
        if len > take {
            self.add_raw(dev, start + take, len - take);
        }
        Some(Extent {
            dev,
            start,
            len: take,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_except_at_boundaries() {
        let mut m = FreeMap::default();
        let join = |_d: u16, at: u64| at != 100;
        m.insert(0, 90, 10, join);
        m.insert(0, 100, 10, join);
        assert_eq!(m.containing(0, 95), Some((90, 10)), "no merge across 100");
        m.insert(0, 80, 10, join);
        assert_eq!(m.containing(0, 80), Some((80, 20)));
        m.insert(0, 110, 5, join);
        assert_eq!(m.containing(0, 114), Some((100, 15)));
        assert_eq!(m.total(), 35);
        assert!(m.covers(0, 85, 25));
        m.remove_range(0, 95, 10);
        assert_eq!(m.containing(0, 94), Some((80, 15)));
        assert_eq!(m.containing(0, 105), Some((105, 10)));
        assert_eq!(m.total(), 25);
        assert!(!m.covers(0, 90, 10));
    }

    #[test]
    fn best_fit_and_largest() {
        let mut m = FreeMap::default();
        let join = |_d: u16, _at: u64| true;
        m.insert(0, 0, 50, join);
        m.insert(0, 100, 8, join);
        m.insert(1, 0, 20, join);
        let e = m.take_fit(10).unwrap();
        assert_eq!((e.dev, e.start, e.len), (1, 0, 10), "smallest run of ≥ 10");
        let e = m.take_fit(8).unwrap();
        assert_eq!((e.dev, e.start), (0, 100));
        let e = m.take_largest(100).unwrap();
        assert_eq!((e.dev, e.start, e.len), (0, 0, 50));
        assert!(m.take_at(1, 10, 3).is_some());
        assert!(m.take_at(1, 10, 3).is_none());
        assert_eq!(m.total(), 7);
    }
}
