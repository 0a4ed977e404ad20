//! The power-cut model every crash test of numaio shares: what a disk holds after the power
//! went out.
//!
//! A disk holds what was synced; of the writes completed since, it may hold any, in any
//! order, and each only in part, torn at its atomic unit (the sector). [`Volatile`] keeps
//! one device's (or file's) durable image and its unsynced writes in completion order;
//! [`Volatile::cut`] applies a [`CutRule`] with a seeded [`Rng`], so a failing seed replays
//! the same cut. The engine's power-loss backend and the file system's in-memory store are
//! both this model, over files and over memory.

pub use crate::Rng;

/// What survives a cut besides the synced data.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CutRule {
    /// Probability that an unsynced write reaches the disk anyway (0 drops every unsynced
    /// write, the strictest check of a sync protocol; 1 keeps all of them).
    pub keep_unsynced: f64,
    /// A kept write survives only in part: each of its sectors independently, with
    /// probability one half.
    pub torn: bool,
    /// The disk's atomic unit in bytes, for torn writes; sectors are aligned to the image.
    pub sector: u64,
}

impl CutRule {
    /// Only what was synced survives.
    pub const DROP_UNSYNCED: CutRule = CutRule {
        keep_unsynced: 0.0,
        torn: false,
        sector: 512,
    };
    /// Everything written survives (a clean shutdown without sync).
    pub const KEEP_ALL: CutRule = CutRule {
        keep_unsynced: 1.0,
        torn: false,
        sector: 512,
    };
    /// Each unsynced 512-byte sector survives with probability one half.
    pub const TORN_SECTORS: CutRule = CutRule {
        keep_unsynced: 1.0,
        torn: true,
        sector: 512,
    };
}

/// What a cut did to the unsynced writes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CutCounts {
    /// Writes that survived whole.
    pub kept: u64,
    /// Writes that survived in part.
    pub torn: u64,
    /// Writes that left nothing.
    pub dropped: u64,
}

/// One device or file: its durable image and the writes completed since its last sync.
#[derive(Clone, Debug, Default)]
pub struct Volatile {
    durable: Vec<u8>,
    unsynced: Vec<(u64, Vec<u8>)>,
}

impl Volatile {
    /// A device or file whose contents `durable` are taken as synced.
    pub fn new(durable: Vec<u8>) -> Volatile {
        Volatile {
            durable,
            unsynced: Vec::new(),
        }
    }

    /// A write of `data` at `off` completed (not durable until [`Volatile::sync`]).
    pub fn write(&mut self, off: u64, data: &[u8]) {
        if !data.is_empty() {
            self.unsynced.push((off, data.to_vec()));
        }
    }

    /// A sync completed: every write before it is durable, and the image is `len` bytes
    /// long when given (`fdatasync` makes a file's size durable too).
    pub fn sync(&mut self, len: Option<u64>) {
        for (off, data) in std::mem::take(&mut self.unsynced) {
            apply(&mut self.durable, off, &data);
        }
        if let Some(len) = len {
            self.durable.resize(len as usize, 0);
        }
    }

    /// The contents as of the last sync.
    pub fn durable(&self) -> &[u8] {
        &self.durable
    }

    /// Whether writes completed since the last sync.
    pub fn has_unsynced(&self) -> bool {
        !self.unsynced.is_empty()
    }

    /// Cuts the power: the image becomes what the disk holds, the durable contents plus the
    /// unsynced writes `rule` lets survive (chosen with `rng`, counted in `counts`), and
    /// nothing is left unsynced. Returns the image.
    pub fn cut(&mut self, rule: &CutRule, rng: &mut Rng, counts: &mut CutCounts) -> &[u8] {
        let sector = rule.sector.max(1);
        for (start, data) in std::mem::take(&mut self.unsynced) {
            if !rng.chance(rule.keep_unsynced) {
                counts.dropped += 1;
                continue;
            }
            if !rule.torn {
                apply(&mut self.durable, start, &data);
                counts.kept += 1;
                continue;
            }
            let end = start + data.len() as u64;
            let (mut s, mut kept, mut total) = (start - start % sector, 0, 0);
            while s < end {
                let (a, b) = (s.max(start), (s + sector).min(end));
                total += 1;
                if rng.chance(0.5) {
                    kept += 1;
                    let piece = &data[(a - start) as usize..(b - start) as usize];
                    apply(&mut self.durable, a, piece);
                }
                s += sector;
            }
            match kept {
                0 => counts.dropped += 1,
                k if k == total => counts.kept += 1,
                _ => counts.torn += 1,
            }
        }
        &self.durable
    }
}

/// Copies `data` into `image` at `off`, growing it with zeros as needed.
fn apply(image: &mut Vec<u8>, off: u64, data: &[u8]) {
    let end = off as usize + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[off as usize..end].copy_from_slice(data);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cut_keeps_what_was_synced_and_what_the_rule_lets_survive() {
        let mut v = Volatile::new(vec![0; 8]);
        v.write(0, b"ab");
        v.sync(None);
        v.write(2, b"cd");
        let mut counts = CutCounts::default();
        let mut dropped = v.clone();
        let image = dropped.cut(&CutRule::DROP_UNSYNCED, &mut Rng(1), &mut counts);
        assert_eq!(image, b"ab\0\0\0\0\0\0");
        let image = v.cut(&CutRule::KEEP_ALL, &mut Rng(1), &mut counts);
        assert_eq!(image, b"abcd\0\0\0\0");
        assert_eq!(
            counts,
            CutCounts {
                kept: 1,
                torn: 0,
                dropped: 1
            }
        );
        assert!(!v.has_unsynced());
    }

    #[test]
    fn a_sync_sets_the_durable_length_and_torn_writes_keep_whole_sectors() {
        let mut v = Volatile::new(Vec::new());
        v.write(0, &[1; 16]);
        v.sync(Some(8));
        assert_eq!(v.durable(), &[1; 8]);
        for seed in 0..20 {
            let mut w = Volatile::new(vec![0; 16]);
            w.write(2, &[9; 12]);
            let rule = CutRule {
                sector: 4,
                ..CutRule::TORN_SECTORS
            };
            let mut c = CutCounts::default();
            let image = w.cut(&rule, &mut Rng(seed), &mut c).to_vec();
            // Sectors 0..4, 4..8, 8..12, 12..16: the written part of each (2..14) is all new
            // or all old, and nothing outside the write changes.
            for sec in 0..4 {
                let part = &image[(sec * 4).max(2)..(sec * 4 + 4).min(14)];
                assert!(part.iter().all(|&b| b == part[0]), "{image:?}");
            }
            assert_eq!((&image[..2], &image[14..]), (&[0u8; 2][..], &[0u8; 2][..]));
            assert_eq!(c.kept + c.torn + c.dropped, 1);
        }
    }
}
