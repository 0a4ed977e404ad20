//! Idle latency: one thread follows a chain of dependent pointers through a buffer much larger
//! than the last-level cache, so every load waits for the previous one to come from memory.
//!
//! The chain visits 2 MiB regions in random order and, within each region, its 128-byte slots
//! in random order (one pointer per 128 bytes, so the adjacent-line prefetcher never fetches a
//! slot the chain will visit). Regions of 2 MiB, not 4 KiB pages: prefetchers that fetch the
//! rest of a 4 KiB page after a few misses made a page-by-page chase report a third of the
//! latency on an AMD EPYC, while 512 pages of a region still fit the second-level TLB (and one
//! huge page holds a whole region).

use super::buffer::NodeBuffer;
use super::stats::Rng;

/// Distance between two chain elements.
pub const SLOT: usize = 128;

/// The chain finishes one region before it moves to another (random) one.
pub const REGION: usize = 2 << 20;

/// Links every slot of `buf` into one cycle and returns its first element.
pub fn build_chase(buf: &NodeBuffer, seed: u64) -> *const u8 {
    let page = REGION;
    let pages = buf.len() / page;
    let per_page = page / SLOT;
    let mut rng = Rng::new(seed);
    let mut order: Vec<usize> = (0..pages).collect();
    rng.shuffle(&mut order);
    let mut slots: Vec<usize> = (0..per_page).collect();
    let base = buf.as_ptr();
    let mut first: *mut u8 = std::ptr::null_mut();
    let mut prev: *mut u8 = std::ptr::null_mut();
    for &pg in &order {
        rng.shuffle(&mut slots);
        for &s in &slots {
            // SAFETY: pg < pages and s < per_page keep the address inside the buffer (whose
            // length is a multiple of 2 MiB).
            let cur = unsafe { base.add(pg * page + s * SLOT) };
            if prev.is_null() {
                first = cur;
            } else {
                // SAFETY: prev is a slot of the buffer, aligned for a pointer (SLOT-aligned).
                unsafe { (prev as *mut *mut u8).write(cur) };
            }
            prev = cur;
        }
    }
    // SAFETY: as above; closes the cycle.
    unsafe { (prev as *mut *mut u8).write(first) };
    first
}

/// CPU time of the calling thread in ns. Loads are timed with it, not the wall clock, so on
/// a busy machine the time the thread waits for a CPU does not count as memory latency.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec for the call to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Follows the chain for `steps` loads and returns ns per load (thread CPU time).
///
/// # Safety
/// `start` must be an element of a cycle built by [`build_chase`] whose buffer is alive.
pub unsafe fn chase(start: *const u8, steps: u64) -> f64 {
    let mut p = start as *const *const u8;
    let t = thread_cpu_ns();
    let mut left = steps;
    while left >= 8 {
        // SAFETY: the caller guarantees every element points at the next one.
        unsafe {
            for _ in 0..8 {
                p = *p as *const *const u8;
            }
        }
        left -= 8;
    }
    std::hint::black_box(p);
    thread_cpu_ns().saturating_sub(t) as f64 / (steps - left).max(1) as f64
}

/// Median-ready samples: `repeats` timings of `steps` loads by a thread pinned to `cpu`,
/// after one warm-up pass.
pub fn measure(buf: &NodeBuffer, cpu: u32, steps: u64, repeats: usize) -> Vec<f64> {
    let start = build_chase(buf, 0x5eed ^ u64::from(buf.node)) as usize;
    std::thread::scope(|s| {
        s.spawn(|| {
            let _ = super::pin::pin_to_cpu(cpu);
            // SAFETY: start is an element of the cycle just built in the live `buf`.
            unsafe {
                chase(start as *const u8, steps / 4);
                (0..repeats)
                    .map(|_| chase(start as *const u8, steps))
                    .collect()
            }
        })
        .join()
        .expect("latency thread panicked")
    })
}
