//! The probe on this host, checked against measurements written separately here: a plain
//! random pointer chase for latency and STREAM-style add and scale kernels for bandwidth.
//! Timing on a shared machine is noisy, so each comparison uses medians of repeats and, when
//! the two disagree, measures again (at most five rounds) before asserting.

use numaio_model::probe::bandwidth::{self, Kernel};
use numaio_model::probe::buffer::NodeBuffer;
use numaio_model::probe::{latency, pin, probe, stats, ProbeOptions};
use numaio_sys::Topology;
use numaio_testkit::{needs, skip};
use std::hint::black_box;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The tests time memory; run in parallel they would measure each other.
static TIMING: Mutex<()> = Mutex::new(());

fn timing() -> std::sync::MutexGuard<'static, ()> {
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

/// The node this thread runs on and its usable CPUs.
fn here() -> (u32, Vec<u32>) {
    let topo = Topology::detect().unwrap();
    let node = numaio_sys::getcpu().unwrap().node;
    let cpus = pin::usable(&topo.node(node).unwrap().cpus).unwrap();
    (node, cpus)
}

/// An anonymous mapping with transparent huge pages asked for, written once.
struct Mapping(numaio_sys::NodeBuffer);

impl Mapping {
    fn new(len: usize) -> Mapping {
        let mut b = numaio_sys::NodeBuffer::anonymous(len).expect("mapping the test buffer");
        b.advise_huge();
        b.as_mut_slice().fill(1);
        Mapping(b)
    }
    fn words(&mut self) -> &mut [u64] {
        let b = self.0.as_mut_slice();
        // SAFETY: the mapping is page-aligned, so u64-aligned; `&mut self` makes the borrow
        // unique.
        unsafe { std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut u64, b.len() / 8) }
    }
}

/// ns per load of a chase with the probe's definition of latency, written separately: 2 MiB
/// blocks in random order, and inside each block its 16384 slots of 128 bytes in random order.
fn independent_chase(len: usize, loads: usize) -> f64 {
    let mut m = Mapping::new(len);
    let w = m.words();
    const PER: usize = (2 << 20) / 128;
    let blocks = len / (2 << 20);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move |n: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % n as u64) as usize
    };
    let mut block_order: Vec<usize> = (0..blocks).collect();
    for i in (1..blocks).rev() {
        block_order.swap(i, rnd(i + 1));
    }
    // The whole visit order as word indices, then each element points at the next.
    let mut order: Vec<usize> = Vec::with_capacity(blocks * PER);
    let mut slots: Vec<usize> = (0..PER).collect();
    for &b in &block_order {
        for i in (1..PER).rev() {
            slots.swap(i, rnd(i + 1));
        }
        // Word index of slot k of block b: 2 MiB = 262144 words, 128 B = 16 words.
        order.extend(slots.iter().map(|&k| b * 262_144 + k * 16));
    }
    for k in 0..order.len() {
        w[order[k]] = order[(k + 1) % order.len()] as u64;
    }
    let mut idx = order[0];
    for _ in 0..loads / 4 {
        idx = w[idx] as usize;
    }
    // Per-thread CPU time, so waiting for a CPU on a busy machine is not counted.
    let cpu_ns = || {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: ts is a valid timespec for the call to fill.
        unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        ts.tv_sec as f64 * 1e9 + ts.tv_nsec as f64
    };
    let t = cpu_ns();
    for _ in 0..loads {
        idx = w[idx] as usize;
    }
    black_box(idx);
    (cpu_ns() - t) / loads as f64
}

fn agree(a: f64, b: f64) -> bool {
    (a - b).abs() / b <= 0.15
}

