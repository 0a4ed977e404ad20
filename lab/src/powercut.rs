//! Cutting a guest's power mid-scenario: the host kills QEMU with SIGKILL once the
//! scenario has printed a given number of matching lines, optionally after a delay.
//!
//! What a cut loses: the guest's RAM (page cache, any user-space cache such as the numaio
//! engine's, writes not yet handed to the virtual disk) and requests QEMU had not yet
//! submitted. Writes QEMU completed survive in the image, as on a disk whose volatile cache
//! was flushed. Images attached with [`crate::Scenario::disk_image`] use `cache=none`
//! (see [`crate::qemu`]), so the guest sees a disk with a volatile write cache and must
//! send flushes for `fsync` to mean anything.

use crate::console::{strip_escapes, START_MARKER};
use std::time::Duration;

/// When to cut the power: after the scenario printed `lines` lines starting with `prefix`,
/// plus `delay`. Lines before the scenario's start marker never count.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PowerCut {
    pub prefix: String,
    pub lines: usize,
    pub delay: Duration,
}

impl PowerCut {
    /// Cut as soon as the `lines`-th line starting with `prefix` arrives.
    pub fn after_lines(prefix: impl Into<String>, lines: usize) -> PowerCut {
        PowerCut {
            prefix: prefix.into(),
            lines,
            delay: Duration::ZERO,
        }
    }

    /// Waits this long after the lines before cutting.
    pub fn then_wait(mut self, delay: Duration) -> PowerCut {
        self.delay = delay;
        self
    }
}

/// Counts the scenario's complete console lines that start with a prefix, reading the raw
/// console incrementally (each byte is looked at once).
pub(crate) struct LineWatcher {
    prefix: String,
    pos: usize,
    started: bool,
    count: usize,
}

impl LineWatcher {
    pub(crate) fn new(prefix: &str) -> LineWatcher {
        LineWatcher {
            prefix: prefix.to_string(),
            pos: 0,
            started: false,
            count: 0,
        }
    }

    /// Scans the complete lines of `raw` not seen yet; returns the count so far.
    pub(crate) fn feed(&mut self, raw: &[u8]) -> usize {
        while let Some(nl) = raw[self.pos..].iter().position(|&b| b == b'\n') {
            let line = strip_escapes(&String::from_utf8_lossy(&raw[self.pos..self.pos + nl]));
            self.pos += nl + 1;
            let line = line.trim_end();
            if !self.started {
                self.started = line.ends_with(START_MARKER);
            } else if line.starts_with(&self.prefix) {
                self.count += 1;
            }
        }
        self.count
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watcher_counts_scenario_lines_only() {
        let mut w = LineWatcher::new("ACK ");
        let mut raw =
            b"ACK 0 (boot noise)\n\n\x1b[0m@@NUMAIO-LAB-START@@\r\nACK 1\nfoo\nAC".to_vec();
        assert_eq!(w.feed(&raw), 1);
        raw.extend_from_slice(b"K 2\r\nACK 3");
        assert_eq!(w.feed(&raw), 2, "an incomplete line does not count yet");
        raw.extend_from_slice(b"\n");
        assert_eq!(w.feed(&raw), 3);
        let c = PowerCut::after_lines("ACK ", 4).then_wait(Duration::from_millis(5));
        assert_eq!(c.lines, 4);
        assert_eq!(c.delay, Duration::from_millis(5));
    }
}
