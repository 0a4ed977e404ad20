//! The probe on this host, checked against measurements written separately here: a plain
//! random pointer chase for latency and STREAM-style add and scale kernels for bandwidth.
//! Timing on a shared machine is noisy, so each comparison uses medians of repeats and, when
//! the two disagree, measures again (at most three rounds) before asserting.

use numaio_model::probe::bandwidth::{self, Kernel};
use numaio_model::probe::buffer::NodeBuffer;
use numaio_model::probe::{latency, pin, probe, stats, ProbeOptions};
use numaio_sys::Topology;
use numaio_testkit::{needs, skip};
use std::hint::black_box;
use std::time::{Duration, Instant};

/// The node this thread runs on and its usable CPUs.
fn here() -> (u32, Vec<u32>) {
    let topo = Topology::detect().unwrap();
    let node = numaio_sys::getcpu().unwrap().node;
    let cpus = pin::usable(&topo.node(node).unwrap().cpus).unwrap();
    (node, cpus)
}

/// An anonymous mapping with transparent huge pages asked for, written once.
struct Mapping(*mut u8, usize);

impl Mapping {
    fn new(len: usize) -> Mapping {
        // SAFETY: a fresh private anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: advice on our own mapping; write_bytes stays inside it.
        unsafe {
            libc::madvise(p, len, libc::MADV_HUGEPAGE);
            std::ptr::write_bytes(p as *mut u8, 1, len);
        }
        Mapping(p as *mut u8, len)
    }
    fn words(&self) -> &mut [u64] {
        // SAFETY: the mapping is live, u64-aligned and used by one test thread at a time.
        unsafe { std::slice::from_raw_parts_mut(self.0 as *mut u64, self.1 / 8) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping created in new().
        unsafe { libc::munmap(self.0 as *mut libc::c_void, self.1) };
    }
}

/// ns per load of a single random cycle (Sattolo's algorithm) over 128-byte slots.
fn independent_chase(len: usize, loads: usize) -> f64 {
    let m = Mapping::new(len);
    let w = m.words();
    let slots = len / 128;
    let mut perm: Vec<usize> = (0..slots).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..slots).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let j = (x % i as u64) as usize;
        perm.swap(i, j);
    }
    for (i, &n) in perm.iter().enumerate() {
        w[i * 16] = n as u64;
    }
    let mut idx = 0usize;
    for _ in 0..loads / 4 {
        idx = w[idx * 16] as usize;
    }
    let t = Instant::now();
    for _ in 0..loads {
        idx = w[idx * 16] as usize;
    }
    black_box(idx);
    t.elapsed().as_nanos() as f64 / loads as f64
}

fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() / b <= 0.15
}

#[test]
fn local_latency_agrees_with_an_independent_chase_and_with_itself() {
    let (node, cpus) = here();
    if cpus.is_empty() {
        skip!(needs::TWO_CPUS, "no usable CPU on node {node}");
    }
    let len = (4 * numaio_model::probe::last_level_cache()).max(128 << 20);
    let buf = NodeBuffer::new(len, node, true).unwrap();
    let mut last = (0.0, 0.0, 0.0);
    for round in 0..3 {
        let probe1 = stats::median(&latency::measure(&buf, cpus[0], 1_000_000, 5));
        let probe2 = stats::median(&latency::measure(&buf, cpus[0], 1_000_000, 5));
        let cpu = cpus[0];
        let mine = std::thread::spawn(move || {
            pin::pin_to_cpu(cpu).unwrap();
            let s: Vec<f64> = (0..3).map(|_| independent_chase(len, 1_000_000)).collect();
            stats::median(&s)
        })
        .join()
        .unwrap();
        eprintln!(
            "latency round {round}: probe {probe1:.1} / {probe2:.1} ns, independent {mine:.1} ns"
        );
        last = (probe1, probe2, mine);
        if agree(probe1, mine) && agree(probe2, probe1) {
            break;
        }
    }
    let (p1, p2, mine) = last;
    assert!(agree(p1, mine), "probe {p1:.1} ns vs independent chase {mine:.1} ns");
    assert!(agree(p2, p1), "repeated probe runs disagree: {p1:.1} vs {p2:.1} ns");
    // A chase that misses the caches takes far longer than a cache hit.
    assert!(p1 > 20.0, "latency {p1} ns is a cache hit, not memory");
}

