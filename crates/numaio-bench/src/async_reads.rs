//! The `--api async` driver: each bench thread keeps `--iodepth` reads in flight through
//! `FileHandle::get_async` (copying each result out, like `pread`), with a minimal executor:
//! one waker per in-flight read, which marks its read ready and unparks the thread. No read
//! is polled unless its own completion woke it.

use numaio_engine::{EngineError, FileHandle, GetFuture};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::Thread;
use std::time::Instant;

struct Shared {
    ready: Vec<AtomicBool>,
    any: AtomicBool,
    thread: Thread,
}

struct SlotWaker {
    idx: usize,
    shared: Arc<Shared>,
}

impl Wake for SlotWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.shared.ready[self.idx].store(true, Ordering::Release);
        if !self.shared.any.swap(true, Ordering::AcqRel) {
            self.shared.thread.unpark();
        }
    }
}

/// Reads `bs` bytes at the offsets `next` gives, `depth` at a time, into `buf`, until
/// `deadline`; returns the number of reads completed.
pub(crate) fn run(
    f: &FileHandle,
    depth: usize,
    bs: usize,
    mut next: impl FnMut() -> u64,
    deadline: Instant,
    buf: &mut [u8],
) -> Result<u64, EngineError> {
    let shared = Arc::new(Shared {
        ready: (0..depth).map(|_| AtomicBool::new(true)).collect(),
        any: AtomicBool::new(true),
        thread: std::thread::current(),
    });
    let wakers: Vec<Waker> = (0..depth)
        .map(|idx| {
            Waker::from(Arc::new(SlotWaker {
                idx,
                shared: shared.clone(),
            }))
        })
        .collect();
    let mut reads: Vec<Option<GetFuture<'_>>> =
        (0..depth).map(|_| Some(f.get_async(next(), bs))).collect();
    let mut live = depth;
    let mut n = 0u64;
    while live > 0 {
        if !shared.any.swap(false, Ordering::AcqRel) {
            std::thread::park();
            continue;
        }
        for (i, slot) in reads.iter_mut().enumerate() {
            if !shared.ready[i].swap(false, Ordering::AcqRel) {
                continue;
            }
            let Some(fut) = slot else { continue };
            let Poll::Ready(r) = Pin::new(fut).poll(&mut Context::from_waker(&wakers[i])) else {
                continue;
            };
            let p = r?;
            let mut at = 0;
            for seg in p.segments() {
                buf[at..at + seg.len()].copy_from_slice(seg);
                at += seg.len();
            }
            p.put();
            n += 1;
            if Instant::now() >= deadline {
                *slot = None;
                live -= 1;
            } else {
                *slot = Some(f.get_async(next(), bs));
                shared.ready[i].store(true, Ordering::Release);
                shared.any.store(true, Ordering::Release);
            }
        }
    }
    Ok(n)
}
