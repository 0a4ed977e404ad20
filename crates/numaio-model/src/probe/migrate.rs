//! `move_pages(2)` cost: time to move a buffer's pages from one node to another.

use super::buffer::NodeBuffer;
use crate::error::ModelResult;
use crate::profile::MovePages;
use numaio_sys::{move_pages_to, PageStatus};
use std::time::Instant;

/// Moves every page of a fresh buffer on `from` to `to` and times the calls. On a one-node
/// machine `from == to`: the pages stay, and the time is the call's own per-page cost.
pub fn measure(from: u32, to: u32, bytes: usize) -> ModelResult<MovePages> {
    let buf = NodeBuffer::new(bytes, from, false)?;
    let page = numaio_sys::page_size();
    let pages: Vec<*const u8> = (0..buf.len() / page)
        // SAFETY: the offset stays inside the buffer.
        .map(|k| unsafe { buf.as_ptr().add(k * page) } as *const u8)
        .collect();
    let targets = vec![to; pages.len()];
    let t = Instant::now();
    let st = move_pages_to(0, &pages, &targets, false)?;
    let secs = t.elapsed().as_secs_f64();
    let moved = st
        .iter()
        .filter(|s| **s == PageStatus::Node(to))
        .count()
        .max(1);
    Ok(MovePages {
        us_per_page: secs * 1e6 / moved as f64,
        mb_s: (moved * page) as f64 / secs / 1e6,
        from,
        to,
    })
}
