//! Bandwidth kernels: every usable CPU of one node streams through its own part of a buffer
//! bound to one memory node, for reads, writes (with and without non-temporal stores),
//! read:write mixes and copy. Bytes are counted as STREAM counts them: bytes read plus bytes
//! written, without the reads that write-allocate adds.

use super::buffer::NodeBuffer;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// One kernel; the names are the JSON keys of `bandwidth_mb_s`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kernel {
    Read,
    Write,
    WriteNt,
    Rw31,
    Rw21,
    Rw11,
    Copy,
}

impl Kernel {
    pub const ALL: [Kernel; 7] = [
        Kernel::Read,
        Kernel::Write,
        Kernel::WriteNt,
        Kernel::Rw31,
        Kernel::Rw21,
        Kernel::Rw11,
        Kernel::Copy,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Kernel::Read => "read",
            Kernel::Write => "write",
            Kernel::WriteNt => "write_nt",
            Kernel::Rw31 => "rw_3_1",
            Kernel::Rw21 => "rw_2_1",
            Kernel::Rw11 => "rw_1_1",
            Kernel::Copy => "copy",
        }
    }

    /// Whether this build can run the kernel (non-temporal stores are x86-64 only here).
    pub fn available(self) -> bool {
        self != Kernel::WriteNt || cfg!(target_arch = "x86_64")
    }
}

/// Sums with four independent accumulators so loads are not serialised by the additions.
pub fn read_pass(s: &[u64]) -> u64 {
    let mut acc = [0u64; 4];
    let mut it = s.chunks_exact(4);
    for c in &mut it {
        acc[0] = acc[0].wrapping_add(c[0]);
        acc[1] = acc[1].wrapping_add(c[1]);
        acc[2] = acc[2].wrapping_add(c[2]);
        acc[3] = acc[3].wrapping_add(c[3]);
    }
    let rest: u64 = it.remainder().iter().fold(0, |a, &x| a.wrapping_add(x));
    acc.iter().fold(rest, |a, &x| a.wrapping_add(x))
}