/// STREAM "add" (c = a + b) and "scale" (b = q·a) on f64 arrays, one part per CPU; MB/s
/// counted as STREAM counts them.
fn stream(cpus: &[u32], len: usize, time: Duration, add: bool) -> f64 {
    let per = len / cpus.len() / 4096 * 4096;
    let results: Vec<(f64, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                s.spawn(move || {
                    pin::pin_to_cpu(cpu).unwrap();
                    let n = per / 8 / 3;
                    let mut a = vec![1.0f64; n];
                    let mut b = vec![2.0f64; n];
                    let mut c = vec![0.0f64; n];
                    let q = black_box(3.0);
                    let mut bytes = 0.0;
                    let t = Instant::now();
                    while t.elapsed() < time {
                        if add {
                            for i in 0..n {
                                c[i] = a[i] + b[i];
                            }
                            bytes += 24.0 * n as f64;
                        } else {
                            for i in 0..n {
                                b[i] = q * a[i];
                            }
                            bytes += 16.0 * n as f64;
                        }
                        black_box((&mut a, &mut b, &mut c));
                    }
                    (bytes, t.elapsed().as_secs_f64())
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let bytes: f64 = results.iter().map(|r| r.0).sum();
    let secs = results.iter().map(|r| r.1).fold(0.0, f64::max);
    bytes / secs / 1e6
}

#[test]
fn local_bandwidth_agrees_with_stream_kernels() {
    let (node, cpus) = here();
    if cpus.is_empty() {
        skip!(needs::TWO_CPUS, "no usable CPU on node {node}");
    }
    let len = (8 * numaio_model::probe::last_level_cache()).max(256 << 20);
    let buf = NodeBuffer::new(len, node, true).unwrap();
    let time = Duration::from_millis(150);
    for (kernel, add) in [(Kernel::Rw21, true), (Kernel::Copy, false)] {
        let mut last = (0.0, 0.0);
        for round in 0..3 {
            let p: Vec<f64> = (0..3)
                .map(|_| bandwidth::run(&buf, &cpus, kernel, time))
                .collect();
            let s: Vec<f64> = (0..3).map(|_| stream(&cpus, len, time, add)).collect();
            let (p, s) = (stats::median(&p), stats::median(&s));
            eprintln!(
                "bandwidth {} round {round}: probe {p:.0} MB/s, STREAM {} {s:.0} MB/s",
                kernel.name(),
                if add { "add" } else { "scale" }
            );
            last = (p, s);
            if agree(p, s) {
                break;
            }
        }
        assert!(
            agree(last.0, last.1),
            "{}: probe {:.0} MB/s vs STREAM {:.0} MB/s",
            kernel.name(),
            last.0,
            last.1
        );
    }
}

#[test]
fn quick_probe_gives_a_complete_profile_in_the_documented_format() {
    let topo = Topology::detect().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let opts = ProbeOptions {
        quick: true,
        dir: dir.path().to_path_buf(),
        ..ProbeOptions::default()
    };
    let t = Instant::now();
    let mut steps = 0;
    let p = probe(&topo, &opts, &mut |_, done, total| {
        assert!(done <= total);
        steps = done;
    })
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    eprintln!("probe --quick: {secs:.1} s, {steps} steps; notes: {:?}", p.notes);
    // Under 10 s on an idle 2-core machine; the bound leaves room for a busy one.
    assert!(secs < 30.0, "quick probe took {secs:.1} s");
    assert!(steps > 0);
    assert_eq!(p.nodes, topo.node_ids());
    let v = serde_json::to_value(&p).unwrap();
    let n = p.nodes.len();
    let lat = v["latency_ns"].as_array().unwrap();
    assert_eq!(lat.len(), n);
    for (i, node) in topo.nodes.iter().enumerate() {
        if node.has_cpus() {
            assert!(lat[i][i].as_f64().unwrap() > 0.0);
        } else {
            assert!(lat[i].as_array().unwrap().iter().all(|x| x.is_null()));
        }
    }
    for k in [
        "read", "write", "write_nt", "rw_3_1", "rw_2_1", "rw_1_1", "copy",
    ] {
        let m = v["bandwidth_mb_s"][k].as_array().unwrap_or_else(|| panic!("{k}"));
        assert_eq!(m.len(), n);
    }
    for k in ["distance", "latency_ns", "bandwidth_mb_s"] {
        assert!(v["advertised"].get(k).is_some(), "advertised.{k}");
    }
    assert!(v["loaded_latency"].is_array());
    assert!(v["spread"]["latency"].as_f64().unwrap() >= 0.0);
    if topo.nodes.iter().filter(|n| n.has_cpus()).map(|n| n.cpus.len()).sum::<usize>() >= 2 {
        assert!(!p.loaded_latency.is_empty(), "{:?}", p.notes);
    }
    assert!(p.pagecache_read_mb_s.is_some(), "{:?}", p.notes);
    assert!(p.move_pages.is_some(), "{:?}", p.notes);
    // The saved file reads back as the same profile (floats to within parsing rounding).
    let f = dir.path().join("p.json");
    p.save(&f).unwrap();
    let back = numaio_model::Profile::load(&f).unwrap();
    assert_eq!(back.nodes, p.nodes);
    assert_eq!(back.cpus_per_node, p.cpus_per_node);
    let (a, b) = (back.latency(0, 0), p.latency(0, 0));
    assert!((a.unwrap_or(0.0) - b.unwrap_or(0.0)).abs() <= 1e-9 * b.unwrap_or(1.0));
}
