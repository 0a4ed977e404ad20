//! Loaded latency (MLC's delay sweep): one thread chases pointers while every other usable CPU
//! reads at a rate set by a delay injected after each 4 KiB.

use super::bandwidth::loader;
use super::buffer::NodeBuffer;
use super::latency::{build_chase, chase};
use crate::profile::LoadedPoint;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One point per delay: the loaders' total MB/s and the chaser's ns per load. `chase_buf` and
/// `load_buf` should sit on the node under test; `chaser` is the CPU of the chasing thread.
pub fn sweep(
    chase_buf: &NodeBuffer,
    load_buf: &NodeBuffer,
    chaser: u32,
    loaders: &[u32],
    delays: &[u32],
    time: Duration,
) -> Vec<LoadedPoint> {
    let start = build_chase(chase_buf, 0x10ad) as usize;
    let per = if loaders.is_empty() {
        0
    } else {
        (load_buf.len() / loaders.len()) / 4096 * 4096
    };
    let mut out = Vec::new();
    for &delay in delays {
        let stop = AtomicBool::new(false);
        let (lat, load) = std::thread::scope(|s| {
            let hs: Vec<_> = loaders
                .iter()
                .enumerate()
                .map(|(k, &cpu)| {
                    let stop = &stop;
                    let addr = load_buf.as_ptr() as usize + k * per;
                    s.spawn(move || {
                        let _ = super::pin::pin_to_cpu(cpu);
                        loader(addr, per / 8, delay, stop)
                    })
                })
                .collect();
            let c = s.spawn(|| {
                let _ = super::pin::pin_to_cpu(chaser);
                let t = std::time::Instant::now();
                let mut samples = Vec::new();
                while t.elapsed() < time {
                    // SAFETY: start is an element of the cycle built in the live chase_buf.
                    samples.push(unsafe { chase(start as *const u8, 100_000) });
                }
                super::stats::median(&samples)
            });
            let lat = c.join().expect("chaser panicked");
            stop.store(true, Ordering::Relaxed);
            let load: f64 = hs
                .into_iter()
                .map(|h| {
                    let (b, secs) = h.join().expect("loader panicked");
                    b as f64 / secs / 1e6
                })
                .sum();
            (lat, load)
        });
        out.push(LoadedPoint {
            bandwidth_mb_s: load,
            latency_ns: lat,
        });
    }
    out
}
