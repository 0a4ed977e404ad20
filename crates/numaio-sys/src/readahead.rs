//! Readahead for a sequential reader: when a read starts where the previous one ended, the
//! data after it is requested before it is asked for.
//!
//! One rule for every cache of numaio that reads ahead (the engine's per-file cache, the
//! file system's device reads): a window of `window` units is kept requested ahead of the
//! stream, topped up in one piece when less than half of it is left (as the kernel's async
//! readahead marker does), so a stream costs one readahead per half window rather than one
//! per read. Units are the caller's (blocks, bytes). Lock-free; concurrent readers of one
//! [`Readahead`] at worst issue a range twice or skip one, which costs time, never data.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};

/// The state of one stream: where the last read ended and how far ahead was requested.
#[derive(Debug)]
pub struct Readahead {
    next: AtomicU64,
    until: AtomicU64,
}

impl Default for Readahead {
    fn default() -> Self {
        Readahead::new()
    }
}

impl Readahead {
    /// No read seen yet.
    pub const fn new() -> Readahead {
        Readahead {
            next: AtomicU64::new(u64::MAX),
            until: AtomicU64::new(0),
        }
    }

    /// Records a read of `start..end` and returns what to read ahead now, if anything: for a
    /// read that continues the last one, the part of `end..end + window` (cut at `limit`, the
    /// end of the data) not requested before, once less than half the window is left.
    pub fn advance(&self, start: u64, end: u64, window: u64, limit: u64) -> Option<Range<u64>> {
        if self.next.swap(end, Ordering::Relaxed) != start {
            // A new stream: what an earlier one requested ahead is not its window.
            self.until.store(end, Ordering::Relaxed);
            return None;
        }
        let from = end.max(self.until.load(Ordering::Relaxed));
        let to = end.saturating_add(window).min(limit);
        if from >= to || from >= end.saturating_add((window / 2).max(1)) {
            return None;
        }
        self.until.fetch_max(to, Ordering::Relaxed);
        Some(from..to)
    }
}

/// Several streams over one range of units (a device read by many files at once): a read
/// continues the stream whose last read ended where it starts, or starts a new one in the
/// slot used longest ago. One [`Readahead`] alone would see interleaved streams as jumps and
/// read ahead for none of them.
#[derive(Debug)]
pub struct Streams {
    slots: Box<[Readahead]>,
    /// The slot the next new stream takes (round robin: the oldest start).
    victim: AtomicU64,
}

impl Streams {
    /// Room for `streams` concurrent streams (at least one).
    pub fn new(streams: usize) -> Streams {
        Streams {
            slots: (0..streams.max(1)).map(|_| Readahead::new()).collect(),
            victim: AtomicU64::new(0),
        }
    }

    /// [`Readahead::advance`] on the stream `start..end` continues, or on a new one.
    pub fn advance(&self, start: u64, end: u64, window: u64, limit: u64) -> Option<Range<u64>> {
        let slot = self
            .slots
            .iter()
            .find(|r| r.next.load(Ordering::Relaxed) == start)
            .unwrap_or_else(|| {
                let i = self.victim.fetch_add(1, Ordering::Relaxed) % self.slots.len() as u64;
                &self.slots[i as usize]
            });
        slot.advance(start, end, window, limit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_keeps_a_window_ahead_topped_up_at_half() {
        let r = Readahead::new();
        // The first read is no stream yet.
        assert_eq!(r.advance(0, 4, 8, 100), None);
        // Continuing it requests the whole window.
        assert_eq!(r.advance(4, 8, 8, 100), Some(8..16));
        // More than half the window still ahead: nothing.
        assert_eq!(r.advance(8, 10, 8, 100), None);
        assert_eq!(r.advance(10, 12, 8, 100), None);
        // Half or less left: topped up in one piece.
        assert_eq!(r.advance(12, 14, 8, 100), Some(16..22));
        // Cut at the end of the data, and nothing past it.
        assert_eq!(r.advance(14, 20, 8, 24), Some(22..24));
        assert_eq!(r.advance(20, 24, 8, 24), None);
    }

    #[test]
    fn a_jump_starts_over() {
        let r = Readahead::new();
        r.advance(0, 4, 8, 100);
        assert_eq!(r.advance(50, 54, 8, 100), None);
        assert_eq!(r.advance(54, 58, 8, 100), Some(58..66));
        // Going back starts a stream of its own, with a window of its own.
        r.advance(0, 4, 8, 100);
        assert_eq!(r.advance(4, 8, 8, 100), Some(8..16));
    }

    #[test]
    fn ends_near_the_top_of_the_range_do_not_overflow() {
        let r = Readahead::new();
        // Nothing requested yet, so the stream's first top-up is the whole (cut) window.
        r.advance(u64::MAX - 8, u64::MAX - 4, 16, u64::MAX);
        assert_eq!(
            r.advance(u64::MAX - 4, u64::MAX - 2, 16, u64::MAX),
            Some(u64::MAX - 2..u64::MAX)
        );
    }

    #[test]
    fn interleaved_streams_each_keep_their_window() {
        let s = Streams::new(4);
        // Three readers of one device, their reads interleaved.
        for base in [0u64, 1000, 2000] {
            assert_eq!(s.advance(base, base + 4, 8, 10_000), None);
        }
        for base in [0u64, 1000, 2000] {
            assert_eq!(
                s.advance(base + 4, base + 8, 8, 10_000),
                Some(base + 8..base + 16)
            );
        }
        // One slot alone sees only jumps.
        let one = Streams::new(1);
        one.advance(0, 4, 8, 10_000);
        one.advance(1000, 1004, 8, 10_000);
        assert_eq!(one.advance(4, 8, 8, 10_000), None);
    }

    #[test]
    fn more_streams_than_slots_replace_the_oldest() {
        let s = Streams::new(2);
        s.advance(0, 4, 8, 10_000);
        s.advance(100, 104, 8, 10_000);
        // A third stream takes the first one's slot.
        s.advance(200, 204, 8, 10_000);
        assert_eq!(s.advance(204, 208, 8, 10_000), Some(208..216));
        assert_eq!(s.advance(104, 108, 8, 10_000), Some(108..116));
        // The first stream lost its slot: its next read starts over.
        assert_eq!(s.advance(4, 8, 8, 10_000), None);
    }
}