#[test]
fn local_latency_agrees_with_an_independent_chase_and_with_itself() {
    let _serial = timing();
    let (node, cpus) = here();
    if cpus.is_empty() {
        skip!(needs::TWO_CPUS, "no usable CPU on node {node}");
    }
    let len = (4 * numaio_model::probe::last_level_cache()).max(128 << 20);
    let buf = NodeBuffer::new(len, node, true).unwrap();
    let mut last = (0.0, 0.0, 0.0);
    for round in 0..5 {
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
    assert!(
        agree(p1, mine),
        "probe {p1:.1} ns vs independent chase {mine:.1} ns"
    );
    assert!(
        agree(p2, p1),
        "repeated probe runs disagree: {p1:.1} vs {p2:.1} ns"
    );
    // A chase that misses the caches takes far longer than a cache hit.
    assert!(p1 > 20.0, "latency {p1} ns is a cache hit, not memory");
}

/// STREAM "add" (c = a + b) and "scale" (b = q·a) on f64 arrays, one part per CPU; MB/s
/// counted as STREAM counts them.
fn stream(cpus: &[u32], len: usize, time: Duration, add: bool) -> f64 {
    let per = len / cpus.len() / 4096 * 4096;
    let start = std::sync::Barrier::new(cpus.len());
    let results: Vec<(f64, f64)> = std::thread::scope(|s| {
        let hs: Vec<_> = cpus
            .iter()
            .map(|&cpu| {
                let start = &start;
                s.spawn(move || {
                    pin::pin_to_cpu(cpu).unwrap();
                    let n = per / 8 / 3;
                    // Huge pages where the kernel gives them, as the probe's buffers have: in
                    // a virtual machine 4 KiB pages cost a nested page walk every 4 KiB.
                    let mut m = Mapping::new(n * 3 * 8);
                    let (a, rest) = m.words().split_at_mut(n);
                    let (b, c) = rest.split_at_mut(n);
                    let (a, b, c): (&mut [f64], &mut [f64], &mut [f64]) = unsafe {
                        // SAFETY: u64 and f64 have the same size and alignment; every bit
                        // pattern is a valid f64.
                        (
                            std::slice::from_raw_parts_mut(a.as_mut_ptr() as *mut f64, n),
                            std::slice::from_raw_parts_mut(b.as_mut_ptr() as *mut f64, n),
                            std::slice::from_raw_parts_mut(c.as_mut_ptr() as *mut f64, n),
                        )
                    };
                    a.fill(1.0);
                    b.fill(2.0);
                    c.fill(0.5);
                    let q = black_box(3.0);
                    let mut pass = || {
                        if add {
                            for i in 0..n {
                                c[i] = a[i] + b[i];
                            }
                            black_box(&mut *c);
                            24.0 * n as f64
                        } else {
                            for i in 0..n {
                                b[i] = q * a[i];
                            }
                            black_box(&mut *b);
                            16.0 * n as f64
                        }
                    };
                    pass(); // untimed, as the probe's first pass
                    start.wait(); // all threads stream at once
                    let mut bytes = 0.0;
                    let t = Instant::now();
                    while t.elapsed() < time {
                        bytes += pass();
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
    let _serial = timing();
    let (node, cpus) = here();
    if cpus.is_empty() {
        skip!(needs::TWO_CPUS, "no usable CPU on node {node}");
    }
    let len = (8 * numaio_model::probe::last_level_cache()).max(256 << 20);
    let buf = NodeBuffer::new(len, node, true).unwrap();
    let time = Duration::from_millis(150);
    for (kernel, add) in [(Kernel::Rw21, true), (Kernel::Copy, false)] {
        // Back-to-back runs, so a change in the machine's load hits both sides alike. On a
        // busy machine other tasks steal CPU time from some runs; as STREAM does, the best
        // run of each side is compared, since it is the least disturbed.
        let mut last = (0.0, 0.0, 0.0);
        for round in 0..5 {
            let mut ratios = Vec::new();
            let (mut ps, mut ss) = (Vec::new(), Vec::new());
            for _ in 0..5 {
                let p = bandwidth::run(&buf, &cpus, kernel, time);
                let s = stream(&cpus, len, time, add);
                ratios.push(p / s);
                ps.push(p);
                ss.push(s);
            }
            let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
            let (p, s) = (best(&ps), best(&ss));
            let r = p / s;
            eprintln!("  pair ratios {ratios:.2?}");
            eprintln!(
                "bandwidth {} round {round}: probe {p:.0} MB/s, STREAM {} {s:.0} MB/s (best of 5 each), ratio {r:.3}",
                kernel.name(),
                if add { "add" } else { "scale" }
            );
            last = (r, p, s);
            if (r - 1.0).abs() <= 0.15 {
                break;
            }
        }
        let (r, p, s) = last;
        assert!(
            (r - 1.0).abs() <= 0.15,
            "{}: probe {p:.0} MB/s vs STREAM {s:.0} MB/s (ratio of the best runs {r:.3})",
            kernel.name()
        );
    }
}

#[test]
fn quick_probe_gives_a_complete_profile_in_the_documented_format() {
    let _serial = timing();
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
    eprintln!(
        "probe --quick: {secs:.1} s, {steps} steps; notes: {:?}",
        p.notes
    );
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
        let m = v["bandwidth_mb_s"][k]
            .as_array()
            .unwrap_or_else(|| panic!("{k}"));
        assert_eq!(m.len(), n);
    }
    for k in ["distance", "latency_ns", "bandwidth_mb_s"] {
        assert!(v["advertised"].get(k).is_some(), "advertised.{k}");
    }
    assert!(v["loaded_latency"].is_array());
    assert!(v["spread"]["latency"].as_f64().unwrap() >= 0.0);
    if topo
        .nodes
        .iter()
        .filter(|n| n.has_cpus())
        .map(|n| n.cpus.len())
        .sum::<usize>()
        >= 2
    {
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
