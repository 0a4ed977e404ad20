//! A request's blocks resolved in one pass before any is pinned, and its accesses reported
//! to the hooks in runs.
//!
//! Looking blocks up one after another pays one cache miss per block in series (the bucket
//! line of block k+1 is only requested once block k is done). [`Inner::locate_blocks`] first
//! asks the placement for each block's slice — once per range of blocks that map to one
//! slice, not once per block — and computes every block's index position, prefetching it;
//! the lookups that follow find their lines arriving or already there.

use crate::ext::{AccessCtx, AccessHook};
use crate::file::FileEntry;
use crate::inner::Inner;
use crate::key::{BlockKey, FileId};
use smallvec::SmallVec;
use std::sync::Arc;

/// One block of a request: its slice and its position in the slice's index (16 bytes).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Located {
    pub block: u64,
    /// Index position, or [`Located::UNLOCATED`]: look the key up directly.
    pub at: u32,
    pub slice: u16,
}

impl Located {
    /// A one-block request is looked up directly: locating it first would only add a call.
    pub const UNLOCATED: u32 = u32::MAX;
}

/// On the stack up to 256 blocks (a 1 MiB request of 4 KiB blocks, the default largest
/// request): resolving a request allocates nothing.
pub(crate) type Plan = SmallVec<[Located; 256]>;

impl Inner {
    /// Fills `plan` with the slice and the prefetched index position of each of the `n`
    /// blocks, in order.
    #[inline(always)]
    pub(crate) fn locate_blocks(
        &self,
        f: &FileEntry,
        mut blocks: impl Iterator<Item = u64>,
        n: usize,
        ctx: &AccessCtx,
        plan: &mut Plan,
    ) {
        if n == 1 {
            if let Some(block) = blocks.next() {
                plan.push(Located {
                    block,
                    at: Located::UNLOCATED,
                    slice: self.slice_of(f.id, block, ctx) as u16,
                });
                return;
            }
        }
        self.locate_run(f, blocks, ctx, plan);
    }

    fn locate_run(
        &self,
        f: &FileEntry,
        blocks: impl Iterator<Item = u64>,
        ctx: &AccessCtx,
        plan: &mut Plan,
    ) {
        let nslices = self.slices.len();
        // The blocks `[from, to)` all map to `slice`.
        let (mut from, mut to, mut slice) = (0u64, 0u64, 0usize);
        for block in blocks {
            if nslices > 1 && !(from <= block && block < to) {
                let (s, n) = self.placement.slice_run(f.id, block, ctx);
                (from, to, slice) = (block, block.saturating_add(n.max(1)), s.min(nslices - 1));
            }
            let at = self.slices[slice].locate(&BlockKey { file: f.id, block });
            plan.push(Located {
                block,
                // Bucket numbers fit: the index keeps its entry numbers below u32::MAX.
                at: u32::try_from(at).unwrap_or(Located::UNLOCATED),
                slice: slice as u16,
            });
        }
    }
}

/// Collects a request's accesses into runs (consecutive blocks, one slice, all hits or all
/// misses) and reports each run to the hooks in one call.
pub(crate) struct HookRuns<'a> {
    hooks: &'a [Arc<dyn AccessHook>],
    file: FileId,
    ctx: &'a AccessCtx,
    /// The run not reported yet: first block, count, slice, hit.
    cur: Option<(u64, u64, usize, bool)>,
}

impl<'a> HookRuns<'a> {
    pub(crate) fn new(hooks: &'a [Arc<dyn AccessHook>], file: FileId, ctx: &'a AccessCtx) -> Self {
        HookRuns {
            hooks,
            file,
            ctx,
            cur: None,
        }
    }

    /// Notes one access (after its block was pinned).
    #[inline]
    pub(crate) fn note(&mut self, block: u64, slice: usize, hit: bool) {
        if self.hooks.is_empty() {
            return;
        }
        if let Some((first, count, s, h)) = &mut self.cur {
            if first.wrapping_add(*count) == block && *s == slice && *h == hit {
                *count += 1;
                return;
            }
        }
        self.flush();
        self.cur = Some((block, 1, slice, hit));
    }

    /// Reports the pending run.
    pub(crate) fn flush(&mut self) {
        if let Some((first, count, slice, hit)) = self.cur.take() {
            for h in self.hooks {
                h.on_run(self.file, first, count, slice, hit, self.ctx);
            }
        }
    }
}