#[cfg(target_arch = "x86_64")]
fn write_nt_pass(s: &mut [u64], k: u64) {
    use std::arch::x86_64::{__m128i, _mm_set1_epi64x, _mm_sfence, _mm_stream_si128};
    let (head, body, tail) = {
        // SAFETY: reinterpreting u64s as 16-byte vectors; align_to_mut keeps alignment right.
        unsafe { s.align_to_mut::<__m128i>() }
    };
    head.iter_mut().for_each(|x| *x = k);
    tail.iter_mut().for_each(|x| *x = k);
    // SAFETY: SSE2 is part of the x86-64 baseline; every pointer is an aligned element of body.
    unsafe {
        let v = _mm_set1_epi64x(k as i64);
        for x in body.iter_mut() {
            _mm_stream_si128(x as *mut __m128i, v);
        }
        _mm_sfence();
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn write_nt_pass(s: &mut [u64], k: u64) {
    s.iter_mut().for_each(|x| *x = k);
}

/// One pass of `kernel` over `s`; returns the bytes it counts.
pub fn pass(kernel: Kernel, s: &mut [u64], k: u64) -> u64 {
    let b = |n: usize| (n * 8) as u64;
    match kernel {
        Kernel::Read => {
            black_box(read_pass(s));
            b(s.len())
        }
        Kernel::Write => {
            s.iter_mut().for_each(|x| *x = k);
            b(s.len())
        }
        Kernel::WriteNt => {
            write_nt_pass(s, k);
            b(s.len())
        }
        Kernel::Rw31 => {
            let q = s.len() / 4;
            let (a, rest) = s.split_at_mut(q);
            let (bb, rest) = rest.split_at_mut(q);
            let (c, d) = rest.split_at_mut(q);
            for i in 0..q {
                d[i] = a[i].wrapping_add(bb[i]).wrapping_add(c[i]);
            }
            b(4 * q)
        }
        Kernel::Rw21 => {
            let q = s.len() / 3;
            let (a, rest) = s.split_at_mut(q);
            let (bb, c) = rest.split_at_mut(q);
            for i in 0..q {
                c[i] = a[i].wrapping_add(bb[i]);
            }
            b(3 * q)
        }
        Kernel::Rw11 => {
            s.iter_mut().for_each(|x| *x = x.wrapping_add(k));
            b(2 * s.len())
        }
        Kernel::Copy => {
            let q = s.len() / 2;
            let (a, d) = s.split_at_mut(q);
            // Adding a runtime value keeps the compiler from turning this into memcpy, whose
            // large-size path may switch to non-temporal stores.
            for i in 0..q {
                d[i] = a[i].wrapping_add(k);
            }
            b(2 * q)
        }
    }
}

/// Splits `buf` into `n` page-aligned parts as u64 slices' (address, length).
fn parts(buf: &NodeBuffer, n: usize) -> Vec<(usize, usize)> {
    let per = (buf.len() / n) / 4096 * 4096;
    (0..n)
        .map(|k| (buf.as_ptr() as usize + k * per, per / 8))
        .collect()
}

/// Runs `kernel` on every CPU in `cpus`, each on its own part of `buf`, for at least
/// `min_time`; returns the total MB/s.
pub fn run(buf: &NodeBuffer, cpus: &[u32], kernel: Kernel, min_time: Duration) -> f64 {
    let parts = parts(buf, cpus.len());
    let barrier = Barrier::new(cpus.len());
    let k = black_box(0x0101_0101_0101_0101u64);
    let results: Vec<(u64, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .zip(&parts)
            .map(|(&cpu, &(addr, len))| {
                let barrier = &barrier;
                s.spawn(move || {
                    let _ = super::pin::pin_to_cpu(cpu);
                    // SAFETY: each thread gets a disjoint part of the live buffer.
                    let sl = unsafe { std::slice::from_raw_parts_mut(addr as *mut u64, len) };
                    pass(kernel, sl, k); // warm-up: fault TLBs, settle clocks
                    barrier.wait();
                    let t = Instant::now();
                    let mut bytes = 0;
                    while t.elapsed() < min_time {
                        bytes += pass(kernel, sl, k);
                    }
                    (bytes, t.elapsed().as_secs_f64())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| h.join().expect("bandwidth thread panicked"))
            .collect()
    });
    let bytes: u64 = results.iter().map(|r| r.0).sum();
    let secs = results.iter().map(|r| r.1).fold(0.0, f64::max);
    bytes as f64 / secs / 1e6
}

/// A reader that injects `delay` spin iterations after every 4 KiB until `stop`; returns
/// (bytes, seconds). Used to load the memory system at chosen rates.
pub fn loader(addr: usize, len: usize, delay: u32, stop: &AtomicBool) -> (u64, f64) {
    // SAFETY: the caller hands each loader a disjoint part of a live buffer.
    let sl = unsafe { std::slice::from_raw_parts(addr as *const u64, len) };
    let t = Instant::now();
    let mut bytes = 0u64;
    'outer: loop {
        for c in sl.chunks(512) {
            black_box(read_pass(c));
            bytes += 4096;
            for _ in 0..delay {
                black_box(());
                std::hint::spin_loop();
            }
            if bytes.is_multiple_of(1 << 20) && stop.load(Ordering::Relaxed) {
                break 'outer;
            }
        }
    }
    (bytes, t.elapsed().as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_do_what_they_say() {
        let mut v: Vec<u64> = (0..48).collect();
        assert_eq!(read_pass(&v), (0..48).sum::<u64>());
        assert_eq!(pass(Kernel::Rw31, &mut v, 0), 48 * 8);
        assert_eq!(v[36], 36); // d[0] = a[0] + b[0] + c[0] = 0 + 12 + 24
        let mut v = vec![0u64; 40];
        pass(Kernel::WriteNt, &mut v, 7);
        assert!(v.iter().all(|&x| x == 7));
        pass(Kernel::Rw11, &mut v, 1);
        assert!(v.iter().all(|&x| x == 8));
        let mut v: Vec<u64> = (0..10).collect();
        assert_eq!(pass(Kernel::Copy, &mut v, 0), 80);
        assert_eq!(&v[5..], &[0, 1, 2, 3, 4]);
    }
}
