//! The default placement, Jericho's range partitioning.
//!
//! Jericho gives each slice a fixed range of device blocks. We have no device address for a
//! file block, so each file is treated as its own run of blocks cut into ranges of
//! `range_blocks`; the ranges go to the slices round robin, starting at the slice
//! `file id mod slices` (so small files spread over the slices, as Jericho's per-directory
//! round robin does). Other policies (caller's node, file affinity, ...) live in
//! the parent module and plug in through the same trait.

use crate::ext::{AccessCtx, Placement};
use crate::key::FileId;

/// The range rule, for every placement that cuts files into ranges: ranges of
/// `range_blocks` go to the `slices` slices round robin, starting at `file mod slices`.
pub(crate) fn range_slice(file: u64, block: u64, range_blocks: u64, slices: usize) -> usize {
    ((file.wrapping_add(block / range_blocks.max(1))) % slices.max(1) as u64) as usize
}

/// Jericho-style range partitioning (see the module doc).
#[derive(Debug, Clone)]
pub struct RangePlacement {
    pub slices: usize,
    pub range_blocks: u64,
}

impl RangePlacement {
    pub fn new(slices: usize, range_blocks: u64) -> Self {
        RangePlacement {
            slices: slices.max(1),
            range_blocks: range_blocks.max(1),
        }
    }
}

impl Placement for RangePlacement {
    fn name(&self) -> String {
        format!("range({} blocks)", self.range_blocks)
    }
    fn slice_for(&self, file: FileId, block: u64, _ctx: &AccessCtx) -> usize {
        range_slice(file.0 as u64, block, self.range_blocks, self.slices)
    }
    fn slice_run(&self, file: FileId, block: u64, ctx: &AccessCtx) -> (usize, u64) {
        // The rest of the block's range: all of it maps to the same slice.
        let rb = self.range_blocks.max(1);
        (self.slice_for(file, block, ctx), rb - block % rb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_rotate_over_slices() {
        let p = RangePlacement::new(4, 8);
        let c = AccessCtx::new(false);
        let f = FileId(0);
        assert_eq!(p.slice_for(f, 0, &c), 0);
        assert_eq!(p.slice_for(f, 7, &c), 0);
        assert_eq!(p.slice_for(f, 8, &c), 1);
        assert_eq!(p.slice_for(f, 31, &c), 3);
        assert_eq!(p.slice_for(f, 32, &c), 0);
        assert_eq!(p.slice_for(FileId(1), 0, &c), 1);
        assert_eq!(p.slice_run(f, 0, &c), (0, 8));
        assert_eq!(p.slice_run(f, 13, &c), (1, 3));
        // Every block of a claimed run maps to the run's slice, and the next one does not.
        for b in 0..64 {
            let (s, n) = p.slice_run(f, b, &c);
            assert!((b..b + n).all(|x| p.slice_for(f, x, &c) == s));
            assert_ne!(p.slice_for(f, b + n, &c), s);
        }
    }
}
